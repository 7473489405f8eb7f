/*
 * jinja_eval.c - the Jinja evaluator (see jinja.h, jinja_int.h): a walk of
 * the parsed tree. Scopes as jinja2 compiles them: a for-loop body gets a
 * fresh frame per iteration (assignments do not survive the iteration or
 * leak out: namespaces do), `if` bodies share their enclosing frame, a
 * macro's frame sits on the one it was defined in. Expressions: one case
 * per node kind (eval_node); statements: one runner per kind (EXEC).
 * Output goes to R->out (a macro call or a block set/filter captures it in
 * a buffer of its own).
 */
#include "text/jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- scopes ------------------------------------------------------------------------ */

static int eval(struct rs *R, const struct node *x, struct frame *f, struct jv *out);
static int exec_body(struct rs *R, struct node *const *v, size_t n, struct frame *f);

int jr_step(struct rs *R, int line)
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
    int id = jb_global_find(name);
    if (id) {
        struct jv v = mk(JV_FUNC);
        v.aux = (uint8_t)id;
        return v;
    }
    struct jv u = mk(JV_UNDEF);
    u.x = name;
    return u;
}
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

static int eval_slice(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a, p[3] = {mk(JV_NONE), mk(JV_NONE), mk(JV_NONE)};
    int has[3];
    if (eval(R, x->a, f, &a))
        return -1;
    for (int i = 0; i < 3; i++) {
        has[i] = x->v[i] != NULL;
        if (has[i] && eval(R, x->v[i], f, &p[i]))
            return -1;
    }
    return jv_slice(R, a, p, has, out, x->line);
}

/* x(args), x|filter(args), x is test(args). */
static int eval_call(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a;
    struct args A;
    int line = x->line;
    if (x->k == N_FILTER && !x->op)
        return jr_fail(R, line, "no filter named '%s'", x->s->p);
    if (x->k == N_TEST && !x->op)
        return jr_fail(R, line, "no test named '%s'", x->s->p);
    if (eval(R, x->a, f, &a) || eval_args(R, x, f, &A))
        return -1;
    if (x->k == N_CALL)
        return call_value(R, a, &A, out, line);
    if (x->k == N_FILTER)
        return jb_filter(R, x->op, a, &A, out, line);
    int r = jb_test(R, x->op, a, &A, line);
    if (r < 0)
        return -1;
    *out = jinja_bool(r);
    return 0;
}

/* -x, +x */
static int eval_sign(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a;
    int line = x->line;
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
}

/* One comparison a op b (enum cmpop): -1 error, else 0/1. */
static int compare(struct rs *R, uint8_t op, struct jv a, struct jv b, int line)
{
    int r;
    switch (op) {
    case C_EQ: return jv_eq(a, b);
    case C_NE: return !jv_eq(a, b);
    case C_LT: return jv_lt(R, a, b, line);
    case C_GT: return jv_lt(R, b, a, line);
    case C_LE: r = jv_lt(R, b, a, line); return r < 0 ? r : !r;
    case C_GE: r = jv_lt(R, a, b, line); return r < 0 ? r : !r;
    case C_IN: return jv_in(R, a, b, line);
    default: r = jv_in(R, a, b, line); return r < 0 ? r : !r;
    }
}

/* a < b < c ...: Python's chained comparison, stopping at the first false. */
static int eval_cmp(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a, b;
    if (eval(R, x->v[0], f, &a))
        return -1;
    for (size_t i = 1; i < x->n; i++) {
        if (eval(R, x->v[i], f, &b))
            return -1;
        int r = compare(R, x->ops[i - 1], a, b, x->line);
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

/* [a, b], (a, b), {k: v}. */
static int eval_seq(struct rs *R, const struct node *x, struct frame *f, struct jv *out)
{
    struct jv a, b;
    int line = x->line;
    if (x->k == N_DICT) {
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
    }
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
    case N_SLICE: return eval_slice(R, x, f, out);
    case N_CALL:
    case N_FILTER:
    case N_TEST: return eval_call(R, x, f, out);
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
    case N_POS: return eval_sign(R, x, f, out);
    case N_CMP: return eval_cmp(R, x, f, out);
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
    case N_DICT: return eval_seq(R, x, f, out);
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

/* Each statement runs in frame f and returns 0 or -1; break and continue
 * leave R->ctl set for the enclosing loop. */

/* {{ x }} */
static int exec_out(struct rs *R, const struct node *x, struct frame *f)
{
    struct jv a;
    if (eval(R, x->a, f, &a))
        return -1;
    if (a.t == JV_STR)
        return emit(R, a.u.s->p, a.u.s->n);
    return jv_str_into(R, R->out, a, 0) ? -1 : 0;
}

/* if/elif/else: an elif is the else body's one S_IF; bodies share f. */
static int exec_if(struct rs *R, const struct node *x, struct frame *f)
{
    struct jv a;
    if (eval(R, x->a, f, &a))
        return -1;
    if (jv_truthy(a))
        return exec_body(R, x->v, x->n, f);
    return exec_body(R, x->v2, x->n2, f);
}

static int exec_set(struct rs *R, const struct node *x, struct frame *f)
{
    struct jv a;
    return eval(R, x->b, f, &a) || assign(R, x, f, a) ? -1 : 0;
}

/* {% set ns.attr = x %} */
static int exec_setns(struct rs *R, const struct node *x, struct frame *f)
{
    struct jv a, ns = lookup(R, f, x->s);
    if (ns.t != JV_NS)
        return jr_fail(R, x->line, "cannot assign attribute on non-namespace object");
    if (eval(R, x->b, f, &a) || jv_dict_set(R->a, ns.u.d, mk_strp(x->names[0]), a))
        return R->rc ? -1 : jr_oom(R, x->line);
    return 0;
}

/* Runs x's body into a buffer of its own (body; release it whatever the return). */
static int exec_captured(struct rs *R, const struct node *x, struct frame *f, struct buf *body)
{
    struct buf *saved = R->out;
    buf_init(body, saved->max_bytes);
    R->out = body;
    int rc = exec_body(R, x->v, x->n, f);
    R->out = saved;
    return rc;
}

/* {% set name %} ... {% endset %} */
static int exec_setblock(struct rs *R, const struct node *x, struct frame *f)
{
    struct buf body;
    int rc = exec_captured(R, x, f, &body);
    if (rc == 0) {
        struct jv a = jv_new_str(R, body.data ? body.data : "", body.len, x->line);
        rc = R->rc ? -1 : frame_set(R, f, x->names[0], a, x->line);
    }
    buf_release(&body);
    return rc ? -1 : 0;
}

/* {% macro %}: a value closing over the frame it is defined in. */
static int exec_macro(struct rs *R, const struct node *x, struct frame *f)
{
    struct jmacro *m = jr_alloc(R, sizeof *m, x->line);
    if (!m)
        return -1;
    m->def = x;
    m->scope = f;
    struct jv a = mk(JV_MACRO);
    a.u.p = m;
    return frame_set(R, f, x->s, a, x->line) ? -1 : 0;
}

static int exec_break(struct rs *R, const struct node *x, struct frame *f)
{
    (void)f;
    R->ctl = x->k == S_BREAK ? 1 : 2;
    return 0;
}

static int exec_plain(struct rs *R, const struct node *x, struct frame *f)
{
    return exec_body(R, x->v, x->n, f);
}

/* {% filter %}: the body's text through the filter chain x->a, whose
 * innermost operand is the placeholder x->b: filters apply bottom-up. */
static int exec_filterblock(struct rs *R, const struct node *x, struct frame *f)
{
    struct buf body;
    int rc = exec_captured(R, x, f, &body);
    if (rc == 0) {
        const struct node *chain[JINJA_MAX_DEPTH] = {NULL};
        size_t k = 0;
        for (const struct node *c = x->a; c && c != x->b && k < JINJA_MAX_DEPTH; c = c->a)
            chain[k++] = c;
        struct jv a = jv_new_str(R, body.data ? body.data : "", body.len, x->line);
        while (rc == 0 && !R->rc && k-- > 0) {
            struct args A;
            const struct node *c = chain[k];
            if (!c->op)
                rc = jr_fail(R, c->line, "no filter named '%s'", c->s->p);
            else
                rc = eval_args(R, c, f, &A) || jb_filter(R, c->op, a, &A, &a, c->line) ? -1 : 0;
        }
        if (rc == 0 && !R->rc && jv_str_into(R, R->out, a, 0))
            rc = -1;
    }
    buf_release(&body);
    return rc || R->rc ? -1 : 0;
}

static int exec_data(struct rs *R, const struct node *x, struct frame *f)
{
    (void)f;
    return emit(R, x->cv.u.s->p, x->cv.u.s->n);
}

/* The statement runners, by node kind - S_DATA. */
static int (*const EXEC[])(struct rs *R, const struct node *x, struct frame *f) = {
    [S_DATA - S_DATA] = exec_data, [S_OUT - S_DATA] = exec_out, [S_IF - S_DATA] = exec_if,
    [S_FOR - S_DATA] = exec_for, [S_SET - S_DATA] = exec_set, [S_SETNS - S_DATA] = exec_setns,
    [S_SETBLOCK - S_DATA] = exec_setblock, [S_MACRO - S_DATA] = exec_macro,
    [S_BREAK - S_DATA] = exec_break, [S_CONTINUE - S_DATA] = exec_break,
    [S_BODY - S_DATA] = exec_plain, [S_FILTERBLOCK - S_DATA] = exec_filterblock,
};

static int exec_body(struct rs *R, struct node *const *v, size_t n, struct frame *f)
{
    for (size_t i = 0; i < n; i++) {
        const struct node *x = v[i];
        size_t k = (size_t)(x->k - S_DATA);
        if (x->k < S_DATA || k >= sizeof EXEC / sizeof EXEC[0])
            return jr_fail(R, x->line, "internal error: bad statement node");
        if (EXEC[k](R, x, f))
            return -1;
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
