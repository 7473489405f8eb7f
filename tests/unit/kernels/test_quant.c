/* Unit tests: kernels/cpu/quant - block sizes, fp16/bf16 conversions and the
 * dequantizers, bit for bit against gguf-py/numpy (fixtures written by
 * tests/fixtures/make_quant_fixtures.py) and against hand-computed blocks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/blocks.h"
#include "kernels/kn.h"
#include "tests/th.h"

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

TEST(quant_size_table)
{
    static const struct { uint32_t t; const char *name; uint32_t elems, bytes; } want[] = {
        {GGML_TYPE_F32, "F32", 1, 4},      {GGML_TYPE_F16, "F16", 1, 2},      {GGML_TYPE_BF16, "BF16", 1, 2},
        {GGML_TYPE_Q4_0, "Q4_0", 32, 18},  {GGML_TYPE_Q4_1, "Q4_1", 32, 20},  {GGML_TYPE_Q5_0, "Q5_0", 32, 22},
        {GGML_TYPE_Q5_1, "Q5_1", 32, 24},  {GGML_TYPE_Q8_0, "Q8_0", 32, 34},  {GGML_TYPE_Q4_K, "Q4_K", 256, 144},
        {GGML_TYPE_Q5_K, "Q5_K", 256, 176}, {GGML_TYPE_Q6_K, "Q6_K", 256, 210},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_STR(ggml_type_name(want[i].t), want[i].name);
        CHECK(ggml_type_supported(want[i].t));
        CHECK_EQ_INT(ggml_type_block_elems(want[i].t), want[i].elems);
        CHECK_EQ_INT(ggml_type_block_bytes(want[i].t), want[i].bytes);
    }
    /* known to ggml but not supported here; unknown ids */
    CHECK_EQ_STR(ggml_type_name(11), "Q3_K");
    CHECK_EQ_STR(ggml_type_name(16), "IQ2_XXS");
    CHECK_EQ_STR(ggml_type_name(39), "MXFP4");
    CHECK(!ggml_type_supported(11) && !ggml_type_supported(15) && !ggml_type_supported(28));
    CHECK_EQ_INT(ggml_type_block_bytes(11), 0);
    CHECK(ggml_type_name(4) == NULL && ggml_type_name(31) == NULL && ggml_type_name(1000) == NULL);
    CHECK(!ggml_type_supported(4) && !ggml_type_supported(0xFFFFFFFFu));

    int64_t n = -1;
    CHECK_EQ_INT(ggml_type_row_bytes(GGML_TYPE_Q4_K, 512, &n), 0);
    CHECK_EQ_INT(n, 288);
    CHECK_EQ_INT(ggml_type_row_bytes(GGML_TYPE_F32, 7, &n), 0);
    CHECK_EQ_INT(n, 28);
    CHECK_EQ_INT(ggml_type_row_bytes(GGML_TYPE_Q8_0, 33, &n), ERR_INVAL);
    CHECK_EQ_INT(ggml_type_row_bytes(GGML_TYPE_Q8_0, -32, &n), ERR_INVAL);
    CHECK_EQ_INT(ggml_type_row_bytes(11, 256, &n), ERR_UNSUPPORTED);
    CHECK_EQ_INT(ggml_type_row_bytes(GGML_TYPE_F32, INT64_MAX, &n), ERR_TOOBIG);
    CHECK_EQ_INT(n, 28);
}

/* Every binary16 value against an independent formula: value = mant * 2^-24
 * (subnormal) or (1024 + mant) * 2^(exp - 25). */
TEST(quant_fp16_to_fp32_all_values)
{
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t exp = (h >> 10) & 31, mant = h & 1023;
        float got = kn_fp16_to_fp32((uint16_t)h);
        if (exp == 31) {
            if (mant == 0) {
                CHECK(isinf(got));
            } else {
                CHECK(isnan(got));
                CHECK_EQ_INT(bits_of(got) & 0x7FFFFF, mant << 13); /* payload kept */
            }
        } else {
            double want = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, (int)exp - 25);
            if (h & 0x8000)
                want = -want;
            if ((double)got != want)
                th_fail(__FILE__, __LINE__, "fp16 value", "h=0x%04x got %.9g want %.9g", h, got, want);
        }
        CHECK_EQ_INT(bits_of(got) >> 31, h >> 15);
        if (!isnan(got))
            CHECK_EQ_INT(kn_fp32_to_fp16(got), h); /* exact round trip */
    }
}

/* float -> half against numpy's astype(float16) (round to nearest even,
 * subnormals, overflow to inf, quiet NaNs) and float -> bf16 against
 * gguf-py (ggml's rounding). Pairs (u32 float bits, u16 half bits). */
static void check_pairs(const char *path, uint16_t (*conv)(float))
{
    size_t len;
    unsigned char *p = th_slurp(path, &len);
    CHECK(p != NULL);
    CHECK(len % 6 == 0 && len >= 600);
    for (size_t i = 0; i < len; i += 6) {
        uint32_t fb;
        uint16_t hb;
        memcpy(&fb, p + i, 4);
        memcpy(&hb, p + i + 4, 2);
        uint16_t got = conv(float_of(fb));
        if (got != hb) {
            free(p);
            th_fail(__FILE__, __LINE__, path, "f=0x%08x got 0x%04x want 0x%04x", fb, got, hb);
        }
    }
    free(p);
}

TEST(quant_fp32_to_fp16_matches_numpy)
{
    check_pairs("tests/fixtures/quant/fp16.bin", kn_fp32_to_fp16);
    CHECK_EQ_INT(kn_fp32_to_fp16(65520.0f), 0x7C00);      /* rounds up to inf */
    CHECK_EQ_INT(kn_fp32_to_fp16(65519.0f), 0x7BFF);
    CHECK_EQ_INT(kn_fp32_to_fp16(ldexpf(1, -25)), 0x0000); /* tie to even: 0 */
    CHECK_EQ_INT(kn_fp32_to_fp16(ldexpf(3, -26)), 0x0001); /* above the tie */
    CHECK_EQ_INT(kn_fp32_to_fp16(-0.0f), 0x8000);
    CHECK_EQ_INT(kn_fp32_to_fp16(float_of(0x7F800001u)) & 0x7E00, 0x7E00); /* sNaN made quiet */
}

TEST(quant_bf16_matches_ggml)
{
    check_pairs("tests/fixtures/quant/bf16.bin", kn_fp32_to_bf16);
    CHECK_EQ_INT(bits_of(kn_bf16_to_fp32(0x3F80)), 0x3F800000);
    CHECK_EQ_INT(bits_of(kn_bf16_to_fp32(0xFF81)), 0xFF810000);
}

/* Dequantize <type>.blocks and compare with gguf-py's <type>.f32, bit for bit. */
static void check_fixture(uint32_t type, const char *stem)
{
    char bp[128], fp[128];
    snprintf(bp, sizeof bp, "tests/fixtures/quant/%s.blocks", stem);
    snprintf(fp, sizeof fp, "tests/fixtures/quant/%s.f32", stem);
    size_t nb, nf;
    unsigned char *blocks = th_slurp(bp, &nb), *want = th_slurp(fp, &nf);
    CHECK(blocks && want);
    uint32_t be = ggml_type_block_elems(type), bb = ggml_type_block_bytes(type);
    CHECK(nb % bb == 0 && nb > 0);
    int64_t n = (int64_t)(nb / bb * be);
    CHECK_EQ_INT(nf, (size_t)n * 4);
    /* odd start address: the dequantizers must not need alignment */
    unsigned char *src = malloc(nb + 1);
    float *got = malloc(nf);
    CHECK(src && got);
    memcpy(src + 1, blocks, nb);
    CHECK_EQ_INT(kn_dequant_row(type, src + 1, got, n), 0);
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, (unsigned char *)got + 4 * i, 4);
        memcpy(&w, want + 4 * i, 4);
        if (g != w)
            th_fail(__FILE__, __LINE__, stem, "value %lld: got %.9g (0x%08x) want %.9g (0x%08x)", (long long)i,
                    float_of(g), g, float_of(w), w);
    }
    free(src);
    free(got);
    free(blocks);
    free(want);
}

TEST(quant_f32_matches_ggufpy) { check_fixture(GGML_TYPE_F32, "f32"); }
TEST(quant_f16_matches_ggufpy) { check_fixture(GGML_TYPE_F16, "f16"); }
TEST(quant_bf16_rows_match_ggufpy) { check_fixture(GGML_TYPE_BF16, "bf16"); }
TEST(quant_q4_0_matches_ggufpy) { check_fixture(GGML_TYPE_Q4_0, "q4_0"); }
TEST(quant_q4_1_matches_ggufpy) { check_fixture(GGML_TYPE_Q4_1, "q4_1"); }
TEST(quant_q5_0_matches_ggufpy) { check_fixture(GGML_TYPE_Q5_0, "q5_0"); }
TEST(quant_q5_1_matches_ggufpy) { check_fixture(GGML_TYPE_Q5_1, "q5_1"); }
TEST(quant_q8_0_matches_ggufpy) { check_fixture(GGML_TYPE_Q8_0, "q8_0"); }
TEST(quant_q4_k_matches_ggufpy) { check_fixture(GGML_TYPE_Q4_K, "q4_k"); }
TEST(quant_q5_k_matches_ggufpy) { check_fixture(GGML_TYPE_Q5_K, "q5_k"); }
TEST(quant_q6_k_matches_ggufpy) { check_fixture(GGML_TYPE_Q6_K, "q6_k"); }

/* Hand-built blocks, values computed from the layout table in blocks.h. */
TEST(quant_hand_built_blocks)
{
    float y[256];
    /* Q4_0, d = 1: qs[0] = 0x1F -> y[0] = 15 - 8, y[16] = 1 - 8 */
    struct quant_block_q4_0 q40 = {.d = 0x3C00};
    memset(q40.qs, 0x88, sizeof q40.qs);
    q40.qs[0] = 0x1F;
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q4_0, &q40, y, 32), 0);
    CHECK(y[0] == 7 && y[16] == -7 && y[1] == 0 && y[31] == 0);

    /* Q5_1, d = 0.5, m = -1: value 17 = nibble 1 + qh bit 17 (the high nibble of qs[1]) */
    struct quant_block_q5_1 q51 = {.d = 0x3800, .m = 0xBC00};
    memset(q51.qs, 0, sizeof q51.qs);
    memset(q51.qh, 0, sizeof q51.qh);
    q51.qs[1] = 0x10;
    q51.qh[2] = 0x02; /* bit 17 */
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q5_1, &q51, y, 32), 0);
    CHECK(y[17] == 0.5f * 17 - 1 && y[0] == -1 && y[1] == -1);

    /* Q8_0, d = 2 */
    struct quant_block_q8_0 q80 = {.d = 0x4000};
    for (int i = 0; i < 32; i++)
        q80.qs[i] = (int8_t)(i - 16);
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q8_0, &q80, y, 32), 0);
    CHECK(y[0] == -32 && y[31] == 30);

    /* Q4_K, d = 1, dmin = 1: sub-block 5 takes scale (sc[9] & 15) | (sc[1] >> 6) << 4
     * and min (sc[9] >> 4) | (sc[5] >> 6) << 4; its values are the high nibbles
     * of qs[64..95]. */
    struct quant_block_q4_k q4k = {.d = 0x3C00, .dmin = 0x3C00};
    memset(q4k.scales, 0, sizeof q4k.scales);
    memset(q4k.qs, 0, sizeof q4k.qs);
    q4k.scales[9] = 0x23;           /* scale low 3, min low 2 */
    q4k.scales[1] = 0x40;           /* scale high bits 01 -> scale 16 + 3 = 19 */
    q4k.scales[5] = 0x80;           /* min high bits 10 -> min 32 + 2 = 34 */
    q4k.qs[64 + 7] = 0xA0;          /* value 32*5 + 7 has q = 10 */
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q4_K, &q4k, y, 256), 0);
    CHECK(y[167] == 19 * 10 - 34);
    CHECK(y[160] == -34);
    CHECK(y[128] == 0);             /* sub-block 4: scale 0, min 0 */

    /* Q6_K, d = 1: value 200 = half 1, r 72, g 2, l 8: low4 = high nibble of
     * ql[64 + 8], high2 = bits 4..5 of qh[32 + 8]; scale[12] */
    struct quant_block_q6_k q6k;
    memset(&q6k, 0, sizeof q6k);
    q6k.d = 0x3C00;
    for (int i = 0; i < 16; i++)
        q6k.scales[i] = 1;
    q6k.scales[12] = -3;
    q6k.ql[72] = 0x50;              /* low4 = 5 */
    q6k.qh[40] = 0x20;              /* high2 = 2 -> q = 5 + 32 - 32 = 5 */
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q6_K, &q6k, y, 256), 0);
    CHECK(y[200] == -15);
    CHECK(y[0] == -32);

    /* errors leave dst alone */
    y[0] = 123;
    CHECK_EQ_INT(kn_dequant_row(GGML_TYPE_Q8_0, &q80, y, 31), ERR_INVAL);
    CHECK_EQ_INT(kn_dequant_row(11, &q80, y, 256), ERR_UNSUPPORTED);
    CHECK(y[0] == 123);
}
