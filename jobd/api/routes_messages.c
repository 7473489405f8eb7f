/*
 * routes_messages.c - Anthropic's Message Batches contract beside OpenAI's
 * (spec/anthropic.md): POST /v1/messages/batches, GET
 * /v1/messages/batches, GET /v1/messages/batches/{id}, POST
 * /v1/messages/batches/{id}/cancel, DELETE /v1/messages/batches/{id} and
 * GET /v1/messages/batches/{id}/results.
 *
 * Design. A second front door over the same machinery. A create writes
 * its requests, translated by the Messages contract (jobd/intake/
 * anth_batch.h), as the JSONL input file of an ordinary
 * /v1/chat/completions batch and runs the create sequence of POST /v1/jobs
 * (api_create_job_new: idempotency, admission under the tenant's budget,
 * one submit transaction, the ingest thread), with batches.api =
 * 'anthropic'. Leasing, workers, results, usage, webhooks and the
 * dashboard see an ordinary batch ("batch_<x>"); these routes show it as
 * "msgbatch_<x>" and translate its status, counts and results rows on the
 * way out. Batches made through the OpenAI routes are not visible here
 * (404), those made here are visible there.
 *
 * Status: validating, in_progress, finalizing -> in_progress; cancelling
 * -> canceling; completed, failed, expired, cancelled -> ended. Counts:
 * while not ended every request is processing (as Anthropic's stay 0
 * until the end); once ended succeeded, errored, canceled (ended by the
 * cancel), expired (by the window).
 *
 * Auth and errors: x-api-key (the tenant keys, or a Bearer) and the
 * anthropic-version header (api_auth_tenant_anthropic); every refusal in
 * Anthropic's envelope (api_err_json_anthropic), naming the request index
 * and field for a bad create body.
 *
 * Threads: handlers on the loop, *_run on the thread pool (api_job.h).
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
#include "jobd/api/api_idem.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/http/http.h"
#include "jobd/intake/anth_batch.h"
#include "jobd/intake/ingest.h"
#include "jobd/intake/jsonl.h"
#include "jobd/intake/upload.h"

#define MSG_PREFIX "msgbatch_"
#define MSG_LIST_DEFAULT 20
#define MSG_LIST_MAX 1000

static const char API_NAME[] = "anthropic";

/* "msgbatch_<x>" -> "batch_<x>" into out; -1 when id is not one. */
static int batch_id_of(const char *id, char out[ID_MAX])
{
    size_t n = strlen(MSG_PREFIX);
    if (!id || strncmp(id, MSG_PREFIX, n) || !id[n] || strlen(id) - n + 6 >= ID_MAX)
        return -1;
    snprintf(out, ID_MAX, "batch_%s", id + n);
    return 0;
}

/* "batch_<x>" -> "msgbatch_<x>". */
static void msg_id_of(const char *batch_id, char *out, size_t cap)
{
    snprintf(out, cap, MSG_PREFIX "%s", strncmp(batch_id, "batch_", 6) ? batch_id : batch_id + 6);
}

static int is_ended(enum store_batch_status s)
{
    return s == STORE_BATCH_COMPLETED || s == STORE_BATCH_FAILED || s == STORE_BATCH_EXPIRED ||
           s == STORE_BATCH_CANCELLED;
}

struct msg_counts {
    int64_t processing, succeeded, errored, canceled, expired;
};

/* Ended without its requests ever stored (cancelled, or failed, while
 * validating): the input file is then the only list of them. */
static int never_ran(const struct store_batch *b)
{
    return is_ended(b->status) && !b->at[STORE_BATCH_IN_PROGRESS];
}

/* Call fn for every request line of b's input file (our own JSONL). */
static int input_scan(struct api *api, struct store *st, const struct store_batch *b,
                      void (*fn)(void *ctx, const struct ingest_line *l), void *ctx, int64_t *n)
{
    struct store_file f;
    int rc = store_file_get(st, b->tenant_id, b->input_file_id, &f);
    if (!rc)
        rc = ingest_scan_file(store_blobs(st), f.storage_path, "/v1/chat/completions",
                              &api->cfg.limits, fn, ctx, n);
    return rc == ERR_NOTFOUND ? 0 : rc; /* the file went with its retention: nothing to list */
}

struct line_count {
    int64_t n;
};

static void count_line(void *ctx, const struct ingest_line *l)
{
    (void)l;
    ((struct line_count *)ctx)->n++;
}

/* The counts of b; once ended, the cancel and expiry counts are read (st
 * NULL: b is new, n_given requests). */
static int counts_of(struct api *api, struct store *st, const struct store_batch *b, int64_t n_given,
                     struct msg_counts *c)
{
    memset(c, 0, sizeof *c);
    if (st && never_ran(b)) {
        struct line_count lc = {0};
        int rc = input_scan(api, st, b, count_line, &lc, NULL);
        if (b->status == STORE_BATCH_FAILED)
            c->errored = lc.n;
        else
            c->canceled = lc.n;
        return rc;
    }
    int64_t total = b->n_total > b->ingest_requests ? b->n_total : b->ingest_requests;
    if (n_given > total)
        total = n_given;
    if (!is_ended(b->status)) {
        c->processing = total;
        return 0;
    }
    int rc = st ? store_batch_stop_counts(st, b->id, &c->canceled, &c->expired) : 0;
    if (rc)
        return rc;
    c->succeeded = b->n_completed;
    c->errored = b->n_failed - c->canceled - c->expired;
    if (c->errored < 0)
        c->errored = 0;
    int64_t rest = total - c->succeeded - c->errored - c->canceled - c->expired;
    if (rest > 0) /* never ingested: the batch was cancelled or failed while validating */
        c->canceled += rest;
    return 0;
}

static int put_time(struct buf *out, const char *key, int64_t s)
{
    char t[CLOCK_ISO_LEN];
    if (!s)
        return buf_printf(out, ",\"%s\":null", key);
    return buf_printf(out, ",\"%s\":\"%s\"", key, clock_iso8601(s * 1000, t, sizeof t));
}

/* The MessageBatch object of b with counts c. */
static int batch_json(struct buf *out, const struct store_batch *b, const struct msg_counts *c)
{
    char id[ID_MAX + 16];
    msg_id_of(b->id, id, sizeof id);
    const char *ps = is_ended(b->status) ? "ended" : b->status == STORE_BATCH_CANCELLING ? "canceling" : "in_progress";
    int rc = buf_printf(out, "{\"id\":\"%s\",\"type\":\"message_batch\",\"processing_status\":\"%s\","
                             "\"request_counts\":{\"processing\":%lld,\"succeeded\":%lld,\"errored\":%lld,"
                             "\"canceled\":%lld,\"expired\":%lld}",
                        id, ps, (long long)c->processing, (long long)c->succeeded, (long long)c->errored,
                        (long long)c->canceled, (long long)c->expired);
    int64_t ended = is_ended(b->status) ? b->at[b->status] : 0;
    if (!rc)
        rc = put_time(out, "ended_at", ended);
    if (!rc)
        rc = put_time(out, "created_at", b->created_at);
    if (!rc)
        rc = put_time(out, "expires_at", b->expires_at);
    if (!rc)
        rc = put_time(out, "cancel_initiated_at", b->at[STORE_BATCH_CANCELLING]);
    if (!rc)
        rc = buf_append_str(out, ",\"archived_at\":null,\"results_url\":");
    if (!rc)
        rc = ended ? buf_printf(out, "\"/v1/messages/batches/%s/results\"}", id) : buf_append_str(out, "null}");
    return rc;
}

static void not_found(struct api_job *job, const char *id)
{
    api_job_error(job, API_ERR_NOT_FOUND, NULL, "No message batch with id '%.64s'.", id);
}

/* A tenant's Anthropic batch by its msgbatch id. 0, or -1 with the job answered. */
static int get_batch(struct api_job *job, struct store *st, const char *msg_id, struct store_batch *b)
{
    char id[ID_MAX];
    if (batch_id_of(msg_id, id)) {
        not_found(job, msg_id);
        return -1;
    }
    int rc = store_batch_get(st, job->tenant, id, b);
    if (!rc && strcmp(b->api, API_NAME)) {
        store_batch_release(b);
        rc = ERR_NOTFOUND;
    }
    if (rc == ERR_NOTFOUND)
        not_found(job, msg_id);
    else if (rc)
        api_job_internal(job, rc, "get batch");
    return rc ? -1 : 0;
}

/* ---- the head hook: auth, and the size limit of a create ------------------------------------- */

static void msg_head(struct http_req *req, void *arg)
{
    struct api *api = arg;
    if (!api_auth_tenant_anthropic(req, api))
        return;
    const char *cl = http_req_header(req, "Content-Length");
    uint64_t max = api->cfg.limits.max_file_bytes;
    if (cl && strtoull(cl, NULL, 10) > max)
        api_respond_error_anthropic(req, API_ERR_FILE_TOO_LARGE,
                                    "Request body too large: the limit of a message batch is %llu bytes.",
                                    (unsigned long long)max);
}

/* ---- POST /v1/messages/batches ----------------------------------------------------------------- */

struct create_arg {
    char *body;
    size_t len;
    int64_t n; /* requests written */
};

static void create_arg_free(void *p)
{
    struct create_arg *a = p;
    if (a)
        free(a->body);
    free(a);
}

static int write_up(void *ctx, const void *data, size_t n)
{
    return upload_write(ctx, data, n);
}

static int create_lines(struct api_job *job, struct upload *up, void *arg)
{
    struct create_arg *a = arg;
    struct problem err = {0};
    int rc = anth_batch_lines(a->body, a->len, &job->api->cfg.limits, write_up, up, &a->n, &err);
    if (rc == ERR_INVAL)
        api_job_error(job, err.status == 413 ? API_ERR_FILE_TOO_LARGE : API_ERR_INVALID_VALUE, NULL, "%s",
                      err.message);
    else if (rc == ERR_TOOBIG)
        api_job_error(job, API_ERR_FILE_TOO_LARGE, NULL, "The batch's requests are larger than the limit of "
                      "%llu bytes.", (unsigned long long)job->api->cfg.limits.max_file_bytes);
    else if (rc)
        api_job_internal(job, rc, "write requests");
    return rc;
}

static int create_render(struct buf *out, const struct store_batch *b, void *arg)
{
    const struct create_arg *a = arg;
    struct msg_counts c;
    counts_of(NULL, NULL, b, a->n, &c);
    return batch_json(out, b, &c);
}

static void messages_create(struct http_req *req, void *arg)
{
    struct api *api = arg;
    const char *ct = http_req_header(req, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16) != 0) {
        api_respond_error_anthropic(req, API_ERR_UNSUPPORTED_MEDIA_TYPE, "Send the request body as application/json.");
        return;
    }
    size_t len;
    const char *body = http_req_body(req, &len);
    struct create_arg *a = calloc(1, sizeof *a);
    if (a && !(a->body = malloc(len + 1))) {
        free(a);
        a = NULL;
    }
    if (!a) {
        api_respond_error_anthropic(req, API_ERR_INTERNAL, "Out of memory.");
        return;
    }
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
    struct api_create_src src = {API_NAME, "message_batch.jsonl", create_lines, create_render, a, create_arg_free,
                                 api->cfg.message_batch_window_s};
    struct api_job *job = api_create_job_new(req, &src);
    if (job && store_idem_fingerprint("POST", "/v1/messages/batches", body, len, job->fp)) {
        api_job_free(job);
        job = NULL;
    }
    api_job_run(req, job);
}

/* ---- GET /v1/messages/batches/{id}, cancel, delete --------------------------------------------- */

struct one_job {
    struct api_job job;
    char id[ID_MAX + 16]; /* the msgbatch id */
};

static void one_free(struct api_job *job)
{
    free(job);
}

static int render_one(struct api_job *job, struct store *st, const struct store_batch *b)
{
    struct msg_counts c;
    int rc = counts_of(job->api, st, b, 0, &c);
    buf_reset(&job->out);
    if (!rc)
        rc = batch_json(&job->out, b, &c);
    if (rc) {
        api_job_internal(job, rc, "render batch");
        return rc;
    }
    job->status = 200;
    return 0;
}

static void get_run(struct api_job *job, struct store *st)
{
    struct one_job *oj = (struct one_job *)job;
    struct store_batch b;
    if (get_batch(job, st, oj->id, &b))
        return;
    render_one(job, st, &b);
    store_batch_release(&b);
}

/* The cancel's idempotent answer: the batch after the change. */
struct cancel_render {
    struct api_job *job;
    struct store *st;
};

static int cancel_render(void *arg, const void *obj)
{
    struct cancel_render *cr = arg;
    return render_one(cr->job, cr->st, obj);
}

static void cancel_run(struct api_job *job, struct store *st)
{
    struct one_job *oj = (struct one_job *)job;
    struct store_batch b;
    if (get_batch(job, st, oj->id, &b))
        return;
    int ended = is_ended(b.status);
    if (ended || b.status == STORE_BATCH_CANCELLING) { /* as Anthropic: the batch as it is */
        render_one(job, st, &b);
        store_batch_release(&b);
        return;
    }
    char id[ID_MAX];
    snprintf(id, sizeof id, "%s", b.id);
    store_batch_release(&b);
    if (api_idem_begin(job, st))
        return;
    struct cancel_render cr = {job, st};
    struct store_idem_answer ans = api_idem_answer(job, cancel_render, &cr);
    int rc = store_batch_cancel_keyed(st, job->tenant, id, clock_wall_s(), &ans);
    if (!rc) {
        job->wake_sweeper = 1;
        return;
    }
    api_idem_release(job, st);
    if (rc == ERR_BADSTATE && !store_batch_get(st, job->tenant, id, &b)) { /* ended meanwhile */
        render_one(job, st, &b);
        store_batch_release(&b);
    } else if (rc == ERR_NOTFOUND) {
        not_found(job, oj->id);
    } else {
        api_job_internal(job, rc, "cancel batch");
    }
}

static void delete_run(struct api_job *job, struct store *st)
{
    struct one_job *oj = (struct one_job *)job;
    char id[ID_MAX];
    if (batch_id_of(oj->id, id)) {
        not_found(job, oj->id);
        return;
    }
    int rc = store_batch_delete(st, job->tenant, API_NAME, id);
    if (rc == ERR_NOTFOUND) {
        not_found(job, oj->id);
    } else if (rc == ERR_BADSTATE) {
        api_job_error(job, API_ERR_INVALID_STATE, NULL,
                      "Message batch '%.64s' has not ended: cancel it and wait for processing_status 'ended' "
                      "before deleting it.", oj->id);
    } else if (rc) {
        api_job_internal(job, rc, "delete batch");
    } else if (!(rc = buf_printf(&job->out, "{\"id\":\"%s\",\"type\":\"message_batch_deleted\"}", oj->id))) {
        job->status = 200;
    } else {
        api_job_internal(job, rc, "render");
    }
}

static struct one_job *one_new(struct http_req *req, api_job_fn run)
{
    const char *id = http_req_param(req, "id");
    struct one_job *oj = calloc(1, sizeof *oj);
    if (oj) {
        api_job_init_req(&oj->job, req, run, one_free);
        snprintf(oj->id, sizeof oj->id, "%s", id && strlen(id) < ID_MAX ? id : "");
    }
    return oj;
}

static void messages_get(struct http_req *req, void *arg)
{
    struct one_job *oj = one_new(req, get_run);
    api_job_run(req, oj ? &oj->job : NULL);
}

static void messages_cancel(struct http_req *req, void *arg)
{
    struct one_job *oj = one_new(req, cancel_run);
    if (oj) {
        size_t len;
        const char *body = http_req_body(req, &len);
        store_idem_fingerprint("POST", http_req_path(req), body, len, oj->job.fp);
    }
    api_job_run(req, oj ? &oj->job : NULL);
}

static void messages_delete(struct http_req *req, void *arg)
{
    struct one_job *oj = one_new(req, delete_run);
    api_job_run(req, oj ? &oj->job : NULL);
}

/* ---- GET /v1/messages/batches ------------------------------------------------------------------ */

struct list_job {
    struct api_job job;
    char before[ID_MAX], after[ID_MAX]; /* batch ids, "" = none */
    int limit;
};

static void list_run(struct api_job *job, struct store *st)
{
    struct list_job *lj = (struct list_job *)job;
    struct store_batch *items = NULL;
    size_t n = 0;
    int has_more = 0;
    int rc = store_batch_list_api(st, job->tenant, API_NAME, lj->before[0] ? lj->before : NULL,
                                  lj->after[0] ? lj->after : NULL, lj->limit, &items, &n, &has_more);
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_INVALID_VALUE, NULL, "%s: no message batch with this id",
                      lj->before[0] ? "before_id" : "after_id");
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "list batches");
        return;
    }
    struct buf *b = &job->out;
    rc = buf_append_str(b, "{\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        struct msg_counts c;
        if (i)
            rc = buf_append_byte(b, ',');
        if (!rc)
            rc = counts_of(job->api, st, &items[i], 0, &c);
        if (!rc)
            rc = batch_json(b, &items[i], &c);
    }
    char first[ID_MAX + 16] = "", last[ID_MAX + 16] = "";
    if (n) {
        msg_id_of(items[0].id, first, sizeof first);
        msg_id_of(items[n - 1].id, last, sizeof last);
    }
    if (!rc)
        rc = buf_printf(b, "],\"has_more\":%s,\"first_id\":%s%s%s,\"last_id\":%s%s%s}", has_more ? "true" : "false",
                        n ? "\"" : "", n ? first : "null", n ? "\"" : "", n ? "\"" : "", n ? last : "null",
                        n ? "\"" : "");
    store_batch_list_free(items, n);
    if (rc)
        api_job_internal(job, rc, "list batches");
    else
        job->status = 200;
}

static void list_free(struct api_job *job)
{
    free(job);
}

static void messages_list(struct http_req *req, void *arg)
{
    int64_t limit;
    if (api_query_int(req, "limit", 1, MSG_LIST_MAX, MSG_LIST_DEFAULT, &limit)) {
        api_respond_error_anthropic(req, API_ERR_INVALID_VALUE, "limit: Input should be an integer from 1 to %d",
                                    MSG_LIST_MAX);
        return;
    }
    const char *before = http_req_query(req, "before_id"), *after = http_req_query(req, "after_id");
    struct list_job *lj = calloc(1, sizeof *lj);
    if (!lj) {
        api_job_run(req, NULL);
        return;
    }
    if ((before && *before && batch_id_of(before, lj->before)) || (after && *after && batch_id_of(after, lj->after))) {
        free(lj);
        api_respond_error_anthropic(req, API_ERR_INVALID_VALUE, "%s: not a message batch id",
                                    before && *before ? "before_id" : "after_id");
        return;
    }
    if (lj->before[0] && lj->after[0]) {
        free(lj);
        api_respond_error_anthropic(req, API_ERR_INVALID_VALUE, "before_id and after_id cannot both be given");
        return;
    }
    api_job_init_req(&lj->job, req, list_run, list_free);
    lj->limit = (int)limit;
    api_job_run(req, &lj->job);
}

/* ---- GET /v1/messages/batches/{id}/results ----------------------------------------------------- */

/* The results answer is streamed (http_respond_stream): results_run checks
 * the batch and sets up a res_stream; its reader, on the thread pool,
 * refills a pending buffer a slice at a time and hands it out chunk by
 * chunk. Rows: a connection is checked out per slice (api_store_checkout)
 * and given back before the bytes go out, the scan resuming after the last
 * seq read (store_results_scan: every row exactly once, in commit order).
 * A batch that never ran: its input file, read line by line (the stubs).
 * Memory: the pending buffer holds RES_SLICE_BYTES plus at most one line,
 * whatever the batch's size. */
#define RES_SLICE_BYTES (256u * 1024)
#define RES_SLICE_ROWS 256
#define RES_LINE_CAP (64u << 20) /* the pending buffer's hard cap: a slice and one line */
#define RES_STOP 1               /* a slice is full (not an error) */

struct res_stream {
    struct api *api;
    char id[ID_MAX];          /* batch id */
    char tenant[ID_MAX];
    int64_t cursor;           /* rows: the last seq handed out */
    struct jsonl_reader *rd;  /* NULL: rows; else the input file of a batch that never ran */
    const char *stub;         /* the result object of every stub line (JSON text, static) */
    struct buf pend;          /* lines not yet handed out, from off */
    size_t off;
    int eof;
};

static const char STUB_FAILED[] = "{\"type\":\"errored\",\"error\":{\"type\":\"error\",\"error\":"
                                  "{\"type\":\"invalid_request_error\",\"message\":\"the batch failed validation\"}}}";
static const char STUB_CANCELED[] = "{\"type\":\"canceled\"}";

static void res_stream_free(struct res_stream *rs)
{
    if (!rs)
        return;
    jsonl_reader_free(rs->rd);
    buf_release(&rs->pend);
    free(rs);
}

static int res_row(void *ctx, const struct store_result_row *r)
{
    struct res_stream *rs = ctx;
    int rc = anth_batch_result_line(&rs->pend, r);
    if (rc)
        return rc;
    rs->cursor = r->seq;
    return rs->pend.len >= RES_SLICE_BYTES ? RES_STOP : 0;
}

/* The next slice of rows into pend. */
static int res_fill_rows(struct res_stream *rs)
{
    struct store *st = api_store_checkout(rs->api);
    int64_t cursor = rs->cursor;
    int n_rows = 0;
    int rc = store_results_scan(st, rs->id, &cursor, RES_SLICE_ROWS, res_row, rs, &n_rows);
    if (rc == RES_STOP) {
        rc = 0;
    } else if (!rc && !n_rows) { /* the end; unless the batch went meanwhile (DELETE): then a cut answer */
        struct store_batch b;
        rc = store_batch_get(st, rs->tenant, rs->id, &b);
        if (!rc)
            store_batch_release(&b);
        rs->eof = !rc;
    }
    api_store_return(rs->api, st);
    return rc;
}

/* The next slice of stub lines (one per request of the input file) into pend. */
static int res_fill_stubs(struct res_stream *rs)
{
    const struct ingest_limits *lim = &rs->api->cfg.limits;
    while (rs->pend.len < RES_SLICE_BYTES) {
        struct jsonl_line l;
        int rc = jsonl_reader_next(rs->rd, &l);
        if (rc)
            return rc;
        if (l.kind == JSONL_BLANK || l.kind == JSONL_TOO_LONG)
            continue;
        if (l.kind != JSONL_REQUEST) { /* the end (our own file: no other ending) */
            rs->eof = 1;
            return 0;
        }
        struct problem e;
        struct ingest_line il = {0};
        rc = ingest_line_check(l.p, l.n, "/v1/chat/completions", lim, &il, &e);
        if (!rc) {
            rc = buf_append_str(&rs->pend, "{\"custom_id\":");
            if (!rc)
                rc = js_escape(&rs->pend, il.custom_id, strlen(il.custom_id));
            if (!rc)
                rc = buf_printf(&rs->pend, ",\"result\":%s}\n", rs->stub);
        } else if (rc == ERR_INVAL) {
            rc = 0; /* not a request ingest would have stored */
        }
        ingest_line_release(&il);
        if (rc)
            return rc;
    }
    return 0;
}

static int res_read(void *arg, char *out, size_t cap, size_t *n)
{
    struct res_stream *rs = arg;
    size_t got = 0;
    while (got < cap) {
        if (rs->off == rs->pend.len) {
            buf_reset(&rs->pend);
            rs->off = 0;
            if (rs->eof)
                break;
            int rc = rs->rd ? res_fill_stubs(rs) : res_fill_rows(rs);
            if (rc)
                return rc < 0 ? rc : ERR_INTERNAL;
            continue;
        }
        size_t k = rs->pend.len - rs->off < cap - got ? rs->pend.len - rs->off : cap - got;
        memcpy(out + got, rs->pend.data + rs->off, k);
        rs->off += k;
        got += k;
    }
    *n = got;
    return 0;
}

static void res_done(void *arg, int err)
{
    struct res_stream *rs = arg;
    if (err)
        log_error("message batch results of %s: %s after streaming part of them", rs->id, err_msg(err));
    res_stream_free(rs);
}

struct results_job {
    struct one_job one;
    struct res_stream *rs; /* set by results_run when the answer is the stream */
};

static void results_free(struct api_job *job)
{
    struct results_job *rj = (struct results_job *)job;
    res_stream_free(rj->rs);
    free(rj);
}

static void results_run(struct api_job *job, struct store *st)
{
    struct results_job *rj = (struct results_job *)job;
    struct store_batch b;
    if (get_batch(job, st, rj->one.id, &b))
        return;
    int ended = is_ended(b.status), stubs = ended && never_ran(&b);
    if (!ended) {
        store_batch_release(&b);
        api_job_error(job, API_ERR_BATCH_NOT_FINISHED, NULL,
                      "Message batch '%.64s' has not ended: its results are available once processing_status "
                      "is 'ended'.", rj->one.id);
        return;
    }
    struct res_stream *rs = calloc(1, sizeof *rs);
    int rc = rs ? 0 : ERR_NOMEM;
    if (rs) {
        rs->api = job->api;
        snprintf(rs->id, sizeof rs->id, "%s", b.id);
        snprintf(rs->tenant, sizeof rs->tenant, "%s", b.tenant_id);
        buf_init(&rs->pend, RES_LINE_CAP);
    }
    if (!rc && stubs) {
        const struct ingest_limits *lim = &job->api->cfg.limits;
        struct jsonl_caps caps = {lim->max_line_bytes, lim->max_file_bytes, lim->max_requests};
        struct store_file f;
        rs->stub = b.status == STORE_BATCH_FAILED ? STUB_FAILED : STUB_CANCELED;
        rc = store_file_get(st, b.tenant_id, b.input_file_id, &f);
        if (!rc)
            rc = jsonl_reader_open_blob(store_blobs(st), f.storage_path, &caps, &rs->rd);
        if (rc == ERR_NOTFOUND) { /* the file went with its retention: nothing to list */
            rs->eof = 1;
            rc = 0;
        }
    }
    store_batch_release(&b);
    if (rc) {
        res_stream_free(rs);
        api_job_internal(job, rc, "read results");
        return;
    }
    rj->rs = rs;
    job->status = 200;
}

static int results_answer(struct http_req *req, struct api_job *job)
{
    struct results_job *rj = (struct results_job *)job;
    struct res_stream *rs = rj->rs;
    if (!rs) {
        api_job_answer(req, job);
        return 0;
    }
    rj->rs = NULL;
    int rc = http_respond_stream(req, 200, "application/x-jsonl", res_read, res_done, rs);
    if (rc) {
        res_stream_free(rs);
        if (rc == ERR_BUSY) { /* --max-streams run */
            http_resp_header(req, "Retry-After", "1");
            api_respond_error_anthropic(req, API_ERR_UNAVAILABLE, "Too many answers are being streamed; retry shortly.");
        } else {
            api_respond_error_anthropic(req, API_ERR_INTERNAL, "Out of memory.");
        }
    }
    return 0;
}

static void messages_results(struct http_req *req, void *arg)
{
    struct results_job *rj = calloc(1, sizeof *rj);
    if (!rj) {
        api_job_run(req, NULL);
        return;
    }
    const char *id = http_req_param(req, "id");
    api_job_init_req(&rj->one.job, req, results_run, results_free);
    rj->one.job.answer = results_answer;
    snprintf(rj->one.id, sizeof rj->one.id, "%s", id && strlen(id) < ID_MAX ? id : "");
    api_job_run(req, &rj->one.job);
}

int routes_messages_add(struct api *api)
{
    struct http_server *s = api->srv;
    uint64_t max = api->cfg.limits.max_file_bytes;
    int rc;
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/messages/batches", messages_create, msg_head,
                                                        max, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/messages/batches", messages_list, msg_head, 0,
                                                        api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/messages/batches/{id}", messages_get, msg_head,
                                                        0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"DELETE", "/v1/messages/batches/{id}", messages_delete,
                                                        msg_head, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/messages/batches/{id}/cancel", messages_cancel,
                                                        msg_head, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/messages/batches/{id}/results",
                                                        messages_results, msg_head, 0, api})))
        return rc;
    return 0;
}
