/*
 * api.h - jobd's HTTP API (the /v1 routes, /healthz, /readyz, /metrics)
 * over a pool of store connections: what jobd/app.c calls.
 *
 * Design. api_new opens the store connections the API uses - one for the
 * loop thread (per-request authentication: one primary-key read of
 * api_keys; WAL readers never wait for writers) and one per thread-pool
 * thread, checked out by every route's database job (jobd/api/api_job.h),
 * so a checkout never waits - and decides the auth mode (below).
 * api_routes_add registers every route on an HTTP server. The threads the
 * routes talk to (ingest, sweeper, webhook senders) are started by the
 * owner after the routes exist and handed over with api_attach.
 *
 * Auth modes: keys exist in the database -> every /v1 route needs
 * "Authorization: Bearer <key>" (401 otherwise). No key and the listen
 * address is loopback -> single-tenant no-auth mode (tenant "default",
 * logged as a warning). No key and a non-loopback address -> refused
 * (ERR_AUTH). The mode is decided by api_new: restart after creating the
 * first key. Workers (/v1/worker/...) authenticate with the worker token,
 * admin routes with the admin token (constant-time comparisons); in no-auth
 * mode a route whose token is not configured is open, in keyed mode it
 * answers 401 (logged at start). See jobd/api/api_auth.h.
 *
 * Threads: every function here on the loop thread (the one that runs the
 * HTTP server).
 */
#ifndef JOBD_API_H
#define JOBD_API_H

#include <stdatomic.h>
#include <stdint.h>

#include "jobd/account/fleet.h"
#include "jobd/account/usage.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"
#include "jobd/work/lease.h"

struct api;
struct http_server;
struct ingestq;
struct sweeper;
struct tokens;
struct webhook_dispatcher;

/* completion_window bounds (POST /v1/batches, /v1/jobs): 1h .. 7d; OpenAI accepts only "24h" (the
 * default), the rest is our extension (deadlines, jobd/work/lease_policy.c); --window-min lowers the floor */
#define API_WINDOW_MIN_S 3600
#define API_WINDOW_MAX_S (7 * 86400)
/* a message batch's window: Anthropic's 24 h by default; --message-batch-window
 * sets it (--window-min .. 7d) */
#define API_MESSAGE_BATCH_WINDOW_S 86400
/* expires_after / output_expires_after seconds (OpenAI's range); --expiry-min lowers the floor */
#define API_EXPIRY_MIN_S 3600
#define API_EXPIRY_MAX_S (30 * 86400)

struct api_config {
    const char *data_dir;         /* the data directory (files/, tmp/ exist) */
    const char *host;             /* the listen host: decides the no-auth mode */
    struct store_opts store;      /* connections */
    const struct usage_prices *prices; /* budget estimates; NULL = everything costs 0 */
    const struct usage_prices *reference_prices; /* fleet view: a hosted API's prices to compare; NULL = none */
    const struct fleet_costs *worker_costs; /* hourly cost per worker name glob; NULL = as declared */
    struct ingest_limits limits;  /* JSONL limits: max_file_bytes caps uploads */
    uint64_t max_upload_bytes;    /* raw body of POST /v1/files and /v1/jobs */
    uint64_t max_json_bytes;      /* body of POST /v1/batches */
    int db_threads;               /* pooled connections (one per thread-pool thread) */
    int zstd_level;               /* stored files */
    const char *worker_token;     /* Bearer token of /v1/worker; NULL = none */
    const char *admin_token;      /* Bearer token of admin routes; NULL = none */
    struct lease_opts lease;      /* lease clamps, worker TTL */
    int64_t window_min_s;         /* smallest completion_window accepted */
    int64_t message_batch_window_s; /* POST /v1/messages/batches: expires_at - created_at */
    int64_t file_retention_s;     /* expiry of uploads and output files without their own; 0 = none */
    int64_t expiry_min_s;         /* smallest expires_after seconds accepted */
    struct tokens *tokens;        /* tokenizer-only loads for estimates; NULL = none (borrowed) */
    int webhook_allow_private;    /* skip the SSRF guard of webhook URLs */
};

/* Open the connections and decide the auth mode (logged). Returns 0 and
 * *out, ERR_AUTH (no key and a non-loopback host), ERR_NOMEM, or the
 * store's error (logged). */
int api_new(const struct api_config *cfg, struct api **out);

/* Register every route on srv (kept until api_free). 0 or
 * http_server_route's error. */
int api_routes_add(struct api *api, struct http_server *srv);

/* The counter of database writers on the pool that the ingest thread
 * yields to (ingestq_start's writers_waiting). Valid until api_free. */
atomic_int *api_writers(struct api *api);

/* Hand over the threads the routes use (each may be NULL: not running);
 * call again with NULLs before freeing them. Can't fail. */
void api_attach(struct api *api, struct ingestq *iq, struct sweeper *sw, struct webhook_dispatcher *wh);

/* On PostgreSQL the API keeps this many database connections (and pool
 * threads: the wiring adds them to UV_THREADPOOL_SIZE) beside --db-threads
 * for the jobs that do not write (GET routes), so reads do not queue behind
 * lease and result-commit jobs holding every pooled connection (measured:
 * bench/NOTES.md); a read job takes an idle --db-threads connection when
 * these are busy, and waits only while every connection is. SQLite: none
 * (its readers never wait for the writer). */
#define API_READ_CONNS 2

/* Shutdown began: /readyz answers 503, long polls answer at once. Can't fail. */
void api_drain(struct api *api);

/* Work may have become leasable (a database wake-up, jobd/work/wakeup.h):
 * every parked long-polling lease request runs again within
 * LONGPOLL_TICK_MS (routes_worker.c). Any thread; NULL ok. */
void api_wake_pollers(struct api *api);
/* Whether wake-ups arrive (the LISTEN connection is up): parked long polls
 * then re-read the queue only every 500 ms as a fallback instead of every
 * 200 ms. Any thread; NULL ok. */
void api_set_listening(struct api *api, int on);

/* Close every connection. Only after every request was answered (the
 * server's shutdown is done). NULL ok. */
void api_free(struct api *api);

#endif
