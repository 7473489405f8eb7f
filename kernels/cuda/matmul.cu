// matmul.cu - strict fp32 matrix product through cuBLAS SGEMM
// (kn_cuda_matmul_f32, and kn_cuda_matmul_f32_host for the self-check).
//
// out (n, m) = x (n, k) @ w (m, k)^T, all row-major f32; the same
// row-major/column-major mapping as gemm.cu. cuBLAS runs in pedantic math
// mode around the call (no TF32 tensor cores) and is set back to the
// default mode after it.
// CPU reference: kn_matmul_f32 (kernels/cpu/matmul.c). Tolerance 1e-4
// relative L2 (fp32 accumulation in a different order).
#include "device.cuh"

extern "C" {
#include "common/err.h"
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
