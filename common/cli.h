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

#define CLI_LOG_OPTS(lg)                                                                  \
    {"log-level", "JOBD_LOG_LEVEL", CFG_STR, &(lg)->level, "LEVEL",                      \
     "debug, info, warn, error or off (default info)"},                                   \
    {"log-format", "JOBD_LOG_FORMAT", CFG_STR, &(lg)->format, "FMT",                     \
     "text or json: one line per event (default text)"}

/* Apply the logging options (log_init on fd 2). 0, or ERR_INVAL after
 * printing "prog: --log-level: ..." to stderr. */
int cli_log_apply(const char *prog, const struct cli_log *lg);

/* Print "prog: message" to stderr, with a hint line if hint is not NULL. */
void cli_error(const char *prog, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
