/*
 * kn.h - the compute op interface (CPU reference backend).
 *
 * Every op has a plain C implementation here, in kernels/cpu/, which is both
 * the CPU backend and the reference each CUDA kernel (kernels/cuda/) is
 * tested against. Tensors are dense, row-major, float32 unless the name says
 * otherwise; shapes are given in the comments as (rows, cols).
 *
 * The op set grows with the engine (the CPU engine issue adds embedding,
 * RoPE, attention, quantized matmuls...). Ops can't fail: shapes are the
 * caller's contract.
 */
#ifndef KERNELS_KN_H
#define KERNELS_KN_H

#include <stddef.h>

enum kn_device { KN_DEVICE_CPU = 0, KN_DEVICE_CUDA };

/* "cpu" / "cuda" -> enum. 0 or ERR_INVAL. */
int kn_device_parse(const char *s, enum kn_device *out);
const char *kn_device_name(enum kn_device d);

/* 1 when this build includes the CUDA backend (make CUDA=1). */
int kn_cuda_built(void);

/* RMSNorm per row: out[r,i] = x[r,i] / sqrt(mean_i(x[r,:]^2) + eps) * w[i].
 * out: (n_rows, dim); x: (n_rows, dim); w: (dim). out may alias x.
 * Accumulates the sum of squares in float32 (as the CUDA kernel does). */
void kn_rmsnorm_f32(float *out, const float *x, const float *w, int n_rows, int dim, float eps);

/* out = x @ w^T: out (n, m); x (n, k); w (m, k) - the layout of GGUF/PyTorch
 * linear weights (one output feature per row). float32 accumulation. */
void kn_matmul_f32(float *out, const float *x, const float *w, int n, int k, int m);

#endif
