/* swiglu.c - SwiGLU activation, CPU reference (kn_swiglu_f32; contract in
 * kernels/kn.h).
 *
 * gate, up, out (n) f32: out[i] = silu(gate[i]) * up[i], silu(g) =
 * g / (1 + expf(-g)), float. The reference of cuda/swiglu.cu (2e-6
 * relative: expf differs by an ulp between libm and CUDA; bf16 output
 * 4e-3). Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>

void kn_swiglu_f32(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
