/*
 * lease.h - work distribution for jobd's routes: the worker protocol
 * (spec/worker-protocol.md) on top of the store's leasing transactions.
 *
 * Design. The transactional core lives in jobd/store/store_lease.c (only store*
 * files speak SQL); this module adds what is policy or protocol rather than
 * storage: defaults and clamps (struct lease_opts), which tenant and batch
 * a lease serves (lease_policy.c, over the store's leasing primitives), the
 * order of a pack for the worker (requests sharing a prompt prefix
 * together, then by length), the
 * strict parsers of the worker's JSON messages and of the zstd-compressed
 * JSONL result chunks (hostile input: capped, fuzzed by
 * tests/fuzz/fuzz_wproto.c), and the JSON answers; the messages the worker
 * shares with jobd (lease answer, heartbeat, results line) are those of
 * common/wproto.h. Each lease_* call that
 * touches the store is one transaction.
 *
 * What the daemon calls, and when:
 *   POST /v1/worker/register      lease_parse_register -> lease_worker_register
 *   POST /v1/worker/lease         lease_parse_ask -> lease_acquire -> lease_write_lease
 *                                 (empty: answer at once or after a short long-poll,
 *                                 with retry_after_ms)
 *   POST /v1/worker/heartbeat     lease_parse_heartbeat -> lease_heartbeat -> lease_write_heartbeat
 *   POST /v1/worker/results       lease_results_parse -> lease_results_commit -> lease_write_commit
 *   POST /v1/worker/release       lease_parse_release -> lease_release
 *   GET  /v1/models               lease_models_served
 *   every few seconds (timer, off the loop): lease_expire_sweep, then finalize_sweep
 *   (jobd/work/finalize.h); also finalize_sweep soon after a results commit whose
 *   report says a batch may be done, and after a cancel.
 *
 * Threads: like the store: one struct store per thread.
 */
#ifndef JOBD_LEASE_H
#define JOBD_LEASE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/problem.h"
#include "common/wproto.h"
#include "jobd/store/store.h"

struct lease_opts {
    struct store_retry_policy retry; /* max 3 attempts, backoff 10 s .. 600 s */
    int64_t lease_s_default;         /* 120: when the ask names none */
    int64_t lease_s_min, lease_s_max; /* 10 .. 3600: asks and extensions are clamped */
    int max_requests;                /* 1024: cap on an ask's max_requests */
    size_t max_bytes;                /* 32 MiB: cap on the bodies of one lease */
    size_t prefix_bytes;             /* 256: prompt bytes hashed to group a pack */
    int64_t worker_ttl_s;            /* 120: a worker serves while seen this recently */
    int retry_after_ms;              /* 1000: hint in an empty lease answer */
    int reuse_default;               /* 0: batches reuse results only with metadata "reuse": "on"
                                        (jobd --reuse: 1, "off" opts out; jobd/work/reuse.h) */
    int64_t reuse_retention_s;       /* 7 days: reusable results are this young at most, then swept;
                                        0 = no reuse at all (--reuse-retention) */
};

/* Acquires one lease ask may run when each pack was answered wholly from
 * reuse (lease_acquire). */
#define LEASE_REUSE_ROUNDS 8

/* The documented defaults (spec/worker-protocol.md). */
void lease_opts_default(struct lease_opts *o);

/* The lease clock, in unix seconds: the wall clock read once (at the first
 * call) and advanced by the monotonic clock since. Every `now` of the worker
 * protocol (lease deadlines, heartbeats, retry backoff, worker liveness) and
 * the sweeper's lease expiry use it, so a step of the wall clock while jobd
 * runs (NTP, `date -s`) neither expires every live lease at once (forward)
 * nor keeps a dead worker's lease for the size of the step (backward). A
 * restart re-reads the wall clock. Can't fail; thread-safe. */
int64_t lease_clock_s(void);

/* ---- the transactions (thin, clamped wrappers over store_lease.c) ---- */

int lease_worker_register(struct store *st, const struct store_worker_new *w, int64_t now,
                          char id_out[ID_MAX]);

/* Lease up to ask->max_requests ready requests (status queued,
 * next_attempt_at <= now) of the asked model (any of its names) from
 * in_progress, unexpired batches, in one transaction, with the ask clamped
 * to opts (lease seconds, max_requests, max_bytes; o NULL = defaults):
 * tenants with ready work are served round-robin one request at a time,
 * starting after the tenant served last for this model; within a tenant,
 * batches by lease_batch_cmp (priority desc, then earliest deadline first,
 * then oldest); within a batch, fresh
 * requests in line order, then due retries. Each pick is queued -> leased
 * under a new lease row; the pack is then ordered by lease_order_pack and
 * each item's endpoint filled. Nothing ready: 0 with out->n = 0 and out->id
 * "" (no lease row; the worker is still marked seen). ERR_NOTFOUND unknown
 * worker; ERR_INVAL bad ask or a model the worker did not register; store
 * errors. out->items is the caller's (store_lease_clear). (lease_policy.c) */
int lease_acquire(struct store *st, const struct lease_opts *o, const struct store_lease_ask *ask,
                  int64_t now, struct store_lease *out);

/* Extend (clamped to lease_s_max) and report the ids to stop. As
 * store_lease_heartbeat. */
int lease_heartbeat(struct store *st, const struct lease_opts *o, const char *lease_id,
                    const char *worker_id, int64_t extend_s, double tokens_per_s, int64_t now,
                    int64_t *expires_at, char (**stop_ids)[ID_MAX], size_t *n_stop);

/* Commit results with opts' retry policy. As store_results_commit. */
int lease_results_commit(struct store *st, const struct lease_opts *o, const char *lease_id,
                         const char *worker_id, const struct store_result *items, size_t n,
                         int64_t now, enum store_commit_outcome *outcomes);

/* Give requests back (ids NULL = all of the lease). As store_lease_release. */
int lease_release(struct store *st, const char *lease_id, const char *worker_id,
                  const char (*ids)[ID_MAX], size_t n, int64_t now, int64_t *n_released);

/* End every lease whose expires_at <= now (in batches of 100 leases). */
int lease_expire_sweep(struct store *st, const struct lease_opts *o, int64_t now,
                       struct store_sweep_report *rep);

/* Models served by live workers (GET /v1/models) and models waiting for one. */
int lease_models_served(struct store *st, const struct lease_opts *o, int64_t now,
                        struct store_model_served **items, size_t *n);
int lease_models_waiting(struct store *st, const struct lease_opts *o, int64_t now,
                         struct store_model_waiting **items, size_t *n);

/* The order of one tenant's batches for leasing (qsort comparator over
 * struct store_lease_cand): metadata priority desc, then expires_at asc
 * (earliest deadline first: a 1h batch submitted behind a 24h backlog is
 * served first), then batch id (oldest first). Fairness between tenants
 * stays round-robin: a deadline never lets one tenant take another's
 * share. Pure. */
int lease_batch_cmp(const void *a, const void *b);

/* Estimated completion of batch b (in_progress, with a model) at the
 * current throughput, into *eta (unix seconds, rounded up to a minute, so
 * the batch's ETag changes at most once a minute). The model: leasing
 * serves the tenant's batches in lease_batch_cmp order and shares the
 * model's throughput equally between the tenants that have work for it, so
 *
 *   eta = now + n_tenants * sum(remaining * tokens_per_request) / tokens_per_s
 *
 * summed over the tenant's batches served before b and b itself (see
 * store_backlog for the estimates; throughput is the sum of what the live
 * workers of the model last reported in heartbeats). Output tokens only:
 * prefill is not counted. ERR_NOTFOUND when it cannot be estimated (no live
 * worker has reported a throughput, or b is not in_progress); store errors. */
int lease_batch_eta(struct store *st, const struct lease_opts *o, const struct store_batch *b, int64_t now,
                    int64_t *eta);

/* ---- pack order (lease_policy.c; thread-safe) ---- */

/* 64-bit FNV-1a of the first prefix_bytes of a body's prompt text: for chat
 * bodies the concatenation of role "\n" content "\n" of each message (text
 * content parts included), for completions the prompt. Bodies that do not
 * parse hash their raw bytes. */
uint64_t lease_prefix_hash(const char *body, size_t len, size_t prefix_bytes);

/* Stable-sort a pack: groups of equal prefix hash (largest group first, ties
 * by hash), within a group by prompt_tokens_est then max_tokens. */
int lease_order_pack(struct store_lease *l, size_t prefix_bytes);

/* ---- protocol messages ---- */

#define LEASE_MSG_MAX_BYTES WPROTO_MSG_MAX_BYTES   /* JSON request bodies, 1 MiB */
#define LEASE_CHUNK_MAX_BYTES (64u << 20)       /* a results chunk, compressed */
#define LEASE_CHUNK_MAX_DECODED (256u << 20)    /* ... decompressed */
#define LEASE_LINE_MAX_BYTES WPROTO_LINE_MAX_BYTES /* one results line, 16 MiB */
#define LEASE_CHUNK_MAX_LINES STORE_LEASE_MAX_REQUESTS

/* A protocol error is a struct problem (common/problem.h): status (400,
 * 404, 409, 413...), code ("invalid_request", "stale_lease"... spec error
 * table), message, and line (results chunk: 1-based line, else 0). */

/* Map an ERR_* from a lease_* call to the spec's (status, code). */
void lease_error_from(int err, struct problem *e);

/* Parsed register message; strings borrowed from root. w.hourly_cost_micros
 * is -1 when the worker declared no price (the daemon resolves it with
 * fleet_cost_for before lease_worker_register, setting w.unpriced). */
struct lease_register {
    json_t *root;
    struct store_worker_new w;
    struct store_model_name models[STORE_WORKER_MAX_MODELS];
};
int lease_parse_register(const char *json, size_t len, struct lease_register *out,
                         struct problem *e);
void lease_register_release(struct lease_register *r);

/* Parsed lease ask; worker_id/model borrowed from root. */
struct lease_ask_msg {
    json_t *root;
    struct store_lease_ask ask;
    int64_t wait_ms; /* long-poll wish, 0..5000 */
};
int lease_parse_ask(const struct lease_opts *o, const char *json, size_t len,
                    struct lease_ask_msg *out, struct problem *e);
void lease_ask_release(struct lease_ask_msg *m);

struct lease_heartbeat_msg {
    json_t *root;
    const char *worker_id, *lease_id;
    int64_t extend_s;
    double tokens_per_s; /* -1 when not reported */
    int64_t completed;   /* progress: requests finished so far (informational) */
};
int lease_parse_heartbeat(const struct lease_opts *o, const char *json, size_t len,
                          struct lease_heartbeat_msg *out, struct problem *e);
void lease_heartbeat_release(struct lease_heartbeat_msg *m);

struct lease_release_msg {
    json_t *root;
    const char *worker_id, *lease_id;
    char (*ids)[ID_MAX]; /* heap; NULL = all */
    size_t n;
};
int lease_parse_release(const char *json, size_t len, struct lease_release_msg *out,
                        struct problem *e);
void lease_release_msg_release(struct lease_release_msg *m);

/* A parsed results chunk: items point into owned heap strings. */
struct lease_results {
    struct store_result *items;
    size_t n;
    char **owned; /* 3 per item: request_id, body, error */
};

/* Parse a results chunk: zstd-compressed JSONL when compressed != 0, else
 * plain JSONL (both capped as above). Each line is one result (spec); a
 * success body must be a JSON object and is re-serialised compactly; an
 * invalid_request error becomes the OpenAI error envelope. 0, or an ERR_*
 * with *e filled (ERR_PARSE 400 with the line number, ERR_TOOBIG 413,
 * ERR_CORRUPT 400 bad zstd). */
int lease_results_parse(const void *data, size_t len, int compressed, struct lease_results *out,
                        struct problem *e);
void lease_results_release(struct lease_results *r);

/* ---- answers (compact JSON appended to b) ---- */

int lease_write_register(struct buf *b, const struct lease_opts *o, const char *worker_id);
int lease_write_lease(struct buf *b, const struct lease_opts *o, const struct store_lease *l);
int lease_write_heartbeat(struct buf *b, const char *lease_id, int64_t expires_at,
                          char (*stop_ids)[ID_MAX], size_t n);
/* HTTP status of a results answer: 409 when there were items and every one
 * is STALE, else 200. */
int lease_commit_http_status(const enum store_commit_outcome *outcomes, size_t n);
int lease_write_commit(struct buf *b, const char *lease_id, const struct store_result *items,
                       const enum store_commit_outcome *outcomes, size_t n);
int lease_write_models(struct buf *b, const struct store_model_served *m, size_t n);
int lease_write_error(struct buf *b, const struct problem *e);

#endif
