/* swiglu.c - SwiGLU activation, CPU reference (kn_swiglu_f32; contract in
 * kernels/kn.h).
 *
 * gate, up, out (n) f32: out[i] = silu(gate[i]) * up[i], silu(g) =
 * g / (1 + exp_ref(-g)), float, exp_ref from kernels/cpu/vexp.h (within
 * 2 ulp of exp; NaN, +-inf and the ends of the range defined there). The
 * AVX2 / AVX-512 loops (kn_simd_level) perform the same operations 8 / 16
 * elements at a time: the same bits. The reference of cuda/swiglu.cu (2e-6
 * relative: the exponentials differ by an ulp or two; bf16 output 4e-3).
 * Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/vexp.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,avx2,fma"))) static size_t swiglu_avx512(float *out, const float *gate,
                                                                       const float *up, size_t n)
{
    size_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32(INT32_MIN);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 e = exp_avx512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
    }
    return i;
}

__attribute__((target("avx2,fma"))) static size_t swiglu_avx2(float *out, const float *gate, const float *up,
                                                             size_t n)
{
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_avx2(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    return i;
}
#endif

void kn_swiglu_f32(float *out, const float *gate, const float *up, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    int level = kn_simd_level();
    if (level >= KN_SIMD_AVX512)
        i = swiglu_avx512(out, gate, up, n);
    else if (level >= KN_SIMD_AVX2)
        i = swiglu_avx2(out, gate, up, n);
#endif
    for (; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + exp_ref(-g)) * up[i];
    }
}
