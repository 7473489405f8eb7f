/*
 * gram.c - the grammar builder, finishing checks, the incremental matcher,
 * the vocabulary trie and token masks (see gram.h for the design).
 */
#include "common/gram/gram_int.h"
#include "common/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

/* ---- classes and the builder --------------------------------------------------- */

void gcls_range(struct gcls *c, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi && b < 256; b++)
        gcls_add(c, b);
}

void gb_init(struct gb *b) { memset(b, 0, sizeof *b); }

void gb_seq_free(struct gb_seq *s)
{
    if (!s)
        return;
    free(s->e);
    memset(s, 0, sizeof *s);
}

void gb_release(struct gb *b)
{
    if (!b)
        return;
    for (size_t r = 0; r < b->n_rule; r++) {
        for (size_t a = 0; a < b->rule[r].n; a++)
            gb_seq_free(&b->rule[r].alt[a]);
        free(b->rule[r].alt);
    }
    free(b->rule);
    free(b->cls);
    memset(b, 0, sizeof *b);
}

static void fail(struct gb *b, int rc)
{
    if (!b->rc)
        b->rc = rc;
}

int gb_rule(struct gb *b)
{
    if (b->rc)
        return -1;
    if (b->n_rule >= GRAM_MAX_ELEMS) {
        fail(b, ERR_TOOBIG);
        return -1;
    }
    if (buf_grow_array((void **)&b->rule, &b->cap_rule, b->n_rule + 1, sizeof *b->rule)) {
        fail(b, ERR_NOMEM);
        return -1;
    }
    memset(&b->rule[b->n_rule], 0, sizeof b->rule[0]);
    return (int)b->n_rule++;
}

static void seq_push(struct gb *b, struct gb_seq *s, int kind, int arg)
{
    if (b->rc)
        return;
    if (++b->n_elems > GRAM_MAX_ELEMS) {
        fail(b, ERR_TOOBIG);
        return;
    }
    if (buf_grow_array((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        fail(b, ERR_NOMEM);
        return;
    }
    s->e[s->n].kind = kind;
    s->e[s->n].arg = arg;
    s->n++;
}

void gb_seq_chr(struct gb *b, struct gb_seq *s, const struct gcls *c)
{
    if (b->rc)
        return;
    /* classes are interned: the last few are the likely matches */
    size_t i, lo = b->n_cls > 64 ? b->n_cls - 64 : 0;
    for (i = b->n_cls; i > lo; i--)
        if (memcmp(&b->cls[i - 1], c, sizeof *c) == 0)
            break;
    if (i == lo) {
        if (buf_grow_array((void **)&b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls)) {
            fail(b, ERR_NOMEM);
            return;
        }
        b->cls[b->n_cls++] = *c;
        i = b->n_cls;
    }
    seq_push(b, s, GE_CHR, (int)(i - 1));
}

void gb_seq_byte(struct gb *b, struct gb_seq *s, unsigned char c)
{
    struct gcls k;
    memset(&k, 0, sizeof k);
    gcls_add(&k, c);
    gb_seq_chr(b, s, &k);
}

void gb_seq_lit(struct gb *b, struct gb_seq *s, const char *lit, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gb_seq_byte(b, s, (unsigned char)lit[i]);
}

void gb_seq_ref(struct gb *b, struct gb_seq *s, int rule)
{
    if (rule < 0) {
        fail(b, ERR_INTERNAL);
        return;
    }
    seq_push(b, s, GE_REF, rule);
}

void gb_rule_add(struct gb *b, int r, struct gb_seq *s)
{
    if (b->rc || r < 0 || (size_t)r >= b->n_rule) {
        fail(b, ERR_INTERNAL);
        gb_seq_free(s);
        return;
    }
    struct gb_rule *R = &b->rule[r];
    if (buf_grow_array((void **)&R->alt, &R->cap, R->n + 1, sizeof *R->alt)) {
        fail(b, ERR_NOMEM);
        gb_seq_free(s);
        return;
    }
    R->alt[R->n++] = *s;
    memset(s, 0, sizeof *s);
}

void gb_rule_add_empty(struct gb *b, int r)
{
    struct gb_seq s = {0};
    gb_rule_add(b, r, &s);
}

int gb_one(struct gb *b, struct gb_seq *s)
{
    int r = gb_rule(b);
    if (r < 0) {
        gb_seq_free(s);
        return -1;
    }
    gb_rule_add(b, r, s);
    return b->rc ? -1 : r;
}

int gb_lit_rule(struct gb *b, const char *lit, size_t n)
{
    struct gb_seq s = {0};
    gb_seq_lit(b, &s, lit, n);
    return gb_one(b, &s);
}

int gb_repeat(struct gb *b, int r, int64_t min, int64_t max)
{
    if (b->rc || r < 0)
        return -1;
    if (min < 0 || min > GRAM_MAX_REPEAT || max > GRAM_MAX_REPEAT || (max >= 0 && max < min)) {
        fail(b, ERR_INTERNAL);
        return -1;
    }
    int tail;
    if (max < 0) {                       /* T := r T | empty */
        tail = gb_rule(b);
        struct gb_seq s = {0};
        gb_seq_ref(b, &s, r);
        gb_seq_ref(b, &s, tail);
        gb_rule_add(b, tail, &s);
        gb_rule_add_empty(b, tail);
    } else {                             /* T_k := r T_{k-1} | empty, T_0 := empty */
        tail = gb_rule(b);
        gb_rule_add_empty(b, tail);
        for (int64_t k = 0; k < max - min; k++) {
            int t = gb_rule(b);
            struct gb_seq s = {0};
            gb_seq_ref(b, &s, r);
            gb_seq_ref(b, &s, tail);
            gb_rule_add(b, t, &s);
            gb_rule_add_empty(b, t);
            tail = t;
        }
    }
    struct gb_seq s = {0};
    for (int64_t k = 0; k < min; k++)
        gb_seq_ref(b, &s, r);
    gb_seq_ref(b, &s, tail);
    return gb_one(b, &s);
}

void gb_add_utf8_multibyte(struct gb *b, int r)
{
    struct gcls cont, c;
    memset(&cont, 0, sizeof cont);
    gcls_range(&cont, 0x80, 0xBF);
    struct {
        unsigned lead_lo, lead_hi, c1_lo, c1_hi;
        int n_more;
    } const forms[] = {
        {0xC2, 0xDF, 0x80, 0xBF, 0},   /* 2 bytes */
        {0xE0, 0xE0, 0xA0, 0xBF, 1},   /* 3 bytes, no overlongs */
        {0xE1, 0xEC, 0x80, 0xBF, 1},
        {0xED, 0xED, 0x80, 0x9F, 1},   /* no surrogates */
        {0xEE, 0xEF, 0x80, 0xBF, 1},
        {0xF0, 0xF0, 0x90, 0xBF, 2},   /* 4 bytes */
        {0xF1, 0xF3, 0x80, 0xBF, 2},
        {0xF4, 0xF4, 0x80, 0x8F, 2},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        struct gb_seq s = {0};
        memset(&c, 0, sizeof c);
        gcls_range(&c, forms[i].lead_lo, forms[i].lead_hi);
        gb_seq_chr(b, &s, &c);
        memset(&c, 0, sizeof c);
        gcls_range(&c, forms[i].c1_lo, forms[i].c1_hi);
        gb_seq_chr(b, &s, &c);
        for (int k = 0; k < forms[i].n_more; k++)
            gb_seq_chr(b, &s, &cont);
        gb_rule_add(b, r, &s);
    }
}

/* ---- finishing: left recursion / empty loops, flattening -------------------------- */

static void set_err(struct problem *err, const char *msg)
{
    if (err)
        snprintf(err->message, sizeof err->message, "%s", msg);
}

/* 1 when some rule can reach itself without consuming a byte. */
static int left_cycle(const struct gb *b, uint8_t *nullable, int *rule_out)
{
    size_t n = b->n_rule;
    /* nullable fixpoint */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            for (size_t a = 0; a < b->rule[r].n && !nullable[r]; a++) {
                const struct gb_seq *s = &b->rule[r].alt[a];
                size_t i = 0;
                while (i < s->n && s->e[i].kind == GE_REF && nullable[s->e[i].arg])
                    i++;
                if (i == s->n) {
                    nullable[r] = 1;
                    changed = 1;
                }
            }
        }
    }
    /* iterative DFS over "r calls s first" edges: colour 0 white, 1 grey, 2 black */
    uint8_t *col = calloc(n, 1);
    struct fr { uint32_t r, a, i; } *st = malloc(n * sizeof *st);
    int cyc = 0;
    if (!col || !st) {
        free(col);
        free(st);
        return -1;
    }
    for (size_t root = 0; root < n && !cyc; root++) {
        if (col[root])
            continue;
        size_t sp = 0;
        st[sp++] = (struct fr){(uint32_t)root, 0, 0};
        col[root] = 1;
        while (sp && !cyc) {
            struct fr *f = &st[sp - 1];
            const struct gb_rule *R = &b->rule[f->r];
            int pushed = 0;
            while (f->a < R->n && !pushed) {
                const struct gb_seq *s = &R->alt[f->a];
                if (f->i >= s->n || (f->i > 0 && !(s->e[f->i - 1].kind == GE_REF &&
                                                  nullable[s->e[f->i - 1].arg]))) {
                    f->a++;
                    f->i = 0;
                    continue;
                }
                const struct gelem *e = &s->e[f->i++];
                if (e->kind != GE_REF) {
                    f->a++;
                    f->i = 0;
                    continue;
                }
                if (col[e->arg] == 1) {
                    cyc = 1;
                    *rule_out = e->arg;
                    break;
                }
                if (col[e->arg] == 0) {
                    col[e->arg] = 1;
                    st[sp++] = (struct fr){(uint32_t)e->arg, 0, 0};
                    pushed = 1;
                }
            }
            if (!pushed && !cyc) {
                col[st[sp - 1].r] = 2;
                sp--;
            }
        }
    }
    free(col);
    free(st);
    return cyc;
}

int gb_finish(struct gb *b, struct gram **out, struct problem *err)
{
    int rc = b->rc, cyc_rule = 0;
    struct gram *g = NULL;
    uint8_t *nullable = NULL;
    if (rc) {
        if (rc == ERR_TOOBIG)
            set_err(err, "the grammar is too large");
        else if (rc != ERR_NOMEM)
            set_err(err, "internal error while building the grammar");
        goto out;
    }
    if (b->n_rule == 0) {
        set_err(err, "empty grammar");
        rc = ERR_INVAL;
        goto out;
    }
    if (!(nullable = calloc(b->n_rule, 1))) {
        rc = ERR_NOMEM;
        goto out;
    }
    int c = left_cycle(b, nullable, &cyc_rule);
    if (c < 0) {
        rc = ERR_NOMEM;
        goto out;
    }
    if (c) {
        set_err(err, "the grammar can loop without producing output (a repeated part that can be "
                     "empty, or a $ref that reaches itself before any other value)");
        rc = ERR_INVAL;
        goto out;
    }
    /* productive rules (derive some finite byte string): the root must be */
    memset(nullable, 0, b->n_rule);
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < b->n_rule; r++) {
            if (nullable[r])
                continue;
            for (size_t a = 0; a < b->rule[r].n && !nullable[r]; a++) {
                const struct gb_seq *s = &b->rule[r].alt[a];
                size_t i = 0;
                while (i < s->n && (s->e[i].kind == GE_CHR || nullable[s->e[i].arg]))
                    i++;
                if (i == s->n) {
                    nullable[r] = 1;
                    changed = 1;
                }
            }
        }
    }
    if (!nullable[0]) {
        set_err(err, "the grammar matches nothing (e.g. a schema whose $ref recursion never ends, "
                     "or a class with no character)");
        rc = ERR_INVAL;
        goto out;
    }
    size_t n_alt = 0, n_el = 0;
    for (size_t r = 0; r < b->n_rule; r++) {
        n_alt += b->rule[r].n;
        for (size_t a = 0; a < b->rule[r].n; a++)
            n_el += b->rule[r].alt[a].n + 1;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->el = malloc((n_el + 1) * sizeof *g->el)) ||
        !(g->alt_start = malloc((n_alt + 1) * sizeof *g->alt_start)) ||
        !(g->rule_alt = malloc((b->n_rule + 1) * sizeof *g->rule_alt)) ||
        !(g->cls = malloc((b->n_cls + 1) * sizeof *g->cls))) {
        rc = ERR_NOMEM;
        goto out;
    }
    size_t ai = 0, ei = 0;
    for (size_t r = 0; r < b->n_rule; r++) {
        g->rule_alt[r] = (uint32_t)ai;
        for (size_t a = 0; a < b->rule[r].n; a++) {
            g->alt_start[ai++] = (uint32_t)ei;
            const struct gb_seq *s = &b->rule[r].alt[a];
            if (s->n)
                memcpy(g->el + ei, s->e, s->n * sizeof *s->e);
            ei += s->n;
            g->el[ei].kind = GE_END;
            g->el[ei].arg = 0;
            ei++;
        }
    }
    g->rule_alt[b->n_rule] = (uint32_t)ai;
    g->n_el = ei;
    g->n_rule = b->n_rule;
    if (b->n_cls)
        memcpy(g->cls, b->cls, b->n_cls * sizeof *g->cls);
    g->n_cls = b->n_cls;
    g->refs = 1;
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        rc = ERR_NOMEM;
        goto out;
    }
    *out = g;
    g = NULL;
    rc = 0;
out:
    if (g) {
        free(g->el);
        free(g->alt_start);
        free(g->rule_alt);
        free(g->cls);
        free(g);
    }
    free(nullable);
    gb_release(b);
    return rc;
}

/* ---- grammars ------------------------------------------------------------------------ */

struct gram_cache_ent {
    uint64_t hash;             /* 0 = empty slot */
    const struct gram_vocab *v;
    int32_t *state;            /* (n_state) the state's ints */
    size_t n_state;
    uint32_t *mask;
    size_t n_allowed;
};

static void mask_cache_clear(struct gram *g)
{
    if (!g->ent)
        return;
    for (size_t i = 0; i < 2 * GRAM_MASK_CACHE; i++) {
        free(g->ent[i].state);
        free(g->ent[i].mask);
    }
    memset(g->ent, 0, 2 * GRAM_MASK_CACHE * sizeof *g->ent);
    g->n_ent = 0;
}

struct gram *gram_ref(struct gram *g)
{
    if (g)
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void gram_unref(struct gram *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    mask_cache_clear(g);
    free(g->ent);
    pthread_mutex_destroy(&g->mu);
    free(g->el);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->cls);
    free(g);
}

size_t gram_n_elems(const struct gram *g) { return g ? g->n_el : 0; }
size_t gram_n_rules(const struct gram *g) { return g ? g->n_rule : 0; }

void gram_mask_stats(struct gram *g, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&g->mu);
    *hits = g->hits;
    *misses = g->misses;
    pthread_mutex_unlock(&g->mu);
}

/* ---- states and the matcher ------------------------------------------------------------
 * A state is d[0..len): for each stack, its depth k then its k positions
 * (bottom first; the top is a GE_CHR element); n stacks. A stack of depth 0
 * means "accepted". */

struct gstate {
    int32_t *d;
    size_t len, cap;
    int n;
    int acc;        /* an empty stack is present */
};

static int state_init(struct gstate *s)
{
    memset(s, 0, sizeof *s);
    s->cap = 256;
    s->d = malloc(s->cap * sizeof *s->d);
    return s->d ? 0 : ERR_NOMEM;
}

static void state_release(struct gstate *s)
{
    free(s->d);
    memset(s, 0, sizeof *s);
}

static int state_reserve(struct gstate *s, size_t need)
{
    if (need <= s->cap)
        return 0;
    size_t nc = s->cap * 2;
    while (nc < need)
        nc *= 2;
    int32_t *d = realloc(s->d, nc * sizeof *d);
    if (!d)
        return ERR_NOMEM;
    s->d = d;
    s->cap = nc;
    return 0;
}

/* dst must have room (callers reserve) */
static void state_copy(struct gstate *dst, const struct gstate *src)
{
    memcpy(dst->d, src->d, src->len * sizeof *src->d);
    dst->len = src->len;
    dst->n = src->n;
    dst->acc = src->acc;
}

static void emit(struct gstate *out, const int32_t *stk, int k)
{
    /* dedupe */
    size_t i = 0;
    for (int j = 0; j < out->n; j++) {
        int kk = out->d[i];
        if (kk == k && memcmp(out->d + i + 1, stk, (size_t)k * sizeof *stk) == 0)
            return;
        i += 1 + (size_t)kk;
    }
    if (out->n >= GRAM_MAX_STACKS || state_reserve(out, out->len + 1 + (size_t)k) != 0)
        return;   /* too ambiguous: the stack is dropped (outputs stay in the language) */
    out->d[out->len++] = k;
    memcpy(out->d + out->len, stk, (size_t)k * sizeof *stk);
    out->len += (size_t)k;
    out->n++;
    if (k == 0)
        out->acc = 1;
}

#define EXPAND_GUARD 64

/* Expand stk[0..k) (its top may be END or REF) into byte-class tops. stk has
 * room for GRAM_MAX_DEPTH entries and is modified. */
static void expand(const struct gram *g, struct gstate *out, int32_t *stk, int k, int guard)
{
    for (;;) {
        if (k == 0) {
            emit(out, stk, 0);
            return;
        }
        int32_t p = stk[k - 1];
        const struct gelem *e = &g->el[p];
        if (e->kind == GE_CHR) {
            emit(out, stk, k);
            return;
        }
        if (e->kind == GE_END) {
            k--;
            continue;
        }
        /* a reference: the return position replaces the frame, unless it is the
         * end of the alternative (tail call) */
        int base;
        if (g->el[p + 1].kind == GE_END) {
            base = k - 1;
        } else {
            stk[k - 1] = p + 1;
            base = k;
        }
        if (base >= GRAM_MAX_DEPTH || guard <= 0)
            return;   /* too deep: not allowed */
        uint32_t a0 = g->rule_alt[e->arg], a1 = g->rule_alt[e->arg + 1];
        int32_t copy[GRAM_MAX_DEPTH];
        for (uint32_t a = a0; a < a1; a++) {
            int32_t *w = stk;
            if (a + 1 < a1) {   /* the last alternative may use stk in place */
                memcpy(copy, stk, (size_t)base * sizeof *stk);
                w = copy;
            }
            w[base] = (int32_t)g->alt_start[a];
            expand(g, out, w, base + 1, guard - 1);
        }
        return;
    }
}

static void state_start(const struct gram *g, struct gstate *s)
{
    int32_t stk[GRAM_MAX_DEPTH];
    s->len = 0;
    s->n = 0;
    s->acc = 0;
    for (uint32_t a = g->rule_alt[0]; a < g->rule_alt[1]; a++) {
        stk[0] = (int32_t)g->alt_start[a];
        expand(g, s, stk, 1, EXPAND_GUARD);
    }
}

static void advance(const struct gram *g, const struct gstate *in, unsigned char c,
                    struct gstate *out)
{
    int32_t stk[GRAM_MAX_DEPTH];
    out->len = 0;
    out->n = 0;
    out->acc = 0;
    size_t i = 0;
    for (int j = 0; j < in->n; j++) {
        int k = in->d[i];
        const int32_t *p = in->d + i + 1;
        i += 1 + (size_t)k;
        if (k == 0)
            continue;
        const struct gelem *e = &g->el[p[k - 1]];
        if (!gcls_has(&g->cls[e->arg], c))
            continue;
        memcpy(stk, p, (size_t)k * sizeof *p);
        stk[k - 1]++;
        expand(g, out, stk, k, EXPAND_GUARD);
    }
}

/* The trie walk's memo: within one mask computation the states reached are
 * interned (hash-consed) and every (state, byte) transition is computed once,
 * so the walk is a DFA walk over the trie: inside a JSON string, where a
 * plain byte leads back to the same state, each of ~100k trie nodes costs
 * one hash lookup instead of an advance(). */
struct wstate {
    size_t off, len;          /* ints in walk.sd */
    int n, acc;
};

struct walk {
    int32_t *sd;              /* (sd_len) interned states' ints */
    size_t sd_len, sd_cap;
    struct wstate *st;        /* (n_st) */
    size_t n_st, cap_st;
    int32_t *sh;              /* (sh_cap) state hash: ids, -1 empty */
    size_t sh_cap;
    int32_t *tr;              /* (n_st * 256) next state per byte: -1 dead, -3 not computed */
    size_t tr_cap;
    int32_t *at;              /* (n_at) state id per trie depth */
    size_t n_at;
    struct gstate in, out;
    int ok;                   /* in/out allocated */
};

#define WALK_MAX_STATES 16384   /* 16 MiB of transitions at most */

struct gram_matcher {
    struct gram *g;
    struct gstate cur, tmp[2];
    struct walk w;
};

int gram_matcher_new(struct gram *g, struct gram_matcher **out)
{
    struct gram_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return ERR_NOMEM;
    if (state_init(&m->cur) || state_init(&m->tmp[0]) || state_init(&m->tmp[1])) {
        gram_matcher_free(m);
        return ERR_NOMEM;
    }
    m->g = gram_ref(g);
    state_start(g, &m->cur);
    *out = m;
    return 0;
}

void gram_matcher_free(struct gram_matcher *m)
{
    if (!m)
        return;
    state_release(&m->cur);
    state_release(&m->tmp[0]);
    state_release(&m->tmp[1]);
    free(m->w.sd);
    free(m->w.st);
    free(m->w.sh);
    free(m->w.tr);
    free(m->w.at);
    state_release(&m->w.in);
    state_release(&m->w.out);
    gram_unref(m->g);
    free(m);
}

int gram_matcher_accept(struct gram_matcher *m, const char *s, size_t n)
{
    if (!m || (n && !s))
        return ERR_INVAL;
    const struct gstate *from = &m->cur;
    for (size_t i = 0; i < n; i++) {
        struct gstate *to = &m->tmp[i & 1];
        advance(m->g, from, (unsigned char)s[i], to);
        if (to->n == 0)
            return ERR_INVAL;
        from = to;
    }
    if (from != &m->cur) {
        if (state_reserve(&m->cur, from->len) != 0)
            return ERR_NOMEM;
        state_copy(&m->cur, from);
    }
    return 0;
}

int gram_matcher_allows(struct gram_matcher *m, const char *s, size_t n)
{
    if (!m || !s || !n)
        return 0;
    const struct gstate *from = &m->cur;
    for (size_t i = 0; i < n; i++) {
        struct gstate *to = &m->tmp[i & 1];
        advance(m->g, from, (unsigned char)s[i], to);
        if (to->n == 0)
            return 0;
        from = to;
    }
    return 1;
}

int gram_matcher_accepting(const struct gram_matcher *m) { return m && m->cur.acc; }

int gram_matcher_can_continue(const struct gram_matcher *m)
{
    return m && m->cur.n > (m->cur.acc ? 1 : 0);
}

int gram_match(struct gram *g, const char *s, size_t n)
{
    struct gram_matcher *m = NULL;
    if (gram_matcher_new(g, &m) != 0)
        return 0;
    int ok = gram_matcher_accept(m, s, n) == 0 && gram_matcher_accepting(m);
    gram_matcher_free(m);
    return ok;
}

/* ---- the vocabulary trie ------------------------------------------------------------------ */

struct gram_vocab {
    size_t n_vocab;
    size_t n_node;           /* node 0 is the root */
    uint8_t *byte;           /* (n_node) edge byte into the node */
    uint16_t *depth;         /* (n_node) root 0 */
    uint32_t *sub_end;       /* (n_node) preorder index after the node's subtree */
    uint32_t *tok_lo, *tok_hi; /* (n_node) tokens ending here: ids[tok_lo..tok_hi) */
    int32_t *ids;            /* (n_tok) token ids in byte order */
    size_t max_len;
};

struct vsort {
    const char *const *bytes;
    const size_t *lens;
};
static struct vsort g_vs; /* only during qsort, under the build lock */
static pthread_mutex_t g_vs_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_tok(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = g_vs.lens[x], ly = g_vs.lens[y];
    int c = memcmp(g_vs.bytes[x], g_vs.bytes[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : 1;
}

void gram_vocab_free(struct gram_vocab *v)
{
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->sub_end);
    free(v->tok_lo);
    free(v->tok_hi);
    free(v->ids);
    free(v);
}

int gram_vocab_new(size_t n_vocab, const char *const *bytes, const size_t *lens,
                   struct gram_vocab **out)
{
    if (!bytes || !lens || n_vocab == 0 || n_vocab > (1u << 24) || !out)
        return ERR_INVAL;
    struct gram_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return ERR_NOMEM;
    v->n_vocab = n_vocab;
    size_t n_tok = 0, total = 1;
    for (size_t i = 0; i < n_vocab; i++) {
        if (!bytes[i] || lens[i] == 0)
            continue;
        if (lens[i] > 1024) {
            gram_vocab_free(v);
            return ERR_INVAL;
        }
        n_tok++;
        total += lens[i];
        if (lens[i] > v->max_len)
            v->max_len = lens[i];
    }
    v->ids = malloc((n_tok + 1) * sizeof *v->ids);
    v->byte = malloc(total);
    v->depth = malloc(total * sizeof *v->depth);
    v->sub_end = malloc(total * sizeof *v->sub_end);
    v->tok_lo = malloc(total * sizeof *v->tok_lo);
    v->tok_hi = malloc(total * sizeof *v->tok_hi);
    uint32_t *path = malloc((v->max_len + 2) * sizeof *path);
    if (!v->ids || !v->byte || !v->depth || !v->sub_end || !v->tok_lo || !v->tok_hi || !path) {
        free(path);
        gram_vocab_free(v);
        return ERR_NOMEM;
    }
    n_tok = 0;
    for (size_t i = 0; i < n_vocab; i++)
        if (bytes[i] && lens[i])
            v->ids[n_tok++] = (int32_t)i;
    pthread_mutex_lock(&g_vs_mu);
    g_vs.bytes = bytes;
    g_vs.lens = lens;
    qsort(v->ids, n_tok, sizeof *v->ids, cmp_tok);
    pthread_mutex_unlock(&g_vs_mu);

    /* preorder build: path[d] = node at depth d on the current branch */
    size_t nn = 1, plen = 0;
    v->byte[0] = 0;
    v->depth[0] = 0;
    v->tok_lo[0] = v->tok_hi[0] = 0;
    path[0] = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (size_t k = 0; k < n_tok; k++) {
        int32_t id = v->ids[k];
        const char *b = bytes[id];
        size_t l = lens[id], lcp = 0;
        while (prev && lcp < l && lcp < prev_len && b[lcp] == prev[lcp])
            lcp++;
        /* close nodes deeper than lcp */
        while (plen > lcp) {
            v->sub_end[path[plen]] = (uint32_t)nn;
            plen--;
        }
        for (size_t d = lcp; d < l; d++) {
            uint32_t node = (uint32_t)nn++;
            v->byte[node] = (uint8_t)b[d];
            v->depth[node] = (uint16_t)(d + 1);
            v->tok_lo[node] = v->tok_hi[node] = (uint32_t)k;
            path[++plen] = node;
        }
        uint32_t leaf = path[plen];
        if (v->tok_hi[leaf] == v->tok_lo[leaf])
            v->tok_lo[leaf] = (uint32_t)k;
        v->tok_hi[leaf] = (uint32_t)k + 1;
        prev = b;
        prev_len = l;
    }
    while (plen > 0) {
        v->sub_end[path[plen]] = (uint32_t)nn;
        plen--;
    }
    v->sub_end[0] = (uint32_t)nn;
    v->n_node = nn;
    free(path);
    *out = v;
    return 0;
}

size_t gram_vocab_n(const struct gram_vocab *v) { return v ? v->n_vocab : 0; }
size_t gram_mask_words(const struct gram_vocab *v) { return v ? (v->n_vocab + 31) / 32 : 0; }

/* ---- masks ---------------------------------------------------------------------------------- */

static uint64_t state_hash(const struct gstate *s, const struct gram_vocab *v)
{
    uint64_t h = hash_fnv_add(HASH_FNV_BASIS ^ (uint64_t)(uintptr_t)v, s->d, s->len * sizeof *s->d);
    return h ? h : 1;
}

static uint64_t ints_hash(const int32_t *d, size_t n)
{
    uint64_t h = HASH_FNV_BASIS; /* FNV-1a over whole ints, with a shift mix */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)d[i];
        h *= HASH_FNV_PRIME;
        h ^= h >> 29;
    }
    return h;
}

static int walk_rehash_states(struct walk *w)
{
    size_t nc = w->sh_cap ? w->sh_cap * 2 : 1024;
    int32_t *sh = malloc(nc * sizeof *sh);
    if (!sh)
        return ERR_NOMEM;
    memset(sh, 0xff, nc * sizeof *sh);
    for (size_t i = 0; i < w->n_st; i++) {
        size_t j = ints_hash(w->sd + w->st[i].off, w->st[i].len) & (nc - 1);
        while (sh[j] >= 0)
            j = (j + 1) & (nc - 1);
        sh[j] = (int32_t)i;
    }
    free(w->sh);
    w->sh = sh;
    w->sh_cap = nc;
    return 0;
}

/* The id of state s (interned). -2 when out of memory or too many states. */
static int32_t walk_intern(struct walk *w, const struct gstate *s)
{
    uint64_t h = ints_hash(s->d, s->len);
    for (size_t j = h & (w->sh_cap - 1);; j = (j + 1) & (w->sh_cap - 1)) {
        int32_t id = w->sh[j];
        if (id < 0)
            break;
        const struct wstate *e = &w->st[id];
        if (e->len == s->len && memcmp(w->sd + e->off, s->d, s->len * sizeof *s->d) == 0)
            return id;
    }
    if (w->n_st >= WALK_MAX_STATES)
        return -2;
    if (buf_grow_array((void **)&w->st, &w->cap_st, w->n_st + 1, sizeof *w->st) ||
        buf_grow_array((void **)&w->sd, &w->sd_cap, w->sd_len + s->len + 1, sizeof *w->sd) ||
        buf_grow_array((void **)&w->tr, &w->tr_cap, (w->n_st + 1) * 256, sizeof *w->tr))
        return -2;
    for (size_t b = 0; b < 256; b++)
        w->tr[w->n_st * 256 + b] = -3;
    memcpy(w->sd + w->sd_len, s->d, s->len * sizeof *s->d);
    w->st[w->n_st] = (struct wstate){w->sd_len, s->len, s->n, s->acc};
    w->sd_len += s->len;
    int32_t id = (int32_t)w->n_st++;
    if (w->n_st * 2 > w->sh_cap) {
        if (walk_rehash_states(w) != 0)
            return -2;
    } else {
        size_t j = h & (w->sh_cap - 1);
        while (w->sh[j] >= 0)
            j = (j + 1) & (w->sh_cap - 1);
        w->sh[j] = id;
    }
    return id;
}

int gram_matcher_mask_uncached(struct gram_matcher *m, const struct gram_vocab *v,
                               uint32_t *mask, size_t *n_allowed)
{
    if (!m || !v || !mask)
        return ERR_INVAL;
    struct walk *w = &m->w;
    size_t words = gram_mask_words(v), n_ok = 0;
    memset(mask, 0, words * sizeof *mask);
    if (!w->ok) {
        if (state_init(&w->in) || state_init(&w->out))
            return ERR_NOMEM;
        w->ok = 1;
    }
    if (w->n_at < v->max_len + 1) {
        int32_t *at = realloc(w->at, (v->max_len + 1) * sizeof *at);
        if (!at)
            return ERR_NOMEM;
        w->at = at;
        w->n_at = v->max_len + 1;
    }
    /* reset the memo (tables keep their memory) */
    w->n_st = 0;
    w->sd_len = 0;
    if (!w->sh_cap && walk_rehash_states(w) != 0)
        return ERR_NOMEM;
    memset(w->sh, 0xff, w->sh_cap * sizeof *w->sh);

    const struct gram *g = m->g;
    int32_t root = walk_intern(w, &m->cur);
    if (root < 0)
        return ERR_NOMEM;
    w->at[0] = root;
    size_t i = 1, n = v->n_node;
    while (i < n) {
        unsigned d = v->depth[i];
        int32_t sid = w->at[d - 1];
        int32_t nx = w->tr[(size_t)sid * 256 + v->byte[i]];
        if (nx == -3) {
            const struct wstate *e = &w->st[sid];
            if (state_reserve(&w->in, e->len) != 0)
                return ERR_NOMEM;
            memcpy(w->in.d, w->sd + e->off, e->len * sizeof *w->in.d);
            w->in.len = e->len;
            w->in.n = e->n;
            w->in.acc = e->acc;
            advance(g, &w->in, v->byte[i], &w->out);
            nx = w->out.n == 0 ? -1 : walk_intern(w, &w->out);
            if (nx == -2)
                return ERR_NOMEM;
            w->tr[(size_t)sid * 256 + v->byte[i]] = nx;
        }
        if (nx < 0) {
            i = v->sub_end[i];
            continue;
        }
        w->at[d] = nx;
        for (uint32_t k = v->tok_lo[i]; k < v->tok_hi[i]; k++) {
            int32_t id = v->ids[k];
            mask[id >> 5] |= 1u << (id & 31);
            n_ok++;
        }
        i++;
    }
    if (n_allowed)
        *n_allowed = n_ok;
    return 0;
}

int gram_matcher_mask(struct gram_matcher *m, const struct gram_vocab *v, uint32_t *mask,
                      size_t *n_allowed)
{
    if (!m || !v || !mask)
        return ERR_INVAL;
    struct gram *g = m->g;
    size_t words = gram_mask_words(v), slots = 2 * GRAM_MASK_CACHE;
    uint64_t h = state_hash(&m->cur, v);
    pthread_mutex_lock(&g->mu);
    if (g->ent) {
        for (size_t j = h % slots, probe = 0; probe < slots && g->ent[j].hash; probe++,
                    j = (j + 1) % slots) {
            struct gram_cache_ent *e = &g->ent[j];
            if (e->hash == h && e->v == v && e->n_state == m->cur.len &&
                memcmp(e->state, m->cur.d, e->n_state * sizeof *e->state) == 0) {
                memcpy(mask, e->mask, words * sizeof *mask);
                if (n_allowed)
                    *n_allowed = e->n_allowed;
                g->hits++;
                pthread_mutex_unlock(&g->mu);
                return 0;
            }
        }
    }
    g->misses++;
    pthread_mutex_unlock(&g->mu);

    size_t n_ok = 0;
    int rc = gram_matcher_mask_uncached(m, v, mask, &n_ok);
    if (rc)
        return rc;
    if (n_allowed)
        *n_allowed = n_ok;

    /* insert (best effort: out of memory only skips caching) */
    int32_t *st = malloc((m->cur.len + 1) * sizeof *st);
    uint32_t *mk = malloc(words * sizeof *mk);
    if (!st || !mk) {
        free(st);
        free(mk);
        return 0;
    }
    memcpy(st, m->cur.d, m->cur.len * sizeof *st);
    memcpy(mk, mask, words * sizeof *mk);
    pthread_mutex_lock(&g->mu);
    if (!g->ent)
        g->ent = calloc(slots, sizeof *g->ent);
    if (g->ent && g->n_ent >= GRAM_MASK_CACHE)
        mask_cache_clear(g);
    if (g->ent) {
        size_t j = h % slots;
        while (g->ent[j].hash)
            j = (j + 1) % slots;
        g->ent[j] = (struct gram_cache_ent){h, v, st, m->cur.len, mk, n_ok};
        g->n_ent++;
        st = NULL;
        mk = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    free(st);
    free(mk);
    return 0;
}
