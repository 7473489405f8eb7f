/* cu_test.h - helpers of the GPU test files (the .c files of tests/cuda): open the GPU
 * or skip, random fills, device buffers that start poisoned (every byte
 * 0xFF: NaN in f32 and bf16, so an element a kernel forgot to write fails
 * any comparison), and comparisons in which NaN never passes. */
#ifndef TESTS_CUDA_CU_TEST_H
#define TESTS_CUDA_CU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"

static inline struct kn_cuda *cu_open(void)
{
    struct kn_cuda *c = NULL;
    int rc = kn_cuda_new(0, 256u << 20, &c);
    if (rc == ERR_NODEVICE)
        SKIP("no GPU (no CUDA device or driver on this machine)");
    CHECK_EQ_INT(rc, 0);
    return c;
}

static inline float cu_rand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static inline void cu_fill(float *p, size_t n, uint32_t seed, float scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = cu_rand(&seed) * scale;
}

/* Round in place to the nearest bf16 (what the device stores). */
static inline void cu_round_bf16(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = kn_bf16_to_fp32(kn_fp32_to_bf16(p[i]));
}

static inline void cu_to_bf16(uint16_t *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kn_fp32_to_bf16(in[i]);
}

static inline void cu_from_bf16(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kn_bf16_to_fp32(in[i]);
}

/* Device buffer of bytes, poisoned (0xFF). */
static inline void *cu_alloc(struct kn_cuda *c, size_t bytes)
{
    void *p = NULL;
    CHECK_EQ_INT(kn_cuda_alloc(c, bytes, &p), 0);
    CHECK_EQ_INT(kn_cuda_memset(c, p, 0xFF, bytes), 0);
    return p;
}

/* Device copy of host data. */
static inline void *cu_put(struct kn_cuda *c, const void *src, size_t bytes)
{
    void *p = cu_alloc(c, bytes);
    CHECK_EQ_INT(kn_cuda_upload(c, p, src, bytes), 0);
    return p;
}

static inline void cu_get(struct kn_cuda *c, void *dst, const void *src, size_t bytes)
{
    CHECK_EQ_INT(kn_cuda_download(c, dst, src, bytes), 0);
}

/* max_i |a - b| / (|b| + floor); NaN or inf anywhere gives +inf. */
static inline double cu_max_rel(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        double e = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + floor);
        if (e > worst)
            worst = e;
    }
    return worst;
}

#endif
