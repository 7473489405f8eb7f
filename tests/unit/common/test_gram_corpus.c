/* Unit test: the JSON Schema compiler against Python's jsonschema, through
 * tests/fixtures/gram/corpus.json (made by tests/oracle/make_gram_corpus.py).
 * For every schema and instance: the compiled grammar accepts the instance
 * exactly when jsonschema calls it valid, except valid instances flagged
 * "outside" (JSON our narrower output language leaves out), which must be
 * rejected. Accepting an invalid instance is always a failure. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/gram/gram.h"
#include "tests/th.h"

TEST(gram_corpus_matches_jsonschema)
{
    json_error_t je;
    json_t *root = json_load_file("tests/fixtures/gram/corpus.json", 0, &je);
    if (!root)
        th_fail(__FILE__, __LINE__, "corpus", "cannot load: %s", je.text);
    json_t *schemas = json_object_get(root, "schemas");
    CHECK(json_array_size(schemas) >= 10);
    size_t n_cases = 0, n_valid = 0, n_invalid = 0, n_bad = 0;
    for (size_t i = 0; i < json_array_size(schemas); i++) {
        json_t *s = json_array_get(schemas, i);
        const char *name = json_string_value(json_object_get(s, "name"));
        json_t *st = json_object_get(s, "schema");
        struct gram *g = NULL;
        struct problem e;
        memset(&e, 0, sizeof e);
        if (gram_compile_json_schema(json_string_value(st), json_string_length(st), &g, &e) != 0)
            th_fail(__FILE__, __LINE__, name, "schema refused: %s", e.message);
        json_t *cases = json_object_get(s, "cases");
        for (size_t k = 0; k < json_array_size(cases); k++) {
            json_t *c = json_array_get(cases, k);
            json_t *t = json_object_get(c, "text");
            int valid = json_is_true(json_object_get(c, "valid"));
            int outside = json_is_true(json_object_get(c, "outside"));
            int got = gram_match(g, json_string_value(t), json_string_length(t));
            int want = valid && !outside;
            if (got != want) {
                fprintf(stderr, "%s: grammar %s, jsonschema says %s%s: %s\n", name,
                        got ? "accepts" : "rejects", valid ? "valid" : "invalid",
                        outside ? " (outside our subset)" : "", json_string_value(t));
                n_bad++;
            }
            n_cases++;
            n_valid += (size_t)want;
            n_invalid += (size_t)!valid;
        }
        gram_unref(g);
    }
    CHECK_EQ_INT(n_bad, 0);
    CHECK(n_cases >= 100);
    CHECK(n_valid >= 30 && n_invalid >= 30);
    json_decref(root);
}

/* The validator (gram_json_valid) on the same corpus: exactly jsonschema's
 * verdict, the "outside" instances included (they are valid JSON Schema
 * instances our generated language leaves out: member order, whitespace,
 * exponents), except where the string grammar is narrower than the format
 * (counted, and only valid-but-refused is allowed). */
TEST(gram_json_valid_matches_jsonschema)
{
    json_error_t je;
    json_t *root = json_load_file("tests/fixtures/gram/corpus.json", 0, &je);
    CHECK(root != NULL);
    json_t *schemas = json_object_get(root, "schemas");
    size_t n_cases = 0, n_bad = 0, n_narrow = 0, n_outside = 0;
    for (size_t i = 0; i < json_array_size(schemas); i++) {
        json_t *s = json_array_get(schemas, i);
        const char *name = json_string_value(json_object_get(s, "name"));
        json_t *st = json_object_get(s, "schema");
        json_t *cases = json_object_get(s, "cases");
        for (size_t k = 0; k < json_array_size(cases); k++) {
            json_t *c = json_array_get(cases, k);
            json_t *t = json_object_get(c, "text");
            int valid = json_is_true(json_object_get(c, "valid"));
            int outside = json_is_true(json_object_get(c, "outside"));
            int got = gram_json_valid(json_string_value(st), json_string_length(st),
                                      json_string_value(t), json_string_length(t));
            CHECK(got == 0 || got == 1);
            if (got != valid) {
                if (valid && outside && strstr(json_string_value(st), "\"format\"")) {
                    n_narrow++;   /* a format our grammar writes narrower */
                } else {
                    fprintf(stderr, "%s: validator says %s, jsonschema %s%s: %s\n", name,
                            got ? "valid" : "invalid", valid ? "valid" : "invalid",
                            outside ? " (outside)" : "", json_string_value(t));
                    n_bad++;
                }
            }
            n_outside += (size_t)(valid && outside && got);
            n_cases++;
        }
    }
    printf("  %zu cases, %zu valid instances outside the generated language accepted, "
           "%zu refused by a narrower format\n", n_cases, n_outside, n_narrow);
    CHECK_EQ_INT(n_bad, 0);
    CHECK(n_outside >= 5);
    json_decref(root);
}
