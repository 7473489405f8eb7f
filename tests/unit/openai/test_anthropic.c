/*
 * test_anthropic.c - the Messages contract both ways: params onto a chat
 * body (compared whole against the expected body), the refusals with their
 * Anthropic paths, and chat.completion bodies back into Messages.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/problem.h"
#include "openai/anthropic.h"
#include "tests/th.h"

static json_t *parse(const char *s)
{
    json_error_t e;
    json_t *v = json_loads(s, 0, &e);
    if (!v)
        th_fail(__FILE__, __LINE__, "json_loads", "%s: %s", e.text, s);
    return v;
}

/* params -> chat body equals want (JSON text). */
static void check_maps(const char *params, const char *want)
{
    json_t *p = parse(params), *w = parse(want), *got = NULL;
    struct problem err = {0};
    int rc = anth_params_check(p, &got, &err);
    if (rc)
        th_fail(__FILE__, __LINE__, "anth_params_check", "rc %d: %s: %s", rc, err.param, err.message);
    if (!json_equal(got, w)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        th_fail(__FILE__, __LINE__, "json_equal", "got %s", g);
    }
    json_decref(p);
    json_decref(w);
    json_decref(got);
}

/* params refused with param path and a message containing sub. */
static void check_refused(const char *params, const char *path, const char *sub)
{
    json_t *p = parse(params), *got = NULL;
    struct problem err = {0};
    int rc = anth_params_check(p, &got, &err);
    CHECK_EQ_INT(rc, ERR_INVAL);
    CHECK(got == NULL);
    CHECK_EQ_STR(err.param, path);
    if (!strstr(err.message, sub))
        th_fail(__FILE__, __LINE__, "strstr(message, sub)", "\"%s\" lacks \"%s\"", err.message, sub);
    CHECK_EQ_STR(err.code, "invalid_request_error");
    json_decref(p);
}

TEST(anthropic_plain_request_maps_model_max_tokens_and_sampling)
{
    check_maps("{\"model\":\"m\",\"max_tokens\":16,\"temperature\":0,\"top_p\":0.9,\"top_k\":5,"
               "\"stop_sequences\":[\"\\n\\n\"],\"metadata\":{\"user_id\":\"u1\"},"
               "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
               "{\"model\":\"m\",\"max_tokens\":16,\"temperature\":0,\"top_p\":0.9,\"top_k\":5,"
               "\"stop\":[\"\\n\\n\"],\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}");
}

TEST(anthropic_system_blocks_and_text_blocks_join_with_newlines)
{
    check_maps("{\"model\":\"m\",\"max_tokens\":8,\"system\":[{\"type\":\"text\",\"text\":\"A\"},"
               "{\"type\":\"text\",\"text\":\"B\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
               "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
               "{\"type\":\"text\",\"text\":\"y\"}]},{\"role\":\"assistant\",\"content\":\"ok\"},"
               "{\"role\":\"user\",\"content\":\"z\"}]}",
               "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"system\",\"content\":\"A\\nB\"},"
               "{\"role\":\"user\",\"content\":\"x\\ny\"},{\"role\":\"assistant\",\"content\":\"ok\"},"
               "{\"role\":\"user\",\"content\":\"z\"}]}");
}

TEST(anthropic_tool_use_and_tool_result_become_tool_calls_and_tool_messages)
{
    check_maps("{\"model\":\"m\",\"max_tokens\":64,"
               "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather.\",\"input_schema\":"
               "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}],"
               "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
               "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
               "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"s\"},"
               "{\"type\":\"text\",\"text\":\"Let me look.\"},"
               "{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
               "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_01\","
               "\"content\":[{\"type\":\"text\",\"text\":\"18C\"}]},{\"type\":\"text\",\"text\":\"And?\"}]}]}",
               "{\"model\":\"m\",\"max_tokens\":64,\"tools\":[{\"type\":\"function\",\"function\":{"
               "\"name\":\"get_weather\",\"description\":\"Weather.\",\"parameters\":{\"type\":\"object\","
               "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}],"
               "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
               "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
               "{\"role\":\"assistant\",\"content\":\"Let me look.\",\"reasoning_content\":\"hm\","
               "\"tool_calls\":[{\"id\":\"toolu_01\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
               "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
               "{\"role\":\"tool\",\"tool_call_id\":\"toolu_01\",\"content\":\"18C\"},"
               "{\"role\":\"user\",\"content\":\"And?\"}]}");
}

TEST(anthropic_tool_choice_tool_none_auto_and_thinking_switch)
{
    const char *tools = "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],";
    const char *ctools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                         "{\"type\":\"object\"}}}],";
    char p[1024], w[1024];
    snprintf(p, sizeof p, "{\"model\":\"m\",\"max_tokens\":4,%s\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
             "\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", tools);
    snprintf(w, sizeof w, "{\"model\":\"m\",\"max_tokens\":4,%s\"tool_choice\":{\"type\":\"function\",\"function\":"
             "{\"name\":\"f\"}},\"chat_template_kwargs\":{\"enable_thinking\":false},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
             ctools);
    check_maps(p, w);
    snprintf(p, sizeof p, "{\"model\":\"m\",\"max_tokens\":2048,%s\"tool_choice\":{\"type\":\"none\"},"
             "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", tools);
    snprintf(w, sizeof w, "{\"model\":\"m\",\"max_tokens\":2048,%s\"tool_choice\":\"none\","
             "\"chat_template_kwargs\":{\"enable_thinking\":true},\"thinking_token_budget\":1024,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", ctools);
    check_maps(p, w);
}

TEST(anthropic_refusals_name_the_field)
{
    check_refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "max_tokens",
                  "Field required");
    check_refused("{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "model",
                  "Field required");
    check_refused("{\"model\":\"m\",\"max_tokens\":3}", "messages", "Field required");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"text\",\"text\":\"see\"},{\"type\":\"image\",\"source\":{\"type\":\"base64\"}}]}]}",
                  "messages.0.content.1.type", "'image'");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"document\"}]}]}", "messages.0.content.0.type", "'document'");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
                  "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},\"messages\":[{\"role\":\"user\","
                  "\"content\":\"q\"}]}", "tool_choice.name", "'g' not found");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
                  "\"tool_choice\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                  "tool_choice.type", "expected tags");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                  "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"tool_result\",\"tool_use_id\":\"toolu_x\",\"content\":\"r\"}]}]}",
                  "messages.2.content.0.tool_use_id", "no tool_use block");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"system\",\"content\":\"q\"}]}",
                  "messages.0.role", "'user' or 'assistant'");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"temperature\":1.5,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"q\"}]}", "temperature", "between 0 and 1");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                  "n", "Extra inputs");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"stream\":true,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"q\"}]}", "stream", "not supported");
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "tools.0.type", "not supported");
    check_refused("{\"model\":\"m\",\"max_tokens\":2000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "thinking.budget_tokens", "1024");
    /* the chat checks' own refusals, mapped back to the Anthropic field */
    check_refused("{\"model\":\"m\",\"max_tokens\":3,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "stop_sequences", "stop");
    check_refused("[1]", "", "dictionary");
}

TEST(anthropic_answer_text_maps_to_end_turn_with_usage)
{
    json_t *chat = parse("{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"smollm\","
                         "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello\","
                         "\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
                         "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":4}}}");
    json_t *m = NULL, *w = parse("{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"smollm\","
                                  "\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}],\"stop_reason\":\"end_turn\","
                                  "\"stop_sequence\":null,\"usage\":{\"input_tokens\":8,\"output_tokens\":3,"
                                  "\"cache_read_input_tokens\":4,\"cache_creation_input_tokens\":0}}");
    CHECK_EQ_INT(anth_message_from_chat(chat, &m), 0);
    CHECK(json_equal(m, w));
    json_decref(m);
    json_decref(w);
    json_decref(chat);
}

TEST(anthropic_answer_thinking_and_tool_calls_become_blocks)
{
    json_t *chat = parse("{\"id\":\"chatcmpl-x\",\"model\":\"q\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                         "\"assistant\",\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":"
                         "\"call_123\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                         "\"{\\\"a\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,"
                         "\"completion_tokens\":7}}");
    json_t *m = NULL, *w = parse("[{\"type\":\"thinking\",\"thinking\":\"think\",\"signature\":\"\"},"
                                  "{\"type\":\"tool_use\",\"id\":\"toolu_123\",\"name\":\"f\",\"input\":{\"a\":1}}]");
    CHECK_EQ_INT(anth_message_from_chat(chat, &m), 0);
    CHECK(json_equal(json_object_get(m, "content"), w));
    CHECK_EQ_STR(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(m, "usage"), "input_tokens")), 5);
    json_decref(m);
    json_decref(w);
    json_decref(chat);
    chat = parse("{\"id\":\"chatcmpl-y\",\"model\":\"q\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                 "\"assistant\",\"content\":\"abc\"},\"finish_reason\":\"length\"}],\"usage\":{}}");
    CHECK_EQ_INT(anth_message_from_chat(chat, &m), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(m, "stop_reason")), "max_tokens");
    json_decref(m);
    json_decref(chat);
    chat = parse("{\"id\":\"chatcmpl-z\",\"model\":\"q\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                 "\"assistant\",\"content\":\"one\"},\"finish_reason\":\"stop\",\"stop_reason\":\"\\n\\n\"}],"
                 "\"usage\":{}}");
    CHECK_EQ_INT(anth_message_from_chat(chat, &m), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
    CHECK_EQ_STR(json_string_value(json_object_get(m, "stop_sequence")), "\n\n");
    json_decref(m);
    json_decref(chat);
    chat = parse("{\"object\":\"list\"}");
    CHECK_EQ_INT(anth_message_from_chat(chat, &m), ERR_INVAL);
    json_decref(chat);
}
