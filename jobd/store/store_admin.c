/*
 * store_admin.c - read-only views for operators: the worker list (GET
 * /v1/workers) and the work-distribution gauges of /metrics (queue depth by
 * model, leases outstanding, dead letters). See store.h.
 *
 * The statements are STORE_SQL_ADMIN in store_int.h. Queue depth reads the
 * partial indexes requests_ready / requests_leased (PostgreSQL: the
 * requests_queued table and the request lists of the open leases), so its
 * cost follows the requests still waiting or running, not the whole table.
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

static int worker_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_worker_info *w = elem;
    (void)ctx;
    store_col_text(s, 0, w->id, sizeof w->id);
    store_col_text(s, 1, w->name, sizeof w->name);
    store_col_text(s, 2, w->device, sizeof w->device);
    w->registered_at = sdb_column_int64(s, 3);
    w->last_seen = sdb_column_int64(s, 4);
    w->tokens_per_s = sdb_column_double(s, 5);
    store_col_text(s, 6, w->models, sizeof w->models);
    w->leases_held = sdb_column_int64(s, 7);
    w->requests_held = sdb_column_int64(s, 8);
    w->hourly_cost_micros = sdb_column_int64(s, 9);
    return 0;
}

int store_workers_list(struct store *st, int64_t since, int limit, struct store_worker_info **items,
                       size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_worker_info), worker_row, NULL,
                                          "list workers"};
    if (limit < 1 || limit > 1000)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WORKERS_LIST, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_int(st, s, 1, since)) || (rc = store_bind_int(st, s, 2, limit))) {
        sdb_reset(s);
        return rc;
    }
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

static int count1(struct store *st, enum store_stmt_id id, int64_t *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s)
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        *out = sdb_column_int64(s, 0);
    else
        rc = store_sqlerr(st, r, "count");
    sdb_reset(s);
    return rc;
}

/* Merge (model, count) rows of statement id into the sorted depth array; leased = 0/1. */
static int depth_rows(struct store *st, enum store_stmt_id id, int leased,
                      struct store_model_depth **arr, size_t *cnt, size_t *cap)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s)
        return rc;
    int r;
    while ((r = sdb_step(s)) == SDB_ROW) {
        char model[STORE_MODEL_MAX + 1];
        store_col_text(s, 0, model, sizeof model);
        int64_t c = sdb_column_int64(s, 1);
        size_t i = 0;
        while (i < *cnt && strcmp((*arr)[i].model, model) < 0)
            i++;
        if (i == *cnt || strcmp((*arr)[i].model, model) != 0) {
            if (*cnt == *cap) {
                size_t nc = *cap ? 2 * *cap : 8;
                struct store_model_depth *na = realloc(*arr, nc * sizeof *na);
                if (!na) {
                    rc = ERR_NOMEM;
                    break;
                }
                *arr = na;
                *cap = nc;
            }
            memmove(&(*arr)[i + 1], &(*arr)[i], (*cnt - i) * sizeof **arr);
            memset(&(*arr)[i], 0, sizeof **arr);
            memcpy((*arr)[i].model, model, sizeof model);
            (*cnt)++;
        }
        if (leased)
            (*arr)[i].leased = c;
        else
            (*arr)[i].queued = c;
    }
    if (!rc && r != SDB_DONE)
        rc = store_sqlerr(st, r, "queue depth");
    sdb_reset(s);
    return rc;
}

int store_work_stats(struct store *st, struct store_work_stats *out)
{
    struct store_work_stats w;
    memset(&w, 0, sizeof w);
    size_t cap = 0;
    int rc;
    if ((rc = depth_rows(st, S_DEPTH_QUEUED, 0, &w.models, &w.n_models, &cap)) ||
        (rc = depth_rows(st, S_DEPTH_LEASED, 1, &w.models, &w.n_models, &cap)) ||
        (rc = count1(st, S_LEASES_OUTSTANDING, &w.leases_outstanding)) ||
        (rc = count1(st, S_DEAD_LETTERS_COUNT, &w.dead_letters))) {
        free(w.models);
        return rc;
    }
    *out = w;
    return 0;
}
