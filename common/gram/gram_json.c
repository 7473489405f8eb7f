/*
 * gram_json.c - JSON Schema (the subset of spec/structured-outputs.md) and
 * "any JSON object" -> grammar; the request-body front door
 * (gram_from_body) and the process-wide compile cache.
 *
 * Every schema node becomes one rule; a $ref target's rule is made once and
 * memoised by node, so recursive schemas become recursive rules. Anything
 * the compiler cannot enforce is refused with the keyword and the JSON
 * pointer of the node: a user never gets output that silently ignores part
 * of their schema. Where enforcing exactly is impractical, the generated
 * language is a subset of the schema's (never a superset): numbers have at
 * most 15 integer and 15 fraction digits and no exponent, bounds that are
 * not integers are rounded inward, a `date` never has February 29th,
 * `\u` escapes exclude surrogates, optional properties keep schema order.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/gram/gram_int.h"
#include "common/hash.h"
#include "common/js.h"

#define JC_MAX_DEPTH 64
#define NUM_MAX_ABS 999999999999999LL   /* 15 digits */

struct memo {
    const json_t *node;
    int depth;     /* $ref nesting it was compiled at */
    int rule;
};

struct jc {
    struct gb *b;
    json_t *root;
    struct problem *err;
    int failed;
    int depth;
    int ref_depth;          /* $ref targets being compiled, outermost first */
    char path[200];
    struct memo *memo;
    size_t n_memo, cap_memo;
    int r_ws, r_char, r_string, r_value;
};

__attribute__((format(printf, 2, 3))) static int jfail(struct jc *c, const char *fmt, ...)
{
    if (!c->failed) {
        char m[240];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        if (c->err)
            snprintf(c->err->message, sizeof c->err->message, "%.200s (at '%.100s')", m,
                     c->path[0] ? c->path : "#");
        c->failed = 1;
    }
    return -1;
}

static int ok(struct jc *c) { return !c->failed && !c->b->rc; }

/* ---- shared pieces ------------------------------------------------------------- */

static int lit(struct jc *c, const char *s) { return gb_lit_rule(c->b, s, strlen(s)); }

/* ws := " " | empty (at most one space after ':' and ',') */
static int ws_rule(struct jc *c)
{
    if (c->r_ws < 0) {
        c->r_ws = gb_rule(c->b);
        struct gb_seq s = {0};
        gb_seq_byte(c->b, &s, ' ');
        gb_rule_add(c->b, c->r_ws, &s);
        gb_rule_add_empty(c->b, c->r_ws);
    }
    return c->r_ws;
}

/* one character of a JSON string, as written */
static int char_rule(struct jc *c)
{
    if (c->r_char >= 0)
        return c->r_char;
    struct gb *b = c->b;
    int r = c->r_char = gb_rule(b);
    struct gcls k, hex;
    memset(&k, 0, sizeof k);
    gcls_range(&k, 0x20, 0x7F);
    k.w['"' >> 5] &= ~(1u << ('"' & 31));
    k.w['\\' >> 5] &= ~(1u << ('\\' & 31));
    struct gb_seq s = {0};
    gb_seq_chr(b, &s, &k);
    gb_rule_add(b, r, &s);
    memset(&k, 0, sizeof k);
    const char *esc = "\"\\/bfnrt";
    for (const char *p = esc; *p; p++)
        gcls_add(&k, (unsigned char)*p);
    gb_seq_byte(b, &s, '\\');
    gb_seq_chr(b, &s, &k);
    gb_rule_add(b, r, &s);
    memset(&hex, 0, sizeof hex);
    gcls_range(&hex, '0', '9');
    gcls_range(&hex, 'a', 'f');
    gcls_range(&hex, 'A', 'F');
    /* \uXXXX without surrogates: first digit not d/D, or d/D then 0-7 */
    memset(&k, 0, sizeof k);
    gcls_range(&k, '0', '9');
    gcls_range(&k, 'a', 'c');
    gcls_range(&k, 'A', 'C');
    gcls_range(&k, 'e', 'f');
    gcls_range(&k, 'E', 'F');
    gb_seq_lit(b, &s, "\\u", 2);
    gb_seq_chr(b, &s, &k);
    gb_seq_chr(b, &s, &hex);
    gb_seq_chr(b, &s, &hex);
    gb_seq_chr(b, &s, &hex);
    gb_rule_add(b, r, &s);
    memset(&k, 0, sizeof k);
    gcls_add(&k, 'd');
    gcls_add(&k, 'D');
    struct gcls lo;
    memset(&lo, 0, sizeof lo);
    gcls_range(&lo, '0', '7');
    gb_seq_lit(b, &s, "\\u", 2);
    gb_seq_chr(b, &s, &k);
    gb_seq_chr(b, &s, &lo);
    gb_seq_chr(b, &s, &hex);
    gb_seq_chr(b, &s, &hex);
    gb_rule_add(b, r, &s);
    gb_add_utf8_multibyte(b, r);
    return r;
}

/* '"' body '"' */
static int quoted(struct jc *c, int body)
{
    struct gb_seq s = {0};
    gb_seq_byte(c->b, &s, '"');
    gb_seq_ref(c->b, &s, body);
    gb_seq_byte(c->b, &s, '"');
    return gb_one(c->b, &s);
}

static int string_rule(struct jc *c, int64_t min, int64_t max)
{
    if (min == 0 && max < 0 && c->r_string >= 0)
        return c->r_string;
    int body = gb_repeat(c->b, char_rule(c), min, max);
    int r = quoted(c, body);
    if (min == 0 && max < 0)
        c->r_string = r;
    return r;
}

/* a rule from regex text (not a JSON string) */
static int regex(struct jc *c, const char *re)
{
    struct problem e;
    memset(&e, 0, sizeof e);
    int r = gram_regex_rule(c->b, re, strlen(re), 0, &e);
    if (r < 0 && !c->b->rc)
        jfail(c, "internal: %s", e.message);
    return r;
}

static int any_value(struct jc *c);

/* ---- numbers -------------------------------------------------------------------- */

/* regex of the decimal strings (no leading zeros) of A..B, equal length n */
static void same_len(struct buf *o, const char *A, const char *B, size_t n)
{
    if (n == 0)
        return;
    if (n == 1) {
        if (A[0] == B[0])
            buf_append_byte(o, (unsigned char)A[0]);
        else
            buf_printf(o, "[%c-%c]", A[0], B[0]);
        return;
    }
    if (A[0] == B[0]) {
        buf_append_byte(o, (unsigned char)A[0]);
        same_len(o, A + 1, B + 1, n - 1);
        return;
    }
    int a0 = A[0] - '0', b0 = B[0] - '0';
    int lo_full = 1, hi_full = 1;
    for (size_t i = 1; i < n; i++) {
        lo_full &= A[i] == '0';
        hi_full &= B[i] == '9';
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    buf_append_byte(o, '(');
    int first = 1;
    int mid_lo = lo_full ? a0 : a0 + 1, mid_hi = hi_full ? b0 : b0 - 1;
    if (!lo_full) {
        buf_printf(o, "%d(", a0);
        same_len(o, A + 1, nines, n - 1);
        buf_append_byte(o, ')');
        first = 0;
    }
    if (mid_lo <= mid_hi) {
        if (!first)
            buf_append_byte(o, '|');
        buf_printf(o, "[%d-%d][0-9]{%zu}", mid_lo, mid_hi, n - 1);
        first = 0;
    }
    if (!hi_full) {
        if (!first)
            buf_append_byte(o, '|');
        buf_printf(o, "%d(", b0);
        same_len(o, zeros, B + 1, n - 1);
        buf_append_byte(o, ')');
    }
    buf_append_byte(o, ')');
}

static int64_t pow10i(int d)
{
    int64_t p = 1;
    while (d-- > 0)
        p *= 10;
    return p;
}

static int ndigits(int64_t v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* regex of a..b, 0 <= a <= b <= NUM_MAX_ABS, as an alternation group */
static void nonneg_range(struct buf *o, int64_t a, int64_t b)
{
    buf_append_byte(o, '(');
    int first = 1;
    for (int L = ndigits(a); L <= ndigits(b); L++) {
        int64_t lo = L == 1 ? 0 : pow10i(L - 1), hi = pow10i(L) - 1;
        if (lo < a)
            lo = a;
        if (hi > b)
            hi = b;
        if (lo > hi)
            continue;
        char A[24], B[24];
        snprintf(A, sizeof A, "%lld", (long long)lo);
        snprintf(B, sizeof B, "%lld", (long long)hi);
        if (!first)
            buf_append_byte(o, '|');
        same_len(o, A, B, (size_t)L);
        first = 0;
    }
    buf_append_byte(o, ')');
}

/* integers lo..hi (|.| <= NUM_MAX_ABS) as a regex */
static void int_range(struct buf *o, int64_t lo, int64_t hi)
{
    buf_append_byte(o, '(');
    int first = 1;
    if (lo < 0) {
        int64_t mlo = hi >= 0 ? 1 : -hi, mhi = -lo;
        buf_append_str(o, "-");
        nonneg_range(o, mlo, mhi);
        first = 0;
    }
    if (hi >= 0) {
        if (!first)
            buf_append_byte(o, '|');
        nonneg_range(o, lo > 0 ? lo : 0, hi);
    }
    buf_append_byte(o, ')');
}

static int get_bound(struct jc *c, json_t *s, const char *k, double *v, int *has)
{
    json_t *x = json_object_get(s, k);
    *has = 0;
    if (!x)
        return 0;
    if (!json_is_number(x))
        return jfail(c, "'%s' must be a number", k);
    *v = json_number_value(x);
    if (!isfinite(*v))
        return jfail(c, "'%s' must be finite", k);
    *has = 1;
    return 0;
}

static int number_rule(struct jc *c, json_t *s, int integer)
{
    double v, L = -(double)NUM_MAX_ABS, H = (double)NUM_MAX_ABS;
    int has, bounded = 0;
    int64_t lo = -NUM_MAX_ABS, hi = NUM_MAX_ABS;   /* integer values allowed */
    json_t *mo = json_object_get(s, "multipleOf");
    if (mo) {
        if (!(integer && json_is_number(mo) && json_number_value(mo) == 1.0))
            return jfail(c, "keyword 'multipleOf' is not supported");
    }
    /* L/H: the real bounds (clamped to 15 digits); lo/hi: the integers within */
    if (get_bound(c, s, "minimum", &v, &has) < 0)
        return -1;
    if (has && v > L) {
        L = v > H ? H + 1 : v;
        bounded = 1;
        if (ceil(L) > (double)lo)
            lo = (int64_t)ceil(L);
    }
    if (get_bound(c, s, "exclusiveMinimum", &v, &has) < 0)
        return -1;
    if (has && v >= L) {
        L = v > H ? H + 1 : v;
        bounded = 1;
        if (floor(L) + 1 > (double)lo)
            lo = (int64_t)(floor(L) + 1);
    }
    if (get_bound(c, s, "maximum", &v, &has) < 0)
        return -1;
    if (has && v < H) {
        H = v < -(double)NUM_MAX_ABS ? -(double)NUM_MAX_ABS - 1 : v;
        bounded = 1;
        if (floor(H) < (double)hi)
            hi = (int64_t)floor(H);
    }
    if (get_bound(c, s, "exclusiveMaximum", &v, &has) < 0)
        return -1;
    if (has && v <= H) {
        H = v < -(double)NUM_MAX_ABS ? -(double)NUM_MAX_ABS - 1 : v;
        bounded = 1;
        if (ceil(H) - 1 < (double)hi)
            hi = (int64_t)(ceil(H) - 1);
    }
    /* fractions: k.f (f not all zeros) lies in (k, k+1), inside the bounds when
     * k >= L and k + 1 <= H; -K.f lies in (-K-1, -K): K + 1 <= -L and -K <= H */
    int64_t flo = (int64_t)ceil(L) > 0 ? (int64_t)ceil(L) : 0, fhi = (int64_t)floor(H) - 1;
    int64_t nlo = (int64_t)ceil(-H) > 0 ? (int64_t)ceil(-H) : 0, nhi = (int64_t)floor(-L) - 1;
    if (fhi > NUM_MAX_ABS)
        fhi = NUM_MAX_ABS;
    if (nhi > NUM_MAX_ABS)
        nhi = NUM_MAX_ABS;
    int have_int = lo <= hi && lo <= NUM_MAX_ABS && hi >= -NUM_MAX_ABS;
    int have_frac = !integer && flo <= fhi, have_neg = !integer && nlo <= nhi;
    if (!have_int && !have_frac && !have_neg)
        return jfail(c, "no %s with at most 15 digits lies within the bounds",
                     integer ? "integer" : "number");
    struct buf o;
    buf_init(&o, 1u << 20);
    if (!bounded) {
        buf_append_str(&o, integer ? "-?(0|[1-9][0-9]{0,14})"
                                   : "-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?");
    } else {
        int first = 1;
        if (have_int) {
            int_range(&o, lo, hi);
            first = 0;
        }
        if (have_frac) {
            if (!first)
                buf_append_byte(&o, '|');
            nonneg_range(&o, flo, fhi);
            buf_append_str(&o, "\\.[0-9]{0,14}[1-9]");
            first = 0;
        }
        if (have_neg) {
            if (!first)
                buf_append_byte(&o, '|');
            buf_append_byte(&o, '-');
            nonneg_range(&o, nlo, nhi);
            buf_append_str(&o, "\\.[0-9]{0,14}[1-9]");
        }
    }
    int r = -1;
    if (o.data && o.len <= GRAM_MAX_REGEX_BYTES) {
        struct problem e;
        memset(&e, 0, sizeof e);
        r = gram_regex_rule(c->b, o.data, o.len, 0, &e);
        if (r < 0 && !c->b->rc)
            jfail(c, "internal: %s", e.message);
    } else {
        jfail(c, "numeric bounds too complex");
    }
    buf_release(&o);
    return r;
}

/* ---- strings -------------------------------------------------------------------- */

static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", "[0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)"
             "|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])"},
    {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
    {"date-time", NULL},   /* date "T" time, assembled below */
    {"email", "[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\\.[a-zA-Z0-9-]{1,63}){0,4}\\.[a-zA-Z]{2,24}"},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
    {"hostname", "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?){0,8}"},
};

static int format_rule(struct jc *c, const char *f)
{
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) {
        if (strcmp(FORMATS[i].name, f) != 0)
            continue;
        int body;
        if (FORMATS[i].re) {
            body = regex(c, FORMATS[i].re);
        } else {
            int d = format_rule(c, "date#"), t = format_rule(c, "time#");
            struct gb_seq s = {0};
            gb_seq_ref(c->b, &s, d);
            gb_seq_byte(c->b, &s, 'T');
            gb_seq_ref(c->b, &s, t);
            body = gb_one(c->b, &s);
        }
        return body;
    }
    /* the inner parts of date-time, unquoted */
    if (strcmp(f, "date#") == 0)
        return regex(c, FORMATS[0].re);
    if (strcmp(f, "time#") == 0)
        return regex(c, FORMATS[1].re);
    return jfail(c, "string format '%s' is not supported (supported: date, time, date-time, "
                    "email, uuid, ipv4, hostname)", f);
}

static int get_count(struct jc *c, json_t *s, const char *k, int64_t *v)
{
    json_t *x = json_object_get(s, k);
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return jfail(c, "'%s' must be a non-negative integer", k);
    if (json_integer_value(x) > GRAM_MAX_REPEAT)
        return jfail(c, "'%s' above %d is not supported", k, GRAM_MAX_REPEAT);
    *v = json_integer_value(x);
    return 0;
}

static int string_type(struct jc *c, json_t *s)
{
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    int64_t mn = 0, mx = -1;
    if (get_count(c, s, "minLength", &mn) < 0 || get_count(c, s, "maxLength", &mx) < 0)
        return -1;
    if (mx >= 0 && mx < mn)
        return jfail(c, "maxLength is below minLength");
    int has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (pat && fmt)
        return jfail(c, "'pattern' together with 'format' is not supported");
    if ((pat || fmt) && has_len)
        return jfail(c, "'minLength'/'maxLength' together with '%s' is not supported",
                     pat ? "pattern" : "format");
    if (fmt) {
        if (!json_is_string(fmt))
            return jfail(c, "'format' must be a string");
        int body = format_rule(c, json_string_value(fmt));
        return body < 0 ? -1 : quoted(c, body);
    }
    if (pat) {
        if (!json_is_string(pat))
            return jfail(c, "'pattern' must be a string");
        const char *p = json_string_value(pat);
        size_t n = json_string_length(pat);
        /* JSON Schema patterns search: unanchored ends take any characters */
        int a0 = n > 0 && p[0] == '^';
        int a1 = n > 0 && p[n - 1] == '$' && !(n > 1 && p[n - 2] == '\\');
        struct problem e;
        memset(&e, 0, sizeof e);
        int body = gram_regex_rule(c->b, p, n, 1, &e);
        if (body < 0) {
            if (!c->b->rc)
                jfail(c, "invalid or unsupported pattern: %s", e.message);
            return -1;
        }
        struct gb_seq sq = {0};
        if (!a0)
            gb_seq_ref(c->b, &sq, gb_repeat(c->b, char_rule(c), 0, -1));
        gb_seq_ref(c->b, &sq, body);
        if (!a1)
            gb_seq_ref(c->b, &sq, gb_repeat(c->b, char_rule(c), 0, -1));
        return quoted(c, gb_one(c->b, &sq));
    }
    return string_rule(c, mn, mx);
}

/* ---- objects and arrays ------------------------------------------------------------ */

static int compile(struct jc *c, json_t *s, const char *seg);

static int key_lit(struct jc *c, struct gb_seq *sq, const char *k, size_t n)
{
    struct buf kb;
    buf_init(&kb, 1u << 16);
    if (js_escape(&kb, k, n) != 0) {
        buf_release(&kb);
        return jfail(c, "property name too long");
    }
    gb_seq_lit(c->b, sq, kb.data, kb.len);
    buf_release(&kb);
    return 0;
}

static int object_type(struct jc *c, json_t *s)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return jfail(c, "'properties' must be an object");
    if (req && !json_is_array(req))
        return jfail(c, "'required' must be an array");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return jfail(c, "'additionalProperties' must be a boolean or a schema");
    size_t np = props ? json_object_size(props) : 0;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *k = json_array_get(req, i);
        if (!json_is_string(k))
            return jfail(c, "'required' must list strings");
        if (!props || !json_object_get(props, json_string_value(k)))
            return jfail(c, "required property '%s' is not in 'properties'", json_string_value(k));
    }
    int ws = ws_rule(c);
    if (np == 0) {
        /* a map: any keys with additionalProperties' schema (or nothing if false) */
        if (ap && json_is_false(ap))
            return lit(c, "{}");
        int val = ap && json_is_object(ap) ? compile(c, ap, "additionalProperties") : any_value(c);
        if (val < 0)
            return -1;
        struct gb_seq m = {0};
        gb_seq_ref(c->b, &m, string_rule(c, 0, -1));
        gb_seq_byte(c->b, &m, ':');
        gb_seq_ref(c->b, &m, ws);
        gb_seq_ref(c->b, &m, val);
        int member = gb_one(c->b, &m);
        struct gb_seq more = {0};
        gb_seq_byte(c->b, &more, ',');
        gb_seq_ref(c->b, &more, ws);
        gb_seq_ref(c->b, &more, member);
        int rest = gb_repeat(c->b, gb_one(c->b, &more), 0, -1);
        int body = gb_rule(c->b);
        struct gb_seq bs = {0};
        gb_seq_ref(c->b, &bs, member);
        gb_seq_ref(c->b, &bs, rest);
        gb_rule_add(c->b, body, &bs);
        gb_rule_add_empty(c->b, body);
        struct gb_seq o = {0};
        gb_seq_byte(c->b, &o, '{');
        gb_seq_ref(c->b, &o, body);
        gb_seq_byte(c->b, &o, '}');
        return gb_one(c->b, &o);
    }
    /* S[i][had] = members i..np-1, had = a member was written before */
    int *kv = calloc(np, sizeof *kv), *isreq = calloc(np, sizeof *isreq);
    int *S = malloc((np + 1) * 2 * sizeof *S);
    if (!kv || !isreq || !S) {
        free(kv);
        free(isreq);
        free(S);
        c->b->rc = ERR_NOMEM;
        return -1;
    }
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub)
    {
        for (size_t j = 0; req && j < json_array_size(req); j++)
            if (strcmp(json_string_value(json_array_get(req, j)), key) == 0)
                isreq[i] = 1;
        char seg[80];
        snprintf(seg, sizeof seg, "properties/%.60s", key);
        int v = compile(c, sub, seg);
        if (v < 0)
            goto fail;
        struct gb_seq m = {0};
        if (key_lit(c, &m, key, strlen(key)) < 0) {
            gb_seq_free(&m);
            goto fail;
        }
        gb_seq_byte(c->b, &m, ':');
        gb_seq_ref(c->b, &m, ws);
        gb_seq_ref(c->b, &m, v);
        kv[i] = gb_one(c->b, &m);
        i++;
    }
    for (size_t k = 0; k <= np; k++)
        for (int h = 0; h < 2; h++)
            S[k * 2 + h] = gb_rule(c->b);
    if (!ok(c))
        goto fail;
    for (int h = 0; h < 2; h++)
        gb_rule_add_empty(c->b, S[np * 2 + h]);
    for (size_t k = np; k-- > 0;) {
        for (int h = 0; h < 2; h++) {
            struct gb_seq a = {0};
            if (h) {
                gb_seq_byte(c->b, &a, ',');
                gb_seq_ref(c->b, &a, ws);
            }
            gb_seq_ref(c->b, &a, kv[k]);
            gb_seq_ref(c->b, &a, S[(k + 1) * 2 + 1]);
            gb_rule_add(c->b, S[k * 2 + h], &a);
            if (!isreq[k]) {
                struct gb_seq skip = {0};
                gb_seq_ref(c->b, &skip, S[(k + 1) * 2 + h]);
                gb_rule_add(c->b, S[k * 2 + h], &skip);
            }
        }
    }
    free(kv);
    free(isreq);
    struct gb_seq o = {0};
    gb_seq_byte(c->b, &o, '{');
    gb_seq_ref(c->b, &o, S[0]);
    gb_seq_byte(c->b, &o, '}');
    free(S);
    return gb_one(c->b, &o);
fail:
    free(kv);
    free(isreq);
    free(S);
    return -1;
}

static int array_type(struct jc *c, json_t *s)
{
    json_t *items = json_object_get(s, "items");
    int64_t mn = 0, mx = -1;
    if (json_object_get(s, "prefixItems"))
        return jfail(c, "keyword 'prefixItems' is not supported");
    if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0)
        return -1;
    if (mx >= 0 && mx < mn)
        return jfail(c, "maxItems is below minItems");
    int item = items ? compile(c, items, "items") : any_value(c);
    if (item < 0)
        return -1;
    if (mx == 0)
        return lit(c, "[]");
    struct gb_seq m = {0};
    gb_seq_byte(c->b, &m, ',');
    gb_seq_ref(c->b, &m, ws_rule(c));
    gb_seq_ref(c->b, &m, item);
    int more = gb_one(c->b, &m);
    int rest = gb_repeat(c->b, more, mn > 0 ? mn - 1 : 0, mx < 0 ? -1 : mx - 1);
    int body = gb_rule(c->b);
    struct gb_seq bs = {0};
    gb_seq_ref(c->b, &bs, item);
    gb_seq_ref(c->b, &bs, rest);
    gb_rule_add(c->b, body, &bs);
    if (mn == 0)
        gb_rule_add_empty(c->b, body);
    struct gb_seq o = {0};
    gb_seq_byte(c->b, &o, '[');
    gb_seq_ref(c->b, &o, body);
    gb_seq_byte(c->b, &o, ']');
    return gb_one(c->b, &o);
}

/* any JSON value (bounded nesting comes from GRAM_MAX_DEPTH) */
static int any_value(struct jc *c)
{
    if (c->r_value >= 0)
        return c->r_value;
    struct gb *b = c->b;
    int v = c->r_value = gb_rule(b);
    int ws = ws_rule(c), str = string_rule(c, 0, -1);
    int num = regex(c, "-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?");
    /* object */
    struct gb_seq m = {0};
    gb_seq_ref(b, &m, str);
    gb_seq_byte(b, &m, ':');
    gb_seq_ref(b, &m, ws);
    gb_seq_ref(b, &m, v);
    int member = gb_one(b, &m);
    struct gb_seq mm = {0};
    gb_seq_byte(b, &mm, ',');
    gb_seq_ref(b, &mm, ws);
    gb_seq_ref(b, &mm, member);
    int members = gb_repeat(b, gb_one(b, &mm), 0, -1);
    int obody = gb_rule(b);
    struct gb_seq ob = {0};
    gb_seq_ref(b, &ob, member);
    gb_seq_ref(b, &ob, members);
    gb_rule_add(b, obody, &ob);
    gb_rule_add_empty(b, obody);
    /* array */
    struct gb_seq ai = {0};
    gb_seq_byte(b, &ai, ',');
    gb_seq_ref(b, &ai, ws);
    gb_seq_ref(b, &ai, v);
    int items = gb_repeat(b, gb_one(b, &ai), 0, -1);
    int abody = gb_rule(b);
    struct gb_seq ab = {0};
    gb_seq_ref(b, &ab, v);
    gb_seq_ref(b, &ab, items);
    gb_rule_add(b, abody, &ab);
    gb_rule_add_empty(b, abody);

    struct gb_seq s = {0};
    gb_seq_byte(b, &s, '{');
    gb_seq_ref(b, &s, obody);
    gb_seq_byte(b, &s, '}');
    gb_rule_add(b, v, &s);
    gb_seq_byte(b, &s, '[');
    gb_seq_ref(b, &s, abody);
    gb_seq_byte(b, &s, ']');
    gb_rule_add(b, v, &s);
    gb_seq_ref(b, &s, str);
    gb_rule_add(b, v, &s);
    gb_seq_ref(b, &s, num);
    gb_rule_add(b, v, &s);
    const char *lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        gb_seq_lit(b, &s, lits[i], strlen(lits[i]));
        gb_rule_add(b, v, &s);
    }
    return v;
}

/* ---- one schema node ------------------------------------------------------------------ */

static const char *const KNOWN[] = {
    /* validation we enforce */
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "pattern", "format", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "allOf", "$ref", "prefixItems",
    /* containers and annotations (no effect on valid instances) */
    "$defs", "definitions", "title", "description", "default", "examples", "$schema", "$id",
    "$comment", "deprecated", "readOnly", "writeOnly", NULL,
};

static int type_ok(const char *t, const json_t *v)
{
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    return 0;
}

static int types_ok(json_t *type, const json_t *v)
{
    if (!type)
        return 1;
    if (json_is_string(type))
        return type_ok(json_string_value(type), v);
    for (size_t i = 0; i < json_array_size(type); i++)
        if (type_ok(json_string_value(json_array_get(type, i)), v))
            return 1;
    return 0;
}

static int literal_alt(struct jc *c, int r, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!t) {
        c->b->rc = ERR_NOMEM;
        return -1;
    }
    struct gb_seq s = {0};
    gb_seq_lit(c->b, &s, t, strlen(t));
    free(t);
    gb_rule_add(c->b, r, &s);
    return 0;
}

static int resolve_ref(struct jc *c, const char *ref, json_t **out)
{
    if (ref[0] != '#')
        return jfail(c, "only local references ('#...') are supported, not '%s'", ref);
    json_t *n = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/')
            return jfail(c, "invalid reference '%s'", ref);
        p++;
        char tok[128];
        size_t k = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1'))
                ch = *p++ == '0' ? '~' : '/';
            if (k + 1 >= sizeof tok)
                return jfail(c, "reference '%s' too long", ref);
            tok[k++] = ch;
        }
        tok[k] = 0;
        if (json_is_object(n))
            n = json_object_get(n, tok);
        else if (json_is_array(n))
            n = json_array_get(n, (size_t)strtoul(tok, NULL, 10));
        else
            n = NULL;
        if (!n)
            return jfail(c, "reference '%s' does not resolve", ref);
    }
    *out = n;
    return 0;
}

static int compile_types(struct jc *c, json_t *s, json_t *type)
{
    const char *one[8];
    size_t n = 0;
    if (json_is_string(type)) {
        one[n++] = json_string_value(type);
    } else if (json_is_array(type) && json_array_size(type) >= 1 && json_array_size(type) <= 7) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            if (!json_is_string(json_array_get(type, i)))
                return jfail(c, "'type' must be a string or an array of strings");
            one[n++] = json_string_value(json_array_get(type, i));
        }
    } else {
        return jfail(c, "'type' must be a string or an array of 1..7 strings");
    }
    int r = n > 1 ? gb_rule(c->b) : -1;
    int last = -1;
    for (size_t i = 0; i < n; i++) {
        const char *t = one[i];
        if (strcmp(t, "null") == 0)
            last = lit(c, "null");
        else if (strcmp(t, "boolean") == 0)
            last = regex(c, "true|false");
        else if (strcmp(t, "integer") == 0)
            last = number_rule(c, s, 1);
        else if (strcmp(t, "number") == 0)
            last = number_rule(c, s, 0);
        else if (strcmp(t, "string") == 0)
            last = string_type(c, s);
        else if (strcmp(t, "object") == 0)
            last = object_type(c, s);
        else if (strcmp(t, "array") == 0)
            last = array_type(c, s);
        else
            return jfail(c, "unknown type '%s'", t);
        if (last < 0)
            return -1;
        if (n > 1) {
            struct gb_seq sq = {0};
            gb_seq_ref(c->b, &sq, last);
            gb_rule_add(c->b, r, &sq);
        }
    }
    return n > 1 ? r : last;
}

static int compile_node(struct jc *c, json_t *s)
{
    if (json_is_true(s))
        return any_value(c);
    if (json_is_false(s))
        return jfail(c, "the schema 'false' matches nothing");
    if (!json_is_object(s))
        return jfail(c, "a schema must be an object");
    const char *k;
    json_t *v;
    int n_valid = 0;
    json_object_foreach(s, k, v)
    {
        int known = 0;
        for (int i = 0; KNOWN[i]; i++)
            if (strcmp(KNOWN[i], k) == 0) {
                known = 1;
                if (i < 22)
                    n_valid++;
            }
        if (!known)
            return jfail(c, "keyword '%s' is not supported", k);
    }
    json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
    json_t *all = json_object_get(s, "allOf"), *type = json_object_get(s, "type");
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (ref) {
        if (n_valid > 1)
            return jfail(c, "'$ref' next to other validation keywords is not supported");
        if (!json_is_string(ref))
            return jfail(c, "'$ref' must be a string");
        json_t *t = NULL;
        if (resolve_ref(c, json_string_value(ref), &t) < 0)
            return -1;
        /* recursion is unrolled GRAM_MAX_REF_DEPTH levels deep: a target is
         * compiled once per nesting level; past the last level the reference
         * matches nothing, so an array of such items can only be empty and an
         * optional or anyOf branch is not taken */
        for (size_t i = 0; i < c->n_memo; i++)
            if (c->memo[i].node == t && c->memo[i].depth == c->ref_depth)
                return c->memo[i].rule;
        int r = gb_rule(c->b);
        if (r < 0)
            return -1;
        if (c->ref_depth >= GRAM_MAX_REF_DEPTH)
            return r;   /* no alternatives */
        if (c->n_memo == c->cap_memo) {
            size_t nc = c->cap_memo ? c->cap_memo * 2 : 16;
            struct memo *m = realloc(c->memo, nc * sizeof *m);
            if (!m) {
                c->b->rc = ERR_NOMEM;
                return -1;
            }
            c->memo = m;
            c->cap_memo = nc;
        }
        c->memo[c->n_memo++] = (struct memo){t, c->ref_depth, r};
        char seg[160];
        snprintf(seg, sizeof seg, "$ref=%.120s", json_string_value(ref));
        c->ref_depth++;
        int body = compile(c, t, seg);
        c->ref_depth--;
        if (body < 0)
            return -1;
        struct gb_seq sq = {0};
        gb_seq_ref(c->b, &sq, body);
        gb_rule_add(c->b, r, &sq);
        return r;
    }
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1 || n_valid > 1)
            return jfail(c, "'allOf' is supported only with a single schema and nothing beside it");
        return compile(c, json_array_get(all, 0), "allOf/0");
    }
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0)
            return jfail(c, "'anyOf' must be a non-empty array");
        if (n_valid > 1)
            return jfail(c, "'anyOf' next to other validation keywords is not supported");
        int r = gb_rule(c->b);
        for (size_t i = 0; i < json_array_size(any); i++) {
            char seg[32];
            snprintf(seg, sizeof seg, "anyOf/%zu", i);
            int a = compile(c, json_array_get(any, i), seg);
            if (a < 0)
                return -1;
            struct gb_seq sq = {0};
            gb_seq_ref(c->b, &sq, a);
            gb_rule_add(c->b, r, &sq);
        }
        return r;
    }
    if (en || cn) {
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return jfail(c, "'enum' must be a non-empty array");
        if (type && !json_is_string(type) && !json_is_array(type))
            return jfail(c, "'type' must be a string or an array of strings");
        int r = gb_rule(c->b);
        size_t n_alt = 0;
        if (cn) {
            if (en)
                return jfail(c, "'enum' together with 'const' is not supported");
            if (types_ok(type, cn)) {
                if (literal_alt(c, r, cn) < 0)
                    return -1;
                n_alt++;
            }
        }
        for (size_t i = 0; en && i < json_array_size(en); i++) {
            if (!types_ok(type, json_array_get(en, i)))
                continue;
            if (literal_alt(c, r, json_array_get(en, i)) < 0)
                return -1;
            n_alt++;
        }
        if (n_alt == 0)
            return jfail(c, "no value of 'enum'/'const' has the schema's type");
        return r;
    }
    if (type)
        return compile_types(c, s, type);
    /* no type: infer from the keywords present */
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return object_type(c, s);
    if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
        json_object_get(s, "maxItems"))
        return array_type(c, s);
    if (json_object_get(s, "pattern") || json_object_get(s, "format") ||
        json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
        return string_type(c, s);
    if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
        json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
        return number_rule(c, s, 0);
    return any_value(c);
}

static int compile(struct jc *c, json_t *s, const char *seg)
{
    if (!ok(c))
        return -1;
    if (++c->depth > JC_MAX_DEPTH) {
        c->depth--;
        return jfail(c, "schema nested deeper than %d levels", JC_MAX_DEPTH);
    }
    size_t plen = strlen(c->path);
    if (seg && *seg)
        snprintf(c->path + plen, sizeof c->path - plen, "%s%s", plen ? "/" : "#/", seg);
    int r = compile_node(c, s);
    if (!c->failed)
        c->path[plen] = 0;
    c->depth--;
    return ok(c) ? r : -1;
}

static void jc_init(struct jc *c, struct gb *b, struct problem *err)
{
    memset(c, 0, sizeof *c);
    c->b = b;
    c->err = err;
    c->r_ws = c->r_char = c->r_string = c->r_value = -1;
}

static int jc_finish(struct jc *c, int r, int root, struct gram **out)
{
    free(c->memo);
    if (r < 0 || !ok(c)) {
        int rc = c->b->rc;
        if (rc == ERR_TOOBIG && c->err)
            snprintf(c->err->message, sizeof c->err->message,
                     "the schema compiles to too large a grammar (limit %u elements)", GRAM_MAX_ELEMS);
        gb_release(c->b);
        return rc ? rc : ERR_INVAL;
    }
    struct gb_seq s = {0};
    gb_seq_ref(c->b, &s, r);
    gb_rule_add(c->b, root, &s);
    return gb_finish(c->b, out, c->err);
}

int gram_compile_json_object(struct gram **out, struct problem *err)
{
    struct gb b;
    struct jc c;
    gb_init(&b);
    jc_init(&c, &b, err);
    int root = gb_rule(&b);
    json_t *schema = json_pack("{s:s}", "type", "object");
    int r = schema ? compile(&c, schema, "") : -1;
    if (!schema)
        b.rc = ERR_NOMEM;
    json_decref(schema);
    return jc_finish(&c, r, root, out);
}

int gram_compile_json_schema(const char *text, size_t len, struct gram **out,
                             struct problem *err)
{
    if (!text || !out)
        return ERR_INVAL;
    struct js_limits lim = {GRAM_MAX_SCHEMA_BYTES, JC_MAX_DEPTH * 2, 1};
    struct js_error je;
    json_t *root = NULL;
    int rc = js_parse(text, len, &lim, &root, &je);
    if (rc) {
        if (err)
            snprintf(err->message, sizeof err->message, "the schema is not valid JSON: %s",
                     je.message);
        return rc == ERR_TOOBIG ? ERR_TOOBIG : ERR_INVAL;
    }
    struct gb b;
    struct jc c;
    gb_init(&b);
    jc_init(&c, &b, err);
    c.root = root;
    int rt = gb_rule(&b);
    int r = compile(&c, root, "");
    rc = jc_finish(&c, r, rt, out);
    json_decref(root);
    return rc;
}

/* A keyed frame's item: key_i infix value(schema_i) for each [key_i, schema_i]
 * of pairs, each schema its own $ref root. */
static int keyed_item(struct jc *c, json_t *pairs, const char *infix)
{
    if (!json_is_array(pairs) || json_array_size(pairs) == 0)
        return jfail(c, "keyed frame: expected a non-empty array of [key, schema] pairs");
    int r = gb_rule(c->b);
    struct gb_seq s = {0};
    for (size_t i = 0; r >= 0 && i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i), *k = json_array_get(p, 0), *sc = json_array_get(p, 1);
        if (json_array_size(p) != 2 || !json_is_string(k)) {
            r = jfail(c, "keyed frame: pair %zu is not [key, schema]", i);
            break;
        }
        c->root = sc;
        int v = compile(c, sc, "");
        if (v < 0) {
            r = -1;
            break;
        }
        gb_seq_lit(c->b, &s, json_string_value(k), json_string_length(k));
        gb_seq_lit(c->b, &s, infix, strlen(infix));
        gb_seq_ref(c->b, &s, v);
        gb_rule_add(c->b, r, &s);
    }
    gb_seq_free(&s);
    return r;
}

int gram_compile_framed(const struct gram_frame *f, struct gram **out, struct problem *err)
{
    if (!f || !f->schema || !out || f->min < 0 || (f->max >= 0 && f->max < f->min) ||
        f->max == 0 || !f->prefix || !f->suffix || !f->sep || (f->keyed && !f->infix))
        return ERR_INVAL;
    struct js_limits lim = {GRAM_MAX_SCHEMA_BYTES, JC_MAX_DEPTH * 2, 1};
    struct js_error je;
    json_t *root = NULL;
    int rc = js_parse(f->schema, f->schema_len, &lim, &root, &je);
    if (rc) {
        if (err)
            snprintf(err->message, sizeof err->message, "the schema is not valid JSON: %s",
                     je.message);
        return rc == ERR_TOOBIG ? ERR_TOOBIG : ERR_INVAL;
    }
    struct gb b;
    struct jc c;
    gb_init(&b);
    jc_init(&c, &b, err);
    c.root = root;
    int rt = gb_rule(&b);
    int item = f->keyed ? keyed_item(&c, root, f->infix) : compile(&c, root, "");
    int r = -1;
    if (item >= 0) {
        /* one := prefix item suffix; rest := sep one rest | empty (up to max - 1) */
        struct gb_seq s = {0};
        gb_seq_lit(&b, &s, f->prefix, strlen(f->prefix));
        gb_seq_ref(&b, &s, item);
        gb_seq_lit(&b, &s, f->suffix, strlen(f->suffix));
        int one = gb_one(&b, &s);
        gb_seq_lit(&b, &s, f->sep, strlen(f->sep));
        gb_seq_ref(&b, &s, one);
        int more = gb_repeat(&b, gb_one(&b, &s), f->min > 0 ? f->min - 1 : 0,
                             f->max < 0 ? -1 : f->max - 1);
        gb_seq_ref(&b, &s, one);
        gb_seq_ref(&b, &s, more);
        r = gb_one(&b, &s);
        if (f->min == 0 && r >= 0) {
            int opt = gb_rule(&b);
            gb_seq_ref(&b, &s, r);
            gb_rule_add(&b, opt, &s);
            gb_rule_add_empty(&b, opt);
            r = opt;
        }
        gb_seq_free(&s);
    }
    rc = jc_finish(&c, r, rt, out);
    json_decref(root);
    return rc;
}

/* ---- the compile cache ---------------------------------------------------------------- */

struct cache_slot {
    uint64_t hash;
    enum gram_kind kind;
    char *src;
    size_t len;
    struct gram *g;          /* NULL: a cached failure */
    int rc;
    struct problem err;
    uint64_t used;
};

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cache_slot g_cache[GRAM_CACHE_ENTRIES];
static uint64_t g_cache_tick;

static int compile_kind(enum gram_kind kind, const char *src, size_t len, struct gram **out,
                        struct problem *err)
{
    switch (kind) {
    case GRAM_REGEX:
        return gram_compile_regex(src, len, out, err);
    case GRAM_JSON_OBJECT:
        return gram_compile_json_object(out, err);
    case GRAM_JSON_SCHEMA:
        return gram_compile_json_schema(src, len, out, err);
    case GRAM_FRAMED:
    case GRAM_FRAMED_KEYED: {
        /* "min\0max\0prefix\0[infix\0]suffix\0sep\0schema" (gram.h) */
        const char *part[7];
        size_t k = 0, at = 0, want = kind == GRAM_FRAMED_KEYED ? 6 : 5;
        for (size_t i = 0; i < len && k < want; i++)
            if (src[i] == 0) {
                part[k++] = src + at;
                at = i + 1;
            }
        if (k != want) {
            snprintf(err->message, sizeof err->message, "framed: malformed source");
            return ERR_INVAL;
        }
        part[want] = src + at;
        int keyed = kind == GRAM_FRAMED_KEYED;
        struct gram_frame f = {part[2], part[3 + keyed], part[4 + keyed], part[want], len - at,
                               (int)strtol(part[0], NULL, 10), (int)strtol(part[1], NULL, 10),
                               keyed, keyed ? part[3] : NULL};
        return gram_compile_framed(&f, out, err);
    }
    case GRAM_CHOICE: {
        size_t n = 0;
        for (size_t i = 0; i <= len; i++)
            if (i == len || src[i] == 0)
                n++;
        if (n > GRAM_MAX_CHOICES) {
            snprintf(err->message, sizeof err->message, "choice: at most %d choices",
                     GRAM_MAX_CHOICES);
            return ERR_INVAL;
        }
        const char **ch = malloc(n * sizeof *ch);
        size_t *lens = malloc(n * sizeof *lens);
        if (!ch || !lens) {
            free(ch);
            free(lens);
            return ERR_NOMEM;
        }
        size_t k = 0, st = 0;
        for (size_t i = 0; i <= len; i++)
            if (i == len || src[i] == 0) {
                ch[k] = src + st;
                lens[k++] = i - st;
                st = i + 1;
            }
        int rc = gram_compile_choice(ch, lens, n, out, err);
        free(ch);
        free(lens);
        return rc;
    }
    }
    return ERR_INVAL;
}

int gram_cache_get(enum gram_kind kind, const char *src, size_t len, struct gram **out,
                   struct problem *err)
{
    struct problem e0;
    if (!err)
        err = &e0;
    memset(err, 0, sizeof *err);
    if (!out || (!src && len))
        return ERR_INVAL;
    if (!src)
        src = "";
    uint64_t h = hash_fnv_add(HASH_FNV_BASIS ^ (uint64_t)kind, src, len);
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < GRAM_CACHE_ENTRIES; i++) {
        struct cache_slot *s = &g_cache[i];
        if (s->src && s->hash == h && s->kind == kind && s->len == len &&
            memcmp(s->src, src, len) == 0) {
            s->used = ++g_cache_tick;
            int rc = s->rc;
            if (rc == 0)
                *out = gram_ref(s->g);
            else
                *err = s->err;
            pthread_mutex_unlock(&g_cache_mu);
            return rc;
        }
    }
    pthread_mutex_unlock(&g_cache_mu);

    struct gram *g = NULL;
    int rc = compile_kind(kind, src, len, &g, err);
    if (rc == ERR_NOMEM)
        return rc;
    if (rc == 0 && gram_n_elems(g) > GRAM_CACHE_MAX_ELEMS) {
        *out = g;   /* too big to keep: compiled again next time, memory stays bounded */
        return 0;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        gram_unref(g);
        return ERR_NOMEM;
    }
    memcpy(copy, src, len);
    copy[len] = 0;
    pthread_mutex_lock(&g_cache_mu);
    int victim = 0;
    for (int i = 1; i < GRAM_CACHE_ENTRIES; i++)
        if (g_cache[i].used < g_cache[victim].used)
            victim = i;
    struct cache_slot *s = &g_cache[victim];
    free(s->src);
    gram_unref(s->g);
    s->hash = h;
    s->kind = kind;
    s->src = copy;
    s->len = len;
    s->g = rc == 0 ? gram_ref(g) : NULL;
    s->rc = rc;
    s->err = *err;
    s->used = ++g_cache_tick;
    pthread_mutex_unlock(&g_cache_mu);
    if (rc == 0)
        *out = g;
    return rc;
}
