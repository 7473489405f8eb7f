/*
 * utf8.c - one UTF-8 character in and out, hex digits, Python whitespace
 * (see utf8.h).
 */
#include "common/utf8.h"

size_t utf8_encode(uint32_t c, char out[4])
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

uint32_t utf8_decode(const unsigned char *s, size_t n)
{
    if (n == 1)
        return s[0];
    if (n == 2)
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    if (n == 3)
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t utf8_py_space(const unsigned char *s, size_t len)
{
    unsigned c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F))
        return 1;
    if (len >= 2 && c == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (len >= 3 && c == 0xE1 && s[1] == 0x9A && s[2] == 0x80)
        return 3; /* U+1680 */
    if (len >= 3 && c == 0xE2 && s[1] == 0x80 &&
        (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return 3; /* U+2000-200A, 2028, 2029, 202F */
    if (len >= 3 && c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F)
        return 3; /* U+205F */
    if (len >= 3 && c == 0xE3 && s[1] == 0x80 && s[2] == 0x80)
        return 3; /* U+3000 */
    return 0;
}

void utf8_py_strip(const char **b, size_t *len, int which)
{
    const unsigned char *s = (const unsigned char *)*b;
    size_t n = *len, i = 0, l;
    if (which & UTF8_STRIP_LEFT)
        while (i < n && (l = utf8_py_space(s + i, n - i)) != 0)
            i += l;
    size_t end = n;
    if (which & UTF8_STRIP_RIGHT)
        while (end > i) {
            size_t k = end - 1; /* the start of the last code point */
            while (k > i && (s[k] & 0xC0) == 0x80)
                k--;
            if (utf8_py_space(s + k, end - k) != end - k)
                break;
            end = k;
        }
    *b = (const char *)s + i;
    *len = end - i;
}
