/* bench_matq - GFLOP/s of kn_matmul_w on SmolLM2-135M-like shapes, next to
 * a straightforward dequantize-then-float-dot loop measured in the same run
 * with the same threads (ratio = ours / naive), plus the cost of an empty
 * kn_pool_run.
 *
 * usage: bench_matq [seconds per measurement] [TYPE,...]
 *   (default 0.3 s; TYPE names as ggml_type_name prints them, e.g. q5_0:
 *   only those types, and no model sweep)
 *
 * Shapes: k=576 -> m=1536 (q/k/v/gate/up-like) and k=1536 -> m=576
 * (down-like); n=1 (decode) and n=64 (prefill); 1 and 2 threads (1 thread
 * and the peak loops: timed by the thread's CPU time, 2 threads: by the
 * wall clock; best of many calls either way). Weights
 * are random blocks with sane scales (the timing does not depend on the
 * values). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/kn.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static uint8_t *make_weights(int type, int k, int m, size_t *rb_out)
{
    int64_t rb;
    ggml_type_row_bytes((uint32_t)type, k, &rb);
    size_t total = (size_t)rb * (size_t)m, bb = ggml_type_block_bytes((uint32_t)type);
    uint8_t *w = malloc(total);
    for (size_t i = 0; i < total; i++)
        w[i] = (uint8_t)rnd();
    /* every fp16 field a block may have at 0, 2 or 208: make them finite */
    for (size_t b = 0; b < total / bb; b++) {
        uint16_t h = kn_fp32_to_fp16(0.01f);
        memcpy(w + b * bb, &h, 2);
        if (bb >= 20)
            memcpy(w + b * bb + 2, &h, 2);
        if (type == GGML_TYPE_Q6_K)
            memcpy(w + b * bb + 208, &h, 2);
    }
    *rb_out = (size_t)rb;
    return w;
}

/* ---- the naive peer: dequantize a weight row, float dot with each x row ---- */

struct naive_job {
    float *out;
    const float *x;
    const uint8_t *w;
    size_t rb;
    int n, k, m, type;
    float *tmp; /* one k-row per thread */
};

static void naive_worker(void *ctx, int ith, int nth)
{
    struct naive_job *j = ctx;
    float *row = j->tmp + (size_t)ith * (size_t)j->k;
    for (int c = ith; c < j->m; c += nth) {
        kn_dequant_row((uint32_t)j->type, j->w + (size_t)c * j->rb, row, j->k);
        for (int r = 0; r < j->n; r++) {
            const float *xr = j->x + (size_t)r * (size_t)j->k;
            float s = 0;
            for (int i = 0; i < j->k; i++)
                s += xr[i] * row[i];
            j->out[(size_t)r * (size_t)j->m + (size_t)c] = s;
        }
    }
}

/* ---- timing ---- */

/* The clock of the best-of timings: the calling thread's CPU time while
 * only it runs the kernels (1-thread rows, the peak loops), so that time
 * slices lost to other jobs on a shared machine do not count; else the
 * monotonic clock. */
static int g_cpu_clock;

static uint64_t bench_ns(void)
{
    if (!g_cpu_clock)
        return clock_mono_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct call {
    struct kn_pool *pool;
    float *out;
    const float *x;
    const uint8_t *w;
    int n, k, m, type;
    void *scratch;
    size_t sb;
    struct naive_job *naive; /* non-NULL: run the naive peer */
};

static void one(struct call *c)
{
    if (c->naive)
        kn_pool_run(c->pool, naive_worker, c->naive);
    else if (kn_matmul_w(c->pool, c->out, c->x, c->n, c->k, c->w, c->type, c->m, c->scratch, c->sb))
        abort();
}

/* best time per call (seconds) over repeated batches for about `secs` */
static double time_call(struct call *c, double secs)
{
    one(c); /* warm up */
    uint64_t start = bench_ns();
    double best = 1e30;
    int reps = 1;
    while ((double)(bench_ns() - start) / 1e9 < secs) {
        uint64_t t0 = bench_ns();
        for (int i = 0; i < reps; i++)
            one(c);
        double t = (double)(bench_ns() - t0) / 1e9 / reps;
        if (t < best)
            best = t;
        if (t * reps < 0.01)
            reps *= 2;
    }
    return best;
}

/* Every weight matrix of SmolLM2-135M (30 layers of q, k, v, o 576->576/192,
 * gate, up 576->1536, down 1536->576, all Q4_1; the tied Q8_0 LM head
 * 576->49152), 97 MB: one sweep is the matmul work of one decode step
 * (n = 1) or of a 64-token prefill chunk, with weights streaming from DRAM
 * as in the real engine. Returns seconds per sweep (best of a few). */
static double model_sweep(struct kn_pool *pool, int n, double secs)
{
    enum { L = 30, D = 576, KV = 192, F = 1536, V = 49152 };
    const int shape[7][2] = {{D, D}, {D, KV}, {D, KV}, {D, D}, {D, F}, {D, F}, {F, D}};
    uint8_t *w[L * 7 + 1];
    size_t rb;
    for (int i = 0; i < L * 7; i++)
        w[i] = make_weights(GGML_TYPE_Q4_1, shape[i % 7][0], shape[i % 7][1], &rb);
    w[L * 7] = make_weights(GGML_TYPE_Q8_0, D, V, &rb);
    float *x = malloc((size_t)n * F * sizeof *x), *out = malloc((size_t)n * V * sizeof *out);
    for (int i = 0; i < n * F; i++)
        x[i] = (float)((double)rnd() / 2147483648.0 - 1.0);
    size_t sb = kn_matmul_w_scratch(n, F, GGML_TYPE_Q8_0);
    void *scratch = malloc(sb);
    double best = 1e30;
    uint64_t start = clock_mono_ns();
    do {
        uint64_t t0 = clock_mono_ns();
        for (int i = 0; i <= L * 7; i++) {
            int k = i < L * 7 ? shape[i % 7][0] : D, m = i < L * 7 ? shape[i % 7][1] : V;
            if (kn_matmul_w(pool, out, x, n, k, w[i], i < L * 7 ? GGML_TYPE_Q4_1 : GGML_TYPE_Q8_0, m,
                            scratch, sb))
                abort();
        }
        double t = (double)(clock_mono_ns() - t0) / 1e9;
        best = t < best ? t : best;
    } while ((double)(clock_mono_ns() - start) / 1e9 < secs * 3);
    for (int i = 0; i <= L * 7; i++)
        free(w[i]);
    free(scratch);
    free(out);
    free(x);
    return best;
}

static void noop(void *ctx, int ith, int nth)
{
    (void)ctx;
    (void)ith;
    (void)nth;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The cost of an empty kn_pool_run: back to back, and with ~5 us of work on
 * the caller's thread between runs (as between the ops of a forward pass).
 * Mean, and median / 90th percentile of single calls (on a shared machine
 * the mean moves with the other jobs, the median much less). */
static void pool_latency(struct kn_pool *pool, int nth)
{
    enum { RUNS = 20000 };
    static uint64_t t[RUNS];
    for (int gap = 0; gap < 2; gap++) {
        uint64_t t0 = clock_mono_ns();
        for (int i = 0; i < RUNS; i++) {
            if (gap) { /* ~5 us of caller work, outside the timed call */
                uint64_t g = clock_mono_ns();
                while (clock_mono_ns() - g < 5000)
                    ;
            }
            uint64_t a = clock_mono_ns();
            kn_pool_run(pool, noop, NULL);
            t[i] = clock_mono_ns() - a;
        }
        double total = (double)(clock_mono_ns() - t0) / 1e3 / RUNS;
        double mean = 0;
        for (int i = 0; i < RUNS; i++)
            mean += (double)t[i];
        qsort(t, RUNS, sizeof t[0], cmp_u64);
        printf("empty kn_pool_run, %d threads%s: %.2f us mean (%.2f per loop), median %.2f us, p90 %.2f us\n",
               nth, gap ? ", 5 us apart" : ", back to back", mean / RUNS / 1e3, total,
               (double)t[RUNS / 2] / 1e3, (double)t[RUNS * 9 / 10] / 1e3);
    }
}

/* ---- the core's int8 peak, measured in the same run --------------------------------
 *
 * Ten independent accumulator chains (unrolled, in registers) of the instruction each kernel's inner
 * loop is built on, so that only throughput limits them: AVX-512 VNNI
 * vpdpbusd on 512 bits (64 u8 x s8 products per instruction), AVX-VNNI
 * vpdpbusd on 256 bits (32, where the CPU has it) and the AVX2
 * idiom vpmaddubsw + vpmaddwd + vpaddd (32 products per three
 * instructions). Reported as GOP/s with a multiply-add = 2 ops, the unit of
 * the GFLOP/s above (2 n m k per product), so ours / peak is the fraction
 * of the core's int8 peak a kernel reaches. One thread; best of many short
 * bursts, like the kernels' best-of timing, so that other jobs on a shared
 * machine bias both the same way. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PEAK_CHAINS 10
#define PEAK_ITERS 2000 /* per timed burst (~20-50 us); the best burst counts, as time_call */
static volatile int peak_sink;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_vnni512(double secs)
{
    __m512i acc[PEAK_CHAINS];
    for (int j = 0; j < PEAK_CHAINS; j++)
        acc[j] = _mm512_set1_epi32(j);
    __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8((char)(peak_sink | 2));
    uint64_t start = bench_ns();
    double t = 1e30;
    while ((double)(bench_ns() - start) / 1e9 < secs) {
        uint64_t t0 = bench_ns();
        for (int i = 0; i < PEAK_ITERS; i++) {
            _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
        }
        double ti = (double)(bench_ns() - t0) / 1e9;
        t = ti < t ? ti : t;
    }
    int sum = 0;
    for (int j = 0; j < PEAK_CHAINS; j++)
        sum += _mm512_reduce_add_epi32(acc[j]);
    peak_sink = sum;
    return (double)PEAK_ITERS * PEAK_CHAINS * 64 * 2 / t / 1e9;
}

__attribute__((target("avx2,avxvnni"))) static double peak_vnni256(double secs)
{
    __m256i acc[PEAK_CHAINS];
    for (int j = 0; j < PEAK_CHAINS; j++)
        acc[j] = _mm256_set1_epi32(j);
    __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8((char)(peak_sink | 2));
    uint64_t start = bench_ns();
    double t = 1e30;
    while ((double)(bench_ns() - start) / 1e9 < secs) {
        uint64_t t0 = bench_ns();
        for (int i = 0; i < PEAK_ITERS; i++) {
            _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++)
                acc[j] = _mm256_dpbusd_avx_epi32(acc[j], a, b);
        }
        double ti = (double)(bench_ns() - t0) / 1e9;
        t = ti < t ? ti : t;
    }
    int sum = 0;
    for (int j = 0; j < PEAK_CHAINS; j++)
        sum += _mm256_extract_epi32(acc[j], 0);
    peak_sink = sum;
    return (double)PEAK_ITERS * PEAK_CHAINS * 32 * 2 / t / 1e9;
}

__attribute__((target("avx2"))) static double peak_avx2(double secs)
{
    __m256i acc[PEAK_CHAINS];
    for (int j = 0; j < PEAK_CHAINS; j++)
        acc[j] = _mm256_set1_epi32(j);
    __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8((char)(peak_sink | 2)), one = _mm256_set1_epi16(1);
    uint64_t start = bench_ns();
    double t = 1e30;
    while ((double)(bench_ns() - start) / 1e9 < secs) {
        uint64_t t0 = bench_ns();
        for (int i = 0; i < PEAK_ITERS; i++) {
            _Pragma("GCC unroll 16") for (int j = 0; j < PEAK_CHAINS; j++) {
                __asm__("" : "+x"(a)); /* the product is not loop-invariant */
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
            }
        }
        double ti = (double)(bench_ns() - t0) / 1e9;
        t = ti < t ? ti : t;
    }
    int sum = 0;
    for (int j = 0; j < PEAK_CHAINS; j++)
        sum += _mm256_extract_epi32(acc[j], 0);
    peak_sink = sum;
    return (double)PEAK_ITERS * PEAK_CHAINS * 32 * 2 / t / 1e9;
}

static void print_peaks(double secs)
{
    printf("int8 peak, 1 thread: avx2 maddubs+madd %.1f GOP/s", peak_avx2(secs));
    if (__builtin_cpu_supports("avxvnni"))
        printf(", avx-vnni 256-bit vpdpbusd %.1f GOP/s", peak_vnni256(secs));
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
        printf(", avx512 vpdpbusd %.1f GOP/s", peak_vnni512(secs));
    printf(" (multiply-add = 2 ops)\n");
}
#else
static void print_peaks(double secs)
{
    (void)secs;
    printf("int8 peak: not measured on this architecture\n");
}
#endif

/* name in the comma-separated list (case-insensitive)? */
static int type_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && strncasecmp(p, name, n) == 0)
            return 1;
        p += l + (e != NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? strtod(argv[1], NULL) : 0.3;
    if (!(secs > 0))
        secs = 0.3;
    printf("simd path: %s\n", kn_simd_name(kn_simd_level()));
    g_cpu_clock = 1;
    print_peaks(secs);
    const char *only = argc > 2 ? argv[2] : NULL;
    const int types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    /* SmolLM2-135M's 576 / 1536, Qwen2.5-0.5B's 896 / 4864, SmolLM2's
     * output matrix (49152 rows: 17-28 MB, streamed from memory at n = 1) */
    const int shapes[][2] = {{576, 1536}, {1536, 576}, {896, 4864}, {4864, 896}, {576, 49152}};
    const int ns[] = {1, 64};
    const int threads[] = {1, 2};
    printf("%-5s %5s %5s %3s %3s  %9s %9s  %7s\n", "type", "k", "m", "n", "thr", "ours", "naive",
           "ratio");
    for (int ti = 0; ti < 2; ti++) {
        struct kn_pool *pool;
        if (kn_pool_new(threads[ti], &pool))
            return 1;
        g_cpu_clock = threads[ti] == 1;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int s = 0; s < 5; s++)
                for (int ni = 0; ni < 2; ni++) {
                    int k = shapes[s][0], m = shapes[s][1], n = ns[ni], type = types[t];
                    if (only && !type_listed(only, ggml_type_name((uint32_t)type)))
                        continue;
                    if (k % (int)ggml_type_block_elems((uint32_t)type) != 0)
                        continue; /* 576 is not a multiple of the K-quants' 256 */
                    size_t rb;
                    uint8_t *w = make_weights(type, k, m, &rb);
                    float *x = malloc((size_t)n * (size_t)k * sizeof *x);
                    for (size_t i = 0; i < (size_t)n * (size_t)k; i++)
                        x[i] = (float)((double)rnd() / 2147483648.0 - 1.0);
                    float *out = malloc((size_t)n * (size_t)m * sizeof *out);
                    size_t sb = kn_matmul_w_scratch(n, k, type);
                    void *scratch = malloc(sb ? sb : 1);
                    float *tmp = malloc((size_t)threads[ti] * (size_t)k * sizeof *tmp);
                    struct naive_job nj = {out, x, w, rb, n, k, m, type, tmp};
                    struct call c = {pool, out, x, w, n, k, m, type, scratch, sb, NULL};
                    double ours = time_call(&c, secs);
                    c.naive = &nj;
                    double naive = time_call(&c, secs);
                    double flop = 2.0 * n * m * k;
                    printf("%-5s %5d %5d %3d %3d  %6.2f GF %6.2f GF  %6.2fx\n",
                           ggml_type_name((uint32_t)type), k, m, n, threads[ti], flop / ours / 1e9,
                           flop / naive / 1e9, naive / ours);
                    free(tmp);
                    free(scratch);
                    free(out);
                    free(x);
                    free(w);
                }
        pool_latency(pool, threads[ti]);
        for (int ni = 0; ni < 2 && !only; ni++) {
            double t = model_sweep(pool, ns[ni], secs);
            printf("SmolLM2-135M all matmuls, n=%d, %d threads: %.2f ms/sweep = %.0f tok/s ceiling\n",
                   ns[ni], threads[ti], t * 1e3, ns[ni] / t);
        }
        kn_pool_free(pool);
    }
    return 0;
}
