/* Tests for jobd/ingest*.c: every validation error class, limits, input
 * encodings, and crash-resume, on real SQLite files in th_tmpdir(). */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/id.h"
#include "common/zst.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000
#define CHAT "/v1/chat/completions"
#define COMPL "/v1/completions"

struct fx {
    const char *dir;
    struct store *st;
    struct store_tenant t;
    int n_files;
};

static void fx_open(struct fx *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->dir = th_tmpdir();
    CHECK_EQ_INT(th_store_open(fx->dir, NULL, &fx->st), 0);
    CHECK_EQ_INT(store_tenant_create(fx->st, "acme", NOW, &fx->t), 0);
    char files[700];
    snprintf(files, sizeof files, "%s/files", fx->dir);
    mkdir(files, 0700);
}

/* Store data as a new input file and create a batch for it; id into batch_id. */
static void fx_batch(struct fx *fx, const char *endpoint, const void *data, size_t len, char *batch_id)
{
    char rel[64], path[800];
    snprintf(rel, sizeof rel, "files/in-%d", fx->n_files++);
    snprintf(path, sizeof path, "%s/%s", fx->dir, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(len == 0 || fwrite(data, 1, len, f) == len);
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", fx->t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "x.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "%s", rel);
    sf.bytes = (int64_t)len;
    sf.created_at = NOW;
    CHECK_EQ_INT(store_file_create(fx->st, &sf), 0);
    struct store_batch_new nb = {endpoint, sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(fx->st, fx->t.id, &nb, NOW, &b), 0);
    snprintf(batch_id, ID_MAX, "%s", b.id);
    store_batch_release(&b);
}

static const char *chat_line(struct buf *b, const char *cid)
{
    buf_reset(b);
    buf_printf(b,
               "{\"custom_id\":\"%s\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
               "{\"model\":\"smollm\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
               "{\"role\":\"user\",\"content\":\"Say hello to %s\"}],\"max_tokens\":32}}",
               cid, cid);
    return b->data;
}

/* The batch's first error: code and line (0 for JSON null). */
static void first_error(struct fx *fx, const char *batch_id, char *code, int64_t *line, int *n_errors,
                        char *message)
{
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(fx->st, fx->t.id, batch_id, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_FAILED);
    CHECK_EQ_INT(b.n_total, 0);
    CHECK(b.errors != NULL);
    json_t *v = json_loads(b.errors, 0, NULL);
    CHECK(json_is_array(v) && json_array_size(v) > 0);
    json_t *e = json_array_get(v, 0);
    snprintf(code, 40, "%s", json_string_value(json_object_get(e, "code")));
    json_t *l = json_object_get(e, "line");
    *line = json_is_integer(l) ? json_integer_value(l) : 0;
    if (n_errors)
        *n_errors = (int)json_array_size(v);
    if (message)
        snprintf(message, 240, "%s", json_string_value(json_object_get(e, "message")));
    CHECK(json_is_string(json_object_get(e, "message")));
    CHECK(json_object_get(e, "param") != NULL);
    json_decref(v);
    store_batch_release(&b);
    int64_t n = -1, nd = -1;
    CHECK_EQ_INT(store_request_count(fx->st, batch_id, &n, &nd), 0);
    CHECK_EQ_INT(n, 0); /* nothing persisted */
}

static void small_limits(struct ingest_limits *lim)
{
    ingest_limits_default(lim);
}

TEST(ingest_valid_chat_and_completions_files)
{
    struct fx fx;
    fx_open(&fx);
    struct buf l, all;
    buf_init(&l, 4096);
    buf_init(&all, 1 << 20);
    for (int i = 1; i <= 3; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "q%d", i);
        buf_append_str(&all, chat_line(&l, cid));
        buf_append_str(&all, "\n");
    }
    char id[ID_MAX];
    fx_batch(&fx, CHAT, all.data, all.len, id);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(rep.n_requests, 3);
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(fx.st, fx.t.id, id, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_IN_PROGRESS);
    CHECK_EQ_INT(b.n_total, 3);
    CHECK_EQ_STR(b.model, "smollm");
    CHECK(b.at[STORE_BATCH_IN_PROGRESS] > 0);
    store_batch_release(&b);
    /* running it again is refused: the batch is no longer validating */
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), ERR_BADSTATE);

    const char *compl =
        "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":\"Once\"}}\n"
        "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":[\"x\",\"y\"],\"n\":2,\"best_of\":2}}\n"
        "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":[1,2,3],\"temperature\":0,\"top_p\":1}}\n"
        "{\"custom_id\":\"d\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":[[1],[2,3]],\"max_tokens\":5,\"stop\":[\"\\n\"]}}\n";
    fx_batch(&fx, COMPL, compl, strlen(compl), id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(rep.n_requests, 4);
    buf_release(&l);
    buf_release(&all);
    store_close(fx.st);
}

/* One case per error class: line 1 is valid, the bad line is `line`. */
struct bad_case {
    const char *name, *endpoint, *bad, *code;
    int64_t line;
};

#define OK_CHAT "{\"custom_id\":\"ok\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}\n"
#define CHAT_WITH(body) "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":" body "}"
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const struct bad_case bad_cases[] = {
    {"not json", CHAT, "{\"custom_id\": \"x\", ", "invalid_json_line", 2},
    {"not an object", CHAT, "[1,2,3]", "invalid_json_line", 2},
    {"too deep", CHAT, "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
     "invalid_json_line", 2},
    {"duplicate key", CHAT, CHAT_WITH("{\"model\":\"m\",\"model\":\"m\"," MSG "}"), "invalid_json_line", 2},
    {"bad utf8", CHAT, "{\"custom_id\":\"\xc3\x28\"}", "invalid_utf8", 2},
    {"surrogate utf8", CHAT, "{\"custom_id\":\"\xed\xa0\x80\"}", "invalid_utf8", 2},
    {"unknown field", CHAT, "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{},\"extra\":1}",
     "unknown_parameter", 2},
    {"no custom_id", CHAT, "{\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"," MSG "}}",
     "missing_required_parameter", 2},
    {"custom_id number", CHAT, "{\"custom_id\":5,\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{}}",
     "invalid_type", 2},
    {"empty custom_id", CHAT, "{\"custom_id\":\"\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{}}",
     "invalid_value", 2},
    {"GET", CHAT, "{\"custom_id\":\"x\",\"method\":\"GET\",\"url\":\"/v1/chat/completions\",\"body\":{}}",
     "invalid_method", 2},
    {"bad url", CHAT, "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/moderations\",\"body\":{}}", "invalid_url", 2},
    {"other endpoint", CHAT, "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{}}",
     "mismatched_endpoint", 2},
    {"no body", CHAT, "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\"}",
     "missing_required_parameter", 2},
    {"body string", CHAT, CHAT_WITH("\"hi\""), "invalid_type", 2},
    {"no model", CHAT, CHAT_WITH("{" MSG "}"), "missing_required_parameter", 2},
    {"no messages", CHAT, CHAT_WITH("{\"model\":\"m\"}"), "missing_required_parameter", 2},
    {"empty messages", CHAT, CHAT_WITH("{\"model\":\"m\",\"messages\":[]}"), "invalid_value", 2},
    {"bad role", CHAT, CHAT_WITH("{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}"),
     "invalid_value", 2},
    {"no content", CHAT, CHAT_WITH("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}"),
     "invalid_value", 2},
    {"image part", CHAT,
     CHAT_WITH("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}"),
     "invalid_value", 2},
    {"temperature 3", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"temperature\":3}"), "decimal_above_max_value", 2},
    {"top_p string", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"top_p\":\"1\"}"), "invalid_type", 2},
    {"n 9", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"n\":9}"), "integer_above_max_value", 2},
    {"max_tokens over limit", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"max_completion_tokens\":1000000}"),
     "invalid_value", 2},
    {"max_tokens 0", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"max_tokens\":0}"), "integer_below_min_value", 2},
    {"stream", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"stream\":true}"), "unsupported_value", 2},
    {"schema keyword not enforceable", CHAT,
     CHAT_WITH("{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
               "{\"name\":\"s\",\"strict\":true,\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}}"),
     "unsupported_value", 2},
    {"response_format type", CHAT, CHAT_WITH("{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"xml\"}}"),
     "invalid_value", 2},
    {"bad guided_regex", COMPL,
     "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\","
     "\"prompt\":\"p\",\"guided_regex\":\"[a-\"}}",
     "invalid_value", 2},
    {"duplicate custom_id", CHAT,
     "{\"custom_id\":\"ok\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"," MSG "}}",
     "duplicate_custom_id", 2},
    {"no prompt", COMPL, "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\"}}",
     "missing_required_parameter", 2},
    {"prompt object", COMPL,
     "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":{}}}",
     "invalid_type", 2},
    {"negative token", COMPL,
     "{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":[1,-2]}}",
     "invalid_value", 2},
};

TEST(ingest_each_error_class_reports_code_and_line)
{
    struct fx fx;
    fx_open(&fx);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        struct buf in;
        buf_init(&in, 1 << 16);
        if (strcmp(c->endpoint, CHAT) == 0)
            buf_append_str(&in, OK_CHAT);
        else
            buf_append_str(&in, "{\"custom_id\":\"ok\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":\"m\",\"prompt\":\"p\"}}\n");
        buf_append_str(&in, c->bad);
        buf_append_str(&in, "\n");
        char id[ID_MAX];
        fx_batch(&fx, c->endpoint, in.data, in.len, id);
        buf_release(&in);
        struct ingest_report rep;
        CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
        char code[40], msg[240];
        int64_t line;
        first_error(&fx, id, code, &line, NULL, msg);
        if (rep.outcome != INGEST_INVALID || strcmp(code, c->code) != 0 || line != c->line)
            th_fail(__FILE__, __LINE__, c->name, "case '%s': got %s at line %lld (%s), want %s at %lld",
                    c->name, code, (long long)line, msg, c->code, (long long)c->line);
        if (strcmp(c->code, "duplicate_custom_id") == 0)
            CHECK(strstr(msg, "line 1") != NULL);
        if (strcmp(c->name, "schema keyword not enforceable") == 0)
            CHECK(strstr(msg, "keyword 'patternProperties' is not supported") != NULL);
    }
    store_close(fx.st);
}

TEST(ingest_file_level_errors_and_limits)
{
    struct fx fx;
    fx_open(&fx);
    struct ingest_limits lim;
    small_limits(&lim);
    struct ingest_report rep;
    char id[ID_MAX], code[40];
    int64_t line;
    int n_err;
    /* empty, and only blank lines */
    const char *empties[] = {"", "\n\n  \r\n\t\n"};
    for (int i = 0; i < 2; i++) {
        fx_batch(&fx, CHAT, empties[i], strlen(empties[i]), id);
        CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
        first_error(&fx, id, code, &line, NULL, NULL);
        CHECK_EQ_STR(code, "empty_file");
        CHECK_EQ_INT(line, 0);
    }
    /* too many requests: limit 3, the 4th non-blank line is reported */
    struct buf in, l;
    buf_init(&in, 1 << 20);
    buf_init(&l, 4096);
    for (int i = 0; i < 5; i++) {
        char cid[8];
        snprintf(cid, sizeof cid, "c%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_str(&in, i == 1 ? "\n\n" : "\n"); /* a blank line 3 */
    }
    lim.max_requests = 3;
    fx_batch(&fx, CHAT, in.data, in.len, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, NULL, NULL);
    CHECK_EQ_STR(code, "too_many_requests_in_file");
    CHECK_EQ_INT(line, 5);
    /* file too large: limit below the size, reported where it is crossed */
    small_limits(&lim);
    lim.max_file_bytes = in.len / 2;
    fx_batch(&fx, CHAT, in.data, in.len, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, NULL, NULL);
    CHECK_EQ_STR(code, "file_too_large");
    /* line too long: line 2 of 3 over a 300-byte cap; lines 1 and 3 fit */
    small_limits(&lim);
    lim.max_line_bytes = 300;
    buf_reset(&in);
    buf_append_str(&in, OK_CHAT);
    buf_append_str(&in, CHAT_WITH("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""));
    for (int i = 0; i < 1000; i++)
        buf_append_str(&in, "long ");
    buf_append_str(&in, "\"}]}}\n");
    buf_append_str(&in, OK_CHAT);
    fx_batch(&fx, CHAT, in.data, in.len, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, &n_err, NULL);
    CHECK_EQ_STR(code, "line_too_long");
    CHECK_EQ_INT(line, 2);
    /* ... the third line duplicates the first: reported too, so reading went on */
    CHECK_EQ_INT(n_err, 2);
    /* at most max_errors errors are collected */
    small_limits(&lim);
    buf_reset(&in);
    for (int i = 0; i < 150; i++)
        buf_append_str(&in, "nope\n");
    fx_batch(&fx, CHAT, in.data, in.len, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, &n_err, NULL);
    CHECK_EQ_INT(n_err, 100);
    CHECK_EQ_INT(rep.n_errors, 100);
    /* missing file content */
    fx_batch(&fx, CHAT, "x", 1, id);
    char path[800];
    snprintf(path, sizeof path, "%s/files/in-%d", fx.dir, fx.n_files - 1);
    unlink(path);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, NULL, NULL);
    CHECK_EQ_STR(code, "file_not_found");
    /* a truncated zstd stream */
    struct buf z;
    buf_init(&z, 1 << 20);
    buf_reset(&in);
    buf_append_str(&in, OK_CHAT);
    CHECK_EQ_INT(zst_compress_buf(in.data, in.len, 3, &z), 0);
    fx_batch(&fx, CHAT, z.data, z.len - 3, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    first_error(&fx, id, code, &line, NULL, NULL);
    CHECK_EQ_STR(code, "invalid_file");
    buf_release(&z);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

/* PostgreSQL writes ingest rows in groups of STORE_INGEST_Q_ROWS: a
 * duplicate must still be reported at its own line, naming the first one,
 * in line order with the other errors, whether the first is in the same
 * group, an earlier group of the same transaction, or a committed chunk. */
TEST(ingest_duplicates_across_row_groups_and_checkpoints_report_in_line_order)
{
    struct fx fx;
    fx_open(&fx);
    struct ingest_limits lim;
    small_limits(&lim);
    lim.rows_per_tx = 1500; /* lines 1..1500 commit before the rest is read */
    struct buf in, l;
    buf_init(&in, 4 << 20);
    buf_init(&l, 4096);
    /* line -> the custom_id it carries (c<line> unless a case below) */
    for (int ln = 1; ln <= 2600; ln++) {
        char cid[16];
        int dup_of = ln == 1200 ? 5 : ln == 1400 ? 1350 : ln == 1401 ? 1350 : ln == 2000 ? 10 : ln == 2500 ? 1999 : 0;
        snprintf(cid, sizeof cid, "c%d", dup_of ? dup_of : ln);
        if (ln == 1300)
            buf_append_str(&in, "nope");
        else
            buf_append_str(&in, chat_line(&l, cid));
        buf_append_str(&in, "\n");
    }
    char id[ID_MAX];
    fx_batch(&fx, CHAT, in.data, in.len, id);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_INVALID);
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(fx.st, fx.t.id, id, &b), 0);
    json_t *v = json_loads(b.errors, 0, NULL);
    static const struct { int64_t line; const char *code; const char *first; } want[] = {
        {1200, "duplicate_custom_id", "line 5;"},   /* same transaction, an earlier group */
        {1300, "invalid_json_line", NULL},
        {1400, "duplicate_custom_id", "line 1350;"}, /* the same group */
        {1401, "duplicate_custom_id", "line 1350;"},
        {2000, "duplicate_custom_id", "line 10;"},   /* a committed chunk */
        {2500, "duplicate_custom_id", "line 1999;"},
    };
    CHECK(json_is_array(v));
    CHECK_EQ_INT(json_array_size(v), sizeof want / sizeof *want);
    for (size_t i = 0; i < sizeof want / sizeof *want && i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        CHECK_EQ_INT(json_integer_value(json_object_get(e, "line")), want[i].line);
        CHECK_EQ_STR(json_string_value(json_object_get(e, "code")), want[i].code);
        if (want[i].first)
            CHECK(strstr(json_string_value(json_object_get(e, "message")), want[i].first) != NULL);
    }
    json_decref(v);
    store_batch_release(&b);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

TEST(ingest_49999_valid_lines_then_a_bad_one_fails_at_line_50000)
{
    struct fx fx;
    fx_open(&fx);
    struct buf in, l;
    buf_init(&in, 64u << 20);
    buf_init(&l, 4096);
    for (int i = 1; i < 50000; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "r-%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_byte(&in, '\n');
    }
    buf_append_str(&in, "{\"custom_id\":\"r-50000\",\"method\":\"POST\"}\n");
    char id[ID_MAX];
    fx_batch(&fx, CHAT, in.data, in.len, id);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_INVALID);
    char code[40];
    int64_t line;
    int n_err;
    first_error(&fx, id, code, &line, &n_err, NULL);
    CHECK_EQ_STR(code, "missing_required_parameter");
    CHECK_EQ_INT(line, 50000);
    CHECK_EQ_INT(n_err, 1);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

TEST(ingest_accepts_crlf_bom_blank_lines_and_no_final_newline)
{
    struct fx fx;
    fx_open(&fx);
    struct buf in, l;
    buf_init(&in, 1 << 20);
    buf_init(&l, 4096);
    buf_append_str(&in, "\xef\xbb\xbf");
    buf_append_str(&in, chat_line(&l, "a"));
    buf_append_str(&in, "\r\n\r\n");
    buf_append_str(&in, chat_line(&l, "b"));
    buf_append_str(&in, "\r\n");
    buf_append_str(&in, chat_line(&l, "c")); /* no final newline */
    char id[ID_MAX];
    fx_batch(&fx, CHAT, in.data, in.len, id);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(rep.n_requests, 3);
    CHECK_EQ_INT(rep.n_lines, 4);
    /* a BOM anywhere but the start is not whitespace */
    buf_reset(&in);
    buf_append_str(&in, chat_line(&l, "a"));
    buf_append_str(&in, "\n\xef\xbb\xbf");
    buf_append_str(&in, chat_line(&l, "b"));
    fx_batch(&fx, CHAT, in.data, in.len, id);
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    char code[40];
    int64_t line;
    first_error(&fx, id, code, &line, NULL, NULL);
    CHECK_EQ_STR(code, "invalid_json_line");
    CHECK_EQ_INT(line, 2);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

TEST(ingest_reads_zstd_compressed_input)
{
    struct fx fx;
    fx_open(&fx);
    struct buf in, l, z;
    buf_init(&in, 8u << 20);
    buf_init(&l, 4096);
    buf_init(&z, 8u << 20);
    for (int i = 1; i <= 3000; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "z-%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_byte(&in, '\n');
    }
    /* two frames: the stream is their concatenation */
    size_t half = in.len / 2;
    CHECK_EQ_INT(zst_compress_buf(in.data, half, 3, &z), 0);
    CHECK_EQ_INT(zst_compress_buf(in.data + half, in.len - half, 3, &z), 0);
    CHECK(z.len < in.len / 4);
    char id[ID_MAX];
    fx_batch(&fx, CHAT, z.data, z.len, id);
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, NULL, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(rep.n_requests, 3000);
    int64_t n, nd;
    CHECK_EQ_INT(store_request_count(fx.st, id, &n, &nd), 0);
    CHECK_EQ_INT(n, 3000);
    CHECK_EQ_INT(nd, 3000);
    /* request ids have the common/id.h shape and sort in line order; bodies
     * are stored exactly as sent */
    struct sdb *db = th_db_open(fx.dir);
    struct sdb_stmt *s;
    CHECK_EQ_INT(sdb_prepare(db, "SELECT id, line, body FROM requests WHERE batch_id = ?1 ORDER BY id", &s), SDB_OK);
    sdb_bind_text(s, 1, id, -1);
    int64_t prev = 0;
    while (sdb_step(s) == SDB_ROW) {
        CHECK(id_valid("req_", (const char *)sdb_column_text(s, 0)));
        CHECK(sdb_column_int64(s, 1) > prev);
        prev = sdb_column_int64(s, 1);
        if (prev == 7)
            CHECK_EQ_STR((const char *)sdb_column_text(s, 2),
                         "{\"model\":\"smollm\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                         "{\"role\":\"user\",\"content\":\"Say hello to z-7\"}],\"max_tokens\":32}");
    }
    CHECK_EQ_INT(prev, 3000);
    sdb_finalize(s);
    sdb_close(db);
    buf_release(&in);
    buf_release(&l);
    buf_release(&z);
    store_close(fx.st);
}

/* ---- stop, cancel, resume ---- */

struct stop_at {
    int64_t line;
    int exit_process; /* 1: _exit (simulated crash); 0: ask the ingest to stop */
};

static int stop_hook(void *ctx, int64_t line)
{
    struct stop_at *s = ctx;
    if (line < s->line)
        return 0;
    if (s->exit_process)
        _exit(0);
    return 1;
}

TEST(ingest_cancelled_while_validating_ends_cancelled_with_no_requests)
{
    struct fx fx;
    fx_open(&fx);
    struct buf in, l;
    buf_init(&in, 1 << 20);
    buf_init(&l, 4096);
    for (int i = 0; i < 500; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "c%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_byte(&in, '\n');
    }
    char id[ID_MAX];
    fx_batch(&fx, CHAT, in.data, in.len, id);
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.rows_per_tx = 100;
    struct stop_at s = {250, 0};
    struct ingest_hooks h = {stop_hook, &s, NULL};
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, &h, &rep), ERR_BUSY);
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(fx.st, fx.t.id, id, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_VALIDATING);
    CHECK_EQ_INT(b.ingest_requests, 200); /* two checkpoints committed */
    store_batch_release(&b);
    CHECK_EQ_INT(store_batch_cancel(fx.st, fx.t.id, id, NOW, NULL), 0);
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, NULL, &rep), 0);
    CHECK_EQ_INT(rep.outcome, INGEST_CANCELLED);
    CHECK_EQ_INT(store_batch_get(fx.st, fx.t.id, id, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_CANCELLED);
    store_batch_release(&b);
    int64_t n, nd;
    CHECK_EQ_INT(store_request_count(fx.st, id, &n, &nd), 0);
    CHECK_EQ_INT(n, 0);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

/* Every request row has custom_id "r-<line>" (so each id is present once). */
static int64_t rows_matching_line(const char *dir, const char *batch)
{
    struct sdb *db = th_db_open(dir);
    struct sdb_stmt *s;
    CHECK_EQ_INT(sdb_prepare(db, "SELECT count(*) FROM requests WHERE batch_id = ?1 AND custom_id = 'r-' || line", &s),
                 SDB_OK);
    sdb_bind_text(s, 1, batch, -1);
    CHECK_EQ_INT(sdb_step(s), SDB_ROW);
    int64_t n = sdb_column_int64(s, 0);
    sdb_finalize(s);
    sdb_close(db);
    return n;
}

/* Fork a child that opens its own store, ingests, and _exit()s at `line`. */
static void crash_child_at(const char *dir, const char *id, const struct ingest_limits *lim, int64_t line)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct store *st = NULL;
        if (th_store_open(dir, NULL, &st))
            _exit(3);
        struct stop_at s = {line, 1};
        struct ingest_hooks h = {stop_hook, &s, NULL};
        struct ingest_report rep;
        ingest_batch(st, id, lim, &h, &rep);
        _exit(4); /* finished without reaching the crash point */
    }
    int status = 0;
    CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WEXITSTATUS(status), 0);
}

TEST(ingest_resumes_exactly_after_crashes_at_random_points)
{
    struct fx fx;
    fx_open(&fx);
    enum { N = 20000 };
    struct buf in, l;
    buf_init(&in, 16u << 20);
    buf_init(&l, 4096);
    for (int i = 1; i <= N; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "r-%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_byte(&in, '\n');
    }
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.rows_per_tx = 1500;
    unsigned seed = (unsigned)clock_wall_ms();
    srand(seed);
    for (int round = 0; round < 4; round++) {
        char id[ID_MAX];
        fx_batch(&fx, CHAT, in.data, in.len, id);
        store_close(fx.st); /* no connection crosses fork() */
        fx.st = NULL;
        /* one or two crashes, each at a random line */
        int crashes = 1 + round % 2;
        for (int c = 0; c < crashes; c++) {
            int64_t at = 1 + rand() % N;
            crash_child_at(fx.dir, id, &lim, at);
            CHECK_EQ_INT(th_store_open(fx.dir, NULL, &fx.st), 0);
            struct store_batch b;
            CHECK_EQ_INT(store_batch_get(fx.st, NULL, id, &b), 0);
            CHECK_EQ_INT(b.status, STORE_BATCH_VALIDATING);
            int64_t n, nd;
            CHECK_EQ_INT(store_request_count(fx.st, id, &n, &nd), 0);
            if (n != b.ingest_requests || n % lim.rows_per_tx != 0)
                th_fail(__FILE__, __LINE__, "checkpoint matches rows",
                        "seed %u round %d crash at %lld: %lld rows, checkpoint %lld", seed, round,
                        (long long)at, (long long)n, (long long)b.ingest_requests);
            store_batch_release(&b);
            store_close(fx.st);
            fx.st = NULL;
        }
        CHECK_EQ_INT(th_store_open(fx.dir, NULL, &fx.st), 0);
        int done = 0;
        CHECK_EQ_INT(ingest_resume_all(fx.st, &lim, &done), 0);
        CHECK_EQ_INT(done, 1);
        struct store_batch b;
        CHECK_EQ_INT(store_batch_get(fx.st, NULL, id, &b), 0);
        int64_t n, nd;
        CHECK_EQ_INT(store_request_count(fx.st, id, &n, &nd), 0);
        if (b.status != STORE_BATCH_IN_PROGRESS || b.n_total != N || n != N || nd != N ||
            rows_matching_line(fx.dir, id) != N)
            th_fail(__FILE__, __LINE__, "exact resume", "seed %u round %d: status %s total %lld rows %lld distinct %lld",
                    seed, round, store_batch_status_name(b.status), (long long)b.n_total, (long long)n,
                    (long long)nd);
        store_batch_release(&b);
    }
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}

TEST(ingest_line_check_estimates_tokens_and_caps)
{
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    const char *line = "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                       "\"text\":\"0123456789abcdef\"}]}],\"max_completion_tokens\":7,\"max_tokens\":99}}";
    struct ingest_line out;
    struct problem e;
    CHECK_EQ_INT(ingest_line_check(line, strlen(line), CHAT, &lim, &out, &e), 0);
    CHECK_EQ_STR(out.custom_id, "a");
    CHECK_EQ_STR(out.model, "m");
    CHECK_EQ_INT(out.max_tokens, 7);                /* max_completion_tokens wins */
    CHECK_EQ_INT(out.prompt_tokens_est, (16 + 16 + 3) / 4); /* text + per-message framing */
    ingest_line_release(&out);
    ingest_line_release(&out);
    CHECK(ingest_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80", 11));
    CHECK(!ingest_utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!ingest_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(!ingest_utf8_valid("\xe2\x82", 2));         /* truncated */
}

/* A /v1/responses line: checked by the translation + the chat rules
 * (oresp_check), its cap and estimate from the translated chat body, its
 * errors named by the Responses field with the "body." prefix, and
 * max_output_tokens held to the deployment's output limit. */
TEST(ingest_line_check_responses_line)
{
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    const char *resp = "/v1/responses";
    const char *line = "{\"custom_id\":\"r\",\"method\":\"POST\",\"url\":\"/v1/responses\",\"body\":"
                       "{\"model\":\"m\",\"instructions\":\"0123\",\"input\":[{\"role\":\"user\","
                       "\"content\":[{\"type\":\"input_text\",\"text\":\"0123456789abcdef\"}]}],"
                       "\"max_output_tokens\":20}}";
    struct ingest_line out;
    struct problem e;
    CHECK_EQ_INT(ingest_line_check(line, strlen(line), resp, &lim, &out, &e), 0);
    CHECK_EQ_INT(out.max_tokens, 20);
    CHECK_EQ_INT(out.prompt_tokens_est, (4 + 16 + 2 * 16 + 3) / 4); /* two messages */
    ingest_line_release(&out);
    /* a chat line in a responses batch, and the other way round */
    CHECK_EQ_INT(ingest_line_check(line, strlen(line), CHAT, &lim, &out, &e), ERR_INVAL);
    CHECK_EQ_STR(e.code, "mismatched_endpoint");
    struct {
        const char *body, *param, *code;
    } bad[] = {
        {"{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
         "body.previous_response_id", "previous_response_not_found"},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\","
         "\"file_id\":\"f\"}]}]}", "body.input[0].content[0].type", "unsupported_value"},
        {"{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":40000}", "body.max_output_tokens",
         "invalid_value"},
        {"{\"model\":\"m\",\"input\":\"x\",\"top_p\":0}", "body.top_p", "decimal_below_min_value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char l[512];
        snprintf(l, sizeof l, "{\"custom_id\":\"r\",\"method\":\"POST\",\"url\":\"/v1/responses\","
                 "\"body\":%s}", bad[i].body);
        memset(&e, 0, sizeof e);
        CHECK_EQ_INT(ingest_line_check(l, strlen(l), resp, &lim, &out, &e), ERR_INVAL);
        CHECK_EQ_STR(e.param, bad[i].param);
        CHECK_EQ_STR(e.code, bad[i].code);
    }
}

/* ---- several ingesters on one batch (several jobd on one PostgreSQL database) ---- */

struct takeover {
    const char *dir, *id;
    const struct ingest_limits *lim;
    int done;
    int rc;
    struct ingest_report rep;
};

/* After the first ingester's first chunk commit, a second one (its own
 * connection, as another jobd instance) ingests the whole batch. */
static void takeover_commit(void *ctx, int64_t line)
{
    struct takeover *t = ctx;
    (void)line;
    if (t->done++)
        return;
    struct store *st2;
    CHECK_EQ_INT(th_store_open(t->dir, NULL, &st2), 0);
    t->rc = ingest_batch(st2, t->id, t->lim, NULL, &t->rep);
    store_close(st2);
}

TEST(ingest_second_ingester_finishes_first_one_stops_at_its_fence)
{
    struct fx fx;
    fx_open(&fx);
    struct buf in, l;
    buf_init(&in, 1 << 20);
    buf_init(&l, 4096);
    for (int i = 0; i < 300; i++) {
        char cid[16];
        snprintf(cid, sizeof cid, "c%d", i);
        buf_append_str(&in, chat_line(&l, cid));
        buf_append_byte(&in, '\n');
    }
    char id[ID_MAX];
    fx_batch(&fx, CHAT, in.data, in.len, id);
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.rows_per_tx = 50;
    /* ownership: on PostgreSQL a second connection cannot own what the
     * first owns until it lets go; SQLite has one jobd, always the owner */
    struct store *st2;
    CHECK_EQ_INT(th_store_open(fx.dir, NULL, &st2), 0);
    int owned = -1;
    CHECK_EQ_INT(store_own_try(fx.st, STORE_OWN_INGEST, id, &owned), 0);
    CHECK_EQ_INT(owned, 1);
    CHECK_EQ_INT(store_own_try(st2, STORE_OWN_INGEST, id, &owned), 0);
    CHECK_EQ_INT(owned, store_is_pg(st2) ? 0 : 1);
    CHECK_EQ_INT(store_own_try(st2, STORE_OWN_FINALIZE, id, &owned), 0);
    CHECK_EQ_INT(owned, 1); /* another kind: another owner */
    store_own_release(st2, STORE_OWN_FINALIZE, id);
    store_own_release(fx.st, STORE_OWN_INGEST, id);
    CHECK_EQ_INT(store_own_try(st2, STORE_OWN_INGEST, id, &owned), 0);
    CHECK_EQ_INT(owned, 1);
    store_close(st2); /* a closed connection's ownership ends with it (once the
                         server has ended that session: not synchronous) */
    owned = 0;
    for (int i = 0; i < 1000 && !owned; i++) {
        CHECK_EQ_INT(store_own_try(fx.st, STORE_OWN_INGEST, id, &owned), 0);
        if (!owned)
            usleep(10000);
    }
    CHECK_EQ_INT(owned, 1);
    store_own_release(fx.st, STORE_OWN_INGEST, id);
    /* the fence: the first ingester commits lines 1..50, then a second one
     * ingests the rest and ends the batch; the first one's next chunk finds
     * the checkpoint moved and stops without writing a row */
    struct takeover t = {fx.dir, id, &lim, 0, -1, {0}};
    struct ingest_hooks h = {NULL, NULL, takeover_commit};
    h.ctx = &t;
    struct ingest_report rep;
    CHECK_EQ_INT(ingest_batch(fx.st, id, &lim, &h, &rep), ERR_BADSTATE);
    CHECK_EQ_INT(t.rc, 0);
    CHECK_EQ_INT(t.rep.outcome, INGEST_VALID);
    CHECK_EQ_INT(t.rep.resumed, 1);
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(fx.st, fx.t.id, id, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_IN_PROGRESS);
    CHECK_EQ_INT(b.n_total, 300);
    CHECK(b.errors == NULL || strcmp(b.errors, "[]") == 0);
    store_batch_release(&b);
    int64_t n, nd;
    CHECK_EQ_INT(store_request_count(fx.st, id, &n, &nd), 0);
    CHECK_EQ_INT(n, 300);
    buf_release(&in);
    buf_release(&l);
    store_close(fx.st);
}
