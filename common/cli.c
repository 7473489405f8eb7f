/* cli.c - shared main() helpers (see cli.h). */
#include "cli.h"

#include <stdarg.h>

#include "err.h"
#include "log.h"

#ifndef PROJECT_VERSION
#define PROJECT_VERSION "0.0.0"
#endif
#ifndef PROJECT_REV
#define PROJECT_REV "unknown"
#endif

void cli_print_version(const char *prog, FILE *out)
{
    fprintf(out, "%s %s (rev %s)\n", prog, PROJECT_VERSION, PROJECT_REV);
}

int cli_log_apply(const char *prog, const struct cli_log *lg)
{
    enum log_level level = LOG_INFO;
    enum log_format fmt = LOG_TEXT;
    if (lg->level && log_level_parse(lg->level, &level)) {
        cli_error(prog, "use debug, info, warn, error or off", "--log-level: unknown level '%s'",
                  lg->level);
        return ERR_INVAL;
    }
    if (lg->format && log_format_parse(lg->format, &fmt)) {
        cli_error(prog, "use text or json", "--log-format: unknown format '%s'", lg->format);
        return ERR_INVAL;
    }
    log_init(prog, level, fmt, 2);
    return 0;
}

int cli_start(const char *prog, const char *usage_text, const struct cfg_opt *opts, size_t n_opts,
              int argc, char **argv, char **pos, int max_pos, int *n_pos, struct cli_std *std)
{
    char err[512], hint[64];
    snprintf(hint, sizeof hint, "see %s --help", prog);
    if (cfg_parse(opts, n_opts, argc - 1, argv + 1, pos, max_pos, n_pos, err, sizeof err)) {
        cli_error(prog, hint, "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (std->help) {
        fputs(usage_text, stdout);
        cfg_usage(opts, n_opts, stdout);
        return CLI_EXIT_OK;
    }
    if (std->version) {
        cli_print_version(prog, stdout);
        return CLI_EXIT_OK;
    }
    return cli_log_apply(prog, &std->lg) ? CLI_EXIT_USAGE : -1;
}

void cli_error(const char *prog, const char *hint, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (hint)
        fprintf(stderr, "hint: %s\n", hint);
}
