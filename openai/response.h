/*
 * response.h - the OpenAI response bodies of one finished request:
 * `chat.completion` (/v1/chat/completions) and `text_completion`
 * (/v1/completions), with usage and optional logprobs.
 *
 * Shapes (keys in this order, as OpenAI sends them; openai-python types
 * ChatCompletion, Completion, ChatCompletionTokenLogprob, CompletionUsage):
 *
 *   {"id":"chatcmpl-...","object":"chat.completion","created":<unix s>,"model":...,
 *    "choices":[{"index":i,"message":{"role":"assistant","content":"..." | null,"refusal":null,
 *                            ["reasoning_content":"...","reasoning":"...",]
 *                            ["tool_calls":[{"id":"call_...","type":"function",
 *                                            "function":{"name","arguments":"<json>"}}]]},
 *                "logprobs":null | {"content":[{"token","logprob","bytes":[int],
 *                                               "top_logprobs":[{"token","logprob","bytes"}]}],
 *                                   "refusal":null},
 *                "finish_reason":"stop"|"length"|"tool_calls"|"function_call",
                ["stop_reason":"<the stop string that ended it>"]}],
 *    "usage":{"prompt_tokens","completion_tokens","total_tokens",
 *             ["completion_tokens_details":{"reasoning_tokens"}]},
 *    "service_tier":"default",
 *
 * Tool calls (meta.tools): a text that parses as calls in the template's
 * format gives message.tool_calls, content null when nothing else was
 * said, finish_reason "tool_calls" ("stop" for a named tool_choice, as
 * OpenAI; "function_call" and message.function_call for the legacy
 * functions API); a text cut by the length limit or not parsing stays
 * content with its own finish_reason. Reasoning (meta.think): a leading
 * <think>...</think> block becomes reasoning_content and reasoning (both:
 * clients read either name), the rest content.
 *    "system_fingerprint":"..." | null}
 *
 *   {"id":"cmpl-...","object":"text_completion","created","model",
 *    "choices":[{"text","index","logprobs":null | {"tokens":[str],"token_logprobs":[num],
 *                "top_logprobs":[{str: num}],"text_offset":[int]},"finish_reason"}],
 *    "usage":{...},"system_fingerprint":...}
 *
 * stop_reason (vLLM's extension) is there only when one of the request's
 * stop strings ended the choice (gen_choice.stop), in both bodies.
 *
 * Token strings are the token's decoded piece (tok_piece with special tokens
 * rendered), with invalid UTF-8 (a piece holding part of a character)
 * replaced by U+FFFD so the JSON stays valid; `bytes` carries the raw piece
 * bytes. text_offset counts Unicode code points (Python str indices into
 * `text`), as OpenAI/vLLM clients index it. In completions' top_logprobs
 * dictionaries two alternatives with the same string keep the first (more
 * likely) one.
 *
 * Thread: any.
 */
#ifndef OPENAI_RESPONSE_H
#define OPENAI_RESPONSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "openai/tools.h"
#include "text/chat.h"
#include "text/gen.h"
#include "text/tok.h"

struct resp_meta {
    const char *id;                  /* NULL: a fresh "chatcmpl-..." / "cmpl-..." id */
    int64_t created;                 /* 0: now (unix seconds) */
    const char *model;               /* echoed model name */
    const char *system_fingerprint;  /* NULL -> JSON null */
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int logprobs;                    /* 1: logprobs objects, 0: "logprobs": null */
    /* chat only: */
    const struct gp_tools *tools;    /* the request's tools (NULL: none): calls are read
                                      * out of the answer in tool_fmt (openai/tools.h) */
    enum chat_tool_format tool_fmt;
    int think;                       /* the template thinks: split the thinking block into
                                      * message.reasoning_content and .reasoning */
    int64_t reasoning_tokens;        /* set by resp_chat_build from the choices' n_reason
                                      * (usage.completion_tokens_details, when think) */
};

/* Build a chat.completion body from the finished sequences' choices[0..n)
 * (worker/engine/generate.h; index = position).
 * Returns 0 and *out (new reference), ERR_INVAL (finish not set, offsets
 * beyond text), ERR_NOMEM, ERR_CRYPTO (id generation). */
int resp_chat_build(const struct resp_meta *m, const struct gen_choice *choices, size_t n,
                    const struct tok *t, json_t **out);

/* Same for a text_completion body. */
int resp_completion_build(const struct resp_meta *m, const struct gen_choice *choices, size_t n,
                          const struct tok *t, json_t **out);

#endif
