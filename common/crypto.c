/* crypto.c - hashing, MACs, encodings, randomness (see crypto.h). */
#include "crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "err.h"

int sha256(const void *data, size_t n, uint8_t out[SHA256_LEN])
{
    unsigned int len = 0;
    return EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) == 1 ? 0 : ERR_CRYPTO;
}

struct sha256_ctx {
    EVP_MD_CTX *md;
};

struct sha256_ctx *sha256_new(void)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md)
        return NULL;
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    struct sha256_ctx *c = OPENSSL_malloc(sizeof *c);
    if (!c) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    c->md = md;
    return c;
}

int sha256_update(struct sha256_ctx *c, const void *data, size_t n)
{
    return EVP_DigestUpdate(c->md, data, n) == 1 ? 0 : ERR_CRYPTO;
}

int sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN])
{
    unsigned int len = 0;
    int rc = EVP_DigestFinal_ex(c->md, out, &len) == 1 ? 0 : ERR_CRYPTO;
    sha256_free(c);
    return rc;
}

void sha256_free(struct sha256_ctx *c)
{
    if (!c)
        return;
    EVP_MD_CTX_free(c->md);
    OPENSSL_free(c);
}

int hmac_sha256(const void *key, size_t key_len, const void *data, size_t n,
                uint8_t out[SHA256_LEN])
{
    unsigned int len = 0;
    static const uint8_t empty = 0;
    if (key_len > (size_t)INT32_MAX)
        return ERR_INVAL;
    const void *k = key_len ? key : &empty;
    return HMAC(EVP_sha256(), k, (int)key_len, data, n, out, &len) ? 0 : ERR_CRYPTO;
}

int crypto_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

char *hex_encode(const void *data, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * n] = '\0';
    return out;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode(const void *data, size_t n, char *out)
{
    const uint8_t *p = data;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = b64_alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int base64_decode(const char *s, size_t len, uint8_t *out, size_t out_cap, size_t *out_len)
{
    if (len % 4)
        return ERR_PARSE;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = s[i + j];
            if (c == '=' && last && j >= 2) {
                v[j] = 0;
                pad++;
            } else {
                if (pad) /* data after padding */
                    return ERR_PARSE;
                v[j] = b64_value(c);
                if (v[j] < 0)
                    return ERR_PARSE;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        size_t nbytes = 3 - (size_t)pad;
        /* non-canonical: bits below the last real byte must be zero */
        if ((pad == 1 && (w & 0xff)) || (pad == 2 && (w & 0xffff)))
            return ERR_PARSE;
        if (out_cap - o < nbytes)
            return ERR_TOOBIG;
        out[o++] = (uint8_t)(w >> 16);
        if (nbytes > 1)
            out[o++] = (uint8_t)(w >> 8);
        if (nbytes > 2)
            out[o++] = (uint8_t)w;
    }
    *out_len = o;
    return 0;
}

int crypto_random(void *out, size_t n)
{
    if (n > (size_t)INT32_MAX)
        return ERR_INVAL;
    return RAND_bytes(out, (int)n) == 1 ? 0 : ERR_CRYPTO;
}
