// device.cuh - internals of the CUDA backend shared by its .cu files, private
// to kernels/cuda: the context behind the opaque struct kn_cuda of
// kernels/kn.h (whose CUDA section declares every launcher these files
// define, under extern "C"), CUDA/cuBLAS error translation, launch helpers.
// The only header outside kernels/cuda that the .cu files include is kn.h
// (and common/ for errors and logging).
#ifndef KERNELS_CUDA_DEVICE_CUH
#define KERNELS_CUDA_DEVICE_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/kn.h"

struct kn_cuda {
    int ordinal = 0;
    cudaDeviceProp prop{};
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void *scratch = nullptr; // (scratch_bytes) device
    size_t scratch_bytes = 0;
    cudaEvent_t ev0 = nullptr, ev1 = nullptr; // kn_cuda_timer_*
};

// Translate and log; 0 on success, ERR_NODEVICE / ERR_NOMEM / ERR_INTERNAL otherwise.
int kn_cuda_check(cudaError_t e, const char *what);
int kn_cublas_check(cublasStatus_t s, const char *what);

// Take bytes (256-aligned) from the scratch arena at *offset. ERR_TOOBIG when full.
int kn_cuda_scratch_carve(struct kn_cuda *c, size_t *offset, size_t bytes, float **out);

// Grid size for n items at `per` items per block, capped for grid-stride loops.
static inline unsigned kn_cuda_blocks(size_t n, unsigned per)
{
    size_t b = (n + per - 1) / per;
    if (b > 65535u * 16u)
        b = 65535u * 16u;
    return b ? (unsigned)b : 1u;
}

// Store a float as f32 or bf16 (round to nearest even).
static __device__ __forceinline__ void kn_store(void *out, int bf16, size_t i, float v)
{
    if (bf16)
        ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(v);
    else
        ((float *)out)[i] = v;
}

#endif
