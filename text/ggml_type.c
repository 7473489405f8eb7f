/*
 * ggml_type.c - the ggml type table (see ggml_type.h). Block sizes are the
 * format's (ggml's type traits); kernels/cpu/blocks.h asserts that its block
 * structs have the same sizes.
 */
#include "text/ggml_type.h"

#include <stddef.h>

#include "common/err.h"

struct type_info {
    const char *name;
    uint32_t block_elems; /* 0: not supported here */
    uint32_t block_bytes;
};

/* Every id ggml has defined (ggml.h); ids 4, 5, 31-33 were removed and stay
 * unnamed. Sizes only for the types this project reads. */
static const struct type_info types[] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", GGML_QK, 18},
    [3] = {"Q4_1", GGML_QK, 20},
    [6] = {"Q5_0", GGML_QK, 22},
    [7] = {"Q5_1", GGML_QK, 24},
    [8] = {"Q8_0", GGML_QK, 34},
    [9] = {"Q8_1", 0, 0},
    [10] = {"Q2_K", 0, 0},
    [11] = {"Q3_K", 0, 0},
    [12] = {"Q4_K", GGML_QK_K, 144},
    [13] = {"Q5_K", GGML_QK_K, 176},
    [14] = {"Q6_K", GGML_QK_K, 210},
    [15] = {"Q8_K", 0, 0},
    [16] = {"IQ2_XXS", 0, 0},
    [17] = {"IQ2_XS", 0, 0},
    [18] = {"IQ3_XXS", 0, 0},
    [19] = {"IQ1_S", 0, 0},
    [20] = {"IQ4_NL", 0, 0},
    [21] = {"IQ3_S", 0, 0},
    [22] = {"IQ2_S", 0, 0},
    [23] = {"IQ4_XS", 0, 0},
    [24] = {"I8", 0, 0},
    [25] = {"I16", 0, 0},
    [26] = {"I32", 0, 0},
    [27] = {"I64", 0, 0},
    [28] = {"F64", 0, 0},
    [29] = {"IQ1_M", 0, 0},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 0, 0},
    [35] = {"TQ2_0", 0, 0},
    [39] = {"MXFP4", 0, 0},
    [40] = {"NVFP4", 0, 0},
    [41] = {"Q1_0", 0, 0},
    [42] = {"Q2_0", 0, 0},
};
#define N_TYPES (sizeof types / sizeof types[0])

const char *ggml_type_name(uint32_t type)
{
    return type < N_TYPES ? types[type].name : NULL;
}

int ggml_type_supported(uint32_t type)
{
    return type < N_TYPES && types[type].block_elems != 0;
}

uint32_t ggml_type_block_elems(uint32_t type)
{
    return type < N_TYPES ? types[type].block_elems : 0;
}

uint32_t ggml_type_block_bytes(uint32_t type)
{
    return type < N_TYPES ? types[type].block_bytes : 0;
}

int ggml_type_row_bytes(uint32_t type, int64_t n_elems, int64_t *out)
{
    if (!ggml_type_supported(type))
        return ERR_UNSUPPORTED;
    int64_t be = types[type].block_elems, bb = types[type].block_bytes;
    if (n_elems < 0 || n_elems % be != 0)
        return ERR_INVAL;
    int64_t n_blocks = n_elems / be;
    if (n_blocks > INT64_MAX / bb)
        return ERR_TOOBIG;
    *out = n_blocks * bb;
    return 0;
}
