/* test_format.c - gp_format_parse: response_format and vLLM's guided_*
 * fields compiled into a grammar (openai/format.c). */
#include <jansson.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "openai/params.h"
#include "tests/th.h"

static int m(struct gram *g, const char *s) { return gram_match(g, s, strlen(s)); }

static int body_rc(const char *json, struct gram **g, struct problem *e)
{
    json_error_t je;
    json_t *b = json_loads(json, 0, &je);
    if (!b)
        th_fail(__FILE__, __LINE__, json, "bad test JSON");
    *g = NULL;
    int rc = gp_format_parse(b, g, e);
    json_decref(b);
    return rc;
}

TEST(format_parse_fields_and_errors)
{
    struct gram *g = NULL, *g2 = NULL;
    struct problem e;
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"text\"}}", &g, &e), 0);
    CHECK(g == NULL);
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                         "\"x\",\"strict\":true,\"schema\":{\"type\":\"boolean\"}}}}", &g, &e), 0);
    CHECK(g && m(g, "true"));
    /* the same schema again comes from the cache: the same grammar */
    CHECK_EQ_INT(body_rc("{\"guided_json\":{\"type\":\"boolean\"}}", &g2, &e), 0);
    CHECK(g == g2);
    gram_unref(g);
    gram_unref(g2);
    CHECK_EQ_INT(body_rc("{\"guided_choice\":[\"A\",\"B\"]}", &g, &e), 0);
    CHECK(m(g, "B") && !m(g, "C"));
    gram_unref(g);
    CHECK_EQ_INT(body_rc("{\"guided_regex\":\"[0-9]+\"}", &g, &e), 0);
    CHECK(m(g, "42"));
    gram_unref(g);
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"json_object\"}}", &g, &e), 0);
    CHECK(m(g, "{}"));
    gram_unref(g);

    CHECK_EQ_INT(body_rc("{\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "guided_choice");
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"yaml\"}}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "response_format.type");
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                         "\"s\",\"schema\":{\"type\":\"object\",\"if\":{}}}}}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "response_format.json_schema.schema");
    CHECK_EQ_STR(e.code, "unsupported_value");
    CHECK(strstr(e.message, "Invalid schema for response_format 's'") != NULL);
    CHECK(strstr(e.message, "keyword 'if' is not supported") != NULL);
    CHECK_EQ_INT(body_rc("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                         "\"schema\":{}}}}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "response_format.json_schema.name");
    CHECK_EQ_INT(body_rc("{\"guided_grammar\":\"root ::= x\"}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.code, "unsupported_parameter");
    CHECK_EQ_INT(body_rc("{\"guided_choice\":[]}", &g, &e), ERR_INVAL);
    CHECK_EQ_INT(body_rc("{\"guided_regex\":\"(\"}", &g, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "guided_regex");
    /* failures are cached too and answer the same */
    CHECK_EQ_INT(body_rc("{\"guided_regex\":\"(\"}", &g, &e), ERR_INVAL);
    CHECK(strstr(e.message, "missing ')'") != NULL);
}
