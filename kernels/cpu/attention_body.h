/* attention_body.h - the per-head attention paths of attention.c, included
 * once per K/V element type (private to kernels/cpu). The includer defines:
 *   KVT         the cache element (float, or uint16_t = IEEE binary16 bits)
 *   AT(name)    the name with the type's suffix
 *   LD1(p)      one element at p as float
 *   LD8(p)      8 elements at p as __m256;  LD16(p): 16 as __m512
 *   LDPAIR(a,b) 8 elements at a (low half) and 8 at b (high half) as __m512
 *   ATT_AVX2, ATT_AVX512  the target attributes of the SIMD functions
 * Every element is converted to float exactly before it is used (binary16
 * -> binary32 is exact), so each path performs the very float operations
 * the f32 path performs on the converted values: the bits do not depend on
 * the SIMD level, and the f16 cache gives the f32 kernel's result on the
 * rounded K/V. */
static const KVT *AT(kv_at)(const KVT *base, const int32_t *block_table, int block_tokens,
                          size_t block_stride, int kv_dim, int p)
{
    return base + (size_t)block_table[p / block_tokens] * block_stride +
           (size_t)(p % block_tokens) * (size_t)kv_dim;
}

static float AT(dot_lanes)(const float *a, const KVT *b, int n)
{
    float l[8] = {0};
    for (int d = 0; d < n; d++)
        l[d & 7] = fmaf(a[d], LD1(b + d), l[d & 7]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void AT(head_scalar)(float *oh, const float *qh, const KVT *k, const KVT *v,
                        const int32_t *block_table, int block_tokens, size_t block_stride,
                        int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                        float softcap, float *scores)
{
    for (int p = p0; p < n_ctx; p++) {
        const KVT *kp = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        scores[p] = AT(dot_lanes)(qh, kp, head_dim) * scale;
    }
    softcap_row(scores + p0, n_ctx - p0, softcap);
    softmax_row(scores + p0, n_ctx - p0);
    memset(oh, 0, (size_t)head_dim * sizeof *oh);
    for (int p = p0; p < n_ctx; p++) {
        const KVT *vp = AT(kv_at)(v, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        float w = scores[p];
        for (int d = 0; d < head_dim; d++)
            oh[d] = fmaf(w, LD1(vp + d), oh[d]);
    }
}

#if ATT_X86
/* scores[p] = q.k_p * scale for p0 <= p < n_ctx (head_avx2's q.k; the
 * AVX-512 head uses it for the positions after its 8-position passes). */
ATT_AVX2 static void AT(scores_avx2)(float *scores, const float *qh, const KVT *k,
                             const int32_t *block_table, int block_tokens, size_t block_stride,
                             int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim,
                             float scale)
{
    /* four positions at a time: four independent FMA chains instead of one
     * latency-bound chain; each position's operations are unchanged */
    int p = p0;
    for (; p + 4 <= n_ctx; p += 4) {
        const KVT *k0 = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        const KVT *k1 = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p + 1) + kv_off;
        const KVT *k2 = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p + 2) + kv_off;
        const KVT *k3 = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p + 3) + kv_off;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < head_dim; d += 8) {
            __m256 qd = _mm256_loadu_ps(qh + d);
            a0 = _mm256_fmadd_ps(qd, LD8(k0 + d), a0);
            a1 = _mm256_fmadd_ps(qd, LD8(k1 + d), a1);
            a2 = _mm256_fmadd_ps(qd, LD8(k2 + d), a2);
            a3 = _mm256_fmadd_ps(qd, LD8(k3 + d), a3);
        }
        scores[p] = hsum_att(a0) * scale;
        scores[p + 1] = hsum_att(a1) * scale;
        scores[p + 2] = hsum_att(a2) * scale;
        scores[p + 3] = hsum_att(a3) * scale;
    }
    for (; p < n_ctx; p++) {
        const KVT *kp = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < head_dim; d += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), LD8(kp + d), acc);
        scores[p] = hsum_att(acc) * scale;
    }
}

ATT_AVX2 static void AT(head_avx2)(float *oh, const float *qh, const KVT *k, const KVT *v,
                           const int32_t *block_table, int block_tokens, size_t block_stride,
                           int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim, float scale,
                           float softcap, float *scores)
{
    AT(scores_avx2)(scores, qh, k, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim, kv_off,
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
            const KVT *vp =
                AT(kv_at)(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            __m256 w = _mm256_set1_ps(scores[pv]);
            for (int j = 0; j < nd / 8; j++)
                o[j] = _mm256_fmadd_ps(w, LD8(vp + 8 * j), o[j]);
        }
        for (int j = 0; j < nd / 8; j++)
            _mm256_storeu_ps(oh + d0 + 8 * j, o[j]);
    }
}

ATT_AVX512 static void AT(head_avx512)(float *oh, const float *qh, const KVT *k, const KVT *v,
                                const int32_t *block_table, int block_tokens, size_t block_stride,
                                int p0, int n_ctx, int kv_dim, size_t kv_off, int head_dim,
                                float scale, float softcap, float *scores)
{
    int p = p0;
    for (; p + 8 <= n_ctx; p += 8) {
        const KVT *kp[8];
        for (int i = 0; i < 8; i++)
            kp[i] = AT(kv_at)(k, block_table, block_tokens, block_stride, kv_dim, p + i) + kv_off;
        /* four named accumulators: an array here would live on the stack */
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < head_dim; d += 8) {
            __m512 qd = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(qh + d))));
            a0 = _mm512_fmadd_ps(qd, LDPAIR(kp[0] + d, kp[1] + d), a0);
            a1 = _mm512_fmadd_ps(qd, LDPAIR(kp[2] + d, kp[3] + d), a1);
            a2 = _mm512_fmadd_ps(qd, LDPAIR(kp[4] + d, kp[5] + d), a2);
            a3 = _mm512_fmadd_ps(qd, LDPAIR(kp[6] + d, kp[7] + d), a3);
        }
        const __m512 a[4] = {a0, a1, a2, a3};
        _mm256_storeu_ps(scores + p, _mm256_mul_ps(hsum8x8_att(a), _mm256_set1_ps(scale)));
    }
    AT(scores_avx2)(scores, qh, k, block_table, block_tokens, block_stride, p, n_ctx, kv_dim, kv_off,
                head_dim, scale);
    softcap_row(scores + p0, n_ctx - p0, softcap);
    softmax_row(scores + p0, n_ctx - p0);
    /* 64 dimensions per pass in four named accumulators, then 16 at a time */
    int d0 = 0;
    for (; d0 + 64 <= head_dim; d0 += 64) {
        __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int pv = p0; pv < n_ctx; pv++) {
            const KVT *vp =
                AT(kv_at)(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            __m512 w = _mm512_set1_ps(scores[pv]);
            o0 = _mm512_fmadd_ps(w, LD16(vp), o0);
            o1 = _mm512_fmadd_ps(w, LD16(vp + 16), o1);
            o2 = _mm512_fmadd_ps(w, LD16(vp + 32), o2);
            o3 = _mm512_fmadd_ps(w, LD16(vp + 48), o3);
        }
        _mm512_storeu_ps(oh + d0, o0);
        _mm512_storeu_ps(oh + d0 + 16, o1);
        _mm512_storeu_ps(oh + d0 + 32, o2);
        _mm512_storeu_ps(oh + d0 + 48, o3);
    }
    for (; d0 < head_dim; d0 += 16) {
        __m512 o0 = _mm512_setzero_ps();
        for (int pv = p0; pv < n_ctx; pv++) {
            const KVT *vp =
                AT(kv_at)(v, block_table, block_tokens, block_stride, kv_dim, pv) + kv_off + d0;
            o0 = _mm512_fmadd_ps(_mm512_set1_ps(scores[pv]), LD16(vp), o0);
        }
        _mm512_storeu_ps(oh + d0, o0);
    }
}
#endif

static void AT(win_heads)(float *out, const float *q, const KVT *k, const KVT *v,
                         const int32_t *block_table, int block_tokens, size_t block_stride, int p0,
                         int n_ctx, int n_head, int n_head_kv, int head_dim, int h0, int h1,
                         float scale, float softcap, float *scores)
{
    int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
#if ATT_X86
    int lv = ATT_LEVEL();
    int avx2 = lv >= KN_SIMD_AVX2 && head_dim % 8 == 0;
    int avx512 = lv >= KN_SIMD_AVX512 && head_dim % 16 == 0;
#endif
    for (int h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * (size_t)head_dim;
        float *oh = out + (size_t)h * (size_t)head_dim;
        size_t kv_off = (size_t)(h / group) * (size_t)head_dim;
#if ATT_X86
        if (avx512) {
            AT(head_avx512)(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                        kv_off, head_dim, scale, softcap, scores);
            continue;
        }
        if (avx2) {
            AT(head_avx2)(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                      kv_off, head_dim, scale, softcap, scores);
            continue;
        }
#endif
        AT(head_scalar)(oh, qh, k, v, block_table, block_tokens, block_stride, p0, n_ctx, kv_dim,
                    kv_off, head_dim, scale, softcap, scores);
    }
}
