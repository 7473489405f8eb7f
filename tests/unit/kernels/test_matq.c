/* Unit tests: quantized matrix products (kernels/cpu/matq.c) and the thread
 * pool (kernels/cpu/pool.c).
 *
 * References, both independent of matq.c:
 *
 *  1. exact: W dequantized with kn_dequant_row (the bit-exact
 *     dequantizer, itself checked against gguf-py) times the UNquantized x,
 *     in double. Allowed error, derived from the scheme: each activation
 *     x_i is replaced by d_b * q_i with d_b = amax_b / 127 over its block b
 *     (32 values for Q4_0..Q8_0, 256 for the K-quants, none for F32/F16/BF16)
 *     and q_i = round(x_i / d_b), so |x_i - d_b q_i| <= d_b / 2 = amax_b / 254
 *     (times 1 + 1e-5 for the rounding of 1/d_b). Hence
 *       |out - ref| <= sum_b (amax_b / 254) * sum_{i in b} |w_i|  +  F,
 *     where F, the float32 rounding of the kernel's accumulation (one
 *     rounding per block scale product, per fma and per pairwise add:
 *     at most nb + 16 roundings along any path), is bounded by
 *       F = (nb + 16) * 2^-23 * S,  S = sum_i (|w_i| + |off_i|) (|x_i| + amax_b / 127)
 *     with off_i the block offset (m of Q4_1/Q5_1, dmin * min of Q4_K/Q5_K;
 *     the kernel handles |d q| and |off| separately, so cancellation between
 *     them does not shrink its rounding error). nb = k / block (k / 32 lanes
 *     for the float types). For random data the first term is ~0.4% of
 *     sum |w_i x_i|; typical errors are far smaller (random signs).
 *  2. scheme: the same activation quantization redone here (d = amax / 127,
 *     q = round-half-even(x * (1 / d))), sum_i w_i * d_b * q_i in double.
 *     Only F is allowed: this pins down the documented scheme.
 *
 * And between paths: the AVX2 path must equal the scalar path bit for bit;
 * a row must give the same bits alone or in a batch, and with 1, 2 or 4
 * threads. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "kernels/cpu/blocks.h"
#include "kernels/kn.h"
#include "tests/th.h"

/* ---- test data -------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static float rndf(void)
{
    return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static void put16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}

/* Offsets of the fp16 scale fields within a block, -1 terminated. */
static const int *scale_offsets(int type)
{
    static const int at0[] = {0, -1}, at02[] = {0, 2, -1}, at208[] = {208, -1};
    switch (type) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: return at02;
    case GGML_TYPE_Q6_K: return at208;
    default: return at0;
    }
}

/* m rows of k values of type: random quants, sane random scales. */
static uint8_t *make_weights(int type, int k, int m, size_t *row_bytes)
{
    int64_t rb;
    if (ggml_type_row_bytes((uint32_t)type, k, &rb) != 0)
        return NULL;
    *row_bytes = (size_t)rb;
    size_t total = (size_t)rb * (size_t)m;
    uint8_t *w = malloc(total + 1);
    if (!w)
        return NULL;
    if (type == GGML_TYPE_F32) {
        for (size_t i = 0; i < total / 4; i++) {
            float f = rndf();
            memcpy(w + 4 * i, &f, 4);
        }
    } else if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        for (size_t i = 0; i < total / 2; i++)
            put16(w + 2 * i, type == GGML_TYPE_F16 ? kn_fp32_to_fp16(rndf()) : kn_fp32_to_bf16(rndf()));
    } else {
        for (size_t i = 0; i < total; i++)
            w[i] = (uint8_t)rnd32();
        size_t bb = ggml_type_block_bytes((uint32_t)type);
        for (size_t b = 0; b < total / bb; b++) {
            const int *off = scale_offsets(type);
            for (int f = 0; off[f] >= 0; f++) {
                /* d in +-[0.002, 0.05); offsets (2nd field of Q4_1/Q5_1) +-0.4;
                 * dmin small positive */
                float v = f == 0 ? (0.002f + 0.048f * fabsf(rndf())) * (rnd32() & 1 ? 1 : -1)
                                 : (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 ? 0.4f * rndf()
                                                                             : 0.01f * fabsf(rndf()));
                put16(w + b * bb + (size_t)off[f], kn_fp32_to_fp16(v));
            }
        }
    }
    return w;
}

/* The block offset of every value (see the header): dequantize a copy with
 * the quant fields zeroed. */
static void block_offsets(int type, const uint8_t *row, size_t rb, int k, float *off)
{
    uint8_t *c = malloc(rb);
    memcpy(c, row, rb);
    size_t bb = ggml_type_block_bytes((uint32_t)type);
    for (size_t b = 0; b < rb / bb; b++) {
        uint8_t *p = c + b * bb;
        switch (type) {
        case GGML_TYPE_Q4_1: memset(p + 4, 0, 16); break;
        case GGML_TYPE_Q5_1: memset(p + 4, 0, 20); break;
        case GGML_TYPE_Q4_K: memset(p + 16, 0, 128); break;
        case GGML_TYPE_Q5_K: memset(p + 16, 0, 160); break;
        default: break;
        }
    }
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K)
        CHECK_EQ_INT(kn_dequant_row((uint32_t)type, c, off, k), 0);
    else
        memset(off, 0, (size_t)k * sizeof *off);
    free(c);
}

/* Activations: mostly uniform, with an outlier now and then (as real
 * hidden states have), and an all-zero block. */
static float *make_x(int n, int k)
{
    float *x = malloc((size_t)n * (size_t)k * sizeof *x);
    for (size_t i = 0; i < (size_t)n * (size_t)k; i++) {
        x[i] = rndf();
        if (rnd32() % 97 == 0)
            x[i] *= 20.0f;
    }
    if (k >= 64 && n >= 2)
        memset(x + k + 32, 0, 32 * sizeof *x); /* row 1, block 1 */
    return x;
}

static int block_of(int type)
{
    int be = (int)ggml_type_block_elems((uint32_t)type);
    return be == 1 ? 0 : be;
}

/* ---- the reference checks ----------------------------------------------------------- */

static double rne(double v)
{
    return nearbyint(v);
}

/* Check out (n, m) against both references for every element. */
static void check_against_refs(int type, const float *out, const float *x, int n, int k,
                               const uint8_t *w, size_t rb, int m)
{
    int blk = block_of(type);
    int nb = blk ? k / blk : (k + 31) / 32;
    float *wd = malloc((size_t)k * sizeof *wd), *off = malloc((size_t)k * sizeof *off);
    double *amax = malloc((size_t)k * sizeof *amax), *xq = malloc((size_t)k * sizeof *xq);
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * (size_t)k;
        /* per-element block amax and the scheme's quantized x */
        for (int b0 = 0; b0 < k; b0 += blk ? blk : k) {
            int len = blk ? blk : k;
            float am = 0;
            for (int i = b0; i < b0 + len; i++)
                am = fabsf(xr[i]) > am ? fabsf(xr[i]) : am;
            float d = am / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
            for (int i = b0; i < b0 + len; i++) {
                amax[i] = blk ? am : 0.0;
                xq[i] = blk ? (double)d * rne((double)(xr[i] * id)) : xr[i];
            }
        }
        for (int c = 0; c < m; c++) {
            const uint8_t *wr = w + (size_t)c * rb;
            CHECK_EQ_INT(kn_dequant_row((uint32_t)type, wr, wd, k), 0);
            block_offsets(type, wr, rb, k, off);
            double exact = 0, scheme = 0, qbound = 0, S = 0;
            for (int i = 0; i < k; i++) {
                exact += (double)wd[i] * xr[i];
                scheme += (double)wd[i] * xq[i];
                qbound += amax[i] / 254.0 * (1 + 1e-5) * fabs(wd[i]);
                S += (fabs(wd[i]) + fabs(off[i])) * (fabs(xr[i]) + amax[i] / 127.0);
            }
            double F = (nb + 16) * ldexp(1.0, -23) * S + 1e-30;
            double got = out[(size_t)r * (size_t)m + (size_t)c];
            if (!(fabs(got - scheme) <= F) || !(fabs(got - exact) <= qbound + F))
                th_fail(__FILE__, __LINE__, "matq vs reference",
                        "type %s k %d n %d m %d row %d col %d: got %.9g, scheme %.9g (tol %.3g), "
                        "exact %.9g (tol %.3g)",
                        ggml_type_name((uint32_t)type), k, n, m, r, c, got, scheme, F, exact,
                        qbound + F);
        }
    }
    free(wd);
    free(off);
    free(amax);
    free(xq);
}

static float *run_matmul(struct kn_pool *pool, int type, const float *x, int n, int k,
                         const uint8_t *w, int m)
{
    size_t sb = kn_matmul_w_scratch(n, k, type);
    void *scratch = sb ? malloc(sb) : NULL;
    float *out = malloc((size_t)n * (size_t)m * sizeof *out + 1);
    CHECK_EQ_INT(kn_matmul_w(pool, out, x, n, k, w, type, m, scratch, sb), 0);
    free(scratch);
    return out;
}

static const int all_types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                                GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

/* k values per family: one block, several, SmolLM2's 576 and 1536. */
static int shapes_k(int type, int ks[6])
{
    int blk = block_of(type);
    if (blk == 0) {
        int v[] = {1, 7, 45, 576, 1536};
        memcpy(ks, v, sizeof v);
        return 5;
    }
    if (blk == 32) {
        int v[] = {32, 96, 576, 1536};
        memcpy(ks, v, sizeof v);
        return 4;
    }
    int v[] = {256, 768, 1536}; /* 576 is not a multiple of 256 */
    memcpy(ks, v, sizeof v);
    return 3;
}

static void all_types_vs_refs(int level)
{
    CHECK_EQ_INT(kn_simd_set(level), 0);
    const int ns[] = {1, 3, 17};
    const int m = 37; /* not a multiple of the 16-row tile */
    for (int t = 0; t < N_TYPES; t++) {
        int ks[6], nk = shapes_k(all_types[t], ks);
        for (int ki = 0; ki < nk; ki++)
            for (int ni = 0; ni < 3; ni++) {
                int k = ks[ki], n = ns[ni];
                size_t rb;
                uint8_t *w = make_weights(all_types[t], k, m, &rb);
                CHECK(w != NULL);
                float *x = make_x(n, k);
                float *out = run_matmul(NULL, all_types[t], x, n, k, w, m);
                check_against_refs(all_types[t], out, x, n, k, w, rb, m);
                free(out);
                free(x);
                free(w);
            }
    }
}

TEST(matq_scalar_all_types_vs_references)
{
    all_types_vs_refs(KN_SIMD_SCALAR);
}

TEST(matq_simd_all_types_vs_references)
{
    if (kn_simd_best() == KN_SIMD_SCALAR)
        SKIP("no SIMD path on this CPU");
    all_types_vs_refs(kn_simd_best());
}

/* Every SIMD level (AVX2 and AVX-512; for the 32-value types tiles of 8
 * or 16 weight rows x every activation row of a 64-row work tile) against
 * the scalar reference, bit for bit: row counts 1..9 and 70 (two work
 * tiles), m = 53 (a last strip of 5 weight rows), k = 32 and 96 (one and
 * an odd count of blocks), with and without a pool. */
static void simd_vs_scalar_bit_for_bit(void)
{
    const int m = 53;
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 70};
    struct kn_pool *pool;
    CHECK_EQ_INT(kn_pool_new(2, &pool), 0);
    for (int lv = KN_SIMD_AVX2; lv <= kn_simd_best(); lv++)
        for (int t = 0; t < N_TYPES; t++) {
            int ks[6], nk = shapes_k(all_types[t], ks);
            for (int ki = 0; ki < nk; ki++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    int k = ks[ki], n = ns[ni];
                    size_t rb;
                    uint8_t *w = make_weights(all_types[t], k, m, &rb);
                    float *x = make_x(n, k);
                    CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
                    float *a = run_matmul(NULL, all_types[t], x, n, k, w, m);
                    CHECK_EQ_INT(kn_simd_set(lv), 0);
                    float *b = run_matmul(ni & 1 ? pool : NULL, all_types[t], x, n, k, w, m);
                    for (int i = 0; i < n * m; i++)
                        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
                            th_fail(__FILE__, __LINE__, "simd == scalar",
                                    "%s type %s k %d n %d elem %d: %.9g vs %.9g", kn_simd_name(lv),
                                    ggml_type_name((uint32_t)all_types[t]), k, n, i, a[i], b[i]);
                            break;
                        }
                    free(a);
                    free(b);
                    free(x);
                    free(w);
                }
        }
    kn_pool_free(pool);
    kn_simd_set(kn_simd_best());
}

TEST(matq_simd_equals_scalar_bit_for_bit)
{
    if (kn_simd_best() == KN_SIMD_SCALAR)
        SKIP("no SIMD path on this CPU");
    simd_vs_scalar_bit_for_bit();
}

/* Activations with NaN, infinities, signed zeros, subnormals (whose scale
 * overflows 1/d), an all-zero block and values that round to ties quantize
 * to the same bits on every level: the AVX-512 quantizer is a vector copy
 * of the scalar one. The K-quants (256-value activation blocks) get the same
 * values at k = 768, an odd count of super-blocks, and n = 6 (a 4-row group
 * then two single rows). */
static float *special_x(int n, int k)
{
    float *x = make_x(n, k);
    for (int i = 0; i < 32; i++) {
        x[i] = 0.0f;                            /* row 0 block 0: all zero */
        x[32 + i] = i % 2 ? -0.0f : 0.0f;       /* signed zeros */
        x[64 + i] = 1e-42f * (float)(i - 16);   /* subnormals: 1/d overflows */
        x[96 + i] = (float)(i - 16) * 0.5f;     /* halves: round-to-even ties */
    }
    x[k + 3] = NAN;
    x[k + 40] = INFINITY;
    x[k + 77] = -INFINITY;
    x[2 * k + 100] = NAN;
    x[2 * k + 101] = NAN;
    for (int i = 0; i < 32; i++)
        x[3 * k + i] = NAN; /* a block of NaN only */
    x[4 * k + 5] = 3.4e38f;
    x[4 * k + 6] = -3.4e38f;
    for (int i = 0; k >= 512 && i < 256; i++)
        x[5 * k + 256 + i] = 1e-40f * (float)(i % 7 - 3); /* a super-block of subnormals */
    return x;
}

static void special_activations_vs_scalar_n(int n)
{
    const int m = 19;
    const int types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_1, GGML_TYPE_Q5_0,
                         GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (int lv = KN_SIMD_AVX2; lv <= kn_simd_best(); lv++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            int k = block_of(types[t]) == 32 ? 288 : 768;
            float *x = special_x(n, k);
            size_t rb;
            uint8_t *w = make_weights(types[t], k, m, &rb);
            CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
            float *a = run_matmul(NULL, types[t], x, n, k, w, m);
            CHECK_EQ_INT(kn_simd_set(lv), 0);
            float *b = run_matmul(NULL, types[t], x, n, k, w, m);
            for (int i = 0; i < n * m; i++)
                if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
                    th_fail(__FILE__, __LINE__, "simd == scalar", "%s type %s elem %d: %.9g vs %.9g",
                            kn_simd_name(lv), ggml_type_name((uint32_t)types[t]), i, a[i], b[i]);
                    break;
                }
            free(a);
            free(b);
            free(w);
            free(x);
        }
    kn_simd_set(kn_simd_best());
}

/* n = 6: the 4-row and 1-row kernels; n = 22: at AVX-512 the K-quants'
 * first 16 rows (the special values) go through the row-transposed tile
 * and its quantizer. */
static void special_activations_vs_scalar(void)
{
    special_activations_vs_scalar_n(6);
    special_activations_vs_scalar_n(22);
}

TEST(matq_simd_special_activations_bit_for_bit)
{
    if (kn_simd_best() == KN_SIMD_SCALAR)
        SKIP("no SIMD path on this CPU");
    special_activations_vs_scalar();
}

/* The AVX2 kernels exist twice: the tiles of the 32-value types with
 * AVX-VNNI's vpdpbusd and with maddubs + madd, the K-quant kernels with
 * vpdpwssd (1, 4 and 8 rows) and with madd + add (1 and 4 rows); a CPU
 * with AVX-VNNI runs the first in the tests above, and this one (a fresh
 * process: KN_NO_VNNI is read on first use) the second, every type. */
TEST(matq_simd_no_vnni_equals_scalar_bit_for_bit)
{
    if (kn_simd_best() == KN_SIMD_SCALAR)
        SKIP("no SIMD path on this CPU");
    setenv("KN_NO_VNNI", "1", 1);
    simd_vs_scalar_bit_for_bit();
    special_activations_vs_scalar();
}

/* Known values: integer activations with max |x| = 127 quantize exactly
 * (d = 1), so the product is an exact integer. */
TEST(matq_known_values_q8_0_q4_0)
{
    uint8_t w8[34], w4[18];
    put16(w8, 0x3C00); /* d = 1.0 */
    put16(w4, 0x4000); /* d = 2.0 */
    float x[32];
    long want8 = 0, want4 = 0;
    for (int i = 0; i < 32; i++) {
        x[i] = (float)(i == 5 ? -127 : (i * 7) % 50 - 25);
        int8_t q = (int8_t)(i * 5 - 80);
        memcpy(w8 + 2 + i, &q, 1);
        want8 += (long)q * (long)x[i];
    }
    for (int j = 0; j < 16; j++) {
        w4[2 + j] = (uint8_t)((j & 0x0F) | (((15 - j) & 0x0F) << 4));
        want4 += 2L * ((j & 0x0F) - 8) * (long)x[j] + 2L * ((15 - j) - 8) * (long)x[j + 16];
    }
    for (int lv = 0; lv <= kn_simd_best(); lv++) {
        CHECK_EQ_INT(kn_simd_set(lv), 0);
        char scratch[1216]; /* 1152 = one 8-row group of one block pair (with its offsets) + alignment */
        float out;
        CHECK_EQ_INT(kn_matmul_w(NULL, &out, x, 1, 32, w8, GGML_TYPE_Q8_0, 1, scratch, sizeof scratch), 0);
        CHECK_EQ_INT((long)out, want8);
        CHECK(out == (float)want8);
        CHECK_EQ_INT(kn_matmul_w(NULL, &out, x, 1, 32, w4, GGML_TYPE_Q4_0, 1, scratch, sizeof scratch), 0);
        CHECK(out == (float)want4);
    }
}

/* kn_matmul_w_multi: the bits of one kn_matmul_w per matrix, whether the
 * matrices share the activation layout (one quantization, one dispatch) or
 * not (the fallback), at every level, with and without a pool, matrices of
 * different heights (one empty); and its argument errors. */
TEST(matq_multi_equals_separate_calls)
{
    static const int groups[][3] = {
        {GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}, /* signed 32-value types: shared */
        {GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_Q4_1}, /* offset types: shared */
        {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K}, /* K-quants: shared */
        {GGML_TYPE_Q5_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0}, /* mixed layouts: one call each */
        {GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_BF16},
    };
    const int ms[3] = {37, 0, 19}, ns[] = {1, 5, 9, 70};
    struct kn_pool *pool;
    CHECK_EQ_INT(kn_pool_new(2, &pool), 0);
    for (int lv = KN_SIMD_SCALAR; lv <= kn_simd_best(); lv++)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
            int k = block_of(groups[g][0]) == 256 ? 512 : 160;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int n = ns[ni];
                CHECK_EQ_INT(kn_simd_set(lv), 0);
                float *x = make_x(n, k);
                uint8_t *w[3];
                float *sep[3], *got[3];
                struct kn_wmat wm[3];
                size_t sb = 0;
                for (int i = 0; i < 3; i++) {
                    size_t rb;
                    w[i] = make_weights(groups[g][i], k, ms[i] ? ms[i] : 1, &rb);
                    sep[i] = run_matmul(NULL, groups[g][i], x, n, k, w[i], ms[i]);
                    got[i] = malloc((size_t)n * (size_t)ms[i] * sizeof(float) + 1);
                    wm[i] = (struct kn_wmat){got[i], w[i], groups[g][i], ms[i]};
                    size_t need = kn_matmul_w_scratch(n, k, groups[g][i]);
                    sb = need > sb ? need : sb;
                }
                void *scratch = sb ? malloc(sb) : NULL;
                CHECK_EQ_INT(kn_matmul_w_multi(ni & 1 ? pool : NULL, x, n, k, wm, 3, scratch, sb), 0);
                for (int i = 0; i < 3; i++) {
                    if (memcmp(sep[i], got[i], (size_t)n * (size_t)ms[i] * sizeof(float)) != 0)
                        th_fail(__FILE__, __LINE__, "multi == separate", "%s group %d n %d matrix %d",
                                kn_simd_name(lv), (int)g, n, i);
                    free(sep[i]);
                    free(got[i]);
                    free(w[i]);
                }
                free(scratch);
                free(x);
            }
        }
    kn_simd_set(kn_simd_best());
    /* errors: entry count, NULL list, NULL output, scratch too small */
    float x[64] = {0}, out[4] = {7, 7, 7, 7};
    uint8_t wb[64] = {0};
    char scratch[2048];
    struct kn_wmat e[5] = {{out, wb, GGML_TYPE_Q8_0, 1}, {out + 1, wb, GGML_TYPE_Q8_0, 1}, {out + 2, wb, GGML_TYPE_Q8_0, 1},
                           {out + 3, wb, GGML_TYPE_Q8_0, 1}, {out, wb, GGML_TYPE_Q8_0, 1}};
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 0, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 5, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, NULL, 1, scratch, sizeof scratch), ERR_INVAL);
    e[1].out = NULL;
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 2, scratch, sizeof scratch), ERR_INVAL);
    e[1].out = out + 1;
    e[1].w_type = 99;
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 2, scratch, sizeof scratch), ERR_UNSUPPORTED);
    e[1].w_type = GGML_TYPE_Q8_0;
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 4, scratch, 10), ERR_TOOBIG);
    CHECK(out[0] == 7 && out[1] == 7 && out[2] == 7 && out[3] == 7);
    CHECK_EQ_INT(kn_matmul_w_multi(NULL, x, 1, 32, e, 4, scratch, sizeof scratch), 0);
    CHECK(out[0] == 0 && out[3] == 0);
    kn_pool_free(pool);
}

/* ---- batch invariance and thread counts --------------------------------------------- */

static const int inv_types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_F16};

TEST(matq_batch_invariance)
{
    for (int lv = 0; lv <= kn_simd_best(); lv++) {
        CHECK_EQ_INT(kn_simd_set(lv), 0);
        for (size_t t = 0; t < sizeof inv_types / sizeof inv_types[0]; t++) {
            int type = inv_types[t], k = block_of(type) == 256 ? 512 : 576, n = 70, m = 41;
            size_t rb;
            uint8_t *w = make_weights(type, k, m, &rb);
            float *x = make_x(n, k);
            struct kn_pool *pool;
            CHECK_EQ_INT(kn_pool_new(2, &pool), 0);
            float *all = run_matmul(pool, type, x, n, k, w, m);
            for (int r = 0; r < n; r += 3) {
                float *one = run_matmul(NULL, type, x + (size_t)r * (size_t)k, 1, k, w, m);
                CHECK(memcmp(one, all + (size_t)r * (size_t)m, (size_t)m * sizeof(float)) == 0);
                free(one);
            }
            /* a middle slice of 5 rows */
            float *mid = run_matmul(pool, type, x + (size_t)10 * (size_t)k, 5, k, w, m);
            CHECK(memcmp(mid, all + (size_t)10 * (size_t)m, (size_t)5 * (size_t)m * sizeof(float)) == 0);
            free(mid);
            kn_pool_free(pool);
            free(all);
            free(x);
            free(w);
        }
    }
}

TEST(matq_thread_count_invariance)
{
    for (size_t t = 0; t < sizeof inv_types / sizeof inv_types[0]; t++) {
        int type = inv_types[t], k = 1536, n = 70, m = 100;
        size_t rb;
        uint8_t *w = make_weights(type, k, m, &rb);
        float *x = make_x(n, k);
        float *ref = run_matmul(NULL, type, x, n, k, w, m);
        const int threads[] = {1, 2, 4};
        for (int ti = 0; ti < 3; ti++) {
            struct kn_pool *pool;
            CHECK_EQ_INT(kn_pool_new(threads[ti], &pool), 0);
            CHECK_EQ_INT(kn_pool_threads(pool), threads[ti]);
            for (int rep = 0; rep < 2; rep++) {
                float *o = run_matmul(pool, type, x, n, k, w, m);
                CHECK(memcmp(o, ref, (size_t)n * (size_t)m * sizeof(float)) == 0);
                float *o1 = run_matmul(pool, type, x, 1, k, w, m);
                CHECK(memcmp(o1, ref, (size_t)m * sizeof(float)) == 0);
                free(o1);
                free(o);
            }
            kn_pool_free(pool);
        }
        free(ref);
        free(x);
        free(w);
    }
}

/* Unaligned weights, activations and scratch give the same bits. */
TEST(matq_unaligned_buffers)
{
    int type = GGML_TYPE_Q4_K, k = 512, n = 3, m = 9;
    size_t rb;
    uint8_t *w = make_weights(type, k, m, &rb);
    float *x = make_x(n, k);
    float *ref = run_matmul(NULL, type, x, n, k, w, m);
    uint8_t *w2 = malloc(rb * (size_t)m + 1);
    memcpy(w2 + 1, w, rb * (size_t)m);
    size_t sb = kn_matmul_w_scratch(n, k, type);
    uint8_t *scratch = malloc(sb + 3);
    float out[27];
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, n, k, w2 + 1, type, m, scratch + 3, sb), 0);
    CHECK(memcmp(out, ref, sizeof out) == 0);
    free(scratch);
    free(w2);
    free(ref);
    free(x);
    free(w);
}

/* ---- SIMD selection ---------------------------------------------------------------- */

TEST(matq_simd_env_scalar)
{
    /* each test is a fresh process: the variable is read on first use */
    setenv("KN_SIMD", "scalar", 1);
    CHECK_EQ_INT(kn_simd_level(), KN_SIMD_SCALAR);
    CHECK_EQ_STR(kn_simd_name(kn_simd_level()), "scalar");
}

TEST(matq_simd_set_levels)
{
    unsetenv("KN_SIMD"); /* the default, even in a run forced to one level */
    CHECK_EQ_INT(kn_simd_level(), kn_simd_best());
    CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
    CHECK_EQ_INT(kn_simd_level(), KN_SIMD_SCALAR);
    CHECK_EQ_INT(kn_simd_set(99), ERR_UNSUPPORTED);
    CHECK_EQ_INT(kn_simd_set(-1), ERR_UNSUPPORTED);
    CHECK_EQ_STR(kn_simd_name(KN_SIMD_AVX2), "avx2");
    CHECK_EQ_STR(kn_simd_name(KN_SIMD_AVX512), "avx512");
    CHECK_EQ_STR(kn_simd_name(7), "?");
}

/* ---- errors ------------------------------------------------------------------------- */

TEST(matq_errors)
{
    float x[512] = {0}, out[4] = {1, 2, 3, 4};
    uint8_t w[4096] = {0};
    char scratch[4096];
    /* unsupported types: Q8_1, Q2_K, an unknown id, a negative one */
    const int bad[] = {9, 10, 16, 99, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 256, w, bad[i], 1, scratch, sizeof scratch),
                     ERR_UNSUPPORTED);
        CHECK_EQ_INT(kn_matmul_w_scratch(1, 256, bad[i]), 0);
    }
    /* k not a multiple of the block; k <= 0; negative n or m */
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 48, w, GGML_TYPE_Q4_0, 1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 288, w, GGML_TYPE_Q4_K, 1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 0, w, GGML_TYPE_F32, 1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, -1, 32, w, GGML_TYPE_Q8_0, 1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 32, w, GGML_TYPE_Q8_0, -1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w(NULL, NULL, x, 1, 32, w, GGML_TYPE_Q8_0, 1, scratch, sizeof scratch), ERR_INVAL);
    CHECK_EQ_INT(kn_matmul_w_scratch(1, 48, GGML_TYPE_Q4_0), 0);
    /* scratch too small, or missing */
    size_t need = kn_matmul_w_scratch(2, 256, GGML_TYPE_Q6_K);
    CHECK(need >= 2 * 292);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 2, 256, w, GGML_TYPE_Q6_K, 1, scratch, need - 1), ERR_TOOBIG);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 2, 256, w, GGML_TYPE_Q6_K, 1, NULL, 0), ERR_TOOBIG);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 2, 256, w, GGML_TYPE_Q6_K, 1, scratch, need), 0);
    /* out untouched by the failures above until the last, successful call */
    out[0] = out[1] = 5;
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 32, w, GGML_TYPE_Q8_0, 1, scratch, 10), ERR_TOOBIG);
    CHECK(out[0] == 5 && out[1] == 5);
    /* the documented "one buffer for every type" rule */
    CHECK(kn_matmul_w_scratch(9, 1536, GGML_TYPE_Q8_0) >= kn_matmul_w_scratch(9, 1536, GGML_TYPE_Q6_K));
    CHECK(kn_matmul_w_scratch(9, 1536, GGML_TYPE_Q8_0) >= kn_matmul_w_scratch(9, 1536, GGML_TYPE_Q4_K));
    /* float types need no scratch; empty products are fine */
    CHECK_EQ_INT(kn_matmul_w_scratch(3, 7, GGML_TYPE_F32), 0);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 1, 7, w, GGML_TYPE_F32, 2, NULL, 0), 0);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 0, 32, w, GGML_TYPE_Q8_0, 4, NULL, 0), 0);
    CHECK_EQ_INT(kn_matmul_w(NULL, out, x, 2, 32, w, GGML_TYPE_Q8_0, 0, NULL, 0), 0);
}

/* ---- pool ------------------------------------------------------------------------------ */

struct sum_ctx {
    atomic_long sum;
    atomic_int calls;
    int seen_nth;
    atomic_int bad_nth;
    int slow_us; /* the last thread sleeps this long (0: none) */
};

static void sum_fn(void *ctx, int ith, int nth)
{
    struct sum_ctx *c = ctx;
    if (nth != c->seen_nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&c->bad_nth, 1);
    if (c->slow_us && ith == nth - 1) { /* the last thread is slow */
        struct timespec ts = {c->slow_us / 1000000, (long)(c->slow_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&c->sum, 1L << ith);
    atomic_fetch_add(&c->calls, 1);
}

static void pool_runs(int n_threads, int runs, int slow_us)
{
    struct kn_pool *p;
    CHECK_EQ_INT(kn_pool_new(n_threads, &p), 0);
    int nth = kn_pool_threads(p);
    struct sum_ctx c;
    memset(&c, 0, sizeof c);
    c.seen_nth = nth;
    c.slow_us = slow_us;
    for (int r = 0; r < runs; r++) {
        atomic_store(&c.sum, 0);
        kn_pool_run(p, sum_fn, &c);
        /* every thread ran exactly once, and its write is visible now */
        CHECK_EQ_INT(atomic_load(&c.sum), (1L << nth) - 1);
    }
    CHECK_EQ_INT(atomic_load(&c.calls), (long)runs * nth);
    CHECK_EQ_INT(atomic_load(&c.bad_nth), 0);
    kn_pool_free(p);
}

TEST(pool_many_runs)
{
    pool_runs(4, 3000, 0);
    pool_runs(3, 1000, 0);
}

TEST(pool_uneven_work)
{
    pool_runs(4, 300, 200);
}

/* A worker slower than the caller's whole spin (phases 1 and 2 of pool.c):
 * the caller sleeps and the last worker wakes it; every run completes. */
TEST(pool_caller_sleeps_on_a_slow_worker)
{
    pool_runs(2, 20, 5000);
    pool_runs(3, 10, 3000);
}

TEST(pool_single_thread_and_null)
{
    pool_runs(1, 100, 0);
    struct sum_ctx c;
    memset(&c, 0, sizeof c);
    c.seen_nth = 1;
    kn_pool_run(NULL, sum_fn, &c);
    CHECK_EQ_INT(atomic_load(&c.sum), 1);
    CHECK_EQ_INT(kn_pool_threads(NULL), 1);
    kn_pool_free(NULL);
}

TEST(pool_default_threads)
{
    struct kn_pool *p;
    CHECK_EQ_INT(kn_pool_new(0, &p), 0);
    CHECK(kn_pool_threads(p) >= 1 && kn_pool_threads(p) <= KN_POOL_MAX_THREADS);
    kn_pool_free(p);
    CHECK_EQ_INT(kn_pool_new(100000, &p), 0);
    CHECK_EQ_INT(kn_pool_threads(p), KN_POOL_MAX_THREADS);
    kn_pool_free(p);
}

/* Idle long enough that the workers go to sleep, then run again. */
TEST(pool_wakes_sleeping_workers)
{
    struct kn_pool *p;
    CHECK_EQ_INT(kn_pool_new(3, &p), 0);
    struct sum_ctx c;
    memset(&c, 0, sizeof c);
    c.seen_nth = 3;
    for (int r = 0; r < 5; r++) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
        atomic_store(&c.sum, 0);
        kn_pool_run(p, sum_fn, &c);
        CHECK_EQ_INT(atomic_load(&c.sum), 7);
    }
    kn_pool_free(p);
}

/* A pool freed right after creation, or never used, leaks nothing (ASan). */
TEST(pool_free_unused)
{
    struct kn_pool *p;
    CHECK_EQ_INT(kn_pool_new(4, &p), 0);
    kn_pool_free(p);
}
