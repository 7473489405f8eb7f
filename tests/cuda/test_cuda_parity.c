/* GPU parity tests: every CUDA op against its CPU reference (kernels/kn.h),
 * with the tolerance its .cu header documents. Built only with make CUDA=1;
 * each test skips when no GPU is present. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/err.h"
#include "kernels/cuda/kn_cuda.h"
#include "kernels/kn.h"
#include "tests/th.h"

static struct kn_cuda *open_gpu(void)
{
    struct kn_cuda *c = NULL;
    int rc = kn_cuda_new(0, 256u << 20, &c);
    if (rc == ERR_NODEVICE)
        SKIP("no GPU");
    CHECK_EQ_INT(rc, 0);
    return c;
}

static void fill(float *p, size_t n, uint32_t seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
    }
}

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

TEST(cuda_rmsnorm_matches_cpu)
{
    struct kn_cuda *c = open_gpu();
    static const int shapes[][2] = {{1, 64}, {7, 576}, {33, 4096}, {128, 8192}, {3, 100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], dim = shapes[s][1];
        size_t n = (size_t)rows * dim;
        float *x = malloc(n * 4), *w = malloc((size_t)dim * 4), *got = malloc(n * 4),
              *want = malloc(n * 4);
        fill(x, n, 1 + (uint32_t)s, 3.0f);
        fill(w, (size_t)dim, 99, 1.0f);
        kn_rmsnorm_f32(want, x, w, rows, dim, 1e-5f);
        CHECK_EQ_INT(kn_cuda_rmsnorm_f32_host(c, got, x, w, rows, dim, 1e-5f), 0);
        for (size_t i = 0; i < n; i++)
            CHECK_NEAR(got[i], want[i], 1e-5 * (fabs(want[i]) + 1e-3));
        free(x), free(w), free(got), free(want);
    }
    kn_cuda_free(c);
}

TEST(cuda_matmul_matches_cpu)
{
    struct kn_cuda *c = open_gpu();
    static const int shapes[][3] = {{1, 576, 1536}, {16, 512, 768}, {5, 33, 7}, {64, 2048, 256}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1], m = shapes[s][2];
        float *x = malloc((size_t)n * k * 4), *w = malloc((size_t)m * k * 4);
        float *got = malloc((size_t)n * m * 4), *want = malloc((size_t)n * m * 4);
        fill(x, (size_t)n * k, 7 + (uint32_t)s, 1.0f);
        fill(w, (size_t)m * k, 70 + (uint32_t)s, 0.1f);
        kn_matmul_f32(want, x, w, n, k, m);
        CHECK_EQ_INT(kn_cuda_matmul_f32_host(c, got, x, w, n, k, m), 0);
        CHECK(rel_l2(got, want, (size_t)n * m) < 1e-4);
        free(x), free(w), free(got), free(want);
    }
    kn_cuda_free(c);
}

TEST(cuda_scratch_overflow_is_an_error)
{
    struct kn_cuda *c = open_gpu();
    /* 256 MiB scratch cannot hold three 128 MiB tensors */
    int rows = 1024, dim = 32768;
    float *x = calloc((size_t)rows * dim, 4), *w = calloc((size_t)dim, 4), *o = malloc((size_t)rows * dim * 4);
    CHECK_EQ_INT(kn_cuda_rmsnorm_f32_host(c, o, x, w, rows, dim, 1e-5f), ERR_TOOBIG);
    free(x), free(w), free(o);
    kn_cuda_free(c);
}
