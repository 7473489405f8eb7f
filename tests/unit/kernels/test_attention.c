/* Unit tests of paged attention and the elementwise ops beside it
 * (kernels/cpu/attention.c, swiglu/geglu, softcap): known softmax weights,
 * windows and soft-capping against a double-precision reference, the binary16
 * cache and every SIMD level against the scalar reference, bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn.h"
#include "tests/th.h"

TEST(kn_attention_and_elementwise)
{
    /* two positions in different blocks, one head: softmax weights known */
    float k[2 * 2 * 2] = {0}, v[2 * 2 * 2] = {0}, q[2] = {1, 0}, out[2], sc[2];
    int32_t table[2] = {1, 0}; /* position 0 in block 1, position 1 in block 0 */
    /* block_tokens 1, kv_dim 2, block_stride 2 */
    k[2] = 2;               /* pos 0 key (2, 0) */
    v[2] = 1, v[3] = 0;     /* pos 0 value (1, 0) */
    k[0] = 0;               /* pos 1 key (0, 0) */
    v[0] = 0, v[1] = 1;     /* pos 1 value (0, 1) */
    kn_attn_paged_f32(out, q, k, v, table, 1, 2, 2, 1, 1, 2, 1.0f, sc);
    double w0 = exp(2.0) / (exp(2.0) + 1.0);
    CHECK_NEAR(out[0], w0, 1e-6);
    CHECK_NEAR(out[1], 1 - w0, 1e-6);
    kn_attn_paged_f32(out, q, k, v, table, 1, 2, 1, 1, 1, 2, 1.0f, sc); /* causal: pos 0 only */
    CHECK_NEAR(out[0], 1, 1e-7);
    CHECK_NEAR(out[1], 0, 1e-7);
    float g[3] = {0, 1, -2}, u[3] = {5, 2, 1};
    kn_swiglu_f32(g, g, u, 3);
    CHECK_NEAR(g[0], 0, 1e-7);
    CHECK_NEAR(g[1], 2 / (1 + exp(-1.0)), 1e-6);
    CHECK_NEAR(g[2], -2 / (1 + exp(2.0)), 1e-6);
    float a[4] = {1, NAN, 3, 3};
    CHECK_EQ_INT(kn_argmax_f32(a, 4), 2);
    CHECK_EQ_INT(kn_argmax_f32(a, 0), -1);
}

/* The window attends exactly positions p0..n_ctx-1: the same as plain
 * attention over a cache holding only those positions; the soft-cap is
 * cap * tanh(s / cap) of the scaled score (checked against a direct
 * double-precision softmax). */
TEST(kn_attention_window_and_softcap)
{
    enum { HD = 8, NKV = 1, NH = 2, N = 11, BT = 4 };
    float k[16 * HD], v[16 * HD], q[NH * HD], out[NH * HD], ref[NH * HD], sc[16];
    int32_t table[4] = {2, 0, 3, 1};
    for (int i = 0; i < 16 * HD; i++) {
        k[i] = (float)((i * 29) % 17 - 8) / 5.0f;
        v[i] = (float)((i * 13) % 19 - 9) / 7.0f;
    }
    for (int i = 0; i < NH * HD; i++)
        q[i] = (float)((i * 7) % 11 - 5) / 3.0f;
    int p0 = 6;
    float scale = 0.35f, cap = 1.5f;
    kn_attn_paged_win_heads_f32(out, q, k, v, table, BT, (size_t)BT * HD, p0, N, NH, NKV, HD, 0, NH,
                                scale, cap, sc);
    for (int h = 0; h < NH; h++) {
        double w[N], sum = 0, mx = -1e30;
        for (int p = p0; p < N; p++) {
            const float *kp = k + (size_t)table[p / BT] * BT * HD + (size_t)(p % BT) * HD;
            double d = 0;
            for (int i = 0; i < HD; i++)
                d += (double)q[h * HD + i] * kp[i];
            w[p] = cap * tanh(d * scale / cap);
            /* (kn_tanh is within 1e-6 of tanh: inside this test's tolerance) */
            if (w[p] > mx)
                mx = w[p];
        }
        for (int p = p0; p < N; p++)
            sum += (w[p] = exp(w[p] - mx));
        for (int i = 0; i < HD; i++) {
            double acc = 0;
            for (int p = p0; p < N; p++)
                acc += w[p] / sum * v[(size_t)table[p / BT] * BT * HD + (size_t)(p % BT) * HD + i];
            ref[h * HD + i] = (float)acc;
        }
    }
    for (int i = 0; i < NH * HD; i++)
        CHECK(fabsf(out[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])));
    /* p0 = 0, cap 0: the plain kernel's bits */
    kn_attn_paged_win_heads_f32(out, q, k, v, table, BT, (size_t)BT * HD, 0, N, NH, NKV, HD, 0, NH,
                                scale, 0.0f, sc);
    kn_attn_paged_f32(ref, q, k, v, table, BT, (size_t)BT * HD, N, NH, NKV, HD, scale, sc);
    CHECK(memcmp(out, ref, sizeof out) == 0);
    /* GeGLU and soft-capping element-wise */
    float g[3] = {-2.0f, 0.5f, 3.0f}, u[3] = {1.0f, 2.0f, -1.0f}, o[3];
    kn_geglu_f32(o, g, u, 3);
    for (int i = 0; i < 3; i++) {
        double x = g[i];
        double ge = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        CHECK(fabs(o[i] - ge * u[i]) <= 1e-6);
    }
    float x[2] = {10.0f, -0.1f};
    kn_softcap_f32(x, 5.0f, 2);
    CHECK(fabs(x[0] - 5 * tanh(2.0)) < 1e-5 && fabs(x[1] - 5 * tanh(-0.02)) < 1e-6);
    /* kn_tanh within 1e-6 relative everywhere (both branches, the switch, saturation) */
    double worst = 0;
    for (int i = -200000; i <= 200000; i++) {
        float xv = (float)i * 6e-5f;
        double want = tanh((double)xv), e = fabs((double)kn_tanh(xv) - want) / fmax(fabs(want), 1e-30);
        if (e > worst)
            worst = e;
    }
    CHECK(worst < 1e-6 && kn_tanh(30.0f) == 1.0f && kn_tanh(-30.0f) == -1.0f && kn_tanh(0.0f) == 0.0f);
}

/* The engine's binary16 cache: kn_attn_paged_win_heads_f16 at every SIMD
 * level gives the scalar float kernel's bits on the cache converted back to
 * float (the conversion is exact), including subnormal-half and zero K/V
 * values, windows and soft-capping; kn_f32_to_f16 (the append) gives
 * kn_fp32_to_fp16's bits at every level. */
TEST(kn_attention_f16_cache_equals_f32_on_converted_cache_every_level)
{
    uint64_t st = 777;
    const int hds[] = {40, 64, 128};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        int hd = hds[hi];
        int n_head = 6, n_head_kv = 2, bt = 4, n_blocks = 20, kv_dim = n_head_kv * hd;
        size_t bs = (size_t)bt * (size_t)kv_dim, nkv = (size_t)n_blocks * bs;
        uint16_t *kh = malloc(nkv * sizeof *kh), *vh = malloc(nkv * sizeof *vh);
        float *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
        float *q = malloc((size_t)n_head * (size_t)hd * sizeof *q);
        float *o1 = malloc((size_t)n_head * (size_t)hd * sizeof *o1), *o2 = malloc((size_t)n_head * (size_t)hd * sizeof *o2);
        float sc[80];
        int32_t table[20];
        for (int i = 0; i < n_blocks; i++)
            table[i] = (i * 7 + 3) % n_blocks;
        for (size_t i = 0; i < nkv; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            float kf = (float)((int)(st >> 40) % 2001 - 1000) / 700.0f;
            float vf = (float)((int)(st >> 20 & 0xfffff) % 2001 - 1000) / 900.0f;
            if (i % 13 == 0)
                kf *= 1e-6f; /* subnormal halves */
            if (i % 17 == 0)
                vf = i % 34 ? 3e-8f : -0.0f;
            kh[i] = kn_fp32_to_fp16(kf);
            vh[i] = kn_fp32_to_fp16(vf);
            k[i] = kn_fp16_to_fp32(kh[i]);
            v[i] = kn_fp16_to_fp32(vh[i]);
        }
        for (int i = 0; i < n_head * hd; i++)
            q[i] = (float)((i * 37) % 201 - 100) / 80.0f;
        for (int n_ctx = 1; n_ctx <= 77; n_ctx += 4) {
            for (int w = 0; w <= 9; w += 9) {
                int p0 = w && n_ctx > w ? n_ctx - w : 0;
                float cap = w ? 2.0f : 0.0f;
                CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
                kn_attn_paged_win_heads_f32(o1, q, k, v, table, bt, bs, p0, n_ctx, n_head, n_head_kv,
                                            hd, 0, n_head, 0.125f, cap, sc);
                for (int lv = KN_SIMD_SCALAR; lv <= kn_simd_best(); lv++) {
                    CHECK_EQ_INT(kn_simd_set(lv), 0);
                    kn_attn_paged_win_heads_f16(o2, q, kh, vh, table, bt, bs, p0, n_ctx, n_head,
                                                n_head_kv, hd, 0, n_head, 0.125f, cap, sc);
                    if (memcmp(o1, o2, (size_t)n_head * (size_t)hd * sizeof *o1) != 0)
                        th_fail(__FILE__, __LINE__, "f16 attention == f32 on the converted cache",
                                "%s hd %d n_ctx %d p0 %d", kn_simd_name(lv), hd, n_ctx, p0);
                }
            }
        }
        free(kh);
        free(vh);
        free(k);
        free(v);
        free(q);
        free(o1);
        free(o2);
    }
    /* the append's conversion: specials, ties, subnormals, odd lengths */
    const float sp[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 1e9f, -1e9f, INFINITY, -INFINITY,
                        NAN, -NAN, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-30f, 6.1e-5f, 1.00048828125f,
                        1.00146484375f, 3.0517578125e-05f};
    enum { NS = sizeof sp / sizeof sp[0] };
    float src[64];
    uint16_t want[64], got[64];
    for (int i = 0; i < 64; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(st >> 32);
        memcpy(&src[i], &bits, sizeof bits); /* any bits: NaN payloads too */
        if (i % 3 == 0)
            src[i] = sp[(i / 3) % NS];
        want[i] = kn_fp32_to_fp16(src[i]);
    }
    for (int lv = KN_SIMD_SCALAR; lv <= kn_simd_best(); lv++) {
        CHECK_EQ_INT(kn_simd_set(lv), 0);
        for (int n = 0; n <= 64; n += 7) {
            memset(got, 0xAB, sizeof got);
            kn_f32_to_f16(got, src, (size_t)n);
            if (memcmp(got, want, (size_t)n * sizeof *got) != 0)
                th_fail(__FILE__, __LINE__, "kn_f32_to_f16 == kn_fp32_to_fp16", "%s n %d",
                        kn_simd_name(lv), n);
        }
    }
    kn_simd_set(kn_simd_best());
}

/* The AVX2 attention (four positions per pass for q.k, eight accumulator
 * chains for the weighted V sum) and the AVX-512 one (eight positions per
 * pass, two per register, reduced together) give the scalar reference's bits: every
 * score and output element keeps the reference's operation order. Paged
 * K/V (scattered blocks), GQA, context lengths around the 4-position
 * unrolling, head_dim 64 and 128. */
TEST(kn_attention_avx2_equals_scalar_bit_for_bit)
{
    if (kn_simd_best() < KN_SIMD_AVX2) {
        fprintf(stderr, "no AVX2: nothing to compare\n");
        return;
    }
    uint64_t st = 12345;
    const int hds[] = {40, 64, 80, 128}; /* 40: AVX2 only (not a multiple of 16) */
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        int hd = hds[hi];
        int n_head = 6, n_head_kv = 2, bt = 4, n_blocks = 20, kv_dim = n_head_kv * hd;
        size_t bs = (size_t)bt * (size_t)kv_dim;
        float *k = malloc((size_t)n_blocks * bs * sizeof *k), *v = malloc((size_t)n_blocks * bs * sizeof *v);
        float *q = malloc((size_t)n_head * (size_t)hd * sizeof *q);
        float *o1 = malloc((size_t)n_head * (size_t)hd * sizeof *o1), *o2 = malloc((size_t)n_head * (size_t)hd * sizeof *o2);
        float sc[80];
        int32_t table[20];
        for (int i = 0; i < n_blocks; i++)
            table[i] = (i * 7 + 3) % n_blocks; /* scattered blocks */
        for (size_t i = 0; i < (size_t)n_blocks * bs; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            k[i] = (float)((int)(st >> 40) % 2001 - 1000) / 700.0f;
            v[i] = (float)((int)(st >> 20 & 0xfffff) % 2001 - 1000) / 900.0f;
        }
        for (int i = 0; i < n_head * hd; i++)
            q[i] = (float)((i * 37) % 201 - 100) / 80.0f;
        for (int n_ctx = 1; n_ctx <= 77; n_ctx += 3) {
            CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
            kn_attn_paged_f32(o1, q, k, v, table, bt, bs, n_ctx, n_head, n_head_kv, hd, 0.125f, sc);
            for (int lv = KN_SIMD_AVX2; lv <= kn_simd_best(); lv++) {
                CHECK_EQ_INT(kn_simd_set(lv), 0);
                kn_attn_paged_f32(o2, q, k, v, table, bt, bs, n_ctx, n_head, n_head_kv, hd, 0.125f, sc);
                if (memcmp(o1, o2, (size_t)n_head * (size_t)hd * sizeof *o1) != 0)
                    th_fail(__FILE__, __LINE__, "attention simd == scalar", "%s hd %d n_ctx %d",
                            kn_simd_name(lv), hd, n_ctx);
            }
            /* the windowed, soft-capped variant: windows starting inside a
             * block and at block edges, with and without the cap */
            for (int w = 1; w <= 13; w += 4) {
                int p0 = n_ctx > w ? n_ctx - w : 0;
                float cap = w % 8 == 1 ? 2.0f : 0.0f;
                CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
                kn_attn_paged_win_heads_f32(o1, q, k, v, table, bt, bs, p0, n_ctx, n_head,
                                            n_head_kv, hd, 0, n_head, 0.125f, cap, sc);
                for (int lv = KN_SIMD_AVX2; lv <= kn_simd_best(); lv++) {
                    CHECK_EQ_INT(kn_simd_set(lv), 0);
                    kn_attn_paged_win_heads_f32(o2, q, k, v, table, bt, bs, p0, n_ctx, n_head,
                                                n_head_kv, hd, 0, n_head, 0.125f, cap, sc);
                    if (memcmp(o1, o2, (size_t)n_head * (size_t)hd * sizeof *o1) != 0)
                        th_fail(__FILE__, __LINE__, "windowed attention simd == scalar",
                                "%s hd %d n_ctx %d p0 %d cap %g", kn_simd_name(lv), hd, n_ctx, p0,
                                (double)cap);
                }
            }
        }
        free(k);
        free(v);
        free(q);
        free(o1);
        free(o2);
    }
    kn_simd_set(kn_simd_best());
}
