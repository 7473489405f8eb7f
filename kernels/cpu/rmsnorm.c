/* rmsnorm.c - RMSNorm, CPU reference (kn_rmsnorm_f32; contract in
 * kernels/kn.h).
 *
 * x (n_rows, dim) f32, w (dim) f32, out (n_rows, dim) f32. Sum of squares
 * accumulated in float32 in index order. The reference of cuda/rmsnorm.cu
 * (1e-5 relative per element; bf16 output 4e-3). Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>

void kn_rmsnorm_f32(float *out, const float *x, const float *w, int n_rows, int dim, float eps)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)dim;
        float *or = out + (size_t)r * (size_t)dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++)
            ss += xr[i] * xr[i];
        float scale = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++)
            or[i] = xr[i] * scale * w[i];
    }
}
