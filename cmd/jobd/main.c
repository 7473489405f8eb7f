/* jobd - the job daemon (see README and spec/). Thin: parse flags, call jobd/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "jobd/account/usage.h"
#include "jobd/app.h"
#include "jobd/store/store.h"
#include "jobd/tokens/tokens.h"

static const char *usage_text =
    "usage: jobd [--listen ADDR:PORT] [--data DIR] [options]\n"
    "       jobd keys create --tenant NAME --data DIR   (prints a new API key once)\n"
    "       jobd keys list [--tenant NAME] --data DIR\n"
    "       jobd keys revoke KEYID --data DIR\n"
    "\n"
    "The job daemon: accepts batch jobs over HTTP (OpenAI Batch API), keeps\n"
    "them in SQLite under --data, and hands them to workers.\n"
    "\n"
    "example: jobd --listen 127.0.0.1:8080 --data ./data\n"
    "\noptions:\n";

/* jobd keys create|list|revoke: admin commands working directly on the
 * database in the data directory (the daemon need not run). */
static int keys_main(const char *data, const char *database, const char *tenant_name, char **pos, int n_pos)
{
    const char *sub = n_pos > 1 ? pos[1] : "";
    if (strcmp(sub, "create") && strcmp(sub, "list") && strcmp(sub, "revoke")) {
        cli_error("jobd", "usage: jobd keys create|list|revoke ...", "unknown keys command '%s'", sub);
        return CLI_EXIT_USAGE;
    }
    if ((strcmp(sub, "create") == 0 && !tenant_name) || (strcmp(sub, "revoke") == 0 && n_pos != 3)) {
        cli_error("jobd", "see jobd --help", "keys %s: %s", sub,
                  *sub == 'c' ? "--tenant NAME is required" : "give the key id to revoke");
        return CLI_EXIT_USAGE;
    }
    struct store *st = NULL;
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.database = database;
    int rc = store_open(data, &so, &st);
    if (rc) {
        cli_error("jobd", "check --data", "cannot open the database in '%s': %s", data, err_msg(rc));
        return CLI_EXIT_FAIL;
    }
    int64_t now = clock_wall_s();
    struct store_tenant t = {0};
    if (tenant_name) {
        rc = store_tenant_get_by_name(st, tenant_name, &t);
        if (rc == ERR_NOTFOUND && strcmp(sub, "create") == 0) {
            rc = store_tenant_create(st, tenant_name, now, &t);
            if (rc == ERR_INVAL)
                cli_error("jobd", "use 1-64 characters of A-Z a-z 0-9 . _ -", "bad tenant name '%s'",
                          tenant_name);
        } else if (rc == ERR_NOTFOUND) {
            cli_error("jobd", NULL, "no tenant '%s'", tenant_name);
        }
    }
    if (!rc && strcmp(sub, "create") == 0) {
        char key[STORE_KEY_MAX];
        struct store_key info;
        if (!(rc = store_key_create(st, t.id, now, key, &info))) {
            printf("%s\n", key);
            fprintf(stderr, "jobd: created key %s for tenant %s; it is shown only this once\n",
                    info.id, t.name);
        }
    } else if (!rc && strcmp(sub, "list") == 0) {
        struct store_key *keys = NULL;
        size_t n = 0;
        if (!(rc = store_key_list(st, tenant_name ? t.id : NULL, &keys, &n))) {
            printf("%-12s %-20s %-20s %-26s %s\n", "KEY ID", "PREFIX", "TENANT", "CREATED", "REVOKED");
            for (size_t i = 0; i < n; i++) {
                char c[CLOCK_ISO_LEN], r[CLOCK_ISO_LEN] = "-";
                clock_iso8601(keys[i].created_at * 1000, c, sizeof c);
                if (keys[i].revoked_at)
                    clock_iso8601(keys[i].revoked_at * 1000, r, sizeof r);
                printf("%-12s %-20s %-20s %-26s %s\n", keys[i].id, keys[i].prefix, keys[i].tenant_name,
                       c, r);
            }
            free(keys);
        }
    } else if (!rc) {
        rc = store_key_revoke(st, pos[2], now);
        if (rc == ERR_NOTFOUND)
            cli_error("jobd", "see jobd keys list", "no key '%s'", pos[2]);
        else if (!rc)
            fprintf(stderr, "jobd: revoked key %s\n", pos[2]);
    }
    store_close(st);
    if (rc && rc != ERR_NOTFOUND && rc != ERR_INVAL)
        cli_error("jobd", NULL, "keys %s: %s", sub, err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct cli_std std = {0};
    struct app_config ac;
    app_config_default(&ac);
    const char *listen = ac.listen, *data = ac.data_dir, *tenant = NULL, *durability = "full";
    const char *port_file = NULL, *database = NULL;
    int64_t header_ms = (int64_t)ac.http.header_timeout_ms, body_ms = (int64_t)ac.http.body_timeout_ms;
    int64_t idle_ms = (int64_t)ac.http.idle_timeout_ms, shutdown_ms = (int64_t)ac.http.shutdown_timeout_ms;
    int64_t idem_ms = ac.store.idem_retention_s * 1000, max_conns = (int64_t)ac.http.max_connections;
    int64_t max_requests = ac.limits.max_requests, db_threads = ac.db_threads;
    uint64_t max_upload = ac.max_upload_bytes, max_file = ac.limits.max_file_bytes;
    uint64_t max_json = ac.max_json_bytes, max_line = ac.limits.max_line_bytes;
    const char *worker_token = NULL, *admin_token = NULL;
    int64_t sweep_ms = ac.sweep_interval_ms, window_min_ms = ac.window_min_s * 1000;
    int64_t retention_ms = 0, expiry_min_ms = ac.expiry_min_s * 1000;
    int64_t lease_min_ms = ac.lease.lease_s_min * 1000, backoff_ms = ac.lease.retry.backoff_base_s * 1000;
    int64_t max_attempts = ac.lease.retry.max_attempts;
    int wh_private = 0;
    int64_t wh_timeout_ms = ac.webhook.timeout_ms, wh_attempts = ac.webhook.max_attempts;
    int64_t wh_base_ms = ac.webhook.retry_base_ms, wh_cap_ms = ac.webhook.retry_cap_ms;
    int64_t wh_disable_ms = ac.webhook.disable_after_s * 1000, wh_conc = ac.webhook.concurrency;
    int64_t wh_poll_ms = ac.webhook.poll_ms;
    const char *prices_spec = NULL, *tokenizer_spec = NULL;
    const char *ui = "on";
    struct cfg_opt opts[] = {
        {"listen", "JOBD_LISTEN", CFG_STR, &listen, "ADDR:PORT", "where to serve HTTP (default 127.0.0.1:8080; port 0 = any free port)"},
        {"data", "JOBD_DATA", CFG_STR, &data, "DIR", "data directory: database and files (default ./data); with --database, the files only, on a POSIX file system every jobd instance shares"},
        {"database", "JOBD_DATABASE", CFG_STR, &database, "URL", "postgresql://USER[:PASSWORD]@HOST:PORT/DB: keep the state in that PostgreSQL database, so several jobd instances can share it (README \"Scaling out\"); default: SQLite, DIR/jobd.db"},
        {"durability", "JOBD_DURABILITY", CFG_STR, &durability, "full|normal",
         "full (default): every accepted request is synced to disk before the answer; normal: synced at checkpoints (survives a crash of jobd, not of the OS)"},
        {"max-upload", "JOBD_MAX_UPLOAD", CFG_SIZE, &max_upload, "SIZE", "request body of POST /v1/files and /v1/jobs (default 512M)"},
        {"max-file", "JOBD_MAX_FILE", CFG_SIZE, &max_file, "SIZE", "input file size after decompression (default 512M)"},
        {"max-requests", "JOBD_MAX_REQUESTS", CFG_INT, &max_requests, "N", "requests (lines) per batch (default 200000)"},
        {"max-line", "JOBD_MAX_LINE", CFG_SIZE, &max_line, "SIZE", "one JSONL line (default 4M)"},
        {"max-json", NULL, CFG_SIZE, &max_json, "SIZE", "JSON request bodies (default 1M)"},
        {"max-connections", "JOBD_MAX_CONNECTIONS", CFG_INT, &max_conns, "N", "open HTTP connections (default 4096)"},
        {"header-timeout", "JOBD_HEADER_TIMEOUT", CFG_DURATION, &header_ms, "DUR", "a request's header block must arrive within this (default 10s)"},
        {"body-timeout", "JOBD_BODY_TIMEOUT", CFG_DURATION, &body_ms, "DUR", "a body must make progress within this (default 30s)"},
        {"idle-timeout", "JOBD_IDLE_TIMEOUT", CFG_DURATION, &idle_ms, "DUR", "keep-alive idle connections are closed after this (default 60s)"},
        {"shutdown-timeout", NULL, CFG_DURATION, &shutdown_ms, "DUR", "on SIGTERM, in-flight requests get this long (default 30s)"},
        {"idempotency-retention", NULL, CFG_DURATION, &idem_ms, "DUR", "Idempotency-Key responses are kept this long (default 24h)"},
        {"db-threads", NULL, CFG_INT, &db_threads, "N", "threads (and database connections) for request handlers (default 4)"},
        {"worker-token", "JOBD_WORKER_TOKEN", CFG_STR, &worker_token, "TOKEN", "Bearer token workers must present on /v1/worker/* (tenant keys are refused there); optional only in loopback no-auth mode"},
        {"admin-token", "JOBD_ADMIN_TOKEN", CFG_STR, &admin_token, "TOKEN", "Bearer token of the admin routes (GET /v1/workers, dead letters of every tenant); optional only in loopback no-auth mode"},
        {"sweep-interval", "JOBD_SWEEP_INTERVAL", CFG_DURATION, &sweep_ms, "DUR", "how often lapsed leases are ended and finished batches finalized (default 2s; also right after results, cancels and at start)"},
        {"max-attempts", NULL, CFG_INT, &max_attempts, "N", "attempts of a request before it is dead-lettered (default 3)"},
        {"retry-backoff", NULL, CFG_DURATION, &backoff_ms, "DUR", "first retry delay (doubling per attempt, capped at 600s; equal jitter) (default 10s)"},
        {"lease-min", NULL, CFG_DURATION, &lease_min_ms, "DUR", "shortest lease a worker may ask for (default 10s; tests use 1s)"},
        {"window-min", NULL, CFG_DURATION, &window_min_ms, "DUR", "shortest completion_window accepted (default 1h; tests use seconds)"},
        {"file-retention", "JOBD_FILE_RETENTION", CFG_DURATION, &retention_ms, "DUR",
         "delete uploaded input files and batch output/error files this long after they are created, unless the request set expires_after / output_expires_after (1h..30d; default: keep until deleted)"},
        {"expiry-min", NULL, CFG_DURATION, &expiry_min_ms, "DUR", "shortest expires_after / output_expires_after / --file-retention accepted (default 1h; tests use seconds)"},
        {"port-file", NULL, CFG_STR, &port_file, "PATH", "write the bound port there once listening (for scripts and tests)"},
        {"webhook-allow-private", "JOBD_WEBHOOK_ALLOW_PRIVATE", CFG_BOOL, &wh_private, NULL,
         "allow webhook URLs that resolve to loopback, private, link-local or metadata addresses (local setups and tests; off by default: SSRF guard)"},
        {"webhook-timeout", NULL, CFG_DURATION, &wh_timeout_ms, "DUR", "a webhook POST must answer 2xx within this (default 10s)"},
        {"webhook-max-attempts", NULL, CFG_INT, &wh_attempts, "N", "attempts per webhook delivery before it fails (default 10)"},
        {"webhook-retry-base", NULL, CFG_DURATION, &wh_base_ms, "DUR", "first webhook retry delay; x4 per attempt, +-20% jitter (default 5s)"},
        {"webhook-retry-cap", NULL, CFG_DURATION, &wh_cap_ms, "DUR", "longest webhook retry delay (default 8h)"},
        {"webhook-disable-after", NULL, CFG_DURATION, &wh_disable_ms, "DUR", "disable an endpoint whose deliveries have all failed this long (default 5d)"},
        {"webhook-concurrency", NULL, CFG_INT, &wh_conc, "N", "webhook POSTs in flight at once (default 4)"},
        {"webhook-poll", NULL, CFG_DURATION, &wh_poll_ms, "DUR", "how often idle webhook senders look for work (default 500ms)"},
        {"prices", "JOBD_PRICES", CFG_STR, &prices_spec, "MODEL=IN:OUT[:CACHED],...", "price per model in integer micro-dollars per 1M input/output/cached-input tokens (cached defaults to IN/2); unlisted models cost 0 (spec/usage.md)"},
        {"ui", "JOBD_UI", CFG_STR, &ui, "on|off", "serve the web dashboard at /ui/ (default on; it calls the public API with the key typed into it)"},
        {"tokenizer", "JOBD_TOKENIZER", CFG_STR, &tokenizer_spec, "MODEL=PATH.gguf,...",
         "GGUF files whose tokenizer and chat template jobd loads (tokenizer only, on first use) to count the input tokens of POST /v1/batches/estimate exactly as a worker would; other models are estimated as prompt bytes / 4"},
        {"tenant", NULL, CFG_STR, &tenant, "NAME", "keys create/list: the tenant (created if new)"},
        CLI_STD_OPTS(&std),
    };
    char *pos[4];
    int n_pos = 0;
    int start = cli_start("jobd", usage_text, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 4,
                          &n_pos, &std);
    if (start >= 0)
        return start;
    if (n_pos > 0 && strcmp(pos[0], "keys") != 0) {
        cli_error("jobd", "see jobd --help", "unknown command '%s'", pos[0]);
        return CLI_EXIT_USAGE;
    }
    if (database && !*database)
        database = NULL;
    if (database && !store_database_is_pg(database)) {
        cli_error("jobd", "use postgresql://USER@HOST:PORT/DB, or leave it unset for SQLite in --data",
                  "--database: not a PostgreSQL URL");
        return CLI_EXIT_USAGE;
    }
    ac.store.database = database;
    /* PostgreSQL inserts a row per round trip (~4x SQLite's ingest time on a
     * shared 2-core box): smaller ingest transactions keep each hold of the
     * write lock well under the 5 s lock timeout API writers wait (issue 19:
     * batched inserts are the real fix) */
    if (database)
        ac.limits.rows_per_tx = 2000;
    if (n_pos > 0)
        return keys_main(data, database, tenant, pos, n_pos);
    if (strcmp(durability, "full") == 0) {
        ac.store.durability = STORE_DURABILITY_FULL;
    } else if (strcmp(durability, "normal") == 0) {
        ac.store.durability = STORE_DURABILITY_NORMAL;
    } else {
        cli_error("jobd", "use full or normal", "--durability: unknown value '%s'", durability);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(ui, "on") != 0 && strcmp(ui, "off") != 0) {
        cli_error("jobd", "use on or off", "--ui: unknown value '%s'", ui);
        return CLI_EXIT_USAGE;
    }
    ac.ui = strcmp(ui, "on") == 0;
    if (max_requests < 1 || max_conns < 1 || db_threads < 1 || db_threads > 64 || idem_ms < 1000 ||
        header_ms < 0 || body_ms < 0 || idle_ms < 0 || shutdown_ms < 0 || sweep_ms < 10 ||
        max_attempts < 1 || max_attempts > 100 || backoff_ms < 1000 || lease_min_ms < 1000 ||
        lease_min_ms > ac.lease.lease_s_max * 1000 || window_min_ms < 1000 || wh_timeout_ms < 1 ||
        wh_attempts < 1 || wh_attempts > 100 || wh_base_ms < 0 || wh_cap_ms < 0 || wh_disable_ms < 0 ||
        wh_conc < 1 || wh_conc > 64 || wh_poll_ms < 1 || expiry_min_ms < 1000 ||
        (retention_ms && (retention_ms < expiry_min_ms || retention_ms > 30LL * 86400 * 1000))) {
        cli_error("jobd", "see jobd --help", "a limit is out of range");
        return CLI_EXIT_USAGE;
    }
    ac.listen = listen;
    ac.data_dir = data;
    ac.port_file = port_file;
    ac.max_upload_bytes = max_upload;
    ac.max_json_bytes = max_json;
    ac.limits.max_file_bytes = max_file;
    ac.limits.max_requests = max_requests;
    ac.limits.max_line_bytes = (size_t)max_line;
    ac.http.max_connections = (size_t)max_conns;
    ac.http.header_timeout_ms = (uint64_t)header_ms;
    ac.http.body_timeout_ms = (uint64_t)body_ms;
    ac.http.idle_timeout_ms = (uint64_t)idle_ms;
    ac.http.shutdown_timeout_ms = (uint64_t)shutdown_ms;
    ac.store.idem_retention_s = idem_ms / 1000;
    ac.db_threads = (int)db_threads;
    ac.worker_token = worker_token;
    ac.admin_token = admin_token;
    ac.sweep_interval_ms = sweep_ms;
    ac.window_min_s = window_min_ms / 1000;
    ac.file_retention_s = retention_ms / 1000;
    ac.expiry_min_s = expiry_min_ms / 1000;
    ac.lease.lease_s_min = lease_min_ms / 1000;
    ac.lease.retry.backoff_base_s = backoff_ms / 1000;
    ac.lease.retry.max_attempts = (int)max_attempts;
    ac.webhook.allow_private = wh_private;
    ac.webhook.timeout_ms = wh_timeout_ms;
    ac.webhook.max_attempts = (int)wh_attempts;
    ac.webhook.retry_base_ms = wh_base_ms;
    ac.webhook.retry_cap_ms = wh_cap_ms;
    ac.webhook.disable_after_s = wh_disable_ms / 1000;
    ac.webhook.concurrency = (int)wh_conc;
    ac.webhook.poll_ms = wh_poll_ms;
    struct usage_prices prices = {0};
    char perr[320] = "out of memory";
    if (usage_prices_parse(prices_spec, &prices, perr, sizeof perr)) {
        cli_error("jobd", "see jobd --help", "--prices: %s", perr);
        return CLI_EXIT_USAGE;
    }
    ac.prices = &prices;
    struct tokens *toks = NULL;
    if (tokenizer_spec && tokens_new(tokenizer_spec, &toks, perr, sizeof perr)) {
        usage_prices_release(&prices);
        cli_error("jobd", "see jobd --help", "%s", perr);
        return CLI_EXIT_USAGE;
    }
    ac.tokens = toks;
    int rc = app_run(&ac);
    tokens_free(toks);
    usage_prices_release(&prices);
    if (rc == ERR_AUTH)
        cli_error("jobd", "create a key: jobd keys create --tenant NAME --data DIR (or listen on 127.0.0.1)",
                  "refusing to serve %s without API keys", listen);
    else if (rc)
        cli_error("jobd", "see the log above", "jobd failed: %s", err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
