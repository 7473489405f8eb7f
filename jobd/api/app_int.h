/*
 * app_int.h - internals shared by jobd/app.c and the route files
 * (routes_files.c, routes_batches.c, routes_ops.c) and api_json.c.
 *
 * Request flow. Every /v1 route has an on_head hook that authenticates
 * (app_on_head_auth, loop thread) and attaches a struct rctx to the request.
 * Handlers then describe their database work as a struct op and hand it to
 * app_op_run: op->fn runs on a thread-pool thread with a pooled store
 * connection and fills op->status / op->out (the response body, also the
 * body stored for idempotent replay); the after-callback (loop thread) adds
 * headers, answers, queues a new batch for ingestion and frees the op.
 */
#ifndef JOBD_APP_INT_H
#define JOBD_APP_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "jobd/app.h"
#include "jobd/account/budget.h"
#include "jobd/api/api_err.h"
#include "jobd/http/http.h"
#include "jobd/intake/ingestq.h"
#include "jobd/store/store.h"
#include "jobd/work/sweeper.h"

struct dbpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct store **all;  /* n connections */
    struct store **idle; /* n_idle of them, free to check out */
    size_t n, n_idle;
};

struct app {
    struct app_config cfg;
    char host[256];
    int port;
    uv_loop_t *loop;
    struct http_server *srv;
    struct store *loop_st;   /* loop thread: authentication only */
    struct dbpool pool;      /* thread-pool threads */
    struct ingestq *iq;
    uv_signal_t sig_term, sig_int;
    int auth_required;
    char default_tenant[ID_MAX];
    int draining;            /* SIGTERM seen: /readyz answers 503 */
    atomic_int writers;      /* write ops running on the pool (the ingest thread yields to them) */
    char files_dir[1024], tmp_dir[1024];
    struct sweeper *sweeper;  /* lease expiry + finalization thread (jobd/work/sweeper.h) */
    atomic_uint_fast64_t n_leases, n_leased, n_results, n_commit_dead; /* worker route counters */
    struct webhook_dispatcher *wh; /* webhook sender threads (jobd/webhook/webhook.h) */
    atomic_uint_fast64_t n_budget_rejected[4]; /* submissions refused, by enum budget_verdict */
};

/* Per-request context (http_req_data), created by app_on_head_auth. */
struct rctx {
    struct app *app;
    char tenant[ID_MAX];
    char idem_key[STORE_IDEM_KEY_MAX + 1]; /* "" = none */
    void *route_data;                      /* a route's streaming state */
    void (*route_free)(void *route_data);
};

/* Authenticate (Bearer key, or the default tenant in no-auth mode), check
 * Idempotency-Key, attach a new rctx. Returns the rctx, or NULL when the
 * request was answered (401, 400, 500). Loop thread, from on_head. */
struct rctx *app_on_head_auth(struct http_req *req, struct app *app);

/* on_head of buffered /v1 routes: just app_on_head_auth. */
void app_head_auth(struct http_req *req, void *arg);

/* ---- ops: database work on the thread pool ------------------------------------ */

struct op;
typedef void (*op_fn)(struct op *op, struct store *st);

struct op {
    struct app *app;
    char tenant[ID_MAX];
    char idem_key[STORE_IDEM_KEY_MAX + 1];
    op_fn fn;
    int writes;                  /* fn writes (POST/DELETE): counted in app->writers */
    /* inputs (route-specific) */
    char id[ID_MAX];
    char after_id[ID_MAX];
    int has_after;
    int limit, desc;
    char purpose[32];
    int has_purpose;
    char if_none_match[128];
    int accept_zstd;             /* client sent Accept-Encoding: zstd */
    uint8_t fp[SHA256_LEN];      /* idempotency fingerprint */
    void *in;                    /* route-specific input (freed by in_free) */
    void (*in_free)(void *in);
    /* outputs */
    int status;                  /* 0: not answered by fn (internal error) */
    struct buf out;              /* response body (JSON) */
    const char *content_type;    /* NULL: application/json */
    char etag[80];
    int retry_after;             /* seconds, 0 = none */
    int replayed;
    char push_batch[ID_MAX];     /* queue for ingest once answered */
    int fd;                      /* >= 0: answer with this file (content route) */
    uint64_t fd_len;
    int fd_zstd_raw;             /* fd is the raw zstd stream, send Content-Encoding: zstd */
    int fd_decompress;           /* fd is zstd: stream decompressed */
    char unlink_path[1100];      /* remove after answering (deleted file bytes) */
    void (*after)(struct http_req *req, struct op *op); /* custom answer (metrics) */
};

/* A new op for req (tenant and idempotency key copied from its rctx). NULL on no memory. */
struct op *app_op_new(struct http_req *req, op_fn fn);
/* A new op with no tenant context (admin and ops routes): fn, whether it
 * writes, its input `in` (owned: freed by in_free with the op, or at once when
 * the op cannot be allocated) and the answer buffer's cap. NULL on no memory. */
struct op *app_op_new_bare(struct app *app, op_fn fn, int writes, void *in, void (*in_free)(void *in),
                           size_t out_cap);
void app_op_free(struct op *op);
/* Queue op->fn on the thread pool and answer from op afterwards. On failure
 * answers 500 itself. Takes ownership of op. */
void app_op_run(struct http_req *req, struct op *op);

/* Answer with op->fd (routes_files.c: raw file, or decompressed as a
 * chunked stream with backpressure). Takes the fd. */
void app_send_file(struct http_req *req, struct op *op);

/* Fill op->status / op->out with OpenAI's error envelope. */
void op_error(struct op *op, enum api_err e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 500 for an unexpected store error rc (logged with what). */
void op_internal(struct op *op, int rc, const char *what);

/* Idempotency, inside fn. op_idem_begin: no key -> 0 (go on); reserve:
 * NEW -> 0 (go on, then complete inside the effect's transaction), REPLAY ->
 * answers with the stored response (replayed = 1) and returns 1, IN_FLIGHT
 * -> 409 + Retry-After, MISMATCH -> 422, errors -> 500; each returns 1. */
int op_idem_begin(struct op *op, struct store *st);
/* Inside the effect transaction: store op->status/op->out as the response.
 * No key: 0. */
int op_idem_complete(struct op *op, struct store *st);
/* The effect failed before committing: drop the reservation. */
void op_idem_release(struct op *op, struct store *st);

/* Borrow / return a pooled connection (blocks while none is idle). */
struct store *dbpool_get(struct dbpool *p);
void dbpool_put(struct dbpool *p, struct store *st);

/* ---- JSON (api_json.c) --------------------------------------------------------- */

int api_file_json(struct buf *out, const struct store_file *f);
int api_batch_json(struct buf *out, const struct store_batch *b);
/* "24h" for 86400, "7d" for 604800, "90m", "45s". */
void api_window_format(int64_t seconds, char *out, size_t cap);
/* Parse a completion window ("24h", "1h", "7d", "90m"): min_s (60 s
 * unless --window-min says less, for tests) .. 30 d.
 * 0 or ERR_INVAL. */
int api_window_parse(const char *s, int64_t min_s, int64_t *seconds);
#define API_WINDOW_MIN_S 60
#define API_WINDOW_MAX_S (30 * 86400)
/* Check metadata (a JSON object of <= 16 string pairs, key <= 64, value
 * <= 512 bytes). 0, or ERR_INVAL with a message in msg. */
struct json_t;
int api_metadata_check(const struct json_t *md, char *msg, size_t cap);

/* ---- routes ------------------------------------------------------------------------ */

int routes_files_add(struct app *app);
int routes_batches_add(struct app *app);
int routes_ops_add(struct app *app);
/* routes_worker.c: the worker protocol, GET /v1/models, dead letters, GET /v1/workers. */
int routes_worker_add(struct app *app);
/* Start / stop the sweeper thread (routes_worker.c). */
int app_sweeper_start(struct app *app);
void app_sweeper_stop(struct app *app);
/* Ask the sweeper for a pass soon (after a cancel). Any thread. */
void app_sweeper_wake(struct app *app);
/* /metrics: work-distribution gauges read on a pool thread into b, and the
 * loop-side counters (routes_worker.c). */
int app_work_metrics_db(struct store *st, struct buf *b);
void app_work_metrics_counters(struct app *app, struct buf *b);
/* The batch JSON plus the extension field "waiting_for_model" when the
 * batch is in_progress and no live worker serves its model (served: the
 * names live workers serve, n of them). */
struct store_model_served;
int api_batch_json_ext(struct buf *out, const struct store_batch *b,
                       const struct store_model_served *served, size_t n_served);
int routes_webhooks_add(struct app *app);
int routes_usage_add(struct app *app); /* GET /v1/usage (routes_usage.c) */

/* ---- budgets (routes_budget.c) ---------------------------------------------------- */

/* Admission of one submission (spec/usage.md "Budgets"). */
struct app_admit {
    int active;                  /* the tenant has a limit: estimate made, check and reserve */
    struct store_limits limits;
    struct budget_estimate est;
};
/* Before the write transaction: read op->tenant's limits; when one is in
 * force, estimate the input (path, or else file_id's stored bytes; a
 * missing or non-batch file leaves adm inactive: the creation answers it).
 * 0 or an error (answer 500 with op_internal). */
int app_admit_prepare(struct op *op, struct store *st, const char *path, const char *file_id,
                      const char *endpoint, struct app_admit *adm);
/* Inside the transaction, before the batch insert: 0 = admitted; else the
 * answer is set (429 insufficient_quota naming the limit, or 500) and the
 * caller rolls back. */
int app_admit_check(struct op *op, struct store *st, const struct app_admit *adm);
/* Inside the transaction, after the insert: record the reservation. 0, or
 * an error with a 500 answer set. */
int app_admit_reserve(struct op *op, struct store *st, const struct app_admit *adm, const char *batch_id);
int routes_budget_add(struct app *app); /* GET/PUT /v1/admin/tenants/{tenant}/limits */

/* 1 if the request carries `token` as its Bearer (constant-time compare of
 * SHA-256 digests), or no token is configured and jobd is in no-auth mode.
 * Loop thread. (jobd/api/routes_worker.c) */
int app_token_ok(struct app *app, struct http_req *req, const char *token);

/* 1 when the request carries the admin token (constant-time compare), or
 * when no admin token is configured and jobd runs in local no-auth mode;
 * else 0. Loop thread. */
int app_admin_ok(struct app *app, struct http_req *req);

/* on_head of admin routes: answers 401 invalid_admin_token unless
 * app_admin_ok. arg is the app. */
void app_admin_head(struct http_req *req, void *arg);

/* Parse a query integer in [lo, hi]; absent -> def. 0 or ERR_INVAL. */
int app_query_int(struct http_req *req, const char *name, int64_t lo, int64_t hi, int64_t def,
                  int64_t *out);

#endif
