/* Unit tests: the worker protocol client's results outbox (worker/client.h)
 * against a scripted loopback server - results stay until jobd answers for
 * them (transport failure, 5xx), leave on per-line statuses, 404 and 409,
 * are resent line by line after a 400; and the model id derivation of
 * worker/serve.h. The end-to-end behaviour against the real jobd is in
 * tests/py/test_jobworker.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "worker/client.h"
#include "worker/serve.h"
#include "worker/engine/model.h"
#include "tests/th.h"
#include "tests/th_http.h"

static struct wcl *client_for(int port)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct wcl_opts o = {url, "tok-1", 5000, 0};
    struct wcl *c = NULL;
    if (wcl_new(&o, &c))
        return NULL;
    return c;
}

struct acks {
    int n;
    char rid[8][64];
    char status[8][32];
};

static void on_ack(void *ctx, const char *lease_id, const char *request_id, const char *status)
{
    struct acks *a = ctx;
    (void)lease_id;
    if (a->n < 8) {
        snprintf(a->rid[a->n], sizeof a->rid[0], "%s", request_id);
        snprintf(a->status[a->n], sizeof a->status[0], "%s", status);
    }
    a->n++;
}

static const char *ack_of(const struct acks *a, const char *rid)
{
    for (int i = 0; i < a->n && i < 8; i++)
        if (strcmp(a->rid[i], rid) == 0)
            return a->status[i];
    return "";
}

static void add3(struct wcl_outbox *ob)
{
    static const char l1[] = "{\"request_id\":\"req_1\",\"status\":\"success\"}";
    static const char l2[] = "{\"request_id\":\"req_2\",\"status\":\"success\"}";
    static const char l3[] = "{\"request_id\":\"req_3\",\"status\":\"success\"}";
    wcl_outbox_add(ob, "lease_A", "req_1", l1, strlen(l1));
    wcl_outbox_add(ob, "lease_B", "req_2", l2, strlen(l2));
    wcl_outbox_add(ob, "lease_A", "req_3", l3, strlen(l3));
}

TEST(wcl_outbox_keeps_results_until_answered)
{
    static const struct th_http_step steps[] = {
        {503, TH_HTTP_JSON, "{\"error\":{\"code\":\"busy\"}}", 0, 0},
        {0, NULL, "", 0, 0},   /* connection dropped without an answer */
        {200, TH_HTTP_JSON, "{\"lease_id\":\"lease_A\",\"results\":[{\"request_id\":\"req_1\",\"status\":\"ok\"},"
              "{\"request_id\":\"req_3\",\"status\":\"duplicate\"}]}", 0, 0},
        {409, TH_HTTP_JSON, "{\"lease_id\":\"lease_B\",\"results\":[{\"request_id\":\"req_2\",\"status\":\"stale\"}],"
              "\"error\":{\"code\":\"stale_lease\"}}", 0, 0},
    };
    struct th_http s;
    th_http_start(&s, steps, 4);
    struct wcl *c = client_for(s.port);
    CHECK(c != NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), ERR_HTTP);  /* 503 */
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a) != 0);               /* no answer */
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), 0);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    CHECK_EQ_INT(a.n, 3);
    CHECK_EQ_STR(ack_of(&a, "req_1"), "ok");
    CHECK_EQ_STR(ack_of(&a, "req_3"), "duplicate");
    CHECK_EQ_STR(ack_of(&a, "req_2"), "stale");
    /* the chunks: one per lease, zstd, with the worker's headers and token */
    CHECK(strstr(s.head[2], "POST /v1/worker/results ") != NULL);
    CHECK(strcasestr(s.head[2], "X-Lease-Id: lease_A") != NULL);
    CHECK(strcasestr(s.head[2], "X-Worker-Id: wrk_1") != NULL);
    CHECK(strcasestr(s.head[2], "Content-Encoding: zstd") != NULL);
    CHECK(strcasestr(s.head[2], "Authorization: Bearer tok-1") != NULL);
    CHECK(strcasestr(s.head[3], "X-Lease-Id: lease_B") != NULL);
    wcl_outbox_free(ob);
    wcl_free(c);
    th_http_stop(&s);
}

TEST(wcl_outbox_unreachable_keeps_everything)
{
    struct wcl *c = client_for(1);
    CHECK(c != NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), ERR_CONN);
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(wcl_outbox_drop_lease(ob, "lease_A"), 2);
    CHECK_EQ_INT(wcl_outbox_count(ob), 1);
    wcl_outbox_free(ob);
    wcl_free(c);
}

TEST(wcl_outbox_gone_lease_and_line_by_line_resend)
{
    static const struct th_http_step steps[] = {
        {400, TH_HTTP_JSON, "{\"error\":{\"code\":\"invalid_results\",\"line\":2}}", 0, 0},   /* chunk A refused */
        {200, TH_HTTP_JSON, "{\"results\":[{\"request_id\":\"req_1\",\"status\":\"ok\"}]}", 0, 0},
        {400, TH_HTTP_JSON, "{\"error\":{\"code\":\"invalid_results\",\"line\":1}}", 0, 0},   /* req_3 alone */
        {200, TH_HTTP_JSON, "{\"results\":[{\"request_id\":\"req_3\",\"status\":\"retry\"}]}", 0, 0}, /* as transient */
        {404, TH_HTTP_JSON, "{\"error\":{\"code\":\"not_found\"}}", 0, 0},                     /* lease B gone */
    };
    struct th_http s;
    th_http_start(&s, steps, 5);
    struct wcl *c = client_for(s.port);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), 0);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    CHECK_EQ_INT(a.n, 3);
    CHECK_EQ_STR(ack_of(&a, "req_1"), "ok");
    CHECK_EQ_STR(ack_of(&a, "req_3"), "retry");
    CHECK_EQ_STR(ack_of(&a, "req_2"), "gone");
    CHECK_EQ_INT(s.served, 5);
    wcl_outbox_free(ob);
    wcl_free(c);
    th_http_stop(&s);
}

TEST(wcl_rejects_bad_input)
{
    struct wcl *c = NULL;
    struct wcl_opts o = {"ftp://x", NULL, 0, 0};
    CHECK_EQ_INT(wcl_new(&o, &c), ERR_INVAL);
    o.base_url = NULL;
    CHECK_EQ_INT(wcl_new(&o, &c), ERR_INVAL);
    CHECK(c == NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    CHECK_EQ_INT(wcl_outbox_add(ob, "lease_A", "req_1", "{}\n{}", 5), ERR_INVAL);
    CHECK_EQ_INT(wcl_outbox_add(ob, "", "req_1", "{}", 2), ERR_INVAL);
    char long_id[200];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    CHECK_EQ_INT(wcl_outbox_add(ob, long_id, "req_1", "{}", 2), ERR_INVAL);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    wcl_outbox_free(ob);
}

TEST(serve_model_id_from_name_or_file)
{
    char id[160];
    CHECK_EQ_INT(serve_model_id(NULL, "/models/My-Model.Q4_1.gguf", id, sizeof id), 0);
    CHECK_EQ_STR(id, "My-Model.Q4_1");
    CHECK_EQ_INT(serve_model_id(NULL, "plain", id, sizeof id), 0);
    CHECK_EQ_STR(id, "plain");
    CHECK_EQ_INT(serve_model_id(NULL, "/x/.gguf", id, sizeof id), 0);
    CHECK_EQ_STR(id, ".gguf");
    CHECK_EQ_INT(serve_model_id(NULL, "/x/abc.gguf", id, 3), ERR_TOOBIG);
    struct model *m = NULL;
    char err[256];
    CHECK_EQ_INT(model_load("tests/fixtures/model/llama_tied.q8_0.gguf", &m, err, sizeof err), 0);
    struct gguf_str gs;
    int has_name = gguf_get_str(m->gguf, "general.name", &gs) == 0;
    CHECK_EQ_INT(serve_model_id(m, "tests/fixtures/model/llama_tied.q8_0.gguf", id, sizeof id), 0);
    if (has_name)
        CHECK(strlen(id) == gs.len && memcmp(id, gs.ptr, gs.len) == 0);
    else
        CHECK_EQ_STR(id, "llama_tied.q8_0");
    model_free(m);
}
