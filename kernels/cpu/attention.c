/* attention.c - causal GQA attention of one query over a paged K/V cache,
 * CPU reference. See ops.h for the layout and the accumulation order, which
 * is fixed (position order) so that a token's result never depends on what
 * else shares its batch. */
#include "kernels/cpu/ops.h"

#include <math.h>
#include <string.h>

static const float *kv_at(const float *base, const int32_t *block_table, int block_tokens,
                          size_t block_stride, int kv_dim, int p)
{
    return base + (size_t)block_table[p / block_tokens] * block_stride +
           (size_t)(p % block_tokens) * (size_t)kv_dim;
}

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
    for (int h = h0; h < h1; h++) {
        const float *qh = q + (size_t)h * (size_t)head_dim;
        size_t kv_off = (size_t)(h / group) * (size_t)head_dim;
        float mx = -INFINITY;
        for (int p = 0; p < n_ctx; p++) {
            const float *kp = kv_at(k, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
            float s = 0.0f;
            for (int d = 0; d < head_dim; d++)
                s += qh[d] * kp[d];
            s *= scale;
            scores[p] = s;
            if (s > mx)
                mx = s;
        }
        float sum = 0.0f;
        for (int p = 0; p < n_ctx; p++) {
            scores[p] = expf(scores[p] - mx);
            sum += scores[p];
        }
        float inv = 1.0f / sum;
        float *oh = out + (size_t)h * (size_t)head_dim;
        memset(oh, 0, (size_t)head_dim * sizeof *oh);
        for (int p = 0; p < n_ctx; p++) {
            const float *vp = kv_at(v, block_table, block_tokens, block_stride, kv_dim, p) + kv_off;
            float w = scores[p] * inv;
            for (int d = 0; d < head_dim; d++)
                oh[d] += w * vp[d];
        }
    }
}
