/*
 * simd.c - the CPU backend's SIMD level: which instruction-set path the ops
 * that have several (kn_matmul_w in matq.c, kn_attn_paged_f32 in
 * attention.c) take. Contracts in kernels/kn.h.
 *
 * Design: one process-wide level, detected once (pthread_once) from CPUID,
 * overridable by the KN_SIMD environment variable at first use and by
 * kn_simd_set (start-up, tests, benchmarks). Every level gives the scalar
 * path's bits, so the level changes speed only. Finer per-op choices that
 * do not change results either (AVX-VNNI twins in matq.c) stay in the op.
 *
 * Threads: kn_simd_level from any thread (an atomic load after the once);
 * kn_simd_set is meant for start-up and tests.
 */
#include "kernels/kn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SIMD_X86 1
#include <cpuid.h>
#else
#define SIMD_X86 0
#endif

#if SIMD_X86
static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

static int cpu_has_avx2(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c & bit_F16C) != 0;
}
#endif /* SIMD_X86 */

static atomic_int simd_level = -1;
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

int kn_simd_best(void)
{
#if SIMD_X86
    if (cpu_has_avx2())
        return cpu_has_avx512() ? KN_SIMD_AVX512 : KN_SIMD_AVX2;
#endif
    return KN_SIMD_SCALAR;
}

static void simd_init(void)
{
    int best = kn_simd_best(), lv = best;
    const char *e = getenv("KN_SIMD");
    if (e && strcmp(e, "scalar") == 0)
        lv = KN_SIMD_SCALAR;
    else if (e && strcmp(e, "avx2") == 0 && best >= KN_SIMD_AVX2)
        lv = KN_SIMD_AVX2;
    else if (e && strcmp(e, "avx512") == 0 && best >= KN_SIMD_AVX512)
        lv = KN_SIMD_AVX512;
    int unset = -1;
    atomic_compare_exchange_strong(&simd_level, &unset, lv);
}

int kn_simd_level(void)
{
    pthread_once(&simd_once, simd_init);
    return atomic_load(&simd_level);
}

int kn_simd_set(int level)
{
    if (level < KN_SIMD_SCALAR || level > kn_simd_best())
        return ERR_UNSUPPORTED;
    pthread_once(&simd_once, simd_init);
    atomic_store(&simd_level, level);
    return 0;
}

const char *kn_simd_name(int level)
{
    switch (level) {
    case KN_SIMD_SCALAR: return "scalar";
    case KN_SIMD_AVX2: return "avx2";
    case KN_SIMD_AVX512: return "avx512";
    default: return "?";
    }
}
