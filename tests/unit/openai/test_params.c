/*
 * test_params.c - request body -> gen_params: defaults, every accepted form,
 * and one bad value per field with the param named in the error.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "openai/params.h"

#define TOOL_F "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"

static json_t *J(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j)
        th_fail(__FILE__, __LINE__, s, "bad test JSON: %s", e.text);
    return j;
}

static int parse(const char *body, enum gp_endpoint ep, struct gp_request *p, struct problem *e)
{
    json_t *j = J(body);
    memset(e, 0, sizeof *e);
    int rc = gp_parse(j, ep, 1000, p, e);
    json_decref(j);
    return rc;
}

TEST(params_chat_defaults)
{
    struct gp_request p;
    struct problem e;
    CHECK_EQ_INT(parse("{\"model\":\"m\",\"messages\":[]}", GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.endpoint, GP_CHAT);
    CHECK_EQ_INT(p.gen.max_tokens, -1);            /* context limit */
    CHECK(p.gen.smp.temperature == 1.0 && p.gen.smp.top_p == 1.0 && p.gen.smp.top_k == 0);
    CHECK(p.gen.smp.min_p == 0 && p.gen.smp.frequency_penalty == 0 && p.gen.smp.presence_penalty == 0);
    CHECK(p.gen.smp.repetition_penalty == 1.0);
    CHECK_EQ_INT(p.gen.smp.n_bias, 0);
    CHECK_EQ_INT(p.gen.seed_given, 0);             /* random seed drawn */
    CHECK_EQ_INT(p.gen.n_stop, 0);
    CHECK_EQ_INT(p.gen.logprobs, 0);
    CHECK_EQ_INT(p.gen.smp.n_top_logprobs, -1);
    CHECK_EQ_INT(p.gen.n, 1);
    CHECK_EQ_INT(p.n_prompts, 0);
    uint64_t s1 = p.gen.seed;
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"messages\":[]}", GP_CHAT, &p, &e), 0);
    CHECK(p.gen.seed != s1);                        /* drawn per request */
    gp_release(&p);
    /* explicit nulls are defaults too */
    CHECK_EQ_INT(parse("{\"temperature\":null,\"stop\":null,\"seed\":null,\"n\":null}", GP_CHAT,
                       &p, &e), 0);
    CHECK(p.gen.smp.temperature == 1.0 && p.gen.n_stop == 0 && !p.gen.seed_given && p.gen.n == 1);
    gp_release(&p);
}

TEST(params_chat_all_fields)
{
    struct gp_request p;
    struct problem e;
    CHECK_EQ_INT(parse("{\"max_tokens\":50,\"max_completion_tokens\":20,\"temperature\":0,"
                       "\"top_p\":0.5,\"top_k\":7,\"min_p\":0.1,\"seed\":-1,\"stop\":[\"a\",\"bc\"],"
                       "\"frequency_penalty\":-2,\"presence_penalty\":2,\"repetition_penalty\":1.2,"
                       "\"logprobs\":true,\"top_logprobs\":20,\"n\":8,"
                       "\"logit_bias\":{\"5\":-100,\"999\":100},\"stream\":false,"
                       "\"user\":\"x\",\"response_format\":{\"type\":\"text\"},\"tools\":[]}",
                       GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.gen.max_tokens, 20);            /* max_completion_tokens wins */
    CHECK(p.gen.smp.temperature == 0 && p.gen.smp.top_p == 0.5 && p.gen.smp.top_k == 7);
    CHECK(p.gen.smp.min_p == 0.1 && p.gen.smp.frequency_penalty == -2 && p.gen.smp.presence_penalty == 2);
    CHECK(p.gen.smp.repetition_penalty == 1.2);
    CHECK(p.gen.seed_given && p.gen.seed == UINT64_MAX);
    CHECK_EQ_INT(p.gen.n_stop, 2);
    CHECK_EQ_STR(p.gen.stop[1], "bc");
    CHECK_EQ_INT(p.gen.stop_len[1], 2);
    CHECK(p.gen.logprobs == 1 && p.gen.smp.n_top_logprobs == 20 && p.gen.n == 8);
    CHECK_EQ_INT(p.gen.smp.n_bias, 2);
    CHECK(p.gen.smp.bias[0].id == 5 && p.gen.smp.bias[0].bias == -100);
    CHECK(p.gen.smp.bias[1].id == 999 && p.gen.smp.bias[1].bias == 100);
    gp_release(&p);
    /* logprobs without top_logprobs: chosen token only; a single stop string */
    CHECK_EQ_INT(parse("{\"logprobs\":true,\"stop\":\"###\",\"top_k\":-1,\"max_tokens\":3}",
                       GP_CHAT, &p, &e), 0);
    CHECK(p.gen.logprobs == 1 && p.gen.smp.n_top_logprobs == 0 && p.gen.n_stop == 1 && p.gen.smp.top_k == 0);
    CHECK_EQ_INT(p.gen.max_tokens, 3);
    CHECK(p.gen.grammar == NULL);
    gp_release(&p);
    /* structured outputs compile into gen.grammar */
    CHECK_EQ_INT(parse("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                       "\"n\",\"strict\":true,\"schema\":{\"type\":\"integer\",\"maximum\":9}}}}",
                       GP_CHAT, &p, &e), 0);
    CHECK(p.gen.grammar && gram_match(p.gen.grammar, "7", 1) && !gram_match(p.gen.grammar, "10", 2));
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"prompt\":\"x\",\"guided_choice\":[\"up\",\"down\"]}", GP_COMPLETIONS, &p, &e), 0);
    CHECK(p.gen.grammar && gram_match(p.gen.grammar, "down", 4));
    gp_release(&p);
}

TEST(params_completions_prompts)
{
    struct gp_request p;
    struct problem e;
    CHECK_EQ_INT(parse("{\"prompt\":\"hello\",\"logprobs\":3,\"best_of\":1,\"echo\":false,"
                       "\"suffix\":null}", GP_COMPLETIONS, &p, &e), 0);
    CHECK(p.n_prompts == 1 && p.prompts[0].text && p.prompts[0].text_len == 5);
    CHECK(p.gen.logprobs == 1 && p.gen.smp.n_top_logprobs == 3);
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"prompt\":[\"a\",\"bb\"],\"n\":2,\"logprobs\":0}", GP_COMPLETIONS, &p,
                       &e), 0);
    CHECK(p.n_prompts == 2 && p.prompts[1].text_len == 2 && p.gen.n == 2);
    CHECK(p.gen.logprobs == 1 && p.gen.smp.n_top_logprobs == 0);
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"prompt\":[1,2,3]}", GP_COMPLETIONS, &p, &e), 0);
    CHECK(p.n_prompts == 1 && p.prompts[0].n_ids == 3 && p.prompts[0].ids[2] == 3);
    CHECK(!p.prompts[0].text && p.gen.logprobs == 0 && p.gen.smp.n_top_logprobs == -1);
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"prompt\":[[1],[4,5]]}", GP_COMPLETIONS, &p, &e), 0);
    CHECK(p.n_prompts == 2 && p.prompts[1].n_ids == 2 && p.prompts[1].ids[0] == 4);
    gp_release(&p);
    /* max_completion_tokens is a chat field: ignored for completions */
    CHECK_EQ_INT(parse("{\"prompt\":\"x\",\"max_tokens\":9,\"max_completion_tokens\":2}",
                       GP_COMPLETIONS, &p, &e), 0);
    CHECK_EQ_INT(p.gen.max_tokens, 9);
    gp_release(&p);
}

struct bad {
    const char *body;
    enum gp_endpoint ep;
    const char *param;
    const char *code;
};

TEST(params_each_bad_field_named)
{
    static const struct bad cases[] = {
        {"{\"max_tokens\":0}", GP_CHAT, "max_tokens", "integer_below_min_value"},
        {"{\"max_tokens\":1.5}", GP_CHAT, "max_tokens", "invalid_type"},
        {"{\"max_completion_tokens\":-3}", GP_CHAT, "max_completion_tokens", "integer_below_min_value"},
        {"{\"temperature\":2.5}", GP_CHAT, "temperature", "decimal_above_max_value"},
        {"{\"temperature\":-0.1}", GP_CHAT, "temperature", "decimal_below_min_value"},
        {"{\"temperature\":\"hot\"}", GP_CHAT, "temperature", "invalid_type"},
        {"{\"top_p\":0}", GP_CHAT, "top_p", "decimal_below_min_value"},
        {"{\"top_p\":1.01}", GP_CHAT, "top_p", "decimal_above_max_value"},
        {"{\"top_k\":-2}", GP_CHAT, "top_k", "integer_below_min_value"},
        {"{\"min_p\":1.5}", GP_CHAT, "min_p", "decimal_above_max_value"},
        {"{\"seed\":\"7\"}", GP_CHAT, "seed", "invalid_type"},
        {"{\"seed\":1.5}", GP_CHAT, "seed", "invalid_type"},
        {"{\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", GP_CHAT, "stop", "array_above_max_length"},
        {"{\"stop\":[\"a\",\"\"]}", GP_CHAT, "stop", "invalid_value"},
        {"{\"stop\":\"\"}", GP_CHAT, "stop", "invalid_value"},
        {"{\"stop\":[1]}", GP_CHAT, "stop", "invalid_type"},
        {"{\"stop\":5}", GP_CHAT, "stop", "invalid_type"},
        {"{\"frequency_penalty\":2.1}", GP_CHAT, "frequency_penalty", "decimal_above_max_value"},
        {"{\"presence_penalty\":-3}", GP_CHAT, "presence_penalty", "decimal_below_min_value"},
        {"{\"repetition_penalty\":0}", GP_CHAT, "repetition_penalty", "decimal_below_min_value"},
        {"{\"logprobs\":1}", GP_CHAT, "logprobs", "invalid_type"},
        {"{\"top_logprobs\":2}", GP_CHAT, "top_logprobs", "invalid_value"},
        {"{\"logprobs\":true,\"top_logprobs\":21}", GP_CHAT, "top_logprobs", "integer_above_max_value"},
        {"{\"n\":0}", GP_CHAT, "n", "integer_below_min_value"},
        {"{\"n\":9}", GP_CHAT, "n", "integer_above_max_value"},
        {"{\"logit_bias\":{\"x\":1}}", GP_CHAT, "logit_bias", "invalid_value"},
        {"{\"logit_bias\":{\"1000\":1}}", GP_CHAT, "logit_bias", "invalid_value"},
        {"{\"logit_bias\":{\"-1\":1}}", GP_CHAT, "logit_bias", "invalid_value"},
        {"{\"logit_bias\":{\"5\":101}}", GP_CHAT, "logit_bias", "invalid_value"},
        {"{\"logit_bias\":{\"5\":\"1\"}}", GP_CHAT, "logit_bias", "invalid_type"},
        {"{\"logit_bias\":[1]}", GP_CHAT, "logit_bias", "invalid_type"},
        {"{\"stream\":true}", GP_CHAT, "stream", "unsupported_value"},
        {"{\"tools\":[{\"type\":\"function\"}]}", GP_CHAT, "tools[0].function", "invalid_type"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{}}]}", GP_CHAT, "tools[0].function",
         "missing_required_parameter"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", GP_CHAT,
         "tools[0].function", "invalid_value"},
        {"{\"tools\":[{\"type\":\"web_search\"}]}", GP_CHAT, "tools[0]", "unsupported_value"},
        {"{\"tools\":[" TOOL_F "," TOOL_F "]}", GP_CHAT, "tools[1].function", "invalid_value"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
         "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}}}]}",
         GP_CHAT, "tools[0].function", "invalid_function_parameters"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]}",
         GP_CHAT, "tools[0].function", "invalid_type"},
        {"{\"tools\":{}}", GP_CHAT, "tools", "invalid_type"},
        {"{\"tool_choice\":\"required\"}", GP_CHAT, "tool_choice", "invalid_value"},
        {"{\"tools\":[" TOOL_F "],\"tool_choice\":\"sometimes\"}", GP_CHAT, "tool_choice", "invalid_value"},
        {"{\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
         GP_CHAT, "tool_choice", "invalid_value"},
        {"{\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":"
         "{\"mode\":\"auto\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}}}",
         GP_CHAT, "tool_choice", "invalid_value"},
        {"{\"tools\":[" TOOL_F "],\"parallel_tool_calls\":\"yes\"}", GP_CHAT, "parallel_tool_calls", "invalid_type"},
        {"{\"tools\":[" TOOL_F "],\"functions\":[{\"name\":\"g\"}]}", GP_CHAT, "functions", "invalid_value"},
        {"{\"functions\":[{\"name\":\"g\"}],\"function_call\":{\"name\":\"h\"}}", GP_CHAT,
         "function_call", "invalid_value"},
        {"{\"reasoning_effort\":\"extreme\"}", GP_CHAT, "reasoning_effort", "invalid_value"},
        {"{\"thinking_token_budget\":-1}", GP_CHAT, "thinking_token_budget", "integer_below_min_value"},
        {"{\"thinking_token_budget\":\"1024\"}", GP_CHAT, "thinking_token_budget", "invalid_type"},
        {"{\"chat_template_kwargs\":{\"tools\":1}}", GP_CHAT, "chat_template_kwargs", "invalid_value"},
        {"{\"chat_template_kwargs\":3}", GP_CHAT, "chat_template_kwargs", "invalid_type"},
        {"{\"prompt\":\"x\",\"tools\":[" TOOL_F "]}", GP_COMPLETIONS, "tools", "unsupported_parameter"},
        {"{\"response_format\":{\"type\":\"yaml\"}}", GP_CHAT, "response_format.type", "invalid_value"},
        {"{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"not\":{}}}}}",
         GP_CHAT, "response_format.json_schema.schema", "unsupported_value"},
        {"{\"guided_regex\":\"a(\"}", GP_CHAT, "guided_regex", "invalid_value"},
        {"{\"guided_choice\":[\"a\",\"\"]}", GP_COMPLETIONS, "guided_choice", "invalid_value"},
        {"{\"guided_grammar\":\"x\"}", GP_CHAT, "guided_grammar", "unsupported_parameter"},
        {"{\"audio\":{}}", GP_CHAT, "audio", "unsupported_parameter"},
        {"{}", GP_COMPLETIONS, "prompt", "missing_required_parameter"},
        {"{\"prompt\":[]}", GP_COMPLETIONS, "prompt", "invalid_value"},
        {"{\"prompt\":[\"a\",1]}", GP_COMPLETIONS, "prompt", "invalid_type"},
        {"{\"prompt\":[[]]}", GP_COMPLETIONS, "prompt", "invalid_value"},
        {"{\"prompt\":[1000]}", GP_COMPLETIONS, "prompt", "invalid_value"},
        {"{\"prompt\":[[1,\"a\"]]}", GP_COMPLETIONS, "prompt", "invalid_type"},
        {"{\"prompt\":{}}", GP_COMPLETIONS, "prompt", "invalid_type"},
        {"{\"prompt\":\"x\",\"logprobs\":6}", GP_COMPLETIONS, "logprobs", "integer_above_max_value"},
        {"{\"prompt\":\"x\",\"logprobs\":true}", GP_COMPLETIONS, "logprobs", "invalid_type"},
        {"{\"prompt\":\"x\",\"echo\":true}", GP_COMPLETIONS, "echo", "unsupported_value"},
        {"{\"prompt\":\"x\",\"suffix\":\"end\"}", GP_COMPLETIONS, "suffix", "unsupported_value"},
        {"{\"prompt\":\"x\",\"best_of\":3,\"n\":2}", GP_COMPLETIONS, "best_of", "unsupported_value"},
        {"{\"prompt\":\"x\",\"best_of\":1,\"n\":2}", GP_COMPLETIONS, "best_of", "invalid_value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gp_request p;
        struct problem e;
        int rc = parse(cases[i].body, cases[i].ep, &p, &e);
        if (rc == 0) {
            gp_release(&p);
            th_fail(__FILE__, __LINE__, cases[i].body, "accepted");
        }
        CHECK_EQ_INT(rc, ERR_INVAL);
        CHECK_EQ_STR(e.param, cases[i].param);
        if (cases[i].code)
            CHECK_EQ_STR(e.code, cases[i].code);
        /* the message names the param */
        CHECK(strstr(e.message, cases[i].param) != NULL);
    }
    /* 16 prompts x n=8 = 128 choices is the cap; 17 x 8 is refused on n */
    struct gp_request p;
    struct problem e;
    char body[256];
    snprintf(body, sizeof body, "{\"n\":8,\"prompt\":[%s]}",
             "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"");
    CHECK_EQ_INT(parse(body, GP_COMPLETIONS, &p, &e), 0);
    CHECK_EQ_INT(p.n_prompts, 16);
    gp_release(&p);
    snprintf(body, sizeof body, "{\"n\":8,\"prompt\":[%s]}",
             "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"b\"");
    CHECK_EQ_INT(parse(body, GP_COMPLETIONS, &p, &e), ERR_INVAL);
    CHECK_EQ_STR(e.param, "n");
}

TEST(params_error_json_shape)
{
    struct gp_request p;
    struct problem e;
    CHECK_EQ_INT(parse("{\"top_p\":3}", GP_CHAT, &p, &e), ERR_INVAL);
    json_t *j = gp_error_json(&e);
    CHECK(j != NULL);
    json_t *err = json_object_get(j, "error");
    CHECK(json_is_object(err) && json_object_size(j) == 1 && json_object_size(err) == 4);
    CHECK_EQ_STR(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    CHECK_EQ_STR(json_string_value(json_object_get(err, "param")), "top_p");
    CHECK_EQ_STR(json_string_value(json_object_get(err, "code")), "decimal_above_max_value");
    CHECK_EQ_STR(json_string_value(json_object_get(err, "message")),
                 "Invalid 'top_p': decimal above maximum value. Expected a value <= 1, but got 3 "
                 "instead.");
    json_decref(j);
    json_t *body = J("[1]");
    CHECK_EQ_INT(gp_parse(body, GP_CHAT, 10, &p, &e), ERR_INVAL);
    json_decref(body);
    j = gp_error_json(&e);
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);
}

TEST(params_thinking_token_budget_reaches_the_engine)
{
    struct gp_request p;
    struct problem e;
    CHECK_EQ_INT(parse("{\"thinking_token_budget\":0}", GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.gen.think_budget, 0);
    CHECK_EQ_INT(p.gen.n_think_close, 0); /* the close is the worker's, from the model (prompt_arm) */
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"thinking_token_budget\":1024,\"max_tokens\":8}", GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.gen.think_budget, 1024);
    gp_release(&p);
    CHECK_EQ_INT(parse("{\"thinking_token_budget\":null}", GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.gen.think_budget, -1);
    gp_release(&p);
    CHECK_EQ_INT(parse("{}", GP_CHAT, &p, &e), 0);
    CHECK_EQ_INT(p.gen.think_budget, -1);
    gp_release(&p);
}
