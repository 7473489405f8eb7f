// argmax.cu - per-row argmax on the device (kn_cuda_argmax), the greedy
// sampler's step on the GPU.
//
// Shapes: x (n_rows, n_cols) f32, ids (n_rows) int32. One block of 1024
// threads per row: strided per-thread best, then warp shuffles and shared
// memory merge (value, index) pairs - larger value wins, equal values take
// the smaller index, NaN never wins (-1 if the row is all NaN).
// CPU reference: kn_argmax_f32 (kernels/cpu/argmax.c) per row. Tolerance:
// exact (the same index).
#include "device.cuh"

extern "C" {
#include "common/err.h"
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
