/*
 * embed_req.h - one /v1/embeddings request body, with OpenAI semantics:
 * validated, tokenized, run through worker/engine/embed.h, answered in
 * OpenAI's CreateEmbeddingResponse shape.
 *
 * Body fields (unknown fields are ignored, as OpenAI and vLLM do: user...;
 * what needs no model is checked by oembed_body_parse, openai/embed.h):
 *   model            required string (routing is the caller's; echoed back)
 *   input            required: a string, an array of strings, an array of
 *                    token ids, or an array of token-id arrays - one kind
 *                    per request (mixed types are refused, param "input");
 *                    at most OEMBED_MAX_INPUTS inputs; an empty string or
 *                    empty token array is refused (OpenAI does too); ids
 *                    must be 0..n_vocab-1
 *   encoding_format  "float" (default) or "base64": the little-endian
 *                    float32 bytes, base64 (what the openai SDK decodes)
 *   dimensions       integer 1..n_embd: the vector is cut to its first
 *                    `dimensions` values and L2-normalised again
 *                    (Matryoshka truncation, as OpenAI's text-embedding-3);
 *                    the engine cannot know whether a model was trained
 *                    for it, so any size in range is accepted; out of
 *                    range is refused (param "dimensions")
 * Text inputs are tokenized with the model's special tokens added
 * (TOK_ADD_SPECIAL: BOS/EOS as the GGUF's add_bos/add_eos say - the
 * Qwen3-Embedding GGUFs append <|endoftext|>, which its last-token pooling
 * reads). An input longer than the context (n_ctx tokens after tokenizing)
 * is refused with code context_length_exceeded, naming the input: no
 * silent truncation (OpenAI refuses too).
 * Vectors: pooled per the model (embed_default_pooling), always
 * L2-normalised (OpenAI's embeddings have unit length).
 *
 * Response (keys in OpenAI's order):
 *   {"object":"list","data":[{"object":"embedding","index":i,
 *     "embedding":[floats] | "base64..."}],"model":...,
 *    "usage":{"prompt_tokens":n,"total_tokens":n}}
 *
 * Thread: the thread owning the model context.
 */
#ifndef WORKER_RUN_EMBED_REQ_H
#define WORKER_RUN_EMBED_REQ_H

#include <jansson.h>
#include <stdint.h>

#include "worker/engine/model.h"
#include "text/tok.h"
#include "openai/embed.h"
#include "openai/params.h"

/* Run body on c (made with embeddings = 1, n_out_max = n_batch_max; see
 * embed.h) with tokenizer t; model_name is echoed in the response.
 * Returns 0 and *resp (new reference), or ERR_INVAL with *err filled (a
 * request error: send gp_error_json(err) with status 400), ERR_NOMEM, or
 * embed_run's other errors. *n_tokens gets the prompt tokens on success. */
int oembed_run(struct model_ctx *c, const struct tok *t, const char *model_name,
               const json_t *body, json_t **resp, int64_t *n_tokens, struct problem *err);

/* The same in two halves, so that a worker can embed the inputs of several
 * requests in one embed_run (one pack of forwards): oembed_prepare
 * validates and tokenizes body (the same errors as oembed_run before
 * embedding) into *p (oembed_prep_release; released on error);
 * oembed_answer builds the response from vec, the (p->n, n_embd)
 * normalised vectors of p's inputs in order (cut to dims in place). */
struct oembed_prep {
    size_t n;              /* inputs */
    int32_t **ids;         /* (n) owned token ids of each input */
    int *lens;             /* (n) their lengths */
    int64_t n_tokens;      /* sum of lens: usage.prompt_tokens */
    int dims;              /* values per returned vector */
    int b64;               /* encoding_format base64 */
};
int oembed_prepare(struct model_ctx *c, const struct tok *t, const json_t *body,
                   struct oembed_prep *p, struct problem *err);
int oembed_answer(const struct oembed_prep *p, int n_embd, const char *model_name, float *vec,
                  json_t **resp);
void oembed_prep_release(struct oembed_prep *p); /* NULL ok */

#endif
