/*
 * chat_msgs.h - the `messages` array of a /v1/chat/completions body as
 * chat messages (text/chat.h) ready for chat_render.
 *
 * Roles: "system" and "developer" (both CHAT_SYSTEM), "user", "assistant",
 * "tool" (and the legacy "function"; both CHAT_TOOL); contents: a string,
 * null (assistant only, empty), or an array of {"type":"text","text":...}
 * parts joined with "\n". An assistant message may carry `tool_calls`
 * (at most GP_MAX_MSG_CALLS {"id", "type": "function", "function": {"name",
 * "arguments": string}}) or the legacy `function_call`; a "tool" message's
 * `tool_call_id` must be the id of a call in an earlier assistant message.
 * Those fields (and `name`, `reasoning_content`) stay in the JSON (src) for
 * the template to read (openai/prompt.c). The caps
 * (CHAT_MAX_MESSAGES, CHAT_MAX_PROMPT_BYTES) are checked before the
 * contents are copied.
 *
 * Thread: any.
 */
#ifndef OPENAI_CHAT_MSGS_H
#define OPENAI_CHAT_MSGS_H

#include <jansson.h>
#include <stddef.h>

#include "common/problem.h"
#include "text/chat.h"

/* Messages parsed from JSON; owns the joined contents. */
struct chat_msgs {
    struct chat_msg *v;
    size_t n;
    char **owned;          /* (n) heap copies backing v[i].content */
    const json_t *src;     /* the messages array parsed (borrowed): v[i] is src[i] */
};

#define GP_MAX_MSG_CALLS 128

/* Parse an OpenAI `messages` array: objects with "role" ("system",
 * "developer" = system, "user", "assistant") and "content": a string, null
 * (assistant only; empty), or an array of {"type":"text","text":...} parts
 * joined with "\n". Returns 0 and fills m (release with chat_msgs_release),
 * ERR_INVAL (not an array, empty, unknown role, bad content, non-text part),
 * ERR_TOOBIG (more than CHAT_MAX_MESSAGES or joined contents over
 * CHAT_MAX_PROMPT_BYTES), ERR_NOMEM. */
int chat_msgs_parse(const json_t *messages, struct chat_msgs *m);   /* m->src = messages */
void chat_msgs_release(struct chat_msgs *m);

/* The `messages` of a chat body, parsed as chat_msgs_parse does, with the
 * request error a user sees: missing_required_parameter when absent or
 * null, invalid_value for any other refusal (param "messages" in both; the
 * message names the index and the field).
 * This is the rule jobd's upload validation and the worker share. m may be
 * NULL to check only. Returns 0 (and *m when m is given), ERR_INVAL with
 * *err filled, ERR_NOMEM. */
int chat_msgs_from_body(const json_t *body, struct chat_msgs *m, struct problem *err);

#endif
