/* matmul.c - float32 matrix product against row-major weights, CPU
 * reference (kn_matmul_f32; contract in kernels/kn.h).
 *
 * out (n, m) = x (n, k) @ w (m, k)^T, f32, float32 accumulation.
 * Straightforward loops with four independent accumulators per dot product
 * so the compiler vectorises the inner loop; the quantized, threaded
 * products are in matq.c. The reference of cuda/matmul.cu
 * (kn_cuda_matmul_f32, 1e-4 relative L2) and, on bf16-rounded inputs, of
 * cuda/gemm.cu (kn_cuda_gemm_bf16, 1e-3 relative L2). Pure, any thread. */
#include "kernels/kn.h"

static float kn_dot_f32(const float *a, const float *b, int k)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= k; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < k; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void kn_matmul_f32(float *out, const float *x, const float *w, int n, int k, int m)
{
    for (int r = 0; r < n; r++)
        for (int c = 0; c < m; c++)
            out[(size_t)r * (size_t)m + (size_t)c] =
                kn_dot_f32(x + (size_t)r * (size_t)k, w + (size_t)c * (size_t)k, k);
}
