/*
 * routes_worker.c - work distribution over HTTP: the worker protocol
 * (spec/worker-protocol.md: POST /v1/worker/register, lease, heartbeat,
 * results, release), GET /v1/models, dead letters (GET
 * /v1/batches/{id}/dead_letters, GET /v1/dead_letters, POST
 * /v1/dead_letters/{id}/retry) and GET /v1/workers (admin).
 *
 * Auth (jobd/api/api_auth.h). Worker routes take only the worker token,
 * admin routes only the admin token; dead-letter routes take a tenant key
 * (the tenant's own dead letters) or the admin token (every tenant's).
 *
 * Flow. Each route parses its small JSON message on the loop thread into
 * its own job struct, then runs its transaction on the thread pool
 * (jobd/api/api_job.h). A results chunk (up to 64 MiB, zstd or plain) is
 * buffered by the server and both decompressed and parsed on the pool
 * thread. An empty lease answer with wait_ms > 0 is long-polled: the
 * lease's answer hook runs the job again every LONGPOLL_STEP_MS
 * (api_job_again) until work appears, wait_ms passes, or jobd starts
 * draining - the loop never blocks. On PostgreSQL a wake-up (another
 * connection or instance made work leasable: api_wake_pollers) runs it
 * again within LONGPOLL_TICK_MS, and the periodic re-read becomes a 500 ms
 * fallback while wake-ups arrive. After a commit or release that ended
 * requests, the sweeper is woken so a finished batch is finalized at once.
 * Protocol errors use the worker protocol's codes (jobd/work/lease.h);
 * the tenant and admin routes use the API error table.
 *
 * Threads: handlers and answer hooks on the loop; the *_run functions on
 * the pool.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/http/http.h"
#include "jobd/work/lease.h"

#define LONGPOLL_STEP_MS 200    /* re-read the queue this often without wake-ups */
#define LONGPOLL_LISTEN_MS 500 /* with wake-ups (api_set_listening): a fallback only */
#define LONGPOLL_TICK_MS 20     /* a parked poll looks for a wake-up this often (memory only) */
#define ANSWER_CAP (96u << 20)

/* ---- answers --------------------------------------------------------------------- */

static void jerr(struct api_job *j, const struct problem *e)
{
    buf_reset(&j->out);
    j->status = lease_write_error(&j->out, e) ? 500 : e->status;
    if (e->status == 503)
        j->retry_after = 1;
}

static void jerr_from(struct api_job *j, int rc, const char *what)
{
    struct problem e;
    lease_error_from(rc, &e);
    if (e.status >= 500)
        log_error("%s: %s", what, err_msg(rc));
    jerr(j, &e);
}

/* 500 (or 503 when busy) for the tenant/admin routes. */
static void api_internal(struct api_job *j, int rc, const char *what)
{
    log_error("%s: %s", what, err_msg(rc));
    api_job_error(j, api_err_of_rc(rc), NULL, "Internal error (%s): %s.",
                  what, err_msg(rc));
}

/* Answer a protocol parse error at once. */
static void answer_error(struct http_req *req, const struct problem *e)
{
    struct buf b;
    buf_init(&b, 4096);
    if (lease_write_error(&b, e))
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
    else
        http_respond(req, e->status, "application/json", b.data, b.len);
    buf_release(&b);
}

static void job_free(struct api_job *job)
{
    free(job);
}

/* ---- POST /v1/worker/register ------------------------------------------------------ */

struct register_job {
    struct api_job job;
    struct lease_register reg;
};

static void register_free(struct api_job *job)
{
    lease_register_release(&((struct register_job *)job)->reg);
    free(job);
}

static void register_run(struct api_job *job, struct store *st)
{
    struct register_job *j = (struct register_job *)job;
    char id[ID_MAX];
    int64_t h = fleet_cost_for(job->api->cfg.worker_costs, j->reg.w.name, j->reg.w.hourly_cost_micros);
    j->reg.w.unpriced = h < 0;
    j->reg.w.hourly_cost_micros = h < 0 ? 0 : h;
    int rc = lease_worker_register(st, &j->reg.w, lease_clock_s(), id);
    if (rc)
        return jerr_from(job, rc, "register worker");
    if (j->reg.w.unpriced)
        log_warn("worker '%s' (%s) has no hourly cost: no --worker-costs class matches its name and it "
                 "declared none (jobworker --hourly-cost); its time is priced 0 and flagged 'unpriced' "
                 "in the fleet view",
                 j->reg.w.name, id);
    if ((rc = lease_write_register(&job->out, &job->api->cfg.lease, id)))
        return jerr_from(job, rc, "register answer");
    job->status = 200;
}

static void h_register(struct http_req *req, void *arg)
{
    struct register_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_job_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct problem e;
    if (lease_parse_register(body, len, &j->reg, &e)) {
        answer_error(req, &e);
        free(j);
        return;
    }
    api_job_init(&j->job, arg, register_run, register_free, 1, ANSWER_CAP);
    api_job_run(req, &j->job);
}

/* ---- POST /v1/worker/lease (long poll) ----------------------------------------------- */

struct lease_job {
    struct api_job job;
    struct lease_ask_msg ask;
    uint64_t deadline_ms; /* long-poll end (clock_mono_ms) */
    int empty;            /* the last run leased nothing */
    uint64_t gen;         /* api->wake_gen when the last run began */
    uint64_t next_run_ms; /* parked: run again at this time without a wake-up */
};

static void lease_free(struct api_job *job)
{
    lease_ask_release(&((struct lease_job *)job)->ask);
    free(job);
}

static void lease_run(struct api_job *job, struct store *st)
{
    struct lease_job *j = (struct lease_job *)job;
    struct api *api = job->api;
    struct store_lease l;
    memset(&l, 0, sizeof l);
    j->gen = atomic_load(&api->wake_gen); /* a wake-up from now on runs it again */
    int rc = lease_acquire(st, &api->cfg.lease, &j->ask.ask, lease_clock_s(), &l);
    if (rc)
        return jerr_from(job, rc, "lease");
    buf_reset(&job->out);
    j->empty = l.n == 0;
    if (!j->empty) {
        atomic_fetch_add(&api->n_leases, 1);
        atomic_fetch_add(&api->n_leased, l.n);
    }
    rc = lease_write_lease(&job->out, &api->cfg.lease, &l);
    store_lease_clear(&l);
    if (rc)
        return jerr_from(job, rc, "lease answer");
    job->status = 200;
}

/* A parked long poll: run again on a wake-up, at next_run_ms or when
 * draining; else look again in LONGPOLL_TICK_MS. */
static void lease_tick(struct http_req *req, void *arg)
{
    struct api_job *job = arg;
    struct lease_job *j = arg;
    uint64_t now = clock_mono_ms();
    int due = job->api->draining || atomic_load(&job->api->wake_gen) != j->gen || now >= j->next_run_ms;
    uint64_t wait = due ? 0 : j->next_run_ms - now;
    if (wait > LONGPOLL_TICK_MS)
        wait = LONGPOLL_TICK_MS;
    if (due ? api_job_again(req, job, 0) : http_req_timer_start(req, wait, lease_tick, job) == 0)
        return;
    api_job_answer(req, job); /* cannot re-arm: answer the empty lease now */
    api_job_free(job);
}

/* Nothing leased and time left: run again shortly instead of answering. */
static int lease_answer(struct http_req *req, struct api_job *job)
{
    struct lease_job *j = (struct lease_job *)job;
    if (job->status == 200 && j->empty && !job->api->draining) {
        uint64_t now = clock_mono_ms();
        if (now + 10 < j->deadline_ms) {
            uint64_t step = atomic_load(&job->api->listening) ? LONGPOLL_LISTEN_MS : LONGPOLL_STEP_MS;
            uint64_t wait = j->deadline_ms - now;
            if (wait > step)
                wait = step;
            j->next_run_ms = now + wait;
            if (wait > LONGPOLL_TICK_MS)
                wait = LONGPOLL_TICK_MS;
            if (http_req_timer_start(req, wait, lease_tick, job) == 0)
                return 1;
        }
    }
    api_job_answer(req, job);
    return 0;
}

static void h_lease(struct http_req *req, void *arg)
{
    struct api *api = arg;
    struct lease_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_job_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct problem e;
    if (lease_parse_ask(&api->cfg.lease, body, len, &j->ask, &e)) {
        answer_error(req, &e);
        free(j);
        return;
    }
    api_job_init(&j->job, api, lease_run, lease_free, 1, ANSWER_CAP);
    j->job.answer = lease_answer;
    j->deadline_ms = clock_mono_ms() + (uint64_t)j->ask.wait_ms;
    api_job_run(req, &j->job);
}

/* ---- POST /v1/worker/heartbeat ------------------------------------------------------- */

struct heartbeat_job {
    struct api_job job;
    struct lease_heartbeat_msg hb;
};

static void heartbeat_free(struct api_job *job)
{
    lease_heartbeat_release(&((struct heartbeat_job *)job)->hb);
    free(job);
}

static void heartbeat_run(struct api_job *job, struct store *st)
{
    struct heartbeat_job *j = (struct heartbeat_job *)job;
    int64_t exp = 0;
    char(*stop)[ID_MAX] = NULL;
    size_t n_stop = 0;
    int rc = lease_heartbeat(st, &job->api->cfg.lease, j->hb.lease_id, j->hb.worker_id, j->hb.extend_s,
                             j->hb.tokens_per_s, lease_clock_s(), &exp, &stop, &n_stop);
    if (rc)
        return jerr_from(job, rc, "heartbeat");
    rc = lease_write_heartbeat(&job->out, j->hb.lease_id, exp, stop, n_stop);
    free(stop);
    if (rc)
        return jerr_from(job, rc, "heartbeat answer");
    job->status = 200;
}

static void h_heartbeat(struct http_req *req, void *arg)
{
    struct api *api = arg;
    struct heartbeat_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_job_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct problem e;
    if (lease_parse_heartbeat(&api->cfg.lease, body, len, &j->hb, &e)) {
        answer_error(req, &e);
        free(j);
        return;
    }
    api_job_init(&j->job, api, heartbeat_run, heartbeat_free, 1, ANSWER_CAP);
    api_job_run(req, &j->job);
}

/* ---- POST /v1/worker/results --------------------------------------------------------- */

struct results_job {
    struct api_job job;
    const char *body; /* the request's buffered body (valid until answered) */
    size_t body_len;
    int compressed;   /* Content-Encoding: zstd */
    char worker_id[ID_MAX], lease_id[ID_MAX];
};

static void results_run(struct api_job *job, struct store *st)
{
    struct results_job *j = (struct results_job *)job;
    struct api *api = job->api;
    struct lease_results r;
    struct problem e;
    memset(&r, 0, sizeof r);
    int rc = lease_results_parse(j->body, j->body_len, j->compressed, &r, &e);
    if (rc)
        return jerr(job, &e);
    enum store_commit_outcome *oc = calloc(r.n ? r.n : 1, sizeof *oc);
    if (!oc) {
        lease_results_release(&r);
        return jerr_from(job, ERR_NOMEM, "results");
    }
    rc = lease_results_commit(st, &api->cfg.lease, j->lease_id, j->worker_id, r.items, r.n, lease_clock_s(), oc);
    if (rc) {
        jerr_from(job, rc, "results commit");
    } else {
        uint64_t ok = 0, dead = 0;
        for (size_t i = 0; i < r.n; i++) {
            if (oc[i] == STORE_COMMIT_OK || oc[i] == STORE_COMMIT_DEAD || oc[i] == STORE_COMMIT_CLOSED)
                job->wake_sweeper = 1;
            ok += oc[i] == STORE_COMMIT_OK;
            dead += oc[i] == STORE_COMMIT_DEAD;
        }
        atomic_fetch_add(&api->n_results, ok);
        atomic_fetch_add(&api->n_commit_dead, dead);
        job->status = lease_commit_http_status(oc, r.n);
        if (lease_write_commit(&job->out, j->lease_id, r.items, oc, r.n))
            jerr_from(job, ERR_NOMEM, "results answer");
    }
    free(oc);
    lease_results_release(&r);
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
    struct results_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_job_run(req, NULL);
    struct problem e = {.status = 400, .code = "invalid_request"};
    if (copy_header_id(req, "X-Worker-Id", "wrk_", j->worker_id) ||
        copy_header_id(req, "X-Lease-Id", "lease_", j->lease_id)) {
        snprintf(e.message, sizeof e.message, "X-Worker-Id (wrk_...) and X-Lease-Id (lease_...) are required");
        answer_error(req, &e);
        free(j);
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
        free(j);
        return;
    }
    j->body = http_req_body(req, &j->body_len);
    api_job_init(&j->job, arg, results_run, job_free, 1, ANSWER_CAP);
    api_job_run(req, &j->job);
}

/* ---- POST /v1/worker/release --------------------------------------------------------- */

struct release_job {
    struct api_job job;
    struct lease_release_msg rel;
};

static void release_free(struct api_job *job)
{
    lease_release_msg_release(&((struct release_job *)job)->rel);
    free(job);
}

static void release_run(struct api_job *job, struct store *st)
{
    struct release_job *j = (struct release_job *)job;
    int64_t n = 0;
    int rc = lease_release(st, j->rel.lease_id, j->rel.worker_id, (const char(*)[ID_MAX])j->rel.ids,
                           j->rel.ids ? j->rel.n : 0, lease_clock_s(), &n);
    if (rc)
        return jerr_from(job, rc, "release");
    job->wake_sweeper = n > 0;
    if (buf_printf(&job->out, "{\"lease_id\":\"%s\",\"released\":%lld}", j->rel.lease_id, (long long)n))
        return jerr_from(job, ERR_NOMEM, "release answer");
    job->status = 200;
}

static void h_release(struct http_req *req, void *arg)
{
    struct release_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_job_run(req, NULL);
    size_t len;
    const char *body = http_req_body(req, &len);
    struct problem e;
    if (lease_parse_release(body, len, &j->rel, &e)) {
        answer_error(req, &e);
        free(j);
        return;
    }
    api_job_init(&j->job, arg, release_run, release_free, 1, ANSWER_CAP);
    api_job_run(req, &j->job);
}

/* ---- GET /v1/models ------------------------------------------------------------------ */

static void models_run(struct api_job *job, struct store *st)
{
    struct store_model_served *m = NULL;
    size_t n = 0;
    int rc = lease_models_served(st, &job->api->cfg.lease, lease_clock_s(), &m, &n);
    if (rc)
        return api_internal(job, rc, "models");
    rc = lease_write_models(&job->out, m, n);
    free(m);
    if (rc)
        return api_internal(job, rc, "models answer");
    job->status = 200;
}

static void h_models(struct http_req *req, void *arg)
{
    struct api_job *job = calloc(1, sizeof *job);
    if (job)
        api_job_init(job, arg, models_run, job_free, 0, ANSWER_CAP);
    api_job_run(req, job);
}

/* ---- GET /v1/workers ----------------------------------------------------------------- */

struct workers_job {
    struct api_job job;
    int limit, all;
};

static int put_str(struct buf *b, const char *s)
{
    if (!s)
        return buf_append_str(b, "null");
    return js_escape(b, s, strlen(s));
}

static void workers_run(struct api_job *job, struct store *st)
{
    struct workers_job *j = (struct workers_job *)job;
    int64_t now = lease_clock_s();
    int64_t ttl = job->api->cfg.lease.worker_ttl_s;
    struct store_worker_info *w = NULL;
    size_t n = 0;
    int rc = store_workers_list(st, j->all ? 0 : now - ttl, j->limit, &w, &n);
    if (rc)
        return api_internal(job, rc, "list workers");
    struct buf *b = &job->out;
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
                            "\"leases_held\":%lld,\"requests_held\":%lld,\"tokens_per_s\":%.1f,"
                            "\"hourly_cost_micros\":%lld}",
                            (long long)w[i].registered_at, (long long)w[i].last_seen,
                            w[i].last_seen >= now - ttl ? "true" : "false", (long long)w[i].leases_held,
                            (long long)w[i].requests_held, w[i].tokens_per_s, (long long)w[i].hourly_cost_micros);
    }
    if (!rc)
        rc = buf_append_str(b, "]}");
    free(w);
    if (rc)
        return api_internal(job, rc, "workers answer");
    job->status = 200;
}

/* ---- dead letters ---------------------------------------------------------------------- */

struct dl_job {
    struct api_job job;  /* job.tenant "" = admin (every tenant) */
    int batch;           /* GET /v1/batches/{id}/dead_letters */
    char id[ID_MAX];     /* the batch, or the dead letter (retry) */
    char after[ID_MAX];  /* "" = from the start */
    int limit;
};

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

static void dead_letters_run(struct api_job *job, struct store *st)
{
    struct dl_job *j = (struct dl_job *)job;
    const char *tenant = job->tenant[0] ? job->tenant : NULL;
    if (j->batch) {
        struct store_batch b;
        int rc = store_batch_get(st, tenant, j->id, &b);
        if (rc == ERR_NOTFOUND)
            return api_job_error(job, API_ERR_NOT_FOUND, "batch_id", "No such Batch object.");
        if (rc)
            return api_internal(job, rc, "get batch");
        store_batch_release(&b);
    }
    struct store_dead_letter *d = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_dead_letter_list(st, tenant, j->batch ? j->id : NULL,
                                    j->after[0] ? j->after : NULL, j->limit, &d, &n, &more);
    if (rc)
        return api_internal(job, rc, "list dead letters");
    struct buf *b = &job->out;
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
        return api_internal(job, rc, "dead letters answer");
    job->status = 200;
}

static void dl_retry_run(struct api_job *job, struct store *st)
{
    struct dl_job *j = (struct dl_job *)job;
    int rc = store_dead_letter_retry(st, job->tenant[0] ? job->tenant : NULL, j->id, lease_clock_s());
    if (rc == ERR_NOTFOUND)
        return api_job_error(job, API_ERR_NOT_FOUND, "dead_letter_id", "No such dead letter.");
    if (rc == ERR_BADSTATE)
        return api_job_error(job, API_ERR_INVALID_STATE, NULL,
                       "The batch of this dead letter is no longer in progress (or its completion "
                       "window has passed): resubmit its line in a new batch.");
    if (rc)
        return api_internal(job, rc, "retry dead letter");
    if (buf_printf(&job->out, "{\"id\":\"%s\",\"object\":\"dead_letter\",\"requeued\":true}", j->id))
        return api_internal(job, ERR_NOMEM, "retry answer");
    job->status = 200;
}

static int query_limit(struct http_req *req, int64_t hi, int64_t def, int *out)
{
    int64_t v;
    if (api_query_int(req, "limit", 1, hi, def, &v)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to %lld.",
                          (long long)hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void h_workers(struct http_req *req, void *arg)
{
    struct workers_job *j = calloc(1, sizeof *j);
    if (j && query_limit(req, 1000, 100, &j->limit)) {
        free(j);
        return;
    }
    const char *all = http_req_query(req, "all");
    if (j && all) {
        if (strcmp(all, "true") == 0 || strcmp(all, "1") == 0) {
            j->all = 1;
        } else if (strcmp(all, "false") != 0 && strcmp(all, "0") != 0) {
            api_respond_error(req, API_ERR_INVALID_VALUE, "all", "all must be true or false.");
            free(j);
            return;
        }
    }
    if (j)
        api_job_init(&j->job, arg, workers_run, job_free, 0, ANSWER_CAP);
    api_job_run(req, j ? &j->job : NULL);
}

/* A dead-letter job with the caller's tenant ("" = admin). NULL on no memory. */
static struct dl_job *dl_job_new(struct http_req *req, struct api *api, api_job_fn run, int writes)
{
    struct dl_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    api_job_init(&j->job, api, run, job_free, writes, ANSWER_CAP);
    api_auth_tenant_of(req, j->job.tenant);
    return j;
}

static void h_dead_letters(struct http_req *req, struct dl_job *j)
{
    if (!j)
        return api_job_run(req, NULL);
    if (query_limit(req, 1000, 100, &j->limit)) {
        api_job_free(&j->job);
        return;
    }
    const char *after = http_req_query(req, "after");
    if (after && strlen(after) >= ID_MAX) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "after", "Invalid 'after'.");
        api_job_free(&j->job);
        return;
    }
    if (after)
        snprintf(j->after, sizeof j->after, "%s", after);
    api_job_run(req, &j->job);
}

static int copy_param(struct http_req *req, struct dl_job *j, const char *what)
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
    struct dl_job *j = dl_job_new(req, arg, dead_letters_run, 0);
    if (j && copy_param(req, j, "Batch object")) {
        api_job_free(&j->job);
        return;
    }
    if (j)
        j->batch = 1;
    h_dead_letters(req, j);
}

static void h_all_dead_letters(struct http_req *req, void *arg)
{
    h_dead_letters(req, dl_job_new(req, arg, dead_letters_run, 0));
}

static void h_dl_retry(struct http_req *req, void *arg)
{
    struct dl_job *j = dl_job_new(req, arg, dl_retry_run, 1);
    if (j && copy_param(req, j, "dead letter")) {
        api_job_free(&j->job);
        return;
    }
    api_job_run(req, j ? &j->job : NULL);
}

int routes_worker_add(struct api *api)
{
    struct http_server *s = api->srv;
    int rc;
    if (api->auth_required && !(api->cfg.worker_token && *api->cfg.worker_token))
        log_warn("no worker token configured (--worker-token / JOBD_WORKER_TOKEN): the worker routes "
                 "answer 401 and no work will be distributed");
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/register", h_register, api_head_worker,
                                                        LEASE_MSG_MAX_BYTES, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/lease", h_lease, api_head_worker,
                                                        LEASE_MSG_MAX_BYTES, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/heartbeat", h_heartbeat,
                                                        api_head_worker, LEASE_MSG_MAX_BYTES, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/results", h_results, api_head_worker,
                                                        LEASE_CHUNK_MAX_BYTES, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/worker/release", h_release, api_head_worker,
                                                        LEASE_MSG_MAX_BYTES, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/models", h_models, api_head_tenant, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/workers", h_workers, api_head_admin, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches/{id}/dead_letters",
                                                        h_batch_dead_letters, api_head_tenant_or_admin, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/dead_letters", h_all_dead_letters,
                                                        api_head_tenant_or_admin, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/dead_letters/{id}/retry", h_dl_retry,
                                                        api_head_tenant_or_admin, 0, api})))
        return rc;
    return 0;
}
