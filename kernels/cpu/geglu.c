/* geglu.c - GeGLU activation, CPU reference (kn_geglu_f32; contract in
 * kernels/kn.h).
 *
 * gate, up, out (n) f32: out[i] = gelu_tanh(gate[i]) * up[i] with PyTorch's
 * gelu(approximate="tanh") (HF "gelu_pytorch_tanh", the Gemma activation):
 *   gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
 * in float, tanh by kn_tanh (scale.c: within 1e-6 relative, ~4x faster
 * than tanhf, which cost ~9% of a Gemma 270M prefill). No CUDA twin: the CUDA forward refuses the Gemma
 * architectures (worker/engine/forward.c). Pure, any thread. */
#include "kernels/kn.h"


void kn_geglu_f32(float *out, const float *gate, const float *up, size_t n)
{
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    const float k1 = 0.044715f;
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float inner = k0 * (g + k1 * g * g * g);
        out[i] = 0.5f * g * (1.0f + kn_tanh(inner)) * up[i];
    }
}
