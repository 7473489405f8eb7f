/*
 * jinja_methods.c - the methods templates call on values (str: Python's
 * str methods; dict: get/items/keys/values; loop.cycle) as one {name, type,
 * fn} table, the global functions (raise_exception, strftime_now,
 * namespace, range, dict) as another, and the string algorithms the filters
 * share with the methods: strip, case mapping, replace, split. See
 * jinja_int.h. Strings are Python str: indices count code points.
 */
#include "text/jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/utf8.h"

/* ---- arguments and string algorithms ---------------------------------------------- */

int jb_arg(const struct args *A, size_t i, const char *name, struct jv *out)
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

struct jv jb_strip(struct rs *R, const struct jstr *s, const struct jstr *chars, int which,
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

struct jv jb_case(struct rs *R, const struct jstr *s, int how, int line)
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

struct jv jb_replace(struct rs *R, const struct jstr *s, const struct jstr *old,
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

int jb_need_str(struct rs *R, struct jv v, const char *what, int line)
{
    if (v.t != JV_STR)
        return jr_fail(R, line, "%s: expected a string, got %s", what, jv_type_name(v));
    return 0;
}

/* Piece boundaries of a split, [st[i], en[i]) (heap arrays). */
struct pieces {
    size_t *st, *en;
    size_t n, cap;
};

static int pieces_push(struct pieces *p, size_t b, size_t e)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        size_t *a = realloc(p->st, cap * sizeof *a);
        if (!a)
            return -1;
        p->st = a;
        size_t *c = realloc(p->en, cap * sizeof *c);
        if (!c)
            return -1;
        p->en = c;
        p->cap = cap;
    }
    p->st[p->n] = b;
    p->en[p->n++] = e;
    return 0;
}

/* str.split(): runs of whitespace separate, none at either end. */
static int split_ws(const struct jstr *s, struct pieces *p)
{
    size_t i = 0, w;
    for (;;) {
        while (i < s->n && (w = utf8_py_space((const unsigned char *)s->p + i, s->n - i)))
            i += w;
        if (i >= s->n)
            return 0;
        size_t b = i;
        while (i < s->n && !utf8_py_space((const unsigned char *)s->p + i, s->n - i))
            i += u8len((const unsigned char *)s->p + i, s->n - i);
        if (pieces_push(p, b, i))
            return -1;
    }
}

/* str.split(sep): every occurrence separates. */
static int split_sep(const struct jstr *s, const struct jstr *sep, struct pieces *p)
{
    size_t i = 0, b = 0;
    while (i + sep->n <= s->n) {
        if (!memcmp(s->p + i, sep->p, sep->n)) {
            if (pieces_push(p, b, i))
                return -1;
            i += sep->n;
            b = i;
        } else {
            i++;
        }
    }
    return pieces_push(p, b, s->n);
}

static int push_str(struct rs *R, struct jlist *l, const char *s, size_t n, int line)
{
    struct jv v = jv_new_str(R, s, n, line);
    return v.t == JV_UNDEF || jv_list_push(R->a, l, v) ? -1 : 0;
}

/* Python str.split(sep=None, maxsplit=-1) and rsplit: all pieces are found
 * left to right, then the head (rsplit) or the tail (split) beyond maxsplit
 * is kept whole. */
static int str_split(struct rs *R, const struct jstr *s, const struct jstr *sep, int64_t maxsplit,
                     int right, struct jv *out, int line)
{
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    struct jlist *l = out->u.l;
    if (sep && sep->n == 0)
        return jr_fail(R, line, "empty separator");
    struct pieces p = {0};
    int rc = 0;
    if (sep ? split_sep(s, sep, &p) : split_ws(s, &p))
        goto nomem;
    size_t lo = 0, hi = p.n;    /* pieces [lo, hi) kept separate */
    int join_head = 0, join_tail = 0;
    if (maxsplit >= 0 && (size_t)maxsplit + 1 < p.n) {
        if (right) {
            lo = p.n - (size_t)maxsplit;
            join_head = 1;
        } else {
            hi = (size_t)maxsplit;
            join_tail = 1;
        }
    }
    /* rsplit: the head is everything up to the end of piece lo-1 */
    if (join_head && p.n && push_str(R, l, s->p, p.en[lo - 1], line))
        goto nomem;
    for (size_t k = lo; k < hi; k++)
        if (push_str(R, l, s->p + p.st[k], p.en[k] - p.st[k], line))
            goto nomem;
    if (join_tail && hi < p.n && push_str(R, l, s->p + p.st[hi], s->n - p.st[hi], line))
        goto nomem;
    goto done;
nomem:
    rc = jr_oom(R, line);
done:
    free(p.st);
    free(p.en);
    return rc;
}

/* ---- str methods ----------------------------------------------------------------- */

/* Every method gets its bound object and the call's arguments, starts with
 * *out JV_UNDEF, and returns 0 or -1 (error recorded). */

static int affix(struct rs *R, struct jv self, const struct args *A, int end, struct jv *out,
                 int line)
{
    const struct jstr *s = self.u.s;
    struct jv a0 = mk(JV_UNDEF);
    if (!jb_arg(A, 0, NULL, &a0))
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
            hit = !end ? !memcmp(s->p, p->p, p->n) : !memcmp(s->p + s->n - p->n, p->p, p->n);
    }
    *out = jinja_bool(hit);
    return 0;
}

static int m_startswith(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return affix(R, self, A, 0, out, line);
}

static int m_endswith(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return affix(R, self, A, 1, out, line);
}

static int strip_(struct rs *R, struct jv self, const struct args *A, int which, struct jv *out,
                  int line)
{
    const struct jstr *chars = NULL;
    struct jv a0 = mk(JV_UNDEF);
    if (jb_arg(A, 0, NULL, &a0) && a0.t != JV_NONE) {
        if (jb_need_str(R, a0, "strip", line))
            return -1;
        chars = a0.u.s;
    }
    *out = jb_strip(R, self.u.s, chars, which, line);
    return R->rc ? -1 : 0;
}

static int m_strip(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return strip_(R, self, A, 3, out, line);
}

static int m_lstrip(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return strip_(R, self, A, 1, out, line);
}

static int m_rstrip(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return strip_(R, self, A, 2, out, line);
}

static int split_(struct rs *R, struct jv self, const struct args *A, int right, struct jv *out,
                  int line)
{
    struct jv sep = mk(JV_NONE), ms = mk_int(-1);
    jb_arg(A, 0, "sep", &sep);
    jb_arg(A, 1, "maxsplit", &ms);
    if (sep.t != JV_NONE && jb_need_str(R, sep, "split", line))
        return -1;
    if (ms.t != JV_INT)
        return jr_fail(R, line, "split: maxsplit must be an integer");
    return str_split(R, self.u.s, sep.t == JV_STR ? sep.u.s : NULL, ms.u.i, right, out, line);
}

static int m_split(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return split_(R, self, A, 0, out, line);
}

static int m_rsplit(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return split_(R, self, A, 1, out, line);
}

static int m_replace(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF), a1 = mk(JV_UNDEF), cnt = mk_int(-1);
    int h0 = jb_arg(A, 0, NULL, &a0), h1 = jb_arg(A, 1, NULL, &a1);
    jb_arg(A, 2, "count", &cnt);
    if (!h0 || !h1 || jb_need_str(R, a0, "replace", line) || jb_need_str(R, a1, "replace", line))
        return R->rc ? -1 : jr_fail(R, line, "replace takes two strings");
    *out = jb_replace(R, self.u.s, a0.u.s, a1.u.s, cnt.t == JV_INT ? cnt.u.i : -1, line);
    return R->rc ? -1 : 0;
}

static int case_(struct rs *R, struct jv self, int how, struct jv *out, int line)
{
    *out = jb_case(R, self.u.s, how, line);
    return R->rc ? -1 : 0;
}

static int m_upper(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, self, CASE_UPPER, out, line);
}

static int m_lower(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, self, CASE_LOWER, out, line);
}

static int m_title(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, self, CASE_TITLE, out, line);
}

static int m_capitalize(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, self, CASE_CAPITALIZE, out, line);
}

/* str.find (code point index of the first match, -1) and str.count
 * (non-overlapping matches). */
static int find_(struct rs *R, struct jv self, const struct args *A, int count, struct jv *out,
                 int line)
{
    const struct jstr *s = self.u.s;
    struct jv a0 = mk(JV_UNDEF);
    if (!jb_arg(A, 0, NULL, &a0) || jb_need_str(R, a0, "find/count", line))
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
    if (count && p->n == 0)
        cnt = (int64_t)u8count(s->p, s->n) + 1;
    *out = mk_int(!count ? found : cnt);
    return 0;
}

static int m_find(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return find_(R, self, A, 0, out, line);
}

static int m_count(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    return find_(R, self, A, 1, out, line);
}

static int m_join(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = self.u.s;
    struct jv a0 = mk(JV_UNDEF), items;
    if (!jb_arg(A, 0, NULL, &a0) || jv_iter(R, a0, &items, line))
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
    return R->rc ? -1 : 0;
}

static int m_splitlines(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = self.u.s;
    (void)A;
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    size_t b = 0;
    for (size_t i = 0; i < s->n;) {
        if (s->p[i] == '\n' || s->p[i] == '\r') {
            if (push_str(R, out->u.l, s->p + b, i - b, line))
                return jr_oom(R, line);
            i += (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n') ? 2 : 1;
            b = i;
        } else {
            i++;
        }
    }
    if (b < s->n && push_str(R, out->u.l, s->p + b, s->n - b, line))
        return jr_oom(R, line);
    return 0;
}

enum charclass { CC_DIGIT, CC_ALPHA, CC_SPACE };

/* isdigit / isalpha / isspace: non-empty and every byte in the class
 * (ASCII digits; ASCII letters or any non-ASCII byte; Python whitespace). */
static int is_(struct jv self, int cls, struct jv *out)
{
    const struct jstr *s = self.u.s;
    int ok = s->n > 0;
    for (size_t i = 0; i < s->n && ok; i++) {
        unsigned char c = (unsigned char)s->p[i];
        ok = cls == CC_DIGIT ? (c >= '0' && c <= '9')
           : cls == CC_ALPHA ? ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80
           : utf8_py_space((const unsigned char *)s->p + i, s->n - i) > 0;
    }
    *out = jinja_bool(ok);
    return 0;
}

static int m_isdigit(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)R, (void)A, (void)line;
    return is_(self, CC_DIGIT, out);
}

static int m_isalpha(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)R, (void)A, (void)line;
    return is_(self, CC_ALPHA, out);
}

static int m_isspace(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)R, (void)A, (void)line;
    return is_(self, CC_SPACE, out);
}

/* The argument a format field {fld} (fl bytes) names: "" the next
 * positional, digits a positional index, else a keyword. */
static int format_field(struct rs *R, const struct args *A, const char *fld, size_t fl,
                        size_t *auto_ix, struct jv *v, int line)
{
    if (memchr(fld, ':', fl) || memchr(fld, '!', fl) || memchr(fld, '.', fl) ||
        memchr(fld, '[', fl))
        return jr_fail(R, line, "format: conversions and format specs are not supported");
    if (fl == 0 || isdigit_(fld[0])) {
        size_t ix = fl == 0 ? (*auto_ix)++ : (size_t)strtoul(fld, NULL, 10);
        if (ix >= A->n)
            return jr_fail(R, line, "format: replacement index %zu out of range", ix);
        *v = A->pos[ix];
        return 0;
    }
    size_t k = 0;
    while (k < A->nk && !(A->kn[k]->n == fl && !memcmp(A->kn[k]->p, fld, fl)))
        k++;
    if (k == A->nk)
        return jr_fail(R, line, "format: no argument named '%.*s'", (int)fl, fld);
    *v = A->kv[k];
    return 0;
}

/* str.format: "{}", "{0}", "{name}", "{{", "}}"; no format specs. */
static int m_format(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = self.u.s;
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
            struct jv v = mk(JV_UNDEF);
            rc = format_field(R, A, s->p + i + 1, j - i - 1, &auto_ix, &v, line);
            if (rc)
                break;
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
    return R->rc ? -1 : 0;
}

/* ---- dict and loop methods ---------------------------------------------------------- */

static int m_get(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF), a1 = mk(JV_UNDEF);
    int h0 = jb_arg(A, 0, NULL, &a0), h1 = jb_arg(A, 1, NULL, &a1);
    if (!h0)
        return jr_fail(R, line, "get expected at least 1 argument");
    struct jv *v = jv_dict_find(self.u.d, a0);
    *out = v ? *v : h1 ? a1 : mk(JV_NONE);
    return 0;
}

enum dictpart { DP_KEYS, DP_VALUES, DP_ITEMS };

/* keys(), values(), items() as lists (items: (key, value) tuples). */
static int dict_seq(struct rs *R, struct jv self, int part, struct jv *out, int line)
{
    const struct jdict *d = self.u.d;
    *out = jv_new_list(R->a, JV_LIST);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    for (size_t i = 0; i < d->n; i++) {
        struct jv it = part == DP_KEYS ? d->k[i] : d->v[i];
        if (part == DP_ITEMS) {
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

int jb_dict_items(struct rs *R, struct jv self, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    return dict_seq(R, self, DP_ITEMS, out, line);
}

static int m_items(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return dict_seq(R, self, DP_ITEMS, out, line);
}

static int m_keys(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return dict_seq(R, self, DP_KEYS, out, line);
}

static int m_values(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return dict_seq(R, self, DP_VALUES, out, line);
}

/* loop.cycle(a, b, ...): the argument at loop.index0 modulo their count. */
static int m_cycle(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line)
{
    if (!A->n)
        return jr_fail(R, line, "no items for cycling given");
    const struct jloop *L = self.u.p;
    *out = A->pos[L->index0 % (int64_t)A->n];
    return 0;
}

typedef int method_fn(struct rs *R, struct jv self, const struct args *A, struct jv *out, int line);

static const struct {
    const char *name;
    uint8_t type;     /* the value type the method belongs to */
    method_fn *fn;
} METHODS[] = {
    {"startswith", JV_STR, m_startswith}, {"endswith", JV_STR, m_endswith},
    {"strip", JV_STR, m_strip}, {"lstrip", JV_STR, m_lstrip}, {"rstrip", JV_STR, m_rstrip},
    {"split", JV_STR, m_split}, {"rsplit", JV_STR, m_rsplit}, {"replace", JV_STR, m_replace},
    {"upper", JV_STR, m_upper}, {"lower", JV_STR, m_lower}, {"title", JV_STR, m_title},
    {"capitalize", JV_STR, m_capitalize}, {"find", JV_STR, m_find}, {"count", JV_STR, m_count},
    {"join", JV_STR, m_join}, {"splitlines", JV_STR, m_splitlines},
    {"isdigit", JV_STR, m_isdigit}, {"isalpha", JV_STR, m_isalpha},
    {"isspace", JV_STR, m_isspace}, {"format", JV_STR, m_format},
    {"get", JV_DICT, m_get}, {"items", JV_DICT, m_items}, {"keys", JV_DICT, m_keys},
    {"values", JV_DICT, m_values},
    {"cycle", JV_LOOP, m_cycle},
};

#define N_METHODS (sizeof METHODS / sizeof METHODS[0])

int jb_method_find(uint8_t type, const char *s, size_t n)
{
    for (size_t i = 0; i < N_METHODS; i++)
        if (METHODS[i].type == type && strlen(METHODS[i].name) == n && !memcmp(METHODS[i].name, s, n))
            return (int)i + 1;
    return 0;
}

int jb_method(struct rs *R, struct jv self, int id, const struct args *A, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    if (id < 1 || (size_t)id > N_METHODS)
        return jr_fail(R, line, "unsupported method");
    return METHODS[id - 1].fn(R, self, A, out, line);
}

/* ---- global functions ------------------------------------------------------------ */

/* Each starts with *out None. */

/* raise_exception(msg): the render fails with exactly msg. */
static int g_raise(struct rs *R, const struct args *A, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF);
    const struct jstr *msg;
    (void)out;
    jb_arg(A, 0, NULL, &a0);
    if (jv_to_str(R, a0, &msg, line))
        return -1;
    if (R->rc == 0) {
        R->rc = ERR_INVAL;
        if (R->err && R->errcap)
            snprintf(R->err, R->errcap, "%s", msg->p);
    }
    return -1;
}

/* strftime_now(fmt): the env's time, UTC. */
static int g_strftime(struct rs *R, const struct args *A, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF);
    if (!jb_arg(A, 0, NULL, &a0) || a0.t != JV_STR)
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

/* namespace(...) and dict(...): from an optional mapping and keywords. */
static int mapping(struct rs *R, const struct args *A, uint8_t t, struct jv *out, int line)
{
    struct jv a0 = mk(JV_UNDEF);
    int h0 = jb_arg(A, 0, NULL, &a0);
    *out = jv_new_dict(R->a, t);
    if (out->t == JV_UNDEF)
        return jr_oom(R, line);
    if (h0) {
        if (a0.t != JV_DICT || A->n > 1)
            return jr_fail(R, line, "%s() takes at most one mapping argument",
                           t == JV_NS ? "namespace" : "dict");
        for (size_t i = 0; i < a0.u.d->n; i++)
            if (jv_dict_set(R->a, out->u.d, a0.u.d->k[i], a0.u.d->v[i]))
                return jr_oom(R, line);
    }
    for (size_t i = 0; i < A->nk; i++)
        if (jv_dict_set(R->a, out->u.d, mk_strp(A->kn[i]), A->kv[i]))
            return jr_oom(R, line);
    return 0;
}

static int g_namespace(struct rs *R, const struct args *A, struct jv *out, int line)
{
    return mapping(R, A, JV_NS, out, line);
}

static int g_dict(struct rs *R, const struct args *A, struct jv *out, int line)
{
    return mapping(R, A, JV_DICT, out, line);
}

/* range(stop), range(start, stop[, step]); each item counts as a step. */
static int g_range(struct rs *R, const struct args *A, struct jv *out, int line)
{
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

static const struct {
    const char *name;
    int (*fn)(struct rs *R, const struct args *A, struct jv *out, int line);
} GLOBALS[] = {
    {"raise_exception", g_raise}, {"strftime_now", g_strftime}, {"namespace", g_namespace},
    {"range", g_range}, {"dict", g_dict},
};

#define N_GLOBALS (sizeof GLOBALS / sizeof GLOBALS[0])

int jb_global_find(const struct jstr *name)
{
    for (size_t i = 0; i < N_GLOBALS; i++)
        if (str_eq(name, GLOBALS[i].name, strlen(GLOBALS[i].name)))
            return (int)i + 1;
    return 0;
}

int jb_global_call(struct rs *R, int id, const struct args *A, struct jv *out, int line)
{
    *out = mk(JV_NONE);
    if (id < 1 || (size_t)id > N_GLOBALS)
        return jr_fail(R, line, "unknown function");
    return GLOBALS[id - 1].fn(R, A, out, line);
}
