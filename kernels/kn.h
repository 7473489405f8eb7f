/*
 * kn.h - the compute interface: the one header anything outside kernels/
 * includes (the engine, the worker's front-ends, the tests and benchmarks).
 *
 * Layout of kernels/:
 *   kn.h             this file: every public type and op of both backends
 *   cpu/<op>.c       the CPU backend, one op per file. Each is plain C (with
 *                    SIMD paths where it pays, giving the same bits) and is
 *                    at the same time the reference its CUDA twin is tested
 *                    against.
 *   cpu/blocks.h     private to cpu/ (and the kernel unit tests): the ggml
 *                    block structs, with their byte-offset table.
 *   cuda/<op>.cu     the CUDA backend, one op per file: its launcher and
 *                    close variants (add/add_bias, an f32-only or host-copy
 *                    entry point, a _supported or workspace-size query).
 *                    Each header names the op's shapes, accumulation type,
 *                    CPU reference and tolerance against it, which
 *                    tests/cuda/test_cuda_parity.c checks op by op.
 *   cuda/device.cuh  private to cuda/: the context struct, error translation.
 *
 * The ops, their two implementations and the tolerance of the CUDA one
 * against the CPU reference (each .cu header says how it is measured):
 *
 *   op              CPU reference                    CUDA                          tolerance
 *   rmsnorm         kn_rmsnorm_f32      rmsnorm.c    kn_cuda_rmsnorm    rmsnorm.cu 1e-5 rel (bf16 out 4e-3)
 *   matmul f32      kn_matmul_f32       matmul.c     kn_cuda_matmul_f32 matmul.cu  1e-4 rel L2
 *   matmul bf16     kn_matmul_f32 on bf16 inputs     kn_cuda_gemm_bf16  gemm.cu    1e-3 rel L2
 *   matmul quant    kn_matmul_w         matq.c       kn_cuda_matvec_q   matvec.cu  1e-5 rel L2 (vs f32
 *                                                                                  on dequantized rows)
 *   dequant         kn_dequant_row   quant.c      kn_cuda_dequant    dequant.cu 0 (bit-identical)
 *   embedding       kn_get_rows         get_rows.c   kn_cuda_dequant (ids)         0
 *   rope            kn_rope_f32         rope.c       kn_cuda_rope       rope.cu    2e-6 abs
 *   attention       kn_attn_paged_f32   attention.c  kn_cuda_attention  attention.cu 1e-5 rel
 *                                                                                  (bf16 K/V both sides)
 *   swiglu          kn_swiglu_f32       swiglu.c     kn_cuda_swiglu     swiglu.cu  2e-6 rel (bf16 out 4e-3)
 *   geglu           kn_geglu_f32        geglu.c      (none: the CUDA forward refuses gemma2/gemma3)
 *   scale, softcap  kn_scale_f32 ...    scale.c      (none: likewise)
 *   windowed attn   kn_attn_paged_win_heads_f32 attention.c (none: likewise)
 *   attention tile  kn_attn_tile        attn_tile.c  (none: the CUDA forward has its own tiles;
 *                   f32/f16/int8 K/V, grouped by kv head: the CPU engine's attention)
 *   add, add_bias   kn_add_f32 ...      add.c        kn_cuda_add ...    add.cu     0
 *   argmax          kn_argmax_f32       argmax.c     kn_cuda_argmax     argmax.cu  exact
 *   to bf16         kn_fp32_to_bf16  quant.c      kn_cuda_to_bf16    to_bf16.cu 0
 *   kv append       kn_fp32_to_bf16  quant.c      kn_cuda_kv_append  kvcache.cu 0
 *   random fill     (none: synthetic benchmark weights)  kn_cuda_fill_random_bf16 fill_random.cu
 *
 * Sections below: devices; tensor types (ggml formats, prefix quant_: a
 * format library more than an op, shared by the GGUF reader); the CPU
 * thread pool and SIMD level the CPU ops run on; the CPU ops; the CUDA
 * backend. Tensors are dense, row-major, float32 unless the name says
 * otherwise; shapes are (rows, cols) in the comments.
 *
 * CPU ops can't fail unless they return int: shapes and indices are the
 * caller's contract (worker/engine validates everything that came from
 * outside before calling them). They are pure functions, safe from any
 * thread on disjoint outputs; ops that take a pool follow kn_pool_run's
 * rule (one caller per pool at a time).
 *
 * The CUDA section is declared in every build, so that callers need no
 * conditional includes, but defined only by make CUDA=1 (kn_cuda_built()
 * says which; KN_HAVE_CUDA is defined for the C files of such a build).
 * Plain C types only: no CUDA header is needed to include this file.
 */
#ifndef KERNELS_KN_H
#define KERNELS_KN_H

#include <stddef.h>
#include <stdint.h>

#include "text/ggml_type.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kn.h: the ggml block formats are little-endian; big-endian hosts are not supported"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ==== devices (cpu/device.c) ===================================================== */

enum kn_device { KN_DEVICE_CPU = 0, KN_DEVICE_CUDA };

/* "cpu" / "cuda" -> enum. 0 or ERR_INVAL. */
int kn_device_parse(const char *s, enum kn_device *out);
const char *kn_device_name(enum kn_device d);

/* 1 when this build includes the CUDA backend (make CUDA=1). */
int kn_cuda_built(void);

/* ==== tensor types: ggml block formats (cpu/quant.c, layouts in cpu/blocks.h) ==== */

/* The type ids, names and block sizes are the file format's
 * (text/ggml_type.h); kn_dequant_row decodes every type
 * ggml_type_supported() accepts. */

/* Dequantize n values (one row or several consecutive rows) of type from src
 * into dst (n floats). src needs no alignment. Returns 0, ERR_UNSUPPORTED or
 * ERR_INVAL (n negative or not a multiple of the block size); dst untouched
 * on error. Exact: matches gguf-py's dequantize() bit for bit. */
int kn_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* IEEE binary16 bits -> float, exact for every input (subnormals, +-inf, NaN
 * payloads are kept: the 10 mantissa bits become the top of the float's). */
float kn_fp16_to_fp32(uint16_t h);

/* float -> binary16 bits, round to nearest even; overflow gives +-inf,
 * underflow gives subnormals or +-0, NaN gives a quiet NaN keeping the sign
 * and the top 9 payload bits (as F16C and CUDA's __float2half do). */
uint16_t kn_fp32_to_fp16(float f);

/* kn_fp32_to_fp16 over n values (the KV cache append; F16C's vcvtps2ph
 * with round-to-nearest-even where the CPU has it: the same bits). */
void kn_f32_to_f16(uint16_t *dst, const float *src, size_t n);

/* bfloat16 bits -> float: the bits become the top half of a binary32. Exact. */
float kn_bf16_to_fp32(uint16_t h);

/* float -> bfloat16 bits as ggml does it: round to nearest even, NaN forced
 * quiet. */
uint16_t kn_fp32_to_bf16(float f);

/* ==== CPU thread pool (cpu/pool.c) ================================================ */

/* The CPU backend runs one op at a time on all threads, as ggml does: the
 * caller hands a function to kn_pool_run(), every thread of the pool (the
 * caller's thread counts as thread 0) calls it with its index, and the call
 * returns when all have finished. The op splits its own work by (ith, nth).
 * Idle workers spin briefly then sleep: back-to-back ops pay no syscall,
 * an idle pool costs no CPU (design in pool.c).
 *
 * Threads: one caller at a time per pool (kn_pool_run is not reentrant and
 * must not be called concurrently on the same pool, nor from inside fn).
 * kn_pool_new/kn_pool_free from the thread that owns the pool. */
struct kn_pool;

/* A pool of n_threads threads in all (the caller's thread included, so
 * n_threads - 1 are created); n_threads <= 0 means one per online CPU.
 * Capped at KN_POOL_MAX_THREADS. Returns 0 and *out, ERR_NOMEM (allocation
 * or thread creation failed; nothing is left behind). */
#define KN_POOL_MAX_THREADS 256
int kn_pool_new(int n_threads, struct kn_pool **out);

/* Stop and join the workers, free the pool. NULL is ok. */
void kn_pool_free(struct kn_pool *p);

/* Number of threads a run uses (>= 1); 1 for NULL. */
int kn_pool_threads(const struct kn_pool *p);

/* Call fn(ctx, ith, nth) once for every ith in [0, nth), nth =
 * kn_pool_threads(p), concurrently, and return when all calls have
 * returned (everything they wrote is then visible to the caller). ith 0
 * runs on the calling thread. p NULL: fn(ctx, 0, 1) on the caller. Can't
 * fail. Allocates nothing. */
void kn_pool_run(struct kn_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);

/* ==== CPU SIMD level (cpu/simd.c) ================================================= */

/* The CPU ops with SIMD paths (kn_matmul_w, kn_attn_paged_f32) choose them
 * by this one process-wide level; every path gives the scalar path's bits. */
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
 * unknown). Takes effect for calls that start afterwards. For start-up and
 * tests. */
int kn_simd_set(int level);

/* "scalar" / "avx2" / "avx512"; "?" for other values. */
const char *kn_simd_name(int level);

/* ==== CPU ops ======================================================================= */

/* RMSNorm per row (rmsnorm.c): out[r,i] = x[r,i] / sqrt(mean_i(x[r,:]^2) + eps) * w[i].
 * out: (n_rows, dim); x: (n_rows, dim); w: (dim). out may alias x.
 * Accumulates the sum of squares in float32 (as the CUDA kernel does). */
void kn_rmsnorm_f32(float *out, const float *x, const float *w, int n_rows, int dim, float eps);

/* out = x @ w^T (matmul.c): out (n, m); x (n, k); w (m, k) - the layout of
 * GGUF/PyTorch linear weights (one output feature per row). float32
 * accumulation. */
void kn_matmul_f32(float *out, const float *x, const float *w, int n, int k, int m);

/* Quantized-weight product (matq.c; scheme, fixed reduction order and error
 * bound in its header): out (n, m) = x (n, k) @ W^T. W: m rows of k values
 * of ggml type w_type (enum ggml_type), rows contiguous, row stride
 * ggml_type_row_bytes(w_type, k), no alignment needed. x, out: float32
 * row-major, out must not alias x. The activations are quantized to 8 bits
 * per block (about 0.3% of sum |w_i x_i| for random data); results are
 * bit-identical for every n, thread count and SIMD level.
 * scratch: at least kn_matmul_w_scratch(n, k, w_type) bytes, any alignment
 * (may be NULL when that is 0); its contents are clobbered. pool NULL: runs
 * on the calling thread. Allocates nothing.
 * Returns 0; ERR_UNSUPPORTED (w_type not one of F32 F16 BF16 Q4_0 Q4_1
 * Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K); ERR_INVAL (n, m < 0, k <= 0, k not a
 * multiple of the block size, or a NULL pointer with non-empty work);
 * ERR_TOOBIG (scratch_bytes too small). out untouched on error. n == 0 or
 * m == 0: nothing to do, returns 0.
 * Performance: quantizing the activations costs O(n k) per call, so fuse
 * products that share x (q/k/v, gate/up) into one call on concatenated
 * weight rows; use no more threads than physical cores. */
int kn_matmul_w(struct kn_pool *pool, float *out, const float *x, int n, int k,
                const void *w, int w_type, int m, void *scratch, size_t scratch_bytes);

/* Several weight matrices against the same x (q/k/v, gate/up): out_i (n,
 * m_i) = x (n, k) @ W_i^T for each of the n_w (1..KN_MATMUL_MULTI_MAX)
 * entries, with exactly the bits of n_w kn_matmul_w calls. When every W_i
 * reads the same activation layout (the 32-value types Q4_0/Q5_0/Q8_0
 * together, Q4_1/Q5_1 together, the K-quants together, the float types
 * together) x is quantized once and all the products run in one pool
 * dispatch (two pool barriers in all, not two per matrix); otherwise it is
 * n_w kn_matmul_w calls. Arguments and errors as kn_matmul_w's for each
 * entry (scratch: the largest kn_matmul_w_scratch of the entries), plus
 * ERR_INVAL for n_w out of range or w NULL; outputs untouched on error. */
#define KN_MATMUL_MULTI_MAX 4
struct kn_wmat {
    float *out;
    const void *w;
    int w_type;
    int m;
};
int kn_matmul_w_multi(struct kn_pool *pool, const float *x, int n, int k, const struct kn_wmat *w,
                      int n_w, void *scratch, size_t scratch_bytes);

/* Scratch bytes kn_matmul_w needs for these arguments, whatever the SIMD
 * level: ceil(n / 8) * ceil(k / 64) * 1088 for the 32-value types (room
 * for the AVX-512 layout: rows rounded up to 8, blocks to pairs, 64 bytes
 * per row and block plus 64 per group of 8 rows and block pair),
 * n * (k / 256) * 292 for the K-quants, each plus 64 (the activations are
 * placed at a 64-byte boundary inside the buffer); 0 for F32, F16, BF16,
 * for n == 0 and for arguments kn_matmul_w would reject; SIZE_MAX if the
 * size overflows. Can't fail. Since 1088/512 > 292/256,
 * kn_matmul_w_scratch(n_max, k_max, GGML_TYPE_Q8_0) is enough for every call
 * with n <= n_max and k <= k_max, whatever the weight type: allocate that
 * once at model load. */
size_t kn_matmul_w_scratch(int n, int k, int w_type);

/* Embedding lookup (get_rows.c): out row r = dequantized row ids[r] of a
 * table of rows of dim values in ggml type `type` (row stride row_bytes).
 * out: (n, dim). The type must be ggml_type_supported and dim a multiple
 * of its block size. */
void kn_get_rows(float *out, const void *table, uint32_t type, size_t row_bytes,
                 const int32_t *ids, int n, int dim);

/* RoPE layouts (llama.cpp's rope modes). NORM rotates adjacent pairs
 * (x[2i], x[2i+1]) - what GGUF `llama` expects, its Q/K rows being permuted
 * by the converter; NEOX rotates (x[i], x[i + n_rot/2]) - HF's rotate-half,
 * used by qwen2. */
enum kn_rope_mode { KN_ROPE_NORM = 0, KN_ROPE_NEOX = 2 };

/* Rotary position embedding in place (rope.c). x: (n_tok, n_head *
 * head_dim); token t is at position pos[t]. For pair i < n_rot/2 the angle is
 *   pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]
 * (freq_factors NULL = all 1; llama3-style scaling stores them in
 * rope_freqs.weight). Dimensions >= n_rot pass through. The angle and its
 * sine/cosine are computed in double and rounded once to float; the
 * rotation itself is float. n_rot even, <= head_dim. */
void kn_rope_f32(float *x, int n_tok, int n_head, int head_dim, int n_rot, const int32_t *pos,
                 float freq_base, float freq_scale, const float *freq_factors,
                 enum kn_rope_mode mode);

/* The same in two parts, for a forward pass that rotates q and k of every
 * layer at the same positions: kn_rope_table fills cs (n_tok * n_rot
 * floats: per token, cos then sin of each of the n_rot/2 angles, exactly
 * the values kn_rope_f32 computes), kn_rope_apply_f32 rotates with it;
 * together they give kn_rope_f32's bits. */
void kn_rope_table(float *cs, int n_tok, int n_rot, const int32_t *pos, float freq_base,
                   float freq_scale, const float *freq_factors);
void kn_rope_apply_f32(float *x, int n_tok, int n_head, int head_dim, int n_rot, const float *cs,
                       enum kn_rope_mode mode);

/* Causal attention of one query token over a paged K/V cache, GQA (attention.c).
 *   out:   (n_head * head_dim)              result, heads concatenated
 *   q:     (n_head * head_dim)              the token's query (after RoPE)
 *   k, v:  cache base pointers of one layer; the value of position p of
 *          this sequence, kv head h, lives at
 *            base + block_table[p / block_tokens] * block_stride
 *                 + (p % block_tokens) * (n_head_kv * head_dim) + h * head_dim
 *   n_ctx: positions 0..n_ctx-1 are attended (n_ctx = query position + 1)
 *   scores: scratch of n_ctx floats
 * Query head h reads kv head h / (n_head / n_head_kv). Scores are q.k
 * (8 fma lanes, fixed combination) * scale in float; softmax subtracts the
 * max, sums exp() in float in position order, and the weighted sum of V is
 * an fma chain per dimension in position order (exact order in
 * attention.c). The scalar, AVX2 and AVX-512 paths (kn_simd_level) give
 * identical bits. */
void kn_attn_paged_f32(float *out, const float *q, const float *k, const float *v,
                       const int32_t *block_table, int block_tokens, size_t block_stride,
                       int n_ctx, int n_head, int n_head_kv, int head_dim, float scale,
                       float *scores);

/* The same for query heads h0..h1-1 only (out and q still point at head
 * 0); each head's numbers are those kn_attn_paged_f32 computes for it. */
void kn_attn_paged_heads_f32(float *out, const float *q, const float *k, const float *v,
                             const int32_t *block_table, int block_tokens, size_t block_stride,
                             int n_ctx, int n_head, int n_head_kv, int head_dim, int h0, int h1,
                             float scale, float *scores);

/* The windowed, soft-capped variant (sliding-window layers; Gemma 2's
 * attention soft-capping): positions p0..n_ctx-1 only are attended
 * (0 <= p0 < n_ctx; scores is still indexed by position, so it needs n_ctx
 * floats), and each scaled score s becomes softcap * kn_tanh(s / softcap)
 * before the softmax (softcap 0 = none). With p0 = 0 and softcap = 0 the
 * numbers are kn_attn_paged_heads_f32's; every SIMD level gives the scalar
 * path's bits. */
void kn_attn_paged_win_heads_f32(float *out, const float *q, const float *k, const float *v,
                                 const int32_t *block_table, int block_tokens,
                                 size_t block_stride, int p0, int n_ctx, int n_head, int n_head_kv,
                                 int head_dim, int h0, int h1, float scale, float softcap,
                                 float *scores);

/* The same on a binary16 cache (the engine's; k, v hold IEEE half bits,
 * block_stride and the layout counted in elements as above): each K/V
 * element is converted to float exactly and the float operations above run
 * on it, so the result is kn_attn_paged_win_heads_f32's on the converted
 * cache, bit for bit, at every SIMD level (the SIMD paths need F16C). */
void kn_attn_paged_win_heads_f16(float *out, const float *q, const uint16_t *k, const uint16_t *v,
                                 const int32_t *block_table, int block_tokens,
                                 size_t block_stride, int p0, int n_ctx, int n_head, int n_head_kv,
                                 int head_dim, int h0, int h1, float scale, float softcap,
                                 float *scores);

/* ---- grouped attention of a tile of queries (attn_tile.c): the engine's op ----
 *
 * The same attention as kn_attn_paged_win_heads_f32, for n_q query tokens
 * of one sequence at once (a decode token, or a run of a prefill chunk),
 * grouped by kv head: each K/V row is read (and converted to float) once
 * for all the query heads of its GQA group and all the tile's queries,
 * instead of once per query head. Every query head's numbers are exactly
 * those kn_attn_paged_win_heads_f32 computes for it on the cache converted
 * to float (the order of every sum is the same: q.k in 8 lanes, the
 * softmax of softmax.h, V in position order), at every SIMD level - so a
 * token's result depends neither on the tile it shares nor on the batch.
 *
 * The cache may hold float32, IEEE binary16 or int8 values (enum
 * kn_kv_type). int8 (KN_KV_Q8): symmetric, one float32 scale per 32
 * consecutive values of a position's row (kn_kv_quantize_q8), value = q *
 * d computed in float when read (one rounding); kv_dim = n_head_kv *
 * head_dim must then be a multiple of 32 (KN_KV_F16_Q8: binary16 keys,
 * int8 values, likewise). */
enum kn_kv_type {
    KN_KV_F32 = 0,
    KN_KV_F16 = 1,
    KN_KV_Q8 = 2,
    KN_KV_F16_Q8 = 3, /* binary16 keys, int8 values (k as KN_KV_F16, v and v_scale as KN_KV_Q8) */
};
#define KN_KV_Q8_BLOCK 32
#define KN_ATTN_TILE 1 /* (for benchmarks built against older trees) */

/* One layer of a paged cache as attention reads it: value d of kv head j
 * at position p is element
 *   table[p / block_tokens] * block_stride + (p % block_tokens) * kv_dim + j * head_dim + d
 * of k (v), kv_dim = n_head_kv * head_dim, element type by `type`
 * (float, uint16_t binary16 bits, int8_t; KN_KV_F16_Q8: k binary16, v
 * int8); an int8 element e's scale is k_scale[e / 32] (v_scale). */
struct kn_kv_layer {
    int type;                       /* enum kn_kv_type */
    const void *k, *v;
    const float *k_scale, *v_scale; /* the int8 ones' scales, else NULL */
    const int32_t *block_table;
    int block_tokens;
    size_t block_stride;            /* elements per block */
};

/* Attention of the query tokens i < n_q, each over positions
 * max(0, n_ctx[i] - window) .. n_ctx[i] - 1 (window 0: all from 0), query
 * heads h0..h1-1 only (0 <= h0 < h1 <= n_head). Token i's q is row i of q
 * (q_stride floats apart, head h at h * head_dim), its output row i of out
 * (out_stride apart, heads outside h0..h1-1 untouched). 1 <= n_ctx[i] <=
 * n_ctx_max of the scratch. Scores are soft-capped by softcap (0 = none)
 * as kn_attn_paged_win_heads_f32's. scratch: kn_attn_tile_scratch_bytes
 * (n_q, ...) bytes, any alignment, clobbered. Can't fail; allocates
 * nothing. */
void kn_attn_tile(float *out, size_t out_stride, const float *q, size_t q_stride,
                  const int32_t *n_ctx, int n_q, const struct kn_kv_layer *kv, int n_head,
                  int n_head_kv, int head_dim, int h0, int h1, int window, float scale,
                  float softcap, void *scratch);

/* Scratch bytes kn_attn_tile needs for tiles of up to n_q queries whose
 * n_ctx are at most n_ctx_max: one score row per (query, head of a group)
 * plus two staging buffers; SIZE_MAX on overflow. */
size_t kn_attn_tile_scratch_bytes(int n_q, int n_head, int n_head_kv, int head_dim, int n_ctx_max);

/* The number of queries per tile the engine uses for this GQA shape (so
 * that a tile holds about 24 (query, head) rows; at least 1, at most
 * KN_ATTN_TILE_Q_MAX). Speed only: the numbers do not depend on it. */
#define KN_ATTN_TILE_Q_MAX 32
int kn_attn_tile_queries(int n_head, int n_head_kv);

/* int8 K/V rows (attn_tile.c): n values (a multiple of 32) of x into q
 * and one scale per 32 in d: d = max|x| / 127, q = x / d rounded to
 * nearest (ties away from zero), |x - q d| <= d / 2 (within float
 * rounding); an all-zero block has d = 0; a block holding a NaN or an
 * infinity gets d = NaN (it reads back as NaN, as such a value would in
 * the other caches). Scalar, a pure function of each 32 values. */
void kn_kv_quantize_q8(int8_t *q, float *d, const float *x, size_t n);

/* The values a KN_KV_Q8 cache holds: x[i] = q[i] * d[i / 32] in float. */
void kn_kv_dequantize_q8(float *x, const int8_t *q, const float *d, size_t n);

/* SwiGLU (swiglu.c): out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)).
 * out may alias gate or up. */
void kn_swiglu_f32(float *out, const float *gate, const float *up, size_t n);

/* GeGLU (geglu.c): out[i] = gelu_tanh(gate[i]) * up[i], PyTorch's
 * gelu(approximate="tanh") in float. out may alias gate or up. CPU only. */
void kn_geglu_f32(float *out, const float *gate, const float *up, size_t n);

/* Scaling (scale.c): x[i] *= s. CPU only. */
void kn_scale_f32(float *x, float s, size_t n);

/* Soft-capping (scale.c): x[i] = cap * kn_tanh(x[i] / cap), cap > 0. CPU only. */
void kn_softcap_f32(float *x, float cap, size_t n);

/* tanh in float, within 1e-6 relative of the exact value, ~4x faster than
 * libm's tanhf (scale.c). Can't fail. */
float kn_tanh(float x);

/* Residual add (add.c): x[i] += y[i]. */
void kn_add_f32(float *x, const float *y, size_t n);

/* Add a bias row to each of n rows (add.c): x (n, dim) += b (dim). */
void kn_add_bias_f32(float *x, const float *b, int n, int dim);

/* Index of the largest of x[0..n) (argmax.c; the first one on ties; NaNs
 * never win); -1 for n <= 0. */
int kn_argmax_f32(const float *x, int n);

/* ==== CUDA backend (cuda/<op>.cu; defined only with make CUDA=1) =================== */

/* A struct kn_cuda is one device context: the device, a stream, a cuBLAS
 * handle, and a scratch arena allocated once at init (no cudaMalloc per op).
 *
 * Two layers:
 *   - device-pointer ops (kn_cuda_dequant, kn_cuda_rmsnorm, kn_cuda_rope,
 *     kn_cuda_swiglu, kn_cuda_add, kn_cuda_kv_append, kn_cuda_attention,
 *     kn_cuda_gemm_bf16, kn_cuda_argmax ...): arguments are device pointers,
 *     work is enqueued on the context's stream, nothing is allocated and
 *     nothing synchronises. Those are what worker/engine/forward_cuda.c
 *     chains into the forward pass.
 *   - memory helpers (kn_cuda_alloc/_release at load time, _upload,
 *     _download, _memset, _sync) and the *_host entry points that copy
 *     inputs through the scratch arena (for the self-check).
 *
 * bf16 tensors are passed as void * (2 bytes per value, bfloat16 bits).
 * Pointers named "device" must come from kn_cuda_alloc (or the scratch).
 *
 * Errors: ERR_NODEVICE (no usable GPU / driver), ERR_TOOBIG (shapes larger
 * than the scratch arena or the workspace given), ERR_UNSUPPORTED (a weight
 * type or head size the kernels do not handle), ERR_INVAL (bad shapes),
 * ERR_NOMEM (device memory exhausted), ERR_INTERNAL (another CUDA or cuBLAS
 * error; the original code is logged).
 *
 * Threads: a context belongs to one thread at a time. */
struct kn_cuda;

/* ---- context and memory (cuda/device.cu; the step functions never allocate) ---- */

/* Open device ordinal with a scratch arena of scratch_bytes. */
int kn_cuda_new(int ordinal, size_t scratch_bytes, struct kn_cuda **out);
void kn_cuda_free(struct kn_cuda *c); /* NULL ok */

/* "NVIDIA H200 (sm_90, 139.8 GiB)" into out. Returns out. */
const char *kn_cuda_describe(const struct kn_cuda *c, char *out, size_t out_len);

/* Number of streaming multiprocessors (sizes the attention split). */
int kn_cuda_sm_count(const struct kn_cuda *c);

/* cudaMalloc of bytes (>0) into *out. ERR_NOMEM when the device is full. */
int kn_cuda_alloc(struct kn_cuda *c, size_t bytes, void **out);
void kn_cuda_release(struct kn_cuda *c, void *p); /* NULL ok */
/* Free and total device memory in bytes. */
int kn_cuda_mem_info(struct kn_cuda *c, size_t *free_bytes, size_t *total_bytes);
/* Host -> device copy on the stream (returns when src may be reused). */
int kn_cuda_upload(struct kn_cuda *c, void *dst, const void *src, size_t bytes);
/* Device -> host copy; waits for all work queued before it. */
int kn_cuda_download(struct kn_cuda *c, void *dst, const void *src, size_t bytes);
/* Device -> device copy on the stream. */
int kn_cuda_copy(struct kn_cuda *c, void *dst, const void *src, size_t bytes);
int kn_cuda_memset(struct kn_cuda *c, void *dst, int byte, size_t bytes);
/* Wait for the stream. */
int kn_cuda_sync(struct kn_cuda *c);

/* Events, for benchmarks: elapsed ms of the work enqueued between
 * kn_cuda_timer_start and kn_cuda_timer_stop (which synchronises). */
int kn_cuda_timer_start(struct kn_cuda *c);
int kn_cuda_timer_stop(struct kn_cuda *c, double *ms);

/* ---- ops on device pointers (one .cu file each) ---- */

/* dequant.cu. 1 if kn_cuda_dequant handles ggml type id type. */
int kn_cuda_dequant_supported(uint32_t type);

/* dequant.cu. Dequantize rows of a GGUF tensor already copied to the device:
 * row r of out (cols values, f32 or bf16 by out_bf16) = row ids[r] of src
 * (ids device (n_rows) int32, or NULL for rows 0..n_rows-1), src row stride
 * row_bytes. cols a multiple of the type's block size. f32 output is
 * bit-identical to kn_dequant_row (same float operations, no
 * contraction); bf16 output is that value rounded to nearest even.
 * This is both the load-time weight conversion and the embedding lookup. */
int kn_cuda_dequant(struct kn_cuda *c, void *out, int out_bf16, const void *src, uint32_t type,
                    size_t row_bytes, const int32_t *ids, int n_rows, int cols);

/* rmsnorm.cu. RMSNorm: out row r = x row rows[r] (rows device (n_rows) or
 * NULL = r) normalised times w; out f32 or bf16 (out_bf16), (n_rows, dim)
 * dense. */
int kn_cuda_rmsnorm(struct kn_cuda *c, void *out, int out_bf16, const float *x, const float *w,
                    const int32_t *rows, int n_rows, int dim, float eps);
/* rmsnorm.cu. Device-pointer f32 RMSNorm, dense rows (the original launcher). */
int kn_cuda_rmsnorm_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps);

/* rope.cu. RoPE in place on x (n_tok rows of row_stride floats; heads at
 * the start of each row, head_dim apart). pos device (n_tok). theta device
 * (n_rot/2) double: the angle per position unit of pair i,
 * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i] (kn_cuda_rope_theta
 * computes it on the host). neox: 0 = NORM pairs (2i, 2i+1), 1 = NEOX
 * (i, i + n_rot/2). */
int kn_cuda_rope(struct kn_cuda *c, float *x, int n_tok, size_t row_stride, int n_head,
                 int head_dim, int n_rot, const int32_t *pos, const double *theta, int neox);
/* rope.cu. Fill theta_host (n_rot/2) as described above. */
void kn_cuda_rope_theta(double *theta_host, int n_rot, float freq_base, float freq_scale,
                        const float *freq_factors);

/* swiglu.cu. out (n_rows, n_cols) dense, f32 or bf16 = silu(gate) * up,
 * gate and up rows of in_stride floats. */
int kn_cuda_swiglu(struct kn_cuda *c, void *out, int out_bf16, const float *gate, const float *up,
                   int n_rows, int n_cols, size_t in_stride);
/* add.cu. x[i] += y[i], n values. */
int kn_cuda_add(struct kn_cuda *c, float *x, const float *y, size_t n);
/* add.cu. x (n_rows rows of row_stride floats, first dim used) += b (dim). */
int kn_cuda_add_bias(struct kn_cuda *c, float *x, const float *b, int n_rows, int dim,
                     size_t row_stride);
/* to_bf16.cu. bf16 out[i] = in[i] rounded to nearest even. */
int kn_cuda_to_bf16(struct kn_cuda *c, void *out, const float *in, size_t n);
/* argmax.cu. ids[r] = index of the largest value of row r of x (n_rows,
 * n_cols) f32, first on ties, NaN never wins (-1 if all NaN) - as
 * kn_argmax_f32. */
int kn_cuda_argmax(struct kn_cuda *c, int32_t *ids, const float *x, int n_rows, int n_cols);
/* fill_random.cu. Fill n bf16 values with uniform random values in
 * [-scale, scale) from a counter-based hash of (seed, index) (synthetic
 * benchmark weights). */
int kn_cuda_fill_random_bf16(struct kn_cuda *c, void *out, size_t n, uint64_t seed, float scale);

/* kvcache.cu. Append K and V of n_tok tokens to a paged bf16 cache (one
 * layer): cache row slot[t] (device (n_tok) int64: block * block_tokens +
 * offset) of k_cache/v_cache (rows of kv_dim bf16) = k/v row t (f32, rows
 * of in_stride floats), rounded to bf16. */
int kn_cuda_kv_append(struct kn_cuda *c, void *k_cache, void *v_cache, const float *k,
                      const float *v, size_t in_stride, const int64_t *slot, int n_tok,
                      int kv_dim);

/* attention.cu. Causal GQA attention over the paged bf16 cache, decode and
 * prefill in one launch. Every query token t (of sequence tok_seq[t] at
 * position tok_pos[t]) attends to positions 0..tok_pos[t] of its sequence,
 * found through its block table (block_tables + seq * max_blocks). Tokens
 * are grouped into tiles of consecutive batch tokens of one sequence
 * (tiles device (n_tiles, 2): first token, count <= tile_max; every token in
 * exactly one tile) that share the K/V loads. The context is split into
 * chunks of positions processed in parallel (flash-decoding) and merged
 * with their log-sum-exp; work is the partials' workspace. */
struct kn_cuda_attn {
    void *out;                   /* (n_tok, n_head*head_dim) f32 or bf16 (out_bf16) */
    int out_bf16;
    const float *q;              /* (n_tok) rows of q_stride floats, heads first, after RoPE */
    size_t q_stride;
    const void *k_cache, *v_cache; /* one layer: rows of n_head_kv*head_dim bf16 */
    const int32_t *block_tables; /* (n_seq, max_blocks) */
    int max_blocks;
    const int32_t *tok_seq, *tok_pos; /* (n_tok) */
    const int32_t *tiles;        /* (n_tiles, 2) */
    int n_tiles, tile_max;
    int n_tok, n_head, n_head_kv, head_dim, block_tokens;
    int max_ctx;                 /* >= every tok_pos + 1 (sizes the split) */
    float scale;
    float *work;                 /* workspace, work_bytes */
    size_t work_bytes;
};
/* head_dim must be a multiple of 8 up to 256 and n_head / n_head_kv <= 32:
 * otherwise ERR_UNSUPPORTED. ERR_TOOBIG when work cannot hold one split per token. */
int kn_cuda_attention(struct kn_cuda *c, const struct kn_cuda_attn *a);
/* Largest tile_max the kernel accepts for this GQA group size. */
int kn_cuda_attention_tile_max(int n_head, int n_head_kv);
/* Workspace bytes that allow the full split for n_tok tokens. */
size_t kn_cuda_attention_work_bytes(int n_tok, int n_head, int head_dim, int max_ctx);

/* gemm.cu. out (n, m) f32 = x (n, k) bf16 @ w (m, k)^T bf16, plus beta * out
 * (beta 0 or 1: 1 adds the product into out, the residual add for free).
 * cublasGemmEx, fp32 accumulation, tensor cores. ldo: row stride of out. */
int kn_cuda_gemm_bf16(struct kn_cuda *c, float *out, size_t ldo, const void *x, const void *w,
                      int n, int k, int m, float beta);
/* matvec.cu. Batch-1 decode: out (m) = W (m, k) @ x (k), or out += that
 * with accumulate, W the raw GGUF rows (row stride row_bytes) of a type
 * kn_cuda_matvec_supported accepts (Q4_0, Q4_1, Q8_0), x f32, k a multiple
 * of 32; dequantization fused into the product. */
int kn_cuda_matvec_supported(uint32_t type);
int kn_cuda_matvec_q(struct kn_cuda *c, float *out, int accumulate, const float *x, const void *w,
                     uint32_t type, size_t row_bytes, int m, int k);
/* matmul.cu. fp32 SGEMM with TF32 disabled (device pointers). */
int kn_cuda_matmul_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n, int k,
                       int m);

/* ---- host-copy entry points (self-check) ---- */

/* rmsnorm.cu. RMSNorm, same contract as kn_rmsnorm_f32. Tolerance vs the
 * CPU reference: 1e-5 relative (different summation order only). */
int kn_cuda_rmsnorm_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w,
                             int n_rows, int dim, float eps);

/* matmul.cu. out (n, m) = x (n, k) @ w (m, k)^T through cuBLAS SGEMM (TF32
 * tensor cores disabled: strict fp32). Tolerance vs the CPU reference: 1e-4
 * relative L2. */
int kn_cuda_matmul_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w, int n,
                            int k, int m);

#ifdef __cplusplus
}
#endif

#endif
