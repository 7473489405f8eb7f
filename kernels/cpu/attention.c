/* attention.c - causal GQA attention of one query over a paged K/V cache,
 * CPU reference (kn_attn_paged_f32, kn_attn_paged_heads_f32; contracts and
 * shapes in kernels/kn.h), on a float cache or a binary16 one
 * (kn_attn_paged_win_heads_f16: the engine's cache; each element is
 * converted to float exactly, then the very operations below run). The
 * per-head paths are written once, in attention_body.h, and instantiated
 * for both element types here.
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
 *   - softmax: max, then exp_ref(s - max) (kernels/cpu/vexp.h, computed
 *     16 (8) lanes at a time, the same bits) and their sum over 16 lanes,
 *     lane p mod 16 in position order, combined as v_j = l_j + l_{j+8},
 *     ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7));
 *   - output: out[d] = fma(w_p, v_p[d], out[d]) in position order, w_p =
 *     exp_p * (1 / sum).
 * Per query head, the query's kv head is h / (n_head / n_head_kv).
 * The windowed variant (kn_attn_paged_win_heads_f32) runs the same
 * operations over positions p0..n_ctx-1 only, and soft-caps the scaled
 * scores (cap * kn_tanh(s / cap), scalar on every path) before the softmax.
 * The softmax and the lane reductions live in attn_common.h, shared with
 * attn_tile.c: the engine's attention (kn_attn_tile), which performs these
 * very operations grouped by kv head and several queries at a time; the
 * per-head functions here are its reference and the encoder's attention. */
#include "kernels/kn.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/attn_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATT_X86 1
#else
#define ATT_X86 0
#endif

#if ATT_X86
#define ATT_AVX2_F32 __attribute__((target("avx2,fma")))
#define ATT_AVX2_F16 __attribute__((target("avx2,fma,f16c")))
#define ATT_AVX512_F32 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define ATT_AVX512_F16 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

/* AVX-512: the same operations as head_avx2, more of them per instruction.
 * q.k: eight positions per pass, two per register (low / high 256 bits:
 * each position's eight lanes exactly as in head_avx2), then the eight lane
 * sets are reduced together with the very tree of hsum_att:
 * (l0+l4, l1+l5, l2+l6, l3+l7), then (s0+s2, s1+s3), then their sum.
 * V: 16 dimensions per register (out[d] = fma(w, v[d], out[d]) per d, any
 * width gives the same bits). head_dim a multiple of 16. */

/* 8 values at a (low half) and 8 at b (high half). */
ATT_AVX512_F32 static inline __m512 ld_pair_f32(const float *a, const float *b)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

ATT_AVX512_F16 static inline __m512 ld_pair_f16(const uint16_t *a, const uint16_t *b)
{
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
        _mm_loadu_si128((const __m128i *)(const void *)b), 1));
}

/* The SIMD level for the binary16 cache: its AVX2 and AVX-512 paths need
 * F16C, which level KN_SIMD_AVX2 includes (kn.h; simd.c checks it in CPUID
 * before that level can be chosen). */
static int level_f16(void)
{
    return kn_simd_level();
}
#endif

/* ---- the per-head paths, once per cache element type (attention_body.h) ---- */
#define ATT_PASTE2(a, b) a##b
#define ATT_PASTE(a, b) ATT_PASTE2(a, b)
#define AT(name) ATT_PASTE(name, ATT_SFX)

/* float cache */
#define KVT float
#define ATT_SFX _f32
#define LD1(p) (*(p))
#define LD8(p) _mm256_loadu_ps(p)
#define LD16(p) _mm512_loadu_ps(p)
#define LDPAIR(a, b) ld_pair_f32(a, b)
#define ATT_AVX2 ATT_AVX2_F32
#define ATT_AVX512 ATT_AVX512_F32
#define ATT_LEVEL() kn_simd_level()
#include "kernels/cpu/attention_body.h"
#undef KVT
#undef ATT_SFX
#undef LD1
#undef LD8
#undef LD16
#undef LDPAIR
#undef ATT_AVX2
#undef ATT_AVX512
#undef ATT_LEVEL

/* binary16 cache: the SIMD paths need F16C (vcvtph2ps) besides AVX2 */
#define KVT uint16_t
#define ATT_SFX _f16
#define LD1(p) kn_fp16_to_fp32(*(p))
#define LD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define LD16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define LDPAIR(a, b) ld_pair_f16(a, b)
#define ATT_AVX2 ATT_AVX2_F16
#define ATT_AVX512 ATT_AVX512_F16
#define ATT_LEVEL() level_f16()
#include "kernels/cpu/attention_body.h"


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
    win_heads_f32(out, q, k, v, block_table, block_tokens, block_stride, p0, n_ctx, n_head,
                  n_head_kv, head_dim, h0, h1, scale, softcap, scores);
}

void kn_attn_paged_win_heads_f16(float *out, const float *q, const uint16_t *k, const uint16_t *v,
                                 const int32_t *block_table, int block_tokens,
                                 size_t block_stride, int p0, int n_ctx, int n_head, int n_head_kv,
                                 int head_dim, int h0, int h1, float scale, float softcap,
                                 float *scores)
{
    win_heads_f16(out, q, k, v, block_table, block_tokens, block_stride, p0, n_ctx, n_head,
                  n_head_kv, head_dim, h0, h1, scale, softcap, scores);
}
