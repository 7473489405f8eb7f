// gemm.cu - weight matrix products through cuBLAS.
//
// out (n, m) = x (n, k) @ w (m, k)^T, all row-major. cuBLAS is column-major,
// so we compute out^T (m, n) = w (m, k) @ x^T (k, n): in column-major terms
// that is C = op(A) * B with A = w seen as (k, m) column-major transposed
// (CUBLAS_OP_T, lda = k) and B = x seen as (k, n) column-major (ldb = k),
// C (m, n) column-major (ldc = ldo) == out row-major with row stride ldo.
//
// kn_cuda_gemm_bf16: bf16 inputs, fp32 output and fp32 accumulation
// (CUBLAS_COMPUTE_32F, tensor cores in the default math mode). beta = 1
// accumulates into out (the residual add of the forward pass). Tolerance vs
// kn_matmul_f32 on the same bf16-rounded inputs: 1e-3 relative L2 (fp32
// accumulation in a different order); against the unrounded f32 inputs the
// bf16 rounding of x and w dominates (~4e-3 relative L2).
//
// kn_cuda_matmul_f32: strict fp32 SGEMM (pedantic math mode around the
// call: no TF32); tolerance vs kn_matmul_f32 1e-4 relative L2.
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

int kn_cuda_matmul_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n, int k,
                       int m)
{
    const float one = 1.0f, zero = 0.0f;
    int rc = kn_cublas_check(cublasSetMathMode(c->blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    if (!rc)
        rc = kn_cublas_check(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, k, x,
                                         k, &zero, out, m),
                             "cublasSgemm");
    int rc2 = kn_cublas_check(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return rc ? rc : rc2;
}

extern "C" int kn_cuda_matmul_f32_host(struct kn_cuda *c, float *out, const float *x,
                                       const float *w, int n, int k, int m)
{
    size_t off = 0, xb = (size_t)n * k * sizeof(float), wb = (size_t)m * k * sizeof(float),
           ob = (size_t)n * m * sizeof(float);
    float *dx, *dw, *dout;
    int rc = kn_cuda_scratch_carve(c, &off, xb, &dx);
    if (!rc)
        rc = kn_cuda_scratch_carve(c, &off, wb, &dw);
    if (!rc)
        rc = kn_cuda_scratch_carve(c, &off, ob, &dout);
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, c->stream), "copy x");
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(dw, w, wb, cudaMemcpyHostToDevice, c->stream), "copy w");
    if (!rc)
        rc = kn_cuda_matmul_f32(c, dout, dx, dw, n, k, m);
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(out, dout, ob, cudaMemcpyDeviceToHost, c->stream),
                           "copy out");
    if (!rc)
        rc = kn_cuda_check(cudaStreamSynchronize(c->stream), "sync");
    return rc;
}
