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
 * Values are checked while parsing: integers must be whole, sizes take binary
 * suffixes (512K, 64M, 2G, 1GiB), durations take units (250ms, 30s, 5m, 24h,
 * 7d; a bare number is seconds), and a number must lie in its option's range
 * (min..max) and fit its destination. A repeatable option (CFG_STR_LIST)
 * appends each occurrence. A bad value or unknown flag produces an error
 * message naming it. Not thread-safe (run at start).
 *
 * Tables bind options straight to the fields of the caller's config struct;
 * CFG_OPT takes the destination's size from the pointer, so an integer field
 * may be an int, an int64_t or a size_t:
 *
 *     CFG_OPT("db-threads", NULL, CFG_INT, &cfg.db_threads, "N", "threads", 1, 64)
 */
#ifndef COMMON_CFG_H
#define COMMON_CFG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Integer destinations (CFG_INT, CFG_SIZE, CFG_DURATION, CFG_DURATION_S) are
 * 4 or 8 bytes, signed or unsigned; a value must fit a signed integer of that
 * width (an unsigned field wants a range with min >= 0). */
enum cfg_type {
    CFG_STR,        /* dst: const char ** (points into argv or environ) */
    CFG_INT,        /* dst: integer */
    CFG_BOOL,       /* dst: int * */
    CFG_SIZE,       /* dst: integer, bytes */
    CFG_DURATION,   /* dst: integer, milliseconds */
    CFG_DURATION_S, /* dst: integer, whole seconds (the value truncated); the
                       range is in milliseconds, as for CFG_DURATION */
    CFG_STR_LIST,   /* dst: struct cfg_str_list *; repeatable, each occurrence
                       appends (the environment variable gives one item) */
};

/* Where a CFG_STR_LIST option collects its values: items[0..*n) point into
 * argv or environ. One more than cap items is an error ("--stop may be given
 * at most 4 times"). n points at the caller's count, so a list can be bound
 * to an array and its count field in a config struct; cfg only increments it. */
struct cfg_str_list {
    const char **items; /* cap slots, the caller's */
    size_t cap;
    size_t *n;
};

struct cfg_opt {
    const char *name;    /* flag without dashes: "listen" for --listen */
    const char *env;     /* environment variable, or NULL */
    enum cfg_type type;
    void *dst;
    size_t dst_size;     /* sizeof *dst: 4 or 8 for integers (CFG_OPT fills it) */
    const char *metavar; /* shown in usage: "ADDR:PORT" */
    const char *help;    /* one line */
    int64_t min, max;    /* integer kinds: the accepted values, inclusive, in the
                            parsed unit (bytes, milliseconds); min == max == 0: any
                            value that fits dst; max CFG_NO_MAX: no upper bound */
};

#define CFG_NO_MAX INT64_MAX

/* One table row. The optional last two arguments are the range (min, max). */
#define CFG_OPT(name, env, type, dst, metavar, ...) \
    CFG_OPT_(name, env, type, dst, metavar, __VA_ARGS__, 0, 0, 0)
#define CFG_OPT_(name, env, type, dst, metavar, help, min, max, ...) \
    {(name), (env), (type), (dst), sizeof *(dst), (metavar), (help), (min), (max)}

/* Parse argv[0..argc) (argv[0] is not skipped: pass argc-1, argv+1 to skip
 * the program name). positionals receives up to max_pos non-option
 * arguments (pointers into argv), *n_pos their count. Returns 0, or ERR_INVAL
 * with a one-line message in err ("unknown option '--x'", "--port: 'abc' is
 * not an integer", "--port 0 is out of range (1..65535)", "unexpected argument
 * 'x'"). On error destinations may have been partly written. */
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
/* An amount of money in decimal units ("2.5", "0.000001", "10") as exact
 * integer micro-units (millionths): digits, optionally '.' and 1..6
 * digits; no sign, no exponent. ERR_INVAL when malformed, more precise
 * than a micro-unit, or above max micro-units. */
int cfg_parse_micros(const char *s, int64_t max, int64_t *out);

/* ms as a duration cfg_parse_duration_ms reads back, in the largest unit that
 * divides it exactly ("30d", "90m", "1500ms", "0s"), into out. Can't fail
 * (truncates to out_len). */
void cfg_format_duration_ms(int64_t ms, char *out, size_t out_len);

#endif
