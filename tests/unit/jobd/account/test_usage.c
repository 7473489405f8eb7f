/* test_usage.c - price table parsing and exact per-request cost (jobd/account/usage.h). */
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "jobd/account/usage.h"
#include "tests/th.h"

TEST(usage_prices_parse_ok)
{
    struct usage_prices p;
    char msg[256];
    CHECK_EQ_INT(usage_prices_parse("a=150000:600000,b/c.gguf=1:2:0", &p, msg, sizeof msg), 0);
    CHECK_EQ_INT((int)p.n, 2);
    const struct usage_price *a = usage_price_find(&p, "a");
    CHECK(a && a->in == 150000 && a->out == 600000 && a->cached == 75000);
    const struct usage_price *b = usage_price_find(&p, "b/c.gguf");
    CHECK(b && b->in == 1 && b->out == 2 && b->cached == 0);
    CHECK(usage_price_find(&p, "c") == NULL);
    usage_prices_release(&p);
    CHECK_EQ_INT(usage_prices_parse("", &p, msg, sizeof msg), 0);
    CHECK_EQ_INT((int)p.n, 0);
    usage_prices_release(&p);
}

TEST(usage_prices_parse_bad)
{
    static const char *const bad[] = {"a", "a=1", "=1:2", "a=1:2:3:4", "a=-1:2", "a=1:x", "a=1:2,",
                                      "a=1:2,a=3:4", "a=1000000000001:1", "a=1::2", "a=1:2 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct usage_prices p = {0};
        char msg[256] = "";
        CHECK_EQ_INT(usage_prices_parse(bad[i], &p, msg, sizeof msg), ERR_INVAL);
        CHECK(msg[0] != '\0');
    }
}

TEST(usage_cost_exact)
{
    struct usage_price pr = {"m", 150000, 600000, 75000};
    int64_t c = -1;
    /* 1000 prompt (200 cached), 500 out: (800*150000 + 200*75000 + 500*600000) / 1e6
     * = (120e6 + 15e6 + 300e6) / 1e6 = 435 exactly */
    CHECK_EQ_INT(usage_cost_micros(&pr, 1000, 200, 500, &c), 0);
    CHECK(c == 435);
    /* 3 prompt, 1 out: (450000 + 600000) / 1e6 = 1.05 -> 1 */
    CHECK_EQ_INT(usage_cost_micros(&pr, 3, 0, 1, &c), 0);
    CHECK(c == 1);
    /* 1 out at 1500000: 1.5 -> 2 (half up); 1 out at 1499999: 1.499999 -> 1 */
    struct usage_price h = {"h", 0, 1500000, 0};
    CHECK_EQ_INT(usage_cost_micros(&h, 0, 0, 1, &c), 0);
    CHECK(c == 2);
    h.out = 1499999;
    CHECK_EQ_INT(usage_cost_micros(&h, 0, 0, 1, &c), 0);
    CHECK(c == 1);
    /* large counts split across millions: 2^40 tokens at the max price, no overflow */
    struct usage_price big = {"b", 0, 1000000000000LL, 0};
    CHECK_EQ_INT(usage_cost_micros(&big, 0, 0, INT64_C(1) << 40, &c), 0);
    CHECK(c == (INT64_C(1) << 40) * 1000000LL);
    CHECK_EQ_INT(usage_cost_micros(NULL, 5, 0, 5, &c), 0);
    CHECK(c == 0);
    CHECK_EQ_INT(usage_cost_micros(&pr, 5, 6, 0, &c), ERR_INVAL);
    CHECK_EQ_INT(usage_cost_micros(&pr, -1, 0, 0, &c), ERR_INVAL);
    CHECK_EQ_INT(usage_cost_micros(&big, 0, 0, INT64_MAX, &c), ERR_TOOBIG);
}
