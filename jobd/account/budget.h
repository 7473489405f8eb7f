/*
 * budget.h - admission under per-tenant limits (spec/usage.md "Budgets"):
 * the estimate of a submission, and the decision with its message.
 *
 * Design. A submission's estimate is computed from its input file before
 * any batch row exists, by the same line reader and line check ingest uses
 * (ingest_estimate_file in jobd/intake/ingest.h feeds each valid line to
 * budget_estimate_add), so the reserved tokens equal exactly what ingest will
 * store in requests.prompt_tokens_est + max_tokens for a valid file. Its
 * cost is priced per request as if every estimated prompt token were
 * uncached input and every max_tokens were produced, rounded half up per
 * request (the same rounding as the ledger), with the price of the model of
 * the first valid line (a batch has one model; a file mixing models fails
 * ingest and releases its reservation). The check compares use + estimate
 * with each limit in the order queued tokens, daily spend, monthly spend.
 *
 * Threads: pure functions, any thread.
 */
#ifndef JOBD_BUDGET_H
#define JOBD_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "jobd/store/store_budget.h"
#include "jobd/account/usage.h"

struct budget_estimate {
    int64_t n_requests;  /* valid lines */
    int64_t tokens;      /* sum of prompt_tokens_est + max_tokens */
    int64_t micros;      /* sum of per-request estimated cost */
    int64_t price_in, price_out; /* the model's prices used (0 if unpriced) */
    char model[128];     /* model of the first valid line ("" if none) */
};

/* Add one valid request line (its model, estimated prompt tokens and
 * max_tokens) to *e, which starts zeroed. The first line's model sets the
 * model and its prices (unpriced: 0). 0, or ERR_TOOBIG (a sum overflows
 * int64; *e unchanged). */
int budget_estimate_add(struct budget_estimate *e, const struct usage_prices *prices, const char *model,
                        int64_t prompt_tokens_est, int64_t max_tokens);

enum budget_verdict {
    BUDGET_OK = 0,
    BUDGET_QUEUED_TOKENS,  /* max_queued_tokens */
    BUDGET_DAILY_SPEND,    /* max_daily_micros */
    BUDGET_MONTHLY_SPEND,  /* max_monthly_micros */
    BUDGET__COUNT
};

/* The error code of a refusal ("queued_tokens_limit_exceeded",
 * "daily_spend_limit_exceeded", "monthly_spend_limit_exceeded"; "ok"). */
const char *budget_verdict_code(enum budget_verdict v);
/* The limit's short name, a metrics label ("queued_tokens", "daily_spend", "monthly_spend"; "ok"). */
const char *budget_verdict_limit(enum budget_verdict v);

/* Decide: the first limit in force that use + estimate exceeds (strictly),
 * else BUDGET_OK. On a refusal msg (cap bytes) gets a sentence naming the
 * limit, the current use, the estimate and the excess. Can't fail. */
enum budget_verdict budget_check(const struct store_limits *l, const struct store_budget_use *u,
                                 const struct budget_estimate *e, char *msg, size_t cap);

/* Start of the UTC day / calendar month containing now (unix seconds, >= 0). */
int64_t budget_day_start(int64_t now);
int64_t budget_month_start(int64_t now);

#endif
