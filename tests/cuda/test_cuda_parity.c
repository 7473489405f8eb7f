/* GPU parity tests: every CUDA op against its CPU reference (the table in
 * kernels/kn.h: kernels/cpu/<op>.c) on fresh random inputs at several
 * shapes, with the tolerance its .cu header documents. Device outputs are
 * poisoned (NaN bytes) before each run, so an element left unwritten fails,
 * and NaN never passes a comparison (cu_test.h). Built only with make
 * CUDA=1; every test skips when no GPU is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn.h"
#include "tests/cuda/cu_test.h"

TEST(cuda_rmsnorm_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][2] = {{1, 64}, {7, 576}, {33, 4096}, {128, 8192}, {3, 100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], dim = shapes[s][1];
        size_t n = (size_t)rows * dim;
        float *x = malloc(n * 4), *w = malloc((size_t)dim * 4), *got = malloc(n * 4),
              *want = malloc(n * 4);
        cu_fill(x, n, 1 + (uint32_t)s, 3.0f);
        cu_fill(w, (size_t)dim, 99, 1.0f);
        kn_rmsnorm_f32(want, x, w, rows, dim, 1e-5f);
        CHECK_EQ_INT(kn_cuda_rmsnorm_f32_host(c, got, x, w, rows, dim, 1e-5f), 0);
        for (size_t i = 0; i < n; i++)
            CHECK_NEAR(got[i], want[i], 1e-5 * (fabs(want[i]) + 1e-3));
        free(x), free(w), free(got), free(want);
    }
    kn_cuda_free(c);
}

/* bf16 output and the row gather (the LM head's marked rows). */
TEST(cuda_rmsnorm_gather_bf16_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][3] = {{10, 3, 576}, {64, 17, 4096}, {5, 5, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], n_out = shapes[s][1], dim = shapes[s][2];
        float *x = malloc((size_t)rows * dim * 4), *w = malloc((size_t)dim * 4);
        float *want = malloc((size_t)n_out * dim * 4), *got = malloc((size_t)n_out * dim * 4);
        uint16_t *gb = malloc((size_t)n_out * dim * 2);
        int32_t *ids = malloc((size_t)n_out * 4);
        cu_fill(x, (size_t)rows * dim, 5 + (uint32_t)s, 2.0f);
        cu_fill(w, (size_t)dim, 6, 1.0f);
        for (int r = 0; r < n_out; r++) {
            ids[r] = (r * 7 + 3) % rows;
            kn_rmsnorm_f32(want + (size_t)r * dim, x + (size_t)ids[r] * dim, w, 1, dim, 1e-6f);
        }
        float *dx = cu_put(c, x, (size_t)rows * dim * 4), *dw = cu_put(c, w, (size_t)dim * 4);
        int32_t *dids = cu_put(c, ids, (size_t)n_out * 4);
        void *dout = cu_alloc(c, (size_t)n_out * dim * 4);
        CHECK_EQ_INT(kn_cuda_rmsnorm(c, dout, 0, dx, dw, dids, n_out, dim, 1e-6f), 0);
        cu_get(c, got, dout, (size_t)n_out * dim * 4);
        CHECK(cu_max_rel(got, want, (size_t)n_out * dim, 1e-3) < 1e-5);
        CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, (size_t)n_out * dim * 4), 0);
        CHECK_EQ_INT(kn_cuda_rmsnorm(c, dout, 1, dx, dw, dids, n_out, dim, 1e-6f), 0);
        cu_get(c, gb, dout, (size_t)n_out * dim * 2);
        cu_from_bf16(got, gb, (size_t)n_out * dim);
        CHECK(cu_max_rel(got, want, (size_t)n_out * dim, 1e-3) < 4.5e-3);
        kn_cuda_release(c, dx), kn_cuda_release(c, dw), kn_cuda_release(c, dids);
        kn_cuda_release(c, dout);
        free(x), free(w), free(want), free(got), free(gb), free(ids);
    }
    kn_cuda_free(c);
}

TEST(cuda_matmul_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][3] = {{1, 576, 1536}, {16, 512, 768}, {5, 33, 7}, {64, 2048, 256}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1], m = shapes[s][2];
        float *x = malloc((size_t)n * k * 4), *w = malloc((size_t)m * k * 4);
        float *got = malloc((size_t)n * m * 4), *want = malloc((size_t)n * m * 4);
        cu_fill(x, (size_t)n * k, 7 + (uint32_t)s, 1.0f);
        cu_fill(w, (size_t)m * k, 70 + (uint32_t)s, 0.1f);
        kn_matmul_f32(want, x, w, n, k, m);
        CHECK_EQ_INT(kn_cuda_matmul_f32_host(c, got, x, w, n, k, m), 0);
        CHECK(th_rel_l2(got, want, (size_t)n * m) < 1e-4);
        free(x), free(w), free(got), free(want);
    }
    kn_cuda_free(c);
}

/* bf16 GEMM on bf16-representable inputs: products are exact in fp32, only
 * the summation order differs from kn_matmul_f32 (1e-4 relative L2); beta
 * 1 adds into out, and ldo > m leaves the gap columns alone. */
TEST(cuda_gemm_bf16_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][3] = {{1, 576, 1536}, {16, 4096, 1024}, {3, 64, 7}, {200, 576, 1536}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1], m = shapes[s][2], ldo = m + 5;
        size_t nx = (size_t)n * k, nw = (size_t)m * k, no = (size_t)n * ldo;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *want = malloc((size_t)n * m * 4);
        float *acc = malloc(no * 4), *got = malloc(no * 4);
        uint16_t *xb = malloc(nx * 2), *wb = malloc(nw * 2);
        cu_fill(x, nx, 11 + (uint32_t)s, 1.0f);
        cu_fill(w, nw, 12 + (uint32_t)s, 0.05f);
        cu_round_bf16(x, nx), cu_round_bf16(w, nw);
        cu_to_bf16(xb, x, nx), cu_to_bf16(wb, w, nw);
        cu_fill(acc, no, 13, 1.0f);
        kn_matmul_f32(want, x, w, n, k, m);
        void *dx = cu_put(c, xb, nx * 2), *dw = cu_put(c, wb, nw * 2);
        float *dout = cu_put(c, acc, no * 4);
        CHECK_EQ_INT(kn_cuda_gemm_bf16(c, dout, (size_t)ldo, dx, dw, n, k, m, 1.0f), 0);
        cu_get(c, got, dout, no * 4);
        float *g2 = malloc((size_t)n * m * 4), *w2 = malloc((size_t)n * m * 4);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < ldo; j++) {
                size_t i = (size_t)r * ldo + j;
                if (j >= m) {
                    CHECK(memcmp(&got[i], &acc[i], 4) == 0); /* gap untouched */
                    continue;
                }
                g2[(size_t)r * m + j] = got[i] - acc[i];
                w2[(size_t)r * m + j] = want[(size_t)r * m + j];
            }
        CHECK(th_rel_l2(g2, w2, (size_t)n * m) < 1e-4);
        /* beta 0 overwrites (poisoned output) */
        CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, no * 4), 0);
        CHECK_EQ_INT(kn_cuda_gemm_bf16(c, dout, (size_t)m, dx, dw, n, k, m, 0.0f), 0);
        cu_get(c, got, dout, (size_t)n * m * 4);
        CHECK(th_rel_l2(got, want, (size_t)n * m) < 1e-4);
        kn_cuda_release(c, dx), kn_cuda_release(c, dw), kn_cuda_release(c, dout);
        free(x), free(w), free(want), free(acc), free(got), free(xb), free(wb), free(g2), free(w2);
    }
    kn_cuda_free(c);
}

/* Random blocks of a type with finite scales (random bytes elsewhere). */
static void make_blocks(uint32_t type, uint8_t *p, size_t n_bytes, uint32_t seed)
{
    for (size_t i = 0; i < n_bytes; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
    size_t bb = ggml_type_block_bytes(type);
    for (size_t b = 0; b + bb <= n_bytes; b += bb) {
        uint8_t *blk = p + b;
        uint16_t h1 = kn_fp32_to_fp16(cu_rand(&seed) * 0.1f);
        uint16_t h2 = kn_fp32_to_fp16(cu_rand(&seed) * 0.1f);
        switch (type) {
        case GGML_TYPE_F32: {
            float f = cu_rand(&seed) * 3.0f;
            memcpy(blk, &f, 4);
            break;
        }
        case GGML_TYPE_F16: memcpy(blk, &h1, 2); break;
        case GGML_TYPE_BF16: {
            uint16_t v = kn_fp32_to_bf16(cu_rand(&seed) * 3.0f);
            memcpy(blk, &v, 2);
            break;
        }
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: memcpy(blk, &h1, 2); break;
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
            memcpy(blk, &h1, 2), memcpy(blk + 2, &h2, 2);
            break;
        case GGML_TYPE_Q6_K: memcpy(blk + 208, &h1, 2); break;
        default: break;
        }
    }
}

/* Dequantization (weights at load, the embedding lookup): f32 output is
 * bit-identical to kn_dequant_row, bf16 output to its rounding. */
TEST(cuda_dequant_and_embedding_match_cpu)
{
    struct kn_cuda *c = cu_open();
    static const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                                     GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                     GGML_TYPE_Q6_K};
    static const int shapes[][2] = {{7, 256}, {1, 512}, {33, 768}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint32_t type = types[t];
        CHECK(kn_cuda_dequant_supported(type));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            int64_t rb;
            CHECK_EQ_INT(ggml_type_row_bytes(type, cols, &rb), 0);
            size_t nbytes = (size_t)rb * rows, nv = (size_t)rows * cols;
            uint8_t *src = malloc(nbytes);
            make_blocks(type, src, nbytes, 100 + (uint32_t)(t * 7 + s));
            float *want = malloc(nv * 4), *got = malloc(nv * 4);
            uint16_t *gb = malloc(nv * 2);
            CHECK_EQ_INT(kn_dequant_row(type, src, want, (int64_t)nv), 0);
            void *dsrc = cu_put(c, src, nbytes), *dout = cu_alloc(c, nv * 4);
            CHECK_EQ_INT(kn_cuda_dequant(c, dout, 0, dsrc, type, (size_t)rb, NULL, rows, cols), 0);
            cu_get(c, got, dout, nv * 4);
            CHECK(memcmp(got, want, nv * 4) == 0);
            CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, nv * 4), 0);
            CHECK_EQ_INT(kn_cuda_dequant(c, dout, 1, dsrc, type, (size_t)rb, NULL, rows, cols), 0);
            cu_get(c, gb, dout, nv * 2);
            for (size_t i = 0; i < nv; i++)
                CHECK_EQ_INT(gb[i], kn_fp32_to_bf16(want[i]));
            /* embedding lookup: gathered rows, repeated ids */
            int n_ids = 5;
            int32_t ids[5] = {rows - 1, 0, rows / 2, 0, rows - 1};
            int32_t *dids = cu_put(c, ids, sizeof ids);
            float *ref = malloc((size_t)n_ids * cols * 4);
            kn_get_rows(ref, src, type, (size_t)rb, ids, n_ids, cols);
            CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, nv * 4), 0);
            CHECK_EQ_INT(kn_cuda_dequant(c, dout, 0, dsrc, type, (size_t)rb, dids, n_ids, cols), 0);
            cu_get(c, got, dout, (size_t)n_ids * cols * 4);
            CHECK(memcmp(got, ref, (size_t)n_ids * cols * 4) == 0);
            kn_cuda_release(c, dsrc), kn_cuda_release(c, dout), kn_cuda_release(c, dids);
            free(src), free(want), free(got), free(gb), free(ref);
        }
    }
    CHECK(!kn_cuda_dequant_supported(9)); /* Q8_1 */
    kn_cuda_free(c);
}

/* Fused dequant matvec (batch-1 decode) vs dequantized rows @ x. */
TEST(cuda_matvec_q_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const uint32_t types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0};
    static const int shapes[][2] = {{1, 32}, {576, 576}, {1536, 576}, {100, 1536}, {49152, 576}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        CHECK(kn_cuda_matvec_supported(types[t]));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int m = shapes[s][0], k = shapes[s][1];
            int64_t rb;
            CHECK_EQ_INT(ggml_type_row_bytes(types[t], k, &rb), 0);
            size_t nbytes = (size_t)rb * m;
            uint8_t *w = malloc(nbytes);
            make_blocks(types[t], w, nbytes, 300 + (uint32_t)(t * 11 + s));
            float *wf = malloc((size_t)m * k * 4), *x = malloc((size_t)k * 4);
            float *want = malloc((size_t)m * 4), *got = malloc((size_t)m * 4), *acc = malloc((size_t)m * 4);
            CHECK_EQ_INT(kn_dequant_row(types[t], w, wf, (int64_t)m * k), 0);
            cu_fill(x, (size_t)k, 5 + (uint32_t)s, 2.0f);
            cu_fill(acc, (size_t)m, 6, 1.0f);
            kn_matmul_f32(want, x, wf, 1, k, m);
            void *dw = cu_put(c, w, nbytes);
            float *dx = cu_put(c, x, (size_t)k * 4), *dout = cu_alloc(c, (size_t)m * 4);
            CHECK_EQ_INT(kn_cuda_matvec_q(c, dout, 0, dx, dw, types[t], (size_t)rb, m, k), 0);
            cu_get(c, got, dout, (size_t)m * 4);
            CHECK(th_rel_l2(got, want, (size_t)m) < 1e-5);
            CHECK_EQ_INT(kn_cuda_upload(c, dout, acc, (size_t)m * 4), 0);
            CHECK_EQ_INT(kn_cuda_matvec_q(c, dout, 1, dx, dw, types[t], (size_t)rb, m, k), 0);
            cu_get(c, got, dout, (size_t)m * 4);
            for (int i = 0; i < m; i++)
                got[i] -= acc[i];
            CHECK(th_rel_l2(got, want, (size_t)m) < 1e-5);
            kn_cuda_release(c, dw), kn_cuda_release(c, dx), kn_cuda_release(c, dout);
            free(w), free(wf), free(x), free(want), free(got), free(acc);
        }
    }
    CHECK(!kn_cuda_matvec_supported(GGML_TYPE_Q4_K));
    kn_cuda_free(c);
}

TEST(cuda_rope_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    /* n_tok, n_head, head_dim, n_rot, neox, extra row stride, freq factors */
    static const int cases[][7] = {{5, 9, 64, 64, 0, 0, 0},   {17, 32, 128, 128, 0, 1024, 1},
                                   {3, 2, 128, 64, 1, 0, 0},  {64, 8, 128, 128, 1, 256, 1},
                                   {1, 1, 256, 256, 0, 0, 0}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        int n_tok = cases[s][0], nh = cases[s][1], hd = cases[s][2], n_rot = cases[s][3];
        int neox = cases[s][4];
        size_t stride = (size_t)nh * hd + (size_t)cases[s][5];
        size_t n = (size_t)n_tok * stride;
        float *x = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
        float *dense = malloc((size_t)n_tok * nh * hd * 4), *ff = malloc((size_t)n_rot / 2 * 4);
        double *theta = malloc((size_t)n_rot / 2 * sizeof(double));
        int32_t *pos = malloc((size_t)n_tok * 4);
        cu_fill(x, n, 21 + (uint32_t)s, 4.0f);
        for (int i = 0; i < n_rot / 2; i++)
            ff[i] = 1.0f + (float)i * 0.25f;
        const float *ffp = cases[s][6] ? ff : NULL;
        for (int t = 0; t < n_tok; t++)
            pos[t] = t * 313 % 70000;
        for (int t = 0; t < n_tok; t++)
            memcpy(dense + (size_t)t * nh * hd, x + (size_t)t * stride, (size_t)nh * hd * 4);
        kn_rope_f32(dense, n_tok, nh, hd, n_rot, pos, 500000.0f, 0.5f, ffp,
                    neox ? KN_ROPE_NEOX : KN_ROPE_NORM);
        memcpy(want, x, n * 4);
        for (int t = 0; t < n_tok; t++)
            memcpy(want + (size_t)t * stride, dense + (size_t)t * nh * hd, (size_t)nh * hd * 4);
        kn_cuda_rope_theta(theta, n_rot, 500000.0f, 0.5f, ffp);
        float *dx = cu_put(c, x, n * 4);
        int32_t *dpos = cu_put(c, pos, (size_t)n_tok * 4);
        double *dth = cu_put(c, theta, (size_t)n_rot / 2 * sizeof(double));
        CHECK_EQ_INT(kn_cuda_rope(c, dx, n_tok, stride, nh, hd, n_rot, dpos, dth, neox), 0);
        cu_get(c, got, dx, n * 4);
        for (size_t i = 0; i < n; i++)
            CHECK_NEAR(got[i], want[i], 2e-6 * 4);
        kn_cuda_release(c, dx), kn_cuda_release(c, dpos), kn_cuda_release(c, dth);
        free(x), free(want), free(got), free(dense), free(ff), free(theta), free(pos);
    }
    kn_cuda_free(c);
}

TEST(cuda_swiglu_add_bias_match_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][2] = {{1, 1536}, {7, 14336}, {64, 100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t stride = 2 * (size_t)cols, nin = (size_t)rows * stride, n = (size_t)rows * cols;
        float *gu = malloc(nin * 4), *g = malloc(n * 4), *u = malloc(n * 4), *want = malloc(n * 4);
        float *got = malloc(n * 4);
        uint16_t *gb = malloc(n * 2);
        cu_fill(gu, nin, 31 + (uint32_t)s, 8.0f);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++) {
                g[(size_t)r * cols + j] = gu[(size_t)r * stride + j];
                u[(size_t)r * cols + j] = gu[(size_t)r * stride + cols + j];
            }
        kn_swiglu_f32(want, g, u, n);
        float *dgu = cu_put(c, gu, nin * 4);
        void *dout = cu_alloc(c, n * 4);
        CHECK_EQ_INT(kn_cuda_swiglu(c, dout, 0, dgu, dgu + cols, rows, cols, stride), 0);
        cu_get(c, got, dout, n * 4);
        CHECK(cu_max_rel(got, want, n, 1e-6) < 2e-6);
        CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, n * 4), 0);
        CHECK_EQ_INT(kn_cuda_swiglu(c, dout, 1, dgu, dgu + cols, rows, cols, stride), 0);
        cu_get(c, gb, dout, n * 2);
        cu_from_bf16(got, gb, n);
        CHECK(cu_max_rel(got, want, n, 1e-6) < 4.5e-3);
        /* residual add and bias add (on a strided buffer): exact */
        float *y = malloc(n * 4), *b = malloc((size_t)cols * 4), *ref = malloc(nin * 4);
        cu_fill(y, n, 41, 1.0f);
        cu_fill(b, (size_t)cols, 42, 1.0f);
        memcpy(want, g, n * 4);
        kn_add_f32(want, y, n);
        float *dg = cu_put(c, g, n * 4), *dy = cu_put(c, y, n * 4), *db = cu_put(c, b, (size_t)cols * 4);
        CHECK_EQ_INT(kn_cuda_add(c, dg, dy, n), 0);
        cu_get(c, got, dg, n * 4);
        CHECK(memcmp(got, want, n * 4) == 0);
        memcpy(ref, gu, nin * 4);
        for (int r = 0; r < rows; r++)
            kn_add_bias_f32(ref + (size_t)r * stride, b, 1, cols);
        CHECK_EQ_INT(kn_cuda_add_bias(c, dgu, db, rows, cols, stride), 0);
        float *got2 = malloc(nin * 4);
        cu_get(c, got2, dgu, nin * 4);
        CHECK(memcmp(got2, ref, nin * 4) == 0);
        /* f32 -> bf16 */
        CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, n * 2), 0);
        CHECK_EQ_INT(kn_cuda_to_bf16(c, dout, dy, n), 0);
        cu_get(c, gb, dout, n * 2);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ_INT(gb[i], kn_fp32_to_bf16(y[i]));
        kn_cuda_release(c, dgu), kn_cuda_release(c, dout), kn_cuda_release(c, dg);
        kn_cuda_release(c, dy), kn_cuda_release(c, db);
        free(gu), free(g), free(u), free(want), free(got), free(gb), free(y), free(b), free(ref);
        free(got2);
    }
    kn_cuda_free(c);
}

TEST(cuda_argmax_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const int shapes[][2] = {{1, 49152}, {9, 128256}, {64, 33}, {3, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = malloc(n * 4);
        cu_fill(x, n, 51 + (uint32_t)s, 10.0f);
        for (int r = 0; r < rows; r++) {
            float *row = x + (size_t)r * cols;
            if (r % 3 == 1 && cols > 4) { /* a tie: the first index must win */
                row[cols - 1] = 20.0f;
                row[cols / 2] = 20.0f;
            }
            if (r % 3 == 2 && cols > 4) { /* NaNs never win */
                row[0] = NAN;
                row[cols - 2] = NAN;
            }
        }
        int32_t *got = malloc((size_t)rows * 4);
        float *dx = cu_put(c, x, n * 4);
        int32_t *dids = cu_alloc(c, (size_t)rows * 4);
        CHECK_EQ_INT(kn_cuda_argmax(c, dids, dx, rows, cols), 0);
        cu_get(c, got, dids, (size_t)rows * 4);
        for (int r = 0; r < rows; r++)
            CHECK_EQ_INT(got[r], kn_argmax_f32(x + (size_t)r * cols, cols));
        kn_cuda_release(c, dx), kn_cuda_release(c, dids);
        free(x), free(got);
    }
    kn_cuda_free(c);
}

/* ---- paged KV append + attention ---- */

struct attn_case {
    const char *name;
    int n_head, n_head_kv, head_dim;
    int n_seq;
    int prefix[4];  /* positions already cached per sequence */
    int new_tok[4]; /* tokens of this step per sequence */
    int full_work;  /* 1: workspace for every split; 0: none (one split) */
};

static void run_attn_case(struct kn_cuda *c, const struct attn_case *ac, uint32_t seed)
{
    const int bt = 16, nh = ac->n_head, nkv = ac->n_head_kv, hd = ac->head_dim;
    const int kv_dim = nkv * hd, q_dim = nh * hd, qkv = q_dim + 2 * kv_dim;
    int n_tok = 0, max_ctx = 0, max_blocks = 0, n_blocks = 0;
    for (int s = 0; s < ac->n_seq; s++) {
        int len = ac->prefix[s] + ac->new_tok[s];
        n_tok += ac->new_tok[s];
        max_ctx = len > max_ctx ? len : max_ctx;
        int nb = (len + bt - 1) / bt;
        max_blocks = nb > max_blocks ? nb : max_blocks;
    }
    /* a pool larger than all tables together (3+ unused blocks), size coprime with 7 so
     * that (i * 7 + 2) % n_blocks below is a scrambled permutation: no block is shared */
    n_blocks = ac->n_seq * max_blocks + 3;
    while (n_blocks % 7 == 0)
        n_blocks++;
    /* block tables: a scrambled permutation of the pool */
    int32_t *tables = malloc((size_t)ac->n_seq * max_blocks * 4);
    for (int i = 0; i < ac->n_seq * max_blocks; i++)
        tables[i] = (i * 7 + 2) % n_blocks;
    size_t cache_n = (size_t)n_blocks * bt * kv_dim;
    float *kc = calloc(cache_n, 4), *vc = calloc(cache_n, 4);
    uint16_t *kcb = malloc(cache_n * 2), *vcb = malloc(cache_n * 2);
    /* cached prefix: random bf16 values at their slots */
    uint32_t sd = seed;
    for (int s = 0; s < ac->n_seq; s++)
        for (int p = 0; p < ac->prefix[s]; p++) {
            size_t row = (size_t)tables[s * max_blocks + p / bt] * bt + p % bt;
            for (int d = 0; d < kv_dim; d++) {
                kc[row * kv_dim + d] = cu_rand(&sd);
                vc[row * kv_dim + d] = cu_rand(&sd);
            }
        }
    cu_round_bf16(kc, cache_n), cu_round_bf16(vc, cache_n);
    cu_to_bf16(kcb, kc, cache_n), cu_to_bf16(vcb, vc, cache_n);
    /* this step's tokens: fused q|k|v rows */
    float *x = malloc((size_t)n_tok * qkv * 4);
    cu_fill(x, (size_t)n_tok * qkv, seed + 1, 1.0f);
    int32_t *tseq = malloc((size_t)n_tok * 4), *tpos = malloc((size_t)n_tok * 4);
    int64_t *slot = malloc((size_t)n_tok * 8);
    int32_t *tiles = malloc((size_t)n_tok * 2 * 4);
    int tile_max = kn_cuda_attention_tile_max(nh, nkv), n_tiles = 0, t = 0;
    for (int s = 0; s < ac->n_seq; s++)
        for (int i = 0; i < ac->new_tok[s]; i++, t++) {
            tseq[t] = s;
            tpos[t] = ac->prefix[s] + i;
            slot[t] = (int64_t)tables[s * max_blocks + tpos[t] / bt] * bt + tpos[t] % bt;
            if (i % tile_max == 0) {
                tiles[2 * n_tiles] = t;
                tiles[2 * n_tiles + 1] = 0;
                n_tiles++;
            }
            tiles[2 * (n_tiles - 1) + 1]++;
        }
    /* CPU reference: append (bf16-rounded) then attend, token by token */
    for (t = 0; t < n_tok; t++)
        for (int d = 0; d < kv_dim; d++) {
            kc[(size_t)slot[t] * kv_dim + d] =
                kn_bf16_to_fp32(kn_fp32_to_bf16(x[(size_t)t * qkv + q_dim + d]));
            vc[(size_t)slot[t] * kv_dim + d] =
                kn_bf16_to_fp32(kn_fp32_to_bf16(x[(size_t)t * qkv + q_dim + kv_dim + d]));
        }
    float scale = 1.0f / sqrtf((float)hd);
    float *want = malloc((size_t)n_tok * q_dim * 4), *got = malloc((size_t)n_tok * q_dim * 4);
    float *scores = malloc((size_t)max_ctx * 4);
    for (t = 0; t < n_tok; t++)
        kn_attn_paged_f32(want + (size_t)t * q_dim, x + (size_t)t * qkv, kc, vc,
                          tables + tseq[t] * max_blocks, bt, (size_t)bt * kv_dim, tpos[t] + 1, nh,
                          nkv, hd, scale, scores);
    /* device */
    void *dkc = cu_put(c, kcb, cache_n * 2), *dvc = cu_put(c, vcb, cache_n * 2);
    float *dx = cu_put(c, x, (size_t)n_tok * qkv * 4);
    int32_t *dtab = cu_put(c, tables, (size_t)ac->n_seq * max_blocks * 4);
    int32_t *dseq = cu_put(c, tseq, (size_t)n_tok * 4), *dpos = cu_put(c, tpos, (size_t)n_tok * 4);
    int64_t *dslot = cu_put(c, slot, (size_t)n_tok * 8);
    int32_t *dtiles = cu_put(c, tiles, (size_t)n_tiles * 2 * 4);
    size_t wb = ac->full_work ? kn_cuda_attention_work_bytes(n_tok, nh, hd, max_ctx) : 0;
    float *dwork = wb ? cu_alloc(c, wb) : NULL;
    void *dout = cu_alloc(c, (size_t)n_tok * q_dim * 4);
    CHECK_EQ_INT(kn_cuda_kv_append(c, dkc, dvc, dx + q_dim, dx + q_dim + kv_dim, (size_t)qkv, dslot,
                                   n_tok, kv_dim),
                 0);
    /* the appended cache equals the CPU one (mismatches counted and the
     * first one located before the check: one GPU run must say where) */
    uint16_t *back = malloc(cache_n * 2);
    size_t bad_k = 0, bad_v = 0, first_bad = SIZE_MAX;
    cu_get(c, back, dkc, cache_n * 2);
    for (size_t i = 0; i < cache_n; i++)
        if (back[i] != kn_fp32_to_bf16(kc[i]) && bad_k++ == 0)
            first_bad = i;
    cu_get(c, back, dvc, cache_n * 2);
    for (size_t i = 0; i < cache_n; i++)
        if (back[i] != kn_fp32_to_bf16(vc[i]) && bad_v++ == 0 && first_bad == SIZE_MAX)
            first_bad = i;
    if (bad_k || bad_v)
        printf("  attention %s: kv_append wrong values: %zu K, %zu V (first at row %zu dim %zu)\n",
               ac->name, bad_k, bad_v, first_bad / (size_t)kv_dim, first_bad % (size_t)kv_dim);
    CHECK(bad_k == 0 && bad_v == 0);
    struct kn_cuda_attn a = {dout, 0, dx, (size_t)qkv, dkc, dvc, dtab, max_blocks, dseq, dpos,
                             dtiles, n_tiles, tile_max, n_tok, nh, nkv, hd, bt, max_ctx, scale,
                             dwork, wb};
    CHECK_EQ_INT(kn_cuda_attention(c, &a), 0);
    cu_get(c, got, dout, (size_t)n_tok * q_dim * 4);
    size_t nq = (size_t)n_tok * q_dim, worst_i = 0;
    double worst = 0;
    for (size_t i = 0; i < nq; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) /* NaN is the worst */
            worst = e, worst_i = i;
    }
    printf("  attention %-18s f32 max abs err %.3e at token %zu head %zu dim %zu (tol 2e-5)\n",
           ac->name, worst, worst_i / (size_t)q_dim, worst_i % (size_t)q_dim / (size_t)hd,
           worst_i % (size_t)hd);
    CHECK(worst <= 2e-5);
    /* bf16 output */
    uint16_t *gb = malloc((size_t)n_tok * q_dim * 2);
    CHECK_EQ_INT(kn_cuda_memset(c, dout, 0xFF, (size_t)n_tok * q_dim * 4), 0);
    a.out_bf16 = 1;
    CHECK_EQ_INT(kn_cuda_attention(c, &a), 0);
    cu_get(c, gb, dout, (size_t)n_tok * q_dim * 2);
    cu_from_bf16(got, gb, (size_t)n_tok * q_dim);
    for (size_t i = 0; i < (size_t)n_tok * q_dim; i++)
        CHECK_NEAR(got[i], want[i], 4e-3 * fabs(want[i]) + 2e-5);
    kn_cuda_release(c, dkc), kn_cuda_release(c, dvc), kn_cuda_release(c, dx);
    kn_cuda_release(c, dtab), kn_cuda_release(c, dseq), kn_cuda_release(c, dpos);
    kn_cuda_release(c, dslot), kn_cuda_release(c, dtiles), kn_cuda_release(c, dwork);
    kn_cuda_release(c, dout);
    free(tables), free(kc), free(vc), free(kcb), free(vcb), free(x), free(tseq), free(tpos);
    free(slot), free(tiles), free(want), free(got), free(scores), free(back), free(gb);
}

TEST(cuda_paged_attention_matches_cpu)
{
    struct kn_cuda *c = cu_open();
    static const struct attn_case cases[] = {
        /* decode: one token per sequence, contexts from 1 to past 1024 */
        {"decode smollm", 9, 3, 64, 4, {0, 16, 299, 1030}, {1, 1, 1, 1}, 1},
        {"decode llama3", 32, 8, 128, 3, {5, 1023, 2100}, {1, 1, 1}, 1},
        {"decode one split", 32, 8, 128, 2, {700, 63}, {1, 1}, 0},
        /* prefill: a chunk after a cached prefix, and a fresh prompt */
        {"prefill prefix", 9, 3, 64, 1, {50}, {37}, 1},
        {"prefill fresh mha", 4, 4, 128, 1, {0}, {70}, 1},
        /* mixed: prefill chunks and decode tokens in one batch */
        {"mixed", 16, 2, 256, 3, {0, 500, 17}, {20, 1, 9}, 1},
        {"mixed no work", 8, 8, 64, 2, {260, 0}, {1, 45}, 0},
        /* the tiny verification models' head dim */
        {"tiny hd16", 4, 2, 16, 2, {3, 0}, {1, 17}, 1},
        {"hd 96", 12, 4, 96, 2, {130, 5}, {1, 9}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_attn_case(c, &cases[i], 1000 + (uint32_t)i * 17);
    kn_cuda_free(c);
}

TEST(cuda_attention_refuses_unsupported_shapes)
{
    struct kn_cuda *c = cu_open();
    struct kn_cuda_attn a;
    memset(&a, 0, sizeof a);
    a.n_tok = 1, a.n_tiles = 1, a.tile_max = 1, a.n_head = 4, a.n_head_kv = 4, a.head_dim = 100;
    a.block_tokens = 16, a.max_ctx = 1;
    CHECK_EQ_INT(kn_cuda_attention(c, &a), ERR_UNSUPPORTED);
    a.head_dim = 64, a.n_head_kv = 3; /* 4 % 3 */
    CHECK_EQ_INT(kn_cuda_attention(c, &a), ERR_INVAL);
    kn_cuda_free(c);
}

TEST(cuda_scratch_overflow_is_an_error)
{
    struct kn_cuda *c = cu_open();
    /* 256 MiB scratch cannot hold three 128 MiB tensors */
    int rows = 1024, dim = 32768;
    float *x = calloc((size_t)rows * dim, 4), *w = calloc((size_t)dim, 4), *o = malloc((size_t)rows * dim * 4);
    CHECK_EQ_INT(kn_cuda_rmsnorm_f32_host(c, o, x, w, rows, dim, 1e-5f), ERR_TOOBIG);
    free(x), free(w), free(o);
    kn_cuda_free(c);
}
