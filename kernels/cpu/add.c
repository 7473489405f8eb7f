/* add.c - residual add and bias add, CPU reference (kn_add_f32,
 * kn_add_bias_f32; contracts in kernels/kn.h).
 *
 * x (n) += y (n); x (n, dim) += b (dim) per row. One float add per element:
 * the reference of cuda/add.cu, tolerance 0. Pure, any thread. */
#include "kernels/kn.h"

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
