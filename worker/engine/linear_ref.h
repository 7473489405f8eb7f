/*
 * linear_ref.h - reference product of activations with a (quantized) weight
 * matrix, with the contract of the kernels' kn_matmul_w.
 *
 * out (n, m) = x (n, k) @ W^T, where W is m rows of k values in ggml type
 * w_type, row stride quant_row_bytes(w_type, k). Each weight row is
 * dequantized once per call with the bit-exact quant.c decoder into scratch,
 * then dotted in float with every activation row (four accumulators,
 * fixed order). So out[r][c] depends only on x row r and W row c: the
 * result of a token never depends on what else is in the batch.
 *
 * This is the engine's stand-in until the optimised kn_matmul_w (threads,
 * quantized dot products) is merged; the model calls it from exactly one
 * place (model_linear in worker/engine/forward.c). Runs on the caller's thread;
 * pool is accepted for API compatibility and ignored.
 */
#ifndef WORKER_LINEAR_REF_H
#define WORKER_LINEAR_REF_H

#include <stddef.h>

struct kn_pool;

/* Bytes of scratch linref_matmul_w needs for rows of k values. */
size_t linref_scratch_bytes(int k);

/* See the file comment. Returns 0, ERR_UNSUPPORTED (w_type not decodable),
 * ERR_INVAL (k not a multiple of the block size, n/m/k negative) or
 * ERR_TOOBIG (scratch smaller than linref_scratch_bytes(k)); out untouched
 * on error except after ERR_UNSUPPORTED found mid-way (can't happen for a
 * type quant_type_supported accepts). */
int linref_matmul_w(struct kn_pool *pool, float *out, const float *x, int n, int k, const void *w,
                    int w_type, int m, void *scratch, size_t scratch_bytes);

#endif
