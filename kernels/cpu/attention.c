/* attention.c - causal GQA attention of one query over a paged K/V cache.
 *
 * The accumulation order is fixed (see ops.h), so that a token's result
 * never depends on what else shares its batch, and it is the same on both
 * paths: a portable scalar one (the reference) and an AVX2+FMA one chosen
 * with the matmul's SIMD level (kn_simd_level, kernels/cpu/matq.h), which
 * performs the very same float operations 8 lanes at a time:
 *   - q.k: 8 lanes, lane j = fma chain over d = j mod 8 in increasing d
 *     (d < head_dim rounded down to 8; the rest, if any, goes to lane d mod
 *     8 in the same way), combined ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
 *     then times scale;
 *   - softmax: max, then expf(s - max) and their sum in position order;
 *   - output: out[d] = fma(w_p, v_p[d], out[d]) in position order, w_p =
 *     exp_p * (1 / sum).
 * Per query head, the query's kv head is h / (n_head / n_head_kv). */
#include "kernels/cpu/ops.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/matq.h"

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
                        int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                        float *scores)
{
    for (int p = 0; p < n_ctx; p++) {
        const float *kp = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        scores[p] = dot_lanes(qh, kp, head_dim) * scale;
    }
    softmax_row(scores, n_ctx);
    memset(oh, 0, (size_t)head_dim * sizeof *oh);
    for (int p = 0; p < n_ctx; p++) {
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

AVX2 static void head_avx2(float *oh, const float *qh, const float *k, const float *v,
                           const int32_t *block_table, int block_tokens, size_t block_stride,
                           int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                           float *scores)
{
    /* four positions at a time: four independent FMA chains instead of one
     * latency-bound chain; each position's operations are unchanged */
    int p = 0;
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
    softmax_row(scores, n_ctx);
    /* up to 64 dimensions per pass: eight independent accumulator chains */
    for (int d0 = 0; d0 < head_dim; d0 += 64) {
        int nd = head_dim - d0 < 64 ? head_dim - d0 : 64; /* multiple of 8 */
        __m256 o[8];
        for (int j = 0; j < 8; j++)
            o[j] = _mm256_setzero_ps();
        for (int pv = 0; pv < n_ctx; pv++) {
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
    int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
#if ATT_X86
    int avx2 = kn_simd_level() >= KN_SIMD_AVX2 && head_dim % 8 == 0;
#endif
    for (int h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * (size_t)head_dim;
        float *oh = out + (size_t)h * (size_t)head_dim;
        size_t kv_off = (size_t)(h / group) * (size_t)head_dim;
#if ATT_X86
        if (avx2) {
            head_avx2(oh, qh, k, v, block_table, block_tokens, block_stride, n_ctx, kv_dim, kv_off,
                      head_dim, scale, scores);
            continue;
        }
#endif
        head_scalar(oh, qh, k, v, block_table, block_tokens, block_stride, n_ctx, kv_dim, kv_off,
                    head_dim, scale, scores);
    }
}
