/* devcheck.c - device self-check of the kernel ops (see devcheck.h). */
#include "worker/devcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/err.h"

/* xorshift64*: reproducible inputs in [-1, 1). */
static float devcheck_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1u << 23) - 1.0f;
}

/* Relative L2 error of a against b. */
static double devcheck_rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void devcheck_ref_rmsnorm(float *out, const float *x, const float *w, int rows, int dim,
                                 float eps)
{
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += (double)x[r * dim + i] * x[r * dim + i];
        double scale = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            out[r * dim + i] = (float)(x[r * dim + i] * scale * w[i]);
    }
}

static void devcheck_ref_matmul(float *out, const float *x, const float *w, int n, int k, int m)
{
    for (int r = 0; r < n; r++)
        for (int c = 0; c < m; c++) {
            double s = 0;
            for (int i = 0; i < k; i++)
                s += (double)x[r * k + i] * w[c * k + i];
            out[r * m + c] = (float)s;
        }
}

static int devcheck_report(FILE *out, const char *op, const char *dev, double err, double tol,
                           double ms)
{
    int ok = err <= tol;
    fprintf(out, "%-8s %-5s rel_l2=%.3e tol=%.0e %8.3f ms  %s\n", op, dev, err, tol, ms,
            ok ? "ok" : "MISMATCH");
    return ok ? 0 : ERR_CORRUPT;
}

int devcheck_run(enum kn_device dev, FILE *out)
{
    enum { ROWS = 64, DIM = 1024, N = 32, K = 512, M = 768 };
    const float eps = 1e-5f;
    int rc = 0;
    float *x = malloc(sizeof(float) * ROWS * DIM), *w = malloc(sizeof(float) * DIM);
    float *got = malloc(sizeof(float) * ROWS * DIM), *want = malloc(sizeof(float) * ROWS * DIM);
    float *a = malloc(sizeof(float) * N * K), *b = malloc(sizeof(float) * M * K);
    float *mg = malloc(sizeof(float) * N * M), *mw = malloc(sizeof(float) * N * M);
#ifdef KN_HAVE_CUDA
    struct kn_cuda *cu = NULL;
#endif
    if (!x || !w || !got || !want || !a || !b || !mg || !mw) {
        rc = ERR_NOMEM;
        goto out;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < ROWS * DIM; i++)
        x[i] = devcheck_rand(&seed) * 4.0f;
    for (int i = 0; i < DIM; i++)
        w[i] = devcheck_rand(&seed) + 1.0f;
    for (int i = 0; i < N * K; i++)
        a[i] = devcheck_rand(&seed);
    for (int i = 0; i < M * K; i++)
        b[i] = devcheck_rand(&seed);

    if (dev == KN_DEVICE_CPU) {
        devcheck_ref_rmsnorm(want, x, w, ROWS, DIM, eps);
        uint64_t t0 = clock_mono_ns();
        kn_rmsnorm_f32(got, x, w, ROWS, DIM, eps);
        double ms = (double)(clock_mono_ns() - t0) / 1e6;
        rc |= devcheck_report(out, "rmsnorm", "cpu", devcheck_rel_l2(got, want, ROWS * DIM), 1e-6, ms);
        devcheck_ref_matmul(mw, a, b, N, K, M);
        t0 = clock_mono_ns();
        kn_matmul_f32(mg, a, b, N, K, M);
        ms = (double)(clock_mono_ns() - t0) / 1e6;
        rc |= devcheck_report(out, "matmul", "cpu", devcheck_rel_l2(mg, mw, N * M), 1e-5, ms);
        rc = rc ? ERR_CORRUPT : 0;
        goto out;
    }
#ifdef KN_HAVE_CUDA
    rc = kn_cuda_new(0, 64u << 20, &cu);
    if (rc)
        goto out;
    char desc[160];
    fprintf(out, "device: %s\n", kn_cuda_describe(cu, desc, sizeof desc));
    kn_rmsnorm_f32(want, x, w, ROWS, DIM, eps);
    kn_cuda_rmsnorm_f32_host(cu, got, x, w, ROWS, DIM, eps); /* warm-up */
    uint64_t t0 = clock_mono_ns();
    int crc = kn_cuda_rmsnorm_f32_host(cu, got, x, w, ROWS, DIM, eps);
    double ms = (double)(clock_mono_ns() - t0) / 1e6;
    if (crc) {
        rc = crc;
        goto out;
    }
    int bad = devcheck_report(out, "rmsnorm", "cuda", devcheck_rel_l2(got, want, ROWS * DIM), 1e-5, ms);
    kn_matmul_f32(mw, a, b, N, K, M);
    kn_cuda_matmul_f32_host(cu, mg, a, b, N, K, M);
    t0 = clock_mono_ns();
    crc = kn_cuda_matmul_f32_host(cu, mg, a, b, N, K, M);
    ms = (double)(clock_mono_ns() - t0) / 1e6;
    if (crc) {
        rc = crc;
        goto out;
    }
    bad |= devcheck_report(out, "matmul", "cuda", devcheck_rel_l2(mg, mw, N * M), 1e-4, ms);
    rc = bad ? ERR_CORRUPT : 0;
#else
    rc = ERR_UNSUPPORTED;
#endif
out:
#ifdef KN_HAVE_CUDA
    kn_cuda_free(cu);
#endif
    free(x), free(w), free(got), free(want), free(a), free(b), free(mg), free(mw);
    return rc;
}
