/*
 * fleet.c - fleet cost attribution (see fleet.h for the rule).
 *
 * Per worker: its leases sorted by (start, id), the cut points of its
 * clipped timeline sorted, and one sweep that keeps the leases active
 * between two cuts; each piece is idle or split over the units of the
 * active leases. Buckets are found through a small open-addressing table
 * on the key, then sorted by key.
 */
#include "jobd/account/fleet.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/err.h"

#define DAY_S 86400
#define USD_MAX_MICROS (10000LL * 1000000LL) /* $10,000 per hour */

/* ---- cost classes ---------------------------------------------------------------------------- */

/* Glob inclusion, to refuse a class an earlier one shadows. A glob is a
 * list of tokens: a literal byte (a backslash escapes the next), '?', '*',
 * or a bracket expression "[...]" (a '[' without its ']' is a literal, as
 * fnmatch reads it). covers(j, i) says every name i matches, j matches
 * too, by matching j's tokens against i's: j's literal only i's same
 * literal, j's '?' any one-byte token of i, j's bracket i's literals it
 * accepts (or the same bracket text), j's '*' any run of i's tokens. That
 * is sound (a yes is always true) but not complete: an unusual spelling of
 * the same set ("??*" against "?*?") is not recognised, and then both
 * classes stay, first match still winning. Cost: O(|i| * |j|) <= 128^2. */
enum { GT_LIT, GT_ONE, GT_STAR, GT_SET };

struct gtok {
    unsigned char kind, c; /* c: GT_LIT's byte */
    const char *set;       /* GT_SET: its text, from '[' */
    size_t set_len;        /* ... to ']' included */
};

static size_t glob_tokens(const char *g, struct gtok *t, size_t cap)
{
    size_t n = 0;
    for (const char *p = g; *p && n < cap; n++) {
        if (*p == '*' || *p == '?') {
            t[n] = (struct gtok){*p == '*' ? GT_STAR : GT_ONE, 0, NULL, 0};
            p++;
            continue;
        }
        if (*p == '[') {
            const char *q = p + 1;
            if (*q == '!' || *q == '^')
                q++;
            if (*q == ']')
                q++;
            while (*q && *q != ']')
                q++;
            if (*q == ']') {
                t[n] = (struct gtok){GT_SET, 0, p, (size_t)(q - p) + 1};
                p = q + 1;
                continue;
            }
        }
        if (*p == '\\' && p[1])
            p++;
        t[n] = (struct gtok){GT_LIT, (unsigned char)*p, NULL, 0};
        p++;
    }
    return n;
}

static int set_accepts(const struct gtok *s, unsigned char c)
{
    char pat[140], name[2] = {(char)c, 0};
    if (s->set_len >= sizeof pat)
        return 0;
    memcpy(pat, s->set, s->set_len);
    pat[s->set_len] = 0;
    return fnmatch(pat, name, 0) == 0;
}

static int glob_covers(const char *j, const char *i)
{
    struct gtok tj[129], ti[129];
    size_t nj = glob_tokens(j, tj, 129), ni = glob_tokens(i, ti, 129);
    unsigned char m[130][130]; /* m[a][b]: j's tokens from a cover i's from b; filled backwards */
    for (size_t a = nj + 1; a-- > 0;)
        for (size_t b = ni + 1; b-- > 0;) {
            unsigned char v;
            if (a == nj)
                v = b == ni;
            else if (tj[a].kind == GT_STAR)
                v = m[a + 1][b] || (b < ni && m[a][b + 1]);
            else if (b == ni || ti[b].kind == GT_STAR)
                v = 0;
            else if (tj[a].kind == GT_ONE)
                v = m[a + 1][b + 1];
            else if (tj[a].kind == GT_LIT)
                v = ti[b].kind == GT_LIT && ti[b].c == tj[a].c && m[a + 1][b + 1];
            else if (ti[b].kind == GT_LIT)
                v = set_accepts(&tj[a], ti[b].c) && m[a + 1][b + 1];
            else
                v = ti[b].kind == GT_SET && ti[b].set_len == tj[a].set_len &&
                    memcmp(ti[b].set, tj[a].set, tj[a].set_len) == 0 && m[a + 1][b + 1];
            m[a][b] = v;
        }
    return m[0][0];
}

int fleet_costs_parse(const char *spec, struct fleet_costs *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[256];
        if (len == 0 || len >= sizeof item) {
            snprintf(msg, cap, "entry %zu: expected NAME_GLOB=USD[/h]", out->n + 1);
            return ERR_INVAL;
        }
        memcpy(item, p, len);
        item[len] = 0;
        char *eq = strchr(item, '=');
        if (!eq || eq == item || (size_t)(eq - item) > 128) {
            snprintf(msg, cap, "'%s': expected NAME_GLOB=USD[/h] with a glob of 1..128 bytes", item);
            return ERR_INVAL;
        }
        *eq = 0;
        char *usd = eq + 1;
        size_t ul = strlen(usd);
        if (ul > 2 && strcmp(usd + ul - 2, "/h") == 0)
            usd[ul - 2] = 0;
        int64_t micros;
        if (cfg_parse_micros(usd, USD_MAX_MICROS, &micros)) {
            snprintf(msg, cap,
                     "'%s': the price must be US dollars per hour, 0 .. 10000, at most 6 decimals (got '%s')",
                     item, usd);
            return ERR_INVAL;
        }
        for (size_t i = 0; i < out->n; i++) {
            if (strcmp(out->v[i].glob, item) == 0) {
                snprintf(msg, cap, "'%s' is listed twice", item);
                return ERR_INVAL;
            }
            if (glob_covers(out->v[i].glob, item)) {
                snprintf(msg, cap,
                         "'%s' can never apply: every name it matches matches '%s' (entry %zu) first; "
                         "list the narrower glob first",
                         item, out->v[i].glob, i + 1);
                return ERR_INVAL;
            }
        }
        if (out->n == FLEET_COST_CLASSES_MAX) {
            snprintf(msg, cap, "more than %d worker classes", FLEET_COST_CLASSES_MAX);
            return ERR_INVAL;
        }
        memcpy(out->v[out->n].glob, item, strlen(item) + 1); /* <= 128 bytes: checked above */
        out->v[out->n++].hourly_cost_micros = micros;
        if (!end)
            break;
        p = end + 1;
        if (!*p) {
            snprintf(msg, cap, "a trailing ','");
            return ERR_INVAL;
        }
    }
    return 0;
}

int64_t fleet_cost_for(const struct fleet_costs *c, const char *name, int64_t declared)
{
    for (size_t i = 0; c && i < c->n; i++)
        if (fnmatch(c->v[i].glob, name, 0) == 0)
            return c->v[i].hourly_cost_micros;
    return declared >= 0 ? declared : -1;
}

static int64_t meter(int64_t h, int64_t t)
{
    if (t <= 0 || h <= 0)
        return 0;
    return (int64_t)((unsigned __int128)t * (unsigned __int128)h / 3600u);
}

int64_t fleet_meter_cost(int64_t h, int64_t a, int64_t b)
{
    return b > a ? meter(h, b) - meter(h, a) : 0;
}

const char *fleet_state_name(enum fleet_state s)
{
    return s == FLEET_BUSY ? "busy" : s == FLEET_IDLE ? "idle" : "gone";
}

static int64_t div_half_up(unsigned __int128 num, unsigned __int128 den)
{
    return (int64_t)((num + den / 2) / den);
}

void fleet_effective(const struct fleet_bucket *b, int64_t *in_per_1m, int64_t *out_per_1m)
{
    int64_t in_comp = b->prompt_tokens - b->cached_tokens;
    unsigned __int128 comp = (unsigned __int128)(in_comp + b->completion_tokens);
    unsigned __int128 cost = (unsigned __int128)(b->cost_micros > 0 ? b->cost_micros : 0);
    *out_per_1m = comp ? div_half_up(cost * 1000000u, comp) : -1;
    *in_per_1m = comp && b->prompt_tokens > 0
                     ? div_half_up(cost * 1000000u * (unsigned __int128)in_comp,
                                   comp * (unsigned __int128)b->prompt_tokens)
                     : -1;
}

/* ---- buckets --------------------------------------------------------------------------------- */

struct bmap {
    struct fleet_bucket *v;
    size_t n, cap;
    int32_t *slot; /* index + 1, 0 = empty */
    size_t nslot;  /* power of two */
};

static uint64_t key_hash(const char *k)
{
    uint64_t h = 1469598103934665603ull;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211ull;
    return h;
}

static int bmap_grow(struct bmap *m)
{
    size_t ns = m->nslot ? m->nslot * 2 : 64;
    int32_t *slot = calloc(ns, sizeof *slot);
    if (!slot)
        return ERR_NOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = key_hash(m->v[i].key) & (ns - 1);
        while (slot[j])
            j = (j + 1) & (ns - 1);
        slot[j] = (int32_t)i + 1;
    }
    free(m->slot);
    m->slot = slot;
    m->nslot = ns;
    return 0;
}

/* The bucket of key (created with start_time t), or NULL (ERR_NOMEM). */
static struct fleet_bucket *bmap_get(struct bmap *m, const char *key, int64_t t)
{
    if ((m->n + 1) * 2 > m->nslot && bmap_grow(m))
        return NULL;
    size_t j = key_hash(key) & (m->nslot - 1);
    while (m->slot[j]) {
        struct fleet_bucket *b = &m->v[m->slot[j] - 1];
        if (strcmp(b->key, key) == 0) {
            if (t < b->start_time)
                b->start_time = t;
            return b;
        }
        j = (j + 1) & (m->nslot - 1);
    }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        struct fleet_bucket *v = realloc(m->v, nc * sizeof *v);
        if (!v)
            return NULL;
        m->v = v;
        m->cap = nc;
    }
    struct fleet_bucket *b = &m->v[m->n];
    memset(b, 0, sizeof *b);
    snprintf(b->key, sizeof b->key, "%s", key);
    b->start_time = t;
    m->slot[j] = (int32_t)++m->n;
    return b;
}

static void day_key(int64_t t, char out[16])
{
    int64_t z = t / DAY_S + 719468; /* civil_from_days (Howard Hinnant) */
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t mo = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (mo <= 2);
    snprintf(out, 16, "%04d-%02d-%02d", (int)(y % 10000), (int)mo, (int)d);
}

/* ---- the computation ------------------------------------------------------------------------- */

struct calc {
    const struct store_fleet *in;
    const struct fleet_opts *o;
    int admin_days; /* day buckets carry the fleet's own time (no batch filter) */
    struct bmap m;
    struct fleet_report *r;
    const struct store_fleet_unit **us; /* units sorted by (lease id, batch id) */
    size_t *ufirst, *ucount;            /* per lease (index in in->leases): its units in us */
    const struct store_fleet_gap **gs;  /* gaps sorted by (worker id, gone_at) */
};

/* qsort, which may not be given a NULL base even for no elements. */
static void sort_(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(v, n, size, cmp);
}

static int unit_cmp(const void *a, const void *b)
{
    const struct store_fleet_unit *x = *(const struct store_fleet_unit *const *)a;
    const struct store_fleet_unit *y = *(const struct store_fleet_unit *const *)b;
    int c = strcmp(x->lease_id, y->lease_id);
    return c ? c : strcmp(x->batch_id, y->batch_id);
}

static int lease_cmp(const void *a, const void *b)
{
    const struct store_fleet_lease *x = *(const struct store_fleet_lease *const *)a;
    const struct store_fleet_lease *y = *(const struct store_fleet_lease *const *)b;
    int c = strcmp(x->worker_id, y->worker_id);
    if (c)
        return c;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int worker_cmp(const void *a, const void *b)
{
    return strcmp(((const struct fleet_worker_fig *)a)->id, ((const struct fleet_worker_fig *)b)->id);
}

static int wrow_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct store_fleet_worker *const *)a)->id, (*(const struct store_fleet_worker *const *)b)->id);
}

static int gap_cmp(const void *a, const void *b)
{
    const struct store_fleet_gap *x = *(const struct store_fleet_gap *const *)a;
    const struct store_fleet_gap *y = *(const struct store_fleet_gap *const *)b;
    int c = strcmp(x->worker_id, y->worker_id);
    if (c)
        return c;
    return x->gone_at < y->gone_at ? -1 : x->gone_at > y->gone_at;
}

/* The gaps of worker id in c->gs: *first and the count. */
static size_t worker_gaps(const struct calc *c, const char *id, size_t *first)
{
    size_t lo = 0, hi = c->in->n_gaps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(c->gs[mid]->worker_id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *first = lo;
    size_t k = lo;
    while (k < c->in->n_gaps && strcmp(c->gs[k]->worker_id, id) == 0)
        k++;
    return k - lo;
}

static int bucket_cmp(const void *a, const void *b)
{
    return strcmp(((const struct fleet_bucket *)a)->key, ((const struct fleet_bucket *)b)->key);
}

static int int64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int unit_wanted(const struct calc *c, const struct store_fleet_unit *u)
{
    return (!c->o->tenant_id || strcmp(u->tenant_id, c->o->tenant_id) == 0) &&
           (!c->o->batch_id || strcmp(u->batch_id, c->o->batch_id) == 0);
}

static const char *unit_key(const struct calc *c, const struct store_fleet_unit *u,
                            const struct store_fleet_lease *l, int64_t t, char day[16])
{
    switch (c->o->group) {
    case FLEET_BY_BATCH: return u->batch_id;
    case FLEET_BY_MODEL: return l->model;
    case FLEET_BY_TENANT: return u->tenant_id;
    case FLEET_BY_DAY: break;
    }
    day_key(t, day);
    return day;
}

static int64_t unit_weight(const struct store_fleet_unit *u)
{
    int64_t w = u->prompt_tokens - u->cached_tokens + u->completion_tokens;
    return w > 0 ? w : 0;
}

struct share {
    const struct store_fleet_unit *u;
    const struct store_fleet_lease *l;
    int64_t w;
    size_t idx;
    unsigned __int128 rem;
    int64_t part;
};

static int share_rem_cmp(const void *a, const void *b)
{
    const struct share *x = a, *y = b;
    if (x->rem != y->rem)
        return x->rem > y->rem ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int share_idx_cmp(const void *a, const void *b)
{
    const struct share *x = a, *y = b;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Split total over v[0..n) by weight w (sum W > 0), largest remainder, ties
 * to the lower idx; v keeps its order. */
static void split(struct share *v, size_t n, int64_t W, int64_t total)
{
    int64_t given = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned __int128 x = (unsigned __int128)total * (unsigned __int128)v[i].w;
        v[i].part = (int64_t)(x / (unsigned __int128)W);
        v[i].rem = x % (unsigned __int128)W;
        given += v[i].part;
    }
    if (given == total)
        return;
    sort_(v, n, sizeof *v, share_rem_cmp);
    for (size_t i = 0; given < total; i = (i + 1) % n, given++)
        v[i].part++;
    sort_(v, n, sizeof *v, share_idx_cmp);
}

/* Charge one busy piece [p, q) of a worker at hourly h to the units of the
 * active leases act[0..na). */
static int busy_piece(struct calc *c, const struct store_fleet_lease *const *act, size_t na, int64_t h,
                      int64_t p, int64_t q)
{
    size_t nu = 0;
    for (size_t i = 0; i < na; i++)
        nu += c->ucount[act[i] - c->in->leases];
    struct share *v = calloc(nu, sizeof *v);
    if (!v)
        return ERR_NOMEM;
    size_t k = 0;
    int64_t W = 0, N = 0;
    for (size_t i = 0; i < na; i++) {
        size_t li = (size_t)(act[i] - c->in->leases);
        for (size_t j = 0; j < c->ucount[li]; j++, k++) {
            v[k].u = c->us[c->ufirst[li] + j];
            v[k].l = act[i];
            v[k].w = unit_weight(v[k].u);
            v[k].idx = k;
            W += v[k].w;
            N += v[k].u->n_requests > 0 ? v[k].u->n_requests : 0;
        }
    }
    if (W == 0) { /* nothing computed yet (or ever: a lapsed lease): by requests leased */
        for (k = 0; k < nu; k++)
            v[k].w = v[k].u->n_requests > 0 ? v[k].u->n_requests : 0;
        W = N;
    }
    if (W == 0) {
        for (k = 0; k < nu; k++)
            v[k].w = 1;
        W = (int64_t)nu;
    }
    int64_t *cost = calloc(nu, sizeof *cost);
    if (!cost) {
        free(v);
        return ERR_NOMEM;
    }
    split(v, nu, W, fleet_meter_cost(h, p, q));
    for (k = 0; k < nu; k++)
        cost[k] = v[k].part;
    split(v, nu, W, (q - p) * 1000);
    int rc = 0;
    for (k = 0; k < nu && !rc; k++) {
        if (v[k].l->lapsed) {
            c->r->fleet.lapsed_ms += v[k].part;
            c->r->fleet.lapsed_micros += cost[k];
        }
        if (!unit_wanted(c, v[k].u))
            continue;
        char day[16];
        struct fleet_bucket *b = bmap_get(&c->m, unit_key(c, v[k].u, v[k].l, p, day), p);
        if (!b) {
            rc = ERR_NOMEM;
            break;
        }
        b->worker_ms += v[k].part;
        b->cost_micros += cost[k];
        if (v[k].l->lapsed) {
            b->lapsed_ms += v[k].part;
            b->lapsed_micros += cost[k];
        }
    }
    free(cost);
    free(v);
    return rc;
}

/* The fleet's own time of a piece in its day bucket (day reports). */
static int day_time(struct calc *c, int64_t p, int64_t q, int idle, int64_t micros)
{
    if (!c->admin_days)
        return 0;
    char day[16];
    day_key(p, day);
    struct fleet_bucket *b = bmap_get(&c->m, day, p);
    if (!b)
        return ERR_NOMEM;
    b->registered_ms += (q - p) * 1000;
    if (idle) {
        b->idle_ms += (q - p) * 1000;
        b->idle_micros += micros;
    }
    return 0;
}

/* Tokens and reference cost of the units of lease l (started in range). */
static int lease_tokens(struct calc *c, const struct store_fleet_lease *l, struct fleet_worker_fig *f)
{
    size_t li = (size_t)(l - c->in->leases);
    const struct usage_price *ref = usage_price_find(c->o->reference, l->model);
    for (size_t j = 0; j < c->ucount[li]; j++) {
        const struct store_fleet_unit *u = c->us[c->ufirst[li] + j];
        f->computed_tokens += unit_weight(u);
        f->completion_tokens += u->completion_tokens;
        int64_t refc = 0;
        if (ref && usage_cost_micros(ref, u->prompt_tokens, u->cached_tokens, u->completion_tokens, &refc))
            refc = 0;
        struct fleet_bucket *all = &c->r->fleet;
        all->prompt_tokens += u->prompt_tokens;
        all->cached_tokens += u->cached_tokens;
        all->completion_tokens += u->completion_tokens;
        all->requests += u->n_requests;
        all->reused_tokens += u->reused_tokens;
        all->reference_micros += refc;
        if (!unit_wanted(c, u))
            continue;
        char day[16];
        struct fleet_bucket *b = bmap_get(&c->m, unit_key(c, u, l, l->start, day), l->start);
        if (!b)
            return ERR_NOMEM;
        b->prompt_tokens += u->prompt_tokens;
        b->cached_tokens += u->cached_tokens;
        b->completion_tokens += u->completion_tokens;
        b->requests += u->n_requests;
        b->reused_tokens += u->reused_tokens;
        b->reference_micros += refc;
    }
    return 0;
}

/* One worker: f with its leases ls[0..n) (sorted by start), w its row
 * (else the leases' span, never idle) and then its gaps. */
static int worker_run(struct calc *c, struct fleet_worker_fig *f, const struct store_fleet_worker *w,
                      const struct store_fleet_lease *const *ls, size_t n)
{
    const struct store_fleet_gap *const *gs = NULL;
    size_t ng = 0;
    if (w) {
        size_t g0;
        ng = worker_gaps(c, w->id, &g0);
        gs = c->gs + g0;
        f->unpriced = w->unpriced;
    }
    const struct fleet_opts *o = c->o;
    int64_t ws, we, h;
    if (w) {
        int live = w->last_seen >= o->now - o->ttl_s;
        ws = w->registered_at;
        we = live ? o->now : (w->last_seen > w->lease_end ? w->last_seen : w->lease_end);
        h = w->hourly_cost_micros;
        f->state = live ? FLEET_IDLE : FLEET_GONE;
        for (size_t i = 0; live && i < n; i++)
            if (ls[i]->open && !ls[i]->lapsed)
                f->state = FLEET_BUSY;
    } else {
        ws = n ? ls[0]->start : 0;
        we = ws;
        h = n ? ls[0]->hourly_cost_micros : 0;
        f->state = FLEET_GONE;
    }
    f->hourly_cost_micros = h;
    for (size_t i = 0; i < n; i++) {
        if (ls[i]->start < ws)
            ws = ls[i]->start;
        if (ls[i]->end > we)
            we = ls[i]->end;
    }
    int64_t lo = ws > o->since ? ws : o->since, hi = we < o->until ? we : o->until;
    if (hi < lo)
        hi = lo;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (ls[i]->start >= o->since && ls[i]->start < o->until)
            rc = lease_tokens(c, ls[i], f);
    if (rc || hi == lo)
        return rc;
    size_t days = (size_t)((hi - lo) / DAY_S) + 2, cap = 2 + 2 * n + 2 * ng + days, np = 0;
    int64_t *pt = malloc(cap * sizeof *pt);
    const struct store_fleet_lease **act = malloc((n ? n : 1) * sizeof *act);
    if (!pt || !act) {
        free(pt);
        free(act);
        return ERR_NOMEM;
    }
    pt[np++] = lo;
    pt[np++] = hi;
    for (size_t i = 0; i < n; i++) {
        if (ls[i]->start > lo && ls[i]->start < hi)
            pt[np++] = ls[i]->start;
        if (ls[i]->end > lo && ls[i]->end < hi)
            pt[np++] = ls[i]->end;
    }
    for (size_t i = 0; i < ng; i++) {
        if (gs[i]->gone_at > lo && gs[i]->gone_at < hi)
            pt[np++] = gs[i]->gone_at;
        if (gs[i]->back_at > lo && gs[i]->back_at < hi)
            pt[np++] = gs[i]->back_at;
    }
    for (int64_t d = (lo / DAY_S + 1) * DAY_S; d < hi; d += DAY_S)
        pt[np++] = d;
    sort_(pt, np, sizeof *pt, int64_cmp);
    size_t next = 0, na = 0, gnext = 0;
    int64_t gone_until = INT64_MIN; /* the latest back_at of the gaps begun by p */
    int64_t reg_ms = 0, reg_micros = 0;
    for (size_t i = 0; i + 1 < np && !rc; i++) {
        int64_t p = pt[i], q = pt[i + 1];
        if (q == p)
            continue;
        while (next < n && ls[next]->start <= p) {
            if (ls[next]->end > p && c->ucount[ls[next] - c->in->leases])
                act[na++] = ls[next];
            next++;
        }
        size_t keep = 0;
        for (size_t j = 0; j < na; j++)
            if (act[j]->end > p)
                act[keep++] = act[j];
        na = keep;
        for (; gnext < ng && gs[gnext]->gone_at <= p; gnext++)
            if (gs[gnext]->back_at > gone_until)
                gone_until = gs[gnext]->back_at;
        if (!na && gone_until > p) /* gone, holding no lease (cut at the gap's ends: all of [p, q)) */
            continue;
        int64_t micros = fleet_meter_cost(h, p, q);
        reg_ms += (q - p) * 1000;
        reg_micros += micros;
        if (na) {
            f->busy_ms += (q - p) * 1000;
            f->busy_micros += micros;
            rc = busy_piece(c, act, na, h, p, q);
        } else if (w) {
            f->idle_ms += (q - p) * 1000;
            f->idle_micros += micros;
        }
        if (!rc && w)
            rc = day_time(c, p, q, na == 0, micros);
    }
    free(pt);
    free(act);
    /* the pieces add up (the meter is additive): without gaps, meter(hi) - meter(lo) */
    f->registered_ms = w ? reg_ms : f->busy_ms;
    f->cost_micros = w ? reg_micros : f->busy_micros;
    return rc;
}

static int lease_unit_find(const struct calc *c, const char *lease_id, size_t *first)
{
    size_t lo = 0, hi = c->in->n_units;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(c->us[mid]->lease_id, lease_id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *first = lo;
    size_t k = lo;
    while (k < c->in->n_units && strcmp(c->us[k]->lease_id, lease_id) == 0)
        k++;
    return (int)(k - lo);
}

static void bucket_add(struct fleet_bucket *t, const struct fleet_bucket *b)
{
    t->worker_ms += b->worker_ms;
    t->cost_micros += b->cost_micros;
    t->lapsed_ms += b->lapsed_ms;
    t->lapsed_micros += b->lapsed_micros;
    t->prompt_tokens += b->prompt_tokens;
    t->cached_tokens += b->cached_tokens;
    t->completion_tokens += b->completion_tokens;
    t->requests += b->requests;
    t->reused_tokens += b->reused_tokens;
    t->reference_micros += b->reference_micros;
    t->registered_ms += b->registered_ms;
    t->idle_ms += b->idle_ms;
    t->idle_micros += b->idle_micros;
}

static int compute(struct calc *c, const struct store_fleet_lease **ls)
{
    const struct store_fleet *in = c->in;
    struct fleet_report *r = c->r;
    for (size_t i = 0; i < in->n_units; i++)
        c->us[i] = &in->units[i];
    sort_(c->us, in->n_units, sizeof *c->us, unit_cmp);
    for (size_t i = 0; i < in->n_gaps; i++)
        c->gs[i] = &in->gaps[i];
    sort_(c->gs, in->n_gaps, sizeof *c->gs, gap_cmp);
    for (size_t i = 0; i < in->n_leases; i++) {
        ls[i] = &in->leases[i];
        c->ucount[i] = (size_t)lease_unit_find(c, in->leases[i].id, &c->ufirst[i]);
    }
    sort_(ls, in->n_leases, sizeof *ls, lease_cmp);
    /* worker figures: the rows (by id), then one per other lease worker */
    const struct store_fleet_worker **wrow = calloc(in->n_workers + in->n_leases + 1, sizeof *wrow);
    if (!wrow)
        return ERR_NOMEM;
    size_t nf = 0;
    for (size_t i = 0; i < in->n_workers; i++)
        wrow[i] = &in->workers[i];
    sort_(wrow, in->n_workers, sizeof *wrow, wrow_cmp);
    for (size_t i = 0; i < in->n_workers; i++) { /* the figures in the same (id) order as wrow */
        struct fleet_worker_fig *f = &r->workers[nf++];
        const struct store_fleet_worker *w = wrow[i];
        snprintf(f->id, sizeof f->id, "%s", w->id);
        snprintf(f->name, sizeof f->name, "%s", w->name);
        snprintf(f->device, sizeof f->device, "%s", w->device);
        snprintf(f->model, sizeof f->model, "%s", w->model);
    }
    size_t n_real = nf;
    int rc = 0;
    /* each worker with leases: its run of ls */
    unsigned char *done = calloc(n_real + 1, 1);
    if (!done) {
        free(wrow);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < in->n_leases && !rc;) {
        size_t j = i;
        while (j < in->n_leases && strcmp(ls[j]->worker_id, ls[i]->worker_id) == 0)
            j++;
        struct fleet_worker_fig key;
        memset(&key, 0, sizeof key);
        snprintf(key.id, sizeof key.id, "%s", ls[i]->worker_id);
        struct fleet_worker_fig *f = bsearch(&key, r->workers, n_real, sizeof key, worker_cmp);
        if (!f) {
            f = &r->workers[nf++];
            snprintf(f->id, sizeof f->id, "%s", ls[i]->worker_id);
            snprintf(f->model, sizeof f->model, "%s", ls[i]->model);
        } else {
            done[f - r->workers] = 1;
        }
        size_t fi = (size_t)(f - r->workers);
        rc = worker_run(c, f, fi < n_real ? wrow[fi] : NULL, ls + i, j - i);
        i = j;
    }
    for (size_t i = 0; i < n_real && !rc; i++)
        if (!done[i])
            rc = worker_run(c, &r->workers[i], wrow[i], NULL, 0);
    free(done);
    free(wrow);
    if (rc)
        return rc;
    r->n_workers = nf;
    sort_(r->workers, nf, sizeof *r->workers, worker_cmp);
    for (size_t i = 0; i < nf; i++) {
        const struct fleet_worker_fig *f = &r->workers[i];
        r->fleet.registered_ms += f->registered_ms;
        r->fleet.worker_ms += f->busy_ms;
        r->fleet.cost_micros += f->busy_micros;
        r->fleet.idle_ms += f->idle_ms;
        r->fleet.idle_micros += f->idle_micros;
    }
    sort_(c->m.v, c->m.n, sizeof *c->m.v, bucket_cmp);
    for (size_t i = 0; i < c->m.n; i++) {
        if (c->o->group == FLEET_BY_DAY)
            c->m.v[i].start_time -= c->m.v[i].start_time % DAY_S;
        bucket_add(&r->total, &c->m.v[i]);
    }
    r->buckets = c->m.v;
    r->n = c->m.n > FLEET_MAX_BUCKETS ? FLEET_MAX_BUCKETS : c->m.n;
    r->has_more = c->m.n > FLEET_MAX_BUCKETS;
    c->m.v = NULL;
    return 0;
}

int fleet_compute(const struct store_fleet *in, const struct fleet_opts *o, struct fleet_report *out)
{
    if (!in || !o || !out || o->since > o->until)
        return ERR_INVAL;
    memset(out, 0, sizeof *out);
    struct calc c;
    memset(&c, 0, sizeof c);
    c.in = in;
    c.o = o;
    c.r = out;
    c.admin_days = o->group == FLEET_BY_DAY && !o->batch_id;
    const struct store_fleet_lease **ls = calloc(in->n_leases + 1, sizeof *ls);
    c.us = calloc(in->n_units + 1, sizeof *c.us);
    c.ufirst = calloc(in->n_leases + 1, sizeof *c.ufirst);
    c.ucount = calloc(in->n_leases + 1, sizeof *c.ucount);
    c.gs = calloc(in->n_gaps + 1, sizeof *c.gs);
    out->workers = calloc(in->n_workers + in->n_leases + 1, sizeof *out->workers);
    int rc = ls && c.us && c.ufirst && c.ucount && c.gs && out->workers ? compute(&c, ls) : ERR_NOMEM;
    free(ls);
    free(c.us);
    free(c.gs);
    free(c.ufirst);
    free(c.ucount);
    free(c.m.v);
    free(c.m.slot);
    if (rc)
        fleet_report_release(out);
    return rc;
}

void fleet_report_release(struct fleet_report *r)
{
    if (!r)
        return;
    free(r->buckets);
    free(r->workers);
    memset(r, 0, sizeof *r);
}
