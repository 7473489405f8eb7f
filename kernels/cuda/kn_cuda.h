/*
 * kn_cuda.h - the CUDA backend's C interface (built only with make CUDA=1).
 *
 * Plain C types only, so worker/ and tests include this without CUDA headers.
 * A struct kn_cuda is one device context: the device, a stream, a cuBLAS
 * handle, and a scratch arena allocated once at init (no cudaMalloc per op).
 *
 * The *_host entry points copy inputs to the device, run the kernel, and copy
 * the result back; they exist for parity checks against the CPU reference
 * (kernels/kn.h) and for the device self-check. The engine's device-resident
 * path arrives with the CUDA backend issue.
 *
 * Errors: ERR_NODEVICE (no usable GPU / driver), ERR_TOOBIG (shapes larger
 * than the scratch arena), ERR_INTERNAL (a CUDA or cuBLAS error; the original
 * code is logged).
 */
#ifndef KERNELS_CUDA_KN_CUDA_H
#define KERNELS_CUDA_KN_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kn_cuda;

/* Open device ordinal with a scratch arena of scratch_bytes. */
int kn_cuda_new(int ordinal, size_t scratch_bytes, struct kn_cuda **out);
void kn_cuda_free(struct kn_cuda *c); /* NULL ok */

/* "NVIDIA H200 (sm_90, 139.8 GiB)" into out. Returns out. */
const char *kn_cuda_describe(const struct kn_cuda *c, char *out, size_t out_len);

/* RMSNorm, same contract as kn_rmsnorm_f32. Tolerance vs the CPU reference:
 * 1e-5 relative (different summation order only). */
int kn_cuda_rmsnorm_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w,
                             int n_rows, int dim, float eps);

/* out (n, m) = x (n, k) @ w (m, k)^T through cuBLAS SGEMM (TF32 tensor cores
 * disabled: strict fp32). Tolerance vs the CPU reference: 1e-4 relative L2. */
int kn_cuda_matmul_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w, int n,
                            int k, int m);

#ifdef __cplusplus
}
#endif

#endif
