/* Tests for jobd/webhook/webhook.c (signature, schedule, SSRF address rules) and the
 * outbox in jobd/store/store_webhook.c (event written atomically with the batch
 * transition, also across a crash). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crypto.h"
#include "common/err.h"
#include "jobd/store/store.h"
#include "jobd/store/store_webhook.h"
#include "jobd/webhook/webhook.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000

/* The worked example of spec/webhooks.md; the signature was computed with
 * Python's hmac/base64 (and is checked against the standardwebhooks library
 * by tests/py/test_webhooks.py), not by this code. */
TEST(webhook_sign_matches_spec_example)
{
    const char *secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const char *body = "{\"id\":\"evt_01j9z8k3m5n7p9q1r3s5t7v9wx\",\"object\":\"event\",\"type\":"
                       "\"batch.completed\",\"created_at\":1719168000,\"data\":{\"id\":"
                       "\"batch_01j9z8k2a4c6e8g0j2m4p6r8tv\"}}";
    char sig[WEBHOOK_SIG_MAX];
    CHECK_EQ_INT(webhook_sign(secret, "evt_01j9z8k3m5n7p9q1r3s5t7v9wx", 1719168000, body, strlen(body), sig), 0);
    CHECK_EQ_STR(sig, "v1,XAhghRSGhbvGCxtz1iVQOn8My7CkqQQKJxE3HEqsO3w=");
    /* a different timestamp or body changes it */
    char sig2[WEBHOOK_SIG_MAX];
    CHECK_EQ_INT(webhook_sign(secret, "evt_01j9z8k3m5n7p9q1r3s5t7v9wx", 1719168001, body, strlen(body), sig2), 0);
    CHECK(strcmp(sig, sig2) != 0);
    CHECK_EQ_INT(webhook_sign("whsec_not*base64", "evt_x", 1, "{}", 2, sig2), ERR_PARSE);
}

TEST(webhook_secret_new_is_whsec_32_random_bytes)
{
    char a[STORE_WH_SECRET_MAX], b[STORE_WH_SECRET_MAX];
    CHECK_EQ_INT(webhook_secret_new(a), 0);
    CHECK_EQ_INT(webhook_secret_new(b), 0);
    CHECK(strncmp(a, "whsec_", 6) == 0 && strlen(a) == 6 + 44);
    CHECK(strcmp(a, b) != 0);
    uint8_t key[64];
    size_t n = 0;
    CHECK_EQ_INT(webhook_secret_key(a, key, sizeof key, &n), 0);
    CHECK_EQ_INT((int)n, 32);
}

static int v4(const char *s)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    CHECK_EQ_INT(inet_pton(AF_INET, s, &a.sin_addr), 1);
    return webhook_addr_forbidden((struct sockaddr *)&a);
}

static int v6(const char *s)
{
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    CHECK_EQ_INT(inet_pton(AF_INET6, s, &a.sin6_addr), 1);
    return webhook_addr_forbidden((struct sockaddr *)&a);
}

TEST(webhook_ssrf_address_rules)
{
    const char *bad4[] = {"127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1",
                          "172.31.255.255", "192.168.1.1", "169.254.169.254", "169.254.0.1", "0.0.0.0",
                          "100.64.0.1", "100.127.255.255", "224.0.0.1", "255.255.255.255", "240.0.0.1",
                          "198.18.0.1", "192.0.0.8", "192.0.2.1", NULL};
    const char *ok4[] = {"8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.1", "100.63.255.255",
                         "100.128.0.1", "169.253.0.1", "11.0.0.1", "192.169.0.1", "93.184.216.34", NULL};
    for (const char **p = bad4; *p; p++)
        if (!v4(*p))
            th_fail(__FILE__, __LINE__, "address rule", "%s should be refused", *p);
    for (const char **p = ok4; *p; p++)
        if (v4(*p))
            th_fail(__FILE__, __LINE__, "address rule", "%s should be allowed", *p);
    const char *bad6[] = {"::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254", "ff02::1", "::ffff:127.0.0.1",
                          "::ffff:10.1.2.3", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "2002:7f00:1::1",
                          "2001:db8::1", "::127.0.0.1", NULL};
    const char *ok6[] = {"2606:4700:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808",
                         NULL};
    for (const char **p = bad6; *p; p++)
        if (!v6(*p))
            th_fail(__FILE__, __LINE__, "address rule", "%s should be refused", *p);
    for (const char **p = ok6; *p; p++)
        if (v6(*p))
            th_fail(__FILE__, __LINE__, "address rule", "%s should be allowed", *p);
}

TEST(webhook_url_check_syntax_and_resolution)
{
    char msg[300];
    CHECK_EQ_INT(webhook_url_check("https://example.com/hook", 0, 0, msg, sizeof msg), 0);
    CHECK_EQ_INT(webhook_url_check("http://example.com:8080/a?b=c", 0, 0, msg, sizeof msg), 0);
    CHECK_EQ_INT(webhook_url_check("ftp://example.com/x", 0, 0, msg, sizeof msg), ERR_INVAL);
    CHECK_EQ_INT(webhook_url_check("example.com/x", 0, 0, msg, sizeof msg), ERR_INVAL);
    CHECK_EQ_INT(webhook_url_check("http://u:p@example.com/x", 0, 0, msg, sizeof msg), ERR_INVAL);
    CHECK_EQ_INT(webhook_url_check("http://exa mple.com/", 0, 0, msg, sizeof msg), ERR_INVAL);
    CHECK_EQ_INT(webhook_url_check("", 0, 0, msg, sizeof msg), ERR_INVAL);
    /* resolution: literal and named loopback refused, allowed with the flag */
    CHECK_EQ_INT(webhook_url_check("http://127.0.0.1:9/x", 0, 1, msg, sizeof msg), ERR_UNSUPPORTED);
    CHECK_EQ_INT(webhook_url_check("http://localhost:9/x", 0, 1, msg, sizeof msg), ERR_UNSUPPORTED);
    CHECK_EQ_INT(webhook_url_check("http://[::1]:9/x", 0, 1, msg, sizeof msg), ERR_UNSUPPORTED);
    CHECK_EQ_INT(webhook_url_check("http://169.254.169.254/x", 0, 1, msg, sizeof msg), ERR_UNSUPPORTED);
    CHECK_EQ_INT(webhook_url_check("http://2130706433/x", 0, 1, msg, sizeof msg), ERR_UNSUPPORTED);
    CHECK_EQ_INT(webhook_url_check("http://127.0.0.1:9/x", 1, 1, msg, sizeof msg), 0);
}

TEST(webhook_backoff_schedule_spans_about_a_day)
{
    struct webhook_config c = WEBHOOK_CONFIG_DEFAULT;
    int64_t lo = 0, hi = 0, prev = 0;
    for (int64_t a = 1; a < c.max_attempts; a++) {
        int64_t d0 = webhook_backoff_ms(&c, a, 0), d1 = webhook_backoff_ms(&c, a, UINT32_MAX);
        int64_t dm = webhook_backoff_ms(&c, a, 12345);
        CHECK(d0 <= dm && dm <= d1);
        CHECK(d0 >= prev * 8 / 10 || d0 >= c.retry_cap_ms * 8 / 10); /* grows until the cap */
        CHECK(d1 <= c.retry_cap_ms * 12 / 10);
        lo += d0;
        hi += d1;
        prev = d0;
    }
    CHECK_EQ_INT((int)webhook_backoff_ms(&c, 1, 0) / 1000, 4); /* 5 s - 20 % */
    /* about a day: 20..30 hours between the first attempt and the last */
    CHECK(lo >= 18LL * 3600 * 1000 && hi <= 30LL * 3600 * 1000);
    c.retry_base_ms = 0;
    CHECK_EQ_INT((int)webhook_backoff_ms(&c, 3, 999), 0);
}

/* ---- outbox ------------------------------------------------------------------ */

static int count_events(const char *dir, const char *batch_id, char *type_out, size_t cap)
{
    struct sdb *db = th_db_open(dir);
    struct sdb_stmt *s = NULL;
    CHECK_EQ_INT(sdb_prepare(db, "SELECT type, payload FROM webhook_events WHERE object_id = ?1", &s),
                 SDB_OK);
    sdb_bind_text(s, 1, batch_id, -1);
    int n = 0;
    while (sdb_step(s) == SDB_ROW) {
        n++;
        if (type_out)
            snprintf(type_out, cap, "%s", (const char *)sdb_column_text(s, 0));
        const char *payload = (const char *)sdb_column_text(s, 1);
        CHECK(strstr(payload, batch_id) != NULL && strstr(payload, "\"object\":\"event\"") != NULL);
    }
    sdb_finalize(s);
    sdb_close(db);
    return n;
}

static void new_batch(struct store *st, char tenant_out[ID_MAX], char batch_out[ID_MAX])
{
    static int k;
    char name[32];
    snprintf(name, sizeof name, "t%d", k++);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, name, NOW, &t), 0);
    struct store_file f;
    memset(&f, 0, sizeof f);
    snprintf(f.tenant_id, sizeof f.tenant_id, "%s", t.id);
    snprintf(f.purpose, sizeof f.purpose, "batch");
    snprintf(f.filename, sizeof f.filename, "in.jsonl");
    snprintf(f.storage_path, sizeof f.storage_path, "files/%s", name);
    snprintf(f.sha256, sizeof f.sha256, "%064d", 0);
    f.created_at = NOW;
    CHECK_EQ_INT(store_file_create(st, &f), 0);
    struct store_batch_new nb = {"/v1/chat/completions", f.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    snprintf(batch_out, ID_MAX, "%s", b.id);
    snprintf(tenant_out, ID_MAX, "%s", t.id);
    store_batch_release(&b);
}

TEST(outbox_event_commits_and_rolls_back_with_the_transition)
{
    const char *dir = th_tmpdir();
    struct store *st = NULL;
    CHECK_EQ_INT(th_store_open(dir, NULL, &st), 0);
    char t[ID_MAX], b[ID_MAX], type[64] = "";
    new_batch(st, t, b);
    /* non-terminal states write nothing */
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_VALIDATING, STORE_BATCH_IN_PROGRESS, NOW), 0);
    CHECK_EQ_INT(count_events(dir, b, NULL, 0), 0);
    /* inside a caller's transaction that rolls back: neither state nor event */
    CHECK_EQ_INT(store_tx_begin(st), 0);
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_IN_PROGRESS, STORE_BATCH_CANCELLING, NOW), 0);
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_CANCELLING, STORE_BATCH_CANCELLED, NOW), 0);
    store_tx_rollback(st);
    struct store_batch got;
    CHECK_EQ_INT(store_batch_get(st, NULL, b, &got), 0);
    CHECK_EQ_INT(got.status, STORE_BATCH_IN_PROGRESS);
    store_batch_release(&got);
    CHECK_EQ_INT(count_events(dir, b, NULL, 0), 0);
    /* a refused transition writes no event */
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_FINALIZING, STORE_BATCH_COMPLETED, NOW), ERR_BADSTATE);
    CHECK_EQ_INT(count_events(dir, b, NULL, 0), 0);
    /* committed: exactly one event of the right type */
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, NOW), 0);
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_FINALIZING, STORE_BATCH_COMPLETED, NOW + 5), 0);
    CHECK_EQ_INT(count_events(dir, b, type, sizeof type), 1);
    CHECK_EQ_STR(type, "batch.completed");
    /* the ingest failure path: one batch.failed */
    char t2[ID_MAX], b2[ID_MAX];
    new_batch(st, t2, b2);
    CHECK_EQ_INT(store_ingest_fail(st, b2, "[]", NOW), 0);
    CHECK_EQ_INT(count_events(dir, b2, type, sizeof type), 1);
    CHECK_EQ_STR(type, "batch.failed");
    struct store_wh_stats ws;
    CHECK_EQ_INT(store_wh_stats(st, &ws), 0);
    CHECK_EQ_INT((int)ws.events_pending, 2);
    /* fan-out without endpoints marks them done and creates no delivery */
    char sec[STORE_WH_SECRET_MAX];
    CHECK_EQ_INT(webhook_secret_new(sec), 0);
    int n = -1;
    CHECK_EQ_INT(store_wh_fanout(st, NOW, 100, sec, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(store_wh_stats(st, &ws), 0);
    CHECK_EQ_INT((int)ws.events_pending, 0);
    CHECK_EQ_INT((int)ws.deliveries_pending, 0);
    store_close(st);
}

/* A process that dies before its commit leaves neither the state nor the
 * event; one that dies right after leaves both. */
TEST(outbox_crash_neither_loses_nor_invents_events)
{
    const char *dir = th_tmpdir();
    struct store *st = NULL;
    CHECK_EQ_INT(th_store_open(dir, NULL, &st), 0);
    char t[ID_MAX], b[ID_MAX];
    new_batch(st, t, b);
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_VALIDATING, STORE_BATCH_IN_PROGRESS, NOW), 0);
    CHECK_EQ_INT(store_batch_transition(st, b, STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, NOW), 0);
    store_close(st);
    for (int commit = 0; commit <= 1; commit++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct store *cs = NULL;
            if (th_store_open(dir, NULL, &cs) || store_tx_begin(cs) ||
                store_batch_transition(cs, b, STORE_BATCH_FINALIZING, STORE_BATCH_COMPLETED, NOW))
                _exit(3);
            if (commit && store_tx_commit(cs))
                _exit(4);
            _exit(0); /* no close, no rollback: a crash */
        }
        int ws = 0;
        CHECK(waitpid(pid, &ws, 0) == pid);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        CHECK_EQ_INT(th_store_open(dir, NULL, &st), 0);
        struct store_batch got;
        CHECK_EQ_INT(store_batch_get(st, NULL, b, &got), 0);
        CHECK_EQ_INT(got.status, commit ? STORE_BATCH_COMPLETED : STORE_BATCH_FINALIZING);
        store_batch_release(&got);
        store_close(st);
        CHECK_EQ_INT(count_events(dir, b, NULL, 0), commit);
    }
}
