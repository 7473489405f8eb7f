/*
 * jobctl.h - what the files of cmd/jobctl share: the exit codes, the
 * connection settings, option parsing, and the HTTP calls to jobd.
 *
 * Design. main.c finds the command word and hands the rest of argv to the
 * command (submit.c, batches.c, admin.c). Every command parses its own
 * options with one cfg.h table that ends with JC_COMMON_OPTS, so --url,
 * --api-key, --config, --log-* and --help work everywhere and in any
 * position. client.c loads the optional config file (flags > environment >
 * file), builds URLs, makes the calls through common/httpc, and turns every
 * failure into one stderr line, a hint, and a documented exit code - the
 * only place that maps HTTP statuses to exit codes.
 *
 * Single-threaded (a command-line program).
 */
#ifndef CMD_JOBCTL_JOBCTL_H
#define CMD_JOBCTL_JOBCTL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/buf.h"
#include "common/cfg.h"
#include "common/cli.h"
#include "common/httpc.h"

/* Exit codes (documented in jobctl --help and README "jobctl"). */
#define JC_EXIT_OK 0           /* done; for wait: the batch completed without failed requests */
#define JC_EXIT_FAIL 1         /* any other error (a 4xx/5xx answer, a local I/O error) */
#define JC_EXIT_USAGE 2        /* bad command line or config file */
#define JC_EXIT_PARTIAL 10     /* the batch completed, but some requests failed */
#define JC_EXIT_FAILED 11      /* the batch failed (its input file was invalid) */
#define JC_EXIT_EXPIRED 12     /* the batch expired (finished results are still delivered) */
#define JC_EXIT_CANCELLED 13   /* the batch was cancelled */
#define JC_EXIT_TIMEOUT 14     /* wait --timeout passed before the batch ended */
#define JC_EXIT_UNREACHABLE 20 /* no answer from jobd (connection refused, timeout) */
#define JC_EXIT_AUTH 21        /* jobd refused the API key (401/403) */
#define JC_EXIT_NOTFOUND 22    /* no such batch/file/dead letter for this key (404) */
#define JC_EXIT_NOROUTE 23     /* this jobd does not serve the route (404 on the path) */

#define JC_ID_MAX 96 /* longest id accepted on the command line */

struct jc {
    const char *url;      /* jobd's base URL, without a trailing "/" or "/v1" */
    const char *api_key;  /* NULL: no Authorization header */
    const char *admin_token; /* --admin-token / JOBD_ADMIN_TOKEN / config admin_token */
    int admin;            /* 0: the API key only; 1: the admin token instead when one is set
                             (retry-dead); 2: the route wants the admin token (workers) */
    const char *config;   /* --config / JOBCTL_CONFIG: the file read (or NULL) */
    struct cli_log lg;
    int help;
    const char *cmd;      /* "submit", "files list"... for messages */
    char *file_url, *file_key, *file_admin; /* values from the config file (owned) */
    char base[1024];      /* normalised url */
};

/* The option entries every command accepts (append to its table). */
#define JC_COMMON_OPTS(jc)                                                                                    \
    CFG_OPT("url", "JOBD_URL", CFG_STR, &(jc)->url, "URL", "jobd's address (default http://127.0.0.1:8080)"), \
    CFG_OPT("api-key", "JOBD_API_KEY", CFG_STR, &(jc)->api_key, "KEY", "API key, sent as Bearer"),            \
    CFG_OPT("config", "JOBCTL_CONFIG", CFG_STR, &(jc)->config, "FILE",                                        \
            "config file of 'key = value' lines (default ~/.config/jobctl/config)"),                          \
    CLI_LOG_OPTS(&(jc)->lg),                                                                                  \
    CFG_OPT("help", NULL, CFG_BOOL, &(jc)->help, NULL, "show this help")

/* The admin-token option (workers, retry-dead): jobd's --admin-token. */
#define JC_ADMIN_OPT(jc)                                                             \
    CFG_OPT("admin-token", "JOBD_ADMIN_TOKEN", CFG_STR, &(jc)->admin_token, "TOKEN", \
            "jobd's admin token, sent as Bearer instead of the API key")

/* Set up jc (call once in main). */
void jc_init(struct jc *jc);
/* Free what jc_parse loaded. */
void jc_release(struct jc *jc);

/* Parse a command's argv (without the command word) with opts (ending in
 * JC_COMMON_OPTS): reads the config file first, then the environment and
 * the flags. Translates the short forms -o (--output) and -h (--help).
 * Positionals go to pos (max_pos of them); fewer than min_pos is a usage
 * error. Returns -1 to go on, or the exit code to return now (--help
 * printed: 0; a usage error printed: 2). */
int jc_parse(struct jc *jc, const char *usage, struct cfg_opt *opts, size_t n_opts, int argc,
             char **argv, char **pos, int max_pos, int min_pos, int *n_pos);

/* Print "jobctl CMD: message" and the hint to stderr; returns code. */
int jc_fail(const struct jc *jc, int code, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A usage error (exit 2) with the command's help hint. */
int jc_usage_error(const struct jc *jc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 0 when id is a plausible object id ([A-Za-z0-9_.-], 1..JC_ID_MAX-1 bytes);
 * else prints a usage error and returns 2. */
int jc_check_id(const struct jc *jc, const char *what, const char *id);

/* The batch id the OpenAI routes know: a message batch's "msgbatch_<x>"
 * (POST /v1/messages/batches, spec/anthropic.md) is the batch "batch_<x>",
 * so the id without its "msg"; any other id as it is. A pointer into id.
 * Can't fail. */
char *jc_batch_id(char *id);

/* Append s percent-encoded (RFC 3986 unreserved kept) to b. */
int jc_url_escape(struct buf *b, const char *s);

/* One call to jobd. path starts with "/" ("/v1/batches?limit=5"); extra
 * headers as for httpc (may be NULL); st may be NULL (no streaming) - then
 * body/len is the request body. Returns httpc's result; resp is filled. */
int jc_call(struct jc *jc, const struct httpc_opts *o, const char *method, const char *path,
            const char *const *headers, const void *body, size_t len,
            const struct httpc_stream *st, struct httpc_response *resp);

/* The default client options for small calls (30 s per attempt, 4 retries). */
void jc_opts_default(struct httpc_opts *o);

/* Check a call: 0 when rc is 0 and the status is 2xx (or 304 when
 * allow_304). Otherwise print one line and a hint, and return the exit code
 * (unreachable, auth, not found, missing route, other). what names the
 * object for 404s ("batch batch_01..."). */
int jc_check(const struct jc *jc, const char *method, const char *path, int rc,
             const struct httpc_response *r, const char *what, int allow_304);

/* The OpenAI error envelope's message and code of an answer ("" when it has
 * none; a short non-JSON body becomes the message). */
void jc_error_fields(const struct httpc_response *r, char *msg, size_t msg_len, char *code,
                     size_t code_len);

/* GET path, check, parse the JSON answer into *out. Returns 0 or an exit code. */
int jc_get_json(struct jc *jc, const char *path, const char *what, json_t **out);

/* Parse a response body as a JSON object (1 GiB cap, depth 64). 0 or an exit code. */
int jc_parse_json(const struct jc *jc, const struct httpc_response *r, json_t **out);

/* Print v as indented JSON to out, with a newline. */
void jc_print_json(const json_t *v, FILE *out, int indent);

/* "2026-11-30T15:49:05Z" (UTC) for unix seconds t; "-" for t <= 0. */
void jc_fmt_time(int64_t t, char *out, size_t out_len);

/* "$1.234567" for an amount in integer micro-dollars (exact; "-" when negative). */
void jc_fmt_micros(int64_t micros, char *out, size_t out_len);

/* "3m20s", "2h05m", "45s" for a duration in seconds. */
void jc_fmt_duration(int64_t s, char *out, size_t out_len);

/* Stream a file's content (GET /v1/files/ID/content) to output (NULL or "-":
 * stdout; else written to OUTPUT.tmp and renamed on success). raw: ask for
 * and write the stored zstd stream. Returns 0 or an exit code. */
int jc_download(struct jc *jc, const char *file_id, const char *output, int raw);

/* The exit code of a terminal batch object (completed/failed/...), or -1 when
 * the batch has not ended. */
int jc_batch_outcome(const json_t *batch);

/* Poll a batch until it ends (see cmd_wait); interval_ms between polls (at
 * least Retry-After), timeout_ms 0 = forever; json_out: print the final
 * object on stdout. Returns the outcome exit code. */
int jc_wait(struct jc *jc, const char *id, int64_t interval_ms, int64_t timeout_ms, int json_out);

/* The commands: argv excludes the command word. Return the exit code. */
int cmd_submit(struct jc *jc, int argc, char **argv);
int cmd_status(struct jc *jc, int argc, char **argv);
int cmd_wait(struct jc *jc, int argc, char **argv);
int cmd_list(struct jc *jc, int argc, char **argv);
int cmd_results(struct jc *jc, int argc, char **argv);
int cmd_errors(struct jc *jc, int argc, char **argv);
int cmd_cancel(struct jc *jc, int argc, char **argv);
int cmd_rerun(struct jc *jc, int argc, char **argv);
int cmd_retry_dead(struct jc *jc, int argc, char **argv);
int cmd_usage(struct jc *jc, int argc, char **argv);
int cmd_workers(struct jc *jc, int argc, char **argv);
int cmd_models(struct jc *jc, int argc, char **argv);
int cmd_files(struct jc *jc, int argc, char **argv);

#endif
