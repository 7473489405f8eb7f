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

int chat_msgs_parse(const json_t *messages, struct chat_msgs *out)
{
    int rc = 0;
    struct chat_msgs m = {0};
    struct buf b;
    size_t total = 0;
    buf_init(&b, CHAT_MAX_PROMPT_BYTES);
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return ERR_INVAL;
    size_t n = json_array_size(messages);
    if (n > CHAT_MAX_MESSAGES)
        return ERR_TOOBIG;
    m.v = calloc(n, sizeof *m.v);
    m.owned = calloc(n, sizeof *m.owned);
    if (!m.v || !m.owned) {
        rc = ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(messages, i);
        const json_t *role = json_object_get(o, "role"), *content = json_object_get(o, "content");
        const char *r = json_string_value(role);
        enum chat_role er;
        if (!json_is_object(o) || !r) {
            rc = ERR_INVAL;
            goto out;
        }
        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)
            er = CHAT_SYSTEM;
        else if (strcmp(r, "user") == 0)
            er = CHAT_USER;
        else if (strcmp(r, "assistant") == 0)
            er = CHAT_ASSISTANT;
        else {
            rc = ERR_INVAL;
            goto out;
        }
        buf_reset(&b);
        if (json_is_string(content)) {
            rc = buf_append(&b, json_string_value(content), json_string_length(content));
        } else if (json_is_null(content) || (!content && er == CHAT_ASSISTANT)) {
            rc = er == CHAT_ASSISTANT ? 0 : ERR_INVAL;
        } else if (json_is_array(content)) {
            for (size_t k = 0; k < json_array_size(content) && rc == 0; k++) {
                const json_t *part = json_array_get(content, k);
                const char *ty = json_string_value(json_object_get(part, "type"));
                const json_t *tx = json_object_get(part, "text");
                if (!ty || strcmp(ty, "text") != 0 || !json_is_string(tx)) {
                    rc = ERR_INVAL;
                    break;
                }
                if (k > 0)
                    rc = buf_append_byte(&b, '\n');
                if (rc == 0)
                    rc = buf_append(&b, json_string_value(tx), json_string_length(tx));
            }
        } else {
            rc = ERR_INVAL;
        }
        if (rc < 0)
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

int chat_msgs_from_body(const json_t *body, struct chat_msgs *m, struct problem *err)
{
    const json_t *msgs = json_object_get(body, "messages");
    struct chat_msgs cm;
    if (!msgs || json_is_null(msgs))
        return problem_setf(err, "missing_required_parameter", "messages",
                            "Missing required parameter: 'messages'.");
    int rc = chat_msgs_parse(msgs, &cm);
    if (rc == ERR_INVAL)
        return problem_setf(err, "invalid_value", "messages",
                            "Invalid 'messages': expected a non-empty array of {role, content} "
                            "objects with roles system, developer, user or assistant and text "
                            "content.");
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
