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

/* ---- kn_attn_tile: grouped by kv head, several queries per call ---- */

/* One cache of n_blocks blocks in the three element types, the float copy
 * holding exactly the values the typed caches read back. */
struct tcache {
    float *f;        /* the converted values: the reference reads these */
    uint16_t *h;
    int8_t *q8;
    float *d8;
    size_t n;
};

static void tcache_init(struct tcache *c, size_t n, uint64_t *st, float mag)
{
    c->n = n;
    c->f = malloc(n * sizeof *c->f);
    c->h = malloc(n * sizeof *c->h);
    c->q8 = malloc(n);
    c->d8 = malloc(n / 32 * sizeof *c->d8 + sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        c->f[i] = (float)((int)(*st >> 40) % 2001 - 1000) / 1000.0f * mag;
        if (i % 29 == 0)
            c->f[i] *= 1e-6f; /* subnormal halves */
    }
}

static void tcache_free(struct tcache *c)
{
    free(c->f);
    free(c->h);
    free(c->q8);
    free(c->d8);
}

/* f holds the values of type t; fill t's storage from f and make f exactly
 * what t reads back */
static void tcache_as(struct tcache *c, int t)
{
    if (t == KN_KV_F16)
        for (size_t i = 0; i < c->n; i++) {
            c->h[i] = kn_fp32_to_fp16(c->f[i]);
            c->f[i] = kn_fp16_to_fp32(c->h[i]);
        }
    else if (t == KN_KV_Q8) {
        kn_kv_quantize_q8(c->q8, c->d8, c->f, c->n);
        kn_kv_dequantize_q8(c->f, c->q8, c->d8, c->n);
    }
}

/* Every (query, head) of a tile - n_q consecutive positions ending at
 * n_ctx - 1, heads h0..h1-1 - at every SIMD level and cache type equals
 * the per-head scalar reference (kn_attn_paged_win_heads_f32 on the float
 * values the cache holds) bit for bit, and the heads outside h0..h1-1 are
 * untouched; the cache types float32, binary16, int8 and binary16 keys
 * with int8 values. GQA groups 1, 2, 3, 4, 7, 8; head_dim 64, 32, 128, 40 (AVX2,
 * not AVX-512) and 20 (scalar on every level); pages of 16 and 5
 * positions, scattered; contexts 1, 17 and 1031 (260 for every other
 * shape: time); windows with soft-caps. */
TEST(kn_attn_tile_equals_per_head_reference_every_level_and_type)
{
    const struct {
        int nh, nkv, hd;
    } cfg[] = {{4, 4, 64}, {6, 3, 64}, {9, 3, 64}, {8, 2, 64}, {14, 2, 64},
               {16, 2, 32}, {4, 1, 128}, {6, 2, 40}, {4, 2, 20}};
    const int ctxs[] = {1, 17, 1031}, nqs[] = {1, 3, 8};
    uint64_t st = 4242;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        int nh = cfg[ci].nh, nkv = cfg[ci].nkv, hd = cfg[ci].hd, kv_dim = nkv * hd;
        int bt = ci % 2 ? 5 : 16, max_ctx = 1031, n_blocks = (max_ctx + bt - 1) / bt + 3;
        size_t bs = (size_t)bt * (size_t)kv_dim, nkvv = (size_t)n_blocks * bs;
        int32_t *table = malloc((size_t)n_blocks * sizeof *table);
        for (int i = 0; i < n_blocks; i++)
            table[i] = (int32_t)((i * 7 + 3) % n_blocks); /* 7 and n_blocks coprime below */
        size_t qd = (size_t)nh * (size_t)hd;
        float *q = malloc(8 * qd * sizeof *q), *o = malloc(8 * qd * sizeof *o),
              *ref = malloc(8 * qd * sizeof *ref), *sc = malloc((size_t)max_ctx * sizeof *sc);
        void *scratch = malloc(kn_attn_tile_scratch_bytes(8, nh, nkv, hd, max_ctx));
        for (size_t i = 0; i < 8 * qd; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            q[i] = (float)((int)(st >> 40) % 2001 - 1000) / 400.0f;
        }
        for (int t = KN_KV_F32; t <= KN_KV_F16_Q8; t++) {
            if (t >= KN_KV_Q8 && kv_dim % 32)
                continue;
            /* the element types of K and V */
            int kt = t == KN_KV_F16_Q8 ? KN_KV_F16 : t, vt = t == KN_KV_F16_Q8 ? KN_KV_Q8 : t;
            struct tcache k, v;
            tcache_init(&k, nkvv, &st, 1.5f);
            tcache_init(&v, nkvv, &st, 1.0f);
            tcache_as(&k, kt);
            tcache_as(&v, vt);
            struct kn_kv_layer L = {t, NULL, NULL, NULL, NULL, table, bt, bs};
            L.k = kt == KN_KV_F32 ? (const void *)k.f : kt == KN_KV_F16 ? (const void *)k.h : (const void *)k.q8;
            L.v = vt == KN_KV_F32 ? (const void *)v.f : vt == KN_KV_F16 ? (const void *)v.h : (const void *)v.q8;
            if (kt == KN_KV_Q8)
                L.k_scale = k.d8;
            if (vt == KN_KV_Q8)
                L.v_scale = v.d8;
            for (size_t xi = 0; xi < sizeof ctxs / sizeof ctxs[0]; xi++) {
                int ctx = ctxs[xi] > 1000 && ci % 2 ? 260 : ctxs[xi];
                for (size_t ni = 0; ni < sizeof nqs / sizeof nqs[0]; ni++) {
                    if (ctx > 1000 && nqs[ni] == 3)
                        continue; /* (time) */
                    int n_q = nqs[ni] < ctx ? nqs[ni] : ctx;
                    int32_t n_ctx[8];
                    for (int i = 0; i < n_q; i++)
                        n_ctx[i] = ctx - n_q + 1 + i;
                    int variant = (int)(ci + xi + ni);
                    int window = variant % 2 ? 9 : 0;
                    float cap = window ? 2.0f : 0.0f;
                    int h0 = variant % 3 == 1 && nh > 2 ? 1 : 0, h1 = h0 ? nh - 1 : nh;
                    /* the per-head kernel gives the same bits at every level (the
                     * tests above): run it at the fastest */
                    CHECK_EQ_INT(kn_simd_set(kn_simd_best()), 0);
                    memset(ref, 0xAB, 8 * qd * sizeof *ref);
                    for (int i = 0; i < n_q; i++) {
                        int p0 = window && n_ctx[i] > window ? n_ctx[i] - window : 0;
                        kn_attn_paged_win_heads_f32(ref + (size_t)i * qd, q + (size_t)i * qd, k.f,
                                                    v.f, table, bt, bs, p0, n_ctx[i], nh, nkv, hd,
                                                    h0, h1, 0.125f, cap, sc);
                    }
                    for (int lv = KN_SIMD_SCALAR; lv <= kn_simd_best(); lv++) {
                        CHECK_EQ_INT(kn_simd_set(lv), 0);
                        memset(o, 0xAB, 8 * qd * sizeof *o);
                        kn_attn_tile(o, qd, q, qd, n_ctx, n_q, &L, nh, nkv, hd, h0, h1, window,
                                     0.125f, cap, scratch);
                        for (int i = 0; i < n_q; i++)
                            if (memcmp(o + (size_t)i * qd, ref + (size_t)i * qd, qd * sizeof *ref) != 0)
                                th_fail(__FILE__, __LINE__, "tile == per-head reference",
                                        "%s type %d heads %d/%d hd %d bt %d n_ctx %d n_q %d q %d "
                                        "window %d h %d..%d",
                                        kn_simd_name(lv), t, nh, nkv, hd, bt, n_ctx[i], n_q, i,
                                        window, h0, h1);
                    }
                }
            }
            tcache_free(&k);
            tcache_free(&v);
        }
        free(table);
        free(q);
        free(o);
        free(ref);
        free(sc);
        free(scratch);
    }
    kn_simd_set(kn_simd_best());
}

/* A query's numbers do not depend on the tile it shares: the same token
 * alone, in tiles of every size and at every offset gives the same bits
 * (the engine's batch and chunk invariance rest on it). */
TEST(kn_attn_tile_query_independent_of_its_tile)
{
    enum { NH = 9, NKV = 3, HD = 64, BT = 16, CTX = 300, NB = CTX / BT + 1 };
    size_t qd = NH * HD, bs = (size_t)BT * NKV * HD, n = NB * bs;
    uint64_t st = 99;
    struct tcache k, v;
    tcache_init(&k, n, &st, 2.0f);
    tcache_init(&v, n, &st, 1.0f);
    tcache_as(&k, KN_KV_Q8);
    tcache_as(&v, KN_KV_Q8);
    int32_t table[NB];
    for (int i = 0; i < NB; i++)
        table[i] = NB - 1 - i;
    struct kn_kv_layer L = {KN_KV_Q8, k.q8, v.q8, k.d8, v.d8, table, BT, bs};
    float *q = malloc(24 * qd * sizeof *q), *alone = malloc(24 * qd * sizeof *alone),
          *got = malloc(24 * qd * sizeof *got);
    for (size_t i = 0; i < 24 * qd; i++)
        q[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 300.0f;
    void *scratch = malloc(kn_attn_tile_scratch_bytes(24, NH, NKV, HD, CTX));
    int32_t n_ctx[24];
    for (int i = 0; i < 24; i++)
        n_ctx[i] = CTX - 24 + 1 + i;
    for (int lv = KN_SIMD_SCALAR; lv <= kn_simd_best(); lv++) {
        CHECK_EQ_INT(kn_simd_set(lv), 0);
        for (int i = 0; i < 24; i++)
            kn_attn_tile(alone + (size_t)i * qd, qd, q + (size_t)i * qd, qd, n_ctx + i, 1, &L, NH, NKV,
                         HD, 0, NH, 0, 0.125f, 0.0f, scratch);
        for (int tq = 2; tq <= 24; tq += 3) {
            for (int i = 0; i < 24; i += tq) {
                int m = 24 - i < tq ? 24 - i : tq;
                kn_attn_tile(got + (size_t)i * qd, qd, q + (size_t)i * qd, qd, n_ctx + i, m, &L, NH,
                             NKV, HD, 0, NH, 0, 0.125f, 0.0f, scratch);
            }
            if (memcmp(got, alone, 24 * qd * sizeof *got) != 0)
                th_fail(__FILE__, __LINE__, "tile of tq == alone", "%s tq %d", kn_simd_name(lv), tq);
        }
    }
    kn_simd_set(kn_simd_best());
    tcache_free(&k);
    tcache_free(&v);
    free(q);
    free(alone);
    free(got);
    free(scratch);
}

/* int8 rows: |x - q d| <= d / 2 (d = max|x| / 127, up to float rounding),
 * the largest value maps to +-127, an all-zero block stays 0 with d = 0,
 * a NaN or infinity makes its block read back as NaN, and the
 * quantization of a block depends on that block alone. */
TEST(kn_kv_q8_round_trip_error_bound)
{
    enum { N = 32 * 64 };
    static float x[N], y[N], d[N / 32], d2[N / 32];
    static int8_t qv[N], q2[N];
    uint64_t st = 5;
    for (int i = 0; i < N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        float mag = powf(10.0f, (float)((i / 32) % 9) - 4.0f); /* 1e-4 .. 1e4 per block */
        x[i] = (float)((int)(st >> 40) % 20001 - 10000) / 10000.0f * mag;
    }
    for (int j = 0; j < 32; j++)
        x[32 + j] = 0.0f; /* block 1: zeros */
    x[64 + 5] = NAN;      /* block 2: a NaN */
    x[96 + 7] = -INFINITY; /* block 3: an infinity */
    kn_kv_quantize_q8(qv, d, x, N);
    kn_kv_dequantize_q8(y, qv, d, N);
    for (int b = 0; b < N / 32; b++) {
        if (b == 2 || b == 3) {
            CHECK(isnan(d[b]));
            for (int j = 0; j < 32; j++)
                CHECK(isnan(y[b * 32 + j]));
            continue;
        }
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        CHECK(d[b] == amax / 127.0f);
        int has127 = 0;
        for (int j = 0; j < 32; j++) {
            int i = b * 32 + j;
            CHECK(qv[i] >= -127 && qv[i] <= 127);
            CHECK(y[i] == (float)qv[i] * d[b]);
            has127 |= qv[i] == 127 || qv[i] == -127;
            if (fabsf(x[i] - y[i]) > d[b] * 0.5f * (1 + 1e-5f) + 1e-37f)
                th_fail(__FILE__, __LINE__, "|x - q d| <= d / 2", "i %d x %g y %g d %g", i,
                        (double)x[i], (double)y[i], (double)d[b]);
        }
        CHECK(b == 1 ? d[b] == 0.0f && !has127 : has127);
    }
    /* per block: quantizing a block alone gives the same bytes */
    for (int b = 0; b < N / 32; b += 5) {
        kn_kv_quantize_q8(q2, d2, x + b * 32, 32);
        CHECK(memcmp(q2, qv + b * 32, 32) == 0);
        CHECK(memcmp(d2, d + b, sizeof(float)) == 0);
    }
}
