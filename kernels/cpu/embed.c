/* embed.c - embedding lookup (kn_get_rows), CPU reference: each row is
 * dequantized with the bit-exact quant.c decoder. See ops.h. */
#include "kernels/cpu/ops.h"

#include "kernels/cpu/quant.h"

void kn_get_rows(float *out, const void *table, uint32_t type, size_t row_bytes,
                 const int32_t *ids, int n, int dim)
{
    const unsigned char *base = table;
    for (int r = 0; r < n; r++)
        (void)quant_dequant_row(type, base + (size_t)ids[r] * row_bytes,
                                out + (size_t)r * (size_t)dim, dim);
}
