/* jobd - the job daemon (see README and spec/). Thin: parse flags, call jobd/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "jobd/store.h"

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

/* jobd keys create|list|revoke: admin commands working directly on the
 * database in the data directory (the daemon need not run). */
static int keys_main(const char *data, const char *tenant_name, char **pos, int n_pos)
{
    const char *sub = n_pos > 1 ? pos[1] : "";
    if (strcmp(sub, "create") && strcmp(sub, "list") && strcmp(sub, "revoke")) {
        cli_error("jobd", "usage: jobd keys create|list|revoke ...", "unknown keys command '%s'", sub);
        return CLI_EXIT_USAGE;
    }
    if ((strcmp(sub, "create") == 0 && !tenant_name) || (strcmp(sub, "revoke") == 0 && n_pos != 3)) {
        cli_error("jobd", "see jobd --help", "keys %s: %s", sub,
                  *sub == 'c' ? "--tenant NAME is required" : "give the key id to revoke");
        return CLI_EXIT_USAGE;
    }
    struct store *st = NULL;
    int rc = store_open(data, NULL, &st);
    if (rc) {
        cli_error("jobd", "check --data", "cannot open the database in '%s': %s", data, err_msg(rc));
        return CLI_EXIT_FAIL;
    }
    int64_t now = clock_wall_s();
    struct store_tenant t = {0};
    if (tenant_name) {
        rc = store_tenant_get_by_name(st, tenant_name, &t);
        if (rc == ERR_NOTFOUND && strcmp(sub, "create") == 0) {
            rc = store_tenant_create(st, tenant_name, now, &t);
            if (rc == ERR_INVAL)
                cli_error("jobd", "use 1-64 characters of A-Z a-z 0-9 . _ -", "bad tenant name '%s'",
                          tenant_name);
        } else if (rc == ERR_NOTFOUND) {
            cli_error("jobd", NULL, "no tenant '%s'", tenant_name);
        }
    }
    if (!rc && strcmp(sub, "create") == 0) {
        char key[STORE_KEY_MAX];
        struct store_key info;
        if (!(rc = store_key_create(st, t.id, now, key, &info))) {
            printf("%s\n", key);
            fprintf(stderr, "jobd: created key %s for tenant %s; it is shown only this once\n",
                    info.id, t.name);
        }
    } else if (!rc && strcmp(sub, "list") == 0) {
        struct store_key *keys = NULL;
        size_t n = 0;
        if (!(rc = store_key_list(st, tenant_name ? t.id : NULL, &keys, &n))) {
            printf("%-12s %-20s %-20s %-26s %s\n", "KEY ID", "PREFIX", "TENANT", "CREATED", "REVOKED");
            for (size_t i = 0; i < n; i++) {
                char c[CLOCK_ISO_LEN], r[CLOCK_ISO_LEN] = "-";
                clock_iso8601(keys[i].created_at * 1000, c, sizeof c);
                if (keys[i].revoked_at)
                    clock_iso8601(keys[i].revoked_at * 1000, r, sizeof r);
                printf("%-12s %-20s %-20s %-26s %s\n", keys[i].id, keys[i].prefix, keys[i].tenant_name,
                       c, r);
            }
            free(keys);
        }
    } else if (!rc) {
        rc = store_key_revoke(st, pos[2], now);
        if (rc == ERR_NOTFOUND)
            cli_error("jobd", "see jobd keys list", "no key '%s'", pos[2]);
        else if (!rc)
            fprintf(stderr, "jobd: revoked key %s\n", pos[2]);
    }
    store_close(st);
    if (rc && rc != ERR_NOTFOUND && rc != ERR_INVAL)
        cli_error("jobd", NULL, "keys %s: %s", sub, err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    struct cli_log lg = {0};
    const char *listen = "127.0.0.1:8080", *data = "./data", *tenant = NULL;
    int help = 0, version = 0;
    struct cfg_opt opts[] = {
        {"listen", "JOBD_LISTEN", CFG_STR, &listen, "ADDR:PORT", "where to serve HTTP (default 127.0.0.1:8080)"},
        {"data", "JOBD_DATA", CFG_STR, &data, "DIR", "data directory: database and files (default ./data)"},
        {"tenant", NULL, CFG_STR, &tenant, "NAME", "keys create/list: the tenant (created if new)"},
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
    if (n_pos > 0)
        return keys_main(data, tenant, pos, n_pos);
    cli_error("jobd", "see README.md, feature status",
              "the daemon (HTTP API and store) is not built yet");
    return CLI_EXIT_FAIL;
}
