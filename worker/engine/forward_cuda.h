/*
 * forward_cuda.h - the forward pass of a llama/qwen2 model on a CUDA GPU.
 *
 * Used by worker/engine/forward.c when model_ctx_params.device is KN_DEVICE_CUDA:
 * the scheduler, the KV block tables and prefix cache (worker/engine/kv.h) stay on
 * the CPU; the weights, the K/V values and every activation live on the
 * GPU. At creation the GGUF weights are copied to the device and
 * dequantized once to bf16 (Q/K/V fused into one matrix, gate/up into
 * another); the raw token embedding stays quantized on the device for the
 * embedding lookup, and the LM head is its bf16 copy when tied. When every
 * projection is Q4_0/Q4_1/Q8_0 the raw matrices are kept on the device as
 * well, and steps of a single token (batch-1 decode) use the fused dequant
 * matvec on f32 activations instead of bf16 cuBLAS (so a lone decode step
 * and a batched one differ at rounding level). Every
 * buffer - weights, the bf16 paged KV pool sized like the CPU cache,
 * activations for n_batch_max tokens, the attention workspace - is
 * allocated then; a step allocates nothing. A step uploads its token ids,
 * positions, cache slots, attention tiles and the block tables in one copy,
 * runs the layers (the CUDA section of kernels/kn.h) and downloads the logits of the
 * marked tokens.
 *
 * Numerics: bf16 weights and K/V, fp32 residual stream, accumulation and
 * softmax; logits agree with the CPU engine within bf16 tolerance
 * (tests/cuda/test_cuda_model.c).
 *
 * Without make CUDA=1 the functions exist and fwdcuda_new returns
 * ERR_UNSUPPORTED. Threads: the thread that owns the model_ctx.
 */
#ifndef WORKER_FORWARD_CUDA_H
#define WORKER_FORWARD_CUDA_H

#include <stdint.h>

#include "worker/engine/model.h"

struct fwdcuda;

/* Upload m's weights and allocate the device buffers for the context
 * parameters p (defaults already applied) and the cache kv (its geometry:
 * n_blocks, block_tokens, n_seq, max_blocks_per_seq). Returns 0 and *out,
 * ERR_UNSUPPORTED (no CUDA in this build, a weight type or head size the
 * kernels do not handle), ERR_NODEVICE, ERR_NOMEM (device memory), ERR_TOOBIG,
 * ERR_INTERNAL. The reason is logged. */
int fwdcuda_new(const struct model *m, const struct model_ctx_params *p,
                const struct kv_cache *kv, struct fwdcuda **out);
void fwdcuda_free(struct fwdcuda *f); /* NULL ok */

/* One step on a validated batch whose slots already hold blocks for the new
 * positions (kv_seq_reserve). out_rows (n_out) are the batch indices of the
 * marked tokens; their logits go to logits (n_out, n_vocab) on the host.
 * Returns 0 or an error of the device (the KV content of the new positions
 * is then undefined; the caller's bookkeeping is unchanged). */
int fwdcuda_forward(struct fwdcuda *f, const struct kv_cache *kv, const struct model_batch *b,
                    const int32_t *out_rows, int n_out, float *logits);

/* A synthetic model of the shapes of hp (benchmarks only): seeded random
 * bf16 weights generated on the device, norms 1, no biases, a BF16
 * embedding table; kv only gives the cache geometry and the block tables
 * at each step (its k/v arrays are not used). Errors as fwdcuda_new. */
int fwdcuda_new_synthetic(const struct model_hparams *hp, const struct model_ctx_params *p,
                          const struct kv_cache *kv, uint64_t seed, struct fwdcuda **out);

/* fwdcuda_forward with greedy sampling on the device: ids (n_out) get the
 * argmax of each marked token's logits (first on ties); only the ids are
 * copied back. */
int fwdcuda_forward_greedy(struct fwdcuda *f, const struct kv_cache *kv,
                           const struct model_batch *b, const int32_t *out_rows, int n_out,
                           int32_t *ids);

/* kv_cache copy hook: copy the first n_pos positions of block src to block
 * dst in every layer (device to device). An error is kept and returned by
 * the next fwdcuda_forward. */
void fwdcuda_copy_block(void *f, int32_t dst, int32_t src, int n_pos);

#endif
