/*
 * blocks.h - the ggml block layouts, private to kernels/cpu (the CPU
 * decoders in quant.c and matq.c) and the kernel unit tests. The public
 * side of the formats (type ids, block sizes, kn_dequant_row...) is in
 * kernels/kn.h; the CUDA decoders (cuda/dequant.cu, cuda/matvec.cu) read
 * the same byte offsets with byte loads.
 *
 * The structs below are the exact on-disk layouts (little-endian, packed,
 * sizes checked at compile time). Byte offsets inside each block
 * (QK_K = 256):
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
 */
#ifndef KERNELS_CPU_BLOCKS_H
#define KERNELS_CPU_BLOCKS_H

#include <stdint.h>

#include "kernels/kn.h"

/* The block layouts. `d`, `m`, `dmin` are raw IEEE binary16 bits. */
struct quant_block_q4_0 {
    uint16_t d;                  /* scale */
    uint8_t qs[GGML_QK / 2];    /* value j in the low nibble of qs[j], j+16 in the high */
};
struct quant_block_q4_1 {
    uint16_t d;                  /* scale */
    uint16_t m;                  /* offset (the block minimum) */
    uint8_t qs[GGML_QK / 2];    /* nibbles as Q4_0 */
};
struct quant_block_q5_0 {
    uint16_t d;                  /* scale */
    uint8_t qh[4];               /* 5th bits: bit j of the LE u32 belongs to value j */
    uint8_t qs[GGML_QK / 2];    /* low 4 bits, nibbles as Q4_0 */
};
struct quant_block_q5_1 {
    uint16_t d;                  /* scale */
    uint16_t m;                  /* offset */
    uint8_t qh[4];               /* 5th bits as Q5_0 */
    uint8_t qs[GGML_QK / 2];    /* low 4 bits as Q5_0 */
};
struct quant_block_q8_0 {
    uint16_t d;                  /* scale */
    int8_t qs[GGML_QK];         /* values */
};
struct quant_block_q4_k {
    uint16_t d;                  /* super-block scale for the sub-block scales */
    uint16_t dmin;               /* super-block scale for the sub-block mins */
    uint8_t scales[12];          /* 8 x (6-bit scale, 6-bit min), packed (see quant.c) */
    uint8_t qs[GGML_QK_K / 2];  /* 4-bit values: chunk c of 64 in qs[32c..32c+32), low then high nibbles */
};
struct quant_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];          /* as Q4_K */
    uint8_t qh[GGML_QK_K / 8];  /* 5th bits: bit s of qh[l] for value 32s + l */
    uint8_t qs[GGML_QK_K / 2];  /* low 4 bits as Q4_K */
};
struct quant_block_q6_k {
    uint8_t ql[GGML_QK_K / 2];  /* low 4 bits */
    uint8_t qh[GGML_QK_K / 4];  /* high 2 bits */
    int8_t scales[GGML_QK_K / 16]; /* one signed scale per 16 values */
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

#endif
