/*
 * app.h - the jobd daemon: configuration and the serve loop.
 *
 * app_run wires the pieces together: it opens the store in the data
 * directory, decides the auth mode, starts the ingest thread (jobd/intake/ingestq.h)
 * and the HTTP server (jobd/http/http.h) with the API routes (jobd/api/routes_*.c),
 * and runs the libuv loop until SIGTERM or SIGINT, then shuts down
 * gracefully: stop accepting, finish in-flight requests, stop the ingest
 * thread at a line boundary, close every database connection.
 *
 * Threads. The loop thread owns the server and does per-request
 * authentication (one primary-key read of api_keys through its own
 * connection: WAL readers never wait for writers). Every other database
 * access of a route runs on libuv's thread pool (http_req_queue_work) with a
 * connection checked out of a small pool (one per pool thread, so a
 * checkout never waits); ingestion runs on the ingest thread. So the loop
 * only parses, streams and answers, and GET /healthz stays fast while a
 * large file is being ingested.
 *
 * Auth modes: keys exist in the database -> every /v1 route needs
 * "Authorization: Bearer <key>" (401 otherwise). No key and every listen
 * address is loopback -> single-tenant no-auth mode (tenant "default",
 * logged as a warning). No key and a non-loopback address -> refused at
 * start (ERR_AUTH). The mode is decided at start: restart after creating
 * the first key.
 *
 * Workers (the /v1/worker/... routes) authenticate with the worker token
 * (--worker-token / JOBD_WORKER_TOKEN), never with a tenant key; admin
 * routes (GET /v1/workers, dead letters across tenants) with the admin
 * token (--admin-token / JOBD_ADMIN_TOKEN). Both are compared in constant
 * time. In no-auth mode a route whose token is not configured is open (a
 * configured token is still required); in keyed mode a route whose token is
 * not configured answers 401 (logged at start).
 */
#ifndef JOBD_APP_H
#define JOBD_APP_H

#include <stdint.h>

#include "jobd/http/http.h"
#include "jobd/intake/ingest.h"
#include "jobd/work/lease.h"
#include "jobd/store/store.h"
#include "jobd/webhook/webhook.h"

struct app_config {
    const char *listen;              /* "HOST:PORT" or "[V6]:PORT"; default "127.0.0.1:8080" */
    const char *data_dir;            /* default "./data" */
    struct store_opts store;         /* durability, busy timeout, idempotency retention */
    struct http_config http;         /* deadlines, caps (host/port come from listen) */
    struct ingest_limits limits;     /* JSONL validation limits */
    uint64_t max_upload_bytes;       /* raw body of POST /v1/files and /v1/jobs; default 512 MiB */
    uint64_t max_json_bytes;         /* body of POST /v1/batches; default 1 MiB */
    int db_threads;                  /* thread-pool threads / pooled connections; default 4 */
    int zstd_level;                  /* stored files; default 1 (fastest: uploads compress on the loop) */
    const char *port_file;           /* if set: the bound port is written there (tests) */
    /* work distribution (jobd/api/routes_worker.c, jobd/work/sweeper.h) */
    const char *worker_token;        /* Bearer token of the /v1/worker routes; NULL = none (see below) */
    const char *admin_token;         /* Bearer token of admin routes; NULL = none */
    struct lease_opts lease;         /* lease clamps, retry policy, worker TTL */
    int64_t sweep_interval_ms;       /* sweeper period; default 2000 */
    int64_t window_min_s;            /* smallest completion_window accepted; default 60 */
    struct webhook_config webhook;   /* webhook delivery: SSRF guard, timeout, retries (jobd/webhook/webhook.h) */
};

/* Fill the documented defaults. Can't fail. */
void app_config_default(struct app_config *cfg);

/* 1 if host (numeric or "localhost") is a loopback address. */
int app_host_is_loopback(const char *host);

/* Split "HOST:PORT" / "[V6]:PORT" / ":PORT" into host (cap bytes) and port.
 * 0 or ERR_INVAL. */
int app_parse_listen(const char *s, char *host, size_t cap, int *port);

/* Run the daemon until SIGTERM/SIGINT. Returns 0 after a clean shutdown,
 * ERR_AUTH (no keys on a non-loopback address), ERR_INVAL (bad config),
 * ERR_BUSY (address in use), or the store's error; each is logged. */
int app_run(const struct app_config *cfg);

#endif
