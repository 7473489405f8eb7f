/* argmax.c - index of the largest value, CPU reference (kn_argmax_f32;
 * contract in kernels/kn.h).
 *
 * x (n) f32 -> index; the first on ties, NaN never wins, -1 for n <= 0 (or
 * all NaN). The reference of cuda/argmax.cu (per row), which must give the
 * same index (exact). Pure, any thread. */
#include "kernels/kn.h"

int kn_argmax_f32(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best]))
            best = i;
    return best;
}
