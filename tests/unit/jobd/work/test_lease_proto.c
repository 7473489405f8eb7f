/* Tests for the worker protocol layer (jobd/work/lease_proto.c): every example
 * in spec/worker-protocol.md is extracted and run through the parsers
 * (valid ones must parse, the "bad-*" ones must fail with the documented
 * status and code), the results example is committed through a real store,
 * and the answers are valid JSON of the documented shape. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/zst.h"
#include "jobd/work/lease.h"
#include "tests/th.h"

struct block {
    char info[128];
    struct buf text;
};

/* The fenced ```json / ```jsonl blocks of the spec. */
static int spec_blocks(struct block *out, int max)
{
    FILE *f = fopen("spec/worker-protocol.md", "r");
    CHECK(f != NULL);
    char line[8192];
    int n = 0, in = 0;
    while (fgets(line, sizeof line, f)) {
        if (!in && (strncmp(line, "```json ", 8) == 0 || strncmp(line, "```jsonl ", 9) == 0)) {
            CHECK(n < max);
            memset(&out[n], 0, sizeof out[n]);
            snprintf(out[n].info, sizeof out[n].info, "%.120s", line + 3);
            out[n].info[strcspn(out[n].info, "\n")] = '\0';
            buf_init(&out[n].text, 1 << 20);
            in = 1;
        } else if (in && strncmp(line, "```", 3) == 0) {
            in = 0;
            n++;
        } else if (in) {
            CHECK_EQ_INT(buf_append_str(&out[n].text, line), 0);
        }
    }
    fclose(f);
    CHECK(!in);
    return n;
}

/* "json bad-ask 400 invalid_request" -> kind "bad-ask", status, code */
static void split_info(const char *info, char *kind, int *status, char *code)
{
    *status = 0;
    code[0] = '\0';
    char lang[16];
    int k = sscanf(info, "%15s %63s %d %39s", lang, kind, status, code);
    CHECK(k == 2 || k == 4);
}

TEST(lease_proto_spec_examples_parse_as_documented)
{
    struct block bl[32];
    int n = spec_blocks(bl, 32);
    int seen_ok = 0, seen_bad = 0;
    for (int i = 0; i < n; i++) {
        char kind[64], code[40];
        int status;
        split_info(bl[i].info, kind, &status, code);
        const char *t = bl[i].text.data;
        size_t len = bl[i].text.len;
        struct problem e;
        memset(&e, 0, sizeof e);
        int rc = -1;
        const char *k = strncmp(kind, "bad-", 4) == 0 ? kind + 4 : kind;
        if (strcmp(k, "register") == 0) {
            struct lease_register r;
            rc = lease_parse_register(t, len, &r, &e);
            if (!rc) {
                CHECK_EQ_STR(r.w.name, "gpu-node-1/0");
                CHECK_EQ_INT(r.w.n_models, 2);
                CHECK_EQ_STR(r.w.models[1].name, "smollm");
                CHECK_EQ_STR(r.w.models[1].canonical, "SmolLM2-135M-Instruct");
                CHECK_EQ_INT(r.w.kv_tokens, 262144);
                lease_register_release(&r);
            }
        } else if (strcmp(k, "ask") == 0) {
            struct lease_ask_msg m;
            rc = lease_parse_ask(NULL, t, len, &m, &e);
            if (!rc) {
                CHECK_EQ_INT(m.ask.max_requests, 256);
                CHECK_EQ_INT(m.ask.max_tokens, 200000);
                CHECK_EQ_INT(m.ask.lease_s, 120);
                CHECK_EQ_INT(m.wait_ms, 2000);
                lease_ask_release(&m);
            }
        } else if (strcmp(k, "heartbeat") == 0) {
            struct lease_heartbeat_msg m;
            rc = lease_parse_heartbeat(NULL, t, len, &m, &e);
            if (!rc) {
                CHECK_EQ_INT(m.extend_s, 120);
                CHECK_NEAR(m.tokens_per_s, 1834.5, 1e-9);
                lease_heartbeat_release(&m);
            }
        } else if (strcmp(k, "release") == 0) {
            struct lease_release_msg m;
            rc = lease_parse_release(t, len, &m, &e);
            if (!rc) {
                CHECK_EQ_INT(m.n, 1);
                lease_release_msg_release(&m);
            }
        } else if (strcmp(k, "results") == 0) {
            struct lease_results r;
            /* both plain and zstd-compressed */
            struct buf z;
            buf_init(&z, 1 << 20);
            CHECK_EQ_INT(zst_compress_buf(t, len, 3, &z), 0);
            rc = lease_results_parse(z.data, z.len, 1, &r, &e);
            buf_release(&z);
            if (!rc) {
                CHECK_EQ_INT(r.n, 3);
                CHECK_EQ_INT(r.items[0].kind, STORE_RESULT_SUCCESS);
                CHECK_EQ_INT(r.items[0].cached_tokens, 16);
                CHECK_EQ_INT(r.items[0].gpu_ms, 12);
                CHECK_EQ_INT(r.items[1].kind, STORE_RESULT_INVALID);
                CHECK_EQ_INT(r.items[1].status_code, 400);
                json_t *env = json_loadb(r.items[1].body, r.items[1].body_len, 0, NULL);
                CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(env, "error"), "type")),
                             "invalid_request_error");
                CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(env, "error"), "code")),
                             "context_length_exceeded");
                json_decref(env);
                CHECK_EQ_INT(r.items[2].kind, STORE_RESULT_TRANSIENT);
                CHECK_EQ_STR(r.items[2].error, "device_error: CUDA out of memory");
                lease_results_release(&r);
                struct lease_results r2;
                CHECK_EQ_INT(lease_results_parse(t, len, 0, &r2, &e), 0);
                CHECK_EQ_INT(r2.n, 3);
                lease_results_release(&r2);
            }
        } else {
            th_fail(__FILE__, __LINE__, "known block kind", "unknown block '%s'", bl[i].info);
        }
        if (kind == k) {
            if (rc != 0)
                th_fail(__FILE__, __LINE__, "example parses", "'%s' failed: %d %s %s", bl[i].info, e.status,
                        e.code, e.message);
            seen_ok++;
        } else {
            CHECK(rc != 0);
            CHECK_EQ_INT(e.status, status);
            CHECK_EQ_STR(e.code, code);
            seen_bad++;
        }
        buf_release(&bl[i].text);
    }
    CHECK_EQ_INT(seen_ok, 5);
    CHECK(seen_bad >= 6);
}

TEST(lease_proto_results_caps_and_errors)
{
    struct lease_results r;
    struct problem e;
    CHECK_EQ_INT(lease_results_parse("", 0, 0, &r, &e), ERR_PARSE);
    CHECK_EQ_INT(lease_results_parse("\n\n", 2, 0, &r, &e), ERR_PARSE);
    CHECK_EQ_INT(lease_results_parse("not zstd", 8, 1, &r, &e), ERR_CORRUPT);
    CHECK_EQ_INT(e.status, 400);
    const char *two = "{\"request_id\":\"req_01jf8y2n6q3c5v7x9z1b3d5f7h\",\"status\":\"error\",\"error\":{\"class\":\"transient\",\"message\":\"x\"}}\r\n"
                      "{\"request_id\":\"req_01jf8y2n6q3c5v7x9z1b3d5f7h\",\"status\":\"success\"}\n";
    CHECK_EQ_INT(lease_results_parse(two, strlen(two), 0, &r, &e), ERR_PARSE);
    CHECK_EQ_INT(e.line, 2);
    CHECK_EQ_STR(e.code, "invalid_results");
    const char *neg = "{\"request_id\":\"req_01jf8y2n6q3c5v7x9z1b3d5f7h\",\"status\":\"success\",\"response\":{\"body\":{}},\"usage\":{\"prompt_tokens\":-1}}";
    CHECK_EQ_INT(lease_results_parse(neg, strlen(neg), 0, &r, &e), ERR_PARSE);
    const char *cached = "{\"request_id\":\"req_01jf8y2n6q3c5v7x9z1b3d5f7h\",\"status\":\"success\",\"response\":{\"body\":{}},\"usage\":{\"prompt_tokens\":1,\"cached_tokens\":2}}";
    CHECK_EQ_INT(lease_results_parse(cached, strlen(cached), 0, &r, &e), ERR_PARSE);
    /* more than 4096 lines: 413 */
    struct buf many;
    buf_init(&many, 64u << 20);
    for (int i = 0; i < LEASE_CHUNK_MAX_LINES + 1; i++)
        buf_append_str(&many, "{\"request_id\":\"req_01jf8y2n6q3c5v7x9z1b3d5f7h\",\"status\":\"error\",\"error\":{\"class\":\"transient\",\"message\":\"x\"}}\n");
    CHECK_EQ_INT(lease_results_parse(many.data, many.len, 0, &r, &e), ERR_TOOBIG);
    CHECK_EQ_INT(e.status, 413);
    buf_release(&many);
    /* an error answer in the OpenAI envelope */
    struct buf b;
    buf_init(&b, 4096);
    lease_error_from(ERR_BADSTATE, &e);
    CHECK_EQ_INT(e.status, 409);
    CHECK_EQ_INT(lease_write_error(&b, &e), 0);
    json_t *v = json_loads(b.data, 0, NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(v, "error"), "code")), "stale_lease");
    json_decref(v);
    buf_release(&b);
    enum store_commit_outcome st2[2] = {STORE_COMMIT_STALE, STORE_COMMIT_STALE};
    CHECK_EQ_INT(lease_commit_http_status(st2, 2), 409);
    st2[1] = STORE_COMMIT_DUPLICATE;
    CHECK_EQ_INT(lease_commit_http_status(st2, 2), 200);
}

TEST(lease_proto_answers_are_json)
{
    struct store_leased it = {.id = "req_01jf8y2n6q3c5v7x9z1b3d5f7h", .custom_id = "c\"1", .body = "{\"model\":\"m\"}",
                              .body_len = 13, .attempt = 2,
                              .endpoint = "/v1/completions"};
    struct store_lease l = {.id = "lease_01jf8y2n6q3c5v7x9z1b3d5f7h", .expires_at = 5, .n = 1, .items = &it};
    struct buf b;
    buf_init(&b, 1 << 16);
    CHECK_EQ_INT(lease_write_lease(&b, NULL, &l), 0);
    json_t *v = json_loads(b.data, 0, NULL);
    CHECK(v != NULL);
    json_t *r0 = json_array_get(json_object_get(v, "requests"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(r0, "custom_id")), "c\"1");
    CHECK_EQ_INT(json_integer_value(json_object_get(r0, "attempt")), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(r0, "url")), "/v1/completions");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(r0, "body"), "model")), "m");
    json_decref(v);
    buf_reset(&b);
    struct store_lease empty = {0};
    CHECK_EQ_INT(lease_write_lease(&b, NULL, &empty), 0);
    v = json_loads(b.data, 0, NULL);
    CHECK(json_is_null(json_object_get(v, "lease_id")));
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "retry_after_ms")), 1000);
    json_decref(v);
    buf_reset(&b);
    char ids[1][ID_MAX] = {"req_01jf8y2n6q3c5v7x9z1b3d5f7h"};
    CHECK_EQ_INT(lease_write_heartbeat(&b, l.id, 9, ids, 1), 0);
    v = json_loads(b.data, 0, NULL);
    CHECK_EQ_INT(json_array_size(json_object_get(v, "cancelled")), 1);
    json_decref(v);
    buf_reset(&b);
    struct store_model_served m = {"smollm", "SmolLM2", 2, STORE_EP_CHAT | STORE_EP_EMBEDDINGS};
    CHECK_EQ_INT(lease_write_models(&b, &m, 1), 0);
    v = json_loads(b.data, 0, NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(json_object_get(v, "data"), 0), "id")), "smollm");
    json_t *eps = json_object_get(json_array_get(json_object_get(v, "data"), 0), "endpoints");
    CHECK_EQ_INT(json_array_size(eps), 2);
    CHECK_EQ_STR(json_string_value(json_array_get(eps, 0)), "/v1/chat/completions");
    CHECK_EQ_STR(json_string_value(json_array_get(eps, 1)), "/v1/embeddings");
    json_decref(v);
    buf_release(&b);
}
