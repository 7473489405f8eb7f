/*
 * ggml_type.h - the ggml tensor types as the GGUF format stores them: type
 * ids, ggml's names, and the block layout of each type this project reads.
 *
 * A row of ne[0] values is cut into blocks of ggml_type_block_elems()
 * values, each stored in ggml_type_block_bytes() bytes (a scale or two as
 * IEEE binary16, then packed integers; byte layouts in
 * kernels/cpu/blocks.h). The GGUF reader (gguf.h) sizes every tensor with
 * this table; the kernels (kernels/kn.h) decode every type it calls
 * supported. Pure functions over a constant table: any thread, can't fail
 * unless they return int.
 */
#ifndef TEXT_GGML_TYPE_H
#define TEXT_GGML_TYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml tensor type ids (ggml.h's enum ggml_type), as stored in GGUF tensor
 * infos. Only the ids this project reads have names here; ggml_type_name()
 * knows the names of the others for error messages. */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_BF16 = 30,
};

#define GGML_QK 32    /* values per block of the legacy formats (Q4_0..Q8_0) */
#define GGML_QK_K 256 /* values per super-block of the K-quants */

/* ggml's name of type id ("Q4_K", "IQ2_XXS", "BF16"...), for every id ggml
 * has defined (supported or not); NULL for an id ggml never used or removed. */
const char *ggml_type_name(uint32_t type);

/* 1 if type is one of the enum ggml_type values (a layout this project
 * knows and the kernels decode), else 0. */
int ggml_type_supported(uint32_t type);

/* Values per block and bytes per block of a supported type; 0 for any other
 * id. (F32/F16/BF16 count as blocks of one value.) */
uint32_t ggml_type_block_elems(uint32_t type);
uint32_t ggml_type_block_bytes(uint32_t type);

/* Bytes of n_elems values of a supported type into *out. Returns 0,
 * ERR_UNSUPPORTED (type not supported), ERR_INVAL (n_elems negative or not a
 * multiple of the block size) or ERR_TOOBIG (the size overflows int64).
 * *out written only on success. */
int ggml_type_row_bytes(uint32_t type, int64_t n_elems, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif
