/*
 * vexp.h - the exponential the CPU kernels use (softmax in attention.c,
 * SiLU in swiglu.c), private to kernels/cpu: one scalar function, the
 * reference, and AVX2 / AVX-512 twins that perform the very same float
 * operations lane by lane, so every SIMD level gives the scalar bits.
 *
 * exp_ref(x): Cephes expf's scheme. n = round-to-nearest-even(x * log2(e))
 * (the 1.5 * 2^23 addition trick), r = x - n * C1 - n * C2 (two fmas, C1 +
 * C2 = ln 2 with C1 = 0.693359375 exact in 9 bits), then
 * e^r = 1 + (r + r^2 * P(r)) with Cephes' degree-5 P by Horner (fmas), and
 * the result e^r * 2^(n - 1) * 2 (two multiplies: 2^(n - 1) stays a normal
 * float for every n used). Accuracy: within 2 ulp of the correctly rounded
 * exp for x in [-86.5, 88.72] (tests/unit/kernels/test_kernels.c checks
 * against libm's expf: 1 ulp typical).
 * Specials: NaN -> NaN; x > 88.72283935546875 (above ln FLT_MAX) -> +inf;
 * x < -86.5 -> +0 (the subnormal range, below 2.7e-38, is flushed:
 * irrelevant to softmax weights and SiLU, where exp(x) is added to 1 or
 * divided by a sum >= 1). -inf -> 0, +inf -> inf.
 *
 * Every step is written out (fmaf, explicit products): GCC does not
 * contract a*b+c under -std=c11, the pragma covers clang.
 */
#ifndef KERNELS_CPU_VEXP_H
#define KERNELS_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define VEXP_HI 88.72283935546875f /* above: +inf */
#define VEXP_LO (-86.5f)           /* below: 0 */
#define VEXP_LOG2E 1.44269504088896341f
#define VEXP_C1 0.693359375f
#define VEXP_C2 (-2.12194440e-4f)
#define VEXP_P0 1.9875691500e-4f
#define VEXP_P1 1.3981999507e-3f
#define VEXP_P2 8.3334519073e-3f
#define VEXP_P3 4.1665795894e-2f
#define VEXP_P4 1.6666665459e-1f
#define VEXP_P5 5.0000001201e-1f
#define VEXP_RND 12582912.0f /* 1.5 * 2^23 */

static inline float exp_ref(float x)
{
    if (x != x)
        return x;
    if (x > VEXP_HI)
        return INFINITY;
    if (x < VEXP_LO)
        return 0.0f;
    float n = (x * VEXP_LOG2E + VEXP_RND) - VEXP_RND;
    float r = fmaf(n, -VEXP_C1, x);
    r = fmaf(n, -VEXP_C2, r);
    float p = VEXP_P0;
    p = fmaf(p, r, VEXP_P1);
    p = fmaf(p, r, VEXP_P2);
    p = fmaf(p, r, VEXP_P3);
    p = fmaf(p, r, VEXP_P4);
    p = fmaf(p, r, VEXP_P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 126) << 23; /* 2^(n - 1), n in [-125, 128] */
    float s;
    memcpy(&s, &bits, sizeof s);
    return y * s * 2.0f;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* exp_ref on 8 lanes. */
__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 x)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(VEXP_HI), _CMP_GT_OQ);
    __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(VEXP_LO), _CMP_LT_OQ);
    __m256 ok = _mm256_andnot_ps(_mm256_or_ps(nan, _mm256_or_ps(big, small)), _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
    __m256 xc = _mm256_and_ps(x, ok); /* out-of-range lanes compute on 0 */
    __m256 rnd = _mm256_set1_ps(VEXP_RND);
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(VEXP_LOG2E)), rnd), rnd);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-VEXP_C1), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-VEXP_C2), r);
    __m256 p = _mm256_set1_ps(VEXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
    __m256 v = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
    v = _mm256_and_ps(v, ok);                                              /* small: +0 */
    v = _mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), big);
    return _mm256_blendv_ps(v, x, nan);
}

/* exp_ref on 16 lanes. */
__attribute__((target("avx512f,avx2,fma"))) static inline __m512 exp_avx512(__m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(VEXP_HI), _CMP_GT_OQ);
    __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(VEXP_LO), _CMP_LT_OQ);
    __mmask16 ok = (__mmask16)~(nan | big | small);
    __m512 xc = _mm512_maskz_mov_ps(ok, x);
    __m512 rnd = _mm512_set1_ps(VEXP_RND);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(VEXP_LOG2E)), rnd), rnd);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-VEXP_C1), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-VEXP_C2), r);
    __m512 p = _mm512_set1_ps(VEXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(126)), 23);
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(y, _mm512_castsi512_ps(e)), _mm512_set1_ps(2.0f));
    v = _mm512_maskz_mov_ps(ok, v);
    v = _mm512_mask_mov_ps(v, big, _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(v, nan, x);
}
#endif

#endif
