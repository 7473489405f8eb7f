/*
 * routes_ops.c - operational routes: GET /healthz (liveness: the loop
 * answers; no database), GET /readyz (the database is open, the ingest
 * thread finished its startup scan, and jobd is not draining), GET /metrics
 * (Prometheus text format 0.0.4). No authentication on these.
 *
 * /metrics reads the batch counts by status on the thread pool, then adds
 * the loop's HTTP counters and the ingest thread's atomics in the
 * after-callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/app_int.h"

static void healthz(struct http_req *req, void *arg)
{
    static const char body[] = "{\"status\":\"ok\"}";
    http_respond(req, 200, "application/json", body, sizeof body - 1);
}

static void readyz(struct http_req *req, void *arg)
{
    struct app *app = arg;
    if (app->draining) {
        http_respond_error(req, 503, NULL, "shutting_down", NULL, "jobd is shutting down.");
        return;
    }
    if (!app->iq || !ingestq_ready(app->iq)) {
        http_resp_header(req, "Retry-After", "1");
        http_respond_error(req, 503, NULL, "starting", NULL, "jobd is starting (resuming ingestion).");
        return;
    }
    static const char body[] = "{\"status\":\"ready\"}";
    http_respond(req, 200, "application/json", body, sizeof body - 1);
}

struct metrics_in {
    int64_t counts[STORE_BATCH__COUNT];
    int ok;
    struct buf work; /* work-distribution gauges (routes_worker.c) */
};

static void metrics_in_free(void *p)
{
    struct metrics_in *m = p;
    if (m)
        buf_release(&m->work);
    free(m);
}

static void metrics_fn(struct op *op, struct store *st)
{
    struct metrics_in *m = op->in;
    m->ok = store_batch_count_by_status(st, m->counts) == 0;
    if (app_work_metrics_db(st, &m->work))
        buf_reset(&m->work);
    op->status = 200;
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

static void metrics_after(struct http_req *req, struct op *op)
{
    struct app *app = op->app;
    struct metrics_in *m = op->in;
    struct buf *b = &op->out;
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
    app_work_metrics_counters(app, b);
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", b->data ? b->data : "",
                 b->len);
}

static void metrics(struct http_req *req, void *arg)
{
    struct app *app = arg;
    struct metrics_in *m = calloc(1, sizeof *m);
    struct op *op = NULL;
    if (m)
        buf_init(&m->work, 1u << 20);
    if (m) {
        op = calloc(1, sizeof *op);
        if (op) {
            op->app = app;
            op->fd = -1;
            op->fn = metrics_fn;
            op->in = m;
            op->in_free = metrics_in_free;
            op->after = metrics_after;
            buf_init(&op->out, 4u << 20);
        } else {
            metrics_in_free(m);
        }
    }
    app_op_run(req, op);
}

int routes_ops_add(struct app *app)
{
    int rc;
    if ((rc = http_server_route(app->srv, &(struct http_route){"GET", "/healthz", healthz, NULL, 0, app})) ||
        (rc = http_server_route(app->srv, &(struct http_route){"GET", "/readyz", readyz, NULL, 0, app})) ||
        (rc = http_server_route(app->srv, &(struct http_route){"GET", "/metrics", metrics, NULL, 0, app})))
        return rc;
    return 0;
}
