/*
 * matq.c - matrix products against quantized (GGUF) weights on the CPU:
 * kn_matmul_w and kn_matmul_w_scratch (contracts in kernels/kn.h).
 *
 * out (n, m) = x (n, k) @ W^T, W being m rows of k values in a ggml block
 * format, as GGUF stores linear weights (one output feature per row).
 *
 * Design (llama.cpp's): the float activations are quantized once per call
 * to 8-bit blocks, then each output is a sum over blocks of an integer dot
 * product of activation and weight quants, scaled by the two block scales
 * in float. Two activation formats, both with float32 scales (more exact
 * than ggml's fp16 ones), both round-to-nearest-even with scale
 * d = max|x| / 127 over the block, values in [-127, 127]:
 *
 *   act32  for Q4_0 Q4_1 Q5_0 Q5_1 Q8_0: blocks of 32 values,
 *          { float d; float s = d * sum(q); int8 q[32]; }         40 bytes
 *   act256 for Q4_K Q5_K Q6_K: blocks of 256 values,
 *          { float d; int16 bsums[16] (sums of q by 16); int8 q[256]; } 292 bytes
 *
 * F32, F16 and BF16 weights are converted to float exactly and dotted with
 * the unquantized x (no scratch needed).
 *
 * Reduction order (fixed: the same for every n, thread count and SIMD path,
 * so results are bit-identical across them; tests/unit/kernels/test_matq.c checks):
 *   - 32-value types: per block b (in order) the exact integer dot isum_b
 *     of block b's weight and activation quants, then acc = fma(d_w * d_a,
 *     (float)isum_b, acc). Offsets (Q4_1, Q5_1: m * sum(x)) go to accm =
 *     fma(m_w, s_a, accm) in the same order; result acc [+ accm].
 *   - K-quants: per 256-value super-block the whole integer sum (sub-block
 *     scales applied in integers) is exact; then acc = fma(d_w * d_a,
 *     (float)isum, acc), and for Q4_K/Q5_K accm = fma(dmin_w * d_a,
 *     (float)imins, accm); result acc - accm.
 *   - F32/F16/BF16: 32 lanes, lane j = fma chain over elements i = j mod 32
 *     in increasing i; lanes combined as v[j] = (l[j]+l[j+8]) +
 *     (l[j+16]+l[j+24]) for j < 8, then ((v0+v4)+(v2+v6)) +
 *     ((v1+v5)+(v3+v7)).
 *
 * Error vs the exact product with unquantized x (derived in
 * tests/unit/kernels/test_matq.c): activation rounding moves each x_i by at most
 * d_a/2 = max|x over its block| / 254, so |error| <= sum over blocks of
 * (amax_b / 254) * sum_{i in b} |w_i|, plus float rounding of order
 * (k/block + 16) * 2^-24 * sum |w_i x_i|. For random data that is about
 * 0.3% of sum |w_i x_i| (typically far less: errors have random signs).
 *
 * SIMD: a portable scalar path (the reference), an AVX2+FMA+F16C path and
 * an AVX-512 (F, BW, VL, VNNI) path, chosen at run time (see kn_simd_*);
 * integer sums are exact and the float steps are the same operations in
 * the same order, so all give bit-identical results. For the 32-value
 * types both SIMD levels run one tile (matq_x32v.h at AVX2, twice: with
 * AVX-VNNI's 256-bit vpdpbusd where the CPU has it, else maddubs + madd;
 * the AVX-512 section on 512-bit vectors): the activations quantized once
 * per call into the ACT_32V layout (32 signed bytes per row and block, the
 * scales, offsets and sums of q of a group of 8 rows side by side), and a
 * tile of 8 (AVX2) or 16 (AVX-512) weight rows x all the activation rows
 * of a work tile, lane l of every vector = weight row l: per weight block
 * the rows are unpacked to unsigned bytes (w + a bias, taken back from the
 * activations' sum) and transposed, so that each activation row's block
 * sum is 8 vpdpbusd of its 4 bytes broadcast against the 8 transposed
 * dwords, then one convert and one fma - no horizontal work and no float
 * step per 4 values. At n = 64, 1 thread (bench/NOTES.md, issue 34): the
 * AVX-512 tile 33-38% of vpdpbusd's peak (from 16-18% for the 2 x 8 tile
 * of the per-4-values reference it replaced), AVX2 ~2x the tiles before.
 * There is no load-time repacking: the tile reads the GGUF blocks in place
 * (the mapping is the only copy of the weights).
 * The K-quants: at AVX2 (matq_kq2.h, twice: AVX-VNNI vpdpwssd, or madd +
 * add) one weight super-block is unpacked once and dotted with 1, 4 or
 * (VNNI only: the plain form spills) 8 activation rows, maddubs and the
 * sub-block scale per 32 weights and row; the 4- and 8-row kernels do the
 * per-super-block tail (horizontal sums, mins, fmas) for all their rows in
 * one 4- or 8-lane vector, lane r = row r. At AVX-512 the same with two
 * sub-blocks per register (1, 4, 8 rows) for the rows of a call outside
 * whole groups of 16; the groups of 16 rows (n >= 16) are quantized into
 * a row-transposed layout (struct act256t: per 4 positions, 16 rows x 4
 * bytes in one register) and run a GEMM-style tile of 4 weight rows x 16
 * to 64 activation rows (two groups per pass over one unpacked weight
 * super-block): lane r of each vpdpbusd is row r's sum (weights
 * unpacked to bytes once per super-block and broadcast 4 at a time), the
 * sub-block scales applied with vpmulld, no horizontal sums at all; with
 * AVX-VNNI the AVX2 path runs the same tile on 256-bit vectors (2 weight
 * rows x 16 activation rows, or 1 x 32; matq_kq2.h). Per row the
 * operations are the reference's (exact integer sums, the same fmas in the
 * same order). At n = 64, 1 thread (bench/NOTES.md, issue 34): the AVX-512
 * tile 36-40% of vpdpbusd's peak, the AVX2 one 34-43% of the 256-bit
 * vpdpbusd's, both peaks measured by bench_matq's peak loop in the same
 * run. The K-quant activations (act256, act256t) are quantized
 * with vectors at every SIMD level, bit for bit the scalar quantizer.
 *
 * Performance notes for callers: quantizing the activations costs O(n k)
 * per call, so fuse products that share x (q/k/v, gate/up) into one call
 * on concatenated weight rows when the layout allows. Work is split into
 * tiles of 16 weight rows x 64 activation rows handed out dynamically, so
 * any thread count works (calls of up to 8 rows - decode - take larger
 * weight tiles: the counter's cache line moving between cores cost about
 * as much as a 16-row tile of work); use no more threads than physical
 * cores.
 *
 * Reference: the scalar path of this file (KN_SIMD_SCALAR) defines the
 * results; the SIMD paths give its bits (tolerance 0). cuda/matvec.cu is
 * checked against kn_matmul_f32 on the dequantized rows instead (the GPU
 * multiplies unquantized activations).
 *
 * Threads: kn_matmul_w may be called from any thread; calls sharing a pool
 * must not overlap (kn_pool_run rule).
 *
 * Layout of this file: activation quantizers (scalar: they cost O(n k)
 * against the product's O(n m k)); the scalar dot kernels, which define the
 * results; the AVX2 kernels, compiled with per-function target attributes
 * so the file builds and runs on any x86-64 (and compiles to nothing
 * elsewhere), with AVX-VNNI twins of the 32-value tile kernels (vpdpbusd
 * for the u8 x s8 sums: the same integers, so the same bits; used when
 * the CPU has it, as llama.cpp's native builds do, unless KN_NO_VNNI is
 * set); the AVX-512 kernels; the driver, which quantizes the activations into the
 * caller's scratch and splits the output into tiles of (TILE_M weight rows
 * x TILE_N activation rows) handed out to the pool's threads through an
 * atomic counter. Each output element is computed by one call of one dot
 * kernel whose operation sequence depends only on (k, weight row,
 * activation row), so the result never depends on n, on the tiling or on
 * the thread that computed it.
 *
 * Every float step that could round differently is written out: fmaf() in
 * the scalar path (correctly rounded, like the vfmadd instructions), an
 * explicit multiply for the two block scales, an explicit pairwise sum.
 * GCC does not contract a*b+c under -std=c11; the pragma covers clang.
 */
#include "kernels/kn.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MATQ_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define MATQ_X86 0
#endif

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- activation blocks ------------------------------------------------------------- */

struct act32 {
    float d;          /* scale: x ~ d * q */
    float s;          /* d * sum(q), for the offset of Q4_1/Q5_1 */
    int8_t q[GGML_QK];
};

struct act256 {
    float d;
    int16_t bsums[GGML_QK_K / 16]; /* sum of q[16g .. 16g+15] */
    int8_t q[GGML_QK_K];
};

/* act256 of 16 rows transposed (the K-quant tiles of matq.c's AVX-512
 * section and matq_kq2.h): per 4 positions j, the 16 rows' 4 bytes in one
 * 64-byte line, stored q + 128; the bsums as i16 pairs per row; the d. */
struct act256t {
    uint8_t q[GGML_QK_K / 4][64]; /* [j][4 r + i] = q of row r at position 4 j + i, + 128 */
    int16_t bs[8][32];            /* [p][2 r + h] = bsums[2 p + h] of row r */
    float d[16];                  /* d of row r */
};

_Static_assert(sizeof(struct act256t) == 16 * sizeof(struct act256), "act256t: 16 act256 blocks");

_Static_assert(sizeof(struct act32) == 40, "act32 size");
_Static_assert(sizeof(struct act256) == 292, "act256 size");

#define SCRATCH_ALIGN 64
#define TILE_M 16 /* weight rows per tile: 16 rows of k=1536 Q4_1 = 15 KiB, in L1 */
#define TILE_N 64 /* activation rows per tile */

/* Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves
 * no fraction bits. Needs float arithmetic in float (SSE, not x87). */
static inline float round_even(float v)
{
#if FLT_EVAL_METHOD == 0
    return (v + 12582912.0f) - 12582912.0f;
#else
    return nearbyintf(v);
#endif
}

/* q = round(x / d) with d = amax / 127, as x * (1 / d). NaN and values that
 * round past 127 (cannot happen for finite x) are clamped, so the int8
 * conversion is always defined. */
static inline int8_t quant_one(float x, float id)
{
    float v = round_even(x * id);
    if (!(v >= -127.0f))
        v = v < 0 ? -127.0f : 0.0f; /* -big, or NaN -> 0 */
    if (v > 127.0f)
        v = 127.0f;
    return (int8_t)v;
}

static float block_scale(const float *x, int n, float *id)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a;
    }
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

/* One block of 32 values: scale *d, offset *s = d * sum(q), values q. */
static void quant_block32_s(const float *x, float *d_out, float *s_out, int8_t *q)
{
    float id, d = block_scale(x, GGML_QK, &id);
    int sum = 0;
    for (int i = 0; i < GGML_QK; i++) {
        q[i] = quant_one(x[i], id);
        sum += q[i];
    }
    *d_out = d;
    *s_out = d * (float)sum;
}

static void quant_act32_row(const float *x, int k, struct act32 *out)
{
    for (int b = 0; b < k / GGML_QK; b++, x += GGML_QK)
        quant_block32_s(x, &out[b].d, &out[b].s, out[b].q);
}

static void quant_act256_row(const float *x, int k, struct act256 *out)
{
    for (int b = 0; b < k / GGML_QK_K; b++, x += GGML_QK_K) {
        float id, d = block_scale(x, GGML_QK_K, &id);
        for (int g = 0; g < GGML_QK_K / 16; g++) {
            int sum = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) {
                out[b].q[i] = quant_one(x[i], id);
                sum += out[b].q[i];
            }
            out[b].bsums[g] = (int16_t)sum;
        }
        out[b].d = d;
    }
}

/* ---- shared scalar helpers ----------------------------------------------------------- */

static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The fixed 8-lane sum: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), which is what
 * the AVX2 horizontal sum computes. */
static inline float sum8(const float l[8])
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static float sum32(const float l[32])
{
    float v[8];
    for (int j = 0; j < 8; j++)
        v[j] = (l[j] + l[j + 8]) + (l[j + 16] + l[j + 24]);
    return sum8(v);
}

/* Scale and min (6 bits) of sub-block s of a Q4_K/Q5_K block (ggml's
 * get_scale_min_k4), for all 8 sub-blocks. */
static inline void k4_scales(const uint8_t sc[12], uint8_t scale[8], uint8_t min[8])
{
    for (int s = 0; s < 4; s++) {
        scale[s] = sc[s] & 63;
        min[s] = sc[s + 4] & 63;
        scale[s + 4] = (uint8_t)((sc[s + 8] & 0x0F) | ((sc[s] >> 6) << 4));
        min[s + 4] = (uint8_t)((sc[s + 8] >> 4) | ((sc[s + 4] >> 6) << 4));
    }
}

/* ---- scalar dot kernels: the reference ------------------------------------------------ */

typedef float (*dot_fn)(int k, const uint8_t *w, const void *a);
/* Four activation rows against one weight row, with exactly the operations
 * of four dot_fn calls (it only shares the weight unpacking). */
typedef void (*dot4_fn)(int k, const uint8_t *w, const void *const *a, float *out);

static void q5_unpack(const uint8_t qs[16], const uint8_t qh4[4], int bias, int wq[GGML_QK])
{
    uint32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    for (int j = 0; j < 16; j++) {
        wq[j] = ((qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4)) - bias;
        wq[j + 16] = ((qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - bias;
    }
}

static void q4_unpack(const uint8_t qs[16], int bias, int wq[GGML_QK])
{
    for (int j = 0; j < 16; j++) {
        wq[j] = (qs[j] & 0x0F) - bias;
        wq[j + 16] = (qs[j] >> 4) - bias;
    }
}

/* Block of a 32-value type -> integer values (offset -8/-16 of Q4_0/Q5_0
 * included), scale d, offset m (0 for the types without one). */
static void unpack32_s(int type, const uint8_t *p, int wq[GGML_QK], float *d, float *m)
{
    *d = kn_fp16_to_fp32(rd16(p));
    *m = 0.0f;
    switch (type) {
    case GGML_TYPE_Q4_0: q4_unpack(p + 2, 8, wq); break;
    case GGML_TYPE_Q4_1: *m = kn_fp16_to_fp32(rd16(p + 2)); q4_unpack(p + 4, 0, wq); break;
    case GGML_TYPE_Q5_0: q5_unpack(p + 6, p + 2, 16, wq); break;
    case GGML_TYPE_Q5_1: *m = kn_fp16_to_fp32(rd16(p + 2)); q5_unpack(p + 8, p + 4, 0, wq); break;
    default: /* Q8_0 */
        for (int j = 0; j < GGML_QK; j++)
            wq[j] = (int8_t)p[2 + j];
        break;
    }
}

static int has_offset32(int type)
{
    return type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
}

/* Where a 32-value type keeps its parts (the SIMD tiles' view): block
 * bytes, offset of the quants (nibbles, or Q8_0's bytes), of the 32 fifth
 * bits (Q5_0/Q5_1; else 0), and the bias that makes the values unsigned
 * (u = w + bias). */
struct x32_fmt {
    size_t bs, qs, qh;
    int bias;
};

static inline struct x32_fmt x32_fmt(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return (struct x32_fmt){18, 2, 0, 8};
    case GGML_TYPE_Q4_1: return (struct x32_fmt){20, 4, 0, 0};
    case GGML_TYPE_Q5_0: return (struct x32_fmt){22, 6, 2, 16};
    case GGML_TYPE_Q5_1: return (struct x32_fmt){24, 8, 4, 0};
    default: return (struct x32_fmt){34, 2, 0, 128}; /* Q8_0 */
    }
}

/* The first weight row of a strip of L (8, 16) and the byte offsets of its
 * rows; rows past the nc real ones repeat the last (their lanes are never
 * stored). */
static inline void strip_rows(const uint8_t *w, size_t wrb, int nc, int L, const uint8_t **rows, int32_t *vi)
{
    for (int l = 0; l < L; l++) {
        rows[l] = w + (size_t)(l < nc ? l : nc - 1) * wrb;
        vi[l] = (int32_t)(rows[l] - w);
    }
}

/* Per block the exact integer sum of products, then one fma per block in
 * block order: acc = fma(d_w * d_a, isum, acc); offsets (Q4_1/Q5_1) the
 * same into accm with m_w * s_a; result acc + accm. */
static float dot32_s(int type, int k, const uint8_t *w, const struct act32 *a)
{
    size_t bs = ggml_type_block_bytes((uint32_t)type);
    float acc = 0.0f, accm = 0.0f;
    for (int b = 0; b < k / GGML_QK; b++) {
        int wq[GGML_QK];
        float d, m;
        unpack32_s(type, w + (size_t)b * bs, wq, &d, &m);
        int isum = 0;
        for (int e = 0; e < GGML_QK; e++)
            isum += wq[e] * a[b].q[e];
        acc = fmaf(d * a[b].d, (float)isum, acc);
        if (has_offset32(type))
            accm = fmaf(m, a[b].s, accm);
    }
    return has_offset32(type) ? acc + accm : acc;
}

#define DOT32_S(name, T) \
    static float name(int k, const uint8_t *w, const void *a) { return dot32_s(T, k, w, a); }
DOT32_S(dot_q4_0_s, GGML_TYPE_Q4_0)
DOT32_S(dot_q4_1_s, GGML_TYPE_Q4_1)
DOT32_S(dot_q5_0_s, GGML_TYPE_Q5_0)
DOT32_S(dot_q5_1_s, GGML_TYPE_Q5_1)
DOT32_S(dot_q8_0_s, GGML_TYPE_Q8_0)

/* Q4_K/Q5_K: isum = sum_s scale_s * sum_{l} q * qa over sub-block s;
 * imin = sum_s min_s * (sum of qa over sub-block s). */
static float dot_q4_k_s(int k, const uint8_t *w, const void *av)
{
    const struct act256 *a = av;
    float acc = 0.0f, accm = 0.0f;
    for (int b = 0; b < k / GGML_QK_K; b++) {
        struct quant_block_q4_k blk;
        memcpy(&blk, w + (size_t)b * sizeof blk, sizeof blk);
        uint8_t sc[8], mn[8];
        k4_scales(blk.scales, sc, mn);
        int isum = 0, imin = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = blk.qs + 32 * (s / 2);
            int shift = (s & 1) ? 4 : 0, t = 0;
            for (int l = 0; l < 32; l++)
                t += ((q[l] >> shift) & 0x0F) * a[b].q[32 * s + l];
            isum += sc[s] * t;
            imin += mn[s] * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
        }
        acc = fmaf(kn_fp16_to_fp32(blk.d) * a[b].d, (float)isum, acc);
        accm = fmaf(kn_fp16_to_fp32(blk.dmin) * a[b].d, (float)imin, accm);
    }
    return acc - accm;
}

static float dot_q5_k_s(int k, const uint8_t *w, const void *av)
{
    const struct act256 *a = av;
    float acc = 0.0f, accm = 0.0f;
    for (int b = 0; b < k / GGML_QK_K; b++) {
        struct quant_block_q5_k blk;
        memcpy(&blk, w + (size_t)b * sizeof blk, sizeof blk);
        uint8_t sc[8], mn[8];
        k4_scales(blk.scales, sc, mn);
        int isum = 0, imin = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *q = blk.qs + 32 * (s / 2);
            int shift = (s & 1) ? 4 : 0, t = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0F) | (((blk.qh[l] >> s) & 1) << 4);
                t += v * a[b].q[32 * s + l];
            }
            isum += sc[s] * t;
            imin += mn[s] * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
        }
        acc = fmaf(kn_fp16_to_fp32(blk.d) * a[b].d, (float)isum, acc);
        accm = fmaf(kn_fp16_to_fp32(blk.dmin) * a[b].d, (float)imin, accm);
    }
    return acc - accm;
}

/* Q6_K: isum = sum_g scale_g * sum_{e in group g of 16} (q_e - 32) * qa_e. */
static float dot_q6_k_s(int k, const uint8_t *w, const void *av)
{
    const struct act256 *a = av;
    float acc = 0.0f;
    for (int b = 0; b < k / GGML_QK_K; b++) {
        struct quant_block_q6_k blk;
        memcpy(&blk, w + (size_t)b * sizeof blk, sizeof blk);
        int isum = 0;
        for (int g = 0; g < GGML_QK_K / 16; g++) {
            int t = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                int h = e / 128, r = e % 128, grp = r / 32, l = r % 32;
                uint8_t lb = blk.ql[64 * h + l + 32 * (grp & 1)];
                int low4 = grp < 2 ? (lb & 0x0F) : (lb >> 4);
                int high2 = (blk.qh[32 * h + l] >> (2 * grp)) & 3;
                t += ((low4 | (high2 << 4)) - 32) * a[b].q[e];
            }
            isum += blk.scales[g] * t;
        }
        acc = fmaf(kn_fp16_to_fp32(blk.d) * a[b].d, (float)isum, acc);
    }
    return acc;
}

static float dot_f32_s(int k, const uint8_t *w, const void *av)
{
    const float *x = av;
    float lanes[32] = {0};
    for (int i = 0; i < k; i++) {
        float wv;
        memcpy(&wv, w + 4 * (size_t)i, sizeof wv);
        lanes[i & 31] = fmaf(x[i], wv, lanes[i & 31]);
    }
    return sum32(lanes);
}

static float dot_f16_s(int k, const uint8_t *w, const void *av)
{
    const float *x = av;
    float lanes[32] = {0};
    for (int i = 0; i < k; i++)
        lanes[i & 31] = fmaf(x[i], kn_fp16_to_fp32(rd16(w + 2 * (size_t)i)), lanes[i & 31]);
    return sum32(lanes);
}

static float dot_bf16_s(int k, const uint8_t *w, const void *av)
{
    const float *x = av;
    float lanes[32] = {0};
    for (int i = 0; i < k; i++)
        lanes[i & 31] = fmaf(x[i], kn_bf16_to_fp32(rd16(w + 2 * (size_t)i)), lanes[i & 31]);
    return sum32(lanes);
}

/* ---- AVX2 kernels ----------------------------------------------------------------------- */

#if MATQ_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define FORCE_INLINE inline __attribute__((always_inline))
/* the row and sub-block loops unrolled, so that the NR accumulators live in
 * registers (GCC keeps an array indexed in a rolled loop on the stack) */
#define UNROLL _Pragma("GCC unroll 8")

AVX2 static inline int hsum_i32_avx2(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

AVX2 static inline float h2f_avx2(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* The byte shuffle that gives each byte of a dword of 32 fifth bits the
 * byte holding its bit 4j + i (i = 0..3: byte j / 2 of the dword). */
AVX2 static FORCE_INLINE __m128i q5_byte_index(int j)
{
    const char b = (char)(j >> 1);
    return _mm_setr_epi8(b, b, b, b, (char)(4 + b), (char)(4 + b), (char)(4 + b), (char)(4 + b), (char)(8 + b),
                         (char)(8 + b), (char)(8 + b), (char)(8 + b), (char)(12 + b), (char)(12 + b), (char)(12 + b),
                         (char)(12 + b));
}

/* 16 bytes at p[l] + o of 8 rows, transposed: T[d] dword l = dword d of
 * row l's 16 bytes (4 x 4 transposes within the 128-bit lanes of
 * [row i | row i + 4]: 8 shuffles). */
AVX2 static FORCE_INLINE void tr16x8_avx2(const uint8_t *const *p, size_t o, __m256i T[4])
{
    __m256i y[4];
    UNROLL for (int i = 0; i < 4; i++)
        y[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[i] + o))),
                                       _mm_loadu_si128((const __m128i *)(p[i + 4] + o)), 1);
    __m256i t0 = _mm256_unpacklo_epi32(y[0], y[1]), t1 = _mm256_unpackhi_epi32(y[0], y[1]);
    __m256i t2 = _mm256_unpacklo_epi32(y[2], y[3]), t3 = _mm256_unpackhi_epi32(y[2], y[3]);
    T[0] = _mm256_unpacklo_epi64(t0, t2);
    T[1] = _mm256_unpackhi_epi64(t0, t2);
    T[2] = _mm256_unpacklo_epi64(t1, t3);
    T[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* Block boff of the 8 rows p[l] as unsigned bytes u = w + bias (bias: Q4_0
 * 8, Q5_0 16, Q8_0 128, Q4_1/Q5_1 0; see matq_x32v.h), transposed: W[j]
 * dword l = values 4j..4j+3 of row l. The nibble types transpose the 16
 * bytes of nibbles (values j and 16 + j share byte j) and split them
 * after; the 5th bits of Q5_0/Q5_1 (a gather of the 8 rows' 32 bits at
 * vidx) go to bit 4 of their bytes with a byte shuffle and a compare.
 * Q8_0 with q8_signed: the bytes w themselves (the sign transfer of the
 * plain AVX2 form). */
AVX2 static FORCE_INLINE void wtile8_avx2(int type, const uint8_t *const *p, size_t boff, const uint8_t *base,
                                          __m256i vidx, int q8_signed, __m256i W[8])
{
    const struct x32_fmt f = x32_fmt(type);
    const uint8_t *q[8];
    UNROLL for (int l = 0; l < 8; l++)
        q[l] = p[l] + boff;
    if (type == GGML_TYPE_Q8_0) {
        tr16x8_avx2(q, f.qs, W);
        tr16x8_avx2(q, f.qs + 16, W + 4);
        if (!q8_signed)
            UNROLL for (int j = 0; j < 8; j++)
                W[j] = _mm256_xor_si256(W[j], _mm256_set1_epi8((char)0x80));
        return;
    }
    __m256i T[4];
    tr16x8_avx2(q, f.qs, T);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    UNROLL for (int j = 0; j < 4; j++) {
        W[j] = _mm256_and_si256(T[j], m4);
        W[4 + j] = _mm256_and_si256(_mm256_srli_epi16(T[j], 4), m4);
    }
    if (f.qh) {
        __m256i H = _mm256_i32gather_epi32((const int *)(const void *)(base + boff + f.qh), vidx, 1);
        UNROLL for (int j = 0; j < 8; j++) { /* byte i of dword l: bit 4j + i of row l's 32 */
            __m256i sh = _mm256_broadcastsi128_si256(q5_byte_index(j));
            __m256i bit = _mm256_set1_epi32(j & 1 ? (int)0x80402010 : 0x08040201);
            __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(H, sh), bit), bit);
            W[j] = _mm256_or_si256(W[j], _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
        }
    }
}

/* The scales d (and offsets m: Q4_1/Q5_1) of block boff of the 8 rows
 * base + vidx[l], as floats, lane l = row l. */
AVX2 static FORCE_INLINE void scales8_avx2(const uint8_t *base, __m256i vidx, __m256 *dw, __m256 *mw)
{
    __m256i g = _mm256_i32gather_epi32((const int *)(const void *)base, vidx, 1);
    __m256i p = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(g, 16));
    p = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
    *dw = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
    *mw = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
}

/* ---- K-quants, AVX2: NR activation rows per weight row ------------------------------
 *
 * Each weight super-block is unpacked once and dotted with NR = 1 or 4
 * activation rows. Per row the operations are the reference's: the integer
 * sums are exact (so the order of the vector adds does not matter), then
 * the same two fmas per super-block in block order (dot_q4_k_s). The sums
 * of mins (Q4_K/Q5_K) and the -32 correction of Q6_K are integer dots of
 * the 16 bsums with the scales, done with one madd: exact too. */

/* The 6-bit scales and mins of a Q4_K/Q5_K block (k4_scales) computed in
 * general registers, four bytes to a word: byte j of sc[w] is the scale of
 * sub-block 4 w + j, of mn[w] its min. (Writing the bytes to memory and
 * loading them as a vector would stall store forwarding every block.) */
struct k4_words {
    uint32_t sc[2], mn[2];
};

static inline struct k4_words k4_scale_words(const uint8_t *p)
{
    uint32_t u[3];
    memcpy(u, p, sizeof u);
    struct k4_words k;
    k.sc[0] = u[0] & 0x3F3F3F3Fu;
    k.mn[0] = u[1] & 0x3F3F3F3Fu;
    k.sc[1] = (u[2] & 0x0F0F0F0Fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    k.mn[1] = ((u[2] >> 4) & 0x0F0F0F0Fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    return k;
}

static inline int k4_byte(const uint32_t w[2], int i)
{
    return (int)((w[i >> 2] >> (8 * (i & 3))) & 0xFF);
}

/* The eight mins, each twice (16 x i16), in the order of the 16 bsums:
 * sum_s mn[s] * (bsums[2s] + bsums[2s+1]) is then one madd. */
AVX2 static FORCE_INLINE __m256i k4_mins16(const struct k4_words *k)
{
    __m128i m8 = _mm_cvtsi64_si128((long long)(k->mn[0] | (uint64_t)k->mn[1] << 32));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

/* The eight scales as i16 (lanes 0-7), zero above. */
AVX2 static FORCE_INLINE __m256i k4_scales16(const struct k4_words *k)
{
    return _mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)(k->sc[0] | (uint64_t)k->sc[1] << 32)));
}

/* Four integer sums at once: lane r = the sum of the i32 lanes of t[r]. */
AVX2 static FORCE_INLINE __m128i hsum_rows4(const __m256i t[4])
{
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0], t[1]), _mm256_hadd_epi32(t[2], t[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* The activation scales of block b of four rows, lane r = a[r][b].d. */
AVX2 static FORCE_INLINE __m128 act_d4(const struct act256 *const *a, int b)
{
    return _mm_setr_ps(a[0][b].d, a[1][b].d, a[2][b].d, a[3][b].d);
}

AVX2 static FORCE_INLINE int bsum_dot_avx2(const int16_t *bsums, __m256i s16)
{
    return hsum_i32_avx2(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)bsums), s16));
}

/* The 6-bit values of the four 32-value quarters of Q6_K half h, from the
 * half's ql (l0, l1) and qh: quarter g pairs with activations 128 h + 32 g. */
AVX2 static FORCE_INLINE void q6k_quarters(__m256i l0, __m256i l1, __m256i qh, __m256i q[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
}

/* One-row (dot_fn) and four-row (dot4_fn) entry points of a rows kernel. */
#define KQ_PAIR(ATTR, n1, n4, CALL)                                                           \
    ATTR static float n1(int k, const uint8_t *w, const void *av)                             \
    {                                                                                         \
        const struct act256 *a[1] = {av};                                                     \
        float o;                                                                              \
        CALL(k, w, a, &o, 1);                                                                 \
        return o;                                                                             \
    }                                                                                         \
    ATTR static void n4(int k, const uint8_t *w, const void *const *av, float *out)           \
    {                                                                                         \
        const struct act256 *a[4] = {av[0], av[1], av[2], av[3]};                             \
        CALL(k, w, a, out, 4);                                                                \
    }

/* The act256t tiles: nc weight rows x na (1..4) act256t groups of 16 rows,
 * ga structs apart (the first nr rows written). */
typedef void (*dott_fn)(int k, const uint8_t *w0, size_t wrb, int nc, const struct act256t *at, size_t ga,
                        int na, int nr, float *out, size_t os);

/* Eight integer sums at once: lane r = the sum of all i32 lanes of t[r]
 * (exact, so the same integers as eight horizontal sums). */
AVX2 static FORCE_INLINE __m256i hsum_rows8(const __m256i t[8])
{
    __m256i a0 = _mm256_hadd_epi32(t[0], t[1]), a1 = _mm256_hadd_epi32(t[2], t[3]);
    __m256i a2 = _mm256_hadd_epi32(t[4], t[5]), a3 = _mm256_hadd_epi32(t[6], t[7]);
    __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* The activation scales of block b of eight rows, lane r = a[r][b].d. */
AVX2 static FORCE_INLINE __m256 act_d8(const struct act256 *const *a, int b)
{
    return _mm256_setr_ps(a[0][b].d, a[1][b].d, a[2][b].d, a[3][b].d, a[4][b].d, a[5][b].d,
                          a[6][b].d, a[7][b].d);
}

/* The AVX-VNNI (vpdpbusd, vpdpwssd on 256 bits) functions' attribute. */
#define VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

#define XK_VNNI 0
#define XK(name) name##_avx2
#define XK_ATTR AVX2
#include "kernels/cpu/matq_kq2.h"
#undef XK_VNNI
#undef XK
#undef XK_ATTR
#define XK_VNNI 1
#define XK(name) name##_vnni
#define XK_ATTR VNNI
#include "kernels/cpu/matq_kq2.h"
#undef XK_VNNI
#undef XK
#undef XK_ATTR

/* Float weights: four 8-lane accumulators = lanes 0-31; the tail (k % 32)
 * goes through the same lanes in scalar code; sum32 combines them. */
#define FLOAT_DOT_AVX2(name, LOAD8, LOAD1)                                              \
    AVX2 static float name(int k, const uint8_t *w, const void *av)                     \
    {                                                                                   \
        const float *x = av;                                                            \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), \
                         _mm256_setzero_ps()};                                          \
        int i = 0;                                                                      \
        for (; i + 32 <= k; i += 32)                                                    \
            for (int v = 0; v < 4; v++)                                                 \
                acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * v), LOAD8(i + 8 * v), acc[v]); \
        float lanes[32];                                                                \
        for (int v = 0; v < 4; v++)                                                     \
            _mm256_storeu_ps(lanes + 8 * v, acc[v]);                                    \
        for (; i < k; i++)                                                              \
            lanes[i & 31] = fmaf(x[i], LOAD1(i), lanes[i & 31]);                        \
        return sum32(lanes);                                                            \
    }

#define F32_LOAD8(i) _mm256_loadu_ps((const float *)(w + 4 * (size_t)(i)))
#define F16_LOAD8(i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * (size_t)(i))))
#define BF16_LOAD8(i) \
    _mm256_castsi256_ps(_mm256_slli_epi32( \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + 2 * (size_t)(i)))), 16))
static inline float f32_load1(const uint8_t *w, int i)
{
    float v;
    memcpy(&v, w + 4 * (size_t)i, sizeof v);
    return v;
}
#define F32_LOAD1(i) f32_load1(w, i)
#define F16_LOAD1(i) h2f_avx2(rd16(w + 2 * (size_t)(i)))
#define BF16_LOAD1(i) kn_bf16_to_fp32(rd16(w + 2 * (size_t)(i)))

FLOAT_DOT_AVX2(dot_f32_avx2, F32_LOAD8, F32_LOAD1)
FLOAT_DOT_AVX2(dot_f16_avx2, F16_LOAD8, F16_LOAD1)
FLOAT_DOT_AVX2(dot_bf16_avx2, BF16_LOAD8, BF16_LOAD1)

/* ---- AVX2: the 32-value types, register tiles (matq_x32v.h) ---------------------------- */

/* quant_block32_s with 8-lane vectors, bit for bit:
 * NaN lanes are skipped by the max and quantize to 0, rounding to nearest
 * even, the clamp to [-127, 127]. Returns the 32 values q in order. */
AVX2 static __m256i quant_block32_avx2(const float *x, float *d_out, float *s_out, int32_t *sum_out)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 xv[4], mx = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        xv[i] = _mm256_loadu_ps(x + 8 * i);
        __m256 a = _mm256_and_ps(xv[i], absm);
        mx = _mm256_max_ps(mx, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i iq[4];
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(xv[i], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        iq[i] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
    }
    int sum = hsum_i32_avx2(_mm256_add_epi32(_mm256_add_epi32(iq[0], iq[1]), _mm256_add_epi32(iq[2], iq[3])));
    *d_out = d;
    *s_out = d * (float)sum;
    *sum_out = sum;
    /* the packs interleave the 128-bit lanes: dwords 0 4 1 5 2 6 3 7 */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iq[0], iq[1]), _mm256_packs_epi32(iq[2], iq[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* quant_act256_row with 8-lane vectors, bit for bit (as quant_block32_avx2);
 * the bsums from vpsadbw of the values + 128 (sums of 8, minus 8 * 128). */
AVX2 static void quant_act256_row_avx2(const float *x, int k, struct act256 *out)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int b = 0; b < k / GGML_QK_K; b++, x += GGML_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < 32; i++) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + 8 * i), absm);
            mx = _mm256_max_ps(mx, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
        for (int c = 0; c < 8; c++) { /* 32 values */
            __m256i iq[4];
            for (int i = 0; i < 4; i++) {
                __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * i), vid),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
                iq[i] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
            }
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iq[0], iq[1]), _mm256_packs_epi32(iq[2], iq[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)(out[b].q + 32 * c), p);
            uint64_t sad[4];
            _mm256_storeu_si256((__m256i *)(void *)sad,
                                _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256()));
            out[b].bsums[2 * c] = (int16_t)((int)(sad[0] + sad[1]) - 16 * 128);
            out[b].bsums[2 * c + 1] = (int16_t)((int)(sad[2] + sad[3]) - 16 * 128);
        }
        out[b].d = d;
    }
}

/* quant_act256_row for a group of 16 rows into act256t, with 8-lane vectors
 * (row by row, then transposed: the same numbers). */
AVX2 static void quant_act256t_group_avx2(const float *x, size_t ldx, int k, struct act256t *out)
{
    for (int b = 0; b < k / GGML_QK_K; b++) {
        struct act256t *t = out + b;
        for (int r = 0; r < 16; r++) {
            struct act256 a;
            quant_act256_row_avx2(x + (size_t)r * ldx + (size_t)b * GGML_QK_K, GGML_QK_K, &a);
            for (int j = 0; j < GGML_QK_K / 4; j++) {
                uint32_t v;
                memcpy(&v, a.q + 4 * j, sizeof v);
                v ^= 0x80808080u;
                memcpy(t->q[j] + 4 * r, &v, sizeof v);
            }
            for (int g = 0; g < 16; g++)
                t->bs[g / 2][2 * r + g % 2] = a.bsums[g];
            t->d[r] = a.d;
        }
    }
}

/* One activation row of nb blocks into ACT_32V: the signed q at dst; the
 * scale, offset and sum of q of block b at side[8 b], side[8 (nb + b)] and
 * (int32) side[8 (2 nb + b)]. */
AVX2 static void quant_row_v(const float *x, int nb, uint8_t *dst, float *side)
{
    for (int b = 0; b < nb; b++) {
        int32_t sum;
        __m256i q = quant_block32_avx2(x + (size_t)b * GGML_QK, side + 8 * b, side + 8 * (nb + b), &sum);
        memcpy(side + 8 * (2 * nb + b), &sum, sizeof sum);
        _mm256_storeu_si256((__m256i *)(void *)(dst + 32 * (size_t)b), q);
    }
}

#define XV_VNNI 0
#define XV(name) name##_avx2
#define XV_ATTR AVX2
#include "kernels/cpu/matq_x32v.h"
#undef XV_VNNI
#undef XV
#undef XV_ATTR
#define XV_VNNI 1
#define XV(name) name##_vnni
#define XV_ATTR VNNI
#include "kernels/cpu/matq_x32v.h"
#undef XV_VNNI
#undef XV
#undef XV_ATTR

/* ---- AVX-512 (F, BW, VL, VNNI) ------------------------------------------------------ */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* ---- K-quants, AVX-512 VNNI: two sub-blocks per register ------------------------------
 *
 * One 512-bit register holds 64 weight values, two sub-blocks (Q4_K/Q5_K:
 * the low and high nibbles of one 32-byte qs chunk = sub-blocks 2c, 2c+1;
 * Q6_K: two 32-value quarters), against the 64 matching activation bytes
 * in one load. maddubs gives exact i16 pair sums (|u * s| pairs stay below
 * 2 * 63 * 127), vpdpwssd multiplies them by the i16 sub-block scales and
 * adds into i32 lanes in one instruction (no saturation: the exact integers
 * of the AVX2 madd + add). So the integer sum per super-block is the
 * reference's, and the float steps per row are the same fmas: the bits of
 * the scalar path. */

/* 16 i16 values (a 256-bit vector) -> 32 i16 lanes, lane i = v16[idx[i]]. */
AVX512 static FORCE_INLINE __m512i spread16(__m256i v16, __m512i idx)
{
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(v16));
}

AVX512 static FORCE_INLINE __m512i idx_halves(int i0)
{ /* lanes 0-15: i0, lanes 16-31: i0 + 1 */
    return _mm512_inserti64x4(_mm512_set1_epi16((short)i0), _mm256_set1_epi16((short)(i0 + 1)), 1);
}

AVX512 static FORCE_INLINE __m512i idx_quarters(int i0)
{ /* lanes 8 j .. 8 j + 7: i0 + j, j = 0..3 */
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(i0 + 1)), _mm_set1_epi16((short)i0))),
        _mm256_set_m128i(_mm_set1_epi16((short)(i0 + 3)), _mm_set1_epi16((short)(i0 + 2))), 1);
}

AVX512 static FORCE_INLINE __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

AVX512 static FORCE_INLINE __m256i fold512(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

AVX512 static FORCE_INLINE void q45k_rows_avx512(int k, const uint8_t *w, const struct act256 *const *a,
                                                  float *out, const int NR, const int Q5)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const size_t bs = Q5 ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q4_k);
    float acc[8] = {0}, accm[8] = {0};
    __m256 accv = _mm256_setzero_ps(), accmv = _mm256_setzero_ps(); /* NR == 8: lane r = acc[r] */
    __m128 accv4 = _mm_setzero_ps(), accmv4 = _mm_setzero_ps(); /* NR == 4 */
    for (int b = 0; b < k / GGML_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * bs;
        struct k4_words kw = k4_scale_words(blk + 4);
        __m256i sc16 = k4_scales16(&kw);
        const uint8_t *qs = blk + (Q5 ? 48 : 16);
        __m512i qh = _mm512_setzero_si512();
        if (Q5) { /* low half: bits 2c (sub-block 2c), high half: bits 2c+1 */
            __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 16));
            qh = join256(h, _mm256_srli_epi16(h, 1));
        }
        __m512i isum[8];
        UNROLL for (int r = 0; r < NR; r++)
            isum[r] = _mm512_setzero_si512();
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m512i u = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), m4);
            if (Q5) {
                u = _mm512_or_si512(u, _mm512_slli_epi16(_mm512_and_si512(qh, one), 4));
                qh = _mm512_srli_epi16(qh, 2);
            }
            __m512i s = spread16(sc16, idx_halves(2 * c));
            UNROLL for (int r = 0; r < NR; r++) {
                __m512i y = _mm512_loadu_si512((const void *)(a[r][b].q + 64 * c));
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(u, y), s);
            }
        }
        __m256i mins = k4_mins16(&kw);
        float dw = h2f_avx2(rd16(blk)), dm = h2f_avx2(rd16(blk + 2));
        if (NR == 8) { /* lane r of each vector: row r's scalar steps below */
            __m256i t[8], tm[8];
            UNROLL for (int r = 0; r < 8; r++) {
                t[r] = fold512(isum[r]);
                tm[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), mins);
            }
            __m256 ad = act_d8(a, b);
            accv = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw), ad), _mm256_cvtepi32_ps(hsum_rows8(t)), accv);
            accmv = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dm), ad), _mm256_cvtepi32_ps(hsum_rows8(tm)), accmv);
            continue;
        }
        if (NR == 4) { /* the same with 4-lane vectors */
            __m256i t[4], tm[4];
            UNROLL for (int r = 0; r < 4; r++) {
                t[r] = fold512(isum[r]);
                tm[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), mins);
            }
            __m128 ad = act_d4(a, b);
            accv4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), ad), _mm_cvtepi32_ps(hsum_rows4(t)), accv4);
            accmv4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dm), ad), _mm_cvtepi32_ps(hsum_rows4(tm)), accmv4);
            continue;
        }
        UNROLL for (int r = 0; r < NR; r++) {
            int imin = bsum_dot_avx2(a[r][b].bsums, mins);
            acc[r] = fmaf(dw * a[r][b].d, (float)_mm512_reduce_add_epi32(isum[r]), acc[r]);
            accm[r] = fmaf(dm * a[r][b].d, (float)imin, accm[r]);
        }
    }
    if (NR == 8) {
        _mm256_storeu_ps(out, _mm256_sub_ps(accv, accmv));
        return;
    }
    if (NR == 4) {
        _mm_storeu_ps(out, _mm_sub_ps(accv4, accmv4));
        return;
    }
    UNROLL for (int r = 0; r < NR; r++)
        out[r] = acc[r] - accm[r];
}

AVX512 static FORCE_INLINE void q6k_rows_avx512(int k, const uint8_t *w, const struct act256 *const *a,
                                                 float *out, const int NR)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    float acc[8] = {0};
    __m256 accv = _mm256_setzero_ps(); /* NR == 8: lane r = acc[r] */
    __m128 accv4 = _mm_setzero_ps(); /* NR == 4 */
    for (int b = 0; b < k / GGML_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * sizeof(struct quant_block_q6_k);
        const uint8_t *ql = blk, *qhp = blk + 128;
        const int8_t *scales = (const int8_t *)(blk + 192);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)scales));
        __m512i isum[8];
        UNROLL for (int r = 0; r < NR; r++)
            isum[r] = _mm512_setzero_si512();
        UNROLL for (int h = 0; h < 2; h++) {
            /* quarters 0|1 from (l0 | l1) and qh bits 0-1 | 2-3; 2|3 from
             * their high nibbles and qh bits 4-5 | 6-7 */
            __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * h));
            __m256i h8 = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m512i qh = join256(h8, _mm256_srli_epi16(h8, 2));
            __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
            __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m2), 4));
            __m512i s01 = spread16(sc16, idx_quarters(8 * h)), s23 = spread16(sc16, idx_quarters(8 * h + 4));
            UNROLL for (int r = 0; r < NR; r++) {
                const int8_t *y = a[r][b].q + 128 * h;
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(q01, _mm512_loadu_si512((const void *)y)), s01);
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(q23, _mm512_loadu_si512((const void *)(y + 64))), s23);
            }
        }
        float dw = h2f_avx2(rd16(blk + 208));
        if (NR == 8) { /* lane r: row r's scalar steps below */
            __m256i t[8], tc[8];
            UNROLL for (int r = 0; r < 8; r++) {
                t[r] = fold512(isum[r]);
                tc[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), sc16);
            }
            __m256i total = _mm256_sub_epi32(hsum_rows8(t), _mm256_slli_epi32(hsum_rows8(tc), 5));
            accv = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw), act_d8(a, b)), _mm256_cvtepi32_ps(total), accv);
            continue;
        }
        if (NR == 4) { /* the same with 4-lane vectors */
            __m256i t[4], tc[4];
            UNROLL for (int r = 0; r < 4; r++) {
                t[r] = fold512(isum[r]);
                tc[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), sc16);
            }
            __m128i total = _mm_sub_epi32(hsum_rows4(t), _mm_slli_epi32(hsum_rows4(tc), 5));
            accv4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), act_d4(a, b)), _mm_cvtepi32_ps(total), accv4);
            continue;
        }
        UNROLL for (int r = 0; r < NR; r++) {
            int total = _mm512_reduce_add_epi32(isum[r]) - 32 * bsum_dot_avx2(a[r][b].bsums, sc16);
            acc[r] = fmaf(dw * a[r][b].d, (float)total, acc[r]);
        }
    }
    if (NR == 8) {
        _mm256_storeu_ps(out, accv);
        return;
    }
    if (NR == 4) {
        _mm_storeu_ps(out, accv4);
        return;
    }
    UNROLL for (int r = 0; r < NR; r++)
        out[r] = acc[r];
}

#define Q4K_512(k, w, a, o, nr) q45k_rows_avx512(k, w, a, o, nr, 0)
#define Q5K_512(k, w, a, o, nr) q45k_rows_avx512(k, w, a, o, nr, 1)
#define Q6K_512(k, w, a, o, nr) q6k_rows_avx512(k, w, a, o, nr)
KQ_PAIR(AVX512, dot_q4_k_avx512, dot4_q4_k_avx512, Q4K_512)
KQ_PAIR(AVX512, dot_q5_k_avx512, dot4_q5_k_avx512, Q5K_512)
KQ_PAIR(AVX512, dot_q6_k_avx512, dot4_q6_k_avx512, Q6K_512)

/* Eight rows (a dot4_fn reading a[0..7]): 32 zmm registers hold the eight
 * accumulators, so the weight unpacking is shared by twice as many rows. */
#define KQ_8(n8, CALL)                                                                        \
    AVX512 static void n8(int k, const uint8_t *w, const void *const *av, float *out)         \
    {                                                                                         \
        const struct act256 *a[8];                                                            \
        for (int r = 0; r < 8; r++)                                                           \
            a[r] = av[r];                                                                     \
        CALL(k, w, a, out, 8);                                                                \
    }
KQ_8(dot8_q4_k_avx512, Q4K_512)
KQ_8(dot8_q5_k_avx512, Q5K_512)
KQ_8(dot8_q6_k_avx512, Q6K_512)

/* ---- K-quants, AVX-512 VNNI: 4 weight rows x 16 activation rows, row-transposed activations
 *
 * The kernels above put 64 weights of one row in a register and need, per
 * (weight row, activation row, super-block), a 16-lane horizontal sum, the
 * bsums dot and its sum, and the fmas (the "tail"): about as many
 * instructions as the maddubs + vpdpwssd pairs of the inner products, and
 * the pair itself is two instructions per 64 products where vpdpbusd is
 * one. This tile turns the product around, as GEMM microkernels do: the
 * activations of 16 rows are stored transposed (struct act256t: per group
 * of 4 positions, 16 rows x 4 bytes = one register, q + 128), the weights
 * are unpacked once per super-block to bytes on the stack, and lane r of
 * one vpdpbusd (activations as the unsigned operand, 4 weight bytes
 * broadcast from memory as the signed one - K-quant values are 0..63)
 * accumulates row r's products: 64 products per instruction, every lane
 * useful, no horizontal sums. Per sub-block of 32 (Q6_K: 16) positions the
 * 16 row sums P are multiplied by the sub-block scale (vpmulld) and added;
 * the +128 of the activations adds 128 * sum_s scale_s * sum(w over s) to
 * every row: C, computed once per weight row and super-block (one vpdpbusd
 * of the weights with their scales per 64 positions) and subtracted. The
 * mins (Q4_K/Q5_K) and the -32 of Q6_K are vpdpwssd of the 16 rows' bsums
 * (stored as i16 pairs, row-major in the lanes) with the scales. All of
 * it exact: |P| <= 32 * 255 * 31 (16 * 255 * 63), the scaled sums stay
 * below 2^31 (Q6_K: 16 * 128 * 16 * 255 * 63 < 2^30). Then per row and
 * super-block the reference's float steps, 16 rows per instruction (lane r
 * = row r): acc = fma(d_w * d_a, (float)isum, acc), accm likewise, acc -
 * accm. Registers: 4 x (P, isum, acc, accm) + the activation register. */

/* One weight row's super-block: the values (0..63) as bytes in position
 * order into wb[256], the scale of each i32 dword-broadcastable sub-block
 * (Q4_K/Q5_K: 8 of 32 positions; Q6_K: 16 of 16) into sc[], the i16 pairs
 * the bsums pairs are multiplied by into pr[8] (Q4_K/Q5_K: (min_p, min_p);
 * Q6_K: (scale_2p, scale_2p+1)), the correction C, d and dmin. */
AVX512 static FORCE_INLINE int kq_unpack_t(int type, const uint8_t *blk, uint8_t *wb, int32_t *sc,
                                           int32_t *pr, float *dw, float *dm)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i cacc = _mm512_setzero_si512();
    if (type == GGML_TYPE_Q6_K) {
        const __m512i m2 = _mm512_set1_epi8(3);
        const uint8_t *ql = blk, *qhp = blk + 128;
        __m128i s8 = _mm_loadu_si128((const __m128i *)(blk + 192));
        _mm512_storeu_si512((void *)sc, _mm512_cvtepi8_epi32(s8));
        _mm256_storeu_si256((__m256i *)(void *)pr, _mm256_cvtepi8_epi16(s8));
        __m512i sb = _mm512_broadcast_i32x4(s8);
        UNROLL for (int h = 0; h < 2; h++) {
            __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * h));
            __m256i h8 = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m512i qh = join256(h8, _mm256_srli_epi16(h8, 2));
            __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
            __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m2), 4));
            _mm512_store_si512((void *)(wb + 128 * h), q01);
            _mm512_store_si512((void *)(wb + 128 * h + 64), q23);
            /* 128-bit lane L of chunk 2h + u holds group 8h + 4u + L: its scale in every byte */
            UNROLL for (int u = 0; u < 2; u++) {
                int g0 = 8 * h + 4 * u;
                __m512i idx = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi8((char)(g0 + 1)), _mm_set1_epi8((char)g0))),
                    _mm256_set_m128i(_mm_set1_epi8((char)(g0 + 3)), _mm_set1_epi8((char)(g0 + 2))), 1);
                cacc = _mm512_dpbusd_epi32(cacc, u ? q23 : q01, _mm512_shuffle_epi8(sb, idx));
            }
        }
        *dw = h2f_avx2(rd16(blk + 208));
        *dm = 0.0f;
    } else {
        const int q5 = type == GGML_TYPE_Q5_K;
        struct k4_words kw = k4_scale_words(blk + 4);
        __m128i s8 = _mm_cvtsi64_si128((long long)(kw.sc[0] | (uint64_t)kw.sc[1] << 32));
        __m128i m8 = _mm_cvtsi64_si128((long long)(kw.mn[0] | (uint64_t)kw.mn[1] << 32));
        _mm256_storeu_si256((__m256i *)(void *)sc, _mm256_cvtepu8_epi32(s8));
        __m256i m32 = _mm256_cvtepu8_epi32(m8);
        _mm256_storeu_si256((__m256i *)(void *)pr, _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16)));
        __m512i sb = _mm512_broadcast_i32x4(s8);
        const uint8_t *qs = blk + (q5 ? 48 : 16);
        __m512i qh = _mm512_setzero_si512();
        if (q5) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 16));
            qh = join256(h, _mm256_srli_epi16(h, 1));
        }
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m512i u = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), m4);
            if (q5) {
                u = _mm512_or_si512(u, _mm512_slli_epi16(_mm512_and_si512(qh, _mm512_set1_epi8(1)), 4));
                qh = _mm512_srli_epi16(qh, 2);
            }
            _mm512_store_si512((void *)(wb + 64 * c), u);
            /* bytes 0-31: scale 2c, 32-63: scale 2c + 1 */
            __m512i idx = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 * c)), _mm256_set1_epi8((char)(2 * c + 1)), 1);
            cacc = _mm512_dpbusd_epi32(cacc, u, _mm512_shuffle_epi8(sb, idx));
        }
        *dw = h2f_avx2(rd16(blk));
        *dm = h2f_avx2(rd16(blk + 2));
    }
    return 128 * _mm512_reduce_add_epi32(cacc);
}

/* The integer work of one super-block: NW (1..4) unpacked weight rows
 * (wb, sc, pr, corr) x NA (1, 2) act256t groups t[0..NA-1]; the float steps
 * into acc/accm [c][g0 + g] (lane r: row 16 g + r of these groups). */
AVX512 static FORCE_INLINE void kq_t_groups(int q6, const uint8_t (*wb)[GGML_QK_K], const int32_t (*sc)[16],
                                            const int32_t (*pr)[8], const int32_t *corr, const float *dw,
                                            const float *dm, const struct act256t *const *t,
                                            float (*acc)[4][16], float (*accm)[4][16], int g0,
                                            const int NW, const int NA)
{
    const int n_sub = q6 ? 16 : 8, per_sub = q6 ? 4 : 8; /* sub-blocks; 4-position groups in one */
    __m512i isum[4][2];
    UNROLL for (int c = 0; c < NW; c++)
        UNROLL for (int g = 0; g < NA; g++)
            isum[c][g] = _mm512_setzero_si512();
    for (int s = 0; s < n_sub; s++) {
        __m512i P[4][2];
        UNROLL for (int c = 0; c < NW; c++)
            UNROLL for (int g = 0; g < NA; g++)
                P[c][g] = _mm512_setzero_si512();
        UNROLL for (int jj = 0; jj < 8; jj++) {
            if (jj >= per_sub)
                break;
            int j = s * per_sub + jj;
            __m512i A[2];
            UNROLL for (int g = 0; g < NA; g++)
                A[g] = _mm512_load_si512((const void *)t[g]->q[j]);
            UNROLL for (int c = 0; c < NW; c++) {
                int32_t w4;
                memcpy(&w4, wb[c] + 4 * j, sizeof w4);
                __m512i wv = _mm512_set1_epi32(w4);
                UNROLL for (int g = 0; g < NA; g++)
                    P[c][g] = _mm512_dpbusd_epi32(P[c][g], A[g], wv);
            }
        }
        UNROLL for (int c = 0; c < NW; c++) {
            __m512i scv = _mm512_set1_epi32(sc[c][s]);
            UNROLL for (int g = 0; g < NA; g++)
                isum[c][g] = _mm512_add_epi32(isum[c][g], _mm512_mullo_epi32(P[c][g], scv));
        }
    }
    UNROLL for (int g = 0; g < NA; g++) {
        __m512 da = _mm512_load_ps(t[g]->d);
        UNROLL for (int c = 0; c < NW; c++) {
            __m512i mm = _mm512_setzero_si512();
            UNROLL for (int p = 0; p < 8; p++)
                mm = _mm512_dpwssd_epi32(mm, _mm512_load_si512((const void *)t[g]->bs[p]), _mm512_set1_epi32(pr[c][p]));
            __m512i total = _mm512_sub_epi32(isum[c][g], _mm512_set1_epi32(corr[c]));
            if (q6)
                total = _mm512_sub_epi32(total, _mm512_slli_epi32(mm, 5));
            _mm512_store_ps(acc[c][g0 + g], _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[c]), da),
                                                            _mm512_cvtepi32_ps(total), _mm512_load_ps(acc[c][g0 + g])));
            if (!q6)
                _mm512_store_ps(accm[c][g0 + g], _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dm[c]), da),
                                                                 _mm512_cvtepi32_ps(mm), _mm512_load_ps(accm[c][g0 + g])));
        }
    }
}

/* NW (1..4) weight rows from w (stride wrb) x ng (1..4) act256t groups of
 * 16 rows (at, each next one ga structs later), two groups at a time per
 * unpacked super-block; out[r * os + c] for the first nr (<= 16 ng) rows. */
AVX512 static FORCE_INLINE void kq_t_tile(int type, int k, const uint8_t *w, size_t wrb,
                                          const struct act256t *at, size_t ga, int ng, int nr, float *out,
                                          size_t os, const int NW)
{
    const int q6 = type == GGML_TYPE_Q6_K;
    const size_t bs = type == GGML_TYPE_Q4_K ? sizeof(struct quant_block_q4_k)
                    : type == GGML_TYPE_Q5_K ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q6_k);
    _Alignas(64) uint8_t wb[4][GGML_QK_K];
    _Alignas(64) int32_t sc[4][16], pr[4][8];
    _Alignas(64) float acc[4][4][16], accm[4][4][16]; /* lane r of [c][g]: row 16 g + r */
    int32_t corr[4];
    float dw[4], dm[4];
    UNROLL for (int c = 0; c < NW; c++)
        for (int g = 0; g < ng; g++) {
            _mm512_store_ps(acc[c][g], _mm512_setzero_ps());
            _mm512_store_ps(accm[c][g], _mm512_setzero_ps());
        }
    for (int b = 0; b < k / GGML_QK_K; b++) {
        UNROLL for (int c = 0; c < NW; c++)
            corr[c] = kq_unpack_t(type, w + (size_t)c * wrb + (size_t)b * bs, wb[c], sc[c], pr[c], &dw[c], &dm[c]);
        int g = 0;
        for (; g + 2 <= ng; g += 2) {
            const struct act256t *t[2] = {at + (size_t)g * ga + b, at + (size_t)(g + 1) * ga + b};
            kq_t_groups(q6, (const uint8_t(*)[GGML_QK_K])wb, (const int32_t(*)[16])sc, (const int32_t(*)[8])pr,
                        corr, dw, dm, t, acc, accm, g, NW, 2);
        }
        if (g < ng) {
            const struct act256t *t[2] = {at + (size_t)g * ga + b, NULL};
            kq_t_groups(q6, (const uint8_t(*)[GGML_QK_K])wb, (const int32_t(*)[16])sc, (const int32_t(*)[8])pr,
                        corr, dw, dm, t, acc, accm, g, NW, 1);
        }
    }
    UNROLL for (int c = 0; c < NW; c++)
        for (int g = 0; g < ng; g++) {
            float o[16];
            __m512 v = _mm512_load_ps(acc[c][g]);
            _mm512_storeu_ps(o, q6 ? v : _mm512_sub_ps(v, _mm512_load_ps(accm[c][g])));
            for (int r = 0; r < 16 && 16 * g + r < nr; r++)
                out[(size_t)(16 * g + r) * os + (size_t)c] = o[r];
        }
}

#define KT_KERNEL(name, T)                                                                        \
    AVX512 static void name(int k, const uint8_t *w0, size_t wrb, int nc, const struct act256t *at, \
                            size_t ga, int na, int nr, float *out, size_t os)                     \
    {                                                                                             \
        int c = 0;                                                                                \
        for (; c + 4 <= nc; c += 4)                                                               \
            kq_t_tile(T, k, w0 + (size_t)c * wrb, wrb, at, ga, na, nr, out + c, os, 4);           \
        for (; c < nc; c++)                                                                       \
            kq_t_tile(T, k, w0 + (size_t)c * wrb, wrb, at, ga, na, nr, out + c, os, 1);           \
    }
KT_KERNEL(dott_q4_k, GGML_TYPE_Q4_K)
KT_KERNEL(dott_q5_k, GGML_TYPE_Q5_K)
KT_KERNEL(dott_q6_k, GGML_TYPE_Q6_K)

/* quant_act256_row of one super-block with 16-lane vectors, bit for bit (as
 * quant_block32_avx2: NaN lanes skipped by the max and quantized to 0,
 * rounding to nearest even, the clamp to [-127, 127]), written as row r of
 * act256t t: q + 128 transposed, the 16 bsums (from vpsadbw of the u8
 * values: sums of 8, minus 8 * 128), d. */
AVX512 static void quant_sb_t_avx512(const float *x, struct act256t *t, int r)
{
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < 16; i++) {
        __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + 16 * i));
        mx = _mm512_max_ps(mx, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a));
    }
    float amax = _mm512_reduce_max_ps(mx);
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    /* 64 dwords j apart by 64 bytes: row r's 4 bytes of group j at q[j][4 r] */
    const __m512i sidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(64));
    uint64_t sads[32];
    for (int z = 0; z < 4; z++) { /* 64 values: 4 groups of 16 */
        __m128i b16[4];
        for (int g = 0; g < 4; g++) {
            __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 64 * z + 16 * g), vid),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
            b16[g] = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi)));
        }
        __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b16[1], b16[0])),
                                       _mm256_set_m128i(b16[3], b16[2]), 1);
        u = _mm512_xor_si512(u, _mm512_set1_epi8((char)0x80));
        _mm512_i32scatter_epi32((void *)(t->q[16 * z] + 4 * r), sidx, u, 1);
        _mm512_storeu_si512((void *)(sads + 8 * z), _mm512_sad_epu8(u, _mm512_setzero_si512()));
    }
    for (int g = 0; g < 16; g++)
        t->bs[g / 2][2 * r + g % 2] = (int16_t)((int)(sads[2 * g] + sads[2 * g + 1]) - 16 * 128);
    t->d[r] = d;
}

/* quant_act256_row for a group of 16 rows into act256t, one super-block at
 * a time (the same numbers, transposed). */
AVX512 static void quant_act256t_group(const float *x, size_t ldx, int k, struct act256t *out)
{
    for (int b = 0; b < k / GGML_QK_K; b++)
        for (int r = 0; r < 16; r++)
            quant_sb_t_avx512(x + (size_t)r * ldx + (size_t)b * GGML_QK_K, out + b, r);
}

/* ---- AVX-512 VNNI: the 32-value types ---------------------------------------------------
 *
 * The tile of matq_x32v.h on 512-bit vectors: 16 weight rows (lane l = row
 * l) x up to TILE_N activation rows of the ACT_32V layout. Per weight block
 * the 16 rows are unpacked two at a time (rows i and i + 8 in one
 * register) to u = w + bias and transposed, so that W[j] lane l holds the
 * four values 4j..4j+3 of row l; the scales (and offsets) of the 16 rows
 * are one gather. Per activation row: vpdpbusd x 8 (the row's 4 bytes
 * broadcast) from -bias * sum(q), convert, and one fma with d_w * d_a -
 * the reference's steps, lane by lane, no horizontal work. */

/* tr16x8_avx2 for 16 rows: T[d] dword l = dword d of row l's 16 bytes at
 * p[l] + o (4 x 4 transposes within the 128-bit lanes of [row i | i + 4 |
 * i + 8 | i + 12]). */
AVX512 static FORCE_INLINE void tr16x16(const uint8_t *const *p, size_t o, __m512i T[4])
{
    __m512i y[4];
    UNROLL for (int i = 0; i < 4; i++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[i] + o)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[i + 4] + o)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[i + 8] + o)), 2);
        y[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[i + 12] + o)), 3);
    }
    __m512i t0 = _mm512_unpacklo_epi32(y[0], y[1]), t1 = _mm512_unpackhi_epi32(y[0], y[1]);
    __m512i t2 = _mm512_unpacklo_epi32(y[2], y[3]), t3 = _mm512_unpackhi_epi32(y[2], y[3]);
    T[0] = _mm512_unpacklo_epi64(t0, t2);
    T[1] = _mm512_unpackhi_epi64(t0, t2);
    T[2] = _mm512_unpacklo_epi64(t1, t3);
    T[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* wtile8_avx2 for 16 rows: W[j] dword l = values 4j..4j+3 of row l of
 * block boff, as u = w + bias. */
AVX512 static FORCE_INLINE void wtile16(int type, const uint8_t *const *p, size_t boff, const uint8_t *base,
                                        __m512i vidx, __m512i W[8])
{
    const struct x32_fmt f = x32_fmt(type);
    const uint8_t *q[16];
    UNROLL for (int l = 0; l < 16; l++)
        q[l] = p[l] + boff;
    if (type == GGML_TYPE_Q8_0) { /* [row i | row i + 8], an 8 x 8 transpose in each 256-bit half */
        __m512i z[8], t[8], u[8];
        UNROLL for (int i = 0; i < 8; i++)
            z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q[i] + f.qs))),
                                      _mm256_loadu_si256((const __m256i *)(q[i + 8] + f.qs)), 1);
        UNROLL for (int i = 0; i < 4; i++) {
            t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
        }
        UNROLL for (int h = 0; h < 2; h++) { /* u[4h + c], lane L: dword 4 (L & 1) + c of 4 rows */
            u[4 * h] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
            u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
            u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
            u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
        }
        const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        UNROLL for (int c = 0; c < 4; c++) {
            W[c] = _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], lo, u[4 + c]), _mm512_set1_epi8((char)0x80));
            W[4 + c] = _mm512_xor_si512(_mm512_permutex2var_epi64(u[c], hi, u[4 + c]), _mm512_set1_epi8((char)0x80));
        }
        return;
    }
    __m512i T[4];
    tr16x16(q, f.qs, T);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int j = 0; j < 4; j++) {
        W[j] = _mm512_and_si512(T[j], m4);
        W[4 + j] = _mm512_and_si512(_mm512_srli_epi16(T[j], 4), m4);
    }
    if (f.qh) {
        __m512i H = _mm512_i32gather_epi32(vidx, (const void *)(base + boff + f.qh), 1);
        UNROLL for (int j = 0; j < 8; j++) { /* byte i of dword l: bit 4j + i of row l's 32 */
            __m512i sh = _mm512_broadcast_i32x4(q5_byte_index(j));
            __m512i bit = _mm512_set1_epi32(j & 1 ? (int)0x80402010 : 0x08040201);
            __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(H, sh), bit);
            W[j] = _mm512_mask_add_epi8(W[j], set, W[j], _mm512_set1_epi8(0x10));
        }
    }
}

/* nc (1..16) weight rows from w (stride wrb) x nr activation rows (stride
 * arow; the side floats of row r's group at side + (r / 8) * sgrp):
 * out[r * os + c]. */
AVX512 static FORCE_INLINE void x32w_strip(int type, int k, const uint8_t *w, size_t wrb, int nc,
                                           const uint8_t *act, size_t arow, const float *side, size_t sgrp,
                                           int nr, float *out, size_t os, float (*acc)[16], float (*accm)[16])
{
    const size_t bs = x32_fmt(type).bs;
    const int off = has_offset32(type), nb = k / GGML_QK, nbb = 8 * nb, bias = x32_fmt(type).bias;
    const uint8_t *rows[16];
    int32_t vi[16];
    strip_rows(w, wrb, nc, 16, rows, vi);
    const __m512i vidx = _mm512_loadu_si512((const void *)vi);
    for (int r = 0; r < nr; r++) {
        _mm512_store_ps(acc[r], _mm512_setzero_ps());
        _mm512_store_ps(accm[r], _mm512_setzero_ps());
    }
    for (int b = 0; b < nb; b++) {
        const size_t boff = (size_t)b * bs;
        __m512i W[8];
        /* the next strip (16 rows, contiguous) streams in while this one runs:
         * its share of one block's worth of lines per block */
        for (size_t z = 0; z < 16 * bs; z += 64)
            _mm_prefetch((const char *)(w + 16 * wrb + 16 * boff + z), _MM_HINT_T0);
        wtile16(type, rows, boff, w, vidx, W);
        __m512i g = _mm512_i32gather_epi32(vidx, (const void *)(w + boff), 1);
        __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
        __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
        for (int r = 0; r < nr; r++) {
            const uint8_t *a = act + (size_t)r * arow + 32 * (size_t)b;
            const float *sd = side + (size_t)(r / 8) * sgrp + r % 8 + 8 * (size_t)b;
            int32_t sq;
            memcpy(&sq, sd + 2 * nbb, sizeof sq);
            __m512i P = _mm512_set1_epi32(-bias * sq);
            UNROLL for (int j = 0; j < 8; j++) {
                int32_t a4;
                memcpy(&a4, a + 4 * j, sizeof a4);
                P = _mm512_dpbusd_epi32(P, W[j], _mm512_set1_epi32(a4));
            }
            __m512 dv = _mm512_mul_ps(dw, _mm512_set1_ps(sd[0]));
            _mm512_store_ps(acc[r], _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(P), _mm512_load_ps(acc[r])));
            if (off)
                _mm512_store_ps(accm[r], _mm512_fmadd_ps(mw, _mm512_set1_ps(sd[nbb]), _mm512_load_ps(accm[r])));
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nc) - 1);
    for (int r = 0; r < nr; r++) {
        __m512 v = _mm512_load_ps(acc[r]);
        if (off)
            v = _mm512_add_ps(v, _mm512_load_ps(accm[r]));
        _mm512_mask_storeu_ps(out + (size_t)r * os, keep, v);
    }
}

/* nc weight rows x nr (<= TILE_N) activation rows of the ACT_32V layout
 * (rows from act, stride arow; the side floats of row r's group of 8 at
 * side + (r / 8) * sgrp): out[r * os + c]. The AVX2 tiles of matq_x32v.h
 * have the same signature. */
typedef void (*dotu_fn)(int k, const uint8_t *w0, size_t wrb, int nc, const uint8_t *act, size_t arow,
                        const float *side, size_t sgrp, int nr, float *out, size_t os);

#define XW_KERNEL(name, T)                                                                                 \
    AVX512 static void name(int k, const uint8_t *w0, size_t wrb, int nc, const uint8_t *act, size_t arow,  \
                            const float *side, size_t sgrp, int nr, float *out, size_t os)                  \
    {                                                                                                      \
        _Alignas(64) float acc[TILE_N][16], accm[TILE_N][16];                                              \
        for (int c = 0; c < nc; c += 16)                                                                   \
            x32w_strip(T, k, w0 + (size_t)c * wrb, wrb, nc - c < 16 ? nc - c : 16, act, arow, side, sgrp, nr, \
                       out + c, os, acc, accm);                                                            \
    }

XW_KERNEL(dotu_q4_0, GGML_TYPE_Q4_0)
XW_KERNEL(dotu_q5_0, GGML_TYPE_Q5_0)
XW_KERNEL(dotu_q8_0, GGML_TYPE_Q8_0)
XW_KERNEL(dotu_q4_1, GGML_TYPE_Q4_1)
XW_KERNEL(dotu_q5_1, GGML_TYPE_Q5_1)
#undef XW_KERNEL

/* AVX-VNNI (CPUID.(7,1):EAX bit 4), unless KN_NO_VNNI is set (to run the
 * plain AVX2 kernels: the results are the same bits either way). */
static int cpu_has_vnni(void)
{
    static atomic_int cached = -1;
    int v = atomic_load(&cached);
    if (v >= 0)
        return v;
    unsigned a = 0, b, c, d;
    v = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) && !getenv("KN_NO_VNNI");
    atomic_store(&cached, v);
    return v;
}
#endif /* MATQ_X86 */

/* ---- driver ------------------------------------------------------------------------------ */

/* ACT_32V (AVX2 and AVX-512, the 32-value types): 32 signed bytes per row
 * and block, rows in groups of 8, then per group the scales, offsets and
 * sums of q (matq_x32v.h). */
enum act_kind { ACT_NONE, ACT_32, ACT_256, ACT_32V };
#define ACT_32V_SIDE 24 /* floats per block and group of 8 rows: 8 scales, 8 offsets, 8 sums */

#if !MATQ_X86
typedef void (*dotu_fn)(int k, const uint8_t *w0, size_t wrb, int nc, const uint8_t *act, size_t arow,
                        const float *side, size_t sgrp, int nr, float *out, size_t os);
#endif

/* Kernel and activation format of a weight type; 0 or ERR_UNSUPPORTED.
 * dotu (may be NULL): the tile kernel of the ACT_32V layout. */
static int pick(int type, int level, dot_fn *dot, dot4_fn *dot4, dotu_fn *dotu, enum act_kind *act)
{
    dotu_fn vu = NULL;
    dot_fn s = NULL, v = NULL;
    dot4_fn v4 = NULL;
    enum act_kind ak = ACT_32;
    switch (type) {
#if MATQ_X86
#define K(T, S, V, V4, A) case T: s = S; v = V; v4 = V4; ak = A; break;
#else
#define K(T, S, V, V4, A) case T: s = S; ak = A; break;
#endif
    K(GGML_TYPE_F32, dot_f32_s, dot_f32_avx2, NULL, ACT_NONE)
    K(GGML_TYPE_F16, dot_f16_s, dot_f16_avx2, NULL, ACT_NONE)
    K(GGML_TYPE_BF16, dot_bf16_s, dot_bf16_avx2, NULL, ACT_NONE)
    K(GGML_TYPE_Q4_0, dot_q4_0_s, NULL, NULL, ACT_32)
    K(GGML_TYPE_Q4_1, dot_q4_1_s, NULL, NULL, ACT_32)
    K(GGML_TYPE_Q5_0, dot_q5_0_s, NULL, NULL, ACT_32)
    K(GGML_TYPE_Q5_1, dot_q5_1_s, NULL, NULL, ACT_32)
    K(GGML_TYPE_Q8_0, dot_q8_0_s, NULL, NULL, ACT_32)
    K(GGML_TYPE_Q4_K, dot_q4_k_s, dot_q4_k_avx2, dot4_q4_k_avx2, ACT_256)
    K(GGML_TYPE_Q5_K, dot_q5_k_s, dot_q5_k_avx2, dot4_q5_k_avx2, ACT_256)
    K(GGML_TYPE_Q6_K, dot_q6_k_s, dot_q6_k_avx2, dot4_q6_k_avx2, ACT_256)
#undef K
    default: return ERR_UNSUPPORTED;
    }
    /* the 32-value types at a SIMD level: the tile kernels (dotu) compute
     * every output, dot stays the scalar one (unused) */
    int simd = level >= KN_SIMD_AVX2 && (v || (MATQ_X86 && ak == ACT_32));
#if MATQ_X86
    if (simd && ak == ACT_256 && level == KN_SIMD_AVX2 && cpu_has_vnni()) {
        switch (type) {
        case GGML_TYPE_Q4_K: v = dot_q4_k_vnni; v4 = dot4_q4_k_vnni; break;
        case GGML_TYPE_Q5_K: v = dot_q5_k_vnni; v4 = dot4_q5_k_vnni; break;
        default: v = dot_q6_k_vnni; v4 = dot4_q6_k_vnni; break;
        }
    }
    if (simd && ak == ACT_256 && level >= KN_SIMD_AVX512) {
        switch (type) {
        case GGML_TYPE_Q4_K: v = dot_q4_k_avx512; v4 = dot4_q4_k_avx512; break;
        case GGML_TYPE_Q5_K: v = dot_q5_k_avx512; v4 = dot4_q5_k_avx512; break;
        default: v = dot_q6_k_avx512; v4 = dot4_q6_k_avx512; break;
        }
    }
    if (simd && ak == ACT_32 && level >= KN_SIMD_AVX512) {
        switch (type) {
        case GGML_TYPE_Q4_0: vu = dotu_q4_0; break;
        case GGML_TYPE_Q4_1: vu = dotu_q4_1; break;
        case GGML_TYPE_Q5_0: vu = dotu_q5_0; break;
        case GGML_TYPE_Q5_1: vu = dotu_q5_1; break;
        default: vu = dotu_q8_0; break;
        }
        ak = ACT_32V;
    }
    if (simd && ak == ACT_32 && level == KN_SIMD_AVX2) {
        int vn = cpu_has_vnni();
        switch (type) {
        case GGML_TYPE_Q4_0: vu = vn ? dotv_q4_0_vnni : dotv_q4_0_avx2; break;
        case GGML_TYPE_Q4_1: vu = vn ? dotv_q4_1_vnni : dotv_q4_1_avx2; break;
        case GGML_TYPE_Q5_0: vu = vn ? dotv_q5_0_vnni : dotv_q5_0_avx2; break;
        case GGML_TYPE_Q5_1: vu = vn ? dotv_q5_1_vnni : dotv_q5_1_avx2; break;
        default: vu = vn ? dotv_q8_0_vnni : dotv_q8_0_avx2; break;
        }
        ak = ACT_32V;
    }
#endif
    *dot = simd && v ? v : s;
    *dot4 = simd ? v4 : NULL;
    if (dotu)
        *dotu = vu;
    *act = ak;
    return 0;
}

/* The 8-row kernel of a weight type at a level (same signature as dot4_fn,
 * reading eight rows), or NULL: the K-quants at AVX-512, and at AVX2 with
 * AVX-VNNI (the plain AVX2 form spills at 8 rows: matq_kq2.h). */
static dot4_fn pick8(int type, int level)
{
#if MATQ_X86
    if (level >= KN_SIMD_AVX512)
        switch (type) {
        case GGML_TYPE_Q4_K: return dot8_q4_k_avx512;
        case GGML_TYPE_Q5_K: return dot8_q5_k_avx512;
        case GGML_TYPE_Q6_K: return dot8_q6_k_avx512;
        default: break;
        }
    if (level == KN_SIMD_AVX2 && cpu_has_vnni())
        switch (type) {
        case GGML_TYPE_Q4_K: return dot8_q4_k_vnni;
        case GGML_TYPE_Q5_K: return dot8_q5_k_vnni;
        case GGML_TYPE_Q6_K: return dot8_q6_k_vnni;
        default: break;
        }
#else
    (void)type;
    (void)level;
#endif
    return NULL;
}

#if MATQ_X86
/* The act256t tile of a weight type at a level, or NULL: the K-quants at
 * AVX-512, and at AVX2 with AVX-VNNI (used for the whole groups of 16 rows
 * of a call). */
static dott_fn pickt(int type, int level)
{
    if (level < KN_SIMD_AVX2 || (level == KN_SIMD_AVX2 && !cpu_has_vnni()))
        return NULL;
    int z = level >= KN_SIMD_AVX512;
    switch (type) {
    case GGML_TYPE_Q4_K: return z ? dott_q4_k : dott_q4_k_vnni;
    case GGML_TYPE_Q5_K: return z ? dott_q5_k : dott_q5_k_vnni;
    case GGML_TYPE_Q6_K: return z ? dott_q6_k : dott_q6_k_vnni;
    default: return NULL;
    }
}

/* Rows of a call in act256t groups: whole groups of 16 from row 0 where a
 * K-quant has a tile for them (pickt), else 0 (below 16 rows the other
 * kernels run every row). */
static int act_rows_t(int n, int level)
{
    return pickt(GGML_TYPE_Q4_K, level) ? n / 16 * 16 : 0;
}
#endif

/* Bytes of one quantized activation row; 0 for ACT_NONE. */
static size_t act_row_bytes(enum act_kind ak, int k)
{
    switch (ak) {
    case ACT_32: return (size_t)(k / GGML_QK) * sizeof(struct act32);
    case ACT_32V: return (size_t)(k / GGML_QK) * 32;
    case ACT_256: return (size_t)(k / GGML_QK_K) * sizeof(struct act256);
    default: return 0;
    }
}

/* Validate the arguments that need no pointers; fills dot/act/row bytes. */
static int check_args(int n, int k, int w_type, int m, int level, dot_fn *dot, dot4_fn *dot4,
                      dotu_fn *dotu, enum act_kind *ak, size_t *w_row_bytes)
{
    int rc = pick(w_type, level, dot, dot4, dotu, ak);
    if (rc)
        return rc;
    int64_t rb;
    if (n < 0 || m < 0 || k <= 0)
        return ERR_INVAL;
    rc = ggml_type_row_bytes((uint32_t)w_type, k, &rb);
    if (rc)
        return rc; /* ERR_INVAL: k not a multiple of the block */
    *w_row_bytes = (size_t)rb;
    return 0;
}

size_t kn_matmul_w_scratch(int n, int k, int w_type)
{
    dot_fn dot;
    dot4_fn dot4;
    enum act_kind ak;
    size_t rb;
    if (check_args(n, k, w_type, 0, KN_SIMD_SCALAR, &dot, &dot4, NULL, &ak, &rb) ||
        ak == ACT_NONE || n == 0)
        return 0;
    /* whatever the level: the 32-value types get room for the ACT_32V
     * layout (rows in groups of 8; per group 8 rows of 32 bytes per block
     * and 24 floats per block: scales, offsets, sums), which is never
     * smaller than ACT_32 */
    size_t row = act_row_bytes(ak, k), rows = (size_t)n;
    if (ak == ACT_32) {
        row = act_row_bytes(ACT_32V, k) * 8 + (size_t)(k / GGML_QK) * ACT_32V_SIDE * sizeof(float);
        rows = ((size_t)n + 7) / 8;
    }
    if (rows > (SIZE_MAX - SCRATCH_ALIGN) / row)
        return SIZE_MAX; /* cannot be provided: kn_matmul_w will say ERR_TOOBIG */
    return rows * row + SCRATCH_ALIGN;
}

/* Calls of up to 8 rows (decode) read each weight row once whatever the
 * tile, so their tiles are only the unit of work sharing: about
 * TILES_PER_THREAD per thread and matrix, TILE_M to TILE_M_DECODE rows
 * (a 16-row tile of a 576-wide matrix is ~0.5 us of work, close to the cost
 * of the shared counter's cache line moving between cores). */
#define TILE_M_DECODE 256
#define TILES_PER_THREAD 6

/* One weight matrix of a call (kn_matmul_w: one; kn_matmul_w_multi: up to
 * KN_MATMUL_MULTI_MAX sharing the quantized activations). */
struct matq_mat {
    float *out;           /* (n, m) */
    const uint8_t *w;     /* m rows of w_row_bytes */
    size_t w_row_bytes;
    int m;
    dot_fn dot;
    dot4_fn dot4;         /* NULL: no 4-row kernel */
    dot4_fn dot8;         /* NULL: no 8-row kernel; else reads a[0..7] */
    dotu_fn dotu;         /* ACT_32V: the tile kernel */
#if MATQ_X86
    dott_fn dott;         /* ACT_256 with n16 > 0: the act256t tile (AVX-512 K-quants) */
#endif
    int tile_m;           /* weight rows per tile: TILE_M, or more for n <= 8 */
    int64_t n_tiles_m, tile0; /* weight tiles per row tile; first tile of this matrix */
};

struct matq_job {
    const float *x;        /* (n, k) */
    uint8_t *act;          /* n rows of act_row bytes (quantized x), or NULL; ACT_256 with
                            * n16 > 0: n16 / 16 groups of k / 256 struct act256t first */
    uint8_t *act_tail;     /* rows n16.. (act_row bytes each): act + the groups */
    int n16;               /* ACT_256: rows in act256t groups (act_rows_t), else 0 */
    int vec_quant;         /* ACT_256: quantize with the AVX2 twin (a SIMD level) */
    int t512;              /* ACT_256, n16 > 0: the act256t groups by the AVX-512 quantizer */
    float *act_s;          /* ACT_32V: per group of 8 rows, 8 scales, then 8 offsets, then 8
                            * sums of q (int32) per block */
    size_t side_group;     /* floats of act_s per group of 8 rows */
    size_t act_row;
    int n, k;
    enum act_kind ak;
    struct matq_mat mat[KN_MATMUL_MULTI_MAX];
    int n_mat;
    int64_t n_tiles;
    atomic_llong next_tile;
};

static void quant_rows(struct matq_job *j, int r0, int r1)
{
    for (int r = r0; r < r1; r++) {
        const float *xr = j->x + (size_t)r * (size_t)j->k;
        uint8_t *dst = j->act_tail + (size_t)(r - j->n16) * j->act_row;
        if (j->ak == ACT_32)
            quant_act32_row(xr, j->k, (struct act32 *)(void *)dst);
#if MATQ_X86
        else if (j->vec_quant)
            quant_act256_row_avx2(xr, j->k, (struct act256 *)(void *)dst);
#endif
        else
            quant_act256_row(xr, j->k, (struct act256 *)(void *)dst);
    }
}

/* Rows r0..r1 (r0 a multiple of 8) into the ACT_32V layout; the scales,
 * offsets and sums of their groups are these rows' thread's too. */
static void quant_rows_v(struct matq_job *j, int r0, int r1)
{
#if MATQ_X86
    int nb = j->k / GGML_QK;
    for (int r = r0; r < r1; r++)
        quant_row_v(j->x + (size_t)r * (size_t)j->k, nb, j->act + (size_t)r * j->act_row,
                    j->act_s + (size_t)(r / 8) * j->side_group + r % 8);
#else
    (void)j;
    (void)r0;
    (void)r1;
#endif
}

static void quant_worker(void *ctx, int ith, int nth)
{
    struct matq_job *j = ctx;
    if (j->ak == ACT_32V) {
        int per = ((j->n + 7) / 8 + nth - 1) / nth * 8, r0 = ith * per;
        int r1 = r0 + per < j->n ? r0 + per : j->n;
        if (r0 < r1)
            quant_rows_v(j, r0, r1);
        return;
    }
#if MATQ_X86
    int ng = j->n16 / 16, nb = j->k / GGML_QK_K;
    for (int g = ng * ith / nth; g < ng * (ith + 1) / nth; g++)
        (j->t512 ? quant_act256t_group : quant_act256t_group_avx2)(
            j->x + (size_t)g * 16 * (size_t)j->k, (size_t)j->k, j->k,
            (struct act256t *)(void *)j->act + (size_t)g * (size_t)nb);
#endif
    int nt = j->n - j->n16, r0 = j->n16 + nt * ith / nth, r1 = j->n16 + nt * (ith + 1) / nth;
    if (r0 < r1)
        quant_rows(j, r0, r1);
}

/* Row r (>= n16) of the row-major layouts, or of x. */
static inline const void *act_row(const struct matq_job *j, int r)
{
    return j->act ? (const void *)(j->act_tail + (size_t)(r - j->n16) * j->act_row)
                  : (const void *)(j->x + (size_t)r * (size_t)j->k);
}

/* Tile t of the call: matrix, weight rows c0..c1, activation rows r0..r1.
 * Tiles run through each matrix in turn, weight tiles fastest. */
static const struct matq_mat *tile_of(const struct matq_job *j, int64_t t, int *c0, int *c1, int *r0, int *r1)
{
    int i = 0;
    while (i + 1 < j->n_mat && t >= j->mat[i + 1].tile0)
        i++;
    const struct matq_mat *mt = &j->mat[i];
    t -= mt->tile0;
    int tm = (int)(t % mt->n_tiles_m), tn = (int)(t / mt->n_tiles_m);
    *c0 = tm * mt->tile_m;
    *c1 = *c0 + mt->tile_m < mt->m ? *c0 + mt->tile_m : mt->m;
    *r0 = tn * TILE_N;
    *r1 = *r0 + TILE_N < j->n ? *r0 + TILE_N : j->n;
    return mt;
}

static void dot_worker(void *ctx, int ith, int nth)
{
    (void)ith;
    (void)nth;
    struct matq_job *j = ctx;
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&j->next_tile, 1, memory_order_relaxed);
        if (t >= j->n_tiles)
            break;
        int c0, c1, r0, r1;
        const struct matq_mat *mt = tile_of(j, t, &c0, &c1, &r0, &r1);
        const size_t wrb = mt->w_row_bytes, m = (size_t)mt->m;
        int r = r0;
        if (mt->dotu) { /* the whole tile (r0: a multiple of 8, as TILE_N) */
            mt->dotu(j->k, mt->w + (size_t)c0 * wrb, wrb, c1 - c0, j->act + (size_t)r0 * j->act_row, j->act_row,
                     j->act_s + (size_t)(r0 / 8) * j->side_group, j->side_group, r1 - r0,
                     mt->out + (size_t)r0 * m + (size_t)c0, m);
            continue;
        }
#if MATQ_X86
        if (mt->dott) { /* groups of 16 rows, two at a time (act256t; TILE_N, n16: multiples of 16) */
            size_t ga = (size_t)(j->k / GGML_QK_K);
            int na_max = 4;
            for (; r + 16 <= r1 && r + 16 <= j->n16;) {
                int na = 1;
                while (na < na_max && r + 16 * (na + 1) <= r1 && r + 16 * (na + 1) <= j->n16)
                    na++;
                mt->dott(j->k, mt->w + (size_t)c0 * wrb, wrb, c1 - c0,
                         (const struct act256t *)(const void *)j->act + (size_t)(r / 16) * ga, ga, na,
                         16 * na, mt->out + (size_t)r * m + (size_t)c0, m);
                r += 16 * na;
            }
        }
#endif
        if (mt->dot8) /* 8 activation rows x the tile's weight rows */
            for (; r + 8 <= r1; r += 8) {
                const void *a[8];
                for (int i = 0; i < 8; i++)
                    a[i] = act_row(j, r + i);
                for (int c = c0; c < c1; c++) {
                    float o[8];
                    mt->dot8(j->k, mt->w + (size_t)c * wrb, a, o);
                    for (int i = 0; i < 8; i++)
                        mt->out[(size_t)(r + i) * m + (size_t)c] = o[i];
                }
            }
        if (mt->dot4) /* 4 activation rows x the tile's weight rows, all in L1 */
            for (; r + 4 <= r1; r += 4) {
                const void *a[4];
                for (int i = 0; i < 4; i++)
                    a[i] = act_row(j, r + i);
                for (int c = c0; c < c1; c++) {
                    float o[4];
                    mt->dot4(j->k, mt->w + (size_t)c * wrb, a, o);
                    for (int i = 0; i < 4; i++)
                        mt->out[(size_t)(r + i) * m + (size_t)c] = o[i];
                }
            }
        for (; r < r1; r++) {
            const void *a = act_row(j, r);
            float *o = mt->out + (size_t)r * m;
            for (int c = c0; c < c1; c++)
                o[c] = mt->dot(j->k, mt->w + (size_t)c * wrb, a);
        }
    }
}

int kn_matmul_w_multi(struct kn_pool *pool, const float *x, int n, int k, const struct kn_wmat *w,
                      int n_w, void *scratch, size_t scratch_bytes)
{
    if (n_w < 1 || n_w > KN_MATMUL_MULTI_MAX || !w)
        return ERR_INVAL;
    struct matq_job j;
    memset(&j, 0, sizeof j);
    int level = kn_simd_level(), shared = 1;
    enum act_kind ak0 = ACT_NONE;
    for (int i = 0; i < n_w; i++) {
        struct matq_mat *mt = &j.mat[i];
        enum act_kind ak;
        int rc = check_args(n, k, w[i].w_type, w[i].m, level, &mt->dot, &mt->dot4, &mt->dotu, &ak,
                            &mt->w_row_bytes);
        if (rc)
            return rc;
        mt->dot8 = pick8(w[i].w_type, level);
        if (i > 0 && ak != ak0) /* one activation layout per kind, whatever the weight type */
            shared = 0;
        ak0 = ak;
        j.ak = ak;
        if (n > 0 && w[i].m > 0 && (!w[i].out || !w[i].w || !x))
            return ERR_INVAL;
        size_t need = kn_matmul_w_scratch(n, k, w[i].w_type);
        if (n > 0 && w[i].m > 0 && (need > scratch_bytes || (need && !scratch)))
            return ERR_TOOBIG;
    }
    if (!shared) { /* different activation layouts: one call each (the same bits) */
        for (int i = 0; i < n_w; i++) {
            int rc = kn_matmul_w(pool, w[i].out, x, n, k, w[i].w, w[i].w_type, w[i].m, scratch,
                                 scratch_bytes);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (n == 0)
        return 0;
    j.x = x;
    j.n = n;
    j.k = k;
    j.act_row = act_row_bytes(j.ak, k);
    int64_t n_tiles_n = ((int64_t)n + TILE_N - 1) / TILE_N;
    for (int i = 0; i < n_w; i++) {
        if (w[i].m == 0)
            continue;
        struct matq_mat *mt = &j.mat[j.n_mat];
        int tile_m = TILE_M;
        if (n <= 8) { /* about TILES_PER_THREAD per thread, in whole TILE_M */
            int per = TILES_PER_THREAD * kn_pool_threads(pool) * TILE_M;
            tile_m = (w[i].m + per - 1) / per * TILE_M;
            tile_m = tile_m < TILE_M ? TILE_M : tile_m > TILE_M_DECODE ? TILE_M_DECODE : tile_m;
        }
        *mt = (struct matq_mat){.out = w[i].out, .w = w[i].w, .w_row_bytes = j.mat[i].w_row_bytes,
                                .m = w[i].m, .dot = j.mat[i].dot, .dot4 = j.mat[i].dot4,
                                .dot8 = j.mat[i].dot8, .dotu = j.mat[i].dotu, .tile_m = tile_m,
                                .n_tiles_m = ((int64_t)w[i].m + tile_m - 1) / tile_m, .tile0 = j.n_tiles};
#if MATQ_X86
        mt->dott = pickt(w[i].w_type, level);
#endif
        j.n_tiles += mt->n_tiles_m * n_tiles_n;
        j.n_mat++;
    }
    if (j.n_mat == 0)
        return 0;
    if (j.ak != ACT_NONE) {
        uintptr_t p = (uintptr_t)scratch;
        j.act = (uint8_t *)scratch + ((SCRATCH_ALIGN - p % SCRATCH_ALIGN) % SCRATCH_ALIGN);
        j.act_tail = j.act;
        j.vec_quant = MATQ_X86 && level >= KN_SIMD_AVX2;
#if MATQ_X86
        if (j.ak == ACT_256 && j.mat[0].dott) { /* whole groups of 16 rows transposed, then the rest */
            j.n16 = act_rows_t(n, level);
            j.t512 = level >= KN_SIMD_AVX512;
            j.act_tail = j.act + (size_t)(j.n16 / 16) * (size_t)(k / GGML_QK_K) * sizeof(struct act256t);
        }
#endif
        float *side = (float *)(void *)(j.act + (size_t)(n + 7) / 8 * 8 * j.act_row); /* after the rows */
        if (j.ak == ACT_32V) {
            j.act_s = side;
            j.side_group = (size_t)(k / GGML_QK) * ACT_32V_SIDE;
        }
        if (n >= (j.ak == ACT_32V ? 8 : 4) && kn_pool_threads(pool) > 1)
            kn_pool_run(pool, quant_worker, &j);
        else
            quant_worker(&j, 0, 1);
    }
    atomic_init(&j.next_tile, 0);
    kn_pool_run(pool, dot_worker, &j);
    return 0;
}

int kn_matmul_w(struct kn_pool *pool, float *out, const float *x, int n, int k, const void *w,
                int w_type, int m, void *scratch, size_t scratch_bytes)
{
    struct kn_wmat one = {out, w, w_type, m};
    return kn_matmul_w_multi(pool, x, n, k, &one, 1, scratch, scratch_bytes);
}
