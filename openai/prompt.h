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

#endif
