/* admin.c - `jobd keys create|list|revoke` on the store (see admin.h). */
#include "jobd/admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "jobd/store/store.h"

/* The tenant named name (created first if create and new); ERR_NOTFOUND and
 * ERR_INVAL after saying why. */
static int keys_tenant(struct store *st, const char *name, int create, int64_t now,
                       struct store_tenant *t)
{
    int rc = store_tenant_get_by_name(st, name, t);
    if (rc == ERR_NOTFOUND && create) {
        rc = store_tenant_create(st, name, now, t);
        if (rc == ERR_INVAL)
            cli_error("jobd", "use 1-64 characters of A-Z a-z 0-9 . _ -", "bad tenant name '%s'", name);
    } else if (rc == ERR_NOTFOUND) {
        cli_error("jobd", NULL, "no tenant '%s'", name);
    }
    return rc;
}

static int keys_create(struct store *st, const struct store_tenant *t, int64_t now)
{
    char key[STORE_KEY_MAX];
    struct store_key info;
    int rc = store_key_create(st, t->id, now, key, &info);
    if (!rc) {
        printf("%s\n", key);
        fprintf(stderr, "jobd: created key %s for tenant %s; it is shown only this once\n", info.id,
                t->name);
    }
    return rc;
}

/* tenant_id NULL: every tenant's keys. */
static int keys_list(struct store *st, const char *tenant_id)
{
    struct store_key *keys = NULL;
    size_t n = 0;
    int rc = store_key_list(st, tenant_id, &keys, &n);
    if (rc)
        return rc;
    printf("%-12s %-20s %-20s %-26s %s\n", "KEY ID", "PREFIX", "TENANT", "CREATED", "REVOKED");
    for (size_t i = 0; i < n; i++) {
        char c[CLOCK_ISO_LEN], r[CLOCK_ISO_LEN] = "-";
        clock_iso8601(keys[i].created_at * 1000, c, sizeof c);
        if (keys[i].revoked_at)
            clock_iso8601(keys[i].revoked_at * 1000, r, sizeof r);
        printf("%-12s %-20s %-20s %-26s %s\n", keys[i].id, keys[i].prefix, keys[i].tenant_name, c, r);
    }
    free(keys);
    return 0;
}

static int keys_revoke(struct store *st, const char *key_id, int64_t now)
{
    int rc = store_key_revoke(st, key_id, now);
    if (rc == ERR_NOTFOUND)
        cli_error("jobd", "see jobd keys list", "no key '%s'", key_id);
    else if (!rc)
        fprintf(stderr, "jobd: revoked key %s\n", key_id);
    return rc;
}

int jobd_keys_run(const char *data, const char *database, const char *tenant_name,
                  char *const *args, int n_args)
{
    const char *sub = n_args > 0 ? args[0] : "";
    int create = strcmp(sub, "create") == 0, list = strcmp(sub, "list") == 0;
    if (!create && !list && strcmp(sub, "revoke") != 0) {
        cli_error("jobd", "usage: jobd keys create|list|revoke ...", "unknown keys command '%s'", sub);
        return CLI_EXIT_USAGE;
    }
    if ((create && !tenant_name) || (!create && !list && n_args != 2)) {
        cli_error("jobd", "see jobd --help", "keys %s: %s", sub,
                  create ? "--tenant NAME is required" : "give the key id to revoke");
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
    if (tenant_name)
        rc = keys_tenant(st, tenant_name, create, now, &t);
    if (!rc)
        rc = create ? keys_create(st, &t, now) : list ? keys_list(st, tenant_name ? t.id : NULL)
                                                       : keys_revoke(st, args[1], now);
    store_close(st);
    if (rc && rc != ERR_NOTFOUND && rc != ERR_INVAL)
        cli_error("jobd", NULL, "keys %s: %s", sub, err_msg(rc));
    return rc ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
