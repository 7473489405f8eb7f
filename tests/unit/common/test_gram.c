/* Unit tests: common/gram - regex, choice, JSON Schema compilers, the
 * matcher, token masks over a vocabulary trie, the compile cache and the
 * request-body front door. The schema corpus against Python's jsonschema is
 * tests/unit/common/test_gram_corpus.c. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "tests/th.h"

static struct gram *re_ok(const char *re)
{
    struct gram *g = NULL;
    struct problem e;
    int rc = gram_compile_regex(re, strlen(re), &g, &e);
    if (rc)
        th_fail(__FILE__, __LINE__, re, "regex refused: %s", e.message);
    return g;
}

static int m(struct gram *g, const char *s) { return gram_match(g, s, strlen(s)); }

TEST(gram_regex_basics)
{
    struct gram *g = re_ok("(ab|cd)+x?[0-9]{2,3}");
    CHECK(m(g, "ab12"));
    CHECK(m(g, "abcdx123"));
    CHECK(!m(g, "ab1"));
    CHECK(!m(g, "ab1234"));
    CHECK(!m(g, "x12"));
    CHECK(!m(g, ""));
    gram_unref(g);
    g = re_ok("^[^a-c]\\d*\\.?$");
    CHECK(m(g, "d"));
    CHECK(m(g, "z12."));
    CHECK(m(g, "\xc3\xa9" "1"));   /* é: a negated class takes multi-byte characters */
    CHECK(!m(g, "a1"));
    CHECK(!m(g, "\xc3"));          /* half a character */
    gram_unref(g);
    g = re_ok("a{0}b{2,}c{,3}");   /* {,3} is a literal, as in JavaScript */
    CHECK(m(g, "bbc{,3}"));
    CHECK(!m(g, "bc{,3}"));
    gram_unref(g);
    g = re_ok(".+");
    CHECK(m(g, "héllo"));
    CHECK(!m(g, "a\nb"));
    gram_unref(g);
    g = re_ok("(\\w+@\\w+\\.com)|\\s");
    CHECK(m(g, "a_b@c.com"));
    CHECK(m(g, " "));
    CHECK(!m(g, "a@b.org"));
    gram_unref(g);
}

TEST(gram_regex_refusals)
{
    const char *bad[] = {"(a", "a)", "[a", "a**", "*a", "(?=a)", "\\1", "a\\b", "[é]", "a{3,2}",
                         "a{1001}", "(a*)*", "(|a)+", "a^b", "\\q", NULL};
    for (int i = 0; bad[i]; i++) {
        struct gram *g = NULL;
        struct problem e;
        memset(&e, 0, sizeof e);
        int rc = gram_compile_regex(bad[i], strlen(bad[i]), &g, &e);
        if (rc == 0)
            th_fail(__FILE__, __LINE__, bad[i], "accepted");
        CHECK(g == NULL);
        CHECK(e.message[0] != 0);
    }
}

TEST(gram_choice_and_prefixes)
{
    const char *ch[] = {"yes", "no", "not sure"};
    size_t lens[] = {3, 2, 8};
    struct gram *g = NULL;
    struct problem e;
    CHECK_EQ_INT(gram_compile_choice(ch, lens, 3, &g, &e), 0);
    CHECK(m(g, "no"));
    CHECK(m(g, "not sure"));
    CHECK(!m(g, "not"));
    CHECK(!m(g, "yess"));
    struct gram_matcher *mt = NULL;
    CHECK_EQ_INT(gram_matcher_new(g, &mt), 0);
    CHECK_EQ_INT(gram_matcher_accept(mt, "no", 2), 0);
    CHECK(gram_matcher_accepting(mt));
    CHECK(gram_matcher_can_continue(mt));   /* "not sure" */
    CHECK_EQ_INT(gram_matcher_accept(mt, "x", 1), ERR_INVAL);
    CHECK(gram_matcher_accepting(mt));      /* unchanged by the refused byte */
    CHECK_EQ_INT(gram_matcher_accept(mt, "t sure", 6), 0);
    CHECK(gram_matcher_accepting(mt));
    CHECK(!gram_matcher_can_continue(mt));
    gram_matcher_free(mt);
    gram_unref(g);
}

static struct gram *schema_ok(const char *s)
{
    struct gram *g = NULL;
    struct problem e;
    memset(&e, 0, sizeof e);
    int rc = gram_compile_json_schema(s, strlen(s), &g, &e);
    if (rc)
        th_fail(__FILE__, __LINE__, s, "schema refused: %s", e.message);
    return g;
}

TEST(gram_schema_object_order_optional_and_ws)
{
    struct gram *g = schema_ok(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
        "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}");
    CHECK(m(g, "{\"b\":\"x\"}"));
    CHECK(m(g, "{\"a\":1,\"b\":\"x\",\"c\":true}"));
    CHECK(m(g, "{\"a\": -12, \"b\": \"\"}"));
    CHECK(m(g, "{\"b\":\"\\u00e9\\n\",\"c\":false}"));
    CHECK(!m(g, "{}"));                          /* b required */
    CHECK(!m(g, "{\"b\":\"x\",\"a\":1}"));        /* schema order */
    CHECK(!m(g, "{\"a\":01,\"b\":\"x\"}"));       /* leading zero */
    CHECK(!m(g, "{\"b\":\"x\"  }"));              /* whitespace is bounded */
    CHECK(!m(g, "{\"b\":\"x\",\"d\":1}"));
    CHECK(!m(g, "{\"b\":\"\\ud800\"}"));          /* lone surrogate escape */
    gram_unref(g);
}

TEST(gram_schema_numbers_bounds)
{
    struct gram *g = schema_ok("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}");
    char s[16];
    for (int v = -40; v <= 300; v++) {
        snprintf(s, sizeof s, "%d", v);
        if (m(g, s) != (v >= -15 && v <= 230))
            th_fail(__FILE__, __LINE__, s, "wrong answer");
    }
    CHECK(!m(g, "-0"));
    gram_unref(g);
    g = schema_ok("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}");
    CHECK(m(g, "1"));
    CHECK(m(g, "0.5"));
    CHECK(!m(g, "0"));
    CHECK(!m(g, "1.5"));
    CHECK(!m(g, "-0.5"));
    gram_unref(g);
    g = schema_ok("{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}");
    CHECK(m(g, "-1.5"));
    CHECK(m(g, "2.75"));
    CHECK(m(g, "-2"));
    CHECK(!m(g, "-2.5"));
    CHECK(!m(g, "3.1"));
    gram_unref(g);
}

TEST(gram_schema_refs_recursion_anyof_arrays)
{
    struct gram *g = schema_ok(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
        "\"required\":[\"v\",\"kids\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    CHECK(m(g, "{\"v\":1,\"kids\":[]}"));
    CHECK(m(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}"));
    CHECK(!m(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":2,\"kids\":[]},{\"v\":2,\"kids\":[]}]}"));
    /* recursion is unrolled GRAM_MAX_REF_DEPTH levels: one more level is refused */
    char deep[512] = "", tail[64] = "";
    for (int d = 0; d <= GRAM_MAX_REF_DEPTH + 1; d++) {
        strcat(deep, "{\"v\":1,\"kids\":[");
        strcat(tail, "]}");
        char whole[600];
        snprintf(whole, sizeof whole, "%s%s", deep, tail);
        /* the outer node is the $ref's first level: GRAM_MAX_REF_DEPTH nodes fit */
        if (m(g, whole) != (d + 1 <= GRAM_MAX_REF_DEPTH))
            th_fail(__FILE__, __LINE__, whole, "depth %d", d + 1);
    }
    gram_unref(g);
    g = schema_ok("{\"anyOf\":[{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},{\"type\":[\"integer\",\"null\"]}]}");
    CHECK(m(g, "\"a\""));
    CHECK(m(g, "null"));
    CHECK(m(g, "42"));
    CHECK(!m(g, "\"c\""));
    gram_unref(g);
    g = schema_ok("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"uuid\"},\"minItems\":1}");
    CHECK(m(g, "[\"123e4567-e89b-12d3-a456-426614174000\"]"));
    CHECK(!m(g, "[]"));
    CHECK(!m(g, "[\"123e4567\"]"));
    gram_unref(g);
    g = schema_ok("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}");
    CHECK(m(g, "\"AB-12\""));
    CHECK(!m(g, "\"AB-\""));
    gram_unref(g);
    g = schema_ok("{\"type\":\"string\",\"pattern\":\"x\\\"y\"}");   /* unanchored, a quote */
    CHECK(m(g, "\"aax\\\"ybb\""));
    CHECK(!m(g, "\"aax\"ybb\""));
    gram_unref(g);
}

TEST(gram_schema_refusals_name_the_keyword)
{
    struct {
        const char *schema, *needle;
    } bad[] = {
        {"{\"type\":\"object\",\"patternProperties\":{}}", "patternProperties"},
        {"{\"not\":{}}", "'not'"},
        {"{\"oneOf\":[{}]}", "oneOf"},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "ipv6"},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "multipleOf"},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not resolve"},
        {"{\"$ref\":\"#\"}", "matches nothing"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},\"required\":[\"x\"]}", "matches nothing"},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", "not in 'properties'"},
        {"{\"type\":\"frog\"}", "frog"},
        {"{\"type\":\"array\",\"prefixItems\":[]}", "prefixItems"},
        {"{\"type\":\"string\",\"pattern\":\"(?=x)\"}", "lookaround"},
        {"[1,2", "not valid JSON"},
        {NULL, NULL},
    };
    for (int i = 0; bad[i].schema; i++) {
        struct gram *g = NULL;
        struct problem e;
        memset(&e, 0, sizeof e);
        int rc = gram_compile_json_schema(bad[i].schema, strlen(bad[i].schema), &g, &e);
        if (rc == 0 || !strstr(e.message, bad[i].needle))
            th_fail(__FILE__, __LINE__, bad[i].schema, "rc %d, message '%s'", rc, e.message);
    }
}

TEST(gram_json_object_any)
{
    struct gram *g = NULL;
    struct problem e;
    CHECK_EQ_INT(gram_compile_json_object(&g, &e), 0);
    CHECK(m(g, "{}"));
    CHECK(m(g, "{\"a\": [1, {\"b\": null}, \"x\", -0.5, true]}"));
    CHECK(!m(g, "[]"));
    CHECK(!m(g, "{\"a\":}"));
    gram_unref(g);
}

/* A toy vocabulary: the mask must equal one independent match per token. */
TEST(gram_mask_equals_brute_force)
{
    const char *toks[] = {"{", "}", "\"", "\"a", "\":", "\":\"", "a", "ab", "b", "1", "12",
                          "x", ",", " ", "\"}", "true", "tr", "ue", NULL /* eos */, "\xc3", "\xa9"};
    size_t n = sizeof toks / sizeof toks[0], lens[32];
    for (size_t i = 0; i < n; i++)
        lens[i] = toks[i] ? strlen(toks[i]) : 0;
    struct gram_vocab *v = NULL;
    CHECK_EQ_INT(gram_vocab_new(n, toks, lens, &v), 0);
    struct gram *g = schema_ok("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                               "\"b\":{\"type\":\"boolean\"}},\"required\":[\"a\",\"b\"]}");
    const char *walk = "{\"a\":\"ab\xc3\xa9\",\"b\":true}";
    struct gram_matcher *mt = NULL;
    CHECK_EQ_INT(gram_matcher_new(g, &mt), 0);
    /* the masks are (n + 31) / 32 words: compare only those, after filling
     * the rest with different bytes so a write past them would show */
    uint32_t mask[2], mask2[2];
    size_t words = (n + 31) / 32;
    CHECK(words <= 1);
    for (size_t pos = 0;; pos++) {
        size_t n_ok = 0;
        memset(mask, 0xA5, sizeof mask);
        memset(mask2, 0x5A, sizeof mask2);
        CHECK_EQ_INT(gram_matcher_mask(mt, v, mask, &n_ok), 0);
        CHECK_EQ_INT(gram_matcher_mask_uncached(mt, v, mask2, NULL), 0);
        CHECK(memcmp(mask, mask2, words * sizeof mask[0]) == 0);
        CHECK(mask[1] == 0xA5A5A5A5u && mask2[1] == 0x5A5A5A5Au);
        size_t cnt = 0;
        for (size_t t = 0; t < n; t++) {
            int want = 0;
            if (toks[t]) {
                /* brute force: a fresh matcher over walk[0..pos) + token */
                struct gram_matcher *b = NULL;
                CHECK_EQ_INT(gram_matcher_new(g, &b), 0);
                want = gram_matcher_accept(b, walk, pos) == 0 &&
                       gram_matcher_accept(b, toks[t], lens[t]) == 0;
                gram_matcher_free(b);
            }
            int got = (mask[t >> 5] >> (t & 31)) & 1;
            if (got != want)
                th_fail(__FILE__, __LINE__, "mask", "pos %zu token %zu: got %d want %d", pos, t, got, want);
            cnt += (size_t)got;
        }
        CHECK_EQ_INT(cnt, n_ok);
        if (pos == strlen(walk))
            break;
        CHECK_EQ_INT(gram_matcher_accept(mt, walk + pos, 1), 0);
    }
    CHECK(gram_matcher_accepting(mt));
    uint64_t hits, misses;
    gram_mask_stats(g, &hits, &misses);
    CHECK(hits + misses == strlen(walk) + 1);
    gram_matcher_free(mt);
    gram_unref(g);
    gram_vocab_free(v);
}

TEST(gram_mask_cache_hits_inside_strings)
{
    const char *toks[] = {"\"", "a", "b", "c"};
    size_t lens[] = {1, 1, 1, 1};
    struct gram_vocab *v = NULL;
    CHECK_EQ_INT(gram_vocab_new(4, toks, lens, &v), 0);
    struct gram *g = schema_ok("{\"type\":\"string\"}");
    struct gram_matcher *mt = NULL;
    CHECK_EQ_INT(gram_matcher_new(g, &mt), 0);
    CHECK_EQ_INT(gram_matcher_accept(mt, "\"", 1), 0);
    uint32_t mask[1];
    for (int i = 0; i < 10; i++) {
        CHECK_EQ_INT(gram_matcher_mask(mt, v, mask, NULL), 0);
        CHECK_EQ_INT(mask[0], 0xF);
        CHECK_EQ_INT(gram_matcher_accept(mt, "a", 1), 0);
    }
    uint64_t hits, misses;
    gram_mask_stats(g, &hits, &misses);
    CHECK_EQ_INT(misses, 1);
    CHECK_EQ_INT(hits, 9);
    gram_matcher_free(mt);
    gram_unref(g);
    gram_vocab_free(v);
}
