/*
 * response.h - the OpenAI response bodies of one finished request:
 * `chat.completion` (/v1/chat/completions) and `text_completion`
 * (/v1/completions), with usage and optional logprobs.
 *
 * Shapes (keys in this order, as OpenAI sends them; openai-python types
 * ChatCompletion, Completion, ChatCompletionTokenLogprob, CompletionUsage):
 *
 *   {"id":"chatcmpl-...","object":"chat.completion","created":<unix s>,"model":...,
 *    "choices":[{"index":i,"message":{"role":"assistant","content":"...","refusal":null},
 *                "logprobs":null | {"content":[{"token","logprob","bytes":[int],
 *                                               "top_logprobs":[{"token","logprob","bytes"}]}],
 *                                   "refusal":null},
 *                "finish_reason":"stop"|"length"}],
 *    "usage":{"prompt_tokens","completion_tokens","total_tokens"},
 *    "system_fingerprint":"..." | null}
 *
 *   {"id":"cmpl-...","object":"text_completion","created","model",
 *    "choices":[{"text","index","logprobs":null | {"tokens":[str],"token_logprobs":[num],
 *                "top_logprobs":[{str: num}],"text_offset":[int]},"finish_reason"}],
 *    "usage":{...},"system_fingerprint":...}
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
