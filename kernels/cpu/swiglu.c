/* swiglu.c - elementwise ops of the forward pass (SwiGLU, residual add,
 * bias add, argmax), CPU reference. See ops.h. */
#include "kernels/cpu/ops.h"

#include <math.h>

void kn_swiglu_f32(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kn_add_f32(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

void kn_add_bias_f32(float *x, const float *b, int n, int dim)
{
    for (int r = 0; r < n; r++)
        kn_add_f32(x + (size_t)r * (size_t)dim, b, (size_t)dim);
}

int kn_argmax_f32(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best]))
            best = i;
    return best;
}
