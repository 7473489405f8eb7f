// dequant.cu - GGUF block formats to f32/bf16 on the device: the load-time
// weight conversion (quantized GGUF -> bf16 for cuBLAS) and the embedding
// lookup (quantized rows gathered by token id -> f32 residual stream).
//
// Shapes: src rows of row_bytes bytes (the raw GGUF tensor copied to the
// device); out (n_rows, cols) dense f32 or bf16; ids (n_rows) int32 row
// indices or NULL. One thread per output value (grid-stride): it finds its
// block, reads the few bytes it needs with byte loads (no alignment
// assumptions, like quant.c's memcpy) and decodes. Layouts: see
// kernels/cpu/blocks.h.
//
// Exactness: every float operation is the one quant.c performs, in the
// same order, with explicit round-to-nearest intrinsics (__fmul_rn,
// __fadd_rn) so nvcc cannot contract them into FMAs; binary16 and bfloat16
// scales convert exactly. f32 output is therefore bit-identical to
// kn_dequant_row (the CPU reference, kernels/cpu/quant.c: tolerance 0), bf16 output is that value rounded to
// nearest even (identical to kn_fp32_to_bf16 of the CPU value for finite
// inputs).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

namespace {

enum {
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
    T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_BF16 = 30
};

__device__ __forceinline__ float h2f(const uint8_t *p)
{
    unsigned short u = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(u));
}

__device__ __forceinline__ float fmadd_nc(float a, float b, float c)
{
    return __fadd_rn(__fmul_rn(a, b), c); // a*b + c, two roundings, as the C reference
}

// 6-bit scale and min of sub-block s of a Q4_K/Q5_K block (see quant.c k4_scale_min).
__device__ __forceinline__ void k4_scale_min(const uint8_t *sc, int s, int *scale, int *mn)
{
    if (s < 4) {
        *scale = sc[s] & 63;
        *mn = sc[s + 4] & 63;
    } else {
        int k = s - 4;
        *scale = (sc[k + 8] & 0x0F) | ((sc[k] >> 6) << 4);
        *mn = (sc[k + 8] >> 4) | ((sc[k + 4] >> 6) << 4);
    }
}

__device__ __forceinline__ int q5_bit(const uint8_t *qh, int j)
{
    uint32_t h = (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) |
                 ((uint32_t)qh[3] << 24);
    return (int)((h >> j) & 1u);
}

// Value j of the block (or element) at b.
__device__ float decode(uint32_t type, const uint8_t *b, int j)
{
    switch (type) {
    case T_F32: {
        uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                     ((uint32_t)b[3] << 24);
        return __uint_as_float(u);
    }
    case T_F16:
        return h2f(b);
    case T_BF16:
        return __uint_as_float(((uint32_t)b[0] | ((uint32_t)b[1] << 8)) << 16);
    case T_Q4_0: {
        float d = h2f(b);
        int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
        return __fmul_rn(d, (float)(q - 8));
    }
    case T_Q4_1: {
        float d = h2f(b), m = h2f(b + 2);
        int q = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
        return fmadd_nc(d, (float)q, m);
    }
    case T_Q5_0: {
        float d = h2f(b);
        int lo = j < 16 ? (b[6 + j] & 0x0F) : (b[6 + j - 16] >> 4);
        int q = lo | (q5_bit(b + 2, j) << 4);
        return __fmul_rn(d, (float)(q - 16));
    }
    case T_Q5_1: {
        float d = h2f(b), m = h2f(b + 2);
        int lo = j < 16 ? (b[8 + j] & 0x0F) : (b[8 + j - 16] >> 4);
        int q = lo | (q5_bit(b + 4, j) << 4);
        return fmadd_nc(d, (float)q, m);
    }
    case T_Q8_0:
        return __fmul_rn(h2f(b), (float)(int8_t)b[2 + j]);
    case T_Q4_K:
    case T_Q5_K: {
        float d = h2f(b), dmin = h2f(b + 2);
        int s = j / 32, l = j % 32, sc, mn;
        k4_scale_min(b + 4, s, &sc, &mn);
        float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
        const uint8_t *qs = b + (type == T_Q4_K ? 16 : 48) + 32 * (s / 2);
        int v = (qs[l] >> ((s & 1) ? 4 : 0)) & 0x0F;
        if (type == T_Q5_K)
            v |= ((b[16 + l] >> s) & 1) << 4;
        return __fsub_rn(__fmul_rn(d1, (float)v), m1);
    }
    case T_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = h2f(b + 208);
        int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
        uint8_t lb = ql[64 * h + l + 32 * (g & 1)];
        int low4 = g < 2 ? (lb & 0x0F) : (lb >> 4);
        int high2 = (qh[32 * h + l] >> (2 * g)) & 3;
        int q = (low4 | (high2 << 4)) - 32;
        return __fmul_rn(__fmul_rn(d, (float)scales[j / 16]), (float)q);
    }
    }
    return 0.0f;
}

__global__ void dequant_kernel(void *out, int out_bf16, const uint8_t *src, uint32_t type,
                               size_t row_bytes, const int32_t *ids, int n_rows, int cols,
                               int block_elems, int block_bytes)
{
    size_t total = (size_t)n_rows * (size_t)cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / (size_t)cols), e = (int)(i % (size_t)cols);
        size_t row = ids ? (size_t)ids[r] : (size_t)r;
        const uint8_t *blk = src + row * row_bytes + (size_t)(e / block_elems) * block_bytes;
        kn_store(out, out_bf16, i, decode(type, blk, e % block_elems));
    }
}

int type_shape(uint32_t type, int *be, int *bb)
{
    switch (type) {
    case T_F32: *be = 1; *bb = 4; return 0;
    case T_F16: case T_BF16: *be = 1; *bb = 2; return 0;
    case T_Q4_0: *be = 32; *bb = 18; return 0;
    case T_Q4_1: *be = 32; *bb = 20; return 0;
    case T_Q5_0: *be = 32; *bb = 22; return 0;
    case T_Q5_1: *be = 32; *bb = 24; return 0;
    case T_Q8_0: *be = 32; *bb = 34; return 0;
    case T_Q4_K: *be = 256; *bb = 144; return 0;
    case T_Q5_K: *be = 256; *bb = 176; return 0;
    case T_Q6_K: *be = 256; *bb = 210; return 0;
    }
    return ERR_UNSUPPORTED;
}

} // namespace

extern "C" int kn_cuda_dequant_supported(uint32_t type)
{
    int be, bb;
    return type_shape(type, &be, &bb) == 0;
}

int kn_cuda_dequant(struct kn_cuda *c, void *out, int out_bf16, const void *src, uint32_t type,
                    size_t row_bytes, const int32_t *ids, int n_rows, int cols)
{
    int be, bb;
    if (type_shape(type, &be, &bb))
        return ERR_UNSUPPORTED;
    if (n_rows < 0 || cols <= 0 || cols % be || row_bytes < (size_t)(cols / be) * (size_t)bb)
        return ERR_INVAL;
    if (n_rows == 0)
        return 0;
    size_t total = (size_t)n_rows * (size_t)cols;
    dequant_kernel<<<kn_cuda_blocks(total, 256), 256, 0, c->stream>>>(
        out, out_bf16, (const uint8_t *)src, type, row_bytes, ids, n_rows, cols, be, bb);
    return kn_cuda_check(cudaGetLastError(), "dequant_kernel");
}
