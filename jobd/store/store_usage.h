/*
 * store_usage.h - usage reports: sums of the usage_ledger (schema.sql) for
 * one tenant (or all) over a time range, grouped by batch, model, UTC day or
 * tenant.
 *
 * The ledger has one row per request that consumed compute, written with its
 * result, with cost_micros priced at commit (jobd/account/usage.h); a report is the
 * plain sum of rows, so it agrees exactly with each batch's usage. Reads
 * only: any thread with its own connection.
 */
#ifndef JOBD_STORE_USAGE_H
#define JOBD_STORE_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include "jobd/store/store.h"

enum store_usage_group { STORE_USAGE_BATCH, STORE_USAGE_MODEL, STORE_USAGE_DAY, STORE_USAGE_TENANT };

struct store_usage_row {
    char key[128];         /* batch id, model, "YYYY-MM-DD" (UTC), or tenant id */
    int64_t start_time;    /* day: unix seconds of 00:00 UTC; else the first row's created_at */
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    int64_t requests;      /* ledger rows */
    int64_t cost_micros;
    int64_t reused_tokens;   /* tokens answered from reuse (jobd/work/reuse.h): not in the sums above, cost 0 */
    int64_t reused_requests; /* ledger rows answered from reuse (counted in requests) */
};

#define STORE_USAGE_MAX_ROWS 1000 /* groups per report */

/* Sum the ledger rows with since <= created_at < until of tenant_id (NULL =
 * every tenant) and batch_id (NULL = every batch; a mixed batch's usage by
 * model is group STORE_USAGE_MODEL with its id), grouped, ordered by key, at most STORE_USAGE_MAX_ROWS groups
 * (*has_more = 1 when there were more). *total gets the sums over the whole
 * range (all groups). *rows is the caller's (free()). Returns 0, ERR_NOMEM,
 * or a database error. */
int store_usage_report(struct store *st, const char *tenant_id, int64_t since, int64_t until,
                       const char *batch_id, enum store_usage_group group, struct store_usage_row **rows, size_t *n,
                       int *has_more, struct store_usage_row *total);

#endif
