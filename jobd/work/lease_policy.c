/*
 * lease_policy.c - which requests a worker's lease gets: the ask's clamps,
 * fairness between tenants, the pack's caps and the order of the pack. The
 * store (store.h "leasing primitives") only offers the operations this is
 * built from, so a second store backend inherits the policy unchanged.
 *
 * Design. One acquire is one transaction (store_tx_enter_lease / store_tx_leave):
 *
 *   check the worker serves the model (and mark it seen)
 *   candidates = in_progress batches of the model, grouped by tenant
 *                (each tenant's batches by priority desc, then earliest
 *                deadline - expires_at - first, then oldest first:
 *                lease_batch_cmp)
 *   start      = the first tenant after the one served last for this model
 *   while the pack has room and a tenant has work:
 *       visit the tenants round-robin from start, one request per visit:
 *           the tenant's next ready request (read in chunks of q from its
 *           current batch; an empty batch moves it to its next batch)
 *           does not fit the pack's token / byte caps -> the tenant is done
 *           else it joins the pack
 *   claim the picks (queued -> leased), insert the lease row, remember the
 *   tenant served last
 *
 * so a pack of N requests shared by k tenants with work gives each about
 * N/k, and a tenant's backlog cannot delay another tenant beyond one round.
 * The chunk size is q = ceil(N / k), at least 16, so a lease reads about N
 * rows whatever the queue length. The picks of a tenant's chunk are claimed
 * before its next chunk is read, which therefore never returns them again.
 * After the commit the pack is ordered for the engine (lease_order_pack).
 *
 * Runs on the thread that owns the store.
 */
#include "jobd/work/lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/hash.h"
#include "common/js.h"
#include "jobd/work/reuse.h"

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int lease_batch_cmp(const void *a, const void *b)
{
    const struct store_lease_cand *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->expires_at != y->expires_at)
        return x->expires_at < y->expires_at ? -1 : 1;
    return strcmp(x->batch_id, y->batch_id);
}

int lease_batch_eta(struct store *st, const struct lease_opts *o, const struct store_batch *b, int64_t now,
                    int64_t *eta)
{
    if (b->status != STORE_BATCH_IN_PROGRESS || !b->model[0])
        return ERR_NOTFOUND;
    struct lease_opts tmp;
    if (!o) {
        lease_opts_default(&tmp);
        o = &tmp;
    }
    struct store_backlog bl;
    int rc = store_backlog_get(st, b->tenant_id, b->model, now - o->worker_ttl_s, &bl);
    if (rc)
        return rc;
    struct store_lease_cand me = {.priority = b->priority, .expires_at = b->expires_at};
    snprintf(me.batch_id, sizeof me.batch_id, "%s", b->id);
    double ahead = 0;
    for (size_t i = 0; i < bl.n; i++)
        if (lease_batch_cmp(&bl.items[i].cand, &me) <= 0 && bl.items[i].remaining > 0)
            ahead += (double)bl.items[i].remaining * bl.items[i].tokens_per_request;
    double tps = bl.tokens_per_s;
    int64_t k = bl.n_tenants > 0 ? bl.n_tenants : 1;
    store_backlog_release(&bl);
    if (!(tps > 0))
        return ERR_NOTFOUND;
    double secs = ahead * (double)k / tps;
    if (secs > 365.0 * 86400)
        secs = 365.0 * 86400;
    int64_t t = now + (int64_t)secs + 1;
    *eta = (t + 59) / 60 * 60;
    return 0;
}

/* ---- fair round-robin ------------------------------------------------------------- */

/* One tenant with candidate batches. */
struct rr_tenant {
    const char *id;           /* borrowed from the candidates */
    size_t b0, nb, cur;       /* its batches: cand[b0 .. b0+nb), the current one */
    struct store_leased *buf; /* the chunk read from the current batch: q entries */
    size_t bn, bpos;          /* rows in buf, next one to offer */
    size_t claimed;           /* buf[0 .. claimed) are claimed (the picks before bpos) */
    int done;
};

struct rr {
    struct store *st;
    const char *lease_id;
    const char *worker_id, *model; /* the ask's: a mixed batch offers only this model's requests */
    int64_t now;
    int q;                          /* chunk size */
    const struct store_lease_cand *cand;
    struct rr_tenant *ts;
    size_t nt;
};

/* Claim the picks of t's chunk not claimed yet (buf[claimed .. bpos)). */
static int rr_claim(struct rr *r, struct rr_tenant *t)
{
    size_t n = t->bpos - t->claimed;
    if (n == 0)
        return 0;
    char(*ids)[ID_MAX] = malloc(n * sizeof *ids);
    if (!ids)
        return ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        memcpy(ids[i], t->buf[t->claimed + i].id, ID_MAX);
    int rc = store_lease_claim(r->st, r->lease_id, (const char(*)[ID_MAX])ids, n, r->now);
    free(ids);
    if (!rc)
        t->claimed = t->bpos;
    return rc;
}

static void rr_drop_buf(struct rr_tenant *t)
{
    if (t->buf)
        store_leased_clear(t->buf + t->bpos, t->bn - t->bpos);
    t->bn = t->bpos = t->claimed = 0;
}

/* Read t's next chunk (claiming the picks of the last one first), moving on
 * to its next batches while one has nothing ready; t->done when none has. */
static int rr_fetch(struct rr *r, struct rr_tenant *t)
{
    int rc = rr_claim(r, t);
    if (rc)
        return rc;
    rr_drop_buf(t);
    if (!t->buf && !(t->buf = calloc((size_t)r->q, sizeof *t->buf)))
        return ERR_NOMEM;
    while (t->cur < t->nb) {
        const struct store_lease_cand *c = &r->cand[t->b0 + t->cur];
        if ((rc = store_lease_ready(r->st, c->batch_id, r->worker_id, r->model, r->now, r->q, t->buf, &t->bn)))
            return rc;
        for (size_t i = 0; i < t->bn; i++)
            snprintf(t->buf[i].tenant_id, sizeof t->buf[i].tenant_id, "%s", t->id);
        if (t->bn > 0)
            return 0;
        t->cur++;
    }
    t->done = 1;
    return 0;
}

/* Fill items[0 .. *n_out) (room for ask->max_requests) round-robin over the
 * tenants of cand, starting after the tenant `last`; *served gets the
 * tenant of the last pick. */
static int rr_pick(struct rr *r, const struct store_lease_ask *ask, const char *last,
                   struct store_leased *items, size_t *n_out, const char **served)
{
    size_t start = 0;
    while (last[0] && start < r->nt && strcmp(r->ts[start].id, last) <= 0)
        start++;
    if (start == r->nt)
        start = 0;
    size_t nt = r->nt, active = nt, n = 0;
    int64_t tokens = 0;
    size_t bytes = 0;
    int rc = 0;
    while (!rc && n < (size_t)ask->max_requests && active > 0) {
        for (size_t k = 0; !rc && k < nt && n < (size_t)ask->max_requests; k++) {
            struct rr_tenant *t = &r->ts[(start + k) % nt];
            if (t->done)
                continue;
            if (t->bpos == t->bn && ((rc = rr_fetch(r, t)) || t->done)) {
                if (t->done)
                    active--;
                continue;
            }
            struct store_leased *it = &t->buf[t->bpos];
            int64_t cost = it->prompt_tokens_est + it->max_tokens;
            if (n > 0 && ((ask->max_tokens && tokens + cost > ask->max_tokens) ||
                          (ask->max_bytes && bytes + it->body_len > ask->max_bytes))) {
                t->done = 1; /* its next request does not fit this pack */
                active--;
                continue;
            }
            items[n++] = *it;
            it->custom_id = it->body = NULL; /* moved; the id stays for the claim */
            t->bpos++;
            tokens += cost;
            bytes += items[n - 1].body_len;
            *served = t->id;
        }
    }
    /* claim what the last chunks gave */
    for (size_t i = 0; !rc && i < nt; i++)
        rc = rr_claim(r, &r->ts[i]);
    *n_out = n;
    return rc;
}

/* The round-robin part of an acquire, inside its transaction. */
static int acquire_in_tx(struct store *st, const struct store_lease_ask *ask, const char *lease_id,
                         int64_t now, struct store_leased *items, size_t *n_out)
{
    struct store_lease_cand *cand = NULL;
    size_t nc = 0;
    struct rr r = {.st = st, .lease_id = lease_id, .now = now, .worker_id = ask->worker_id, .model = ask->model};
    int rc = store_lease_worker_check(st, ask->worker_id, ask->model, now);
    if (rc || (rc = store_lease_candidates(st, ask->worker_id, ask->model, now, &cand, &nc)) || nc == 0)
        goto out;
    if (!(r.ts = calloc(nc, sizeof *r.ts))) {
        rc = ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < nc; i++) { /* candidates come grouped by tenant */
        if (r.nt == 0 || strcmp(r.ts[r.nt - 1].id, cand[i].tenant_id) != 0) {
            r.ts[r.nt].id = cand[i].tenant_id;
            r.ts[r.nt].b0 = i;
            r.nt++;
        }
        r.ts[r.nt - 1].nb++;
    }
    /* a tenant's own batches: priority, then earliest deadline first (the policy, not the store's) */
    for (size_t i = 0; i < r.nt; i++)
        qsort(&cand[r.ts[i].b0], r.ts[i].nb, sizeof *cand, lease_batch_cmp);
    r.cand = cand;
    r.q = (int)((ask->max_requests + (int)r.nt - 1) / (int)r.nt);
    if (r.q < 16)
        r.q = ask->max_requests < 16 ? ask->max_requests : 16;
    char last[ID_MAX];
    if ((rc = store_lease_rr_get(st, ask->model, last)))
        goto out;
    const char *served = NULL;
    if ((rc = rr_pick(&r, ask, last, items, n_out, &served)) || *n_out == 0)
        goto out;
    if ((rc = store_lease_open(st, lease_id, ask->worker_id, ask->model, (int64_t)*n_out, now,
                               now + ask->lease_s)))
        goto out;
    rc = store_lease_rr_put(st, ask->model, served);
out:;
    int left = 0; /* ready requests read (locked, on PostgreSQL) but not claimed */
    for (size_t i = 0; r.ts && i < r.nt; i++) {
        left |= r.ts[i].bn > r.ts[i].bpos;
        rr_drop_buf(&r.ts[i]);
        free(r.ts[i].buf);
    }
    free(r.ts);
    free(cand);
    if (left && !rc)
        store_lease_left_ready(st); /* wake the polls that skipped them */
    return rc;
}

/* One acquire transaction and the items' urls; the pack is not ordered yet. */
static int acquire_once(struct store *st, const struct lease_opts *o, const struct store_lease_ask *ask,
                        int64_t now, struct store_lease *out)
{
    /* the clamps */
    struct store_lease_ask a = *ask;
    a.lease_s = clamp64(a.lease_s ? a.lease_s : o->lease_s_default, o->lease_s_min, o->lease_s_max);
    if (a.max_requests > o->max_requests)
        a.max_requests = o->max_requests;
    if (!a.max_bytes || a.max_bytes > o->max_bytes)
        a.max_bytes = o->max_bytes;
    if (!a.worker_id || !a.model || a.max_requests < 1 || a.max_requests > STORE_LEASE_MAX_REQUESTS ||
        a.max_tokens < 0 || a.lease_s <= 0)
        return ERR_INVAL;
    struct store_lease l;
    memset(&l, 0, sizeof l);
    int rc = id_new("lease_", l.id, sizeof l.id);
    if (rc)
        return rc;
    if (!(l.items = calloc((size_t)a.max_requests, sizeof *l.items)))
        return ERR_NOMEM;
    if ((rc = store_tx_enter_lease(st))) {
        free(l.items);
        return rc;
    }
    rc = acquire_in_tx(st, &a, l.id, now, l.items, &l.n);
    /* nothing ready: commit anyway (the worker's last_seen), no lease row */
    if ((rc = store_tx_leave(st, rc)) || l.n == 0) {
        store_lease_clear(&l);
        if (!rc)
            memset(out, 0, sizeof *out);
        return rc;
    }
    l.expires_at = now + a.lease_s;
    /* each item's url is its batch's endpoint (a pack has few batches: one
     * lookup per run of equal batch ids) */
    struct store_batch b;
    b.endpoint[0] = '\0';
    const char *lastb = NULL;
    for (size_t i = 0; i < l.n; i++) {
        struct store_leased *it = &l.items[i];
        if (!lastb || strcmp(lastb, it->batch_id) != 0) {
            if (store_batch_get(st, NULL, it->batch_id, &b) == 0)
                store_batch_release(&b); /* (only the endpoint is kept) */
            else
                b.endpoint[0] = '\0'; /* cannot happen for a leased row; the worker then guesses */
            lastb = it->batch_id;
        }
        snprintf(it->endpoint, sizeof it->endpoint, "%s", b.endpoint);
    }
    *out = l;
    return 0;
}

int lease_acquire(struct store *st, const struct lease_opts *o, const struct store_lease_ask *ask,
                  int64_t now, struct store_lease *out)
{
    struct lease_opts tmp;
    if (!o) {
        lease_opts_default(&tmp);
        o = &tmp;
    }
    if (!ask)
        return ERR_INVAL;
    /* a pack answered wholly from reuse (its lease already ended) is
     * followed by another acquire, so a worker is not sent away empty while
     * work waits; bounded, so one ask stays a few transactions */
    for (int round = 0;; round++) {
        struct store_lease l;
        int rc = acquire_once(st, o, ask, now, &l);
        if (rc || l.n == 0) {
            if (!rc)
                *out = l;
            return rc;
        }
        size_t n_reused = 0;
        if (reuse_apply(st, o->reuse_default, o->reuse_retention_s, ask->worker_id, ask->model, &l,
                        now, &n_reused))
            n_reused = 0; /* logged by the store; the worker computes the whole pack */
        if (l.n == 0 && round < LEASE_REUSE_ROUNDS) {
            store_lease_clear(&l);
            continue;
        }
        if (l.n == 0) { /* the last round was all reused: an empty answer */
            store_lease_clear(&l);
            memset(out, 0, sizeof *out);
            return 0;
        }
        /* the lease is committed; an order failure (no memory) keeps the pick order */
        (void)lease_order_pack(&l, o->prefix_bytes);
        *out = l;
        return 0;
    }
}

/* ---- pack order --------------------------------------------------------------------- */

struct fnv {
    uint64_t h;
    size_t left;
};

/* Hash at most f->left more bytes. */
static void fnv_add(struct fnv *f, const char *s, size_t n)
{
    size_t k = n < f->left ? n : f->left;
    f->h = hash_fnv_add(f->h, s, k);
    f->left -= k;
}

uint64_t lease_prefix_hash(const char *body, size_t len, size_t prefix_bytes)
{
    struct fnv f = {HASH_FNV_BASIS, prefix_bytes};
    json_t *root = NULL;
    struct js_limits lim = {LEASE_LINE_MAX_BYTES, 64, 0};
    if (js_parse(body, len, &lim, &root, NULL) || !json_is_object(root)) {
        json_decref(root);
        fnv_add(&f, body, len);
        return f.h;
    }
    json_t *msgs = json_object_get(root, "messages");
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_array(msgs)) {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m)
        {
            const char *role = json_string_value(json_object_get(m, "role"));
            json_t *c = json_object_get(m, "content");
            if (role)
                fnv_add(&f, role, strlen(role));
            fnv_add(&f, "\n", 1);
            if (json_is_string(c)) {
                fnv_add(&f, json_string_value(c), json_string_length(c));
            } else if (json_is_array(c)) {
                size_t j;
                json_t *part;
                json_array_foreach(c, j, part)
                {
                    json_t *t = json_object_get(part, "text");
                    if (json_is_string(t))
                        fnv_add(&f, json_string_value(t), json_string_length(t));
                }
            }
            fnv_add(&f, "\n", 1);
        }
    } else if (json_is_string(prompt)) {
        fnv_add(&f, json_string_value(prompt), json_string_length(prompt));
    } else if (json_is_array(prompt) && json_is_string(json_array_get(prompt, 0))) {
        json_t *p0 = json_array_get(prompt, 0);
        fnv_add(&f, json_string_value(p0), json_string_length(p0));
    }
    json_decref(root);
    return f.h;
}

/* The sort key of one item, self-contained: qsort has no context argument
 * in C11, and lease_order_pack runs on several pool threads at once (a
 * process-global pointer to the items raced between two workers' leases). */
struct pack_key {
    uint64_t hash;
    size_t group_n; /* items sharing the hash */
    int64_t prompt_tokens_est, max_tokens;
    size_t index;   /* original position (stability) */
};

static int pack_cmp(const void *a, const void *b)
{
    const struct pack_key *x = a, *y = b;
    if (x->group_n != y->group_n)
        return x->group_n > y->group_n ? -1 : 1;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    if (x->prompt_tokens_est != y->prompt_tokens_est)
        return x->prompt_tokens_est < y->prompt_tokens_est ? -1 : 1;
    if (x->max_tokens != y->max_tokens)
        return x->max_tokens < y->max_tokens ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int hash_cmp(const void *a, const void *b)
{
    const struct pack_key *x = a, *y = b;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

int lease_order_pack(struct store_lease *l, size_t prefix_bytes)
{
    if (l->n < 2)
        return 0;
    struct pack_key *k = calloc(l->n, sizeof *k), *byh = calloc(l->n, sizeof *byh);
    struct store_leased *sorted = calloc(l->n, sizeof *sorted);
    if (!k || !byh || !sorted) {
        free(k);
        free(byh);
        free(sorted);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < l->n; i++) {
        k[i].hash = lease_prefix_hash(l->items[i].body, l->items[i].body_len, prefix_bytes);
        k[i].prompt_tokens_est = l->items[i].prompt_tokens_est;
        k[i].max_tokens = l->items[i].max_tokens;
        k[i].index = i;
    }
    /* group sizes: sort a copy by hash and count runs */
    memcpy(byh, k, l->n * sizeof *k);
    qsort(byh, l->n, sizeof *byh, hash_cmp);
    for (size_t i = 0; i < l->n;) {
        size_t j = i;
        while (j < l->n && byh[j].hash == byh[i].hash)
            j++;
        for (size_t t = i; t < j; t++)
            k[byh[t].index].group_n = j - i;
        i = j;
    }
    qsort(k, l->n, sizeof *k, pack_cmp);
    for (size_t i = 0; i < l->n; i++)
        sorted[i] = l->items[k[i].index];
    memcpy(l->items, sorted, l->n * sizeof *sorted);
    free(k);
    free(byh);
    free(sorted);
    return 0;
}

