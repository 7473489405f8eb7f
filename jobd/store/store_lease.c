/*
 * store_lease.c - work distribution in the store: workers, fair leasing,
 * heartbeats, exactly-once result commits, releases, the lease sweeper,
 * cancel/expiry steps, dead letters, and the queries finalization needs.
 *
 * Design. Every exported function is one transaction (store_w_begin:
 * BEGIN IMMEDIATE, or a SAVEPOINT inside a caller's transaction), so each
 * step is all or nothing and a crash between two calls leaves a state the
 * next call continues from. Status changes go through
 * store_request_transition / store_batch_transition only (fenced by lease
 * id where a lease is involved); "exactly once" rests on two keys: a
 * request leaves `leased` only under the lease that holds it, and
 * results.request_id is a primary key (first committed result wins).
 *
 * Leasing: this file offers the primitives only (the worker check, the
 * candidate batches grouped by tenant from the batches_status index, a
 * chunk of a batch's ready requests from requests_ready (batch_id,
 * next_attempt_at; on PostgreSQL the requests_queued table, schema_pg.sql
 * migration 13), the claim, the lease row, the round-robin cursor
 * lease_rr); which tenant and batch go next is decided in C by
 * jobd/work/lease_policy.c, inside one transaction it opens.
 *
 * PostgreSQL (store.h, "Several jobd instances"): the acquire, commit,
 * heartbeat, release and sweep transactions take the writer lock shared
 * (store_w_begin_shared) and lock what they change: the lease row first
 * (lease_get: FOR UPDATE), ready requests' requests_queued rows FOR UPDATE
 * SKIP LOCKED. The claim is one statement over an id array (claim_many)
 * and a commit ends
 * the requests its lease still holds set-based (bulk_*: one SELECT, one
 * UPDATE, one INSERT of results, one of ledger rows), the rest of a chunk
 * (transient errors, stale, unknown or repeated ids) one by one as on
 * SQLite, with the same outcomes.
 *
 * Runs on the thread that owns the struct store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/store/store_int.h"

#define MSG_CANCELLED "This request was not executed because the batch was cancelled."
#define MSG_EXPIRED "This request could not be executed before the completion window expired."

/* ---- small helpers ----------------------------------------------------------------- */

static int bind_texts(struct store *st, struct sdb_stmt *s, int first, const char *a, const char *b)
{
    int rc = store_bind_text(st, s, first, a);
    return rc ? rc : store_bind_text(st, s, first + 1, b);
}

static uint32_t rnd32(void)
{
    uint32_t r = 0;
    if (crypto_random(&r, sizeof r))
        r = (uint32_t)clock();
    return r;
}

int64_t store_backoff_s(const struct store_retry_policy *p, int64_t attempts, uint32_t rnd)
{
    int64_t base = p->backoff_base_s > 0 ? p->backoff_base_s : 1;
    int64_t cap = p->backoff_cap_s > 0 ? p->backoff_cap_s : base;
    int64_t d = base;
    for (int64_t i = 1; i < attempts && d < cap; i++)
        d *= 2;
    if (d > cap)
        d = cap;
    int64_t half = d / 2;
    return half + (int64_t)((uint64_t)rnd % (uint64_t)(d - half + 1));
}

static int text_len_ok(const char *s, size_t lo, size_t hi)
{
    size_t n = s ? strlen(s) : 0;
    return s && n >= lo && n <= hi;
}

/* ---- workers ------------------------------------------------------------------------------- */

int store_worker_register(struct store *st, const struct store_worker_new *w, int64_t now,
                          char id_out[ID_MAX])
{
    if (!w || !text_len_ok(w->name, 1, 128) || !text_len_ok(w->device ? w->device : "", 0, 128) ||
        w->kv_tokens < 0 || w->pack_size < 0 || w->hourly_cost_micros < 0 ||
        w->hourly_cost_micros > STORE_HOURLY_COST_MAX || w->n_models < 1 ||
        w->n_models > STORE_WORKER_MAX_MODELS || !w->models)
        return ERR_INVAL;
    for (size_t i = 0; i < w->n_models; i++)
        if (!text_len_ok(w->models[i].canonical, 1, STORE_MODEL_MAX) ||
            !text_len_ok(w->models[i].name, 1, STORE_MODEL_MAX) ||
            (w->models[i].sha256 && *w->models[i].sha256 && !text_len_ok(w->models[i].sha256, 64, 64)))
            return ERR_INVAL;
    char id[ID_MAX];
    int rc = id_new("wrk_", id, sizeof id);
    if (rc)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WORKER_INSERT, &rc);
    if (s && !(rc = bind_texts(st, s, 1, id, w->name)) &&
        !(rc = store_bind_text(st, s, 3, w->device ? w->device : "")) &&
        !(rc = store_bind_int(st, s, 4, w->kv_tokens)) && !(rc = store_bind_int(st, s, 5, w->pack_size)) &&
        !(rc = store_bind_int(st, s, 6, now)) && !(rc = store_bind_int(st, s, 7, w->hourly_cost_micros)) &&
        !(rc = store_bind_int(st, s, 8, w->unpriced != 0)))
        rc = store_step_done(st, s, "insert worker");
    for (size_t i = 0; !rc && i < 2 * w->n_models; i++) {
        const struct store_model_name *m = &w->models[i / 2];
        s = store_stmt(st, S_WORKER_MODEL_INSERT, &rc);
        if (s && !(rc = store_bind_text(st, s, 1, id)) &&
            !(rc = bind_texts(st, s, 2, m->canonical, i % 2 ? m->name : m->canonical)) &&
            !(rc = store_bind_text(st, s, 4, m->sha256 ? m->sha256 : "")))
            rc = store_step_done(st, s, "insert worker model");
    }
    /* bit b of STORE_EP_* is ep_names[b] */
    static const char *const ep_names[4] = {"/v1/chat/completions", "/v1/completions",
                                            "/v1/embeddings", "/v1/responses"};
    for (size_t i = 0; !rc && i < w->n_models; i++) {
        unsigned eps = w->models[i].endpoints ? w->models[i].endpoints : STORE_EP_DEFAULT;
        for (int b = 0; !rc && b < 4; b++) {
            if (!(eps & (1u << b)))
                continue;
            s = store_stmt(st, S_WORKER_ENDPOINT_INSERT, &rc);
            if (s && !(rc = store_bind_text(st, s, 1, id)) &&
                !(rc = bind_texts(st, s, 2, w->models[i].canonical, ep_names[b])))
                rc = store_step_done(st, s, "insert worker endpoint");
        }
    }
    if ((rc = store_w_end(st, rc)))
        return rc;
    snprintf(id_out, ID_MAX, "%s", id);
    return 0;
}

/* store_worker_seen inside the caller's transaction, no savepoint: for the
 * hot paths whose only tolerated error (ERR_NOTFOUND: no row) is no SQL
 * error, any other failing the caller's whole transaction. */
static int worker_seen_in(struct store *st, const char *worker_id, double tokens_per_s, int64_t now)
{
    int rc = 0, r;
    struct sdb_stmt *s;
    /* back after a silence longer than the TTL: the gap first, from the last_seen it ends
     * (PostgreSQL: WORKER_SEEN does both in one round trip) */
    if (!st->pg && st->opts.worker_ttl_s > 0 && (s = store_stmt(st, S_WORKER_GAP_NOTE, &rc)) &&
        !(rc = store_bind_text(st, s, 1, worker_id)) && !(rc = store_bind_int(st, s, 2, now)) &&
        !(rc = store_bind_int(st, s, 3, st->opts.worker_ttl_s)))
        rc = store_step_done(st, s, "worker gap");
    if (rc)
        return rc;
    s = store_stmt(st, S_WORKER_SEEN, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, worker_id)) && !(rc = store_bind_int(st, s, 2, now)) &&
        (!st->pg || !(rc = store_bind_int(st, s, 4, st->opts.worker_ttl_s)))) {
        r = sdb_bind_double(s, 3, tokens_per_s);
        rc = r == SDB_OK ? store_step_done(st, s, "worker seen") : store_sqlerr(st, r, "bind");
        if (!rc && sdb_changes(st->db) == 0)
            rc = ERR_NOTFOUND;
    }
    return rc;
}

int store_worker_seen(struct store *st, const char *worker_id, double tokens_per_s, int64_t now)
{
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    return store_w_end(st, worker_seen_in(st, worker_id, tokens_per_s, now));
}

static int served_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_model_served *m = elem;
    (void)ctx;
    store_col_text(s, 0, m->name, sizeof m->name);
    store_col_text(s, 1, m->canonical, sizeof m->canonical);
    m->n_workers = sdb_column_int64(s, 2);
    m->endpoints = (unsigned)sdb_column_int64(s, 3);
    return 0;
}

int store_models_served(struct store *st, int64_t since, struct store_model_served **items, size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_model_served), served_row, NULL,
                                          "models served"};
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_MODELS_SERVED, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, since)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

static int waiting_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_model_waiting *m = elem;
    (void)ctx;
    store_col_text(s, 0, m->model, sizeof m->model);
    m->n_batches = sdb_column_int64(s, 1);
    return 0;
}

int store_models_waiting(struct store *st, int64_t since, struct store_model_waiting **items, size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_model_waiting), waiting_row, NULL,
                                          "models waiting"};
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_MODELS_WAITING, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, since)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

/* ---- request endings shared by commit, release, sweep and stop ------------------------ */

static int result_put(struct store *st, const char *req_id, const char *batch_id, const char *lease_id,
                      const struct store_result *res, const char *error_code,
                      const char *error_message, int64_t now)
{
    int rc = 0;
    /* PostgreSQL: results.seq is taken by the INSERT (its default) under
     * its batch's row lock, held to commit, so that within a batch no
     * larger seq is visible before a smaller one (schema_pg.sql migration
     * 3 and 7). The set-based commit holds it already (BATCH_LOCK_MANY);
     * this one-row path (releases, sweeps, stops, single commits) takes it
     * per row: a lock held from a savepoint that rolled back is gone, so
     * remembering it would not be safe. */
    struct sdb_stmt *s = st->pg ? store_stmt(st, S_BATCH_LOCK_SEQ, &rc) : NULL;
    if (st->pg && (!s || (rc = store_bind_text(st, s, 1, batch_id)) || (rc = store_step_done(st, s, "lock batch"))))
        return rc;
    s = store_stmt(st, S_RESULT_INSERT, &rc);
    if (!s)
        return rc;
    static const struct store_result none = {0};
    if (!res)
        res = &none;
    int r = SDB_OK;
    if ((rc = bind_texts(st, s, 1, req_id, batch_id)) || (rc = store_bind_text(st, s, 3, lease_id)))
        return rc;
    if (res->status_code > 0)
        r = sdb_bind_int(s, 4, res->status_code);
    if (r == SDB_OK && res->body)
        r = sdb_bind_blob(s, 5, res->body, (int)res->body_len);
    if (r != SDB_OK)
        return store_sqlerr(st, r, "bind result");
    if ((rc = bind_texts(st, s, 6, error_code, error_message)) ||
        (rc = store_bind_int(st, s, 8, res->prompt_tokens)) ||
        (rc = store_bind_int(st, s, 9, res->completion_tokens)) ||
        (rc = store_bind_int(st, s, 10, res->cached_tokens)) ||
        (rc = store_bind_int(st, s, 11, res->queue_ms)) ||
        (rc = store_bind_int(st, s, 12, res->prefill_ms)) ||
        (rc = store_bind_int(st, s, 13, res->decode_ms)) || (rc = store_bind_int(st, s, 14, res->gpu_ms)) ||
        (rc = store_bind_int(st, s, 15, now)))
        return rc;
    rc = store_step_done(st, s, "insert result");
    sdb_clear_bindings(s);
    return rc;
}

/* End a queued or leased request because its batch stopped: -> failed with
 * a results row carrying code (batch_cancelled / batch_expired) and the
 * lease that held it (NULL for queued). */
static int req_end_closed(struct store *st, const char *req_id, const char *batch_id,
                          enum store_request_status from, const char *lease_id, int expired,
                          int64_t now)
{
    const char *msg = expired ? MSG_EXPIRED : MSG_CANCELLED;
    struct store_request_change ch = {.lease_id = lease_id, .error = msg};
    int rc = store_request_transition(st, req_id, from, STORE_REQ_FAILED, &ch, now);
    if (!rc)
        rc = result_put(st, req_id, batch_id, lease_id, NULL, expired ? "batch_expired" : "batch_cancelled",
                        msg, now);
    return rc;
}

/* A leased request's attempt failed (transient error or lapsed lease):
 * requeue with backoff, or dead-letter at the attempt limit. */
static int req_retry_or_dead(struct store *st, const char *req_id, const char *batch_id,
                             const char *lease_id, int64_t attempts, const char *error,
                             const char *reason, const struct store_retry_policy *policy, int64_t now,
                             int *dead)
{
    int rc;
    if (attempts >= policy->max_attempts) {
        char msg[600];
        snprintf(msg, sizeof msg, "This request failed after %lld attempts: %.500s",
                 (long long)attempts, error ? error : "unknown error");
        struct store_request_change ch = {.lease_id = lease_id, .error = error};
        if ((rc = store_request_transition(st, req_id, STORE_REQ_LEASED, STORE_REQ_FAILED, &ch, now)))
            return rc;
        struct sdb_stmt *s = store_stmt(st, S_DL_INSERT, &rc);
        if (!s || (rc = bind_texts(st, s, 1, req_id, reason)) || (rc = store_bind_text(st, s, 3, error)) ||
            (rc = store_bind_int(st, s, 4, now)) || (rc = store_step_done(st, s, "insert dead letter")))
            return rc;
        rc = result_put(st, req_id, batch_id, lease_id, NULL, "max_attempts_exceeded", msg, now);
        *dead = 1;
        return rc;
    }
    struct store_request_change ch = {
        .lease_id = lease_id,
        .error = error,
        .next_attempt_at = now + store_backoff_s(policy, attempts, rnd32()),
    };
    *dead = 0;
    return store_request_transition(st, req_id, STORE_REQ_LEASED, STORE_REQ_QUEUED, &ch, now);
}

/* Mark a lease ended when it holds no request any more (one statement). */
static int lease_end_if_empty(struct store *st, const char *lease_id, int64_t now)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_END_IF_EMPTY, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, lease_id)) && !(rc = store_bind_int(st, s, 2, now)))
        rc = store_step_done(st, s, "end lease if empty");
    return rc;
}

struct lease_row {
    char worker_id[ID_MAX];
    int64_t expires_at, released_at;
};

static int lease_get(struct store *st, const char *lease_id, struct lease_row *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, lease_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        store_col_text(s, 0, out->worker_id, sizeof out->worker_id);
        out->expires_at = sdb_column_int64(s, 1);
        out->released_at = sdb_column_int64(s, 2);
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get lease");
    }
    sdb_reset(s);
    return rc;
}

/* PostgreSQL: lock the rows of the batches of the requests lease_id holds
 * (of those among the n items' request ids, or among ids, when either is
 * not NULL), all of them or only those not in_progress (the only ones a
 * release ends requests of), in id order, right after the lease row (and
 * the worker row): the row lock order of store.h, whatever order the
 * transaction then ends its requests in. A batch's status changes only
 * under the exclusive writer lock, so it stays as read here. SQLite:
 * nothing (one writer). */
static int lock_batches(struct store *st, const char *lease_id, const struct store_result *items,
                        const char (*ids)[ID_MAX], size_t n, int all)
{
    if (!st->pg)
        return 0;
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = 0;
    if (items || ids) {
        rc = store_arr_begin(&a);
        for (size_t i = 0; !rc && i < n; i++)
            rc = store_arr_text(&a, items ? items[i].request_id : ids[i]);
        if (!rc)
            rc = store_arr_end(&a);
    }
    struct sdb_stmt *s = rc ? NULL : store_stmt(st, S_BATCH_LOCK_MANY, &rc);
    if (s) {
        if (!(rc = store_bind_text(st, s, 1, lease_id)) &&
            !(rc = store_bind_text(st, s, 2, items || ids ? a.data : NULL)) &&
            !(rc = store_bind_int(st, s, 3, all)))
            rc = store_step_done(st, s, "lock batches");
        sdb_clear_bindings(s);
    }
    buf_release(&a);
    return rc;
}

/* What commit/release/sweep need to know about one request. */
struct req_info {
    enum store_request_status status;
    char lease_id[ID_MAX];
    int64_t attempts;
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];
    char model[STORE_MODEL_MAX + 1];
    enum store_batch_status batch_status;
    int64_t batch_expires_at;
    char result_lease[ID_MAX]; /* "" = no results row, or one without a lease */
    int has_result;
    int result_closed;         /* its results row is batch_cancelled / batch_expired */
};

static int req_info_get(struct store *st, const char *req_id, struct req_info *q)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_FOR_COMMIT, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, req_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        memset(q, 0, sizeof *q);
        const char *stname = (const char *)sdb_column_text(s, 0);
        q->status = STORE_REQ__COUNT;
        for (int i = 0; stname && i < STORE_REQ__COUNT; i++)
            if (strcmp(stname, store_request_status_name((enum store_request_status)i)) == 0)
                q->status = (enum store_request_status)i;
        store_col_text(s, 1, q->lease_id, sizeof q->lease_id);
        q->attempts = sdb_column_int64(s, 2);
        store_col_text(s, 3, q->batch_id, sizeof q->batch_id);
        store_col_text(s, 4, q->tenant_id, sizeof q->tenant_id);
        store_col_text(s, 5, q->model, sizeof q->model);
        if (q->status == STORE_REQ__COUNT ||
            store_batch_status_parse((const char *)sdb_column_text(s, 6), &q->batch_status))
            rc = ERR_CORRUPT;
        q->batch_expires_at = sdb_column_int64(s, 7);
        q->has_result = sdb_column_type(s, 10) != SDB_NULL;
        store_col_text(s, 8, q->result_lease, sizeof q->result_lease);
        const char *ec = (const char *)sdb_column_text(s, 9);
        q->result_closed = ec && (strcmp(ec, "batch_cancelled") == 0 || strcmp(ec, "batch_expired") == 0);
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "request for commit");
    }
    sdb_reset(s);
    return rc;
}

/* ---- acquire -------------------------------------------------------------------------------- */

void store_lease_clear(struct store_lease *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].custom_id);
        free(l->items[i].body);
    }
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

int store_lease_worker_check(struct store *st, const char *worker_id, const char *model, int64_t now)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WORKER_HAS_MODEL, &rc);
    if (!s || (rc = bind_texts(st, s, 1, worker_id, model)))
        return rc;
    int r = sdb_step(s);
    int64_t has = r == SDB_ROW ? sdb_column_int64(s, 0) : -1;
    sdb_reset(s);
    if (has < 0)
        return store_sqlerr(st, r, "worker model");
    if ((rc = st->depth ? worker_seen_in(st, worker_id, -1, now) : store_worker_seen(st, worker_id, -1, now)))
        return rc; /* ERR_NOTFOUND: unknown worker */
    return has == 0 ? ERR_INVAL : 0;
}

void store_backlog_release(struct store_backlog *b)
{
    if (!b)
        return;
    free(b->items);
    memset(b, 0, sizeof *b);
}

/* ctx: the tenant id the rows were selected for. */
static int backlog_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_backlog_batch *it = elem;
    store_col_text(s, 0, it->cand.batch_id, ID_MAX);
    snprintf(it->cand.tenant_id, sizeof it->cand.tenant_id, "%s", (const char *)ctx);
    it->cand.priority = sdb_column_int64(s, 1);
    it->cand.expires_at = sdb_column_int64(s, 2);
    it->remaining = sdb_column_int64(s, 3);
    it->tokens_per_request = sdb_column_type(s, 4) != SDB_NULL   ? sdb_column_double(s, 4)
                             : sdb_column_type(s, 5) != SDB_NULL ? sdb_column_double(s, 5)
                                                                        : 0;
    return 0;
}

int store_backlog_get(struct store *st, const char *tenant_id, const char *model, int64_t seen_since,
                      struct store_backlog *out)
{
    static const struct store_rows how = {sizeof(struct store_backlog_batch), backlog_row, NULL,
                                          "backlog batches"};
    struct store_backlog bl;
    memset(&bl, 0, sizeof bl);
    int rc = 0, r;
    struct sdb_stmt *s = store_stmt(st, S_BACKLOG_BATCHES, &rc);
    if (!s || (rc = bind_texts(st, s, 1, tenant_id, model)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, (void *)tenant_id, 0, &arr, &bl.n, NULL)))
        return rc;
    bl.items = arr;
    if (!rc && (s = store_stmt(st, S_BACKLOG_TPS, &rc)) && !(rc = store_bind_text(st, s, 1, model)) &&
        !(rc = store_bind_int(st, s, 2, seen_since))) {
        if ((r = sdb_step(s)) == SDB_ROW)
            bl.tokens_per_s = sdb_column_double(s, 0);
        else
            rc = store_sqlerr(st, r, "backlog throughput");
        sdb_reset(s);
    }
    if (!rc && (s = store_stmt(st, S_BACKLOG_TENANTS, &rc)) && !(rc = store_bind_text(st, s, 1, model))) {
        if ((r = sdb_step(s)) == SDB_ROW)
            bl.n_tenants = sdb_column_int64(s, 0);
        else
            rc = store_sqlerr(st, r, "backlog tenants");
        sdb_reset(s);
    }
    if (rc) {
        store_backlog_release(&bl);
        return rc;
    }
    *out = bl;
    return 0;
}

static int cand_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_lease_cand *c = elem;
    (void)ctx;
    store_col_text(s, 0, c->batch_id, ID_MAX);
    store_col_text(s, 1, c->tenant_id, ID_MAX);
    c->priority = sdb_column_int64(s, 2);
    c->expires_at = sdb_column_int64(s, 3);
    return 0;
}

int store_lease_candidates(struct store *st, const char *worker_id, const char *model, int64_t now,
                           struct store_lease_cand **items, size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_lease_cand), cand_row, NULL,
                                          "lease candidates"};
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_CANDIDATES, &rc);
    if (!s || (rc = bind_texts(st, s, 1, worker_id, model)) || (rc = store_bind_int(st, s, 3, now)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

int store_lease_rr_get(struct store *st, const char *model, char tenant_id[ID_MAX])
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_RR_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, model)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        store_col_text(s, 0, tenant_id, ID_MAX);
    else if (r == SDB_DONE)
        tenant_id[0] = '\0';
    else
        rc = store_sqlerr(st, r, "lease_rr");
    sdb_reset(s);
    return rc;
}

int store_lease_rr_put(struct store *st, const char *model, const char *tenant_id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_RR_PUT, &rc);
    if (!s || (rc = bind_texts(st, s, 1, model, tenant_id)))
        return rc;
    if (st->depth) /* inside the acquire, whose error rolls back whole: no savepoint */
        return store_step_done(st, s, "lease_rr");
    if ((rc = store_w_begin(st)))
        return rc;
    rc = store_step_done(st, s, "lease_rr");
    return store_w_end(st, rc);
}

void store_leased_clear(struct store_leased *items, size_t n)
{
    for (size_t i = 0; items && i < n; i++) {
        free(items[i].custom_id);
        free(items[i].body);
        items[i].custom_id = items[i].body = NULL;
    }
}

int store_lease_ready(struct store *st, const char *batch_id, const char *worker_id, const char *model,
                      int64_t now, int limit, struct store_leased *items, size_t *n)
{
    if (limit < 1)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_READY, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)) || (rc = store_bind_int(st, s, 2, now)) ||
        (rc = store_bind_int(st, s, 3, limit)) || (rc = bind_texts(st, s, 4, worker_id, model)))
        return rc;
    size_t cnt = 0;
    int r;
    while ((r = sdb_step(s)) == SDB_ROW && cnt < (size_t)limit) {
        struct store_leased *it = &items[cnt];
        memset(it, 0, sizeof *it);
        store_col_text(s, 0, it->id, sizeof it->id);
        snprintf(it->batch_id, sizeof it->batch_id, "%s", batch_id);
        it->custom_id = store_col_dup(s, 1, &rc);
        const void *body = sdb_column_text(s, 2);
        it->body_len = (size_t)sdb_column_bytes(s, 2);
        it->body = malloc(it->body_len + 1);
        if (!it->custom_id || !it->body) {
            free(it->custom_id);
            free(it->body);
            rc = ERR_NOMEM;
            break;
        }
        memcpy(it->body, body ? body : "", it->body_len);
        it->body[it->body_len] = '\0';
        it->attempt = sdb_column_int64(s, 3) + 1;
        it->prompt_tokens_est = sdb_column_int64(s, 4);
        it->max_tokens = sdb_column_int64(s, 5);
        cnt++;
    }
    if (!rc && r != SDB_ROW && r != SDB_DONE)
        rc = store_sqlerr(st, r, "ready requests");
    sdb_reset(s);
    if (rc) {
        store_leased_clear(items, cnt);
        return rc;
    }
    *n = cnt;
    return 0;
}

/* PostgreSQL: the claim as one statement over an array of ids: the
 * requests leased, their requests_queued rows deleted (locked by
 * LEASE_READY's FOR UPDATE SKIP LOCKED in this transaction, so every one
 * of them is still queued) and the lease's lease_batches rows listing
 * them (LEASE_CLAIM_MANY). Both counts must be n. */
static int claim_many(struct store *st, const char *lease_id, const char (*ids)[ID_MAX], size_t n,
                      int64_t now)
{
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = store_arr_begin(&a);
    for (size_t i = 0; !rc && i < n; i++)
        rc = store_arr_text(&a, ids[i]);
    if (!rc)
        rc = store_arr_end(&a);
    struct sdb_stmt *s = rc ? NULL : store_stmt(st, S_LEASE_CLAIM_MANY, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, a.data)) && !(rc = store_bind_text(st, s, 2, lease_id)) &&
        !(rc = store_bind_int(st, s, 3, now))) {
        int64_t leased = -1, dequeued = -1;
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            leased = sdb_column_int64(s, 0);
            dequeued = sdb_column_int64(s, 1);
            rc = store_step_done(st, s, "claim");
        } else {
            rc = store_sqlerr(st, r, "claim");
        }
        if (!rc && (leased != (int64_t)n || dequeued != (int64_t)n)) {
            log_warn("store: lease %s claimed %lld of %zu requests, %lld of them queued (taken meanwhile)",
                     lease_id, (long long)leased, n, (long long)dequeued);
            rc = ERR_BADSTATE;
        }
    }
    if (s) {
        sdb_reset(s);
        sdb_clear_bindings(s);
    }
    buf_release(&a);
    return rc;
}

int store_lease_claim(struct store *st, const char *lease_id, const char (*ids)[ID_MAX], size_t n,
                      int64_t now)
{
    if (!lease_id || !*lease_id)
        return ERR_INVAL;
    if (st->depth == 0)
        return ERR_BADSTATE;
    /* No savepoint around the loop: a savepoint held over hundreds of
     * updates outgrows SQLite's in-memory statement journal and spills it
     * to a temporary file (5x the writes of an acquire). None per
     * transition either: an error fails the acquire, whose transaction
     * rolls back whole, and the caller's transaction makes the claim atomic. */
    if (st->pg && n > 0)
        return claim_many(st, lease_id, ids, n, now);
    struct store_request_change ch = {.lease_id = lease_id};
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = store_req_transition_in(st, ids[i], STORE_REQ_QUEUED, STORE_REQ_LEASED, &ch, now, NULL);
    return rc;
}

int store_lease_open(struct store *st, const char *lease_id, const char *worker_id, const char *model,
                     int64_t n_requests, int64_t now, int64_t expires_at)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_INSERT, &rc);
    if (!s || (rc = bind_texts(st, s, 1, lease_id, worker_id)) ||
        (rc = store_bind_text(st, s, 3, model)) || (rc = store_bind_int(st, s, 4, n_requests)) ||
        (rc = store_bind_int(st, s, 5, now)) || (rc = store_bind_int(st, s, 6, expires_at)))
        return rc;
    int own = st->depth == 0; /* inside the acquire, whose error rolls back whole: no savepoint */
    if (own && (rc = store_w_begin(st)))
        return rc;
    /* which batches it serves (fleet cost), from the requests just claimed
     * (PostgreSQL: written by the claims, LEASE_CLAIM_MANY) */
    if (!(rc = store_step_done(st, s, "insert lease")) && !st->pg) {
        s = store_stmt(st, S_LEASE_BATCHES_FILL, &rc);
        if (s && !(rc = store_bind_text(st, s, 1, lease_id)))
            rc = store_step_done(st, s, "lease batches");
    }
    return own ? store_w_end(st, rc) : rc;
}

/* ---- heartbeat -------------------------------------------------------------------------------- */

int store_lease_heartbeat(struct store *st, const char *lease_id, const char *worker_id,
                          int64_t extend_s, double tokens_per_s, int64_t now,
                          int64_t *expires_at, char (**stop_ids)[ID_MAX], size_t *n_stop)
{
    if (!lease_id || extend_s <= 0)
        return ERR_INVAL;
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    struct lease_row L;
    char(*ids)[ID_MAX] = NULL;
    size_t n = 0;
    int64_t exp = 0;
    if ((rc = lease_get(st, lease_id, &L)))
        goto out;
    if (worker_id && strcmp(worker_id, L.worker_id) != 0) {
        rc = ERR_NOTFOUND;
        goto out;
    }
    if (L.released_at) {
        rc = ERR_BADSTATE;
        goto out;
    }
    struct sdb_stmt *s = store_stmt(st, S_LEASE_EXTEND, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, lease_id)) || (rc = store_bind_int(st, s, 2, now + extend_s)))
        goto out;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        exp = sdb_column_int64(s, 0);
    else
        rc = r == SDB_DONE ? ERR_BADSTATE : store_sqlerr(st, r, "extend lease");
    sdb_reset(s);
    if (rc)
        goto out;
    if ((rc = worker_seen_in(st, L.worker_id, tokens_per_s, now)) == ERR_NOTFOUND)
        rc = 0; /* worker row purged: the lease stays valid */
    if (rc)
        goto out;
    s = store_stmt(st, S_LEASE_STOP_IDS, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, lease_id)) && !(rc = store_bind_int(st, s, 2, now)))
        rc = store_collect_ids(st, s, &ids, &n);
out:
    rc = store_w_end(st, rc);
    if (rc) {
        free(ids);
        return rc;
    }
    *expires_at = exp;
    *stop_ids = ids;
    *n_stop = n;
    return 0;
}

/* ---- results ----------------------------------------------------------------------------------- */

const char *store_commit_outcome_name(enum store_commit_outcome o)
{
    static const char *const names[] = {"ok", "retry", "dead_lettered", "closed",
                                        "duplicate", "stale", "unknown"};
    return (unsigned)o < sizeof names / sizeof names[0] ? names[o] : "?";
}

static int result_valid(const struct store_result *it)
{
    if (!it->request_id || !*it->request_id || strlen(it->request_id) >= ID_MAX)
        return 0;
    if (it->prompt_tokens < 0 || it->completion_tokens < 0 || it->cached_tokens < 0 ||
        it->queue_ms < 0 || it->prefill_ms < 0 || it->decode_ms < 0 || it->gpu_ms < 0)
        return 0;
    switch (it->kind) {
    case STORE_RESULT_SUCCESS: return it->body && it->status_code >= 200 && it->status_code < 300;
    case STORE_RESULT_INVALID: return it->body && it->status_code >= 400 && it->status_code < 500;
    case STORE_RESULT_TRANSIENT: return 1;
    default: return 0;
    }
}

static int commit_one(struct store *st, const char *lease_id, const struct store_result *it,
                      const struct store_retry_policy *policy, int64_t now,
                      enum store_commit_outcome *outcome, struct store_count_acc *acc)
{
    struct req_info q;
    int rc = req_info_get(st, it->request_id, &q);
    if (rc == ERR_NOTFOUND) {
        *outcome = STORE_COMMIT_UNKNOWN;
        return 0;
    }
    if (rc)
        return rc;
    if (!(q.status == STORE_REQ_LEASED && strcmp(q.lease_id, lease_id) == 0)) {
        if (q.has_result && strcmp(q.result_lease, lease_id) == 0)
            *outcome = q.result_closed ? STORE_COMMIT_CLOSED : STORE_COMMIT_DUPLICATE;
        else
            *outcome = STORE_COMMIT_STALE;
        return 0;
    }
    struct store_request_change ch = {.lease_id = lease_id};
    switch (it->kind) {
    case STORE_RESULT_SUCCESS:
        if ((rc = store_req_transition_in(st, it->request_id, STORE_REQ_LEASED, STORE_REQ_SUCCEEDED, &ch, now, acc)) ||
            (rc = result_put(st, it->request_id, q.batch_id, lease_id, it, NULL, NULL, now)))
            return rc;
        int64_t cost = 0;
        if (st->opts.cost &&
            st->opts.cost(st->opts.cost_ctx, q.model, it->prompt_tokens,
                          it->cached_tokens < it->prompt_tokens ? it->cached_tokens : it->prompt_tokens,
                          it->completion_tokens, &cost))
            cost = INT64_MAX; /* unreachable: the protocol caps counts at 2^40, prices at 1e12 */
        struct sdb_stmt *s = store_stmt(st, S_USAGE_INSERT, &rc);
        if (!s || (rc = store_bind_int(st, s, 9, cost)) || (rc = bind_texts(st, s, 1, q.tenant_id, q.batch_id)) ||
            (rc = bind_texts(st, s, 3, it->request_id, q.model)) ||
            (rc = store_bind_int(st, s, 5, it->prompt_tokens)) ||
            (rc = store_bind_int(st, s, 6, it->completion_tokens)) ||
            (rc = store_bind_int(st, s, 7, it->cached_tokens)) || (rc = store_bind_int(st, s, 8, now)) ||
            (rc = store_step_done(st, s, "usage")))
            return rc;
        *outcome = STORE_COMMIT_OK;
        return 0;
    case STORE_RESULT_INVALID:
        ch.error = "invalid request";
        if ((rc = store_req_transition_in(st, it->request_id, STORE_REQ_LEASED, STORE_REQ_FAILED, &ch, now, acc)) ||
            (rc = result_put(st, it->request_id, q.batch_id, lease_id, it, NULL, NULL, now)))
            return rc;
        *outcome = STORE_COMMIT_OK;
        return 0;
    case STORE_RESULT_TRANSIENT:
    default:
        if (q.batch_status != STORE_BATCH_IN_PROGRESS) {
            rc = req_end_closed(st, it->request_id, q.batch_id, STORE_REQ_LEASED, lease_id,
                                q.batch_status == STORE_BATCH_EXPIRED, now);
            *outcome = STORE_COMMIT_CLOSED;
            return rc;
        }
        int dead = 0;
        rc = req_retry_or_dead(st, it->request_id, q.batch_id, lease_id, q.attempts,
                               it->error ? it->error : "transient worker error", "worker_error",
                               policy, now, &dead);
        *outcome = dead ? STORE_COMMIT_DEAD : STORE_COMMIT_RETRY;
        return rc;
    }
}

/* ---- the set-based commit (PostgreSQL) ------------------------------------------------------------ */

/* What the set-based commit knows of one request (REQ_FOR_COMMIT_MANY). */
struct bulk_req {
    char id[ID_MAX];
    int leased_here; /* status leased under this lease */
    int taken;       /* an item of this commit already ends it */
    int reuse;       /* it carries a reuse key (REUSE_RECORD has something to record) */
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];
    char model[STORE_MODEL_MAX + 1];
};

static int bulk_req_cmp(const void *a, const void *b)
{
    return strcmp(((const struct bulk_req *)a)->id, ((const struct bulk_req *)b)->id);
}

static int bulk_req_key_cmp(const void *key, const void *e)
{
    return strcmp((const char *)key, ((const struct bulk_req *)e)->id);
}

struct bulk {
    struct store *st;
    const char *lease_id;
    int64_t now;
    const struct store_result *items;
    size_t n;
    size_t *pick;          /* indexes into items of the requests this commit ends set-based */
    struct bulk_req **req; /* pick[k]'s request */
    size_t np;
};

/* The per-request columns of the set-based statements. */
enum bulk_col {
    BC_ID, BC_BATCH, BC_TENANT, BC_MODEL, BC_BODY, BC_STATUS_CODE, BC_PROMPT,
    BC_COMPLETION, BC_CACHED, BC_QUEUE_MS, BC_PREFILL_MS, BC_DECODE_MS, BC_GPU_MS, BC_COST,
    BC_LEASE = -1, BC_NOW = -2 /* not per request: the lease id, now */
};

/* Bind the array literal of column col of the picks (only successes when
 * ok_only) as parameter i of s. */
static int bulk_bind(struct bulk *B, struct sdb_stmt *s, int i, struct buf *a, enum bulk_col col, int ok_only)
{
    int rc = store_arr_begin(a);
    for (size_t k = 0; !rc && k < B->np; k++) {
        const struct store_result *it = &B->items[B->pick[k]];
        if (ok_only && it->kind != STORE_RESULT_SUCCESS)
            continue;
        switch (col) {
        case BC_ID: rc = store_arr_text(a, it->request_id); break;
        case BC_BATCH: rc = store_arr_text(a, B->req[k]->batch_id); break;
        case BC_TENANT: rc = store_arr_text(a, B->req[k]->tenant_id); break;
        case BC_MODEL: rc = store_arr_text(a, B->req[k]->model); break;
        case BC_BODY: rc = store_arr_hex(a, it->body, it->body_len); break;
        case BC_STATUS_CODE: rc = store_arr_int(a, it->status_code); break;
        case BC_PROMPT: rc = store_arr_int(a, it->prompt_tokens); break;
        case BC_COMPLETION: rc = store_arr_int(a, it->completion_tokens); break;
        case BC_CACHED: rc = store_arr_int(a, it->cached_tokens); break;
        case BC_QUEUE_MS: rc = store_arr_int(a, it->queue_ms); break;
        case BC_PREFILL_MS: rc = store_arr_int(a, it->prefill_ms); break;
        case BC_DECODE_MS: rc = store_arr_int(a, it->decode_ms); break;
        case BC_GPU_MS: rc = store_arr_int(a, it->gpu_ms); break;
        case BC_COST: {
            int64_t cost = 0;
            if (B->st->opts.cost &&
                B->st->opts.cost(B->st->opts.cost_ctx, B->req[k]->model, it->prompt_tokens,
                                 it->cached_tokens < it->prompt_tokens ? it->cached_tokens : it->prompt_tokens,
                                 it->completion_tokens, &cost))
                cost = INT64_MAX; /* as commit_one */
            rc = store_arr_int(a, cost);
            break;
        }
        default: rc = ERR_INTERNAL;
        }
    }
    if (!rc)
        rc = store_arr_end(a);
    if (rc)
        return rc;
    /* a counted bind copies (a is reused for the next parameter) */
    int r = sdb_bind_text(s, i, a->data, (int)a->len);
    return r == SDB_OK ? 0 : store_sqlerr(B->st, r, "bind array");
}

/* Step 1: read the request of every item in one statement and pick the
 * successes and 4xx answers whose request this lease still holds (the
 * rest, and every transient error, go through commit_one). A second item
 * of a picked request is a duplicate. done[i] / out[i] are set for what is
 * decided. What it reads stays true to the commit: a request leased under
 * this lease changes only under the lease's row lock (held) or the
 * exclusive writer lock (excluded). */
static int bulk_pick(struct bulk *B, unsigned char *done, enum store_commit_outcome *out,
                     struct bulk_req **reqs_out, size_t *nreq_out)
{
    struct store *st = B->st;
    struct buf a;
    buf_init(&a, SIZE_MAX);
    size_t want = 0;
    int rc = store_arr_begin(&a);
    for (size_t i = 0; !rc && i < B->n; i++) {
        rc = store_arr_text(&a, B->items[i].request_id);
        want++;
    }
    if (!rc)
        rc = store_arr_end(&a);
    struct bulk_req *reqs = NULL;
    size_t nr = 0;
    struct sdb_stmt *s = NULL;
    if (!rc && want && !(reqs = calloc(want, sizeof *reqs)))
        rc = ERR_NOMEM;
    if (!rc && want && (s = store_stmt(st, S_REQ_FOR_COMMIT_MANY, &rc)) &&
        !(rc = store_bind_text(st, s, 1, a.data))) {
        int r;
        while ((r = sdb_step(s)) == SDB_ROW && nr < want) {
            struct bulk_req *q = &reqs[nr++];
            store_col_text(s, 0, q->id, sizeof q->id);
            const char *stname = (const char *)sdb_column_text(s, 1);
            const char *lid = (const char *)sdb_column_text(s, 2);
            q->leased_here = stname && strcmp(stname, "leased") == 0 && lid && strcmp(lid, B->lease_id) == 0;
            store_col_text(s, 3, q->batch_id, sizeof q->batch_id);
            store_col_text(s, 4, q->tenant_id, sizeof q->tenant_id);
            store_col_text(s, 5, q->model, sizeof q->model);
            q->reuse = sdb_column_int64(s, 6) != 0;
        }
        if (r != SDB_ROW && r != SDB_DONE)
            rc = store_sqlerr(st, r, "requests for commit");
        sdb_reset(s);
        sdb_clear_bindings(s);
    }
    buf_release(&a);
    if (rc) {
        free(reqs);
        return rc;
    }
    if (nr == 0) { /* none of the requests exists */
        free(reqs);
        *reqs_out = NULL;
        *nreq_out = 0;
        return 0;
    }
    qsort(reqs, nr, sizeof *reqs, bulk_req_cmp);
    for (size_t i = 0; i < B->n; i++) {
        const struct store_result *it = &B->items[i];
        if (it->kind == STORE_RESULT_TRANSIENT)
            continue;
        struct bulk_req *q = bsearch(it->request_id, reqs, nr, sizeof *reqs, bulk_req_key_cmp);
        if (!q || !q->leased_here)
            continue; /* commit_one answers (unknown, stale, duplicate of an earlier commit) */
        if (q->taken) {
            done[i] = 1; /* the same request twice in one commit: the first wins */
            out[i] = STORE_COMMIT_DUPLICATE;
            continue;
        }
        q->taken = 1;
        B->pick[B->np] = i;
        B->req[B->np] = q;
        B->np++;
    }
    *reqs_out = reqs;
    *nreq_out = nr;
    return 0;
}

/* Step 1b: lock the rows of the batches of the requests (among reqs[0 ..
 * nr), bulk_pick's) that this lease holds, all at once in id order: what
 * lock_batches does, from the rows bulk_pick read instead of a second
 * probe of every request. */
static int bulk_lock_batches(struct bulk *B, const struct bulk_req *reqs, size_t nr)
{
    struct store *st = B->st;
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = store_arr_begin(&a);
    size_t m = 0;
    for (size_t i = 0; !rc && i < nr; i++) {
        if (!reqs[i].leased_here)
            continue;
        int seen = 0; /* a commit's requests come from a few batches */
        for (size_t j = 0; j < i && !seen; j++)
            seen = reqs[j].leased_here && strcmp(reqs[j].batch_id, reqs[i].batch_id) == 0;
        if (!seen) {
            rc = store_arr_text(&a, reqs[i].batch_id);
            m++;
        }
    }
    if (!rc)
        rc = store_arr_end(&a);
    struct sdb_stmt *s = rc || m == 0 ? NULL : store_stmt(st, S_BATCH_LOCK_IDS, &rc);
    if (s) {
        if (!(rc = store_bind_text(st, s, 1, a.data)))
            rc = store_step_done(st, s, "lock batches");
        sdb_clear_bindings(s);
    }
    buf_release(&a);
    return rc;
}

/* Step 2: end the picked requests - one UPDATE for the successes, one for
 * the 4xx failures (REQ_FINISH_MANY, fenced by status and lease id; every
 * pick was read as leased under this lease, and the lease row is locked,
 * so all of them change) - and count them. */
static int bulk_finish(struct bulk *B, struct store_count_acc *acc)
{
    struct store *st = B->st;
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = 0;
    int64_t ended = 0;
    /* the batch rows are locked already (lock_batches, in id order) */
    for (int ok = 1; !rc && ok >= 0; ok--) {
        size_t m = 0;
        rc = store_arr_begin(&a);
        for (size_t k = 0; !rc && k < B->np; k++)
            if ((B->items[B->pick[k]].kind == STORE_RESULT_SUCCESS) == ok) {
                rc = store_arr_text(&a, B->items[B->pick[k]].request_id);
                m++;
            }
        if (!rc)
            rc = store_arr_end(&a);
        if (rc || m == 0)
            continue;
        struct sdb_stmt *s = store_stmt(st, S_REQ_FINISH_MANY, &rc);
        if (s && !(rc = store_bind_text(st, s, 1, a.data)) &&
            !(rc = store_bind_text(st, s, 2, ok ? "succeeded" : "failed")) &&
            !(rc = store_bind_int(st, s, 3, B->now)) && (ok || !(rc = store_bind_text(st, s, 4, "invalid request"))) &&
            !(rc = store_bind_text(st, s, 5, B->lease_id))) {
            int r = sdb_step(s); /* one row: how many it ended */
            if (r == SDB_ROW) {
                ended += sdb_column_int64(s, 0);
                rc = store_step_done(st, s, "finish requests");
            } else {
                rc = store_sqlerr(st, r, "finish requests");
            }
        }
        if (s) {
            sdb_reset(s);
            sdb_clear_bindings(s);
        }
    }
    if (!rc && ended != (int64_t)B->np) {
        log_warn("store: commit under lease %s ended %lld of %zu requests", B->lease_id, (long long)ended, B->np);
        rc = ERR_BUSY; /* cannot happen under the lease lock; the worker retries the chunk */
    }
    buf_release(&a);
    for (size_t k = 0; !rc && k < B->np; k++) {
        int ok = B->items[B->pick[k]].kind == STORE_RESULT_SUCCESS;
        rc = store_count_add(st, acc, B->req[k]->batch_id, ok, !ok);
    }
    return rc;
}

/* Step 3 (late in the transaction: the results trigger locks each batch
 * row to commit): the results rows and the successes' ledger rows, one
 * INSERT each. */
static int bulk_insert(struct bulk *B)
{
    struct store *st = B->st;
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_RESULT_INSERT_MANY, &rc);
    if (s) {
        /* RESULT_INSERT_MANY's ?1 .. ?13 */
        static const enum bulk_col cols[] = {BC_ID, BC_BATCH, BC_LEASE, BC_NOW, BC_STATUS_CODE, BC_BODY,
                                             BC_PROMPT, BC_COMPLETION, BC_CACHED, BC_QUEUE_MS,
                                             BC_PREFILL_MS, BC_DECODE_MS, BC_GPU_MS};
        for (int i = 0; !rc && i < (int)(sizeof cols / sizeof cols[0]); i++) {
            if (cols[i] == BC_LEASE)
                rc = store_bind_text(st, s, i + 1, B->lease_id);
            else if (cols[i] == BC_NOW)
                rc = store_bind_int(st, s, i + 1, B->now);
            else
                rc = bulk_bind(B, s, i + 1, &a, cols[i], 0);
        }
        if (!rc)
            rc = store_step_done(st, s, "insert results");
        sdb_clear_bindings(s);
    }
    size_t n_ok = 0;
    for (size_t k = 0; k < B->np; k++)
        n_ok += B->items[B->pick[k]].kind == STORE_RESULT_SUCCESS;
    if (!rc && n_ok && (s = store_stmt(st, S_USAGE_INSERT_MANY, &rc))) {
        /* USAGE_INSERT_MANY's ?2 .. ?9 (?1: now) */
        static const enum bulk_col cols[] = {BC_TENANT, BC_BATCH, BC_ID, BC_MODEL,
                                             BC_PROMPT, BC_COMPLETION, BC_CACHED, BC_COST};
        rc = store_bind_int(st, s, 1, B->now);
        for (int i = 0; !rc && i < (int)(sizeof cols / sizeof cols[0]); i++)
            rc = bulk_bind(B, s, i + 2, &a, cols[i], 1);
        if (!rc)
            rc = store_step_done(st, s, "insert usage");
        sdb_clear_bindings(s);
    }
    buf_release(&a);
    return rc;
}

int store_results_commit(struct store *st, const char *lease_id, const char *worker_id,
                         const struct store_result *items, size_t n,
                         const struct store_retry_policy *policy, int64_t now,
                         enum store_commit_outcome *outcomes)
{
    static const struct store_retry_policy def = STORE_RETRY_DEFAULT;
    if (!policy)
        policy = &def;
    if (!lease_id || (n && (!items || !outcomes)))
        return ERR_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!result_valid(&items[i]))
            return ERR_INVAL;
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    struct lease_row L;
    enum store_commit_outcome *tmp = NULL;
    unsigned char *done = NULL;
    struct bulk B = {.st = st, .lease_id = lease_id, .now = now, .items = items, .n = n};
    struct bulk_req *reqs = NULL;
    size_t nreq = 0;
    if ((rc = lease_get(st, lease_id, &L)))
        goto out;
    if (worker_id && strcmp(worker_id, L.worker_id) != 0) {
        rc = ERR_NOTFOUND;
        goto out;
    }
    /* the worker row next, as a heartbeat does: on PostgreSQL every hot path
     * locks rows in one order - lease, worker, batches (in id order),
     * usage_totals (store.h) - so two commits of one worker cannot deadlock */
    if (worker_id && (rc = worker_seen_in(st, worker_id, -1, now)) == ERR_NOTFOUND)
        rc = 0;
    /* PostgreSQL, a chunk of several: bulk_pick reads the requests first
     * and bulk_lock_batches locks their batches from that */
    if (rc || (n && !(st->pg && n > 1) && (rc = lock_batches(st, lease_id, items, NULL, n, 1))))
        goto out;
    if (n && (!(tmp = calloc(n, sizeof *tmp)) || !(done = calloc(n, 1)))) {
        rc = ERR_NOMEM;
        goto out;
    }
    struct store_count_acc acc = {0};
    /* PostgreSQL: the requests this lease still holds end set-based, a few
     * round trips per commit instead of four per request (bulk_*); the
     * rest (transient errors, stale or unknown ids) one by one, as on SQLite */
    if (st->pg && n > 1) {
        if (!(B.pick = calloc(n, sizeof *B.pick)) || !(B.req = calloc(n, sizeof *B.req)))
            rc = ERR_NOMEM;
        if (!rc && !(rc = bulk_pick(&B, done, tmp, &reqs, &nreq)) &&
            !(rc = bulk_lock_batches(&B, reqs, nreq)) && B.np)
            rc = bulk_finish(&B, &acc);
        for (size_t k = 0; !rc && k < B.np; k++) {
            done[B.pick[k]] = 1;
            tmp[B.pick[k]] = STORE_COMMIT_OK;
        }
    }
    /* REUSE_RECORD joins the commit's results to their requests to find
     * reuse keys: skipped when none of the requests has one (read by
     * bulk_pick; whatever went through commit_one is not known, so it runs) */
    int reuse = !st->pg || n <= 1;
    for (size_t k = 0; k < B.np; k++)
        reuse |= B.req[k]->reuse;
    for (size_t i = 0; !rc && i < n; i++)
        if (!done[i]) {
            rc = commit_one(st, lease_id, &items[i], policy, now, &tmp[i], &acc);
            reuse = 1;
        }
    if (!rc && !L.released_at)
        rc = lease_end_if_empty(st, lease_id, now);
    if (!rc && B.np)
        rc = bulk_insert(&B);
    if (!rc)
        rc = store_count_flush(st, &acc);
    if (!rc && n && reuse)
        rc = store_reuse_record(st, lease_id, now);
out:
    rc = store_w_end(st, rc);
    if (!rc && n)
        memcpy(outcomes, tmp, n * sizeof *tmp);
    free(tmp);
    free(done);
    free(B.pick);
    free(B.req);
    free(reqs);
    return rc;
}

/* ---- release ------------------------------------------------------------------------------------ */

static int release_one(struct store *st, const char *lease_id, const char *req_id, int64_t now, int *done)
{
    struct req_info q;
    int rc = req_info_get(st, req_id, &q);
    *done = 0;
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc || q.status != STORE_REQ_LEASED || strcmp(q.lease_id, lease_id) != 0)
        return rc;
    *done = 1;
    if (q.batch_status != STORE_BATCH_IN_PROGRESS)
        return req_end_closed(st, req_id, q.batch_id, STORE_REQ_LEASED, lease_id,
                              q.batch_status == STORE_BATCH_EXPIRED, now);
    struct store_request_change ch = {
        .lease_id = lease_id, .next_attempt_at = now, .give_back = 1, .error = NULL};
    return store_request_transition(st, req_id, STORE_REQ_LEASED, STORE_REQ_QUEUED, &ch, now);
}

/* Ids of up to max requests still leased by lease_id. */
static int held_ids(struct store *st, const char *lease_id, int max, char (**ids)[ID_MAX], size_t *n)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_HELD, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, lease_id)) || (rc = store_bind_int(st, s, 2, max)))
        return rc;
    return store_collect_ids(st, s, ids, n);
}

int store_lease_release(struct store *st, const char *lease_id, const char *worker_id,
                        const char (*ids)[ID_MAX], size_t n, int64_t now, int64_t *n_released)
{
    if (!lease_id || (n && !ids))
        return ERR_INVAL;
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    struct lease_row L;
    char(*held)[ID_MAX] = NULL;
    int64_t cnt = 0;
    if ((rc = lease_get(st, lease_id, &L)))
        goto out;
    if (worker_id && strcmp(worker_id, L.worker_id) != 0) {
        rc = ERR_NOTFOUND;
        goto out;
    }
    if ((rc = lock_batches(st, lease_id, NULL, ids, n, 0)))
        goto out;
    if (!ids) {
        if ((rc = held_ids(st, lease_id, STORE_LEASE_MAX_REQUESTS, &held, &n)))
            goto out;
        ids = (const char(*)[ID_MAX])held;
    }
    for (size_t i = 0; !rc && i < n; i++) {
        int done = 0;
        rc = release_one(st, lease_id, ids[i], now, &done);
        cnt += done;
    }
    if (!rc && !L.released_at)
        rc = lease_end_if_empty(st, lease_id, now);
out:
    free(held);
    rc = store_w_end(st, rc);
    if (!rc && n_released)
        *n_released = cnt;
    return rc;
}

/* ---- sweep -------------------------------------------------------------------------------------- */

static int sweep_one(struct store *st, const char *lease_id, int64_t now,
                     const struct store_retry_policy *policy, struct store_sweep_report *rep)
{
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    struct lease_row L;
    char(*held)[ID_MAX] = NULL;
    size_t n = 0;
    struct store_sweep_report add = {0};
    if ((rc = lease_get(st, lease_id, &L)) || L.released_at || L.expires_at > now)
        goto out; /* extended or ended meanwhile */
    if ((rc = lock_batches(st, lease_id, NULL, NULL, 0, 1)) ||
        (rc = held_ids(st, lease_id, STORE_LEASE_MAX_REQUESTS, &held, &n)))
        goto out;
    for (size_t i = 0; !rc && i < n; i++) {
        struct req_info q;
        if ((rc = req_info_get(st, held[i], &q)))
            break;
        if (q.batch_status != STORE_BATCH_IN_PROGRESS) {
            rc = req_end_closed(st, held[i], q.batch_id, STORE_REQ_LEASED, lease_id,
                                q.batch_status == STORE_BATCH_EXPIRED, now);
            add.n_closed++;
        } else {
            int dead = 0;
            rc = req_retry_or_dead(st, held[i], q.batch_id, lease_id, q.attempts,
                                   "the worker's lease expired", "lease_expired", policy, now, &dead);
            if (dead)
                add.n_dead++;
            else
                add.n_requeued++;
        }
    }
    if (!rc) {
        struct sdb_stmt *s = store_stmt(st, S_LEASE_END, &rc);
        if (s && !(rc = store_bind_text(st, s, 1, lease_id)) && !(rc = store_bind_int(st, s, 2, now)))
            rc = store_step_done(st, s, "end lease");
        add.n_leases = 1;
    }
out:
    free(held);
    rc = store_w_end(st, rc);
    if (!rc) {
        rep->n_leases += add.n_leases;
        rep->n_requeued += add.n_requeued;
        rep->n_dead += add.n_dead;
        rep->n_closed += add.n_closed;
    }
    return rc;
}

int store_lease_sweep(struct store *st, int64_t now, const struct store_retry_policy *policy,
                      int max_leases, struct store_sweep_report *rep)
{
    static const struct store_retry_policy def = STORE_RETRY_DEFAULT;
    if (!policy)
        policy = &def;
    if (max_leases < 1)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LEASE_EXPIRED, &rc);
    char(*ids)[ID_MAX] = NULL;
    size_t n = 0;
    if (!s || (rc = store_bind_int(st, s, 1, now)) || (rc = store_bind_int(st, s, 2, max_leases)) ||
        (rc = store_collect_ids(st, s, &ids, &n)))
        return rc;
    for (size_t i = 0; !rc && i < n; i++)
        rc = sweep_one(st, ids[i], now, policy, rep);
    free(ids);
    return rc;
}

/* ---- cancel / expiry ---------------------------------------------------------------------------- */

struct id_pair {
    char id[ID_MAX];
    char lease[ID_MAX];
};

static int batch_ids_in(struct store *st, enum store_stmt_id which, const char *batch_id, int max,
                        struct id_pair **out, size_t *n)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, which, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)) || (rc = store_bind_int(st, s, 2, max)))
        return rc;
    struct id_pair *arr = calloc((size_t)max, sizeof *arr);
    if (!arr) {
        sdb_reset(s);
        return ERR_NOMEM;
    }
    size_t cnt = 0;
    int r;
    while ((r = sdb_step(s)) == SDB_ROW && cnt < (size_t)max) {
        store_col_text(s, 0, arr[cnt].id, ID_MAX);
        store_col_text(s, 1, arr[cnt].lease, ID_MAX);
        cnt++;
    }
    if (r != SDB_ROW && r != SDB_DONE)
        rc = store_sqlerr(st, r, "batch requests");
    sdb_reset(s);
    if (rc) {
        free(arr);
        return rc;
    }
    *out = arr;
    *n = cnt;
    return 0;
}

int store_batch_has_leased(struct store *st, const char *batch_id, int *yes)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_HAS_LEASED, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW || r == SDB_DONE)
        *yes = r == SDB_ROW;
    else
        rc = store_sqlerr(st, r, "has leased");
    sdb_reset(s);
    return rc;
}

int store_batch_stop_step(struct store *st, const char *batch_id, int64_t now, int chunk,
                          int64_t *n_done, int *left)
{
    if (chunk < 1)
        return ERR_INVAL;
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct store_batch b;
    struct id_pair *ids = NULL;
    size_t n = 0, n2 = 0;
    int more = 0;
    int64_t done = 0;
    if ((rc = store_batch_get(st, NULL, batch_id, &b)))
        goto out;
    store_batch_release(&b);
    int cancelling = b.status == STORE_BATCH_CANCELLING && b.at[STORE_BATCH_IN_PROGRESS];
    int expiring = b.status == STORE_BATCH_IN_PROGRESS && b.expires_at <= now;
    if (!cancelling && !expiring)
        goto out;
    if ((rc = batch_ids_in(st, S_BATCH_QUEUED_IDS, batch_id, chunk, &ids, &n)))
        goto out;
    for (size_t i = 0; !rc && i < n; i++)
        rc = req_end_closed(st, ids[i].id, batch_id, STORE_REQ_QUEUED, NULL, expiring, now);
    done += (int64_t)n;
    free(ids);
    ids = NULL;
    if (rc)
        goto out;
    if (cancelling) {
        int leased = 0;
        if (n == (size_t)chunk)
            more = 1;
        else if (!(rc = store_batch_has_leased(st, batch_id, &leased)))
            more = leased;
        goto out;
    }
    /* expiring: leased requests end too, under their lease (heartbeats report them) */
    if (n < (size_t)chunk) {
        if ((rc = batch_ids_in(st, S_BATCH_LEASED_IDS, batch_id, chunk - (int)n, &ids, &n2)))
            goto out;
        for (size_t i = 0; !rc && i < n2; i++)
            rc = req_end_closed(st, ids[i].id, batch_id, STORE_REQ_LEASED, ids[i].lease, 1, now);
        for (size_t i = 0; !rc && i < n2; i++)
            rc = lease_end_if_empty(st, ids[i].lease, now);
        done += (int64_t)n2;
    }
    if (rc)
        goto out;
    if (n + n2 == (size_t)chunk)
        more = 1;
    else
        rc = store_batch_transition(st, batch_id, STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, now);
out:
    free(ids);
    rc = store_w_end(st, rc);
    if (!rc) {
        *n_done = done;
        if (left)
            *left = more;
    }
    return rc;
}

/* ---- dead letters ---------------------------------------------------------------------------------- */

void store_dead_letter_list_free(struct store_dead_letter *items, size_t n)
{
    for (size_t i = 0; items && i < n; i++) {
        free(items[i].last_error);
        free(items[i].line);
    }
    free(items);
}

static void dl_release(void *elem)
{
    struct store_dead_letter *d = elem;
    free(d->last_error);
    free(d->line);
}

static int dl_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_dead_letter *d = elem;
    int rc = 0;
    (void)ctx;
    store_col_text(s, 0, d->request_id, sizeof d->request_id);
    store_col_text(s, 1, d->batch_id, sizeof d->batch_id);
    store_col_text(s, 2, d->tenant_id, sizeof d->tenant_id);
    store_col_text(s, 3, d->custom_id, sizeof d->custom_id);
    d->attempts = sdb_column_int64(s, 4);
    store_col_text(s, 5, d->reason, sizeof d->reason);
    d->last_error = store_col_dup(s, 6, &rc);
    d->line = store_col_dup(s, 7, &rc);
    d->created_at = sdb_column_int64(s, 8);
    if (rc)
        dl_release(d);
    return rc;
}

int store_dead_letter_list(struct store *st, const char *tenant_id, const char *batch_id,
                           const char *after, int limit, struct store_dead_letter **items,
                           size_t *n, int *has_more)
{
    static const struct store_rows how = {sizeof(struct store_dead_letter), dl_row, dl_release,
                                          "list dead letters"};
    if (limit < 1 || limit > 1000)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, batch_id ? S_DL_COLS_LIST_BATCH : S_DL_COLS_LIST_ALL, &rc);
    if (!s || (rc = bind_texts(st, s, 1, batch_id, tenant_id)) || (rc = store_bind_text(st, s, 3, after)) ||
        (rc = store_bind_int(st, s, 4, limit + 1)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &arr, n, has_more)))
        return rc;
    *items = arr;
    return 0;
}

int store_dead_letter_retry(struct store *st, const char *tenant_id, const char *request_id,
                            int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_DL_GET, &rc);
    if (!s || (rc = bind_texts(st, s, 1, request_id, tenant_id)))
        return store_w_end(st, rc);
    int r = sdb_step(s);
    enum store_batch_status bs = STORE_BATCH__COUNT;
    int64_t bexp = 0;
    if (r == SDB_ROW) {
        if (store_batch_status_parse((const char *)sdb_column_text(s, 1), &bs))
            rc = ERR_CORRUPT;
        bexp = sdb_column_int64(s, 2);
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get dead letter");
    }
    sdb_reset(s);
    if (!rc && (bs != STORE_BATCH_IN_PROGRESS || bexp <= now))
        rc = ERR_BADSTATE;
    if (!rc && (s = store_stmt(st, S_DL_DELETE, &rc)) && !(rc = store_bind_text(st, s, 1, request_id)))
        rc = store_step_done(st, s, "delete dead letter");
    if (!rc && (s = store_stmt(st, S_RESULT_DELETE, &rc)) && !(rc = store_bind_text(st, s, 1, request_id)))
        rc = store_step_done(st, s, "delete result");
    if (!rc) {
        struct store_request_change ch = {.next_attempt_at = now};
        rc = store_request_transition(st, request_id, STORE_REQ_FAILED, STORE_REQ_QUEUED, &ch, now);
    }
    return store_w_end(st, rc);
}

/* ---- finalization support ------------------------------------------------------------------------- */

int store_results_scan(struct store *st, const char *batch_id, int64_t *cursor, int limit,
                       int (*fn)(void *ctx, const struct store_result_row *row), void *ctx,
                       int *n_rows)
{
    if (limit < 1)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_RESULTS_SCAN, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)) || (rc = store_bind_int(st, s, 2, *cursor)) ||
        (rc = store_bind_int(st, s, 3, limit)))
        return rc;
    int r, cnt = 0;
    int64_t cur = *cursor;
    while ((r = sdb_step(s)) == SDB_ROW) {
        struct store_result_row row = {
            .request_id = (const char *)sdb_column_text(s, 1),
            .custom_id = (const char *)sdb_column_text(s, 2),
            .status_code = sdb_column_type(s, 3) == SDB_NULL ? 0 : sdb_column_int(s, 3),
            .error_code = (const char *)sdb_column_text(s, 5),
            .error_message = (const char *)sdb_column_text(s, 6),
            .prompt_tokens = sdb_column_int64(s, 7),
            .completion_tokens = sdb_column_int64(s, 8),
            .cached_tokens = sdb_column_int64(s, 9),
        };
        if (sdb_column_type(s, 4) != SDB_NULL) {
            row.body = sdb_column_blob(s, 4);
            row.body_len = (size_t)sdb_column_bytes(s, 4);
            if (!row.body)
                row.body = "";
        }
        cur = row.seq = sdb_column_int64(s, 0);
        cnt++;
        if (!row.request_id || !row.custom_id) {
            rc = ERR_CORRUPT;
            break;
        }
        if ((rc = fn(ctx, &row)))
            break;
    }
    if (!rc && r != SDB_DONE)
        rc = store_sqlerr(st, r, "scan results");
    sdb_reset(s);
    if (rc)
        return rc;
    *cursor = cur;
    *n_rows = cnt;
    return 0;
}

int store_batch_ids_to_finalize(struct store *st, int64_t now, int max, char (**ids)[ID_MAX], size_t *n)
{
    if (max < 1)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_FINALIZE_IDS, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, now)) || (rc = store_bind_int(st, s, 2, max)))
        return rc;
    return store_collect_ids(st, s, ids, n);
}

int store_batch_finish(struct store *st, const char *batch_id, enum store_batch_status from,
                       enum store_batch_status to, const struct store_batch_final *fin, int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    if ((rc = store_batch_transition(st, batch_id, from, to, now)))
        return store_w_end(st, rc);
    if (fin->output && (rc = store_file_create(st, fin->output)))
        return store_w_end(st, rc);
    if (fin->errors && (rc = store_file_create(st, fin->errors)))
        return store_w_end(st, rc);
    struct sdb_stmt *s = store_stmt(st, S_BATCH_FINISH, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, batch_id)) &&
        !(rc = bind_texts(st, s, 2, fin->output ? fin->output->id : NULL, fin->errors ? fin->errors->id : NULL)) &&
        !(rc = store_bind_int(st, s, 4, fin->n_completed)) && !(rc = store_bind_int(st, s, 5, fin->n_failed)) &&
        !(rc = store_bind_int(st, s, 6, fin->prompt_tokens)) &&
        !(rc = store_bind_int(st, s, 7, fin->completion_tokens)) &&
        !(rc = store_bind_int(st, s, 8, fin->cached_tokens)))
        rc = store_step_done(st, s, "finish batch");
    return store_w_end(st, rc);
}
