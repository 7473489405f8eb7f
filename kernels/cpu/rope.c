/* rope.c - rotary position embedding, NORM and NEOX layouts, CPU reference
 * (kn_rope_f32, kn_rope_table, kn_rope_apply_f32; contracts in
 * kernels/kn.h).
 *
 * x (n_tok, n_head * head_dim) f32 in place; pos (n_tok) int32. The
 * per-pair angle is computed in double (freq_base^(-2i/n_rot) with pow, not
 * by repeated multiplication as ggml does), which keeps it within an ulp of
 * HF's float32 inv_freq * pos. The reference of cuda/rope.cu (2e-6
 * absolute per element for |x| <= 4). Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>

/* cos and sin of pair i's angle at position p (see kn.h). */
static void rope_cs(double p, int i, int n_rot, float freq_base, float freq_scale,
                    const float *freq_factors, float *c, float *s)
{
    double theta = p * (double)freq_scale * pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
    if (freq_factors)
        theta /= (double)freq_factors[i];
    *c = (float)cos(theta);
    *s = (float)sin(theta);
}

/* Rotate pair i of every head of one token by (c, s). */
static void rope_rotate(float *xt, int n_head, int head_dim, int half, int i, float c, float s,
                        enum kn_rope_mode mode)
{
    int a = mode == KN_ROPE_NEOX ? i : 2 * i;
    int b = mode == KN_ROPE_NEOX ? i + half : 2 * i + 1;
    for (int h = 0; h < n_head; h++) {
        float *xh = xt + (size_t)h * (size_t)head_dim;
        float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * c - x1 * s;
        xh[b] = x0 * s + x1 * c;
    }
}

void kn_rope_table(float *cs, int n_tok, int n_rot, const int32_t *pos, float freq_base,
                   float freq_scale, const float *freq_factors)
{
    int half = n_rot / 2;
    for (int t = 0; t < n_tok; t++) {
        float *c = cs + (size_t)t * (size_t)n_rot;
        for (int i = 0; i < half; i++)
            rope_cs((double)pos[t], i, n_rot, freq_base, freq_scale, freq_factors, &c[i],
                    &c[half + i]);
    }
}

void kn_rope_apply_f32(float *x, int n_tok, int n_head, int head_dim, int n_rot, const float *cs,
                       enum kn_rope_mode mode)
{
    int half = n_rot / 2;
    for (int t = 0; t < n_tok; t++) {
        const float *c = cs + (size_t)t * (size_t)n_rot;
        for (int i = 0; i < half; i++)
            rope_rotate(x + (size_t)t * (size_t)n_head * (size_t)head_dim, n_head, head_dim, half,
                        i, c[i], c[half + i], mode);
    }
}

void kn_rope_f32(float *x, int n_tok, int n_head, int head_dim, int n_rot, const int32_t *pos,
                 float freq_base, float freq_scale, const float *freq_factors,
                 enum kn_rope_mode mode)
{
    int half = n_rot / 2;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < half; i++) {
            float c, s;
            rope_cs((double)pos[t], i, n_rot, freq_base, freq_scale, freq_factors, &c, &s);
            rope_rotate(x + (size_t)t * (size_t)n_head * (size_t)head_dim, n_head, head_dim, half,
                        i, c, s, mode);
        }
}
