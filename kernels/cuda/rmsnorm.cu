// rmsnorm.cu - RMSNorm on the GPU.
//
// Shapes: x (rows, dim) row-major fp32; w (dim) fp32; out (n_rows, dim)
// f32 or bf16 (kn_cuda_rmsnorm: out row r normalises x row rows[r], the
// gather of the marked rows before the LM head; rows NULL = r). bf16
// output is the f32 result rounded to nearest even (tolerance then 4e-3
// relative per element, bf16's half ulp).
// One block of 256 threads per row: each thread accumulates a strided partial
// sum of squares in fp32, warp shuffles then shared memory reduce it, and the
// scaled row is written. Accumulation fp32, like kn_rmsnorm_f32 (CPU
// reference in kernels/cpu/rmsnorm.c); only the summation order differs, so
// the tolerance is 1e-5 relative per element.
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

static __global__ void rmsnorm_kernel(void *out, int out_bf16, const float *x, const float *w,
                                      const int32_t *rows, int dim, float eps)
{
    size_t src = rows ? (size_t)rows[blockIdx.x] : (size_t)blockIdx.x;
    const float *xr = x + src * dim;
    size_t obase = (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ float partial[32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0)
            partial[0] = ss;
    }
    __syncthreads();
    float scale = rsqrtf(partial[0] / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        kn_store(out, out_bf16, obase + i, xr[i] * scale * w[i]);
}

int kn_cuda_rmsnorm(struct kn_cuda *c, void *out, int out_bf16, const float *x, const float *w,
                    const int32_t *rows, int n_rows, int dim, float eps)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    rmsnorm_kernel<<<n_rows, 256, 0, c->stream>>>(out, out_bf16, x, w, rows, dim, eps);
    return kn_cuda_check(cudaGetLastError(), "rmsnorm_kernel");
}

// Launcher: device pointers, on c's stream.
int kn_cuda_rmsnorm_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps)
{
    return kn_cuda_rmsnorm(c, out, 0, x, w, nullptr, n_rows, dim, eps);
}

extern "C" int kn_cuda_rmsnorm_f32_host(struct kn_cuda *c, float *out, const float *x,
                                        const float *w, int n_rows, int dim, float eps)
{
    size_t off = 0, xb = (size_t)n_rows * dim * sizeof(float), wb = (size_t)dim * sizeof(float);
    float *dx, *dw, *dout;
    int rc = kn_cuda_scratch_carve(c, &off, xb, &dx);
    if (!rc)
        rc = kn_cuda_scratch_carve(c, &off, wb, &dw);
    if (!rc)
        rc = kn_cuda_scratch_carve(c, &off, xb, &dout);
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, c->stream), "copy x");
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(dw, w, wb, cudaMemcpyHostToDevice, c->stream), "copy w");
    if (!rc)
        rc = kn_cuda_rmsnorm_f32(c, dout, dx, dw, n_rows, dim, eps);
    if (!rc)
        rc = kn_cuda_check(cudaMemcpyAsync(out, dout, xb, cudaMemcpyDeviceToHost, c->stream),
                           "copy out");
    if (!rc)
        rc = kn_cuda_check(cudaStreamSynchronize(c->stream), "sync");
    return rc;
}
