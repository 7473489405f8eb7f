/* jobd - the job daemon (see README and spec/). Thin: parse flags, call jobd/. */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "common/err.h"

static const char *usage_text =
    "usage: jobd [--listen ADDR:PORT] [--data DIR] [options]\n"
    "       jobd keys create|list|revoke --tenant NAME --data DIR\n"
    "\n"
    "The job daemon: accepts batch jobs over HTTP (OpenAI Batch API), keeps\n"
    "them in SQLite under --data, and hands them to workers.\n"
    "\n"
    "example: jobd --listen 127.0.0.1:8080 --data ./data\n"
    "\noptions:\n";

int main(int argc, char **argv)
{
    struct cli_log lg = {0};
    const char *listen = "127.0.0.1:8080", *data = "./data";
    int help = 0, version = 0;
    struct cfg_opt opts[] = {
        {"listen", "JOBD_LISTEN", CFG_STR, &listen, "ADDR:PORT", "where to serve HTTP (default 127.0.0.1:8080)"},
        {"data", "JOBD_DATA", CFG_STR, &data, "DIR", "data directory: database and files (default ./data)"},
        CLI_LOG_OPTS(&lg),
        {"help", NULL, CFG_BOOL, &help, NULL, "show this help"},
        {"version", NULL, CFG_BOOL, &version, NULL, "show the version"},
    };
    size_t n_opts = sizeof opts / sizeof opts[0];
    char err[256];
    char *pos[4];
    int n_pos = 0;
    if (cfg_parse(opts, n_opts, argc - 1, argv + 1, pos, 4, &n_pos, err, sizeof err)) {
        cli_error("jobd", "see jobd --help", "%s", err);
        return CLI_EXIT_USAGE;
    }
    if (help) {
        fputs(usage_text, stdout);
        cfg_usage(opts, n_opts, stdout);
        return CLI_EXIT_OK;
    }
    if (version) {
        cli_print_version("jobd", stdout);
        return CLI_EXIT_OK;
    }
    if (cli_log_apply("jobd", &lg))
        return CLI_EXIT_USAGE;
    if (n_pos > 0 && strcmp(pos[0], "keys") != 0) {
        cli_error("jobd", "see jobd --help", "unknown command '%s'", pos[0]);
        return CLI_EXIT_USAGE;
    }
    cli_error("jobd", "see README.md, feature status",
              "the daemon (HTTP API and store) is not built yet");
    return CLI_EXIT_FAIL;
}
