/* scale.c - element-wise scaling ops, CPU reference (kn_scale_f32,
 * kn_softcap_f32; contracts in kernels/kn.h).
 *
 * kn_scale_f32: x[i] *= s (the Gemma embedding scale sqrt(n_embd)).
 * kn_softcap_f32: x[i] = cap * tanhf(x[i] / cap) (Gemma 2 final logit
 * soft-capping; the attention scores are capped inside attention.c the
 * same way). Both float, one element at a time, so a row's bits do not
 * depend on its neighbours. No CUDA twins: the CUDA forward refuses the
 * architectures that use them (worker/engine/forward.c). Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>

void kn_scale_f32(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

void kn_softcap_f32(float *x, float cap, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}
