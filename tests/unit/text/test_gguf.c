/* Unit tests: worker/gguf - the loader against gguf-py's reading of the same
 * files (tiny_v3/tiny_v2.gguf written by gguf-py, and the default model),
 * the typed getters, and malformed files: every one must give an error with a
 * sensible message, none may crash (each test runs under ASan+UBSan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/js.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "text/gguf.h"

#define TINY_V3 "tests/fixtures/gguf/tiny_v3.gguf"
#define TINY_V2 "tests/fixtures/gguf/tiny_v2.gguf"
#define MODEL_PATH ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"

static json_t *load_json(const char *path)
{
    size_t len;
    unsigned char *p = th_slurp(path, &len);
    if (!p)
        return NULL;
    json_t *j = NULL;
    struct js_limits lim = {8u << 20, 16, 0};
    if (js_parse((const char *)p, len, &lim, &j, NULL))
        j = NULL;
    free(p);
    return j;
}

static int str_eq(struct gguf_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = NULL;
    return js_get_str(o, key, &s) ? NULL : s;
}

/* Check every metadata key of the manifest against the loader's getters. */
static void check_kvs(const struct gguf *g, const json_t *kvs)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)kvs, key, v) {
        long idx = gguf_kv_find(g, key);
        if (idx < 0)
            th_fail(__FILE__, __LINE__, key, "key missing");
        const char *type = jstr(v, "type");
        CHECK_EQ_STR(gguf_vtype_name(gguf_kv_type(g, (size_t)idx)), type);
        CHECK_EQ_STR(gguf_kv_key(g, (size_t)idx), key);
        if (strcmp(type, "STRING") == 0) {
            struct gguf_str s;
            CHECK_EQ_INT(gguf_get_str(g, key, &s), 0);
            if (!str_eq(s, jstr(v, "value")))
                th_fail(__FILE__, __LINE__, key, "string differs");
        } else if (strcmp(type, "FLOAT32") == 0 || strcmp(type, "FLOAT64") == 0) {
            float f;
            CHECK_EQ_INT(gguf_get_f32(g, key, &f), 0);
            unsigned long long bits = strtoull(jstr(v, "bits"), NULL, 10);
            if (strcmp(type, "FLOAT32") == 0) {
                uint32_t fb;
                memcpy(&fb, &f, 4);
                CHECK_EQ_INT(fb, bits);
            } else {
                double d;
                memcpy(&d, &bits, 8);
                CHECK(f == (float)d);
            }
        } else if (strcmp(type, "BOOL") == 0) {
            int b;
            CHECK_EQ_INT(gguf_get_bool(g, key, &b), 0);
            CHECK_EQ_INT(b, strtoll(jstr(v, "value"), NULL, 10));
        } else if (strcmp(type, "ARRAY") == 0) {
            struct gguf_arr a;
            CHECK_EQ_INT(gguf_get_arr(g, key, &a), 0);
            int64_t n = 0;
            CHECK_EQ_INT(js_get_int(v, "n", &n), 0);
            CHECK_EQ_INT(a.n, n);
            CHECK_EQ_STR(gguf_vtype_name(a.elem_type), jstr(v, "elem"));
            json_t *items;
            CHECK_EQ_INT(js_get_arr(v, "items", &items), 0);
            for (size_t i = 0; i <= json_array_size(items); i++) {
                /* the listed first items, then the last element */
                const json_t *it = i < json_array_size(items) ? json_array_get(items, i) : json_object_get(v, "last");
                uint64_t at = i < json_array_size(items) ? i : a.n - 1;
                if (a.n == 0)
                    break;
                const char *want = json_string_value(it);
                CHECK(want != NULL);
                if (a.elem_type == GGUF_VT_STRING) {
                    struct gguf_str s;
                    CHECK_EQ_INT(gguf_arr_str(&a, at, &s), 0);
                    if (!str_eq(s, want))
                        th_fail(__FILE__, __LINE__, key, "element %llu differs", (unsigned long long)at);
                } else if (a.elem_type == GGUF_VT_FLOAT32) {
                    float f;
                    uint32_t fb;
                    CHECK_EQ_INT(gguf_arr_f32(&a, at, &f), 0);
                    memcpy(&fb, &f, 4);
                    CHECK_EQ_INT(fb, strtoull(want, NULL, 10));
                } else if (a.elem_type == GGUF_VT_BOOL) {
                    int b;
                    CHECK_EQ_INT(gguf_arr_bool(&a, at, &b), 0);
                    CHECK_EQ_INT(b, strtoll(want, NULL, 10));
                } else if (a.elem_type == GGUF_VT_UINT64) {
                    int64_t x;
                    unsigned long long w = strtoull(want, NULL, 10);
                    int rc = gguf_arr_i64(&a, at, &x);
                    if (w > INT64_MAX)
                        CHECK_EQ_INT(rc, ERR_TOOBIG);
                    else
                        CHECK(rc == 0 && (unsigned long long)x == w);
                } else {
                    int64_t x;
                    CHECK_EQ_INT(gguf_arr_i64(&a, at, &x), 0);
                    CHECK_EQ_INT(x, strtoll(want, NULL, 10));
                }
            }
        } else if (strcmp(type, "UINT64") == 0) {
            uint64_t u;
            CHECK_EQ_INT(gguf_get_u64(g, key, &u), 0);
            CHECK(u == strtoull(jstr(v, "value"), NULL, 10));
        } else {
            int64_t x;
            CHECK_EQ_INT(gguf_get_i64(g, key, &x), 0);
            CHECK_EQ_INT(x, strtoll(jstr(v, "value"), NULL, 10));
        }
    }
}

/* Check the whole tensor table, then the listed rows, bit for bit. */
static void check_tensors(const struct gguf *g, const json_t *man, const char *f32_path)
{
    json_t *ts, *rows;
    CHECK_EQ_INT(js_get_arr(man, "tensors", &ts), 0);
    CHECK_EQ_INT(gguf_tensor_count(g), json_array_size(ts));
    for (size_t i = 0; i < json_array_size(ts); i++) {
        const json_t *jt = json_array_get(ts, i);
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        CHECK(t != NULL);
        CHECK_EQ_STR(t->name, jstr(jt, "name"));
        CHECK(gguf_tensor_find(g, t->name) == t);
        CHECK_EQ_STR(ggml_type_name(t->type), jstr(jt, "type"));
        int64_t x;
        CHECK_EQ_INT(js_get_int(jt, "n_bytes", &x), 0);
        CHECK_EQ_INT(t->size_bytes, x);
        CHECK_EQ_INT(js_get_int(jt, "offset", &x), 0);
        CHECK_EQ_INT(t->offset, x);
        CHECK((const unsigned char *)t->data - (const unsigned char *)gguf_tensor_at(g, 0)->data ==
              (long long)t->offset - (long long)gguf_tensor_at(g, 0)->offset);
        const json_t *ne = json_object_get(jt, "ne");
        CHECK_EQ_INT(t->n_dims, json_array_size(ne));
        int64_t prod = 1;
        for (size_t d = 0; d < 4; d++) {
            int64_t want = d < json_array_size(ne) ? json_integer_value(json_array_get(ne, d)) : 1;
            CHECK_EQ_INT(t->ne[d], want);
            prod *= want;
        }
        CHECK_EQ_INT(t->n_elements, prod);
    }
    CHECK(gguf_tensor_at(g, json_array_size(ts)) == NULL);
    CHECK(gguf_tensor_find(g, "no.such.tensor") == NULL);

    size_t flen;
    unsigned char *want = th_slurp(f32_path, &flen);
    CHECK(want != NULL);
    CHECK_EQ_INT(js_get_arr(man, "rows", &rows), 0);
    CHECK(json_array_size(rows) > 0);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        int64_t row, off, n;
        CHECK(!js_get_int(r, "row", &row) && !js_get_int(r, "f32_offset", &off) && !js_get_int(r, "n", &n));
        const struct gguf_tensor *t = gguf_tensor_find(g, jstr(r, "tensor"));
        CHECK(t != NULL);
        CHECK_EQ_INT(t->ne[0], n);
        CHECK((size_t)(off + n) * 4 <= flen);
        int64_t row_bytes;
        CHECK_EQ_INT(ggml_type_row_bytes(t->type, n, &row_bytes), 0);
        float *y = malloc((size_t)n * sizeof *y);
        CHECK(y != NULL);
        CHECK_EQ_INT(kn_dequant_row(t->type, (const unsigned char *)t->data + row * row_bytes, y, n), 0);
        int same = memcmp(y, want + off * 4, (size_t)n * 4) == 0;
        free(y);
        if (!same)
            th_fail(__FILE__, __LINE__, t->name, "row %lld differs from gguf-py", (long long)row);
    }
    free(want);
}

static void check_against_manifest(const char *gguf_path, const char *json_path, const char *f32_path,
                                   uint32_t version)
{
    json_t *man = load_json(json_path);
    CHECK(man != NULL);
    struct gguf *g = NULL;
    char err[256];
    int rc = gguf_open(gguf_path, &g, err, sizeof err);
    if (rc)
        th_fail(__FILE__, __LINE__, "gguf_open", "%s: %s", gguf_path, err);
    int64_t x;
    CHECK_EQ_INT(gguf_version(g), version);
    CHECK_EQ_INT(js_get_int(man, "n_kv", &x), 0);
    CHECK_EQ_INT(gguf_kv_count(g), x);
    CHECK_EQ_INT(js_get_int(man, "alignment", &x), 0);
    CHECK_EQ_INT(gguf_alignment(g), x);
    CHECK_EQ_INT(js_get_int(man, "data_offset", &x), 0);
    CHECK_EQ_INT(gguf_data_offset(g), x);
    CHECK_EQ_STR(gguf_architecture(g), "llama");
    check_kvs(g, json_object_get(man, "kv"));
    check_tensors(g, man, f32_path);
    /* data pointers keep the file's alignment (the mapping is page-aligned) */
    for (size_t i = 0; i < gguf_tensor_count(g); i++)
        CHECK((uintptr_t)gguf_tensor_at(g, i)->data % gguf_alignment(g) == 0);
    gguf_free(g);
    json_decref(man);
}

TEST(gguf_tiny_v3_matches_ggufpy)
{
    check_against_manifest(TINY_V3, "tests/fixtures/gguf/tiny.json", "tests/fixtures/gguf/tiny.f32", 3);
}

TEST(gguf_tiny_v2_matches_ggufpy)
{
    check_against_manifest(TINY_V2, "tests/fixtures/gguf/tiny.json", "tests/fixtures/gguf/tiny.f32", 2);
}

TEST(gguf_default_model_matches_ggufpy)
{
    struct stat st;
    if (stat(MODEL_PATH, &st) != 0) {
        char out[1024];
        char *argv[] = {"scripts/fetch-model", NULL};
        if (th_run(argv, out, sizeof out, 50000) != 0 || stat(MODEL_PATH, &st) != 0)
            SKIP("default model not available (scripts/fetch-model failed: offline?)");
    }
    check_against_manifest(MODEL_PATH, "tests/fixtures/gguf/smollm2.json", "tests/fixtures/gguf/smollm2.f32", 3);

    /* facts about the model that the engine relies on */
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open(MODEL_PATH, &g, err, sizeof err), 0);
    uint32_t u;
    float f;
    CHECK_EQ_INT(gguf_tensor_count(g), 272);
    CHECK_EQ_INT(gguf_get_u32(g, "llama.block_count", &u), 0);
    CHECK_EQ_INT(u, 30);
    CHECK_EQ_INT(gguf_get_u32(g, "llama.embedding_length", &u), 0);
    CHECK_EQ_INT(u, 576);
    CHECK_EQ_INT(gguf_get_f32(g, "llama.rope.freq_base", &f), 0);
    CHECK(f == 100000.0f);
    int hist[64] = {0};
    for (size_t i = 0; i < gguf_tensor_count(g); i++)
        hist[gguf_tensor_at(g, i)->type]++;
    CHECK_EQ_INT(hist[GGML_TYPE_Q4_1], 210);
    CHECK_EQ_INT(hist[GGML_TYPE_F32], 61);
    CHECK_EQ_INT(hist[GGML_TYPE_Q8_0], 1);
    struct gguf_arr toks;
    struct gguf_str s;
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    CHECK_EQ_INT(toks.n, 49152);
    CHECK_EQ_INT(gguf_arr_str(&toks, 2, &s), 0);
    CHECK(str_eq(s, "<|im_end|>"));
    gguf_free(g);
}

TEST(gguf_typed_getters_widen_by_value)
{
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open(TINY_V3, &g, err, sizeof err), 0);
    uint32_t u32 = 7;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    int b;
    struct gguf_str s;
    struct gguf_arr a;
    CHECK_EQ_INT(gguf_get_u32(g, "test.u8", &u32), 0);
    CHECK_EQ_INT(u32, 200);
    CHECK_EQ_INT(gguf_get_i32(g, "test.u16", &i32), 0);
    CHECK_EQ_INT(i32, 60000);
    CHECK_EQ_INT(gguf_get_i32(g, "test.i8", &i32), 0);
    CHECK_EQ_INT(i32, -100);
    CHECK_EQ_INT(gguf_get_u32(g, "test.i8", &u32), ERR_TOOBIG);     /* negative */
    CHECK_EQ_INT(gguf_get_i32(g, "test.u32", &i32), ERR_TOOBIG);    /* 4e9 */
    CHECK_EQ_INT(gguf_get_u32(g, "test.u32", &u32), 0);
    CHECK_EQ_INT(u32, 4000000000u);
    CHECK_EQ_INT(gguf_get_i64(g, "test.u64", &i64), ERR_TOOBIG);
    CHECK_EQ_INT(gguf_get_u64(g, "test.u64", &u64), 0);
    CHECK(u64 == UINT64_MAX);
    CHECK_EQ_INT(gguf_get_i64(g, "test.i64", &i64), 0);
    CHECK(i64 == INT64_MIN);
    CHECK_EQ_INT(gguf_get_u64(g, "test.i64", &u64), ERR_TOOBIG);
    CHECK_EQ_INT(gguf_get_i32(g, "test.i64", &i32), ERR_TOOBIG);
    CHECK_EQ_INT(gguf_get_f32(g, "test.f64", &f), 0);
    CHECK(f == (float)1e100); /* inf: rounded to float */
    CHECK_EQ_INT(gguf_get_f32(g, "test.u32", &f), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_u32(g, "test.f32", &u32), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_bool(g, "test.u8", &b), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_str(g, "test.arr_str", &s), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_arr(g, "test.str", &a), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_u32(g, "no.such.key", &u32), ERR_NOTFOUND);
    CHECK_EQ_INT(u32, 4000000000u); /* untouched on error */
    CHECK_EQ_INT(gguf_kv_find(g, "no.such.key"), -1);
    CHECK_EQ_INT(gguf_get_arr(g, "test.arr_i32", &a), 0);
    CHECK_EQ_INT(gguf_arr_i64(&a, 4, &i64), ERR_NOTFOUND);
    CHECK_EQ_INT(gguf_arr_str(&a, 0, &s), ERR_INVAL);
    CHECK_EQ_INT(gguf_arr_f32(&a, 0, &f), ERR_INVAL);
    CHECK_EQ_INT(gguf_get_arr(g, "test.arr_str", &a), 0);
    CHECK_EQ_INT(gguf_arr_str(&a, 1, &s), 0);
    CHECK_EQ_INT(s.len, 0);
    CHECK_EQ_INT(gguf_arr_i64(&a, 0, &i64), ERR_INVAL);
    gguf_free(g);
    gguf_free(NULL);
}

/* ---- malformed files ----------------------------------------------------------- */

/* Open size bytes; expect failure with code rc (0: any error) and a message
 * containing want. */
static void expect_fail(const void *data, size_t size, int rc_want, const char *want, int line)
{
    struct gguf *g = (struct gguf *)(uintptr_t)0x1; /* must stay untouched */
    char err[256] = "unset";
    int rc = gguf_open_mem(data, size, &g, err, sizeof err);
    if (rc == 0)
        th_fail(__FILE__, line, want, "opened, expected an error");
    if (g != (struct gguf *)(uintptr_t)0x1)
        th_fail(__FILE__, line, want, "*out written on error");
    if (rc_want && rc != rc_want)
        th_fail(__FILE__, line, want, "error %s (%s), expected %s", err_name(rc), err, err_name(rc_want));
    if (!strstr(err, want))
        th_fail(__FILE__, line, want, "message \"%s\"", err);
}
#define EXPECT_FAIL(b, rc, want) expect_fail((b)->data, (b)->len, rc, want, __LINE__)

static void w_u32(struct buf *b, uint32_t v) { buf_append(b, &v, 4); }
static void w_u64(struct buf *b, uint64_t v) { buf_append(b, &v, 8); }
static void w_str(struct buf *b, const char *s)
{
    w_u64(b, strlen(s));
    buf_append(b, s, strlen(s));
}

struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
};

/* A GGUF with one string KV (general.architecture), the given extra KV bytes
 * (n_extra_kv records, already encoded), the tensor infos, padding to 32 and
 * data_bytes zero bytes of data. */
static void build(struct buf *b, uint32_t version, const struct tinfo *ts, size_t n_t, const void *extra_kv,
                  size_t extra_len, uint64_t n_extra_kv, size_t data_bytes)
{
    buf_init(b, 1u << 24);
    buf_append(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_t);
    w_u64(b, 1 + n_extra_kv);
    w_str(b, "general.architecture");
    w_u32(b, GGUF_VT_STRING);
    w_str(b, "llama");
    if (extra_len)
        buf_append(b, extra_kv, extra_len);
    for (size_t i = 0; i < n_t; i++) {
        w_str(b, ts[i].name);
        w_u32(b, ts[i].n_dims);
        for (uint32_t d = 0; d < ts[i].n_dims; d++)
            w_u64(b, ts[i].ne[d]);
        w_u32(b, ts[i].type);
        w_u64(b, ts[i].offset);
    }
    while (b->len % 32)
        buf_append_byte(b, 0);
    for (size_t i = 0; i < data_bytes; i++)
        buf_append_byte(b, 0);
}

static const struct tinfo two_tensors[] = {
    {"blk.0.attn_q.weight", 2, {32, 2}, GGML_TYPE_Q8_0, 0},  /* 68 bytes */
    {"output_norm.weight", 1, {8}, GGML_TYPE_F32, 96},       /* 32 bytes */
};

TEST(gguf_hand_built_file_opens)
{
    struct buf b;
    build(&b, 3, two_tensors, 2, NULL, 0, 0, 128);
    struct gguf *g;
    char err[256];
    int rc = gguf_open_mem(b.data, b.len, &g, err, sizeof err);
    if (rc)
        th_fail(__FILE__, __LINE__, "open", "%s", err);
    CHECK_EQ_INT(gguf_tensor_count(g), 2);
    const struct gguf_tensor *t = gguf_tensor_find(g, "output_norm.weight");
    CHECK(t && t->size_bytes == 32 && t->offset == gguf_data_offset(g) + 96);
    CHECK_EQ_INT(gguf_tensor_find(g, "blk.0.attn_q.weight")->size_bytes, 68);
    gguf_free(g);
    buf_release(&b);

    /* vocab-only file: no tensors, ends right after the metadata */
    build(&b, 2, NULL, 0, NULL, 0, 0, 0);
    while (b.len > 0 && b.data[b.len - 1] == 0 && b.len > 24 + 8 + 20 + 4 + 8 + 5)
        b.len--;
    CHECK_EQ_INT(gguf_open_mem(b.data, b.len, &g, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_tensor_count(g), 0);
    CHECK(gguf_tensor_find(g, "x") == NULL);
    gguf_free(g);
    buf_release(&b);
}

TEST(gguf_rejects_bad_header)
{
    struct buf b;
    build(&b, 3, two_tensors, 2, NULL, 0, 0, 128);
    b.data[0] = 'X';
    EXPECT_FAIL(&b, ERR_PARSE, "bad magic");
    buf_release(&b);
    build(&b, 4, two_tensors, 2, NULL, 0, 0, 128);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "unsupported GGUF version 4");
    buf_release(&b);
    build(&b, 1, two_tensors, 2, NULL, 0, 0, 128);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "unsupported GGUF version 1");
    buf_release(&b);
    build(&b, 0x03000000, two_tensors, 2, NULL, 0, 0, 128);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "big-endian");
    buf_release(&b);
    expect_fail("", 0, ERR_PARSE, "truncated file (magic at offset 0)", __LINE__);
    expect_fail("GGUF\3\0\0", 7, ERR_PARSE, "truncated file (version at offset 4)", __LINE__);
}

TEST(gguf_rejects_absurd_counts)
{
    struct buf b;
    build(&b, 3, two_tensors, 2, NULL, 0, 0, 128);
    uint64_t big = UINT64_MAX;
    memcpy(b.data + 8, &big, 8);
    EXPECT_FAIL(&b, ERR_TOOBIG, "tensor count 18446744073709551615 exceeds the limit");
    big = GGUF_MAX_TENSORS; /* under the cap, but cannot fit in the file */
    memcpy(b.data + 8, &big, 8);
    EXPECT_FAIL(&b, ERR_PARSE, "truncated file (65536 tensor infos cannot fit");
    big = 2;
    memcpy(b.data + 8, &big, 8);
    big = (uint64_t)1 << 40;
    memcpy(b.data + 16, &big, 8);
    EXPECT_FAIL(&b, ERR_TOOBIG, "metadata count 1099511627776 exceeds the limit");
    big = 1000;
    memcpy(b.data + 16, &big, 8);
    EXPECT_FAIL(&b, ERR_PARSE, "truncated file (1000 metadata records cannot fit");
    buf_release(&b);
}

TEST(gguf_rejects_bad_strings)
{
    struct buf b;
    build(&b, 3, two_tensors, 2, NULL, 0, 0, 128);
    uint64_t len = UINT64_MAX; /* key length: would overflow off + len */
    memcpy(b.data + 24, &len, 8);
    EXPECT_FAIL(&b, ERR_TOOBIG, "string of 18446744073709551615 bytes exceeds the limit");
    len = 60000; /* under the key cap, past the end */
    memcpy(b.data + 24, &len, 8);
    EXPECT_FAIL(&b, ERR_PARSE, "truncated file (metadata key 0 at offset 32)");
    len = 0;
    memcpy(b.data + 24, &len, 8);
    EXPECT_FAIL(&b, ERR_PARSE, "empty key");
    buf_release(&b);

    /* string value length 2^64 - 1 */
    struct buf kv;
    buf_init(&kv, 4096);
    w_str(&kv, "test.s");
    w_u32(&kv, GGUF_VT_STRING);
    w_u64(&kv, UINT64_MAX - 3);
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_TOOBIG, "string of 18446744073709551612 bytes");
    buf_release(&b);
    buf_release(&kv);

    /* string array: element count beyond what the file could hold */
    buf_init(&kv, 4096);
    w_str(&kv, "tokenizer.ggml.tokens");
    w_u32(&kv, GGUF_VT_ARRAY);
    w_u32(&kv, GGUF_VT_STRING);
    w_u64(&kv, 1000000);
    w_str(&kv, "a");
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_PARSE, "array of 1000000 strings");
    buf_release(&b);
    buf_release(&kv);

    /* array count over the cap */
    buf_init(&kv, 4096);
    w_str(&kv, "a.b");
    w_u32(&kv, GGUF_VT_ARRAY);
    w_u32(&kv, GGUF_VT_UINT8);
    w_u64(&kv, UINT64_MAX);
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_TOOBIG, "array of 18446744073709551615 elements in metadata key 'a.b'");
    buf_release(&b);
    buf_release(&kv);
}

TEST(gguf_rejects_bad_values)
{
    struct buf b, kv;
    struct { uint32_t type, elem; uint64_t raw; const char *msg; int rc; } cases[] = {
        {13, 0, 0, "unknown value type 13 in metadata key 'k.x'", ERR_PARSE},
        {GGUF_VT_BOOL, 0, 2, "invalid bool 2 in metadata key 'k.x'", ERR_PARSE},
        {GGUF_VT_ARRAY, GGUF_VT_ARRAY, 1, "nested array in metadata key 'k.x'", ERR_UNSUPPORTED},
        {GGUF_VT_ARRAY, 77, 1, "unknown array element type 77", ERR_PARSE},
        {GGUF_VT_ARRAY, GGUF_VT_BOOL, 1, "invalid bool", ERR_PARSE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        buf_init(&kv, 4096);
        w_str(&kv, "k.x");
        w_u32(&kv, cases[i].type);
        if (cases[i].type == GGUF_VT_ARRAY) {
            w_u32(&kv, cases[i].elem);
            w_u64(&kv, cases[i].raw);
            buf_append_byte(&kv, 7); /* one element byte (a bad bool for BOOL) */
        } else {
            buf_append_byte(&kv, (char)cases[i].raw);
        }
        build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
        expect_fail(b.data, b.len, cases[i].rc, cases[i].msg, __LINE__);
        buf_release(&b);
        buf_release(&kv);
    }

    /* duplicate key */
    buf_init(&kv, 4096);
    w_str(&kv, "general.architecture");
    w_u32(&kv, GGUF_VT_UINT8);
    buf_append_byte(&kv, 1);
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_PARSE, "duplicate metadata key 'general.architecture' (keys 0 and 1)");
    buf_release(&b);
    buf_release(&kv);

    /* general.alignment: wrong type, not a power of two */
    buf_init(&kv, 4096);
    w_str(&kv, "general.alignment");
    w_u32(&kv, GGUF_VT_UINT64);
    w_u64(&kv, 32);
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_PARSE, "general.alignment has type UINT64, expected UINT32");
    buf_release(&b);
    buf_release(&kv);
    buf_init(&kv, 4096);
    w_str(&kv, "general.alignment");
    w_u32(&kv, GGUF_VT_UINT32);
    w_u32(&kv, 48);
    build(&b, 3, NULL, 0, kv.data, kv.len, 1, 0);
    EXPECT_FAIL(&b, ERR_PARSE, "general.alignment 48 is not a power of two");
    buf_release(&b);
    buf_release(&kv);
}

static void expect_tensor_fail(const struct tinfo *ts, size_t n, size_t data_bytes, int rc, const char *msg,
                               int line)
{
    struct buf b;
    build(&b, 3, ts, n, NULL, 0, 0, data_bytes);
    expect_fail(b.data, b.len, rc, msg, line);
    buf_release(&b);
}

TEST(gguf_rejects_bad_tensors)
{
    struct tinfo t[2];
    memcpy(t, two_tensors, sizeof t);
    /* fine as built */
    expect_tensor_fail(t, 2, 0, ERR_PARSE, "tensor blk.0.attn_q.weight data [", __LINE__); /* no data bytes */
    expect_tensor_fail(t, 2, 127, ERR_PARSE, "tensor output_norm.weight data [", __LINE__);

    t[1].offset = UINT64_MAX - 31; /* aligned, wraps around */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor output_norm.weight data [", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[1].offset = 64 + 8; /* misaligned */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor output_norm.weight data offset 72 is not a multiple of the alignment 32", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[1].offset = 64; /* q8_0 tensor is [0, 68) */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor blk.0.attn_q.weight data [", __LINE__);
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "overlaps tensor output_norm.weight", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[1].name = "blk.0.attn_q.weight";
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "duplicate tensor name blk.0.attn_q.weight (tensor infos 0 and 1)", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[0].n_dims = 5;
    t[0].ne[2] = t[0].ne[3] = t[0].ne[4] = 1;
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor blk.0.attn_q.weight has 5 dimensions (max 4)", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[0].ne[1] = (uint64_t)1 << 60; /* 32 * 2^60 overflows int64 */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor blk.0.attn_q.weight: element count overflows int64", __LINE__);
    t[0].ne[1] = (uint64_t)1 << 63;
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "does not fit in int64", __LINE__);
    t[0].ne[1] = (uint64_t)1 << 57; /* 2^62 elements fit; 2^57 * 34 bytes fits; outside the file */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "outside the file", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[1].type = GGML_TYPE_F32;
    t[1].ne[0] = ((uint64_t)1 << 62) + 8; /* 4 bytes each: the byte size overflows */
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "byte size overflows", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[0].ne[0] = 48;
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "ne[0] = 48 is not a multiple of the Q8_0 block size 32", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[0].name = "blk.3.ffn_down.weight";
    t[0].type = 11;
    t[0].ne[0] = 256;
    expect_tensor_fail(t, 2, 128, ERR_UNSUPPORTED, "unsupported tensor type Q3_K in blk.3.ffn_down.weight", __LINE__);
    t[0].type = 4;
    expect_tensor_fail(t, 2, 128, ERR_UNSUPPORTED, "unknown tensor type id 4 in blk.3.ffn_down.weight", __LINE__);
    t[0].type = 0xFFFFFFFFu;
    expect_tensor_fail(t, 2, 128, ERR_UNSUPPORTED, "unknown tensor type id 4294967295", __LINE__);
    memcpy(t, two_tensors, sizeof t);
    t[0].name = "";
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "tensor info 0 has a name of 0 bytes", __LINE__);
    t[0].name = "a.name.that.is.way.too.long.for.ggml.which.allows.sixty.three.bytes";
    expect_tensor_fail(t, 2, 128, ERR_PARSE, "has a name of 67 bytes (must be 1..63)", __LINE__);
}

/* Every prefix of a real (gguf-py written) file is an error, never a crash,
 * up to the end of the last tensor's data. */
TEST(gguf_truncation_at_every_offset)
{
    size_t len;
    unsigned char *full = th_slurp(TINY_V3, &len);
    CHECK(full != NULL);
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(full, len, &g, err, sizeof err), 0);
    uint64_t need = 0;
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->offset + t->size_bytes > need)
            need = t->offset + t->size_bytes;
    }
    uint64_t data_start = gguf_data_offset(g);
    gguf_free(g);
    for (size_t n = 0; n < len; n++) {
        /* a fresh heap copy of exactly n bytes, so ASan sees any overread */
        unsigned char *p = malloc(n ? n : 1);
        CHECK(p != NULL);
        memcpy(p, full, n);
        err[0] = '\0';
        int rc = gguf_open_mem(p, n, &g, err, sizeof err);
        if (n < need) {
            if (rc == 0)
                th_fail(__FILE__, __LINE__, "truncated", "prefix of %zu bytes opened", n);
            CHECK(err[0] != '\0');
            if (n < data_start && !strstr(err, "truncated file ("))
                th_fail(__FILE__, __LINE__, "truncated", "prefix %zu: \"%s\"", n, err);
        } else if (rc == 0) {
            gguf_free(g);
        }
        free(p);
    }
    free(full);
}

/* Corrupt each header/metadata byte of the tiny file in turn: open either
 * works or fails with a message, never crashes. */
TEST(gguf_byte_flips_never_crash)
{
    size_t len;
    unsigned char *full = th_slurp(TINY_V3, &len);
    CHECK(full != NULL);
    size_t upto = len < 1500 ? len : 1500; /* the header and tensor infos */
    static const unsigned char vals[] = {0x00, 0xFF, 0x7F, 0x80, 0x05};
    for (size_t i = 0; i < upto; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            unsigned char *p = malloc(len);
            CHECK(p != NULL);
            memcpy(p, full, len);
            p[i] = vals[k];
            struct gguf *g = NULL;
            char err[256] = "";
            int rc = gguf_open_mem(p, len, &g, err, sizeof err);
            if (rc == 0)
                gguf_free(g);
            else
                CHECK(err[0] != '\0');
            free(p);
        }
    }
    free(full);
}

TEST(gguf_open_errors)
{
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open("tests/fixtures/gguf/no-such-file.gguf", &g, err, sizeof err), ERR_IO);
    CHECK(strstr(err, "cannot open") != NULL);
    CHECK_EQ_INT(gguf_open("tests/fixtures/gguf", &g, err, sizeof err), ERR_IO);
    CHECK(strstr(err, "not a regular file") != NULL);
    CHECK_EQ_INT(gguf_open("tests/fixtures/gguf/tiny.json", &g, err, sizeof err), ERR_PARSE);
    CHECK(strstr(err, "bad magic") != NULL);
    /* no error buffer is fine */
    CHECK_EQ_INT(gguf_open("tests/fixtures/gguf/tiny.json", &g, NULL, 0), ERR_PARSE);
}

/* The fuzz seeds are valid files (so the fuzzer starts from deep paths). */
TEST(gguf_fuzz_seeds_open)
{
    static const char *const seeds[] = {"tests/fuzz/corpus/gguf/two-tensors.gguf",
                                        "tests/fuzz/corpus/gguf/vocab-only-v2.gguf",
                                        "tests/fuzz/corpus/gguf/tiny-all-types.gguf"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        struct gguf *g;
        char err[256];
        int rc = gguf_open(seeds[i], &g, err, sizeof err);
        if (rc)
            th_fail(__FILE__, __LINE__, seeds[i], "%s", err);
        CHECK_EQ_STR(gguf_architecture(g), "llama");
        gguf_free(g);
    }
}
