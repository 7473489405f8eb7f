/*
 * store_budget.h - per-tenant limits (tenant_limits), the figures admission
 * compares them with, and a new batch's reservation (schema.sql migration 4,
 * spec/usage.md "Budgets").
 *
 * Design. A tenant's use is read from what is already durable: queued
 * tokens and reserved spend are the sums of the reservations its batches
 * hold (batches.reserved_tokens / reserved_micros, kept exact as requests
 * finish and batches end: by triggers on SQLite, by the statements that
 * change a request's status on PostgreSQL), actual spend is the usage_ledger of the
 * UTC day / month. Admission (jobd/account/budget.h) reads these and inserts the
 * batch with its reservation in one write transaction, so two concurrent
 * submissions cannot both squeeze under a limit.
 *
 * Any thread, the caller's connection.
 */
#ifndef JOBD_STORE_BUDGET_H
#define JOBD_STORE_BUDGET_H

#include <stdint.h>

#include "jobd/store/store.h"

/* A tenant's limits; a limit is in force only when its has_ flag is set. */
struct store_limits {
    int has_queued_tokens, has_daily, has_monthly;
    int64_t max_queued_tokens;  /* tokens */
    int64_t max_daily_micros;   /* micro-dollars per UTC day */
    int64_t max_monthly_micros; /* micro-dollars per UTC calendar month */
    int64_t updated_at;         /* unix seconds; 0 = never set */
};

/* What counts against the limits now. */
struct store_budget_use {
    int64_t queued_tokens;      /* sum of reserved_tokens of the tenant's batches */
    int64_t reserved_micros;    /* sum of reserved_micros of the tenant's batches */
    int64_t spent_day_micros;   /* ledger cost since day_start */
    int64_t spent_month_micros; /* ledger cost since month_start */
};

/* The tenant's limits into *out (all has_ 0 and updated_at 0 when it has no
 * row). 0 or store errors. */
int store_limits_get(struct store *st, const char *tenant_id, struct store_limits *out);

/* Replace the tenant's limits (a limit without has_ becomes NULL). 0,
 * ERR_INVAL (a negative limit), ERR_NOTFOUND (no such tenant), store errors. */
int store_limits_put(struct store *st, const char *tenant_id, const struct store_limits *l, int64_t now);

/* The tenant's current use; day_start / month_start (unix seconds) bound the
 * ledger sums. Call inside the admission transaction. 0 or store errors. */
int store_budget_use(struct store *st, const char *tenant_id, int64_t day_start, int64_t month_start,
                     struct store_budget_use *out);

/* Give a just-created batch (still validating) its reservation: budgeted =
 * 1, reserved tokens and micro-dollars, the model's prices used to release
 * it per request. 0, ERR_NOTFOUND, ERR_INVAL (negative), store errors. */
int store_batch_reserve(struct store *st, const char *batch_id, int64_t tokens, int64_t micros,
                        int64_t price_in, int64_t price_out);

/* Ledger sums per tenant and model (usage_totals), for /metrics. */
struct store_usage_total {
    char tenant[65];  /* tenant name */
    char model[128];
    int64_t prompt_tokens, cached_tokens, completion_tokens, cost_micros, requests;
};
/* All rows, ordered by tenant name and model, at most max_rows; *items is
 * the caller's (free). 0, ERR_NOMEM, store errors. */
int store_usage_totals(struct store *st, size_t max_rows, struct store_usage_total **items, size_t *n);

#endif
