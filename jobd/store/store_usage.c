/*
 * store_usage.c - usage reports over the usage_ledger (see store_usage.h).
 *
 * Two statements per report (STORE_SQL_ACCOUNT in store_int.h): the grouped
 * sums, ordered by key (one statement per grouping), and the range total.
 * Both read one snapshot (store_r_begin), so the groups always add up to the
 * total. Any thread, own connection.
 */
#include "jobd/store/store_usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

static const enum store_stmt_id group_stmt[] = {
    [STORE_USAGE_BATCH] = S_USAGE_BY_BATCH,
    [STORE_USAGE_MODEL] = S_USAGE_BY_MODEL,
    [STORE_USAGE_DAY] = S_USAGE_BY_DAY,
    [STORE_USAGE_TENANT] = S_USAGE_BY_TENANT,
};

static void row_sums(struct sdb_stmt *s, int c, struct store_usage_row *r)
{
    r->prompt_tokens = sdb_column_int64(s, c);
    r->completion_tokens = sdb_column_int64(s, c + 1);
    r->cached_tokens = sdb_column_int64(s, c + 2);
    r->requests = sdb_column_int64(s, c + 3);
    r->cost_micros = sdb_column_int64(s, c + 4);
    r->reused_tokens = sdb_column_int64(s, c + 5);
    r->reused_requests = sdb_column_int64(s, c + 6);
}

/* The kept statement id with the range bound (?1 tenant, ?2 since, ?3 until, ?5 batch). */
static int range_stmt(struct store *st, enum store_stmt_id id, const char *tenant_id, int64_t since,
                      int64_t until, const char *batch_id, struct sdb_stmt **out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_int(st, s, 2, since)) ||
        (rc = store_bind_int(st, s, 3, until)) || (rc = store_bind_text(st, s, 5, batch_id)))
        return rc;
    *out = s;
    return 0;
}

int store_usage_report(struct store *st, const char *tenant_id, int64_t since, int64_t until,
                       const char *batch_id, enum store_usage_group group, struct store_usage_row **rows, size_t *n,
                       int *has_more, struct store_usage_row *total)
{
    if ((unsigned)group > STORE_USAGE_TENANT)
        return ERR_INVAL;
    struct store_usage_row *v = NULL, tot;
    memset(&tot, 0, sizeof tot);
    size_t cnt = 0;
    int more = 0;
    struct sdb_stmt *s = NULL;
    int rc = store_r_begin(st);
    if (rc)
        return rc;
    if ((rc = range_stmt(st, group_stmt[group], tenant_id, since, until, batch_id, &s)) ||
        (rc = store_bind_int(st, s, 4, STORE_USAGE_MAX_ROWS + 1)))
        goto out;
    v = calloc(STORE_USAGE_MAX_ROWS, sizeof *v);
    if (!v) {
        rc = ERR_NOMEM;
        goto out;
    }
    int r;
    while ((r = sdb_step(s)) == SDB_ROW) {
        if (cnt == STORE_USAGE_MAX_ROWS) {
            more = 1;
            break;
        }
        struct store_usage_row *x = &v[cnt++];
        store_col_text(s, 0, x->key, sizeof x->key);
        x->start_time = sdb_column_int64(s, 1);
        if (group == STORE_USAGE_DAY)
            x->start_time -= x->start_time % 86400;
        row_sums(s, 2, x);
    }
    if (r != SDB_ROW && r != SDB_DONE) {
        rc = store_sqlerr(st, r, "usage report");
        goto out;
    }
    sdb_reset(s);
    s = NULL;
    if ((rc = range_stmt(st, S_USAGE_TOTAL, tenant_id, since, until, batch_id, &s)))
        goto out;
    if ((r = sdb_step(s)) != SDB_ROW) {
        rc = store_sqlerr(st, r, "usage total");
        goto out;
    }
    row_sums(s, 2, &tot);
out:
    if (s)
        sdb_reset(s);
    rc = store_r_end(st, rc);
    if (rc) {
        free(v);
        return rc;
    }
    *rows = v;
    *n = cnt;
    *has_more = more;
    *total = tot;
    return 0;
}
