/* Tests for work distribution (jobd/store/store_lease.c, jobd/work/lease.c) and
 * finalization (jobd/work/finalize.c) on real SQLite files: a scripted worker
 * leases, answers and finalizes; the output/error files are decompressed and
 * checked line by line; expiry, retries, dead letters, duplicates, stale
 * uploads, cancel, batch expiry, fairness, and crash safety with forked
 * children killed at random points. */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/zst.h"
#include "jobd/work/finalize.h"
#include "jobd/intake/ingest.h"
#include "jobd/work/lease.h"
#include "jobd/store/store.h"
#include "jobd/store/store_budget.h"
#include "jobd/work/sweeper.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000
#define MODEL "SmolLM2-135M-Instruct"

struct fx {
    const char *dir;
    struct store *st;
    struct store_tenant ta, tb;
    char worker[ID_MAX];
    int n_files;
};

static void fx_register(struct fx *fx, int64_t now)
{
    struct store_model_name names[] = {{MODEL, MODEL, 0, NULL}, {MODEL, "smollm", 0, NULL}};
    struct store_worker_new w = {"test-worker", "cpu", 4096, 64, names, 2, 0, 0};
    CHECK_EQ_INT(lease_worker_register(fx->st, &w, now, fx->worker), 0);
}

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
    fx_register(fx, NOW);
}

/* A batch of n chat requests "<prefix>-<i>" for tenant t, ingested (in_progress). */
static void fx_batch(struct fx *fx, const struct store_tenant *t, const char *prefix, int n,
                     const char *metadata, int64_t window_s, char batch_id[ID_MAX])
{
    char rel[64], path[800];
    snprintf(rel, sizeof rel, "files/in-%d", fx->n_files++);
    snprintf(path, sizeof path, "%s/%s", fx->dir, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"custom_id\":\"%s-%d\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                "{\"model\":\"smollm\",\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
                "{\"role\":\"user\",\"content\":\"question %d%s\"}],\"max_tokens\":16}}\n",
                prefix, i, i % 2 ? "Be brief." : "Answer in French.", i, i % 3 ? "" : " with more words");
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t->id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "%s", rel);
    sf.created_at = NOW;
    CHECK_EQ_INT(store_file_create(fx->st, &sf), 0);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, window_s, metadata, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx->st, t->id, &nb, NOW, &b), 0);
    snprintf(batch_id, ID_MAX, "%s", b.id);
    store_batch_release(&b);
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.max_requests = 1000000;
    lim.rows_per_tx = 50000;
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx->st, batch_id, &lim, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(rep.n_requests, n);
}

static struct store_lease_ask ask_of(struct fx *fx, int n)
{
    return (struct store_lease_ask){fx->worker, MODEL, n, 0, 0, 60};
}

/* A success result for a leased item, echoing its custom_id. */
static char *success_body(const struct store_leased *it)
{
    char *s = NULL;
    if (asprintf(&s,
                 "{\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion\",\"model\":\"smollm\",\"choices\":"
                 "[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"echo %s\"},"
                 "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,"
                 "\"total_tokens\":10}}",
                 it->id + 4, it->custom_id) < 0)
        return NULL;
    return s;
}

/* Answer every item of a lease with success; returns the outcomes' count of OK. */
static int answer_all(struct fx *fx, const struct store_lease *l, int64_t now)
{
    struct store_result *rs = calloc(l->n, sizeof *rs);
    enum store_commit_outcome *oc = calloc(l->n, sizeof *oc);
    char **bodies = calloc(l->n, sizeof *bodies);
    CHECK(rs && oc && bodies);
    for (size_t i = 0; i < l->n; i++) {
        bodies[i] = success_body(&l->items[i]);
        rs[i] = (struct store_result){.request_id = l->items[i].id, .kind = STORE_RESULT_SUCCESS,
                                      .status_code = 200, .body = bodies[i], .body_len = strlen(bodies[i]),
                                      .prompt_tokens = 7, .completion_tokens = 3, .cached_tokens = 1,
                                      .gpu_ms = 5};
    }
    CHECK_EQ_INT(lease_results_commit(fx->st, NULL, l->id, fx->worker, rs, l->n, now, oc), 0);
    int ok = 0;
    for (size_t i = 0; i < l->n; i++) {
        ok += oc[i] == STORE_COMMIT_OK;
        free(bodies[i]);
    }
    free(bodies);
    free(rs);
    free(oc);
    return ok;
}

/* Decompress a stored file into out (NUL-terminated). */
static void read_file(struct fx *fx, const char *tenant_id, const char *file_id, struct buf *out)
{
    struct store_file f;
    CHECK_EQ_INT(store_file_get(fx->st, tenant_id, file_id, &f), 0);
    CHECK_EQ_STR(f.purpose, "batch_output");
    CHECK_EQ_STR(f.encoding, "zstd");
    char path[900];
    snprintf(path, sizeof path, "%s/%s", fx->dir, f.storage_path);
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    struct buf raw;
    buf_init(&raw, 1u << 30);
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, fp)) > 0)
        CHECK_EQ_INT(buf_append(&raw, tmp, k), 0);
    fclose(fp);
    buf_init(out, 1u << 30);
    CHECK_EQ_INT(zst_decompress_buf(raw.data, raw.len, out), 0);
    buf_release(&raw);
    /* the row's size and digest describe the logical content */
    CHECK_EQ_INT(f.bytes, (int64_t)out->len);
    uint8_t d[SHA256_LEN];
    char hex[2 * SHA256_LEN + 1];
    CHECK_EQ_INT(sha256(out->data ? out->data : "", out->len, d), 0);
    CHECK_EQ_STR(hex_encode(d, SHA256_LEN, hex), f.sha256);
}

/* Parse every line of a file: checks the OpenAI output line shape and
 * counts each custom_id into seen (a JSON object custom_id -> count);
 * error codes into codes (code -> count). Returns the line count. */
static int scan_lines(const struct buf *text, int want_response, json_t *seen, json_t *codes)
{
    int n = 0;
    const char *p = text->data ? text->data : "", *end = p + text->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        CHECK(nl != NULL); /* every line ends with \n */
        json_error_t je;
        json_t *v = json_loadb(p, (size_t)(nl - p), 0, &je);
        CHECK(v != NULL);
        const char *id = json_string_value(json_object_get(v, "id"));
        CHECK(id && strncmp(id, "batch_req_", 10) == 0 && strlen(id) == 10 + 26);
        const char *cid = json_string_value(json_object_get(v, "custom_id"));
        CHECK(cid != NULL);
        json_t *resp = json_object_get(v, "response"), *err = json_object_get(v, "error");
        CHECK(resp != NULL && err != NULL); /* both keys present */
        if (want_response) {
            CHECK(json_is_null(err));
            CHECK_EQ_INT(json_integer_value(json_object_get(resp, "status_code")), 200);
            const char *rid = json_string_value(json_object_get(resp, "request_id"));
            CHECK(rid && strncmp(rid, "req_", 4) == 0 && strcmp(rid + 4, id + 10) == 0);
            json_t *body = json_object_get(resp, "body");
            const char *content = json_string_value(json_object_get(
                json_object_get(json_array_get(json_object_get(body, "choices"), 0), "message"), "content"));
            char want[600];
            snprintf(want, sizeof want, "echo %s", cid);
            CHECK_EQ_STR(content, want);
        } else if (json_is_null(resp)) {
            const char *code = json_string_value(json_object_get(err, "code"));
            CHECK(code && json_is_string(json_object_get(err, "message")));
            json_object_set_new(codes, code, json_integer(json_integer_value(json_object_get(codes, code)) + 1));
        } else {
            CHECK(json_is_null(err));
            int sc = (int)json_integer_value(json_object_get(resp, "status_code"));
            CHECK(sc >= 400 && sc < 500);
            json_object_set_new(codes, "http_4xx", json_integer(json_integer_value(json_object_get(codes, "http_4xx")) + 1));
        }
        json_object_set_new(seen, cid, json_integer(json_integer_value(json_object_get(seen, cid)) + 1));
        json_decref(v);
        n++;
        p = nl + 1;
    }
    return n;
}

static int64_t code_count(json_t *codes, const char *code)
{
    return json_integer_value(json_object_get(codes, code));
}

/* Every "<prefix>-<i>" for i < n appears exactly once in seen. */
static void check_each_once(json_t *seen, const char *prefix, int n)
{
    CHECK_EQ_INT(json_object_size(seen), n);
    for (int i = 0; i < n; i++) {
        char cid[64];
        snprintf(cid, sizeof cid, "%s-%d", prefix, i);
        if (json_integer_value(json_object_get(seen, cid)) != 1)
            th_fail(__FILE__, __LINE__, "each custom_id once", "%s seen %lld times", cid,
                    (long long)json_integer_value(json_object_get(seen, cid)));
    }
}

static void get_batch(struct fx *fx, const char *id, struct store_batch *b)
{
    CHECK_EQ_INT(store_batch_get(fx->st, NULL, id, b), 0);
    store_batch_release(b);
}

static int64_t sql_count(struct fx *fx, const char *what);
static void check_pg_lease_state(struct fx *fx);

/* ------------------------------------------------------------------------------------ */

TEST(lease_finalize_retry_delays_double_up_to_the_cap)
{
    CHECK_EQ_INT(finalize_retry_delay_ms(1), FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_delay_ms(2), 2 * FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_delay_ms(3), 4 * FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_delay_ms(7), FINALIZE_RETRY_CAP_MS < 64 * FINALIZE_RETRY_FIRST_MS
                                                 ? FINALIZE_RETRY_CAP_MS : 64 * FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_delay_ms(1000), FINALIZE_RETRY_CAP_MS);
    struct finalize_retry *rt = finalize_retry_new();
    CHECK(rt != NULL);
    CHECK(finalize_retry_due(rt, "batch_a", 0));
    CHECK(finalize_retry_due(NULL, "batch_a", 0)); /* no table: always due */
    CHECK_EQ_INT(finalize_retry_failed(rt, "batch_a", 1000), FINALIZE_RETRY_FIRST_MS);
    CHECK(!finalize_retry_due(rt, "batch_a", 1000 + FINALIZE_RETRY_FIRST_MS - 1));
    CHECK(finalize_retry_due(rt, "batch_a", 1000 + FINALIZE_RETRY_FIRST_MS));
    CHECK(finalize_retry_due(rt, "batch_b", 1000)); /* per batch */
    CHECK_EQ_INT(finalize_retry_failed(rt, "batch_a", 5000), 2 * FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_fails(rt, "batch_a"), 2);
    int64_t t = 5000;
    for (int k = 3; k < 40; k++)
        t += finalize_retry_failed(rt, "batch_a", t);
    CHECK_EQ_INT(finalize_retry_failed(rt, "batch_a", t), FINALIZE_RETRY_CAP_MS);
    CHECK(!finalize_retry_due(rt, "batch_a", t + FINALIZE_RETRY_CAP_MS - 1));
    finalize_retry_clear(rt, "batch_a");
    CHECK_EQ_INT(finalize_retry_fails(rt, "batch_a"), 0);
    CHECK(finalize_retry_due(rt, "batch_a", t));
    /* full: the batch due soonest makes room, the others keep their delay */
    char id[ID_MAX];
    for (int i = 0; i < FINALIZE_RETRY_SLOTS; i++) {
        snprintf(id, sizeof id, "batch_%d", i);
        finalize_retry_failed(rt, id, 10000 + i);
    }
    CHECK_EQ_INT(finalize_retry_failed(rt, "batch_new", 20000), FINALIZE_RETRY_FIRST_MS);
    CHECK_EQ_INT(finalize_retry_fails(rt, "batch_0"), 0);
    CHECK_EQ_INT(finalize_retry_fails(rt, "batch_1"), 1);
    CHECK_EQ_INT(finalize_retry_fails(rt, "batch_new"), 1);
    free(rt);
}

/* The file store failing at finalization (here: files/ is not a directory,
 * so the output file cannot be put in place; an S3 outage is ERR_CONN from
 * the same call, tests/py/test_s3_files.py): the batch stays finalizing,
 * the sweep skips it until its backoff passed (one attempt per delay, not
 * per pass), and it completes on the first attempt after the store works. */
TEST(lease_finalize_retries_back_off_while_the_store_fails)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "r", 20, NULL, 86400, bid);
    int64_t now = NOW + 10;
    for (;;) {
        struct store_lease l;
        struct store_lease_ask a = ask_of(&fx, 16);
        CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
        if (l.n == 0)
            break;
        answer_all(&fx, &l, now);
        store_lease_clear(&l);
    }
    char files[900], away[920];
    snprintf(files, sizeof files, "%s/files", fx.dir);
    snprintf(away, sizeof away, "%s.away", files);
    CHECK_EQ_INT(rename(files, away), 0);
    FILE *fp = fopen(files, "w"); /* a file where the directory was */
    CHECK(fp != NULL);
    fclose(fp);
    struct finalize_retry *rt = finalize_retry_new();
    CHECK(rt != NULL);
    int64_t mono = 100000;
    int fin = -1;
    CHECK(finalize_sweep(fx.st, now, 10, rt, mono, &fin) != 0);
    CHECK_EQ_INT(fin, 0);
    CHECK_EQ_INT(finalize_retry_fails(rt, bid), 1);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_FINALIZING);
    /* passes within the delay do not try (a try would fail and count) */
    for (int64_t dt = 1; dt < FINALIZE_RETRY_FIRST_MS; dt += 100) {
        CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, rt, mono + dt, &fin), 0);
        CHECK_EQ_INT(fin, 0);
    }
    CHECK_EQ_INT(finalize_retry_fails(rt, bid), 1);
    mono += FINALIZE_RETRY_FIRST_MS;
    CHECK(finalize_sweep(fx.st, now, 10, rt, mono, &fin) != 0);
    CHECK_EQ_INT(finalize_retry_fails(rt, bid), 2);
    CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, rt, mono + 2 * FINALIZE_RETRY_FIRST_MS - 1, &fin), 0);
    CHECK_EQ_INT(finalize_retry_fails(rt, bid), 2);
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_FINALIZING);
    /* the store works again: the next due attempt completes the batch */
    CHECK_EQ_INT(unlink(files), 0);
    CHECK_EQ_INT(rename(away, files), 0);
    CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, rt, mono + 1, &fin), 0);
    CHECK_EQ_INT(fin, 0); /* still in its delay */
    mono += 2 * FINALIZE_RETRY_FIRST_MS;
    CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, rt, mono, &fin), 0);
    CHECK_EQ_INT(fin, 1);
    CHECK_EQ_INT(finalize_retry_fails(rt, bid), 0);
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_COMPLETED);
    CHECK_EQ_INT(b.n_completed, 20);
    struct buf text;
    read_file(&fx, fx.ta.id, b.output_file_id, &text);
    json_t *seen = json_object(), *codes = json_object();
    CHECK_EQ_INT(scan_lines(&text, 1, seen, codes), 20);
    check_each_once(seen, "r", 20);
    json_decref(seen);
    json_decref(codes);
    buf_release(&text);
    free(rt);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_worker_runs_a_batch_to_a_completed_output_file)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 50, NULL, 86400, bid);
    int64_t now = NOW + 10;
    int leases = 0, answered = 0;
    for (;;) {
        struct store_lease l;
        struct store_lease_ask a = ask_of(&fx, 16);
        CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
        if (l.n == 0)
            break;
        CHECK(id_valid("lease_", l.id));
        CHECK_EQ_INT(l.expires_at, now + 60);
        CHECK(l.n <= 16);
        for (size_t i = 0; i < l.n; i++) {
            CHECK_EQ_INT(l.items[i].attempt, 1);
            CHECK_EQ_STR(l.items[i].batch_id, bid);
            CHECK(strstr(l.items[i].body, "\"model\":\"smollm\"") != NULL);
            CHECK_EQ_STR(l.items[i].endpoint, "/v1/chat/completions"); /* the batch's */
        }
        answered += answer_all(&fx, &l, now);
        /* every result in: the lease ended; a heartbeat is refused as stale */
        int64_t exp;
        char(*stop)[ID_MAX] = NULL;
        size_t ns;
        CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l.id, fx.worker, 60, -1, now, &exp, &stop, &ns), ERR_BADSTATE);
        store_lease_clear(&l);
        leases++;
        now++;
    }
    CHECK_EQ_INT(answered, 50);
    CHECK_EQ_INT(leases, 4);
    int fin = 0;
    CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, NULL, 0, &fin), 0);
    CHECK_EQ_INT(fin, 1);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_COMPLETED);
    CHECK_EQ_INT(b.n_total, 50);
    CHECK_EQ_INT(b.n_completed, 50);
    CHECK_EQ_INT(b.n_failed, 0);
    CHECK_EQ_INT(b.usage_prompt_tokens, 350);
    CHECK_EQ_INT(b.usage_completion_tokens, 150);
    CHECK_EQ_INT(b.usage_cached_tokens, 50);
    CHECK(b.at[STORE_BATCH_FINALIZING] > 0 && b.at[STORE_BATCH_COMPLETED] > 0);
    CHECK(b.output_file_id[0] != '\0');
    CHECK_EQ_STR(b.error_file_id, ""); /* nothing failed: no error file */
    struct buf out;
    read_file(&fx, fx.ta.id, b.output_file_id, &out);
    json_t *seen = json_object(), *codes = json_object();
    CHECK_EQ_INT(scan_lines(&out, 1, seen, codes), 50);
    check_each_once(seen, "q", 50);
    json_decref(seen);
    json_decref(codes);
    buf_release(&out);
    CHECK_EQ_INT(sql_count(&fx, "SELECT count(*) FROM usage_ledger"), 50);
    CHECK_EQ_INT(sql_count(&fx, "SELECT sum(prompt_tokens) FROM usage_ledger"), 350);
    /* finalizing again is a no-op */
    struct finalize_report rep;
    CHECK_EQ_INT(finalize_batch(fx.st, bid, now, NULL, &rep), 0);
    CHECK_EQ_INT(rep.done, 1);
    CHECK_EQ_INT(rep.status, STORE_BATCH_COMPLETED);
    /* an empty queue answers at once with nothing */
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 8);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT(l.n, 0);
    CHECK_EQ_STR(l.id, "");
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

static int64_t sql_count(struct fx *fx, const char *what)
{
    /* a second connection: tests may read SQL directly (only product code is barred) */
    return th_db_int(fx->dir, what);
}

/* PostgreSQL (schema_pg.sql migration 13): requests_queued holds exactly
 * the queued requests (same batch, due time and line); a lease not
 * released holds n_held = its leased requests, each listed in its
 * lease_batches.request_ids; an ended lease lists none and holds none.
 * SQLite: nothing to check (its indexes keep these). */
static void check_pg_lease_state(struct fx *fx)
{
    if (!th_pg_on())
        return;
    CHECK_EQ_INT(sql_count(fx, "SELECT count(*) FROM (SELECT id, batch_id, next_attempt_at, line FROM requests "
                               "WHERE status = 'queued' EXCEPT ALL SELECT request_id, batch_id, next_attempt_at, "
                               "line FROM requests_queued) d"), 0);
    CHECK_EQ_INT(sql_count(fx, "SELECT count(*) FROM (SELECT request_id, batch_id, next_attempt_at, line FROM "
                               "requests_queued EXCEPT ALL SELECT id, batch_id, next_attempt_at, line FROM requests "
                               "WHERE status = 'queued') d"), 0);
    CHECK_EQ_INT(sql_count(fx, "SELECT count(*) FROM leases l WHERE n_held <> CASE WHEN released_at IS NULL THEN "
                               "(SELECT count(*) FROM requests q WHERE q.lease_id = l.id AND q.status = 'leased') "
                               "ELSE 0 END"), 0);
    CHECK_EQ_INT(sql_count(fx, "SELECT count(*) FROM requests q WHERE q.status = 'leased' AND NOT EXISTS (SELECT 1 "
                               "FROM lease_batches lb WHERE lb.lease_id = q.lease_id AND lb.batch_id = q.batch_id "
                               "AND q.id = ANY(lb.request_ids))"), 0);
    CHECK_EQ_INT(sql_count(fx, "SELECT count(*) FROM lease_batches lb JOIN leases l ON l.id = lb.lease_id WHERE "
                               "l.released_at IS NOT NULL AND lb.request_ids IS NOT NULL"), 0);
}

TEST(lease_rejects_unknown_worker_and_unregistered_model)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 3, NULL, 86400, bid);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 4);
    a.worker_id = "wrk_01jf0000000000000000000000";
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), ERR_NOTFOUND);
    a = ask_of(&fx, 4);
    a.model = "other-model";
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), ERR_INVAL);
    a = ask_of(&fx, 0);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), ERR_INVAL);
    /* models: both names are served while the worker is live; none after the TTL */
    struct store_model_served *m = NULL;
    size_t n = 0;
    CHECK_EQ_INT(lease_models_served(fx.st, NULL, NOW + 10, &m, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(m[0].name, MODEL);
    CHECK_EQ_STR(m[1].name, "smollm");
    CHECK_EQ_STR(m[1].canonical, MODEL);
    free(m);
    struct store_model_waiting *w = NULL;
    CHECK_EQ_INT(lease_models_waiting(fx.st, NULL, NOW + 10, &w, &n), 0);
    CHECK_EQ_INT(n, 0);
    free(w);
    CHECK_EQ_INT(lease_models_served(fx.st, NULL, NOW + 1000, &m, &n), 0);
    CHECK_EQ_INT(n, 0);
    free(m);
    CHECK_EQ_INT(lease_models_waiting(fx.st, NULL, NOW + 1000, &w, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_STR(w[0].model, "smollm");
    CHECK_EQ_INT(w[0].n_batches, 1);
    free(w);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_validating_batches_are_not_leasable)
{
    struct fx fx;
    fx_open(&fx);
    /* a batch created but not ingested: no rows yet, and after a partial ingest
     * (checkpointed rows) still nothing is leasable */
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", fx.ta.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/none");
    CHECK_EQ_INT(store_file_create(fx.st, &sf), 0);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx.st, fx.ta.id, &nb, NOW, &b), 0);
    CHECK_EQ_INT(store_tx_begin(fx.st), 0);
    struct store_request_new q = {b.id, fx.ta.id, 1, "c-1", "smollm", "{\"model\":\"smollm\",\"prompt\":\"x\"}", 32, 1, 8, NOW};
    CHECK_EQ_INT(store_request_add(fx.st, &q, NULL, NULL), 0);
    CHECK_EQ_INT(store_tx_commit(fx.st), 0);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 4);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 0);
    CHECK_EQ_INT(store_ingest_succeed(fx.st, b.id, "smollm", NOW), 0);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 1);
    store_lease_clear(&l);
    store_batch_release(&b);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* Endpoint routing: a worker that declared /v1/embeddings only
 * (an encoder model) is leased the embeddings batch's lines and never the
 * chat batch's; one that declared the generation endpoints the reverse; a
 * model whose live workers do not serve a batch's endpoint is "waiting". */
TEST(lease_routes_lines_by_the_endpoints_a_worker_declared)
{
    struct fx fx;
    fx_open(&fx);
    char chat_id[ID_MAX];
    fx_batch(&fx, &fx.ta, "c", 3, NULL, 86400, chat_id);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", fx.ta.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "e.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/none");
    CHECK_EQ_INT(store_file_create(fx.st, &sf), 0);
    struct store_batch_new nb = {"/v1/embeddings", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx.st, fx.ta.id, &nb, NOW, &b), 0);
    CHECK_EQ_INT(store_tx_begin(fx.st), 0);
    for (int i = 0; i < 2; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "e-%d", i);
        struct store_request_new q = {b.id, fx.ta.id, i + 1, cid, "smollm",
                                      "{\"model\":\"smollm\",\"input\":\"x\"}", 31, 1, 0, NOW};
        CHECK_EQ_INT(store_request_add(fx.st, &q, NULL, NULL), 0);
    }
    CHECK_EQ_INT(store_tx_commit(fx.st), 0);
    CHECK_EQ_INT(store_ingest_succeed(fx.st, b.id, "smollm", NOW), 0);

    /* the fixture's worker declared nothing (all endpoints): it would take both.
     * Two more: an encoder worker and a generation worker. */
    struct store_model_name enc_names[] = {{MODEL, MODEL, STORE_EP_EMBEDDINGS, NULL},
                                           {MODEL, "smollm", STORE_EP_EMBEDDINGS, NULL}};
    struct store_model_name gen_names[] = {{MODEL, MODEL, STORE_EP_CHAT | STORE_EP_COMPLETIONS, NULL},
                                           {MODEL, "smollm", STORE_EP_CHAT | STORE_EP_COMPLETIONS, NULL}};
    struct store_worker_new we = {"enc", "cpu", 0, 0, enc_names, 2, 0, 0};
    struct store_worker_new wg = {"gen", "cuda:0", 0, 0, gen_names, 2, 0, 0};
    char enc[ID_MAX], gen[ID_MAX];
    CHECK_EQ_INT(lease_worker_register(fx.st, &we, NOW + 200, enc), 0);
    /* the fixture's worker (registered at NOW) has lapsed by NOW + 200: with only
     * the encoder worker live, the chat batch's model waits for a worker */
    struct store_model_waiting *w = NULL;
    size_t n = 0;
    CHECK_EQ_INT(lease_models_waiting(fx.st, NULL, NOW + 200, &w, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_STR(w[0].model, "smollm");
    CHECK_EQ_INT(w[0].n_batches, 1);
    free(w);
    CHECK_EQ_INT(lease_worker_register(fx.st, &wg, NOW + 200, gen), 0);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 16);
    a.worker_id = enc;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 200, &l), 0);
    CHECK_EQ_INT(l.n, 2);
    for (size_t i = 0; i < l.n; i++) {
        CHECK_EQ_STR(l.items[i].endpoint, "/v1/embeddings");
        CHECK_EQ_STR(l.items[i].batch_id, b.id);
    }
    store_lease_clear(&l);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 200, &l), 0);
    CHECK_EQ_INT(l.n, 0); /* the chat lines are not for it */
    store_lease_clear(&l);
    a.worker_id = gen;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 200, &l), 0);
    CHECK_EQ_INT(l.n, 3);
    for (size_t i = 0; i < l.n; i++)
        CHECK_EQ_STR(l.items[i].endpoint, "/v1/chat/completions");
    store_lease_clear(&l);
    /* both endpoints have a live worker now */
    CHECK_EQ_INT(lease_models_waiting(fx.st, NULL, NOW + 200, &w, &n), 0);
    CHECK_EQ_INT(n, 0);
    free(w);
    store_batch_release(&b);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* /v1/responses lines go only to a worker that declared the endpoint: not
 * to one that declared nothing (the default three, what workers served
 * before it), nor to a chat-only one; the batch's endpoint is the items' url. */
TEST(lease_routes_responses_lines_only_to_a_worker_that_declared_them)
{
    struct fx fx;
    fx_open(&fx);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", fx.ta.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "r.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/none");
    CHECK_EQ_INT(store_file_create(fx.st, &sf), 0);
    struct store_batch_new nb = {"/v1/responses", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx.st, fx.ta.id, &nb, NOW, &b), 0);
    CHECK_EQ_STR(b.endpoint, "/v1/responses");
    CHECK_EQ_INT(store_tx_begin(fx.st), 0);
    for (int i = 0; i < 2; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "r-%d", i);
        struct store_request_new q = {b.id, fx.ta.id, i + 1, cid, "smollm",
                                      "{\"model\":\"smollm\",\"input\":\"x\"}", 31, 16, 0, NOW};
        CHECK_EQ_INT(store_request_add(fx.st, &q, NULL, NULL), 0);
    }
    CHECK_EQ_INT(store_tx_commit(fx.st), 0);
    CHECK_EQ_INT(store_ingest_succeed(fx.st, b.id, "smollm", NOW), 0);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 16);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 0); /* the fixture's worker declared nothing */
    store_lease_clear(&l);
    struct store_model_name chat_names[] = {{MODEL, MODEL, STORE_EP_CHAT, NULL}, {MODEL, "smollm", STORE_EP_CHAT, NULL}};
    struct store_model_name resp_names[] = {{MODEL, MODEL, STORE_EP_CHAT | STORE_EP_RESPONSES, NULL},
                                            {MODEL, "smollm", STORE_EP_CHAT | STORE_EP_RESPONSES, NULL}};
    struct store_worker_new wc = {"chat", "cpu", 0, 0, chat_names, 2, 0, 0};
    struct store_worker_new wr = {"resp", "cpu", 0, 0, resp_names, 2, 0, 0};
    char cw[ID_MAX], rw[ID_MAX];
    CHECK_EQ_INT(lease_worker_register(fx.st, &wc, NOW + 1, cw), 0);
    a.worker_id = cw;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 1, &l), 0);
    CHECK_EQ_INT(l.n, 0);
    store_lease_clear(&l);
    CHECK_EQ_INT(lease_worker_register(fx.st, &wr, NOW + 1, rw), 0);
    struct store_model_served *ms = NULL;
    size_t n_ms = 0;
    CHECK_EQ_INT(store_models_served(fx.st, NOW, &ms, &n_ms), 0);
    unsigned eps = 0;
    for (size_t i = 0; i < n_ms; i++)
        if (strcmp(ms[i].name, "smollm") == 0)
            eps = ms[i].endpoints;
    free(ms);
    CHECK_EQ_INT(eps, STORE_EP_DEFAULT | STORE_EP_RESPONSES);
    a.worker_id = rw;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 1, &l), 0);
    CHECK_EQ_INT(l.n, 2);
    for (size_t i = 0; i < l.n; i++)
        CHECK_EQ_STR(l.items[i].endpoint, "/v1/responses");
    store_lease_clear(&l);
    store_batch_release(&b);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* The registration message: "endpoints" per model, checked. */
TEST(lease_register_parses_declared_endpoints)
{
    struct lease_register r;
    struct problem e;
    const char *ok = "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"aliases\":[\"a\"],"
                     "\"endpoints\":[\"/v1/embeddings\"]},{\"id\":\"g\"}]}";
    CHECK_EQ_INT(lease_parse_register(ok, strlen(ok), &r, &e), 0);
    CHECK_EQ_INT(r.w.n_models, 3);
    CHECK_EQ_INT(r.w.models[0].endpoints, STORE_EP_EMBEDDINGS);
    CHECK_EQ_INT(r.w.models[1].endpoints, STORE_EP_EMBEDDINGS); /* the alias */
    CHECK_EQ_INT(r.w.models[2].endpoints, 0);                   /* absent: the default three */
    lease_register_release(&r);
    const char *resp = "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"endpoints\":"
                       "[\"/v1/chat/completions\",\"/v1/responses\"]}]}";
    CHECK_EQ_INT(lease_parse_register(resp, strlen(resp), &r, &e), 0);
    CHECK_EQ_INT(r.w.models[0].endpoints, STORE_EP_CHAT | STORE_EP_RESPONSES);
    lease_register_release(&r);
    const char *bad[] = {
        "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"endpoints\":[]}]}",
        "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"endpoints\":\"/v1/embeddings\"}]}",
        "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"endpoints\":[\"/v1/moderations\"]}]}",
        "{\"name\":\"w\",\"models\":[{\"id\":\"m\",\"endpoints\":[1]}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(lease_parse_register(bad[i], strlen(bad[i]), &r, &e), ERR_INVAL);
        CHECK_EQ_INT(e.status, 400);
    }
}

TEST(lease_expiry_requeues_with_attempts_and_refuses_the_stale_upload)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 3, NULL, 86400, bid);
    struct store_lease l1, l2;
    struct store_lease_ask a = ask_of(&fx, 10);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l1), 0);
    CHECK_EQ_INT(l1.n, 3);
    /* a heartbeat extends; nothing to stop */
    int64_t exp = 0;
    char(*stop)[ID_MAX] = NULL;
    size_t ns = 9;
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l1.id, fx.worker, 100, 55.5, NOW + 30, &exp, &stop, &ns), 0);
    CHECK_EQ_INT(exp, NOW + 130);
    CHECK_EQ_INT(ns, 0);
    free(stop);
    check_pg_lease_state(&fx);
    /* another worker's heartbeat for it: not found */
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l1.id, "wrk_01jf0000000000000000000000", 100, -1, NOW, &exp, &stop, &ns),
                 ERR_NOTFOUND);
    /* the sweep before expiry does nothing, after it requeues all three */
    struct store_sweep_report rep;
    CHECK_EQ_INT(lease_expire_sweep(fx.st, NULL, NOW + 129, &rep), 0);
    CHECK_EQ_INT(rep.n_leases, 0);
    CHECK_EQ_INT(lease_expire_sweep(fx.st, NULL, NOW + 130, &rep), 0);
    CHECK_EQ_INT(rep.n_leases, 1);
    CHECK_EQ_INT(rep.n_requeued, 3);
    check_pg_lease_state(&fx);
    for (size_t i = 0; i < l1.n; i++) {
        struct store_request q;
        CHECK_EQ_INT(store_request_get(fx.st, l1.items[i].id, &q), 0);
        CHECK_EQ_INT(q.status, STORE_REQ_QUEUED);
        CHECK_EQ_INT(q.attempts, 1);
        /* backoff after 1 failed attempt: base 10 s with equal jitter = 5..10 s */
        CHECK(q.next_attempt_at >= NOW + 130 + 5 && q.next_attempt_at <= NOW + 130 + 10);
    }
    /* not before the backoff */
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 134, &l2), 0);
    CHECK_EQ_INT(l2.n, 0);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 141, &l2), 0);
    CHECK_EQ_INT(l2.n, 3);
    CHECK_EQ_INT(l2.items[0].attempt, 2);
    /* the first worker wakes up and uploads: every item is stale */
    struct store_result r = {.request_id = l1.items[0].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200,
                             .body = "{\"old\":true}", .body_len = 12};
    enum store_commit_outcome oc;
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l1.id, fx.worker, &r, 1, NOW + 142, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_STALE);
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l1.id, fx.worker, 60, -1, NOW + 142, &exp, &stop, &ns), ERR_BADSTATE);
    /* the new lease commits; committing the same upload again is a duplicate */
    CHECK_EQ_INT(answer_all(&fx, &l2, NOW + 143), 3);
    r.body = "{\"new\":true}";
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l2.id, fx.worker, &r, 1, NOW + 144, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_DUPLICATE);
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l1.id, fx.worker, &r, 1, NOW + 144, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_STALE);
    CHECK_EQ_INT(sql_count(&fx, "SELECT count(*) FROM results"), 3);
    CHECK_EQ_INT(sql_count(&fx, "SELECT count(*) FROM results WHERE body LIKE '%old%' OR body LIKE '%new%'"), 0);
    CHECK_EQ_INT(sql_count(&fx, "SELECT count(*) FROM usage_ledger"), 3);
    /* unknown request ids are reported, not committed */
    struct store_result u = {.request_id = "req_01jf0000000000000000000000", .kind = STORE_RESULT_TRANSIENT};
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l2.id, fx.worker, &u, 1, NOW + 144, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_UNKNOWN);
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, "lease_01jf0000000000000000000000", fx.worker, &u, 1, NOW, &oc),
                 ERR_NOTFOUND);
    store_lease_clear(&l1);
    store_lease_clear(&l2);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* One transient failure of request rid under a fresh lease; returns the outcome. */
static enum store_commit_outcome fail_once(struct fx *fx, int64_t now, const char *want_id)
{
    struct store_lease l;
    struct store_lease_ask a = ask_of(fx, 1);
    CHECK_EQ_INT(lease_acquire(fx->st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT(l.n, 1);
    if (want_id)
        CHECK_EQ_STR(l.items[0].id, want_id);
    struct store_result r = {.request_id = l.items[0].id, .kind = STORE_RESULT_TRANSIENT, .error = "device_error: CUDA OOM"};
    enum store_commit_outcome oc;
    CHECK_EQ_INT(lease_results_commit(fx->st, NULL, l.id, fx->worker, &r, 1, now, &oc), 0);
    store_lease_clear(&l);
    return oc;
}

/* store_results_scan's callback: collect up to 8 seqs. */
struct seqs {
    int64_t seq[8];
    int n;
};

static int collect_seq(void *ctx, const struct store_result_row *r)
{
    struct seqs *s = ctx;
    if (s->n < 8)
        s->seq[s->n++] = r->seq;
    return 0;
}

TEST(lease_transient_failures_dead_letter_then_retry_requeues)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 2, NULL, 86400, bid);
    /* lease q-0 alone, fail it 3 times (backoff 5..10, 10..20 s between) */
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 1);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    char rid[ID_MAX];
    snprintf(rid, sizeof rid, "%s", l.items[0].id);
    CHECK_EQ_STR(l.items[0].custom_id, "q-0");
    struct store_result r = {.request_id = rid, .kind = STORE_RESULT_TRANSIENT, .error = "device_error: CUDA OOM"};
    enum store_commit_outcome oc;
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, &r, 1, NOW, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_RETRY);
    store_lease_clear(&l);
    /* q-1 is leased meanwhile (held so the batch stays in progress) */
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 1, &l), 0);
    CHECK_EQ_STR(l.items[0].custom_id, "q-1");
    CHECK_EQ_INT(fail_once(&fx, NOW + 11, rid), STORE_COMMIT_RETRY);
    struct store_request q;
    CHECK_EQ_INT(store_request_get(fx.st, rid, &q), 0);
    CHECK(q.next_attempt_at >= NOW + 11 + 10 && q.next_attempt_at <= NOW + 11 + 20);
    CHECK_EQ_INT(fail_once(&fx, NOW + 40, rid), STORE_COMMIT_DEAD);
    CHECK_EQ_INT(store_request_get(fx.st, rid, &q), 0);
    CHECK_EQ_INT(q.status, STORE_REQ_FAILED);
    CHECK_EQ_INT(q.attempts, 3);
    /* the dead letter: listed per batch and across tenants (admin), not for B */
    struct store_dead_letter *d = NULL;
    size_t n = 0;
    int more = 1;
    CHECK_EQ_INT(store_dead_letter_list(fx.st, fx.ta.id, bid, NULL, 10, &d, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_STR(d[0].request_id, rid);
    CHECK_EQ_STR(d[0].custom_id, "q-0");
    CHECK_EQ_INT(d[0].attempts, 3);
    CHECK_EQ_STR(d[0].reason, "worker_error");
    CHECK_EQ_STR(d[0].last_error, "device_error: CUDA OOM");
    json_t *line = json_loads(d[0].line, 0, NULL);
    CHECK(line != NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(line, "custom_id")), "q-0");
    CHECK_EQ_STR(json_string_value(json_object_get(line, "url")), "/v1/chat/completions");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(line, "body"), "model")), "smollm");
    json_decref(line);
    store_dead_letter_list_free(d, n);
    CHECK_EQ_INT(store_dead_letter_list(fx.st, NULL, NULL, NULL, 10, &d, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    store_dead_letter_list_free(d, n);
    CHECK_EQ_INT(store_dead_letter_list(fx.st, fx.tb.id, NULL, NULL, 10, &d, &n, &more), 0);
    CHECK_EQ_INT(n, 0);
    store_dead_letter_list_free(d, n);
    CHECK_EQ_INT(store_dead_letter_retry(fx.st, fx.tb.id, rid, NOW + 41), ERR_NOTFOUND);
    /* retry: requeued with attempts reset, counts corrected, then it succeeds */
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.n_failed, 1);
    /* the dead letter's results row is the newest: the retry deletes it, and
     * its commit sequence number must never come back (a partial-results
     * cursor past it would miss the new row) */
    struct seqs before = {0};
    int64_t cur = 0;
    int n_rows = 0;
    CHECK_EQ_INT(store_results_scan(fx.st, bid, &cur, 10, collect_seq, &before, &n_rows), 0);
    CHECK_EQ_INT(n_rows, 1);
    CHECK(before.seq[0] > 0 && cur == before.seq[0]);
    CHECK_EQ_INT(store_dead_letter_retry(fx.st, fx.ta.id, rid, NOW + 41), 0);
    CHECK_EQ_INT(store_dead_letter_retry(fx.st, fx.ta.id, rid, NOW + 41), ERR_NOTFOUND);
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.n_failed, 0);
    CHECK_EQ_INT(store_request_get(fx.st, rid, &q), 0);
    CHECK_EQ_INT(q.status, STORE_REQ_QUEUED);
    CHECK_EQ_INT(q.attempts, 0);
    struct store_lease l2;
    struct store_lease_ask a2 = ask_of(&fx, 5);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a2, NOW + 41, &l2), 0);
    CHECK_EQ_INT(l2.n, 1);
    CHECK_EQ_INT(answer_all(&fx, &l2, NOW + 42), 1);
    CHECK_EQ_INT(answer_all(&fx, &l, NOW + 42), 1);
    store_lease_clear(&l);
    store_lease_clear(&l2);
    struct seqs after = {0};
    int64_t cur2 = cur;
    CHECK_EQ_INT(store_results_scan(fx.st, bid, &cur2, 10, collect_seq, &after, &n_rows), 0);
    CHECK_EQ_INT(n_rows, 2); /* q-0 again and q-1, both after the cursor */
    CHECK(after.seq[0] > before.seq[0] && after.seq[1] > after.seq[0] && cur2 == after.seq[1]);
    struct finalize_report rep;
    CHECK_EQ_INT(finalize_batch(fx.st, bid, NOW + 43, NULL, &rep), 0);
    CHECK_EQ_INT(rep.status, STORE_BATCH_COMPLETED);
    CHECK_EQ_INT(rep.n_output_lines, 2);
    CHECK_EQ_INT(rep.n_error_lines, 0);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_dead_letter_lands_in_the_error_file)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 3, NULL, 86400, bid);
    /* q-0 fails transiently 3 times, q-1 is an invalid request, q-2 succeeds */
    CHECK_EQ_INT(fail_once(&fx, NOW, NULL), STORE_COMMIT_RETRY);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 2);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 1, &l), 0);
    CHECK_EQ_INT(l.n, 2);
    CHECK_EQ_STR(l.items[0].custom_id, "q-1");
    const char *env = "{\"error\":{\"message\":\"prompt too long\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}";
    struct store_result rs[2] = {
        {.request_id = l.items[0].id, .kind = STORE_RESULT_INVALID, .status_code = 400, .body = env, .body_len = strlen(env)},
        {.request_id = l.items[1].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200, .body = "{\"choices\":[{\"message\":{\"content\":\"echo q-2\"}}]}", .body_len = 46},
    };
    enum store_commit_outcome oc[2];
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs, 2, NOW + 2, oc), 0);
    CHECK_EQ_INT(oc[0], STORE_COMMIT_OK);
    CHECK_EQ_INT(oc[1], STORE_COMMIT_OK);
    store_lease_clear(&l);
    /* the batch is not done yet (q-0 is waiting to retry) */
    struct finalize_report rep;
    CHECK_EQ_INT(finalize_batch(fx.st, bid, NOW + 2, NULL, &rep), 0);
    CHECK_EQ_INT(rep.done, 0);
    CHECK_EQ_INT(fail_once(&fx, NOW + 20, NULL), STORE_COMMIT_RETRY);
    CHECK_EQ_INT(fail_once(&fx, NOW + 60, NULL), STORE_COMMIT_DEAD);
    CHECK_EQ_INT(finalize_batch(fx.st, bid, NOW + 61, NULL, &rep), 0);
    CHECK_EQ_INT(rep.done, 1);
    CHECK_EQ_INT(rep.status, STORE_BATCH_COMPLETED);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.n_completed, 1);
    CHECK_EQ_INT(b.n_failed, 2);
    struct buf out;
    json_t *seen = json_object(), *codes = json_object();
    read_file(&fx, fx.ta.id, b.error_file_id, &out);
    CHECK_EQ_INT(scan_lines(&out, 0, seen, codes), 2);
    CHECK_EQ_INT(code_count(codes, "max_attempts_exceeded"), 1);
    CHECK_EQ_INT(code_count(codes, "http_4xx"), 1);
    CHECK(strstr(out.data, "\"custom_id\":\"q-0\",\"response\":null,\"error\":{\"code\":\"max_attempts_exceeded\"") != NULL);
    CHECK(strstr(out.data, "\"status_code\":400") && strstr(out.data, "context_length_exceeded"));
    buf_release(&out);
    json_decref(seen);
    json_decref(codes);
    /* retry after finalization: refused (resubmit the line instead) */
    struct store_dead_letter *d = NULL;
    size_t n = 0;
    int more = 0;
    CHECK_EQ_INT(store_dead_letter_list(fx.st, fx.ta.id, bid, NULL, 10, &d, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(store_dead_letter_retry(fx.st, NULL, d[0].request_id, NOW + 62), ERR_BADSTATE);
    store_dead_letter_list_free(d, n);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_cancel_during_a_run_ends_cancelled_with_exact_counts)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 20, NULL, 86400, bid);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 5);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 5);
    CHECK_EQ_INT(store_batch_cancel(fx.st, fx.ta.id, bid, NOW + 1, NULL), 0);
    /* finalize: queued ones end at once, then it waits for the 5 leased */
    struct finalize_report rep;
    CHECK_EQ_INT(finalize_batch(fx.st, bid, NOW + 2, NULL, &rep), 0);
    CHECK_EQ_INT(rep.done, 0);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_CANCELLING);
    CHECK_EQ_INT(b.n_failed, 15);
    check_pg_lease_state(&fx);
    /* nothing more is leased from it */
    struct store_lease l2;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 2, &l2), 0);
    CHECK_EQ_INT(l2.n, 0);
    /* the heartbeat tells the worker to stop all five */
    int64_t exp;
    char(*stop)[ID_MAX] = NULL;
    size_t ns = 0;
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l.id, fx.worker, 60, -1, NOW + 3, &exp, &stop, &ns), 0);
    CHECK_EQ_INT(ns, 5);
    free(stop);
    /* three were already done: accepted; two are released: end as cancelled */
    struct store_lease part = l;
    part.n = 3;
    CHECK_EQ_INT(answer_all(&fx, &part, NOW + 4), 3);
    int64_t nrel = 0;
    CHECK_EQ_INT(lease_release(fx.st, l.id, fx.worker, NULL, 0, NOW + 4, &nrel), 0);
    CHECK_EQ_INT(nrel, 2);
    CHECK_EQ_INT(finalize_batch(fx.st, bid, NOW + 5, NULL, &rep), 0);
    CHECK_EQ_INT(rep.done, 1);
    CHECK_EQ_INT(rep.status, STORE_BATCH_CANCELLED);
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_CANCELLED);
    CHECK_EQ_INT(b.n_total, 20);
    CHECK_EQ_INT(b.n_completed, 3);
    CHECK_EQ_INT(b.n_failed, 17);
    CHECK(b.at[STORE_BATCH_CANCELLED] > 0);
    json_t *seen = json_object(), *codes = json_object();
    struct buf out;
    read_file(&fx, fx.ta.id, b.output_file_id, &out);
    CHECK_EQ_INT(scan_lines(&out, 1, seen, codes), 3);
    buf_release(&out);
    read_file(&fx, fx.ta.id, b.error_file_id, &out);
    CHECK_EQ_INT(scan_lines(&out, 0, seen, codes), 17);
    buf_release(&out);
    CHECK_EQ_INT(code_count(codes, "batch_cancelled"), 17);
    check_each_once(seen, "q", 20);
    json_decref(seen);
    json_decref(codes);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_batch_expiry_during_a_run_delivers_finished_results)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 10, NULL, 3600, bid); /* expires at NOW + 3600 */
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 4);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 10, &l), 0);
    CHECK_EQ_INT(l.n, 4);
    struct store_lease part = l;
    part.n = 2;
    CHECK_EQ_INT(answer_all(&fx, &part, NOW + 20), 2);
    /* past the window: no new leases; the finalizer expires the rest */
    struct store_lease l2;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW + 3600, &l2), 0);
    CHECK_EQ_INT(l2.n, 0);
    int fin = 0;
    CHECK_EQ_INT(finalize_sweep(fx.st, NOW + 3601, 10, NULL, 0, &fin), 0);
    CHECK_EQ_INT(fin, 1);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_EXPIRED);
    CHECK_EQ_INT(b.n_completed, 2);
    CHECK_EQ_INT(b.n_failed, 8);
    CHECK(b.at[STORE_BATCH_EXPIRED] > 0);
    json_t *seen = json_object(), *codes = json_object();
    struct buf out;
    read_file(&fx, fx.ta.id, b.output_file_id, &out);
    CHECK_EQ_INT(scan_lines(&out, 1, seen, codes), 2);
    buf_release(&out);
    read_file(&fx, fx.ta.id, b.error_file_id, &out);
    CHECK_EQ_INT(scan_lines(&out, 0, seen, codes), 8);
    buf_release(&out);
    CHECK_EQ_INT(code_count(codes, "batch_expired"), 8);
    check_each_once(seen, "q", 10);
    json_decref(seen);
    json_decref(codes);
    /* the lease's two unfinished requests: reported by the heartbeat (the lease
     * ended with them), and a late result for one is acknowledged as closed */
    int64_t exp;
    char(*stop)[ID_MAX] = NULL;
    size_t ns = 0;
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l.id, fx.worker, 60, -1, NOW + 3602, &exp, &stop, &ns), ERR_BADSTATE);
    struct store_result r = {.request_id = l.items[3].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200, .body = "{}", .body_len = 2};
    enum store_commit_outcome oc;
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, &r, 1, NOW + 3602, &oc), 0);
    CHECK_EQ_INT(oc, STORE_COMMIT_CLOSED);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_heartbeat_reports_requests_ended_by_expiry_while_held)
{
    struct fx fx;
    fx_open(&fx);
    char b1[ID_MAX], b2[ID_MAX];
    fx_batch(&fx, &fx.ta, "x", 2, NULL, 100, b1);   /* expires at NOW + 100 */
    fx_batch(&fx, &fx.ta, "y", 2, NULL, 86400, b2);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 4);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 4);
    struct finalize_report rep;
    CHECK_EQ_INT(finalize_batch(fx.st, b1, NOW + 100, NULL, &rep), 0);
    CHECK_EQ_INT(rep.status, STORE_BATCH_EXPIRED);
    int64_t exp;
    char(*stop)[ID_MAX] = NULL;
    size_t ns = 0;
    CHECK_EQ_INT(lease_heartbeat(fx.st, NULL, l.id, fx.worker, 60, -1, NOW + 101, &exp, &stop, &ns), 0);
    CHECK_EQ_INT(ns, 2);
    for (size_t i = 0; i < ns; i++) {
        struct store_request q;
        CHECK_EQ_INT(store_request_get(fx.st, stop[i], &q), 0);
        CHECK_EQ_STR(q.batch_id, b1);
    }
    free(stop);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_is_fair_across_tenants)
{
    struct fx fx;
    fx_open(&fx);
    char ba[ID_MAX], bb[ID_MAX];
    fx_batch(&fx, &fx.ta, "a", 100000, NULL, 86400, ba); /* queued first */
    fx_batch(&fx, &fx.tb, "b", 10, NULL, 86400, bb);
    int64_t now = NOW + 1;
    int leases = 0;
    struct store_batch b;
    for (;;) {
        struct store_lease l;
        struct store_lease_ask a = ask_of(&fx, 64);
        CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
        CHECK(l.n > 0);
        answer_all(&fx, &l, now);
        store_lease_clear(&l);
        leases++;
        get_batch(&fx, bb, &b);
        if (b.n_completed == 10)
            break;
        CHECK(leases < 100);
    }
    get_batch(&fx, ba, &b);
    printf("fairness: B (10 requests) done after %d lease(s) of 64; A had %lld of 100000 done\n", leases,
           (long long)b.n_completed);
    CHECK(leases <= 2);
    CHECK(b.n_completed < 5000); /* B done before A is 5% done */
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_priority_orders_a_tenants_own_batches_and_packs_group_prefixes)
{
    struct fx fx;
    fx_open(&fx);
    char lo[ID_MAX], hi[ID_MAX];
    fx_batch(&fx, &fx.ta, "lo", 4, NULL, 86400, lo);
    fx_batch(&fx, &fx.ta, "hi", 4, "{\"priority\":\"5\"}", 86400, hi);
    struct store_batch b;
    get_batch(&fx, hi, &b);
    CHECK_EQ_INT(b.priority, 5);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 4);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 4);
    for (size_t i = 0; i < l.n; i++)
        CHECK_EQ_STR(l.items[i].batch_id, hi);
    /* pack order: equal system prompts together (i odd / even alternate in the file) */
    uint64_t h0 = lease_prefix_hash(l.items[0].body, l.items[0].body_len, 24);
    uint64_t h1 = lease_prefix_hash(l.items[1].body, l.items[1].body_len, 24);
    uint64_t h2 = lease_prefix_hash(l.items[2].body, l.items[2].body_len, 24);
    uint64_t h3 = lease_prefix_hash(l.items[3].body, l.items[3].body_len, 24);
    CHECK(h0 != h2 || h1 != h3);
    store_lease_clear(&l);
    /* ordering itself, at a short prefix: groups contiguous, lengths ascending */
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 4);
    CHECK_EQ_INT(lease_order_pack(&l, 24), 0);
    uint64_t hs[4];
    for (size_t i = 0; i < 4; i++)
        hs[i] = lease_prefix_hash(l.items[i].body, l.items[i].body_len, 24);
    CHECK(hs[0] == hs[1] && hs[2] == hs[3] && hs[1] != hs[2]);
    CHECK(l.items[0].prompt_tokens_est <= l.items[1].prompt_tokens_est);
    store_lease_clear(&l);
    /* a bad priority is refused at creation */
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", fx.ta.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/none");
    CHECK_EQ_INT(store_file_create(fx.st, &sf), 0);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400, "{\"priority\":\"high\"}", 0, NULL};
    CHECK_EQ_INT(store_batch_create(fx.st, fx.ta.id, &nb, NOW, NULL), ERR_INVAL);
    nb.metadata = "{\"priority\":\"1001\"}";
    CHECK_EQ_INT(store_batch_create(fx.st, fx.ta.id, &nb, NOW, NULL), ERR_INVAL);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_earliest_deadline_first_within_a_tenant_and_fair_across_tenants)
{
    struct fx fx;
    fx_open(&fx);
    char day[ID_MAX], hour[ID_MAX], other[ID_MAX];
    fx_batch(&fx, &fx.ta, "day", 8, NULL, 86400, day);  /* older, 24h */
    fx_batch(&fx, &fx.ta, "hour", 3, NULL, 3600, hour); /* newer, 1h: served first */
    fx_batch(&fx, &fx.tb, "other", 8, NULL, 86400, other);
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 6);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 6);
    int n_hour = 0, n_day = 0, n_other = 0;
    for (size_t i = 0; i < l.n; i++) {
        n_hour += !strcmp(l.items[i].batch_id, hour);
        n_day += !strcmp(l.items[i].batch_id, day);
        n_other += !strcmp(l.items[i].batch_id, other);
    }
    /* tenant B keeps its half; tenant A's half goes to its 1h batch */
    CHECK_EQ_INT(n_other, 3);
    CHECK_EQ_INT(n_hour, 3);
    CHECK_EQ_INT(n_day, 0);
    store_lease_clear(&l);
    /* the comparator itself: priority, then deadline, then id */
    struct store_lease_cand x = {"batch_a", "t", 0, 100}, y = {"batch_b", "t", 0, 50}, z = {"batch_c", "t", 1, 900};
    CHECK(lease_batch_cmp(&y, &x) < 0);
    CHECK(lease_batch_cmp(&z, &y) < 0);
    y.expires_at = 100;
    CHECK(lease_batch_cmp(&x, &y) < 0);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_token_and_byte_budgets_bound_a_pack)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "q", 10, NULL, 86400, bid);
    struct store_request q;
    struct store_lease l;
    struct store_lease_ask a = ask_of(&fx, 10);
    a.max_tokens = 1; /* smaller than any request: the first is still taken */
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 1);
    CHECK_EQ_INT(store_request_get(fx.st, l.items[0].id, &q), 0);
    int64_t cost = q.prompt_tokens_est + q.max_tokens;
    store_lease_clear(&l);
    a.max_tokens = 3 * cost + cost / 2;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK(l.n >= 2 && l.n <= 4);
    store_lease_clear(&l);
    a.max_tokens = 0;
    a.max_bytes = 10;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT(l.n, 1);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* ---- crash safety ------------------------------------------------------------------------- */

static int rnd_upto(int n)
{
    return (int)(random() % n);
}

/* One worker step loop: lease, answer (every 7th request transiently fails
 * once per attempt, every 13th is an invalid request), sweep, finalize. */
static void crash_worker_loop(const char *dir, const char *worker, int64_t now, int steps, int do_finalize)
{
    struct store *st;
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    if (th_store_open(dir, &so, &st))
        _exit(3);
    for (int s = 0; s < steps; s++) {
        struct store_sweep_report rep;
        lease_expire_sweep(st, NULL, now, &rep);
        struct store_lease l;
        struct store_lease_ask a = {worker, MODEL, 7, 0, 0, 30};
        if (lease_acquire(st, NULL, &a, now, &l))
            _exit(4);
        if (l.n == 0) {
            if (do_finalize)
                finalize_sweep(st, now, 10, NULL, 0, NULL);
            now += 5;
            continue;
        }
        struct store_result *rs = calloc(l.n, sizeof *rs);
        enum store_commit_outcome *oc = calloc(l.n, sizeof *oc);
        char **bodies = calloc(l.n, sizeof *bodies);
        for (size_t i = 0; i < l.n; i++) {
            const char *dash = strrchr(l.items[i].custom_id, '-');
            int k = dash ? atoi(dash + 1) : 0;
            bodies[i] = success_body(&l.items[i]);
            rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                          .status_code = 200, .body = bodies[i], .body_len = strlen(bodies[i]),
                                          .prompt_tokens = 7, .completion_tokens = 3};
            if (k % 7 == 3 && l.items[i].attempt < 3)
                rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_TRANSIENT, .error = "flaky"};
            else if (k % 13 == 5)
                rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_INVALID,
                                              .status_code = 400, .body = "{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}", .body_len = 83};
        }
        /* some leases are abandoned (worker "dies"), the sweeper requeues them */
        if (rnd_upto(10) != 0)
            lease_results_commit(st, NULL, l.id, worker, rs, l.n, now, oc);
        for (size_t i = 0; i < l.n; i++)
            free(bodies[i]);
        free(bodies);
        free(rs);
        free(oc);
        store_lease_clear(&l);
        if (do_finalize)
            finalize_sweep(st, now, 10, NULL, 0, NULL);
        now += 40; /* past the lease: abandoned ones expire next round */
    }
    store_close(st);
}

static void crash_exit_hook(void *ctx)
{
    int *left = ctx;
    if ((*left)-- <= 0)
        _exit(0);
}

static void check_crash_batch(struct fx *fx, const char *bid, const char *prefix, int n)
{
    struct store_batch b;
    get_batch(fx, bid, &b);
    CHECK_EQ_INT(b.status, STORE_BATCH_COMPLETED);
    CHECK_EQ_INT(b.n_total, n);
    CHECK_EQ_INT(b.n_completed + b.n_failed, n);
    json_t *seen = json_object(), *codes = json_object();
    struct buf out;
    int n_out = 0, n_err = 0;
    if (b.output_file_id[0]) {
        read_file(fx, b.tenant_id, b.output_file_id, &out);
        n_out = scan_lines(&out, 1, seen, codes);
        buf_release(&out);
    }
    if (b.error_file_id[0]) {
        read_file(fx, b.tenant_id, b.error_file_id, &out);
        n_err = scan_lines(&out, 0, seen, codes);
        buf_release(&out);
    }
    CHECK_EQ_INT(n_out, b.n_completed);
    CHECK_EQ_INT(n_err, b.n_failed);
    check_each_once(seen, prefix, n);
    /* every k % 13 == 5 is an invalid request: a 4xx line, unless lapsed leases
     * (killed or abandoning workers) used up its attempts first: then it is
     * dead-lettered; nothing else fails */
    int want_4xx = 0;
    for (int k = 0; k < n; k++)
        want_4xx += k % 13 == 5;
    CHECK(code_count(codes, "http_4xx") <= want_4xx);
    CHECK(n_out <= n - want_4xx);
    CHECK_EQ_INT(n_err, code_count(codes, "http_4xx") + code_count(codes, "max_attempts_exceeded"));
    json_decref(seen);
    json_decref(codes);
    char q[300];
    snprintf(q, sizeof q, "SELECT count(*) FROM usage_ledger WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(fx, q), n_out);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(fx, q), n);
    snprintf(q, sizeof q, "SELECT count(*) FROM requests WHERE batch_id = '%s' AND status IN ('queued','leased')", bid);
    CHECK_EQ_INT(sql_count(fx, q), 0);
}

TEST(lease_crash_at_random_points_loses_and_doubles_nothing)
{
    struct fx fx;
    fx_open(&fx);
    char b1[ID_MAX], b2[ID_MAX];
    fx_batch(&fx, &fx.ta, "c", 240, NULL, 86400 * 30, b1);
    fx_batch(&fx, &fx.tb, "d", 40, NULL, 86400 * 30, b2);
    char worker[ID_MAX];
    snprintf(worker, sizeof worker, "%s", fx.worker);
    store_close(fx.st); /* never fork with an open connection */
    fx.st = NULL;
    srandom((unsigned)getpid());
    int64_t now = NOW + 10;
    int killed = 0;
    /* phase 1: workers SIGKILLed at random instants (inside transactions too) */
    for (int round = 0; round < 10; round++) {
        unsigned seed = (unsigned)random();
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            srandom(seed);
            crash_worker_loop(fx.dir, worker, now, 1000, 1);
            _exit(0);
        }
        usleep((useconds_t)(1000 + rnd_upto(40000)));
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        killed += WIFSIGNALED(status);
        now += 5000; /* every lease of the dead worker has expired */
    }
    /* phase 2: run the work to the end without finalizing */
    pid_t pid = fork();
    if (pid == 0) {
        crash_worker_loop(fx.dir, worker, now, 400, 0);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    now += 100000;
    /* phase 3: finalizers that _exit at a random output line, then one that finishes */
    for (int round = 0; round < 6; round++) {
        int stop_after = rnd_upto(300);
        pid = fork();
        if (pid == 0) {
            struct store *st;
            if (th_store_open(fx.dir, NULL, &st))
                _exit(3);
            struct finalize_hooks h = {crash_exit_hook, &stop_after};
            struct finalize_report rep;
            finalize_batch(st, b1, now, &h, &rep);
            finalize_batch(st, b2, now, &h, &rep);
            store_close(st);
            _exit(0);
        }
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    struct store_opts so = STORE_OPTS_DEFAULT;
    CHECK_EQ_INT(th_store_open(fx.dir, &so, &fx.st), 0);
    struct store_sweep_report rep;
    CHECK_EQ_INT(lease_expire_sweep(fx.st, NULL, now, &rep), 0);
    int fin = 0;
    CHECK_EQ_INT(finalize_sweep(fx.st, now, 10, NULL, 0, &fin), 0);
    printf("crash: %d of 10 workers killed mid-run\n", killed);
    CHECK(killed > 0);
    check_crash_batch(&fx, b1, "c", 240);
    check_crash_batch(&fx, b2, "d", 40);
    /* no temp files left behind, one file pair per batch at most */
    char path[900];
    snprintf(path, sizeof path, "%s/files/%s-output.jsonl.zst.tmp", fx.dir, b1);
    CHECK(access(path, F_OK) != 0);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* ---- admin views and the sweeper thread (store_admin.c, sweeper.c) ---- */

TEST(lease_admin_views_and_work_stats_count_what_is_held)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "s", 10, NULL, 86400, bid);
    struct store_lease_ask a = ask_of(&fx, 4);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT((int)l.n, 4);
    int64_t exp = 0;
    char(*stop)[ID_MAX] = NULL;
    size_t n_stop = 0;
    CHECK_EQ_INT(store_lease_heartbeat(fx.st, l.id, fx.worker, 60, 250.5, NOW + 1, &exp, &stop, &n_stop), 0);
    CHECK_EQ_INT((int)n_stop, 0);
    free(stop);
    struct store_work_stats ws;
    CHECK_EQ_INT(store_work_stats(fx.st, &ws), 0);
    CHECK_EQ_INT((int)ws.n_models, 1);
    CHECK_EQ_STR(ws.models[0].model, "smollm");
    CHECK_EQ_INT((int)ws.models[0].queued, 6);
    CHECK_EQ_INT((int)ws.models[0].leased, 4);
    CHECK_EQ_INT((int)ws.leases_outstanding, 1);
    CHECK_EQ_INT((int)ws.dead_letters, 0);
    free(ws.models);
    struct store_worker_info *w = NULL;
    size_t n = 0;
    CHECK_EQ_INT(store_workers_list(fx.st, NOW, 10, &w, &n), 0);
    CHECK_EQ_INT((int)n, 1);
    CHECK_EQ_STR(w[0].id, fx.worker);
    CHECK_EQ_STR(w[0].models, MODEL);
    CHECK_EQ_INT((int)w[0].leases_held, 1);
    CHECK_EQ_INT((int)w[0].requests_held, 4);
    CHECK(w[0].tokens_per_s > 250.4 && w[0].tokens_per_s < 250.6);
    CHECK_EQ_INT((int)w[0].last_seen, NOW + 1);
    free(w);
    CHECK_EQ_INT(store_workers_list(fx.st, NOW + 2, 10, &w, &n), 0); /* not seen since */
    CHECK_EQ_INT((int)n, 0);
    free(w);
    CHECK_EQ_INT(store_workers_list(fx.st, 0, 0, &w, &n), ERR_INVAL);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_sweeper_thread_ends_lapsed_leases_then_finalizes)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "w", 3, NULL, 86400, bid);
    /* leased at NOW, which is long past on the wall clock the sweeper reads:
     * the lease has lapsed and the batch's window has passed */
    struct store_lease_ask a = ask_of(&fx, 3);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, NOW, &l), 0);
    CHECK_EQ_INT((int)l.n, 3);
    store_lease_clear(&l);
    struct lease_opts lo;
    lease_opts_default(&lo);
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    struct sweeper *sw = NULL;
    th_pg_opts(fx.dir, &so, &so);
    CHECK_EQ_INT(sweeper_start(fx.dir, &so, &lo, 20, &sw), 0);
    struct sweeper_stats s;
    struct store_batch b;
    int done = 0;
    /* up to 60 s: a loaded 2-core machine under ASan can take seconds per pass */
    for (int i = 0; i < 6000 && !done; i++) {
        sweeper_wake(sw);
        get_batch(&fx, bid, &b);
        /* the sweeper counts a finished batch after its commit, and the
         * pass itself after its last step (file expiry): the status can be
         * visible a moment before either count, so wait for all three */
        sweeper_stats(sw, &s);
        done = b.status == STORE_BATCH_EXPIRED && s.batches_finished >= 1 && s.passes >= 1;
        store_batch_release(&b);
        if (!done)
            usleep(10000);
    }
    sweeper_stats(sw, &s);
    sweeper_free(sw);
    sweeper_free(NULL);
    /* step 1 (lease expiry) ran before step 2 (the batch's expiry) */
    CHECK_EQ_INT((int)s.leases_expired, 1);
    CHECK_EQ_INT((int)s.requeued, 3);
    CHECK_EQ_INT((int)s.batches_finished, 1);
    CHECK(s.passes >= 1);
    get_batch(&fx, bid, &b);
    CHECK_EQ_STR(store_batch_status_name(b.status), "expired");
    CHECK_EQ_INT((int)b.n_failed, 3);
    CHECK(b.error_file_id[0] != '\0' && b.output_file_id[0] == '\0');
    store_batch_release(&b);
    struct store_work_stats ws;
    CHECK_EQ_INT(store_work_stats(fx.st, &ws), 0);
    CHECK_EQ_INT((int)ws.n_models, 0);
    CHECK_EQ_INT((int)ws.leases_outstanding, 0);
    free(ws.models);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* ---- lease_order_pack on several threads ---------------------------------------------- */

struct order_run {
    size_t n;     /* items in each pack */
    int rounds;
    int bad;      /* packs that came out in the wrong order */
};

static void *order_thread(void *arg)
{
    struct order_run *r = arg;
    static const char body[] = "{\"prompt\":\"the same prompt for every item\"}";
    for (int round = 0; round < r->rounds; round++) {
        struct store_lease l;
        memset(&l, 0, sizeof l);
        l.n = r->n;
        l.items = calloc(r->n, sizeof *l.items);
        if (!l.items) {
            r->bad++;
            return NULL;
        }
        for (size_t i = 0; i < r->n; i++) {
            l.items[i].body = (char *)body; /* one hash: every comparison reaches the lengths */
            l.items[i].body_len = sizeof body - 1;
            l.items[i].prompt_tokens_est = (int64_t)((r->n - i) % 5);
            l.items[i].max_tokens = (int64_t)(i % 3);
            l.items[i].attempt = (int64_t)i; /* the original position, to check stability */
        }
        if (lease_order_pack(&l, 64) != 0)
            r->bad++;
        for (size_t i = 1; i < r->n; i++) {
            const struct store_leased *p = &l.items[i - 1], *q = &l.items[i];
            if (p->prompt_tokens_est > q->prompt_tokens_est ||
                (p->prompt_tokens_est == q->prompt_tokens_est &&
                 (p->max_tokens > q->max_tokens || (p->max_tokens == q->max_tokens && p->attempt > q->attempt)))) {
                r->bad++;
                break;
            }
        }
        free(l.items);
    }
    return NULL;
}

/* Regression: lease_order_pack sorted through a process-global pointer to
 * the items (qsort has no context), while lease_acquire runs on several pool
 * threads: two packs ordered at once read each other's items (wrong order,
 * out of bounds, or NULL). Each thread's packs must come out right whatever
 * the other does. */
TEST(lease_order_pack_is_thread_safe)
{
    struct order_run a = {.n = 300, .rounds = 300}, b = {.n = 7, .rounds = 6000};
    pthread_t ta, tb;
    CHECK_EQ_INT(pthread_create(&ta, NULL, order_thread, &a), 0);
    CHECK_EQ_INT(pthread_create(&tb, NULL, order_thread, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_EQ_INT(a.bad, 0);
    CHECK_EQ_INT(b.bad, 0);
}

struct body_check {
    const char *id, *want;
    size_t len;
    int found;
};

static int body_check_row(void *ctx, const struct store_result_row *row)
{
    struct body_check *c = ctx;
    if (strcmp(row->request_id, c->id) == 0)
        c->found = row->body_len == c->len && memcmp(row->body, c->want, c->len) == 0;
    return 0;
}

/* One results chunk mixing what a commit can meet (on PostgreSQL the
 * requests a lease still holds end set-based, the rest one by one; the
 * outcomes are the same on both engines): the same request twice (the
 * first wins, the second is a duplicate), an unknown id, a request of
 * another lease (stale), a transient error, a 4xx answer; then a chunk of
 * only transient errors; then the chunk sent again (duplicates). Counters,
 * results rows and ledger rows are exact. */
/* Each (lease, batch) keeps its token sums in lease_batches for the
 * fleet's reads (triggers on results: schema.sql migration 13,
 * schema_pg.sql migrations 8 and 9): they add up every commit and keep
 * what was committed when results rows are deleted (the fleet's history).
 * PostgreSQL deletes a request's results by a statement-level trigger
 * instead of a foreign key: deleting requests leaves no result behind
 * (both engines). */
TEST(lease_commit_token_sums_add_up_and_outlive_results_that_go_with_their_requests_and_batches)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "m", 5, NULL, 86400, bid);
    int64_t now = NOW + 10;
    struct store_lease_ask a = ask_of(&fx, 5);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 5);
    char *b[5];
    struct store_result rs[5];
    for (int i = 0; i < 5; i++) {
        b[i] = success_body(&l.items[i]);
        rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200,
                                      .body = b[i], .body_len = strlen(b[i]), .prompt_tokens = 10 + i,
                                      .completion_tokens = 3 * i, .cached_tokens = i};
    }
    enum store_commit_outcome oc[5];
    /* two commits on one lease: the sums add up */
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs, 2, now, oc), 0);
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs + 2, 3, now, oc), 0);
    char q[400], sums[400];
    snprintf(sums, sizeof sums, "SELECT prompt_tokens * 1000000 + completion_tokens * 1000 + cached_tokens "
             "FROM lease_batches WHERE lease_id = '%s' AND batch_id = '%s' AND tenant_id = '%s'", l.id, bid,
             fx.ta.id);
    CHECK_EQ_INT(sql_count(&fx, sums), 60 * 1000000 + 30 * 1000 + 10);
    snprintf(q, sizeof q, "DELETE FROM results WHERE request_id = '%s'", l.items[4].id);
    struct sdb *db = th_db_open(fx.dir);
    CHECK_EQ_INT(sdb_exec(db, q), SDB_OK);
    sdb_close(db);
    CHECK_EQ_INT(sql_count(&fx, sums), 60 * 1000000 + 30 * 1000 + 10); /* what was committed */
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), 4);
    db = th_db_open(fx.dir);
    if (!th_pg_on()) /* per connection on SQLite; the store's own sets it */
        CHECK_EQ_INT(sdb_exec(db, "PRAGMA foreign_keys = ON"), SDB_OK);
    snprintf(q, sizeof q, "DELETE FROM requests WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sdb_exec(db, q), SDB_OK);
    sdb_close(db);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), 0);
    CHECK_EQ_INT(sql_count(&fx, sums), 60 * 1000000 + 30 * 1000 + 10);
    for (int i = 0; i < 5; i++)
        free(b[i]);
    store_lease_clear(&l);
    /* a deleted batch takes its requests and their results along
     * (PostgreSQL: statement-level triggers, no per-row foreign keys) */
    char bid2[ID_MAX];
    fx_batch(&fx, &fx.ta, "m", 3, NULL, 86400, bid2);
    a = ask_of(&fx, 3);
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 3);
    for (int i = 0; i < 3; i++) {
        b[i] = success_body(&l.items[i]);
        rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200,
                                      .body = b[i], .body_len = strlen(b[i]), .prompt_tokens = 1};
    }
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs, 3, now, oc), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid2);
    CHECK_EQ_INT(sql_count(&fx, q), 3);
    db = th_db_open(fx.dir);
    if (!th_pg_on())
        CHECK_EQ_INT(sdb_exec(db, "PRAGMA foreign_keys = ON"), SDB_OK);
    snprintf(q, sizeof q, "DELETE FROM batches WHERE id = '%s'", bid2);
    CHECK_EQ_INT(sdb_exec(db, q), SDB_OK);
    sdb_close(db);
    snprintf(q, sizeof q, "SELECT count(*) FROM requests WHERE batch_id = '%s'", bid2);
    CHECK_EQ_INT(sql_count(&fx, q), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid2);
    CHECK_EQ_INT(sql_count(&fx, q), 0);
    for (int i = 0; i < 3; i++)
        free(b[i]);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

TEST(lease_commit_chunk_mixes_outcomes_exactly)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "m", 8, NULL, 86400, bid);
    /* budgeted: each finished request releases its share (PostgreSQL: one
     * statement-level trigger per UPDATE); prices 1 and 3 micro-dollars per
     * token make a share prompt_tokens_est + 3 * max_tokens */
    char q[300];
    snprintf(q, sizeof q, "SELECT sum(prompt_tokens_est + max_tokens) FROM requests WHERE batch_id = '%s'", bid);
    int64_t tok = sql_count(&fx, q);
    snprintf(q, sizeof q, "SELECT sum(prompt_tokens_est + 3 * max_tokens) FROM requests WHERE batch_id = '%s'", bid);
    int64_t mic = sql_count(&fx, q);
    CHECK_EQ_INT(store_batch_reserve(fx.st, bid, tok, mic, 1000000, 3000000), 0);
    int64_t now = NOW + 10;
    struct store_lease_ask a = ask_of(&fx, 6);
    struct store_lease l, l2;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 6);
    a.max_requests = 2;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l2), 0);
    CHECK_EQ_INT((int)l2.n, 2);
    char *b[6];
    for (int i = 0; i < 6; i++)
        b[i] = success_body(&l.items[i]);
    struct store_result ok[6];
    for (int i = 0; i < 6; i++)
        ok[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200,
                                      .body = b[i], .body_len = strlen(b[i]), .prompt_tokens = 7,
                                      .completion_tokens = 3};
    struct store_result rs[8] = {
        ok[0], ok[1], ok[0], /* duplicate inside the chunk */
        {.request_id = "req_01nope", .kind = STORE_RESULT_SUCCESS, .status_code = 200, .body = "{}", .body_len = 2},
        {.request_id = l2.items[0].id, .kind = STORE_RESULT_SUCCESS, .status_code = 200, .body = "{}", .body_len = 2},
        {.request_id = l.items[2].id, .kind = STORE_RESULT_TRANSIENT, .error = "flaky"},
        {.request_id = l.items[3].id, .kind = STORE_RESULT_INVALID, .status_code = 400, .body = "{\"e\":\"\\\"q\\\\\"}",
         .body_len = 14},
        ok[4],
    };
    enum store_commit_outcome oc[8];
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs, 8, now, oc), 0);
    enum store_commit_outcome want[8] = {STORE_COMMIT_OK, STORE_COMMIT_OK, STORE_COMMIT_DUPLICATE,
                                         STORE_COMMIT_UNKNOWN, STORE_COMMIT_STALE, STORE_COMMIT_RETRY,
                                         STORE_COMMIT_OK, STORE_COMMIT_OK};
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(oc[i], want[i]);
    /* only transient errors, more than one */
    struct store_result tr[2] = {{.request_id = l.items[5].id, .kind = STORE_RESULT_TRANSIENT, .error = "x"},
                                 {.request_id = l.items[5].id, .kind = STORE_RESULT_TRANSIENT, .error = "y"}};
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, tr, 2, now, oc), 0);
    CHECK_EQ_INT(oc[0], STORE_COMMIT_RETRY);
    CHECK_EQ_INT(oc[1], STORE_COMMIT_STALE);
    /* the first chunk again: what it ended is a duplicate now */
    CHECK_EQ_INT(lease_results_commit(fx.st, NULL, l.id, fx.worker, rs, 8, now, oc), 0);
    enum store_commit_outcome again[8] = {STORE_COMMIT_DUPLICATE, STORE_COMMIT_DUPLICATE, STORE_COMMIT_DUPLICATE,
                                          STORE_COMMIT_UNKNOWN, STORE_COMMIT_STALE, STORE_COMMIT_STALE,
                                          STORE_COMMIT_DUPLICATE, STORE_COMMIT_DUPLICATE};
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(oc[i], again[i]);
    struct store_batch bt;
    get_batch(&fx, bid, &bt);
    CHECK_EQ_INT(bt.n_completed, 3);
    CHECK_EQ_INT(bt.n_failed, 1);
    /* the reservation is what the 4 unfinished requests hold, exactly */
    snprintf(q, sizeof q, "SELECT reserved_tokens - (SELECT sum(prompt_tokens_est + max_tokens) FROM requests "
                          "WHERE batch_id = '%s' AND status IN ('queued', 'leased')) FROM batches WHERE id = '%s'",
             bid, bid);
    CHECK_EQ_INT(sql_count(&fx, q), 0);
    snprintf(q, sizeof q, "SELECT reserved_micros - (SELECT sum(prompt_tokens_est + 3 * max_tokens) FROM requests "
                          "WHERE batch_id = '%s' AND status IN ('queued', 'leased')) FROM batches WHERE id = '%s'",
             bid, bid);
    CHECK_EQ_INT(sql_count(&fx, q), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM requests WHERE batch_id = '%s' AND status IN ('queued', 'leased')", bid);
    CHECK_EQ_INT(sql_count(&fx, q), 4);
    snprintf(q, sizeof q, "SELECT count(*) FROM usage_ledger WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), 3);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), 4);
    snprintf(q, sizeof q, "SELECT count(*) FROM results WHERE batch_id = '%s' AND lease_id = '%s' AND "
                          "status_code = 400 AND request_id = '%s'", bid, l.id, l.items[3].id);
    CHECK_EQ_INT(sql_count(&fx, q), 1);
    /* the bodies are stored byte for byte (PostgreSQL: through hex in an array literal) */
    struct body_check bc = {.id = l.items[3].id, .want = rs[6].body, .len = rs[6].body_len};
    int64_t cur = 0;
    int nrows = 0;
    CHECK_EQ_INT(store_results_scan(fx.st, bid, &cur, 100, body_check_row, &bc, &nrows), 0);
    CHECK_EQ_INT(nrows, 4);
    CHECK_EQ_INT(bc.found, 1);
    for (int i = 0; i < 6; i++)
        free(b[i]);
    store_lease_clear(&l);
    store_lease_clear(&l2);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* Several connections leasing and committing one batch at once (on
 * PostgreSQL: the row-locked hot paths, ready rows taken with SKIP LOCKED;
 * on SQLite: one writer at a time). Whatever the interleaving, every
 * request is leased exactly once, every commit answers OK for all of its
 * pack, and the counters, results and ledger rows are exact. */
struct conc_arg {
    struct store *st;
    const char *worker;
    pthread_mutex_t *mu;
    char (*seen)[ID_MAX];
    int *n_seen, cap;
    int err; /* 0, or what went wrong */
};

static void *conc_main(void *p)
{
    struct conc_arg *c = p;
    for (int round = 0; round < 1000 && !c->err; round++) {
        struct store_lease_ask a = {c->worker, MODEL, 7, 0, 0, 600};
        struct store_lease l;
        int rc = lease_acquire(c->st, NULL, &a, NOW + 10, &l);
        if (rc == ERR_BUSY)
            continue; /* a lock wait ran out: try again */
        if (rc) {
            c->err = 1;
            break;
        }
        if (l.n == 0)
            break;
        struct store_result rs[7];
        enum store_commit_outcome oc[7];
        char *bodies[7];
        pthread_mutex_lock(c->mu);
        for (size_t i = 0; i < l.n; i++)
            if (*c->n_seen < c->cap)
                memcpy(c->seen[(*c->n_seen)++], l.items[i].id, ID_MAX);
        pthread_mutex_unlock(c->mu);
        for (size_t i = 0; i < l.n; i++) {
            bodies[i] = success_body(&l.items[i]);
            rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                          .status_code = 200, .body = bodies[i], .body_len = strlen(bodies[i]),
                                          .prompt_tokens = 7, .completion_tokens = 3};
        }
        do
            rc = lease_results_commit(c->st, NULL, l.id, c->worker, rs, l.n, NOW + 11, oc);
        while (rc == ERR_BUSY);
        if (rc)
            c->err = 2;
        for (size_t i = 0; i < l.n; i++) {
            if (!rc && oc[i] != STORE_COMMIT_OK)
                c->err = 3;
            free(bodies[i]);
        }
        store_lease_clear(&l);
    }
    return NULL;
}

static int id_cmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

TEST(lease_concurrent_connections_lease_each_request_once)
{
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    const int n = 300, nt = 3;
    fx_batch(&fx, &fx.ta, "cc", n, NULL, 86400, bid);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    char(*seen)[ID_MAX] = calloc((size_t)n + 64, ID_MAX);
    int n_seen = 0;
    struct conc_arg args[3];
    pthread_t th[3];
    for (int i = 0; i < nt; i++) {
        args[i] = (struct conc_arg){.worker = fx.worker, .mu = &mu, .seen = seen, .n_seen = &n_seen, .cap = n + 64};
        CHECK_EQ_INT(th_store_open(fx.dir, NULL, &args[i].st), 0);
    }
    for (int i = 0; i < nt; i++)
        CHECK_EQ_INT(pthread_create(&th[i], NULL, conc_main, &args[i]), 0);
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].err, 0);
        store_close(args[i].st);
    }
    CHECK_EQ_INT(n_seen, n);
    qsort(seen, (size_t)n_seen, ID_MAX, id_cmp);
    for (int i = 1; i < n_seen; i++)
        CHECK(strcmp(seen[i - 1], seen[i]) != 0);
    struct store_batch b;
    get_batch(&fx, bid, &b);
    CHECK_EQ_INT(b.n_completed, n);
    CHECK_EQ_INT(b.n_failed, 0);
    char q[300];
    snprintf(q, sizeof q, "SELECT count(*) FROM usage_ledger WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), n);
    snprintf(q, sizeof q, "SELECT count(DISTINCT seq) FROM results WHERE batch_id = '%s'", bid);
    CHECK_EQ_INT(sql_count(&fx, q), n);
    CHECK_EQ_INT(sql_count(&fx, "SELECT sum(requests) FROM usage_totals"), n); /* the /metrics sums */
    CHECK_EQ_INT(sql_count(&fx, "SELECT sum(prompt_tokens) FROM usage_totals"), 7 * n);
    free(seen);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* ---- row lock order on PostgreSQL ---------------------------------------------------- */

/* Every hot-path transaction locks rows in one order - its lease, its
 * worker, the batches it may end (in id order), usage_totals - so no two of
 * them deadlock (a deadlock is detected and answered 503, but a worker's two
 * commits must not fail each other). The tests hold one row in a transaction
 * of their own, run the operation on a second connection until it waits for
 * that row, and ask a third which rows it holds by then (FOR NO KEY UPDATE
 * NOWAIT: fails on a row another transaction locked). */

struct lock_op {
    struct store *st; /* a connection of its own (the op's thread uses it) */
    int what;         /* 0 store_results_commit, 1 store_lease_sweep, 2 store_lease_release */
    const char *lease_id, *worker_id;
    const struct store_result *items;
    size_t n;
    struct store_retry_policy policy;
    int64_t now;
    enum store_commit_outcome oc[8];
    struct store_sweep_report rep;
    int64_t n_released;
    int rc;
};

static void *lock_op_thread(void *arg)
{
    struct lock_op *o = arg;
    if (o->what == 0)
        o->rc = store_results_commit(o->st, o->lease_id, o->worker_id, o->items, o->n, &o->policy, o->now, o->oc);
    else if (o->what == 1)
        o->rc = store_lease_sweep(o->st, o->now, &o->policy, 10, &o->rep);
    else
        o->rc = store_lease_release(o->st, o->lease_id, o->worker_id, NULL, 0, o->now, &o->n_released);
    return NULL;
}

/* 1 when another transaction holds a lock on row id of table, 0 when not. */
static int row_locked(const char *dir, const char *table, const char *id)
{
    struct sdb *db = th_db_open(dir);
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT 1 FROM %s WHERE id = '%s' FOR NO KEY UPDATE NOWAIT", table, id);
    struct sdb_stmt *s = NULL;
    CHECK_EQ_INT(sdb_prepare(db, sql, &s), SDB_OK);
    int r = sdb_step(s);
    sdb_finalize(s);
    sdb_close(db);
    if (r != SDB_ROW && r != SDB_BUSY)
        th_fail(__FILE__, __LINE__, sql, "rc %d", r);
    return r == SDB_BUSY;
}

/* Hold batch hold_id's row on a connection of the test's, run o on its own
 * thread until it waits for a lock, and fill locked[i] with whether rows[i]
 * (table, id pairs) are held by then; then let o finish. */
static void lock_probe(const char *dir, const char *hold_id, struct lock_op *o, const char *const (*rows)[2],
                       int nrows, int *locked)
{
    struct sdb *e = th_db_open(dir);
    char sql[200];
    snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM batches WHERE id = '%s' FOR NO KEY UPDATE", hold_id);
    CHECK_EQ_INT(sdb_exec(e, sql), SDB_OK);
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, lock_op_thread, o), 0);
    int64_t waiting = 0;
    for (int i = 0; i < 3000 && !waiting; i++) {
        waiting = th_db_int(dir, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock'");
        if (!waiting)
            usleep(10000);
    }
    for (int i = 0; i < nrows; i++)
        locked[i] = waiting ? row_locked(dir, rows[i][0], rows[i][1]) : -1;
    CHECK_EQ_INT(sdb_exec(e, "ROLLBACK"), SDB_OK);
    pthread_join(th, NULL);
    sdb_close(e);
    CHECK(waiting > 0); /* it waited for the held batch row */
    CHECK_EQ_INT(o->rc, 0);
}

/* A commit locks its worker right after its lease, before any batch row
 * (a commit of one success locked the batch, usage_totals, then the worker;
 * one of several successes the worker first: two commits of one worker on
 * two leases deadlocked). */
TEST(lease_commit_locks_its_worker_before_any_batch)
{
    if (!th_pg_on())
        th_skip("PostgreSQL only (row locks; SQLite has one writer)");
    struct fx fx;
    fx_open(&fx);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "w", 3, NULL, 86400, bid);
    int64_t now = NOW + 10;
    struct store_lease_ask a = ask_of(&fx, 3);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 3);
    char *b[3];
    struct store_result rs[3];
    for (int i = 0; i < 3; i++) {
        b[i] = success_body(&l.items[i]);
        rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                      .status_code = 200, .body = b[i], .body_len = strlen(b[i]),
                                      .prompt_tokens = 7, .completion_tokens = 3};
    }
    const char *const rows[2][2] = {{"leases", l.id}, {"workers", fx.worker}};
    /* one item (commit_one), then two (the set-based commit) */
    for (int round = 0; round < 2; round++) {
        struct lock_op o = {.what = 0, .lease_id = l.id, .worker_id = fx.worker, .items = rs + round,
                            .n = (size_t)round + 1, .policy = STORE_RETRY_DEFAULT, .now = now};
        struct store_opts so = STORE_OPTS_DEFAULT;
        so.busy_timeout_ms = 60000; /* its lock_timeout: it waits while the test probes */
        CHECK_EQ_INT(th_store_open(fx.dir, &so, &o.st), 0);
        int locked[2];
        lock_probe(fx.dir, bid, &o, rows, 2, locked);
        store_close(o.st);
        CHECK_EQ_INT(locked[0], 1);
        CHECK_EQ_INT(locked[1], 1);
        for (int i = 0; i <= round; i++)
            CHECK_EQ_INT(o.oc[i], STORE_COMMIT_OK);
    }
    struct store_batch bt;
    get_batch(&fx, bid, &bt);
    CHECK_EQ_INT(bt.n_completed, 3);
    for (int i = 0; i < 3; i++)
        free(b[i]);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* A commit and a sweep lock the rows of every batch they may end requests
 * of, in id order, right after the lease (and worker) row: held the lower
 * batch, they wait for it before touching the higher one (a commit ended a
 * dead-lettered request of the higher batch first, by item order, then
 * waited for the lower: two such transactions deadlocked). A release
 * locks only batches that are not in_progress, so it does not wait here. */
TEST(lease_commit_and_sweep_lock_batches_in_id_order)
{
    if (!th_pg_on())
        th_skip("PostgreSQL only (row locks; SQLite has one writer)");
    struct fx fx;
    fx_open(&fx);
    char b1[ID_MAX], b2[ID_MAX];
    fx_batch(&fx, &fx.ta, "p", 3, NULL, 86400, b1);
    fx_batch(&fx, &fx.tb, "q", 3, NULL, 86400, b2);
    const char *lo = strcmp(b1, b2) < 0 ? b1 : b2, *hi = lo == b1 ? b2 : b1;
    int64_t now = NOW + 10;
    struct store_lease_ask a = ask_of(&fx, 6);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 6);
    const char *in_lo[3], *in_hi[3];
    int nlo = 0, nhi = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (strcmp(l.items[i].batch_id, lo) == 0)
            in_lo[nlo++] = l.items[i].id;
        else
            in_hi[nhi++] = l.items[i].id;
    }
    CHECK_EQ_INT(nlo, 3);
    CHECK_EQ_INT(nhi, 3);
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.busy_timeout_ms = 60000;
    struct store_retry_policy one = {1, 10, 600}; /* a transient error dead-letters */

    /* a commit: the higher batch's transient error (dead-lettered) first */
    struct store_result rs[2] = {
        {.request_id = in_hi[0], .kind = STORE_RESULT_TRANSIENT, .error = "flaky"},
        {.request_id = in_lo[0], .kind = STORE_RESULT_SUCCESS, .status_code = 200, .body = "{}", .body_len = 2},
    };
    struct lock_op o = {.what = 0, .lease_id = l.id, .worker_id = fx.worker, .items = rs, .n = 2,
                        .policy = one, .now = now};
    CHECK_EQ_INT(th_store_open(fx.dir, &so, &o.st), 0);
    const char *const rows[3][2] = {{"leases", l.id}, {"workers", fx.worker}, {"batches", hi}};
    int locked[3];
    lock_probe(fx.dir, lo, &o, rows, 3, locked);
    CHECK_EQ_INT(locked[0], 1);
    CHECK_EQ_INT(locked[1], 1);
    CHECK_EQ_INT(locked[2], 0);
    CHECK_EQ_INT(o.oc[0], STORE_COMMIT_DEAD);
    CHECK_EQ_INT(o.oc[1], STORE_COMMIT_OK);

    /* a release of in_progress requests locks no batch row: it does not wait */
    struct sdb *e = th_db_open(fx.dir);
    char sql[200];
    snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM batches WHERE id = '%s' FOR NO KEY UPDATE", lo);
    CHECK_EQ_INT(sdb_exec(e, sql), SDB_OK);
    char ids[2][ID_MAX];
    snprintf(ids[0], ID_MAX, "%s", in_lo[1]);
    snprintf(ids[1], ID_MAX, "%s", in_hi[1]);
    int64_t n_rel = 0;
    CHECK_EQ_INT(store_lease_release(o.st, l.id, fx.worker, (const char(*)[ID_MAX])ids, 2, now, &n_rel), 0);
    CHECK_EQ_INT(sdb_exec(e, "ROLLBACK"), SDB_OK);
    sdb_close(e);
    CHECK_EQ_INT((int)n_rel, 2);

    /* the sweep of the lapsed lease (one request of each batch left, both dead-lettered) */
    struct lock_op w = {.st = o.st, .what = 1, .policy = one, .now = l.expires_at + 1};
    lock_probe(fx.dir, lo, &w, rows, 3, locked);
    CHECK_EQ_INT(locked[0], 1);
    CHECK_EQ_INT(locked[2], 0);
    CHECK_EQ_INT((int)w.rep.n_leases, 1);
    CHECK_EQ_INT((int)w.rep.n_dead, 2);
    store_close(o.st);

    struct store_batch bt;
    get_batch(&fx, lo, &bt);
    CHECK_EQ_INT(bt.n_completed, 1);
    CHECK_EQ_INT(bt.n_failed, 1);
    get_batch(&fx, hi, &bt);
    CHECK_EQ_INT(bt.n_completed, 0);
    CHECK_EQ_INT(bt.n_failed, 2);
    store_lease_clear(&l);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}

/* An acquire that read (and, on PostgreSQL, locked) ready requests it did
 * not claim - here the pack's token budget stops it after the first - wakes
 * the listeners with its commit: acquires elsewhere skipped those rows
 * while it ran, and their long polls would otherwise wait for the fallback
 * re-read. One that claims every row it read sends nothing. */
TEST(lease_acquire_leaving_ready_rows_wakes_listeners)
{
    if (!th_pg_on())
        th_skip("PostgreSQL only (LISTEN/NOTIFY)");
    struct fx fx;
    fx_open(&fx);
    struct store *ls = NULL;
    CHECK_EQ_INT(th_store_open(fx.dir, NULL, &ls), 0);
    CHECK_EQ_INT(store_work_listen(ls), 0);
    char bid[ID_MAX];
    fx_batch(&fx, &fx.ta, "n", 5, NULL, 86400, bid);
    int woke = 0;
    CHECK_EQ_INT(store_work_wait(ls, 10000, &woke), 0);
    CHECK_EQ_INT(woke, 1); /* the batch became leasable */
    int64_t now = NOW + 10;
    struct store_lease_ask a = ask_of(&fx, 5);
    struct store_lease l;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 5); /* read 5, claimed 5 */
    store_lease_clear(&l);
    CHECK_EQ_INT(store_work_wait(ls, 200, &woke), 0);
    CHECK_EQ_INT(woke, 0);

    fx_batch(&fx, &fx.ta, "o", 5, NULL, 86400, bid);
    CHECK_EQ_INT(store_work_wait(ls, 10000, &woke), 0);
    CHECK_EQ_INT(woke, 1);
    a.max_tokens = 1; /* the first request only (it is taken even if it alone exceeds the cap) */
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 1);
    store_lease_clear(&l);
    CHECK_EQ_INT(store_work_wait(ls, 10000, &woke), 0);
    CHECK_EQ_INT(woke, 1);
    /* the rows it left are leasable */
    a.max_tokens = 0;
    CHECK_EQ_INT(lease_acquire(fx.st, NULL, &a, now, &l), 0);
    CHECK_EQ_INT((int)l.n, 4);
    store_lease_clear(&l);
    store_close(ls);
    check_pg_lease_state(&fx);
    store_close(fx.st);
}
