// device.cuh - internals of the CUDA backend shared by its .cu files.
#ifndef KERNELS_CUDA_DEVICE_CUH
#define KERNELS_CUDA_DEVICE_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kn_cuda.h"

struct kn_cuda {
    int ordinal = 0;
    cudaDeviceProp prop{};
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void *scratch = nullptr; // (scratch_bytes) device
    size_t scratch_bytes = 0;
};

// Translate and log; 0 on success, ERR_NODEVICE / ERR_INTERNAL otherwise.
int kn_cuda_check(cudaError_t e, const char *what);
int kn_cublas_check(cublasStatus_t s, const char *what);

// Take bytes (256-aligned) from the scratch arena at *offset. ERR_TOOBIG when full.
int kn_cuda_scratch_carve(struct kn_cuda *c, size_t *offset, size_t bytes, float **out);

// Launchers on device pointers, enqueued on c's stream (see each .cu file).
int kn_cuda_rmsnorm_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps);
int kn_cuda_matmul_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n, int k,
                       int m);

#endif
