/*
 * matq.h - matrix products against quantized (GGUF) weights on the CPU.
 *
 * out (n, m) = x (n, k) @ W^T, W being m rows of k values in a ggml block
 * format, as GGUF stores linear weights (one output feature per row).
 *
 * Design (llama.cpp's): the float activations are quantized once per call
 * to 8-bit blocks, then each output is a sum over blocks of an integer dot
 * product of activation and weight quants, scaled by the two block scales
 * in float. Two activation formats, both with float32 scales (more exact
 * than ggml's fp16 ones), both round-to-nearest-even with scale
 * d = max|x| / 127 over the block, values in [-127, 127]:
 *
 *   act32  for Q4_0 Q4_1 Q5_0 Q5_1 Q8_0: blocks of 32 values,
 *          { float d; float s = d * sum(q); int8 q[32]; }         40 bytes
 *   act256 for Q4_K Q5_K Q6_K: blocks of 256 values,
 *          { float d; int16 bsums[16] (sums of q by 16); int8 q[256]; } 292 bytes
 *
 * F32, F16 and BF16 weights are converted to float exactly and dotted with
 * the unquantized x (no scratch needed).
 *
 * Reduction order (fixed: the same for every n, thread count and SIMD path,
 * so results are bit-identical across them; tests/unit/kernels/test_matq.c checks):
 *   - 32-value types: sixteen float lanes; block b (in order) goes to lanes
 *     8 * (b & 1) + j, j = 0..7, lane j taking the exact integer dot of
 *     block elements 4j..4j+3: lane = fma(d_w * d_a, (float)isum_j, lane).
 *     Offsets (Q4_1, Q5_1: m * sum(x)) go to accm[b & 1] = fma(m_w, s_a,
 *     accm[b & 1]). With v_j = l_j + l_{8+j}: result
 *     ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)) [+ (accm0 + accm1)].
 *   - K-quants: per 256-value super-block the whole integer sum (sub-block
 *     scales applied in integers) is exact; then acc = fma(d_w * d_a,
 *     (float)isum, acc), and for Q4_K/Q5_K accm = fma(dmin_w * d_a,
 *     (float)imins, accm); result acc - accm.
 *   - F32/F16/BF16: 32 lanes, lane j = fma chain over elements i = j mod 32
 *     in increasing i; lanes combined as v[j] = (l[j]+l[j+8]) +
 *     (l[j+16]+l[j+24]) for j < 8, then the 8-lane sum above.
 *
 * Error vs the exact product with unquantized x (derived in
 * tests/unit/kernels/test_matq.c): activation rounding moves each x_i by at most
 * d_a/2 = max|x over its block| / 254, so |error| <= sum over blocks of
 * (amax_b / 254) * sum_{i in b} |w_i|, plus float rounding of order
 * (k/block + 16) * 2^-24 * sum |w_i x_i|. For random data that is about
 * 0.3% of sum |w_i x_i| (typically far less: errors have random signs).
 *
 * SIMD: a portable scalar path (the reference), an AVX2+FMA+F16C path and
 * an AVX-512 (F, BW, VL, VNNI) path, chosen at run time (see kn_simd_*);
 * integer sums are exact and the float steps are the same operations in
 * the same order, so all give bit-identical results. For the 32-value
 * types and n >= 4 the AVX2 path uses a kernel that takes 4 activation rows
 * per weight row (the weight block is unpacked once); per output it
 * performs the very same operations. The AVX-512 path quantizes the
 * activations into a layout of four interleaved rows with blocks in pairs,
 * so that one 512-bit register holds two blocks - the reference's two lane
 * sets (block parity) side by side - and one multiply gives the scales of 4
 * rows x 2 blocks; an odd last block updates the low half only. About 1.7x
 * the AVX2 kernel's throughput on Q4_1 with 64 rows (bench_matq).
 *
 * Performance notes for callers: quantizing the activations costs O(n k)
 * per call, so fuse products that share x (q/k/v, gate/up) into one call
 * on concatenated weight rows when the layout allows. Work is split into
 * tiles of 16 weight rows x 64 activation rows handed out dynamically, so
 * any thread count works; use no more threads than physical cores.
 *
 * Threads: kn_matmul_w may be called from any thread; calls sharing a pool
 * must not overlap (kn_pool_run rule). kn_simd_set is for start-up/tests.
 */
#ifndef KERNELS_CPU_MATQ_H
#define KERNELS_CPU_MATQ_H

#include <stddef.h>

#include "kernels/cpu/pool.h"

/* out (n, m) = x (n, k) @ W^T. W: m rows of k values of ggml type w_type
 * (enum quant_type), rows contiguous, row stride quant_row_bytes(w_type, k),
 * no alignment needed. x, out: float32 row-major, out must not alias x.
 * scratch: at least kn_matmul_w_scratch(n, k, w_type) bytes, any alignment
 * (may be NULL when that is 0); its contents are clobbered. pool NULL: runs
 * on the calling thread. Allocates nothing.
 * Returns 0; ERR_UNSUPPORTED (w_type not one of F32 F16 BF16 Q4_0 Q4_1
 * Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K); ERR_INVAL (n, m < 0, k <= 0, k not a
 * multiple of the block size, or a NULL pointer with non-empty work);
 * ERR_TOOBIG (scratch_bytes too small). out untouched on error. n == 0 or
 * m == 0: nothing to do, returns 0. */
int kn_matmul_w(struct kn_pool *pool, float *out, const float *x, int n, int k,
                const void *w, int w_type, int m, void *scratch, size_t scratch_bytes);

/* Scratch bytes kn_matmul_w needs for these arguments, whatever the SIMD
 * level: ceil(n / 4) * ceil(k / 64) * 320 for the 32-value types (room for
 * the AVX-512 layout: rows rounded up to 4, blocks to pairs, 40 bytes per
 * row and block), n * (k / 256) * 292 for the K-quants, each plus 64 (the
 * activations are placed at a 64-byte boundary inside the buffer); 0 for
 * F32, F16, BF16, for n == 0 and for arguments kn_matmul_w would reject;
 * SIZE_MAX if the size overflows. Can't fail. Since 40/32 > 292/256,
 * kn_matmul_w_scratch(n_max, k_max, QUANT_Q8_0) is enough for every call
 * with n <= n_max and k <= k_max, whatever the weight type: allocate that
 * once at model load. */
size_t kn_matmul_w_scratch(int n, int k, int w_type);

/* ---- SIMD path selection --------------------------------------------------------- */

enum kn_simd {
    KN_SIMD_SCALAR = 0, /* portable C, the reference */
    KN_SIMD_AVX2 = 1,   /* x86-64 AVX2 + FMA + F16C */
    KN_SIMD_AVX512 = 2, /* AVX2 plus AVX-512 F/BW/VL/VNNI (32-value types; others as AVX2) */
};

/* The best level this CPU supports (KN_SIMD_SCALAR on non-x86). Can't fail. */
int kn_simd_best(void);

/* The level in use. On first use it is kn_simd_best(), unless the
 * environment variable KN_SIMD is "scalar", "avx2" or "avx512" (read once; a level the
 * CPU lacks, or an unknown name, falls back to the best). Can't fail. */
int kn_simd_level(void);

/* Select a level: 0, or ERR_UNSUPPORTED if the CPU lacks it (or it is
 * unknown). Takes effect for calls that start afterwards. */
int kn_simd_set(int level);

/* "scalar" / "avx2" / "avx512"; "?" for other values. */
const char *kn_simd_name(int level);

#endif
