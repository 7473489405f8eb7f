// gemm.cu - fp32 matrix product through cuBLAS.
//
// out (n, m) = x (n, k) @ w (m, k)^T, all row-major fp32. cuBLAS is
// column-major, so we compute out^T (m, n) = w (m, k) @ x^T (k, n): in
// column-major terms that is C = op(A) * B with A = w seen as (k, m)
// column-major transposed (CUBLAS_OP_T, lda = k) and B = x seen as (k, n)
// column-major (ldb = k), C (m, n) column-major (ldc = m) == out row-major.
// Pedantic math mode (set in device.cu) keeps strict fp32; tolerance against
// kn_matmul_f32 is 1e-4 relative L2 (summation order differs).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

int kn_cuda_matmul_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n, int k,
                       int m)
{
    const float one = 1.0f, zero = 0.0f;
    return kn_cublas_check(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, k, x, k,
                                       &zero, out, m),
                           "cublasSgemm");
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
