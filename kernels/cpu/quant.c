/*
 * quant.c - ggml block formats: the type table, float32 dequantization
 * (kn_dequant_row) and the fp16/bf16 conversions; contracts in
 * kernels/kn.h, block layouts in blocks.h.
 *
 * The plain C reference for the formats: it favours readability over speed
 * and computes exactly what gguf-py's numpy dequantizer computes (same
 * float32 operations in the same order: tests/unit/kernels/test_quant.c
 * checks bit-for-bit equality on committed fixtures). It is the reference
 * of cuda/dequant.cu (tolerance 0: bit-identical), and its
 * kn_fp32_to_bf16 that of cuda/to_bf16.cu and cuda/kvcache.cu.
 *
 * Each dequantizer copies one block into a local struct (no alignment
 * needed), decodes its scales into float32, and writes the block's values.
 * The float32 arithmetic follows gguf-py's numpy code operation by
 * operation (e.g. Q4_1 is (d*q)+m, Q4_K is (d*sc)*q - (dmin*m)), and
 * contraction into fused multiply-adds is switched off below, so the results
 * are bit-identical to that independent implementation.
 *
 * Pure functions, no state: safe from any thread.
 */
#include "kernels/kn.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/err.h"
#include "kernels/cpu/blocks.h"

/* No fused multiply-adds: they would round differently from numpy. GCC
 * already contracts nothing under -std=c11 (ISO mode: -ffp-contract=off);
 * clang needs the pragma. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- scalar conversions ------------------------------------------------------ */

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float kn_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1F) {            /* inf / NaN: keep the payload */
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp != 0) {        /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {       /* +-0 */
        bits = sign;
    } else {                      /* subnormal: mant * 2^-24, normalise */
        uint32_t e = 113;         /* biased exponent of 2^-14 */
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
    }
    return f32_from_bits(bits);
}

uint16_t kn_fp32_to_fp16(float f)
{
    uint32_t bits = f32_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t exp = (bits >> 23) & 0xFFu;
    uint32_t mant = bits & 0x7FFFFFu;
    if (exp == 0xFF) /* inf, or NaN made quiet */
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15; /* binary16 biased exponent */
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        /* subnormal result: value / 2^-24 = (mant|implicit) >> (14 - e), rounded */
        if (e < -10)
            return sign; /* below half the smallest subnormal */
        uint32_t m = mant | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++; /* may carry into the smallest normal: the bits are still right */
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1)))
        q++; /* a carry into the exponent is correct, up to 0x7C00 = inf */
    return (uint16_t)(sign | q);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = kn_fp32_to_fp16(src[i]);
}
#endif

void kn_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
#if defined(__x86_64__) || defined(__i386__)
    /* F16C comes with level AVX2 (kn.h: simd.c checks it in CPUID) */
    if (kn_simd_level() >= KN_SIMD_AVX2) {
        f32_to_f16_f16c(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = kn_fp32_to_fp16(src[i]);
}

float kn_bf16_to_fp32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t kn_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 64); /* NaN: force quiet */
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
}

static float h2f(uint16_t h)
{
    return kn_fp16_to_fp32(h);
}

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- dequantizers: nb blocks from src to y ------------------------------------------ */

static void dq_f32(const uint8_t *src, float *y, int64_t n)
{
    if (n > 0)
        memcpy(y, src, (size_t)n * sizeof(float));
}

static void dq_f16(const uint8_t *src, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kn_fp16_to_fp32(rd16(src + 2 * i));
}

static void dq_bf16(const uint8_t *src, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kn_bf16_to_fp32(rd16(src + 2 * i));
}

static void dq_q4_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK) {
        struct quant_block_q4_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d);
        for (int j = 0; j < GGML_QK / 2; j++) {
            y[j] = d * (float)((b.qs[j] & 0x0F) - 8);
            y[j + GGML_QK / 2] = d * (float)((b.qs[j] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK) {
        struct quant_block_q4_1 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d), m = h2f(b.m);
        for (int j = 0; j < GGML_QK / 2; j++) {
            y[j] = d * (float)(b.qs[j] & 0x0F) + m;
            y[j + GGML_QK / 2] = d * (float)(b.qs[j] >> 4) + m;
        }
    }
}

/* The 5-bit value j (0..31) of a Q5_0/Q5_1 block: low nibble from qs, 5th
 * bit from bit j of qh read as a little-endian u32. */
static int q5_value(const uint8_t qs[16], const uint8_t qh_bytes[4], int j)
{
    uint32_t qh;
    memcpy(&qh, qh_bytes, sizeof qh);
    int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1) << 4);
}

static void dq_q5_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK) {
        struct quant_block_q5_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d);
        for (int j = 0; j < GGML_QK; j++)
            y[j] = d * (float)(q5_value(b.qs, b.qh, j) - 16);
    }
}

static void dq_q5_1(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK) {
        struct quant_block_q5_1 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d), m = h2f(b.m);
        for (int j = 0; j < GGML_QK; j++)
            y[j] = d * (float)q5_value(b.qs, b.qh, j) + m;
    }
}

static void dq_q8_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK) {
        struct quant_block_q8_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d);
        for (int j = 0; j < GGML_QK; j++)
            y[j] = d * (float)b.qs[j];
    }
}

/* Scale and min (6 bits each) of sub-block s (0..7) of a Q4_K/Q5_K block
 * (ggml's get_scale_min_k4). Bytes 0-3 hold scales 0-3 in their low 6 bits,
 * bytes 4-7 mins 0-3; sub-blocks 4-7 take their low 4 bits from the nibbles
 * of bytes 8-11 and their top 2 bits from the top bits of bytes 0-7. */
static void k4_scale_min(const uint8_t sc[12], int s, int *scale, int *min)
{
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        int k = s - 4; /* 0..3 */
        *scale = (sc[k + 8] & 0x0F) | ((sc[k] >> 6) << 4);
        *min = (sc[k + 8] >> 4) | ((sc[k + 4] >> 6) << 4);
    }
}

/* Q4_K: 8 sub-blocks of 32 values; value e is in chunk c = e/64 of qs
 * (bytes 32c..32c+31), low nibble for sub-block 2c, high nibble for 2c+1. */
static void dq_q4_k(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK_K) {
        struct quant_block_q4_k b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d), dmin = h2f(b.dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(b.scales, s, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b.qs + 32 * (s / 2);
            int shift = (s & 1) ? 4 : 0;
            for (int l = 0; l < 32; l++)
                y[32 * s + l] = d1 * (float)((q[l] >> shift) & 0x0F) - m1;
        }
    }
}

/* Q5_K: Q4_K plus a 5th bit, bit s of qh[l] for value 32s + l. */
static void dq_q5_k(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK_K) {
        struct quant_block_q5_k b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d), dmin = h2f(b.dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(b.scales, s, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b.qs + 32 * (s / 2);
            int shift = (s & 1) ? 4 : 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0F) | (((b.qh[l] >> s) & 1) << 4);
                y[32 * s + l] = d1 * (float)v - m1;
            }
        }
    }
}

/* Q6_K: two halves of 128 values; in half h, value 32g + l (g = 0..3) takes
 * its low 4 bits from ql[64h + l + 32(g&1)] (low nibble for g < 2, high for
 * g >= 2) and its high 2 bits from bits 2g..2g+1 of qh[32h + l]; q - 32 is
 * scaled by d * scales[e / 16]. */
static void dq_q6_k(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += GGML_QK_K) {
        struct quant_block_q6_k b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = h2f(b.d);
        for (int e = 0; e < GGML_QK_K; e++) {
            int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
            uint8_t lb = b.ql[64 * h + l + 32 * (g & 1)];
            int low4 = g < 2 ? (lb & 0x0F) : (lb >> 4);
            int high2 = (b.qh[32 * h + l] >> (2 * g)) & 3;
            int q = (low4 | (high2 << 4)) - 32;
            y[e] = (d * (float)b.scales[e / 16]) * (float)q;
        }
    }
}

int kn_dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    if (!ggml_type_supported(type))
        return ERR_UNSUPPORTED;
    int64_t be = ggml_type_block_elems(type);
    if (n < 0 || n % be != 0)
        return ERR_INVAL;
    const uint8_t *s = src;
    int64_t nb = n / be;
    switch (type) {
    case GGML_TYPE_F32: dq_f32(s, dst, n); break;
    case GGML_TYPE_F16: dq_f16(s, dst, n); break;
    case GGML_TYPE_BF16: dq_bf16(s, dst, n); break;
    case GGML_TYPE_Q4_0: dq_q4_0(s, dst, nb); break;
    case GGML_TYPE_Q4_1: dq_q4_1(s, dst, nb); break;
    case GGML_TYPE_Q5_0: dq_q5_0(s, dst, nb); break;
    case GGML_TYPE_Q5_1: dq_q5_1(s, dst, nb); break;
    case GGML_TYPE_Q8_0: dq_q8_0(s, dst, nb); break;
    case GGML_TYPE_Q4_K: dq_q4_k(s, dst, nb); break;
    case GGML_TYPE_Q5_K: dq_q5_k(s, dst, nb); break;
    case GGML_TYPE_Q6_K: dq_q6_k(s, dst, nb); break;
    default: return ERR_UNSUPPORTED; /* unreachable: table and switch agree */
    }
    return 0;
}
