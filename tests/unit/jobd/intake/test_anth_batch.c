/*
 * test_anth_batch.c - jobd/intake/anth_batch.c: a Message Batches create
 * body into chat JSONL lines (the lines written, the request index and
 * field in every refusal, the count, line and custom_id limits), and
 * results rows into results lines (succeeded, errored as
 * invalid_request_error or api_error, canceled, expired; usage from the
 * row, or from the body of a reused answer).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/problem.h"
#include "jobd/intake/anth_batch.h"
#include "jobd/intake/ingest.h"
#include "tests/th.h"

/* ---- anth_batch_lines ----------------------------------------------------------------------- */

struct sink {
    struct buf b;
    int fail; /* write returns ERR_IO once this many writes have been taken (0: never) */
    int n_writes;
};

static int sink_write(void *ctx, const void *data, size_t n)
{
    struct sink *s = ctx;
    if (s->fail && s->n_writes >= s->fail)
        return ERR_IO;
    s->n_writes++;
    return buf_append(&s->b, data, n);
}

static void limits(struct ingest_limits *lim)
{
    ingest_limits_default(lim);
}

#define REQ(cid, extra)                                                                                         \
    "{\"custom_id\":\"" cid "\",\"params\":{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\","  \
    "\"content\":\"Hi\"}]" extra "}}"

/* body refused: rc, err.param == path, err.message == path ": " + msg (msg a prefix). */
static void check_refused_lim(const struct ingest_limits *lim, const char *body, int want_rc, int status,
                              const char *path, const char *msg)
{
    struct sink s = {0};
    buf_init(&s.b, 1 << 20);
    struct problem err = {0};
    int64_t n = -1;
    int rc = anth_batch_lines(body, strlen(body), lim, sink_write, &s, &n, &err);
    CHECK_EQ_INT(rc, want_rc);
    CHECK_EQ_INT(n, -1); /* untouched on a refusal */
    if (want_rc == ERR_INVAL) {
        CHECK_EQ_STR(err.param, path);
        char want[512];
        snprintf(want, sizeof want, "%s: %s", path, msg);
        if (strncmp(err.message, want, strlen(want)))
            th_fail(__FILE__, __LINE__, "message", "\"%s\" does not start with \"%s\"", err.message, want);
        CHECK_EQ_STR(err.code, status == 413 ? "request_too_large" : "invalid_request_error");
        CHECK_EQ_INT(err.status == 413, status == 413);
    }
    buf_release(&s.b);
}

static void check_refused(const char *body, const char *path, const char *msg)
{
    struct ingest_limits lim;
    limits(&lim);
    check_refused_lim(&lim, body, ERR_INVAL, 400, path, msg);
}

TEST(anth_batch_lines_writes_one_chat_line_per_request_in_order)
{
    struct ingest_limits lim;
    limits(&lim);
    const char *body = "{\"requests\":[" REQ("a-1", ",\"system\":\"Be brief.\",\"stop_sequences\":[\"x\"]") ","
                       REQ("B_2", ",\"thinking\":{\"type\":\"disabled\"}") "]}";
    struct sink s = {0};
    buf_init(&s.b, 1 << 20);
    struct problem err = {0};
    int64_t n = 0;
    CHECK_EQ_INT(anth_batch_lines(body, strlen(body), &lim, sink_write, &s, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(s.n_writes, 2);
    CHECK(s.b.len > 0 && s.b.data[s.b.len - 1] == '\n');
    char *text = strndup(s.b.data, s.b.len);
    char *nl = strchr(text, '\n');
    CHECK(nl != NULL);
    *nl = '\0';
    json_error_t je;
    json_t *l0 = json_loads(text, 0, &je), *l1 = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, &je);
    CHECK(l0 && l1);
    json_t *w0 = json_loads("{\"custom_id\":\"a-1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                            "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"system\",\"content\":"
                            "\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],\"stop\":[\"x\"]}}",
                            0, &je);
    json_t *w1 = json_loads("{\"custom_id\":\"B_2\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                            "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                            "\"chat_template_kwargs\":{\"enable_thinking\":false}}}",
                            0, &je);
    CHECK(json_equal(l0, w0));
    CHECK(json_equal(l1, w1));
    json_decref(l0);
    json_decref(l1);
    json_decref(w0);
    json_decref(w1);
    free(text);
    buf_release(&s.b);
}

TEST(anth_batch_lines_refusals_name_the_request_index_and_field)
{
    check_refused("[1]", "body", "expected a JSON object");
    check_refused("{\"requests\":[" REQ("a", "") "", "body", "expected a JSON object"); /* cut */
    check_refused("{}", "requests", "Field required");
    check_refused("{\"requests\":[]}", "requests", "Input should be a non-empty list");
    check_refused("{\"requests\":{}}", "requests", "Input should be a non-empty list");
    check_refused("{\"requests\":[" REQ("a", "") "],\"stream\":true}", "stream", "Extra inputs are not permitted");
    check_refused("{\"requests\":[" REQ("a", "") ",7]}", "requests.1", "Input should be a valid dictionary");
    check_refused("{\"requests\":[" REQ("a", "") ",{\"custom_id\":\"b\",\"params\":{},\"extra\":1}]}",
                  "requests.1.extra", "Extra inputs are not permitted");
    check_refused("{\"requests\":[{\"params\":{}}]}", "requests.0.custom_id", "Field required");
    check_refused("{\"requests\":[{\"custom_id\":\"b\"}]}", "requests.0.params", "Field required");
    /* the params' own refusals, their Anthropic path under the request's index */
    check_refused("{\"requests\":[" REQ("a", "") ",{\"custom_id\":\"b\",\"params\":{\"model\":\"m\","
                  "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}}]}",
                  "requests.1.params.max_tokens", "Field required");
    check_refused("{\"requests\":[{\"custom_id\":\"a\",\"params\":{\"model\":\"m\",\"max_tokens\":8,"
                  "\"messages\":[]}}]}", "requests.0.params.messages", "Input should be a non-empty list");
    check_refused("{\"requests\":[" REQ("a", ",\"messages\":[]") "]}", "body", "expected a JSON object"); /* a key twice */
    check_refused("{\"requests\":[" REQ("a", "") "," REQ("b", ",\"temperature\":1.5") "]}",
                  "requests.1.params.temperature", "Input should be between 0 and 1");
    check_refused("{\"requests\":[" REQ("a", ",\"stop_sequences\":[\"1\",\"2\",\"3\",\"4\",\"5\"]") "]}",
                  "requests.0.params.stop_sequences", "");
    check_refused("{\"requests\":[{\"custom_id\":\"a\",\"params\":[]}]}", "requests.0.params",
                  "Input should be a valid dictionary");
}

TEST(anth_batch_lines_custom_ids_are_checked_and_unique)
{
    const char *pattern = "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'";
    check_refused("{\"requests\":[" REQ("", "") "]}", "requests.0.custom_id", pattern);
    check_refused("{\"requests\":[" REQ("a b", "") "]}", "requests.0.custom_id", pattern);
    check_refused("{\"requests\":[" REQ("a.b", "") "]}", "requests.0.custom_id", pattern);
    check_refused("{\"requests\":[{\"custom_id\":7,\"params\":{}}]}", "requests.0.custom_id", pattern);
    char c64[65], c65[66], body[1024];
    memset(c64, 'x', 64);
    c64[64] = '\0';
    memset(c65, 'y', 65);
    c65[65] = '\0';
    snprintf(body, sizeof body, "{\"requests\":[" REQ("%s", "") "]}", c65);
    check_refused(body, "requests.0.custom_id", pattern);
    snprintf(body, sizeof body, "{\"requests\":[" REQ("%s", "") "]}", c64);
    struct ingest_limits lim;
    limits(&lim);
    struct sink s = {0};
    buf_init(&s.b, 1 << 20);
    struct problem err = {0};
    int64_t n = 0;
    CHECK_EQ_INT(anth_batch_lines(body, strlen(body), &lim, sink_write, &s, &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    buf_release(&s.b);
    check_refused("{\"requests\":[" REQ("a", "") "," REQ("b", "") "," REQ("a", "") "]}", "requests.2.custom_id",
                  "Duplicate custom_id 'a': custom_ids must be unique within a batch");
}

TEST(anth_batch_lines_limits_requests_and_line_bytes)
{
    struct ingest_limits lim;
    limits(&lim);
    lim.max_requests = 2;
    const char *three = "{\"requests\":[" REQ("a", "") "," REQ("b", "") "," REQ("c", "") "]}";
    check_refused_lim(&lim, three, ERR_INVAL, 413, "requests", "at most 2 requests per batch (got 3)");
    lim.max_requests = 3;
    struct sink s = {0};
    buf_init(&s.b, 1 << 20);
    struct problem err = {0};
    int64_t n = 0;
    CHECK_EQ_INT(anth_batch_lines(three, strlen(three), &lim, sink_write, &s, &n, &err), 0);
    CHECK_EQ_INT(n, 3);
    buf_release(&s.b);

    /* one translated line over the line limit: the request's index */
    limits(&lim);
    lim.max_line_bytes = 200;
    char big[1024];
    char text[300];
    memset(text, 'z', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    snprintf(big, sizeof big, "{\"requests\":[" REQ("a", "") ",{\"custom_id\":\"b\",\"params\":{\"model\":\"m\","
             "\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}}]}", text);
    check_refused_lim(&lim, big, ERR_INVAL, 400, "requests.1.params", "the request is larger than 200 bytes");

    /* the ingest rule on the written line: max_tokens over the output limit */
    limits(&lim);
    lim.max_output_tokens = 4;
    check_refused_lim(&lim, "{\"requests\":[" REQ("a", "") "]}", ERR_INVAL, 400, "requests.0.params.max_tokens",
                      "");
}

TEST(anth_batch_lines_passes_on_the_writers_error)
{
    struct ingest_limits lim;
    limits(&lim);
    const char *body = "{\"requests\":[" REQ("a", "") "," REQ("b", "") "]}";
    struct sink s = {0};
    buf_init(&s.b, 1 << 20);
    s.fail = 1;
    struct problem err = {0};
    int64_t n = -1;
    CHECK_EQ_INT(anth_batch_lines(body, strlen(body), &lim, sink_write, &s, &n, &err), ERR_IO);
    CHECK_EQ_INT(n, -1);
    CHECK_EQ_INT(s.n_writes, 1);
    buf_release(&s.b);
}

/* ---- anth_batch_result_line ----------------------------------------------------------------- */

static json_t *result_of(const struct store_result_row *r)
{
    struct buf out;
    buf_init(&out, 1 << 20);
    CHECK_EQ_INT(anth_batch_result_line(&out, r), 0);
    CHECK(out.len > 1 && out.data[out.len - 1] == '\n');
    CHECK(memchr(out.data, '\n', out.len) == out.data + out.len - 1); /* one line */
    json_error_t je;
    json_t *v = json_loadb(out.data, out.len, 0, &je);
    if (!v)
        th_fail(__FILE__, __LINE__, "json_loadb", "%s: %.*s", je.text, (int)out.len, out.data);
    buf_release(&out);
    return v;
}

static void check_json(json_t *got, const char *want)
{
    json_error_t je;
    json_t *w = json_loads(want, 0, &je);
    if (!w)
        th_fail(__FILE__, __LINE__, "json_loads", "%s: %s", je.text, want);
    if (!json_equal(got, w)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        th_fail(__FILE__, __LINE__, "json_equal", "got %s\nwant %s", g, want);
    }
    json_decref(w);
    json_decref(got);
}

#define CHAT_BODY(usage)                                                                                       \
    "{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{"     \
    "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello.\"},\"finish_reason\":\"stop\"}],"    \
    "\"usage\":" usage "}"

TEST(anth_batch_result_line_succeeded_takes_the_rows_usage)
{
    const char *body = CHAT_BODY("{\"prompt_tokens\":10,\"completion_tokens\":3,\"total_tokens\":13}");
    struct store_result_row r = {.seq = 1, .custom_id = "q1", .status_code = 200, .body = body,
                                 .body_len = strlen(body), .prompt_tokens = 10, .completion_tokens = 3,
                                 .cached_tokens = 4};
    check_json(result_of(&r),
               "{\"custom_id\":\"q1\",\"result\":{\"type\":\"succeeded\",\"message\":{\"id\":\"msg_abc\","
               "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"text\","
               "\"text\":\"Hello.\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{"
               "\"input_tokens\":6,\"output_tokens\":3,\"cache_read_input_tokens\":4,"
               "\"cache_creation_input_tokens\":0}}}}");
}

/* A reused answer's row counts 0 tokens (nothing was computed); its body
 * carries the original's usage and the reuse mark: the Message keeps that
 * usage, as the OpenAI results line does, rather than 0 / 0. */
TEST(anth_batch_result_line_reused_answer_keeps_its_bodys_usage)
{
    const char *body = CHAT_BODY("{\"prompt_tokens\":10,\"completion_tokens\":3,\"total_tokens\":13,"
                                 "\"prompt_tokens_details\":{\"cached_tokens\":2},\"reused_tokens\":13}");
    struct store_result_row r = {.seq = 2, .custom_id = "q2", .status_code = 200, .body = body,
                                 .body_len = strlen(body)};
    json_t *v = result_of(&r);
    json_t *u = json_object_get(json_object_get(json_object_get(v, "result"), "message"), "usage");
    check_json(json_incref(u), "{\"input_tokens\":8,\"output_tokens\":3,\"cache_read_input_tokens\":2,"
                               "\"cache_creation_input_tokens\":0}");
    json_decref(v);
}

TEST(anth_batch_result_line_errored_canceled_and_expired)
{
    /* a request error (4xx): invalid_request_error with the body's message */
    const char *e400 = "{\"error\":{\"message\":\"prompt too long\",\"type\":\"invalid_request_error\"}}";
    struct store_result_row r = {.seq = 3, .custom_id = "bad", .status_code = 400, .body = e400,
                                 .body_len = strlen(e400), .error_code = "context_length_exceeded",
                                 .error_message = "not this one"};
    check_json(result_of(&r), "{\"custom_id\":\"bad\",\"result\":{\"type\":\"errored\",\"error\":{\"type\":"
                              "\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
                              "\"prompt too long\"}}}}");
    /* the server's (5xx, or no status): api_error, the row's message without a body */
    struct store_result_row r5 = {.seq = 4, .custom_id = "boom", .status_code = 500,
                                  .error_code = "worker_error", .error_message = "the worker crashed"};
    check_json(result_of(&r5), "{\"custom_id\":\"boom\",\"result\":{\"type\":\"errored\",\"error\":{\"type\":"
                               "\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the worker crashed\"}}}}");
    struct store_result_row r0 = {.seq = 5, .custom_id = "dead", .error_code = "max_attempts"};
    check_json(result_of(&r0), "{\"custom_id\":\"dead\",\"result\":{\"type\":\"errored\",\"error\":{\"type\":"
                               "\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the request failed\"}}}}");
    /* a 200 whose body is not a chat completion: api_error, never a half Message */
    const char *odd = "{\"object\":\"list\",\"data\":[]}";
    struct store_result_row ro = {.seq = 6, .custom_id = "odd", .status_code = 200, .body = odd,
                                  .body_len = strlen(odd)};
    check_json(result_of(&ro), "{\"custom_id\":\"odd\",\"result\":{\"type\":\"errored\",\"error\":{\"type\":"
                               "\"error\",\"error\":{\"type\":\"api_error\",\"message\":"
                               "\"the worker's answer is not a chat completion\"}}}}");
    /* ended by the cancel, by the window */
    struct store_result_row rc = {.seq = 7, .custom_id = "c", .error_code = "batch_cancelled",
                                  .error_message = "The batch was cancelled."};
    check_json(result_of(&rc), "{\"custom_id\":\"c\",\"result\":{\"type\":\"canceled\"}}");
    struct store_result_row rx = {.seq = 8, .custom_id = "x", .error_code = "batch_expired",
                                  .error_message = "The batch expired."};
    check_json(result_of(&rx), "{\"custom_id\":\"x\",\"result\":{\"type\":\"expired\"}}");
}
