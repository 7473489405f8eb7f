/* Unit tests: strict JSON parsing with limits, typed getters, escaping. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "tests/th.h"

static int parse(const char *s, const struct js_limits *lim, json_t **out, struct js_error *e)
{
    return js_parse(s, strlen(s), lim, out, e);
}

TEST(js_parse_valid_object)
{
    struct js_limits lim = JS_LIMITS_DEFAULT;
    json_t *v = NULL;
    struct js_error e;
    CHECK_EQ_INT(parse("{\"a\":1,\"b\":[true,null,\"x\"],\"c\":2.5}", &lim, &v, &e), 0);
    int64_t i;
    double d;
    const char *s;
    json_t *arr;
    CHECK_EQ_INT(js_get_int(v, "a", &i), 0);
    CHECK_EQ_INT(i, 1);
    CHECK_EQ_INT(js_get_num(v, "c", &d), 0);
    CHECK_NEAR(d, 2.5, 0);
    CHECK_EQ_INT(js_get_num(v, "a", &d), 0); /* ints are numbers too */
    CHECK_EQ_INT(js_get_arr(v, "b", &arr), 0);
    CHECK_EQ_INT(json_array_size(arr), 3);
    CHECK_EQ_INT(js_get_str(v, "a", &s), ERR_INVAL);   /* wrong type */
    CHECK_EQ_INT(js_get_str(v, "zz", &s), ERR_NOTFOUND);
    CHECK_EQ_INT(js_get_int(v, "c", &i), ERR_INVAL);   /* 2.5 is not an integer */
    json_decref(v);
}

TEST(js_parse_null_counts_as_missing)
{
    struct js_limits lim = JS_LIMITS_DEFAULT;
    json_t *v;
    CHECK_EQ_INT(parse("{\"k\":null}", &lim, &v, NULL), 0);
    const char *s;
    int b;
    CHECK_EQ_INT(js_get_str(v, "k", &s), ERR_NOTFOUND);
    CHECK_EQ_INT(js_get_bool(v, "k", &b), ERR_NOTFOUND);
    json_decref(v);
}

TEST(js_parse_rejects_duplicates_nul_and_bad_utf8)
{
    struct js_limits lim = JS_LIMITS_DEFAULT;
    json_t *v = NULL;
    struct js_error e;
    CHECK_EQ_INT(parse("{\"a\":1,\"a\":2}", &lim, &v, &e), ERR_PARSE);
    CHECK(strstr(e.message, "duplicate") != NULL);
    CHECK_EQ_INT(parse("{\"a\":\"x\\u0000y\"}", &lim, &v, &e), ERR_PARSE);
    CHECK_EQ_INT(parse("{\"a\":\"\xff\xfe\"}", &lim, &v, &e), ERR_PARSE);
    CHECK_EQ_INT(parse("{\"a\":1} trailing", &lim, &v, &e), ERR_PARSE);
    CHECK_EQ_INT(parse("\"just a string\"", &lim, &v, &e), ERR_PARSE); /* objects/arrays only */
    lim.any_value = 1;
    CHECK_EQ_INT(parse("\"just a string\"", &lim, &v, &e), 0);
    json_decref(v);
}

TEST(js_parse_reports_line_and_column)
{
    struct js_limits lim = JS_LIMITS_DEFAULT;
    json_t *v;
    struct js_error e;
    CHECK_EQ_INT(parse("{\n  \"a\": 1,\n  \"b\": ]\n}", &lim, &v, &e), ERR_PARSE);
    CHECK_EQ_INT(e.line, 3);
    CHECK(e.column > 0);
}

TEST(js_parse_depth_limit_before_parsing)
{
    struct js_limits lim = {1u << 20, 32, 0};
    char deep[200];
    json_t *v = NULL;
    struct js_error e;
    /* 32 levels: fine */
    memset(deep, 0, sizeof deep);
    for (int i = 0; i < 32; i++)
        deep[i] = '[';
    for (int i = 0; i < 32; i++)
        deep[32 + i] = ']';
    CHECK_EQ_INT(parse(deep, &lim, &v, &e), 0);
    json_decref(v);
    /* 33 levels: refused, position of the 33rd bracket */
    memset(deep, 0, sizeof deep);
    for (int i = 0; i < 33; i++)
        deep[i] = '[';
    for (int i = 0; i < 33; i++)
        deep[33 + i] = ']';
    CHECK_EQ_INT(parse(deep, &lim, &v, &e), ERR_DEPTH);
    CHECK_EQ_INT(e.position, 32);
    /* brackets inside strings do not count, escaped quotes do not end strings */
    CHECK_EQ_INT(js_depth("{\"a\":\"[[[[\\\"[[[\"}", 17, 2, NULL), 1);
    /* a million open brackets costs nothing: rejected by the scan */
    size_t n = 1000000;
    char *huge = malloc(n);
    memset(huge, '[', n);
    CHECK_EQ_INT(js_parse(huge, n, &lim, &v, &e), ERR_DEPTH);
    free(huge);
}

TEST(js_parse_size_limit)
{
    struct js_limits lim = {16, 8, 0};
    json_t *v;
    struct js_error e;
    CHECK_EQ_INT(parse("{\"a\":\"0123456789\"}", &lim, &v, &e), ERR_TOOBIG);
    CHECK(strstr(e.message, "exceeds") != NULL);
    CHECK_EQ_INT(parse("{\"a\":\"01234\"}", &lim, &v, &e), 0);
    json_decref(v);
}

TEST(js_escape_round_trips_through_jansson)
{
    const char s[] = "quote\" back\\ nl\n tab\t bell\x07 del\x7f \xc3\xa9 end";
    struct buf b;
    buf_init(&b, 1024);
    CHECK_EQ_INT(js_escape(&b, s, sizeof s - 1), 0);
    CHECK(strstr(b.data, "\\u0007") != NULL);
    struct js_limits lim = JS_LIMITS_DEFAULT;
    lim.any_value = 1;
    json_t *v;
    CHECK_EQ_INT(js_parse(b.data, b.len, &lim, &v, NULL), 0);
    CHECK_EQ_STR(json_string_value(v), s);
    json_decref(v);
    buf_release(&b);
}

TEST(js_dump_compact_and_capped)
{
    json_t *v = json_pack("{s:i,s:[s,b]}", "n", 3, "l", "x", 1);
    struct buf b;
    buf_init(&b, 1024);
    CHECK_EQ_INT(js_dump(&b, v), 0);
    CHECK_EQ_STR(b.data, "{\"n\":3,\"l\":[\"x\",true]}");
    buf_release(&b);
    buf_init(&b, 5);
    CHECK_EQ_INT(js_dump(&b, v), ERR_TOOBIG);
    CHECK_EQ_INT(b.len, 0);
    buf_release(&b);
    json_decref(v);
}

/* Regression (found by tests/py/test_security.py): an upload's file name in
 * Latin-1 ("\xff") was echoed as raw bytes, making the answer invalid JSON;
 * a message truncated inside a multi-byte character did the same. */
TEST(js_escape_replaces_invalid_utf8_with_fffd)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\xff" "b", "\"a\\ufffdb\""},
        {"cut \xc3", "\"cut \\ufffd\""},
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},           /* surrogate U+D800 */
        {"\xe0\x80\x80", "\"\\ufffd\\ufffd\\ufffd\""},           /* overlong NUL */
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                      /* overlong '/' */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* above U+10FFFF */
        {"ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct buf b;
        buf_init(&b, 256);
        CHECK_EQ_INT(js_escape(&b, cases[i].in, strlen(cases[i].in)), 0);
        CHECK_EQ_STR(b.data, cases[i].out);
        struct js_limits lim = JS_LIMITS_DEFAULT;
        lim.any_value = 1;
        json_t *v;
        CHECK_EQ_INT(js_parse(b.data, b.len, &lim, &v, NULL), 0); /* valid JSON */
        json_decref(v);
        buf_release(&b);
    }
}
