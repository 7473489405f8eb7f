/*
 * store_fleet.c - the rows fleet cost is computed from (see store_fleet.h).
 *
 * Three statements (STORE_SQL_FLEET in store_int.h) in one snapshot:
 * workers, leases and the leases' units (lease_batches rows, which carry
 * their tenant and token sums: schema.sql migration 13, so a batch's
 * deletion changes no figure). The range statements read
 * the leases whose coalesce(released_at, expires_at) >= since through
 * leases_span (implied by the range: a lease's end is at most that, and one
 * started at or after since has it later); the batch statements start from
 * lease_batches_batch and reach the overlapping leases of the same workers
 * through leases_worker (on PostgreSQL the units are then read by the ids
 * of the leases found).
 */
#include "jobd/store/store_fleet.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "jobd/store/store_int.h"

static int worker_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_fleet_worker *w = elem;
    (void)ctx;
    store_col_text(s, 0, w->id, sizeof w->id);
    store_col_text(s, 1, w->name, sizeof w->name);
    store_col_text(s, 2, w->device, sizeof w->device);
    store_col_text(s, 3, w->model, sizeof w->model);
    w->hourly_cost_micros = sdb_column_int64(s, 4);
    w->registered_at = sdb_column_int64(s, 5);
    w->last_seen = sdb_column_int64(s, 6);
    w->lease_end = sdb_column_int64(s, 7);
    w->unpriced = sdb_column_int64(s, 8) != 0;
    return 0;
}

static int gap_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_fleet_gap *g = elem;
    (void)ctx;
    store_col_text(s, 0, g->worker_id, sizeof g->worker_id);
    g->gone_at = sdb_column_int64(s, 1);
    g->back_at = sdb_column_int64(s, 2);
    return 0;
}

static int lease_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_fleet_lease *l = elem;
    (void)ctx;
    store_col_text(s, 0, l->id, sizeof l->id);
    store_col_text(s, 1, l->worker_id, sizeof l->worker_id);
    store_col_text(s, 2, l->model, sizeof l->model);
    l->start = sdb_column_int64(s, 3);
    l->end = sdb_column_int64(s, 4);
    if (l->end < l->start)
        l->end = l->start;
    l->lapsed = sdb_column_int64(s, 5) != 0;
    l->hourly_cost_micros = sdb_column_int64(s, 6);
    l->open = sdb_column_int64(s, 7) != 0;
    return 0;
}

static int unit_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_fleet_unit *u = elem;
    (void)ctx;
    store_col_text(s, 0, u->lease_id, sizeof u->lease_id);
    store_col_text(s, 1, u->batch_id, sizeof u->batch_id);
    store_col_text(s, 2, u->tenant_id, sizeof u->tenant_id);
    u->n_requests = sdb_column_int64(s, 3);
    u->prompt_tokens = sdb_column_int64(s, 4);
    u->cached_tokens = sdb_column_int64(s, 5);
    u->completion_tokens = sdb_column_int64(s, 6);
    u->reused_tokens = sdb_column_int64(s, 7);
    return 0;
}

struct fleet_q {
    int64_t since, until, now, ttl_s;
    const char *batch_id;
};

/* Run statement id with the query's parameters, collecting with how.
 * workers: 1 binds ?4 ttl too; -1 (gaps) only ?1 since, ?2 until. */
static int collect(struct store *st, enum store_stmt_id id, const struct fleet_q *q, const struct store_rows *how,
                   int workers, void **items, size_t *n)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s)
        return rc;
    if (q->batch_id)
        rc = store_bind_text(st, s, 1, q->batch_id);
    if (!rc && q->batch_id)
        rc = store_bind_int(st, s, 2, q->now);
    if (!rc && !q->batch_id && !(rc = store_bind_int(st, s, 1, q->since)) &&
        !(rc = store_bind_int(st, s, 2, q->until)) && workers >= 0)
        rc = store_bind_int(st, s, 3, q->now);
    if (!rc && workers > 0)
        rc = store_bind_int(st, s, 4, q->ttl_s);
    if (rc) {
        sdb_reset(s);
        return rc;
    }
    return store_rows_collect(st, s, how, NULL, 0, items, n, NULL);
}

/* PostgreSQL, a batch's figures: the units of the n leases l, by their ids
 * (FLEET_UNITS_BATCH's ?1). */
static int units_of_leases(struct store *st, const struct store_fleet_lease *l, size_t n, const struct store_rows *how,
                           void **items, size_t *n_items)
{
    struct buf a;
    buf_init(&a, SIZE_MAX);
    int rc = store_arr_begin(&a);
    for (size_t i = 0; !rc && i < n; i++)
        rc = store_arr_text(&a, l[i].id);
    if (!rc)
        rc = store_arr_end(&a);
    struct sdb_stmt *s = rc ? NULL : store_stmt(st, S_FLEET_UNITS_BATCH, &rc);
    if (s && (rc = store_bind_text(st, s, 1, a.data)) != 0)
        sdb_reset(s);
    else if (s)
        rc = store_rows_collect(st, s, how, NULL, 0, items, n_items, NULL);
    buf_release(&a);
    return rc;
}

int store_fleet_read(struct store *st, int64_t since, int64_t until, int64_t now, int64_t ttl_s,
                     const char *batch_id, struct store_fleet *out)
{
    static const struct store_rows wh = {sizeof(struct store_fleet_worker), worker_row, NULL, "fleet workers"};
    static const struct store_rows lh = {sizeof(struct store_fleet_lease), lease_row, NULL, "fleet leases"};
    static const struct store_rows uh = {sizeof(struct store_fleet_unit), unit_row, NULL, "fleet units"};
    static const struct store_rows gh = {sizeof(struct store_fleet_gap), gap_row, NULL, "fleet gaps"};
    struct store_fleet f;
    memset(&f, 0, sizeof f);
    const struct fleet_q q = {since, until, now, ttl_s, batch_id};
    void *w = NULL, *l = NULL, *u = NULL, *g = NULL;
    int rc = store_r_begin(st);
    if (rc)
        return rc;
    if (!batch_id)
        rc = collect(st, S_FLEET_WORKERS, &q, &wh, 1, &w, &f.n_workers);
    if (!rc)
        rc = collect(st, batch_id ? S_FLEET_LEASES_BATCH : S_FLEET_LEASES_RANGE, &q, &lh, 0, &l, &f.n_leases);
    if (!rc && batch_id && st->pg)
        rc = units_of_leases(st, l, f.n_leases, &uh, &u, &f.n_units);
    else if (!rc)
        rc = collect(st, batch_id ? S_FLEET_UNITS_BATCH : S_FLEET_UNITS_RANGE, &q, &uh, 0, &u, &f.n_units);
    if (!rc && !batch_id)
        rc = collect(st, S_FLEET_GAPS, &q, &gh, -1, &g, &f.n_gaps);
    rc = store_r_end(st, rc);
    f.workers = w;
    f.leases = l;
    f.units = u;
    f.gaps = g;
    if (rc) {
        store_fleet_release(&f);
        return rc;
    }
    *out = f;
    return 0;
}

void store_fleet_release(struct store_fleet *f)
{
    if (!f)
        return;
    free(f->workers);
    free(f->leases);
    free(f->units);
    free(f->gaps);
    memset(f, 0, sizeof *f);
}
