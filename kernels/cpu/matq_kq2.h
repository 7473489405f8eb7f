/* matq_kq2.h - the AVX2 kernels of matq.c for the K-quants (Q4_K Q5_K
 * Q6_K), included once per integer-dot form (private to kernels/cpu). The
 * includer defines:
 *   XK_VNNI   1: AVX-VNNI vpdpwssd; 0: vpmaddwd + vpaddd
 *   XK(name)  the name with the form's suffix
 *   XK_ATTR   the target attribute of the form
 * and has the AVX2 helpers of matq.c in scope (k4_scale_words, k4_mins16,
 * k4_scales16, hsum_rows4, hsum_rows8, act_d4, act_d8, bsum_dot_avx2,
 * hsum_i32_avx2, h2f_avx2, rd16, FORCE_INLINE, UNROLL).
 *
 * Each weight super-block is unpacked once and dotted with NR = 1, 4 or 8
 * activation rows (struct act256, read in place). Per 32 weights and row
 * the integer step is vpmaddubsw (u8 weights <= 63 x s8 activations: exact
 * i16 pair sums, |pair| <= 2 * 63 * 127) then the sub-block's i16 scale:
 * one vpdpwssd with AVX-VNNI (multiply, pair-add and accumulate in i32),
 * vpmaddwd + vpaddd without. The integer sums are exact either way, so the
 * order of the vector adds does not matter; per row the float steps are
 * the reference's two fmas per super-block in block order (dot_q4_k_s,
 * dot_q6_k_s), done for 4 or 8 rows at once in one 4- or 8-lane vector
 * (lane r = row r: the same operations). The mins (Q4_K/Q5_K) and the
 * -32 correction of Q6_K are integer dots of the 16 bsums with the scales:
 * one vpmaddwd each, exact too.
 *
 * The sub-block scales are spread to the 16 i16 lanes of a register by
 * one vpshufb each from a copy of the eight (Q6_K: sixteen) scales in both
 * 128-bit lanes (a broadcast from a general register costs three or four
 * instructions per scale, which dominated the 1-row Q6_K kernel).
 *
 * Registers at NR = 8 (16 ymm): 8 row accumulators, the two unpacked
 * halves of a 64-weight chunk, their two scale vectors, one or two
 * temporaries. The vpdpwssd form needs one temporary, so it fits; the
 * plain form needs two and the mask, and spills: it has no 8-row entry
 * (below). */

/* isum + the i16 pair sums of u x y, each times the i16 scale s (exact) */
XK_ATTR static FORCE_INLINE __m256i XK(kdot)(__m256i isum, __m256i u, __m256i y, __m256i s)
{
#if XK_VNNI
    return _mm256_dpwssd_avx_epi32(isum, _mm256_maddubs_epi16(u, y), s);
#else
    return _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), s));
#endif
}

/* Q4_K (Q5 = 0) or Q5_K (Q5 = 1) against NR rows. */
XK_ATTR static FORCE_INLINE void XK(q45k_rows)(int k, const uint8_t *w, const struct act256 *const *a,
                                               float *out, const int NR, const int Q5)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t bs = Q5 ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q4_k);
    float acc[8] = {0}, accm[8] = {0};
    __m256 acc8 = _mm256_setzero_ps(), accm8 = _mm256_setzero_ps(); /* NR == 8: lane r = acc[r] */
    __m128 acc4 = _mm_setzero_ps(), accm4 = _mm_setzero_ps();       /* NR == 4 */
    for (int b = 0; b < k / GGML_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * bs;
        struct k4_words kw = k4_scale_words(blk + 4);
        /* the eight scales as i16 in both 128-bit lanes */
        __m256i sc2 = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(k4_scales16(&kw)));
        const uint8_t *qs = blk + (Q5 ? 48 : 16);
        __m256i qh = Q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        __m256i isum[8];
        UNROLL for (int r = 0; r < NR; r++)
            isum[r] = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) { /* bit 2c of qh[l]: 5th bit of sub-block 2c; bit 2c+1: of 2c+1 */
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
                qh = _mm256_srli_epi16(qh, 2);
            }
            /* scale of sub-block 2c (i16 lane 2c: bytes 4c, 4c+1) and 2c+1 */
            __m256i s0 = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(0x0100 * (4 * c + 1) + 4 * c)));
            __m256i s1 = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(0x0100 * (4 * c + 3) + 4 * c + 2)));
            UNROLL for (int r = 0; r < NR; r++) {
                isum[r] = XK(kdot)(isum[r], lo, _mm256_loadu_si256((const __m256i *)(a[r][b].q + 64 * c)), s0);
                isum[r] = XK(kdot)(isum[r], hi, _mm256_loadu_si256((const __m256i *)(a[r][b].q + 64 * c + 32)), s1);
            }
        }
        __m256i mins = k4_mins16(&kw);
        float dw = h2f_avx2(rd16(blk)), dm = h2f_avx2(rd16(blk + 2));
        if (NR == 8) { /* lane r of each vector: row r's scalar steps below */
            __m256i tm[8];
            UNROLL for (int r = 0; r < 8; r++)
                tm[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), mins);
            __m256 ad = act_d8(a, b);
            acc8 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw), ad), _mm256_cvtepi32_ps(hsum_rows8(isum)), acc8);
            accm8 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dm), ad), _mm256_cvtepi32_ps(hsum_rows8(tm)), accm8);
            continue;
        }
        if (NR == 4) {
            __m256i tm[4];
            UNROLL for (int r = 0; r < 4; r++)
                tm[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), mins);
            __m128 ad = act_d4(a, b);
            acc4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), ad), _mm_cvtepi32_ps(hsum_rows4(isum)), acc4);
            accm4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dm), ad), _mm_cvtepi32_ps(hsum_rows4(tm)), accm4);
            continue;
        }
        UNROLL for (int r = 0; r < NR; r++) {
            int imin = bsum_dot_avx2(a[r][b].bsums, mins);
            acc[r] = fmaf(dw * a[r][b].d, (float)hsum_i32_avx2(isum[r]), acc[r]);
            accm[r] = fmaf(dm * a[r][b].d, (float)imin, accm[r]);
        }
    }
    if (NR == 8) {
        _mm256_storeu_ps(out, _mm256_sub_ps(acc8, accm8));
        return;
    }
    if (NR == 4) {
        _mm_storeu_ps(out, _mm_sub_ps(acc4, accm4));
        return;
    }
    UNROLL for (int r = 0; r < NR; r++)
        out[r] = acc[r] - accm[r];
}

XK_ATTR static FORCE_INLINE void XK(q6k_rows)(int k, const uint8_t *w, const struct act256 *const *a,
                                              float *out, const int NR)
{
    float acc[8] = {0};
    __m256 acc8 = _mm256_setzero_ps(); /* NR == 8: lane r = acc[r] */
    __m128 acc4 = _mm_setzero_ps();    /* NR == 4 */
    for (int b = 0; b < k / GGML_QK_K; b++) {
        const uint8_t *blk = w + (size_t)b * sizeof(struct quant_block_q6_k);
        const uint8_t *ql = blk, *qhp = blk + 128;
        const int8_t *scales = (const int8_t *)(blk + 192);
        /* the sixteen scales as i16: sc16 = scales 0-7 | 8-15 */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)scales));
        __m256i isum[8];
        UNROLL for (int r = 0; r < NR; r++)
            isum[r] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(qhp + 32 * h));
            __m256i q[4];
            q6k_quarters(l0, l1, qh, q);
            /* scales 8h .. 8h + 7 in both 128-bit lanes */
            __m256i sch = h ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
            UNROLL for (int g = 0; g < 4; g++) {
                /* low lane: scale 8h + 2g (bytes 4g, 4g+1), high lane: 8h + 2g + 1 */
                __m256i scv = _mm256_shuffle_epi8(
                    sch, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (4 * g + 3) + 4 * g + 2)),
                                          _mm_set1_epi16((short)(0x0100 * (4 * g + 1) + 4 * g))));
                UNROLL for (int r = 0; r < NR; r++)
                    isum[r] = XK(kdot)(isum[r], q[g],
                                       _mm256_loadu_si256((const __m256i *)(a[r][b].q + 128 * h + 32 * g)), scv);
            }
        }
        /* the -32 offset: 32 * sum_g scale_g * bsum_g */
        float dw = h2f_avx2(rd16(blk + 208));
        if (NR == 8) { /* lane r: row r's scalar steps below */
            __m256i tc[8];
            UNROLL for (int r = 0; r < 8; r++)
                tc[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), sc16);
            __m256i total = _mm256_sub_epi32(hsum_rows8(isum), _mm256_slli_epi32(hsum_rows8(tc), 5));
            acc8 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw), act_d8(a, b)), _mm256_cvtepi32_ps(total), acc8);
            continue;
        }
        if (NR == 4) {
            __m256i tc[4];
            UNROLL for (int r = 0; r < 4; r++)
                tc[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)a[r][b].bsums), sc16);
            __m128i total = _mm_sub_epi32(hsum_rows4(isum), _mm_slli_epi32(hsum_rows4(tc), 5));
            acc4 = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), act_d4(a, b)), _mm_cvtepi32_ps(total), acc4);
            continue;
        }
        UNROLL for (int r = 0; r < NR; r++) {
            int total = hsum_i32_avx2(isum[r]) - 32 * bsum_dot_avx2(a[r][b].bsums, sc16);
            acc[r] = fmaf(dw * a[r][b].d, (float)total, acc[r]);
        }
    }
    if (NR == 8) {
        _mm256_storeu_ps(out, acc8);
        return;
    }
    if (NR == 4) {
        _mm_storeu_ps(out, acc4);
        return;
    }
    UNROLL for (int r = 0; r < NR; r++)
        out[r] = acc[r];
}

/* Entry points: one row (dot_fn), four and eight rows (dot4_fn; the
 * eight-row one reads a[0..7], and exists in the vpdpwssd form only: the
 * plain form spills at 8 rows - 126 ymm stack accesses in the Q4_K
 * kernel against 17, all in the tail, for vpdpwssd - and measured 0-13%
 * over 4 rows). */
#if XK_VNNI
#define XK_DOT8(T, CALL)                                                                         \
    XK_ATTR static void XK(dot8_##T)(int k, const uint8_t *w, const void *const *av, float *out) \
    {                                                                                            \
        const struct act256 *a[8];                                                               \
        for (int r = 0; r < 8; r++)                                                              \
            a[r] = av[r];                                                                        \
        CALL(k, w, a, out, 8);                                                                   \
    }
#else
#define XK_DOT8(T, CALL)
#endif
#define XK_ENTRIES(T, CALL)                                                                      \
    XK_ATTR static float XK(dot_##T)(int k, const uint8_t *w, const void *av)                     \
    {                                                                                            \
        const struct act256 *a[1] = {av};                                                        \
        float o;                                                                                 \
        CALL(k, w, a, &o, 1);                                                                    \
        return o;                                                                                \
    }                                                                                            \
    XK_ATTR static void XK(dot4_##T)(int k, const uint8_t *w, const void *const *av, float *out) \
    {                                                                                            \
        const struct act256 *a[4] = {av[0], av[1], av[2], av[3]};                                \
        CALL(k, w, a, out, 4);                                                                   \
    }                                                                                            \
    XK_DOT8(T, CALL)

#define XK_Q4K(k, w, a, o, nr) XK(q45k_rows)(k, w, a, o, nr, 0)
#define XK_Q5K(k, w, a, o, nr) XK(q45k_rows)(k, w, a, o, nr, 1)
#define XK_Q6K(k, w, a, o, nr) XK(q6k_rows)(k, w, a, o, nr)
XK_ENTRIES(q4_k, XK_Q4K)
XK_ENTRIES(q5_k, XK_Q5K)
XK_ENTRIES(q6_k, XK_Q6K)
#undef XK_Q4K
#undef XK_Q5K
#undef XK_Q6K
#undef XK_ENTRIES
#undef XK_DOT8

#if XK_VNNI
/* ---- the act256t tile with AVX-VNNI: 2 weight rows x 16 or 32 activation rows
 *
 * The AVX-512 tile of matq.c (kq_t_tile; the design is described there)
 * with 8-lane vectors: one act256t group is two registers per 4 positions
 * (rows 0-7, 8-15). One unpacked weight super-block serves every group of
 * the call's tile (up to 64 rows), 2 weight rows x 16 activation rows or
 * 1 x 32 per pass; registers: 4 x (P, isum) + 2 or 4 activation registers
 * + the broadcast weights; the float accumulators live in memory, updated
 * once per super-block. */

/* kq_unpack_t with 256-bit vectors: values to wb[256], scales, bsum pairs,
 * d, dmin; returns the correction C. */
XK_ATTR static FORCE_INLINE int XK(kq_unpack_t)(int type, const uint8_t *blk, uint8_t *wb, int32_t *sc,
                                                int32_t *pr, float *dw, float *dm)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i cacc = _mm256_setzero_si256();
    if (type == GGML_TYPE_Q6_K) {
        __m128i s8 = _mm_loadu_si128((const __m128i *)(blk + 192));
        _mm256_storeu_si256((__m256i *)(void *)sc, _mm256_cvtepi8_epi32(s8));
        _mm256_storeu_si256((__m256i *)(void *)(sc + 8), _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8)));
        _mm256_storeu_si256((__m256i *)(void *)pr, _mm256_cvtepi8_epi16(s8));
        __m256i sb = _mm256_broadcastsi128_si256(s8);
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_quarters(_mm256_loadu_si256((const __m256i *)(blk + 64 * h)),
                         _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32)),
                         _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)), q);
            UNROLL for (int g = 0; g < 4; g++) {
                _mm256_storeu_si256((__m256i *)(void *)(wb + 128 * h + 32 * g), q[g]);
                /* low lane: scale 8h + 2g, high lane: 8h + 2g + 1 */
                __m256i idx = _mm256_set_m128i(_mm_set1_epi8((char)(8 * h + 2 * g + 1)), _mm_set1_epi8((char)(8 * h + 2 * g)));
                cacc = _mm256_dpbusd_avx_epi32(cacc, q[g], _mm256_shuffle_epi8(sb, idx));
            }
        }
        *dw = h2f_avx2(rd16(blk + 208));
        *dm = 0.0f;
    } else {
        const int q5 = type == GGML_TYPE_Q5_K;
        struct k4_words kw = k4_scale_words(blk + 4);
        __m128i s8 = _mm_cvtsi64_si128((long long)(kw.sc[0] | (uint64_t)kw.sc[1] << 32));
        __m128i m8 = _mm_cvtsi64_si128((long long)(kw.mn[0] | (uint64_t)kw.mn[1] << 32));
        _mm256_storeu_si256((__m256i *)(void *)sc, _mm256_cvtepu8_epi32(s8));
        __m256i m32 = _mm256_cvtepu8_epi32(m8);
        _mm256_storeu_si256((__m256i *)(void *)pr, _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16)));
        __m256i sb = _mm256_broadcastsi128_si256(s8);
        const uint8_t *qs = blk + (q5 ? 48 : 16);
        __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) {
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
                qh = _mm256_srli_epi16(qh, 2);
            }
            _mm256_storeu_si256((__m256i *)(void *)(wb + 64 * c), lo);
            _mm256_storeu_si256((__m256i *)(void *)(wb + 64 * c + 32), hi);
            cacc = _mm256_dpbusd_avx_epi32(cacc, lo, _mm256_shuffle_epi8(sb, _mm256_set1_epi8((char)(2 * c))));
            cacc = _mm256_dpbusd_avx_epi32(cacc, hi, _mm256_shuffle_epi8(sb, _mm256_set1_epi8((char)(2 * c + 1))));
        }
        *dw = h2f_avx2(rd16(blk));
        *dm = h2f_avx2(rd16(blk + 2));
    }
    return 128 * hsum_i32_avx2(cacc);
}

/* The integer work of one super-block: NW (1, 2) unpacked weight rows x NH
 * (2, 4) halves of 8 rows (act256t groups t[h / 2]); the float steps into
 * acc/accm [c][h0 + h] (lane r: row 8 h + r of these groups). */
XK_ATTR static FORCE_INLINE void XK(kq_t_halves)(int q6, const uint8_t (*wb)[GGML_QK_K], const int32_t (*sc)[16],
                                                 const int32_t (*pr)[8], const int32_t *corr, const float *dw,
                                                 const float *dm, const struct act256t *const *t,
                                                 float (*acc)[8][8], float (*accm)[8][8], int h0,
                                                 const int NW, const int NH)
{
    const int n_sub = q6 ? 16 : 8, per_sub = q6 ? 4 : 8;
    __m256i isum[2][4];
    UNROLL for (int c = 0; c < NW; c++)
        UNROLL for (int h = 0; h < NH; h++)
            isum[c][h] = _mm256_setzero_si256();
    for (int s = 0; s < n_sub; s++) {
        __m256i P[2][4];
        UNROLL for (int c = 0; c < NW; c++)
            UNROLL for (int h = 0; h < NH; h++)
                P[c][h] = _mm256_setzero_si256();
        UNROLL for (int jj = 0; jj < 8; jj++) {
            if (jj >= per_sub)
                break;
            int j = s * per_sub + jj;
            __m256i A[4];
            UNROLL for (int h = 0; h < NH; h++)
                A[h] = _mm256_load_si256((const __m256i *)(const void *)(t[h / 2]->q[j] + 32 * (h % 2)));
            UNROLL for (int c = 0; c < NW; c++) {
                int32_t w4;
                memcpy(&w4, wb[c] + 4 * j, sizeof w4);
                __m256i wv = _mm256_set1_epi32(w4);
                UNROLL for (int h = 0; h < NH; h++)
                    P[c][h] = _mm256_dpbusd_avx_epi32(P[c][h], A[h], wv);
            }
        }
        UNROLL for (int c = 0; c < NW; c++) {
            __m256i scv = _mm256_set1_epi32(sc[c][s]);
            UNROLL for (int h = 0; h < NH; h++)
                isum[c][h] = _mm256_add_epi32(isum[c][h], _mm256_mullo_epi32(P[c][h], scv));
        }
    }
    UNROLL for (int h = 0; h < NH; h++) {
        const struct act256t *tt = t[h / 2];
        __m256 da = _mm256_load_ps(tt->d + 8 * (h % 2));
        UNROLL for (int c = 0; c < NW; c++) {
            __m256i mm = _mm256_setzero_si256();
            UNROLL for (int p = 0; p < 8; p++)
                mm = _mm256_dpwssd_avx_epi32(mm, _mm256_load_si256((const __m256i *)(const void *)(tt->bs[p] + 16 * (h % 2))),
                                             _mm256_set1_epi32(pr[c][p]));
            __m256i total = _mm256_sub_epi32(isum[c][h], _mm256_set1_epi32(corr[c]));
            if (q6)
                total = _mm256_sub_epi32(total, _mm256_slli_epi32(mm, 5));
            _mm256_store_ps(acc[c][h0 + h], _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dw[c]), da),
                                                            _mm256_cvtepi32_ps(total), _mm256_load_ps(acc[c][h0 + h])));
            if (!q6)
                _mm256_store_ps(accm[c][h0 + h], _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dm[c]), da),
                                                                 _mm256_cvtepi32_ps(mm), _mm256_load_ps(accm[c][h0 + h])));
        }
    }
}

/* NW (1, 2) weight rows x ng (1..4) act256t groups (ga structs apart): one
 * unpacked weight super-block for all of them - 2 x 16 rows or 1 x 32 per
 * pass (2 x 32 would not fit the 16 registers); out[r * os + c] for the
 * first nr rows. */
XK_ATTR static FORCE_INLINE void XK(kq_t_tile)(int type, int k, const uint8_t *w, size_t wrb,
                                               const struct act256t *at, size_t ga, int ng, int nr, float *out,
                                               size_t os, const int NW)
{
    const int q6 = type == GGML_TYPE_Q6_K;
    const size_t bs = type == GGML_TYPE_Q4_K ? sizeof(struct quant_block_q4_k)
                    : type == GGML_TYPE_Q5_K ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q6_k);
    _Alignas(32) uint8_t wb[2][GGML_QK_K];
    _Alignas(32) int32_t sc[2][16], pr[2][8];
    _Alignas(32) float acc[2][8][8], accm[2][8][8]; /* lane r of [c][h]: row 8 h + r */
    int32_t corr[2];
    float dw[2], dm[2];
    UNROLL for (int c = 0; c < NW; c++)
        for (int h = 0; h < 2 * ng; h++) {
            _mm256_store_ps(acc[c][h], _mm256_setzero_ps());
            _mm256_store_ps(accm[c][h], _mm256_setzero_ps());
        }
    for (int b = 0; b < k / GGML_QK_K; b++) {
        UNROLL for (int c = 0; c < NW; c++)
            corr[c] = XK(kq_unpack_t)(type, w + (size_t)c * wrb + (size_t)b * bs, wb[c], sc[c], pr[c], &dw[c], &dm[c]);
        int g = 0;
        if (NW == 1)
            for (; g + 2 <= ng; g += 2) {
                const struct act256t *t[2] = {at + (size_t)g * ga + b, at + (size_t)(g + 1) * ga + b};
                XK(kq_t_halves)(q6, (const uint8_t(*)[GGML_QK_K])wb, (const int32_t(*)[16])sc,
                                (const int32_t(*)[8])pr, corr, dw, dm, t, acc, accm, 2 * g, 1, 4);
            }
        for (; g < ng; g++) {
            const struct act256t *t[2] = {at + (size_t)g * ga + b, NULL};
            XK(kq_t_halves)(q6, (const uint8_t(*)[GGML_QK_K])wb, (const int32_t(*)[16])sc, (const int32_t(*)[8])pr,
                            corr, dw, dm, t, acc, accm, 2 * g, NW, 2);
        }
    }
    UNROLL for (int c = 0; c < NW; c++)
        for (int h = 0; h < 2 * ng; h++) {
            float o[8];
            __m256 v = _mm256_load_ps(acc[c][h]);
            _mm256_storeu_ps(o, q6 ? v : _mm256_sub_ps(v, _mm256_load_ps(accm[c][h])));
            for (int r = 0; r < 8 && 8 * h + r < nr; r++)
                out[(size_t)(8 * h + r) * os + (size_t)c] = o[r];
        }
}

#define XK_TKERNEL(T, TYPE)                                                                           \
    XK_ATTR static void XK(dott_##T)(int k, const uint8_t *w0, size_t wrb, int nc, const struct act256t *at, \
                                     size_t ga, int na, int nr, float *out, size_t os)                 \
    {                                                                                                  \
        int c = 0;                                                                                     \
        if (na == 1) { /* 2 x 16 rows */                                                               \
            for (; c + 2 <= nc; c += 2)                                                                \
                XK(kq_t_tile)(TYPE, k, w0 + (size_t)c * wrb, wrb, at, ga, na, nr, out + c, os, 2);     \
        }                                                                                              \
        for (; c < nc; c++) /* 1 x 32 rows */                                                          \
            XK(kq_t_tile)(TYPE, k, w0 + (size_t)c * wrb, wrb, at, ga, na, nr, out + c, os, 1);         \
    }
XK_TKERNEL(q4_k, GGML_TYPE_Q4_K)
XK_TKERNEL(q5_k, GGML_TYPE_Q5_K)
XK_TKERNEL(q6_k, GGML_TYPE_Q6_K)
#undef XK_TKERNEL
#endif
