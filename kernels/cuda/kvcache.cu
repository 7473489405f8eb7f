// kvcache.cu - append K/V rows to the paged bf16 KV cache.
//
// Shapes: k, v (n_tok rows of in_stride floats, f32: the K and V parts of
// the fused QKV row after RoPE); k_cache, v_cache one layer of the cache,
// rows of kv_dim bf16, row index = block * block_tokens + offset; slot
// (n_tok) int64 cache row of each token (computed by the host from the
// block tables, worker/engine/forward_cuda.c). One thread per value. The stored
// value is the f32 rounded to bf16 (nearest even): exact w.r.t. that
// rounding (tolerance 0 against kn_fp32_to_bf16 of the CPU value: the CPU
// reference, kernels/cpu/quant.c).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

static __global__ void kv_append_kernel(__nv_bfloat16 *kc, __nv_bfloat16 *vc, const float *k,
                                        const float *v, size_t in_stride, const int64_t *slot,
                                        int n_tok, int kv_dim)
{
    size_t total = (size_t)n_tok * kv_dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (size_t)kv_dim, d = i % (size_t)kv_dim;
        size_t dst = (size_t)slot[t] * kv_dim + d;
        kc[dst] = __float2bfloat16_rn(k[t * in_stride + d]);
        vc[dst] = __float2bfloat16_rn(v[t * in_stride + d]);
    }
}

int kn_cuda_kv_append(struct kn_cuda *c, void *k_cache, void *v_cache, const float *k,
                      const float *v, size_t in_stride, const int64_t *slot, int n_tok,
                      int kv_dim)
{
    if (n_tok <= 0)
        return 0;
    if (kv_dim <= 0 || in_stride < (size_t)kv_dim)
        return ERR_INVAL;
    size_t total = (size_t)n_tok * kv_dim;
    kv_append_kernel<<<kn_cuda_blocks(total, 256), 256, 0, c->stream>>>(
        (__nv_bfloat16 *)k_cache, (__nv_bfloat16 *)v_cache, k, v, in_stride, slot, n_tok, kv_dim);
    return kn_cuda_check(cudaGetLastError(), "kv_append_kernel");
}
