/*
 * jinja.c - Jinja2-subset interpreter for chat templates (see jinja.h).
 *
 * Three stages, each mirroring the matching part of Python's jinja2 so the
 * output is byte-identical:
 *   lex    jinja2.lexer with trim_blocks, lstrip_blocks, keep_trailing_newline
 *          off: data / {{ }} / {% %} / {# #}, the whitespace-control signs,
 *          end tags recognised only while ( [ { are balanced.
 *   parse  jinja2.parser's precedence: condexpr > or > and > not > compare >
 *          + - > ~ > * / // % > ** > unary > primary+postfix, then filters
 *          and tests (so `a + b | trim` is `a + (b|trim)`).
 *   eval   a tree walk. Scopes as jinja2 compiles them: a for-loop body gets
 *          a fresh scope per iteration (assignments do not survive the
 *          iteration or leak out: namespaces do), `if` bodies share their
 *          enclosing scope, a macro's scope sits on the one it was defined in.
 *          Strings are Python str: lengths, indices and slices count code
 *          points, str()/repr() follow Python's spelling (True, None, 1.0,
 *          ['a', 'b']).
 *
 * Everything a template makes lives in the env's arena and is freed with it;
 * the tree lives in the template's arena. Errors are values: each step
 * returns -1 with the message in the render state.
 */
#include "text/jinja.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/utf8.h"

/* ---- arena ------------------------------------------------------------------ */

struct achunk {
    struct achunk *next;
    size_t used, cap;
    max_align_t data[];
};

struct arena {
    struct achunk *head;
    size_t total, cap;
    int oom;   /* 1: malloc failed, 2: cap reached */
};

static void *jar_alloc(struct arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->cap) {
            a->oom = 2;
            return NULL;
        }
        struct achunk *c = malloc(sizeof *c + cap);
        if (!c) {
            a->oom = 1;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void jar_release(struct arena *a)
{
    struct achunk *c = a->head;
    while (c) {
        struct achunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

static struct jstr *jar_str(struct arena *a, const char *s, size_t n)
{
    struct jstr *j = jar_alloc(a, sizeof *j + n + 1);
    if (!j)
        return NULL;
    j->n = n;
    if (n)
        memcpy(j->p, s, n);
    j->p[n] = '\0';
    return j;
}

/* ---- values ----------------------------------------------------------------- */

struct jlist {
    size_t n, cap;
    struct jv *v;
};

struct jdict {
    size_t n, cap;
    struct jv *k, *v;
};

struct jloop {
    int64_t index0, length;
    const struct jv *items;
};

struct node;
struct frame;

struct jmacro {
    const struct node *def;
    struct frame *scope;
};

enum builtin { B_RAISE = 1, B_STRFTIME, B_NAMESPACE, B_RANGE, B_DICT };

struct jinja_env {
    struct arena a;
    struct jv globals;   /* JV_DICT */
    time_t now;
};

static struct jv mk(uint8_t t)
{
    struct jv v;
    memset(&v, 0, sizeof v);
    v.t = t;
    return v;
}

static struct jv mk_int(int64_t i)
{
    struct jv v = mk(JV_INT);
    v.u.i = i;
    return v;
}

static struct jv mk_float(double f)
{
    struct jv v = mk(JV_FLOAT);
    v.u.f = f;
    return v;
}

struct jv jinja_bool(int b)
{
    struct jv v = mk(JV_BOOL);
    v.u.b = b != 0;
    return v;
}

struct jv jinja_none(void) { return mk(JV_NONE); }

static struct jv mk_strp(const struct jstr *s)
{
    struct jv v = mk(JV_STR);
    v.u.s = s;
    return v;
}

static int jv_list_push(struct arena *a, struct jlist *l, struct jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *nv = jar_alloc(a, cap * sizeof *nv);
        if (!nv)
            return -1;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

static struct jv jv_new_list(struct arena *a, uint8_t t)
{
    struct jlist *l = jar_alloc(a, sizeof *l);
    if (!l)
        return mk(JV_UNDEF);
    memset(l, 0, sizeof *l);
    struct jv v = mk(t);
    v.u.l = l;
    return v;
}

static struct jv jv_new_dict(struct arena *a, uint8_t t)
{
    struct jdict *d = jar_alloc(a, sizeof *d);
    if (!d)
        return mk(JV_UNDEF);
    memset(d, 0, sizeof *d);
    struct jv v = mk(t);
    v.u.d = d;
    return v;
}

static int str_eq(const struct jstr *a, const char *s, size_t n)
{
    return a->n == n && memcmp(a->p, s, n) == 0;
}

static int jv_eq(struct jv a, struct jv b);

static struct jv *jv_dict_find(const struct jdict *d, struct jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

static struct jv *jv_dict_find_s(const struct jdict *d, const char *s, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && str_eq(d->k[i].u.s, s, n))
            return &d->v[i];
    return NULL;
}

/* Grows two parallel arrays of n used elements (keys and values) to twice
 * *cap (first: the first capacity) in the arena, copying what they hold.
 * On failure (arena limit or malloc) nothing changes and -1 is returned. */
static int jar_grow_pair(struct arena *a, size_t n, size_t *cap, size_t first, void **x, size_t xsz,
                        void **y, size_t ysz)
{
    size_t c = *cap ? *cap * 2 : first;
    void *nx = jar_alloc(a, c * xsz), *ny = jar_alloc(a, c * ysz);
    if (!nx || !ny)
        return -1;
    if (n) {
        memcpy(nx, *x, n * xsz);
        memcpy(ny, *y, n * ysz);
    }
    *x = nx;
    *y = ny;
    *cap = c;
    return 0;
}

static int jv_dict_set(struct arena *a, struct jdict *d, struct jv key, struct jv val)
{
    struct jv *p = jv_dict_find(d, key);
    if (p) {
        *p = val;
        return 0;
    }
    if (d->n == d->cap) {
        void *k = d->k, *v = d->v;
        if (jar_grow_pair(a, d->n, &d->cap, 4, &k, sizeof *d->k, &v, sizeof *d->v))
            return -1;
        d->k = k;
        d->v = v;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
    return 0;
}

struct jinja_env *jinja_env_new(time_t now)
{
    struct jinja_env *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->a.cap = JINJA_MAX_MEMORY;
    e->now = now;
    e->globals = jv_new_dict(&e->a, JV_DICT);
    if (e->globals.t != JV_DICT) {
        jinja_env_free(e);
        return NULL;
    }
    return e;
}

void jinja_env_free(struct jinja_env *e)
{
    if (!e)
        return;
    jar_release(&e->a);
    free(e);
}

struct jv jinja_str(struct jinja_env *e, const char *s, size_t n)
{
    struct jstr *j = jar_str(&e->a, s, n);
    return j ? mk_strp(j) : mk(JV_UNDEF);
}

struct jv jinja_list(struct jinja_env *e) { return jv_new_list(&e->a, JV_LIST); }
struct jv jinja_dict(struct jinja_env *e) { return jv_new_dict(&e->a, JV_DICT); }

void jinja_list_push(struct jinja_env *e, struct jv list, struct jv v)
{
    if (list.t != JV_LIST || v.t == JV_UNDEF || jv_list_push(&e->a, list.u.l, v) != 0)
        e->a.oom = e->a.oom ? e->a.oom : 1;
}

void jinja_dict_set(struct jinja_env *e, struct jv dict, const char *key, struct jv v)
{
    struct jv k = jinja_str(e, key, strlen(key));
    if (dict.t != JV_DICT || k.t != JV_STR || v.t == JV_UNDEF ||
        jv_dict_set(&e->a, dict.u.d, k, v) != 0)
        e->a.oom = e->a.oom ? e->a.oom : 1;
}

void jinja_global(struct jinja_env *e, const char *name, struct jv v)
{
    jinja_dict_set(e, e->globals, name, v);
}

/* ---- text helpers ----------------------------------------------------------- */

/* Byte length of the UTF-8 sequence starting at s (1 for invalid bytes). */
static size_t u8len(const unsigned char *s, size_t left)
{
    size_t l = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
             : (s[0] & 0xF8) == 0xF0 ? 4 : 1;
    if (l > left)
        return 1;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return l;
}

static size_t u8count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += u8len((const unsigned char *)s + i, n - i))
        k++;
    return k;
}

/* Simple case mapping: ASCII, Latin-1, Greek and Cyrillic basic blocks. */
static uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

static int cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

/* ---- lexer ------------------------------------------------------------------ */

enum tk { TK_EOF, TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT,
          TK_FLOAT, TK_OP };

struct token {
    uint8_t k;
    char op[3];
    int line;
    const struct jstr *s;
    int64_t i;
    double f;
};

struct jinja_tmpl {
    struct arena a;
    struct node **body;
    size_t n_body;
};

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
static int jl_set_fail(int *rc, int code, char *err, size_t errcap, int line, const char *fmt, va_list ap)
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
        char e = s[++p];
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case 'n': j->p[k++] = '\n'; break;
        case 't': j->p[k++] = '\t'; break;
        case 'r': j->p[k++] = '\r'; break;
        case '\\': j->p[k++] = '\\'; break;
        case '\'': j->p[k++] = '\''; break;
        case '"': j->p[k++] = '"'; break;
        case 'a': j->p[k++] = '\a'; break;
        case 'b': j->p[k++] = '\b'; break;
        case 'f': j->p[k++] = '\f'; break;
        case 'v': j->p[k++] = '\v'; break;
        case '\n': break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                int m = 0;
                while (m < 3 && p < n && s[p] >= '0' && s[p] <= '7')
                    cp = cp * 8 + (uint32_t)(s[p++] - '0'), m++;
                p--;
                k += utf8_encode(cp, j->p + k);
            } else {
                j->p[k++] = '\\';
                j->p[k++] = e;
            }
        }
        if (digits) {
            for (int d = 0; d < digits; d++) {
                int h = p + 1 < n ? hex_digit(s[p + 1]) : -1;
                if (h < 0)
                    return lex_fail(L, line, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
                p++;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return lex_fail(L, line, "invalid escape in string");
            k += utf8_encode(cp, j->p + k);
        }
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

static int isname0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int isdigit_(char c) { return c >= '0' && c <= '9'; }

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
        char c1 = block ? '%' : '}';
        if (depth == 0) {
            int sign = (p[0] == '-' || (block && p[0] == '+')) ? 1 : 0;
            if (left >= (size_t)sign + 2 && p[sign] == c1 && p[sign + 1] == '}') {
                L->pos += (size_t)sign + 2;
                if (!lex_push(L, block ? TK_BEND : TK_VEND, L->line))
                    return -1;
                if (p[0] == '-') {
                    while (L->pos < L->len) {
                        size_t l = utf8_py_space((const unsigned char *)L->src + L->pos, L->len - L->pos);
                        if (!l)
                            break;
                        if (L->src[L->pos] == '\n')
                            L->line++;
                        L->pos += l;
                    }
                } else if (block && !sign && L->pos < L->len && L->src[L->pos] == '\n') {
                    L->pos++;
                    L->line++;
                }
                return 0;
            }
        }
        int line = L->line;
        if (isname0(p[0])) {
            size_t n = 1;
            while (n < left && (isname0(p[n]) || isdigit_(p[n])))
                n++;
            struct token *t = lex_push(L, TK_NAME, line);
            if (!t || !(t->s = jar_str(L->a, p, n))) {
                L->rc = L->rc ? L->rc : ERR_NOMEM;
                return -1;
            }
            L->pos += n;
        } else if (isdigit_(p[0])) {
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
        } else if (p[0] == '\'' || p[0] == '"') {
            if (lex_string(L, p[0], line))
                return -1;
        } else {
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
                if (depth >= JINJA_MAX_DEPTH)
                    return lex_fail(L, line, "brackets nested too deeply");
                stack[depth++] = p[0] == '(' ? ')' : p[0] == '[' ? ']' : '}';
            } else if (n == 1 && (p[0] == ')' || p[0] == ']' || p[0] == '}')) {
                if (depth == 0 || stack[depth - 1] != p[0])
                    return lex_fail(L, line, "unexpected '%c'", p[0]);
                depth--;
            }
            struct token *t = lex_push(L, TK_OP, line);
            if (!t)
                return -1;
            memcpy(t->op, p, n);
            L->pos += n;
        }
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
                while (L->pos < L->len) {
                    size_t l = utf8_py_space((const unsigned char *)L->src + L->pos, L->len - L->pos);
                    if (!l)
                        break;
                    if (L->src[L->pos] == '\n')
                        L->line++;
                    L->pos += l;
                }
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

/* ---- syntax tree ------------------------------------------------------------ */

enum nk {
    /* expressions */
    N_CONST = 1, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BIN, N_AND, N_OR,
    N_NOT, N_NEG, N_POS, N_CMP, N_COND, N_LIST, N_TUPLE, N_DICT,
    /* statements */
    S_DATA, S_OUT, S_IF, S_FOR, S_SET, S_SETNS, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_BODY,
    S_FILTERBLOCK,
};

enum binop { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT };
enum cmpop { C_EQ = 1, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

struct node {
    uint8_t k, op;
    int line;
    struct node *a, *b, *c;
    struct node **v;            /* args / items / body / slice parts */
    size_t n;
    struct node **v2;           /* kwarg values / else body / dict values / defaults */
    size_t n2;
    const struct jstr **names;  /* kwarg names / targets / params */
    size_t n_names;
    const struct jstr *s;       /* name, attribute */
    uint8_t *ops;               /* N_CMP: n - 1 operators */
    struct jv cv;               /* N_CONST, S_DATA */
};

enum filt {
    F_ABS = 1, F_CAPITALIZE, F_DEFAULT, F_ESCAPE, F_FIRST, F_FLOAT, F_INDENT, F_INT, F_ITEMS,
    F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_REJECT, F_REJECTATTR, F_REPLACE,
    F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE,
    F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_MIN, F_MAX, F_DICTSORT, F_WORDCOUNT,
};

static const struct { const char *name; uint8_t id; } FILTERS[] = {
    {"abs", F_ABS}, {"capitalize", F_CAPITALIZE}, {"count", F_LENGTH}, {"d", F_DEFAULT},
    {"default", F_DEFAULT}, {"dictsort", F_DICTSORT}, {"e", F_ESCAPE}, {"escape", F_ESCAPE},
    {"first", F_FIRST}, {"float", F_FLOAT}, {"indent", F_INDENT}, {"int", F_INT},
    {"items", F_ITEMS}, {"join", F_JOIN}, {"last", F_LAST}, {"length", F_LENGTH},
    {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP}, {"max", F_MAX}, {"min", F_MIN},
    {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
    {"reverse", F_REVERSE}, {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT},
    {"selectattr", F_SELECTATTR}, {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM},
    {"title", F_TITLE}, {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE},
    {"upper", F_UPPER}, {"wordcount", F_WORDCOUNT},
};

enum test {
    T_DEFINED = 1, T_UNDEFINED, T_NONE, T_STRING, T_MAPPING, T_SEQUENCE, T_ITERABLE, T_NUMBER,
    T_INTEGER, T_FLOAT, T_BOOLEAN, T_TRUE, T_FALSE, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN,
    T_SAMEAS, T_ODD, T_EVEN, T_DIVISIBLEBY, T_LOWER, T_UPPER, T_CALLABLE,
};

static const struct { const char *name; uint8_t id; } TESTS[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"string", T_STRING},
    {"mapping", T_MAPPING}, {"sequence", T_SEQUENCE}, {"iterable", T_ITERABLE},
    {"number", T_NUMBER}, {"integer", T_INTEGER}, {"float", T_FLOAT}, {"boolean", T_BOOLEAN},
    {"true", T_TRUE}, {"false", T_FALSE}, {"eq", T_EQ}, {"equalto", T_EQ}, {"==", T_EQ},
    {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT}, {"lessthan", T_LT}, {"<", T_LT}, {"le", T_LE},
    {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT}, {">", T_GT}, {"ge", T_GE}, {">=", T_GE},
    {"in", T_IN}, {"sameas", T_SAMEAS}, {"odd", T_ODD}, {"even", T_EVEN},
    {"divisibleby", T_DIVISIBLEBY}, {"lower", T_LOWER}, {"upper", T_UPPER},
    {"callable", T_CALLABLE},
};

static int jb_filter_find(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, s, n))
            return FILTERS[i].id;
    return 0;
}

static int jb_test_find(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, s, n))
            return TESTS[i].id;
    return 0;
}

/* ---- parser ----------------------------------------------------------------- */

struct parser {
    struct token *t;
    size_t pos, n;
    struct arena *a;
    int depth;
    int soft;      /* inside an {% if %}: unknown filters/tests fail at run time */
    char *err;
    size_t errcap;
    int rc;
};

static int p_fail(struct parser *P, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jl_set_fail(&P->rc, ERR_PARSE, P->err, P->errcap, line, fmt, ap);
    va_end(ap);
    return -1;
}

static struct token *cur(struct parser *P) { return &P->t[P->pos]; }
static struct token *peek(struct parser *P, size_t k)
{
    return P->pos + k < P->n ? &P->t[P->pos + k] : &P->t[P->n - 1];
}
static void adv(struct parser *P)
{
    if (P->t[P->pos].k != TK_EOF)
        P->pos++;
}
static int is_op(struct token *t, const char *op) { return t->k == TK_OP && !strcmp(t->op, op); }
static int is_name(struct token *t, const char *n)
{
    return t->k == TK_NAME && t->s->n == strlen(n) && !memcmp(t->s->p, n, t->s->n);
}

static struct node *nn(struct parser *P, uint8_t k, int line)
{
    struct node *x = jar_alloc(P->a, sizeof *x);
    if (!x) {
        P->rc = P->rc ? P->rc : ERR_NOMEM;
        return NULL;
    }
    memset(x, 0, sizeof *x);
    x->k = k;
    x->line = line;
    return x;
}

/* A growable node-pointer vector during parsing (heap; copied to the arena). */
struct nvec {
    struct node **v;
    size_t n, cap;
    const struct jstr **s;  /* parallel names, when used */
};

static int nv_push(struct parser *P, struct nvec *v, struct node *x, const struct jstr *name)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        struct node **nv = realloc(v->v, cap * sizeof *nv);
        const struct jstr **ns = realloc(v->s, cap * sizeof *ns);
        if (nv)
            v->v = nv;
        if (ns)
            v->s = ns;
        if (!nv || !ns) {
            P->rc = P->rc ? P->rc : ERR_NOMEM;
            return -1;
        }
        v->cap = cap;
    }
    v->s[v->n] = name;
    v->v[v->n++] = x;
    return 0;
}

static void nv_free(struct nvec *v)
{
    free(v->v);
    free(v->s);
}

static struct node **nv_done(struct parser *P, struct nvec *v)
{
    if (!v->n)
        return NULL;
    struct node **o = jar_alloc(P->a, v->n * sizeof *o);
    if (!o)
        P->rc = P->rc ? P->rc : ERR_NOMEM;
    else
        memcpy(o, v->v, v->n * sizeof *o);
    return o;
}

static const struct jstr **nv_names(struct parser *P, struct nvec *v)
{
    if (!v->n)
        return NULL;
    const struct jstr **o = jar_alloc(P->a, v->n * sizeof *o);
    if (!o)
        P->rc = P->rc ? P->rc : ERR_NOMEM;
    else
        memcpy(o, v->s, v->n * sizeof *o);
    return o;
}

static int expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op))
        return p_fail(P, cur(P)->line, "expected '%s'", op);
    adv(P);
    return 0;
}

static struct node *p_expr(struct parser *P, int condexpr);
static struct node *p_or(struct parser *P);
static struct node *p_unary(struct parser *P, int with_filter);
static struct node *p_primary(struct parser *P);
static struct node *p_postfix(struct parser *P, struct node *x);

/* Call arguments after '(': positional and name=value; fills x->v / x->names+v2. */
static int p_call_args(struct parser *P, struct node *x)
{
    struct nvec args = {0}, kw = {0};
    int rc = -1;
    if (expect_op(P, "("))
        goto out;
    while (!is_op(cur(P), ")")) {
        if (args.n + kw.n > 0 && expect_op(P, ","))
            goto out;
        if (is_op(cur(P), ")"))
            break;
        if (is_op(cur(P), "*"))
            { p_fail(P, cur(P)->line, "*args / **kwargs are not supported"); goto out; }
        if (cur(P)->k == TK_NAME && is_op(peek(P, 1), "=")) {
            const struct jstr *name = cur(P)->s;
            adv(P);
            adv(P);
            struct node *v = p_expr(P, 1);
            if (!v || nv_push(P, &kw, v, name))
                goto out;
        } else {
            if (kw.n)
                { p_fail(P, cur(P)->line, "positional argument after keyword argument"); goto out; }
            struct node *v = p_expr(P, 1);
            if (!v || nv_push(P, &args, v, NULL))
                goto out;
        }
    }
    adv(P);
    x->v = nv_done(P, &args);
    x->n = args.n;
    x->v2 = nv_done(P, &kw);
    x->names = nv_names(P, &kw);
    x->n2 = x->n_names = kw.n;
    rc = P->rc ? -1 : 0;
out:
    nv_free(&args);
    nv_free(&kw);
    return rc;
}

static struct node *p_depth_guard(struct parser *P)
{
    if (++P->depth > JINJA_MAX_DEPTH) {
        p_fail(P, cur(P)->line, "expression nested too deeply");
        P->rc = ERR_DEPTH;
        return NULL;
    }
    return (struct node *)1;
}

/* One filter "name [(args)]" applied to x. An unknown name is a parse
 * error, except inside an {% if %} (jinja2's soft frame), where it fails only
 * if it runs. */
static struct node *p_filter_one(struct parser *P, struct node *x, int line)
{
    if (cur(P)->k != TK_NAME)
        return p_fail(P, line, "expected a filter name"), NULL;
    const struct jstr *name = cur(P)->s;
    int id = jb_filter_find(name->p, name->n);
    if (!id && !P->soft)
        return p_fail(P, line, "no filter named '%s'", name->p), NULL;
    adv(P);
    struct node *f = nn(P, N_FILTER, line);
    if (!f)
        return NULL;
    f->a = x;
    f->op = (uint8_t)id;
    f->s = name;
    if (is_op(cur(P), "(") && p_call_args(P, f))
        return NULL;
    return f;
}

static struct node *p_filters(struct parser *P, struct node *x)
{
    for (;;) {
        struct token *t = cur(P);
        if (is_op(t, "|")) {
            adv(P);
            if (!(x = p_filter_one(P, x, t->line)))
                return NULL;
        } else if (is_name(t, "is")) {
            adv(P);
            int neg = 0;
            if (is_name(cur(P), "not")) {
                neg = 1;
                adv(P);
            }
            if (cur(P)->k != TK_NAME)
                return p_fail(P, t->line, "expected a test name"), NULL;
            const struct jstr *name = cur(P)->s;
            int id = jb_test_find(name->p, name->n);
            if (!id && !P->soft)
                return p_fail(P, t->line, "no test named '%s'", name->p), NULL;
            adv(P);
            struct node *f = nn(P, N_TEST, t->line);
            if (!f)
                return NULL;
            f->a = x;
            f->op = (uint8_t)id;
            f->s = name;
            struct token *c = cur(P);
            if (is_op(c, "(")) {
                if (p_call_args(P, f))
                    return NULL;
            } else if ((c->k == TK_NAME || c->k == TK_STR || c->k == TK_INT || c->k == TK_FLOAT ||
                        is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is"))
                    return p_fail(P, c->line, "you cannot chain multiple tests with is"), NULL;
                struct node *arg = p_primary(P);
                if (!arg || !(arg = p_postfix(P, arg)))
                    return NULL;
                f->v = jar_alloc(P->a, sizeof *f->v);
                if (!f->v)
                    return P->rc = ERR_NOMEM, NULL;
                f->v[0] = arg;
                f->n = 1;
            }
            if (neg) {
                struct node *n = nn(P, N_NOT, t->line);
                if (!n)
                    return NULL;
                n->a = f;
                f = n;
            }
            x = f;
        } else if (is_op(t, "(")) {
            struct node *c = nn(P, N_CALL, t->line);
            if (!c)
                return NULL;
            c->a = x;
            if (p_call_args(P, c))
                return NULL;
            x = c;
        } else {
            return x;
        }
    }
}

static struct node *p_subscript(struct parser *P)
{
    int line = cur(P)->line;
    struct node *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        adv(P);
    } else {
        struct node *x = p_expr(P, 1);
        if (!x)
            return NULL;
        if (!is_op(cur(P), ":"))
            return x;
        adv(P);
        parts[0] = x;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ",")) {
        if (!(parts[1] = p_expr(P, 1)))
            return NULL;
    }
    if (is_op(cur(P), ":")) {
        adv(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !(parts[2] = p_expr(P, 1)))
            return NULL;
    }
    struct node *s = nn(P, N_SLICE, line);
    if (!s || !(s->v = jar_alloc(P->a, sizeof parts)))
        return P->rc = P->rc ? P->rc : ERR_NOMEM, NULL;
    memcpy(s->v, parts, sizeof parts);
    s->n = 3;
    return s;
}

static struct node *p_postfix(struct parser *P, struct node *x)
{
    for (;;) {
        struct token *t = cur(P);
        if (is_op(t, ".")) {
            adv(P);
            struct token *a = cur(P);
            struct node *g;
            if (a->k == TK_NAME) {
                if (!(g = nn(P, N_ATTR, t->line)))
                    return NULL;
                g->s = a->s;
            } else if (a->k == TK_INT) {
                struct node *k = nn(P, N_CONST, t->line);
                if (!k || !(g = nn(P, N_ITEM, t->line)))
                    return NULL;
                k->cv = mk_int(a->i);
                g->b = k;
            } else {
                return p_fail(P, t->line, "expected a name after '.'"), NULL;
            }
            adv(P);
            g->a = x;
            x = g;
        } else if (is_op(t, "[")) {
            adv(P);
            struct node *sub = p_subscript(P);
            if (!sub || expect_op(P, "]"))
                return NULL;
            struct node *g;
            if (sub->k == N_SLICE) {
                g = sub;
            } else {
                if (!(g = nn(P, N_ITEM, t->line)))
                    return NULL;
                g->b = sub;
            }
            g->a = x;
            x = g;
        } else if (is_op(t, "(")) {
            struct node *c = nn(P, N_CALL, t->line);
            if (!c)
                return NULL;
            c->a = x;
            if (p_call_args(P, c))
                return NULL;
            x = c;
        } else {
            return x;
        }
    }
}

static struct node *p_seq(struct parser *P, uint8_t kind, const char *close)
{
    struct nvec items = {0}, vals = {0};
    struct node *x = nn(P, kind, cur(P)->line);
    adv(P);
    if (!x)
        goto fail;
    while (!is_op(cur(P), close)) {
        if (items.n && expect_op(P, ","))
            goto fail;
        if (is_op(cur(P), close))
            break;
        struct node *it = p_expr(P, 1);
        if (!it || nv_push(P, &items, it, NULL))
            goto fail;
        if (kind == N_DICT) {
            struct node *v;
            if (expect_op(P, ":") || !(v = p_expr(P, 1)) || nv_push(P, &vals, v, NULL))
                goto fail;
        }
    }
    adv(P);
    x->v = nv_done(P, &items);
    x->n = items.n;
    x->v2 = nv_done(P, &vals);
    x->n2 = vals.n;
    nv_free(&items);
    nv_free(&vals);
    return P->rc ? NULL : x;
fail:
    nv_free(&items);
    nv_free(&vals);
    return NULL;
}

static struct node *p_primary(struct parser *P)
{
    struct token *t = cur(P);
    struct node *x = NULL;
    if (!p_depth_guard(P))
        return NULL;
    switch (t->k) {
    case TK_NAME:
        if (!(x = nn(P, N_CONST, t->line)))
            break;
        if (is_name(t, "true") || is_name(t, "True"))
            x->cv = jinja_bool(1);
        else if (is_name(t, "false") || is_name(t, "False"))
            x->cv = jinja_bool(0);
        else if (is_name(t, "none") || is_name(t, "None"))
            x->cv = mk(JV_NONE);
        else {
            x->k = N_NAME;
            x->s = t->s;
        }
        adv(P);
        break;
    case TK_STR: {
        if (!(x = nn(P, N_CONST, t->line)))
            break;
        const struct jstr *s = t->s;
        adv(P);
        while (cur(P)->k == TK_STR) { /* adjacent literals concatenate */
            const struct jstr *b = cur(P)->s;
            struct jstr *j = jar_alloc(P->a, sizeof *j + s->n + b->n + 1);
            if (!j) {
                P->rc = ERR_NOMEM;
                return NULL;
            }
            memcpy(j->p, s->p, s->n);
            memcpy(j->p + s->n, b->p, b->n + 1);
            j->n = s->n + b->n;
            s = j;
            adv(P);
        }
        x->cv = mk_strp(s);
        break;
    }
    case TK_INT:
    case TK_FLOAT:
        if ((x = nn(P, N_CONST, t->line)))
            x->cv = t->k == TK_INT ? mk_int(t->i) : mk_float(t->f);
        adv(P);
        break;
    case TK_OP:
        if (is_op(t, "(")) {
            adv(P);
            if (is_op(cur(P), ")")) {
                adv(P);
                x = nn(P, N_TUPLE, t->line);
                break;
            }
            struct node *first = p_expr(P, 1);
            if (!first)
                break;
            if (is_op(cur(P), ",")) {
                struct nvec items = {0};
                if (nv_push(P, &items, first, NULL)) {
                    nv_free(&items);
                    break;
                }
                while (is_op(cur(P), ",")) {
                    adv(P);
                    if (is_op(cur(P), ")"))
                        break;
                    struct node *it = p_expr(P, 1);
                    if (!it || nv_push(P, &items, it, NULL)) {
                        nv_free(&items);
                        return NULL;
                    }
                }
                if ((x = nn(P, N_TUPLE, t->line))) {
                    x->v = nv_done(P, &items);
                    x->n = items.n;
                }
                nv_free(&items);
            } else {
                x = first;
            }
            if (x && expect_op(P, ")"))
                x = NULL;
        } else if (is_op(t, "[")) {
            x = p_seq(P, N_LIST, "]");
        } else if (is_op(t, "{")) {
            x = p_seq(P, N_DICT, "}");
        } else {
            p_fail(P, t->line, "unexpected '%s'", t->op);
        }
        break;
    case TK_EOF:
        p_fail(P, t->line, "unexpected end of template");
        break;
    default:
        p_fail(P, t->line, "unexpected end of tag");
    }
    P->depth--;
    return P->rc ? NULL : x;
}

static struct node *p_unary(struct parser *P, int with_filter)
{
    struct token *t = cur(P);
    struct node *x;
    if (!p_depth_guard(P))
        return NULL;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(P);
        struct node *a = p_unary(P, 0);
        if (!a || !(x = nn(P, t->op[0] == '-' ? N_NEG : N_POS, t->line)))
            return NULL;
        x->a = a;
    } else {
        x = p_primary(P);
        if (x)
            x = p_postfix(P, x);
    }
    if (x && with_filter)
        x = p_filters(P, x);
    P->depth--;
    return x;
}

static struct node *bin(struct parser *P, uint8_t k, uint8_t op, int line, struct node *a,
                        struct node *b)
{
    if (!a || !b)
        return NULL;
    struct node *x = nn(P, k, line);
    if (x) {
        x->op = op;
        x->a = a;
        x->b = b;
    }
    return x;
}

static struct node *p_pow(struct parser *P)
{
    struct node *x = p_unary(P, 1);
    while (x && is_op(cur(P), "**")) {
        int line = cur(P)->line;
        adv(P);
        x = bin(P, N_BIN, OP_POW, line, x, p_unary(P, 1));
    }
    return x;
}

static struct node *p_math2(struct parser *P)
{
    struct node *x = p_pow(P);
    for (;;) {
        struct token *t = cur(P);
        uint8_t op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                   : is_op(t, "%") ? OP_MOD : 0;
        if (!x || !op)
            return x;
        adv(P);
        x = bin(P, N_BIN, op, t->line, x, p_pow(P));
    }
}

static struct node *p_concat(struct parser *P)
{
    struct node *x = p_math2(P);
    while (x && is_op(cur(P), "~")) {
        int line = cur(P)->line;
        adv(P);
        x = bin(P, N_BIN, OP_CONCAT, line, x, p_math2(P));
    }
    return x;
}

static struct node *p_math1(struct parser *P)
{
    struct node *x = p_concat(P);
    for (;;) {
        struct token *t = cur(P);
        uint8_t op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!x || !op)
            return x;
        adv(P);
        x = bin(P, N_BIN, op, t->line, x, p_concat(P));
    }
}

static struct node *p_compare(struct parser *P)
{
    struct node *x = p_math1(P);
    if (!x)
        return NULL;
    struct nvec ops = {0};
    uint8_t opv[64];
    int line = cur(P)->line;
    if (nv_push(P, &ops, x, NULL))
        goto fail;
    for (;;) {
        struct token *t = cur(P);
        uint8_t op = is_op(t, "==") ? C_EQ : is_op(t, "!=") ? C_NE : is_op(t, "<") ? C_LT
                   : is_op(t, "<=") ? C_LE : is_op(t, ">") ? C_GT : is_op(t, ">=") ? C_GE
                   : is_name(t, "in") ? C_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = C_NOTIN;
            adv(P);
        }
        if (!op)
            break;
        if (ops.n > sizeof opv)
            { p_fail(P, t->line, "comparison chain too long"); goto fail; }
        adv(P);
        opv[ops.n - 1] = op;
        struct node *y = p_math1(P);
        if (!y || nv_push(P, &ops, y, NULL))
            goto fail;
    }
    if (ops.n == 1) {
        nv_free(&ops);
        return x;
    }
    struct node *c = nn(P, N_CMP, line);
    if (!c || !(c->ops = jar_alloc(P->a, ops.n - 1)))
        { P->rc = P->rc ? P->rc : ERR_NOMEM; goto fail; }
    memcpy(c->ops, opv, ops.n - 1);
    c->v = nv_done(P, &ops);
    c->n = ops.n;
    nv_free(&ops);
    return P->rc ? NULL : c;
fail:
    nv_free(&ops);
    return NULL;
}

static struct node *p_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        adv(P);
        if (!p_depth_guard(P))
            return NULL;
        struct node *a = p_not(P);
        P->depth--;
        struct node *x = a ? nn(P, N_NOT, line) : NULL;
        if (x)
            x->a = a;
        return x;
    }
    return p_compare(P);
}

static struct node *p_and(struct parser *P)
{
    struct node *x = p_not(P);
    while (x && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        adv(P);
        x = bin(P, N_AND, 0, line, x, p_not(P));
    }
    return x;
}

static struct node *p_or(struct parser *P)
{
    struct node *x = p_and(P);
    while (x && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        adv(P);
        x = bin(P, N_OR, 0, line, x, p_and(P));
    }
    return x;
}

static struct node *p_expr(struct parser *P, int condexpr)
{
    if (!p_depth_guard(P))
        return NULL;
    struct node *x = p_or(P);
    while (condexpr && x && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        adv(P);
        struct node *test = p_or(P), *alt = NULL;
        if (!test)
            return NULL;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (!(alt = p_expr(P, 1)))
                return NULL;
        }
        struct node *c = nn(P, N_COND, line);
        if (!c)
            return NULL;
        c->a = test;
        c->b = x;
        c->c = alt;
        x = c;
    }
    P->depth--;
    return x;
}

/* An expression, or a bare tuple `a, b` (as in {% set x = a, b %}). */
static struct node *p_tuple(struct parser *P, int condexpr)
{
    int line = cur(P)->line;
    struct node *x = p_expr(P, condexpr);
    if (!x || !is_op(cur(P), ","))
        return x;
    struct nvec items = {0};
    if (nv_push(P, &items, x, NULL))
        goto fail;
    while (is_op(cur(P), ",")) {
        adv(P);
        if (cur(P)->k == TK_BEND || cur(P)->k == TK_VEND || is_op(cur(P), ")"))
            break;
        struct node *it = p_expr(P, condexpr);
        if (!it || nv_push(P, &items, it, NULL))
            goto fail;
    }
    struct node *t = nn(P, N_TUPLE, line);
    if (t) {
        t->v = nv_done(P, &items);
        t->n = items.n;
    }
    nv_free(&items);
    return P->rc ? NULL : t;
fail:
    nv_free(&items);
    return NULL;
}

/* Assignment targets: name or name, name, ... (for and set). */
static int p_targets(struct parser *P, struct node *x)
{
    struct nvec names = {0};
    int paren = 0;
    if (is_op(cur(P), "(")) {
        paren = 1;
        adv(P);
    }
    for (;;) {
        if (cur(P)->k != TK_NAME)
            { nv_free(&names); return p_fail(P, cur(P)->line, "expected a variable name"); }
        if (nv_push(P, &names, NULL, cur(P)->s))
            { nv_free(&names); return -1; }
        adv(P);
        if (!is_op(cur(P), ","))
            break;
        adv(P);
        if (paren && is_op(cur(P), ")"))
            break;
    }
    if (paren && expect_op(P, ")"))
        { nv_free(&names); return -1; }
    x->names = nv_names(P, &names);
    x->n_names = names.n;
    x->op = names.n > 1 || is_op(&P->t[P->pos - 1], ",");
    nv_free(&names);
    return P->rc ? -1 : 0;
}

static int p_block_end(struct parser *P)
{
    if (cur(P)->k != TK_BEND)
        return p_fail(P, cur(P)->line, "expected end of statement block");
    adv(P);
    return 0;
}

static int p_body(struct parser *P, struct nvec *out, const char *const *ends);

/* Parse a body until one of ends; leaves the parser on that name. */
static struct node **p_sub(struct parser *P, const char *const *ends, size_t *n)
{
    struct nvec v = {0};
    if (++P->depth > JINJA_MAX_DEPTH) {
        p_fail(P, cur(P)->line, "blocks nested too deeply");
        P->rc = ERR_DEPTH;
        nv_free(&v);
        return NULL;
    }
    int rc = p_body(P, &v, ends);
    P->depth--;
    struct node **o = rc ? NULL : nv_done(P, &v);
    *n = v.n;
    nv_free(&v);
    return o;
}

static int p_stmt(struct parser *P, struct nvec *out)
{
    struct token *kw = cur(P);
    int line = kw->line;
    if (kw->k != TK_NAME)
        return p_fail(P, line, "expected a statement name");
    adv(P);
    struct node *x = NULL;
    if (is_name(kw, "if")) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        struct node *top = NULL, *prev = NULL;
        P->soft++;
        for (;;) {
            struct node *c = nn(P, S_IF, line);
            if (!c || !(c->a = p_tuple(P, 1)) || p_block_end(P))
                return -1;
            c->v = p_sub(P, ends, &c->n);
            if (P->rc)
                return -1;
            if (!top)
                top = c;
            else {
                prev->v2 = jar_alloc(P->a, sizeof *prev->v2);
                if (!prev->v2)
                    return P->rc = ERR_NOMEM, -1;
                prev->v2[0] = c;
                prev->n2 = 1;
            }
            prev = c;
            if (is_name(cur(P), "elif")) {
                line = cur(P)->line;
                adv(P);
                continue;
            }
            if (is_name(cur(P), "else")) {
                static const char *const e2[] = {"endif", NULL};
                adv(P);
                if (p_block_end(P))
                    return -1;
                c->v2 = p_sub(P, e2, &c->n2);
                if (P->rc)
                    return -1;
            }
            adv(P); /* endif */
            break;
        }
        P->soft--;
        x = top;
    } else if (is_name(kw, "for")) {
        static const char *const ends[] = {"endfor", "else", NULL};
        static const char *const e2[] = {"endfor", NULL};
        if (!(x = nn(P, S_FOR, line)) || p_targets(P, x))
            return -1;
        if (!is_name(cur(P), "in"))
            return p_fail(P, cur(P)->line, "expected 'in'");
        adv(P);
        if (!(x->a = p_tuple(P, 0)))
            return -1;
        if (is_name(cur(P), "if")) {
            adv(P);
            if (!(x->b = p_tuple(P, 1)))
                return -1;
        }
        if (is_name(cur(P), "recursive"))
            return p_fail(P, cur(P)->line, "recursive loops are not supported");
        if (p_block_end(P))
            return -1;
        x->v = p_sub(P, ends, &x->n);
        if (P->rc)
            return -1;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (p_block_end(P))
                return -1;
            x->v2 = p_sub(P, e2, &x->n2);
            if (P->rc)
                return -1;
        }
        adv(P);
    } else if (is_name(kw, "set")) {
        if (cur(P)->k == TK_NAME && is_op(peek(P, 1), ".") && peek(P, 2)->k == TK_NAME) {
            if (!(x = nn(P, S_SETNS, line)))
                return -1;
            x->s = cur(P)->s;
            adv(P);
            adv(P);
            x->names = jar_alloc(P->a, sizeof *x->names);
            if (!x->names)
                return P->rc = ERR_NOMEM, -1;
            x->names[0] = cur(P)->s;
            x->n_names = 1;
            adv(P);
            if (expect_op(P, "=") || !(x->b = p_tuple(P, 1)))
                return -1;
        } else {
            if (!(x = nn(P, S_SET, line)) || p_targets(P, x))
                return -1;
            if (is_op(cur(P), "=")) {
                adv(P);
                if (!(x->b = p_tuple(P, 1)))
                    return -1;
            } else {
                static const char *const ends[] = {"endset", NULL};
                if (x->n_names != 1)
                    return p_fail(P, line, "a block set takes one name");
                x->k = S_SETBLOCK;
                if (p_block_end(P))
                    return -1;
                x->v = p_sub(P, ends, &x->n);
                if (P->rc)
                    return -1;
                adv(P);
            }
        }
    } else if (is_name(kw, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        if (cur(P)->k != TK_NAME)
            return p_fail(P, line, "expected a macro name");
        if (!(x = nn(P, S_MACRO, line)))
            return -1;
        x->s = cur(P)->s;
        adv(P);
        struct nvec params = {0};
        if (expect_op(P, "("))
            return -1;
        while (!is_op(cur(P), ")")) {
            if (params.n && expect_op(P, ","))
                { nv_free(&params); return -1; }
            if (cur(P)->k != TK_NAME)
                { nv_free(&params); return p_fail(P, cur(P)->line, "expected a parameter name"); }
            const struct jstr *pn = cur(P)->s;
            struct node *def = NULL;
            adv(P);
            if (is_op(cur(P), "=")) {
                adv(P);
                if (!(def = p_expr(P, 1)))
                    { nv_free(&params); return -1; }
            }
            if (nv_push(P, &params, def, pn))
                { nv_free(&params); return -1; }
        }
        adv(P);
        x->v2 = nv_done(P, &params);
        x->names = nv_names(P, &params);
        x->n2 = x->n_names = params.n;
        nv_free(&params);
        if (P->rc || p_block_end(P))
            return -1;
        x->v = p_sub(P, ends, &x->n);
        if (P->rc)
            return -1;
        adv(P);
    } else if (is_name(kw, "break") || is_name(kw, "continue")) {
        if (!(x = nn(P, is_name(kw, "break") ? S_BREAK : S_CONTINUE, line)))
            return -1;
    } else if (is_name(kw, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        struct node *base = nn(P, N_CONST, line);
        if (!base || !(x = nn(P, S_FILTERBLOCK, line)) || !(x->a = p_filter_one(P, base, line)))
            return -1;
        while (is_op(cur(P), "|")) {
            adv(P);
            if (!(x->a = p_filter_one(P, x->a, line)))
                return -1;
        }
        x->b = base;
        if (p_block_end(P))
            return -1;
        x->v = p_sub(P, ends, &x->n);
        if (P->rc)
            return -1;
        adv(P);
    } else if (is_name(kw, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        if (!(x = nn(P, S_BODY, line)) || p_block_end(P))
            return -1;
        x->v = p_sub(P, ends, &x->n);
        if (P->rc)
            return -1;
        adv(P);
    } else {
        return p_fail(P, line, "unknown or unsupported statement '%s'", kw->s->p);
    }
    if (p_block_end(P))
        return -1;
    return nv_push(P, out, x, NULL);
}

static int p_body(struct parser *P, struct nvec *out, const char *const *ends)
{
    for (;;) {
        struct token *t = cur(P);
        if (t->k == TK_EOF) {
            if (ends) {
                const char *const *e = ends;
                while (e[1] && strncmp(*e, "end", 3) != 0)
                    e++;
                return p_fail(P, t->line, "unexpected end of template, expected '%s'", *e);
            }
            return 0;
        }
        if (t->k == TK_DATA) {
            struct node *x = nn(P, S_DATA, t->line);
            if (!x)
                return -1;
            x->cv = mk_strp(t->s);
            adv(P);
            if (nv_push(P, out, x, NULL))
                return -1;
        } else if (t->k == TK_VBEGIN) {
            adv(P);
            struct node *x = nn(P, S_OUT, t->line);
            if (!x || !(x->a = p_tuple(P, 1)))
                return -1;
            if (cur(P)->k != TK_VEND)
                return p_fail(P, cur(P)->line, "expected end of print statement");
            adv(P);
            if (nv_push(P, out, x, NULL))
                return -1;
        } else if (t->k == TK_BBEGIN) {
            adv(P);
            struct token *name = cur(P);
            if (ends && name->k == TK_NAME)
                for (const char *const *e = ends; *e; e++)
                    if (is_name(name, *e))
                        return 0;
            if (name->k == TK_NAME && name->s->n > 3 && !memcmp(name->s->p, "end", 3))
                return p_fail(P, name->line, "unexpected '%s'", name->s->p);
            if (p_stmt(P, out))
                return -1;
        } else {
            return p_fail(P, t->line, "unexpected token");
        }
    }
}

int jinja_parse(const char *src, size_t len, struct jinja_tmpl **out, char *err, size_t errcap)
{
    if (err && errcap)
        err[0] = '\0';
    if (len > JINJA_MAX_SOURCE) {
        if (err && errcap)
            snprintf(err, errcap, "template of %zu bytes is over the %u-byte limit", len,
                     JINJA_MAX_SOURCE);
        return ERR_TOOBIG;
    }
    struct jinja_tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return ERR_NOMEM;
    t->a.cap = (size_t)JINJA_MAX_SOURCE * 64;
    /* jinja2 first turns \r\n and \r into \n and drops one final newline
     * (keep_trailing_newline=False) */
    char *norm = malloc(len + 1);
    if (!norm) {
        jinja_tmpl_free(t);
        return ERR_NOMEM;
    }
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
    struct lexer L = {.src = norm, .len = nl, .line = 1, .a = &t->a, .err = err, .errcap = errcap};
    int rc = 0;
    if (lex_all(&L)) {
        rc = L.rc ? L.rc : ERR_PARSE;
        goto out;
    }
    struct parser P = {.t = L.v, .n = L.n, .a = &t->a, .err = err, .errcap = errcap};
    struct nvec body = {0};
    if (p_body(&P, &body, NULL) == 0) {
        t->body = nv_done(&P, &body);
        t->n_body = body.n;
    }
    nv_free(&body);
    rc = P.rc;
out:
    free(L.v);
    free(norm);
    if (t->a.oom)
        rc = ERR_NOMEM;
    if (rc) {
        jinja_tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void jinja_tmpl_free(struct jinja_tmpl *t)
{
    if (!t)
        return;
    jar_release(&t->a);
    free(t);
}

/* ---- rendering: state, scopes, errors --------------------------------------- */

struct frame {
    struct frame *parent;
    size_t n, cap;
    const struct jstr **names;
    struct jv *vals;
};

struct rs {
    struct jinja_env *e;
    struct arena *a;
    struct buf *out;
    char *err;
    size_t errcap;
    int rc;
    long steps;
    int calls;
    int ctl;          /* 1: break, 2: continue pending */
    int edepth;       /* eval() recursion depth */
    const struct jstr *loop_name;
};

enum method {
    M_STARTSWITH = 1, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_COUNT, M_JOIN, M_SPLITLINES,
    M_ISDIGIT, M_ISALPHA, M_ISSPACE, M_FORMAT,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_CYCLE,
};

static const struct { const char *name; uint8_t id; } STR_METHODS[] = {
    {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH}, {"strip", M_STRIP},
    {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT}, {"rsplit", M_RSPLIT},
    {"replace", M_REPLACE}, {"upper", M_UPPER}, {"lower", M_LOWER}, {"title", M_TITLE},
    {"capitalize", M_CAPITALIZE}, {"find", M_FIND}, {"count", M_COUNT}, {"join", M_JOIN},
    {"splitlines", M_SPLITLINES}, {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA},
    {"isspace", M_ISSPACE}, {"format", M_FORMAT},
};

static int jr_fail(struct rs *R, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jl_set_fail(&R->rc, ERR_INVAL, R->err, R->errcap, line, fmt, ap);
    va_end(ap);
    return -1;
}

/* An allocation failed: out of memory, or over JINJA_MAX_MEMORY. */
static int jr_oom(struct rs *R, int line)
{
    if (R->a->oom == 2)
        return jr_fail(R, line, "template used more than %u bytes of memory", JINJA_MAX_MEMORY);
    if (R->rc == 0)
        R->rc = ERR_NOMEM;
    return -1;
}

static void *jr_alloc(struct rs *R, size_t n, int line)
{
    void *p = jar_alloc(R->a, n);
    if (!p)
        jr_oom(R, line);
    return p;
}

static int jr_step(struct rs *R, int line)
{
    if (++R->steps > JINJA_MAX_STEPS)
        return jr_fail(R, line, "template ran more than %d loop iterations and calls", JINJA_MAX_STEPS);
    return 0;
}

static struct frame *frame_new(struct rs *R, struct frame *parent, int line)
{
    struct frame *f = jr_alloc(R, sizeof *f, line);
    if (f) {
        memset(f, 0, sizeof *f);
        f->parent = parent;
    }
    return f;
}

static int frame_set(struct rs *R, struct frame *f, const struct jstr *name, struct jv v, int line)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->names[i]->n == name->n && !memcmp(f->names[i]->p, name->p, name->n)) {
            f->vals[i] = v;
            return 0;
        }
    if (f->n == f->cap) {
        void *names = f->names, *vals = f->vals;
        if (jar_grow_pair(R->a, f->n, &f->cap, 8, &names, sizeof *f->names, &vals, sizeof *f->vals))
            return jr_oom(R, line);
        f->names = names;
        f->vals = vals;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
    return 0;
}

static struct jv lookup(struct rs *R, struct frame *f, const struct jstr *name)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->names[i]->n == name->n && !memcmp(f->names[i]->p, name->p, name->n))
                return f->vals[i];
    struct jv *g = jv_dict_find_s(R->e->globals.u.d, name->p, name->n);
    if (g)
        return *g;
    static const struct { const char *n; uint8_t id; } B[] = {
        {"raise_exception", B_RAISE}, {"strftime_now", B_STRFTIME}, {"namespace", B_NAMESPACE},
        {"range", B_RANGE}, {"dict", B_DICT},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
        if (str_eq(name, B[i].n, strlen(B[i].n))) {
            struct jv v = mk(JV_FUNC);
            v.aux = B[i].id;
            return v;
        }
    struct jv u = mk(JV_UNDEF);
    u.x = name;
    return u;
}

/* ---- Python str() and repr() ------------------------------------------------ */

static void fmt_float(double f, char *o, size_t cap)
{
    if (isnan(f)) {
        snprintf(o, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(o, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24] = {0};
    size_t nd = 0;
    const char *s = tmp;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    while (*s && *s != 'e') {
        if (*s != '.')
            digits[nd++] = *s;
        s++;
    }
    int exp = (int)strtol(s + 1, NULL, 10);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    size_t k = 0;
    if (neg)
        o[k++] = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp < 0) {
            o[k++] = '0';
            o[k++] = '.';
            for (int i = -1; i > exp; i--)
                o[k++] = '0';
            for (size_t i = 0; i < nd; i++)
                o[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                o[k++] = (size_t)i < nd ? digits[i] : '0';
            o[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++)
                    o[k++] = digits[i];
            else
                o[k++] = '0';
        }
        o[k] = '\0';
    } else {
        o[k++] = digits[0];
        if (nd > 1) {
            o[k++] = '.';
            for (size_t i = 1; i < nd; i++)
                o[k++] = digits[i];
        }
        snprintf(o + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static int jr_put(struct rs *R, struct buf *b, const char *s, size_t n)
{
    int rc = buf_append(b, s, n);
    if (rc) {
        if (R->rc == 0)
            R->rc = rc;
        return -1;
    }
    return 0;
}

static int repr_into(struct rs *R, struct buf *b, struct jv v, int depth);

static int repr_str(struct rs *R, struct buf *b, const struct jstr *s)
{
    int has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (jr_put(R, b, &q, 1))
        return -1;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        char esc[8];
        const char *o = NULL;
        size_t n = 0;
        if (c == '\\') o = "\\\\", n = 2;
        else if (c == (unsigned char)q) o = q == '\'' ? "\\'" : "\\\"", n = 2;
        else if (c == '\n') o = "\\n", n = 2;
        else if (c == '\r') o = "\\r", n = 2;
        else if (c == '\t') o = "\\t", n = 2;
        else if (c < 0x20 || c == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            o = esc;
            n = 4;
        }
        if (o ? jr_put(R, b, o, n) : jr_put(R, b, s->p + i, 1))
            return -1;
    }
    return jr_put(R, b, &q, 1);
}

/* Python str(v) appended to b. */
static int jv_str_into(struct rs *R, struct buf *b, struct jv v, int depth)
{
    char tmp[48];
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jr_put(R, b, "None", 4);
    case JV_BOOL: return v.u.b ? jr_put(R, b, "True", 4) : jr_put(R, b, "False", 5);
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return jr_put(R, b, tmp, strlen(tmp));
    case JV_FLOAT:
        fmt_float(v.u.f, tmp, sizeof tmp);
        return jr_put(R, b, tmp, strlen(tmp));
    case JV_STR: return jr_put(R, b, v.u.s->p, v.u.s->n);
    default: return repr_into(R, b, v, depth);
    }
}

static int repr_into(struct rs *R, struct buf *b, struct jv v, int depth)
{
    if (depth > JINJA_MAX_DEPTH)
        return jr_put(R, b, "...", 3);
    switch (v.t) {
    case JV_STR: return repr_str(R, b, v.u.s);
    case JV_LIST:
    case JV_TUPLE: {
        int tup = v.t == JV_TUPLE;
        if (jr_put(R, b, tup ? "(" : "[", 1))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++)
            if ((i && jr_put(R, b, ", ", 2)) || repr_into(R, b, v.u.l->v[i], depth + 1))
                return -1;
        if (tup && v.u.l->n == 1 && jr_put(R, b, ",", 1))
            return -1;
        return jr_put(R, b, tup ? ")" : "]", 1);
    }
    case JV_DICT:
    case JV_NS: {
        if ((v.t == JV_NS && jr_put(R, b, "<Namespace ", 11)) || jr_put(R, b, "{", 1))
            return -1;
        for (size_t i = 0; i < v.u.d->n; i++)
            if ((i && jr_put(R, b, ", ", 2)) || repr_into(R, b, v.u.d->k[i], depth + 1) ||
                jr_put(R, b, ": ", 2) || repr_into(R, b, v.u.d->v[i], depth + 1))
                return -1;
        return jr_put(R, b, "}", 1) || (v.t == JV_NS && jr_put(R, b, ">", 1)) ? -1 : 0;
    }
    case JV_UNDEF: return 0;
    case JV_MACRO: {
        const struct jmacro *m = v.u.p;
        return jr_put(R, b, "<Macro '", 8) || jr_put(R, b, m->def->s->p, m->def->s->n) ||
               jr_put(R, b, "'>", 2) ? -1 : 0;
    }
    case JV_FUNC:
    case JV_BOUND: return jr_put(R, b, "<function>", 10);
    case JV_LOOP: return jr_put(R, b, "<LoopContext>", 13);
    default: return jv_str_into(R, b, v, depth);
    }
}

/* str(v) as a string value (strings are returned as they are). */
static int jv_to_str(struct rs *R, struct jv v, const struct jstr **out, int line)
{
    if (v.t == JV_STR) {
        *out = v.u.s;
        return 0;
    }
    struct buf b;
    buf_init(&b, R->out->max_bytes);
    if (jv_str_into(R, &b, v, 0)) {
        buf_release(&b);
        if (R->rc == ERR_TOOBIG)
            R->rc = 0, jr_fail(R, line, "string too long");
        return -1;
    }
    struct jstr *s = jar_str(R->a, b.data ? b.data : "", b.len);
    buf_release(&b);
    if (!s)
        return jr_oom(R, line);
    *out = s;
    return 0;
}

static struct jv jv_new_str(struct rs *R, const char *s, size_t n, int line)
{
    struct jstr *j = jar_str(R->a, s, n);
    if (!j) {
        jr_oom(R, line);
        return mk(JV_UNDEF);
    }
    return mk_strp(j);
}

/* ---- value semantics -------------------------------------------------------- */

static int jv_truthy(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->n != 0;
    case JV_LIST:
    case JV_TUPLE: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(struct jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct jv v) { return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? v.u.b : 0; }

static int v_eq_d(struct jv a, struct jv b, int depth);
static int jv_eq(struct jv a, struct jv b) { return v_eq_d(a, b, 0); }

/* Python ==; containers nested deeper than JINJA_MAX_DEPTH compare by identity. */
static int v_eq_d(struct jv a, struct jv b, int depth)
{
    if (is_num(a) && is_num(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    int la = a.t == JV_LIST || a.t == JV_TUPLE, lb = b.t == JV_LIST || b.t == JV_TUPLE;
    if (la && lb) {
        if (a.t != b.t || a.u.l->n != b.u.l->n)
            return 0;
        if (depth > JINJA_MAX_DEPTH)
            return a.u.l == b.u.l;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!v_eq_d(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return 0;
        return 1;
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return 0;
        if (depth > JINJA_MAX_DEPTH)
            return a.u.d == b.u.d;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jv_dict_find(b.u.d, a.u.d->k[i]);
            if (!o || !v_eq_d(a.u.d->v[i], *o, depth + 1))
                return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.aux == b.aux;
    default: return a.u.p == b.u.p;
    }
}

static const char *jv_type_name(struct jv v)
{
    static const char *n[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                              "dict", "Namespace", "Macro", "function", "method", "LoopContext",
                              "tuple"};
    return v.t < sizeof n / sizeof n[0] ? n[v.t] : "object";
}

static int v_lt_d(struct rs *R, struct jv a, struct jv b, int line, int depth);

/* Python's <: -1 error, else 0/1 for a < b. */
static int jv_lt(struct rs *R, struct jv a, struct jv b, int line) { return v_lt_d(R, a, b, line, 0); }

static int v_lt_d(struct rs *R, struct jv a, struct jv b, int line, int depth)
{
    if (is_num(a) && is_num(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT)
            return num_f(a) < num_f(b);
        return num_i(a) < num_i(b);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        return c < 0 || (c == 0 && a.u.s->n < b.u.s->n);
    }
    if ((a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        if (depth > JINJA_MAX_DEPTH)
            return jr_fail(R, line, "comparison nested too deeply");
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return v_lt_d(R, a.u.l->v[i], b.u.l->v[i], line, depth + 1);
        }
        return a.u.l->n < b.u.l->n;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return jr_fail(R, line, "'%s' is undefined",
                    a.t == JV_UNDEF ? (a.x ? ((const struct jstr *)a.x)->p : "value")
                                    : (b.x ? ((const struct jstr *)b.x)->p : "value"));
    return jr_fail(R, line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                jv_type_name(b));
}

static int jv_undef_fail(struct rs *R, struct jv u, int line)
{
    const struct jstr *name = u.x;
    if (name)
        return jr_fail(R, line, "'%s' is undefined", name->p);
    return jr_fail(R, line, "value is undefined");
}

/* Code point offsets of a string: off[i] is the byte offset of char i, off[n] = bytes. */
static size_t *cp_offsets(struct rs *R, const struct jstr *s, size_t *n, int line)
{
    size_t k = u8count(s->p, s->n);
    size_t *off = jr_alloc(R, (k + 1) * sizeof *off, line);
    if (!off)
        return NULL;
    size_t i = 0, j = 0;
    while (i < s->n) {
        off[j++] = i;
        i += u8len((const unsigned char *)s->p + i, s->n - i);
    }
    off[j] = s->n;
    *n = k;
    return off;
}

/* `needle in hay`: -1 error, else 0/1. */
static int jv_in(struct rs *R, struct jv needle, struct jv hay, int line)
{
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR)
            return jr_fail(R, line, "'in <string>' requires string as left operand, not %s",
                        jv_type_name(needle));
        if (needle.u.s->n == 0)
            return 1;
        if (needle.u.s->n > hay.u.s->n)
            return 0;
        for (size_t i = 0; i + needle.u.s->n <= hay.u.s->n; i++)
            if (!memcmp(hay.u.s->p + i, needle.u.s->p, needle.u.s->n))
                return 1;
        return 0;
    case JV_LIST:
    case JV_TUPLE:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(needle, hay.u.l->v[i]))
                return 1;
        return 0;
    case JV_DICT:
        return jv_dict_find(hay.u.d, needle) != NULL;
    case JV_UNDEF:
        return 0;
    default:
        return jr_fail(R, line, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

/* Items of an iterable as a list value (dict: keys; string: characters). */
static int jv_iter(struct rs *R, struct jv v, struct jv *out, int line)
{
    switch (v.t) {
    case JV_LIST:
    case JV_TUPLE:
        *out = v;
        return 0;
    case JV_UNDEF:
        *out = jv_new_list(R->a, JV_LIST);
        return out->t == JV_LIST ? 0 : jr_oom(R, line);
    case JV_DICT: {
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t != JV_LIST)
            return jr_oom(R, line);
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_list_push(R->a, out->u.l, v.u.d->k[i]))
                return jr_oom(R, line);
        return 0;
    }
    case JV_STR: {
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t != JV_LIST)
            return jr_oom(R, line);
        const struct jstr *s = v.u.s;
        for (size_t i = 0; i < s->n;) {
            size_t l = u8len((const unsigned char *)s->p + i, s->n - i);
            struct jv c = jv_new_str(R, s->p + i, l, line);
            if (c.t == JV_UNDEF || jv_list_push(R->a, out->u.l, c))
                return jr_oom(R, line);
            i += l;
        }
        return 0;
    }
    default:
        return jr_fail(R, line, "'%s' object is not iterable", jv_type_name(v));
    }
}

static struct jv mk_bound(struct rs *R, struct jv self, uint8_t m, int line)
{
    struct jv *p = jr_alloc(R, sizeof *p, line);
    if (!p)
        return mk(JV_UNDEF);
    *p = self;
    struct jv b = mk(JV_BOUND);
    b.aux = m;
    b.x = p;
    return b;
}

/* obj.name (jinja2's sandboxed getattr: attribute first, then item). */
static int jv_getattr(struct rs *R, struct jv o, const char *name, size_t n, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    switch (o.t) {
    case JV_UNDEF:
        return jv_undef_fail(R, o, line);
    case JV_DICT: {
        static const struct { const char *n; uint8_t m; } DM[] = {
            {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}};
        for (size_t i = 0; i < sizeof DM / sizeof DM[0]; i++)
            if (strlen(DM[i].n) == n && !memcmp(DM[i].n, name, n)) {
                *out = mk_bound(R, o, DM[i].m, line);
                return R->rc ? -1 : 0;
            }
        struct jv *v = jv_dict_find_s(o.u.d, name, n);
        if (v)
            *out = *v;
        return 0;
    }
    case JV_NS: {
        struct jv *v = jv_dict_find_s(o.u.d, name, n);
        if (v)
            *out = *v;
        return 0;
    }
    case JV_STR:
        for (size_t i = 0; i < sizeof STR_METHODS / sizeof STR_METHODS[0]; i++)
            if (strlen(STR_METHODS[i].name) == n && !memcmp(STR_METHODS[i].name, name, n)) {
                *out = mk_bound(R, o, STR_METHODS[i].id, line);
                return R->rc ? -1 : 0;
            }
        return 0;
    case JV_LOOP: {
        const struct jloop *L = o.u.p;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
        if (IS("index")) *out = mk_int(L->index0 + 1);
        else if (IS("index0")) *out = mk_int(L->index0);
        else if (IS("revindex")) *out = mk_int(L->length - L->index0);
        else if (IS("revindex0")) *out = mk_int(L->length - L->index0 - 1);
        else if (IS("first")) *out = jinja_bool(L->index0 == 0);
        else if (IS("last")) *out = jinja_bool(L->index0 == L->length - 1);
        else if (IS("length")) *out = mk_int(L->length);
        else if (IS("depth")) *out = mk_int(1);
        else if (IS("depth0")) *out = mk_int(0);
        else if (IS("previtem")) { if (L->index0 > 0) *out = L->items[L->index0 - 1]; }
        else if (IS("nextitem")) { if (L->index0 + 1 < L->length) *out = L->items[L->index0 + 1]; }
        else if (IS("cycle")) *out = mk_bound(R, o, M_CYCLE, line);
#undef IS
        return R->rc ? -1 : 0;
    }
    default:
        return 0;
    }
}

/* obj[key] (jinja2's getitem: item first, then attribute for string keys). */
static int jv_getitem(struct rs *R, struct jv o, struct jv k, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    switch (o.t) {
    case JV_UNDEF:
        return jv_undef_fail(R, o, line);
    case JV_DICT: {
        struct jv *v = jv_dict_find(o.u.d, k);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case JV_LIST:
    case JV_TUPLE:
        if (k.t == JV_INT || k.t == JV_BOOL) {
            int64_t i = num_i(k), n = (int64_t)o.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                *out = o.u.l->v[i];
            return 0;
        }
        break;
    case JV_STR:
        if (k.t == JV_INT || k.t == JV_BOOL) {
            size_t n;
            size_t *off = cp_offsets(R, o.u.s, &n, line);
            if (!off)
                return -1;
            int64_t i = num_i(k);
            if (i < 0)
                i += (int64_t)n;
            if (i >= 0 && i < (int64_t)n)
                *out = jv_new_str(R, o.u.s->p + off[i], off[i + 1] - off[i], line);
            return R->rc ? -1 : 0;
        }
        break;
    default:
        break;
    }
    if (k.t == JV_STR)
        return jv_getattr(R, o, k.u.s->p, k.u.s->n, out, line);
    return 0;
}

/* Python slice index normalisation for length n. */
static void slice_ix(int64_t n, int has_a, int64_t a, int has_b, int64_t b, int64_t st,
                     int64_t *start, int64_t *stop)
{
    if (st > 0) {
        *start = !has_a ? 0 : a < 0 ? (a + n < 0 ? 0 : a + n) : (a > n ? n : a);
        *stop = !has_b ? n : b < 0 ? (b + n < 0 ? 0 : b + n) : (b > n ? n : b);
    } else {
        *start = !has_a ? n - 1 : a < 0 ? (a + n < 0 ? -1 : a + n) : (a >= n ? n - 1 : a);
        *stop = !has_b ? -1 : b < 0 ? (b + n < 0 ? -1 : b + n) : (b >= n ? n - 1 : b);
    }
}

static int jv_slice(struct rs *R, struct jv o, struct jv *parts, int *has, struct jv *out, int line)
{
    int64_t ix[3] = {0, 0, 1};
    for (int i = 0; i < 3; i++) {
        if (!has[i])
            continue;
        if (parts[i].t == JV_NONE) {
            has[i] = 0;
            continue;
        }
        if (parts[i].t != JV_INT && parts[i].t != JV_BOOL)
            return jr_fail(R, line, "slice indices must be integers or None");
        ix[i] = num_i(parts[i]);
    }
    int64_t st = has[2] ? ix[2] : 1;
    if (st == 0)
        return jr_fail(R, line, "slice step cannot be zero");
    if (o.t == JV_UNDEF)
        return jv_undef_fail(R, o, line);
    size_t n = 0, *off = NULL;
    if (o.t == JV_STR) {
        if (!(off = cp_offsets(R, o.u.s, &n, line)))
            return -1;
    } else if (o.t == JV_LIST || o.t == JV_TUPLE) {
        n = o.u.l->n;
    } else {
        *out = mk(JV_UNDEF);
        return 0;
    }
    int64_t a, b;
    slice_ix((int64_t)n, has[0], ix[0], has[1], ix[1], st, &a, &b);
    if (o.t == JV_STR) {
        struct buf sb;
        buf_init(&sb, o.u.s->n);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
            if (jr_put(R, &sb, o.u.s->p + off[i], off[i + 1] - off[i])) {
                buf_release(&sb);
                return -1;
            }
        *out = jv_new_str(R, sb.data ? sb.data : "", sb.len, line);
        buf_release(&sb);
        return R->rc ? -1 : 0;
    }
    *out = jv_new_list(R->a, o.t);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        if (jv_list_push(R->a, out->u.l, o.u.l->v[i]))
            return jr_oom(R, line);
    return 0;
}

/* ---- arithmetic --------------------------------------------------------------- */

static int jv_arith(struct rs *R, uint8_t op, struct jv a, struct jv b, struct jv *out, int line)
{
    if (op == OP_CONCAT) {
        const struct jstr *x, *y;
        if (jv_to_str(R, a, &x, line) || jv_to_str(R, b, &y, line))
            return -1;
        struct jstr *j = jar_alloc(R->a, sizeof *j + x->n + y->n + 1);
        if (!j)
            return jr_oom(R, line);
        memcpy(j->p, x->p, x->n);
        memcpy(j->p + x->n, y->p, y->n + 1);
        j->n = x->n + y->n;
        *out = mk_strp(j);
        return 0;
    }
    if (a.t == JV_UNDEF)
        return jv_undef_fail(R, a, line);
    if (b.t == JV_UNDEF)
        return jv_undef_fail(R, b, line);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        if (a.u.s->n + b.u.s->n > R->out->max_bytes)
            return jr_fail(R, line, "string too long");
        struct jstr *j = jar_alloc(R->a, sizeof *j + a.u.s->n + b.u.s->n + 1);
        if (!j)
            return jr_oom(R, line);
        memcpy(j->p, a.u.s->p, a.u.s->n);
        memcpy(j->p + a.u.s->n, b.u.s->p, b.u.s->n + 1);
        j->n = a.u.s->n + b.u.s->n;
        *out = mk_strp(j);
        return 0;
    }
    if (op == OP_ADD && (a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t) {
        *out = jv_new_list(R->a, a.t);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (size_t i = 0; i < a.u.l->n; i++)
            if (jv_list_push(R->a, out->u.l, a.u.l->v[i]))
                return jr_oom(R, line);
        for (size_t i = 0; i < b.u.l->n; i++)
            if (jv_list_push(R->a, out->u.l, b.u.l->v[i]))
                return jr_oom(R, line);
        return 0;
    }
    if (op == OP_MUL && ((a.t == JV_STR && (b.t == JV_INT || b.t == JV_BOOL)) ||
                         (b.t == JV_STR && (a.t == JV_INT || a.t == JV_BOOL)))) {
        const struct jstr *s = a.t == JV_STR ? a.u.s : b.u.s;
        int64_t k = a.t == JV_STR ? num_i(b) : num_i(a);
        if (k < 0)
            k = 0;
        if (s->n && (uint64_t)k > R->out->max_bytes / s->n)
            return jr_fail(R, line, "string too long");
        struct buf sb;
        buf_init(&sb, R->out->max_bytes);
        for (int64_t i = 0; i < k; i++)
            if (jr_put(R, &sb, s->p, s->n)) {
                buf_release(&sb);
                return -1;
            }
        *out = jv_new_str(R, sb.data ? sb.data : "", sb.len, line);
        buf_release(&sb);
        return R->rc ? -1 : 0;
    }
    if (!is_num(a) || !is_num(b))
        return jr_fail(R, line, "unsupported operand types for arithmetic: '%s' and '%s'",
                    jv_type_name(a), jv_type_name(b));
    int fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    if (op == OP_DIV || (fl && op != OP_FLOORDIV && op != OP_MOD)) {
        double x = num_f(a), y = num_f(b), r;
        switch (op) {
        case OP_ADD: r = x + y; break;
        case OP_SUB: r = x - y; break;
        case OP_MUL: r = x * y; break;
        case OP_POW: r = pow(x, y); break;
        default:
            if (y == 0)
                return jr_fail(R, line, "division by zero");
            r = x / y;
        }
        *out = mk_float(r);
        return 0;
    }
    if (fl) {
        double x = num_f(a), y = num_f(b);
        if (y == 0)
            return jr_fail(R, line, "float modulo or floor division by zero");
        double q = floor(x / y);
        *out = mk_float(op == OP_FLOORDIV ? q : x - q * y);
        return 0;
    }
    int64_t x = num_i(a), y = num_i(b), r = 0;
    int ovf = 0;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (y == 0)
            return jr_fail(R, line, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = 1;
            break;
        }
        r = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0)))
            r--;
        if (op == OP_MOD)
            r = x - r * y;
        break;
    case OP_POW:
        if (y < 0) {
            *out = mk_float(pow((double)x, (double)y));
            return 0;
        }
        r = 1;
        for (int64_t i = 0; i < y && !ovf; i++)
            ovf = __builtin_mul_overflow(r, x, &r);
        break;
    }
    if (ovf)
        return jr_fail(R, line, "integer overflow");
    *out = mk_int(r);
    return 0;
}

/* ---- tojson (HF: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)) -- */

struct jsonopt {
    int ensure_ascii, sort_keys, has_indent;
    const struct jstr *indent;     /* the indent text (spaces or a string) */
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
};

static int json_str(struct rs *R, struct buf *b, const char *s, size_t n, int ascii)
{
    if (jr_put(R, b, "\"", 1))
        return -1;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        const char *o = NULL;
        size_t on = 0, l = 1;
        if (c == '"') o = "\\\"", on = 2;
        else if (c == '\\') o = "\\\\", on = 2;
        else if (c == '\n') o = "\\n", on = 2;
        else if (c == '\r') o = "\\r", on = 2;
        else if (c == '\t') o = "\\t", on = 2;
        else if (c == '\b') o = "\\b", on = 2;
        else if (c == '\f') o = "\\f", on = 2;
        else if (c < 0x20 || (ascii && c == 0x7F)) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            o = esc;
            on = 6;
        } else if (ascii && c >= 0x80) {
            l = u8len((const unsigned char *)s + i, n - i);
            uint32_t cp = utf8_decode((const unsigned char *)s + i, l);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                on = 12;
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
                on = 6;
            }
            o = esc;
        }
        if (o ? jr_put(R, b, o, on) : jr_put(R, b, s + i, 1))
            return -1;
        i += l;
    }
    return jr_put(R, b, "\"", 1);
}

static int json_nl(struct rs *R, struct buf *b, const struct jsonopt *o, int level)
{
    if (jr_put(R, b, "\n", 1))
        return -1;
    for (int i = 0; i < level; i++)
        if (jr_put(R, b, o->indent->p, o->indent->n))
            return -1;
    return 0;
}

static int jv_json(struct rs *R, struct buf *b, struct jv v, const struct jsonopt *o, int level,
                     int line)
{
    char tmp[48];
    if (level > JINJA_MAX_DEPTH)
        return jr_fail(R, line, "tojson: value nested too deeply");
    switch (v.t) {
    case JV_NONE: return jr_put(R, b, "null", 4);
    case JV_BOOL: return v.u.b ? jr_put(R, b, "true", 4) : jr_put(R, b, "false", 5);
    case JV_INT:
    case JV_FLOAT:
        if (v.t == JV_FLOAT && isnan(v.u.f))
            snprintf(tmp, sizeof tmp, "NaN");
        else if (v.t == JV_FLOAT && isinf(v.u.f))
            snprintf(tmp, sizeof tmp, v.u.f < 0 ? "-Infinity" : "Infinity");
        else if (v.t == JV_FLOAT)
            fmt_float(v.u.f, tmp, sizeof tmp);
        else
            snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return jr_put(R, b, tmp, strlen(tmp));
    case JV_STR: return json_str(R, b, v.u.s->p, v.u.s->n, o->ensure_ascii);
    case JV_LIST:
    case JV_TUPLE:
        if (v.u.l->n == 0)
            return jr_put(R, b, "[]", 2);
        if (jr_put(R, b, "[", 1) || (o->has_indent && json_nl(R, b, o, level + 1)))
            return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && (jr_put(R, b, o->item_sep, o->item_sep_n) ||
                      (o->has_indent && json_nl(R, b, o, level + 1))))
                return -1;
            if (jv_json(R, b, v.u.l->v[i], o, level + 1, line))
                return -1;
        }
        if (o->has_indent && json_nl(R, b, o, level))
            return -1;
        return jr_put(R, b, "]", 1);
    case JV_DICT: {
        size_t n = v.u.d->n;
        if (n == 0)
            return jr_put(R, b, "{}", 2);
        size_t *ord = jr_alloc(R, n * sizeof *ord, line);
        if (!ord)
            return -1;
        for (size_t i = 0; i < n; i++)
            ord[i] = i;
        if (o->sort_keys)
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    int lt = jv_lt(R, v.u.d->k[ord[j]], v.u.d->k[ord[j - 1]], line);
                    if (lt < 0)
                        return -1;
                    if (!lt)
                        break;
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        if (jr_put(R, b, "{", 1) || (o->has_indent && json_nl(R, b, o, level + 1)))
            return -1;
        for (size_t i = 0; i < n; i++) {
            struct jv k = v.u.d->k[ord[i]];
            if (i && (jr_put(R, b, o->item_sep, o->item_sep_n) ||
                      (o->has_indent && json_nl(R, b, o, level + 1))))
                return -1;
            if (k.t == JV_STR) {
                if (json_str(R, b, k.u.s->p, k.u.s->n, o->ensure_ascii))
                    return -1;
            } else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                struct buf kb;
                buf_init(&kb, 64);
                int rc = jv_json(R, &kb, k, o, level + 1, line);
                if (rc == 0)
                    rc = json_str(R, b, kb.data, kb.len, 0);
                buf_release(&kb);
                if (rc)
                    return -1;
            } else {
                return jr_fail(R, line, "tojson: keys must be str, int, float, bool or None");
            }
            if (jr_put(R, b, o->key_sep, o->key_sep_n) ||
                jv_json(R, b, v.u.d->v[ord[i]], o, level + 1, line))
                return -1;
        }
        if (o->has_indent && json_nl(R, b, o, level))
            return -1;
        return jr_put(R, b, "}", 1);
    }
    default:
        return jr_fail(R, line, "tojson: object of type %s is not JSON serializable", jv_type_name(v));
    }
}

/* ---- calls: arguments ------------------------------------------------------- */

struct args {
    struct jv *pos;
    size_t n;
    const struct jstr **kn;
    struct jv *kv;
    size_t nk;
};

/* Argument i (positional) or name (keyword); 1 if given. */
static int jb_arg(const struct args *A, size_t i, const char *name, struct jv *out)
{
    if (i < A->n) {
        *out = A->pos[i];
        return 1;
    }
    for (size_t k = 0; name && k < A->nk; k++)
        if (str_eq(A->kn[k], name, strlen(name))) {
            *out = A->kv[k];
            return 1;
        }
    return 0;
}

static int eval(struct rs *R, const struct node *x, struct frame *f, struct jv *out);
static int exec_body(struct rs *R, struct node *const *v, size_t n, struct frame *f);
static int jb_filter(struct rs *R, int id, struct jv v, const struct args *A, struct jv *out,
                        int line, struct frame *f);
static int jb_test(struct rs *R, int id, struct jv v, const struct args *A, int line);

static int eval_args(struct rs *R, const struct node *x, struct frame *f, struct args *A)
{
    memset(A, 0, sizeof *A);
    if (x->n) {
        if (!(A->pos = jr_alloc(R, x->n * sizeof *A->pos, x->line)))
            return -1;
        for (size_t i = 0; i < x->n; i++)
            if (eval(R, x->v[i], f, &A->pos[i]))
                return -1;
        A->n = x->n;
    }
    if (x->n2) {
        if (!(A->kv = jr_alloc(R, x->n2 * sizeof *A->kv, x->line)))
            return -1;
        for (size_t i = 0; i < x->n2; i++)
            if (eval(R, x->v2[i], f, &A->kv[i]))
                return -1;
        A->kn = x->names;
        A->nk = x->n2;
    }
    return 0;
}

static int inset(const struct jstr *chars, const unsigned char *p, size_t l)
{
    for (size_t k = 0; k < chars->n;) {
        size_t cl = u8len((const unsigned char *)chars->p + k, chars->n - k);
        if (cl == l && !memcmp(chars->p + k, p, l))
            return 1;
        k += cl;
    }
    return 0;
}

/* str.strip family: which 1 left 2 right 3 both; chars NULL = whitespace. */
static struct jv jb_strip(struct rs *R, const struct jstr *s, const struct jstr *chars, int which,
                          int line)
{
    const char *b = s->p;
    size_t n = s->n;
    if (!chars) {
        utf8_py_strip(&b, &n, which);
        return jv_new_str(R, b, n, line);
    }
    const unsigned char *u = (const unsigned char *)b;
    size_t i = 0, end = n;
    if (which & 1)
        while (i < end) {
            size_t l = u8len(u + i, end - i);
            if (!inset(chars, u + i, l))
                break;
            i += l;
        }
    if (which & 2)
        while (end > i) {
            size_t k = end - 1;
            while (k > i && (u[k] & 0xC0) == 0x80)
                k--;
            if (!inset(chars, u + k, end - k))
                break;
            end = k;
        }
    return jv_new_str(R, b + i, end - i, line);
}

enum casing { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };

static struct jv jb_case(struct rs *R, const struct jstr *s, int how, int line)
{
    struct buf b;
    buf_init(&b, s->n * 2 + 16);
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s->n;) {
        size_t l = u8len((const unsigned char *)s->p + i, s->n - i);
        uint32_t c = l == 1 && (unsigned char)s->p[i] >= 0x80 ? 0xFFFD : utf8_decode((const unsigned char *)s->p + i, l);
        uint32_t o = c;
        int keep = l == 1 && (unsigned char)s->p[i] >= 0x80;
        int word_start = !prev_cased;
        switch (how) {
        case CASE_UPPER: o = cp_upper(c); break;
        case CASE_LOWER: o = cp_lower(c); break;
        case CASE_TITLE:
            o = prev_cased ? cp_lower(c) : cp_upper(c);
            prev_cased = cp_cased(c);
            break;
        case CASE_CAPITALIZE: o = first ? cp_upper(c) : cp_lower(c); break;
        case CASE_JTITLE: {
            /* jinja's title: words start after - whitespace ( { [ < */
            o = prev_cased ? cp_lower(c) : cp_upper(c);
            prev_cased = !(c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                           utf8_py_space((const unsigned char *)s->p + i, l));
            break;
        }
        }
        int upper_pos = how == CASE_UPPER || (how == CASE_CAPITALIZE && first) ||
                        ((how == CASE_TITLE || how == CASE_JTITLE) && word_start);
        if (c == 0xDF && upper_pos) { /* German sharp s: "SS" ("Ss" starting a word) */
            /* jinja's title filter upper()s the first character: "SS" */
            if (jr_put(R, &b, how == CASE_UPPER || how == CASE_JTITLE ? "SS" : "Ss", 2)) {
                buf_release(&b);
                return mk(JV_UNDEF);
            }
            first = 0;
            if (how == CASE_TITLE)
                prev_cased = 1;
            i += l;
            continue;
        }
        first = 0;
        char enc[4];
        size_t el = keep ? 1 : utf8_encode(o, enc);
        if (jr_put(R, &b, keep ? s->p + i : enc, el)) {
            buf_release(&b);
            return mk(JV_UNDEF);
        }
        i += l;
    }
    struct jv r = jv_new_str(R, b.data ? b.data : "", b.len, line);
    buf_release(&b);
    return r;
}

static struct jv jb_replace(struct rs *R, const struct jstr *s, const struct jstr *old,
                             const struct jstr *new_, int64_t count, int line)
{
    struct buf b;
    buf_init(&b, R->out->max_bytes);
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) {
        for (;;) {
            if ((count < 0 || done < count) && (jr_put(R, &b, new_->p, new_->n) || (done++, 0)))
                goto fail;
            if (i >= s->n)
                break;
            size_t l = u8len((const unsigned char *)s->p + i, s->n - i);
            if (jr_put(R, &b, s->p + i, l))
                goto fail;
            i += l;
        }
    } else {
        while (i < s->n) {
            if ((count < 0 || done < count) && i + old->n <= s->n && !memcmp(s->p + i, old->p, old->n)) {
                if (jr_put(R, &b, new_->p, new_->n))
                    goto fail;
                i += old->n;
                done++;
            } else {
                if (jr_put(R, &b, s->p + i, 1))
                    goto fail;
                i++;
            }
        }
    }
    struct jv r = jv_new_str(R, b.data ? b.data : "", b.len, line);
    buf_release(&b);
    return r;
fail:
    buf_release(&b);
    if (R->rc == ERR_TOOBIG)
        R->rc = 0, jr_fail(R, line, "string too long");
    return mk(JV_UNDEF);
}

/* Python str.split(sep=None, maxsplit=-1) and rsplit. */
static int str_split(struct rs *R, const struct jstr *s, const struct jstr *sep, int64_t maxsplit,
                     int right, struct jv *out, int line)
{
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    struct jlist *l = out->u.l;
    if (sep && sep->n == 0)
        return jr_fail(R, line, "empty separator");
    /* collect pieces left to right, then (for rsplit with a limit) re-join the head */
    size_t cap = 16, n = 0;
    size_t *st = malloc(cap * sizeof *st), *en = malloc(cap * sizeof *en);
    int rc = 0;
    if (!st || !en)
        goto nomem;
    size_t i = 0;
    if (!sep) {
        for (;;) {
            size_t w;
            while (i < s->n && (w = utf8_py_space((const unsigned char *)s->p + i, s->n - i)))
                i += w;
            if (i >= s->n)
                break;
            size_t b = i;
            while (i < s->n && !utf8_py_space((const unsigned char *)s->p + i, s->n - i))
                i += u8len((const unsigned char *)s->p + i, s->n - i);
            if (n == cap) {
                cap *= 2;
                size_t *a = realloc(st, cap * sizeof *st), *c = a ? realloc(en, cap * sizeof *en) : NULL;
                if (a) st = a;
                if (c) en = c;
                if (!a || !c)
                    goto nomem;
            }
            st[n] = b;
            en[n++] = i;
        }
    } else {
        size_t b = 0;
        while (i + sep->n <= s->n) {
            if (!memcmp(s->p + i, sep->p, sep->n)) {
                if (n == cap) {
                    cap *= 2;
                    size_t *a = realloc(st, cap * sizeof *st), *c = a ? realloc(en, cap * sizeof *en) : NULL;
                    if (a) st = a;
                    if (c) en = c;
                    if (!a || !c)
                        goto nomem;
                }
                st[n] = b;
                en[n++] = i;
                i += sep->n;
                b = i;
            } else {
                i++;
            }
        }
        if (n == cap) {
            cap++;
            size_t *a = realloc(st, cap * sizeof *st), *c = a ? realloc(en, cap * sizeof *en) : NULL;
            if (a) st = a;
            if (c) en = c;
            if (!a || !c)
                goto nomem;
        }
        st[n] = b;
        en[n++] = s->n;
    }
    size_t lo = 0, hi = n;    /* pieces [lo, hi) kept separate */
    int join_head = 0, join_tail = 0;
    if (maxsplit >= 0 && (size_t)maxsplit + 1 < n) {
        if (right) {
            lo = n - (size_t)maxsplit;
            join_head = 1;
        } else {
            hi = (size_t)maxsplit;
            join_tail = 1;
        }
    }
    if (join_head && n) {
        /* rsplit: the head is everything up to the end of piece lo-1 (whitespace mode: from its start) */
        size_t b0 = 0;
        struct jv v = jv_new_str(R, s->p + b0, en[lo - 1] - b0, line);
        if (v.t == JV_UNDEF || jv_list_push(R->a, l, v))
            goto nomem;
    }
    for (size_t k = lo; k < hi; k++) {
        struct jv v = jv_new_str(R, s->p + st[k], en[k] - st[k], line);
        if (v.t == JV_UNDEF || jv_list_push(R->a, l, v))
            goto nomem;
    }
    if (join_tail && hi < n) {
        size_t b0 = st[hi], e0 = s->n;
        struct jv v = jv_new_str(R, s->p + b0, e0 - b0, line);
        if (v.t == JV_UNDEF || jv_list_push(R->a, l, v))
            goto nomem;
    }
    goto done;
nomem:
    rc = jr_oom(R, line);
done:
    free(st);
    free(en);
    return rc;
}

static int jb_need_str(struct rs *R, struct jv v, const char *what, int line)
{
    if (v.t != JV_STR)
        return jr_fail(R, line, "%s: expected a string, got %s", what, jv_type_name(v));
    return 0;
}

static int jb_method(struct rs *R, struct jv self, int m, const struct args *A, struct jv *out,
                       int line)
{
    struct jv a0 = mk(JV_UNDEF), a1 = mk(JV_UNDEF), a2 = mk(JV_UNDEF);
    int h0 = jb_arg(A, 0, NULL, &a0), h1 = jb_arg(A, 1, NULL, &a1);
    (void)a2;
    *out = mk(JV_UNDEF);
    if (m >= M_GET) {
        if (m == M_CYCLE) {
            if (!A->n)
                return jr_fail(R, line, "no items for cycling given");
            const struct jloop *L = self.u.p;
            *out = A->pos[L->index0 % (int64_t)A->n];
            return 0;
        }
        const struct jdict *d = self.u.d;
        if (m == M_GET) {
            if (!h0)
                return jr_fail(R, line, "get expected at least 1 argument");
            struct jv *v = jv_dict_find(d, a0);
            *out = v ? *v : h1 ? a1 : mk(JV_NONE);
            return 0;
        }
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (size_t i = 0; i < d->n; i++) {
            struct jv it = m == M_KEYS ? d->k[i] : d->v[i];
            if (m == M_ITEMS) {
                it = jv_new_list(R->a, JV_TUPLE);
                if (it.t == JV_UNDEF || jv_list_push(R->a, it.u.l, d->k[i]) ||
                    jv_list_push(R->a, it.u.l, d->v[i]))
                    return jr_oom(R, line);
            }
            if (jv_list_push(R->a, out->u.l, it))
                return jr_oom(R, line);
        }
        return 0;
    }
    const struct jstr *s = self.u.s;
    switch (m) {
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if (!h0)
            return jr_fail(R, line, "startswith/endswith takes one argument");
        struct jv one[1] = {a0};
        const struct jv *cands = one;
        size_t nc = 1;
        if (a0.t == JV_TUPLE || a0.t == JV_LIST) {
            cands = a0.u.l->v;
            nc = a0.u.l->n;
        }
        int hit = 0;
        for (size_t i = 0; i < nc && !hit; i++) {
            if (jb_need_str(R, cands[i], "startswith/endswith", line))
                return -1;
            const struct jstr *p = cands[i].u.s;
            if (p->n <= s->n)
                hit = m == M_STARTSWITH ? !memcmp(s->p, p->p, p->n)
                                        : !memcmp(s->p + s->n - p->n, p->p, p->n);
        }
        *out = jinja_bool(hit);
        return 0;
    }
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        const struct jstr *chars = NULL;
        if (h0 && a0.t != JV_NONE) {
            if (jb_need_str(R, a0, "strip", line))
                return -1;
            chars = a0.u.s;
        }
        *out = jb_strip(R, s, chars, m == M_STRIP ? 3 : m == M_LSTRIP ? 1 : 2, line);
        break;
    }
    case M_SPLIT:
    case M_RSPLIT: {
        struct jv sep = mk(JV_NONE), ms = mk_int(-1);
        jb_arg(A, 0, "sep", &sep);
        jb_arg(A, 1, "maxsplit", &ms);
        if (sep.t != JV_NONE && jb_need_str(R, sep, "split", line))
            return -1;
        if (ms.t != JV_INT)
            return jr_fail(R, line, "split: maxsplit must be an integer");
        return str_split(R, s, sep.t == JV_STR ? sep.u.s : NULL, ms.u.i, m == M_RSPLIT, out, line);
    }
    case M_REPLACE: {
        struct jv cnt = mk_int(-1);
        jb_arg(A, 2, "count", &cnt);
        if (!h0 || !h1 || jb_need_str(R, a0, "replace", line) || jb_need_str(R, a1, "replace", line))
            return R->rc ? -1 : jr_fail(R, line, "replace takes two strings");
        *out = jb_replace(R, s, a0.u.s, a1.u.s, cnt.t == JV_INT ? cnt.u.i : -1, line);
        break;
    }
    case M_UPPER: *out = jb_case(R, s, CASE_UPPER, line); break;
    case M_LOWER: *out = jb_case(R, s, CASE_LOWER, line); break;
    case M_TITLE: *out = jb_case(R, s, CASE_TITLE, line); break;
    case M_CAPITALIZE: *out = jb_case(R, s, CASE_CAPITALIZE, line); break;
    case M_FIND:
    case M_COUNT: {
        if (!h0 || jb_need_str(R, a0, "find/count", line))
            return R->rc ? -1 : jr_fail(R, line, "find/count takes a string");
        const struct jstr *p = a0.u.s;
        int64_t found = -1, cnt = 0;
        for (size_t i = 0; i + p->n <= s->n;) {
            if (!memcmp(s->p + i, p->p, p->n)) {
                if (found < 0)
                    found = (int64_t)u8count(s->p, i);
                cnt++;
                i += p->n ? p->n : 1;
            } else {
                i++;
            }
        }
        if (m == M_COUNT && p->n == 0)
            cnt = (int64_t)u8count(s->p, s->n) + 1;
        *out = mk_int(m == M_FIND ? found : cnt);
        return 0;
    }
    case M_JOIN: {
        struct jv items;
        if (!h0 || jv_iter(R, a0, &items, line))
            return R->rc ? -1 : jr_fail(R, line, "join takes an iterable");
        struct buf b;
        buf_init(&b, R->out->max_bytes);
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv it = items.u.l->v[i];
            if (it.t != JV_STR) {
                buf_release(&b);
                return jr_fail(R, line, "sequence item %zu: expected str instance, %s found", i,
                            jv_type_name(it));
            }
            if ((i && jr_put(R, &b, s->p, s->n)) || jr_put(R, &b, it.u.s->p, it.u.s->n)) {
                buf_release(&b);
                return -1;
            }
        }
        *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
        buf_release(&b);
        break;
    }
    case M_SPLITLINES: {
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        size_t b = 0;
        for (size_t i = 0; i < s->n;) {
            if (s->p[i] == '\n' || s->p[i] == '\r') {
                struct jv v = jv_new_str(R, s->p + b, i - b, line);
                if (v.t == JV_UNDEF || jv_list_push(R->a, out->u.l, v))
                    return jr_oom(R, line);
                i += (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n') ? 2 : 1;
                b = i;
            } else {
                i++;
            }
        }
        if (b < s->n) {
            struct jv v = jv_new_str(R, s->p + b, s->n - b, line);
            if (v.t == JV_UNDEF || jv_list_push(R->a, out->u.l, v))
                return jr_oom(R, line);
        }
        return 0;
    }
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISSPACE: {
        int ok = s->n > 0;
        for (size_t i = 0; i < s->n && ok; i++) {
            unsigned char c = (unsigned char)s->p[i];
            ok = m == M_ISDIGIT ? (c >= '0' && c <= '9')
               : m == M_ISALPHA ? ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80
               : utf8_py_space((const unsigned char *)s->p + i, s->n - i) > 0;
        }
        *out = jinja_bool(ok);
        return 0;
    }
    case M_FORMAT: { /* "{}", "{0}", "{name}", "{{", "}}"; no format specs */
        struct buf b;
        buf_init(&b, R->out->max_bytes);
        size_t auto_ix = 0;
        int rc = 0;
        for (size_t i = 0; i < s->n && !rc;) {
            char c = s->p[i];
            if ((c == '{' || c == '}') && i + 1 < s->n && s->p[i + 1] == c) {
                rc = jr_put(R, &b, &c, 1);
                i += 2;
            } else if (c == '{') {
                size_t j = i + 1;
                while (j < s->n && s->p[j] != '}')
                    j++;
                if (j >= s->n) {
                    rc = jr_fail(R, line, "single '{' encountered in format string");
                    break;
                }
                const char *fld = s->p + i + 1;
                size_t fl = j - i - 1;
                struct jv v = mk(JV_UNDEF);
                if (memchr(fld, ':', fl) || memchr(fld, '!', fl) || memchr(fld, '.', fl) ||
                    memchr(fld, '[', fl)) {
                    rc = jr_fail(R, line, "format: conversions and format specs are not supported");
                    break;
                }
                if (fl == 0 || isdigit_(fld[0])) {
                    size_t ix = fl == 0 ? auto_ix++ : (size_t)strtoul(fld, NULL, 10);
                    if (ix >= A->n) {
                        rc = jr_fail(R, line, "format: replacement index %zu out of range", ix);
                        break;
                    }
                    v = A->pos[ix];
                } else {
                    size_t k = 0;
                    while (k < A->nk && !(A->kn[k]->n == fl && !memcmp(A->kn[k]->p, fld, fl)))
                        k++;
                    if (k == A->nk) {
                        rc = jr_fail(R, line, "format: no argument named '%.*s'", (int)fl, fld);
                        break;
                    }
                    v = A->kv[k];
                }
                rc = jv_str_into(R, &b, v, 0);
                i = j + 1;
            } else if (c == '}') {
                rc = jr_fail(R, line, "single '}' encountered in format string");
            } else {
                rc = jr_put(R, &b, &c, 1);
                i++;
            }
        }
        if (!rc)
            *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
        buf_release(&b);
        if (rc)
            return -1;
        break;
    }
    default:
        return jr_fail(R, line, "unsupported method");
    }
    return R->rc ? -1 : 0;
}

/* ---- filters and tests ------------------------------------------------------ */

static int seq_len(struct rs *R, struct jv v, int64_t *n, int line)
{
    switch (v.t) {
    case JV_STR: *n = (int64_t)u8count(v.u.s->p, v.u.s->n); return 0;
    case JV_LIST:
    case JV_TUPLE: *n = (int64_t)v.u.l->n; return 0;
    case JV_DICT:
    case JV_NS: *n = (int64_t)v.u.d->n; return 0;
    case JV_UNDEF: *n = 0; return 0;
    default: return jr_fail(R, line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* An attribute path "a.b" of select/map/sort arguments. */
static int attr_path(struct rs *R, struct jv v, const struct jstr *path, struct jv *out, int line)
{
    size_t i = 0;
    *out = v;
    while (i <= path->n) {
        size_t j = i;
        while (j < path->n && path->p[j] != '.')
            j++;
        struct jv k = jv_new_str(R, path->p + i, j - i, line);
        if (k.t == JV_UNDEF)
            return -1;
        int all_digits = j > i;
        for (size_t q = i; q < j; q++)
            all_digits &= isdigit_(path->p[q]);
        if (all_digits)
            k = mk_int(strtoll(path->p + i, NULL, 10));
        if (out->t == JV_UNDEF)
            return 0;
        if (jv_getitem(R, *out, k, out, line))
            return -1;
        i = j + 1;
    }
    return 0;
}

static int filter_by_name(struct rs *R, const struct jstr *name, int *id, int test, int line)
{
    *id = test ? jb_test_find(name->p, name->n) : jb_filter_find(name->p, name->n);
    if (!*id)
        return jr_fail(R, line, "no %s named '%s'", test ? "test" : "filter", name->p);
    return 0;
}

/* select/reject/selectattr/rejectattr. */
static int do_select(struct rs *R, int id, struct jv seq, const struct args *A, struct jv *out, int line)
{
    int attr = id == F_SELECTATTR || id == F_REJECTATTR, want = id == F_SELECT || id == F_SELECTATTR;
    size_t k = 0;
    const struct jstr *path = NULL;
    if (attr) {
        if (A->n < 1 || A->pos[0].t != JV_STR)
            return jr_fail(R, line, "%s needs an attribute name", want ? "selectattr" : "rejectattr");
        path = A->pos[0].u.s;
        k = 1;
    }
    int test = 0;
    if (A->n > k) {
        if (A->pos[k].t != JV_STR)
            return jr_fail(R, line, "test name must be a string");
        if (filter_by_name(R, A->pos[k].u.s, &test, 1, line))
            return -1;
        k++;
    }
    struct args TA = {A->n > k ? A->pos + k : NULL, A->n > k ? A->n - k : 0, NULL, NULL, 0};
    struct jv items;
    if (!jv_truthy(seq)) /* jinja2: `if value:` before iterating */
        seq = mk(JV_UNDEF);
    if (jv_iter(R, seq, &items, line))
        return -1;
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    for (size_t i = 0; i < items.u.l->n; i++) {
        struct jv it = items.u.l->v[i], v = it;
        if (path && attr_path(R, it, path, &v, line))
            return -1;
        int r = test ? jb_test(R, test, v, &TA, line) : jv_truthy(v);
        if (r < 0)
            return -1;
        if (r == want && jv_list_push(R->a, out->u.l, it))
            return jr_oom(R, line);
    }
    return 0;
}

/* A numeric string as Python's int()/float() read it: surrounding whitespace
 * dropped, '_' allowed between digits, no hex (C's strtod would take it).
 * Writes a NUL-terminated copy into tmp; -1 if it cannot be a number. */
static int py_numstr(const struct jstr *s, char *tmp, size_t cap)
{
    const char *b = s->p;
    size_t n = s->n, k = 0;
    utf8_py_strip(&b, &n, UTF8_STRIP_BOTH);
    if (n == 0 || n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c == 'x' || c == 'X' || c == 'p' || c == 'P' || c == '(' || c == '\0')
            return -1;
        if (c == '_') {
            if (i == 0 || i + 1 >= n || !isdigit_(b[i - 1]) || !isdigit_(b[i + 1]))
                return -1;
            continue;
        }
        tmp[k++] = c;
    }
    tmp[k] = '\0';
    return 0;
}

static int to_int(struct rs *R, struct jv v, struct jv dflt, struct jv *out, int line)
{
    (void)line;
    (void)R;
    switch (v.t) {
    case JV_INT: *out = v; return 0;
    case JV_BOOL: *out = mk_int(v.u.b); return 0;
    case JV_FLOAT:
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
            *out = mk_int((int64_t)v.u.f);
            return 0;
        }
        break;
    case JV_STR: {
        char tmp[64];
        if (py_numstr(v.u.s, tmp, sizeof tmp) == 0) {
            char *end;
            errno = 0;
            long long i = strtoll(tmp, &end, 10);
            if (*end == 0 && end != tmp && errno == 0) {
                *out = mk_int(i);
                return 0;
            }
            double d = strtod(tmp, &end);
            if (*end == 0 && end != tmp && isfinite(d) && fabs(d) < 9.2e18) {
                *out = mk_int((int64_t)d);
                return 0;
            }
        }
        break;
    }
    default:
        break;
    }
    *out = dflt;
    return 0;
}

static int sort_items(struct rs *R, struct jv *v, size_t n, const struct jstr *attr, int reverse,
                      int case_sensitive, int line)
{
    struct jv *keys = jr_alloc(R, (n ? n : 1) * sizeof *keys, line);
    if (!keys)
        return -1;
    for (size_t i = 0; i < n; i++) {
        keys[i] = v[i];
        if (attr && attr_path(R, v[i], attr, &keys[i], line))
            return -1;
        if (!case_sensitive && keys[i].t == JV_STR)
            keys[i] = jb_case(R, keys[i].u.s, CASE_LOWER, line);
        if (R->rc)
            return -1;
    }
    for (size_t i = 1; i < n; i++) /* stable insertion sort */
        for (size_t j = i; j > 0; j--) {
            int lt = reverse ? jv_lt(R, keys[j - 1], keys[j], line) : jv_lt(R, keys[j], keys[j - 1], line);
            if (lt < 0)
                return -1;
            if (!lt)
                break;
            struct jv t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return 0;
}

static int copy_list(struct rs *R, struct jv items, struct jv *out, int line)
{
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    for (size_t i = 0; i < items.u.l->n; i++)
        if (jv_list_push(R->a, out->u.l, items.u.l->v[i]))
            return jr_oom(R, line);
    return 0;
}

static int jb_filter(struct rs *R, int id, struct jv v, const struct args *A, struct jv *out,
                        int line, struct frame *f)
{
    struct jv a0 = mk(JV_UNDEF), a1 = mk(JV_UNDEF);
    const struct jstr *s;
    (void)f;
    *out = mk(JV_UNDEF);
    switch (id) {
    case F_DEFAULT: {
        struct jv b = jinja_bool(0);
        if (!jb_arg(A, 0, "default_value", &a0))
            a0 = jv_new_str(R, "", 0, line);
        jb_arg(A, 1, "boolean", &b);
        *out = (v.t == JV_UNDEF || (jv_truthy(b) && !jv_truthy(v))) ? a0 : v;
        return R->rc ? -1 : 0;
    }
    case F_SAFE:
        *out = v;
        return 0;
    case F_LENGTH: {
        int64_t n = 0;
        if (seq_len(R, v, &n, line))
            return -1;
        *out = mk_int(n);
        return 0;
    }
    case F_TRIM:
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
    case F_TITLE:
    case F_STRING:
    case F_ESCAPE:
    case F_INDENT:
    case F_WORDCOUNT:
        if (jv_to_str(R, v, &s, line))
            return -1;
        if (id == F_TRIM) {
            const struct jstr *chars = NULL;
            if (jb_arg(A, 0, "chars", &a0) && a0.t != JV_NONE) {
                if (jb_need_str(R, a0, "trim", line))
                    return -1;
                chars = a0.u.s;
            }
            *out = jb_strip(R, s, chars, 3, line);
        } else if (id == F_UPPER) {
            *out = jb_case(R, s, CASE_UPPER, line);
        } else if (id == F_LOWER) {
            *out = jb_case(R, s, CASE_LOWER, line);
        } else if (id == F_CAPITALIZE) {
            *out = jb_case(R, s, CASE_CAPITALIZE, line);
        } else if (id == F_TITLE) {
            *out = jb_case(R, s, CASE_JTITLE, line);
        } else if (id == F_STRING) {
            *out = mk_strp(s);
        } else if (id == F_WORDCOUNT) {
            int64_t n = 0;
            int in = 0;
            for (size_t i = 0; i < s->n; i++) {
                unsigned char c = (unsigned char)s->p[i];
                int w = isdigit_((char)c) || isname0((char)c) || c >= 0x80;
                n += w && !in;
                in = w;
            }
            *out = mk_int(n);
        } else if (id == F_ESCAPE) {
            struct buf b;
            buf_init(&b, R->out->max_bytes);
            for (size_t i = 0; i < s->n; i++) {
                const char *r = NULL;
                switch (s->p[i]) {
                case '&': r = "&amp;"; break;
                case '<': r = "&lt;"; break;
                case '>': r = "&gt;"; break;
                case '"': r = "&#34;"; break;
                case '\'': r = "&#39;"; break;
                }
                if (r ? jr_put(R, &b, r, strlen(r)) : jr_put(R, &b, s->p + i, 1)) {
                    buf_release(&b);
                    return -1;
                }
            }
            *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
            buf_release(&b);
        } else { /* indent(width=4, first=False, blank=False) */
            struct jv w = mk_int(4), first = jinja_bool(0), blank = jinja_bool(0);
            jb_arg(A, 0, "width", &w);
            jb_arg(A, 1, "first", &first);
            jb_arg(A, 2, "blank", &blank);
            const struct jstr *ind;
            if (w.t == JV_INT) {
                int64_t k = w.u.i < 0 ? 0 : w.u.i > 1024 ? 1024 : w.u.i;
                char sp[1024];
                memset(sp, ' ', (size_t)k);
                struct jv t = jv_new_str(R, sp, (size_t)k, line);
                if (t.t == JV_UNDEF)
                    return -1;
                ind = t.u.s;
            } else if (jv_to_str(R, w, &ind, line)) {
                return -1;
            }
            /* jinja2: lines = (s + "\n").splitlines(); the first line is not indented,
             * empty ones only with blank=True */
            struct buf b;
            buf_init(&b, R->out->max_bytes);
            int rc = 0;
            if (jv_truthy(first))
                rc |= jr_put(R, &b, ind->p, ind->n);
            for (size_t i = 0, ln = 0; i <= s->n && !rc; ln++) {
                size_t j = i;
                while (j < s->n && s->p[j] != '\n')
                    j++;
                if (ln > 0) {
                    rc |= jr_put(R, &b, "\n", 1);
                    if (!rc && (j > i || jv_truthy(blank)))
                        rc |= jr_put(R, &b, ind->p, ind->n);
                }
                if (!rc)
                    rc |= jr_put(R, &b, s->p + i, j - i);
                i = j + 1;
            }
            if (!rc)
                *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
            buf_release(&b);
            if (rc)
                return -1;
        }
        return R->rc ? -1 : 0;
    case F_TOJSON: {
        struct jsonopt o = {0, 0, 0, NULL, ", ", ": ", 2, 2};
        struct jv ea = jinja_bool(0), ind = mk(JV_NONE), seps = mk(JV_NONE), sk = jinja_bool(0);
        jb_arg(A, 0, "ensure_ascii", &ea);
        jb_arg(A, 1, "indent", &ind);
        jb_arg(A, 2, "separators", &seps);
        jb_arg(A, 3, "sort_keys", &sk);
        o.ensure_ascii = jv_truthy(ea);
        o.sort_keys = jv_truthy(sk);
        if (ind.t != JV_NONE && ind.t != JV_UNDEF) {
            o.has_indent = 1;
            o.item_sep = ",";
            o.item_sep_n = 1;
            if (ind.t == JV_INT) {
                char sp[256];
                int64_t k = ind.u.i < 0 ? 0 : ind.u.i > 255 ? 255 : ind.u.i;
                memset(sp, ' ', (size_t)k);
                struct jv t = jv_new_str(R, sp, (size_t)k, line);
                if (t.t == JV_UNDEF)
                    return -1;
                o.indent = t.u.s;
            } else if (ind.t == JV_STR) {
                o.indent = ind.u.s;
            } else {
                return jr_fail(R, line, "tojson: indent must be an int or a string");
            }
        }
        if (seps.t == JV_LIST || seps.t == JV_TUPLE) {
            if (seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
                return jr_fail(R, line, "tojson: separators must be two strings");
            o.item_sep = seps.u.l->v[0].u.s->p;
            o.item_sep_n = seps.u.l->v[0].u.s->n;
            o.key_sep = seps.u.l->v[1].u.s->p;
            o.key_sep_n = seps.u.l->v[1].u.s->n;
        }
        struct buf b;
        buf_init(&b, R->out->max_bytes);
        int rc = jv_json(R, &b, v, &o, 0, line);
        if (rc == 0)
            *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
        buf_release(&b);
        return rc || R->rc ? -1 : 0;
    }
    case F_FIRST:
    case F_LAST: {
        if (v.t == JV_UNDEF)
            return 0;
        struct jv items;
        if (jv_iter(R, v, &items, line))
            return -1;
        if (items.u.l->n)
            *out = items.u.l->v[id == F_FIRST ? 0 : items.u.l->n - 1];
        return 0;
    }
    case F_JOIN: {
        struct jv sep = mk(JV_UNDEF), at = mk(JV_UNDEF), items;
        const struct jstr *ss = NULL;
        jb_arg(A, 0, "d", &sep);
        jb_arg(A, 1, "attribute", &at);
        if (sep.t != JV_UNDEF && jv_to_str(R, sep, &ss, line))
            return -1;
        if (jv_iter(R, v, &items, line))
            return -1;
        struct buf b;
        buf_init(&b, R->out->max_bytes);
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv it = items.u.l->v[i];
            if (at.t == JV_STR && attr_path(R, it, at.u.s, &it, line))
                goto join_fail;
            if (i && ss && jr_put(R, &b, ss->p, ss->n))
                goto join_fail;
            if (jv_str_into(R, &b, it, 0))
                goto join_fail;
        }
        *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
        buf_release(&b);
        return R->rc ? -1 : 0;
    join_fail:
        buf_release(&b);
        return -1;
    }
    case F_REPLACE: {
        struct jv cnt = mk(JV_NONE);
        if (jv_to_str(R, v, &s, line))
            return -1;
        if (!jb_arg(A, 0, "old", &a0) || !jb_arg(A, 1, "new", &a1))
            return jr_fail(R, line, "replace takes two arguments");
        const struct jstr *o, *n;
        if (jv_to_str(R, a0, &o, line) || jv_to_str(R, a1, &n, line))
            return -1;
        jb_arg(A, 2, "count", &cnt);
        *out = jb_replace(R, s, o, n, cnt.t == JV_INT ? cnt.u.i : -1, line);
        return R->rc ? -1 : 0;
    }
    case F_ITEMS:
        if (v.t == JV_UNDEF) {
            *out = jv_new_list(R->a, JV_LIST);
            return out->t == JV_UNDEF ? jr_oom(R, line) : 0;
        }
        if (v.t != JV_DICT)
            return jr_fail(R, line, "items: can only get item pairs from a mapping");
        return jb_method(R, v, M_ITEMS, A, out, line);
    case F_INT: {
        struct jv d = mk_int(0);
        jb_arg(A, 0, "default", &d);
        return to_int(R, v, d, out, line);
    }
    case F_FLOAT: {
        struct jv d = mk_float(0);
        jb_arg(A, 0, "default", &d);
        if (is_num(v))
            *out = mk_float(num_f(v));
        else if (v.t == JV_STR) {
            char tmp[64], *end;
            *out = d;
            if (py_numstr(v.u.s, tmp, sizeof tmp) == 0) {
                double x = strtod(tmp, &end);
                if (*end == 0 && end != tmp)
                    *out = mk_float(x);
            }
        } else
            *out = d;
        return 0;
    }
    case F_ABS:
        if (v.t == JV_INT) {
            if (v.u.i == INT64_MIN)
                return jr_fail(R, line, "integer overflow");
            *out = mk_int(v.u.i < 0 ? -v.u.i : v.u.i);
        } else if (v.t == JV_FLOAT || v.t == JV_BOOL) {
            *out = v.t == JV_BOOL ? mk_int(v.u.b) : mk_float(fabs(v.u.f));
        } else {
            return jr_fail(R, line, "bad operand type for abs(): '%s'", jv_type_name(v));
        }
        return 0;
    case F_ROUND: {
        struct jv prec = mk_int(0), method = mk(JV_UNDEF);
        jb_arg(A, 0, "precision", &prec);
        jb_arg(A, 1, "method", &method);
        if (!is_num(v))
            return jr_fail(R, line, "round: expected a number");
        double x = num_f(v), p = pow(10, (double)num_i(prec));
        double r = x * p;
        if (method.t == JV_STR && str_eq(method.u.s, "floor", 5)) r = floor(r);
        else if (method.t == JV_STR && str_eq(method.u.s, "ceil", 4)) r = ceil(r);
        else { /* Python's round(): the exact binary value, ties to even */
            char tmp[400];
            int digits = (int)(num_i(prec) < 0 ? 0 : num_i(prec) > 300 ? 300 : num_i(prec));
            snprintf(tmp, sizeof tmp, "%.*f", digits, x);
            *out = mk_float(strtod(tmp, NULL));
            return 0;
        }
        *out = mk_float(r / p);
        return 0;
    }
    case F_LIST: {
        struct jv items;
        if (jv_iter(R, v, &items, line))
            return -1;
        return copy_list(R, items, out, line);
    }
    case F_REVERSE:
        if (v.t == JV_STR) {
            struct jv p[3] = {mk(JV_NONE), mk(JV_NONE), mk_int(-1)};
            int has[3] = {1, 1, 1};
            return jv_slice(R, v, p, has, out, line);
        } else {
            struct jv items;
            if (jv_iter(R, v, &items, line))
                return -1;
            *out = jv_new_list(R->a, JV_LIST);
            if (out->t == JV_UNDEF)
                return jr_oom(R, line);
            for (size_t i = items.u.l->n; i-- > 0;)
                if (jv_list_push(R->a, out->u.l, items.u.l->v[i]))
                    return jr_oom(R, line);
            return 0;
        }
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
        return do_select(R, id, v, A, out, line);
    case F_MAP: {
        struct jv items, at = mk(JV_UNDEF), dflt = mk(JV_UNDEF);
        if (jv_iter(R, jv_truthy(v) ? v : mk(JV_UNDEF), &items, line))
            return -1;
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        int has_attr = jb_arg(A, (size_t)-1, "attribute", &at);
        jb_arg(A, (size_t)-1, "default", &dflt);
        int fid = 0;
        struct args FA = {0};
        if (!has_attr) {
            if (A->n < 1 || A->pos[0].t != JV_STR)
                return jr_fail(R, line, "map needs a filter name or attribute=");
            if (filter_by_name(R, A->pos[0].u.s, &fid, 0, line))
                return -1;
            FA.pos = A->pos + 1;
            FA.n = A->n - 1;
        } else if (at.t != JV_STR) {
            return jr_fail(R, line, "map: attribute must be a string");
        }
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv r;
            if (has_attr) {
                if (attr_path(R, items.u.l->v[i], at.u.s, &r, line))
                    return -1;
                if (r.t == JV_UNDEF && dflt.t != JV_UNDEF)
                    r = dflt;
            } else if (jb_filter(R, fid, items.u.l->v[i], &FA, &r, line, f)) {
                return -1;
            }
            if (jv_list_push(R->a, out->u.l, r))
                return jr_oom(R, line);
        }
        return 0;
    }
    case F_UNIQUE: {
        struct jv items, cs = jinja_bool(0), at = mk(JV_UNDEF);
        jb_arg(A, 0, "case_sensitive", &cs);
        jb_arg(A, 1, "attribute", &at);
        if (jv_iter(R, v, &items, line))
            return -1;
        struct jv keys = jv_new_list(R->a, JV_LIST);
        if (keys.t == JV_UNDEF)
            return jr_oom(R, line);
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv k = items.u.l->v[i];
            if (at.t == JV_STR && attr_path(R, k, at.u.s, &k, line))
                return -1;
            if (!jv_truthy(cs) && k.t == JV_STR && (k = jb_case(R, k.u.s, CASE_LOWER, line)).t == JV_UNDEF)
                return -1;
            int seen = 0;
            for (size_t j = 0; j < keys.u.l->n && !seen; j++)
                seen = jv_eq(keys.u.l->v[j], k);
            if (!seen && (jv_list_push(R->a, out->u.l, items.u.l->v[i]) || jv_list_push(R->a, keys.u.l, k)))
                return jr_oom(R, line);
        }
        return 0;
    }
    case F_SORT:
    case F_DICTSORT: {
        struct jv items, rev = jinja_bool(0), cs = jinja_bool(0), at = mk(JV_UNDEF);
        if (id == F_DICTSORT) {
            if (v.t != JV_DICT)
                return jr_fail(R, line, "dictsort: expected a mapping");
            if (jb_method(R, v, M_ITEMS, A, &items, line))
                return -1;
            jb_arg(A, 0, "case_sensitive", &cs);
            jb_arg(A, 2, "reverse", &rev);
            if (sort_items(R, items.u.l->v, items.u.l->n, NULL, jv_truthy(rev), jv_truthy(cs), line))
                return -1;
            *out = items;
            return 0;
        }
        jb_arg(A, 0, "reverse", &rev);
        jb_arg(A, 1, "case_sensitive", &cs);
        jb_arg(A, 2, "attribute", &at);
        if (jv_iter(R, v, &items, line) || copy_list(R, items, out, line))
            return -1;
        return sort_items(R, out->u.l->v, out->u.l->n, at.t == JV_STR ? at.u.s : NULL,
                          jv_truthy(rev), jv_truthy(cs), line);
    }
    case F_SUM:
    case F_MIN:
    case F_MAX: {
        struct jv items, at = mk(JV_UNDEF), acc = mk_int(0);
        if (jv_iter(R, v, &items, line))
            return -1;
        jb_arg(A, id == F_SUM ? 0 : 2, "attribute", &at);
        if (id == F_SUM)
            jb_arg(A, 1, "start", &acc);
        else
            acc = mk(JV_UNDEF);
        for (size_t i = 0; i < items.u.l->n; i++) {
            struct jv it = items.u.l->v[i];
            if (at.t == JV_STR && attr_path(R, it, at.u.s, &it, line))
                return -1;
            if (id == F_SUM) {
                if (jv_arith(R, OP_ADD, acc, it, &acc, line))
                    return -1;
            } else if (acc.t == JV_UNDEF) {
                acc = it;
            } else {
                int lt = jv_lt(R, it, acc, line);
                if (lt < 0)
                    return -1;
                if ((id == F_MIN) == (lt == 1) && !jv_eq(it, acc))
                    acc = it;
            }
        }
        *out = acc;
        return 0;
    }
    default:
        return jr_fail(R, line, "unsupported filter");
    }
}

static int number_test(struct rs *R, int id, struct jv v, const struct args *A, int line);

static int jb_test(struct rs *R, int id, struct jv v, const struct args *A, int line)
{
    if (id == T_ODD || id == T_EVEN || id == T_DIVISIBLEBY)
        return number_test(R, id, v, A, line);
    struct jv a = mk(JV_UNDEF);
    int has = jb_arg(A, 0, NULL, &a);
    switch (id) {
    case T_DEFINED: return v.t != JV_UNDEF;
    case T_UNDEFINED: return v.t == JV_UNDEF;
    case T_NONE: return v.t == JV_NONE;
    case T_STRING: return v.t == JV_STR;
    case T_MAPPING: return v.t == JV_DICT;
    case T_SEQUENCE: return v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT;
    case T_ITERABLE:
        return v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT || v.t == JV_UNDEF;
    case T_NUMBER: return is_num(v);
    case T_INTEGER: return v.t == JV_INT;
    case T_FLOAT: return v.t == JV_FLOAT;
    case T_BOOLEAN: return v.t == JV_BOOL;
    case T_TRUE: return v.t == JV_BOOL && v.u.b;
    case T_FALSE: return v.t == JV_BOOL && !v.u.b;
    case T_CALLABLE: return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_BOUND;
    case T_LOWER:
    case T_UPPER: {
        if (v.t != JV_STR)
            return 0;
        int cased = 0;
        for (size_t i = 0; i < v.u.s->n;) {
            size_t l = u8len((const unsigned char *)v.u.s->p + i, v.u.s->n - i);
            uint32_t c = utf8_decode((const unsigned char *)v.u.s->p + i, l);
            if (cp_cased(c)) {
                cased = 1;
                if (id == T_LOWER ? cp_lower(c) != c : cp_upper(c) != c)
                    return 0;
            }
            i += l;
        }
        return cased;
    }
    default:
        break;
    }
    if (!has)
        return jr_fail(R, line, "test takes an argument");
    switch (id) {
    case T_EQ: return jv_eq(v, a);
    case T_NE: return !jv_eq(v, a);
    case T_LT: return jv_lt(R, v, a, line);
    case T_GT: return jv_lt(R, a, v, line);
    case T_LE: {
        int r = jv_lt(R, a, v, line);
        return r < 0 ? -1 : !r;
    }
    case T_GE: {
        int r = jv_lt(R, v, a, line);
        return r < 0 ? -1 : !r;
    }
    case T_IN: return jv_in(R, v, a, line);
    case T_SAMEAS:
        if (v.t != a.t)
            return 0;
        if (v.t == JV_NONE || v.t == JV_UNDEF)
            return 1;
        if (v.t == JV_BOOL)
            return v.u.b == a.u.b;
        if (v.t == JV_INT)
            return v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
        return v.u.p == a.u.p;
    default:
        return jr_fail(R, line, "unsupported test");
    }
}

static int number_test(struct rs *R, int id, struct jv v, const struct args *A, int line)
{
    /* jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (Python %) */
    struct jv d = mk_int(2), r;
    if (id == T_DIVISIBLEBY && !jb_arg(A, 0, "num", &d))
        return jr_fail(R, line, "divisibleby takes a number");
    if (jv_arith(R, OP_MOD, v, d, &r, line))
        return -1;
    return jv_eq(r, mk_int(id == T_ODD ? 1 : 0));
}

/* ---- calls ------------------------------------------------------------------ */

static int emit(struct rs *R, const char *s, size_t n)
{
    int rc = buf_append(R->out, s, n);
    if (rc && R->rc == 0)
        R->rc = rc;
    return rc ? -1 : 0;
}

static int call_macro(struct rs *R, struct jv m, const struct args *A, struct jv *out, int line)
{
    const struct jmacro *mac = m.u.p;
    const struct node *d = mac->def;
    if (R->calls >= JINJA_MAX_CALL_DEPTH)
        return jr_fail(R, line, "macro calls nested more than %d deep", JINJA_MAX_CALL_DEPTH);
    if (jr_step(R, line))
        return -1;
    if (A->n > d->n_names)
        return jr_fail(R, line, "macro '%s' takes not more than %zu argument(s)", d->s->p, d->n_names);
    struct frame *f = frame_new(R, mac->scope, line);
    if (!f)
        return -1;
    for (size_t k = 0; k < A->nk; k++) {
        size_t i = 0;
        while (i < d->n_names && !(d->names[i]->n == A->kn[k]->n &&
                                   !memcmp(d->names[i]->p, A->kn[k]->p, A->kn[k]->n)))
            i++;
        if (i == d->n_names)
            return jr_fail(R, line, "macro '%s' has no argument named '%s'", d->s->p, A->kn[k]->p);
    }
    for (size_t i = 0; i < d->n_names; i++) {
        struct jv v = mk(JV_UNDEF);
        int given = jb_arg(A, i, d->names[i]->p, &v);
        if (!given && d->v2[i] && eval(R, d->v2[i], f, &v))
            return -1;
        if (!given && !d->v2[i])
            v.x = d->names[i];
        if (frame_set(R, f, d->names[i], v, line))
            return -1;
    }
    struct buf body, *saved = R->out;
    buf_init(&body, saved->max_bytes);
    R->out = &body;
    R->calls++;
    int rc = exec_body(R, d->v, d->n, f);
    R->calls--;
    R->out = saved;
    R->ctl = 0;
    if (rc == 0)
        *out = jv_new_str(R, body.data ? body.data : "", body.len, line);
    buf_release(&body);
    return rc || R->rc ? -1 : 0;
}

static int jb_global_call(struct rs *R, int id, const struct args *A, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF);
    int h0 = jb_arg(A, 0, NULL, &a0);
    *out = mk(JV_NONE);
    switch (id) {
    case B_RAISE: {
        const struct jstr *msg;
        if (jv_to_str(R, a0, &msg, line))
            return -1;
        if (R->rc == 0) {
            R->rc = ERR_INVAL;
            if (R->err && R->errcap)
                snprintf(R->err, R->errcap, "%s", msg->p);
        }
        return -1;
    }
    case B_STRFTIME: {
        if (!h0 || a0.t != JV_STR)
            return jr_fail(R, line, "strftime_now takes a format string");
        struct tm tm;
        char o[512];
        time_t now = R->e->now;
        if (!gmtime_r(&now, &tm))
            return jr_fail(R, line, "strftime_now: bad time");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = a0.u.s->n ? strftime(o, sizeof o, a0.u.s->p, &tm) : 0; /* the template's format */
#pragma GCC diagnostic pop
        *out = jv_new_str(R, o, n, line);
        return R->rc ? -1 : 0;
    }
    case B_NAMESPACE:
    case B_DICT: {
        *out = jv_new_dict(R->a, id == B_NAMESPACE ? JV_NS : JV_DICT);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        if (h0) {
            if (a0.t != JV_DICT || A->n > 1)
                return jr_fail(R, line, "%s() takes at most one mapping argument",
                            id == B_NAMESPACE ? "namespace" : "dict");
            for (size_t i = 0; i < a0.u.d->n; i++)
                if (jv_dict_set(R->a, out->u.d, a0.u.d->k[i], a0.u.d->v[i]))
                    return jr_oom(R, line);
        }
        for (size_t i = 0; i < A->nk; i++)
            if (jv_dict_set(R->a, out->u.d, mk_strp(A->kn[i]), A->kv[i]))
                return jr_oom(R, line);
        return 0;
    }
    case B_RANGE: {
        int64_t lo = 0, hi, st = 1;
        for (size_t i = 0; i < A->n; i++)
            if (A->pos[i].t != JV_INT && A->pos[i].t != JV_BOOL)
                return jr_fail(R, line, "range() takes integers");
        if (A->n == 1) {
            hi = num_i(A->pos[0]);
        } else if (A->n == 2 || A->n == 3) {
            lo = num_i(A->pos[0]);
            hi = num_i(A->pos[1]);
            if (A->n == 3)
                st = num_i(A->pos[2]);
        } else {
            return jr_fail(R, line, "range() takes 1 to 3 arguments");
        }
        if (st == 0)
            return jr_fail(R, line, "range() arg 3 must not be zero");
        *out = jv_new_list(R->a, JV_LIST);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            if (jr_step(R, line) || jv_list_push(R->a, out->u.l, mk_int(i)))
                return R->rc ? -1 : jr_oom(R, line);
            if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st))
                break;
        }
        return 0;
    }
    default:
        return jr_fail(R, line, "unknown function");
    }
}

static int call_value(struct rs *R, struct jv fn, const struct args *A, struct jv *out, int line)
{
    switch (fn.t) {
    case JV_FUNC: return jb_global_call(R, fn.aux, A, out, line);
    case JV_MACRO: return call_macro(R, fn, A, out, line);
    case JV_BOUND: return jb_method(R, *(const struct jv *)fn.x, fn.aux, A, out, line);
    case JV_UNDEF: return jv_undef_fail(R, fn, line);
    default: return jr_fail(R, line, "'%s' object is not callable", jv_type_name(fn));
    }
}

/* ---- expressions -------------------------------------------------------------- */

static int eval_node(struct rs *R, const struct node *x, struct frame *f, struct jv *out);

/* Left-leaning chains (a + b + c ..., a.b.c ..., x|f|g ...) parse without
 * recursion but evaluate with it: the evaluation depth is capped here. */
static int eval(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    if (R->edepth >= JINJA_MAX_EVAL_DEPTH)
        return jr_fail(R, x->line, "expression nested more than %d deep", JINJA_MAX_EVAL_DEPTH);
    R->edepth++;
    int rc = eval_node(R, x, f, out);
    R->edepth--;
    return rc;
}

static int eval_node(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a, b;
    int line = x->line;
    switch (x->k) {
    case N_CONST:
        *out = x->cv;
        return 0;
    case N_NAME:
        *out = lookup(R, f, x->s);
        return 0;
    case N_ATTR:
        if (eval(R, x->a, f, &a))
            return -1;
        return jv_getattr(R, a, x->s->p, x->s->n, out, line);
    case N_ITEM:
        if (eval(R, x->a, f, &a) || eval(R, x->b, f, &b))
            return -1;
        return jv_getitem(R, a, b, out, line);
    case N_SLICE: {
        struct jv p[3] = {mk(JV_NONE), mk(JV_NONE), mk(JV_NONE)};
        int has[3];
        if (eval(R, x->a, f, &a))
            return -1;
        for (int i = 0; i < 3; i++) {
            has[i] = x->v[i] != NULL;
            if (has[i] && eval(R, x->v[i], f, &p[i]))
                return -1;
        }
        return jv_slice(R, a, p, has, out, line);
    }
    case N_CALL: {
        struct args A;
        if (eval(R, x->a, f, &a) || eval_args(R, x, f, &A))
            return -1;
        return call_value(R, a, &A, out, line);
    }
    case N_FILTER: {
        struct args A;
        if (!x->op)
            return jr_fail(R, line, "no filter named '%s'", x->s->p);
        if (eval(R, x->a, f, &a) || eval_args(R, x, f, &A))
            return -1;
        return jb_filter(R, x->op, a, &A, out, line, f);
    }
    case N_TEST: {
        struct args A;
        if (!x->op)
            return jr_fail(R, line, "no test named '%s'", x->s->p);
        if (eval(R, x->a, f, &a) || eval_args(R, x, f, &A))
            return -1;
        int r = jb_test(R, x->op, a, &A, line);
        if (r < 0)
            return -1;
        *out = jinja_bool(r);
        return 0;
    }
    case N_BIN:
        if (eval(R, x->a, f, &a) || eval(R, x->b, f, &b))
            return -1;
        return jv_arith(R, x->op, a, b, out, line);
    case N_AND:
    case N_OR:
        if (eval(R, x->a, f, &a))
            return -1;
        if (jv_truthy(a) == (x->k == N_OR)) {
            *out = a;
            return 0;
        }
        return eval(R, x->b, f, out);
    case N_NOT:
        if (eval(R, x->a, f, &a))
            return -1;
        *out = jinja_bool(!jv_truthy(a));
        return 0;
    case N_NEG:
    case N_POS:
        if (eval(R, x->a, f, &a))
            return -1;
        if (a.t == JV_UNDEF)
            return jv_undef_fail(R, a, line);
        if (!is_num(a))
            return jr_fail(R, line, "bad operand type for unary %c: '%s'", x->k == N_NEG ? '-' : '+',
                        jv_type_name(a));
        if (x->k == N_POS)
            *out = a.t == JV_BOOL ? mk_int(a.u.b) : a;
        else if (a.t == JV_FLOAT)
            *out = mk_float(-a.u.f); /* -0.0 stays negative */
        else
            return jv_arith(R, OP_SUB, mk_int(0), a, out, line);
        return 0;
    case N_CMP: {
        if (eval(R, x->v[0], f, &a))
            return -1;
        for (size_t i = 1; i < x->n; i++) {
            if (eval(R, x->v[i], f, &b))
                return -1;
            int r;
            switch (x->ops[i - 1]) {
            case C_EQ: r = jv_eq(a, b); break;
            case C_NE: r = !jv_eq(a, b); break;
            case C_LT: r = jv_lt(R, a, b, line); break;
            case C_GT: r = jv_lt(R, b, a, line); break;
            case C_LE: r = jv_lt(R, b, a, line); r = r < 0 ? r : !r; break;
            case C_GE: r = jv_lt(R, a, b, line); r = r < 0 ? r : !r; break;
            case C_IN: r = jv_in(R, a, b, line); break;
            default: r = jv_in(R, a, b, line); r = r < 0 ? r : !r; break;
            }
            if (r < 0)
                return -1;
            if (!r) {
                *out = jinja_bool(0);
                return 0;
            }
            a = b;
        }
        *out = jinja_bool(1);
        return 0;
    }
    case N_COND:
        if (eval(R, x->a, f, &a))
            return -1;
        if (jv_truthy(a))
            return eval(R, x->b, f, out);
        if (x->c)
            return eval(R, x->c, f, out);
        *out = mk(JV_UNDEF);
        return 0;
    case N_LIST:
    case N_TUPLE:
        *out = jv_new_list(R->a, x->k == N_LIST ? JV_LIST : JV_TUPLE);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (size_t i = 0; i < x->n; i++) {
            if (eval(R, x->v[i], f, &a))
                return -1;
            if (jv_list_push(R->a, out->u.l, a))
                return jr_oom(R, line);
        }
        return 0;
    case N_DICT:
        *out = jv_new_dict(R->a, JV_DICT);
        if (out->t == JV_UNDEF)
            return jr_oom(R, line);
        for (size_t i = 0; i < x->n; i++) {
            if (eval(R, x->v[i], f, &a) || eval(R, x->v2[i], f, &b))
                return -1;
            if (jv_dict_set(R->a, out->u.d, a, b))
                return jr_oom(R, line);
        }
        return 0;
    default:
        return jr_fail(R, line, "internal error: bad expression node");
    }
}

/* ---- statements ------------------------------------------------------------- */

static int assign(struct rs *R, const struct node *x, struct frame *f, struct jv v)
{
    if (!x->op)
        return frame_set(R, f, x->names[0], v, x->line);
    struct jv items;
    if (v.t == JV_DICT || v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE) {
        if (jv_iter(R, v, &items, x->line))
            return -1;
    } else {
        return jr_fail(R, x->line, "cannot unpack non-iterable %s object", jv_type_name(v));
    }
    if (items.u.l->n != x->n_names)
        return jr_fail(R, x->line, "cannot unpack %zu values into %zu names", items.u.l->n, x->n_names);
    for (size_t i = 0; i < x->n_names; i++)
        if (frame_set(R, f, x->names[i], items.u.l->v[i], x->line))
            return -1;
    return 0;
}

static int exec_for(struct rs *R, const struct node *x, struct frame *f)
{
    struct jv it, items;
    if (eval(R, x->a, f, &it) || jv_iter(R, it, &items, x->line))
        return -1;
    struct jlist *src = items.u.l;
    if (x->b) { /* for ... if cond: filter first (loop.length counts what is left) */
        struct jv kept = jv_new_list(R->a, JV_LIST);
        if (kept.t == JV_UNDEF)
            return jr_oom(R, x->line);
        for (size_t i = 0; i < src->n; i++) {
            struct frame *ff = frame_new(R, f, x->line);
            struct jv c;
            if (!ff || jr_step(R, x->line) || assign(R, x, ff, src->v[i]) || eval(R, x->b, ff, &c))
                return -1;
            if (jv_truthy(c) && jv_list_push(R->a, kept.u.l, src->v[i]))
                return jr_oom(R, x->line);
        }
        src = kept.u.l;
    }
    if (src->n == 0)
        return exec_body(R, x->v2, x->n2, f);
    struct jloop *L = jr_alloc(R, sizeof *L, x->line);
    if (!L)
        return -1;
    L->length = (int64_t)src->n;
    L->items = src->v;
    struct jv lv = mk(JV_LOOP);
    lv.u.p = L;
    for (size_t i = 0; i < src->n; i++) {
        L->index0 = (int64_t)i;
        struct frame *ff = frame_new(R, f, x->line);
        if (!ff || jr_step(R, x->line) || frame_set(R, ff, R->loop_name, lv, x->line) ||
            assign(R, x, ff, src->v[i]))
            return -1;
        if (exec_body(R, x->v, x->n, ff))
            return -1;
        if (R->ctl == 1) {
            R->ctl = 0;
            break;
        }
        R->ctl = 0;
    }
    return 0;
}

static int exec_body(struct rs *R, struct node *const *v, size_t n, struct frame *f)
{
    for (size_t i = 0; i < n; i++) {
        const struct node *x = v[i];
        struct jv a;
        switch (x->k) {
        case S_DATA:
            if (emit(R, x->cv.u.s->p, x->cv.u.s->n))
                return -1;
            break;
        case S_OUT: {
            if (eval(R, x->a, f, &a))
                return -1;
            if (a.t == JV_STR) {
                if (emit(R, a.u.s->p, a.u.s->n))
                    return -1;
            } else {
                struct buf *o = R->out;
                if (jv_str_into(R, o, a, 0))
                    return -1;
            }
            break;
        }
        case S_IF: {
            const struct node *c = x; /* elif: the else body is the next S_IF */
            for (;;) {
                if (eval(R, c->a, f, &a))
                    return -1;
                if (jv_truthy(a)) {
                    if (exec_body(R, c->v, c->n, f))
                        return -1;
                    break;
                }
                if (exec_body(R, c->v2, c->n2, f))
                    return -1;
                break;
            }
            break;
        }
        case S_FOR:
            if (exec_for(R, x, f))
                return -1;
            break;
        case S_SET:
            if (eval(R, x->b, f, &a) || assign(R, x, f, a))
                return -1;
            break;
        case S_SETNS: {
            struct jv ns = lookup(R, f, x->s);
            if (ns.t != JV_NS)
                return jr_fail(R, x->line, "cannot assign attribute on non-namespace object");
            if (eval(R, x->b, f, &a) || jv_dict_set(R->a, ns.u.d, mk_strp(x->names[0]), a))
                return R->rc ? -1 : jr_oom(R, x->line);
            break;
        }
        case S_SETBLOCK: {
            struct buf body, *saved = R->out;
            buf_init(&body, saved->max_bytes);
            R->out = &body;
            int rc = exec_body(R, x->v, x->n, f);
            R->out = saved;
            if (rc == 0) {
                a = jv_new_str(R, body.data ? body.data : "", body.len, x->line);
                rc = R->rc ? -1 : frame_set(R, f, x->names[0], a, x->line);
            }
            buf_release(&body);
            if (rc)
                return -1;
            break;
        }
        case S_MACRO: {
            struct jmacro *m = jr_alloc(R, sizeof *m, x->line);
            if (!m)
                return -1;
            m->def = x;
            m->scope = f;
            a = mk(JV_MACRO);
            a.u.p = m;
            if (frame_set(R, f, x->s, a, x->line))
                return -1;
            break;
        }
        case S_BREAK:
        case S_CONTINUE:
            R->ctl = x->k == S_BREAK ? 1 : 2;
            return 0;
        case S_BODY:
            if (exec_body(R, x->v, x->n, f))
                return -1;
            break;
        case S_FILTERBLOCK: {
            struct buf body, *saved = R->out;
            buf_init(&body, saved->max_bytes);
            R->out = &body;
            int rc = exec_body(R, x->v, x->n, f);
            R->out = saved;
            if (rc == 0) {
                /* the chain's innermost operand is x->b: evaluate filters bottom-up */
                const struct node *chain[JINJA_MAX_DEPTH] = {NULL};
                size_t k = 0;
                for (const struct node *c = x->a; c && c != x->b && k < JINJA_MAX_DEPTH; c = c->a)
                    chain[k++] = c;
                a = jv_new_str(R, body.data ? body.data : "", body.len, x->line);
                while (rc == 0 && !R->rc && k-- > 0) {
                    struct args A;
                    const struct node *c = chain[k];
                    if (!c->op)
                        rc = jr_fail(R, c->line, "no filter named '%s'", c->s->p);
                    else
                        rc = eval_args(R, c, f, &A) || jb_filter(R, c->op, a, &A, &a, c->line, f) ? -1 : 0;
                }
                if (rc == 0 && !R->rc && jv_str_into(R, saved, a, 0))
                    rc = -1;
            }
            buf_release(&body);
            if (rc || R->rc)
                return -1;
            break;
        }
        default:
            return jr_fail(R, x->line, "internal error: bad statement node");
        }
        if (R->ctl)
            return 0;
    }
    return 0;
}

int jinja_render(const struct jinja_tmpl *t, struct jinja_env *e, struct buf *out, char *err,
                 size_t errcap)
{
    if (err && errcap)
        err[0] = '\0';
    if (e->a.oom)
        return ERR_NOMEM;
    size_t start = out->len;
    struct rs R = {.e = e, .a = &e->a, .out = out, .err = err, .errcap = errcap};
    struct frame *top = frame_new(&R, NULL, 1);
    R.loop_name = jar_str(&e->a, "loop", 4);
    if (!R.loop_name)
        jr_oom(&R, 1);
    else if (top)
        exec_body(&R, t->body, t->n_body, top);
    int rc = R.rc;
    if (rc == 0 && e->a.oom)
        rc = ERR_NOMEM;
    if (rc == ERR_TOOBIG && err && errcap && !err[0])
        snprintf(err, errcap, "rendered prompt is over the %zu-byte limit", out->max_bytes);
    if (rc) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return rc;
}
