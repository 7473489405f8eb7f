/*
 * embed.h - the shape of a /v1/embeddings request body: what can be
 * checked without running the model, shared by jobd's upload validation
 * (jobd/intake) and the worker (worker/run/embed_req.h), so that a body
 * jobd accepts is a body the worker runs.
 *
 * Checked, in this order (the first failure is the body's one error):
 *   encoding_format  absent / null, "float" or "base64" (invalid_value)
 *   dimensions       absent / null, or an integer (invalid_type) >= 1 and,
 *                    when n_embd is known, <= n_embd (invalid_value)
 *   input            required (missing_required_parameter): a string, an
 *                    array of strings, an array of token ids, or an array of
 *                    token-id arrays; one kind per body (invalid_type); a
 *                    non-empty array of at most OEMBED_MAX_INPUTS items
 *                    (invalid_value)
 *   each input       a string: non-empty (invalid_value) and at most
 *                    TOK_MAX_INPUT_BYTES (context_length_exceeded); token
 *                    ids: non-empty (invalid_value), each id in 0..n_vocab-1,
 *                    or 0..2^31-1 when n_vocab is 0 (unknown: jobd)
 *                    (invalid_value)
 * Every error has param "input", "encoding_format" or "dimensions".
 * What needs the model (tokenizing, an input longer than the context) is
 * the worker's, after this. Unknown fields are ignored (OpenAI does too).
 *
 * Thread: any. Nothing is copied: the inputs are borrowed from body.
 */
#ifndef OPENAI_EMBED_H
#define OPENAI_EMBED_H

#include <jansson.h>
#include <stddef.h>

#include "common/problem.h"

#define OEMBED_MAX_INPUTS 2048 /* inputs in one body (OpenAI's limit) */

struct oembed_body {
    const json_t **items;  /* (n) owned array of borrowed inputs: each a string or an id array */
    size_t n;              /* inputs, 1..OEMBED_MAX_INPUTS */
    int ids;               /* 1: the inputs are token-id arrays; 0: strings */
    int dims;              /* the dimensions asked for; 0 = absent (the model's width) */
    int b64;               /* encoding_format base64 */
};

/* Check body (n_vocab and n_embd 0 when unknown: those bounds are then not
 * checked) and fill *out (release with oembed_body_release). Returns 0,
 * ERR_INVAL with *err filled, or ERR_NOMEM; *out is untouched on error. */
int oembed_body_parse(const json_t *body, size_t n_vocab, int n_embd, struct oembed_body *out,
                      struct problem *err);
void oembed_body_release(struct oembed_body *b); /* NULL ok */

#endif
