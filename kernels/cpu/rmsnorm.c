/* rmsnorm.c - RMSNorm, CPU reference (see kn.h for the contract). */
#include <math.h>

#include "kernels/kn.h"

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
