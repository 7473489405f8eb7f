// fill_random.cu - random bf16 fill on the device (kn_cuda_fill_random_bf16):
// synthetic weights for the GPU benchmark (tests/cuda/bench/gpu_bench.c),
// so that a model-sized workload runs without a model file.
//
// Shapes: out (n) bf16. One thread per value (grid-stride): splitmix64 of
// (seed, index), the top 24 bits as a float in [0, 1), scaled to
// [-scale, scale) and rounded to bf16. Deterministic for a seed.
// CPU reference: none (not an op of the forward pass; no parity test).
#include "device.cuh"

extern "C" {
#include "common/err.h"
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
