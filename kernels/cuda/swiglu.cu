// swiglu.cu - the elementwise ops of the forward pass on the device:
// SwiGLU, residual add, bias add, f32 -> bf16, per-row argmax, and the
// random fill of synthetic benchmark weights.
//
// SwiGLU: out (n_rows, n_cols) f32/bf16 = silu(gate) * up, gate/up rows of
// in_stride floats (the halves of the fused gate|up GEMM output). Float,
// silu(g) = g / (1 + expf(-g)) with the accurate expf: tolerance vs
// kn_swiglu_f32 2e-6 relative (expf differs by an ulp between libm and
// CUDA), bf16 output 4e-3 relative.
// add / add_bias: one float add per element, exact (tolerance 0).
// argmax: one block per row, first index of the maximum, NaN never wins:
// exact (same answer as kn_argmax_f32).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

static __global__ void swiglu_kernel(void *out, int out_bf16, const float *gate, const float *up,
                                     int n_rows, int n_cols, size_t in_stride)
{
    size_t total = (size_t)n_rows * n_cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)n_cols, j = i % (size_t)n_cols;
        float g = gate[r * in_stride + j], u = up[r * in_stride + j];
        kn_store(out, out_bf16, i, __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u));
    }
}

int kn_cuda_swiglu(struct kn_cuda *c, void *out, int out_bf16, const float *gate, const float *up,
                   int n_rows, int n_cols, size_t in_stride)
{
    if (n_rows <= 0 || n_cols <= 0)
        return 0;
    if (in_stride < (size_t)n_cols)
        return ERR_INVAL;
    size_t total = (size_t)n_rows * n_cols;
    swiglu_kernel<<<kn_cuda_blocks(total, 256), 256, 0, c->stream>>>(out, out_bf16, gate, up,
                                                                      n_rows, n_cols, in_stride);
    return kn_cuda_check(cudaGetLastError(), "swiglu_kernel");
}

static __global__ void add_kernel(float *x, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

int kn_cuda_add(struct kn_cuda *c, float *x, const float *y, size_t n)
{
    if (n == 0)
        return 0;
    add_kernel<<<kn_cuda_blocks(n, 256), 256, 0, c->stream>>>(x, y, n);
    return kn_cuda_check(cudaGetLastError(), "add_kernel");
}

static __global__ void add_bias_kernel(float *x, const float *b, int n_rows, int dim,
                                       size_t row_stride)
{
    size_t total = (size_t)n_rows * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)dim, j = i % (size_t)dim;
        x[r * row_stride + j] = __fadd_rn(x[r * row_stride + j], b[j]);
    }
}

int kn_cuda_add_bias(struct kn_cuda *c, float *x, const float *b, int n_rows, int dim,
                     size_t row_stride)
{
    if (n_rows <= 0 || dim <= 0)
        return 0;
    if (row_stride < (size_t)dim)
        return ERR_INVAL;
    size_t total = (size_t)n_rows * dim;
    add_bias_kernel<<<kn_cuda_blocks(total, 256), 256, 0, c->stream>>>(x, b, n_rows, dim,
                                                                        row_stride);
    return kn_cuda_check(cudaGetLastError(), "add_bias_kernel");
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *out, const float *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}

int kn_cuda_to_bf16(struct kn_cuda *c, void *out, const float *in, size_t n)
{
    if (n == 0)
        return 0;
    to_bf16_kernel<<<kn_cuda_blocks(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)out, in, n);
    return kn_cuda_check(cudaGetLastError(), "to_bf16_kernel");
}

// Better (value, index): larger value, or equal value and smaller index; NaN never.
static __device__ __forceinline__ void amax_merge(float *v, int *i, float v2, int i2)
{
    if (i2 < 0)
        return;
    if (*i < 0 || v2 > *v || (v2 == *v && i2 < *i)) {
        *v = v2;
        *i = i2;
    }
}

static __global__ void argmax_kernel(int32_t *ids, const float *x, int n_cols)
{
    const float *row = x + (size_t)blockIdx.x * n_cols;
    float bv = 0.0f;
    int bi = -1;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        float v = row[j];
        if (v == v)
            amax_merge(&bv, &bi, v, j);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
        int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        amax_merge(&bv, &bi, v2, i2);
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (int)(blockDim.x / 32) ? sv[lane] : 0.0f;
        bi = lane < (int)(blockDim.x / 32) ? si[lane] : -1;
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
            int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
            amax_merge(&bv, &bi, v2, i2);
        }
        if (lane == 0)
            ids[blockIdx.x] = bi;
    }
}

int kn_cuda_argmax(struct kn_cuda *c, int32_t *ids, const float *x, int n_rows, int n_cols)
{
    if (n_rows <= 0)
        return 0;
    if (n_cols <= 0)
        return ERR_INVAL;
    argmax_kernel<<<n_rows, 1024, 0, c->stream>>>(ids, x, n_cols);
    return kn_cuda_check(cudaGetLastError(), "argmax_kernel");
}

static __global__ void fill_random_kernel(__nv_bfloat16 *out, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f); // [0, 1)
        out[i] = __float2bfloat16_rn((u * 2.0f - 1.0f) * scale);
    }
}

int kn_cuda_fill_random_bf16(struct kn_cuda *c, void *out, size_t n, uint64_t seed, float scale)
{
    if (n == 0)
        return 0;
    fill_random_kernel<<<kn_cuda_blocks(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)out, n,
                                                                        seed, scale);
    return kn_cuda_check(cudaGetLastError(), "fill_random_kernel");
}
