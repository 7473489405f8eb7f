// gemm.cu - bf16 weight matrix products through cuBLAS (kn_cuda_gemm_bf16),
// the forward pass's linear layers.
//
// out (n, m) = x (n, k) @ w (m, k)^T, all row-major. cuBLAS is column-major,
// so we compute out^T (m, n) = w (m, k) @ x^T (k, n): in column-major terms
// that is C = op(A) * B with A = w seen as (k, m) column-major transposed
// (CUBLAS_OP_T, lda = k) and B = x seen as (k, n) column-major (ldb = k),
// C (m, n) column-major (ldc = ldo) == out row-major with row stride ldo.
//
// bf16 inputs, fp32 output and fp32 accumulation (CUBLAS_COMPUTE_32F,
// tensor cores in the default math mode). beta = 1 accumulates into out
// (the residual add of the forward pass).
// CPU reference: kn_matmul_f32 (kernels/cpu/matmul.c) on the same
// bf16-rounded inputs. Tolerance 1e-3 relative L2 (fp32 accumulation in a
// different order); against the unrounded f32 inputs the bf16 rounding of x
// and w dominates (~4e-3 relative L2).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

int kn_cuda_gemm_bf16(struct kn_cuda *c, float *out, size_t ldo, const void *x, const void *w,
                      int n, int k, int m, float beta)
{
    if (n <= 0 || m <= 0 || k <= 0 || ldo < (size_t)m || ldo > 0x7fffffff)
        return ERR_INVAL;
    const float one = 1.0f;
    return kn_cublas_check(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w,
                                        CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, out, CUDA_R_32F,
                                        (int)ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx(bf16)");
}
