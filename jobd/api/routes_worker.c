/*
 * routes_worker.c - work distribution over HTTP: the worker protocol
 * (spec/worker-protocol.md: POST /v1/worker/register, lease, heartbeat,
 * results, release), GET /v1/models, dead letters (GET
 * /v1/batches/{id}/dead_letters, GET /v1/dead_letters, POST
 * /v1/dead_letters/{id}/retry), GET /v1/workers (admin), the sweeper
 * thread's start/stop, and the work gauges of /metrics.
 *
 * Auth. Worker routes take only the worker token, admin routes only the
 * admin token (constant-time comparison of SHA-256 digests, so neither the
 * content nor the length leaks through timing); see app.h for the no-auth
 * mode. Dead-letter routes take a tenant key (the tenant's own dead letters)
 * or the admin token (every tenant's).
 *
 * Flow. Each route parses small JSON messages on the loop thread, then runs
 * its transaction on the thread pool with a pooled store (struct wjob,
 * http_req_queue_work) and answers from the after-callback. A results
 * chunk (up to 64 MiB, zstd or plain) is buffered by the server and both
 * decompressed and parsed on the pool thread. An empty lease answer with
 * wait_ms > 0 is long-polled: the after-callback arms a uv_timer on the
 * loop that re-queues the lease transaction every LONGPOLL_STEP_MS until
 * work appears, wait_ms passes, or jobd starts draining - the loop never
 * blocks. After a commit or release that ended requests, the sweeper is
 * woken so a finished batch is finalized at once.
 *
 * Threads: handlers and after-callbacks on the loop; wjob_work on the pool.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/api/app_int.h"
#include "jobd/work/lease.h"

#define LONGPOLL_STEP_MS 200

enum wkind {
    W_REGISTER,
    W_LEASE,
    W_HEARTBEAT,
    W_RESULTS,
    W_RELEASE,
    W_MODELS,
    W_WORKERS,
    W_DL_BATCH,
    W_DL_ALL,
    W_DL_RETRY,
};

struct wjob {
    struct app *app;
    enum wkind kind;
    /* inputs */
    const char *body; /* the request's buffered body (valid until answered) */
    size_t body_len;
    int compressed;   /* results: Content-Encoding zstd */
    char worker_id[ID_MAX], lease_id[ID_MAX];
    char tenant[ID_MAX]; /* "" = admin (every tenant) */
    char id[ID_MAX], after[ID_MAX];
    int limit, all;
    struct lease_register reg;
    struct lease_ask_msg ask;
    struct lease_heartbeat_msg hb;
    struct lease_release_msg rel;
    int has_reg, has_ask, has_hb, has_rel;
    uint64_t deadline_ms; /* long-poll end (clock_mono_ms) */
    uv_timer_t timer;
    int timer_on;
    struct http_req *req;
    /* outputs */
    int status;
    struct buf out;
    int empty;        /* lease: nothing leased */
    int wake;         /* wake the sweeper after answering */
    int retry_after;
};

static void wjob_free(struct wjob *j)
{
    if (j->has_reg)
        lease_register_release(&j->reg);
    if (j->has_ask)
        lease_ask_release(&j->ask);
    if (j->has_hb)
        lease_heartbeat_release(&j->hb);
    if (j->has_rel)
        lease_release_msg_release(&j->rel);
    buf_release(&j->out);
    free(j);
}

static void timer_closed(uv_handle_t *h)
{
    wjob_free(h->data);
}

static void wjob_done(struct wjob *j)
{
    if (j->timer_on) {
        j->timer.data = j;
        uv_close((uv_handle_t *)&j->timer, timer_closed);
    } else {
        wjob_free(j);
    }
}

static struct wjob *wjob_new(struct app *app, enum wkind kind)
{
    struct wjob *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->app = app;
    j->kind = kind;
    buf_init(&j->out, 96u << 20);
    return j;
}

/* ---- answers --------------------------------------------------------------------- */

static void jerr(struct wjob *j, const struct lease_error *e)
{
    buf_reset(&j->out);
    j->status = lease_write_error(&j->out, e) ? 500 : e->status;
    if (e->status == 503)
        j->retry_after = 1;
}

static void jerr_from(struct wjob *j, int rc, const char *what)
{
    struct lease_error e;
    lease_error_from(rc, &e);
    if (e.status >= 500)
        log_error("%s: %s", what, err_msg(rc));
    jerr(j, &e);
}

/* OpenAI envelope for the tenant/admin routes. */
static void api_err(struct wjob *j, enum api_err e, const char *param, const char *msg)
{
    buf_reset(&j->out);
    j->status = api_err_json(&j->out, e, param, msg) ? 500 : api_err_status(e);
    if (api_err_status(e) == 503)
        j->retry_after = 1;
}

static void api_internal(struct wjob *j, int rc, const char *what)
{
    char m[200];
    log_error("%s: %s", what, err_msg(rc));
    snprintf(m, sizeof m, "Internal error (%s): %s.", what, err_msg(rc));
    api_err(j, rc == ERR_BUSY ? API_ERR_UNAVAILABLE : API_ERR_INTERNAL, NULL, m);
}

/* ---- the transactions (pool thread) ------------------------------------------------ */

static void do_register(struct wjob *j, struct store *st)
{
    char id[ID_MAX];
    int rc = lease_worker_register(st, &j->reg.w, lease_clock_s(), id);
    if (rc)
        return jerr_from(j, rc, "register worker");
    if ((rc = lease_write_register(&j->out, &j->app->cfg.lease, id)))
        return jerr_from(j, rc, "register answer");
    j->status = 200;
}

static void do_lease(struct wjob *j, struct store *st)
{
    struct store_lease l;
    memset(&l, 0, sizeof l);
    int rc = lease_acquire(st, &j->app->cfg.lease, &j->ask.ask, lease_clock_s(), &l);
    if (rc)
        return jerr_from(j, rc, "lease");
    buf_reset(&j->out);
    j->empty = l.n == 0;
    if (!j->empty) {
        atomic_fetch_add(&j->app->n_leases, 1);
        atomic_fetch_add(&j->app->n_leased, l.n);
    }
    rc = lease_write_lease(&j->out, &j->app->cfg.lease, &l);
    store_lease_clear(&l);
    if (rc)
        return jerr_from(j, rc, "lease answer");
    j->status = 200;
}

static void do_heartbeat(struct wjob *j, struct store *st)
{
    int64_t exp = 0;
    char(*stop)[ID_MAX] = NULL;
    size_t n_stop = 0;
    int rc = lease_heartbeat(st, &j->app->cfg.lease, j->hb.lease_id, j->hb.worker_id, j->hb.extend_s,
                             j->hb.tokens_per_s, lease_clock_s(), &exp, &stop, &n_stop);
    if (rc)
        return jerr_from(j, rc, "heartbeat");
    rc = lease_write_heartbeat(&j->out, j->hb.lease_id, exp, stop, n_stop);
    free(stop);
    if (rc)
        return jerr_from(j, rc, "heartbeat answer");
    j->status = 200;
}

static void do_results(struct wjob *j, struct store *st)
{
    struct lease_results r;
    struct lease_error e;
    memset(&r, 0, sizeof r);
    int rc = lease_results_parse(j->body, j->body_len, j->compressed, &r, &e);
    if (rc)
        return jerr(j, &e);
    enum store_commit_outcome *oc = calloc(r.n ? r.n : 1, sizeof *oc);
    if (!oc) {
        lease_results_release(&r);
        return jerr_from(j, ERR_NOMEM, "results");
    }
    rc = lease_results_commit(st, &j->app->cfg.lease, j->lease_id, j->worker_id, r.items, r.n,
                              lease_clock_s(), oc);
    if (rc) {
        jerr_from(j, rc, "results commit");
    } else {
        uint64_t ok = 0, dead = 0;
        for (size_t i = 0; i < r.n; i++) {
            if (oc[i] == STORE_COMMIT_OK || oc[i] == STORE_COMMIT_DEAD || oc[i] == STORE_COMMIT_CLOSED)
                j->wake = 1;
            ok += oc[i] == STORE_COMMIT_OK;
            dead += oc[i] == STORE_COMMIT_DEAD;
        }
        atomic_fetch_add(&j->app->n_results, ok);
        atomic_fetch_add(&j->app->n_commit_dead, dead);
        j->status = lease_commit_http_status(oc, r.n);
        if (lease_write_commit(&j->out, j->lease_id, r.items, oc, r.n))
            jerr_from(j, ERR_NOMEM, "results answer");
    }
    free(oc);
    lease_results_release(&r);
}

static void do_release(struct wjob *j, struct store *st)
{
    int64_t n = 0;
    int rc = lease_release(st, j->rel.lease_id, j->rel.worker_id, (const char(*)[ID_MAX])j->rel.ids,
                           j->rel.ids ? j->rel.n : 0, lease_clock_s(), &n);
    if (rc)
        return jerr_from(j, rc, "release");
    j->wake = n > 0;
    if (buf_printf(&j->out, "{\"lease_id\":\"%s\",\"released\":%lld}", j->rel.lease_id, (long long)n))
        return jerr_from(j, ERR_NOMEM, "release answer");
    j->status = 200;
}

static void do_models(struct wjob *j, struct store *st)
{
    struct store_model_served *m = NULL;
    size_t n = 0;
    int rc = lease_models_served(st, &j->app->cfg.lease, lease_clock_s(), &m, &n);
    if (rc)
        return api_internal(j, rc, "models");
    rc = lease_write_models(&j->out, m, n);
    free(m);
    if (rc)
        return api_internal(j, rc, "models answer");
    j->status = 200;
}

static int put_str(struct buf *b, const char *s)
{
    if (!s)
        return buf_append_str(b, "null");
    return js_escape(b, s, strlen(s));
}

static void do_workers(struct wjob *j, struct store *st)
{
    int64_t now = lease_clock_s();
    int64_t ttl = j->app->cfg.lease.worker_ttl_s;
    struct store_worker_info *w = NULL;
    size_t n = 0;
    int rc = store_workers_list(st, j->all ? 0 : now - ttl, j->limit, &w, &n);
    if (rc)
        return api_internal(j, rc, "list workers");
    struct buf *b = &j->out;
    rc = buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; !rc && i < n; i++) {
        if ((rc = buf_printf(b, "%s{\"id\":\"%s\",\"object\":\"worker\",\"name\":", i ? "," : "", w[i].id)) ||
            (rc = put_str(b, w[i].name)) || (rc = buf_append_str(b, ",\"device\":")) ||
            (rc = put_str(b, w[i].device)) || (rc = buf_append_str(b, ",\"models\":[")))
            break;
        /* models: comma-separated canonical names */
        const char *p = w[i].models;
        int first = 1;
        while (!rc && *p) {
            const char *c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            if (!first)
                rc = buf_append_byte(b, ',');
            if (!rc)
                rc = js_escape(b, p, len);
            first = 0;
            p += len + (c ? 1 : 0);
        }
        if (!rc)
            rc = buf_printf(b,
                            "],\"registered_at\":%lld,\"last_heartbeat_at\":%lld,\"live\":%s,"
                            "\"leases_held\":%lld,\"requests_held\":%lld,\"tokens_per_s\":%.1f}",
                            (long long)w[i].registered_at, (long long)w[i].last_seen,
                            w[i].last_seen >= now - ttl ? "true" : "false", (long long)w[i].leases_held,
                            (long long)w[i].requests_held, w[i].tokens_per_s);
    }
    if (!rc)
        rc = buf_append_str(b, "]}");
    free(w);
    if (rc)
        return api_internal(j, rc, "workers answer");
    j->status = 200;
}

static int dead_letter_json(struct buf *b, const struct store_dead_letter *d)
{
    int rc;
    if ((rc = buf_printf(b, "{\"id\":\"%s\",\"object\":\"dead_letter\",\"batch_id\":\"%s\",\"custom_id\":",
                         d->request_id, d->batch_id)) ||
        (rc = put_str(b, d->custom_id)) ||
        (rc = buf_printf(b, ",\"attempts\":%lld,\"reason\":", (long long)d->attempts)) ||
        (rc = put_str(b, d->reason)) || (rc = buf_append_str(b, ",\"last_error\":")) ||
        (rc = put_str(b, d->last_error)) || (rc = buf_append_str(b, ",\"line\":")))
        return rc;
    /* the stored line is JSON text written by jobd; embed it as an object */
    rc = d->line && d->line[0] == '{' ? buf_append_str(b, d->line) : put_str(b, d->line);
    if (!rc)
        rc = buf_printf(b, ",\"created_at\":%lld}", (long long)d->created_at);
    return rc;
}

static void do_dead_letters(struct wjob *j, struct store *st)
{
    const char *tenant = j->tenant[0] ? j->tenant : NULL;
    if (j->kind == W_DL_BATCH) {
        struct store_batch b;
        int rc = store_batch_get(st, tenant, j->id, &b);
        if (rc == ERR_NOTFOUND)
            return api_err(j, API_ERR_NOT_FOUND, "batch_id", "No such Batch object.");
        if (rc)
            return api_internal(j, rc, "get batch");
        store_batch_release(&b);
    }
    struct store_dead_letter *d = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_dead_letter_list(st, tenant, j->kind == W_DL_BATCH ? j->id : NULL,
                                    j->after[0] ? j->after : NULL, j->limit, &d, &n, &more);
    if (rc)
        return api_internal(j, rc, "list dead letters");
    struct buf *b = &j->out;
    rc = buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; !rc && i < n; i++) {
        if (i)
            rc = buf_append_byte(b, ',');
        if (!rc)
            rc = dead_letter_json(b, &d[i]);
    }
    if (!rc)
        rc = buf_printf(b, "],\"first_id\":%s%s%s,\"last_id\":%s%s%s,\"has_more\":%s}", n ? "\"" : "",
                        n ? d[0].request_id : "null", n ? "\"" : "", n ? "\"" : "",
                        n ? d[n - 1].request_id : "null", n ? "\"" : "", more ? "true" : "false");
    store_dead_letter_list_free(d, n);
    if (rc)
        return api_internal(j, rc, "dead letters answer");
    j->status = 200;
}

static void do_dl_retry(struct wjob *j, struct store *st)
{
    int rc = store_dead_letter_retry(st, j->tenant[0] ? j->tenant : NULL, j->id, lease_clock_s());
    if (rc == ERR_NOTFOUND)
        return api_err(j, API_ERR_NOT_FOUND, "dead_letter_id", "No such dead letter.");
    if (rc == ERR_BADSTATE)
        return api_err(j, API_ERR_INVALID_STATE, NULL,
                       "The batch of this dead letter is no longer in progress (or its completion "
                       "window has passed): resubmit its line in a new batch.");
    if (rc)
        return api_internal(j, rc, "retry dead letter");
    if (buf_printf(&j->out, "{\"id\":\"%s\",\"object\":\"dead_letter\",\"requeued\":true}", j->id))
        return api_internal(j, ERR_NOMEM, "retry answer");
    j->status = 200;
}

static void wjob_work(void *arg)
{
    struct wjob *j = arg;
    int writes = j->kind != W_MODELS && j->kind != W_WORKERS && j->kind != W_DL_BATCH && j->kind != W_DL_ALL;
    if (writes)
        atomic_fetch_add(&j->app->writers, 1);
    struct store *st = dbpool_get(&j->app->pool);
    buf_reset(&j->out);
    j->status = 0;
    j->retry_after = 0;
    switch (j->kind) {
    case W_REGISTER: do_register(j, st); break;
    case W_LEASE: do_lease(j, st); break;
    case W_HEARTBEAT: do_heartbeat(j, st); break;
    case W_RESULTS: do_results(j, st); break;
    case W_RELEASE: do_release(j, st); break;
    case W_MODELS: do_models(j, st); break;
    case W_WORKERS: do_workers(j, st); break;
    case W_DL_BATCH:
    case W_DL_ALL: do_dead_letters(j, st); break;
    case W_DL_RETRY: do_dl_retry(j, st); break;
    }
    dbpool_put(&j->app->pool, st);
    if (writes)
        atomic_fetch_sub(&j->app->writers, 1);
}

/* ---- loop side ---------------------------------------------------------------------- */

static void wjob_after(struct http_req *req, int status, void *arg);

static void longpoll_fire(uv_timer_t *t)
{
    struct wjob *j = t->data;
    if (http_req_queue_work(j->req, wjob_work, wjob_after, j) != 0) {
        api_respond_error(j->req, API_ERR_INTERNAL, NULL, "Could not schedule the request.");
        wjob_done(j);
    }
}

static void wjob_after(struct http_req *req, int status, void *arg)
{
    struct wjob *j = arg;
    struct app *app = j->app;
    if (j->wake)
        sweeper_wake(app->sweeper);
    j->wake = 0;
    if (status == 0 && j->kind == W_LEASE && j->status == 200 && j->empty && !app->draining) {
        uint64_t now = clock_mono_ms();
        if (now + 10 < j->deadline_ms) {
            uint64_t wait = j->deadline_ms - now;
            if (wait > LONGPOLL_STEP_MS)
                wait = LONGPOLL_STEP_MS;
            if (!j->timer_on) {
                uv_timer_init(http_req_loop(req), &j->timer);
                j->timer.data = j;
                j->timer_on = 1;
            }
            j->req = req;
            uv_timer_start(&j->timer, longpoll_fire, wait, 0);
            return;
        }
    }
    if (status != 0 || !j->status) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Internal error.");
    } else {
        if (j->retry_after)
            http_resp_header(req, "Retry-After", "1");
        http_respond(req, j->status, "application/json", j->out.data ? j->out.data : "", j->out.len);
    }
    wjob_done(j);
}

static void wjob_run(struct http_req *req, struct wjob *j)
{
    if (!j) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    j->req = req;
    if (http_req_queue_work(req, wjob_work, wjob_after, j) != 0) {
        wjob_free(j);
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Could not schedule the request.");
    }
}

/* ---- auth ---------------------------------------------------------------------------- */

/* Constant-time: compare SHA-256 digests of the presented and the expected token. */
static int token_eq(const char *presented, const char *expected)
{
    uint8_t a[SHA256_LEN], b[SHA256_LEN];
    sha256(presented, strlen(presented), a);
    sha256(expected, strlen(expected), b);
    unsigned diff = 0;
    for (size_t i = 0; i < SHA256_LEN; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

static const char *bearer(struct http_req *req)
{
    const char *h = http_req_header(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

int app_token_ok(struct app *app, struct http_req *req, const char *token)
{
    const char *b = bearer(req);
    if (token && *token)
        return b && token_eq(b, token);
    return !app->auth_required;
}

static void worker_head(struct http_req *req, void *arg)
{
    struct app *app = arg;
    if (!app_token_ok(app, req, app->cfg.worker_token)) {
        http_resp_header(req, "WWW-Authenticate", "Bearer");
        api_respond_error(req, API_ERR_INVALID_WORKER_TOKEN, NULL,
                           "Missing or wrong worker token (Authorization: Bearer <JOBD_WORKER_TOKEN>).");
    }
}

static char admin_mark; /* http_req_data of a request authenticated as admin */

static void admin_head(struct http_req *req, void *arg)
{
    struct app *app = arg;
    if (!app_token_ok(app, req, app->cfg.admin_token)) {
        http_resp_header(req, "WWW-Authenticate", "Bearer");
        api_respond_error(req, API_ERR_INVALID_ADMIN_TOKEN, NULL,
                           "Missing or wrong admin token (Authorization: Bearer <JOBD_ADMIN_TOKEN>).");
        return;
    }
    http_req_set_data(req, &admin_mark, NULL);
}

/* A tenant key, or the admin token (when one is configured). */
static void tenant_or_admin_head(struct http_req *req, void *arg)
{
    struct app *app = arg;
    const char *b = bearer(req);
    if (b && app->cfg.admin_token && *app->cfg.admin_token && token_eq(b, app->cfg.admin_token)) {
        http_req_set_data(req, &admin_mark, NULL);
        return;
    }
    app_on_head_auth(req, app);
}

/* The tenant of a tenant/admin request into j->tenant ("" = admin). */
static void who(struct http_req *req, struct wjob *j)
{
    void *d = http_req_data(req);
    if (d == &admin_mark || !d)
        j->tenant[0] = '\0';
    else
        snprintf(j->tenant, sizeof j->tenant, "%s", ((struct rctx *)d)->tenant);
}

/* ---- handlers ---------------------------------------------------------------------------- */

/* Answer a protocol parse error at once. */
static void answer_error(struct http_req *req, const struct lease_error *e)
{
    struct buf b;
    buf_init(&b, 4096);
    if (lease_write_error(&b, e))
        http_respond_error(req, e->status, NULL, e->code, NULL, "%s", e->message);
    else
        http_respond(req, e->status, "application/json", b.data, b.len);
    buf_release(&b);
}

static void h_register(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_REGISTER);
    if (!j)
        return wjob_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct lease_error e;
    if (lease_parse_register(body, len, &j->reg, &e)) {
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    j->has_reg = 1;
    wjob_run(req, j);
}

static void h_lease(struct http_req *req, void *arg)
{
    struct app *app = arg;
    struct wjob *j = wjob_new(app, W_LEASE);
    if (!j)
        return wjob_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct lease_error e;
    if (lease_parse_ask(&app->cfg.lease, body, len, &j->ask, &e)) {
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    j->has_ask = 1;
    j->deadline_ms = clock_mono_ms() + (uint64_t)j->ask.wait_ms;
    wjob_run(req, j);
}

static void h_heartbeat(struct http_req *req, void *arg)
{
    struct app *app = arg;
    struct wjob *j = wjob_new(app, W_HEARTBEAT);
    if (!j)
        return wjob_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct lease_error e;
    if (lease_parse_heartbeat(&app->cfg.lease, body, len, &j->hb, &e)) {
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    j->has_hb = 1;
    wjob_run(req, j);
}

static void h_release(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_RELEASE);
    if (!j)
        return wjob_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct lease_error e;
    if (lease_parse_release(body, len, &j->rel, &e)) {
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    j->has_rel = 1;
    wjob_run(req, j);
}

static int copy_header_id(struct http_req *req, const char *name, const char *prefix, char out[ID_MAX])
{
    const char *v = http_req_header(req, name);
    if (!v || strlen(v) >= ID_MAX || strncmp(v, prefix, strlen(prefix)) != 0)
        return -1;
    snprintf(out, ID_MAX, "%s", v);
    return 0;
}

static void h_results(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_RESULTS);
    if (!j)
        return wjob_run(req, NULL);
    struct lease_error e = {400, "invalid_request", "", 0};
    if (copy_header_id(req, "X-Worker-Id", "wrk_", j->worker_id) ||
        copy_header_id(req, "X-Lease-Id", "lease_", j->lease_id)) {
        snprintf(e.message, sizeof e.message, "X-Worker-Id (wrk_...) and X-Lease-Id (lease_...) are required");
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    const char *ce = http_req_header(req, "Content-Encoding");
    if (ce && strcasecmp(ce, "zstd") == 0) {
        j->compressed = 1;
    } else if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        e.status = 415;
        snprintf(e.code, sizeof e.code, "unsupported_encoding");
        snprintf(e.message, sizeof e.message, "Content-Encoding must be zstd or identity");
        answer_error(req, &e);
        wjob_free(j);
        return;
    }
    j->body = http_req_body(req, &j->body_len);
    wjob_run(req, j);
}

static void h_models(struct http_req *req, void *arg)
{
    wjob_run(req, wjob_new(arg, W_MODELS));
}

static int query_limit(struct http_req *req, int64_t hi, int64_t def, int *out)
{
    int64_t v;
    if (app_query_int(req, "limit", 1, hi, def, &v)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to %lld.",
                           (long long)hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void h_workers(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_WORKERS);
    if (j && query_limit(req, 1000, 100, &j->limit)) {
        wjob_free(j);
        return;
    }
    const char *all = http_req_query(req, "all");
    if (j && all) {
        if (strcmp(all, "true") == 0 || strcmp(all, "1") == 0) {
            j->all = 1;
        } else if (strcmp(all, "false") != 0 && strcmp(all, "0") != 0) {
            api_respond_error(req, API_ERR_INVALID_VALUE, "all", "all must be true or false.");
            wjob_free(j);
            return;
        }
    }
    wjob_run(req, j);
}

static void h_dead_letters(struct http_req *req, struct wjob *j)
{
    if (!j)
        return wjob_run(req, NULL);
    who(req, j);
    if (query_limit(req, 1000, 100, &j->limit)) {
        wjob_free(j);
        return;
    }
    const char *after = http_req_query(req, "after");
    if (after && strlen(after) >= ID_MAX) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "after", "Invalid 'after'.");
        wjob_free(j);
        return;
    }
    if (after)
        snprintf(j->after, sizeof j->after, "%s", after);
    wjob_run(req, j);
}

static int copy_param(struct http_req *req, struct wjob *j, const char *what)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= ID_MAX) {
        api_respond_error(req, API_ERR_NOT_FOUND, NULL, "No such %s.", what);
        return -1;
    }
    snprintf(j->id, sizeof j->id, "%s", id);
    return 0;
}

static void h_batch_dead_letters(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_DL_BATCH);
    if (j && copy_param(req, j, "Batch object")) {
        wjob_free(j);
        return;
    }
    h_dead_letters(req, j);
}

static void h_all_dead_letters(struct http_req *req, void *arg)
{
    h_dead_letters(req, wjob_new(arg, W_DL_ALL));
}

static void h_dl_retry(struct http_req *req, void *arg)
{
    struct wjob *j = wjob_new(arg, W_DL_RETRY);
    if (j && copy_param(req, j, "dead letter")) {
        wjob_free(j);
        return;
    }
    if (j)
        who(req, j);
    wjob_run(req, j);
}

int routes_worker_add(struct app *app)
{
    struct http_server *s = app->srv;
    int rc;
    if (app->auth_required && !(app->cfg.worker_token && *app->cfg.worker_token))
        log_warn("no worker token configured (--worker-token / JOBD_WORKER_TOKEN): the worker routes "
                 "answer 401 and no work will be distributed");
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/register", h_register, worker_head,
                                                        LEASE_MSG_MAX_BYTES, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/lease", h_lease, worker_head,
                                                        LEASE_MSG_MAX_BYTES, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/heartbeat", h_heartbeat, worker_head,
                                                        LEASE_MSG_MAX_BYTES, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/results", h_results, worker_head,
                                                        LEASE_CHUNK_MAX_BYTES, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/release", h_release, worker_head,
                                                        LEASE_MSG_MAX_BYTES, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/models", h_models, app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/workers", h_workers, admin_head, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches/{id}/dead_letters",
                                                        h_batch_dead_letters, tenant_or_admin_head, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/dead_letters", h_all_dead_letters,
                                                        tenant_or_admin_head, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/dead_letters/{id}/retry", h_dl_retry,
                                                        tenant_or_admin_head, 0, app})))
        return rc;
    return 0;
}

/* ---- sweeper and metrics ------------------------------------------------------------------ */

int app_sweeper_start(struct app *app)
{
    int rc = sweeper_start(app->cfg.data_dir, &app->cfg.store, &app->cfg.lease, app->cfg.sweep_interval_ms,
                           &app->sweeper);
    if (rc)
        log_error("cannot start the sweeper: %s", err_msg(rc));
    return rc;
}

void app_sweeper_stop(struct app *app)
{
    sweeper_free(app->sweeper);
    app->sweeper = NULL;
}

void app_sweeper_wake(struct app *app)
{
    sweeper_wake(app->sweeper);
}

static void label(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            buf_append_str(b, "\\n");
        else
            buf_append_byte(b, *s);
    }
}

int app_work_metrics_db(struct store *st, struct buf *b)
{
    struct store_work_stats w;
    int rc = store_work_stats(st, &w);
    if (rc)
        return rc;
    buf_append_str(b, "# HELP jobd_requests Requests waiting (queued) or running (leased), by model.\n"
                      "# TYPE jobd_requests gauge\n");
    for (size_t i = 0; i < w.n_models; i++) {
        static const char *const st_names[2] = {"queued", "leased"};
        int64_t v[2] = {w.models[i].queued, w.models[i].leased};
        for (int k = 0; k < 2; k++) {
            buf_printf(b, "jobd_requests{status=\"%s\",model=\"", st_names[k]);
            label(b, w.models[i].model);
            buf_printf(b, "\"} %lld\n", (long long)v[k]);
        }
    }
    buf_printf(b,
               "# HELP jobd_leases_outstanding Leases not yet ended.\n"
               "# TYPE jobd_leases_outstanding gauge\n"
               "jobd_leases_outstanding %lld\n"
               "# HELP jobd_dead_letters Dead-lettered requests (rows kept until retried).\n"
               "# TYPE jobd_dead_letters gauge\n"
               "jobd_dead_letters %lld\n",
               (long long)w.leases_outstanding, (long long)w.dead_letters);
    free(w.models);
    return 0;
}

void app_work_metrics_counters(struct app *app, struct buf *b)
{
    struct sweeper_stats s;
    sweeper_stats(app->sweeper, &s);
    buf_printf(b,
               "# HELP jobd_leases_granted_total Leases handed to workers (non-empty).\n"
               "# TYPE jobd_leases_granted_total counter\n"
               "jobd_leases_granted_total %llu\n"
               "# HELP jobd_requests_leased_total Requests handed to workers (each attempt).\n"
               "# TYPE jobd_requests_leased_total counter\n"
               "jobd_requests_leased_total %llu\n"
               "# HELP jobd_results_committed_total Results committed (success or invalid request).\n"
               "# TYPE jobd_results_committed_total counter\n"
               "jobd_results_committed_total %llu\n"
               "# HELP jobd_lease_expiries_total Leases ended by the sweeper because they lapsed.\n"
               "# TYPE jobd_lease_expiries_total counter\n"
               "jobd_lease_expiries_total %llu\n"
               "# HELP jobd_dead_lettered_total Requests dead-lettered, by cause.\n"
               "# TYPE jobd_dead_lettered_total counter\n"
               "jobd_dead_lettered_total{reason=\"worker_error\"} %llu\n"
               "jobd_dead_lettered_total{reason=\"lease_expired\"} %llu\n"
               "# HELP jobd_batches_finished_total Batches the sweeper brought to a terminal state.\n"
               "# TYPE jobd_batches_finished_total counter\n"
               "jobd_batches_finished_total %llu\n",
               (unsigned long long)atomic_load(&app->n_leases), (unsigned long long)atomic_load(&app->n_leased),
               (unsigned long long)atomic_load(&app->n_results), (unsigned long long)s.leases_expired,
               (unsigned long long)atomic_load(&app->n_commit_dead), (unsigned long long)s.dead_lettered,
               (unsigned long long)s.batches_finished);
}
