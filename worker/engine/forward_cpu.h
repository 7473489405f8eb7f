/*
 * forward_cpu.h - the forward pass of a model (every architecture of
 * model.h) on the CPU.
 *
 * Used by worker/engine/forward.c (the dispatch) when
 * model_ctx_params.device is KN_DEVICE_CPU; its counterpart is
 * forward_cuda.h. forward.c owns the context's KV cache, validates each
 * batch (check_batch), reserves the cache blocks of the new positions and
 * commits the slots' lengths; this side only computes: embedding, layers,
 * K/V values written into the host cache, logits of the marked tokens. The
 * design, the numerics and the thread use are in forward_cpu.c's header.
 *
 * Threads: the thread that owns the model_ctx (the matmuls, the attention
 * and SwiGLU run on its kn_pool).
 */
#ifndef WORKER_FORWARD_CPU_H
#define WORKER_FORWARD_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "worker/engine/model.h"

struct fwdcpu;

/* Add to *total the bytes fwdcpu_new allocates for m and the context
 * parameters p (defaults applied). Returns 0 or ERR_TOOBIG (overflow). */
int fwdcpu_bytes(const struct model *m, const struct model_ctx_params *p, size_t *total);

/* Allocate every buffer of the CPU forward pass for m and p (defaults
 * applied) over the host cache kv (borrowed; it must outlive the result).
 * Returns 0 and *out (fwdcpu_free), ERR_TOOBIG (sizes overflow), ERR_NOMEM. */
int fwdcpu_new(const struct model *m, const struct model_ctx_params *p, struct kv_cache *kv,
               struct fwdcpu **out);
void fwdcpu_free(struct fwdcpu *f); /* NULL ok */

/* One step on a validated batch whose slots already hold blocks for the new
 * positions (kv_seq_reserve): writes the new positions' K/V into kv, and
 * the logits of the marked tokens (batch indices out_rows, n_out) into
 * logits (n_out, n_vocab). Allocates nothing. Returns 0, or ERR_INTERNAL
 * (a weight type the matmul refuses: validated at load, cannot happen). */
int fwdcpu_forward(struct fwdcpu *f, struct kv_cache *kv, const struct model_batch *b,
                   const int32_t *out_rows, int n_out, float *logits);

#endif
