/*
 * responses.c - /v1/responses onto the chat path and back (see
 * responses.h). The request side walks the body once, building the chat
 * body as it goes; every refusal names the Responses field. The response
 * side reads the chat.completion the chat code built (response.h) and
 * writes the Response keys in the SDK's order.
 */
#include "openai/responses.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/id.h"
#include "openai/chat_msgs.h"
#include "openai/params.h"

/* ---- small helpers ------------------------------------------------------------------------ */

/* The member, or NULL when absent or JSON null. */
static json_t *member(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static const char *type_name(const json_t *v)
{
    if (!v)
        return "nothing"; /* an absent member */
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int bad_type(struct problem *err, const char *param, const char *want, const json_t *v)
{
    return problem_setf(err, "invalid_type", param,
                        "Invalid type for '%s': expected %s, but got %s instead.", param, want,
                        type_name(v));
}

static int missing(struct problem *err, const char *param)
{
    return problem_setf(err, "missing_required_parameter", param,
                        "Missing required parameter: '%s'.", param);
}

/* 1 if s is one of the NULL-terminated list. */
static int one_of(const char *s, const char *const *list)
{
    for (; s && *list; list++)
        if (strcmp(s, *list) == 0)
            return 1;
    return 0;
}

/* Code points of a UTF-8 string (jansson strings are valid UTF-8). */
static size_t n_chars(const char *s, size_t n)
{
    size_t cp = 0;
    for (size_t i = 0; i < n; i++)
        cp += ((unsigned char)s[i] & 0xC0) != 0x80;
    return cp;
}

/* o[key] = v (stolen); ERR_NOMEM when v is NULL or the set fails. */
static int put(json_t *o, const char *key, json_t *v)
{
    if (!v)
        return ERR_NOMEM;
    return json_object_set_new(o, key, v) ? ERR_NOMEM : 0;
}

static int push(json_t *a, json_t *v)
{
    if (!v)
        return ERR_NOMEM;
    return json_array_append_new(a, v) ? ERR_NOMEM : 0;
}

/* ---- request: top-level fields ------------------------------------------------------------ */

/* Fields that need server-side state or run in the background. */
static int refuse_stateful(const json_t *body, struct problem *err)
{
    json_t *v = member(body, "previous_response_id");
    if (v)
        return problem_setf(err, "previous_response_not_found", "previous_response_id",
                            "Previous response with id '%.80s' not found: a batch line must carry "
                            "its whole conversation in 'input' (responses are not stored).",
                            json_is_string(v) ? json_string_value(v) : "?");
    static const char *const stateful[] = {"conversation", "prompt", NULL};
    for (int i = 0; stateful[i]; i++)
        if (member(body, stateful[i]))
            return problem_setf(err, "unsupported_parameter", stateful[i],
                                "Unsupported parameter: '%s' needs stored server-side state, "
                                "which a batch line does not have; send the whole conversation "
                                "in 'input'.", stateful[i]);
    if ((v = member(body, "background")) && !json_is_boolean(v))
        return bad_type(err, "background", "a boolean", v);
    if (json_is_true(v))
        return problem_setf(err, "unsupported_value", "background",
                            "Unsupported value: 'background' must be false in a batch request.");
    /* chat-only names: a Responses body that mixes the two APIs */
    static const char *const chat_only[][2] = {
        {"messages", "input"},
        {"max_tokens", "max_output_tokens"},
        {"max_completion_tokens", "max_output_tokens"},
        {"response_format", "text.format"},
        {"n", NULL},
        {"logprobs", "top_logprobs"},
        {"functions", "tools"},
        {"function_call", "tool_choice"},
        {"reasoning_effort", "reasoning.effort"},
    };
    for (size_t i = 0; i < sizeof chat_only / sizeof chat_only[0]; i++) {
        if (!member(body, chat_only[i][0]))
            continue;
        if (chat_only[i][1])
            return problem_setf(err, "unknown_parameter", chat_only[i][0],
                                "Unknown parameter: '%s' (a /v1/chat/completions field); "
                                "/v1/responses takes '%s'.", chat_only[i][0], chat_only[i][1]);
        return problem_setf(err, "unknown_parameter", chat_only[i][0],
                            "Unknown parameter: '%s'.", chat_only[i][0]);
    }
    return 0;
}

static int check_metadata(const json_t *body, struct problem *err)
{
    json_t *md = member(body, "metadata");
    if (!md)
        return 0;
    if (!json_is_object(md))
        return bad_type(err, "metadata", "an object", md);
    if (json_object_size(md) > ORESP_MAX_METADATA)
        return problem_setf(err, "object_above_max_properties", "metadata",
                            "Invalid 'metadata': too many properties. Expected an object with at "
                            "most %d properties, but got %zu instead.", ORESP_MAX_METADATA,
                            json_object_size(md));
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (n_chars(k, strlen(k)) > ORESP_METADATA_KEY_CHARS)
            return problem_setf(err, "string_above_max_length", "metadata",
                                "Invalid 'metadata': key '%.40s...' is longer than %d characters.",
                                k, ORESP_METADATA_KEY_CHARS);
        if (!json_is_string(v))
            return problem_setf(err, "invalid_type", "metadata",
                                "Invalid type for 'metadata.%.60s': expected a string, but got %s "
                                "instead.", k, type_name(v));
        if (n_chars(json_string_value(v), json_string_length(v)) > ORESP_METADATA_VALUE_CHARS)
            return problem_setf(err, "string_above_max_length", "metadata",
                                "Invalid 'metadata.%.60s': string too long. Expected at most %d "
                                "characters.", k, ORESP_METADATA_VALUE_CHARS);
    }
    return 0;
}

/* The settings that are only checked and echoed. */
static int check_echoed(const json_t *body, struct problem *err)
{
    static const char *const bools[] = {"store", "parallel_tool_calls", NULL};
    for (int i = 0; bools[i]; i++) {
        json_t *v = member(body, bools[i]);
        if (v && !json_is_boolean(v))
            return bad_type(err, bools[i], "a boolean", v);
    }
    static const char *const strs[] = {"service_tier", "safety_identifier", "prompt_cache_key",
                                       "prompt_cache_retention", "user", "truncation", NULL};
    for (int i = 0; strs[i]; i++) {
        json_t *v = member(body, strs[i]);
        if (v && !json_is_string(v))
            return bad_type(err, strs[i], "a string", v);
    }
    static const char *const ids[] = {"safety_identifier", "user", NULL};
    for (int i = 0; ids[i]; i++) {
        json_t *v = member(body, ids[i]);
        if (v && n_chars(json_string_value(v), json_string_length(v)) > ORESP_MAX_ID_CHARS)
            return problem_setf(err, "string_above_max_length", ids[i],
                                "Invalid '%s': string too long. Expected a string with maximum "
                                "length %d.", ids[i], ORESP_MAX_ID_CHARS);
    }
    static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority", NULL};
    json_t *v = member(body, "service_tier");
    if (v && !one_of(json_string_value(v), tiers))
        return problem_setf(err, "invalid_value", "service_tier",
                            "Invalid value for 'service_tier': '%.40s'. Supported values are: "
                            "'auto', 'default', 'flex', 'scale' and 'priority'.",
                            json_string_value(v));
    static const char *const trunc[] = {"auto", "disabled", NULL};
    if ((v = member(body, "truncation")) && !one_of(json_string_value(v), trunc))
        return problem_setf(err, "invalid_value", "truncation",
                            "Invalid value for 'truncation': supported values are 'auto' and "
                            "'disabled'.");
    if ((v = member(body, "include"))) {
        if (!json_is_array(v))
            return bad_type(err, "include", "an array of strings", v);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return bad_type(err, "include", "an array of strings", v);
    }
    if ((v = member(body, "max_tool_calls")) && (!json_is_integer(v) || json_integer_value(v) < 1))
        return json_is_integer(v)
                   ? problem_setf(err, "integer_below_min_value", "max_tool_calls",
                                  "Invalid 'max_tool_calls': integer below minimum value. "
                                  "Expected a value >= 1.")
                   : bad_type(err, "max_tool_calls", "an integer", v);
    return 0;
}

/* ---- request: input items -------------------------------------------------------------------- */

/* The chat messages being built from input (and instructions). */
struct tx {
    json_t *msgs;        /* chat messages */
    char *reasoning;     /* text of a reasoning item waiting for its assistant message */
    size_t reasoning_len;
};

/* Text parts of a message item's content into chat parts. */
static int message_parts(const json_t *content, int assistant, size_t i, json_t *parts,
                         struct problem *err)
{
    char param[96];
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part)
    {
        snprintf(param, sizeof param, "input[%zu].content[%zu]", i, k);
        if (!json_is_object(part))
            return bad_type(err, param, "an object", part);
        const char *ty = json_string_value(json_object_get(part, "type"));
        snprintf(param, sizeof param, "input[%zu].content[%zu].type", i, k);
        if (!ty)
            return missing(err, param);
        const char *key = NULL;
        if (strcmp(ty, "input_text") == 0)
            key = "text";
        else if (assistant && strcmp(ty, "output_text") == 0)
            key = "text";
        else if (assistant && strcmp(ty, "refusal") == 0)
            key = "refusal";
        else if (strcmp(ty, "input_image") == 0 || strcmp(ty, "input_file") == 0 ||
                 strcmp(ty, "input_audio") == 0)
            return problem_setf(err, "unsupported_value", param,
                                "Unsupported value: '%s' parts are not supported by this server "
                                "(text models only).", ty);
        else
            return problem_setf(err, "invalid_value", param,
                                "Invalid value: '%.40s'. Supported values are: 'input_text'%s.",
                                ty, assistant ? ", 'output_text' and 'refusal'" : "");
        json_t *tx = json_object_get(part, key);
        snprintf(param, sizeof param, "input[%zu].content[%zu].%s", i, k, key);
        if (!tx)
            return missing(err, param);
        if (!json_is_string(tx))
            return bad_type(err, param, "a string", tx);
        json_t *p = json_pack("{s:s, s:O}", "type", "text", "text", tx);
        if (push(parts, p))
            return ERR_NOMEM;
    }
    return 0;
}

/* The last message, when it is an assistant message the next items of its
 * turn (calls, reasoning) belong to; else NULL. */
static json_t *last_assistant(const struct tx *t)
{
    size_t n = json_array_size(t->msgs);
    json_t *m = n ? json_array_get(t->msgs, n - 1) : NULL;
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && strcmp(r, "assistant") == 0 ? m : NULL;
}

/* Hand a waiting reasoning text to the assistant message m. */
static int take_reasoning(struct tx *t, json_t *m)
{
    if (!t->reasoning)
        return 0;
    int rc = put(m, "reasoning_content", json_stringn(t->reasoning, t->reasoning_len));
    free(t->reasoning);
    t->reasoning = NULL;
    return rc;
}

static int add_message(struct tx *t, const json_t *it, size_t i, struct problem *err)
{
    char param[96];
    json_t *role = json_object_get(it, "role"), *content = json_object_get(it, "content");
    static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
    snprintf(param, sizeof param, "input[%zu].role", i);
    if (!role)
        return missing(err, param);
    if (!one_of(json_string_value(role), roles))
        return problem_setf(err, "invalid_value", param,
                            "Invalid value for '%s': supported values are 'user', 'assistant', "
                            "'system' and 'developer'.", param);
    int assistant = strcmp(json_string_value(role), "assistant") == 0;
    snprintf(param, sizeof param, "input[%zu].content", i);
    json_t *m = json_pack("{s:O}", "role", role), *c = NULL;
    if (!m)
        return ERR_NOMEM;
    int rc;
    if (!content || json_is_null(content)) {
        rc = missing(err, param);
        goto fail;
    }
    if (json_is_string(content)) {
        c = json_incref(content);
    } else if (json_is_array(content)) {
        if (!(c = json_array())) {
            rc = ERR_NOMEM;
            goto fail;
        }
        if ((rc = message_parts(content, assistant, i, c, err)) != 0)
            goto fail;
    } else {
        rc = bad_type(err, param, "a string or an array of content parts", content);
        goto fail;
    }
    rc = put(m, "content", c);
    c = NULL;
    if (rc == 0 && assistant)
        rc = take_reasoning(t, m);
    if (rc == 0) {
        rc = push(t->msgs, m);
        m = NULL;
    }
fail:
    json_decref(c);
    json_decref(m);
    return rc;
}

/* A required string member of item i. */
static int item_str(const json_t *it, size_t i, const char *key, json_t **out, struct problem *err)
{
    char param[96];
    snprintf(param, sizeof param, "input[%zu].%s", i, key);
    json_t *v = json_object_get(it, key);
    if (!v || json_is_null(v))
        return missing(err, param);
    if (!json_is_string(v))
        return bad_type(err, param, "a string", v);
    *out = v;
    return 0;
}

static int add_call(struct tx *t, const json_t *it, size_t i, struct problem *err)
{
    json_t *call_id, *name, *args;
    int rc;
    if ((rc = item_str(it, i, "call_id", &call_id, err)) || (rc = item_str(it, i, "name", &name, err)) ||
        (rc = item_str(it, i, "arguments", &args, err)))
        return rc;
    json_t *m = last_assistant(t);
    if (m && t->reasoning && json_object_get(m, "reasoning_content"))
        m = NULL; /* a reasoning item between: the calls start a new turn */
    if (!m) {
        m = json_pack("{s:s, s:n}", "role", "assistant", "content");
        if (push(t->msgs, m))
            return ERR_NOMEM;
    }
    if ((rc = take_reasoning(t, m)) != 0)
        return rc;
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls && put(m, "tool_calls", calls = json_array()))
        return ERR_NOMEM;
    return push(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", "function",
                                 "function", "name", name, "arguments", args));
}

static int add_call_output(struct tx *t, const json_t *it, size_t i, struct problem *err)
{
    char param[96];
    json_t *call_id, *out = json_object_get(it, "output");
    int rc;
    if ((rc = item_str(it, i, "call_id", &call_id, err)))
        return rc;
    snprintf(param, sizeof param, "input[%zu].output", i);
    if (!out || json_is_null(out))
        return missing(err, param);
    json_t *content = NULL;
    if (json_is_string(out)) {
        content = json_incref(out);
    } else if (json_is_array(out)) {
        /* the output stays one string for the chat tool message (text parts joined) */
        struct buf b;
        buf_init(&b, CHAT_MAX_PROMPT_BYTES);
        size_t k;
        json_t *part;
        rc = 0;
        json_array_foreach(out, k, part)
        {
            const char *ty = json_string_value(json_object_get(part, "type"));
            json_t *tx = json_object_get(part, "text");
            snprintf(param, sizeof param, "input[%zu].output[%zu].type", i, k);
            if (!ty || strcmp(ty, "input_text") != 0 || !json_is_string(tx)) {
                rc = ty && strcmp(ty, "input_text") != 0
                         ? problem_setf(err, "unsupported_value", param,
                                        "Unsupported value: function_call_output parts must be "
                                        "'input_text' on this server.")
                         : problem_setf(err, "invalid_value", param,
                                        "Invalid '%s': expected an input_text part with a string "
                                        "'text'.", param);
                break;
            }
            if ((k && (rc = buf_append_byte(&b, '\n'))) ||
                (rc = buf_append(&b, json_string_value(tx), json_string_length(tx))))
                break;
        }
        if (rc == ERR_TOOBIG)
            rc = problem_setf(err, "string_above_max_length", param, "Invalid '%s': too long.",
                              param);
        if (rc == 0 && !(content = json_stringn(b.data ? b.data : "", b.len)))
            rc = ERR_NOMEM;
        buf_release(&b);
        if (rc)
            return rc;
    } else {
        return bad_type(err, param, "a string or an array of input_text parts", out);
    }
    return push(t->msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id,
                                   "content", content));
}

/* The text of a reasoning item: its reasoning_text contents, else its
 * summary_text summaries, joined. */
static int add_reasoning(struct tx *t, const json_t *it, size_t i, struct problem *err)
{
    char param[96];
    snprintf(param, sizeof param, "input[%zu].encrypted_content", i);
    if (member(it, "encrypted_content"))
        return problem_setf(err, "unsupported_value", param,
                            "Unsupported value: encrypted reasoning content is not supported by "
                            "this server; send the reasoning text in 'content'.");
    struct buf b;
    buf_init(&b, CHAT_MAX_PROMPT_BYTES);
    int rc = 0;
    static const char *const lists[2][2] = {{"content", "reasoning_text"},
                                            {"summary", "summary_text"}};
    for (int l = 0; l < 2 && rc == 0 && b.len == 0; l++) {
        json_t *arr = member(it, lists[l][0]);
        snprintf(param, sizeof param, "input[%zu].%s", i, lists[l][0]);
        if (arr && !json_is_array(arr)) {
            rc = bad_type(err, param, "an array", arr);
            break;
        }
        size_t k;
        json_t *part;
        json_array_foreach(arr, k, part)
        {
            const char *ty = json_string_value(json_object_get(part, "type"));
            json_t *tx = json_object_get(part, "text");
            if (!ty || strcmp(ty, lists[l][1]) != 0 || !json_is_string(tx)) {
                snprintf(param, sizeof param, "input[%zu].%s[%zu]", i, lists[l][0], k);
                rc = problem_setf(err, "invalid_value", param,
                                  "Invalid '%s': expected a %s part with a string 'text'.", param,
                                  lists[l][1]);
                break;
            }
            if ((b.len && (rc = buf_append(&b, "\n\n", 2))) ||
                (rc = buf_append(&b, json_string_value(tx), json_string_length(tx))))
                break;
        }
    }
    if (rc == ERR_TOOBIG)
        rc = problem_setf(err, "string_above_max_length", "input", "Invalid 'input': too long.");
    if (rc == 0 && b.len) {
        /* two reasoning items in a row: one text */
        size_t old = t->reasoning ? t->reasoning_len + 2 : 0;
        char *p = realloc(t->reasoning, old + b.len + 1);
        if (!p) {
            rc = ERR_NOMEM;
        } else {
            if (old)
                memcpy(p + old - 2, "\n\n", 2);
            memcpy(p + old, b.data, b.len);
            p[old + b.len] = '\0';
            t->reasoning = p;
            t->reasoning_len = old + b.len;
        }
    }
    buf_release(&b);
    return rc;
}

static int add_item(struct tx *t, const json_t *it, size_t i, struct problem *err)
{
    char param[96];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it))
        return bad_type(err, param, "an object", it);
    json_t *tyv = json_object_get(it, "type");
    const char *ty = json_string_value(tyv);
    snprintf(param, sizeof param, "input[%zu].type", i);
    if (tyv && !ty)
        return bad_type(err, param, "a string", tyv);
    if (!ty || strcmp(ty, "message") == 0)
        return add_message(t, it, i, err);
    if (strcmp(ty, "function_call") == 0)
        return add_call(t, it, i, err);
    if (strcmp(ty, "function_call_output") == 0)
        return add_call_output(t, it, i, err);
    if (strcmp(ty, "reasoning") == 0)
        return add_reasoning(t, it, i, err);
    if (strcmp(ty, "input_text") == 0 || strcmp(ty, "output_text") == 0)
        return problem_setf(err, "invalid_value", param,
                            "Invalid value: '%s' is a content part, not an input item: wrap it in "
                            "a message, {\"role\": \"user\", \"content\": [{\"type\": \"%s\", "
                            "\"text\": ...}]}.", ty, ty);
    return problem_setf(err, "unsupported_value", param,
                        "Unsupported value: input items of type '%.60s' are not supported by this "
                        "server (messages, function_call, function_call_output and reasoning "
                        "are).", ty);
}

/* instructions and input into chat messages. */
static int build_messages(const json_t *body, json_t *chat, struct problem *err)
{
    struct tx t = {json_array(), NULL, 0};
    int rc = 0;
    if (!t.msgs)
        return ERR_NOMEM;
    json_t *ins = member(body, "instructions"), *input = member(body, "input");
    if (ins && !json_is_string(ins)) {
        rc = bad_type(err, "instructions", "a string", ins);
        goto out;
    }
    if (ins && (rc = push(t.msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins))))
        goto out;
    if (!input) {
        rc = missing(err, "input");
        goto out;
    }
    if (json_is_string(input)) {
        rc = push(t.msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
    } else if (json_is_array(input)) {
        if (json_array_size(input) > CHAT_MAX_MESSAGES) {
            rc = problem_setf(err, "array_above_max_length", "input",
                              "Invalid 'input': array too long. Expected an array with maximum "
                              "length %d, but got an array with length %zu instead.",
                              CHAT_MAX_MESSAGES, json_array_size(input));
            goto out;
        }
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it)
        {
            if ((rc = add_item(&t, it, i, err)) != 0)
                goto out;
        }
        if (t.reasoning) { /* no assistant message after the last reasoning item */
            json_t *m = last_assistant(&t);
            if (!m || json_object_get(m, "reasoning_content")) {
                m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                if ((rc = push(t.msgs, m)))
                    goto out;
            }
            rc = take_reasoning(&t, m);
        }
    } else {
        rc = bad_type(err, "input", "a string or an array of input items", input);
    }
    if (rc == 0 && json_array_size(t.msgs) == 0)
        rc = problem_setf(err, "invalid_value", "input",
                          "Invalid 'input': expected at least one input item.");
out:
    if (rc == 0)
        rc = put(chat, "messages", t.msgs);
    else
        json_decref(t.msgs);
    free(t.reasoning);
    return rc;
}

/* ---- request: text, tools, tool_choice, reasoning ----------------------------------------------- */

static int build_text(const json_t *body, json_t *chat, struct problem *err)
{
    json_t *text = member(body, "text");
    if (!text)
        return 0;
    if (!json_is_object(text))
        return bad_type(err, "text", "an object", text);
    json_t *verb = member(text, "verbosity");
    static const char *const verbs[] = {"low", "medium", "high", NULL};
    if (verb && !one_of(json_string_value(verb), verbs))
        return problem_setf(err, "invalid_value", "text.verbosity",
                            "Invalid value for 'text.verbosity': supported values are 'low', "
                            "'medium' and 'high'.");
    json_t *f = member(text, "format");
    if (!f)
        return 0;
    if (!json_is_object(f))
        return bad_type(err, "text.format", "an object", f);
    const char *ty = json_string_value(json_object_get(f, "type"));
    if (!ty)
        return missing(err, "text.format.type");
    if (strcmp(ty, "text") == 0)
        return 0;
    if (strcmp(ty, "json_object") == 0)
        return put(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    if (strcmp(ty, "json_schema") != 0)
        return problem_setf(err, "invalid_value", "text.format.type",
                            "Invalid value: '%.40s'. Supported values are: 'text', 'json_object' "
                            "and 'json_schema'.", ty);
    if (!member(f, "name"))
        return missing(err, "text.format.name");
    if (!member(f, "schema"))
        return missing(err, "text.format.schema");
    json_t *js = json_object();
    static const char *const keys[] = {"name", "schema", "strict", "description", NULL};
    for (int i = 0; js && keys[i]; i++) {
        json_t *v = json_object_get(f, keys[i]);
        if (v && json_object_set(js, keys[i], v)) {
            json_decref(js);
            return ERR_NOMEM;
        }
    }
    if (!js)
        return ERR_NOMEM;
    return put(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
}

static int build_tools(const json_t *body, json_t *chat, struct problem *err)
{
    char param[96];
    json_t *tools = member(body, "tools");
    if (!tools)
        return 0;
    if (!json_is_array(tools))
        return bad_type(err, "tools", "an array", tools);
    json_t *out = json_array();
    if (!out || put(chat, "tools", out))
        return ERR_NOMEM;
    size_t i;
    json_t *tl;
    json_array_foreach(tools, i, tl)
    {
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!json_is_object(tl))
            return bad_type(err, param, "an object", tl);
        const char *ty = json_string_value(json_object_get(tl, "type"));
        snprintf(param, sizeof param, "tools[%zu].type", i);
        if (!ty)
            return missing(err, param);
        if (strcmp(ty, "function") != 0)
            return problem_setf(err, "unsupported_value", param,
                                "Unsupported value: '%.60s' tools are not supported by this "
                                "server: only 'function' tools (the caller runs them).", ty);
        json_t *fn = json_object();
        if (!fn || push(out, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
            return ERR_NOMEM;
        static const char *const keys[] = {"name", "description", "parameters", "strict", NULL};
        for (int k = 0; keys[k]; k++) {
            json_t *v = json_object_get(tl, keys[k]);
            if (v && json_object_set(fn, keys[k], v))
                return ERR_NOMEM;
        }
        snprintf(param, sizeof param, "tools[%zu].name", i);
        if (!member(tl, "name"))
            return missing(err, param);
        if (!json_object_get(tl, "strict") && put(fn, "strict", json_true()))
            return ERR_NOMEM; /* strict by default in Responses */
    }
    return 0;
}

/* A {"type":"function","name"} choice as chat's nested one. */
static json_t *function_choice(const json_t *c, const char *param, struct problem *err, int *rc)
{
    json_t *name = json_object_get(c, "name"), *f = NULL;
    char p[96];
    snprintf(p, sizeof p, "%s.name", param);
    if (!name || json_is_null(name))
        *rc = missing(err, p);
    else if (!json_is_string(name))
        *rc = bad_type(err, p, "a string", name);
    else if (!(f = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name)))
        *rc = ERR_NOMEM;
    return f;
}

static int build_tool_choice(const json_t *body, json_t *chat, struct problem *err)
{
    json_t *c = member(body, "tool_choice");
    static const char *const modes[] = {"none", "auto", "required", NULL};
    if (!c)
        return 0;
    if (json_is_string(c)) {
        if (!one_of(json_string_value(c), modes))
            return problem_setf(err, "invalid_value", "tool_choice",
                                "Invalid value for 'tool_choice': supported values are 'none', "
                                "'auto', 'required' or an object.");
        return put(chat, "tool_choice", json_incref(c));
    }
    if (!json_is_object(c))
        return bad_type(err, "tool_choice", "a string or an object", c);
    const char *ty = json_string_value(json_object_get(c, "type"));
    int rc = 0;
    if (!ty)
        return missing(err, "tool_choice.type");
    if (strcmp(ty, "function") == 0) {
        json_t *f = function_choice(c, "tool_choice", err, &rc);
        return f ? put(chat, "tool_choice", f) : rc;
    }
    if (strcmp(ty, "allowed_tools") != 0)
        return problem_setf(err, "unsupported_value", "tool_choice.type",
                            "Unsupported value: tool_choice '%.60s' is not supported by this "
                            "server (only function tools are).", ty);
    json_t *mode = json_object_get(c, "mode"), *list = json_object_get(c, "tools");
    if (!one_of(json_string_value(mode), modes + 1))
        return problem_setf(err, "invalid_value", "tool_choice.mode",
                            "Invalid value for 'tool_choice.mode': supported values are 'auto' "
                            "and 'required'.");
    if (!json_is_array(list))
        return bad_type(err, "tool_choice.tools", "an array", list);
    json_t *nested = json_array();
    if (!nested ||
        put(chat, "tool_choice", json_pack("{s:s, s:{s:O, s:o}}", "type", "allowed_tools",
                                           "allowed_tools", "mode", mode, "tools", nested)))
        return ERR_NOMEM;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        char param[96];
        snprintf(param, sizeof param, "tool_choice.tools[%zu]", i);
        const char *ety = json_string_value(json_object_get(e, "type"));
        if (!ety || strcmp(ety, "function") != 0)
            return problem_setf(err, "unsupported_value", param,
                                "Unsupported value: '%s' must be a function tool "
                                "({\"type\": \"function\", \"name\": ...}).", param);
        json_t *f = function_choice(e, param, err, &rc);
        if (!f)
            return rc;
        if (push(nested, f))
            return ERR_NOMEM;
    }
    return 0;
}

static int build_reasoning(const json_t *body, json_t *chat, struct problem *err)
{
    json_t *r = member(body, "reasoning");
    if (!r)
        return 0;
    if (!json_is_object(r))
        return bad_type(err, "reasoning", "an object", r);
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh",
                                          "max", NULL};
    static const char *const summaries[] = {"auto", "concise", "detailed", NULL};
    json_t *e = member(r, "effort"), *s = member(r, "summary");
    if (s && !one_of(json_string_value(s), summaries))
        return problem_setf(err, "invalid_value", "reasoning.summary",
                            "Invalid value for 'reasoning.summary': supported values are 'auto', "
                            "'concise' and 'detailed'.");
    if (!e)
        return 0;
    if (!one_of(json_string_value(e), efforts))
        return problem_setf(err, "invalid_value", "reasoning.effort",
                            "Invalid value for 'reasoning.effort': supported values are 'none', "
                            "'minimal', 'low', 'medium', 'high', 'xhigh' and 'max'.");
    return put(chat, "reasoning_effort", json_incref(e));
}

/* max_output_tokens, top_logprobs / include, and the fields copied as they are. */
static int build_sampling(const json_t *body, json_t *chat, struct problem *err)
{
    json_t *v = member(body, "max_output_tokens");
    if (v) {
        if (!json_is_integer(v))
            return bad_type(err, "max_output_tokens", "an integer", v);
        if (json_integer_value(v) < ORESP_MIN_OUTPUT_TOKENS)
            return problem_setf(err, "integer_below_min_value", "max_output_tokens",
                                "Invalid 'max_output_tokens': integer below minimum value. "
                                "Expected a value >= %d, but got %" PRId64 " instead.",
                                ORESP_MIN_OUTPUT_TOKENS, (int64_t)json_integer_value(v));
        if (put(chat, "max_completion_tokens", json_incref(v)))
            return ERR_NOMEM;
    }
    int lp = 0;
    json_t *inc = member(body, "include");
    for (size_t i = 0; i < json_array_size(inc); i++)
        lp |= json_is_string(json_array_get(inc, i)) &&
              strcmp(json_string_value(json_array_get(inc, i)), "message.output_text.logprobs") == 0;
    if ((v = member(body, "top_logprobs"))) {
        if (!json_is_integer(v))
            return bad_type(err, "top_logprobs", "an integer", v);
        if (json_integer_value(v) < 0 || json_integer_value(v) > ORESP_MAX_TOP_LOGPROBS)
            return problem_setf(err, json_integer_value(v) < 0 ? "integer_below_min_value"
                                                               : "integer_above_max_value",
                                "top_logprobs",
                                "Invalid 'top_logprobs': expected a value from 0 to %d, but got "
                                "%" PRId64 " instead.", ORESP_MAX_TOP_LOGPROBS,
                                (int64_t)json_integer_value(v));
        lp = 1;
        if (put(chat, "top_logprobs", json_incref(v)))
            return ERR_NOMEM;
    }
    if (lp && put(chat, "logprobs", json_true()))
        return ERR_NOMEM;
    static const char *const copied[] = {
        "model", "temperature", "top_p", "stream", "stream_options", "seed", "top_k", "min_p",
        "repetition_penalty", "frequency_penalty", "presence_penalty", "stop", "logit_bias",
        "chat_template_kwargs", "thinking_token_budget", "parallel_tool_calls", "metadata", "store", "user",
        NULL};
    for (int i = 0; copied[i]; i++)
        if ((v = json_object_get(body, copied[i])) && json_object_set(chat, copied[i], v))
            return ERR_NOMEM;
    return 0;
}

int oresp_to_chat(const json_t *body, json_t **chat, struct problem *err)
{
    if (!json_is_object(body))
        return problem_setf(err, "invalid_type", "", "The request body must be a JSON object.");
    json_t *c = json_object();
    if (!c)
        return ERR_NOMEM;
    int rc;
    if ((rc = refuse_stateful(body, err)) || (rc = check_metadata(body, err)) ||
        (rc = check_echoed(body, err)) || (rc = build_sampling(body, c, err)) ||
        (rc = build_messages(body, c, err)) || (rc = build_text(body, c, err)) ||
        (rc = build_tools(body, c, err)) || (rc = build_tool_choice(body, c, err)) ||
        (rc = build_reasoning(body, c, err))) {
        json_decref(c);
        return rc;
    }
    *chat = c;
    return 0;
}

/* ---- chat errors in Responses names ---------------------------------------------------------- */

/* Replace every `from` in s (capacity cap) by `to`; truncates at cap. */
static void replace_all(char *s, size_t cap, const char *from, const char *to)
{
    char out[512];
    size_t fl = strlen(from), tl = strlen(to), o = 0;
    for (const char *p = s; *p && o + 1 < sizeof out;) {
        if (strncmp(p, from, fl) == 0) {
            size_t n = tl < sizeof out - 1 - o ? tl : sizeof out - 1 - o;
            memcpy(out + o, to, n);
            o += n;
            p += fl;
        } else {
            out[o++] = *p++;
        }
    }
    if (o >= cap)
        o = cap - 1; /* truncated, as a struct problem field is */
    memcpy(s, out, o);
    s[o] = '\0';
}

void oresp_problem_from_chat(struct problem *err)
{
    /* chat prefix -> Responses prefix; the first match of param wins */
    static const char *const names[][2] = {
        {"response_format.json_schema", "text.format"},
        {"response_format", "text.format"},
        {"max_completion_tokens", "max_output_tokens"},
        {"messages", "input"},
        {"reasoning_effort", "reasoning.effort"},
        {"tool_choice.allowed_tools", "tool_choice"},
        {"tool_choice.function", "tool_choice"},
    };
    if (!err)
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i][0]);
        if (strncmp(err->param, names[i][0], n) != 0 || (err->param[n] && err->param[n] != '.' &&
                                                         err->param[n] != '['))
            continue;
        char param[sizeof err->param];
        /* messages[3].content -> input: the indices differ, the field does not */
        const char *rest = strcmp(names[i][1], "input") == 0 ? "" : err->param + n;
        snprintf(param, sizeof param, "%s%s", names[i][1], rest);
        replace_all(err->message, sizeof err->message, names[i][0], names[i][1]);
        memcpy(err->param, param, sizeof param);
        return;
    }
    /* tools[i].function.x -> tools[i].x */
    unsigned idx;
    int off = 0;
    if (sscanf(err->param, "tools[%u].function%n", &idx, &off) == 1 && off > 0) {
        char param[sizeof err->param];
        snprintf(param, sizeof param, "tools[%u]%s", idx, err->param + off);
        memcpy(err->param, param, sizeof param);
        replace_all(err->message, sizeof err->message, ".function.", ".");
    }
}

int oresp_check(const json_t *body, size_t n_vocab, json_t **chat, struct problem *err)
{
    json_t *c = NULL;
    int rc = oresp_to_chat(body, &c, err);
    if (rc)
        return rc;
    struct gp_request gp;
    if ((rc = gp_parse(c, GP_CHAT, n_vocab, &gp, err)) == 0) {
        gp_release(&gp);
        rc = chat_msgs_from_body(c, NULL, err);
    }
    if (rc == ERR_INVAL)
        oresp_problem_from_chat(err);
    if (rc == 0 && chat)
        *chat = c;
    else
        json_decref(c);
    return rc;
}

/* ---- response --------------------------------------------------------------------------------- */

/* The settings of req echoed into r (keys in the SDK's order, after output). */
static int echo_settings(const json_t *req, json_t *r)
{
    json_t *v;
    int rc = 0;
#define ECHO(key, dflt) \
    (rc = rc ? rc : put(r, key, (v = member(req, key)) ? json_incref(v) : (dflt)))
    ECHO("parallel_tool_calls", json_true());
    ECHO("previous_response_id", json_null());
    json_t *re = member(req, "reasoning");
    if (!rc)
        rc = put(r, "reasoning", json_pack("{s:O, s:O}", "effort",
                                           member(re, "effort") ? member(re, "effort") : json_null(),
                                           "summary",
                                           member(re, "summary") ? member(re, "summary") : json_null()));
    if (!rc)
        rc = put(r, "service_tier", json_string("default"));
    ECHO("store", json_true());
    ECHO("temperature", json_real(1.0));
    json_t *tx = member(req, "text");
    json_t *fmt = member(tx, "format"), *verb = member(tx, "verbosity");
    if (!rc) {
        fmt = fmt ? json_incref(fmt) : json_pack("{s:s}", "type", "text");
        verb = verb ? json_incref(verb) : json_string("medium");
        rc = fmt && verb ? put(r, "text", json_pack("{s:o, s:o}", "format", fmt, "verbosity", verb))
                         : ERR_NOMEM;
        if (!(fmt && verb)) {
            json_decref(fmt);
            json_decref(verb);
        }
    }
    ECHO("tool_choice", json_string("auto"));
    /* tools as given (flat), strict filled in as OpenAI applies it */
    json_t *tools = json_array(), *given = member(req, "tools");
    size_t i;
    json_t *tl;
    json_array_foreach(given, i, tl)
    {
        json_t *c = json_deep_copy(tl);
        if (c && !json_object_get(c, "strict") && json_object_set_new(c, "strict", json_true()))
            rc = rc ? rc : ERR_NOMEM;
        if (c && !json_object_get(c, "parameters") && json_object_set_new(c, "parameters", json_null()))
            rc = rc ? rc : ERR_NOMEM;
        if (push(tools, c))
            rc = rc ? rc : ERR_NOMEM;
    }
    if (!rc)
        rc = put(r, "tools", tools);
    else
        json_decref(tools);
    ECHO("top_logprobs", json_integer(0));
    ECHO("top_p", json_real(1.0));
    ECHO("truncation", json_string("disabled"));
    ECHO("user", json_null());
    ECHO("safety_identifier", json_null());
    ECHO("prompt_cache_key", json_null());
#undef ECHO
    if (!rc)
        rc = put(r, "background", json_false());
    return rc;
}

/* Responses usage from the chat usage. */
static json_t *usage_from_chat(const json_t *u)
{
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t out = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t cached = json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_int_t reasoning = json_integer_value(
        json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"));
    return json_pack("{s:I, s:{s:I, s:I}, s:I, s:{s:I}, s:I}", "input_tokens", in,
                     "input_tokens_details", "cached_tokens", cached, "cache_write_tokens",
                     (json_int_t)0, "output_tokens", out,
                     "output_tokens_details", "reasoning_tokens", reasoning, "total_tokens",
                     in + out);
}

/* The output items of one chat choice. */
static int output_items(const json_t *choice, const char *suffix, const char *status, json_t *items)
{
    char id[ID_MAX + 16];
    const json_t *msg = json_object_get(choice, "message");
    json_t *rs = json_object_get(msg, "reasoning_content");
    if (!json_is_string(rs))
        rs = json_object_get(msg, "reasoning");
    if (json_is_string(rs) && json_string_length(rs) > 0) {
        snprintf(id, sizeof id, "rs_%s", suffix);
        if (push(items, json_pack("{s:s, s:s, s:[], s:[{s:s, s:O}], s:s}", "id", id, "type",
                                  "reasoning", "summary", "content", "type", "reasoning_text",
                                  "text", rs, "status", status)))
            return ERR_NOMEM;
    }
    json_t *content = json_object_get(msg, "content"), *refusal = member(msg, "refusal");
    json_t *calls = member(msg, "tool_calls");
    size_t n_calls = json_array_size(calls);
    int has_text = json_is_string(content) && json_string_length(content) > 0;
    if (has_text || refusal || n_calls == 0) {
        json_t *parts = json_array(), *lp = json_array();
        const json_t *lpc = json_object_get(json_object_get(choice, "logprobs"), "content");
        size_t k;
        json_t *e;
        int lp_ok = lp != NULL;
        json_array_foreach(lpc, k, e)
        {
            if (lp_ok && push(lp, json_deep_copy(e)))
                lp_ok = 0;
        }
        if (!lp_ok) {
            json_decref(lp);
            json_decref(parts);
            return ERR_NOMEM;
        }
        snprintf(id, sizeof id, "msg_%s", suffix);
        json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "role",
                              "assistant", "status", status, "content", parts);
        if (!m || push(items, m)) {
            json_decref(lp);
            return ERR_NOMEM;
        }
        if (refusal) {
            json_decref(lp);
            if (push(parts, json_pack("{s:s, s:O}", "type", "refusal", "refusal", refusal)))
                return ERR_NOMEM;
        } else {
            json_t *text = json_is_string(content) ? json_incref(content) : json_string("");
            if (!text) {
                json_decref(lp);
                return ERR_NOMEM;
            }
            if (push(parts, json_pack("{s:s, s:o, s:[], s:o}", "type", "output_text", "text", text,
                                      "annotations", "logprobs", lp)))
                return ERR_NOMEM;
        }
    }
    for (size_t i = 0; i < n_calls; i++) {
        const json_t *tc = json_array_get(calls, i), *fn = json_object_get(tc, "function");
        json_t *cid = json_object_get(tc, "id"), *name = json_object_get(fn, "name"),
               *args = json_object_get(fn, "arguments");
        if (!json_is_string(cid) || !json_is_string(name) || !json_is_string(args))
            return ERR_INVAL;
        snprintf(id, sizeof id, "fc_%s_%zu", suffix, i);
        if (push(items, json_pack("{s:s, s:s, s:O, s:O, s:O, s:s}", "id", id, "type",
                                  "function_call", "call_id", cid, "name", name, "arguments", args,
                                  "status", "completed")))
            return ERR_NOMEM;
    }
    return 0;
}

int oresp_from_chat(const json_t *req, const json_t *cc, json_t **out)
{
    const json_t *choice = json_array_get(json_object_get(cc, "choices"), 0);
    const char *fin = json_string_value(json_object_get(choice, "finish_reason"));
    if (!json_is_object(cc) || !json_is_object(choice) || !fin)
        return ERR_INVAL;
    /* ids: the chat id's suffix ("chatcmpl-X" -> X), or a fresh one */
    char fresh[ID_MAX], suffix[ID_MAX + 8];
    const char *cid = json_string_value(json_object_get(cc, "id"));
    if (!cid || !*cid) {
        int rc = id_new("", fresh, sizeof fresh);
        if (rc)
            return rc;
        cid = fresh;
    }
    const char *dash = strchr(cid, '-');
    snprintf(suffix, sizeof suffix, "%.60s", dash && dash[1] ? dash + 1 : cid);
    const char *status = "completed";
    const char *reason = NULL;
    if (strcmp(fin, "length") == 0)
        reason = "max_output_tokens";
    else if (strcmp(fin, "content_filter") == 0)
        reason = "content_filter";
    if (reason)
        status = "incomplete";

    char id[ID_MAX + 16];
    snprintf(id, sizeof id, "resp_%s", suffix);
    json_t *created = json_object_get(cc, "created");
    json_int_t at = json_is_integer(created) ? json_integer_value(created) : 0;
    json_t *r = json_object(), *items = json_array(), *v;
    int rc = r && items ? 0 : ERR_NOMEM;
    if (!rc)
        rc = put(r, "id", json_string(id));
    if (!rc)
        rc = put(r, "object", json_string("response"));
    if (!rc)
        rc = put(r, "created_at", json_integer(at));
    if (!rc)
        rc = put(r, "status", json_string(status));
    if (!rc)
        rc = put(r, "completed_at", reason ? json_null() : json_integer(at));
    if (!rc)
        rc = put(r, "error", json_null());
    if (!rc)
        rc = put(r, "incomplete_details", reason ? json_pack("{s:s}", "reason", reason) : json_null());
    if (!rc)
        rc = put(r, "instructions", (v = member(req, "instructions")) ? json_incref(v) : json_null());
    if (!rc)
        rc = put(r, "max_output_tokens",
                 (v = member(req, "max_output_tokens")) ? json_incref(v) : json_null());
    if (!rc)
        rc = put(r, "max_tool_calls", (v = member(req, "max_tool_calls")) ? json_incref(v) : json_null());
    if (!rc)
        rc = put(r, "metadata", (v = member(req, "metadata")) ? json_incref(v) : json_object());
    if (!rc)
        rc = put(r, "model", (v = json_object_get(cc, "model")) ? json_incref(v) : json_string(""));
    if (!rc)
        rc = output_items(choice, suffix, status, items);
    if (!rc) {
        rc = put(r, "output", items);
        items = NULL;
    }
    if (!rc)
        rc = echo_settings(req, r);
    if (!rc)
        rc = put(r, "usage", usage_from_chat(json_object_get(cc, "usage")));
    json_decref(items);
    if (rc) {
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}
