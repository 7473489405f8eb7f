/*
 * embed.h - sentence embeddings: token sequences in, one pooled (and
 * optionally L2-normalised) vector of n_embd floats per sequence out.
 *
 * Decoder-based embedding models (Qwen3-Embedding style: a qwen3/llama/...
 * GGUF with `<arch>.pooling_type`) run through the ordinary forward pass
 * with model_ctx_params.embeddings = 1, which hands back each marked
 * token's final-norm hidden state instead of logits. No generation: one
 * forward per input, and inputs are packed padding-free - several inputs
 * share one model_forward step, each in its own sequence slot starting at
 * position 0, so each attends only to its own tokens (the per-slot
 * attention ranges of the paged KV cache); an input longer than what is
 * left of the step continues in the next step in the same slot. Pooling:
 *
 *   MEAN  every token is marked; rows are summed in float in position
 *         order and divided by the length
 *   CLS   the row of position 0
 *   LAST  the row of the last position (llama.cpp, Qwen3-Embedding)
 *
 * then, with normalize, divided by its L2 norm (an all-zero vector stays
 * zero). A sequence's vector does not depend on what shares its steps
 * (model.h: per-token numerics are batch-invariant).
 *
 * The context must have been created with embeddings = 1 and
 * n_out_max = n_batch_max (every token may be marked); slots are borrowed
 * for the call and cleared before it returns (kv_seq_clear), so the context
 * must not hold live sequences.
 *
 * Encoder models (bert) run through the same model_forward, whose encoder
 * backend (worker/engine/encoder.h) keeps nothing between steps: each step
 * holds whole inputs back to back (bidirectional attention within each
 * input, no KV cache, n_batch_max at least n_ctx), and their marked rows
 * are pooled and normalised here as the decoders' are.
 *
 * Threads: the thread owning the context (the pool's threads inside).
 */
#ifndef WORKER_EMBED_H
#define WORKER_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "worker/engine/model.h"

/* The pooling embed_run uses for m: the GGUF's pooling_type; NONE (a plain
 * decoder GGUF without the key) falls back to LAST, as llama.cpp's
 * server does for causal models, and to MEAN for a bert GGUF without the
 * key (sentence-transformers' default). Can't fail. */
enum model_pooling embed_default_pooling(const struct model *m);

/* Embed n_in token sequences (ids[i], lens[i] tokens) into out
 * (n_in, n_embd) float32 rows, pooled by pool (MEAN, CLS or LAST) and
 * L2-normalised when normalize. Returns 0, or with out unspecified and the
 * context's slots cleared: ERR_INVAL (the context was not made with
 * embeddings and n_out_max = n_batch_max, a pooling other than the three,
 * an empty input, a token id out of range), ERR_TOOBIG (an input longer
 * than the context's n_ctx or than all its KV blocks: the caller truncates
 * or refuses), model_forward's errors. The prefix cache must be off (it is
 * unless kv_seq_publish is called). */
int embed_run(struct model_ctx *c, enum model_pooling pool, int normalize,
              const int32_t *const *ids, const int *lens, int n_in, float *out);

/* L2-normalise v[0..n) in place (double accumulation), as embed_run does
 * (the OpenAI layer renormalises a truncated vector with it); a zero
 * vector is left as it is. Can't fail. */
void embed_normalize(float *v, int n);

#endif
