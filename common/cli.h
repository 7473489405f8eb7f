/*
 * cli.h - the small things every binary's main() does the same way.
 *
 * --version text, the logging options (--log-level, --log-format, also from
 * JOBD_LOG_LEVEL / JOBD_LOG_FORMAT), and error exits. Main functions stay
 * thin: parse flags with cfg.h, call into a library, map errors to exit codes.
 */
#ifndef COMMON_CLI_H
#define COMMON_CLI_H

#include <stdio.h>

#include "cfg.h"

/* Exit codes shared by all binaries (jobctl adds its own above 10). */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1  /* the operation failed */
#define CLI_EXIT_USAGE 2 /* bad command line */

/* "jobd 0.1.0 (rev abc1234)" to out. */
void cli_print_version(const char *prog, FILE *out);

/* Logging option values, filled by the table entries of CLI_LOG_OPTS. */
struct cli_log {
    const char *level;  /* "info" unless set */
    const char *format; /* "text" unless set */
};

#define CLI_LOG_OPTS(lg)                                                    \
    CFG_OPT("log-level", "JOBD_LOG_LEVEL", CFG_STR, &(lg)->level, "LEVEL",  \
            "debug, info, warn, error or off (default info)"),              \
    CFG_OPT("log-format", "JOBD_LOG_FORMAT", CFG_STR, &(lg)->format, "FMT", \
            "text or json: one line per event (default text)")

/* Apply the logging options (log_init on fd 2). 0, or ERR_INVAL after
 * printing "prog: --log-level: ..." to stderr. */
int cli_log_apply(const char *prog, const struct cli_log *lg);

/* The options every binary's main() has: the logging pair, --help and
 * --version. Put CLI_STD_OPTS(&std) at the end of the option table. */
struct cli_std {
    struct cli_log lg;
    int help, version;
};

#define CLI_STD_OPTS(s)                                                                          \
    CLI_LOG_OPTS(&(s)->lg), CFG_OPT("help", NULL, CFG_BOOL, &(s)->help, NULL, "show this help"), \
        CFG_OPT("version", NULL, CFG_BOOL, &(s)->version, NULL, "show the version")

/* The start every main() shares: cfg_parse argv[1..] into opts (up to
 * max_pos positional arguments in pos, their count in *n_pos); then --help
 * prints usage_text and the option table to stdout, --version the version,
 * and the logging options are applied. Returns -1 when main should go on,
 * else the exit code to return (CLI_EXIT_OK after --help/--version,
 * CLI_EXIT_USAGE after printing "prog: ..." and a hint for a bad line). */
int cli_start(const char *prog, const char *usage_text, const struct cfg_opt *opts, size_t n_opts,
              int argc, char **argv, char **pos, int max_pos, int *n_pos, struct cli_std *std);

/* Print "prog: message" to stderr, with a hint line if hint is not NULL. */
void cli_error(const char *prog, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
