/* jobctl - the command-line client of jobd (see README). Thin: parse, call, map exit codes. */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "common/err.h"

static const char *usage_text =
    "usage: jobctl COMMAND [options]\n"
    "\n"
    "commands: submit, status, wait, list, results, errors, cancel, usage, workers\n"
    "JOBD_URL and JOBD_API_KEY come from the environment or --url / --api-key.\n"
    "\n"
    "example: id=$(jobctl submit requests.jsonl) && jobctl wait \"$id\"\n"
    "\noptions:\n";

int main(int argc, char **argv)
{
    struct cli_log lg = {0};
    const char *url = "http://127.0.0.1:8080", *api_key = NULL;
    int help = 0, version = 0;
    struct cfg_opt opts[] = {
        {"url", "JOBD_URL", CFG_STR, &url, "URL", "jobd's address (default http://127.0.0.1:8080)"},
        {"api-key", "JOBD_API_KEY", CFG_STR, &api_key, "KEY", "API key (Bearer)"},
        CLI_LOG_OPTS(&lg),
        {"help", NULL, CFG_BOOL, &help, NULL, "show this help"},
        {"version", NULL, CFG_BOOL, &version, NULL, "show the version"},
    };
    size_t n_opts = sizeof opts / sizeof opts[0];
    char err[256];
    char *pos[8];
    int n_pos = 0;
    if (cfg_parse(opts, n_opts, argc - 1, argv + 1, pos, 8, &n_pos, err, sizeof err)) {
        cli_error("jobctl", "see jobctl --help", "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (help) {
        fputs(usage_text, stdout);
        cfg_usage(opts, n_opts, stdout);
        return CLI_EXIT_OK;
    }
    if (version) {
        cli_print_version("jobctl", stdout);
        return CLI_EXIT_OK;
    }
    if (cli_log_apply("jobctl", &lg))
        return CLI_EXIT_USAGE;
    if (n_pos == 0) {
        cli_error("jobctl", "see jobctl --help", "no command given");
        return CLI_EXIT_USAGE;
    }
    cli_error("jobctl", "see README.md, feature status", "command '%s' is not built yet", pos[0]);
    return CLI_EXIT_FAIL;
}
