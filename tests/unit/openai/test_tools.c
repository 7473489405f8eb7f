/*
 * test_tools.c - tool calling in openai/: the prompt our templates render
 * with tools and tool turns against jinja2's render of the same requests
 * (tests/fixtures/chat/tool_renders.json, made by
 * tests/oracle/tool_template_fixtures.py), the call parser per format, and
 * the call grammar accepting what the parser reads.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "openai/chat_msgs.h"
#include "openai/params.h"
#include "openai/prompt.h"
#include "openai/response.h"
#include "openai/tools.h"
#include "tests/th.h"
#include "text/chat.h"

static struct tok *vocab2(const char *bos, const char *eos)
{
    const char *toks[] = {"a", bos, eos};
    int32_t types[] = {TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_tokens = strcmp(bos, eos) ? 3 : 2;
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 1;
    d.eos_id = strcmp(bos, eos) ? 2 : 1;
    struct tok *t = NULL;
    return tok_new(&d, &t) == 0 ? t : NULL;
}

/* The request as a chat body: messages, tools, tool_choice. */
static json_t *body_of(const json_t *req)
{
    json_t *b = json_deep_copy(req);
    json_object_set_new(b, "model", json_string("m"));
    return b;
}

TEST(tools_prompt_matches_jinja2_on_real_templates)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/chat/tool_renders.json", 0, &e);
    CHECK(fx);
    json_t *templates = json_object_get(fx, "templates"), *reqs = json_object_get(fx, "requests");
    json_t *cases = json_object_get(fx, "cases");
    time_t now = (time_t)json_integer_value(json_object_get(fx, "now_epoch"));
    size_t ok = 0, errors = 0, fails = 0, per_fmt[CHAT_TOOL_FORMATS] = {0}, n_caps = 0;
    const char *name;
    json_t *spec;
    json_object_foreach(templates, name, spec) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/chat/templates/%s.jinja", name);
        char *src = th_slurp(path, NULL);
        CHECK(src);
        struct tok *t = vocab2(json_string_value(json_object_get(spec, "bos")),
                               json_string_value(json_object_get(spec, "eos")));
        CHECK(t);
        struct chat_tmpl *ct = NULL;
        if (chat_tmpl_new(src, t, &ct) == 0 && chat_tmpl_format(ct) == CHAT_JINJA) {
            /* the capabilities our probes find are the ones jinja2's renders show */
            static const char *const cap_names[] = {"non_null_content", "call_id9", "call_args"};
            unsigned want = 0;
            json_t *cn;
            size_t k;
            json_array_foreach(json_object_get(spec, "caps"), k, cn) {
                for (unsigned b = 0; b < 3; b++)
                    if (strcmp(json_string_value(cn), cap_names[b]) == 0)
                        want |= 1u << b;
            }
            if (chat_tmpl_caps(ct) != want) {
                printf("  %s: caps %#x, jinja2 shows %#x\n", name, chat_tmpl_caps(ct), want);
                fails++;
            }
            n_caps += want != 0;
        }
        if (!ct || chat_tmpl_format(ct) != CHAT_JINJA ||
            chat_tmpl_tool_format(ct) == CHAT_TOOLS_GENERIC) {
            chat_tmpl_free(ct);   /* a template we speak the generic format to */
            tok_free(t);
            free(src);
            continue;
        }
        enum chat_tool_format tf = chat_tmpl_tool_format(ct);
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            if (strcmp(json_string_value(json_object_get(c, "template")), name) != 0)
                continue;
            json_t *body = body_of(json_array_get(reqs, (size_t)json_integer_value(
                                                            json_object_get(c, "request"))));
            struct gp_request gp;
            struct problem pe;
            struct chat_msgs m;
            CHECK_EQ_INT(gp_parse(body, GP_CHAT, 0, &gp, &pe), 0);
            CHECK_EQ_INT(chat_msgs_from_body(body, &m, &pe), 0);
            struct buf out;
            buf_init(&out, 1 << 20);
            char why[256];
            int rc = prompt_chat_render(ct, &m, &gp, now, &out, why, sizeof why);
            json_t *exp = json_object_get(c, "expected");
            if (json_is_string(exp)) {
                if (rc != 0 || strcmp(out.data ? out.data : "", json_string_value(exp)) != 0) {
                    if (fails++ < 3)
                        printf("  %s request %lld (rc %d: %s)\n    ours:   \"%s\"\n    jinja2: \"%s\"\n",
                               name, (long long)json_integer_value(json_object_get(c, "request")),
                               rc, why, out.data ? out.data : "", json_string_value(exp));
                } else {
                    ok++;
                    per_fmt[tf]++;
                }
            } else if (rc != ERR_INVAL ||
                       (json_is_true(json_object_get(c, "raised")) &&
                        strcmp(why, json_string_value(json_object_get(c, "error"))) != 0)) {
                if (fails++ < 3)
                    printf("  %s case %zu: jinja2 failed (%s), we gave rc %d (%s)\n", name, i,
                           json_string_value(json_object_get(c, "error")), rc, why);
            } else {
                errors++;
            }
            buf_release(&out);
            chat_msgs_release(&m);
            gp_release(&gp);
            json_decref(body);
        }
        chat_tmpl_free(ct);
        tok_free(t);
        free(src);
    }
    printf("  tool renders identical: %zu (hermes %zu, llama3 %zu, mistral %zu, mistral-args %zu), "
           "errors %zu, differ %zu\n", ok, per_fmt[CHAT_TOOLS_HERMES], per_fmt[CHAT_TOOLS_LLAMA3],
           per_fmt[CHAT_TOOLS_MISTRAL], per_fmt[CHAT_TOOLS_MISTRAL_ARGS], errors, fails);
    CHECK_EQ_INT(fails, 0);
    CHECK(per_fmt[CHAT_TOOLS_HERMES] >= 30);
    CHECK(per_fmt[CHAT_TOOLS_LLAMA3] >= 6);
    CHECK(per_fmt[CHAT_TOOLS_MISTRAL] >= 6);
    CHECK(per_fmt[CHAT_TOOLS_MISTRAL_ARGS] >= 18);
    CHECK(n_caps >= 10);
    json_decref(fx);
}

static void tools_of(const char *body_text, struct gp_tools *t)
{
    json_error_t e;
    json_t *b = json_loads(body_text, 0, &e);
    struct problem pe;
    if (!b || gp_tools_parse(b, t, &pe) != 0)
        th_fail(__FILE__, __LINE__, body_text, "tools do not parse");
    json_decref(b);
}

#define WEATHER                                                                          \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"      \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":" \
    "[\"city\"],\"additionalProperties\":false}}}"

TEST(tools_parse_each_format)
{
    struct gp_tools t;
    tools_of("{\"tools\":[" WEATHER "]}", &t);
    struct {
        enum chat_tool_format f;
        const char *text;
        size_t n_calls;
        const char *content;   /* NULL: none */
        const char *args0;
    } cases[] = {
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         1, NULL, "{\"city\":\"Paris\"}"},
        {CHAT_TOOLS_HERMES, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}\n</tool_call>", 2, "Sure.",
         "{\"city\":\"A\"}"},
        /* an unclosed last tag: the call is whole */
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"C\"}}", 1, NULL,
         "{\"city\":\"C\"}"},
        /* a half call, an undeclared function, text after the calls: all content */
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"argu", 0,
         "<tool_call>\n{\"name\": \"get_weather\", \"argu", NULL},
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", 0,
         "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", NULL},
        {CHAT_TOOLS_HERMES, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}</tool_call> and more", 0,
         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}</tool_call> and more", NULL},
        /* bare JSON, as small Qwen models write it in auto mode */
        {CHAT_TOOLS_HERMES, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"D\"}}", 1, NULL,
         "{\"city\":\"D\"}"},
        {CHAT_TOOLS_HERMES, "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"K\"}\n}\n```\n", 1,
         NULL, "{\"city\":\"K\"}"},
        {CHAT_TOOLS_HERMES, "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}", 0,
         "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}", NULL},
        {CHAT_TOOLS_HERMES, "Just text.", 0, "Just text.", NULL},
        /* regression (fuzz_tools): an opening fence line that is also its closing one */
        {CHAT_TOOLS_HERMES, "``````\n\n\n", 0, "``````\n\n\n", NULL},
        {CHAT_TOOLS_MISTRAL, "``````\n", 0, "``````\n", NULL},
        /* a call's arguments must fit the function's schema (here: city required,
         * no other member), tagged or not, strict or not: else it is content */
        {CHAT_TOOLS_HERMES, "```json\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"K\"}}\n```", 0,
         "```json\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"K\"}}\n```", NULL},
        {CHAT_TOOLS_HERMES, "{\"name\": \"get_weather\", \"arguments\": {\"city\": 7}}", 0,
         "{\"name\": \"get_weather\", \"arguments\": {\"city\": 7}}", NULL},
        {CHAT_TOOLS_HERMES, "{\n  \"arguments\": {\"city\": \"R\"},\n  \"name\": \"get_weather\"\n}", 1, NULL,
         "{\"city\":\"R\"}"},
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"S\"}}\n</tool_call>", 0,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"S\"}}\n</tool_call>", NULL},
        {CHAT_TOOLS_MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": {\"town\": \"T\"}}]", 0,
         "[{\"name\": \"get_weather\", \"arguments\": {\"town\": \"T\"}}]", NULL},
        {CHAT_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"E\"}}", 1, NULL,
         "{\"city\":\"E\"}"},
        {CHAT_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"E\"}}; "
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"F\"}}", 2, NULL, "{\"city\":\"E\"}"},
        {CHAT_TOOLS_LLAMA3, "The weather is nice.", 0, "The weather is nice.", NULL},
        {CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"G\"}}]", 1, NULL,
         "{\"city\":\"G\"}"},
        {CHAT_TOOLS_MISTRAL, "[{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"H\\\"}\"}]", 1, NULL,
         "{\"city\":\"H\"}"},
        /* the tag kept in the text, content before it; Nemo's ids in the objects */
        {CHAT_TOOLS_MISTRAL, "Checking.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"L\"}, "
         "\"id\": \"abcdefgh1\"}]", 1, "Checking.", "{\"city\":\"L\"}"},
        {CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}] and text", 0,
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}] and text", NULL},
        /* [TOOL_CALLS]name[ARGS]{...} (Small 3.2, Devstral, Ministral 3), [CALL_ID] optional */
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"M\"}", 1, NULL, "{\"city\":\"M\"}"},
        {CHAT_TOOLS_MISTRAL_ARGS, "Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"N\"}"
         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"O\"}", 2, "Sure.", "{\"city\":\"N\"}"},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather{\"city\": \"P\"}", 1, NULL, "{\"city\":\"P\"}"},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]nope[ARGS]{}", 0, "[TOOL_CALLS]nope[ARGS]{}", NULL},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": ", 0,
         "[TOOL_CALLS]get_weather[ARGS]{\"city\": ", NULL},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Q\"}}]", 1,
         NULL, "{\"city\":\"Q\"}"},
        {CHAT_TOOLS_GENERIC, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"I\"}}}", 1,
         NULL, "{\"city\":\"I\"}"},
        {CHAT_TOOLS_GENERIC, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"J\"}}]}", 1,
         NULL, "{\"city\":\"J\"}"},
        {CHAT_TOOLS_GENERIC, "{\"response\": \"Bonjour \\u00e9\"}", 0, "Bonjour \xc3\xa9", NULL},
        {CHAT_TOOLS_GENERIC, "{\"tool_call\": {\"name\": \"get_weather\"", 0,
         "{\"tool_call\": {\"name\": \"get_weather\"", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tool_calls c;
        CHECK_EQ_INT(tool_calls_parse(cases[i].text, strlen(cases[i].text), cases[i].f, &t, &c), 0);
        if (c.n != cases[i].n_calls)
            th_fail(__FILE__, __LINE__, cases[i].text, "wrong number of calls");
        if (cases[i].content)
            CHECK_EQ_STR(c.content ? c.content : "(null)", cases[i].content);
        else
            CHECK(c.content == NULL);
        if (cases[i].args0) {
            CHECK_EQ_STR(c.v[0].name, "get_weather");
            CHECK_EQ_STR(c.v[0].arguments, cases[i].args0);
        }
        tool_calls_release(&c);
    }
    gp_tools_release(&t);
}

/* Calls are checked against the function's schema in every format, tagged
 * or not (a strict function's here, with a pattern and a bound): a call that
 * fails is content, never a half call. */
TEST(tools_parse_checks_strict_calls_against_the_schema)
{
    struct gp_tools t;
    tools_of("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"strict\":true,"
             "\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\","
             "\"pattern\":\"^[A-Z][a-z]+/[A-Z][a-z]+$\"},\"n\":{\"type\":\"integer\",\"minimum\":0}},"
             "\"required\":[\"tz\",\"n\"],\"additionalProperties\":false}}}]}", &t);
    struct {
        enum chat_tool_format f;
        const char *text;
        size_t n_calls;
    } cases[] = {
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"n\": 2, \"tz\": \"Europe/Oslo\"}}\n</tool_call>", 1},
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Oslo\"}}\n</tool_call>", 0},
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"oslo\", \"n\": 1}}\n</tool_call>", 0},
        {CHAT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Oslo\", \"n\": -1}}\n</tool_call>", 0},
        {CHAT_TOOLS_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Asia/Tokyo\", \"n\": 1e0}}", 1},
        {CHAT_TOOLS_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"Asia/Tokyo\", \"n\": 1, \"x\": 0}}", 0},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"Asia/Tokyo\", \"n\": 3}", 1},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"Asia/Tokyo\", \"n\": \"3\"}", 0},
        {CHAT_TOOLS_GENERIC, "{\"tool_call\": {\"name\": \"get_time\", \"arguments\": {\"tz\": 5, \"n\": 3}}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tool_calls c;
        CHECK_EQ_INT(tool_calls_parse(cases[i].text, strlen(cases[i].text), cases[i].f, &t, &c), 0);
        if (c.n != cases[i].n_calls)
            th_fail(__FILE__, __LINE__, cases[i].text, "wrong number of calls");
        if (!c.n)   /* refused: the whole text is content */
            CHECK_EQ_STR(c.content ? c.content : "(null)", cases[i].text);
        tool_calls_release(&c);
    }
    gp_tools_release(&t);
}

/* Our Hermes parser on texts llama.cpp's server wrote on Qwen2.5-Coder GGUFs
 * (free, and under a grammar that makes it write <tool_call> blocks), against
 * llama.cpp's own parse of each text (tests/fixtures/chat/llama_tool_parses.json,
 * made by tests/oracle/llama_tool_parse_fixtures.py). Names and arguments
 * must be equal and the content equal up to the whitespace at its ends
 * (llama.cpp keeps the newline before the first tag). One difference is by
 * design: an answer that is one fenced or bare call object, which llama.cpp
 * leaves as content, is a call for us; there the call must be exactly the
 * object the fence holds. */
TEST(tools_parse_agrees_with_llama_cpp)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/chat/llama_tool_parses.json", 0, &e);
    CHECK(fx != NULL);
    if (!fx)
        return;
    json_t *tb = json_pack("{s:O}", "tools", json_object_get(fx, "tools"));
    struct gp_tools t;
    struct problem pe;
    CHECK_EQ_INT(gp_tools_parse(tb, &t, &pe), 0);
    size_t i, tagged = 0, fenced = 0;
    json_t *c;
    json_array_foreach(json_object_get(fx, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        const json_t *ll = json_object_get(c, "llama");
        const json_t *want = json_object_get(ll, "tool_calls");
        struct tool_calls got;
        CHECK_EQ_INT(tool_calls_parse(text, strlen(text), CHAT_TOOLS_HERMES, &t, &got), 0);
        const char *lc = json_string_value(json_object_get(ll, "content"));
        const char *lead = text + strspn(text, " \t\r\n");
        if (json_array_size(want) == 0 && !strstr(text, "<tool_call>") &&
            (*lead == '{' || strncmp(lead, "```", 3) == 0)) {
            /* by design: the bare or fenced call object is read as the call */
            const char *open = strchr(text, '{'), *close = strrchr(text, '}');
            json_t *obj = open && close ? json_loadb(open, (size_t)(close - open + 1), 0, &e) : NULL;
            if (got.n != 1 || !obj)
                th_fail(__FILE__, __LINE__, text, "a bare call llama.cpp leaves as content is not our one call");
            else {
                json_t *args = json_loads(got.v[0].arguments, 0, &e);
                CHECK_EQ_STR(got.v[0].name, json_string_value(json_object_get(obj, "name")));
                CHECK(json_equal(args, json_object_get(obj, "arguments")));
                json_decref(args);
            }
            CHECK(got.content == NULL);
            json_decref(obj);
            fenced++;
            tool_calls_release(&got);
            continue;
        }
        if (got.n != json_array_size(want))
            th_fail(__FILE__, __LINE__, text, "call count differs from llama.cpp's parse");
        for (size_t k = 0; k < got.n && k < json_array_size(want); k++) {
            const json_t *w = json_array_get(want, k);
            json_t *args = json_loads(got.v[k].arguments, 0, &e);
            CHECK_EQ_STR(got.v[k].name, json_string_value(json_object_get(w, "name")));
            if (!json_equal(args, json_object_get(w, "arguments")))
                th_fail(__FILE__, __LINE__, text, "arguments differ from llama.cpp's parse");
            json_decref(args);
        }
        /* content up to the whitespace at its ends; "" and none are the same */
        const char *a = got.content ? got.content : "", *b = lc ? lc : "";
        size_t la = got.content ? got.content_len : 0, lb = strlen(b);
        while (la && strchr(" \t\r\n", a[la - 1]))
            la--;
        while (lb && strchr(" \t\r\n", b[lb - 1]))
            lb--;
        while (la && strchr(" \t\r\n", *a))
            a++, la--;
        while (lb && strchr(" \t\r\n", *b))
            b++, lb--;
        if (la != lb || memcmp(a, b, la) != 0)
            th_fail(__FILE__, __LINE__, text, "content differs from llama.cpp's parse");
        tagged += got.n > 0;
        tool_calls_release(&got);
    }
    /* the fixture holds tagged calls (one, two, after text) and fenced ones */
    CHECK(tagged >= 20);
    CHECK(fenced >= 6);
    gp_tools_release(&t);
    json_decref(tb);
    json_decref(fx);
}

/* The grammar of each format accepts the calls the parser reads and
 * refuses what breaks the schema; "auto" is lazy on the start tag. */
TEST(tools_grammar_per_format)
{
    struct gp_tools t;
    tools_of("{\"tools\":[" WEATHER "],\"tool_choice\":\"required\"}", &t);
    struct {
        enum chat_tool_format f;
        const char *good, *bad;
    } cases[] = {
        {CHAT_TOOLS_HERMES,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}\n</tool_call>"},
        {CHAT_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
         "{\"name\": \"get_time\", \"parameters\": {}}"},
        {CHAT_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
         "[TOOL_CALLS][]"},
        {CHAT_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_weather[ARGS]"
         "{\"city\": \"Oslo\"}", "[TOOL_CALLS]get_weather[ARGS]{\"town\": \"Paris\"}"},
        {CHAT_TOOLS_GENERIC,
         "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}",
         "{\"response\": \"hi\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gen_params g;
        memset(&g, 0, sizeof g);
        struct problem pe;
        CHECK_EQ_INT(gp_tools_arm(&t, cases[i].f, 0, &g, &pe), 0);
        CHECK(g.grammar != NULL);
        CHECK_EQ_STR(g.gram_trigger, "");
        CHECK(gram_match(g.grammar, cases[i].good, strlen(cases[i].good)));
        CHECK(!gram_match(g.grammar, cases[i].bad, strlen(cases[i].bad)));
        struct tool_calls c;
        CHECK_EQ_INT(tool_calls_parse(cases[i].good, strlen(cases[i].good), cases[i].f, &t, &c), 0);
        CHECK(c.n >= 1);
        tool_calls_release(&c);
        gen_params_release(&g);
    }
    gp_tools_release(&t);
    /* auto: Hermes arms at <tool_call>, the thinking block first when the template thinks */
    tools_of("{\"tools\":[" WEATHER "],\"parallel_tool_calls\":false}", &t);
    struct gen_params g;
    memset(&g, 0, sizeof g);
    struct problem pe;
    CHECK_EQ_INT(gp_tools_arm(&t, CHAT_TOOLS_HERMES, 1, &g, &pe), 0);
    CHECK_EQ_STR(g.gram_trigger, "<tool_call>");
    CHECK_EQ_STR(g.gram_after, "</think>");
    const char *two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}\n</tool_call>";
    CHECK(!gram_match(g.grammar, two, strlen(two)));   /* no parallel calls */
    gen_params_release(&g);
    /* a strict schema with local $refs: the refs resolve against the function's own
     * parameters wherever the call grammar embeds them */
    gp_tools_release(&t);
    tools_of("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"strict\":true,"
             "\"parameters\":{\"$defs\":{\"tz\":{\"type\":\"string\",\"enum\":[\"UTC\",\"CET\"]}},"
             "\"type\":\"object\",\"properties\":{\"tz\":{\"$ref\":\"#/$defs/tz\"}},\"required\":[\"tz\"],"
             "\"additionalProperties\":false}}}],\"tool_choice\":\"required\"}", &t);
    for (int f = 0; f < CHAT_TOOL_FORMATS; f++) {
        memset(&g, 0, sizeof g);
        CHECK_EQ_INT(gp_tools_arm(&t, (enum chat_tool_format)f, 0, &g, &pe), 0);
        gen_params_release(&g);
    }
    memset(&g, 0, sizeof g);
    CHECK_EQ_INT(gp_tools_arm(&t, CHAT_TOOLS_HERMES, 0, &g, &pe), 0);
    const char *tz = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
    const char *tz_bad = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"PST\"}}\n</tool_call>";
    CHECK(gram_match(g.grammar, tz, strlen(tz)));
    CHECK(!gram_match(g.grammar, tz_bad, strlen(tz_bad)));
    gen_params_release(&g);
    gp_tools_release(&t);
    tools_of("{\"tools\":[" WEATHER "],\"parallel_tool_calls\":false}", &t);
    /* generic auto also allows the plain answer */
    memset(&g, 0, sizeof g);
    CHECK_EQ_INT(gp_tools_arm(&t, CHAT_TOOLS_GENERIC, 0, &g, &pe), 0);
    CHECK(gram_match(g.grammar, "{\"response\": \"hi\"}", 18));
    CHECK(gram_match(g.grammar, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}}", 66));
    gen_params_release(&g);
    gp_tools_release(&t);
}

/* The chat.completion a call becomes: tool_calls with call_ ids, content
 * null, OpenAI's finish reasons; the thinking block split off; a call cut
 * by the length limit stays text. */
TEST(tools_response_shapes)
{
    struct tok *t = vocab2("<s>", "</s>");
    CHECK(t);
    struct gp_tools tl, named, legacy;
    tools_of("{\"tools\":[" WEATHER "]}", &tl);
    tools_of("{\"tools\":[" WEATHER "],\"tool_choice\":{\"type\":\"function\",\"function\":"
             "{\"name\":\"get_weather\"}}}", &named);
    tools_of("{\"functions\":[{\"name\":\"get_weather\"}]}", &legacy);
    const char *call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    struct {
        const struct gp_tools *tools;
        int think;
        const char *text;
        enum stop_finish finish;
        const char *want_finish, *want_content, *want_reasoning;
        int calls;
    } cases[] = {
        {&tl, 0, call, STOP_FINISH_STOP, "tool_calls", NULL, NULL, 1},
        {&named, 0, call, STOP_FINISH_STOP, "stop", NULL, NULL, 1},
        {&legacy, 0, call, STOP_FINISH_STOP, "function_call", NULL, NULL, -1},
        {&tl, 0, "<tool_call>\n{\"name\": \"get_weather\", \"argum", STOP_FINISH_LENGTH, "length",
         "<tool_call>\n{\"name\": \"get_weather\", \"argum", NULL, 0},
        {&tl, 1, "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
         "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", STOP_FINISH_STOP, "tool_calls", NULL,
         "The user wants weather.", 1},
        {NULL, 1, "<think>\nhmm\n</think>\n\nParis.", STOP_FINISH_STOP, "stop", "Paris.", "hmm", 0},
        {NULL, 1, "<think>\nstill thinking", STOP_FINISH_LENGTH, "length", "", "still thinking", 0},
        {NULL, 1, "No thinking here.", STOP_FINISH_STOP, "stop", "No thinking here.", NULL, 0},
        {NULL, 0, "<think>x</think>y", STOP_FINISH_STOP, "stop", "<think>x</think>y", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct resp_meta m;
        memset(&m, 0, sizeof m);
        m.id = "chatcmpl-test";
        m.created = 1;
        m.model = "m";
        m.prompt_tokens = 5;
        m.completion_tokens = 9;
        m.tools = cases[i].tools;
        m.tool_fmt = CHAT_TOOLS_HERMES;
        m.think = cases[i].think;
        struct gen_choice c;
        memset(&c, 0, sizeof c);
        c.text = cases[i].text;
        c.text_len = strlen(cases[i].text);
        c.finish = cases[i].finish;
        c.n_reason = 4;
        json_t *body = NULL;
        CHECK_EQ_INT(resp_chat_build(&m, &c, 1, t, &body), 0);
        json_t *ch = json_array_get(json_object_get(body, "choices"), 0);
        json_t *msg = json_object_get(ch, "message");
        CHECK_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")), cases[i].want_finish);
        if (cases[i].want_content)
            CHECK_EQ_STR(json_string_value(json_object_get(msg, "content")), cases[i].want_content);
        else
            CHECK(json_is_null(json_object_get(msg, "content")));
        if (cases[i].want_reasoning) {
            CHECK_EQ_STR(json_string_value(json_object_get(msg, "reasoning_content")), cases[i].want_reasoning);
            CHECK_EQ_STR(json_string_value(json_object_get(msg, "reasoning")), cases[i].want_reasoning);
            CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(json_object_get(body, "usage"),
                                                                            "completion_tokens_details"),
                                                            "reasoning_tokens")), 4);
        } else {
            CHECK(!json_object_get(msg, "reasoning_content"));
        }
        json_t *calls = json_object_get(msg, "tool_calls");
        if (cases[i].calls > 0) {
            CHECK_EQ_INT(json_array_size(calls), (size_t)cases[i].calls);
            json_t *c0 = json_array_get(calls, 0);
            const char *id = json_string_value(json_object_get(c0, "id"));
            CHECK(id && strncmp(id, "call_", 5) == 0 && strlen(id) == 29);
            CHECK_EQ_STR(json_string_value(json_object_get(c0, "type")), "function");
            CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")),
                         "{\"city\":\"Paris\"}");
        } else if (cases[i].calls < 0) {
            json_t *fc = json_object_get(msg, "function_call");
            CHECK_EQ_STR(json_string_value(json_object_get(fc, "name")), "get_weather");
            CHECK(!calls);
        } else {
            CHECK(!calls);
        }
        json_decref(body);
    }
    /* ids are derived from the response id: a retried request repeats them */
    gp_tools_release(&tl);
    gp_tools_release(&named);
    gp_tools_release(&legacy);
    tok_free(t);
}

/* The calls a template renders in an assistant turn are what its model is
 * trained to write: on every collected template of a call format, the turn
 * the template renders for one call (two where the template takes parallel
 * calls) parses back to the same calls, and the "required" grammar accepts
 * it where the rendered frame is the one we generate (not with Nemo's or
 * Small 3.2's ids, which the model writes and we give afresh). The turn is
 * the render of [user, assistant calls] after the render of [user] with its
 * generation prompt, up to the first end-of-turn marker. */
TEST(tools_parse_reads_the_calls_each_template_renders)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/chat/tool_renders.json", 0, &e);
    CHECK(fx);
    static const char *const ends[] = {"<|im_end|>", "</s>", "<|eot_id|>", "<|eom_id|>",
                                       "<|end_of_text|>", "<|end|>", "<sep>", NULL};
    size_t parsed = 0, by_grammar = 0, per_fmt[CHAT_TOOL_FORMATS] = {0};
    const char *name;
    json_t *spec;
    json_object_foreach(json_object_get(fx, "templates"), name, spec) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/chat/templates/%s.jinja", name);
        char *src = th_slurp(path, NULL);
        struct tok *t = vocab2(json_string_value(json_object_get(spec, "bos")),
                               json_string_value(json_object_get(spec, "eos")));
        struct chat_tmpl *ct = NULL;
        if (!src || !t || chat_tmpl_new(src, t, &ct) != 0 ||
            chat_tmpl_tool_format(ct) == CHAT_TOOLS_GENERIC) {
            chat_tmpl_free(ct);
            tok_free(t);
            free(src);
            continue;
        }
        enum chat_tool_format tf = chat_tmpl_tool_format(ct);
        int two = tf != CHAT_TOOLS_LLAMA3;
        const char *user = "{\"role\":\"user\",\"content\":\"Weather in Paris and the time in Tokyo?\"}";
        char calls[600], b1[1600], b2[2400];
        snprintf(calls, sizeof calls,
                 "[{\"id\":\"call_0aB9cD8eF7gH6iJ5kL4mN3oP\",\"type\":\"function\",\"function\":"
                 "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}%s]",
                 two ? ",{\"id\":\"call_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2\",\"type\":\"function\",\"function\":"
                       "{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": \\\"Asia/Tokyo\\\"}\"}}"
                     : "");
        const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
                            "\"Weather.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                            "{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
                            "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"description\":\"Time.\","
                            "\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}},"
                            "\"required\":[\"tz\"],\"additionalProperties\":false}}}]";
        snprintf(b1, sizeof b1, "{\"model\":\"m\",\"tools\":%s,\"tool_choice\":\"required\",\"messages\":[%s]}",
                 tools, user);
        snprintf(b2, sizeof b2, "{\"model\":\"m\",\"tools\":%s,\"tool_choice\":\"required\",\"messages\":[%s,"
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":%s}]}", tools, user, calls);
        struct buf r1, r2;
        buf_init(&r1, 1 << 20);
        buf_init(&r2, 1 << 20);
        char why[256];
        struct gp_request gp1, gp2;
        struct chat_msgs m1, m2;
        struct problem pe;
        json_t *j1 = json_loads(b1, 0, &e), *j2 = json_loads(b2, 0, &e);
        CHECK(j1 && j2);
        CHECK_EQ_INT(gp_parse(j1, GP_CHAT, 0, &gp1, &pe), 0);
        CHECK_EQ_INT(gp_parse(j2, GP_CHAT, 0, &gp2, &pe), 0);
        CHECK_EQ_INT(chat_msgs_from_body(j1, &m1, &pe), 0);
        CHECK_EQ_INT(chat_msgs_from_body(j2, &m2, &pe), 0);
        int rc1 = prompt_chat_render(ct, &m1, &gp1, 1768469400, &r1, why, sizeof why);
        int rc2 = prompt_chat_render(ct, &m2, &gp2, 1768469400, &r2, why, sizeof why);
        size_t common = 0;   /* the turn starts where the renders part (QwQ's generation
                              * prompt opens <think>, its rendered turns do not) */
        while (rc1 == 0 && rc2 == 0 && common < r1.len && common < r2.len &&
               r1.data[common] == r2.data[common])
            common++;
        while (common < r1.len && common > 0 && r2.data[common - 1] != '\n')
            common--;   /* diverged inside the generation prompt: back to its line */
        if (rc1 || rc2 || common + 16 < r1.len) {
            th_fail(__FILE__, __LINE__, name, "the call turn does not follow the prompt (rc %d %d: %s)",
                    rc1, rc2, why);
        } else {
            const char *turn = r2.data + common;
            size_t n = r2.len - common;
            for (int k = 0; ends[k]; k++) {
                const char *x = memmem(turn, n, ends[k], strlen(ends[k]));
                if (x)
                    n = (size_t)(x - turn);
            }
            while (n && strchr(" \n", turn[n - 1]))
                n--;
            struct tool_calls c;
            CHECK_EQ_INT(tool_calls_parse(turn, n, tf, &gp2.tools, &c), 0);
            if (c.n != (size_t)(two ? 2 : 1) || strcmp(c.v[0].name, "get_weather") != 0 ||
                strcmp(c.v[0].arguments, "{\"city\":\"Paris\"}") != 0 ||
                (two && strcmp(c.v[1].arguments, "{\"tz\":\"Asia/Tokyo\"}") != 0))
                th_fail(__FILE__, __LINE__, name, "the rendered calls do not parse back: %.*s", (int)n, turn);
            else
                parsed++, per_fmt[tf]++;
            tool_calls_release(&c);
            /* (Reka-Edge joins its calls without the newline our grammar writes) */
            if (!memmem(turn, n, "\"id\"", 4) && !memmem(turn, n, "[CALL_ID]", 9) &&
                !memmem(turn, n, "</tool_call><tool_call>", 23)) {
                struct gen_params g;
                memset(&g, 0, sizeof g);
                CHECK_EQ_INT(gp_tools_arm(&gp2.tools, tf, 0, &g, &pe), 0);
                /* the calls, after a thinking template's empty block and the
                 * newline Qwen's templates put after the (empty) content */
                const char *lead = turn;
                const char *te = memmem(turn, n, "</think>", 8);
                if (te)
                    lead = te + 8;
                lead += strspn(lead, " \n");
                if (!gram_match(g.grammar, lead, n - (size_t)(lead - turn)))
                    th_fail(__FILE__, __LINE__, name, "the required grammar refuses the rendered calls: %.*s",
                            (int)n, turn);
                else
                    by_grammar++;
                gen_params_release(&g);
            }
        }
        buf_release(&r1);
        buf_release(&r2);
        chat_msgs_release(&m1);
        chat_msgs_release(&m2);
        gp_release(&gp1);
        gp_release(&gp2);
        json_decref(j1);
        json_decref(j2);
        chat_tmpl_free(ct);
        tok_free(t);
        free(src);
    }
    printf("  rendered calls parsed back: %zu (hermes %zu, llama3 %zu, mistral %zu, mistral-args %zu), "
           "accepted by the grammar: %zu\n", parsed, per_fmt[CHAT_TOOLS_HERMES], per_fmt[CHAT_TOOLS_LLAMA3],
           per_fmt[CHAT_TOOLS_MISTRAL], per_fmt[CHAT_TOOLS_MISTRAL_ARGS], by_grammar);
    CHECK(per_fmt[CHAT_TOOLS_MISTRAL_ARGS] >= 3);
    CHECK(per_fmt[CHAT_TOOLS_MISTRAL] >= 1);
    CHECK(per_fmt[CHAT_TOOLS_LLAMA3] >= 2);
    json_decref(fx);
}
