/*
 * attn_common.h - what the attention paths of kernels/cpu share
 * (attention.c, attn_tile.c; private to kernels/cpu): soft-capping, the
 * softmax of one row of scores and the q.k lane reductions, written once
 * so that every attention path performs the same float operations (the
 * order is stated in attention.c's header: max, exp_ref(s - max) summed
 * over 16 lanes, lane p mod 16 in position order, a fixed tree, then each
 * exp times 1 / sum). The AVX2 and AVX-512 twins give the scalar bits.
 */
#ifndef KERNELS_CPU_ATTN_COMMON_H
#define KERNELS_CPU_ATTN_COMMON_H

#include <math.h>

#include "kernels/kn.h"
#include "kernels/cpu/vexp.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTC_X86 1
#else
#define ATTC_X86 0
#endif

/* Soft-capping (Gemma 2): s = cap * kn_tanh(s / cap) in place (scale.c);
 * cap 0 = none. Scalar on every SIMD path, so the bits stay the same. */
static inline void softcap_row(float *scores, int n, float cap)
{
    if (cap == 0.0f)
        return;
    for (int p = 0; p < n; p++)
        scores[p] = cap * kn_tanh(scores[p] / cap);
}

/* exp(s - mx) in place for p in [p, n) and into the 16 sum lanes (lane
 * p mod 16), the reference of the vector loops below. */
static inline void softmax_exp_s(float *scores, int p, int n, float mx, float l[16])
{
    for (; p < n; p++) {
        scores[p] = exp_ref(scores[p] - mx);
        l[p % 16] += scores[p];
    }
}

/* The largest of scores[0..n) that is not NaN (-inf if none): "if (s >
 * mx) mx = s" in any order. A zero maximum may come out as +0 or -0
 * depending on the order, which changes nothing downstream: s - (+0) and
 * s - (-0) differ only for s = +-0, giving +-0, and exp_ref(+-0) = 1. */
static inline float row_max_s(const float *scores, int p, int n, float mx)
{
    for (; p < n; p++)
        if (scores[p] > mx)
            mx = scores[p];
    return mx;
}

#if ATTC_X86
/* max(x, acc) per lane is "x > acc ? x : acc": a NaN x never wins. */
__attribute__((target("avx512f,avx2,fma"))) static inline float row_max_avx512(const float *scores, int n,
                                                                             int *p_out)
{
    __m512 acc = _mm512_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 16 <= n; p += 16)
        acc = _mm512_max_ps(_mm512_loadu_ps(scores + p), acc);
    float l[16];
    _mm512_storeu_ps(l, acc);
    *p_out = p;
    return row_max_s(l, 0, 16, -INFINITY);
}

__attribute__((target("avx2,fma"))) static inline float row_max_avx2(const float *scores, int n, int *p_out)
{
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 8 <= n; p += 8)
        acc = _mm256_max_ps(_mm256_loadu_ps(scores + p), acc);
    float l[8];
    _mm256_storeu_ps(l, acc);
    *p_out = p;
    return row_max_s(l, 0, 8, -INFINITY);
}

/* scores[q] *= inv, the same product per element on every path */
__attribute__((target("avx512f,avx2,fma"))) static inline int row_scale_avx512(float *scores, int n, float inv)
{
    __m512 m = _mm512_set1_ps(inv);
    int q = 0;
    for (; q + 16 <= n; q += 16)
        _mm512_storeu_ps(scores + q, _mm512_mul_ps(_mm512_loadu_ps(scores + q), m));
    return q;
}

__attribute__((target("avx2,fma"))) static inline int row_scale_avx2(float *scores, int n, float inv)
{
    __m256 m = _mm256_set1_ps(inv);
    int q = 0;
    for (; q + 8 <= n; q += 8)
        _mm256_storeu_ps(scores + q, _mm256_mul_ps(_mm256_loadu_ps(scores + q), m));
    return q;
}

/* The vector twins: whole groups of 16 positions; returns the next p. The
 * exp values are >= +0 or NaN, so no lane is ever -0 and adding +0 to the
 * lanes a group does not have changes nothing. */
__attribute__((target("avx512f,avx2,fma"))) static inline int softmax_exp_avx512(float *scores, int n, float mx,
                                                                        float l[16])
{
    __m512 acc = _mm512_loadu_ps(l), m = _mm512_set1_ps(mx);
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(scores + p), m));
        _mm512_storeu_ps(scores + p, e);
        acc = _mm512_add_ps(acc, e);
    }
    _mm512_storeu_ps(l, acc);
    return p;
}

__attribute__((target("avx2,fma"))) static inline int softmax_exp_avx2(float *scores, int n, float mx, float l[16])
{
    __m256 a0 = _mm256_loadu_ps(l), a1 = _mm256_loadu_ps(l + 8), m = _mm256_set1_ps(mx);
    int p = 0;
    for (; p + 16 <= n; p += 16) {
        __m256 e0 = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + p), m));
        __m256 e1 = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + p + 8), m));
        _mm256_storeu_ps(scores + p, e0);
        _mm256_storeu_ps(scores + p + 8, e1);
        a0 = _mm256_add_ps(a0, e0);
        a1 = _mm256_add_ps(a1, e1);
    }
    _mm256_storeu_ps(l, a0);
    _mm256_storeu_ps(l + 8, a1);
    return p;
}
#endif

/* Softmax of scores[0..n) in place into weights (exp / sum). */
static inline void softmax_row(float *scores, int n)
{
    float mx = -INFINITY;
    int p = 0;
#if ATTC_X86
    int level = kn_simd_level();
    if (level >= KN_SIMD_AVX512)
        mx = row_max_avx512(scores, n, &p);
    else if (level >= KN_SIMD_AVX2)
        mx = row_max_avx2(scores, n, &p);
#endif
    mx = row_max_s(scores, p, n, mx);
    float l[16] = {0};
    p = 0;
#if ATTC_X86
    if (level >= KN_SIMD_AVX512)
        p = softmax_exp_avx512(scores, n, mx, l);
    else if (level >= KN_SIMD_AVX2)
        p = softmax_exp_avx2(scores, n, mx, l);
#endif
    softmax_exp_s(scores, p, n, mx, l);
    float v[8];
    for (int j = 0; j < 8; j++)
        v[j] = l[j] + l[j + 8];
    float sum = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    float inv = 1.0f / sum;
    int q = 0;
#if ATTC_X86
    if (level >= KN_SIMD_AVX512)
        q = row_scale_avx512(scores, n, inv);
    else if (level >= KN_SIMD_AVX2)
        q = row_scale_avx2(scores, n, inv);
#endif
    for (; q < n; q++)
        scores[q] *= inv;
}

#if ATTC_X86
/* The q.k lane reductions. One position's 8 lanes -> one float:
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
__attribute__((target("avx2,fma"))) static inline float hsum_att(__m256 acc)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* Eight positions at once, two per register (low / high 256 bits: each
 * position's eight lanes as above), reduced with the very tree of
 * hsum_att: (l0+l4, l1+l5, l2+l6, l3+l7), then (s0+s2, s1+s3), then their
 * sum: lane sums of positions (2i, 2i+1) in a[i], i < 4 -> 8 floats in
 * order. */
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static inline __m256 hsum8x8_att(const __m512 a[4])
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
#endif

#endif
