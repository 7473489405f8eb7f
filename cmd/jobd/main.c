/* jobd - the job daemon (see README and spec/). Thin: parse flags, call jobd/. */
#include <string.h>

#include "common/cli.h"
#include "common/err.h"
#include "jobd/account/fleet.h"
#include "jobd/account/usage.h"
#include "jobd/admin.h"
#include "jobd/app.h"
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

/* The command line: the daemon's config, bound field by field to the option
 * table, and the flags that need a word turned into a value first. */
struct jobd_flags {
    struct app_config ac;
    const char *tenant, *durability, *ui, *prices, *tokenizer, *reference_prices, *worker_costs;
    struct cli_std std;
    char *pos[4];
    int n_pos;
};

#define DUR_S(s) ((int64_t)(s) * 1000) /* a range bound of seconds, in cfg's milliseconds */

/* Defaults, then the environment and argv. -1 to go on, else the exit code. */
static int parse_flags(struct jobd_flags *f, int argc, char **argv)
{
    struct app_config *c = &f->ac;
    app_config_default(c);
    f->durability = "full";
    f->ui = "on";
    struct cfg_opt opts[] = {
        CFG_OPT("listen", "JOBD_LISTEN", CFG_STR, &c->listen, "ADDR:PORT", "where to serve HTTP (default 127.0.0.1:8080; port 0 = any free port)"),
        CFG_OPT("data", "JOBD_DATA", CFG_STR, &c->data_dir, "DIR", "data directory: database, files and scratch space (default ./data); with --database and --files s3://..., scratch only (each instance its own)"),
        CFG_OPT("files", "JOBD_FILES", CFG_STR, &c->files.url, "s3://BUCKET[/PREFIX]", "keep uploaded and result files in that S3-compatible bucket (path-style; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) instead of DIR/files, so jobd instances on several machines share them (README \"Scaling out\")"),
        CFG_OPT("s3-endpoint", "AWS_ENDPOINT_URL", CFG_STR, &c->files.endpoint, "URL", "the S3 server of --files, http[s]://HOST[:PORT] (default https://s3.REGION.amazonaws.com)"),
        CFG_OPT("s3-region", "AWS_REGION", CFG_STR, &c->files.region, "REGION", "the SigV4 signing region of --files (default us-east-1)"),
        CFG_OPT("database", "JOBD_DATABASE", CFG_STR, &c->store.database, "URL", "postgresql://USER[:PASSWORD]@HOST:PORT/DB: keep the state in that PostgreSQL database, so several jobd instances can share it (README \"Scaling out\"); default: SQLite, DIR/jobd.db"),
        CFG_OPT("db-statement-timeout", "JOBD_DB_STATEMENT_TIMEOUT", CFG_DURATION, &c->store.statement_timeout_ms, "DUR", "with --database: PostgreSQL cancels a statement of jobd's that runs longer (the call answers 503 + Retry-After); 0 = no limit (default 60s)", 0, DUR_S(86400)),
        CFG_OPT("durability", "JOBD_DURABILITY", CFG_STR, &f->durability, "full|normal",
                "full (default): every accepted request is synced to disk before the answer; normal: synced at checkpoints (survives a crash of jobd, not of the OS)"),
        CFG_OPT("max-upload", "JOBD_MAX_UPLOAD", CFG_SIZE, &c->max_upload_bytes, "SIZE", "request body of POST /v1/files and /v1/jobs (default 512M)"),
        CFG_OPT("max-file", "JOBD_MAX_FILE", CFG_SIZE, &c->limits.max_file_bytes, "SIZE", "input file size after decompression (default 512M)"),
        CFG_OPT("max-requests", "JOBD_MAX_REQUESTS", CFG_INT, &c->limits.max_requests, "N", "requests (lines) per batch (default 200000)", 1, CFG_NO_MAX),
        CFG_OPT("max-line", "JOBD_MAX_LINE", CFG_SIZE, &c->limits.max_line_bytes, "SIZE", "one JSONL line (default 4M)"),
        CFG_OPT("max-json", NULL, CFG_SIZE, &c->max_json_bytes, "SIZE", "JSON request bodies (default 1M)"),
        CFG_OPT("max-connections", "JOBD_MAX_CONNECTIONS", CFG_INT, &c->http.max_connections, "N", "open HTTP connections (default 4096)", 1, CFG_NO_MAX),
        CFG_OPT("max-streams", "JOBD_MAX_STREAMS", CFG_INT, &c->http.max_streams, "N", "streamed answers at once: decompressed file downloads, results streams; more answer 503 (default 256)", 1, CFG_NO_MAX),
        CFG_OPT("header-timeout", "JOBD_HEADER_TIMEOUT", CFG_DURATION, &c->http.header_timeout_ms, "DUR", "a request's header block must arrive within this (default 10s)"),
        CFG_OPT("body-timeout", "JOBD_BODY_TIMEOUT", CFG_DURATION, &c->http.body_timeout_ms, "DUR", "a body must make progress within this (default 30s)"),
        CFG_OPT("idle-timeout", "JOBD_IDLE_TIMEOUT", CFG_DURATION, &c->http.idle_timeout_ms, "DUR", "keep-alive idle connections are closed after this (default 60s)"),
        CFG_OPT("shutdown-timeout", NULL, CFG_DURATION, &c->http.shutdown_timeout_ms, "DUR", "on SIGTERM, in-flight requests get this long (default 30s)"),
        CFG_OPT("idempotency-retention", NULL, CFG_DURATION_S, &c->store.idem_retention_s, "DUR", "Idempotency-Key responses are kept this long (default 24h)", DUR_S(1), CFG_NO_MAX),
        CFG_OPT("db-threads", NULL, CFG_INT, &c->db_threads, "N", "threads (and database connections) for request handlers (default 4)", 1, 64),
        CFG_OPT("worker-token", "JOBD_WORKER_TOKEN", CFG_STR, &c->worker_token, "TOKEN", "Bearer token workers must present on /v1/worker/* (tenant keys are refused there); optional only in loopback no-auth mode"),
        CFG_OPT("admin-token", "JOBD_ADMIN_TOKEN", CFG_STR, &c->admin_token, "TOKEN", "Bearer token of the admin routes (GET /v1/workers, dead letters of every tenant); optional only in loopback no-auth mode"),
        CFG_OPT("sweep-interval", "JOBD_SWEEP_INTERVAL", CFG_DURATION, &c->sweep_interval_ms, "DUR", "how often lapsed leases are ended and finished batches finalized (default 2s; also right after results, cancels and at start)", 10, CFG_NO_MAX),
        CFG_OPT("max-attempts", NULL, CFG_INT, &c->lease.retry.max_attempts, "N", "attempts of a request before it is dead-lettered (default 3)", 1, 100),
        CFG_OPT("retry-backoff", NULL, CFG_DURATION_S, &c->lease.retry.backoff_base_s, "DUR", "first retry delay (doubling per attempt, capped at 600s; equal jitter) (default 10s)", DUR_S(1), CFG_NO_MAX),
        CFG_OPT("lease-min", NULL, CFG_DURATION_S, &c->lease.lease_s_min, "DUR", "shortest lease a worker may ask for (default 10s; tests use 1s)", DUR_S(1), DUR_S(c->lease.lease_s_max)),
        CFG_OPT("reuse", "JOBD_REUSE", CFG_BOOL, &c->lease.reuse_default, NULL,
                "answer deterministic requests (temperature 0 or a seed) from a result already committed for the same tenant, model file and backend, at zero cost, in every batch that does not set metadata \"reuse\": \"off\" (default: only batches with \"reuse\": \"on\")"),
        CFG_OPT("reuse-retention", "JOBD_REUSE_RETENTION", CFG_DURATION_S, &c->lease.reuse_retention_s, "DUR",
                "reusable results are kept (and reused) this long after they were computed (default 7d; 0 turns reuse off)", 0, DUR_S(365 * 86400)),
        CFG_OPT("window-min", NULL, CFG_DURATION_S, &c->window_min_s, "DUR", "shortest completion_window accepted (default 1h; tests use seconds)", DUR_S(1), CFG_NO_MAX),
        CFG_OPT("message-batch-window", "JOBD_MESSAGE_BATCH_WINDOW", CFG_DURATION_S, &c->message_batch_window_s, "DUR",
                "how long a message batch (POST /v1/messages/batches) may take before it expires (default 24h, Anthropic's; --window-min .. 7d)", DUR_S(1), DUR_S(7 * 86400)),
        CFG_OPT("file-retention", "JOBD_FILE_RETENTION", CFG_DURATION_S, &c->file_retention_s, "DUR",
                "delete uploaded input files and batch output/error files this long after they are created, unless the request set expires_after / output_expires_after (1h..30d; default: keep until deleted)", 0, DUR_S(30 * 86400)),
        CFG_OPT("expiry-min", NULL, CFG_DURATION_S, &c->expiry_min_s, "DUR", "shortest expires_after / output_expires_after / --file-retention accepted (default 1h; tests use seconds)", DUR_S(1), CFG_NO_MAX),
        CFG_OPT("port-file", NULL, CFG_STR, &c->port_file, "PATH", "write the bound port there once listening (for scripts and tests)"),
        CFG_OPT("webhook-allow-private", "JOBD_WEBHOOK_ALLOW_PRIVATE", CFG_BOOL, &c->webhook.allow_private, NULL,
                "allow webhook URLs that resolve to loopback, private, link-local or metadata addresses (local setups and tests; off by default: SSRF guard)"),
        CFG_OPT("webhook-timeout", NULL, CFG_DURATION, &c->webhook.timeout_ms, "DUR", "a webhook POST must answer 2xx within this (default 10s)", 1, CFG_NO_MAX),
        CFG_OPT("webhook-max-attempts", NULL, CFG_INT, &c->webhook.max_attempts, "N", "attempts per webhook delivery before it fails (default 10)", 1, 100),
        CFG_OPT("webhook-retry-base", NULL, CFG_DURATION, &c->webhook.retry_base_ms, "DUR", "first webhook retry delay; x4 per attempt, +-20% jitter (default 5s)"),
        CFG_OPT("webhook-retry-cap", NULL, CFG_DURATION, &c->webhook.retry_cap_ms, "DUR", "longest webhook retry delay (default 8h)"),
        CFG_OPT("webhook-disable-after", NULL, CFG_DURATION_S, &c->webhook.disable_after_s, "DUR", "disable an endpoint whose deliveries have all failed this long (default 5d)"),
        CFG_OPT("webhook-concurrency", NULL, CFG_INT, &c->webhook.concurrency, "N", "webhook POSTs in flight at once (default 4)", 1, 64),
        CFG_OPT("webhook-poll", NULL, CFG_DURATION, &c->webhook.poll_ms, "DUR", "how often idle webhook senders look for work (default 500ms)", 1, CFG_NO_MAX),
        CFG_OPT("prices", "JOBD_PRICES", CFG_STR, &f->prices, "MODEL=IN:OUT[:CACHED],...", "price per model in integer micro-dollars per 1M input/output/cached-input tokens (cached defaults to IN/2); unlisted models cost 0 (spec/usage.md)"),
        CFG_OPT("reference-prices", "JOBD_REFERENCE_PRICES", CFG_STR, &f->reference_prices, "MODEL=IN:OUT[:CACHED],...", "a hosted API's prices (same form as --prices) the fleet view compares its own cost with (spec/usage.md \"Fleet cost\")"),
        CFG_OPT("worker-costs", "JOBD_WORKER_COSTS", CFG_STR, &f->worker_costs, "NAME_GLOB=USD[/h],...", "hourly cost of the workers whose registered name matches the glob (first match wins over the worker's --hourly-cost), 0..10000 US dollars with at most 6 decimals"),
        CFG_OPT("ui", "JOBD_UI", CFG_STR, &f->ui, "on|off", "serve the web dashboard at /ui/ (default on; it calls the public API with the key typed into it)"),
        CFG_OPT("tokenizer", "JOBD_TOKENIZER", CFG_STR, &f->tokenizer, "MODEL=PATH.gguf,...",
                "GGUF files whose tokenizer and chat template jobd loads (tokenizer only, on first use) to count the input tokens of POST /v1/batches/estimate exactly as a worker would; other models are estimated as prompt bytes / 4"),
        CFG_OPT("tenant", NULL, CFG_STR, &f->tenant, "NAME", "keys create/list: the tenant (created if new)"),
        CLI_STD_OPTS(&f->std),
    };
    return cli_start("jobd", usage_text, opts, sizeof opts / sizeof opts[0], argc, argv, f->pos, 4,
                     &f->n_pos, &f->std);
}

/* The flags that name a value or depend on another flag. -1 when all are
 * good, else CLI_EXIT_USAGE after saying which is not. */
static int check_flags(struct jobd_flags *f)
{
    struct app_config *c = &f->ac;
    if (app_config_set_durability(c, f->durability)) {
        cli_error("jobd", "use full or normal", "--durability: unknown value '%s'", f->durability);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(f->ui, "on") != 0 && strcmp(f->ui, "off") != 0) {
        cli_error("jobd", "use on or off", "--ui: unknown value '%s'", f->ui);
        return CLI_EXIT_USAGE;
    }
    c->ui = strcmp(f->ui, "on") == 0;
    if (c->message_batch_window_s < c->window_min_s) {
        char got[32], lo[32];
        cfg_format_duration_ms(c->message_batch_window_s * 1000, got, sizeof got);
        cfg_format_duration_ms(c->window_min_s * 1000, lo, sizeof lo);
        cli_error("jobd", "see jobd --help", "--message-batch-window %s is out of range (%s..7d: at least --window-min)",
                  got, lo);
        return CLI_EXIT_USAGE;
    }
    if (c->file_retention_s && c->file_retention_s < c->expiry_min_s) {
        char got[32], lo[32];
        cfg_format_duration_ms(c->file_retention_s * 1000, got, sizeof got);
        cfg_format_duration_ms(c->expiry_min_s * 1000, lo, sizeof lo);
        cli_error("jobd", "see jobd --help", "--file-retention %s is out of range (%s..30d: at least --expiry-min)",
                  got, lo);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

/* jobd [options]: serve until SIGTERM. */
static int mode_serve(struct jobd_flags *f)
{
    struct app_config *c = &f->ac;
    int rc = check_flags(f);
    if (rc >= 0)
        return rc;
    struct usage_prices prices = {0};
    char perr[320] = "out of memory";
    if (usage_prices_parse(f->prices, &prices, perr, sizeof perr)) {
        cli_error("jobd", "see jobd --help", "--prices: %s", perr);
        return CLI_EXIT_USAGE;
    }
    c->prices = &prices;
    struct usage_prices ref = {0};
    static struct fleet_costs costs;
    if (usage_prices_parse(f->reference_prices, &ref, perr, sizeof perr)) {
        usage_prices_release(&prices);
        cli_error("jobd", "see jobd --help", "--reference-prices: %s", perr);
        return CLI_EXIT_USAGE;
    }
    if (fleet_costs_parse(f->worker_costs, &costs, perr, sizeof perr)) {
        usage_prices_release(&prices);
        usage_prices_release(&ref);
        cli_error("jobd", "see jobd --help", "--worker-costs: %s", perr);
        return CLI_EXIT_USAGE;
    }
    c->reference_prices = &ref;
    c->worker_costs = &costs;
    if (f->tokenizer && tokens_new(f->tokenizer, &c->tokens, perr, sizeof perr)) {
        usage_prices_release(&prices);
        usage_prices_release(&ref);
        cli_error("jobd", "see jobd --help", "%s", perr);
        return CLI_EXIT_USAGE;
    }
    rc = app_run(c);
    tokens_free(c->tokens);
    usage_prices_release(&prices);
    usage_prices_release(&ref);
    if (rc == ERR_AUTH)
        cli_error("jobd", "create a key: jobd keys create --tenant NAME --data DIR (or listen on 127.0.0.1)",
                  "refusing to serve %s without API keys", c->listen);
    else if (rc)
        cli_error("jobd", "see the log above", "jobd failed: %s", err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct jobd_flags f = {0};
    int rc = parse_flags(&f, argc, argv);
    if (rc >= 0)
        return rc;
    if (f.n_pos > 0 && strcmp(f.pos[0], "keys") != 0) {
        cli_error("jobd", "see jobd --help", "unknown command '%s'", f.pos[0]);
        return CLI_EXIT_USAGE;
    }
    if (app_config_set_database(&f.ac, f.ac.store.database)) {
        cli_error("jobd", "use postgresql://USER@HOST:PORT/DB, or leave it unset for SQLite in --data",
                  "--database: not a PostgreSQL URL");
        return CLI_EXIT_USAGE;
    }
    if (f.n_pos > 0)
        return jobd_keys_run(f.ac.data_dir, f.ac.store.database, f.tenant, f.pos + 1, f.n_pos - 1);
    return mode_serve(&f);
}
