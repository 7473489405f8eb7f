/* libFuzzer target: /v1/responses bodies -> oresp_to_chat / oresp_check,
 * and back through oresp_from_chat.
 *
 * The input is parsed as JSON with js_parse (as jobd does for every line).
 * Checks: no crash or leak; a refusal always carries a message; a
 * translation is a chat body the chat code can read: a non-empty
 * "messages" array of objects whose role is system, developer, user,
 * assistant or tool, tool messages with a string tool_call_id and content,
 * assistant tool_calls entries with string id, function.name and
 * function.arguments. A chat.completion is then made from the translated
 * body (the last message's text as content; the tool calls of the last
 * assistant message as its calls; finish_reason from the input's length)
 * and turned into a Response, which must have an id "resp_...", a
 * non-empty output whose function_call items match the calls, and usage.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "openai/responses.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_str(const json_t *o, const char *k)
{
    return json_is_string(json_object_get(o, k));
}

static void check_chat(const json_t *chat)
{
    const json_t *msgs = json_object_get(chat, "messages");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        abort();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *r = json_string_value(json_object_get(m, "role"));
        int known = 0;
        for (size_t k = 0; r && k < sizeof roles / sizeof roles[0]; k++)
            known |= strcmp(r, roles[k]) == 0;
        if (!known)
            abort();
        if (strcmp(r, "tool") == 0 && (!is_str(m, "tool_call_id") || !is_str(m, "content")))
            abort();
        const json_t *calls = json_object_get(m, "tool_calls");
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c)
        {
            const json_t *f = json_object_get(c, "function");
            if (strcmp(r, "assistant") != 0 || !is_str(c, "id") || !is_str(f, "name") ||
                !is_str(f, "arguments"))
                abort();
        }
    }
}

/* A chat.completion answering chat, as the chat code would build it. */
static json_t *fake_completion(const json_t *chat, size_t size)
{
    const json_t *msgs = json_object_get(chat, "messages");
    const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const json_t *content = json_object_get(last, "content");
    json_t *calls = json_object_get(last, "tool_calls");
    json_t *msg = json_pack("{s:s, s:O, s:n}", "role", "assistant", "content",
                            json_is_string(content) ? content : json_null(), "refusal");
    if (!msg)
        return NULL;
    if (calls)
        json_object_set(msg, "tool_calls", calls);
    if (size % 3 == 0)
        json_object_set_new(msg, "reasoning_content", json_string("thinking"));
    return json_pack("{s:s, s:s, s:i, s:s, s:[{s:i, s:o, s:n, s:s}], s:{s:i, s:i, s:i}}", "id",
                     "chatcmpl-fuzz", "object", "chat.completion", "created", 1, "model", "m",
                     "choices", "index", 0, "message", msg, "logprobs", "finish_reason",
                     size % 2 ? "length" : calls ? "tool_calls" : "stop", "usage",
                     "prompt_tokens", 3, "completion_tokens", 2, "total_tokens", 5);
}

static void check_response(const json_t *body, const json_t *chat, size_t size)
{
    json_t *cc = fake_completion(chat, size), *r = NULL;
    if (!cc)
        return;
    int rc = oresp_from_chat(body, cc, &r);
    if (rc == ERR_NOMEM) {
        json_decref(cc);
        return;
    }
    if (rc != 0)
        abort();
    const char *id = json_string_value(json_object_get(r, "id"));
    const json_t *out = json_object_get(r, "output");
    if (!id || strncmp(id, "resp_", 5) != 0 || !json_is_array(out) || json_array_size(out) == 0 ||
        !json_is_object(json_object_get(r, "usage")))
        abort();
    const json_t *calls = json_object_get(json_object_get(json_array_get(json_object_get(cc,
                                          "choices"), 0), "message"), "tool_calls");
    size_t n_fc = 0, i;
    json_t *it;
    json_array_foreach(out, i, it)
    {
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!ty)
            abort();
        if (strcmp(ty, "function_call") == 0 && (!is_str(it, "call_id") || !is_str(it, "arguments")))
            abort();
        n_fc += strcmp(ty, "function_call") == 0;
    }
    if (n_fc != json_array_size(calls))
        abort();
    json_decref(r);
    json_decref(cc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = NULL, *chat = NULL;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    if (js_parse((const char *)data, size, &lim, &j, NULL) != 0)
        return 0;
    struct problem e;
    memset(&e, 0, sizeof e);
    int rc = oresp_to_chat(j, &chat, &e);
    if (rc == 0) {
        check_chat(chat);
        check_response(j, chat, size);
        json_decref(chat);
    } else if (rc == ERR_INVAL && e.message[0] == 0) {
        abort(); /* a request error always explains itself */
    }
    memset(&e, 0, sizeof e);
    rc = oresp_check(j, 50000, NULL, &e);
    if (rc == ERR_INVAL && e.message[0] == 0)
        abort();
    json_decref(j);
    return 0;
}
