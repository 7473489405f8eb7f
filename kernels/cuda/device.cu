// device.cu - CUDA device context: stream, cuBLAS handle, scratch arena,
// and the memory helpers (the context section of kernels/kn.h's CUDA part).
// Not an op: no CPU reference.
//
// One struct kn_cuda per device. The scratch arena is one cudaMalloc at
// creation, carved per call by the host-copy entry points; nothing is
// allocated per op (kn_cuda_alloc is for load time). cuBLAS runs in its
// default math mode (bf16 tensor cores); the fp32 SGEMM switches to
// pedantic mode around its own call (matmul.cu). CUDA/cuBLAS errors are logged with their names and
// returned as ERR_* values (common/err.h).
#include <cstdio>
#include <new>

#include "device.cuh"

extern "C" {
#include "common/err.h"
#include "common/log.h"
}

int kn_cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    log_error("cuda: %s: %s", what, cudaGetErrorString(e));
    if (e == cudaErrorMemoryAllocation)
        return ERR_NOMEM;
    return (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? ERR_NODEVICE
                                                                          : ERR_INTERNAL;
}

int kn_cublas_check(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    log_error("cublas: %s: status %d", what, (int)s);
    return ERR_INTERNAL;
}

extern "C" int kn_cuda_new(int ordinal, size_t scratch_bytes, struct kn_cuda **out)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        log_error("cuda: no usable GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return ERR_NODEVICE;
    }
    if (ordinal < 0 || ordinal >= n)
        return ERR_NODEVICE;
    kn_cuda *c = new (std::nothrow) kn_cuda();
    if (!c)
        return ERR_NOMEM;
    int rc = kn_cuda_check(cudaSetDevice(ordinal), "cudaSetDevice");
    if (!rc)
        rc = kn_cuda_check(cudaGetDeviceProperties(&c->prop, ordinal), "cudaGetDeviceProperties");
    if (!rc)
        rc = kn_cuda_check(cudaStreamCreate(&c->stream), "cudaStreamCreate");
    if (!rc)
        rc = kn_cublas_check(cublasCreate(&c->blas), "cublasCreate");
    if (!rc)
        rc = kn_cublas_check(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    if (!rc)
        rc = kn_cublas_check(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (!rc)
        rc = kn_cuda_check(cudaEventCreate(&c->ev0), "cudaEventCreate");
    if (!rc)
        rc = kn_cuda_check(cudaEventCreate(&c->ev1), "cudaEventCreate");
    if (!rc)
        rc = kn_cuda_check(cudaMalloc(&c->scratch, scratch_bytes), "cudaMalloc(scratch)");
    if (rc) {
        kn_cuda_free(c);
        return rc;
    }
    c->ordinal = ordinal;
    c->scratch_bytes = scratch_bytes;
    *out = c;
    return 0;
}

extern "C" void kn_cuda_free(struct kn_cuda *c)
{
    if (!c)
        return;
    if (c->scratch)
        cudaFree(c->scratch);
    if (c->ev0)
        cudaEventDestroy(c->ev0);
    if (c->ev1)
        cudaEventDestroy(c->ev1);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    delete c;
}

extern "C" const char *kn_cuda_describe(const struct kn_cuda *c, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s (sm_%d%d, %.1f GiB)", c->prop.name, c->prop.major, c->prop.minor,
             (double)c->prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return out;
}

int kn_cuda_scratch_carve(struct kn_cuda *c, size_t *offset, size_t bytes, float **out)
{
    size_t aligned = (bytes + 255) & ~(size_t)255;
    if (*offset > c->scratch_bytes || c->scratch_bytes - *offset < aligned)
        return ERR_TOOBIG;
    *out = (float *)((char *)c->scratch + *offset);
    *offset += aligned;
    return 0;
}

extern "C" int kn_cuda_sm_count(const struct kn_cuda *c)
{
    return c->prop.multiProcessorCount;
}

extern "C" int kn_cuda_alloc(struct kn_cuda *c, size_t bytes, void **out)
{
    (void)c;
    if (bytes == 0)
        return ERR_INVAL;
    void *p = nullptr;
    int rc = kn_cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    if (rc)
        return rc;
    *out = p;
    return 0;
}

extern "C" void kn_cuda_release(struct kn_cuda *c, void *p)
{
    (void)c;
    if (p)
        cudaFree(p);
}

extern "C" int kn_cuda_mem_info(struct kn_cuda *c, size_t *free_bytes, size_t *total_bytes)
{
    (void)c;
    return kn_cuda_check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

extern "C" int kn_cuda_upload(struct kn_cuda *c, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    int rc = kn_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
                           "upload");
    // pageable source: make sure it may be reused when we return
    return rc ? rc : kn_cuda_check(cudaStreamSynchronize(c->stream), "upload sync");
}

extern "C" int kn_cuda_download(struct kn_cuda *c, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return kn_cuda_sync(c);
    int rc = kn_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                           "download");
    return rc ? rc : kn_cuda_check(cudaStreamSynchronize(c->stream), "download sync");
}

extern "C" int kn_cuda_copy(struct kn_cuda *c, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    return kn_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                         "copy");
}

extern "C" int kn_cuda_memset(struct kn_cuda *c, void *dst, int byte, size_t bytes)
{
    if (bytes == 0)
        return 0;
    return kn_cuda_check(cudaMemsetAsync(dst, byte, bytes, c->stream), "memset");
}

extern "C" int kn_cuda_sync(struct kn_cuda *c)
{
    return kn_cuda_check(cudaStreamSynchronize(c->stream), "sync");
}

extern "C" int kn_cuda_timer_start(struct kn_cuda *c)
{
    return kn_cuda_check(cudaEventRecord(c->ev0, c->stream), "cudaEventRecord");
}

extern "C" int kn_cuda_timer_stop(struct kn_cuda *c, double *ms)
{
    int rc = kn_cuda_check(cudaEventRecord(c->ev1, c->stream), "cudaEventRecord");
    if (!rc)
        rc = kn_cuda_check(cudaEventSynchronize(c->ev1), "cudaEventSynchronize");
    float f = 0;
    if (!rc)
        rc = kn_cuda_check(cudaEventElapsedTime(&f, c->ev0, c->ev1), "cudaEventElapsedTime");
    if (!rc)
        *ms = f;
    return rc;
}
