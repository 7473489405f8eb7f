/*
 * Unit tests of /v1/embeddings bodies (worker/run/embed_req.c) on the
 * tiny Qwen3 embedding fixture: the response shape and usage, float vs
 * base64 (the same float32 bits), `dimensions` (cut and normalised
 * again), text vs token-array input, and every refused input with its
 * param and code.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crypto.h"
#include "common/err.h"
#include "tests/th.h"
#include "worker/engine/embed.h"
#include "worker/engine/model.h"
#include "text/tok.h"
#include "worker/run/embed_req.h"

struct env {
    struct model *m;
    struct tok *t;
    struct model_ctx *c;
};

static void env_open(struct env *e)
{
    char err[256];
    if (model_load("tests/fixtures/model/qwen3emb_last.f32.gguf", &e->m, err, sizeof err))
        th_fail(__FILE__, __LINE__, "model_load", "%s", err);
    CHECK_EQ_INT(model_tokenizer(e->m, &e->t, err, sizeof err), 0);
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 32;
    cp.n_seq_max = 4;
    cp.n_batch_max = 16;
    cp.n_out_max = 16;
    cp.embeddings = 1;
    CHECK_EQ_INT(model_ctx_new(e->m, &cp, &e->c), 0);
}

static void env_close(struct env *e)
{
    model_ctx_free(e->c);
    tok_free(e->t);
    model_free(e->m);
}

/* Run body text; returns rc, *resp or err. */
static int run(struct env *e, const char *body_text, json_t **resp, struct problem *err)
{
    json_error_t je;
    json_t *body = json_loads(body_text, 0, &je);
    CHECK(body != NULL);
    int64_t n_tok = 0;
    memset(err, 0, sizeof *err);
    *resp = NULL;
    int rc = oembed_run(e->c, e->t, "emb", body, resp, &n_tok, err);
    json_decref(body);
    return rc;
}

static void expect_error(struct env *e, const char *body, const char *param, const char *code)
{
    json_t *resp;
    struct problem err;
    int rc = run(e, body, &resp, &err);
    if (rc != ERR_INVAL)
        th_fail(__FILE__, __LINE__, body, "rc %d, expected ERR_INVAL", rc);
    CHECK_EQ_STR(err.param, param);
    CHECK_EQ_STR(err.code, code);
    CHECK(resp == NULL);
}

static float vec_at(json_t *resp, size_t i, size_t k)
{
    json_t *emb = json_object_get(json_array_get(json_object_get(resp, "data"), i), "embedding");
    return (float)json_real_value(json_array_get(emb, k));
}

TEST(embed_req_shape_float_base64_dimensions)
{
    struct env e;
    env_open(&e);
    json_t *r, *rb, *rd;
    struct problem err;
    CHECK_EQ_INT(run(&e, "{\"model\":\"m\",\"input\":[\"the cat\",\"a dog ate\"]}", &r, &err), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(r, "object")), "list");
    CHECK_EQ_STR(json_string_value(json_object_get(r, "model")), "emb");
    json_t *data = json_object_get(r, "data");
    CHECK_EQ_INT(json_array_size(data), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(data, i);
        CHECK_EQ_STR(json_string_value(json_object_get(d, "object")), "embedding");
        CHECK_EQ_INT(json_integer_value(json_object_get(d, "index")), (long long)i);
        json_t *v = json_object_get(d, "embedding");
        CHECK_EQ_INT(json_array_size(v), 64);
        double ss = 0;
        for (size_t k = 0; k < 64; k++)
            ss += json_real_value(json_array_get(v, k)) * json_real_value(json_array_get(v, k));
        CHECK_NEAR(ss, 1.0, 1e-5);
    }
    /* usage = the tokens of both texts */
    int32_t ids[64];
    size_t n1, n2;
    CHECK_EQ_INT(tok_encode(e.t, "the cat", 7, TOK_ADD_SPECIAL, ids, 64, &n1), 0);
    CHECK_EQ_INT(tok_encode(e.t, "a dog ate", 9, TOK_ADD_SPECIAL, ids, 64, &n2), 0);
    json_t *u = json_object_get(r, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), (long long)(n1 + n2));
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), (long long)(n1 + n2));

    /* base64: the same float32 values, little-endian */
    CHECK_EQ_INT(run(&e, "{\"input\":[\"the cat\",\"a dog ate\"],\"encoding_format\":\"base64\"}",
                     &rb, &err), 0);
    for (size_t i = 0; i < 2; i++) {
        const char *s = json_string_value(
            json_object_get(json_array_get(json_object_get(rb, "data"), i), "embedding"));
        CHECK(s != NULL);
        uint8_t raw[256];
        size_t nraw;
        CHECK_EQ_INT(base64_decode(s, strlen(s), raw, sizeof raw, &nraw), 0);
        CHECK_EQ_INT(nraw, 256);
        for (size_t k = 0; k < 64; k++) {
            uint32_t bits = (uint32_t)raw[4 * k] | (uint32_t)raw[4 * k + 1] << 8 |
                            (uint32_t)raw[4 * k + 2] << 16 | (uint32_t)raw[4 * k + 3] << 24;
            float f;
            memcpy(&f, &bits, 4);
            CHECK(f == vec_at(r, i, k));
        }
    }
    /* dimensions 8: the first 8 values, normalised again */
    CHECK_EQ_INT(run(&e, "{\"input\":\"the cat\",\"dimensions\":8}", &rd, &err), 0);
    json_t *v8 = json_object_get(json_array_get(json_object_get(rd, "data"), 0), "embedding");
    CHECK_EQ_INT(json_array_size(v8), 8);
    double ss = 0;
    for (size_t k = 0; k < 8; k++)
        ss += (double)vec_at(r, 0, k) * vec_at(r, 0, k);
    for (size_t k = 0; k < 8; k++)
        CHECK_NEAR(json_real_value(json_array_get(v8, k)), vec_at(r, 0, k) / sqrt(ss), 1e-6);
    json_decref(rb);
    json_decref(rd);

    /* token arrays give what the same ids as text give */
    char body[512];
    int len = snprintf(body, sizeof body, "{\"input\":[");
    CHECK_EQ_INT(tok_encode(e.t, "the cat", 7, TOK_ADD_SPECIAL, ids, 64, &n1), 0);
    for (size_t k = 0; k < n1; k++)
        len += snprintf(body + len, sizeof body - (size_t)len, "%s%d", k ? "," : "", ids[k]);
    snprintf(body + len, sizeof body - (size_t)len, "]}");
    CHECK_EQ_INT(run(&e, body, &rd, &err), 0);
    for (size_t k = 0; k < 64; k++)
        CHECK(vec_at(rd, 0, k) == vec_at(r, 0, k));
    json_decref(rd);
    json_decref(r);
    env_close(&e);
}

TEST(embed_req_refuses_bad_input)
{
    struct env e;
    env_open(&e);
    expect_error(&e, "{\"model\":\"m\"}", "input", "missing_required_parameter");
    expect_error(&e, "{\"input\":\"\"}", "input", "invalid_value");
    expect_error(&e, "{\"input\":[\"a\",\"\"]}", "input", "invalid_value");
    expect_error(&e, "{\"input\":[]}", "input", "invalid_value");
    expect_error(&e, "{\"input\":[[]]}", "input", "invalid_value");
    expect_error(&e, "{\"input\":[\"a\",[1,2]]}", "input", "invalid_type");
    expect_error(&e, "{\"input\":[1,\"a\"]}", "input", "invalid_type");
    expect_error(&e, "{\"input\":[[1],[2.5]]}", "input", "invalid_type");
    expect_error(&e, "{\"input\":42}", "input", "invalid_type");
    expect_error(&e, "{\"input\":[300]}", "input", "invalid_value"); /* n_vocab 300 */
    expect_error(&e, "{\"input\":[-1]}", "input", "invalid_value");
    expect_error(&e, "{\"input\":\"a\",\"dimensions\":0}", "dimensions", "invalid_value");
    expect_error(&e, "{\"input\":\"a\",\"dimensions\":65}", "dimensions", "invalid_value");
    expect_error(&e, "{\"input\":\"a\",\"dimensions\":\"8\"}", "dimensions", "invalid_type");
    expect_error(&e, "{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format",
                 "invalid_value");
    /* longer than the context (32 tokens): refused, naming the input */
    char body[1024];
    int len = snprintf(body, sizeof body, "{\"input\":[[1],[");
    for (int k = 0; k < 33; k++)
        len += snprintf(body + len, sizeof body - (size_t)len, "%s1", k ? "," : "");
    snprintf(body + len, sizeof body - (size_t)len, "]]}"); /* a token array of 33 */
    expect_error(&e, body, "input", "context_length_exceeded");
    expect_error(&e, "{\"input\":\"the cat sat on the mat. the dog ate the cat's hat. then the rain "
                     "came in and the cat ran to the house. there is a theory zz qq xx\"}",
                 "input", "context_length_exceeded");
    /* exactly the context is fine */
    json_t *r;
    struct problem err;
    CHECK_EQ_INT(run(&e, "{\"input\":[[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]}",
                     &r, &err), 0);
    json_decref(r);
    CHECK_EQ_INT(kv_cache_n_used(model_ctx_kv(e.c)), 0);
    env_close(&e);
}
