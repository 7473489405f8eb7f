/* attention.c - causal GQA attention of one query over a paged K/V cache,
 * CPU reference (kn_attn_paged_f32, kn_attn_paged_heads_f32; contracts and
 * shapes in kernels/kn.h).
 *
 * The reference of cuda/attention.cu, run on the same bf16-rounded K/V:
 * 1e-5 relative per element in f32 output (exp and summation order differ).
 *
 * The accumulation order is fixed (below), so that a token's result
 * never depends on what else shares its batch, and it is the same on both
 * paths: a portable scalar one (the reference), an AVX2+FMA one and an
 * AVX-512 one chosen with the matmul's SIMD level (kn_simd_level,
 * simd.c), which perform the very same float operations 8 (16)
 * lanes at a time:
 *   - q.k: 8 lanes, lane j = fma chain over d = j mod 8 in increasing d
 *     (d < head_dim rounded down to 8; the rest, if any, goes to lane d mod
 *     8 in the same way), combined ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
 *     then times scale;
 *   - softmax: max, then expf(s - max) and their sum in position order;
 *   - output: out[d] = fma(w_p, v_p[d], out[d]) in position order, w_p =
 *     exp_p * (1 / sum).
 * Per query head, the query's kv head is h / (n_head / n_head_kv).
 * The windowed variant (kn_attn_paged_win_heads_f32) runs the same
 * operations over positions p0..n_ctx-1 only, and soft-caps the scaled
 * scores (cap * kn_tanh(s / cap), scalar on every path) before the softmax. */
#include "kernels/kn.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATT_X86 1
#else
#define ATT_X86 0
#endif

static const float *kv_at(const float *base, const int32_t *block_table, int block_tokens,
                          size_t block_stride, int kv_dim, int p)
{
    return base + (size_t)block_table[p / block_tokens] * block_stride +
           (size_t)(p % block_tokens) * (size_t)kv_dim;
}

static float dot_lanes(const float *a, const float *b, int n)
{
    float l[8] = {0};
    for (int d = 0; d < n; d++)
        l[d & 7] = fmaf(a[d], b[d], l[d & 7]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Soft-capping (Gemma 2): s = cap * kn_tanh(s / cap) in place (scale.c);
 * cap 0 = none. Scalar on every SIMD path, so the bits stay the same. */
static void softcap_row(float *scores, int n, float cap)
{
    if (cap == 0.0f)
        return;
    for (int p = 0; p < n; p++)
        scores[p] = cap * kn_tanh(scores[p] / cap);
}

/* Softmax of scores[0..n) in place into weights (exp / sum). */
static void softmax_row(float *scores, int n)
{
    float mx = -INFINITY;
    for (int p = 0; p < n; p++)
        if (scores[p] > mx)
            mx = scores[p];
    float sum = 0.0f;
    for (int p = 0; p < n; p++) {
        scores[p] = expf(scores[p] - mx);
        sum += scores[p];
    }
    float inv = 1.0f / sum;
    for (int p = 0; p < n; p++)
        scores[p] *= inv;
}

static void head_scalar(float *oh, const float *qh, const float *k, const float *v,
                        const int32_t *block_table, int block_tokens, size_t block_stride,
                        int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                        float softcap, float *scores)
{
    for (int p = p0; p < n_ctx; p++) {
        const float *kp = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        scores[p] = dot_lanes(qh, kp, head_dim) * scale;
    }
    softcap_row(scores + p0, n_ctx - p0, softcap);
    softmax_row(scores + p0, n_ctx - p0);
    memset(oh, 0, (size_t)head_dim * sizeof *oh);
    for (int p = p0; p < n_ctx; p++) {
        const float *vp = kv_at(v, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        float w = scores[p];
        for (int d = 0; d < head_dim; d++)
            oh[d] = fmaf(w, vp[d], oh[d]);
    }
}

#if ATT_X86
#define AVX2 __attribute__((target("avx2,fma")))

/* head_dim a multiple of 8. */
/* ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
AVX2 static inline float hsum_att(__m256 acc)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* scores[p] = q.k_p * scale for p0 <= p < n_ctx (head_avx2's q.k; the
 * AVX-512 head uses it for the positions after its 8-position passes). */
AVX2 static void scores_avx2(float *scores, const float *qh, const float *k,
                             const int32_t *block_table, int block_tokens, size_t block_stride,
                             int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim,
                             float scale)
{
    /* four positions at a time: four independent FMA chains instead of one
     * latency-bound chain; each position's operations are unchanged */
    int p = p0;
    for (; p + 4 <= n_ctx; p += 4) {
        const float *k0 = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        const float *k1 = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p + 1) + kv_off;
        const float *k2 = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p + 2) + kv_off;
        const float *k3 = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p + 3) + kv_off;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < head_dim; d += 8) {
            __m256 qd = _mm256_loadu_ps(qh + d);
            a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k0 + d), a0);
            a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k1 + d), a1);
            a2 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k2 + d), a2);
            a3 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k3 + d), a3);
        }
        scores[p] = hsum_att(a0) * scale;
        scores[p + 1] = hsum_att(a1) * scale;
        scores[p + 2] = hsum_att(a2) * scale;
        scores[p + 3] = hsum_att(a3) * scale;
    }
    for (; p < n_ctx; p++) {
        const float *kp = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < head_dim; d += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), _mm256_loadu_ps(kp + d), acc);
        scores[p] = hsum_att(acc) * scale;
    }
}

AVX2 static void head_avx2(float *oh, const float *qh, const float *k, const float *v,
                           const int32_t *block_table, int block_tokens, size_t block_stride,
                           int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                           float softcap, float *scores)
{
    scores_avx2(scores, qh, k, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim, kv_off,
                head_dim, scale);
    softcap_row(scores + p0, n_ctx - p0, softcap);
    softmax_row(scores + p0, n_ctx - p0);
    /* up to 64 dimensions per pass: eight independent accumulator chains */
    for (int d0 = 0; d0 < head_dim; d0 += 64) {
        int nd = head_dim - d0 < 64 ? head_dim - d0 : 64; /* multiple of 8 */
        __m256 o[8];
        for (int j = 0; j < 8; j++)
            o[j] = _mm256_setzero_ps();
        for (int pv = p0; pv < n_ctx; pv++) {
            const float *vp =
                kv_at(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            __m256 w = _mm256_set1_ps(scores[pv]);
            for (int j = 0; j < nd / 8; j++)
                o[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 8 * j), o[j]);
        }
        for (int j = 0; j < nd / 8; j++)
            _mm256_storeu_ps(oh + d0 + 8 * j, o[j]);
    }
}

/* AVX-512: the same operations as head_avx2, more of them per instruction.
 * q.k: eight positions per pass, two per register (low / high 256 bits:
 * each position's eight lanes exactly as in head_avx2), then the eight lane
 * sets are reduced together with the very tree of hsum_att:
 * (l0+l4, l1+l5, l2+l6, l3+l7), then (s0+s2, s1+s3), then their sum.
 * V: 16 dimensions per register (out[d] = fma(w, v[d], out[d]) per d, any
 * width gives the same bits). head_dim a multiple of 16. */
#define AVX512A __attribute__((target("avx512f,avx512vl,avx2,fma")))

/* 8 floats at a (low half) and 8 at b (high half). */
AVX512A static inline __m512 ld_pair(const float *a, const float *b)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

/* Lane sums of positions (2i, 2i+1) in a[i], i < 4 -> 8 floats in order. */
AVX512A static inline __m256 hsum8x8_att(const __m512 a[4])
{
    __m512 r[2];
    for (int h = 0; h < 2; h++) {
        __m512 x = _mm512_shuffle_f32x4(a[2 * h], a[2 * h + 1], _MM_SHUFFLE(2, 0, 2, 0));
        __m512 y = _mm512_shuffle_f32x4(a[2 * h], a[2 * h + 1], _MM_SHUFFLE(3, 1, 3, 1));
        __m512 s = _mm512_add_ps(x, y); /* per 128-bit lane: (l0+l4, l1+l5, l2+l6, l3+l7) */
        __m512 t = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
        r[h] = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutex2var_ps(r[0], idx, r[1]));
}

AVX512A static void head_avx512(float *oh, const float *qh, const float *k, const float *v,
                                const int32_t *block_table, int block_tokens, size_t block_stride,
                                int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim,
                                float scale, float softcap, float *scores)
{
    int p = p0;
    for (; p + 8 <= n_ctx; p += 8) {
        const float *kp[8];
        for (int i = 0; i < 8; i++)
            kp[i] = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p + i) + kv_off;
        /* four named accumulators: an array here would live on the stack */
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < head_dim; d += 8) {
            __m512 qd = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(qh + d))));
            a0 = _mm512_fmadd_ps(qd, ld_pair(kp[0] + d, kp[1] + d), a0);
            a1 = _mm512_fmadd_ps(qd, ld_pair(kp[2] + d, kp[3] + d), a1);
            a2 = _mm512_fmadd_ps(qd, ld_pair(kp[4] + d, kp[5] + d), a2);
            a3 = _mm512_fmadd_ps(qd, ld_pair(kp[6] + d, kp[7] + d), a3);
        }
        const __m512 a[4] = {a0, a1, a2, a3};
        _mm256_storeu_ps(scores + p, _mm256_mul_ps(hsum8x8_att(a), _mm256_set1_ps(scale)));
    }
    scores_avx2(scores, qh, k, block_table, block_tokens, block_stride, p, n_ctx, kv_dim, kv_off,
                head_dim, scale);
    softcap_row(scores + p0, n_ctx - p0, softcap);
    softmax_row(scores + p0, n_ctx - p0);
    /* 64 dimensions per pass in four named accumulators, then 16 at a time */
    int d0 = 0;
    for (; d0 + 64 <= head_dim; d0 += 64) {
        __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int pv = p0; pv < n_ctx; pv++) {
            const float *vp =
                kv_at(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            __m512 w = _mm512_set1_ps(scores[pv]);
            o0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp), o0);
            o1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp + 16), o1);
            o2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp + 32), o2);
            o3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp + 48), o3);
        }
        _mm512_storeu_ps(oh + d0, o0);
        _mm512_storeu_ps(oh + d0 + 16, o1);
        _mm512_storeu_ps(oh + d0 + 32, o2);
        _mm512_storeu_ps(oh + d0 + 48, o3);
    }
    for (; d0 < head_dim; d0 += 16) {
        __m512 o0 = _mm512_setzero_ps();
        for (int pv = p0; pv < n_ctx; pv++) {
            const float *vp =
                kv_at(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(scores[pv]), _mm512_loadu_ps(vp), o0);
        }
        _mm512_storeu_ps(oh + d0, o0);
    }
}
#endif

void kn_attn_paged_f32(float *out, const float *q, const float *k, const float *v,
                       const int32_t *block_table, int block_tokens, size_t block_stride,
                       int n_ctx, int n_head, int n_head_kv, int head_dim, float scale,
                       float *scores)
{
    kn_attn_paged_heads_f32(out, q, k, v, block_table, block_tokens, block_stride, n_ctx, n_head,
                            n_head_kv, head_dim, 0, n_head, scale, scores);
}

void kn_attn_paged_heads_f32(float *out, const float *q, const float *k, const float *v,
                             const int32_t *block_table, int block_tokens, size_t block_stride,
                             int n_ctx, int n_head, int n_head_kv, int head_dim, int h0, int h1,
                             float scale, float *scores)
{
    kn_attn_paged_win_heads_f32(out, q, k, v, block_table, block_tokens, block_stride, 0, n_ctx,
                                n_head, n_head_kv, head_dim, h0, h1, scale, 0.0f, scores);
}

void kn_attn_paged_win_heads_f32(float *out, const float *q, const float *k, const float *v,
                                 const int32_t *block_table, int block_tokens,
                                 size_t block_stride, int p0, int n_ctx, int n_head, int n_head_kv,
                                 int head_dim, int h0, int h1, float scale, float softcap,
                                 float *scores)
{
    int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
#if ATT_X86
    int lv = kn_simd_level();
    int avx2 = lv >= KN_SIMD_AVX2 && head_dim % 8 == 0;
    int avx512 = lv >= KN_SIMD_AVX512 && head_dim % 16 == 0;
#endif
    for (int h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * (size_t)head_dim;
        float *oh = out + (size_t)h * (size_t)head_dim;
        size_t kv_off = (size_t)(h / group) * (size_t)head_dim;
#if ATT_X86
        if (avx512) {
            head_avx512(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                        kv_off, head_dim, scale, softcap, scores);
            continue;
        }
        if (avx2) {
            head_avx2(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                      kv_off, head_dim, scale, softcap, scores);
            continue;
        }
#endif
        head_scalar(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                    kv_off, head_dim, scale, softcap, scores);
    }
}
