/*
 * app.h - the jobd daemon: configuration and the serve loop.
 *
 * app_run is the wiring: it makes the data directory, creates the API over
 * its store connections (jobd/api/api.h: the auth mode is decided there),
 * the HTTP server (jobd/http/http.h) with the API's routes, then starts the
 * threads the routes hand work to - the ingest thread (jobd/intake/ingestq.h),
 * the sweeper (jobd/work/sweeper.h) and the webhook senders
 * (jobd/webhook/webhook.h) - and runs the libuv loop until SIGTERM or
 * SIGINT. Then it shuts down gracefully: stop accepting, finish in-flight
 * requests, stop the ingest thread at a line boundary, the sweeper between
 * two transactions, the senders after the POST in flight, and close every
 * database connection.
 *
 * Threads. The loop thread owns the server, parses, streams and answers;
 * every route's database work runs on libuv's thread pool (db_threads
 * threads, one pooled connection each, plus two for file I/O), so GET
 * /healthz stays fast while a large file is being ingested.
 */
#ifndef JOBD_APP_H
#define JOBD_APP_H

#include <stdint.h>

#include "jobd/account/fleet.h"
#include "jobd/account/usage.h"
#include "jobd/blob/blob.h"
#include "jobd/http/http.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"
#include "jobd/webhook/webhook.h"
#include "jobd/work/lease.h"

struct tokens;

struct app_config {
    const char *listen;              /* "HOST:PORT" or "[V6]:PORT"; default "127.0.0.1:8080" */
    const char *data_dir;            /* default "./data" */
    struct store_opts store;         /* durability, busy timeout, idempotency retention (the
                                        cost hook is set by app_run from prices) */
    const struct usage_prices *prices; /* per-model prices (results, budget estimates); NULL = all 0 */
    const struct usage_prices *reference_prices; /* --reference-prices (fleet view); NULL = none */
    const struct fleet_costs *worker_costs; /* --worker-costs; NULL = each worker's declaration */
    struct http_config http;         /* deadlines, caps (host/port come from listen) */
    struct ingest_limits limits;     /* JSONL validation limits */
    uint64_t max_upload_bytes;       /* raw body of POST /v1/files and /v1/jobs; default 512 MiB */
    uint64_t max_json_bytes;         /* body of POST /v1/batches; default 1 MiB */
    int db_threads;                  /* thread-pool threads / pooled connections; default 4 */
    int zstd_level;                  /* stored files; default 1 (fastest: uploads compress on the loop) */
    const char *port_file;           /* if set: the bound port is written there (tests) */
    /* work distribution (jobd/api/routes_worker.c, jobd/work/sweeper.h) */
    const char *worker_token;        /* Bearer token of the /v1/worker routes; NULL = none (jobd/api/api.h) */
    const char *admin_token;         /* Bearer token of admin routes; NULL = none */
    struct lease_opts lease;         /* lease clamps, retry policy, worker TTL */
    int64_t sweep_interval_ms;       /* sweeper period; default 2000 */
    int64_t window_min_s;            /* smallest completion_window accepted; default 60 */
    int64_t message_batch_window_s;  /* a message batch's window (expires_at - created_at); default 86400 */
    int64_t file_retention_s;        /* default expiry of uploads and output files (s after creation); 0 = none (default) */
    int64_t expiry_min_s;            /* smallest expires_after / output_expires_after seconds; default 3600 */
    struct webhook_config webhook;   /* webhook delivery: SSRF guard, timeout, retries (jobd/webhook/webhook.h) */
    int ui;                          /* serve the dashboard under /ui/ (jobd/ui/ui.h); default 1 */
    struct tokens *tokens;           /* --tokenizer: exact counts for estimates (jobd/tokens/tokens.h); NULL = none */
    struct blob_config files;        /* where file bytes live (jobd/blob/blob.h): url NULL = the data
                                        directory (default); "s3://BUCKET/PREFIX" with endpoint,
                                        region and credentials (AWS_* env); data_dir is set by app_run */
};

/* Fill the documented defaults. Can't fail. */
void app_config_default(struct app_config *cfg);

/* Keep the state in the PostgreSQL database at url (NULL or "": SQLite in
 * the data directory, the default); PostgreSQL also gets smaller ingest
 * transactions (limits.rows_per_tx 2000). url is borrowed. 0, or ERR_INVAL
 * (not a postgresql:// or postgres:// URL; cfg unchanged). */
int app_config_set_database(struct app_config *cfg, const char *url);

/* store.durability from its name: "full" or "normal". 0, or ERR_INVAL
 * (another name; cfg unchanged). */
int app_config_set_durability(struct app_config *cfg, const char *name);

/* Split "HOST:PORT" / "[V6]:PORT" / ":PORT" into host (cap bytes) and port.
 * 0 or ERR_INVAL. */
int app_parse_listen(const char *s, char *host, size_t cap, int *port);

/* Run the daemon until SIGTERM/SIGINT. Returns 0 after a clean shutdown,
 * ERR_AUTH (no keys on a non-loopback address), ERR_INVAL (bad config;
 * credentials the file store refuses), ERR_CONN / ERR_NOTFOUND (the S3
 * file store is unreachable / has no such bucket),
 * ERR_BUSY (address in use), or the store's error; each is logged (except
 * a bad --db-threads, which the command line checks first). */
int app_run(const struct app_config *cfg);

#endif
