/*
 * routes_results.c - partial results: GET /v1/batches/{id}/results.
 *
 * Design. The batch's results rows carry a commit sequence number
 * (results.seq, see store_results_scan): a page is the rows with seq
 * greater than the cursor, in seq order, rendered with the same function
 * that writes the output and error files (finalize_line), so a line here
 * is byte for byte the line of the final file. Success and failure lines
 * come in one stream (a line tells which it is: "error" null or not).
 *
 * The cursor is opaque to clients: "rc1" + 16 hex digits of the last seq
 * seen + 12 hex digits of SHA-256("jobd results cursor" batch_id seq). The
 * check digits bind it to its batch, so a cursor from another batch, a
 * mistyped one or an invented one is a 400 (invalid_cursor), never a
 * silently wrong page. Cursors never expire: seq values are never reused.
 *
 * Answer headers: X-Next-Cursor (the cursor after this page: pass it as
 * ?after= next time; the cursor sent when the page is empty), X-Has-More
 * (true: more rows are committed already, ask again now), X-Batch-Status
 * (the status read before the rows), X-Results-Complete (true when that
 * status is terminal and no row is left: nothing will ever be added), and
 * Content-Encoding zstd or gzip when the client's Accept-Encoding lists one
 * (zstd preferred), with Vary: Accept-Encoding.
 *
 * Why "complete" is exact: the status is read first, then the rows. Rows
 * are only ever added while a batch is not terminal, and every row exists
 * before the transaction that makes it terminal commits; so a terminal
 * status read first means the scan after it sees the last rows.
 *
 * Limits: ?limit 1..10000 rows (default 1000) and 16 MiB of lines per page
 * (a page always holds at least one line when one is due).
 *
 * Threads: handler on the loop, run on the thread pool (api_job.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/err.h"
#include "common/zst.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/http/http.h"
#include "jobd/work/finalize.h"

#define RESULTS_PAGE_DEFAULT 1000
#define RESULTS_PAGE_MAX 10000
#define RESULTS_PAGE_BYTES (16u << 20)

enum coding { CODING_IDENTITY = 0, CODING_ZSTD, CODING_GZIP };

struct results_job {
    struct api_job job;
    char id[ID_MAX];
    int64_t after;          /* seq of the cursor (0: from the start) */
    int limit;
    enum coding coding;
    /* outputs */
    char next[API_CURSOR_LEN + 1];
    char status[16];
    int has_more, complete;
    /* scan state */
    struct buf lines, line;
    int n_lines;
    int64_t last_seq;
};

static void results_job_free(struct api_job *job)
{
    struct results_job *rj = (struct results_job *)job;
    buf_release(&rj->lines);
    buf_release(&rj->line);
    free(rj);
}

/* store_results_scan's callback: 1 stops the scan (page full; more exist). */
static int add_row(void *ctx, const struct store_result_row *r)
{
    struct results_job *rj = ctx;
    if (rj->n_lines >= rj->limit || (rj->n_lines > 0 && rj->lines.len >= RESULTS_PAGE_BYTES)) {
        rj->has_more = 1;
        return 1;
    }
    int rc = finalize_line(&rj->line, r, NULL);
    if (!rc)
        rc = buf_append(&rj->lines, rj->line.data, rj->line.len);
    if (rc)
        return rc;
    rj->n_lines++;
    rj->last_seq = r->seq;
    return 0;
}

static int gzip_buf(const void *data, size_t n, struct buf *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return ERR_NOMEM;
    uLong bound = deflateBound(&z, (uLong)n);
    int rc = buf_reserve(out, (size_t)bound + 1);
    if (!rc) {
        z.next_in = (Bytef *)(uintptr_t)data;
        z.avail_in = (uInt)n;
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)bound;
        if (deflate(&z, Z_FINISH) != Z_STREAM_END)
            rc = ERR_INTERNAL;
        else
            out->len += z.total_out;
    }
    deflateEnd(&z);
    return rc;
}

static void results_run(struct api_job *job, struct store *st)
{
    struct results_job *rj = (struct results_job *)job;
    struct store_batch b;
    int rc = store_batch_get(st, job->tenant, rj->id, &b);
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_NOT_FOUND, "batch_id", "No such Batch object: '%s'.", rj->id);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get batch");
        return;
    }
    enum store_batch_status status = b.status;
    store_batch_release(&b);
    snprintf(rj->status, sizeof rj->status, "%s", store_batch_status_name(status));
    /* the status first, then the rows (see the file comment) */
    int64_t cursor = rj->after;
    int n_rows = 1;
    rj->last_seq = rj->after;
    while (!rj->has_more && n_rows > 0) {
        rc = store_results_scan(st, rj->id, &cursor, 256, add_row, rj, &n_rows);
        if (rc == 1) {
            rc = 0;
            break;
        }
        if (rc)
            break;
    }
    if (rc) {
        api_job_internal(job, rc, "read results");
        return;
    }
    int terminal = status == STORE_BATCH_COMPLETED || status == STORE_BATCH_FAILED ||
                   status == STORE_BATCH_EXPIRED || status == STORE_BATCH_CANCELLED;
    rj->complete = terminal && !rj->has_more;
    api_results_cursor_make(rj->id, rj->last_seq, rj->next);
    buf_reset(&job->out);
    if (rj->coding == CODING_ZSTD)
        rc = zst_compress_buf(rj->lines.data, rj->lines.len, 3, &job->out);
    else if (rj->coding == CODING_GZIP)
        rc = gzip_buf(rj->lines.data, rj->lines.len, &job->out);
    else
        rc = buf_append(&job->out, rj->lines.data ? rj->lines.data : "", rj->lines.len);
    if (rc) {
        buf_reset(&job->out);
        api_job_internal(job, rc, "encode results");
        return;
    }
    job->content_type = "application/jsonl";
    job->status = 200;
}

static int results_answer(struct http_req *req, struct api_job *job)
{
    struct results_job *rj = (struct results_job *)job;
    if (job->status == 200) {
        http_resp_header(req, "X-Next-Cursor", rj->next);
        http_resp_header(req, "X-Has-More", rj->has_more ? "true" : "false");
        http_resp_header(req, "X-Batch-Status", rj->status);
        http_resp_header(req, "X-Results-Complete", rj->complete ? "true" : "false");
        http_resp_header(req, "Vary", "Accept-Encoding");
        if (rj->coding != CODING_IDENTITY)
            http_resp_header(req, "Content-Encoding", rj->coding == CODING_ZSTD ? "zstd" : "gzip");
    }
    api_job_answer(req, job);
    return 0;
}

static void batches_results(struct http_req *req, void *arg)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= ID_MAX) {
        api_respond_error(req, API_ERR_NOT_FOUND, "batch_id", "No such Batch object.");
        return;
    }
    int64_t limit;
    if (api_query_int(req, "limit", 1, RESULTS_PAGE_MAX, RESULTS_PAGE_DEFAULT, &limit)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to %d.",
                          RESULTS_PAGE_MAX);
        return;
    }
    int64_t after = 0;
    const char *cur = http_req_query(req, "after");
    if (cur && *cur && api_results_cursor_parse(id, cur, &after)) {
        api_respond_error(req, API_ERR_INVALID_CURSOR, "after",
                          "Unknown cursor '%.64s' for batch '%s': pass the X-Next-Cursor value of an earlier "
                          "answer for this batch, or no 'after' to start from the first result.",
                          cur, id);
        return;
    }
    struct results_job *rj = calloc(1, sizeof *rj);
    if (!rj) {
        api_job_run(req, NULL);
        return;
    }
    api_job_init_req(&rj->job, req, results_run, results_job_free);
    rj->job.answer = results_answer;
    snprintf(rj->id, sizeof rj->id, "%s", id);
    rj->after = after;
    rj->limit = (int)limit;
    buf_init(&rj->lines, 64u << 20);
    buf_init(&rj->line, 64u << 20);
    const char *ae = http_req_header(req, "Accept-Encoding");
    rj->coding = api_accepts_coding(ae, "zstd")   ? CODING_ZSTD
                 : api_accepts_coding(ae, "gzip") ? CODING_GZIP
                                                  : CODING_IDENTITY;
    api_job_run(req, &rj->job);
}

int routes_results_add(struct api *api)
{
    return http_server_route(api->srv, &(struct http_route){"GET", "/v1/batches/{id}/results", batches_results,
                                                            api_head_tenant, 0, api});
}
