/*
 * encoder.h - the BERT encoder forward pass (model.h MODEL_ARCH_BERT) for
 * sentence embeddings; embed_run (embed.h) calls it for encoder models.
 *
 * Inputs are packed padding-free: one step holds whole inputs back to back
 * (a flat batch of up to max(n_batch_max, longest input) tokens), each
 * input a token range [start, start + len) that attends to its own range
 * only, in both directions (no causal mask, no KV cache, no padding). Per
 * step, as HF transformers' BertModel (and llama.cpp's src/models/bert.cpp):
 *
 *   x = LN(tok_embd[id] + tok_types[0] + pos_embd[pos]) * w + b  token_embd_norm
 *   per layer:
 *     q, k, v = x @ W^T + b                                      all biased
 *     a = softmax(q.k^T / sqrt(head_dim)) v over the input's range
 *     x = LN(x + a @ Wo^T + bo)                                  attn_output_norm
 *     x = LN(x + gelu(x @ Wup^T + bup) @ Wdown^T + bdown)       layer_output_norm
 *   pooled: MEAN over the range, CLS (first token), LAST (last token);
 *   L2-normalised when asked
 *
 * GELU is the exact erf form (HF's "gelu", what BERT checkpoints use;
 * llama.cpp uses the tanh approximation: both agree to ~1e-3 per value).
 * LayerNorm accumulates its mean and variance in double. A vector does not
 * depend on what shares its step: every op is per token (matmuls have a
 * fixed reduction order) or per range.
 *
 * Allocation: the step buffers are allocated per call (one call embeds a
 * whole pack of inputs), never per token or per layer.
 *
 * Threads: the thread owning the context; the matmuls and the attention
 * run on the context's kn_pool.
 */
#ifndef WORKER_ENCODER_H
#define WORKER_ENCODER_H

#include <stdint.h>

#include "worker/engine/model.h"

/* Embed n_in token sequences with the encoder model of c (created with
 * embeddings = 1) into out (n_in, n_embd) rows, pooled by pool (MEAN, CLS,
 * LAST), L2-normalised when normalize. Token ids and lengths must have
 * been checked by the caller (embed_run): 1 <= lens[i] <= n_ctx, ids in
 * range. Returns 0, ERR_INVAL (not an encoder model, bad pooling),
 * ERR_NOMEM, ERR_TOOBIG (buffer sizes overflow), ERR_INTERNAL (a weight
 * type the matmul cannot take: validated at load, cannot happen). */
int encoder_run(struct model_ctx *c, enum model_pooling pool, int normalize,
                const int32_t *const *ids, const int *lens, int n_in, float *out);

#endif
