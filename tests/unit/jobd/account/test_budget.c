/* test_budget.c - admission (jobd/account/budget.c): UTC day/month starts against
 * timegm values computed independently (python calendar.timegm), the limit
 * decision and its messages, the estimate of plain and zstd files by the
 * documented rule, and the reservation triggers of schema.sql migration 4 on
 * a real SQLite file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/zst.h"
#include "jobd/account/budget.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"
#include "jobd/store/store_budget.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

TEST(budget_day_and_month_start)
{
    CHECK_EQ_INT(budget_day_start(1700000000), 1699920000);   /* 2023-11-14 */
    CHECK_EQ_INT(budget_month_start(1700000000), 1698796800); /* 2023-11-01 */
    CHECK_EQ_INT(budget_month_start(1709208000), 1706745600); /* 2024-02-29 12:00 -> 2024-02-01 */
    CHECK_EQ_INT(budget_month_start(951868800), 951868800);   /* 2000-03-01 00:00 is a month start */
    CHECK_EQ_INT(budget_month_start(951868799), 949363200);   /* one second earlier: 2000-02-01 */
    CHECK_EQ_INT(budget_month_start(4107542400 + 86399), 4107542400); /* 2100-03-01 (2100: no leap day) */
    CHECK_EQ_INT(budget_month_start(4099766400 + 30 * 86400), 4099766400); /* 2099-12-31 */
    CHECK_EQ_INT(budget_month_start(0), 0);
}

TEST(budget_check_limits_in_order_and_messages)
{
    struct store_limits l = {0};
    struct store_budget_use u = {.queued_tokens = 69, .reserved_micros = 20, .spent_day_micros = 400,
                                 .spent_month_micros = 900};
    struct budget_estimate e = {.n_requests = 2, .tokens = 46, .micros = 80};
    char msg[480];
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_OK); /* no limits */
    l.has_queued_tokens = 1;
    l.max_queued_tokens = 115; /* exactly at the limit fits */
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_OK);
    l.max_queued_tokens = 99;
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_QUEUED_TOKENS);
    CHECK(strstr(msg, "limit is 99 tokens") && strstr(msg, "69 are queued") && strstr(msg, "46 tokens") &&
          strstr(msg, "16 over the limit"));
    CHECK_EQ_STR(budget_verdict_code(BUDGET_QUEUED_TOKENS), "queued_tokens_limit_exceeded");
    l.max_queued_tokens = 1000;
    l.has_daily = l.has_monthly = 1;
    l.max_daily_micros = 500;   /* 400 + 20 + 80 = 500: fits */
    l.max_monthly_micros = 999; /* 900 + 20 + 80 = 1000: 1 over */
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_MONTHLY_SPEND);
    CHECK(strstr(msg, "Monthly") && strstr(msg, "current use is 920 (900 spent + 20 reserved") &&
          strstr(msg, "estimate is 80 (2 requests), 1 over the limit"));
    l.max_daily_micros = 499;
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_DAILY_SPEND);
    CHECK_EQ_STR(budget_verdict_limit(BUDGET_DAILY_SPEND), "daily_spend");
    /* sums that overflow are refusals, not wrap-arounds */
    u.spent_day_micros = INT64_MAX - 10;
    l.max_daily_micros = INT64_MAX;
    CHECK_EQ_INT(budget_check(&l, &u, &e, msg, sizeof msg), BUDGET_DAILY_SPEND);
}

static const char LINES[] =
    "\xef\xbb\xbf{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m1\","
    "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"h\\u00e9llo\"}],"
    "\"max_tokens\":10}}\r\n"
    "\n"
    "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m1\","
    "\"messages\":[{\"role\":\"user\",\"content\":\"12345678901234567\"}]}}\n"
    "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m1\",\"prompt\":\"x\"}}\n"
    "not json\n";
/* a: ("Be brief." 9 + "héllo" 6 bytes + 2 x 16) = 47 -> 12 tokens, + 10 = 22
 * b: 17 + 16 = 33 -> 9 tokens, + 32768 (no max_tokens: the model limit) = 32777
 * c: wrong endpoint, and the last line is invalid: not counted
 * cost at m1=1000000:3000000 (1 and 3 micro-dollars a token): a 12 + 30 = 42, b 9 + 98304 = 98313 */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

TEST(budget_estimate_plain_and_zstd)
{
    const char *dir = th_tmpdir();
    char plain[600], zpath[600];
    snprintf(plain, sizeof plain, "%s/in.jsonl", dir);
    snprintf(zpath, sizeof zpath, "%s/in.jsonl.zst", dir);
    write_file(plain, LINES, sizeof LINES - 1);
    struct buf zb;
    buf_init(&zb, 1u << 20);
    struct zst_writer *w;
    CHECK_EQ_INT(zst_writer_new(3, zst_buf_sink, &zb, &w), 0);
    CHECK_EQ_INT(zst_writer_write(w, LINES, sizeof LINES - 1), 0);
    CHECK_EQ_INT(zst_writer_end_frame(w), 0);
    zst_writer_free(w);
    write_file(zpath, zb.data, zb.len);
    buf_release(&zb);
    struct usage_prices prices;
    char msg[200];
    CHECK_EQ_INT(usage_prices_parse("m1=1000000:3000000", &prices, msg, sizeof msg), 0);
    for (int z = 0; z < 2; z++) {
        struct budget_estimate e;
        CHECK_EQ_INT(ingest_estimate_file(NULL, z ? zpath : plain, "/v1/chat/completions", NULL, &prices, &e), 0);
        CHECK_EQ_INT(e.n_requests, 2);
        CHECK_EQ_INT(e.tokens, 22 + 32777);
        CHECK_EQ_INT(e.micros, 42 + 98313);
        CHECK_EQ_STR(e.model, "m1");
        CHECK_EQ_INT(e.price_in, 1000000);
        CHECK_EQ_INT(e.price_out, 3000000);
    }
    struct budget_estimate e;
    CHECK_EQ_INT(ingest_estimate_file(NULL, plain, "/v1/chat/completions", NULL, NULL, &e), 0); /* unpriced */
    CHECK_EQ_INT(e.micros, 0);
    CHECK_EQ_INT(e.tokens, 22 + 32777);
    CHECK_EQ_INT(ingest_estimate_file(NULL, plain, "/v1/completions", NULL, &prices, &e), 0);
    CHECK_EQ_INT(e.n_requests, 1); /* only c: ceil(1/4) = 1 + 32768 */
    CHECK_EQ_INT(e.tokens, 32769);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    CHECK_EQ_INT(ingest_estimate_file(NULL, missing, "/v1/chat/completions", NULL, &prices, &e), ERR_NOTFOUND);
    usage_prices_release(&prices);
}

static int64_t q1(struct sdb *db, const char *sql)
{
    struct sdb_stmt *s;
    CHECK_EQ_INT(sdb_prepare(db, sql, &s), SDB_OK);
    CHECK_EQ_INT(sdb_step(s), SDB_ROW);
    int64_t v = sdb_column_int64(s, 0);
    sdb_finalize(s);
    return v;
}

TEST(budget_reservation_triggers_release_per_request_and_at_the_end)
{
    const char *dir = th_tmpdir();
    struct store *st;
    CHECK_EQ_INT(th_store_open(dir, NULL, &st), 0);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", 1700000000, &t), 0);
    char files[700], path[800];
    snprintf(files, sizeof files, "%s/files", dir);
    mkdir(files, 0700);
    snprintf(path, sizeof path, "%s/files/in", dir);
    write_file(path, LINES + 3, strstr(LINES, "{\"custom_id\":\"c\"") - (LINES + 3)); /* lines a and b */
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/in");
    sf.created_at = 1700000000;
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, 1700000000, &b), 0);
    /* the admission reservation as routes_budget.c records it, then ingest */
    CHECK_EQ_INT(store_batch_reserve(st, b.id, 22 + 32777, 42 + 98313, 1000000, 3000000), 0);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(st, b.id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    struct store_budget_use u;
    CHECK_EQ_INT(store_budget_use(st, t.id, 0, 0, &u), 0);
    CHECK_EQ_INT(u.queued_tokens, 22 + 32777);
    CHECK_EQ_INT(u.reserved_micros, 42 + 98313);
    /* the rows carry exactly the admission estimate */
    struct sdb *db = th_db_open(dir);
    CHECK_EQ_INT(q1(db, "SELECT sum(prompt_tokens_est + max_tokens) FROM requests"), 22 + 32777);
    struct sdb_stmt *s;
    CHECK_EQ_INT(sdb_prepare(db, "SELECT id FROM requests WHERE custom_id = 'a'", &s), SDB_OK);
    CHECK_EQ_INT(sdb_step(s), SDB_ROW);
    char ra[64];
    snprintf(ra, sizeof ra, "%s", (const char *)sdb_column_text(s, 0));
    sdb_finalize(s);
    /* a finishes (failed, e.g. cancelled): its share (22 tokens, 42 micro-dollars) goes */
    struct store_request_change ch = {0};
    CHECK_EQ_INT(store_request_transition(st, ra, STORE_REQ_QUEUED, STORE_REQ_FAILED, &ch, 1700000001), 0);
    CHECK_EQ_INT(store_budget_use(st, t.id, 0, 0, &u), 0);
    CHECK_EQ_INT(u.queued_tokens, 32777);
    CHECK_EQ_INT(u.reserved_micros, 98313);
    /* back to queued (a dead letter retry): reserved again */
    CHECK_EQ_INT(store_request_transition(st, ra, STORE_REQ_FAILED, STORE_REQ_QUEUED, &ch, 1700000002), 0);
    CHECK_EQ_INT(store_budget_use(st, t.id, 0, 0, &u), 0);
    CHECK_EQ_INT(u.queued_tokens, 22 + 32777);
    CHECK_EQ_INT(u.reserved_micros, 42 + 98313);
    /* the batch ends (expired): everything is released at once */
    CHECK_EQ_INT(store_batch_transition(st, b.id, STORE_BATCH_IN_PROGRESS, STORE_BATCH_EXPIRED, 1700000003), 0);
    CHECK_EQ_INT(store_budget_use(st, t.id, 0, 0, &u), 0);
    CHECK_EQ_INT(u.queued_tokens, 0);
    CHECK_EQ_INT(u.reserved_micros, 0);
    /* limits round trip */
    struct store_limits l = {.has_daily = 1, .max_daily_micros = 5}, g;
    CHECK_EQ_INT(store_limits_put(st, t.id, &l, 1700000004), 0);
    CHECK_EQ_INT(store_limits_get(st, t.id, &g), 0);
    CHECK(g.has_daily && g.max_daily_micros == 5 && !g.has_queued_tokens && !g.has_monthly &&
          g.updated_at == 1700000004);
    l.max_daily_micros = -1;
    CHECK_EQ_INT(store_limits_put(st, t.id, &l, 1700000005), ERR_INVAL);
    CHECK_EQ_INT(store_limits_put(st, "ten_nobody", &g, 1700000005), ERR_NOTFOUND);
    sdb_close(db);
    store_batch_release(&b);
    store_close(st);
}
