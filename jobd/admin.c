/* admin.c - `jobd keys create|list|revoke` on the store (see admin.h). */
#include "jobd/admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "jobd/store/store.h"

int jobd_keys_run(const char *data, const char *database, const char *tenant_name,
                  char *const *args, int n_args)
{
    const char *sub = n_args > 0 ? args[0] : "";
    if (strcmp(sub, "create") && strcmp(sub, "list") && strcmp(sub, "revoke")) {
        cli_error("jobd", "usage: jobd keys create|list|revoke ...", "unknown keys command '%s'", sub);
        return CLI_EXIT_USAGE;
    }
    if ((strcmp(sub, "create") == 0 && !tenant_name) || (strcmp(sub, "revoke") == 0 && n_args != 2)) {
        cli_error("jobd", "see jobd --help", "keys %s: %s", sub,
                  *sub == 'c' ? "--tenant NAME is required" : "give the key id to revoke");
        return CLI_EXIT_USAGE;
    }
    struct store *st = NULL;
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.database = database;
    int rc = store_open(data, &so, &st);
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
        rc = store_key_revoke(st, args[1], now);
        if (rc == ERR_NOTFOUND)
            cli_error("jobd", "see jobd keys list", "no key '%s'", args[1]);
        else if (!rc)
            fprintf(stderr, "jobd: revoked key %s\n", args[1]);
    }
    store_close(st);
    if (rc && rc != ERR_NOTFOUND && rc != ERR_INVAL)
        cli_error("jobd", NULL, "keys %s: %s", sub, err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
