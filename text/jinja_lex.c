/*
 * jinja_lex.c - the Jinja lexer (see jinja.h, jinja_int.h): source text to
 * tokens, as jinja2.lexer does it with trim_blocks, lstrip_blocks and
 * keep_trailing_newline off: data / {{ }} / {% %} / {# #}, the
 * whitespace-control signs `-` and `+`, {% raw %}, and end tags recognised
 * only while ( [ { are balanced. Tokens go to a heap vector; their strings
 * to the template's arena.
 */
#include "text/jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/utf8.h"

struct lexer {
    const char *src;
    size_t len, pos;
    int line;
    struct arena *a;
    struct token *v;
    size_t n, cap;
    char *err;
    size_t errcap;
    int rc;
};

/* The first error of a lexer, parser or render wins: set *rc to code and
 * write "line N: <message>" into err (errcap bytes, may be 0). Returns -1,
 * the callers' failure value. */
int jl_set_fail(int *rc, int code, char *err, size_t errcap, int line, const char *fmt, va_list ap)
{
    if (*rc == 0) {
        *rc = code;
        if (err && errcap) {
            int k = snprintf(err, errcap, "line %d: ", line);
            if (k >= 0 && (size_t)k < errcap)
                vsnprintf(err + k, errcap - (size_t)k, fmt, ap);
        }
    }
    return -1;
}

static int lex_fail(struct lexer *L, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jl_set_fail(&L->rc, ERR_PARSE, L->err, L->errcap, line, fmt, ap);
    va_end(ap);
    return -1;
}

static struct token *lex_push(struct lexer *L, uint8_t k, int line)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct token *nv = realloc(L->v, cap * sizeof *nv);
        if (!nv) {
            L->rc = ERR_NOMEM;
            return NULL;
        }
        L->v = nv;
        L->cap = cap;
    }
    struct token *t = &L->v[L->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    return t;
}

static void count_lines(struct lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (L->src[i] == '\n')
            L->line++;
}

/* Data text with \r\n and \r turned into \n (jinja2's newline_sequence). */
static int lex_data(struct lexer *L, const char *s, size_t n, int line)
{
    if (n == 0)
        return 0;
    struct jstr *j = jar_alloc(L->a, sizeof *j + n + 1);
    if (!j) {
        L->rc = ERR_NOMEM;
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            j->p[k++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n')
                i++;
        } else {
            j->p[k++] = s[i];
        }
    }
    j->n = k;
    j->p[k] = '\0';
    struct token *t = lex_push(L, TK_DATA, line);
    if (!t)
        return -1;
    t->s = j;
    return 0;
}

/* One backslash escape of a string literal: s[*p] is the character after the
 * backslash; writes its bytes at o + *k and leaves *p on its last byte. */
static int lex_escape(struct lexer *L, const char *s, size_t n, size_t *p, char *o, size_t *k,
                      int line)
{
    char e = s[*p];
    uint32_t cp = 0;
    int digits = 0;
    switch (e) {
    case 'n': o[(*k)++] = '\n'; break;
    case 't': o[(*k)++] = '\t'; break;
    case 'r': o[(*k)++] = '\r'; break;
    case '\\': o[(*k)++] = '\\'; break;
    case '\'': o[(*k)++] = '\''; break;
    case '"': o[(*k)++] = '"'; break;
    case 'a': o[(*k)++] = '\a'; break;
    case 'b': o[(*k)++] = '\b'; break;
    case 'f': o[(*k)++] = '\f'; break;
    case 'v': o[(*k)++] = '\v'; break;
    case '\n': break;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if (e >= '0' && e <= '7') {
            int m = 0;
            while (m < 3 && *p < n && s[*p] >= '0' && s[*p] <= '7')
                cp = cp * 8 + (uint32_t)(s[(*p)++] - '0'), m++;
            (*p)--;
            *k += utf8_encode(cp, o + *k);
        } else {
            o[(*k)++] = '\\';
            o[(*k)++] = e;
        }
    }
    if (digits) {
        for (int d = 0; d < digits; d++) {
            int h = *p + 1 < n ? hex_digit(s[*p + 1]) : -1;
            if (h < 0)
                return lex_fail(L, line, "truncated \\%c escape in string", e);
            cp = cp * 16 + (uint32_t)h;
            (*p)++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return lex_fail(L, line, "invalid escape in string");
        *k += utf8_encode(cp, o + *k);
    }
    return 0;
}

/* A string literal body with Python's unicode-escape rules. */
static int lex_string(struct lexer *L, char q, int line)
{
    size_t i = L->pos + 1, start = i;
    while (i < L->len && L->src[i] != q) {
        if (L->src[i] == '\\')
            i++;
        i++;
    }
    if (i >= L->len)
        return lex_fail(L, line, "unterminated string");
    size_t n = i - start;
    struct jstr *j = jar_alloc(L->a, sizeof *j + n + 1);
    if (!j) {
        L->rc = ERR_NOMEM;
        return -1;
    }
    const char *s = L->src + start;
    size_t k = 0;
    for (size_t p = 0; p < n; p++) {
        char c = s[p];
        if (c == '\r') {
            j->p[k++] = '\n';
            if (p + 1 < n && s[p + 1] == '\n')
                p++;
            continue;
        }
        if (c != '\\' || p + 1 >= n) {
            j->p[k++] = c;
            continue;
        }
        ++p;
        if (lex_escape(L, s, n, &p, j->p, &k, line))
            return -1;
    }
    j->n = k;
    j->p[k] = '\0';
    struct token *t = lex_push(L, TK_STR, line);
    if (!t)
        return -1;
    t->s = j;
    count_lines(L, L->pos, i + 1);
    L->pos = i + 1;
    return 0;
}

/* After `-`: skip the whitespace that follows (newlines counted). */
static void skip_space(struct lexer *L)
{
    while (L->pos < L->len) {
        size_t l = utf8_py_space((const unsigned char *)L->src + L->pos, L->len - L->pos);
        if (!l)
            break;
        if (L->src[L->pos] == '\n')
            L->line++;
        L->pos += l;
    }
}

/* At p inside a tag at bracket depth 0: 1 if an end tag (`}}`, `%}`, with a
 * `-` or, for blocks, `+` sign) starts there, consumed with the whitespace
 * control after it; 0 if not; -1 on failure. */
static int lex_tag_end(struct lexer *L, const char *p, size_t left, int block)
{
    char c1 = block ? '%' : '}';
    int sign = (p[0] == '-' || (block && p[0] == '+')) ? 1 : 0;
    if (!(left >= (size_t)sign + 2 && p[sign] == c1 && p[sign + 1] == '}'))
        return 0;
    L->pos += (size_t)sign + 2;
    if (!lex_push(L, block ? TK_BEND : TK_VEND, L->line))
        return -1;
    if (p[0] == '-') {
        skip_space(L);
    } else if (block && !sign && L->pos < L->len && L->src[L->pos] == '\n') {
        L->pos++;
        L->line++;
    }
    return 1;
}

static int lex_name(struct lexer *L, const char *p, size_t left, int line)
{
    size_t n = 1;
    while (n < left && (isname0(p[n]) || isdigit_(p[n])))
        n++;
    struct token *t = lex_push(L, TK_NAME, line);
    if (!t || !(t->s = jar_str(L->a, p, n))) {
        L->rc = L->rc ? L->rc : ERR_NOMEM;
        return -1;
    }
    L->pos += n;
    return 0;
}

/* An int or float literal, Python's spelling ('_' between digits). */
static int lex_number(struct lexer *L, const char *p, size_t left, int line)
{
    char num[64];
    size_t n = 0, k = 0;
    int is_float = 0;
    while (n < left && (isdigit_(p[n]) || (p[n] == '_' && n + 1 < left && isdigit_(p[n + 1]))))
        n++;
    if (n + 1 < left && p[n] == '.' && isdigit_(p[n + 1])) {
        is_float = 1;
        n++;
        while (n < left && (isdigit_(p[n]) || (p[n] == '_' && n + 1 < left && isdigit_(p[n + 1]))))
            n++;
    }
    if (n < left && (p[n] == 'e' || p[n] == 'E')) {
        size_t m = n + 1;
        if (m < left && (p[m] == '+' || p[m] == '-'))
            m++;
        if (m < left && isdigit_(p[m])) {
            is_float = 1;
            n = m;
            while (n < left && isdigit_(p[n]))
                n++;
        }
    }
    for (size_t i = 0; i < n && k < sizeof num - 1; i++)
        if (p[i] != '_')
            num[k++] = p[i];
    num[k] = '\0';
    if (k >= sizeof num - 1)
        return lex_fail(L, line, "number literal too long");
    struct token *t = lex_push(L, is_float ? TK_FLOAT : TK_INT, line);
    if (!t)
        return -1;
    if (is_float) {
        t->f = strtod(num, NULL);
    } else {
        char *end;
        unsigned long long u = strtoull(num, &end, 10);
        if (k > 18 && (u > INT64_MAX || k > 19))
            return lex_fail(L, line, "integer literal too large");
        t->i = (int64_t)u;
    }
    L->pos += n;
    return 0;
}

/* An operator; brackets are pushed on / popped off stack (*depth deep). */
static int lex_op(struct lexer *L, const char *p, size_t left, int line, char *stack, int *depth)
{
    static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    size_t n = 0;
    for (size_t i = 0; i < sizeof ops2 / sizeof ops2[0]; i++)
        if (left >= 2 && p[0] == ops2[i][0] && p[1] == ops2[i][1])
            n = 2;
    if (!n && strchr("+-/*%~[](){}<>=.:|,", p[0]) && p[0])
        n = 1;
    if (!n)
        return lex_fail(L, line, "unexpected character '%c'", p[0]);
    if (p[0] == '(' || p[0] == '[' || p[0] == '{') {
        if (*depth >= JINJA_MAX_DEPTH)
            return lex_fail(L, line, "brackets nested too deeply");
        stack[(*depth)++] = p[0] == '(' ? ')' : p[0] == '[' ? ']' : '}';
    } else if (n == 1 && (p[0] == ')' || p[0] == ']' || p[0] == '}')) {
        if (*depth == 0 || stack[*depth - 1] != p[0])
            return lex_fail(L, line, "unexpected '%c'", p[0]);
        (*depth)--;
    }
    struct token *t = lex_push(L, TK_OP, line);
    if (!t)
        return -1;
    memcpy(t->op, p, n);
    L->pos += n;
    return 0;
}

/* Tokens of one {{ }} or {% %} tag; stops after the end tag. */
static int lex_tag(struct lexer *L, int block)
{
    int depth = 0;
    char stack[JINJA_MAX_DEPTH];
    int open_line = L->line;
    for (;;) {
        while (L->pos < L->len && utf8_py_space((const unsigned char *)L->src + L->pos, 1)) {
            if (L->src[L->pos] == '\n')
                L->line++;
            L->pos++;
        }
        if (L->pos >= L->len)
            return lex_fail(L, open_line, "unexpected end of template, expected '%s'",
                            block ? "%}" : "}}");
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        if (depth == 0) {
            int end = lex_tag_end(L, p, left, block);
            if (end)
                return end < 0 ? -1 : 0;
        }
        int line = L->line, rc;
        if (isname0(p[0]))
            rc = lex_name(L, p, left, line);
        else if (isdigit_(p[0]))
            rc = lex_number(L, p, left, line);
        else if (p[0] == '\'' || p[0] == '"')
            rc = lex_string(L, p[0], line);
        else
            rc = lex_op(L, p, left, line, stack, &depth);
        if (rc)
            return -1;
    }
}

/* Whitespace control on the data text[0..*tn) before a tag: `-` strips all
 * trailing whitespace; otherwise lstrip_blocks removes the spaces between
 * the last newline (or the start of a line) and a block or comment tag. */
static void strip_before_tag(const char *text, size_t *tn, char sign, int block, int line_starting)
{
    if (sign == '-') {
        utf8_py_strip(&text, tn, UTF8_STRIP_RIGHT);
        return;
    }
    if (!block || sign == '+')
        return;
    size_t lpos = *tn;
    while (lpos > 0 && text[lpos - 1] != '\n')
        lpos--;
    if (lpos > 0 || line_starting) {
        size_t i = lpos, l;
        while (i < *tn && text[i] != '\n' && (l = utf8_py_space((const unsigned char *)text + i, *tn - i)) != 0)
            i += l;
        if (i == *tn && *tn > lpos)
            *tn = lpos;
    }
}

/* At "raw" inside "{% raw %}": the text up to {% endraw %} is data, as is. */
static int lex_raw(struct lexer *L, size_t r, int tag_line)
{
    const char *s = L->src;
    r += 3;
    while (r < L->len && utf8_py_space((const unsigned char *)s + r, L->len - r))
        r++;
    if (r + 3 <= L->len && s[r] == '-' && s[r + 1] == '%' && s[r + 2] == '}') {
        count_lines(L, L->pos, r + 3);
        L->pos = r + 3;
        skip_space(L);
    } else if (r + 2 <= L->len && s[r] == '%' && s[r + 1] == '}') {
        count_lines(L, L->pos, r + 2);
        L->pos = r + 2;
    } else {
        return lex_fail(L, tag_line, "expected '%%}' after raw");
    }
    int line_starting = L->pos > 0 && s[L->pos - 1] == '\n';
    for (size_t q = L->pos; q + 1 < L->len; q++) {
        if (s[q] != '{' || s[q + 1] != '%')
            continue;
        size_t e = q + 2;
        char sign = e < L->len && (s[e] == '-' || s[e] == '+') ? s[e] : 0;
        e += sign ? 1 : 0;
        while (e < L->len && utf8_py_space((const unsigned char *)s + e, L->len - e))
            e++;
        if (L->len - e < 6 || memcmp(s + e, "endraw", 6) != 0)
            continue;
        e += 6;
        while (e < L->len && utf8_py_space((const unsigned char *)s + e, L->len - e))
            e++;
        char esign = e < L->len && (s[e] == '-' || s[e] == '+') ? s[e] : 0;
        size_t c = e + (esign ? 1 : 0);
        if (c + 2 > L->len || s[c] != '%' || s[c + 1] != '}')
            continue;
        size_t tn = q - L->pos;
        strip_before_tag(s + L->pos, &tn, sign, 1, line_starting);
        if (lex_data(L, s + L->pos, tn, L->line))
            return -1;
        count_lines(L, L->pos, c + 2);
        L->pos = c + 2;
        if (esign == '-')
            skip_space(L);
        else if (!esign && L->pos < L->len && s[L->pos] == '\n') {
            L->pos++;
            L->line++;
        }
        return 0;
    }
    return lex_fail(L, tag_line, "missing {%% endraw %%}");
}

static int lex_all(struct lexer *L)
{
    int line_starting = 1;
    while (L->pos < L->len) {
        size_t p = L->pos, q = p;
        while (q + 1 < L->len &&
               !(L->src[q] == '{' && (L->src[q + 1] == '{' || L->src[q + 1] == '%' || L->src[q + 1] == '#')))
            q++;
        int data_line = L->line;
        if (q + 1 >= L->len) {
            size_t end = L->len;
            if (lex_data(L, L->src + p, end - p, data_line))
                return -1;
            count_lines(L, p, L->len);
            L->pos = L->len;
            break;
        }
        char kind = L->src[q + 1];
        char sign = q + 2 < L->len ? L->src[q + 2] : 0;
        const char *text = L->src + p;
        size_t tn = q - p;
        strip_before_tag(text, &tn, sign, kind != '{', line_starting);
        if (lex_data(L, text, tn, data_line))
            return -1;
        count_lines(L, p, q);
        L->pos = q + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
        int tag_line = L->line;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = L->pos; i + 1 < L->len; i++)
                if (L->src[i] == '#' && L->src[i + 1] == '}') {
                    e = L->src + i;
                    break;
                }
            if (!e)
                return lex_fail(L, tag_line, "missing end of comment tag");
            size_t epos = (size_t)(e - L->src);
            char before = epos > L->pos ? L->src[epos - 1] : 0;
            count_lines(L, L->pos, epos + 2);
            L->pos = epos + 2;
            if (before == '-') {
                skip_space(L);
            } else if (before != '+' && L->pos < L->len && L->src[L->pos] == '\n') {
                L->pos++;
                L->line++;
            }
        } else {
            size_t r = L->pos;
            while (r < L->len && utf8_py_space((const unsigned char *)L->src + r, L->len - r))
                r++;
            if (kind == '%' && L->len - r >= 3 && !memcmp(L->src + r, "raw", 3) &&
                (r + 3 >= L->len || !(isname0(L->src[r + 3]) || isdigit_(L->src[r + 3])))) {
                if (lex_raw(L, r, tag_line))
                    return -1;
            } else {
                if (!lex_push(L, kind == '%' ? TK_BBEGIN : TK_VBEGIN, tag_line))
                    return -1;
                if (lex_tag(L, kind == '%'))
                    return -1;
            }
        }
        line_starting = L->pos > 0 && L->src[L->pos - 1] == '\n';
    }
    return lex_push(L, TK_EOF, L->line) ? 0 : -1;
}

int jl_lex(const char *src, size_t len, struct arena *a, struct token **out, size_t *n, char *err,
           size_t errcap)
{
    /* jinja2 first turns \r\n and \r into \n and drops one final newline
     * (keep_trailing_newline=False) */
    char *norm = malloc(len + 1);
    if (!norm)
        return ERR_NOMEM;
    size_t nl = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[nl++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[nl++] = src[i];
        }
    }
    if (nl && norm[nl - 1] == '\n')
        nl--;
    norm[nl] = '\0';
    struct lexer L = {.src = norm, .len = nl, .line = 1, .a = a, .err = err, .errcap = errcap};
    int rc = 0;
    if (lex_all(&L)) {
        rc = L.rc ? L.rc : ERR_PARSE;
        free(L.v);
    } else {
        *out = L.v;
        *n = L.n;
    }
    free(norm);
    return rc;
}
