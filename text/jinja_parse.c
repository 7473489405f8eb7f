/*
 * jinja_parse.c - the Jinja parser (see jinja.h, jinja_int.h): tokens to an
 * immutable tree of struct node in the template's arena, by recursive
 * descent with jinja2.parser's precedence: condexpr > or > and > not >
 * compare > + - > ~ > * / // % > ** > unary > primary+postfix, then filters
 * and tests (so `a + b | trim` is `a + (b|trim)`). Statements: one parser
 * per tag name (the STMTS table). Nesting is capped at JINJA_MAX_DEPTH.
 */
#include "text/jinja_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

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

/* A string literal; adjacent literals concatenate. */
static struct node *p_str_lit(struct parser *P, struct token *t)
{
    struct node *x = nn(P, N_CONST, t->line);
    if (!x)
        return NULL;
    const struct jstr *s = t->s;
    adv(P);
    while (cur(P)->k == TK_STR) {
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
    return x;
}

/* After '(': (), (x), or a tuple (a, b, ...). */
static struct node *p_paren(struct parser *P, struct token *t)
{
    struct node *x = NULL;
    adv(P);
    if (is_op(cur(P), ")")) {
        adv(P);
        return nn(P, N_TUPLE, t->line);
    }
    struct node *first = p_expr(P, 1);
    if (!first)
        return NULL;
    if (is_op(cur(P), ",")) {
        struct nvec items = {0};
        if (nv_push(P, &items, first, NULL)) {
            nv_free(&items);
            return NULL;
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
    return x;
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
    case TK_STR:
        x = p_str_lit(P, t);
        break;
    case TK_INT:
    case TK_FLOAT:
        if ((x = nn(P, N_CONST, t->line)))
            x->cv = t->k == TK_INT ? mk_int(t->i) : mk_float(t->f);
        adv(P);
        break;
    case TK_OP:
        if (is_op(t, "(")) {
            x = p_paren(P, t);
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

/* Each statement parser is called after its name and returns its node, the
 * parser left on the tag's end (p_stmt checks it), or NULL on failure. */

/* {% if %} ... {% elif %} ... {% else %} ... {% endif %}: an elif is an
 * S_IF that is the whole else body of the one before. */
static struct node *p_if(struct parser *P, int line)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const e2[] = {"endif", NULL};
    struct node *top = NULL, *prev = NULL;
    P->soft++;
    for (;;) {
        struct node *c = nn(P, S_IF, line);
        if (!c || !(c->a = p_tuple(P, 1)) || p_block_end(P))
            return NULL;
        c->v = p_sub(P, ends, &c->n);
        if (P->rc)
            return NULL;
        if (!top)
            top = c;
        else {
            prev->v2 = jar_alloc(P->a, sizeof *prev->v2);
            if (!prev->v2)
                return P->rc = ERR_NOMEM, NULL;
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
            adv(P);
            if (p_block_end(P))
                return NULL;
            c->v2 = p_sub(P, e2, &c->n2);
            if (P->rc)
                return NULL;
        }
        adv(P); /* endif */
        break;
    }
    P->soft--;
    return top;
}

/* {% for targets in iter [if cond] %} ... [{% else %} ...] {% endfor %} */
static struct node *p_for(struct parser *P, int line)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const e2[] = {"endfor", NULL};
    struct node *x;
    if (!(x = nn(P, S_FOR, line)) || p_targets(P, x))
        return NULL;
    if (!is_name(cur(P), "in"))
        return p_fail(P, cur(P)->line, "expected 'in'"), NULL;
    adv(P);
    if (!(x->a = p_tuple(P, 0)))
        return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(x->b = p_tuple(P, 1)))
            return NULL;
    }
    if (is_name(cur(P), "recursive"))
        return p_fail(P, cur(P)->line, "recursive loops are not supported"), NULL;
    if (p_block_end(P))
        return NULL;
    x->v = p_sub(P, ends, &x->n);
    if (P->rc)
        return NULL;
    if (is_name(cur(P), "else")) {
        adv(P);
        if (p_block_end(P))
            return NULL;
        x->v2 = p_sub(P, e2, &x->n2);
        if (P->rc)
            return NULL;
    }
    adv(P);
    return x;
}

/* {% set ns.attr = expr %}, {% set targets = expr %}, {% set name %}...{% endset %} */
static struct node *p_set(struct parser *P, int line)
{
    static const char *const ends[] = {"endset", NULL};
    struct node *x;
    if (cur(P)->k == TK_NAME && is_op(peek(P, 1), ".") && peek(P, 2)->k == TK_NAME) {
        if (!(x = nn(P, S_SETNS, line)))
            return NULL;
        x->s = cur(P)->s;
        adv(P);
        adv(P);
        x->names = jar_alloc(P->a, sizeof *x->names);
        if (!x->names)
            return P->rc = ERR_NOMEM, NULL;
        x->names[0] = cur(P)->s;
        x->n_names = 1;
        adv(P);
        if (expect_op(P, "=") || !(x->b = p_tuple(P, 1)))
            return NULL;
        return x;
    }
    if (!(x = nn(P, S_SET, line)) || p_targets(P, x))
        return NULL;
    if (is_op(cur(P), "=")) {
        adv(P);
        return (x->b = p_tuple(P, 1)) ? x : NULL;
    }
    if (x->n_names != 1)
        return p_fail(P, line, "a block set takes one name"), NULL;
    x->k = S_SETBLOCK;
    if (p_block_end(P))
        return NULL;
    x->v = p_sub(P, ends, &x->n);
    if (P->rc)
        return NULL;
    adv(P);
    return x;
}

/* A macro's "(name, name=default, ...)": names in x->names, defaults
 * (NULL: none) in x->v2. */
static int p_params(struct parser *P, struct node *x)
{
    struct nvec params = {0};
    int rc = -1;
    if (expect_op(P, "("))
        return -1;
    while (!is_op(cur(P), ")")) {
        if (params.n && expect_op(P, ","))
            goto out;
        if (cur(P)->k != TK_NAME) {
            p_fail(P, cur(P)->line, "expected a parameter name");
            goto out;
        }
        const struct jstr *pn = cur(P)->s;
        struct node *def = NULL;
        adv(P);
        if (is_op(cur(P), "=")) {
            adv(P);
            if (!(def = p_expr(P, 1)))
                goto out;
        }
        if (nv_push(P, &params, def, pn))
            goto out;
    }
    adv(P);
    x->v2 = nv_done(P, &params);
    x->names = nv_names(P, &params);
    x->n2 = x->n_names = params.n;
    rc = 0;
out:
    nv_free(&params);
    return rc;
}

/* {% macro name(params) %} ... {% endmacro %} */
static struct node *p_macro(struct parser *P, int line)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct node *x;
    if (cur(P)->k != TK_NAME)
        return p_fail(P, line, "expected a macro name"), NULL;
    if (!(x = nn(P, S_MACRO, line)))
        return NULL;
    x->s = cur(P)->s;
    adv(P);
    if (p_params(P, x) || P->rc || p_block_end(P))
        return NULL;
    x->v = p_sub(P, ends, &x->n);
    if (P->rc)
        return NULL;
    adv(P);
    return x;
}

static struct node *p_break(struct parser *P, int line) { return nn(P, S_BREAK, line); }
static struct node *p_continue(struct parser *P, int line) { return nn(P, S_CONTINUE, line); }

/* {% filter f|g(args) %} ... {% endfilter %}: x->a is the filter chain, its
 * innermost operand the placeholder x->b (the body's text at run time). */
static struct node *p_filterblock(struct parser *P, int line)
{
    static const char *const ends[] = {"endfilter", NULL};
    struct node *x, *base = nn(P, N_CONST, line);
    if (!base || !(x = nn(P, S_FILTERBLOCK, line)) || !(x->a = p_filter_one(P, base, line)))
        return NULL;
    while (is_op(cur(P), "|")) {
        adv(P);
        if (!(x->a = p_filter_one(P, x->a, line)))
            return NULL;
    }
    x->b = base;
    if (p_block_end(P))
        return NULL;
    x->v = p_sub(P, ends, &x->n);
    if (P->rc)
        return NULL;
    adv(P);
    return x;
}

/* {% generation %} ... {% endgeneration %} (HF): renders its body. */
static struct node *p_generation(struct parser *P, int line)
{
    static const char *const ends[] = {"endgeneration", NULL};
    struct node *x;
    if (!(x = nn(P, S_BODY, line)) || p_block_end(P))
        return NULL;
    x->v = p_sub(P, ends, &x->n);
    if (P->rc)
        return NULL;
    adv(P);
    return x;
}

static const struct {
    const char *name;
    struct node *(*fn)(struct parser *P, int line);
} STMTS[] = {
    {"if", p_if}, {"for", p_for}, {"set", p_set}, {"macro", p_macro}, {"break", p_break},
    {"continue", p_continue}, {"filter", p_filterblock}, {"generation", p_generation},
};

static int p_stmt(struct parser *P, struct nvec *out)
{
    struct token *kw = cur(P);
    int line = kw->line;
    if (kw->k != TK_NAME)
        return p_fail(P, line, "expected a statement name");
    adv(P);
    size_t i = 0;
    while (i < sizeof STMTS / sizeof STMTS[0] && !is_name(kw, STMTS[i].name))
        i++;
    if (i == sizeof STMTS / sizeof STMTS[0])
        return p_fail(P, line, "unknown or unsupported statement '%s'", kw->s->p);
    struct node *x = STMTS[i].fn(P, line);
    if (!x || p_block_end(P))
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
    struct token *tok = NULL;
    size_t n_tok = 0;
    int rc = jl_lex(src, len, &t->a, &tok, &n_tok, err, errcap);
    if (rc)
        goto out;
    struct parser P = {.t = tok, .n = n_tok, .a = &t->a, .err = err, .errcap = errcap};
    struct nvec body = {0};
    if (p_body(&P, &body, NULL) == 0) {
        t->body = nv_done(&P, &body);
        t->n_body = body.n;
    }
    nv_free(&body);
    rc = P.rc;
out:
    free(tok);
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
