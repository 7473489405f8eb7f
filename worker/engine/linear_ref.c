/* linear_ref.c - reference (de)quantized matmul; see linear_ref.h. */
#include "worker/engine/linear_ref.h"

#include <stdint.h>

#include "common/err.h"
#include "kernels/kn.h"

size_t linref_scratch_bytes(int k)
{
    return (size_t)(k > 0 ? k : 0) * sizeof(float);
}

static float dot_f32(const float *a, const float *b, int k)
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

int linref_matmul_w(struct kn_pool *pool, float *out, const float *x, int n, int k, const void *w,
                    int w_type, int m, void *scratch, size_t scratch_bytes)
{
    (void)pool;
    if (n < 0 || k < 0 || m < 0 || w_type < 0)
        return ERR_INVAL;
    if (!quant_type_supported((uint32_t)w_type))
        return ERR_UNSUPPORTED;
    int64_t row_bytes;
    int rc = quant_row_bytes((uint32_t)w_type, k, &row_bytes);
    if (rc)
        return rc;
    if (scratch_bytes < linref_scratch_bytes(k))
        return ERR_TOOBIG;
    float *row = scratch;
    const unsigned char *wb = w;
    for (int c = 0; c < m; c++) {
        rc = quant_dequant_row((uint32_t)w_type, wb + (size_t)c * (size_t)row_bytes, row, k);
        if (rc)
            return rc;
        for (int r = 0; r < n; r++)
            out[(size_t)r * (size_t)m + (size_t)c] = dot_f32(x + (size_t)r * (size_t)k, row, k);
    }
    return 0;
}
