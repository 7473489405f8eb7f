/* matq_x32v.h - the AVX2 tile kernels of matq.c for the 32-value types
 * (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0), included once per integer-dot form (private
 * to kernels/cpu). The includer defines:
 *   XV_VNNI   1: AVX-VNNI vpdpbusd; 0: vpmaddubsw + vpmaddwd
 *   XV(name)  the name with the form's suffix
 *   XV_ATTR   the target attribute of the form
 * and has the helpers of matq.c (x32_fmt, strip_rows, wtile8_avx2,
 * scales8_avx2, has_offset32, TILE_N, FORCE_INLINE, UNROLL) in scope.
 *
 * Layout read (ACT_32V, written by matq.c's quant_rows_v): per activation
 * row, the 32 signed bytes q of each block; per group of 8 rows, floats
 * side[8 b + r] = d of row r's block b, side[8 nb + 8 b + r] = its offset
 * s, and the int32 side[16 nb + 8 b + r] = sum of its q.
 *
 * A tile is 8 weight rows x up to TILE_N activation rows, lane l of every
 * vector = weight row l (the last strip of a matrix repeats its last row in
 * the lanes past it, never stored). Per weight block the 8 rows are
 * unpacked to unsigned bytes u = w + bias (bias 8 for Q4_0, 16 for Q5_0,
 * 128 for Q8_0, 0 for Q4_1/Q5_1) and transposed: W[j] lane l = the four
 * values 4j..4j+3 of row l. Per activation row the integer sum of the
 * block is then 8 steps of (4 bytes of the row broadcast) . W[j] from
 * -bias * sum(q) (exact: sum q u - bias sum q = sum q w), one convert and
 * one fma with d_w * d_a (dw: the 8 rows' scales, one vector; d_a
 * broadcast): the reference's float steps (dot32_s), with no horizontal
 * work. The accumulators of the tile's rows live in memory (L1). The
 * plain form sums the vpmaddubsw pairs in 16 bits over 8 (Q4) or 4 (Q5)
 * positions before one vpmaddwd (|sum| <= 8 * 2 * 15 * 127 = 30480, and 4
 * * 2 * 31 * 127 = 31496: no saturation); Q8_0 there takes |w| and moves
 * w's sign onto the activations (2 * 128 * 127 < 32768) from 0. */

/* nc (1..8) weight rows from w (stride wrb) x nr activation rows (stride
 * arow; the side floats of row r's group at side + (r / 8) * sgrp):
 * out[r * os + c]. */
XV_ATTR static FORCE_INLINE void XV(x32v_strip)(int type, int k, const uint8_t *w, size_t wrb, int nc,
                                                const uint8_t *act, size_t arow, const float *side,
                                                size_t sgrp, int nr, float *out, size_t os, float (*acc)[8],
                                                float (*accm)[8])
{
    const size_t bs = x32_fmt(type).bs;
    const int off = has_offset32(type), nb = k / GGML_QK, bias = x32_fmt(type).bias;
#if XV_VNNI
    const int sgn = 0;
#else
    const int sgn = type == GGML_TYPE_Q8_0; /* |w| and the sign transfer */
    const int grp = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 ? 8 : 4;
#endif
    const uint8_t *rows[8];
    int32_t vi[8];
    strip_rows(w, wrb, nc, 8, rows, vi);
    const __m256i vidx = _mm256_loadu_si256((const __m256i *)(const void *)vi);
    for (int r = 0; r < nr; r++) {
        _mm256_store_ps(acc[r], _mm256_setzero_ps());
        _mm256_store_ps(accm[r], _mm256_setzero_ps());
    }
    for (int b = 0; b < nb; b++) {
        const size_t boff = (size_t)b * bs;
        __m256i W[8];
        /* the next strip (8 rows, contiguous) streams in while this one runs */
        for (size_t z = 0; z < 8 * bs; z += 64)
            _mm_prefetch((const char *)(w + 8 * wrb + 8 * boff + z), _MM_HINT_T0);
        wtile8_avx2(type, rows, boff, w, vidx, sgn, W);
        __m256 dw, mw;
        scales8_avx2(w + boff, vidx, &dw, &mw);
#if !XV_VNNI
        __m256i A[8];
        if (sgn)
            UNROLL for (int j = 0; j < 8; j++)
                A[j] = _mm256_abs_epi8(W[j]);
#endif
        const int nbb = 8 * nb;
        for (int r = 0; r < nr; r++) {
            const uint8_t *a = act + (size_t)r * arow + 32 * (size_t)b;
            const float *sd = side + (size_t)(r / 8) * sgrp + r % 8 + 8 * (size_t)b;
            int32_t sq;
            memcpy(&sq, sd + 2 * nbb, sizeof sq);
            __m256i P;
#if XV_VNNI
            P = _mm256_set1_epi32(-bias * sq);
            UNROLL for (int j = 0; j < 8; j++) {
                int32_t a4;
                memcpy(&a4, a + 4 * j, sizeof a4);
                P = _mm256_dpbusd_avx_epi32(P, W[j], _mm256_set1_epi32(a4));
            }
#else
            const __m256i ones = _mm256_set1_epi16(1);
            if (sgn) {
                P = _mm256_setzero_si256();
                UNROLL for (int j = 0; j < 8; j++) {
                    int32_t a4;
                    memcpy(&a4, a + 4 * j, sizeof a4);
                    __m256i s = _mm256_sign_epi8(_mm256_set1_epi32(a4), W[j]);
                    P = _mm256_add_epi32(P, _mm256_madd_epi16(_mm256_maddubs_epi16(A[j], s), ones));
                }
            } else {
                P = _mm256_set1_epi32(-bias * sq);
                UNROLL for (int j0 = 0; j0 < 8; j0 += 4) {
                    if (grp == 8 && j0 == 4)
                        break;
                    __m256i h = _mm256_setzero_si256();
                    UNROLL for (int j = j0; j < j0 + grp; j++) {
                        int32_t a4;
                        memcpy(&a4, a + 4 * j, sizeof a4);
                        h = _mm256_add_epi16(h, _mm256_maddubs_epi16(W[j], _mm256_set1_epi32(a4)));
                    }
                    P = _mm256_add_epi32(P, _mm256_madd_epi16(h, ones));
                }
            }
#endif
            __m256 dv = _mm256_mul_ps(dw, _mm256_broadcast_ss(sd));
            _mm256_store_ps(acc[r], _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(P), _mm256_load_ps(acc[r])));
            if (off)
                _mm256_store_ps(accm[r], _mm256_fmadd_ps(mw, _mm256_broadcast_ss(sd + nbb), _mm256_load_ps(accm[r])));
        }
    }
    for (int r = 0; r < nr; r++) {
        __m256 v = _mm256_load_ps(acc[r]);
        if (off)
            v = _mm256_add_ps(v, _mm256_load_ps(accm[r]));
        float o[8];
        _mm256_storeu_ps(o, v);
        for (int c = 0; c < nc; c++)
            out[(size_t)r * os + (size_t)c] = o[c];
    }
}

/* nc weight rows x nr (<= TILE_N) activation rows: strips of 8 weight rows
 * (the dotu_fn of ACT_32V at AVX2). */
#define XV_KERNEL(name, T)                                                                                  \
    XV_ATTR static void XV(name)(int k, const uint8_t *w0, size_t wrb, int nc, const uint8_t *act,           \
                                 size_t arow, const float *side, size_t sgrp, int nr, float *out, size_t os) \
    {                                                                                                       \
        _Alignas(32) float acc[TILE_N][8], accm[TILE_N][8];                                                 \
        for (int c = 0; c < nc; c += 8)                                                                     \
            XV(x32v_strip)(T, k, w0 + (size_t)c * wrb, wrb, nc - c < 8 ? nc - c : 8, act, arow, side, sgrp, \
                           nr, out + c, os, acc, accm);                                                     \
    }

XV_KERNEL(dotv_q4_0, GGML_TYPE_Q4_0)
XV_KERNEL(dotv_q4_1, GGML_TYPE_Q4_1)
XV_KERNEL(dotv_q5_0, GGML_TYPE_Q5_0)
XV_KERNEL(dotv_q5_1, GGML_TYPE_Q5_1)
XV_KERNEL(dotv_q8_0, GGML_TYPE_Q8_0)
#undef XV_KERNEL
