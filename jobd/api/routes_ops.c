/*
 * routes_ops.c - operational routes: GET /healthz (liveness: the loop
 * answers; no database), GET /readyz (the database answers a query on a
 * pool connection, the ingest thread finished its startup scan, and jobd is
 * not draining; else 503 with Retry-After and the reason), GET /metrics
 * (Prometheus text format 0.0.4). No authentication on these.
 *
 * /metrics reads the batch counts by status, the work-distribution
 * gauges, the fleet's last hour (jobd/account/fleet.h), the webhook outbox
 * and the usage ledger sums on the thread pool,
 * then adds the loop's HTTP counters, the worker routes' and the other
 * threads' atomics in its answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/account/budget.h"
#include "jobd/account/fleet.h"
#include "jobd/api/api_int.h"
#include "jobd/http/http.h"
#include "jobd/intake/ingestq.h"
#include "jobd/store/store_fleet.h"
#include "jobd/store/store_usage.h"
#include "jobd/store/store_webhook.h"
#include "jobd/webhook/webhook.h"
#include "jobd/work/lease.h"
#include "jobd/work/sweeper.h"

static void healthz(struct http_req *req, void *arg)
{
    static const char body[] = "{\"status\":\"ok\"}";
    http_respond(req, 200, "application/json", body, sizeof body - 1);
}

static void readyz_free(struct api_job *job)
{
    free(job);
}

static void readyz_run(struct api_job *job, struct store *st)
{
    int v = 0, rc = store_schema_version(st, &v);
    if (rc) {
        log_warn("readyz: the database does not answer: %s", err_msg(rc));
        api_job_error(job, API_ERR_UNAVAILABLE, NULL, "The database is unreachable (%s).", err_msg(rc));
        return;
    }
    buf_append_str(&job->out, "{\"status\":\"ready\",\"database\":\"ok\"}");
    job->status = 200;
}

static void readyz(struct http_req *req, void *arg)
{
    struct api *app = arg;
    if (app->draining) {
        api_respond_error(req, API_ERR_SHUTTING_DOWN, NULL, "jobd is shutting down.");
        return;
    }
    if (!app->iq || !ingestq_ready(app->iq)) {
        http_resp_header(req, "Retry-After", "1");
        api_respond_error(req, API_ERR_STARTING, NULL, "jobd is starting (resuming ingestion).");
        return;
    }
    /* the database answers: one query on a pool connection (never on the
     * loop; a PostgreSQL connection the driver is re-opening answers
     * ERR_BUSY until it is back) */
    struct api_job *job = calloc(1, sizeof *job);
    if (job)
        api_job_init(job, app, readyz_run, readyz_free, 0, 4096);
    api_job_run(req, job);
}

struct metrics_job {
    struct api_job job;
    int64_t counts[STORE_BATCH__COUNT];
    int ok;
    struct buf work; /* work-distribution gauges (routes_worker.c) */
    struct store_wh_stats wh;
    int wh_ok;
    struct store_usage_total *totals; /* ledger sums per tenant and model */
    size_t n_totals;
    int totals_ok;
};

static void metrics_free(struct api_job *job)
{
    struct metrics_job *m = (struct metrics_job *)job;
    buf_release(&m->work);
    free(m->totals);
    free(m);
}

static int work_metrics_db(struct store *st, struct buf *b);
static int fleet_metrics_db(struct api *api, struct store *st, struct buf *b);

static void metrics_run(struct api_job *job, struct store *st)
{
    struct metrics_job *m = (struct metrics_job *)job;
    m->ok = store_batch_count_by_status(st, m->counts) == 0;
    buf_reset(&m->work);
    if (work_metrics_db(st, &m->work) || fleet_metrics_db(job->api, st, &m->work))
        buf_reset(&m->work);
    m->wh_ok = store_wh_stats(st, &m->wh) == 0;
    free(m->totals);
    m->totals = NULL;
    m->n_totals = 0;
    m->totals_ok = store_usage_totals(st, 10000, &m->totals, &m->n_totals) == 0;
    job->status = 200;
}

/* Prometheus label value: escape backslash, quote, newline. */
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

static void count_cb(void *arg, const char *method, const char *pattern, int status, uint64_t count)
{
    struct buf *b = arg;
    buf_append_str(b, "jobd_http_requests_total{method=\"");
    label(b, method);
    buf_append_str(b, "\",route=\"");
    label(b, pattern);
    buf_printf(b, "\",status=\"%d\"} %llu\n", status, (unsigned long long)count);
}

/* ---- work distribution ---- */

#define FLEET_METRICS_WINDOW_S 3600

/* Fleet gauges over the last hour (spec/usage.md "Fleet cost"): per worker
 * its price, utilization and cost; the fleet's attributed and idle cost. */
static int fleet_metrics_db(struct api *api, struct store *st, struct buf *b)
{
    int64_t now = lease_clock_s(), ttl = api->cfg.lease.worker_ttl_s;
    struct store_fleet in;
    int rc = store_fleet_read(st, now - FLEET_METRICS_WINDOW_S, now + 1, now, ttl, NULL, &in);
    if (rc)
        return rc;
    struct fleet_opts o = {now - FLEET_METRICS_WINDOW_S, now + 1, now, ttl, FLEET_BY_MODEL, NULL, NULL, NULL};
    struct fleet_report r;
    rc = fleet_compute(&in, &o, &r);
    store_fleet_release(&in);
    if (rc)
        return rc;
    buf_append_str(b, "# HELP jobd_worker_hourly_cost_micros A worker's price per registered hour, micro-dollars.\n"
                      "# TYPE jobd_worker_hourly_cost_micros gauge\n");
    for (size_t i = 0; i < r.n_workers; i++) {
        buf_append_str(b, "jobd_worker_hourly_cost_micros{worker=\"");
        label(b, r.workers[i].id);
        buf_append_str(b, "\",name=\"");
        label(b, r.workers[i].name);
        buf_printf(b, "\"} %lld\n", (long long)r.workers[i].hourly_cost_micros);
    }
    buf_append_str(b, "# HELP jobd_worker_utilization Busy / registered time of a worker over the last hour.\n"
                      "# TYPE jobd_worker_utilization gauge\n");
    for (size_t i = 0; i < r.n_workers; i++) {
        const struct fleet_worker_fig *w = &r.workers[i];
        buf_append_str(b, "jobd_worker_utilization{worker=\"");
        label(b, w->id);
        buf_append_str(b, "\",name=\"");
        label(b, w->name);
        buf_printf(b, "\"} %.4f\n", w->registered_ms ? (double)w->busy_ms / (double)w->registered_ms : 0.0);
    }
    buf_append_str(b, "# HELP jobd_worker_cost_micros A worker's cost over the last hour, micro-dollars, busy or idle.\n"
                      "# TYPE jobd_worker_cost_micros gauge\n");
    for (size_t i = 0; i < r.n_workers; i++) {
        const struct fleet_worker_fig *w = &r.workers[i];
        const int64_t v[2] = {w->busy_micros, w->idle_micros};
        for (int k = 0; k < 2; k++) {
            buf_append_str(b, "jobd_worker_cost_micros{worker=\"");
            label(b, w->id);
            buf_append_str(b, "\",name=\"");
            label(b, w->name);
            buf_printf(b, "\",kind=\"%s\"} %lld\n", k ? "idle" : "busy", (long long)v[k]);
        }
    }
    buf_printf(b,
               "# HELP jobd_fleet_cost_micros The fleet's cost over the last hour, micro-dollars: attributed to "
               "batches, or idle.\n"
               "# TYPE jobd_fleet_cost_micros gauge\n"
               "jobd_fleet_cost_micros{kind=\"batches\"} %lld\n"
               "jobd_fleet_cost_micros{kind=\"idle\"} %lld\n",
               (long long)r.fleet.cost_micros, (long long)r.fleet.idle_micros);
    fleet_report_release(&r);
    return 0;
}

/* Work-distribution gauges (pool thread). */
static int work_metrics_db(struct store *st, struct buf *b)
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

/* Work-distribution counters: the worker routes' and the sweeper's (loop thread). */
static void work_metrics_counters(struct api *app, struct buf *b)
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
    buf_printf(b,
               "# HELP jobd_lease_wakeups_total Database wake-ups (PostgreSQL NOTIFY: work became leasable "
               "on some instance) that ran the parked long polls again.\n"
               "# TYPE jobd_lease_wakeups_total counter\n"
               "jobd_lease_wakeups_total %llu\n",
               (unsigned long long)atomic_load(&app->wake_gen));
}

/* Webhook delivery: attempts by outcome, latency histogram, outbox depth. */
static void webhook_metrics(struct buf *b, struct api *app, const struct metrics_job *m)
{
    struct webhook_counters c;
    webhook_dispatcher_counters(app->wh, &c);
    buf_printf(b,
               "# HELP jobd_webhook_attempts_total Webhook delivery attempts since start, by outcome.\n"
               "# TYPE jobd_webhook_attempts_total counter\n"
               "jobd_webhook_attempts_total{outcome=\"delivered\"} %llu\n"
               "jobd_webhook_attempts_total{outcome=\"retry\"} %llu\n"
               "jobd_webhook_attempts_total{outcome=\"failed\"} %llu\n"
               "jobd_webhook_attempts_total{outcome=\"disabled\"} %llu\n"
               "jobd_webhook_attempts_total{outcome=\"blocked\"} %llu\n"
               "# HELP jobd_webhook_latency_ms Webhook POST latency (connect to response), milliseconds.\n"
               "# TYPE jobd_webhook_latency_ms histogram\n",
               (unsigned long long)c.delivered, (unsigned long long)c.retried, (unsigned long long)c.failed,
               (unsigned long long)c.disabled, (unsigned long long)c.blocked);
    static const int64_t bounds[8] = WEBHOOK_LATENCY_BOUNDS_MS;
    for (int i = 0; i < 8; i++)
        buf_printf(b, "jobd_webhook_latency_ms_bucket{le=\"%lld\"} %llu\n", (long long)bounds[i],
                   (unsigned long long)c.latency_le[i]);
    buf_printf(b,
               "jobd_webhook_latency_ms_bucket{le=\"+Inf\"} %llu\n"
               "jobd_webhook_latency_ms_sum %llu\n"
               "jobd_webhook_latency_ms_count %llu\n",
               (unsigned long long)c.latency_count, (unsigned long long)c.latency_sum_ms,
               (unsigned long long)c.latency_count);
    if (!m->wh_ok)
        return;
    buf_printf(b,
               "# HELP jobd_webhook_outbox_events Webhook events not yet fanned out to deliveries.\n"
               "# TYPE jobd_webhook_outbox_events gauge\n"
               "jobd_webhook_outbox_events %lld\n"
               "# HELP jobd_webhook_deliveries Webhook deliveries by status (all tenants).\n"
               "# TYPE jobd_webhook_deliveries gauge\n"
               "jobd_webhook_deliveries{status=\"pending\"} %lld\n"
               "jobd_webhook_deliveries{status=\"delivered\"} %lld\n"
               "jobd_webhook_deliveries{status=\"failed\"} %lld\n"
               "# HELP jobd_webhook_endpoints_disabled Webhook endpoints disabled (410 or persistent failure).\n"
               "# TYPE jobd_webhook_endpoints_disabled gauge\n"
               "jobd_webhook_endpoints_disabled %lld\n",
               (long long)m->wh.events_pending, (long long)m->wh.deliveries_pending,
               (long long)m->wh.deliveries_delivered, (long long)m->wh.deliveries_failed,
               (long long)m->wh.endpoints_disabled);
}

/* Tokens and cost by tenant and model (usage_totals: sums of the ledger, so
 * they survive restarts), and submissions refused by a budget, by limit. */
static void usage_metrics(struct buf *b, struct api *app, const struct metrics_job *m)
{
    buf_append_str(b, "# HELP jobd_budget_rejections_total Submissions refused (429) by a budget limit since start.\n"
                      "# TYPE jobd_budget_rejections_total counter\n");
    for (int v = BUDGET_QUEUED_TOKENS; v < BUDGET__COUNT; v++)
        buf_printf(b, "jobd_budget_rejections_total{limit=\"%s\"} %llu\n", budget_verdict_limit((enum budget_verdict)v),
                   (unsigned long long)atomic_load(&app->n_budget_rejected[v]));
    if (!m->totals_ok)
        return;
    buf_append_str(b, "# HELP jobd_tokens_total Tokens of committed results (the usage ledger), by tenant, model and "
                      "kind (input includes cached).\n"
                      "# TYPE jobd_tokens_total counter\n");
    static const char *const kinds[3] = {"input", "cached", "output"};
    for (size_t i = 0; i < m->n_totals; i++) {
        const struct store_usage_total *t = &m->totals[i];
        const int64_t v[3] = {t->prompt_tokens, t->cached_tokens, t->completion_tokens};
        for (int k = 0; k < 3; k++) {
            buf_append_str(b, "jobd_tokens_total{tenant=\"");
            label(b, t->tenant);
            buf_append_str(b, "\",model=\"");
            label(b, t->model);
            buf_printf(b, "\",kind=\"%s\"} %lld\n", kinds[k], (long long)v[k]);
        }
    }
    buf_append_str(b, "# HELP jobd_cost_micros_total Cost of committed results (the usage ledger), micro-dollars, by "
                      "tenant and model.\n"
                      "# TYPE jobd_cost_micros_total counter\n");
    for (size_t i = 0; i < m->n_totals; i++) {
        buf_append_str(b, "jobd_cost_micros_total{tenant=\"");
        label(b, m->totals[i].tenant);
        buf_append_str(b, "\",model=\"");
        label(b, m->totals[i].model);
        buf_printf(b, "\"} %lld\n", (long long)m->totals[i].cost_micros);
    }
}

static int metrics_answer(struct http_req *req, struct api_job *job)
{
    struct api *app = job->api;
    struct metrics_job *m = (struct metrics_job *)job;
    struct buf *b = &job->out;
    buf_append_str(b, "# HELP jobd_http_requests_total HTTP requests answered, by route and status.\n"
                      "# TYPE jobd_http_requests_total counter\n");
    if (app->srv)
        http_server_route_counts(app->srv, count_cb, b);
    struct http_stats hs = {0};
    if (app->srv)
        http_server_stats(app->srv, &hs);
    buf_printf(b,
               "# HELP jobd_http_connections_open Open HTTP connections.\n"
               "# TYPE jobd_http_connections_open gauge\n"
               "jobd_http_connections_open %llu\n"
               "# HELP jobd_http_connections_total HTTP connections accepted.\n"
               "# TYPE jobd_http_connections_total counter\n"
               "jobd_http_connections_total %llu\n"
               "# HELP jobd_http_connections_rejected_total Connections answered 503 at the cap.\n"
               "# TYPE jobd_http_connections_rejected_total counter\n"
               "jobd_http_connections_rejected_total %llu\n"
               "# HELP jobd_http_connections_evicted_total Idle or slow connections closed to make room.\n"
               "# TYPE jobd_http_connections_evicted_total counter\n"
               "jobd_http_connections_evicted_total %llu\n"
               "# HELP jobd_http_connections_timed_out_total Connections closed by a deadline.\n"
               "# TYPE jobd_http_connections_timed_out_total counter\n"
               "jobd_http_connections_timed_out_total %llu\n"
               "# HELP jobd_http_requests_inflight Requests parsed and not yet answered.\n"
               "# TYPE jobd_http_requests_inflight gauge\n"
               "jobd_http_requests_inflight %llu\n",
               (unsigned long long)hs.conns_open, (unsigned long long)hs.conns_accepted,
               (unsigned long long)hs.conns_rejected, (unsigned long long)hs.conns_evicted,
               (unsigned long long)hs.conns_timed_out, (unsigned long long)hs.requests_inflight);
    struct ingestq_stats is = {0};
    if (app->iq)
        ingestq_stats(app->iq, &is);
    buf_printf(b,
               "# HELP jobd_ingest_lines_total Input lines validated by the ingest thread.\n"
               "# TYPE jobd_ingest_lines_total counter\n"
               "jobd_ingest_lines_total %llu\n"
               "# HELP jobd_ingest_bytes_total Decoded input bytes of batches whose validation finished.\n"
               "# TYPE jobd_ingest_bytes_total counter\n"
               "jobd_ingest_bytes_total %llu\n"
               "# HELP jobd_ingest_batches_total Batches whose validation finished, by outcome.\n"
               "# TYPE jobd_ingest_batches_total counter\n"
               "jobd_ingest_batches_total{outcome=\"valid\"} %llu\n"
               "jobd_ingest_batches_total{outcome=\"invalid\"} %llu\n"
               "jobd_ingest_batches_total{outcome=\"cancelled\"} %llu\n"
               "# HELP jobd_ingest_queue Batches waiting for validation.\n"
               "# TYPE jobd_ingest_queue gauge\n"
               "jobd_ingest_queue %llu\n",
               (unsigned long long)is.lines, (unsigned long long)is.bytes,
               (unsigned long long)is.batches_valid, (unsigned long long)is.batches_invalid,
               (unsigned long long)is.batches_cancelled, (unsigned long long)is.queued);
    if (m->ok) {
        buf_append_str(b, "# HELP jobd_batches Batches by status (all tenants).\n"
                          "# TYPE jobd_batches gauge\n");
        for (int s = 0; s < STORE_BATCH__COUNT; s++)
            buf_printf(b, "jobd_batches{status=\"%s\"} %lld\n",
                       store_batch_status_name((enum store_batch_status)s), (long long)m->counts[s]);
    }
    if (m->work.len)
        buf_append(b, m->work.data, m->work.len);
    work_metrics_counters(app, b);
    webhook_metrics(b, app, m);
    usage_metrics(b, app, m);
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", b->data ? b->data : "",
                 b->len);
    return 0;
}

static void metrics(struct http_req *req, void *arg)
{
    struct metrics_job *m = calloc(1, sizeof *m);
    if (m) {
        api_job_init(&m->job, arg, metrics_run, metrics_free, 0, 4u << 20);
        m->job.answer = metrics_answer;
        buf_init(&m->work, 1u << 20);
    }
    api_job_run(req, m ? &m->job : NULL);
}

int routes_ops_add(struct api *app)
{
    int rc;
    if ((rc = http_server_route(app->srv, &(struct http_route){"GET", "/healthz", healthz, NULL, 0, app})) ||
        (rc = http_server_route(app->srv, &(struct http_route){"GET", "/readyz", readyz, NULL, 0, app})) ||
        (rc = http_server_route(app->srv, &(struct http_route){"GET", "/metrics", metrics, NULL, 0, app})))
        return rc;
    return 0;
}
