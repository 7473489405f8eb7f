/*
 * usage.c - price table parsing and per-request cost (see usage.h).
 *
 * The cost is computed without floating point: every token count t is split
 * as t = q * 1e6 + r, so t * price / 1e6 = q * price + r * price / 1e6; the
 * q * price parts are whole micro-dollars (overflow-checked) and the three
 * r * price parts (each below 1e6 * 1e12 = 1e18, so their sum fits) are summed
 * and divided once with round-half-up. Pure functions: any thread.
 */
#include "jobd/account/usage.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/err.h"

#define MTOK 1000000LL

void usage_prices_release(struct usage_prices *p)
{
    if (!p)
        return;
    free(p->v);
    p->v = NULL;
    p->n = 0;
}

static int parse_price(const char *s, size_t len, int64_t *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp)
        return ERR_INVAL;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    int64_t v;
    if (cfg_parse_int(tmp, &v) || v < 0 || v > USAGE_PRICE_MAX)
        return ERR_INVAL;
    *out = v;
    return 0;
}

/* One "MODEL=IN:OUT[:CACHED]" entry of len bytes. */
static int parse_entry(const char *s, size_t len, struct usage_price *e)
{
    const char *eq = memchr(s, '=', len);
    if (!eq || eq == s || (size_t)(eq - s) >= USAGE_MODEL_MAX)
        return ERR_INVAL;
    memset(e, 0, sizeof *e);
    memcpy(e->model, s, (size_t)(eq - s));
    const char *p = eq + 1, *end = s + len;
    int64_t v[3];
    int n = 0;
    while (n < 3) {
        const char *c = memchr(p, ':', (size_t)(end - p));
        const char *stop = c ? c : end;
        if (parse_price(p, (size_t)(stop - p), &v[n]))
            return ERR_INVAL;
        n++;
        if (!c)
            break;
        p = c + 1;
        if (n == 3)
            return ERR_INVAL; /* a fourth field */
    }
    if (n < 2)
        return ERR_INVAL;
    e->in = v[0];
    e->out = v[1];
    e->cached = n == 3 ? v[2] : v[0] / 2;
    return 0;
}

int usage_prices_parse(const char *spec, struct usage_prices *out, char *msg, size_t cap)
{
    struct usage_prices t = {0};
    if (!spec || !*spec) {
        *out = t;
        return 0;
    }
    size_t n = 1;
    for (const char *c = spec; *c; c++)
        n += *c == ',';
    if (n > USAGE_PRICES_MAX) {
        snprintf(msg, cap, "at most %d prices", USAGE_PRICES_MAX);
        return ERR_INVAL;
    }
    t.v = calloc(n, sizeof *t.v);
    if (!t.v)
        return ERR_NOMEM;
    const char *p = spec;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (parse_entry(p, len, &t.v[t.n])) {
            snprintf(msg, cap, "bad price '%.*s' (want MODEL=IN:OUT[:CACHED], integer micro-dollars "
                     "per 1M tokens, at most %lld)", (int)(len > 200 ? 200 : len), p, USAGE_PRICE_MAX);
            usage_prices_release(&t);
            return ERR_INVAL;
        }
        if (usage_price_find(&t, t.v[t.n].model)) {
            snprintf(msg, cap, "model '%s' is priced twice", t.v[t.n].model);
            usage_prices_release(&t);
            return ERR_INVAL;
        }
        t.n++;
        if (!c)
            break;
        p = c + 1;
    }
    *out = t;
    return 0;
}

const struct usage_price *usage_price_find(const struct usage_prices *p, const char *model)
{
    if (!p || !model)
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].model, model) == 0)
            return &p->v[i];
    return NULL;
}

int usage_cost_micros(const struct usage_price *price, int64_t prompt, int64_t cached,
                      int64_t completion, int64_t *out)
{
    if (prompt < 0 || cached < 0 || completion < 0 || cached > prompt)
        return ERR_INVAL;
    if (!price) {
        *out = 0;
        return 0;
    }
    const int64_t t[3] = {prompt - cached, cached, completion};
    const int64_t pr[3] = {price->in, price->cached, price->out};
    int64_t whole = 0;
    /* remainders: r < 1e6, price <= 1e12 -> r * price < 1e18; three of them
     * could reach 3e18 < 9.2e18 = INT64_MAX */
    int64_t frac = 0;
    for (int i = 0; i < 3; i++) {
        int64_t q = t[i] / MTOK, r = t[i] % MTOK, m;
        if (__builtin_mul_overflow(q, pr[i], &m) || __builtin_add_overflow(whole, m, &whole))
            return ERR_TOOBIG;
        frac += r * pr[i];
    }
    if (__builtin_add_overflow(whole, (frac + MTOK / 2) / MTOK, &whole))
        return ERR_TOOBIG;
    *out = whole;
    return 0;
}

int usage_cost_hook(const void *prices, const char *model, int64_t prompt, int64_t cached, int64_t completion,
                    int64_t *out)
{
    return usage_cost_micros(usage_price_find(prices, model), prompt, cached, completion, out);
}
