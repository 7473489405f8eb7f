/*
 * usage.h - the price table and the cost of one request (cost accounting).
 *
 * Prices are configured per model with --prices / JOBD_PRICES, a comma
 * separated list of MODEL=IN:OUT[:CACHED] (spec/usage.md). Each price is an
 * integer number of micro-dollars (millionths of the currency unit) per one
 * million tokens: "$0.15 per 1M input tokens" is 150000. CACHED, the price of
 * prompt tokens served from the prefix cache, defaults to half of IN
 * (rounded down). A model without an entry costs 0.
 *
 * Cost of one request, in micro-dollars, exactly:
 *   round_half_up(((prompt - cached) * IN + cached * CACHED + completion * OUT) / 1e6)
 * computed in integers with no intermediate rounding (each token count is
 * split into millions and a remainder so nothing overflows); the rounding is
 * applied once per request (per usage_ledger row) and a batch's or a report's
 * cost is the exact sum of its rows.
 *
 * Pure functions and an immutable table after parsing: any thread.
 */
#ifndef JOBD_USAGE_H
#define JOBD_USAGE_H

#include <stddef.h>
#include <stdint.h>

#define USAGE_MODEL_MAX 128            /* bytes of a model name in the table, with NUL */
#define USAGE_PRICE_MAX 1000000000000LL /* 1e12 micro-dollars = $1M per 1M tokens */
#define USAGE_PRICES_MAX 256           /* entries in one table */

struct usage_price {
    char model[USAGE_MODEL_MAX];
    int64_t in, out, cached; /* micro-dollars per 1M tokens */
};

struct usage_prices {
    struct usage_price *v;
    size_t n;
};

/* Parse "MODEL=IN:OUT[:CACHED],..." into *out (caller's; usage_prices_release).
 * Empty or NULL spec gives an empty table. Returns 0, or ERR_INVAL with a
 * message in msg (bad syntax, price out of [0, USAGE_PRICE_MAX], a model twice,
 * too many entries), or ERR_NOMEM. */
int usage_prices_parse(const char *spec, struct usage_prices *out, char *msg, size_t cap);

/* Free the entries. NULL ok. */
void usage_prices_release(struct usage_prices *p);

/* The entry for model, or NULL (table NULL, or model absent). Borrowed. */
const struct usage_price *usage_price_find(const struct usage_prices *p, const char *model);

/* Cost of one request in micro-dollars into *out (formula above; price NULL
 * gives 0). Returns 0, ERR_INVAL (a negative count, cached > prompt) or
 * ERR_TOOBIG (the cost does not fit int64). */
int usage_cost_micros(const struct usage_price *price, int64_t prompt, int64_t cached,
                      int64_t completion, int64_t *out);

/* usage_cost_micros with the price of model in the table prices (a const
 * struct usage_prices *, NULL = empty): the store's cost hook
 * (store_cost_fn, jobd/store/store.h). */
int usage_cost_hook(const void *prices, const char *model, int64_t prompt, int64_t cached, int64_t completion,
                    int64_t *out);

#endif
