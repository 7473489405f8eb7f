/*
 * jinja_filters.c - the Jinja filters and tests (see jinja_int.h), each one
 * static function in a {name, fn} table in the style of jinja2's FILTERS
 * and TESTS dicts, aliases included (count, d, e; equalto, ==, lessthan...).
 * A filter row's wants_str flag runs the value through str() before the
 * filter (jinja2's soft_str). The parser resolves names to table ids
 * (jb_filter_find, jb_test_find); evaluation dispatches on them.
 */
#include "text/jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/utf8.h"

/* ---- helpers ---------------------------------------------------------------------- */

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

/* select/reject (want 1/0), selectattr/rejectattr (attr 1). */
static int do_select(struct rs *R, int attr, int want, struct jv seq, const struct args *A,
                     struct jv *out, int line)
{
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

/* ---- filters ---------------------------------------------------------------------- */

/* Each filter gets the value (a string when its row says wants_str: the
 * dispatcher applies str() first) and the call's arguments, starts with
 * *out JV_UNDEF, and returns 0 or -1 (error recorded). */
typedef int filter_fn(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line);

static int f_default(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv a0, b = jinja_bool(0);
    if (!jb_arg(A, 0, "default_value", &a0))
        a0 = jv_new_str(R, "", 0, line);
    jb_arg(A, 1, "boolean", &b);
    *out = (v.t == JV_UNDEF || (jv_truthy(b) && !jv_truthy(v))) ? a0 : v;
    return R->rc ? -1 : 0;
}

static int f_safe(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)R, (void)A, (void)line;
    *out = v;
    return 0;
}

static int f_length(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    int64_t n = 0;
    (void)A;
    if (seq_len(R, v, &n, line))
        return -1;
    *out = mk_int(n);
    return 0;
}

static int f_trim(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    const struct jstr *chars = NULL;
    struct jv a0;
    if (jb_arg(A, 0, "chars", &a0) && a0.t != JV_NONE) {
        if (jb_need_str(R, a0, "trim", line))
            return -1;
        chars = a0.u.s;
    }
    *out = jb_strip(R, v.u.s, chars, 3, line);
    return R->rc ? -1 : 0;
}

static int case_(struct rs *R, struct jv v, int how, struct jv *out, int line)
{
    *out = jb_case(R, v.u.s, how, line);
    return R->rc ? -1 : 0;
}

static int f_upper(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, v, CASE_UPPER, out, line);
}

static int f_lower(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, v, CASE_LOWER, out, line);
}

static int f_capitalize(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, v, CASE_CAPITALIZE, out, line);
}

static int f_title(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return case_(R, v, CASE_JTITLE, out, line);
}

static int f_string(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A, (void)line;
    *out = v;
    return R->rc ? -1 : 0;
}

/* jinja2's wordcount: runs of word characters ([0-9A-Za-z_], non-ASCII). */
static int f_wordcount(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = v.u.s;
    int64_t n = 0;
    int in = 0;
    (void)A, (void)line;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        int w = isdigit_((char)c) || isname0((char)c) || c >= 0x80;
        n += w && !in;
        in = w;
    }
    *out = mk_int(n);
    return R->rc ? -1 : 0;
}

static int f_escape(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = v.u.s;
    struct buf b;
    (void)A;
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
    return R->rc ? -1 : 0;
}

/* indent(width=4, first=False, blank=False); jinja2: lines = (s +
 * "\n").splitlines(); the first line is not indented, empty ones only with
 * blank=True. */
static int f_indent(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    const struct jstr *s = v.u.s, *ind;
    struct jv w = mk_int(4), first = jinja_bool(0), blank = jinja_bool(0);
    jb_arg(A, 0, "width", &w);
    jb_arg(A, 1, "first", &first);
    jb_arg(A, 2, "blank", &blank);
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
    return R->rc ? -1 : 0;
}

/* tojson's keyword arguments as json.dumps options. */
static int json_opts(struct rs *R, const struct args *A, struct jsonopt *o, int line)
{
    struct jv ea = jinja_bool(0), ind = mk(JV_NONE), seps = mk(JV_NONE), sk = jinja_bool(0);
    jb_arg(A, 0, "ensure_ascii", &ea);
    jb_arg(A, 1, "indent", &ind);
    jb_arg(A, 2, "separators", &seps);
    jb_arg(A, 3, "sort_keys", &sk);
    o->ensure_ascii = jv_truthy(ea);
    o->sort_keys = jv_truthy(sk);
    if (ind.t != JV_NONE && ind.t != JV_UNDEF) {
        o->has_indent = 1;
        o->item_sep = ",";
        o->item_sep_n = 1;
        if (ind.t == JV_INT) {
            char sp[256];
            int64_t k = ind.u.i < 0 ? 0 : ind.u.i > 255 ? 255 : ind.u.i;
            memset(sp, ' ', (size_t)k);
            struct jv t = jv_new_str(R, sp, (size_t)k, line);
            if (t.t == JV_UNDEF)
                return -1;
            o->indent = t.u.s;
        } else if (ind.t == JV_STR) {
            o->indent = ind.u.s;
        } else {
            return jr_fail(R, line, "tojson: indent must be an int or a string");
        }
    }
    if (seps.t == JV_LIST || seps.t == JV_TUPLE) {
        if (seps.u.l->n != 2 || seps.u.l->v[0].t != JV_STR || seps.u.l->v[1].t != JV_STR)
            return jr_fail(R, line, "tojson: separators must be two strings");
        o->item_sep = seps.u.l->v[0].u.s->p;
        o->item_sep_n = seps.u.l->v[0].u.s->n;
        o->key_sep = seps.u.l->v[1].u.s->p;
        o->key_sep_n = seps.u.l->v[1].u.s->n;
    }
    return 0;
}

static int f_tojson(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jsonopt o = {0, 0, 0, NULL, ", ", ": ", 2, 2};
    if (json_opts(R, A, &o, line))
        return -1;
    struct buf b;
    buf_init(&b, R->out->max_bytes);
    int rc = jv_json(R, &b, v, &o, 0, line);
    if (rc == 0)
        *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
    buf_release(&b);
    return rc || R->rc ? -1 : 0;
}

static int first_last(struct rs *R, struct jv v, int last, struct jv *out, int line)
{
    if (v.t == JV_UNDEF)
        return 0;
    struct jv items;
    if (jv_iter(R, v, &items, line))
        return -1;
    if (items.u.l->n)
        *out = items.u.l->v[!last ? 0 : items.u.l->n - 1];
    return 0;
}

static int f_first(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return first_last(R, v, 0, out, line);
}

static int f_last(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    return first_last(R, v, 1, out, line);
}

static int f_join(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
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
        if ((at.t == JV_STR && attr_path(R, it, at.u.s, &it, line)) ||
            (i && ss && jr_put(R, &b, ss->p, ss->n)) || jv_str_into(R, &b, it, 0)) {
            buf_release(&b);
            return -1;
        }
    }
    *out = jv_new_str(R, b.data ? b.data : "", b.len, line);
    buf_release(&b);
    return R->rc ? -1 : 0;
}

static int f_replace(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv a0, a1, cnt = mk(JV_NONE);
    if (!jb_arg(A, 0, "old", &a0) || !jb_arg(A, 1, "new", &a1))
        return jr_fail(R, line, "replace takes two arguments");
    const struct jstr *o, *n;
    if (jv_to_str(R, a0, &o, line) || jv_to_str(R, a1, &n, line))
        return -1;
    jb_arg(A, 2, "count", &cnt);
    *out = jb_replace(R, v.u.s, o, n, cnt.t == JV_INT ? cnt.u.i : -1, line);
    return R->rc ? -1 : 0;
}

static int f_items(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    if (v.t == JV_UNDEF) {
        *out = jv_new_list(R->a, JV_LIST);
        return out->t == JV_UNDEF ? jr_oom(R, line) : 0;
    }
    if (v.t != JV_DICT)
        return jr_fail(R, line, "items: can only get item pairs from a mapping");
    return jb_dict_items(R, v, out, line);
}

static int f_int(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv d = mk_int(0);
    jb_arg(A, 0, "default", &d);
    return to_int(R, v, d, out, line);
}

static int f_float(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv d = mk_float(0);
    (void)R, (void)line;
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

static int f_abs(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
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
}

/* round(precision=0, method='common'): Python's round() for common (the
 * exact binary value, ties to even), else floor or ceil. */
static int f_round(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv prec = mk_int(0), method = mk(JV_UNDEF);
    jb_arg(A, 0, "precision", &prec);
    jb_arg(A, 1, "method", &method);
    if (!is_num(v))
        return jr_fail(R, line, "round: expected a number");
    double x = num_f(v), p = pow(10, (double)num_i(prec));
    double r = x * p;
    if (method.t == JV_STR && str_eq(method.u.s, "floor", 5)) r = floor(r);
    else if (method.t == JV_STR && str_eq(method.u.s, "ceil", 4)) r = ceil(r);
    else {
        char tmp[400];
        int digits = (int)(num_i(prec) < 0 ? 0 : num_i(prec) > 300 ? 300 : num_i(prec));
        snprintf(tmp, sizeof tmp, "%.*f", digits, x);
        *out = mk_float(strtod(tmp, NULL));
        return 0;
    }
    *out = mk_float(r / p);
    return 0;
}

static int f_list(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv items;
    (void)A;
    if (jv_iter(R, v, &items, line))
        return -1;
    return copy_list(R, items, out, line);
}

static int f_reverse(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    (void)A;
    if (v.t == JV_STR) {
        struct jv p[3] = {mk(JV_NONE), mk(JV_NONE), mk_int(-1)};
        int has[3] = {1, 1, 1};
        return jv_slice(R, v, p, has, out, line);
    }
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

static int f_select(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return do_select(R, 0, 1, v, A, out, line);
}

static int f_reject(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return do_select(R, 0, 0, v, A, out, line);
}

static int f_selectattr(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return do_select(R, 1, 1, v, A, out, line);
}

static int f_rejectattr(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return do_select(R, 1, 0, v, A, out, line);
}

/* map(attribute=, default=) or map('filter', args...). */
static int f_map(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
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
        } else if (jb_filter(R, fid, items.u.l->v[i], &FA, &r, line)) {
            return -1;
        }
        if (jv_list_push(R->a, out->u.l, r))
            return jr_oom(R, line);
    }
    return 0;
}

static int f_unique(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
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

static int f_dictsort(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv items, rev = jinja_bool(0), cs = jinja_bool(0);
    if (v.t != JV_DICT)
        return jr_fail(R, line, "dictsort: expected a mapping");
    if (jb_dict_items(R, v, &items, line))
        return -1;
    jb_arg(A, 0, "case_sensitive", &cs);
    jb_arg(A, 2, "reverse", &rev);
    if (sort_items(R, items.u.l->v, items.u.l->n, NULL, jv_truthy(rev), jv_truthy(cs), line))
        return -1;
    *out = items;
    return 0;
}

static int f_sort(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    struct jv items, rev = jinja_bool(0), cs = jinja_bool(0), at = mk(JV_UNDEF);
    jb_arg(A, 0, "reverse", &rev);
    jb_arg(A, 1, "case_sensitive", &cs);
    jb_arg(A, 2, "attribute", &at);
    if (jv_iter(R, v, &items, line) || copy_list(R, items, out, line))
        return -1;
    return sort_items(R, out->u.l->v, out->u.l->n, at.t == JV_STR ? at.u.s : NULL,
                      jv_truthy(rev), jv_truthy(cs), line);
}

enum fold { FOLD_SUM, FOLD_MIN, FOLD_MAX };

/* sum(attribute=, start=0), min / max(case_sensitive, attribute=). */
static int fold(struct rs *R, struct jv v, const struct args *A, int how, struct jv *out, int line)
{
    struct jv items, at = mk(JV_UNDEF), acc = mk_int(0);
    if (jv_iter(R, v, &items, line))
        return -1;
    jb_arg(A, how == FOLD_SUM ? 0 : 2, "attribute", &at);
    if (how == FOLD_SUM)
        jb_arg(A, 1, "start", &acc);
    else
        acc = mk(JV_UNDEF);
    for (size_t i = 0; i < items.u.l->n; i++) {
        struct jv it = items.u.l->v[i];
        if (at.t == JV_STR && attr_path(R, it, at.u.s, &it, line))
            return -1;
        if (how == FOLD_SUM) {
            if (jv_arith(R, OP_ADD, acc, it, &acc, line))
                return -1;
        } else if (acc.t == JV_UNDEF) {
            acc = it;
        } else {
            int lt = jv_lt(R, it, acc, line);
            if (lt < 0)
                return -1;
            if ((how == FOLD_MIN) == (lt == 1) && !jv_eq(it, acc))
                acc = it;
        }
    }
    *out = acc;
    return 0;
}

static int f_sum(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return fold(R, v, A, FOLD_SUM, out, line);
}

static int f_min(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return fold(R, v, A, FOLD_MIN, out, line);
}

static int f_max(struct rs *R, struct jv v, const struct args *A, struct jv *out, int line)
{
    return fold(R, v, A, FOLD_MAX, out, line);
}

/* jinja2's FILTERS, with its aliases (count, d, e). */
static const struct {
    const char *name;
    filter_fn *fn;
    uint8_t wants_str;   /* 1: the value goes through str() first */
} FILTERS[] = {
    {"abs", f_abs, 0}, {"capitalize", f_capitalize, 1}, {"count", f_length, 0},
    {"d", f_default, 0}, {"default", f_default, 0}, {"dictsort", f_dictsort, 0},
    {"e", f_escape, 1}, {"escape", f_escape, 1}, {"first", f_first, 0}, {"float", f_float, 0},
    {"indent", f_indent, 1}, {"int", f_int, 0}, {"items", f_items, 0}, {"join", f_join, 0},
    {"last", f_last, 0}, {"length", f_length, 0}, {"list", f_list, 0}, {"lower", f_lower, 1},
    {"map", f_map, 0}, {"max", f_max, 0}, {"min", f_min, 0}, {"reject", f_reject, 0},
    {"rejectattr", f_rejectattr, 0}, {"replace", f_replace, 1}, {"reverse", f_reverse, 0},
    {"round", f_round, 0}, {"safe", f_safe, 0}, {"select", f_select, 0},
    {"selectattr", f_selectattr, 0}, {"sort", f_sort, 0}, {"string", f_string, 1},
    {"sum", f_sum, 0}, {"title", f_title, 1}, {"tojson", f_tojson, 0}, {"trim", f_trim, 1},
    {"unique", f_unique, 0}, {"upper", f_upper, 1}, {"wordcount", f_wordcount, 1},
};

#define N_FILTERS (sizeof FILTERS / sizeof FILTERS[0])

int jb_filter_find(const char *s, size_t n)
{
    for (size_t i = 0; i < N_FILTERS; i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, s, n))
            return (int)i + 1;
    return 0;
}

int jb_filter(struct rs *R, int id, struct jv v, const struct args *A, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    if (id < 1 || (size_t)id > N_FILTERS)
        return jr_fail(R, line, "unsupported filter");
    if (FILTERS[id - 1].wants_str) {
        const struct jstr *s;
        if (jv_to_str(R, v, &s, line))
            return -1;
        v = mk_strp(s);
    }
    return FILTERS[id - 1].fn(R, v, A, out, line);
}

/* ---- tests ------------------------------------------------------------------------ */

/* Each test gets the value, its first argument a (JV_UNDEF if none; the
 * dispatcher requires one when the row says wants_arg) and all arguments;
 * returns 0/1, or -1 on error. */
typedef int test_fn(struct rs *R, struct jv v, struct jv a, const struct args *A, int line);

#define TYPE_TEST(name, cond)                                                       \
    static int name(struct rs *R, struct jv v, struct jv a, const struct args *A, int line) \
    {                                                                               \
        (void)R, (void)a, (void)A, (void)line;                                      \
        return cond;                                                                \
    }

TYPE_TEST(t_defined, v.t != JV_UNDEF)
TYPE_TEST(t_undefined, v.t == JV_UNDEF)
TYPE_TEST(t_none, v.t == JV_NONE)
TYPE_TEST(t_string, v.t == JV_STR)
TYPE_TEST(t_mapping, v.t == JV_DICT)
TYPE_TEST(t_sequence, v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT)
TYPE_TEST(t_iterable,
          v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT || v.t == JV_UNDEF)
TYPE_TEST(t_number, is_num(v))
TYPE_TEST(t_integer, v.t == JV_INT)
TYPE_TEST(t_float, v.t == JV_FLOAT)
TYPE_TEST(t_boolean, v.t == JV_BOOL)
TYPE_TEST(t_true, v.t == JV_BOOL && v.u.b)
TYPE_TEST(t_false, v.t == JV_BOOL && !v.u.b)
TYPE_TEST(t_callable, v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_BOUND)

/* lower / upper: a string with cased characters, all of them in that case. */
static int case_test(struct jv v, int lower)
{
    if (v.t != JV_STR)
        return 0;
    int cased = 0;
    for (size_t i = 0; i < v.u.s->n;) {
        size_t l = u8len((const unsigned char *)v.u.s->p + i, v.u.s->n - i);
        uint32_t c = utf8_decode((const unsigned char *)v.u.s->p + i, l);
        if (cp_cased(c)) {
            cased = 1;
            if (lower ? cp_lower(c) != c : cp_upper(c) != c)
                return 0;
        }
        i += l;
    }
    return cased;
}

static int t_lower(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)R, (void)a, (void)A, (void)line;
    return case_test(v, 1);
}

static int t_upper(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)R, (void)a, (void)A, (void)line;
    return case_test(v, 0);
}

/* jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (Python %). */
static int mod_test(struct rs *R, struct jv v, struct jv d, int64_t want, int line)
{
    struct jv r;
    if (jv_arith(R, OP_MOD, v, d, &r, line))
        return -1;
    return jv_eq(r, mk_int(want));
}

static int t_odd(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)a, (void)A;
    return mod_test(R, v, mk_int(2), 1, line);
}

static int t_even(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)a, (void)A;
    return mod_test(R, v, mk_int(2), 0, line);
}

static int t_divisibleby(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    struct jv d = mk_int(2);
    (void)a;
    if (!jb_arg(A, 0, "num", &d))
        return jr_fail(R, line, "divisibleby takes a number");
    return mod_test(R, v, d, 0, line);
}

static int t_eq(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)R, (void)A, (void)line;
    return jv_eq(v, a);
}

static int t_ne(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)R, (void)A, (void)line;
    return !jv_eq(v, a);
}

static int t_lt(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)A;
    return jv_lt(R, v, a, line);
}

static int t_gt(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)A;
    return jv_lt(R, a, v, line);
}

static int t_le(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)A;
    int r = jv_lt(R, a, v, line);
    return r < 0 ? -1 : !r;
}

static int t_ge(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)A;
    int r = jv_lt(R, v, a, line);
    return r < 0 ? -1 : !r;
}

static int t_in(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)A;
    return jv_in(R, v, a, line);
}

/* Python's `is`: values are the same object (CPython caches -5..256). */
static int t_sameas(struct rs *R, struct jv v, struct jv a, const struct args *A, int line)
{
    (void)R, (void)A, (void)line;
    if (v.t != a.t)
        return 0;
    if (v.t == JV_NONE || v.t == JV_UNDEF)
        return 1;
    if (v.t == JV_BOOL)
        return v.u.b == a.u.b;
    if (v.t == JV_INT)
        return v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256;
    return v.u.p == a.u.p;
}

/* jinja2's TESTS, with its aliases. */
static const struct {
    const char *name;
    test_fn *fn;
    uint8_t wants_arg;   /* 1: "test takes an argument" without one */
} TESTS[] = {
    {"defined", t_defined, 0}, {"undefined", t_undefined, 0}, {"none", t_none, 0},
    {"string", t_string, 0}, {"mapping", t_mapping, 0}, {"sequence", t_sequence, 0},
    {"iterable", t_iterable, 0}, {"number", t_number, 0}, {"integer", t_integer, 0},
    {"float", t_float, 0}, {"boolean", t_boolean, 0}, {"true", t_true, 0},
    {"false", t_false, 0}, {"eq", t_eq, 1}, {"equalto", t_eq, 1}, {"==", t_eq, 1},
    {"ne", t_ne, 1}, {"!=", t_ne, 1}, {"lt", t_lt, 1}, {"lessthan", t_lt, 1}, {"<", t_lt, 1},
    {"le", t_le, 1}, {"<=", t_le, 1}, {"gt", t_gt, 1}, {"greaterthan", t_gt, 1},
    {">", t_gt, 1}, {"ge", t_ge, 1}, {">=", t_ge, 1}, {"in", t_in, 1},
    {"sameas", t_sameas, 1}, {"odd", t_odd, 0}, {"even", t_even, 0},
    {"divisibleby", t_divisibleby, 0}, {"lower", t_lower, 0}, {"upper", t_upper, 0},
    {"callable", t_callable, 0},
};

#define N_TESTS (sizeof TESTS / sizeof TESTS[0])

int jb_test_find(const char *s, size_t n)
{
    for (size_t i = 0; i < N_TESTS; i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, s, n))
            return (int)i + 1;
    return 0;
}

int jb_test(struct rs *R, int id, struct jv v, const struct args *A, int line)
{
    if (id < 1 || (size_t)id > N_TESTS)
        return jr_fail(R, line, "unsupported test");
    struct jv a = mk(JV_UNDEF);
    int has = jb_arg(A, 0, NULL, &a);
    if (TESTS[id - 1].wants_arg && !has)
        return jr_fail(R, line, "test takes an argument");
    return TESTS[id - 1].fn(R, v, a, A, line);
}
