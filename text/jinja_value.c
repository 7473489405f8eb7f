/*
 * jinja_value.c - the value model of the Jinja interpreter (see jinja.h,
 * jinja_int.h): the arena every value lives in, lists and dicts, and the
 * Python semantics jinja2 inherits: str() and repr() spelling (True, None,
 * 1.0, ['a', 'b']), truthiness, == and <, `in`, iteration, attribute and
 * item access (jinja2's sandboxed getattr/getitem), slices counting code
 * points, arithmetic (int overflow is an error, not a bignum), and HF's
 * tojson. Also the public value builders and jinja_env, and the
 * render-error helpers every stage after the parser uses.
 */
#include "text/jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/utf8.h"

/* ---- arena --------------------------------------------------------------------- */

void *jar_alloc(struct arena *a, size_t n)
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

void jar_release(struct arena *a)
{
    struct achunk *c = a->head;
    while (c) {
        struct achunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

struct jstr *jar_str(struct arena *a, const char *s, size_t n)
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
/* ---- values -------------------------------------------------------------------- */

struct jv jinja_bool(int b)
{
    struct jv v = mk(JV_BOOL);
    v.u.b = b != 0;
    return v;
}

struct jv jinja_none(void) { return mk(JV_NONE); }

struct jv jinja_int(int64_t i)
{
    struct jv v = mk(JV_INT);
    v.u.i = i;
    return v;
}

struct jv jinja_float(double f)
{
    struct jv v = mk(JV_FLOAT);
    v.u.f = f;
    return v;
}

int jv_list_push(struct arena *a, struct jlist *l, struct jv v)
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

struct jv jv_new_list(struct arena *a, uint8_t t)
{
    struct jlist *l = jar_alloc(a, sizeof *l);
    if (!l)
        return mk(JV_UNDEF);
    memset(l, 0, sizeof *l);
    struct jv v = mk(t);
    v.u.l = l;
    return v;
}

struct jv jv_new_dict(struct arena *a, uint8_t t)
{
    struct jdict *d = jar_alloc(a, sizeof *d);
    if (!d)
        return mk(JV_UNDEF);
    memset(d, 0, sizeof *d);
    struct jv v = mk(t);
    v.u.d = d;
    return v;
}

struct jv *jv_dict_find(const struct jdict *d, struct jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

struct jv *jv_dict_find_s(const struct jdict *d, const char *s, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && str_eq(d->k[i].u.s, s, n))
            return &d->v[i];
    return NULL;
}

/* Grows two parallel arrays of n used elements (keys and values) to twice
 * *cap (first: the first capacity) in the arena, copying what they hold.
 * On failure (arena limit or malloc) nothing changes and -1 is returned. */
int jar_grow_pair(struct arena *a, size_t n, size_t *cap, size_t first, void **x, size_t xsz,
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

int jv_dict_set(struct arena *a, struct jdict *d, struct jv key, struct jv val)
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
/* ---- render errors ------------------------------------------------------------- */

int jr_fail(struct rs *R, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jl_set_fail(&R->rc, ERR_INVAL, R->err, R->errcap, line, fmt, ap);
    va_end(ap);
    return -1;
}

/* An allocation failed: out of memory, or over JINJA_MAX_MEMORY. */
int jr_oom(struct rs *R, int line)
{
    if (R->a->oom == 2)
        return jr_fail(R, line, "template used more than %u bytes of memory", JINJA_MAX_MEMORY);
    if (R->rc == 0)
        R->rc = ERR_NOMEM;
    return -1;
}

void *jr_alloc(struct rs *R, size_t n, int line)
{
    void *p = jar_alloc(R->a, n);
    if (!p)
        jr_oom(R, line);
    return p;
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

int jr_put(struct rs *R, struct buf *b, const char *s, size_t n)
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
int jv_str_into(struct rs *R, struct buf *b, struct jv v, int depth)
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
int jv_to_str(struct rs *R, struct jv v, const struct jstr **out, int line)
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

struct jv jv_new_str(struct rs *R, const char *s, size_t n, int line)
{
    struct jstr *j = jar_str(R->a, s, n);
    if (!j) {
        jr_oom(R, line);
        return mk(JV_UNDEF);
    }
    return mk_strp(j);
}

/* ---- value semantics -------------------------------------------------------- */

int jv_truthy(struct jv v)
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


static int v_eq_d(struct jv a, struct jv b, int depth);
int jv_eq(struct jv a, struct jv b) { return v_eq_d(a, b, 0); }

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

const char *jv_type_name(struct jv v)
{
    static const char *n[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                              "dict", "Namespace", "Macro", "function", "method", "LoopContext",
                              "tuple"};
    return v.t < sizeof n / sizeof n[0] ? n[v.t] : "object";
}

static int v_lt_d(struct rs *R, struct jv a, struct jv b, int line, int depth);

/* Python's <: -1 error, else 0/1 for a < b. */
int jv_lt(struct rs *R, struct jv a, struct jv b, int line) { return v_lt_d(R, a, b, line, 0); }

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

int jv_undef_fail(struct rs *R, struct jv u, int line)
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
int jv_in(struct rs *R, struct jv needle, struct jv hay, int line)
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
int jv_iter(struct rs *R, struct jv v, struct jv *out, int line)
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
int jv_getattr(struct rs *R, struct jv o, const char *name, size_t n, struct jv *out, int line)
{
    *out = mk(JV_UNDEF);
    switch (o.t) {
    case JV_UNDEF:
        return jv_undef_fail(R, o, line);
    case JV_DICT: {
        int m = jb_method_find(JV_DICT, name, n);
        if (m) {
            *out = mk_bound(R, o, (uint8_t)m, line);
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
    case JV_STR: {
        int m = jb_method_find(JV_STR, name, n);
        if (m) {
            *out = mk_bound(R, o, (uint8_t)m, line);
            return R->rc ? -1 : 0;
        }
        return 0;
    }
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
        else if (IS("cycle")) *out = mk_bound(R, o, (uint8_t)jb_method_find(JV_LOOP, name, n), line);
#undef IS
        return R->rc ? -1 : 0;
    }
    default:
        return 0;
    }
}

/* obj[key] (jinja2's getitem: item first, then attribute for string keys). */
int jv_getitem(struct rs *R, struct jv o, struct jv k, struct jv *out, int line)
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

int jv_slice(struct rs *R, struct jv o, struct jv *parts, int *has, struct jv *out, int line)
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

/* a ~ b: str(a) + str(b). */
static int arith_concat(struct rs *R, struct jv a, struct jv b, struct jv *out, int line)
{
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

static int str_add(struct rs *R, struct jv a, struct jv b, struct jv *out, int line)
{
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

/* list + list, tuple + tuple. */
static int seq_add(struct rs *R, struct jv a, struct jv b, struct jv *out, int line)
{
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

/* str * int (either order). */
static int str_mul(struct rs *R, struct jv a, struct jv b, struct jv *out, int line)
{
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

/* Float arithmetic: + - * ** and true division. */
static int arith_float(struct rs *R, uint8_t op, double x, double y, struct jv *out, int line)
{
    double r;
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

/* Integer arithmetic, Python's floor division and modulo; overflow is an error. */
static int arith_int(struct rs *R, uint8_t op, int64_t x, int64_t y, struct jv *out, int line)
{
    int64_t r = 0;
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

int jv_arith(struct rs *R, uint8_t op, struct jv a, struct jv b, struct jv *out, int line)
{
    if (op == OP_CONCAT)
        return arith_concat(R, a, b, out, line);
    if (a.t == JV_UNDEF)
        return jv_undef_fail(R, a, line);
    if (b.t == JV_UNDEF)
        return jv_undef_fail(R, b, line);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR)
        return str_add(R, a, b, out, line);
    if (op == OP_ADD && (a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t)
        return seq_add(R, a, b, out, line);
    if (op == OP_MUL && ((a.t == JV_STR && (b.t == JV_INT || b.t == JV_BOOL)) ||
                         (b.t == JV_STR && (a.t == JV_INT || a.t == JV_BOOL))))
        return str_mul(R, a, b, out, line);
    if (!is_num(a) || !is_num(b))
        return jr_fail(R, line, "unsupported operand types for arithmetic: '%s' and '%s'",
                       jv_type_name(a), jv_type_name(b));
    int fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    if (op == OP_DIV || (fl && op != OP_FLOORDIV && op != OP_MOD))
        return arith_float(R, op, num_f(a), num_f(b), out, line);
    if (fl) {
        double x = num_f(a), y = num_f(b);
        if (y == 0)
            return jr_fail(R, line, "float modulo or floor division by zero");
        double q = floor(x / y);
        *out = mk_float(op == OP_FLOORDIV ? q : x - q * y);
        return 0;
    }
    return arith_int(R, op, num_i(a), num_i(b), out, line);
}

/* ---- tojson (HF: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)) -- */

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

static int json_list(struct rs *R, struct buf *b, struct jv v, const struct jsonopt *o, int level,
                     int line)
{
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
}

/* A key as json.dumps writes it: strings as they are, numbers, bools and
 * None as their JSON text in quotes. */
static int json_key(struct rs *R, struct buf *b, struct jv k, const struct jsonopt *o, int level,
                    int line)
{
    if (k.t == JV_STR)
        return json_str(R, b, k.u.s->p, k.u.s->n, o->ensure_ascii) ? -1 : 0;
    if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
        struct buf kb;
        buf_init(&kb, 64);
        int rc = jv_json(R, &kb, k, o, level + 1, line);
        if (rc == 0)
            rc = json_str(R, b, kb.data, kb.len, 0);
        buf_release(&kb);
        return rc ? -1 : 0;
    }
    return jr_fail(R, line, "tojson: keys must be str, int, float, bool or None");
}

static int json_dict(struct rs *R, struct buf *b, struct jv v, const struct jsonopt *o, int level,
                     int line)
{
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
        if (i && (jr_put(R, b, o->item_sep, o->item_sep_n) ||
                  (o->has_indent && json_nl(R, b, o, level + 1))))
            return -1;
        if (json_key(R, b, v.u.d->k[ord[i]], o, level, line))
            return -1;
        if (jr_put(R, b, o->key_sep, o->key_sep_n) ||
            jv_json(R, b, v.u.d->v[ord[i]], o, level + 1, line))
            return -1;
    }
    if (o->has_indent && json_nl(R, b, o, level))
        return -1;
    return jr_put(R, b, "}", 1);
}

int jv_json(struct rs *R, struct buf *b, struct jv v, const struct jsonopt *o, int level, int line)
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
    case JV_TUPLE: return json_list(R, b, v, o, level, line);
    case JV_DICT: return json_dict(R, b, v, o, level, line);
    default:
        return jr_fail(R, line, "tojson: object of type %s is not JSON serializable", jv_type_name(v));
    }
}
