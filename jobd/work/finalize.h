/*
 * finalize.h - the end of a batch: cancel and expiry processing, and the
 * output / error files.
 *
 * Design. finalize_batch moves one batch as far towards a terminal state as
 * it can, in steps that are each one transaction (so a crash anywhere is
 * resumed by simply calling it again):
 *
 *   in_progress, expires_at passed   queued and leased requests end as
 *                                    batch_expired (chunks), -> finalizing
 *   in_progress, every request ended -> finalizing
 *   cancelling (was in_progress)     queued requests end as batch_cancelled
 *                                    (chunks); waits while requests are still
 *                                    leased (their results are accepted; a
 *                                    lapsed or released lease ends them as
 *                                    batch_cancelled)
 *   finalizing / cancelling, ready   write both files, then in ONE transaction
 *                                    register them (files rows, purpose
 *                                    batch_output), set output_file_id,
 *                                    error_file_id, request_counts, usage and
 *                                    move to completed, expired (some request
 *                                    ended batch_expired) or cancelled.
 *
 * Files. The batch's results rows are streamed in commit (seq) order, 512 rows per
 * query, into two zstd streams (common/zst.h): 2xx responses to the output
 * file, everything else (4xx responses, max_attempts_exceeded,
 * batch_cancelled, batch_expired) to the error file, one OpenAI
 * request-output line each (spec/jsonl.md). A frame is closed every
 * FINALIZE_FRAME_BYTES of input, so memory stays bounded whatever the batch
 * size. Files are written to <data>/tmp/fin-<batch>-<kind> and then handed
 * to the file store (jobd/blob/blob.h, blob_put_file) as
 * files/<batch_id>-output.jsonl.zst / -errors.jsonl.zst: local, fsynced
 * and renamed into place; S3, a multipart upload that appears whole when
 * complete. A half-written file is never visible, a re-run after a crash
 * (or after the file store was out: ERR_CONN, the batch stays finalizing
 * and the sweeper tries again) rewrites them from scratch, and the file
 * rows exist only once the final transaction commits, after both are
 * durable. A file with no lines is not created (its id
 * stays null, as OpenAI does). Both files get expires_at = their
 * created_at + the batch's output_expires_after_s when that is set
 * (retention.h deletes them then).
 *
 * Threads: blocking disk work; run on a finalizer thread with its own store,
 * never on the event loop.
 */
#ifndef JOBD_FINALIZE_H
#define JOBD_FINALIZE_H

#include <stdint.h>

#include "jobd/store/store.h"

#define FINALIZE_FRAME_BYTES (4u << 20) /* close a zstd frame after this much input */
#define FINALIZE_PAGE_ROWS 512          /* results rows per query */
#define FINALIZE_STOP_CHUNK 10000       /* requests ended per cancel/expiry transaction */

/* Test hook: called before each output line is written and between steps;
 * a test can _exit() inside it to simulate a crash. */
struct finalize_hooks {
    void (*on_step)(void *ctx);
    void *ctx;
};

struct finalize_report {
    int done;                           /* 1: the batch is terminal (now or already) */
    enum store_batch_status status;     /* its status after the call */
    int64_t n_output_lines, n_error_lines; /* lines written by this call (0 if none) */
};

struct finalize_retry; /* below */

/* Progress batch_id as described above. Returns 0 with rep->done = 0 when
 * it must wait (requests still running, or leased in a cancelling batch;
 * also for a batch still validating); ERR_NOTFOUND; ERR_IO (files); store
 * errors. hooks may be NULL. */
int finalize_batch(struct store *st, const char *batch_id, int64_t now,
                   const struct finalize_hooks *hooks, struct finalize_report *rep);

/* Run finalize_batch on every batch that needs it (store_batch_ids_to_finalize),
 * at most max_batches, skipping those another jobd instance is finalizing
 * (store_own_try, STORE_OWN_FINALIZE: PostgreSQL with several instances;
 * every step stays fenced by the batch's status, so ownership only keeps two
 * instances from writing the same files at once). With rt (may be NULL:
 * every batch is tried on every call), a batch whose last attempts failed
 * is skipped until its backoff passed (finalize_retry below; mono_ms is
 * the monotonic clock in ms), a failure is recorded there and a success
 * clears it. *n_finished (may be NULL) gets how many became
 * terminal. Returns the first error (after trying the others). */
int finalize_sweep(struct store *st, int64_t now, int max_batches, struct finalize_retry *rt, int64_t mono_ms,
                   int *n_finished);

/* Retries of a failed finalization (the file store out, a full disk, the
 * database gone): capped exponential backoff per batch, so an outage costs
 * one attempt per delay, not one full rewrite of the batch's files per
 * sweeper pass (every 100 ms..1 s, and sooner after each results commit).
 * The k-th consecutive failure of a batch defers its next attempt by
 * FINALIZE_RETRY_FIRST_MS * 2^(k-1), at most FINALIZE_RETRY_CAP_MS; a
 * success forgets it. The batch stays finalizing meanwhile (nothing is
 * committed before both files are durable). In memory, one table per
 * sweeper: each jobd instance backs off on its own, and a restarted one
 * tries at once. At most FINALIZE_RETRY_SLOTS batches are tracked; past
 * that the one due soonest is forgotten (it is then tried at its next
 * pass). Times are monotonic milliseconds given by the caller. */
#define FINALIZE_RETRY_FIRST_MS 500
#define FINALIZE_RETRY_CAP_MS 30000
#define FINALIZE_RETRY_SLOTS 256

/* A table (calloc'd; free() it). NULL on no memory. */
struct finalize_retry *finalize_retry_new(void);

/* The delay after the k-th consecutive failure (k >= 1). Pure. */
int64_t finalize_retry_delay_ms(int k);

/* 1 when batch_id may be tried at now_ms (never failed, or its delay passed). */
int finalize_retry_due(const struct finalize_retry *rt, const char *batch_id, int64_t now_ms);

/* Record a failure at now_ms; returns the delay until the next attempt. */
int64_t finalize_retry_failed(struct finalize_retry *rt, const char *batch_id, int64_t now_ms);

/* Forget batch_id (it succeeded, or finished elsewhere). */
void finalize_retry_clear(struct finalize_retry *rt, const char *batch_id);

/* Consecutive failures recorded for batch_id (0: none). */
int finalize_retry_fails(const struct finalize_retry *rt, const char *batch_id);

struct buf;

/* The output line of one results row, with its "\n", into b (reset first):
 * {"id","custom_id","response":{status_code,request_id,body},"error":null}
 * for a row with a response, else {"id","custom_id","response":null,
 * "error":{"code","message"}} (spec/jsonl.md). *is_ok (may be NULL): 1 when
 * the line belongs to the output file (a 2xx response), 0 to the error
 * file. Shared by finalization and GET /v1/batches/{id}/results, so a
 * partial page and the final files hold the same bytes per line. 0 or
 * buf's error. */
int finalize_line(struct buf *b, const struct store_result_row *r, int *is_ok);

/* "batch_req_" + the 26-character body of a "req_" id, into out (ID_MAX). */
void finalize_output_id(const char *request_id, char out[ID_MAX]);

#endif
