/* attn_tile.c - grouped-query attention of a tile of queries over a paged
 * K/V cache of float32, binary16 or int8 values (kn_attn_tile; contract
 * in kernels/kn.h). The engine's attention (worker/engine/forward_cpu.c).
 *
 * Design. A tile is n_q query tokens of one sequence (one decode token, or
 * a run of a prefill chunk). For each kv head, its rows - (query i, query
 * head h) for the group's heads within h0..h1-1, row r = i * ng + (h - ha) -
 * are computed together in three phases:
 *   1. scores: the positions some row attends, in chunks of CHUNK; each
 *      chunk's K rows of the kv head are converted to float ONCE into a
 *      staging buffer (L1-resident), then every row's q.k over the chunk
 *      positions it attends is computed from there;
 *   2. per row: soft-cap and softmax (attn_common.h) over its positions;
 *   3. V: chunks again, each V row converted once; out_r[d] = fma(w_rp,
 *      v_p[d], out_r[d]) in position order, the accumulators kept in out
 *      between chunks.
 * Within a chunk, consecutive rows that attend the same positions (the
 * heads of one query; every row of a tile away from the causal diagonal)
 * run together in register blocks, so that one load of a staged K/V vector
 * feeds several rows' fmas: AVX-512 4 rows x 8 positions (q.k, two
 * positions per register) and 4 rows x 64 dimensions (V); AVX2 2 rows x 4
 * positions and 2 rows x 32 dimensions.
 *
 * Numbers. Each row's operations are exactly attention.c's per-head ones
 * (see its header): q.k in 8 lanes (lane d mod 8, fma chains in increasing
 * d, the fixed tree of hsum_att), times scale; soft-cap, softmax_row; the
 * V fma chain per dimension in position order from +0. Converting a value
 * to float is exact for binary16 and one float multiply q * d for int8, the
 * same on every path. So every SIMD level gives the scalar path's bits,
 * the bits of kn_attn_paged_win_heads_f32 on the converted cache, whatever
 * the tile, the chunking or the blocking (none of them changes a row's
 * operation order): batch invariance by construction.
 *
 * Threads: a pure function of its arguments; callers split the tiles or
 * head ranges between threads (forward_cpu.c attn_run). */
#include "kernels/kn.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/attn_common.h"

#define CHUNK 16        /* positions staged at a time */
#define ROWS_TARGET 24  /* (query, head) rows per tile the engine aims at */

/* One kv head's work within a tile. */
struct tile {
    const struct kn_kv_layer *kv;
    const float *q;
    float *out;
    size_t q_stride, out_stride;
    const int32_t *n_ctx;
    int n_q, hd, kv_dim, window;
    float scale;
    int kh, ha, ng;   /* kv head, first query head of the range in its group, heads */
    int lo_min;       /* first position any row attends */
    size_t sc_stride; /* floats per score row; position p of row r at r * sc_stride + p - lo_min */
    float *sc;
    float *stage;     /* (CHUNK, hd) staged K or V rows of one chunk, float */
};

static int row_lo(const struct tile *t, int r)
{
    int n = t->n_ctx[r / t->ng];
    return t->window && n > t->window ? n - t->window : 0;
}

static int row_hi(const struct tile *t, int r)
{
    return t->n_ctx[r / t->ng];
}

static const float *row_q(const struct tile *t, int r)
{
    int i = r / t->ng, h = t->ha + r % t->ng;
    return t->q + (size_t)i * t->q_stride + (size_t)h * (size_t)t->hd;
}

static float *row_out(const struct tile *t, int r)
{
    int i = r / t->ng, h = t->ha + r % t->ng;
    return t->out + (size_t)i * t->out_stride + (size_t)h * (size_t)t->hd;
}

/* Row r's score slot of position c (the chunk start). */
static float *row_sc(const struct tile *t, int r, int c)
{
    return t->sc + (size_t)r * t->sc_stride + (size_t)(c - t->lo_min);
}

/* ---- staging: positions [c, e) of K or V as float rows of hd, zeros up to CHUNK ---- */

/* The element type of K (is_v 0) or V (1). */
static int elem_type(const struct kn_kv_layer *kv, int is_v)
{
    if (kv->type == KN_KV_F16_Q8)
        return is_v ? KN_KV_Q8 : KN_KV_F16;
    return kv->type;
}

/* off[i]: element offset of the kv head's value 0 at position c + i, for
 * i < n. One division per chunk: the block table is walked. (Software
 * prefetching of the next rows was tried: slower, the hardware prefetchers
 * do better on these 6 KiB blocks.) */
static void chunk_offsets(const struct tile *t, int c, int n, size_t *off)
{
    const struct kn_kv_layer *kv = t->kv;
    size_t head = (size_t)t->kh * (size_t)t->hd;
    int bt = kv->block_tokens, blk = c / bt, in = c % bt;
    for (int i = 0; i < n; i++) {
        off[i] = (size_t)kv->block_table[blk] * kv->block_stride + (size_t)in * (size_t)t->kv_dim + head;
        if (++in == bt) {
            blk++;
            in = 0;
        }
    }
}

static void stage_scalar(const struct tile *t, int is_v, int n, const size_t *off)
{
    const struct kn_kv_layer *kv = t->kv;
    int ty = elem_type(kv, is_v);
    const void *base = is_v ? kv->v : kv->k;
    const float *sd = is_v ? kv->v_scale : kv->k_scale;
    int hd = t->hd;
    for (int i = 0; i < n; i++) {
        float *dst = t->stage + (size_t)i * (size_t)hd;
        size_t e0 = off[i];
        if (ty == KN_KV_F32) {
            memcpy(dst, (const float *)base + e0, (size_t)hd * sizeof *dst);
        } else if (ty == KN_KV_F16) {
            for (int d = 0; d < hd; d++)
                dst[d] = kn_fp16_to_fp32(((const uint16_t *)base)[e0 + (size_t)d]);
        } else {
            const int8_t *qv = (const int8_t *)base + e0;
            for (int d = 0; d < hd; d++)
                dst[d] = (float)qv[d] * sd[(e0 + (size_t)d) / KN_KV_Q8_BLOCK];
        }
    }
}

#if ATTC_X86
#define TILE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TILE_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")))
#define TILE_INLINE inline __attribute__((always_inline))

/* hd a multiple of 8 */
TILE_AVX2 static void stage_avx2(const struct tile *t, int is_v, int n, const size_t *off)
{
    const struct kn_kv_layer *kv = t->kv;
    int ty = elem_type(kv, is_v);
    const void *base = is_v ? kv->v : kv->k;
    const float *sd = is_v ? kv->v_scale : kv->k_scale;
    int hd = t->hd;
    float *dst = t->stage;
    if (ty == KN_KV_F16) {
        for (int i = 0; i < n; i++, dst += hd) {
            const uint16_t *h = (const uint16_t *)base + off[i];
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + d))));
        }
    } else if (ty == KN_KV_Q8) {
        for (int i = 0; i < n; i++, dst += hd) {
            const int8_t *qv = (const int8_t *)base + off[i];
            for (int d = 0; d < hd; d += 8) { /* off[i] % 8 == 0: 8 values lie in one block */
                __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(qv + d))));
                _mm256_storeu_ps(dst + d, _mm256_mul_ps(x, _mm256_set1_ps(sd[(off[i] + (size_t)d) / KN_KV_Q8_BLOCK])));
            }
        }
    } else {
        for (int i = 0; i < n; i++, dst += hd)
            memcpy(dst, (const float *)base + off[i], (size_t)hd * sizeof *dst);
    }
}

/* hd a multiple of 16 */
TILE_AVX512 static void stage_avx512(const struct tile *t, int is_v, int n, const size_t *off)
{
    const struct kn_kv_layer *kv = t->kv;
    int ty = elem_type(kv, is_v);
    const void *base = is_v ? kv->v : kv->k;
    const float *sd = is_v ? kv->v_scale : kv->k_scale;
    int hd = t->hd;
    float *dst = t->stage;
    if (ty == KN_KV_F16) {
        for (int i = 0; i < n; i++, dst += hd) {
            const uint16_t *h = (const uint16_t *)base + off[i];
            for (int d = 0; d < hd; d += 16)
                _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + d))));
        }
    } else if (ty == KN_KV_Q8) {
        for (int i = 0; i < n; i++, dst += hd) {
            const int8_t *qv = (const int8_t *)base + off[i];
            for (int d = 0; d < hd; d += 16) { /* off[i] % 16 == 0: 16 values lie in one block */
                __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(qv + d))));
                _mm512_storeu_ps(dst + d, _mm512_mul_ps(x, _mm512_set1_ps(sd[(off[i] + (size_t)d) / KN_KV_Q8_BLOCK])));
            }
        }
    } else {
        for (int i = 0; i < n; i++, dst += hd)
            memcpy(dst, (const float *)base + off[i], (size_t)hd * sizeof *dst);
    }
}
#endif

enum { PATH_SCALAR, PATH_AVX2, PATH_AVX512 };

static void stage(const struct tile *t, int path, int is_v, int c, int e)
{
    size_t off[CHUNK] = {0};
    chunk_offsets(t, c, e - c, off);
#if ATTC_X86
    if (path == PATH_AVX512)
        stage_avx512(t, is_v, e - c, off);
    else if (path == PATH_AVX2)
        stage_avx2(t, is_v, e - c, off);
    else
#endif
        stage_scalar(t, is_v, e - c, off);
    /* the vector q.k passes read whole groups of positions: finite zeros
     * past the end (their scores are never stored) */
    if (e - c < CHUNK)
        memset(t->stage + (size_t)(e - c) * (size_t)t->hd, 0,
               (size_t)(CHUNK - (e - c)) * (size_t)t->hd * sizeof(float));
}

/* ---- phase 1: q.k of rows r0..r1-1 over staged positions [sa, sb) ---- */

static void scores_scalar(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    int hd = t->hd;
    for (int r = r0; r < r1; r++) {
        const float *qh = row_q(t, r);
        float *sr = row_sc(t, r, c);
        for (int s = sa; s < sb; s++) {
            const float *k = t->stage + (size_t)s * (size_t)hd;
            float l[8] = {0};
            for (int d = 0; d < hd; d++)
                l[d & 7] = fmaf(qh[d], k[d], l[d & 7]);
            sr[s] = (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) * t->scale;
        }
    }
}

#if ATTC_X86
/* nr (1 or 2) rows x 4 positions from s0 */
TILE_AVX2 static TILE_INLINE void sc_avx2_block(const struct tile *t, const float *const *qr,
                                                float *const *sr, const int nr, int s0, int sa, int sb)
{
    int hd = t->hd;
    const float *k = t->stage + (size_t)s0 * (size_t)hd;
    __m256 a[2][4];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            a[r][j] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        __m256 k0 = _mm256_loadu_ps(k + d), k1 = _mm256_loadu_ps(k + hd + d);
        __m256 k2 = _mm256_loadu_ps(k + 2 * hd + d), k3 = _mm256_loadu_ps(k + 3 * hd + d);
        #pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m256 qd = _mm256_loadu_ps(qr[r] + d);
            a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
            a[r][2] = _mm256_fmadd_ps(qd, k2, a[r][2]);
            a[r][3] = _mm256_fmadd_ps(qd, k3, a[r][3]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (s0 + j >= sa && s0 + j < sb)
                sr[r][s0 + j] = hsum_att(a[r][j]) * t->scale;
}

TILE_AVX2 static void scores_avx2(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    for (int r = r0; r < r1; r += 2) {
        int nr = r1 - r < 2 ? r1 - r : 2;
        const float *qr[2] = {row_q(t, r), row_q(t, r + nr - 1)};
        float *sr[2] = {row_sc(t, r, c), row_sc(t, r + nr - 1, c)};
        for (int s0 = sa & ~3; s0 < sb; s0 += 4) {
            if (nr == 2)
                sc_avx2_block(t, qr, sr, 2, s0, sa, sb);
            else
                sc_avx2_block(t, qr, sr, 1, s0, sa, sb);
        }
    }
}

/* 8 values at a (low half) and 8 at b (high half) */
TILE_AVX512 static TILE_INLINE __m512 ld_pair(const float *a, const float *b)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

/* nr (1..4) rows x 8 positions from s0 (two per register) */
TILE_AVX512 static TILE_INLINE void sc_avx512_block(const struct tile *t, const float *const *qr,
                                                    float *const *sr, const int nr, int s0, __mmask8 m)
{
    int hd = t->hd;
    const float *k = t->stage + (size_t)s0 * (size_t)hd;
    __m512 a[4][4];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            a[r][j] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        __m512 k0 = ld_pair(k + d, k + hd + d), k1 = ld_pair(k + 2 * hd + d, k + 3 * hd + d);
        __m512 k2 = ld_pair(k + 4 * hd + d, k + 5 * hd + d), k3 = ld_pair(k + 6 * hd + d, k + 7 * hd + d);
        #pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 qd = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(qr[r] + d))));
            a[r][0] = _mm512_fmadd_ps(qd, k0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(qd, k1, a[r][1]);
            a[r][2] = _mm512_fmadd_ps(qd, k2, a[r][2]);
            a[r][3] = _mm512_fmadd_ps(qd, k3, a[r][3]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        _mm256_mask_storeu_ps(sr[r] + s0, m, _mm256_mul_ps(hsum8x8_att(a[r]), _mm256_set1_ps(t->scale)));
}

TILE_AVX512 static void scores_avx512(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    for (int r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? r1 - r : 4;
        const float *qr[4];
        float *sr[4];
        for (int i = 0; i < 4; i++) {
            int ri = r + (i < nr ? i : nr - 1);
            qr[i] = row_q(t, ri);
            sr[i] = row_sc(t, ri, c);
        }
        for (int s0 = sa & ~7; s0 < sb; s0 += 8) {
            int lo = sa > s0 ? sa - s0 : 0, hi = sb - s0 < 8 ? sb - s0 : 8;
            __mmask8 m = (__mmask8)((0xffu >> (8 - hi)) & (0xffu << lo));
            switch (nr) {
            case 4: sc_avx512_block(t, qr, sr, 4, s0, m); break;
            case 3: sc_avx512_block(t, qr, sr, 3, s0, m); break;
            case 2: sc_avx512_block(t, qr, sr, 2, s0, m); break;
            default: sc_avx512_block(t, qr, sr, 1, s0, m); break;
            }
        }
    }
}
#endif

/* ---- phase 3: out += w V for rows r0..r1-1 over staged positions [sa, sb) ---- */

static void values_scalar(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    int hd = t->hd;
    for (int r = r0; r < r1; r++) {
        float *o = row_out(t, r);
        const float *w = row_sc(t, r, c);
        for (int s = sa; s < sb; s++) {
            const float *v = t->stage + (size_t)s * (size_t)hd;
            for (int d = 0; d < hd; d++)
                o[d] = fmaf(w[s], v[d], o[d]);
        }
    }
}

#if ATTC_X86
/* nr (1 or 2) rows x nv (4 or 1) vectors of 8 dimensions from d0 */
TILE_AVX2 static TILE_INLINE void val_avx2_block(const struct tile *t, float *const *o,
                                                 const float *const *w, const int nr, const int nv,
                                                 int d0, int sa, int sb)
{
    int hd = t->hd;
    __m256 a[2][4];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            a[r][j] = _mm256_loadu_ps(o[r] + d0 + 8 * j);
    for (int s = sa; s < sb; s++) {
        const float *v = t->stage + (size_t)s * (size_t)hd + d0;
        __m256 vv[4];
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            vv[j] = _mm256_loadu_ps(v + 8 * j);
        #pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m256 wr = _mm256_set1_ps(w[r][s]);
            #pragma GCC unroll 4
            for (int j = 0; j < nv; j++)
                a[r][j] = _mm256_fmadd_ps(wr, vv[j], a[r][j]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            _mm256_storeu_ps(o[r] + d0 + 8 * j, a[r][j]);
}

TILE_AVX2 static void values_avx2(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    int hd = t->hd;
    for (int r = r0; r < r1; r += 2) {
        int nr = r1 - r < 2 ? r1 - r : 2;
        float *o[2] = {row_out(t, r), row_out(t, r + nr - 1)};
        const float *w[2] = {row_sc(t, r, c), row_sc(t, r + nr - 1, c)};
        int d0 = 0;
        for (; d0 + 32 <= hd; d0 += 32) {
            if (nr == 2)
                val_avx2_block(t, o, w, 2, 4, d0, sa, sb);
            else
                val_avx2_block(t, o, w, 1, 4, d0, sa, sb);
        }
        for (; d0 < hd; d0 += 8) {
            if (nr == 2)
                val_avx2_block(t, o, w, 2, 1, d0, sa, sb);
            else
                val_avx2_block(t, o, w, 1, 1, d0, sa, sb);
        }
    }
}

/* nr (1..4) rows x nv (4 or 1) vectors of 16 dimensions from d0 */
TILE_AVX512 static TILE_INLINE void val_avx512_block(const struct tile *t, float *const *o,
                                                     const float *const *w, const int nr,
                                                     const int nv, int d0, int sa, int sb)
{
    int hd = t->hd;
    __m512 a[4][4];
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            a[r][j] = _mm512_loadu_ps(o[r] + d0 + 16 * j);
    for (int s = sa; s < sb; s++) {
        const float *v = t->stage + (size_t)s * (size_t)hd + d0;
        __m512 vv[4];
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            vv[j] = _mm512_loadu_ps(v + 16 * j);
        #pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m512 wr = _mm512_set1_ps(w[r][s]);
            #pragma GCC unroll 4
            for (int j = 0; j < nv; j++)
                a[r][j] = _mm512_fmadd_ps(wr, vv[j], a[r][j]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
        #pragma GCC unroll 4
        for (int j = 0; j < nv; j++)
            _mm512_storeu_ps(o[r] + d0 + 16 * j, a[r][j]);
}

#define VAL512(NV)                                                                                 \
    switch (nr) {                                                                                  \
    case 4: val_avx512_block(t, o, w, 4, NV, d0, sa, sb); break;                                  \
    case 3: val_avx512_block(t, o, w, 3, NV, d0, sa, sb); break;                                  \
    case 2: val_avx512_block(t, o, w, 2, NV, d0, sa, sb); break;                                  \
    default: val_avx512_block(t, o, w, 1, NV, d0, sa, sb); break;                                 \
    }

TILE_AVX512 static void values_avx512(const struct tile *t, int c, int r0, int r1, int sa, int sb)
{
    int hd = t->hd;
    for (int r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? r1 - r : 4;
        float *o[4];
        const float *w[4];
        for (int i = 0; i < 4; i++) {
            int ri = r + (i < nr ? i : nr - 1);
            o[i] = row_out(t, ri);
            w[i] = row_sc(t, ri, c);
        }
        int d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64)
            VAL512(4)
        for (; d0 < hd; d0 += 16)
            VAL512(1)
    }
}
#undef VAL512
#endif

/* ---- one kv head ---- */

/* Each run of consecutive rows attending the same positions [a, b) of the
 * chunk [c, e): fn(t, c, r0, r1, a - c, b - c). */
static void for_runs(const struct tile *t, int rows, int c, int e,
                     void (*fn)(const struct tile *, int, int, int, int, int))
{
    int r = 0;
    while (r < rows) {
        int a = row_lo(t, r), b = row_hi(t, r);
        a = a > c ? a : c;
        b = b < e ? b : e;
        int r1 = r + 1;
        while (r1 < rows) {
            int a1 = row_lo(t, r1), b1 = row_hi(t, r1);
            a1 = a1 > c ? a1 : c;
            b1 = b1 < e ? b1 : e;
            if (a1 != a || b1 != b)
                break;
            r1++;
        }
        if (a < b)
            fn(t, c, r, r1, a - c, b - c);
        r = r1;
    }
}

static void kv_head(struct tile *t, int path, float softcap)
{
    int rows = t->n_q * t->ng, hi_max = 0, lo_min = INT32_MAX;
    for (int r = 0; r < rows; r += t->ng) {
        int a = row_lo(t, r), b = row_hi(t, r);
        lo_min = a < lo_min ? a : lo_min;
        hi_max = b > hi_max ? b : hi_max;
    }
    t->lo_min = lo_min;
    t->sc_stride = (size_t)(hi_max - lo_min) + 16; /* room for the masked 8-wide stores */
    void (*sc_fn)(const struct tile *, int, int, int, int, int) = scores_scalar;
    void (*v_fn)(const struct tile *, int, int, int, int, int) = values_scalar;
#if ATTC_X86
    if (path == PATH_AVX512) {
        sc_fn = scores_avx512;
        v_fn = values_avx512;
    } else if (path == PATH_AVX2) {
        sc_fn = scores_avx2;
        v_fn = values_avx2;
    }
#endif
    for (int c = lo_min; c < hi_max; c += CHUNK) {
        int e = hi_max - c < CHUNK ? hi_max : c + CHUNK;
        stage(t, path, 0, c, e);
        for_runs(t, rows, c, e, sc_fn);
    }
    for (int r = 0; r < rows; r++) {
        int a = row_lo(t, r), b = row_hi(t, r);
        float *s = row_sc(t, r, a);
        softcap_row(s, b - a, softcap);
        softmax_row(s, b - a);
        memset(row_out(t, r), 0, (size_t)t->hd * sizeof(float));
    }
    for (int c = lo_min; c < hi_max; c += CHUNK) {
        int e = hi_max - c < CHUNK ? hi_max : c + CHUNK;
        stage(t, path, 1, c, e);
        for_runs(t, rows, c, e, v_fn);
    }
}

void kn_attn_tile(float *out, size_t out_stride, const float *q, size_t q_stride,
                  const int32_t *n_ctx, int n_q, const struct kn_kv_layer *kv, int n_head,
                  int n_head_kv, int head_dim, int h0, int h1, int window, float scale,
                  float softcap, void *scratch)
{
    int group = n_head / n_head_kv;
    int path = PATH_SCALAR;
#if ATTC_X86
    int lv = kn_simd_level();
    if (lv >= KN_SIMD_AVX512 && head_dim % 16 == 0)
        path = PATH_AVX512;
    else if (lv >= KN_SIMD_AVX2 && head_dim % 8 == 0)
        path = PATH_AVX2;
#endif
    uintptr_t a = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    struct tile t = {kv, q, out, q_stride, out_stride, n_ctx, n_q, head_dim, n_head_kv * head_dim,
                     window, scale, 0, 0, 0, 0, 0, NULL, (float *)a};
    t.sc = t.stage + (size_t)CHUNK * (size_t)head_dim;
    for (int kh = h0 / group; kh * group < h1; kh++) {
        t.kh = kh;
        t.ha = kh * group > h0 ? kh * group : h0;
        int hb = (kh + 1) * group < h1 ? (kh + 1) * group : h1;
        t.ng = hb - t.ha;
        kv_head(&t, path, softcap);
    }
}

size_t kn_attn_tile_scratch_bytes(int n_q, int n_head, int n_head_kv, int head_dim, int n_ctx_max)
{
    if (n_q < 1 || n_head < 1 || n_head_kv < 1 || head_dim < 1 || n_ctx_max < 1)
        return 0;
    size_t rows = (size_t)n_q * (size_t)(n_head / n_head_kv > 0 ? n_head / n_head_kv : 1);
    size_t row = (size_t)n_ctx_max + 16;
    if (rows > SIZE_MAX / row / sizeof(float) / 2)
        return SIZE_MAX;
    return 64 + ((size_t)CHUNK * (size_t)head_dim + rows * row) * sizeof(float);
}

int kn_attn_tile_queries(int n_head, int n_head_kv)
{
    int group = n_head_kv > 0 && n_head >= n_head_kv ? n_head / n_head_kv : 1;
    int n = ROWS_TARGET / group;
    return n < 1 ? 1 : n > KN_ATTN_TILE_Q_MAX ? KN_ATTN_TILE_Q_MAX : n;
}

/* ---- int8 K/V ---- */

void kn_kv_quantize_q8(int8_t *q, float *d, const float *x, size_t n)
{
    for (size_t b = 0; b < n / KN_KV_Q8_BLOCK; b++) {
        const float *xb = x + b * KN_KV_Q8_BLOCK;
        int8_t *qb = q + b * KN_KV_Q8_BLOCK;
        float amax = 0.0f;
        int finite = 1;
        for (int j = 0; j < KN_KV_Q8_BLOCK; j++) {
            float v = fabsf(xb[j]);
            if (!(v <= FLT_MAX))
                finite = 0;
            else if (v > amax)
                amax = v;
        }
        float db = finite ? amax / 127.0f : NAN;
        d[b] = db;
        for (int j = 0; j < KN_KV_Q8_BLOCK; j++) {
            float v = finite && db > 0.0f ? roundf(xb[j] / db) : 0.0f;
            qb[j] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        }
    }
}

void kn_kv_dequantize_q8(float *x, const int8_t *q, const float *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)q[i] * d[i / KN_KV_Q8_BLOCK];
}
