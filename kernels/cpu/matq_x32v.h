/* matq_x32v.h - the AVX2 register-tile kernels of matq.c for the 32-value
 * types (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0), included once per integer-dot form
 * (private to kernels/cpu). The includer defines:
 *   XV_VNNI   1: AVX-VNNI vpdpbusd; 0: vpmaddubsw + vpmaddwd
 *   XV(name)  the name with the form's suffix
 *   XV_ATTR   the target attribute of the form
 * and has the AVX2 helpers of matq.c (unpack32_avx2, h2f_avx2, hsum8_avx2,
 * rd16, FORCE_INLINE, UNROLL) in scope.
 *
 * Layout read (ACT_32V, written by matq.c's quant_rows_v): per activation
 * row, 32 bytes per block: q + 128 (XV_VNNI and a signed weight type) or q
 * (otherwise); per group of 8 rows, floats side[8 b + r] = d of row r's
 * block b, side[8 nb + 8 b + r] = its offset s (Q4_1/Q5_1), lanes of rows
 * past the last one zero.
 *
 * One 256-bit register holds one block: the reference's lane set b & 1
 * (dot32_s). A tile is 1 weight row x NA (1, 4, 8) activation rows; with
 * NA > 1 it runs two passes over the blocks, even ones (lane set 0) then
 * odd ones (lane set 1), so that the NA accumulators of one set fill the
 * 16 ymm registers (both sets at once would need 2 NA); each lane is still
 * the reference's fma chain over its blocks in order. Per (weight block,
 * activation row) the inner step is the integer dot (VNNI: vpdpbusd
 * starting from -128 sum(w), the correction of the unsigned activations,
 * computed once per weight block; plain: the sign moved onto the
 * activations, maddubs, madd - exact, see dot_ss), convert, and one fma
 * with the scale d_w * d_a broadcast from memory: the scale products of
 * the NA rows are one vector multiply per weight block (the reference's
 * float product, lane by lane), stored and broadcast back per row. The
 * offsets of Q4_1/Q5_1 are one 8-lane fma per weight block (lane r = row
 * r's accm of that lane set). */

/* One block b (of parity set P's accumulators) of weight row w against NA
 * activation rows. */
XV_ATTR static FORCE_INLINE void XV(x32v_block)(int type, const uint8_t *w, int b, const uint8_t *act,
                                                size_t arow, const float *side, int nb, __m256 *acc,
                                                __m256 *accm, const int NA, const int SA)
{
    const size_t bs = type == GGML_TYPE_Q4_0 ? 18 : type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q5_0 ? 22
                    : type == GGML_TYPE_Q5_1 ? 24 : 34;
    const int off = has_offset32(type);
    const uint8_t *blk = w + (size_t)b * bs;
    __m256i wq = unpack32_avx2(type, blk), wx;
    float dw = h2f_avx2(rd16(blk));
#if XV_VNNI
    if (SA) /* signed activations: |w| as the unsigned operand, w's sign moved onto them */
        wx = off ? wq : _mm256_sign_epi8(wq, wq);
    else
        wx = off ? _mm256_setzero_si256()
                 : _mm256_sub_epi32(_mm256_setzero_si256(),
                                    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), wq));
#else
    wx = off ? wq : _mm256_sign_epi8(wq, wq);
#endif
    if (off) /* lane r: row r's accm of this lane set */
        *accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f_avx2(rd16(blk + 2))), _mm256_loadu_ps(side + 8 * nb + 8 * b), *accm);
    float dv[8];
    if (NA == 1)
        dv[0] = dw * side[8 * b];
    else
        _mm256_storeu_ps(dv, _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(side + 8 * b)));
    UNROLL for (int r = 0; r < NA; r++) {
        __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(act + (size_t)r * arow + 32 * (size_t)b));
#if XV_VNNI
        __m256i isum = off ? _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), wq, y)
                     : SA  ? _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), wx, _mm256_sign_epi8(y, wq))
                           : _mm256_dpbusd_avx_epi32(wx, y, wq);
#else
        __m256i sy = off ? y : _mm256_sign_epi8(y, wq);
        __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(wx, sy), _mm256_set1_epi16(1));
#endif
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dv[r]), _mm256_cvtepi32_ps(isum), acc[r]);
    }
}

/* One weight row w x NA activation rows (the first nr written, out[r * os]). */
XV_ATTR static FORCE_INLINE void XV(x32v_tile)(int type, int k, const uint8_t *w, const uint8_t *act,
                                               size_t arow, const float *side, int nr, float *out,
                                               size_t os, const int NA, const int SA)
{
    const int nb = k / GGML_QK, off = has_offset32(type);
    __m256 acc[2][8], accm[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    if (NA == 1) { /* both lane sets in one pass: two accumulators */
        acc[0][0] = acc[1][0] = _mm256_setzero_ps();
        int b = 0;
        for (; b + 1 < nb; b += 2) {
            XV(x32v_block)(type, w, b, act, arow, side, nb, acc[0], &accm[0], 1, SA);
            XV(x32v_block)(type, w, b + 1, act, arow, side, nb, acc[1], &accm[1], 1, SA);
        }
        if (b < nb)
            XV(x32v_block)(type, w, b, act, arow, side, nb, acc[0], &accm[0], 1, SA);
    } else {
        float set0[8][8];
        UNROLL for (int r = 0; r < NA; r++)
            acc[0][r] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b += 2)
            XV(x32v_block)(type, w, b, act, arow, side, nb, acc[0], &accm[0], NA, SA);
        UNROLL for (int r = 0; r < NA; r++) { /* lane set 0 to memory, registers for set 1 */
            _mm256_storeu_ps(set0[r], acc[0][r]);
            acc[0][r] = _mm256_setzero_ps();
        }
        for (int b = 1; b < nb; b += 2)
            XV(x32v_block)(type, w, b, act, arow, side, nb, acc[0], &accm[1], NA, SA);
        UNROLL for (int r = 0; r < NA; r++)
            acc[1][r] = _mm256_loadu_ps(set0[r]);
    }
    float m[2][8];
    _mm256_storeu_ps(m[0], accm[0]);
    _mm256_storeu_ps(m[1], accm[1]);
    UNROLL for (int r = 0; r < NA; r++) {
        if (r >= nr)
            break;
        float v = hsum8_avx2(_mm256_add_ps(acc[0][r], acc[1][r]));
        out[(size_t)r * os] = off ? v + (m[0][r] + m[1][r]) : v;
    }
}

/* nc weight rows x one group of nr (1..8) activation rows (the dotu_fn of
 * ACT_32V): one weight row at a time against 1, 4 or 8 rows (the group's
 * rows past nr, up to 4 or 8, must be readable: see act_rows_u). The _sa
 * forms (AVX-VNNI only) read signed activations, the layout of a call with
 * n == 1: a lone row takes |w| and the sign transfer per block (abs, sign,
 * vpdpbusd: 3 instructions over two port groups) where the q + 128 layout
 * needs the correction per block (vpdpbusd, subtract, vpdpbusd: two of the
 * three on the vpdpbusd ports), which made the VNNI Q8_0 decode 7-12%
 * slower than the one-row kernel the tiles replaced (bench/NOTES.md,
 * 2026-12-03). The same exact integers either way. */
#define XV_KERNEL_F(name, T, SA)                                                                  \
    XV_ATTR static void XV(name)(int k, const uint8_t *w0, size_t wrb, int nc, const uint8_t *act, \
                                 size_t arow, const float *side, int nr, float *out, size_t os)  \
    {                                                                                             \
        for (int c = 0; c < nc; c++) {                                                            \
            const uint8_t *w = w0 + (size_t)c * wrb;                                              \
            if (nr == 1)                                                                          \
                XV(x32v_tile)(T, k, w, act, arow, side, 1, out + c, os, 1, SA);                   \
            else if (nr > 4)                                                                      \
                XV(x32v_tile)(T, k, w, act, arow, side, nr, out + c, os, 8, SA);                  \
            else                                                                                  \
                XV(x32v_tile)(T, k, w, act, arow, side, nr, out + c, os, 4, SA);                  \
        }                                                                                         \
    }
#define XV_KERNEL(name, T) XV_KERNEL_F(name, T, 0)

XV_KERNEL(dotv_q4_0, GGML_TYPE_Q4_0)
XV_KERNEL(dotv_q4_1, GGML_TYPE_Q4_1)
XV_KERNEL(dotv_q5_0, GGML_TYPE_Q5_0)
XV_KERNEL(dotv_q5_1, GGML_TYPE_Q5_1)
XV_KERNEL(dotv_q8_0, GGML_TYPE_Q8_0)
#if XV_VNNI
XV_KERNEL_F(dotv_q4_0_sa, GGML_TYPE_Q4_0, 1)
XV_KERNEL_F(dotv_q5_0_sa, GGML_TYPE_Q5_0, 1)
XV_KERNEL_F(dotv_q8_0_sa, GGML_TYPE_Q8_0, 1)
#endif
#undef XV_KERNEL
#undef XV_KERNEL_F
