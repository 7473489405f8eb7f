/*
 * params.h - generation parameters of one /v1/chat/completions or
 * /v1/completions request body, with OpenAI semantics and validation.
 *
 * gp_parse reads a request body (a jansson object, already size/depth
 * checked by js_parse) into a struct gp_request: the engine's struct
 * gen_params plus the endpoint and the completions prompts. Every rejected field gives
 * an OpenAI-style error: a message, the offending `param` and a `code`, to be
 * sent back as {"error":{"message","type":"invalid_request_error","param","code"}}
 * (gp_error_json). Unknown fields are ignored, as OpenAI and vLLM do (user,
 * metadata, store, service_tier, ...). `model` and `messages` are not read
 * here (the caller routes on model; chat.h parses messages).
 *
 * Fields, ranges and defaults (absent or JSON null = default):
 *   max_tokens             integer >= 1. Chat: max_completion_tokens wins when
 *   max_completion_tokens  both are given. Default: no limit but the context
 *                          (generation stops with "length" when prompt +
 *                          completion reach n_ctx). An explicit value whose
 *                          prompt + max_tokens exceeds n_ctx is rejected at
 *                          run time (context_length_exceeded), as OpenAI does.
 *   temperature            number 0..2, default 1. Below 1e-5 = greedy.
 *   top_p                  number in (0, 1], default 1.
 *   top_k                  integer >= 0 (-1 accepted as vLLM's "off"), default 0
 *                          = off. Extension (vLLM, llama.cpp).
 *   min_p                  number 0..1, default 0. Extension.
 *   repetition_penalty     number > 0 and <= 100, default 1 = off. Extension;
 *                          applied over prompt + generated tokens (vLLM).
 *   frequency_penalty      number -2..2, default 0.
 *   presence_penalty       number -2..2, default 0.
 *   seed                   integer (int64; negative values are taken as their
 *                          two's-complement uint64). Absent: a random seed is
 *                          drawn from the OS per request (seed_given = 0), so
 *                          unseeded requests differ; the caller may replace it
 *                          (e.g. to derive it from the request id so that a
 *                          retried lease reproduces the same text).
 *   stop                   string or array of 1..4 non-empty strings (max
 *                          STOP_MAX_BYTES each); null / [] = none.
 *   n                      integer 1..8, default 1.
 *   logit_bias             object {"<token id>": number -100..100}, at most
 *                          GP_MAX_LOGIT_BIAS keys, ids < n_vocab.
 *   logprobs               chat: boolean (default false).
 *                          completions: integer 0..5 (or null) = number of
 *                          top alternatives; 0 = only the chosen token.
 *   top_logprobs           chat only: integer 0..20, requires logprobs true.
 *   stream                 must be false or absent (batch: code "unsupported_value").
 *   stream_options         ignored when stream is false.
 *   echo                   completions: only false/absent. true is rejected:
 *                          it needs prompt logprobs, which the engine does
 *                          not compute (code "unsupported_value").
 *   suffix                 completions: only null/absent/"" (no insertion mode).
 *   best_of                completions: only absent/null or equal to n (no
 *                          server-side ranking); best_of < n is invalid.
 *   prompt                 completions (required): string, array of strings,
 *                          array of token ids, or array of arrays of token ids;
 *                          several prompts give n choices each, choice index =
 *                          prompt_index * n + i (OpenAI). At most
 *                          GP_MAX_PROMPTS prompts and GP_MAX_CHOICES choices
 *                          in all; token ids must be < n_vocab; each prompt
 *                          must be non-empty.
 *   response_format        {"type":"text"} (default), {"type":"json_object"},
 *                          {"type":"json_schema","json_schema":{"name","schema",
 *                          "strict"}}; vLLM's guided_json / guided_regex /
 *                          guided_choice likewise (at most one of them): compiled
 *                          by gp_format_parse (format.c; common/gram compiles) into
 *                          gen.grammar; a schema feature that cannot be enforced
 *                          is refused (code "unsupported_value", the message names
 *                          the keyword), guided_grammar is "unsupported_parameter".
 *                          See spec/structured-outputs.md.
 *   tools, functions,      chat: tool calling, see openai/tools.h (gp_tools_parse);
 *   tool_choice,           completions refuses tools/functions
 *   function_call,         ("unsupported_parameter").
 *   parallel_tool_calls
 *   reasoning_effort       chat: none | minimal | low | medium | high | xhigh |
 *                          max; none and minimal turn a thinking template's
 *                          thinking off (enable_thinking = false), the others
 *                          leave it on.
 *   thinking_token_budget  chat: integer >= 0 (vLLM's name; extension): with a
 *                          thinking template and thinking on, once the
 *                          thinking block holds this many generated tokens
 *                          the worker forces its close (GEN_THINK_CLOSE) and
 *                          the answer follows; ignored otherwise. Default:
 *                          none (max_tokens bounds thinking and answer together).
 *   chat_template_kwargs   chat: object of at most GP_MAX_TEMPLATE_KWARGS extra
 *                          template variables (vLLM, llama.cpp), e.g.
 *                          {"enable_thinking": false}; the variables the server
 *                          sets (messages, tools, ...) are refused.
 *   Refused rather than silently ignored (code "unsupported_parameter" /
 *   "unsupported_value"): modalities other than ["text"], audio, prediction.
 *
 * Thread: any. A gp_request owns its heap copies (release with gp_release).
 */
#ifndef OPENAI_PARAMS_H
#define OPENAI_PARAMS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gram/gram.h"
#include "common/problem.h"
#include "openai/tools.h"
#include "text/gen.h"

#define GP_MAX_N 8
#define GP_MAX_LOGIT_BIAS 1024
#define GP_MAX_PROMPTS 64
#define GP_MAX_CHOICES 128
#define GP_MAX_COMPLETION_LOGPROBS 5
#define GP_MAX_TEMPLATE_KWARGS 64

/* GP_RESPONSES: a /v1/responses body, which openai/responses.h translates
 * into a GP_CHAT body first; gp_parse and prompt_build take GP_CHAT and
 * GP_COMPLETIONS only. */
enum gp_endpoint { GP_CHAT = 1, GP_COMPLETIONS = 2, GP_RESPONSES = 3 };

/* One completions prompt: text (UTF-8, owned) or token ids (owned). */
struct gp_prompt {
    char *text;         /* NULL when given as ids */
    size_t text_len;
    int32_t *ids;       /* NULL when given as text */
    size_t n_ids;
};

/* A parsed request: the endpoint, the engine's generation parameters, and
 * for completions the prompts as given (text or ids, not yet tokenized). */
struct gp_request {
    enum gp_endpoint endpoint;
    struct gen_params gen;       /* text/gen.h */
    struct gp_prompt *prompts;   /* completions only (n_prompts >= 1) */
    size_t n_prompts;
    struct gp_tools tools;       /* chat: tools, tool_choice, parallel_tool_calls (tools.h) */
    int think_off;               /* chat: reasoning_effort none/minimal or
                                  * chat_template_kwargs.enable_thinking false */
    json_t *tmpl_kwargs;         /* chat: chat_template_kwargs (owned), or NULL */
};

/* Parse body for endpoint ep; n_vocab bounds token ids (logit_bias keys,
 * prompt tokens). n_vocab 0 means the vocabulary is unknown (jobd's upload
 * validation, which has no model): ids are then checked against 0..2^31-1
 * only, no default seed is drawn (gen.seed stays 0: nothing samples from a
 * validation), and every other rule is the same, so a body jobd accepts
 * fails in a worker only on what needs the model. Returns 0 and fills *out (release with gp_release), or
 * ERR_INVAL with *err filled (message names the param), or ERR_NOMEM /
 * ERR_CRYPTO (no OS randomness for the default seed). */
int gp_parse(const json_t *body, enum gp_endpoint ep, size_t n_vocab, struct gp_request *out,
             struct problem *err);
void gp_release(struct gp_request *p);

/* The output constraint body asks for (format.c): response_format {"type":
 * "text" | "json_object" | "json_schema", "json_schema": {"name", "schema",
 * "strict", "description"}}, or vLLM's guided_json (schema object or its
 * text), guided_regex (string), guided_choice (array of strings); at most
 * one of them. Compiled through gram_cache_get. Returns 0 with *out a new
 * reference, or *out NULL when the body asks for none; ERR_INVAL /
 * ERR_UNSUPPORTED / ERR_TOOBIG with err's message, param and code filled;
 * ERR_NOMEM. gp_parse calls it for gen.grammar. */
int gp_format_parse(const json_t *body, struct gram **out, struct problem *err);

/* The OpenAI error body {"error":{"message","type","param","code"}} for err
 * (type "invalid_request_error"). New reference, NULL only on out of memory. */
json_t *gp_error_json(const struct problem *err);

#endif
