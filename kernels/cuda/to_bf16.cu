// to_bf16.cu - f32 to bf16 on the device (kn_cuda_to_bf16).
//
// Shapes: in (n) f32, out (n) bf16. One thread per value (grid-stride),
// round to nearest even (__float2bfloat16_rn).
// CPU reference: kn_fp32_to_bf16 (kernels/cpu/quant.c). Tolerance 0 for
// finite inputs (NaN payloads may differ: both give a NaN).
#include "device.cuh"

extern "C" {
#include "common/err.h"
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *out, const float *in, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}

int kn_cuda_to_bf16(struct kn_cuda *c, void *out, const float *in, size_t n)
{
    if (n == 0)
        return 0;
    to_bf16_kernel<<<kn_cuda_blocks(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)out, in, n);
    return kn_cuda_check(cudaGetLastError(), "to_bf16_kernel");
}
