/*
 * store_usage.c - usage reports over the usage_ledger (see store_usage.h).
 *
 * Two statements per report, prepared per call (reports are rare, and this
 * keeps them out of the kept-statement lists): the grouped sums, ordered by
 * key, and the range total. Both read one snapshot (a read transaction), so
 * the groups always add up to the total. Any thread, own connection.
 */
#include "jobd/store/store_usage.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

static const char *const group_key[] = {
    [STORE_USAGE_BATCH] = "batch_id",
    [STORE_USAGE_MODEL] = "model",
    [STORE_USAGE_DAY] = "strftime('%Y-%m-%d', created_at, 'unixepoch')",
    [STORE_USAGE_TENANT] = "tenant_id",
};

#define SUMS "COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), " \
             "COALESCE(SUM(cached_tokens), 0), COUNT(*), COALESCE(SUM(cost_micros), 0)"
#define WHERE "WHERE (?1 IS NULL OR tenant_id = ?1) AND created_at >= ?2 AND created_at < ?3"

static void row_sums(sqlite3_stmt *s, int c, struct store_usage_row *r)
{
    r->prompt_tokens = sqlite3_column_int64(s, c);
    r->completion_tokens = sqlite3_column_int64(s, c + 1);
    r->cached_tokens = sqlite3_column_int64(s, c + 2);
    r->requests = sqlite3_column_int64(s, c + 3);
    r->cost_micros = sqlite3_column_int64(s, c + 4);
}

static int prep(struct store *st, const char *sql, const char *tenant_id, int64_t since,
                int64_t until, sqlite3_stmt **out)
{
    sqlite3_stmt *s = NULL;
    int r = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (r != SQLITE_OK)
        return store_sqlerr(st, r, "usage report prepare");
    int rc;
    if ((rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_int(st, s, 2, since)) ||
        (rc = store_bind_int(st, s, 3, until))) {
        sqlite3_finalize(s);
        return rc;
    }
    *out = s;
    return 0;
}

int store_usage_report(struct store *st, const char *tenant_id, int64_t since, int64_t until,
                       enum store_usage_group group, struct store_usage_row **rows, size_t *n,
                       int *has_more, struct store_usage_row *total)
{
    if ((unsigned)group > STORE_USAGE_TENANT)
        return ERR_INVAL;
    char sql[512];
    int len = snprintf(sql, sizeof sql,
                       "SELECT %s AS k, MIN(created_at), " SUMS " FROM usage_ledger " WHERE
                       " GROUP BY k ORDER BY k LIMIT %d",
                       group_key[group], STORE_USAGE_MAX_ROWS + 1);
    if (len < 0 || (size_t)len >= sizeof sql)
        return ERR_INTERNAL;
    struct store_usage_row *v = NULL, tot;
    memset(&tot, 0, sizeof tot);
    size_t cnt = 0;
    int more = 0;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK ? 0 : ERR_BUSY;
    if (rc)
        return rc;
    if ((rc = prep(st, sql, tenant_id, since, until, &s)))
        goto out;
    v = calloc(STORE_USAGE_MAX_ROWS, sizeof *v);
    if (!v) {
        rc = ERR_NOMEM;
        goto out;
    }
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        if (cnt == STORE_USAGE_MAX_ROWS) {
            more = 1;
            break;
        }
        struct store_usage_row *x = &v[cnt++];
        store_col_text(s, 0, x->key, sizeof x->key);
        x->start_time = sqlite3_column_int64(s, 1);
        if (group == STORE_USAGE_DAY)
            x->start_time -= x->start_time % 86400;
        row_sums(s, 2, x);
    }
    if (r != SQLITE_ROW && r != SQLITE_DONE) {
        rc = store_sqlerr(st, r, "usage report");
        goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
    if ((rc = prep(st, "SELECT 0, 0, " SUMS " FROM usage_ledger " WHERE, tenant_id, since, until, &s)))
        goto out;
    if ((r = sqlite3_step(s)) != SQLITE_ROW) {
        rc = store_sqlerr(st, r, "usage total");
        goto out;
    }
    row_sums(s, 2, &tot);
out:
    sqlite3_finalize(s);
    sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
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
