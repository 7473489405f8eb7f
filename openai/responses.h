/*
 * responses.h - /v1/responses as a translation layer onto the chat path:
 * a Responses request body becomes the /v1/chat/completions body the chat
 * code runs (gp_parse, chat_msgs_from_body, prompt_build), and the
 * chat.completion it produces becomes a `Response` object
 * (openai-python types.responses.Response). vLLM and llama.cpp's
 * /v1/responses do the same; spec/responses.md is the user's table.
 *
 * Request (oresp_to_chat). Fields, in the order they are read:
 *   refused     previous_response_id (code previous_response_not_found:
 *               nothing is stored between lines), conversation and prompt
 *               (unsupported_parameter), background:true (unsupported_value);
 *               chat-only names (messages, max_tokens, max_completion_tokens,
 *               response_format, n, logprobs, functions, function_call,
 *               reasoning_effort) are unknown_parameter naming the Responses
 *               field to use.
 *   instructions string => a leading system message.
 *   input       string => one user message; or an array of items:
 *               message {type?:"message", role user|assistant|system|developer,
 *                 content: string | parts}; parts input_text (any role),
 *                 output_text and refusal (assistant) => chat text parts;
 *                 input_image / input_file / input_audio unsupported_value;
 *               function_call {call_id, name, arguments:string} => a
 *                 tool_calls entry {id: call_id, type:"function", function:
 *                 {name, arguments}} of the assistant message just before it
 *                 (so consecutive calls, and the message + calls of one
 *                 turn, make one assistant message), else of a new one with
 *                 content null;
 *               function_call_output {call_id, output: string | input_text
 *                 parts} => {"role":"tool","tool_call_id","content": string};
 *               reasoning {content:[reasoning_text] | summary:[summary_text]}
 *                 => "reasoning_content" of the next assistant message (the
 *                 previous one, or a new empty one, when none follows);
 *                 encrypted_content is refused (unsupported_value);
 *               a bare input_text (a part given as an item) invalid_value;
 *               any other item type (built-in tool calls, item_reference)
 *               unsupported_value.
 *   max_output_tokens integer >= 16 (OpenAI's minimum, integer_below_min_value)
 *               => max_completion_tokens.
 *   temperature, top_p, stream, stream_options, seed, top_k, min_p,
 *               repetition_penalty, frequency_penalty, presence_penalty, stop,
 *               logit_bias, chat_template_kwargs, parallel_tool_calls: copied
 *               (the chat rules check them).
 *   top_logprobs integer 0..20, or include has "message.output_text.logprobs"
 *               => logprobs:true (+ top_logprobs).
 *   text        {format, verbosity}: format text (nothing) | json_object |
 *               flat json_schema {name (required), schema, strict,
 *               description} => response_format (nested json_schema);
 *               verbosity low|medium|high.
 *   tools       flat function tools {type:"function", name, description,
 *               parameters, strict (default true, as OpenAI)} => nested chat
 *               tools; any other type (web_search, file_search, mcp, ...)
 *               unsupported_value naming tools[i].type.
 *   tool_choice none|auto|required; {type:"function", name} =>
 *               {type:"function", function:{name}}; {type:"allowed_tools",
 *               mode, tools} => {type:"allowed_tools", allowed_tools:{mode,
 *               tools (nested)}}; hosted tool types unsupported_value.
 *   reasoning   {effort, summary}: effort none|minimal|low|medium|high|xhigh|max
 *               => reasoning_effort; summary auto|concise|detailed (echoed).
 *   metadata    <= 16 pairs, keys <= 64 and string values <= 512 characters.
 *   store, service_tier, safety_identifier (<= 64 chars), prompt_cache_key,
 *   prompt_cache_retention, user, truncation (auto|disabled), include,
 *   max_tool_calls: accepted (echoed where OpenAI echoes them); nothing else
 *   is read, as gp_parse ignores unknown fields.
 *
 * Errors are a struct problem with OpenAI's param (the Responses name,
 * "input[2].content[0].type") and code. A refusal of the chat rules on the
 * translated body names the chat field; oresp_problem_from_chat renames it
 * (messages -> input, max_completion_tokens -> max_output_tokens,
 * response_format.json_schema -> text.format, tools[i].function.x ->
 * tools[i].x, reasoning_effort -> reasoning.effort). oresp_check is the one
 * rule jobd's upload validation and the worker share: translate, then the
 * chat checks, with the Responses names.
 *
 * Response (oresp_from_chat): keys of the SDK's Response; output[] in the
 * order reasoning (message.reasoning_content or .reasoning, non-empty) ->
 * message (output_text with annotations [] and logprobs from the chat
 * choice, [] when not asked; left out when the content is null or empty and
 * there are calls) -> one function_call item per message.tool_calls entry
 * (call_id = the chat call id, arguments the JSON string). finish_reason
 * "length" gives status "incomplete" with incomplete_details.reason
 * "max_output_tokens" (content_filter likewise), any other "completed".
 * Ids derive from the chat completion's: "chatcmpl-X" -> resp_X, msg_X,
 * rs_X, fc_X_<i>, so a rerun of a line with one id gives the same ids.
 * usage: input_tokens, input_tokens_details.cached_tokens (and
 * cache_write_tokens 0: the SDK requires it; nothing is written to a cache a user pays for),
 * output_tokens, output_tokens_details.reasoning_tokens, total_tokens from
 * the chat usage (details 0 when it has none). The request's settings are
 * echoed with OpenAI's defaults: instructions, max_output_tokens,
 * max_tool_calls, metadata ({}), parallel_tool_calls (true), reasoning
 * {effort, summary} (null), service_tier "default", store (true),
 * temperature and top_p (1), text ({"format":{"type":"text"}, "verbosity":
 * "medium"}), tool_choice ("auto"), tools (flat, strict filled in), top_logprobs
 * (0), truncation ("disabled"), user, safety_identifier, prompt_cache_key;
 * error, previous_response_id null; background false.
 *
 * Thread: any (no state). Every json_t returned is a new reference.
 */
#ifndef OPENAI_RESPONSES_H
#define OPENAI_RESPONSES_H

#include <jansson.h>
#include <stddef.h>

#include "common/problem.h"

#define ORESP_MIN_OUTPUT_TOKENS 16
#define ORESP_MAX_METADATA 16
#define ORESP_METADATA_KEY_CHARS 64
#define ORESP_METADATA_VALUE_CHARS 512
#define ORESP_MAX_TOP_LOGPROBS 20
#define ORESP_MAX_ID_CHARS 64 /* safety_identifier, user */

/* Translate a Responses request body into a chat body (see the table
 * above). The chat body's strings and sub-objects may be shared with body
 * (json_incref), so body must not be modified while *chat lives. Returns 0
 * and *chat; ERR_INVAL with *err filled (a request error: param and code
 * are the Responses ones); ERR_NOMEM. */
int oresp_to_chat(const json_t *body, json_t **chat, struct problem *err);

/* Rename the chat field err names (a refusal of the chat rules on a
 * translated body) to the Responses field a user wrote, in param and in the
 * message. A param that is the same in both is left alone. Can't fail. */
void oresp_problem_from_chat(struct problem *err);

/* The request rule of a Responses body: oresp_to_chat, then gp_parse
 * (GP_CHAT, n_vocab as gp_parse takes it: 0 for jobd's upload check) and
 * chat_msgs_from_body on the result; refusals of the chat rules renamed by
 * oresp_problem_from_chat. Returns 0, with *chat (the translated body) when
 * chat is not NULL; ERR_INVAL with *err; ERR_NOMEM. */
int oresp_check(const json_t *body, size_t n_vocab, json_t **chat, struct problem *err);

/* The Response object of the Responses request req answered by the
 * chat.completion cc (its first choice). Returns 0 and *out; ERR_INVAL
 * when cc is not a chat.completion with a choice; ERR_NOMEM; ERR_CRYPTO
 * (a fresh id when cc has none). */
int oresp_from_chat(const json_t *req, const json_t *cc, json_t **out);

#endif
