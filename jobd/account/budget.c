/*
 * budget.c - admission estimate and decision (see budget.h). Pure.
 */
#include "jobd/account/budget.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"

int budget_estimate_add(struct budget_estimate *e, const struct usage_prices *prices, const char *model,
                        int64_t prompt_tokens_est, int64_t max_tokens)
{
    if (!e->model[0]) {
        snprintf(e->model, sizeof e->model, "%s", model);
        const struct usage_price *p = usage_price_find(prices, model);
        e->price_in = p ? p->in : 0;
        e->price_out = p ? p->out : 0;
    }
    /* cached tokens are 0 in an estimate, so IN and OUT are the whole price */
    struct usage_price price = {.in = e->price_in, .out = e->price_out};
    int64_t cost = 0, tok, tokens, micros;
    if (__builtin_add_overflow(prompt_tokens_est, max_tokens, &tok) ||
        usage_cost_micros(&price, prompt_tokens_est, 0, max_tokens, &cost) ||
        __builtin_add_overflow(e->tokens, tok, &tokens) || __builtin_add_overflow(e->micros, cost, &micros))
        return ERR_TOOBIG;
    e->tokens = tokens;
    e->micros = micros;
    e->n_requests++;
    return 0;
}

const char *budget_verdict_code(enum budget_verdict v)
{
    static const char *const c[] = {"ok", "queued_tokens_limit_exceeded", "daily_spend_limit_exceeded",
                                    "monthly_spend_limit_exceeded"};
    return (unsigned)v < BUDGET__COUNT ? c[v] : "?";
}

const char *budget_verdict_limit(enum budget_verdict v)
{
    static const char *const c[] = {"ok", "queued_tokens", "daily_spend", "monthly_spend"};
    return (unsigned)v < BUDGET__COUNT ? c[v] : "?";
}

/* use + est > limit, without overflow */
static int over(int64_t use, int64_t est, int64_t limit, int64_t *excess)
{
    int64_t sum;
    if (__builtin_add_overflow(use, est, &sum)) {
        *excess = INT64_MAX;
        return 1;
    }
    *excess = sum - limit;
    return sum > limit;
}

enum budget_verdict budget_check(const struct store_limits *l, const struct store_budget_use *u,
                                 const struct budget_estimate *e, char *msg, size_t cap)
{
    int64_t x = 0, committed = 0;
    if (l->has_queued_tokens && over(u->queued_tokens, e->tokens, l->max_queued_tokens, &x)) {
        snprintf(msg, cap,
                 "Queued tokens limit exceeded: the limit is %lld tokens, %lld are queued now (unfinished "
                 "requests), and this submission's estimate is %lld tokens (%lld requests: estimated prompt "
                 "tokens + max_tokens), %lld over the limit.",
                 (long long)l->max_queued_tokens, (long long)u->queued_tokens, (long long)e->tokens,
                 (long long)e->n_requests, (long long)x);
        return BUDGET_QUEUED_TOKENS;
    }
    struct { int has; int64_t limit, spent; const char *what; enum budget_verdict v; } s[2] = {
        {l->has_daily, l->max_daily_micros, u->spent_day_micros, "Daily spend limit (UTC day)", BUDGET_DAILY_SPEND},
        {l->has_monthly, l->max_monthly_micros, u->spent_month_micros, "Monthly spend limit (UTC month)",
         BUDGET_MONTHLY_SPEND},
    };
    for (int i = 0; i < 2; i++) {
        if (!s[i].has)
            continue;
        if (__builtin_add_overflow(s[i].spent, u->reserved_micros, &committed))
            committed = INT64_MAX;
        if (over(committed, e->micros, s[i].limit, &x)) {
            snprintf(msg, cap,
                     "%s exceeded: the limit is %lld micro-dollars, current use is %lld (%lld spent + %lld "
                     "reserved by unfinished requests), and this submission's estimate is %lld (%lld requests), "
                     "%lld over the limit.",
                     s[i].what, (long long)s[i].limit, (long long)committed, (long long)s[i].spent,
                     (long long)u->reserved_micros, (long long)e->micros, (long long)e->n_requests,
                     (long long)x);
            return s[i].v;
        }
    }
    if (cap)
        msg[0] = '\0';
    return BUDGET_OK;
}

int64_t budget_day_start(int64_t now)
{
    return now - now % 86400;
}

int64_t budget_month_start(int64_t now)
{
    /* civil_from_days (H. Hinnant): the day of the month of day number z */
    int64_t days = now / 86400;
    int64_t z = days + 719468;
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    return (days - (d - 1)) * 86400;
}
