/* scale.c - element-wise scaling ops, CPU reference (kn_scale_f32,
 * kn_softcap_f32, kn_tanh; contracts in kernels/kn.h).
 *
 * kn_scale_f32: x[i] *= s (the Gemma embedding scale sqrt(n_embd)).
 * kn_softcap_f32: x[i] = cap * kn_tanh(x[i] / cap) (Gemma 2 final logit
 * soft-capping, over the whole vocabulary for every output token; the
 * attention scores are capped inside attention.c the same way).
 * kn_tanh: libm's tanhf costs ~12 ns, 3 ms per token on a 262k vocabulary
 * (15% of a Gemma-size-vocabulary 270M model's decode step); this one costs
 * ~3 ns: the odd Taylor series to x^11 for |x| < 0.5, 1 - 2 / (expf(2|x|) + 1)
 * above (no cancellation there: expf(1) + 1 > 3), +-1 beyond 10. Error
 * under 1e-6 relative against tanh in double (checked by
 * tests/unit/worker/engine/test_model.c kn_attention_window_and_softcap).
 * All float, one element at a time, so a row's bits do not depend on its
 * neighbours. No CUDA twins: the CUDA forward refuses the architectures
 * that use them (worker/engine/forward.c). Pure, any thread. */
#include "kernels/kn.h"

#include <math.h>

void kn_scale_f32(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

float kn_tanh(float x)
{
    float a = fabsf(x);
    if (a < 0.5f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 +
                     x2 * (62.0f / 2835 + x2 * (-1382.0f / 155925))))));
    }
    if (a > 10.0f)
        return copysignf(1.0f, x);
    return copysignf(1.0f - 2.0f / (expf(2.0f * a) + 1.0f), x);
}

void kn_softcap_f32(float *x, float cap, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = cap * kn_tanh(x[i] / cap);
}
