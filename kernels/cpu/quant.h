/*
 * quant.h - ggml tensor types: block layouts, size table, dequantization.
 *
 * GGUF tensors hold their values in ggml's block formats: a row of ne[0]
 * values is cut into blocks of quant_block_elems() values, each stored in
 * quant_block_bytes() bytes (a scale or two as IEEE binary16, then packed
 * integers). This module is the plain C reference for those formats: the
 * structs below are the exact on-disk layouts (little-endian, packed, sizes
 * checked at compile time), and quant_dequant_row() turns a row of blocks
 * back into float32. It is the reference the CUDA kernels are tested against,
 * so it favours readability over speed and computes exactly what gguf-py's
 * numpy dequantizer computes (same float32 operations in the same order:
 * tests/unit/kernels/test_quant.c checks bit-for-bit equality on committed fixtures).
 *
 * Byte offsets inside each block (QK_K = 256):
 *
 *   type  elems bytes  layout
 *   Q4_0    32    18   d:f16 [0,2)  qs[16] [2,18)
 *   Q4_1    32    20   d:f16 [0,2)  m:f16 [2,4)  qs[16] [4,20)
 *   Q5_0    32    22   d:f16 [0,2)  qh[4] [2,6)  qs[16] [6,22)
 *   Q5_1    32    24   d:f16 [0,2)  m:f16 [2,4)  qh[4] [4,8)  qs[16] [8,24)
 *   Q8_0    32    34   d:f16 [0,2)  qs:int8[32] [2,34)
 *   Q4_K   256   144   d:f16 [0,2)  dmin:f16 [2,4)  scales[12] [4,16)  qs[128] [16,144)
 *   Q5_K   256   176   d, dmin, scales[12] as Q4_K, qh[32] [16,48)  qs[128] [48,176)
 *   Q6_K   256   210   ql[128] [0,128)  qh[64] [128,192)  scales:int8[16] [192,208)  d:f16 [208,210)
 *
 * Readers never dereference a block struct in place: each block is copied
 * into a local struct with memcpy, so source rows need no alignment (GGUF
 * data in a mapping is aligned, test buffers may not be).
 *
 * Pure functions, no state: safe from any thread.
 */
#ifndef KERNELS_CPU_QUANT_H
#define KERNELS_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.h: the block formats are little-endian; big-endian hosts are not supported"
#endif

/* ggml tensor type ids (enum ggml_type), as stored in GGUF tensor infos.
 * Only the ids this engine reads have names here; quant_type_name() knows
 * the names of the others for error messages. */
enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_BF16 = 30,
};

#define QUANT_QK 32   /* values per block of the legacy formats (Q4_0..Q8_0) */
#define QUANT_QK_K 256 /* values per super-block of the K-quants */

/* The block layouts. `d`, `m`, `dmin` are raw IEEE binary16 bits. */
struct quant_block_q4_0 {
    uint16_t d;                  /* scale */
    uint8_t qs[QUANT_QK / 2];    /* value j in the low nibble of qs[j], j+16 in the high */
};
struct quant_block_q4_1 {
    uint16_t d;                  /* scale */
    uint16_t m;                  /* offset (the block minimum) */
    uint8_t qs[QUANT_QK / 2];    /* nibbles as Q4_0 */
};
struct quant_block_q5_0 {
    uint16_t d;                  /* scale */
    uint8_t qh[4];               /* 5th bits: bit j of the LE u32 belongs to value j */
    uint8_t qs[QUANT_QK / 2];    /* low 4 bits, nibbles as Q4_0 */
};
struct quant_block_q5_1 {
    uint16_t d;                  /* scale */
    uint16_t m;                  /* offset */
    uint8_t qh[4];               /* 5th bits as Q5_0 */
    uint8_t qs[QUANT_QK / 2];    /* low 4 bits as Q5_0 */
};
struct quant_block_q8_0 {
    uint16_t d;                  /* scale */
    int8_t qs[QUANT_QK];         /* values */
};
struct quant_block_q4_k {
    uint16_t d;                  /* super-block scale for the sub-block scales */
    uint16_t dmin;               /* super-block scale for the sub-block mins */
    uint8_t scales[12];          /* 8 x (6-bit scale, 6-bit min), packed (see quant.c) */
    uint8_t qs[QUANT_QK_K / 2];  /* 4-bit values: chunk c of 64 in qs[32c..32c+32), low then high nibbles */
};
struct quant_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];          /* as Q4_K */
    uint8_t qh[QUANT_QK_K / 8];  /* 5th bits: bit s of qh[l] for value 32s + l */
    uint8_t qs[QUANT_QK_K / 2];  /* low 4 bits as Q4_K */
};
struct quant_block_q6_k {
    uint8_t ql[QUANT_QK_K / 2];  /* low 4 bits */
    uint8_t qh[QUANT_QK_K / 4];  /* high 2 bits */
    int8_t scales[QUANT_QK_K / 16]; /* one signed scale per 16 values */
    uint16_t d;                  /* super-block scale */
};

_Static_assert(sizeof(struct quant_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(struct quant_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(struct quant_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(struct quant_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(struct quant_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(struct quant_block_q4_k) == 144, "q4_k block size");
_Static_assert(sizeof(struct quant_block_q5_k) == 176, "q5_k block size");
_Static_assert(sizeof(struct quant_block_q6_k) == 210, "q6_k block size");

/* ggml's name of type id ("Q4_K", "IQ2_XXS", "BF16"...), for every id ggml
 * has defined (supported or not); NULL for an id ggml never used or removed.
 * Can't fail. */
const char *quant_type_name(uint32_t type);

/* 1 if this module can dequantize type (the enum quant_type values), else 0. */
int quant_type_supported(uint32_t type);

/* Values per block and bytes per block of a supported type; 0 for any other
 * id. (F32/F16/BF16 count as blocks of one value.) */
uint32_t quant_block_elems(uint32_t type);
uint32_t quant_block_bytes(uint32_t type);

/* Bytes of n_elems values of a supported type into *out. Returns 0,
 * ERR_UNSUPPORTED (type not supported), ERR_INVAL (n_elems negative or not a
 * multiple of the block size) or ERR_TOOBIG (the size overflows int64).
 * *out written only on success. */
int quant_row_bytes(uint32_t type, int64_t n_elems, int64_t *out);

/* Dequantize n values (one row or several consecutive rows) of type from src
 * into dst (n floats). src needs no alignment. Returns 0, ERR_UNSUPPORTED or
 * ERR_INVAL (n negative or not a multiple of the block size); dst untouched
 * on error. Exact: matches gguf-py's dequantize() bit for bit. */
int quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* IEEE binary16 bits -> float, exact for every input (subnormals, +-inf, NaN
 * payloads are kept: the 10 mantissa bits become the top of the float's). */
float quant_fp16_to_fp32(uint16_t h);

/* float -> binary16 bits, round to nearest even; overflow gives +-inf,
 * underflow gives subnormals or +-0, NaN gives a quiet NaN keeping the sign
 * and the top 9 payload bits (as F16C and CUDA's __float2half do). */
uint16_t quant_fp32_to_fp16(float f);

/* bfloat16 bits -> float: the bits become the top half of a binary32. Exact. */
float quant_bf16_to_fp32(uint16_t h);

/* float -> bfloat16 bits as ggml does it: round to nearest even, NaN forced
 * quiet. */
uint16_t quant_fp32_to_bf16(float f);

#endif
