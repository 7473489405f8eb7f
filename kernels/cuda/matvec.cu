// matvec.cu - fused dequantize + matrix-vector product for batch-1 decode.
//
// out (m) (+)= W (m, k) @ x (k): W rows straight from the GGUF bytes
// (Q4_0, Q4_1 or Q8_0 blocks of 32 values, row stride row_bytes), x f32.
// One warp per output row; lane j takes blocks j, j+32, ... of the row and
// computes, per block, d * sum(q_i x_i) (+ m * sum(x_i) for Q4_1) in fp32,
// reading the block with byte loads (18/20/34-byte blocks have no useful
// alignment; consecutive lanes read consecutive blocks, so a warp's loads
// still cover contiguous bytes) and x with float4 loads (x 16-byte
// aligned); a 5-step shuffle sums the lanes. At batch 1 the weight bytes dominate, so
// reading 4.5-8.5 bits per weight instead of bf16's 16 is the whole point.
// accumulate = 1 adds into out (the residual add).
//
// CPU reference: kn_matmul_f32 (kernels/cpu/matmul.c) on the rows
// dequantized by kn_dequant_row. Tolerance:
// 1e-5 relative L2 (the factorisation d * sum(q x) reorders the fp32 sums).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

namespace {

enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8 };

__device__ __forceinline__ float h2f_u16(unsigned u)
{
    return __half2float(__ushort_as_half((unsigned short)u));
}

template <int TYPE>
__global__ void matvec_kernel(float *out, int accumulate, const float *x, const uint8_t *w,
                              size_t row_bytes, int m, int k)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= m)
        return;
    constexpr int BB = TYPE == T_Q4_0 ? 18 : TYPE == T_Q4_1 ? 20 : 34;
    const uint8_t *row = w + (size_t)warp * row_bytes;
    const int nb = k / 32;
    float sum = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        const uint8_t *blk = row + (size_t)b * BB;
        const float4 *xv = (const float4 *)(x + (size_t)b * 32);
        float xs[32];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 v = xv[i];
            xs[4 * i] = v.x, xs[4 * i + 1] = v.y, xs[4 * i + 2] = v.z, xs[4 * i + 3] = v.w;
        }
        if (TYPE == T_Q8_0) {
            float d = h2f_u16(blk[0] | (blk[1] << 8));
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++)
                s = fmaf((float)(int8_t)blk[2 + i], xs[i], s);
            sum = fmaf(d, s, sum);
        } else {
            const int qo = TYPE == T_Q4_0 ? 2 : 4;
            float d = h2f_u16(blk[0] | (blk[1] << 8));
            float s = 0.0f, sx = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                int q = blk[qo + i];
                int lo = q & 0x0F, hi = q >> 4;
                if (TYPE == T_Q4_0)
                    lo -= 8, hi -= 8;
                s = fmaf((float)lo, xs[i], s);
                s = fmaf((float)hi, xs[i + 16], s);
                sx += xs[i] + xs[i + 16];
            }
            sum = fmaf(d, s, sum);
            if (TYPE == T_Q4_1)
                sum = fmaf(h2f_u16(blk[2] | (blk[3] << 8)), sx, sum);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0)
        out[warp] = accumulate ? out[warp] + sum : sum;
}

} // namespace

extern "C" int kn_cuda_matvec_supported(uint32_t type)
{
    return type == T_Q4_0 || type == T_Q4_1 || type == T_Q8_0;
}

int kn_cuda_matvec_q(struct kn_cuda *c, float *out, int accumulate, const float *x, const void *w,
                     uint32_t type, size_t row_bytes, int m, int k)
{
    if (!kn_cuda_matvec_supported(type))
        return ERR_UNSUPPORTED;
    if (m <= 0 || k <= 0 || k % 32)
        return ERR_INVAL;
    const unsigned threads = 256, blocks = (unsigned)(((size_t)m * 32 + threads - 1) / threads);
    const uint8_t *wb = (const uint8_t *)w;
    switch (type) {
    case T_Q4_0:
        matvec_kernel<T_Q4_0><<<blocks, threads, 0, c->stream>>>(out, accumulate, x, wb, row_bytes, m, k);
        break;
    case T_Q4_1:
        matvec_kernel<T_Q4_1><<<blocks, threads, 0, c->stream>>>(out, accumulate, x, wb, row_bytes, m, k);
        break;
    default:
        matvec_kernel<T_Q8_0><<<blocks, threads, 0, c->stream>>>(out, accumulate, x, wb, row_bytes, m, k);
        break;
    }
    return kn_cuda_check(cudaGetLastError(), "matvec_kernel");
}
