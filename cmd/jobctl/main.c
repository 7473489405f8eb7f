/* jobctl - the command-line client of jobd (see README "jobctl"). Thin: find
 * the command word, hand the other arguments to it (the cmd/jobctl files), return
 * its exit code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/jobctl/jobctl.h"

static const char *usage_text =
    "usage: jobctl COMMAND [options]     (jobctl COMMAND --help for each)\n"
    "\n"
    "commands:\n"
    "  submit FILE.jsonl|-   submit a batch (POST /v1/jobs); prints its id;\n"
    "                        --dry-run: requests, tokens and cost range only\n"
    "  status ID             status, progress, counts, tokens, cost, ETA\n"
    "                        (warns when jobd estimates the deadline will be missed)\n"
    "  wait ID               wait until it ends; exit code = outcome\n"
    "  list                  your batches (--status, --limit; follows pages)\n"
    "  results ID [-o FILE]  the output file (JSONL), or --raw zstd bytes;\n"
    "                        --follow: lines as they commit, until the batch ends\n"
    "  errors ID [-o FILE]   the error file (JSONL)\n"
    "  cancel ID             cancel a batch\n"
    "  rerun ID [--only W]   new batch of an ended batch's failed (or all) lines\n"
    "  retry-dead ID|--batch ID   requeue dead-lettered requests\n"
    "  usage                 token usage and cost (--since --until --group-by --batch)\n"
    "  workers, models       what jobd's workers serve\n"
    "  files list|get|delete|content   the Files API\n"
    "\n"
    "Connection: --url / JOBD_URL (default http://127.0.0.1:8080), --api-key /\n"
    "JOBD_API_KEY, or a config file of 'key = value' lines (url, api_key) at\n"
    "--config / JOBCTL_CONFIG / ~/.config/jobctl/config. Flags win over the\n"
    "environment, the environment over the file. workers (and retry-dead, to\n"
    "act across tenants) take jobd's admin token: --admin-token /\n"
    "JOBD_ADMIN_TOKEN / admin_token in the file.\n"
    "\n"
    "exit codes:\n"
    "   0  ok; for wait/submit --wait: the batch completed, no request failed\n"
    "   1  other error (jobd answered 4xx/5xx, local I/O error)\n"
    "   2  usage error (bad command line or config file)\n"
    "  10  the batch completed, but some requests failed (jobctl errors ID)\n"
    "  11  the batch failed (its input was invalid)\n"
    "  12  the batch expired (finished results are still delivered)\n"
    "  13  the batch was cancelled\n"
    "  14  wait --timeout passed before the batch ended\n"
    "  20  jobd unreachable (connection refused, no answer)\n"
    "  21  authentication failed (bad or missing API key)\n"
    "  22  not found (no such batch/file/dead letter for this key)\n"
    "  23  this jobd does not serve the route (older jobd)\n"
    "\n"
    "example:\n"
    "  id=$(jobctl submit requests.jsonl) && jobctl wait \"$id\" && jobctl results \"$id\" -o out.jsonl\n"
    "\n"
    "options:\n";

struct command {
    const char *name;
    int (*run)(struct jc *, int, char **);
};

static const struct command commands[] = {
    {"submit", cmd_submit},   {"status", cmd_status},   {"wait", cmd_wait},
    {"list", cmd_list},       {"results", cmd_results}, {"errors", cmd_errors},
    {"cancel", cmd_cancel},   {"rerun", cmd_rerun},     {"retry-dead", cmd_retry_dead}, {"usage", cmd_usage},
    {"workers", cmd_workers}, {"models", cmd_models},   {"files", cmd_files},
};

/* Options that take a separate value (so the value is not the command word). */
static int takes_value(const char *a)
{
    static const char *const v[] = {"--url", "--api-key", "--admin-token", "--config", "--log-level", "--log-format"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(a, v[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int cmd_at = -1, help = 0, version = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            help = 1;
        else if (!strcmp(argv[i], "--version"))
            version = 1;
        else if (takes_value(argv[i]))
            i++;
        else if (argv[i][0] != '-') {
            cmd_at = i;
            break;
        }
    }
    if (cmd_at < 0) { /* only options: check them like any command would */
        struct jc jc;
        jc_init(&jc);
        struct cfg_opt opts[] = {
            CFG_OPT("version", NULL, CFG_BOOL, &version, NULL, "show the version"),
            JC_COMMON_OPTS(&jc),
        };
        char *pos[1];
        int n_pos = 0;
        char err[256];
        int rc = JC_EXIT_USAGE;
        if (cfg_parse(opts, sizeof opts / sizeof opts[0], argc - 1, argv + 1, pos, 1, &n_pos, err,
                      sizeof err))
            cli_error("jobctl", "see jobctl --help", "%s", err);
        else if (jc.help) {
            fputs(usage_text, stdout);
            cfg_usage(opts, sizeof opts / sizeof opts[0], stdout);
            rc = JC_EXIT_OK;
        } else if (version) {
            cli_print_version("jobctl", stdout);
            rc = JC_EXIT_OK;
        } else if (cli_log_apply("jobctl", &jc.lg) == 0) {
            cli_error("jobctl", "see jobctl --help", "no command given");
        }
        (void)help;
        return rc;
    }
    const char *name = argv[cmd_at];
    char *help_argv[2] = {"--help", NULL};
    int is_help_cmd = !strcmp(name, "help");
    if (is_help_cmd) {
        if (cmd_at + 1 >= argc) {
            fputs(usage_text, stdout);
            return JC_EXIT_OK;
        }
        name = argv[cmd_at + 1];
    }
    const struct command *c = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name))
            c = &commands[i];
    if (!c) {
        fprintf(stderr, "jobctl: unknown command '%s'\nhint: see jobctl --help\n", name);
        return JC_EXIT_USAGE;
    }
    /* the command's argv: everything but the command word */
    char **av = calloc((size_t)argc, sizeof *av);
    if (!av) {
        fputs("jobctl: out of memory\n", stderr);
        return JC_EXIT_FAIL;
    }
    int n = 0;
    if (is_help_cmd) {
        av[n++] = help_argv[0];
    } else {
        for (int i = 1; i < argc; i++)
            if (i != cmd_at)
                av[n++] = argv[i];
    }
    struct jc jc;
    jc_init(&jc);
    jc.cmd = c->name;
    int rc = c->run(&jc, n, av);
    jc_release(&jc);
    free(av);
    return rc;
}
