// add.cu - residual add and bias add on the device (kn_cuda_add,
// kn_cuda_add_bias).
//
// Shapes: add: x, y (n) f32, x += y. add_bias: x (n_rows rows of
// row_stride floats, the first dim used) += b (dim) f32. One thread per
// value (grid-stride), one float add each (__fadd_rn).
// CPU reference: kn_add_f32, kn_add_bias_f32 (kernels/cpu/add.c).
// Tolerance 0 (the same single rounding).
#include "device.cuh"

extern "C" {
#include "common/err.h"
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
