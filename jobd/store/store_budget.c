/*
 * store_budget.c - tenant limits, budget use, batch reservations and the
 * usage totals (see store_budget.h). Statements: STORE_SQL_ACCOUNT in
 * store_int.h.
 */
#include "jobd/store/store_budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

static int bind_opt(struct store *st, struct sdb_stmt *s, int i, int has, int64_t v)
{
    if (!has) {
        int r = sdb_bind_null(s, i);
        return r == SDB_OK ? 0 : store_sqlerr(st, r, "bind");
    }
    return store_bind_int(st, s, i, v);
}

int store_limits_get(struct store *st, const char *tenant_id, struct store_limits *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_LIMITS_GET, &rc);
    if (!s)
        return rc;
    struct store_limits l;
    memset(&l, 0, sizeof l);
    if (!(rc = store_bind_text(st, s, 1, tenant_id))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            l.has_queued_tokens = sdb_column_type(s, 0) != SDB_NULL;
            l.max_queued_tokens = sdb_column_int64(s, 0);
            l.has_daily = sdb_column_type(s, 1) != SDB_NULL;
            l.max_daily_micros = sdb_column_int64(s, 1);
            l.has_monthly = sdb_column_type(s, 2) != SDB_NULL;
            l.max_monthly_micros = sdb_column_int64(s, 2);
            l.updated_at = sdb_column_int64(s, 3);
        } else if (r != SDB_DONE) {
            rc = store_sqlerr(st, r, "get limits");
        }
    }
    sdb_reset(s);
    if (!rc)
        *out = l;
    return rc;
}

int store_limits_put(struct store *st, const char *tenant_id, const struct store_limits *l, int64_t now)
{
    if ((l->has_queued_tokens && l->max_queued_tokens < 0) || (l->has_daily && l->max_daily_micros < 0) ||
        (l->has_monthly && l->max_monthly_micros < 0))
        return ERR_INVAL;
    struct store_tenant t;
    int rc = store_tenant_get(st, tenant_id, &t);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_LIMITS_PUT, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, tenant_id)) &&
        !(rc = bind_opt(st, s, 2, l->has_queued_tokens, l->max_queued_tokens)) &&
        !(rc = bind_opt(st, s, 3, l->has_daily, l->max_daily_micros)) &&
        !(rc = bind_opt(st, s, 4, l->has_monthly, l->max_monthly_micros)) &&
        !(rc = store_bind_int(st, s, 5, now)))
        rc = store_step_done(st, s, "put limits");
    return store_w_end(st, rc);
}

/* Column 0 (and 1 when out1) of the one row of statement id, which binds
 * the tenant as ?1 and, when it has one, arg as ?2. */
static int scalar(struct store *st, enum store_stmt_id id, const char *tenant_id, int64_t arg,
                  int64_t *out0, int64_t *out1)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s)
        return rc;
    if (!(rc = store_bind_text(st, s, 1, tenant_id)) &&
        (sdb_bind_parameter_count(s) < 2 || !(rc = store_bind_int(st, s, 2, arg)))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            *out0 = sdb_column_int64(s, 0);
            if (out1)
                *out1 = sdb_column_int64(s, 1);
        } else {
            rc = store_sqlerr(st, r, "budget use");
        }
    }
    sdb_reset(s);
    return rc;
}

int store_budget_use(struct store *st, const char *tenant_id, int64_t day_start, int64_t month_start,
                     struct store_budget_use *out)
{
    struct store_budget_use u;
    memset(&u, 0, sizeof u);
    int rc;
    if ((rc = scalar(st, S_BUDGET_RESERVED, tenant_id, 0, &u.queued_tokens, &u.reserved_micros)) ||
        (rc = scalar(st, S_BUDGET_SPENT, tenant_id, day_start, &u.spent_day_micros, NULL)) ||
        (rc = scalar(st, S_BUDGET_SPENT, tenant_id, month_start, &u.spent_month_micros, NULL)))
        return rc;
    *out = u;
    return 0;
}

int store_batch_reserve(struct store *st, const char *batch_id, int64_t tokens, int64_t micros,
                        int64_t price_in, int64_t price_out)
{
    if (tokens < 0 || micros < 0 || price_in < 0 || price_out < 0)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_RESERVE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, batch_id)) && !(rc = store_bind_int(st, s, 2, tokens)) &&
        !(rc = store_bind_int(st, s, 3, micros)) && !(rc = store_bind_int(st, s, 4, price_in)) &&
        !(rc = store_bind_int(st, s, 5, price_out)) && !(rc = store_step_done(st, s, "reserve")) &&
        sdb_changes(st->db) == 0)
        rc = ERR_NOTFOUND;
    return store_w_end(st, rc);
}

int store_usage_totals(struct store *st, size_t max_rows, struct store_usage_total **items, size_t *n)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_USAGE_TOTALS, &rc);
    if (!s)
        return rc;
    struct store_usage_total *v = NULL;
    size_t cnt = 0, cap = 0;
    for (;;) {
        int r = sdb_step(s);
        if (r == SDB_DONE)
            break;
        if (r != SDB_ROW) {
            rc = store_sqlerr(st, r, "usage totals");
            break;
        }
        if (cnt == max_rows)
            break;
        if (cnt == cap) {
            size_t nc = cap ? 2 * cap : 16;
            struct store_usage_total *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = ERR_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        struct store_usage_total *t = &v[cnt++];
        store_col_text(s, 0, t->tenant, sizeof t->tenant);
        store_col_text(s, 1, t->model, sizeof t->model);
        t->prompt_tokens = sdb_column_int64(s, 2);
        t->cached_tokens = sdb_column_int64(s, 3);
        t->completion_tokens = sdb_column_int64(s, 4);
        t->cost_micros = sdb_column_int64(s, 5);
        t->requests = sdb_column_int64(s, 6);
    }
    sdb_reset(s);
    if (rc) {
        free(v);
        return rc;
    }
    *items = v;
    *n = cnt;
    return 0;
}
