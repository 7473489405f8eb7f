/* device.c - device selection helpers of the compute interface
 * (kn_device_*, kn_cuda_built; contracts in kernels/kn.h). Not an op: no
 * CUDA twin. Pure functions, any thread. */
#include "kernels/kn.h"

#include <string.h>

#include "common/err.h"

int kn_device_parse(const char *s, enum kn_device *out)
{
    if (strcmp(s, "cpu") == 0)
        *out = KN_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0)
        *out = KN_DEVICE_CUDA;
    else
        return ERR_INVAL;
    return 0;
}

const char *kn_device_name(enum kn_device d)
{
    return d == KN_DEVICE_CUDA ? "cuda" : "cpu";
}

int kn_cuda_built(void)
{
#ifdef KN_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}
