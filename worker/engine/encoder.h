/*
 * encoder.h - the BERT encoder forward pass (model.h MODEL_ARCH_BERT): the
 * backend model_forward (worker/engine/forward.c) uses for an encoder
 * model, beside forward_cpu.h and forward_cuda.h for the decoders. It
 * hands back the final hidden state of each marked token; pooling and
 * normalisation are embed_run's (worker/engine/embed.h).
 *
 * A step holds whole inputs back to back, padding-free: each input is a
 * run of tokens at positions 0, 1, ..., len-1 (forward.c check_batch), and
 * every token attends to its own run only, in both directions (no causal
 * mask, no KV cache, nothing kept between steps). Per step, as HF
 * transformers' BertModel (and llama.cpp's src/models/bert.cpp):
 *
 *   x = LN(tok_embd[id] + tok_types[0] + pos_embd[pos]) * w + b  token_embd_norm
 *   per layer:
 *     q, k, v = x @ W^T + b                                      all biased
 *     a = softmax(q.k^T / sqrt(head_dim)) v over the input's run
 *     x = LN(x + a @ Wo^T + bo)                                  attn_output_norm
 *     x = LN(x + gelu(x @ Wup^T + bup) @ Wdown^T + bdown)       layer_output_norm
 *   hidden rows of the marked tokens = x
 *
 * GELU is the exact erf form (HF's "gelu", what BERT checkpoints use;
 * llama.cpp uses the tanh approximation: both agree to ~1e-3 per value).
 * LayerNorm accumulates its mean and variance in double. A token's row
 * does not depend on what shares its step: every op is per token (matmuls
 * have a fixed reduction order) or per run.
 *
 * Allocation: the step buffers, for n_batch_max tokens (at least n_ctx
 * for an encoder, model.h), at encoder_new; none per step.
 *
 * Threads: the thread owning the context; the matmuls and the attention
 * run on the context's kn_pool.
 */
#ifndef WORKER_ENCODER_H
#define WORKER_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/engine/model.h"

struct encoder;

/* Add to *total the bytes encoder_new allocates for m and the context
 * parameters p (defaults applied). Returns 0 or ERR_TOOBIG (overflow). */
int encoder_bytes(const struct model *m, const struct model_ctx_params *p, size_t *total);

/* The step buffers of the encoder model m for p (defaults applied).
 * Returns 0 and *out (encoder_free), ERR_INVAL (m is not an encoder),
 * ERR_TOOBIG (sizes overflow), ERR_NOMEM. */
int encoder_new(const struct model *m, const struct model_ctx_params *p, struct encoder **out);
void encoder_free(struct encoder *e); /* NULL ok */

/* One step over b, validated by forward.c (whole inputs, ids, positions,
 * at most n_batch_max tokens): writes the final hidden states of the
 * marked tokens (batch indices out_rows, n_out) into hidden (n_out,
 * n_embd). Allocates nothing. Returns 0, or ERR_INTERNAL (a weight type
 * the matmul refuses: validated at load, cannot happen). */
int encoder_forward(struct encoder *e, const struct model_batch *b, const int32_t *out_rows,
                    int n_out, float *hidden);

#endif
