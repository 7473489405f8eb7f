/*
 * cfg.h - configuration from command-line flags and environment variables.
 *
 * A binary describes its options once, as a table of struct cfg_opt; cfg_parse
 * fills the destinations from the environment first and then from the flags,
 * so flags win. Flags are "--name value" or "--name=value"; booleans are
 * "--name" (true) or "--name=true|false"; "--" ends the options. Arguments
 * that are not options are collected in order as positionals, so options may
 * come before or after them ("jobctl submit f.jsonl --wait").
 *
 * Values are checked while parsing: integers must be whole and in range,
 * sizes take binary suffixes (512K, 64M, 2G, 1GiB), durations take units
 * (250ms, 30s, 5m, 24h, 7d; a bare number is seconds). A bad value or unknown
 * flag produces an error message naming it. Not thread-safe (run at start).
 */
#ifndef COMMON_CFG_H
#define COMMON_CFG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cfg_type {
    CFG_STR,      /* dst: const char ** (points into argv or environ) */
    CFG_INT,      /* dst: int64_t * */
    CFG_BOOL,     /* dst: int * */
    CFG_SIZE,     /* dst: uint64_t *, bytes */
    CFG_DURATION, /* dst: int64_t *, milliseconds */
};

struct cfg_opt {
    const char *name;    /* flag without dashes: "listen" for --listen */
    const char *env;     /* environment variable, or NULL */
    enum cfg_type type;
    void *dst;
    const char *metavar; /* shown in usage: "ADDR:PORT" */
    const char *help;    /* one line */
};

/* Parse argv[0..argc) (argv[0] is not skipped: pass argc-1, argv+1 to skip
 * the program name). positionals receives up to max_pos non-option
 * arguments (pointers into argv), *n_pos their count. Returns 0, or ERR_INVAL
 * with a one-line message in err ("unknown option '--x'", "--port: 'abc' is
 * not an integer", "too many arguments"). On error destinations may have been
 * partly written. */
int cfg_parse(const struct cfg_opt *opts, size_t n_opts, int argc, char **argv,
              char **positionals, int max_pos, int *n_pos, char *err, size_t err_len);

/* Print "  --name METAVAR   help [env: NAME]" lines for the table. */
void cfg_usage(const struct cfg_opt *opts, size_t n_opts, FILE *out);

/* Value parsers, also used for API inputs ("completion_window": "24h").
 * Each returns 0 or ERR_INVAL (malformed, negative, or overflowing). */
int cfg_parse_int(const char *s, int64_t *out);
int cfg_parse_size(const char *s, uint64_t *out);
int cfg_parse_duration_ms(const char *s, int64_t *out);
int cfg_parse_bool(const char *s, int *out);

#endif
