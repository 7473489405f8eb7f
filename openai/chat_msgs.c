/* chat_msgs.c - the OpenAI `messages` array into chat messages (see chat_msgs.h). */
#include "openai/chat_msgs.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void chat_msgs_release(struct chat_msgs *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->v);
    memset(m, 0, sizeof *m);
}

/* An assistant message's tool_calls (or legacy function_call): each
 * {"id", "type": "function", "function": {"name", "arguments": string}}. */
static int check_calls(const json_t *o, size_t i, struct problem *err)
{
    const json_t *calls = json_object_get(o, "tool_calls");
    const json_t *fc = json_object_get(o, "function_call");
    if (fc && !json_is_null(fc) &&
        (!json_is_string(json_object_get(fc, "name")) ||
         !json_is_string(json_object_get(fc, "arguments"))))
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages[%zu].function_call': expected {\"name\": string, "
                            "\"arguments\": string}.", i);
    if (!calls || json_is_null(calls))
        return 0;
    if (!json_is_array(calls) || json_array_size(calls) > GP_MAX_MSG_CALLS)
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages[%zu].tool_calls': expected an array of at most %d "
                            "calls.", i, GP_MAX_MSG_CALLS);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
        const char *ty = json_string_value(json_object_get(c, "type"));
        if (!json_is_string(json_object_get(c, "id")) || !json_string_length(json_object_get(c, "id")) ||
            (ty && strcmp(ty, "function") != 0) || !json_is_string(json_object_get(f, "name")) ||
            !json_is_string(json_object_get(f, "arguments")))
            return problem_setf(err, "invalid_value", "messages",
                                "Invalid 'messages[%zu].tool_calls[%zu]': expected {\"id\": "
                                "string, \"type\": \"function\", \"function\": {\"name\": string, "
                                "\"arguments\": string}}.", i, k);
    }
    return 0;
}

/* A tool message answers an earlier call: its tool_call_id is the id of
 * some tool_calls entry of an assistant message before it. */
static int check_answer(const json_t *messages, size_t i, struct problem *err)
{
    const json_t *o = json_array_get(messages, i);
    const char *id = json_string_value(json_object_get(o, "tool_call_id"));
    if (!id)
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages[%zu]': a 'tool' message needs 'tool_call_id'.", i);
    for (size_t j = i; j-- > 0;) {
        const json_t *o2 = json_array_get(messages, j);
        const char *r = json_string_value(json_object_get(o2, "role"));
        if (!r || strcmp(r, "assistant") != 0)
            continue;   /* only an assistant's (checked) tool_calls are calls */
        const json_t *calls = json_object_get(o2, "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            const char *cid = json_string_value(json_object_get(json_array_get(calls, k), "id"));
            if (cid && strcmp(cid, id) == 0)
                return 0;
        }
    }
    return problem_setf(err, "invalid_value", "messages",
                        "Invalid 'messages[%zu]': 'tool_call_id' '%.64s' answers no earlier "
                        "assistant 'tool_calls' id; a 'tool' message must follow the call it "
                        "answers.", i, id);
}

static int role_of(const char *r, enum chat_role *er)
{
    if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)
        *er = CHAT_SYSTEM;
    else if (strcmp(r, "user") == 0)
        *er = CHAT_USER;
    else if (strcmp(r, "assistant") == 0)
        *er = CHAT_ASSISTANT;
    else if (strcmp(r, "tool") == 0 || strcmp(r, "function") == 0)
        *er = CHAT_TOOL;
    else
        return ERR_INVAL;
    return 0;
}

/* The content of message i joined into b. */
static int join_content(const json_t *o, size_t i, enum chat_role er, struct buf *b,
                        struct problem *err)
{
    const json_t *content = json_object_get(o, "content");
    int rc = 0;
    buf_reset(b);
    if (json_is_string(content))
        return buf_append(b, json_string_value(content), json_string_length(content));
    if (json_is_null(content) || (!content && er == CHAT_ASSISTANT))
        return er == CHAT_ASSISTANT ? 0
                                    : problem_setf(err, "invalid_value", "messages",
                                                   "Invalid 'messages[%zu].content': only an "
                                                   "assistant message may have no content.", i);
    if (!json_is_array(content))
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages[%zu].content': expected a string or an array of "
                            "text parts.", i);
    for (size_t k = 0; k < json_array_size(content) && rc == 0; k++) {
        const json_t *part = json_array_get(content, k);
        const char *ty = json_string_value(json_object_get(part, "type"));
        const json_t *tx = json_object_get(part, "text");
        if (!ty || strcmp(ty, "text") != 0 || !json_is_string(tx))
            return problem_setf(err, "invalid_value", "messages",
                                "Invalid 'messages[%zu].content[%zu]': only {\"type\": \"text\", "
                                "\"text\": ...} parts are supported.", i, k);
        if (k > 0)
            rc = buf_append_byte(b, '\n');
        if (rc == 0)
            rc = buf_append(b, json_string_value(tx), json_string_length(tx));
    }
    return rc;
}

static int parse_msgs(const json_t *messages, struct chat_msgs *out, struct problem *err)
{
    int rc = 0;
    struct chat_msgs m = {0};
    struct buf b;
    size_t total = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages': expected a non-empty array of {role, content} "
                            "objects.");
    size_t n = json_array_size(messages);
    if (n > CHAT_MAX_MESSAGES)
        return ERR_TOOBIG;
    buf_init(&b, CHAT_MAX_PROMPT_BYTES);
    m.v = calloc(n, sizeof *m.v);
    m.owned = calloc(n, sizeof *m.owned);
    if (!m.v || !m.owned) {
        rc = ERR_NOMEM;
        goto out;
    }
    m.src = messages;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(messages, i);
        const char *r = json_string_value(json_object_get(o, "role"));
        enum chat_role er = CHAT_USER;
        if (!json_is_object(o) || !r || role_of(r, &er) != 0) {
            rc = problem_setf(err, "invalid_value", "messages",
                              "Invalid 'messages[%zu]': expected an object whose 'role' is "
                              "system, developer, user, assistant or tool.", i);
            goto out;
        }
        if ((er == CHAT_ASSISTANT && (rc = check_calls(o, i, err)) != 0) ||
            (er == CHAT_TOOL && strcmp(r, "tool") == 0 &&
             (rc = check_answer(messages, i, err)) != 0) ||
            (rc = join_content(o, i, er, &b, err)) != 0)
            goto out;
        total += b.len;
        if (total > CHAT_MAX_PROMPT_BYTES) {
            rc = ERR_TOOBIG;
            goto out;
        }
        m.owned[i] = dup_n(b.data ? b.data : "", b.len);
        if (!m.owned[i]) {
            rc = ERR_NOMEM;
            goto out;
        }
        m.n = i + 1;
        m.v[i] = (struct chat_msg){er, m.owned[i], b.len};
    }
    *out = m;
    m = (struct chat_msgs){0};
out:
    buf_release(&b);
    chat_msgs_release(&m);
    return rc;
}

int chat_msgs_parse(const json_t *messages, struct chat_msgs *out)
{
    struct problem e;
    return parse_msgs(messages, out, &e);
}

int chat_msgs_from_body(const json_t *body, struct chat_msgs *m, struct problem *err)
{
    const json_t *msgs = json_object_get(body, "messages");
    struct chat_msgs cm;
    if (!msgs || json_is_null(msgs))
        return problem_setf(err, "missing_required_parameter", "messages",
                            "Missing required parameter: 'messages'.");
    int rc = parse_msgs(msgs, &cm, err);
    if (rc == ERR_TOOBIG)
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages': too many messages or content too long.");
    if (rc)
        return rc;
    if (m)
        *m = cm;
    else
        chat_msgs_release(&cm);
    return 0;
}
