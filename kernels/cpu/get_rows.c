/* get_rows.c - embedding lookup, CPU reference (kn_get_rows; contract in
 * kernels/kn.h).
 *
 * Shapes: table (rows of row_bytes bytes, ggml type `type`); ids (n) int32;
 * out (n, dim) f32. Each row is dequantized with the bit-exact quant.c
 * decoder. CUDA twin: kn_cuda_dequant with ids (cuda/dequant.cu),
 * tolerance 0 (bit-identical). Pure, any thread. */
#include "kernels/kn.h"

void kn_get_rows(float *out, const void *table, uint32_t type, size_t row_bytes,
                 const int32_t *ids, int n, int dim)
{
    const unsigned char *base = table;
    for (int r = 0; r < n; r++)
        (void)kn_dequant_row(type, base + (size_t)ids[r] * row_bytes,
                                out + (size_t)r * (size_t)dim, dim);
}
