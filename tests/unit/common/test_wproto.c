/* Unit tests: the worker-protocol messages (common/wproto.h): each message
 * written by one side reads back on the other, and the strict readers name
 * the field they refuse. */
#include <jansson.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/wproto.h"
#include "tests/th.h"

static json_t *load(const char *s, size_t n)
{
    return json_loadb(s, n, 0, NULL);
}

TEST(wproto_endpoint_urls_round_trip_and_unknown_is_none)
{
    for (size_t k = 0; k < WPROTO_N_ENDPOINTS; k++)
        CHECK(wproto_endpoint_of(wproto_endpoint_url(wproto_endpoints[k])) == wproto_endpoints[k]);
    CHECK_EQ_STR(wproto_endpoint_url(WPROTO_EP_EMBEDDINGS), "/v1/embeddings");
    CHECK(wproto_endpoint_url(WPROTO_EP_NONE) == NULL);
    CHECK(wproto_endpoint_of("/v1/responses") == WPROTO_EP_RESPONSES);
    CHECK(wproto_endpoint_of("/v1/moderations") == WPROTO_EP_NONE);
    CHECK(wproto_endpoint_of(NULL) == WPROTO_EP_NONE);
}

TEST(wproto_lease_answer_written_by_jobd_reads_back_on_the_worker)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    struct wproto_lease_item a = {"req_1", "c1", "/v1/completions", 1, "{\"prompt\":\"x\"}", 14};
    struct wproto_lease_item e = {"req_2", NULL, "/v1/embeddings", 2, "{\"input\":\"y\"}", 13};
    struct wproto_lease_item old = {"req_3", NULL, NULL, 1, "{\"prompt\":\"z\"}", 14};
    CHECK_EQ_INT(wproto_lease_write_begin(&b, "lease_A", 1700000000), 0);
    CHECK_EQ_INT(wproto_lease_write_item(&b, 0, &a), 0);
    CHECK_EQ_INT(wproto_lease_write_item(&b, 1, &e), 0);
    CHECK_EQ_INT(wproto_lease_write_item(&b, 2, &old), 0);
    CHECK_EQ_INT(wproto_lease_write_end(&b), 0);
    CHECK(strstr(b.data, "{\"request_id\":\"req_1\",\"custom_id\":\"c1\",\"url\":\"/v1/completions\","
                         "\"attempt\":1,\"body\":{\"prompt\":\"x\"}}") != NULL);
    json_t *j = load(b.data, b.len);
    CHECK(j != NULL);
    struct wproto_lease l;
    CHECK_EQ_INT(wproto_lease_parse(j, &l), 0);
    CHECK_EQ_STR(l.lease_id, "lease_A");
    CHECK_EQ_INT(l.n, 3);
    CHECK_EQ_STR(l.reqs[1].request_id, "req_2");
    CHECK(l.reqs[0].ep == WPROTO_EP_COMPLETIONS);
    CHECK(l.reqs[1].ep == WPROTO_EP_EMBEDDINGS);
    CHECK(l.reqs[2].ep == WPROTO_EP_COMPLETIONS); /* no url: a prompt body */
    wproto_lease_release(&l);
    json_decref(j);
    buf_release(&b);
}

TEST(wproto_empty_lease_answer_carries_retry_after_and_malformed_items_are_skipped)
{
    struct buf b;
    buf_init(&b, 4096);
    CHECK_EQ_INT(wproto_lease_write_empty(&b, 1000), 0);
    CHECK_EQ_STR(b.data, "{\"lease_id\":null,\"requests\":[],\"retry_after_ms\":1000}");
    json_t *j = load(b.data, b.len);
    struct wproto_lease l;
    CHECK_EQ_INT(wproto_lease_parse(j, &l), 0);
    CHECK(l.lease_id == NULL);
    CHECK_EQ_INT(l.retry_after_ms, 1000);
    wproto_lease_release(&l);
    json_decref(j);
    buf_release(&b);
    static const char bad[] = "{\"lease_id\":\"lease_B\",\"requests\":[{\"request_id\":\"req_1\"},7,"
                              "{\"request_id\":\"req_2\",\"url\":\"/v1/x\",\"body\":{}}]}";
    j = load(bad, sizeof bad - 1);
    CHECK_EQ_INT(wproto_lease_parse(j, &l), 0);
    CHECK_EQ_INT(l.n, 1);
    CHECK_EQ_INT(l.n_skipped, 2);
    CHECK(l.reqs[0].ep == WPROTO_EP_NONE);
    wproto_lease_release(&l);
    json_decref(j);
    static const char noarr[] = "{\"lease_id\":\"lease_B\",\"requests\":{}}";
    j = load(noarr, sizeof noarr - 1);
    CHECK_EQ_INT(wproto_lease_parse(j, &l), ERR_PARSE);
    json_decref(j);
}

TEST(wproto_heartbeat_written_by_the_worker_parses_strictly_on_jobd)
{
    json_t *h = wproto_heartbeat_json("wrk_0123456789abcdefghjkmnpqrs", "lease_0123456789abcdefghjkmnpqrs",
                                      60, 5, -1);
    CHECK(h != NULL);
    char *t = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    struct wproto_heartbeat m;
    char err[200];
    CHECK_EQ_INT(wproto_heartbeat_parse(t, strlen(t), 120, &m, err, sizeof err), 0);
    CHECK_EQ_INT(m.extend_s, 60);
    CHECK_EQ_INT(m.completed, 5);
    CHECK(m.tokens_per_s == 0); /* negative is sent as 0 */
    wproto_heartbeat_release(&m);
    free(t);
    static const char bad[] = "{\"worker_id\":\"wrk_x\",\"lease_id\":\"lease_x\"}";
    CHECK_EQ_INT(wproto_heartbeat_parse(bad, sizeof bad - 1, 120, &m, err, sizeof err), ERR_INVAL);
    CHECK(strstr(err, "'worker_id'") != NULL);
    CHECK_EQ_INT(wproto_heartbeat_parse("[1]", 3, 120, &m, err, sizeof err), ERR_PARSE);
}

TEST(wproto_heartbeat_answer_lists_the_cancelled_ids)
{
    struct buf b;
    buf_init(&b, 4096);
    char ids[2][ID_MAX] = {"req_1", "req_2"};
    CHECK_EQ_INT(wproto_hb_answer_write(&b, "lease_A", 42, (const char (*)[ID_MAX])ids, 2), 0);
    CHECK_EQ_STR(b.data, "{\"lease_id\":\"lease_A\",\"expires_at\":42,\"cancelled\":[\"req_1\",\"req_2\"]}");
    json_t *j = load(b.data, b.len);
    json_t *c = wproto_hb_answer_cancelled(j);
    CHECK_EQ_INT(json_array_size(c), 2);
    CHECK_EQ_STR(json_string_value(json_array_get(c, 1)), "req_2");
    CHECK(wproto_hb_answer_cancelled(NULL) == NULL);
    json_decref(j);
    buf_release(&b);
}

TEST(wproto_results_lines_written_by_the_worker_read_back_on_jobd)
{
    json_t *body = json_pack("{s:s}", "id", "x");
    struct wproto_result w;
    memset(&w, 0, sizeof w);
    w.request_id = "req_0123456789abcdefghjkmnpqrs";
    w.kind = WPROTO_RESULT_SUCCESS;
    w.status_code = 200;
    w.body = body;
    w.prompt_tokens = 7;
    w.cached_tokens = 3;
    w.decode_ms = 12;
    json_t *line = wproto_result_json(&w);
    char *t = json_dumps(line, JSON_COMPACT);
    struct wproto_result r;
    char err[200];
    CHECK_EQ_INT(wproto_result_parse(t, strlen(t), &r, err, sizeof err), 0);
    CHECK(r.kind == WPROTO_RESULT_SUCCESS);
    CHECK_EQ_INT(r.prompt_tokens, 7);
    CHECK_EQ_INT(r.cached_tokens, 3);
    CHECK_EQ_INT(r.decode_ms, 12);
    CHECK(json_equal(r.body, body));
    wproto_result_release(&r);
    free(t);
    json_decref(line);
    /* an error: the message is cut to its cap on a character boundary */
    char msg[WPROTO_MESSAGE_MAX + 8];
    memset(msg, 'a', sizeof msg);
    memcpy(msg + WPROTO_MESSAGE_MAX - 1, "\xc3\xa9", 2); /* é across the cap */
    msg[sizeof msg - 1] = '\0';
    memset(&w, 0, sizeof w);
    w.request_id = "req_0123456789abcdefghjkmnpqrs";
    w.kind = WPROTO_RESULT_INVALID;
    w.status_code = 422;
    w.message = msg;
    w.code = "bad";
    w.param = "";
    line = wproto_result_json(&w);
    t = json_dumps(line, JSON_COMPACT);
    CHECK_EQ_INT(wproto_result_parse(t, strlen(t), &r, err, sizeof err), 0);
    CHECK(r.kind == WPROTO_RESULT_INVALID);
    CHECK_EQ_INT(r.status_code, 422);
    CHECK_EQ_INT(strlen(r.message), WPROTO_MESSAGE_MAX - 1);
    CHECK_EQ_STR(r.code, "bad");
    CHECK(r.param == NULL);
    wproto_result_release(&r);
    free(t);
    json_decref(line);
    json_decref(body);
}

TEST(wproto_results_line_refusals_name_the_field)
{
    struct wproto_result r;
    char err[200];
    static const char *const bad[][2] = {
        {"[]", "a results line must be a JSON object"},
        {"{\"request_id\":\"x\",\"status\":\"success\"}", "'request_id' must be a req_... id"},
        {"{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"ok\"}", "'status' must be"},
        {"{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"success\","
         "\"usage\":{\"prompt_tokens\":1,\"cached_tokens\":2},\"response\":{\"body\":{}}}",
         "'usage.cached_tokens' exceeds"},
        {"{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"success\",\"response\":{\"body\":{},"
         "\"status_code\":404}}", "'response.status_code' of a success must be 2xx"},
        {"{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"error\",\"error\":{\"class\":"
         "\"invalid_request\",\"message\":\"m\",\"status_code\":500}}", "must be 4xx"},
        {"{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"error\",\"error\":{\"class\":"
         "\"fatal\",\"message\":\"m\"}}", "'error.class' must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(wproto_result_parse(bad[i][0], strlen(bad[i][0]), &r, err, sizeof err), ERR_PARSE);
        CHECK(strstr(err, bad[i][1]) != NULL);
    }
    static const char tr[] = "{\"request_id\":\"req_0123456789abcdefghjkmnpqrs\",\"status\":\"error\","
                             "\"error\":{\"class\":\"transient\",\"code\":\"oom\",\"message\":\"m\"}}";
    CHECK_EQ_INT(wproto_result_parse(tr, sizeof tr - 1, &r, err, sizeof err), 0);
    CHECK(r.kind == WPROTO_RESULT_TRANSIENT);
    wproto_result_release(&r);
}
