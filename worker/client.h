/*
 * client.h - the worker side of the worker protocol (spec/worker-protocol.md):
 * typed calls to jobd's /v1/worker/... routes over common/httpc.h, and an
 * outbox that keeps finished results until jobd acknowledges them.
 *
 * Calls. Each wcl_* call sends one JSON request with the worker token and
 * returns the HTTP status and the decoded JSON answer (NULL when the answer
 * is not JSON). httpc retries transport failures and 5xx a few times with a
 * jittered backoff; heartbeat, results and release are safe to repeat
 * (jobd commits a result once, a release is idempotent, a heartbeat only
 * extends), register and lease are not (a lost lease answer would strand
 * its requests until the lease lapses), so those two are sent once per
 * call. Longer outages are the caller's loop's business (worker/serve.c
 * retries with backoff until jobd is back).
 *
 * Outbox. A finished request's result line (one JSON object of the results
 * JSONL) is added with its lease id; wcl_outbox_flush uploads everything
 * pending, grouped by lease, as zstd-compressed JSONL chunks (at most
 * WCL_CHUNK_LINES lines / WCL_CHUNK_BYTES bytes each). A line leaves the
 * outbox only when jobd answered for it: a per-line status (ok, retry,
 * dead_lettered, closed, duplicate, stale, unknown: "forget it" in every
 * case), or a 404 for the whole chunk (the lease or worker is gone: nobody
 * can commit under it any more). A transport failure or a 5xx keeps the
 * lines for the next flush, so a result survives jobd restarts and is
 * committed exactly once (jobd answers "duplicate" to a chunk it already
 * committed). A chunk refused as malformed or too large (400/413) is resent
 * line by line; a single line still refused is replaced by a transient
 * error result for its request (so the lease does not hold it forever), and
 * dropped if even that is refused.
 *
 * Thread: a struct wcl may be used from one thread at a time (serve.c: the
 * communication thread). The outbox is thread-safe: the engine thread adds,
 * the communication thread flushes.
 */
#ifndef WORKER_CLIENT_H
#define WORKER_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define WCL_CHUNK_LINES 256
#define WCL_CHUNK_BYTES (8u << 20)
#define WCL_MAX_ANSWER_BYTES (64u << 20)

struct wcl_opts {
    const char *base_url;   /* "http://127.0.0.1:8080" (a trailing '/' is ignored); copied */
    const char *token;      /* worker token, or NULL; copied */
    long timeout_ms;        /* per call (plus a long-poll's wait); 0 = 30000 */
    int max_retries;        /* httpc retries of the repeatable calls; < 0 = 2 */
};

struct wcl;

/* A client for jobd at o->base_url. Returns 0 and *out (wcl_free),
 * ERR_INVAL (no URL, or not http:// / https://), ERR_NOMEM. */
int wcl_new(const struct wcl_opts *o, struct wcl **out);
void wcl_free(struct wcl *c);

/* An answer: HTTP status (0 before any) and the decoded JSON body (NULL
 * when the body was empty or not JSON). */
struct wcl_answer {
    long status;
    json_t *body;
};

void wcl_answer_release(struct wcl_answer *a);

/* The OpenAI-style error code of an error answer ("stale_lease",
 * "not_found", ...) or "" when it has none. Borrowed from a. */
const char *wcl_answer_code(const struct wcl_answer *a);

/* POST body (a JSON object) to path ("/v1/worker/lease"). extra_ms is added
 * to the call's timeout (long-polls); retry 1 lets httpc resend it after a
 * transport failure or 5xx. Returns 0 when an HTTP answer arrived (any
 * status: look at a->status; release a with wcl_answer_release), ERR_CONN /
 * ERR_TIMEOUT when jobd could not be reached, ERR_NOMEM, ERR_TOOBIG (answer
 * over WCL_MAX_ANSWER_BYTES). */
int wcl_post(struct wcl *c, const char *path, const json_t *body, long extra_ms, int retry,
             struct wcl_answer *a);

/* The protocol's calls (fields as in the spec). Same returns as wcl_post. */
/* endpoints: the urls served for the model (n_endpoints 0: the field is
 * left out, i.e. all three); hourly_cost_micros < 0 leaves its field out;
 * model_sha256 (hex SHA-256 of the model file; NULL or "" leaves models[].sha256 out). */
int wcl_register(struct wcl *c, const char *name, const char *device, const char *model_id,
                 const char *const *aliases, size_t n_aliases, const char *const *endpoints,
                 size_t n_endpoints, int64_t kv_tokens, int64_t pack_size, int64_t hourly_cost_micros,
                 const char *model_sha256, struct wcl_answer *a);
int wcl_lease(struct wcl *c, const char *worker_id, const char *model, int64_t max_requests,
              int64_t max_tokens, int64_t lease_seconds, int64_t wait_ms, struct wcl_answer *a);
int wcl_heartbeat(struct wcl *c, const char *worker_id, const char *lease_id,
                  int64_t extend_seconds, int64_t completed, double tokens_per_s,
                  struct wcl_answer *a);
/* ids NULL = every request the lease still holds. */
int wcl_release(struct wcl *c, const char *worker_id, const char *lease_id,
                const char *const *ids, size_t n_ids, struct wcl_answer *a);
/* Upload jsonl[0..len) (result lines, '\n'-separated) zstd-compressed. */
int wcl_results(struct wcl *c, const char *worker_id, const char *lease_id, const char *jsonl,
                size_t len, struct wcl_answer *a);

/* ---- outbox ---- */

struct wcl_outbox;

int wcl_outbox_new(struct wcl_outbox **out);
/* Free, dropping whatever is pending. NULL ok. */
void wcl_outbox_free(struct wcl_outbox *ob);

/* Keep the result line[0..len) (one JSON object, no newline; copied) of
 * request_id held by lease_id. Returns 0, ERR_INVAL (bad ids, a newline in
 * the line), ERR_NOMEM. */
int wcl_outbox_add(struct wcl_outbox *ob, const char *lease_id, const char *request_id,
                   const char *line, size_t len);

/* Lines pending (including those being uploaded). */
size_t wcl_outbox_count(struct wcl_outbox *ob);

/* Forget the pending lines of lease_id (it is gone). Returns how many. */
size_t wcl_outbox_drop_lease(struct wcl_outbox *ob, const char *lease_id);

/* Called once per line that left the outbox: status is jobd's per-line
 * status ("ok", "duplicate", "stale", ...), "gone" (404: lease or worker
 * unknown) or "dropped" (refused even as an error line). */
typedef void (*wcl_ack_fn)(void *ctx, const char *lease_id, const char *request_id,
                           const char *status);

/* Upload every pending line (see the file comment). Returns 0 when every
 * chunk got an answer, or the first ERR_CONN / ERR_TIMEOUT / ERR_HTTP (5xx)
 * / ERR_NOMEM; lines without an answer stay pending. */
int wcl_outbox_flush(struct wcl_outbox *ob, struct wcl *c, const char *worker_id,
                     wcl_ack_fn ack, void *ctx);

#endif
