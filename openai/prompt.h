/*
 * prompt.h - a request body's prompts, built and tokenized: the chat
 * template over `messages`, or the completions prompts as given.
 *
 * Chat: messages -> chat_msgs_parse -> chat_render (generation prompt) ->
 * chat_encode. Completions: text prompts are tokenized with
 * TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL (BOS per the vocabulary;
 * special-token text such as <|im_start|> is parsed, as HF tokenizers /
 * vLLM / llama.cpp's server do); token-array prompts are used as given. A
 * prompt of n_ctx tokens or more, or prompt + explicit max_tokens > n_ctx,
 * is a 400 "context_length_exceeded"; an empty tokenized prompt is a 400
 * on "prompt" (or "messages").
 *
 * Used by the worker to run a request and by jobd (jobd/tokens) to count a
 * line's prompt tokens exactly, so both see the same tokens.
 *
 * Thread: any (reentrant; the tokenizer and template are read only).
 */
#ifndef OPENAI_PROMPT_H
#define OPENAI_PROMPT_H

#include <jansson.h>
#include <stddef.h>

#include "openai/chat_msgs.h"
#include "openai/params.h"
#include "text/chat.h"
#include "text/gen.h"
#include "text/tok.h"

/* What prompt building reads of a model (borrowed). */
struct prompt_model {
    const struct tok *t;
    const struct chat_tmpl *tmpl;      /* for chat requests; NULL: none (ERR_INVAL) */
    size_t n_ctx;                      /* context length in tokens */
};

/* Build and tokenize the prompt(s) of body for endpoint ep with the parsed
 * request gp: one for chat, gp->n_prompts for completions, and check each
 * against m->n_ctx (empty, too long, prompt + max_tokens). Returns 0 and
 * *out (gen_prompts_free(*out, *n_out)), ERR_INVAL with *err filled for a
 * request error (a 400; err left empty for a chat request and no
 * template), or ERR_NOMEM / tokenizer errors. */
int prompt_build(const struct prompt_model *m, enum gp_endpoint ep, const json_t *body,
                 const struct gp_request *gp, struct gen_prompt **out, size_t *n_out,
                 struct problem *err);

/* The chat prompt text of messages cm (parsed from the body gp was parsed
 * from) with the generation prompt: tools, tool_calls, tool_call_id and
 * reasoning_content passed to the template (calls' arguments as objects),
 * chat_template_kwargs and enable_thinking as globals; for a template
 * without tool syntax the generic rewrite (tools.h). now as chat_render_err
 * (0 = the current time). Same returns as chat_render_err. */
int prompt_chat_render(const struct chat_tmpl *tmpl, const struct chat_msgs *cm,
                       const struct gp_request *gp, time_t now, struct buf *out, char *why,
                       size_t whycap);

/* Set up the worker-side parts of a parsed chat request that depend on the
 * model's template: with a thinking template (and thinking not turned off)
 * the thinking block's end marker (reasoning tokens) and a structured
 * output's grammar waiting for it; the tool-call grammar in the template's
 * format (gp_tools_arm). Chat with tools is rendered by prompt_build with
 * the template's `tools` variable, or, for a template without tool syntax,
 * with the generic system message and envelope (openai/tools.h). Returns 0,
 * ERR_NOMEM, or ERR_INVAL with err filled. */
int prompt_arm(const struct prompt_model *m, struct gp_request *gp, struct problem *err);

#endif
