// rope.cu - rotary position embedding on the device, NORM and NEOX layouts.
//
// Shapes: x (n_tok rows of row_stride floats, f32, in place; head h of a
// row at h * head_dim - so q, or k, inside a fused QKV row); pos (n_tok)
// int32; theta (n_rot/2) double per-position angle unit (host computed by
// kn_cuda_rope_theta with pow in double, as kernels/cpu/rope.c). One thread
// per (token, head, pair): the angle pos * theta[i] and its cosine/sine are
// computed in double and rounded once to float (as the CPU reference); the
// rotation is float with explicit roundings (no FMA contraction). The only
// difference from the CPU reference kn_rope_f32 (kernels/cpu/rope.c) is the
// order of the double product (pos * (scale * base^e / f) instead of
// ((pos * scale) * base^e) / f), an ulp of double: tolerance 2e-6 absolute per element for |x| <= 4 and
// positions < 2^17.
#include <math.h>

#include "device.cuh"

extern "C" {
#include "common/err.h"
}

static __global__ void rope_kernel(float *x, int n_tok, size_t row_stride, int n_head,
                                   int head_dim, int half, const int32_t *pos,
                                   const double *theta, int neox)
{
    size_t total = (size_t)n_tok * n_head * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t th = idx / half;
        int h = (int)(th % n_head), t = (int)(th / n_head);
        double ang = (double)pos[t] * theta[i];
        double sd, cd;
        sincos(ang, &sd, &cd);
        float cs = (float)cd, sn = (float)sd;
        float *xh = x + (size_t)t * row_stride + (size_t)h * head_dim;
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = xh[a], x1 = xh[b];
        xh[a] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
        xh[b] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
}

int kn_cuda_rope(struct kn_cuda *c, float *x, int n_tok, size_t row_stride, int n_head,
                 int head_dim, int n_rot, const int32_t *pos, const double *theta, int neox)
{
    if (n_rot <= 0 || n_rot % 2 || n_rot > head_dim || row_stride < (size_t)n_head * head_dim)
        return ERR_INVAL;
    if (n_tok <= 0 || n_head <= 0)
        return 0;
    size_t total = (size_t)n_tok * n_head * (n_rot / 2);
    rope_kernel<<<kn_cuda_blocks(total, 256), 256, 0, c->stream>>>(
        x, n_tok, row_stride, n_head, head_dim, n_rot / 2, pos, theta, neox);
    return kn_cuda_check(cudaGetLastError(), "rope_kernel");
}

extern "C" void kn_cuda_rope_theta(double *theta_host, int n_rot, float freq_base,
                                   float freq_scale, const float *freq_factors)
{
    for (int i = 0; i < n_rot / 2; i++) {
        double t = (double)freq_scale * pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
        if (freq_factors)
            t /= (double)freq_factors[i];
        theta_host[i] = t;
    }
}
