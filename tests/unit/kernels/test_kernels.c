/* Unit tests: CPU reference ops against hand-computed values and the
 * double-precision self-check; the kernels' exp (vexp.h) against libm and
 * SwiGLU across SIMD levels. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/vexp.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "worker/devcheck.h"

TEST(kn_rmsnorm_known_values)
{
    /* row [3, 4]: mean square 12.5, scale 1/sqrt(12.5) */
    float x[4] = {3, 4, -1, 1}, w[2] = {1, 2}, out[4];
    kn_rmsnorm_f32(out, x, w, 2, 2, 0.0f);
    CHECK_NEAR(out[0], 3 / sqrt(12.5), 1e-6);
    CHECK_NEAR(out[1], 8 / sqrt(12.5), 1e-6);
    CHECK_NEAR(out[2], -1.0, 1e-6);
    CHECK_NEAR(out[3], 2.0, 1e-6);
    /* in place, eps matters for a zero row */
    float z[2] = {0, 0};
    kn_rmsnorm_f32(z, z, w, 1, 2, 1e-5f);
    CHECK(z[0] == 0 && z[1] == 0);
}

TEST(kn_matmul_known_values)
{
    /* x (2,3) @ w (2,3)^T */
    float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, out[4];
    kn_matmul_f32(out, x, w, 2, 3, 2);
    CHECK_NEAR(out[0], -2, 1e-6);
    CHECK_NEAR(out[1], 3, 1e-6);
    CHECK_NEAR(out[2], -2, 1e-6);
    CHECK_NEAR(out[3], 7.5, 1e-6);
}

TEST(kn_device_names)
{
    enum kn_device d;
    CHECK_EQ_INT(kn_device_parse("cuda", &d), 0);
    CHECK_EQ_INT(d, KN_DEVICE_CUDA);
    CHECK_EQ_STR(kn_device_name(d), "cuda");
    CHECK_EQ_INT(kn_device_parse("tpu", &d), ERR_INVAL);
}

TEST(devcheck_cpu_within_tolerance)
{
    FILE *devnull = fopen("/dev/null", "w");
    CHECK_EQ_INT(devcheck_run(KN_DEVICE_CPU, devnull), 0);
    fclose(devnull);
}

/* ---- exp_ref (kernels/cpu/vexp.h) and the SiLU that uses it ---- */

/* distance in units in the last place between two finite floats of one sign */
static long ulp_dist(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    long d = (long)ia - (long)ib;
    return d < 0 ? -d : d;
}

TEST(exp_ref_within_2ulp_of_libm)
{
    long worst = 0;
    /* a dense sweep of the whole range and the ends */
    for (int i = 0; i <= 2000000; i++) {
        float x = -86.5f + (float)i * (175.2228f / 2000000.0f);
        if (x > 88.72283935546875f)
            x = 88.72283935546875f;
        float want = expf(x), got = exp_ref(x);
        if (!(want >= 1.2e-38f) || !isfinite(want))
            continue;
        long d = ulp_dist(got, want);
        if (d > worst)
            worst = d;
        if (d > 2) {
            th_fail(__FILE__, __LINE__, "exp_ref within 2 ulp", "x %.9g: %.9g vs libm %.9g", x, got, want);
            return;
        }
    }
    CHECK(worst <= 2);
    /* specials */
    CHECK(isnan(exp_ref(NAN)));
    CHECK(exp_ref(INFINITY) == INFINITY);
    CHECK(exp_ref(89.0f) == INFINITY);
    CHECK(exp_ref(-INFINITY) == 0.0f && !signbit(exp_ref(-INFINITY)));
    CHECK(exp_ref(-87.0f) == 0.0f);
    CHECK(exp_ref(0.0f) == 1.0f && exp_ref(-0.0f) == 1.0f);
    CHECK(exp_ref(-86.5f) > 0.0f);
    CHECK(isfinite(exp_ref(88.72f)) && exp_ref(88.72283935546875f) == expf(88.72283935546875f));
}

/* Every SIMD level gives the scalar bits (lengths around the 8/16-lane
 * groups, specials in every lane position), close to the libm formula. */
TEST(swiglu_levels_bit_for_bit)
{
    enum { N = 70 };
    float g[N], u[N], ref[N], out[N];
    const float special[] = {NAN, INFINITY, -INFINITY, 100.0f, -100.0f, 88.8f, -88.8f, 1e-40f, -0.0f, 87.0f};
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i * 37) % 200 - 100) * 0.173f;
        u[i] = (float)((i * 11) % 50 - 25) * 0.05f;
    }
    for (int s = 0; s < 10; s++)
        g[(s * 7) % N] = special[s];
    for (int n = 0; n <= N; n += n < 20 ? 1 : 17) {
        CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
        kn_swiglu_f32(ref, g, u, (size_t)n);
        for (int i = 0; i < n; i++)
            if (isfinite(g[i]) && fabsf(g[i]) < 80.0f) {
                double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
                CHECK_NEAR(ref[i], want, 1e-6 * fabs(want) + 1e-30);
            }
        for (int lv = KN_SIMD_AVX2; lv <= kn_simd_best(); lv++) {
            CHECK_EQ_INT(kn_simd_set(lv), 0);
            kn_swiglu_f32(out, g, u, (size_t)n);
            CHECK(memcmp(out, ref, (size_t)n * sizeof(float)) == 0);
        }
    }
    kn_simd_set(kn_simd_best());
}
