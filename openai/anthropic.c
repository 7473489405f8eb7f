/*
 * anthropic.c - the Messages contract onto the chat contract and back
 * (see anthropic.h for the mapping). Requests: one pass over params that
 * builds the chat body and refuses what has no chat meaning, with the
 * Anthropic path of the offending field; then the chat checks. Responses:
 * a chat.completion read back into content blocks.
 */
#include "openai/anthropic.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/problem.h"
#include "openai/chat_msgs.h"
#include "openai/params.h"

#define REQ "invalid_request_error"

/* Set the problem and return ERR_INVAL: param is a printf'd path. */
static int bad(struct problem *err, const char *msg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct problem *err, const char *msg, const char *fmt, ...)
{
    char path[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    return problem_setf(err, REQ, path, "%s", msg);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A member, NULL when absent or JSON null. */
static json_t *member(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* Append text to b (a growing jansson string kept as a C buffer). */
struct text {
    char *p;
    size_t n, cap;
};

static int text_add(struct text *t, const char *s, size_t n, int sep)
{
    size_t need = t->n + n + 2;
    if (need > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        while (cap < need)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p)
            return ERR_NOMEM;
        t->p = p;
        t->cap = cap;
    }
    if (sep && t->n)
        t->p[t->n++] = '\n';
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
    return 0;
}

/* system: a string or text blocks -> *text (owned), "" for none. */
static int system_text(const json_t *v, struct text *t, struct problem *err)
{
    if (json_is_string(v))
        return text_add(t, json_string_value(v), json_string_length(v), 0);
    if (!json_is_array(v))
        return bad(err, "Input should be a valid string or a list of text blocks", "system");
    size_t i;
    json_t *b;
    json_array_foreach(v, i, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty || strcmp(ty, "text"))
            return bad(err, "Input should be a text block ({\"type\": \"text\", \"text\": ...})", "system.%zu",
                       i);
        json_t *s = json_object_get(b, "text");
        if (!json_is_string(s))
            return bad(err, "Field required (a string)", "system.%zu.text", i);
        int rc = text_add(t, json_string_value(s), json_string_length(s), 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* Does an assistant turn before messages[upto] carry a tool_use with id? */
static int tool_use_before(const json_t *msgs, size_t upto, const char *id)
{
    for (size_t i = 0; i < upto; i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *c = json_object_get(m, "content");
        if (!role || strcmp(role, "assistant") || !json_is_array(c))
            continue;
        size_t k;
        json_t *b;
        json_array_foreach(c, k, b) {
            const char *ty = json_string_value(json_object_get(b, "type"));
            const char *bid = json_string_value(json_object_get(b, "id"));
            if (ty && bid && !strcmp(ty, "tool_use") && !strcmp(bid, id))
                return 1;
        }
    }
    return 0;
}

/* A tool_result's content: a string or text blocks -> t. */
static int result_text(const json_t *v, struct text *t, size_t i, size_t j, struct problem *err)
{
    if (!v)
        return 0;
    if (json_is_string(v))
        return text_add(t, json_string_value(v), json_string_length(v), 0);
    if (!json_is_array(v))
        return bad(err, "Input should be a valid string or a list of text blocks", "messages.%zu.content.%zu.content",
                   i, j);
    size_t k;
    json_t *b;
    json_array_foreach(v, k, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        json_t *s = json_object_get(b, "text");
        if (!ty || strcmp(ty, "text") || !json_is_string(s))
            return bad(err, "Only text blocks are supported in a tool_result's content",
                       "messages.%zu.content.%zu.content.%zu.type", i, j, k);
        int rc = text_add(t, json_string_value(s), json_string_length(s), 1);
        if (rc)
            return rc;
    }
    return 0;
}

static int push(json_t *arr, json_t *v)
{
    return v && json_array_append_new(arr, v) == 0 ? 0 : ERR_NOMEM;
}

/* A refusal for a block type that has no chat meaning. */
static int unsupported_block(const char *ty, size_t i, size_t j, struct problem *err)
{
    char msg[160];
    snprintf(msg, sizeof msg, "Content blocks of type '%.40s' are not supported by this server (text, tool_use, "
                              "tool_result and thinking are)", ty);
    return bad(err, msg, "messages.%zu.content.%zu.type", i, j);
}

/* One user turn: tool messages for its tool_results (first), then the text. */
static int user_turn(const json_t *msgs, size_t i, const json_t *c, json_t *out, struct problem *err)
{
    struct text t = {0};
    int rc = 0;
    size_t j;
    json_t *b;
    json_array_foreach(c, j, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty) {
            rc = bad(err, "Field required", "messages.%zu.content.%zu.type", i, j);
            goto out;
        }
        if (!strcmp(ty, "text")) {
            json_t *s = json_object_get(b, "text");
            if (!json_is_string(s)) {
                rc = bad(err, "Field required (a string)", "messages.%zu.content.%zu.text", i, j);
                goto out;
            }
            if ((rc = text_add(&t, json_string_value(s), json_string_length(s), 1)))
                goto out;
        } else if (!strcmp(ty, "tool_result")) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            if (!id || !*id) {
                rc = bad(err, "Field required", "messages.%zu.content.%zu.tool_use_id", i, j);
                goto out;
            }
            if (!tool_use_before(msgs, i, id)) {
                char msg[200];
                snprintf(msg, sizeof msg, "Unexpected tool_use_id '%.64s': no tool_use block with this id in an "
                                          "earlier assistant turn", id);
                rc = bad(err, msg, "messages.%zu.content.%zu.tool_use_id", i, j);
                goto out;
            }
            json_t *ie = member(b, "is_error");
            if (ie && !json_is_boolean(ie)) {
                rc = bad(err, "Input should be a valid boolean", "messages.%zu.content.%zu.is_error", i, j);
                goto out;
            }
            struct text r = {0};
            if (ie && json_is_true(ie))
                rc = text_add(&r, "Error: ", 7, 0);
            if (!rc)
                rc = result_text(member(b, "content"), &r, i, j, err);
            if (!rc) {
                json_t *m = json_pack("{s:s, s:s, s:s#}", "role", "tool", "tool_call_id", id, "content",
                                      r.p ? r.p : "", r.n);
                rc = push(out, m);
            }
            free(r.p);
            if (rc)
                goto out;
        } else {
            rc = unsupported_block(ty, i, j, err);
            goto out;
        }
    }
    if (t.p || !json_array_size(c))
        rc = push(out, json_pack("{s:s, s:s#}", "role", "user", "content", t.p ? t.p : "", t.n));
out:
    free(t.p);
    return rc;
}

/* One assistant turn: text, thinking and tool_use blocks -> one message. */
static int assistant_turn(size_t i, const json_t *c, json_t *out, struct problem *err)
{
    struct text t = {0}, th = {0};
    json_t *calls = json_array(), *m = NULL;
    int rc = calls ? 0 : ERR_NOMEM;
    size_t j;
    json_t *b;
    json_array_foreach(c, j, b) {
        if (rc)
            break;
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !ty) {
            rc = bad(err, "Field required", "messages.%zu.content.%zu.type", i, j);
        } else if (!strcmp(ty, "text")) {
            json_t *s = json_object_get(b, "text");
            rc = json_is_string(s) ? text_add(&t, json_string_value(s), json_string_length(s), 1)
                                   : bad(err, "Field required (a string)", "messages.%zu.content.%zu.text", i, j);
        } else if (!strcmp(ty, "thinking")) {
            json_t *s = json_object_get(b, "thinking");
            rc = json_is_string(s) ? text_add(&th, json_string_value(s), json_string_length(s), 1)
                                   : bad(err, "Field required (a string)", "messages.%zu.content.%zu.thinking", i, j);
        } else if (!strcmp(ty, "redacted_thinking")) {
            continue; /* opaque to any other model */
        } else if (!strcmp(ty, "tool_use")) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *in = json_object_get(b, "input");
            if (!id || !*id)
                rc = bad(err, "Field required", "messages.%zu.content.%zu.id", i, j);
            else if (!name || !*name)
                rc = bad(err, "Field required", "messages.%zu.content.%zu.name", i, j);
            else if (!json_is_object(in))
                rc = bad(err, "Input should be a valid dictionary", "messages.%zu.content.%zu.input", i, j);
            else {
                char *args = json_dumps(in, JSON_COMPACT | JSON_PRESERVE_ORDER);
                json_t *call = args ? json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                                "function", "name", name, "arguments", args)
                                    : NULL;
                free(args);
                rc = push(calls, call);
            }
        } else {
            rc = unsupported_block(ty, i, j, err);
        }
    }
    if (rc)
        goto out;
    m = json_pack("{s:s}", "role", "assistant");
    if (!m) {
        rc = ERR_NOMEM;
        goto out;
    }
    if (json_object_set_new(m, "content", t.p ? json_stringn(t.p, t.n) : json_array_size(calls) ? json_null()
                                                                                                : json_string("")) ||
        (th.p && json_object_set_new(m, "reasoning_content", json_stringn(th.p, th.n))) ||
        (json_array_size(calls) && json_object_set(m, "tool_calls", calls))) {
        rc = ERR_NOMEM;
        goto out;
    }
    rc = push(out, m);
    m = NULL;
out:
    json_decref(m);
    json_decref(calls);
    free(t.p);
    free(th.p);
    return rc;
}

static int messages_to_chat(const json_t *msgs, json_t *out, struct problem *err)
{
    if (!msgs)
        return bad(err, "Field required", "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return bad(err, "Input should be a non-empty list of messages", "messages");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m))
            return bad(err, "Input should be a valid dictionary", "messages.%zu", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role)
            return bad(err, "Field required", "messages.%zu.role", i);
        int user = !strcmp(role, "user");
        if (!user && strcmp(role, "assistant"))
            return bad(err, "Input should be 'user' or 'assistant'", "messages.%zu.role", i);
        json_t *c = json_object_get(m, "content");
        int rc;
        if (!c)
            return bad(err, "Field required", "messages.%zu.content", i);
        if (json_is_string(c)) {
            rc = push(out, json_pack("{s:s, s:O}", "role", role, "content", c));
        } else if (json_is_array(c)) {
            rc = user ? user_turn(msgs, i, c, out, err) : assistant_turn(i, c, out, err);
        } else {
            return bad(err, "Input should be a valid string or a list of content blocks", "messages.%zu.content", i);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* tools -> chat tools; names collected for tool_choice's check. */
static int tools_to_chat(const json_t *v, json_t *body, struct problem *err)
{
    if (!json_is_array(v))
        return bad(err, "Input should be a valid list", "tools");
    json_t *arr = json_array();
    if (!arr || json_object_set_new(body, "tools", arr))
        return ERR_NOMEM;
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        if (!json_is_object(t))
            return bad(err, "Input should be a valid dictionary", "tools.%zu", i);
        const char *ty = json_string_value(member(t, "type"));
        if (ty && strcmp(ty, "custom")) {
            char msg[160];
            snprintf(msg, sizeof msg, "Tool type '%.40s' is not supported by this server: only client tools "
                                      "({name, description, input_schema})", ty);
            return bad(err, msg, "tools.%zu.type", i);
        }
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!name)
            return bad(err, "Field required", "tools.%zu.name", i);
        json_t *schema = json_object_get(t, "input_schema");
        if (!schema)
            return bad(err, "Field required", "tools.%zu.input_schema", i);
        if (!json_is_object(schema))
            return bad(err, "Input should be a valid dictionary", "tools.%zu.input_schema", i);
        json_t *desc = member(t, "description");
        if (desc && !json_is_string(desc))
            return bad(err, "Input should be a valid string", "tools.%zu.description", i);
        json_t *fn = json_pack("{s:s, s:O}", "name", name, "parameters", schema);
        if (!fn || (desc && json_object_set(fn, "description", desc))) {
            json_decref(fn);
            return ERR_NOMEM;
        }
        if (push(arr, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
            return ERR_NOMEM;
    }
    return 0;
}

static int has_tool(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(t, "name"));
        if (n && !strcmp(n, name))
            return 1;
    }
    return 0;
}

static int tool_choice_to_chat(const json_t *tc, const json_t *tools, json_t *body, struct problem *err)
{
    if (!json_is_object(tc))
        return bad(err, "Input should be a valid dictionary", "tool_choice");
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!ty)
        return bad(err, "Field required", "tool_choice.type");
    json_t *choice = NULL;
    if (!strcmp(ty, "auto")) {
        choice = json_string("auto");
    } else if (!strcmp(ty, "any")) {
        choice = json_string("required");
    } else if (!strcmp(ty, "none")) {
        choice = json_string("none");
    } else if (!strcmp(ty, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name)
            return bad(err, "Field required", "tool_choice.name");
        if (!tools || !has_tool(tools, name)) {
            char msg[160];
            snprintf(msg, sizeof msg, "Tool '%.64s' not found in tools", name);
            return bad(err, msg, "tool_choice.name");
        }
        choice = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    } else {
        return bad(err, "Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'",
                   "tool_choice.type");
    }
    if (!choice || json_object_set_new(body, "tool_choice", choice))
        return ERR_NOMEM;
    if (strcmp(ty, "none") && !tools)
        return bad(err, "tool_choice may only be specified while providing tools", "tool_choice");
    json_t *dp = member(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return bad(err, "Input should be a valid boolean", "tool_choice.disable_parallel_tool_use");
    if (dp && json_is_true(dp) && json_object_set_new(body, "parallel_tool_calls", json_false()))
        return ERR_NOMEM;
    return 0;
}

static int thinking_to_chat(const json_t *th, json_int_t max_tokens, json_t *body, struct problem *err)
{
    if (!json_is_object(th))
        return bad(err, "Input should be a valid dictionary", "thinking");
    const char *ty = json_string_value(json_object_get(th, "type"));
    if (!ty)
        return bad(err, "Field required", "thinking.type");
    if (!strcmp(ty, "disabled"))
        return json_object_set_new(body, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0))
                   ? ERR_NOMEM
                   : 0;
    if (strcmp(ty, "enabled"))
        return bad(err, "Input tag does not match any of the expected tags: 'enabled', 'disabled'", "thinking.type");
    json_t *bt = json_object_get(th, "budget_tokens");
    if (!bt)
        return bad(err, "Field required", "thinking.budget_tokens");
    if (!json_is_integer(bt) || json_integer_value(bt) < ANTH_THINKING_MIN_BUDGET)
        return bad(err, "Input should be an integer greater than or equal to 1024", "thinking.budget_tokens");
    if (json_integer_value(bt) >= max_tokens)
        return bad(err, "`max_tokens` must be greater than `thinking.budget_tokens`", "thinking.budget_tokens");
    /* the template's own switch on, and the budget enforced by the worker (the close forced) */
    if (json_object_set_new(body, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 1)) ||
        json_object_set(body, "thinking_token_budget", bt))
        return ERR_NOMEM;
    return 0;
}

/* A number field in [lo, hi] copied under the same name. */
static int number_field(const json_t *params, const char *k, double lo, double hi, json_t *body,
                        struct problem *err)
{
    json_t *v = member(params, k);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return bad(err, "Input should be a valid number", "%s", k);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        char msg[96];
        snprintf(msg, sizeof msg, "Input should be between %g and %g", lo, hi);
        return bad(err, msg, "%s", k);
    }
    return json_object_set(body, k, v) ? ERR_NOMEM : 0;
}

static const char *const known_keys[] = {"model", "max_tokens", "messages", "system", "temperature", "top_p",
                                         "top_k", "stop_sequences", "tools", "tool_choice", "thinking",
                                         "metadata", "stream", "service_tier"};

static int build(const json_t *params, json_t *body, struct problem *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)params, k, v) {
        size_t n = sizeof known_keys / sizeof known_keys[0], i;
        for (i = 0; i < n && strcmp(k, known_keys[i]); i++)
            ;
        if (i == n)
            return bad(err, "Extra inputs are not permitted", "%.60s", k);
    }
    json_t *model = json_object_get(params, "model");
    if (!model)
        return bad(err, "Field required", "model");
    if (!json_is_string(model) || !json_string_length(model))
        return bad(err, "Input should be a valid non-empty string", "model");
    json_t *mt = json_object_get(params, "max_tokens");
    if (!mt)
        return bad(err, "Field required", "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX)
        return bad(err, "Input should be a positive integer", "max_tokens");
    if (json_object_set(body, "model", model) || json_object_set(body, "max_tokens", mt))
        return ERR_NOMEM;
    json_t *msgs = json_array();
    if (!msgs || json_object_set_new(body, "messages", msgs))
        return ERR_NOMEM;
    int rc;
    json_t *sys = member(params, "system");
    if (sys) {
        struct text t = {0};
        if ((rc = system_text(sys, &t, err))) {
            free(t.p);
            return rc;
        }
        if (t.p)
            rc = push(msgs, json_pack("{s:s, s:s#}", "role", "system", "content", t.p, t.n));
        free(t.p);
        if (rc)
            return rc;
    }
    if ((rc = messages_to_chat(json_object_get(params, "messages"), msgs, err)))
        return rc;
    if ((rc = number_field(params, "temperature", 0, 1, body, err)) ||
        (rc = number_field(params, "top_p", 0, 1, body, err)))
        return rc;
    json_t *tk = member(params, "top_k");
    if (tk && (!json_is_integer(tk) || json_integer_value(tk) < 0))
        return bad(err, "Input should be a non-negative integer", "top_k");
    if (tk && json_object_set(body, "top_k", tk))
        return ERR_NOMEM;
    json_t *ss = member(params, "stop_sequences");
    if (ss) {
        size_t i;
        json_t *s;
        if (!json_is_array(ss))
            return bad(err, "Input should be a valid list", "stop_sequences");
        json_array_foreach(ss, i, s) if (!json_is_string(s)) return bad(err, "Input should be a valid string",
                                                                       "stop_sequences.%zu", i);
        if (json_array_size(ss) && json_object_set(body, "stop", ss))
            return ERR_NOMEM;
    }
    json_t *tools = member(params, "tools");
    if (tools && (rc = tools_to_chat(tools, body, err)))
        return rc;
    json_t *tc = member(params, "tool_choice");
    if (tc && (rc = tool_choice_to_chat(tc, tools, body, err)))
        return rc;
    json_t *th = member(params, "thinking");
    if (th && (rc = thinking_to_chat(th, json_integer_value(mt), body, err)))
        return rc;
    json_t *md = member(params, "metadata");
    if (md && !json_is_object(md))
        return bad(err, "Input should be a valid dictionary", "metadata");
    json_t *st = member(params, "stream");
    if (st && !json_is_false(st))
        return bad(err, "Streaming is not supported in batches: stream must be false", "stream");
    return 0;
}

int anth_params_to_chat(const json_t *params, json_t **out, struct problem *err)
{
    if (!json_is_object(params)) {
        char msg[96];
        snprintf(msg, sizeof msg, "Input should be a valid dictionary, not %s", params ? type_name(params) : "absent");
        return problem_setf(err, REQ, "", "%s", msg);
    }
    json_t *body = json_object();
    if (!body)
        return ERR_NOMEM;
    int rc = build(params, body, err);
    if (rc) {
        json_decref(body);
        return rc;
    }
    *out = body;
    return 0;
}

/* The Anthropic field a chat param came from. */
static const char *field_of(const char *param)
{
    static const char *const map[][2] = {{"stop", "stop_sequences"},
                                         {"max_completion_tokens", "max_tokens"},
                                         {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
                                         {"reasoning_effort", "thinking"},
                                         {"chat_template_kwargs", "thinking"},
                                         {"thinking_token_budget", "thinking.budget_tokens"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(param, map[i][0]))
            return map[i][1];
    return param;
}

int anth_params_check(const json_t *params, json_t **out, struct problem *err)
{
    json_t *body = NULL;
    int rc = anth_params_to_chat(params, &body, err);
    if (rc)
        return rc;
    struct problem p = {0};
    struct gp_request gp;
    rc = gp_parse(body, GP_CHAT, 0, &gp, &p);
    if (!rc) {
        gp_release(&gp);
        rc = chat_msgs_from_body(body, NULL, &p);
    }
    if (rc == ERR_INVAL) {
        problem_setf(err, REQ, field_of(p.param), "%s", p.message);
    } else if (!rc && out) {
        *out = body;
        body = NULL;
    }
    json_decref(body);
    return rc;
}

/* ---- the answer -------------------------------------------------------------------- */

static int add_block(json_t *content, json_t *b)
{
    return push(content, b);
}

/* "toolu_" + the call id without OpenAI's "call_" prefix. */
static json_t *tool_use_block(const json_t *call)
{
    const json_t *fn = json_object_get(call, "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    if (!id || !name)
        return NULL;
    if (!strncmp(id, "call_", 5))
        id += 5;
    char tid[128];
    snprintf(tid, sizeof tid, "toolu_%.100s", id);
    json_t *input = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
    if (!json_is_object(input)) { /* a free-text call that is not an object: keep it whole */
        json_decref(input);
        input = json_pack("{s:s}", "arguments", args ? args : "");
    }
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", tid, "name", name, "input", input);
}

static json_int_t int_at(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

int anth_message_from_chat(const json_t *chat, json_t **out)
{
    const json_t *ch = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *msg = json_object_get(ch, "message");
    if (!json_is_object(msg))
        return ERR_INVAL;
    const char *cid = json_string_value(json_object_get(chat, "id"));
    const char *model = json_string_value(json_object_get(chat, "model"));
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    char id[160];
    if (cid && !strncmp(cid, "chatcmpl-", 9))
        cid += 9;
    snprintf(id, sizeof id, "msg_%.140s", cid ? cid : "");
    json_t *content = json_array(), *m = NULL;
    if (!content)
        return ERR_NOMEM;
    int rc = 0;
    const char *think = json_string_value(json_object_get(msg, "reasoning_content"));
    if (think && *think)
        rc = add_block(content, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", think, "signature", ""));
    const char *text = json_string_value(json_object_get(msg, "content"));
    if (!rc && text && *text)
        rc = add_block(content, json_pack("{s:s, s:s}", "type", "text", "text", text));
    const json_t *calls = json_object_get(msg, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (rc)
            break;
        rc = add_block(content, tool_use_block(c));
    }
    if (rc) {
        json_decref(content);
        return rc;
    }
    const json_t *seq = json_object_get(ch, "stop_reason"); /* the stop string that ended it */
    if (!json_is_string(seq) || json_array_size(calls))
        seq = NULL;
    const char *stop = json_array_size(calls)                  ? "tool_use"
                       : finish && !strcmp(finish, "length") ? "max_tokens"
                       : seq                                 ? "stop_sequence"
                                                             : "end_turn";
    const json_t *u = json_object_get(chat, "usage");
    json_int_t prompt = int_at(u, "prompt_tokens"), cached = int_at(json_object_get(u, "prompt_tokens_details"),
                                                                    "cached_tokens");
    if (cached < 0 || cached > prompt)
        cached = 0;
    m = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:O, s:{s:I, s:I, s:I, s:I}}", "id", id, "type", "message",
                  "role", "assistant", "model", model ? model : "", "content", content, "stop_reason", stop,
                  "stop_sequence", seq ? seq : json_null(), "usage", "input_tokens", (json_int_t)(prompt - cached), "output_tokens",
                  int_at(u, "completion_tokens"), "cache_read_input_tokens", cached, "cache_creation_input_tokens",
                  (json_int_t)0);
    if (!m)
        return ERR_NOMEM;
    *out = m;
    return 0;
}

json_t *anth_error_json(const char *type, const char *msg)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", msg);
}
