/* Tests for fleet cost (jobd/account/fleet.c over jobd/store/store_fleet.c):
 * the parsers, the meter, and a scripted fleet on a fixed clock - three
 * workers of stated hourly cost (one with overlapping leases of two
 * batches, one that dies mid-lease, one that never works), priced and
 * attributed on the real store (SQLite, or PostgreSQL with
 * JOBD_TEST_PG_URL), every figure against the hand computation written in
 * the comments (spec/usage.md has the same example). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cfg.h"
#include "common/err.h"
#include "jobd/account/fleet.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store_fleet.h"
#include "jobd/work/lease.h"
#include "jobd/store/sdb.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000
#define T0 (NOW + 100) /* 2023-11-14T22:15:00Z: the scenario ends before midnight */
#define MODEL "SmolLM2-135M-Instruct"

TEST(fleet_micros_parse_exact_decimals)
{
    int64_t v = -1;
    CHECK_EQ_INT(cfg_parse_micros("2.5", 10000000000LL, &v), 0);
    CHECK_EQ_INT(v, 2500000);
    CHECK_EQ_INT(cfg_parse_micros("0.000001", 10000000000LL, &v), 0);
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_INT(cfg_parse_micros("10000", 10000000000LL, &v), 0);
    CHECK_EQ_INT(v, 10000000000LL);
    const char *bad[] = {"", "-1", "1.", ".5", "1.0000001", "10000.000001", "1e3", "1,5", "abc", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(cfg_parse_micros(bad[i], 10000000000LL, &v), ERR_INVAL);
}

TEST(fleet_costs_parse_classes_and_refuse_bad_ones)
{
    struct fleet_costs c;
    char msg[300];
    CHECK_EQ_INT(fleet_costs_parse("gpu-*=2.50/h,cpu-*=0.1,*=0", &c, msg, sizeof msg), 0);
    CHECK_EQ_INT((int)c.n, 3);
    CHECK_EQ_INT(fleet_cost_for(&c, "gpu-node-1/0", 7), 2500000);
    CHECK_EQ_INT(fleet_cost_for(&c, "cpu-a", 7), 100000);
    CHECK_EQ_INT(fleet_cost_for(&c, "other", 7), 0); /* the catch-all wins over the declaration */
    CHECK_EQ_INT(fleet_costs_parse("gpu-*=2.50", &c, msg, sizeof msg), 0);
    CHECK_EQ_INT(fleet_cost_for(&c, "other", 7), 7);
    CHECK_EQ_INT(fleet_costs_parse(NULL, &c, msg, sizeof msg), 0);
    CHECK_EQ_INT((int)c.n, 0);
    const char *bad[] = {"gpu", "=1", "gpu=-1", "gpu=10000.01", "gpu=1e9", "a=1,a=2", "a=1,", "a=1,,b=2", "a=$1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = 0;
        CHECK_EQ_INT(fleet_costs_parse(bad[i], &c, msg, sizeof msg), ERR_INVAL);
        CHECK(msg[0] != 0);
    }
    /* no price from a class nor the worker: -1, the caller's "unpriced" */
    CHECK_EQ_INT(fleet_costs_parse("gpu-*=2.50", &c, msg, sizeof msg), 0);
    CHECK_EQ_INT(fleet_cost_for(&c, "cpu-a", -1), -1);
    CHECK_EQ_INT(fleet_cost_for(&c, "cpu-a", 0), 0);
    CHECK_EQ_INT(fleet_cost_for(&c, "gpu-a", -1), 2500000);
    CHECK_EQ_INT(fleet_cost_for(NULL, "gpu-a", -1), -1);
}

/* A class an earlier glob shadows could never apply: refused at start with
 * both named. Narrower globs first are fine, and so are globs that only
 * overlap (neither covers the other). */
TEST(fleet_costs_parse_refuses_a_class_an_earlier_glob_shadows)
{
    struct fleet_costs c;
    char msg[300];
    const char *shadowed[][2] = {
        {"*=1,gpu-*=2", "'gpu-*' can never apply: every name it matches matches '*' (entry 1) first"},
        {"gpu-*=1,gpu-a*=2", "'gpu-a*'"},
        {"gpu-?=1,gpu-[ab]=2", "'gpu-[ab]'"},   /* '?' takes any one byte a bracket can */
        {"[ab]x=1,ax=2", "'ax'"},               /* the bracket accepts the literal */
        {"a*=1,b=0,*a*b*=3,a*b=2", "'a*b'"},    /* the entry named is the first that covers it */
        {"*=0,x=1", "'x'"},
        {"gpu\\*=1,gpu\\*x=2,gpu*=3,gpu-1=4", "'gpu-1'"},
    };
    for (size_t i = 0; i < sizeof shadowed / sizeof shadowed[0]; i++) {
        msg[0] = 0;
        CHECK_EQ_INT(fleet_costs_parse(shadowed[i][0], &c, msg, sizeof msg), ERR_INVAL);
        CHECK(strstr(msg, shadowed[i][1]) != NULL);
        CHECK(strstr(msg, "can never apply") != NULL);
    }
    const char *ok[] = {"gpu-a*=2,gpu-*=1,*=0", "a?=1,a*=2", "gpu-[ab]=1,gpu-?=2", "a*=1,*b=2", "x*y=1,*y=2",
                        "gpu\\*=1,gpu*=2", "[ab]x=1,[ac]x=2", "*a=1,a*=2"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK_EQ_INT(fleet_costs_parse(ok[i], &c, msg, sizeof msg), 0);
    CHECK_EQ_INT(fleet_costs_parse("gpu-a*=2,gpu-*=1,*=0", &c, msg, sizeof msg), 0);
    CHECK_EQ_INT(fleet_cost_for(&c, "gpu-a1", -1), 2000000);
    CHECK_EQ_INT(fleet_cost_for(&c, "gpu-b1", -1), 1000000);
    CHECK_EQ_INT(fleet_cost_for(&c, "cpu", -1), 0);
}

TEST(fleet_meter_pieces_add_up_to_the_whole)
{
    /* $1/h = 1e6 micro-dollars per 3600 s: 277.7 per second, floored on the absolute clock */
    int64_t h = 1000000, sum = 0;
    for (int64_t t = T0; t < T0 + 3600; t += 7)
        sum += fleet_meter_cost(h, t, t + 7 < T0 + 3600 ? t + 7 : T0 + 3600);
    CHECK_EQ_INT(sum, fleet_meter_cost(h, T0, T0 + 3600));
    CHECK_EQ_INT(fleet_meter_cost(h, T0, T0 + 3600), 1000000);
    CHECK_EQ_INT(fleet_meter_cost(h, T0 + 5, T0), 0);
    CHECK_EQ_INT(fleet_meter_cost(3600000, T0, T0 + 1), 1000);
    /* the largest price over the largest clock does not overflow */
    CHECK_EQ_INT(fleet_meter_cost(STORE_HOURLY_COST_MAX, 4000000000LL, 4000000000LL + 3600), STORE_HOURLY_COST_MAX);
}

/* ---- the scripted fleet ------------------------------------------------------------------------ */

struct fx {
    const char *dir;
    struct store *st;
    struct store_tenant ta, tb;
    int n_files;
};

static void fx_worker(struct fx *fx, const char *name, int64_t hourly, int64_t now, char id[ID_MAX])
{
    struct store_model_name names[] = {{MODEL, MODEL, 0, NULL}, {MODEL, "smollm", 0, NULL}};
    struct store_worker_new w = {name, "cpu", 4096, 64, names, 2, hourly, 0};
    CHECK_EQ_INT(lease_worker_register(fx->st, &w, now, id), 0);
}

/* A batch of n chat requests of tenant t, ingested (in_progress). */
static void fx_batch(struct fx *fx, const struct store_tenant *t, int n, char batch_id[ID_MAX])
{
    char rel[64], path[800];
    snprintf(rel, sizeof rel, "files/in-%d", fx->n_files++);
    snprintf(path, sizeof path, "%s/%s", fx->dir, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"custom_id\":\"r-%d\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                "{\"model\":\"smollm\",\"messages\":[{\"role\":\"user\",\"content\":\"q %d\"}],\"max_tokens\":16}}\n",
                i, i);
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t->id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "%s", rel);
    sf.created_at = NOW;
    CHECK_EQ_INT(store_file_create(fx->st, &sf), 0);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx->st, t->id, &nb, NOW, &b), 0);
    snprintf(batch_id, ID_MAX, "%s", b.id);
    store_batch_release(&b);
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx->st, batch_id, &lim, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
}

static void fx_lease(struct fx *fx, const char *worker, int n, int64_t now, struct store_lease *l)
{
    struct store_lease_ask ask = {worker, MODEL, n, 0, 0, 60};
    memset(l, 0, sizeof *l);
    CHECK_EQ_INT(lease_acquire(fx->st, NULL, &ask, now, l), 0);
    CHECK_EQ_INT((int)l->n, n);
}

/* Every item of l succeeds with the given tokens each. */
static void fx_commit(struct fx *fx, const struct store_lease *l, const char *worker, int64_t now, int64_t prompt,
                      int64_t cached, int64_t completion)
{
    struct store_result rs[8];
    enum store_commit_outcome oc[8];
    CHECK(l->n <= 8);
    for (size_t i = 0; i < l->n; i++)
        rs[i] = (struct store_result){.request_id = l->items[i].id, .kind = STORE_RESULT_SUCCESS,
                                      .status_code = 200, .body = "{\"object\":\"chat.completion\"}",
                                      .body_len = 28, .prompt_tokens = prompt, .completion_tokens = completion,
                                      .cached_tokens = cached};
    CHECK_EQ_INT(lease_results_commit(fx->st, NULL, l->id, worker, rs, l->n, now, oc), 0);
    for (size_t i = 0; i < l->n; i++)
        CHECK_EQ_INT(oc[i], STORE_COMMIT_OK);
}

static const struct fleet_bucket *bucket(const struct fleet_report *r, const char *key)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->buckets[i].key, key) == 0)
            return &r->buckets[i];
    return NULL;
}

static const struct fleet_worker_fig *fig(const struct fleet_report *r, const char *id)
{
    for (size_t i = 0; i < r->n_workers; i++)
        if (strcmp(r->workers[i].id, id) == 0)
            return &r->workers[i];
    return NULL;
}

static void report(struct fx *fx, enum fleet_group g, const char *tenant, const struct usage_prices *ref,
                   struct fleet_report *r)
{
    struct store_fleet in;
    CHECK_EQ_INT(store_fleet_read(fx->st, 0, T0 + 1000, T0 + 100, 30, NULL, &in), 0);
    struct fleet_opts o = {0, T0 + 1000, T0 + 100, 30, g, tenant, NULL, ref};
    CHECK_EQ_INT(fleet_compute(&in, &o, r), 0);
    store_fleet_release(&in);
}

/*
 * The scenario (seconds after T0; worker ttl 30 s; report at T0+100):
 *   A  $3.60/h (1000 micro-dollars a second), registered at 0, seen at 95.
 *      L1 [10, 40): 2 requests of X (acme), each 7 prompt (1 cached) + 3
 *      generated = 9 computed -> 18.  L2 [20, 50): 2 of Y (bolt), each 20 + 16
 *      = 36 -> 72.  Pieces: [0,10) idle; [10,20) X; [20,40) X:Y = 18:72, so
 *      X 4 s, Y 16 s; [40,50) Y; [50,100) idle.
 *      X 14 s = 14000, Y 26 s = 26000, idle 60 s = 60000; registered 100000.
 *   C  $1.80/h (500 a second), registered at 0, leases X's third request
 *      at 30 (L3, 60 s) and is never heard of again: gone (30 < 100 - 30),
 *      its lease lapses at 90. [0,30) idle 15000; [30,90) X, lapsed, 30000.
 *   B  $7.20/h (2000 a second), registered at 60, seen at 80, never leases:
 *      [60,100) idle, 80000.
 * X = 44000 (30000 lapsed), Y = 26000, idle = 155000; the three workers'
 * registered cost 100000 + 45000 + 80000 = 225000 = 44000 + 26000 + 155000.
 */
static void scenario(struct fx *fx, char a[ID_MAX], char b[ID_MAX], char c[ID_MAX], char x[ID_MAX],
                     char y[ID_MAX])
{
    memset(fx, 0, sizeof *fx);
    fx->dir = th_tmpdir();
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    CHECK_EQ_INT(th_store_open(fx->dir, &so, &fx->st), 0);
    CHECK_EQ_INT(store_tenant_create(fx->st, "acme", NOW, &fx->ta), 0);
    CHECK_EQ_INT(store_tenant_create(fx->st, "bolt", NOW, &fx->tb), 0);
    char files[700];
    snprintf(files, sizeof files, "%s/files", fx->dir);
    mkdir(files, 0700);
    fx_worker(fx, "a", 3600000, T0, a);
    fx_worker(fx, "c", 1800000, T0, c);
    fx_batch(fx, &fx->ta, 3, x);
    struct store_lease l1, l2, l3;
    fx_lease(fx, a, 2, T0 + 10, &l1);
    fx_lease(fx, c, 1, T0 + 30, &l3); /* X's last request, before Y exists */
    CHECK_EQ_STR(l3.items[0].batch_id, x);
    fx_batch(fx, &fx->tb, 2, y);
    fx_lease(fx, a, 2, T0 + 20, &l2);
    CHECK_EQ_STR(l2.items[0].batch_id, y);
    fx_commit(fx, &l1, a, T0 + 40, 7, 1, 3);
    fx_commit(fx, &l2, a, T0 + 50, 20, 0, 16);
    fx_worker(fx, "b", 7200000, T0 + 60, b);
    CHECK_EQ_INT(store_worker_seen(fx->st, b, -1, T0 + 80), 0);
    CHECK_EQ_INT(store_worker_seen(fx->st, a, -1, T0 + 95), 0);
    store_lease_clear(&l1);
    store_lease_clear(&l2);
    store_lease_clear(&l3);
}

static void check_by_batch(const struct fleet_report *r, const char *a, const char *b, const char *c,
                           const char *x, const char *y)
{
    CHECK_EQ_INT((int)r->n, 2);
    const struct fleet_bucket *bx = bucket(r, x), *by = bucket(r, y);
    CHECK(bx && by);
    CHECK_EQ_INT(bx->cost_micros, 44000);
    CHECK_EQ_INT(bx->worker_ms, 74000);
    CHECK_EQ_INT(bx->lapsed_micros, 30000);
    CHECK_EQ_INT(bx->lapsed_ms, 60000);
    CHECK_EQ_INT(bx->prompt_tokens, 14);
    CHECK_EQ_INT(bx->cached_tokens, 2);
    CHECK_EQ_INT(bx->completion_tokens, 6);
    CHECK_EQ_INT(bx->requests, 3);
    CHECK_EQ_INT(by->cost_micros, 26000);
    CHECK_EQ_INT(by->worker_ms, 26000);
    CHECK_EQ_INT(by->lapsed_micros, 0);
    CHECK_EQ_INT(by->prompt_tokens, 40);
    CHECK_EQ_INT(by->completion_tokens, 32);
    /* effective prices: X computed 18 tokens for 44000 micro-dollars */
    int64_t in1m, out1m;
    fleet_effective(bx, &in1m, &out1m);
    CHECK_EQ_INT(out1m, 2444444444LL);  /* 44000e6 / 18 = 2444444444.4 */
    CHECK_EQ_INT(in1m, 2095238095LL);   /* 44000e6 * 12 / (18 * 14) = 2095238095.2 */
    CHECK_EQ_INT(r->total.cost_micros, 70000);
    /* the fleet: idle is its own line, and everything adds up to registered time x price */
    CHECK_EQ_INT(r->fleet.cost_micros, 70000);
    CHECK_EQ_INT(r->fleet.idle_micros, 155000);
    CHECK_EQ_INT(r->fleet.idle_ms, 130000);
    CHECK_EQ_INT(r->fleet.registered_ms, 230000);
    CHECK_EQ_INT(r->fleet.worker_ms, 100000);
    CHECK_EQ_INT(r->fleet.lapsed_micros, 30000);
    const struct fleet_worker_fig *fa = fig(r, a), *fb = fig(r, b), *fc = fig(r, c);
    CHECK(fa && fb && fc);
    CHECK_EQ_STR(fleet_state_name(fa->state), "idle");
    CHECK_EQ_STR(fleet_state_name(fb->state), "idle");
    CHECK_EQ_STR(fleet_state_name(fc->state), "gone");
    CHECK_EQ_INT(fa->registered_ms, 100000);
    CHECK_EQ_INT(fa->busy_ms, 40000);
    CHECK_EQ_INT(fa->idle_micros, 60000);
    CHECK_EQ_INT(fa->cost_micros, 100000);
    CHECK_EQ_INT(fa->computed_tokens, 18 + 72);
    CHECK_EQ_INT(fb->registered_ms, 40000);
    CHECK_EQ_INT(fb->busy_ms, 0);
    CHECK_EQ_INT(fb->cost_micros, 80000);
    CHECK_EQ_INT(fb->idle_micros, 80000);
    CHECK_EQ_INT(fc->registered_ms, 90000);
    CHECK_EQ_INT(fc->busy_ms, 60000);
    CHECK_EQ_INT(fc->busy_micros, 30000);
    CHECK_EQ_INT(fc->idle_micros, 15000);
    int64_t reg = 0;
    for (size_t i = 0; i < r->n_workers; i++)
        reg += r->workers[i].cost_micros;
    CHECK_EQ_INT(reg, 225000);
    CHECK_EQ_INT(r->fleet.cost_micros + r->fleet.idle_micros, reg);
}

TEST(fleet_scripted_workers_priced_and_attributed_by_hand)
{
    struct fx fx;
    char a[ID_MAX], b[ID_MAX], c[ID_MAX], x[ID_MAX], y[ID_MAX];
    scenario(&fx, a, b, c, x, y);
    struct usage_prices ref;
    char msg[200];
    CHECK_EQ_INT(usage_prices_parse(MODEL "=150000:600000", &ref, msg, sizeof msg), 0);
    struct fleet_report r;
    report(&fx, FLEET_BY_BATCH, NULL, &ref, &r);
    check_by_batch(&r, a, b, c, x, y);
    /* reference: X's L1 unit ((14-2)*150000 + 2*75000 + 6*600000) / 1e6 = 5.55 -> 6, its
     * L3 unit 0 tokens -> 0; Y (40*150000 + 32*600000) / 1e6 = 25.2 -> 25 */
    CHECK_EQ_INT(bucket(&r, x)->reference_micros, 6);
    CHECK_EQ_INT(bucket(&r, y)->reference_micros, 25);
    fleet_report_release(&r);

    /* the lapsed lease swept at 95 (released_at 95 >= expires_at 90): the same figures */
    struct store_sweep_report sw = {0};
    CHECK_EQ_INT(lease_expire_sweep(fx.st, NULL, T0 + 95, &sw), 0);
    CHECK_EQ_INT((int)sw.n_leases, 1);
    report(&fx, FLEET_BY_BATCH, NULL, NULL, &r);
    check_by_batch(&r, a, b, c, x, y);
    CHECK_EQ_INT(bucket(&r, x)->reference_micros, 0);
    fleet_report_release(&r);

    report(&fx, FLEET_BY_TENANT, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n, 2);
    CHECK_EQ_INT(bucket(&r, fx.ta.id)->cost_micros, 44000);
    CHECK_EQ_INT(bucket(&r, fx.tb.id)->cost_micros, 26000);
    fleet_report_release(&r);

    report(&fx, FLEET_BY_MODEL, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_STR(r.buckets[0].key, MODEL);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 70000);
    fleet_report_release(&r);

    /* by day: one day, with the fleet's own time in it */
    report(&fx, FLEET_BY_DAY, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_STR(r.buckets[0].key, "2023-11-14");
    CHECK_EQ_INT(r.buckets[0].start_time, 1699920000);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 70000);
    CHECK_EQ_INT(r.buckets[0].idle_micros, 155000);
    CHECK_EQ_INT(r.buckets[0].registered_ms, 230000);
    fleet_report_release(&r);

    /* one tenant: only its batches; the fleet line stays the fleet's */
    report(&fx, FLEET_BY_BATCH, fx.tb.id, NULL, &r);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_STR(r.buckets[0].key, y);
    CHECK_EQ_INT(r.total.cost_micros, 26000);
    CHECK_EQ_INT(r.fleet.idle_micros, 155000);
    fleet_report_release(&r);

    /* one batch, from its own leases and the workers' overlapping ones */
    struct store_fleet in;
    CHECK_EQ_INT(store_fleet_read(fx.st, 0, 0, T0 + 100, 30, x, &in), 0);
    CHECK_EQ_INT((int)in.n_workers, 0);
    CHECK_EQ_INT((int)in.n_leases, 3); /* L1, L3, and L2 that overlaps L1 */
    struct fleet_opts o = {0, INT64_MAX / 4, T0 + 100, 30, FLEET_BY_BATCH, NULL, x, NULL};
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 44000);
    CHECK_EQ_INT(r.buckets[0].lapsed_micros, 30000);
    CHECK_EQ_INT(r.buckets[0].worker_ms, 74000);
    fleet_report_release(&r);
    store_fleet_release(&in);

    /* a range that cuts the pieces: [T0+30, T0+45) */
    CHECK_EQ_INT(store_fleet_read(fx.st, T0 + 30, T0 + 45, T0 + 100, 30, NULL, &in), 0);
    struct fleet_opts o2 = {T0 + 30, T0 + 45, T0 + 100, 30, FLEET_BY_BATCH, NULL, NULL, NULL};
    CHECK_EQ_INT(fleet_compute(&in, &o2, &r), 0);
    /* A: [30,40) X:Y 18:72 -> 2000 : 8000, [40,45) Y 5000; C: [30,45) X 7500; no idle */
    CHECK_EQ_INT(bucket(&r, x)->cost_micros, 9500);
    CHECK_EQ_INT(bucket(&r, y)->cost_micros, 13000);
    CHECK_EQ_INT(bucket(&r, x)->prompt_tokens, 0); /* tokens count where their lease started */
    CHECK_EQ_INT(r.fleet.idle_micros, 0);
    CHECK_EQ_INT(r.fleet.registered_ms, 30000);
    fleet_report_release(&r);
    store_fleet_release(&in);
    usage_prices_release(&ref);
    store_close(fx.st);
}

/* Regression (fleet history rewritten by a deletion): the fleet read a
 * part's tokens from its results rows and its tenant from the batch row,
 * so deleting batch Y (which takes its requests and results along) moved
 * Y's cost to tenant "" and re-split [20, 40) of worker A as X : Y =
 * 18 : 0. Parts keep their tenant and sums (schema.sql migration 13,
 * schema_pg.sql 9): every figure of the scenario stays, on either engine. */
TEST(fleet_history_unchanged_when_a_batch_is_deleted)
{
    struct fx fx;
    char a[ID_MAX], b[ID_MAX], c[ID_MAX], x[ID_MAX], y[ID_MAX];
    scenario(&fx, a, b, c, x, y);
    struct fleet_report r;
    report(&fx, FLEET_BY_BATCH, NULL, NULL, &r);
    check_by_batch(&r, a, b, c, x, y);
    fleet_report_release(&r);
    /* Y's two requests succeeded at 50; end it as finalization would, and delete it */
    char q[300];
    snprintf(q, sizeof q, "UPDATE batches SET status = 'completed' WHERE id = '%s'", y);
    struct sdb *db = th_db_open(fx.dir);
    CHECK_EQ_INT(sdb_exec(db, q), SDB_OK);
    sdb_close(db);
    CHECK_EQ_INT(store_batch_delete(fx.st, fx.tb.id, "openai", y), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", y);
    CHECK_EQ_INT(th_db_int(fx.dir, q), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM requests WHERE batch_id = '%s'", y);
    CHECK_EQ_INT(th_db_int(fx.dir, q), 0);

    report(&fx, FLEET_BY_BATCH, NULL, NULL, &r);
    check_by_batch(&r, a, b, c, x, y); /* X 44000, Y 26000 with its 40 + 32 tokens, idle 155000 */
    fleet_report_release(&r);
    report(&fx, FLEET_BY_TENANT, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n, 2);
    CHECK(bucket(&r, "") == NULL);
    CHECK_EQ_INT(bucket(&r, fx.ta.id)->cost_micros, 44000);
    CHECK_EQ_INT(bucket(&r, fx.tb.id)->cost_micros, 26000);
    CHECK_EQ_INT(bucket(&r, fx.tb.id)->completion_tokens, 32);
    fleet_report_release(&r);
    report(&fx, FLEET_BY_BATCH, fx.tb.id, NULL, &r); /* bolt's own view keeps its history */
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.total.cost_micros, 26000);
    fleet_report_release(&r);
    /* X's own figure (GET /v1/batches/X) reads the part of Y it overlapped */
    struct store_fleet in;
    CHECK_EQ_INT(store_fleet_read(fx.st, 0, 0, T0 + 100, 30, x, &in), 0);
    struct fleet_opts o = {0, INT64_MAX / 4, T0 + 100, 30, FLEET_BY_BATCH, NULL, x, NULL};
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 44000);
    CHECK_EQ_INT(r.buckets[0].worker_ms, 74000);
    fleet_report_release(&r);
    store_fleet_release(&in);
    store_close(fx.st);
}

/* Regression (PostgreSQL fleet view: 0 reused tokens): the PostgreSQL
 * units statement returned no reused_tokens column, which the driver's
 * column check read as 0. One worker at $3.60/h leases X's 2 requests
 * [10, 30): one computed (5 prompt + 3 generated), one answered from
 * reuse (8 tokens saved). The bucket, the fleet and the batch's own figure
 * count the 8 on either engine; the reused request costs nothing, so the
 * lease's 20000 micro-dollars split by tokens computed go to it whole. */
TEST(fleet_counts_reused_tokens_on_either_engine)
{
    struct fx fx;
    memset(&fx, 0, sizeof fx);
    fx.dir = th_tmpdir();
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    CHECK_EQ_INT(th_store_open(fx.dir, &so, &fx.st), 0);
    CHECK_EQ_INT(store_tenant_create(fx.st, "acme", NOW, &fx.ta), 0);
    char files[700], a[ID_MAX], x[ID_MAX];
    snprintf(files, sizeof files, "%s/files", fx.dir);
    mkdir(files, 0700);
    fx_worker(&fx, "a", 3600000, T0, a);
    fx_batch(&fx, &fx.ta, 2, x);
    struct store_lease l;
    fx_lease(&fx, a, 2, T0 + 10, &l);
    struct store_result rs[2];
    enum store_commit_outcome oc[2];
    for (int i = 0; i < 2; i++)
        rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                      .status_code = 200, .body = "{\"object\":\"chat.completion\"}",
                                      .body_len = 28, .prompt_tokens = 5, .completion_tokens = 3};
    rs[1].prompt_tokens = rs[1].completion_tokens = 0;
    int64_t saved = 8;
    CHECK_EQ_INT(store_reuse_commit(fx.st, l.id, a, &rs[1], &saved, 1, T0 + 10, oc), 0);
    CHECK_EQ_INT(oc[0], STORE_COMMIT_OK);
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, a, rs, 1, T0 + 30, oc), 0);
    CHECK_EQ_INT(oc[0], STORE_COMMIT_OK);
    store_lease_clear(&l);

    struct fleet_report r;
    report(&fx, FLEET_BY_BATCH, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.buckets[0].reused_tokens, 8);
    CHECK_EQ_INT(r.buckets[0].prompt_tokens, 5);
    CHECK_EQ_INT(r.buckets[0].completion_tokens, 3);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 20000);
    CHECK_EQ_INT(r.total.reused_tokens, 8);
    CHECK_EQ_INT(r.fleet.reused_tokens, 8);
    fleet_report_release(&r);
    struct store_fleet in;
    CHECK_EQ_INT(store_fleet_read(fx.st, 0, 0, T0 + 100, 30, x, &in), 0);
    struct fleet_opts o = {0, INT64_MAX / 4, T0 + 100, 30, FLEET_BY_BATCH, NULL, x, NULL};
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT(r.buckets[0].reused_tokens, 8);
    fleet_report_release(&r);
    store_fleet_release(&in);
    /* the ledger agrees: one row with 8 reused tokens and no cost */
    char q[300];
    snprintf(q, sizeof q, "SELECT sum(reused_tokens) * 1000 + sum(cost_micros) FROM usage_ledger WHERE batch_id = '%s'",
             x);
    CHECK_EQ_INT(th_db_int(fx.dir, q), 8000);
    store_close(fx.st);
}

/* Regression (a worker's silence billed as idle): a registered worker
 * silent longer than the TTL that calls again keeps its id; its silence
 * was counted as registered idle time. Now the call that ends it records
 * the gap, and the gap is gone time except where a lease still ran. On the
 * store's clock (TTL 30 s), seconds after T0, at $3.60/h (1000 a second):
 *   registered at 0; leases X's request at 10 (60 s lease, lapses at 70);
 *   silent until a heartbeat at 100 (gap [10, 100)); seen at 130;
 *   report at 140 (live).
 *   [0, 10) idle 10000; [10, 70) X 60000 (lapsed: charged like any lease);
 *   [70, 100) gone; [100, 140) idle 40000. Registered 110 s = 110000
 *   (the silence counted would have made it 140000, idle 80000). */
TEST(fleet_worker_back_from_a_silence_is_not_billed_idle_for_the_gap)
{
    struct fx fx;
    memset(&fx, 0, sizeof fx);
    fx.dir = th_tmpdir();
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    so.worker_ttl_s = 30;
    CHECK_EQ_INT(th_store_open(fx.dir, &so, &fx.st), 0);
    CHECK_EQ_INT(store_tenant_create(fx.st, "acme", NOW, &fx.ta), 0);
    char files[700], a[ID_MAX], x[ID_MAX], q[300];
    snprintf(files, sizeof files, "%s/files", fx.dir);
    mkdir(files, 0700);
    fx_worker(&fx, "a", 3600000, T0, a);
    fx_batch(&fx, &fx.ta, 1, x);
    struct store_lease l;
    fx_lease(&fx, a, 1, T0 + 10, &l);
    store_lease_clear(&l);
    snprintf(q, sizeof q, "SELECT count(*) FROM worker_gaps WHERE worker_id = '%s'", a);
    CHECK_EQ_INT(th_db_int(fx.dir, q), 0); /* 10 s from registering to the lease: no gap */
    CHECK_EQ_INT(store_worker_seen(fx.st, a, -1, T0 + 100), 0);
    CHECK_EQ_INT(store_worker_seen(fx.st, a, -1, T0 + 100), 0); /* the same second again: one gap */
    CHECK_EQ_INT(store_worker_seen(fx.st, a, -1, T0 + 130), 0); /* 30 s, the TTL itself: no gap */
    snprintf(q, sizeof q, "SELECT count(*) * 1000000 + min(gone_at - %d) * 1000 + min(back_at - %d) FROM "
             "worker_gaps WHERE worker_id = '%s'", T0, T0, a);
    CHECK_EQ_INT(th_db_int(fx.dir, q), 1000000 + 10 * 1000 + 100);

    struct store_fleet in;
    CHECK_EQ_INT(store_fleet_read(fx.st, 0, T0 + 1000, T0 + 140, 30, NULL, &in), 0);
    CHECK_EQ_INT((int)in.n_gaps, 1);
    struct fleet_opts o = {0, T0 + 1000, T0 + 140, 30, FLEET_BY_BATCH, NULL, NULL, NULL};
    struct fleet_report r;
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n_workers, 1);
    const struct fleet_worker_fig *f = &r.workers[0];
    CHECK_EQ_STR(fleet_state_name(f->state), "idle");
    CHECK_EQ_INT(f->registered_ms, 110000);
    CHECK_EQ_INT(f->busy_ms, 60000);
    CHECK_EQ_INT(f->idle_ms, 50000);
    CHECK_EQ_INT(f->cost_micros, 110000);
    CHECK_EQ_INT(f->idle_micros, 50000);
    CHECK_EQ_INT(bucket(&r, x)->cost_micros, 60000);
    CHECK_EQ_INT(bucket(&r, x)->lapsed_micros, 60000);
    CHECK_EQ_INT(r.fleet.registered_ms, 110000);
    CHECK_EQ_INT(r.fleet.cost_micros + r.fleet.idle_micros, 110000);
    fleet_report_release(&r);
    /* by day, the fleet's own time carries the same registered seconds */
    o.group = FLEET_BY_DAY;
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.buckets[0].registered_ms, 110000);
    CHECK_EQ_INT(r.buckets[0].idle_micros, 50000);
    fleet_report_release(&r);
    store_fleet_release(&in);
    /* a range cutting the gap, [50, 120): [50, 70) busy, [70, 100) gone, [100, 120) idle */
    CHECK_EQ_INT(store_fleet_read(fx.st, T0 + 50, T0 + 120, T0 + 140, 30, NULL, &in), 0);
    struct fleet_opts o2 = {T0 + 50, T0 + 120, T0 + 140, 30, FLEET_BY_BATCH, NULL, NULL, NULL};
    CHECK_EQ_INT(fleet_compute(&in, &o2, &r), 0);
    CHECK_EQ_INT(r.workers[0].registered_ms, 40000);
    CHECK_EQ_INT(r.workers[0].busy_ms, 20000);
    CHECK_EQ_INT(r.workers[0].idle_micros, 20000);
    fleet_report_release(&r);
    store_fleet_release(&in);
    store_close(fx.st);
}

/* A worker registered with no price (no class matched, none declared) is
 * flagged; one priced 0 on purpose is not. */
TEST(fleet_flags_a_worker_registered_unpriced)
{
    struct fx fx;
    memset(&fx, 0, sizeof fx);
    fx.dir = th_tmpdir();
    CHECK_EQ_INT(th_store_open(fx.dir, NULL, &fx.st), 0);
    struct store_model_name names[] = {{MODEL, MODEL, 0, NULL}};
    struct store_worker_new wu = {"u", "cpu", 0, 0, names, 1, 0, 1}, wf = {"f", "cpu", 0, 0, names, 1, 0, 0};
    char u[ID_MAX], f[ID_MAX];
    CHECK_EQ_INT(lease_worker_register(fx.st, &wu, T0, u), 0);
    CHECK_EQ_INT(lease_worker_register(fx.st, &wf, T0, f), 0);
    CHECK_EQ_INT(store_worker_seen(fx.st, u, -1, T0 + 95), 0);
    struct fleet_report r;
    report(&fx, FLEET_BY_BATCH, NULL, NULL, &r);
    CHECK_EQ_INT((int)r.n_workers, 2);
    CHECK_EQ_INT(fig(&r, u)->unpriced, 1);
    CHECK_EQ_INT(fig(&r, f)->unpriced, 0);
    CHECK_EQ_INT(fig(&r, u)->cost_micros, 0);
    CHECK_EQ_INT(fig(&r, u)->registered_ms, 100000);
    fleet_report_release(&r);
    store_close(fx.st);
}

TEST(fleet_split_is_exact_with_remainders)
{
    /* one worker at $1/h (277.7 micro-dollars a second) over 3 units of weights 1:1:1 */
    struct store_fleet_lease l = {"lease_1", "wrk_1", MODEL, T0 + 1, T0 + 11, 0, 0, 1000000};
    struct store_fleet_unit u[3] = {
        {"lease_1", "batch_a", "ten_1", 1, 1, 0, 0, 0},
        {"lease_1", "batch_b", "ten_1", 1, 1, 0, 0, 0},
        {"lease_1", "batch_c", "ten_1", 1, 1, 0, 0, 0},
    };
    struct store_fleet in = {NULL, 0, &l, 1, u, 3, NULL, 0};
    struct fleet_opts o = {0, INT64_MAX / 4, T0 + 100, 30, FLEET_BY_BATCH, NULL, NULL, NULL};
    struct fleet_report r;
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    /* floor(t * 1e6 / 3600) at T0 + 11 and T0 + 1: 472222253055 - 472222250277 = 2778 */
    int64_t whole = fleet_meter_cost(1000000, T0 + 1, T0 + 11);
    CHECK_EQ_INT(whole, 2778);
    CHECK_EQ_INT((int)r.n, 3);
    for (int i = 0; i < 3; i++) /* 2778 = 3 x 926 */
        CHECK_EQ_INT(r.buckets[i].cost_micros, 926);
    CHECK_EQ_INT(r.total.cost_micros, whole);
    CHECK_EQ_INT(r.total.worker_ms, 10000);
    CHECK_EQ_INT(r.buckets[0].worker_ms, 3334); /* 10000 = 3334 + 3333 + 3333: the first gets the rest */
    CHECK_EQ_INT(r.buckets[1].worker_ms, 3333);
    CHECK_EQ_INT(r.fleet.idle_micros, 0); /* no worker row: never idle */
    fleet_report_release(&r);
}

TEST(fleet_pieces_cut_at_midnight_utc)
{
    /* 1700006400 = 2023-11-15T00:00:00Z. A worker at 1000 micro-dollars a second,
     * registered [M-30, M+40) (gone: seen last at M+40, ttl 30, report at M+100),
     * holding one lease [M-10, M+20): day 14 gets 20 s idle + 10 s busy, day 15
     * 20 s busy + 20 s idle. The lease's tokens count on the day it started. */
    const int64_t M = 1700006400;
    struct store_fleet_worker w = {"wrk_1", "w", "cpu", MODEL, 3600000, M - 30, M + 40, M + 20, 0};
    struct store_fleet_lease l = {"lease_1", "wrk_1", MODEL, M - 10, M + 20, 0, 0, 3600000};
    struct store_fleet_unit u = {"lease_1", "batch_a", "ten_1", 2, 10, 4, 6, 0};
    struct store_fleet in = {&w, 1, &l, 1, &u, 1, NULL, 0};
    struct fleet_opts o = {0, M + 86400, M + 100, 30, FLEET_BY_DAY, NULL, NULL, NULL};
    struct fleet_report r;
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n, 2);
    CHECK_EQ_STR(r.buckets[0].key, "2023-11-14");
    CHECK_EQ_STR(r.buckets[1].key, "2023-11-15");
    CHECK_EQ_INT(r.buckets[0].cost_micros, 10000);
    CHECK_EQ_INT(r.buckets[0].idle_micros, 20000);
    CHECK_EQ_INT(r.buckets[0].registered_ms, 30000);
    CHECK_EQ_INT(r.buckets[0].prompt_tokens, 10);
    CHECK_EQ_INT(r.buckets[1].cost_micros, 20000);
    CHECK_EQ_INT(r.buckets[1].idle_micros, 20000);
    CHECK_EQ_INT(r.buckets[1].registered_ms, 40000);
    CHECK_EQ_INT(r.buckets[1].prompt_tokens, 0);
    CHECK_EQ_INT(r.buckets[1].start_time, M);
    CHECK_EQ_STR(fleet_state_name(r.workers[0].state), "gone");
    CHECK_EQ_INT(r.workers[0].cost_micros, 70000);
    CHECK_EQ_INT(r.fleet.cost_micros + r.fleet.idle_micros, 70000);
    fleet_report_release(&r);
    /* by batch: one bucket, the two days' shares together */
    o.group = FLEET_BY_BATCH;
    CHECK_EQ_INT(fleet_compute(&in, &o, &r), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT(r.buckets[0].cost_micros, 30000);
    CHECK_EQ_INT(r.buckets[0].worker_ms, 30000);
    CHECK_EQ_INT(r.buckets[0].registered_ms, 0); /* the fleet's time is in day buckets only */
    fleet_report_release(&r);
}
