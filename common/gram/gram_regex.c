/*
 * gram_regex.c - regex -> grammar rules (recursive descent straight into
 * the builder), and the choice-list compiler.
 *
 *   alt    := concat ('|' concat)*
 *   concat := (atom quant?)*
 *   atom   := char | '.' | class | escape | '(' ['?:'] alt ')'
 *   quant  := ('*' | '+' | '?' | '{n}' | '{n,}' | '{n,m}') '?'?
 *
 * Characters are bytes for ASCII and whole UTF-8 sequences otherwise; `.`
 * and negated classes match any ASCII byte of the complement plus any
 * multi-byte UTF-8 character. In JSON-string mode each produced character
 * is written as a JSON string would hold it (`"` as \", `\` as \\, control
 * characters escaped), so a pattern constrains the decoded value.
 */
#include "common/gram/gram_int.h"
#include "common/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define RX_MAX_NEST 64

struct rx {
    struct gb *b;
    const char *s;
    size_t n, i;
    int json;
    int nest;
    struct problem *err;
    int failed;
};

/* A parsed atom: a byte class (is_cls) or a rule. */
struct atom {
    int is_cls;
    int negated_or_dot;   /* also any multi-byte UTF-8 character */
    struct gcls c;
    int rule;
};

__attribute__((format(printf, 2, 3))) static int rx_fail(struct rx *x, const char *fmt, ...)
{
    if (!x->failed) {
        char m[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        if (x->err)
            snprintf(x->err->message, sizeof x->err->message, "regex: %s (at offset %zu)", m, x->i);
        x->failed = 1;
    }
    return -1;
}

static int rx_alt(struct rx *x);

/* A class (plus multibyte when asked) as a rule or an element of seq. */
static void cls_to_seq(struct rx *x, const struct atom *a, struct gb_seq *seq)
{
    struct gb *b = x->b;
    int need_rule = a->negated_or_dot;
    struct gcls plain = a->c;
    if (x->json) {
        for (unsigned c = 0; c < 0x20; c++)
            if (gcls_has(&a->c, c))
                need_rule = 1;
        if (gcls_has(&a->c, '"') || gcls_has(&a->c, '\\'))
            need_rule = 1;
        for (unsigned c = 0; c < 0x20; c++)
            plain.w[c >> 5] &= ~(1u << (c & 31));
        plain.w['"' >> 5] &= ~(1u << ('"' & 31));
        plain.w['\\' >> 5] &= ~(1u << ('\\' & 31));
    }
    if (!need_rule) {
        gb_seq_chr(b, seq, &a->c);
        return;
    }
    int r = gb_rule(b);
    if (r < 0)
        return;
    int any = 0;
    for (int k = 0; k < 8; k++)
        any |= plain.w[k] != 0;
    if (any) {
        struct gb_seq s = {0};
        gb_seq_chr(b, &s, &plain);
        gb_rule_add(b, r, &s);
    }
    if (x->json) {
        for (unsigned c = 0; c < 0x20; c++) {
            if (!gcls_has(&a->c, c))
                continue;
            char esc[8];
            switch (c) {
            case '\n': snprintf(esc, sizeof esc, "\\n"); break;
            case '\r': snprintf(esc, sizeof esc, "\\r"); break;
            case '\t': snprintf(esc, sizeof esc, "\\t"); break;
            case '\b': snprintf(esc, sizeof esc, "\\b"); break;
            case '\f': snprintf(esc, sizeof esc, "\\f"); break;
            default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
            }
            struct gb_seq s = {0};
            gb_seq_lit(b, &s, esc, strlen(esc));
            gb_rule_add(b, r, &s);
        }
        if (gcls_has(&a->c, '"')) {
            struct gb_seq s = {0};
            gb_seq_lit(b, &s, "\\\"", 2);
            gb_rule_add(b, r, &s);
        }
        if (gcls_has(&a->c, '\\')) {
            struct gb_seq s = {0};
            gb_seq_lit(b, &s, "\\\\", 2);
            gb_rule_add(b, r, &s);
        }
    }
    if (a->negated_or_dot)
        gb_add_utf8_multibyte(b, r);
    if (b->rule[r].n == 0) {
        rx_fail(x, "a character class that matches nothing");
        return;
    }
    gb_seq_ref(b, seq, r);
}

static void atom_to_seq(struct rx *x, const struct atom *a, struct gb_seq *seq)
{
    if (a->is_cls)
        cls_to_seq(x, a, seq);
    else
        gb_seq_ref(x->b, seq, a->rule);
}

static int atom_rule(struct rx *x, const struct atom *a)
{
    if (!a->is_cls)
        return a->rule;
    struct gb_seq s = {0};
    cls_to_seq(x, a, &s);
    return gb_one(x->b, &s);
}

static void cls_digit(struct gcls *c) { gcls_range(c, '0', '9'); }
static void cls_word(struct gcls *c)
{
    gcls_range(c, 'a', 'z');
    gcls_range(c, 'A', 'Z');
    gcls_range(c, '0', '9');
    gcls_add(c, '_');
}
static void cls_space(struct gcls *c)
{
    gcls_add(c, ' ');
    gcls_range(c, '\t', '\r');  /* \t \n \v \f \r */
}

static void cls_invert_ascii(struct gcls *c)
{
    for (int k = 0; k < 4; k++)
        c->w[k] = ~c->w[k];
    for (int k = 4; k < 8; k++)
        c->w[k] = 0;
}

/* An escape after '\' (x->i at the letter). Fills a class; *multi = the
 * class also takes multi-byte characters (\D \W \S). Returns 0 or -1. */
static int rx_escape(struct rx *x, struct gcls *c, int *multi, int in_class)
{
    if (x->i >= x->n)
        return rx_fail(x, "trailing backslash");
    char e = x->s[x->i++];
    struct gcls t;
    memset(&t, 0, sizeof t);
    *multi = 0;
    switch (e) {
    case 'd': cls_digit(c); return 0;
    case 'w': cls_word(c); return 0;
    case 's': cls_space(c); return 0;
    case 'D': cls_digit(&t); cls_invert_ascii(&t); *multi = 1; break;
    case 'W': cls_word(&t); cls_invert_ascii(&t); *multi = 1; break;
    case 'S': cls_space(&t); cls_invert_ascii(&t); *multi = 1; break;
    case 'n': gcls_add(c, '\n'); return 0;
    case 'r': gcls_add(c, '\r'); return 0;
    case 't': gcls_add(c, '\t'); return 0;
    case 'f': gcls_add(c, '\f'); return 0;
    case 'v': gcls_add(c, '\v'); return 0;
    case '0': gcls_add(c, 0); return 0;
    case 'x': {
        if (x->i + 2 > x->n || hex_digit(x->s[x->i]) < 0 || hex_digit(x->s[x->i + 1]) < 0)
            return rx_fail(x, "\\x needs two hex digits");
        int v = hex_digit(x->s[x->i]) * 16 + hex_digit(x->s[x->i + 1]);
        x->i += 2;
        if (v >= 0x80)
            return rx_fail(x, "\\x escapes above 0x7f are not supported");
        gcls_add(c, (unsigned)v);
        return 0;
    }
    case 'b':
        if (in_class) {
            gcls_add(c, '\b');
            return 0;
        }
        return rx_fail(x, "word boundaries (\\b) are not supported");
    default:
        if (e >= '1' && e <= '9')
            return rx_fail(x, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rx_fail(x, "unsupported escape \\%c", e);
        if ((unsigned char)e >= 0x80)
            return rx_fail(x, "escaped non-ASCII characters are not supported");
        gcls_add(c, (unsigned char)e);
        return 0;
    }
    for (int k = 0; k < 8; k++)
        c->w[k] |= t.w[k];
    return 0;
}

/* A bracket class; x->i just after '['. */
static int rx_class(struct rx *x, struct atom *a)
{
    int neg = 0, first = 1;
    if (x->i < x->n && x->s[x->i] == '^') {
        neg = 1;
        x->i++;
    }
    struct gcls c;
    memset(&c, 0, sizeof c);
    int multi_any = 0;
    for (;;) {
        if (x->i >= x->n)
            return rx_fail(x, "unterminated character class");
        unsigned char ch = (unsigned char)x->s[x->i];
        if (ch == ']' && !first) {
            x->i++;
            break;
        }
        first = 0;
        struct gcls one;
        memset(&one, 0, sizeof one);
        int lo = -1, multi = 0;
        if (ch >= 0x80)
            return rx_fail(x, "non-ASCII characters inside [...] are not supported");
        x->i++;
        if (ch == '\\') {
            if (rx_escape(x, &one, &multi, 1) < 0)
                return -1;
            int cnt = 0, only = -1;
            for (unsigned b = 0; b < 256; b++)
                if (gcls_has(&one, b)) {
                    cnt++;
                    only = (int)b;
                }
            if (cnt == 1 && !multi)
                lo = only;
        } else {
            lo = ch;
            gcls_add(&one, ch);
        }
        multi_any |= multi;
        /* a range lo-hi */
        if (lo >= 0 && x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            unsigned char hc = (unsigned char)x->s[x->i];
            int hi = -1;
            if (hc >= 0x80)
                return rx_fail(x, "non-ASCII characters inside [...] are not supported");
            x->i++;
            if (hc == '\\') {
                struct gcls h;
                memset(&h, 0, sizeof h);
                int m2 = 0;
                if (rx_escape(x, &h, &m2, 1) < 0)
                    return -1;
                int cnt = 0;
                for (unsigned b = 0; b < 256; b++)
                    if (gcls_has(&h, b)) {
                        cnt++;
                        hi = (int)b;
                    }
                if (cnt != 1 || m2)
                    return rx_fail(x, "a class escape cannot end a range");
            } else {
                hi = hc;
            }
            if (hi < lo)
                return rx_fail(x, "range out of order in character class");
            gcls_range(&one, (unsigned)lo, (unsigned)hi);
        }
        for (int k = 0; k < 8; k++)
            c.w[k] |= one.w[k];
    }
    if (neg) {
        if (multi_any)
            return rx_fail(x, "\\D, \\W and \\S inside a negated class are not supported");
        cls_invert_ascii(&c);
    }
    a->is_cls = 1;
    a->negated_or_dot = neg || multi_any;
    a->c = c;
    return 0;
}

static int rx_atom(struct rx *x, struct atom *a)
{
    memset(a, 0, sizeof *a);
    unsigned char ch = (unsigned char)x->s[x->i];
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            if (x->i + 1 < x->n && x->s[x->i + 1] == ':')
                x->i += 2;
            else
                return rx_fail(x, "lookaround and named groups are not supported");
        }
        if (++x->nest > RX_MAX_NEST)
            return rx_fail(x, "groups nested deeper than %d", RX_MAX_NEST);
        int r = rx_alt(x);
        x->nest--;
        if (r < 0)
            return -1;
        if (x->i >= x->n || x->s[x->i] != ')')
            return rx_fail(x, "missing ')'");
        x->i++;
        a->rule = r;
        return 0;
    }
    if (ch == '[') {
        x->i++;
        return rx_class(x, a);
    }
    if (ch == '.') {
        x->i++;
        a->is_cls = 1;
        a->negated_or_dot = 1;
        gcls_range(&a->c, 0, 0x7F);
        a->c.w['\n' >> 5] &= ~(1u << '\n');
        return 0;
    }
    if (ch == '\\') {
        x->i++;
        int multi = 0;
        a->is_cls = 1;
        if (rx_escape(x, &a->c, &multi, 0) < 0)
            return -1;
        a->negated_or_dot = multi;
        return 0;
    }
    if (ch == '*' || ch == '+' || ch == '?')
        return rx_fail(x, "nothing to repeat");
    if (ch == '^' || ch == '$')
        return rx_fail(x, "anchors are only supported at the start (^) and end ($)");
    if (ch >= 0x80) {
        size_t l = 0;
        if (ch >= 0xC2 && ch <= 0xDF)
            l = 2;
        else if (ch >= 0xE0 && ch <= 0xEF)
            l = 3;
        else if (ch >= 0xF0 && ch <= 0xF4)
            l = 4;
        if (!l || x->i + l > x->n)
            return rx_fail(x, "invalid UTF-8");
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)x->s[x->i + k] & 0xC0) != 0x80)
                return rx_fail(x, "invalid UTF-8");
        a->rule = gb_lit_rule(x->b, x->s + x->i, l);
        x->i += l;
        return a->rule < 0 ? -1 : 0;
    }
    x->i++;
    a->is_cls = 1;
    gcls_add(&a->c, ch);
    return 0;
}

/* Parse a {n}, {n,}, {n,m} at x->i (on '{'). 1 = parsed, 0 = not a quantifier
 * (a literal '{'), -1 = error. */
static int rx_braces(struct rx *x, int64_t *mn, int64_t *mx)
{
    size_t j = x->i + 1;
    int64_t a = 0, b = -1;
    int nd = 0;
    while (j < x->n && x->s[j] >= '0' && x->s[j] <= '9') {
        if (a > GRAM_MAX_REPEAT * 10)
            return rx_fail(x, "repetition count above %d", GRAM_MAX_REPEAT);
        a = a * 10 + (x->s[j++] - '0');
        nd++;
    }
    if (!nd)
        return 0;
    if (j < x->n && x->s[j] == '}') {
        b = a;
    } else if (j < x->n && x->s[j] == ',') {
        j++;
        int nd2 = 0;
        int64_t c = 0;
        while (j < x->n && x->s[j] >= '0' && x->s[j] <= '9') {
            if (c > GRAM_MAX_REPEAT * 10)
                return rx_fail(x, "repetition count above %d", GRAM_MAX_REPEAT);
            c = c * 10 + (x->s[j++] - '0');
            nd2++;
        }
        if (j >= x->n || x->s[j] != '}')
            return 0;
        b = nd2 ? c : -1;
    } else {
        return 0;
    }
    if (a > GRAM_MAX_REPEAT || b > GRAM_MAX_REPEAT)
        return rx_fail(x, "repetition count above %d", GRAM_MAX_REPEAT);
    if (b >= 0 && b < a)
        return rx_fail(x, "numbers out of order in {} quantifier");
    x->i = j + 1;
    *mn = a;
    *mx = b;
    return 1;
}

static int rx_concat(struct rx *x, struct gb_seq *seq)
{
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (x->s[x->i] == '$' && x->i + 1 == x->n && x->nest == 0)
            break;
        struct atom a;
        if (rx_atom(x, &a) < 0)
            return -1;
        int64_t mn = 1, mx = 1;
        int q = 0;
        if (x->i < x->n) {
            char c = x->s[x->i];
            if (c == '*') {
                mn = 0, mx = -1, q = 1;
                x->i++;
            } else if (c == '+') {
                mn = 1, mx = -1, q = 1;
                x->i++;
            } else if (c == '?') {
                mn = 0, mx = 1, q = 1;
                x->i++;
            } else if (c == '{') {
                int r = rx_braces(x, &mn, &mx);
                if (r < 0)
                    return -1;
                q = r;
            }
            if (q && x->i < x->n && x->s[x->i] == '?')
                x->i++;   /* lazy: the same language */
            if (q && x->i < x->n && (x->s[x->i] == '*' || x->s[x->i] == '+' ||
                                     (x->s[x->i] == '?')))
                return rx_fail(x, "nested quantifier");
        }
        if (!q) {
            atom_to_seq(x, &a, seq);
            continue;
        }
        int r = atom_rule(x, &a);
        if (r < 0)
            return -1;
        int rr = gb_repeat(x->b, r, mn, mx);
        if (rr < 0)
            return -1;
        gb_seq_ref(x->b, seq, rr);
    }
    return x->failed || x->b->rc ? -1 : 0;
}

static int rx_alt(struct rx *x)
{
    int r = gb_rule(x->b);
    if (r < 0)
        return -1;
    for (;;) {
        struct gb_seq s = {0};
        if (rx_concat(x, &s) < 0) {
            gb_seq_free(&s);
            return -1;
        }
        gb_rule_add(x->b, r, &s);
        if (x->i < x->n && x->s[x->i] == '|') {
            x->i++;
            continue;
        }
        break;
    }
    return x->b->rc ? -1 : r;
}

int gram_regex_rule(struct gb *b, const char *re, size_t len, int json_string,
                    struct problem *err)
{
    struct rx x = {b, re, len, 0, json_string, 0, err, 0};
    if (len > GRAM_MAX_REGEX_BYTES)
        return rx_fail(&x, "longer than %d bytes", GRAM_MAX_REGEX_BYTES);
    if (memchr(re, 0, len))
        return rx_fail(&x, "NUL byte in the pattern");
    if (x.i < x.n && re[0] == '^')
        x.i++;
    int r = rx_alt(&x);
    if (r < 0)
        return -1;
    if (x.i < x.n && re[x.i] == '$')
        x.i++;
    if (x.i < x.n)
        return rx_fail(&x, re[x.i] == ')' ? "unbalanced ')'" : "unexpected character");
    return r;
}

int gram_compile_regex(const char *re, size_t len, struct gram **out, struct problem *err)
{
    struct gb b;
    gb_init(&b);
    if (!re || !out) {
        gb_release(&b);
        return ERR_INVAL;
    }
    int root = gb_rule(&b);   /* rule 0 */
    int r = gram_regex_rule(&b, re, len, 0, err);
    if (r < 0) {
        int rc = b.rc ? b.rc : ERR_INVAL;
        if (rc == ERR_TOOBIG && err)
            snprintf(err->message, sizeof err->message, "regex: the pattern expands to too large a grammar");
        gb_release(&b);
        return rc == ERR_NOMEM || rc == ERR_TOOBIG ? rc : ERR_INVAL;
    }
    struct gb_seq s = {0};
    gb_seq_ref(&b, &s, r);
    gb_rule_add(&b, root, &s);
    return gb_finish(&b, out, err);
}

int gram_compile_choice(const char *const *ch, const size_t *lens, size_t n, struct gram **out,
                        struct problem *err)
{
    if (!ch || !lens || !out)
        return ERR_INVAL;
    if (n == 0 || n > GRAM_MAX_CHOICES) {
        if (err)
            snprintf(err->message, sizeof err->message, "choice: between 1 and %d choices are required",
                     GRAM_MAX_CHOICES);
        return ERR_INVAL;
    }
    struct gb b;
    gb_init(&b);
    int root = gb_rule(&b);
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0) {
            gb_release(&b);
            if (err)
                snprintf(err->message, sizeof err->message, "choice %zu is empty", i);
            return ERR_INVAL;
        }
        struct gb_seq s = {0};
        gb_seq_lit(&b, &s, ch[i], lens[i]);
        gb_rule_add(&b, root, &s);
    }
    return gb_finish(&b, out, err);
}
