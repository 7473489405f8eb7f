// swiglu.cu - SwiGLU activation on the device (kn_cuda_swiglu).
//
// Shapes: gate, up (n_rows rows of in_stride floats, f32: the halves of
// the fused gate|up GEMM output); out (n_rows, n_cols) dense, f32 or bf16.
// One thread per value (grid-stride). Float, silu(g) = g / (1 + expf(-g))
// with the accurate expf and explicit roundings (no contraction).
// CPU reference: kn_swiglu_f32 (kernels/cpu/swiglu.c). Tolerance 2e-6
// relative (expf differs by an ulp between libm and CUDA); bf16 output
// 4e-3 relative (bf16's half ulp).
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
