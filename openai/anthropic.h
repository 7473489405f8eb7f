/*
 * anthropic.h - Anthropic's Messages contract over the one OpenAI request
 * contract: a Messages `params` object becomes a /v1/chat/completions body,
 * and a chat.completion body becomes a Messages `Message`. jobd's Message
 * Batches routes translate every request at creation with
 * anth_params_check, which ends in the same checks upload validation runs
 * on a chat line (gp_parse, chat_msgs_from_body), so the worker runs
 * Anthropic requests as ordinary chat lines and one rule has one home.
 *
 * Request mapping (anth_params_to_chat; spec/anthropic.md has the table):
 *   model                 required string -> model
 *   max_tokens            required integer >= 1 -> max_tokens
 *   system                string or [{"type":"text","text"}] -> a leading
 *                         system message (blocks joined with "\n")
 *   messages              required non-empty array of {role: user |
 *                         assistant, content: string | blocks}. Blocks:
 *                         text; tool_use {id, name, input object} (assistant)
 *                         -> tool_calls [{id, type function, function {name,
 *                         arguments: input as JSON text}}]; tool_result
 *                         {tool_use_id, content string | text blocks,
 *                         is_error} (user) -> a "tool" message (tool_call_id,
 *                         before the user's text of the same turn), its
 *                         tool_use_id must name a tool_use of an earlier
 *                         assistant turn; thinking {thinking, signature}
 *                         (assistant) -> reasoning_content; redacted_thinking
 *                         is dropped. image, document and every other block
 *                         type are refused.
 *   temperature 0..1, top_p, top_k      -> the same names
 *   stop_sequences        array of strings -> stop
 *   tools                 [{name, description, input_schema}] (type absent
 *                         or "custom") -> [{type function, function {name,
 *                         description, parameters}}]; server tools refused
 *   tool_choice           {type auto} -> "auto", {type any} -> "required",
 *                         {type tool, name} -> the named function (name must
 *                         be a declared tool), {type none} -> "none";
 *                         disable_parallel_tool_use true -> parallel_tool_calls
 *                         false
 *   thinking              {type enabled, budget_tokens >= 1024 and <
 *                         max_tokens} -> chat_template_kwargs
 *                         {enable_thinking: true} and thinking_token_budget
 *                         budget_tokens (the worker forces the close after
 *                         that many thinking tokens); {type disabled} ->
 *                         chat_template_kwargs {enable_thinking: false}
 *   metadata              object ({user_id}), accepted and not forwarded
 *   stream                false or absent (batches do not stream)
 *   service_tier          accepted, ignored
 * Any other key is refused ("Extra inputs are not permitted", as Anthropic).
 *
 * Errors: an ERR_INVAL fills err with code "invalid_request_error", param
 * the dotted path inside params ("max_tokens", "messages.2.content.0.type")
 * and the message Anthropic-style ("Field required"); the caller prefixes
 * "requests.N.params.". A refusal of the chat checks keeps their message
 * with param mapped back to the Anthropic field (stop -> stop_sequences).
 *
 * Response mapping (anth_message_from_chat): id "msg_" + the completion's
 * id, type "message", role "assistant", model, content [thinking (from
 * reasoning_content, signature ""), text (when non-empty), tool_use {id
 * "toolu_" + the call's id, name, input: the parsed arguments object}...],
 * stop_reason tool_use (any call) | max_tokens (finish "length") |
 * stop_sequence (the choice's stop_reason names the stop string that ended
 * it; stop_sequence is that string) | end_turn (stop_sequence null), usage {input_tokens (prompt tokens not read from the
 * prefix cache), output_tokens, cache_read_input_tokens (prompt cache hits),
 * cache_creation_input_tokens 0}.
 *
 * Thread: any. Pure functions over jansson values.
 */
#ifndef OPENAI_ANTHROPIC_H
#define OPENAI_ANTHROPIC_H

#include <jansson.h>

#include "common/problem.h"

#define ANTH_THINKING_MIN_BUDGET 1024 /* Anthropic's least budget_tokens */

/* Translate a Messages params object into a chat body (structure only: the
 * chat checks are anth_params_check's). Returns 0 with *out a new
 * reference, ERR_INVAL with err filled (see the file comment), ERR_NOMEM. */
int anth_params_to_chat(const json_t *params, json_t **out, struct problem *err);

/* anth_params_to_chat, then the chat checks jobd's upload validation runs
 * (gp_parse with no vocabulary, chat_msgs_from_body). Returns 0 with *out
 * (new reference; out may be NULL to check only), ERR_INVAL with err
 * filled, ERR_NOMEM. */
int anth_params_check(const json_t *params, json_t **out, struct problem *err);

/* The Messages response of a chat.completion body (first choice). Returns
 * 0 with *out a new reference, ERR_INVAL (not a chat.completion with a
 * choice), ERR_NOMEM. */
int anth_message_from_chat(const json_t *chat, json_t **out);

/* The Anthropic error object {"type":"error","error":{"type","message"}}
 * with error type `type` and message msg. New reference, NULL only on out
 * of memory. */
json_t *anth_error_json(const char *type, const char *msg);

#endif
