/* Unit tests: CPU reference ops against hand-computed values and the
 * double-precision self-check. */
#include <math.h>
#include <stdio.h>

#include "common/err.h"
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
