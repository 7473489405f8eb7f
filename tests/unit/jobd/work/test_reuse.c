/* Tests for result reuse (jobd/work/reuse.c, jobd/store/store_reuse.c): the
 * key and its canonical body, which bodies are deterministic, the backend
 * of a device, the mark on a reused body; then on a real store (SQLite, or
 * PostgreSQL with JOBD_TEST_DATABASE) a scripted worker: a second batch of
 * the same lines is answered at lease time with zero tokens and cost and
 * the saving in reused_tokens, never for another tenant, another model
 * hash or another backend, never past the retention, and swept by it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"
#include "jobd/store/store_usage.h"
#include "jobd/work/lease.h"
#include "jobd/work/reuse.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000
#define MODEL "SmolLM2-135M-Instruct"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define EP "/v1/chat/completions"

static int key_of(const char *tenant, const char *ep, const char *body, const char *sha, const char *backend,
                  char out[REUSE_KEY_HEX])
{
    return reuse_key(tenant, ep, body, strlen(body), sha, backend, out);
}

TEST(reuse_key_is_the_canonical_body_so_spacing_and_key_order_do_not_matter)
{
    char a[REUSE_KEY_HEX], b[REUSE_KEY_HEX];
    CHECK_EQ_INT(key_of("ten_1", EP, "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4}", SHA_A, "cpu", a), 0);
    CHECK_EQ_INT(key_of("ten_1", EP, "{ \"max_tokens\" : 4, \"temperature\": 0,\n \"model\": \"m\" }", SHA_A,
                        "cpu", b), 0);
    CHECK_EQ_STR(a, b);
    CHECK_EQ_INT((int)strlen(a), 64);
}

TEST(reuse_key_differs_in_tenant_endpoint_model_hash_backend_and_every_body_field)
{
    const char *body = "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4}";
    char k0[REUSE_KEY_HEX], k[REUSE_KEY_HEX];
    CHECK_EQ_INT(key_of("ten_1", EP, body, SHA_A, "cpu", k0), 0);
    CHECK_EQ_INT(key_of("ten_2", EP, body, SHA_A, "cpu", k), 0);
    CHECK(strcmp(k0, k) != 0);
    CHECK_EQ_INT(key_of("ten_1", "/v1/completions", body, SHA_A, "cpu", k), 0);
    CHECK(strcmp(k0, k) != 0);
    CHECK_EQ_INT(key_of("ten_1", EP, body, SHA_B, "cpu", k), 0);
    CHECK(strcmp(k0, k) != 0);
    CHECK_EQ_INT(key_of("ten_1", EP, body, SHA_A, "cuda NVIDIA H200", k), 0);
    CHECK(strcmp(k0, k) != 0);
    const char *others[] = {
        "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":5}",
        "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4,\"n\":2}",
        "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4,\"seed\":1}",
        "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":4,\"top_p\":0.5}",
        "{\"model\":\"m2\",\"temperature\":0,\"max_tokens\":4}",
        "{\"model\":\"m\",\"temperature\":0.0,\"max_tokens\":4}", /* conservative: another text */
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        CHECK_EQ_INT(key_of("ten_1", EP, others[i], SHA_A, "cpu", k), 0);
        CHECK(strcmp(k0, k) != 0);
    }
}

TEST(reuse_only_temperature_zero_or_a_seed_is_deterministic)
{
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":0}", 17), 1);
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":0.0}", 19), 1);
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":0.7,\"seed\":3}", 28), 1);
    CHECK_EQ_INT(reuse_deterministic("{\"seed\":3}", 10), 1);
    CHECK_EQ_INT(reuse_deterministic("{}", 2), 0);                       /* default temperature 1 */
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":0.7}", 19), 0);
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":\"0\"}", 19), 0);
    CHECK_EQ_INT(reuse_deterministic("{\"seed\":\"3\"}", 12), 0);
    CHECK_EQ_INT(reuse_deterministic("{\"seed\":3.5}", 12), 0);
    CHECK_EQ_INT(reuse_deterministic("[0]", 3), 0);
    CHECK_EQ_INT(reuse_deterministic("{\"temperature\":0", 16), 0); /* not JSON */
    CHECK_EQ_INT(reuse_deterministic("{\"seed\":1,\"seed\":2}", 19), 0); /* duplicate keys */
    char k[REUSE_KEY_HEX];
    CHECK_EQ_INT(key_of("ten_1", EP, "{\"temperature\":0.7}", SHA_A, "cpu", k), ERR_INVAL);
    CHECK_EQ_INT(key_of("ten_1", EP, "{\"temperature\":0}", "", "cpu", k), ERR_INVAL); /* no model hash */
    CHECK_EQ_INT(key_of("ten_1", EP, "{\"temperature\":0}", SHA_A, "", k), ERR_INVAL);
}

TEST(reuse_backend_drops_the_device_index_only)
{
    char b[129];
    reuse_backend("cpu", b, sizeof b);
    CHECK_EQ_STR(b, "cpu");
    reuse_backend("", b, sizeof b);
    CHECK_EQ_STR(b, "cpu");
    reuse_backend(NULL, b, sizeof b);
    CHECK_EQ_STR(b, "cpu");
    reuse_backend("cuda:0 NVIDIA H200", b, sizeof b);
    CHECK_EQ_STR(b, "cuda NVIDIA H200");
    reuse_backend("cuda:3 NVIDIA H200", b, sizeof b);
    CHECK_EQ_STR(b, "cuda NVIDIA H200");
    reuse_backend("cuda:1", b, sizeof b);
    CHECK_EQ_STR(b, "cuda");
    reuse_backend("cuda NVIDIA A100", b, sizeof b);
    CHECK_EQ_STR(b, "cuda NVIDIA A100");
}

TEST(reuse_mark_changes_only_the_fingerprint_and_adds_reused_tokens)
{
    const char *body = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"smollm\","
                       "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"caf\\u00e9 \\\"x\\\"\"},"
                       "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,"
                       "\"completion_tokens\":3,\"total_tokens\":10},\"system_fingerprint\":\"fp_1\"}";
    char *out = NULL;
    size_t n = 0;
    CHECK_EQ_INT(reuse_mark_body(body, strlen(body), 10, &out, &n), 0);
    CHECK_EQ_STR(out, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"smollm\","
                      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"caf\xc3\xa9 \\\"x\\\"\"},"
                      "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,"
                      "\"completion_tokens\":3,\"total_tokens\":10,\"reused_tokens\":10},"
                      "\"system_fingerprint\":\"fp_1+reused\"}");
    CHECK_EQ_INT((int)n, (int)strlen(out));
    free(out);
    CHECK_EQ_INT(reuse_mark_body("{\"usage\":{},\"system_fingerprint\":null}", 38, 4, &out, &n), 0);
    CHECK_EQ_STR(out, "{\"usage\":{\"reused_tokens\":4},\"system_fingerprint\":\"reused\"}");
    free(out);
    CHECK_EQ_INT(reuse_mark_body("[]", 2, 4, &out, &n), ERR_INVAL);
}

TEST(reuse_batch_metadata_opts_in_and_out)
{
    CHECK_EQ_INT(reuse_batch_wants(NULL, 0), 0);
    CHECK_EQ_INT(reuse_batch_wants(NULL, 1), 1);
    CHECK_EQ_INT(reuse_batch_wants("{\"reuse\":\"on\"}", 0), 1);
    CHECK_EQ_INT(reuse_batch_wants("{\"reuse\":\"off\"}", 1), 0);
    CHECK_EQ_INT(reuse_batch_wants("{\"priority\":\"3\"}", 1), 1);
    CHECK_EQ_INT(reuse_metadata_value_ok("on"), 1);
    CHECK_EQ_INT(reuse_metadata_value_ok("off"), 1);
    CHECK_EQ_INT(reuse_metadata_value_ok("yes"), 0);
    CHECK_EQ_INT(reuse_metadata_value_ok(NULL), 0);
}

/* ---- on a store ------------------------------------------------------------------ */

struct fx {
    const char *dir;
    struct store *st;
    struct store_tenant ta, tb;
    int n_files;
    struct lease_opts o;
};

static void fx_open(struct fx *fx)
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
    lease_opts_default(&fx->o);
    fx->o.reuse_retention_s = 3600;
}

static void fx_worker(struct fx *fx, const char *sha, const char *device, char id[ID_MAX])
{
    struct store_model_name names[] = {{MODEL, MODEL, 0, sha}, {MODEL, "smollm", 0, sha}};
    struct store_worker_new w = {"w", device, 4096, 64, names, 2, 0, 0};
    CHECK_EQ_INT(lease_worker_register(fx->st, &w, NOW, id), 0);
}

/* A batch of n lines: line i asks "q<i>" at temperature 0, but line n-1,
 * which has no temperature (not deterministic). */
static void fx_batch(struct fx *fx, const struct store_tenant *t, int n, const char *metadata, char batch_id[ID_MAX])
{
    char rel[64], path[800];
    snprintf(rel, sizeof rel, "files/in-%d", fx->n_files++);
    snprintf(path, sizeof path, "%s/%s", fx->dir, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"custom_id\":\"c-%d\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                "{\"model\":\"smollm\",\"messages\":[{\"role\":\"user\",\"content\":\"q%d\"}],\"max_tokens\":8%s}}\n",
                i, i, i < n - 1 ? ",\"temperature\":0" : "");
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t->id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "%s", rel);
    sf.created_at = NOW;
    CHECK_EQ_INT(store_file_create(fx->st, &sf), 0);
    struct store_batch_new nb = {EP, sf.id, 86400 * 30, metadata, 0, NULL};
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

/* Lease what is ready for worker and answer it all (7 + 3 tokens each);
 * returns how many the worker got. */
static int fx_work(struct fx *fx, const char *worker, int64_t now)
{
    struct store_lease_ask a = {worker, MODEL, 64, 0, 0, 60};
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx->st, &fx->o, &a, now, &l), 0);
    int n = (int)l.n;
    struct store_result *rs = calloc(l.n + 1, sizeof *rs);
    enum store_commit_outcome *oc = calloc(l.n + 1, sizeof *oc);
    char **bodies = calloc(l.n + 1, sizeof *bodies);
    CHECK(rs && oc && bodies);
    for (size_t i = 0; i < l.n; i++) {
        CHECK(asprintf(&bodies[i],
                       "{\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
                       "\"message\":{\"role\":\"assistant\",\"content\":\"a %s\"}}],\"usage\":{\"prompt_tokens\":7,"
                       "\"completion_tokens\":3,\"total_tokens\":10},\"system_fingerprint\":\"fp\"}",
                       l.items[i].id, l.items[i].custom_id) > 0);
        rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                      .status_code = 200, .body = bodies[i], .body_len = strlen(bodies[i]),
                                      .prompt_tokens = 7, .completion_tokens = 3};
    }
    if (l.n)
        CHECK_EQ_INT(lease_results_commit(fx->st, &fx->o, l.id, worker, rs, l.n, now, oc), 0);
    for (size_t i = 0; i < l.n; i++) {
        CHECK_EQ_INT(oc[i], STORE_COMMIT_OK);
        free(bodies[i]);
    }
    free(bodies);
    free(rs);
    free(oc);
    store_lease_clear(&l);
    return n;
}

struct scan {
    int n, n_reused;
    char first_body[1024];
};

static int scan_row(void *ctx, const struct store_result_row *r)
{
    struct scan *s = ctx;
    s->n++;
    if (r->body && strstr(r->body, "\"reused_tokens\":10")) {
        s->n_reused++;
        CHECK(strstr(r->body, "\"system_fingerprint\":\"fp+reused\"") != NULL);
        CHECK_EQ_INT((int)r->prompt_tokens, 0);
        CHECK_EQ_INT((int)r->completion_tokens, 0);
        if (!s->first_body[0])
            snprintf(s->first_body, sizeof s->first_body, "%.*s", (int)r->body_len, r->body);
    }
    return 0;
}

static struct scan fx_scan(struct fx *fx, const char *bid)
{
    struct scan s;
    memset(&s, 0, sizeof s);
    int64_t cur = 0;
    int n = 0;
    do
        CHECK_EQ_INT(store_results_scan(fx->st, bid, &cur, 100, scan_row, &s, &n), 0);
    while (n);
    return s;
}

static struct store_usage_row fx_usage(struct fx *fx, const char *bid)
{
    struct store_usage_row *rows = NULL, tot;
    size_t n = 0;
    int more = 0;
    CHECK_EQ_INT(store_usage_report(fx->st, NULL, 0, NOW + 100 * 86400, bid, STORE_USAGE_BATCH, &rows, &n, &more,
                                    &tot),
                 0);
    free(rows);
    return tot;
}

TEST(reuse_second_batch_is_answered_at_lease_time_same_tenant_model_and_backend_only)
{
    struct fx fx;
    fx_open(&fx);
    char wa[ID_MAX];
    fx_worker(&fx, SHA_A, "cpu", wa);
    char b1[ID_MAX], b2[ID_MAX], b3[ID_MAX], b4[ID_MAX];
    fx_batch(&fx, &fx.ta, 5, "{\"reuse\":\"on\"}", b1);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 10), 5); /* nothing recorded yet: all computed */
    CHECK_EQ_INT(fx_scan(&fx, b1).n_reused, 0);

    /* the same lines again: the 4 deterministic ones are answered from b1, the worker gets 1 */
    fx_batch(&fx, &fx.ta, 5, "{\"reuse\":\"on\"}", b2);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 20), 1);
    struct scan s2 = fx_scan(&fx, b2);
    CHECK_EQ_INT(s2.n, 5);
    CHECK_EQ_INT(s2.n_reused, 4);
    CHECK(strstr(s2.first_body, "\"id\":\"chatcmpl-req_") != NULL); /* b1's answer, marked */
    struct store_usage_row u = fx_usage(&fx, b2);
    CHECK_EQ_INT((int)u.requests, 5);
    CHECK_EQ_INT((int)u.reused_requests, 4);
    CHECK_EQ_INT((int)u.reused_tokens, 40);
    CHECK_EQ_INT((int)u.prompt_tokens, 7); /* only the computed line's */

    /* a batch that does not opt in, another tenant: computed */
    fx_batch(&fx, &fx.ta, 5, NULL, b3);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 30), 5);
    fx_batch(&fx, &fx.tb, 5, "{\"reuse\":\"on\"}", b4);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 40), 5);
    CHECK_EQ_INT(fx_scan(&fx, b4).n_reused, 0);

    /* jobd --reuse (the default on): a batch without metadata reuses, "off" opts out */
    fx.o.reuse_default = 1;
    char b5[ID_MAX], b6[ID_MAX];
    fx_batch(&fx, &fx.ta, 5, NULL, b5);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 50), 1);
    fx_batch(&fx, &fx.ta, 5, "{\"reuse\":\"off\"}", b6);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 60), 5);
    store_close(fx.st);
}

TEST(reuse_never_crosses_model_hashes_or_backends_and_a_worker_without_hash_gets_none)
{
    struct fx fx;
    fx_open(&fx);
    char wa[ID_MAX], wb[ID_MAX], wg[ID_MAX], wn[ID_MAX];
    fx_worker(&fx, SHA_A, "cpu", wa);
    fx_worker(&fx, SHA_B, "cpu", wb);
    fx_worker(&fx, SHA_A, "cuda:0 NVIDIA H200", wg);
    fx_worker(&fx, NULL, "cpu", wn);
    char b[ID_MAX];
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 10), 3);
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wb, NOW + 20), 3); /* another model file */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wg, NOW + 30), 3); /* another backend */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wn, NOW + 40), 3); /* no hash: no reuse */
    /* ... and each of the first three recorded its own: wb is now answered from its own run */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wb, NOW + 50), 1);
    CHECK_EQ_INT(fx_scan(&fx, b).n_reused, 2);
    /* a register with a malformed hash is refused */
    struct store_model_name bad[] = {{MODEL, MODEL, 0, "abc"}};
    struct store_worker_new w = {"w", "cpu", 0, 0, bad, 1, 0, 0};
    char id[ID_MAX];
    CHECK_EQ_INT(lease_worker_register(fx.st, &w, NOW, id), ERR_INVAL);
    store_close(fx.st);
}

TEST(reuse_results_older_than_the_retention_are_not_reused_and_are_swept)
{
    struct fx fx;
    fx_open(&fx);
    char wa[ID_MAX];
    fx_worker(&fx, SHA_A, "cpu", wa);
    char b[ID_MAX];
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 10), 3);
    /* exactly the retention later: still reused (created_at >= now - retention) */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 10 + 3600), 1);
    /* one second more: computed again (not recorded: the old row holds the key until the sweep) */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 10 + 3601), 3);
    int64_t n = -1;
    CHECK_EQ_INT(store_reuse_expire(fx.st, NOW + 10 + 3601 - 3600, &n), 0);
    CHECK_EQ_INT((int)n, 2); /* the two deterministic lines' rows */
    /* after the sweep the next computation is recorded and reused again */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 5000), 3);
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 5001), 1);
    /* retention 0: reuse is off */
    fx.o.reuse_retention_s = 0;
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 5002), 3);
    store_close(fx.st);
}

/* Lease what is ready for worker and give it all back unanswered; returns how many. */
static int fx_lease_release(struct fx *fx, const char *worker, int64_t now)
{
    struct store_lease_ask a = {worker, MODEL, 64, 0, 0, 60};
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx->st, &fx->o, &a, now, &l), 0);
    int n = (int)l.n;
    int64_t rel = 0;
    if (n)
        CHECK_EQ_INT(lease_release(fx->st, l.id, worker, NULL, 0, now, &rel), 0);
    CHECK_EQ_INT((int)rel, n);
    store_lease_clear(&l);
    return n;
}

/* Regression (reuse_key of an earlier lease): a request leased to worker A
 * (its key for A's model set) and given back, then answered from reuse
 * under worker B's model, must not leave B's answer recorded under A's key. */
TEST(reuse_an_answer_reused_after_a_release_is_not_recorded_under_the_earlier_lease_key)
{
    struct fx fx;
    fx_open(&fx);
    char wa[ID_MAX], wb[ID_MAX];
    fx_worker(&fx, SHA_A, "cpu", wa);
    fx_worker(&fx, SHA_B, "cpu", wb);
    char b[ID_MAX];
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wb, NOW + 10), 3); /* B's answers recorded under B's keys */
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_lease_release(&fx, wa, NOW + 20), 3); /* A: misses, keys for A set, given back */
    CHECK_EQ_INT(fx_work(&fx, wb, NOW + 30), 1);          /* B: 2 reused, 1 computed */
    CHECK_EQ_INT(fx_scan(&fx, b).n_reused, 2);
    fx_batch(&fx, &fx.ta, 3, "{\"reuse\":\"on\"}", b);
    CHECK_EQ_INT(fx_work(&fx, wa, NOW + 40), 3); /* nothing of B's under A's keys */
    store_close(fx.st);
}
