/*
 * kn_cuda.h - the CUDA backend's C interface (built only with make CUDA=1).
 *
 * Plain C types only, so worker/ and tests include this without CUDA headers.
 * A struct kn_cuda is one device context: the device, a stream, a cuBLAS
 * handle, and a scratch arena allocated once at init (no cudaMalloc per op).
 *
 * Two layers:
 *   - device-pointer ops (kn_cuda_dequant, kn_cuda_rmsnorm, kn_cuda_rope,
 *     kn_cuda_swiglu, kn_cuda_add, kn_cuda_kv_append, kn_cuda_attention,
 *     kn_cuda_gemm_bf16, kn_cuda_argmax ...): arguments are device pointers,
 *     work is enqueued on the context's stream, nothing is allocated and
 *     nothing synchronises. Each op lives in its own .cu file whose header
 *     comment gives shapes, layouts, accumulation type and the tolerance
 *     against its CPU reference (kernels/kn.h, kernels/cpu/ops.h). Those are
 *     what worker/engine/forward_cuda.c chains into the forward pass.
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
 * Threads: a context belongs to one thread at a time.
 */
#ifndef KERNELS_CUDA_KN_CUDA_H
#define KERNELS_CUDA_KN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kn_cuda;

/* Open device ordinal with a scratch arena of scratch_bytes. */
int kn_cuda_new(int ordinal, size_t scratch_bytes, struct kn_cuda **out);
void kn_cuda_free(struct kn_cuda *c); /* NULL ok */

/* "NVIDIA H200 (sm_90, 139.8 GiB)" into out. Returns out. */
const char *kn_cuda_describe(const struct kn_cuda *c, char *out, size_t out_len);

/* Number of streaming multiprocessors (sizes the attention split). */
int kn_cuda_sm_count(const struct kn_cuda *c);

/* ---- memory (load time; the step functions never allocate) ---- */

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

/* ---- events, for benchmarks: elapsed ms of the work enqueued between
 * kn_cuda_timer_start and kn_cuda_timer_stop (which synchronises). ---- */
int kn_cuda_timer_start(struct kn_cuda *c);
int kn_cuda_timer_stop(struct kn_cuda *c, double *ms);

/* ---- ops on device pointers (dequant.cu, rmsnorm.cu, rope.cu, swiglu.cu,
 * kvcache.cu, attention.cu, gemm.cu, argmax in swiglu.cu) ---- */

/* 1 if kn_cuda_dequant handles ggml type id type. */
int kn_cuda_dequant_supported(uint32_t type);

/* Dequantize rows of a GGUF tensor already copied to the device:
 * row r of out (cols values, f32 or bf16 by out_bf16) = row ids[r] of src
 * (ids device (n_rows) int32, or NULL for rows 0..n_rows-1), src row stride
 * row_bytes. cols a multiple of the type's block size. f32 output is
 * bit-identical to quant_dequant_row (same float operations, no
 * contraction); bf16 output is that value rounded to nearest even.
 * This is both the load-time weight conversion and the embedding lookup. */
int kn_cuda_dequant(struct kn_cuda *c, void *out, int out_bf16, const void *src, uint32_t type,
                    size_t row_bytes, const int32_t *ids, int n_rows, int cols);

/* RMSNorm: out row r = x row rows[r] (rows device (n_rows) or NULL = r)
 * normalised times w; out f32 or bf16 (out_bf16), (n_rows, dim) dense. */
int kn_cuda_rmsnorm(struct kn_cuda *c, void *out, int out_bf16, const float *x, const float *w,
                    const int32_t *rows, int n_rows, int dim, float eps);
/* Device-pointer f32 RMSNorm (the original launcher). */
int kn_cuda_rmsnorm_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps);

/* RoPE in place on x (n_tok rows of row_stride floats; heads at the start
 * of each row, head_dim apart). pos device (n_tok). theta device
 * (n_rot/2) double: the angle per position unit of pair i,
 * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i] (kn_cuda_rope_theta
 * computes it on the host). neox: 0 = NORM pairs (2i, 2i+1), 1 = NEOX
 * (i, i + n_rot/2). */
int kn_cuda_rope(struct kn_cuda *c, float *x, int n_tok, size_t row_stride, int n_head,
                 int head_dim, int n_rot, const int32_t *pos, const double *theta, int neox);
/* Fill theta_host (n_rot/2) as described above. */
void kn_cuda_rope_theta(double *theta_host, int n_rot, float freq_base, float freq_scale,
                        const float *freq_factors);

/* out (n_rows, n_cols) dense, f32 or bf16 = silu(gate) * up, gate and up
 * rows of in_stride floats. */
int kn_cuda_swiglu(struct kn_cuda *c, void *out, int out_bf16, const float *gate, const float *up,
                   int n_rows, int n_cols, size_t in_stride);
/* x[i] += y[i], n values. */
int kn_cuda_add(struct kn_cuda *c, float *x, const float *y, size_t n);
/* x (n_rows rows of row_stride floats, first dim used) += b (dim). */
int kn_cuda_add_bias(struct kn_cuda *c, float *x, const float *b, int n_rows, int dim,
                     size_t row_stride);
/* bf16 out[i] = in[i] rounded to nearest even. */
int kn_cuda_to_bf16(struct kn_cuda *c, void *out, const float *in, size_t n);
/* ids[r] = index of the largest value of row r of x (n_rows, n_cols) f32,
 * first on ties, NaN never wins (-1 if all NaN) - as kn_argmax_f32. */
int kn_cuda_argmax(struct kn_cuda *c, int32_t *ids, const float *x, int n_rows, int n_cols);
/* Fill n bf16 values with uniform random values in [-scale, scale) from
 * a counter-based hash of (seed, index) (synthetic benchmark weights). */
int kn_cuda_fill_random_bf16(struct kn_cuda *c, void *out, size_t n, uint64_t seed, float scale);

/* Append K and V of n_tok tokens to a paged bf16 cache (one layer):
 * cache row slot[t] (device (n_tok) int64: block * block_tokens + offset)
 * of k_cache/v_cache (rows of kv_dim bf16) = k/v row t (f32, rows of
 * in_stride floats), rounded to bf16. */
int kn_cuda_kv_append(struct kn_cuda *c, void *k_cache, void *v_cache, const float *k,
                      const float *v, size_t in_stride, const int64_t *slot, int n_tok,
                      int kv_dim);

/* Causal GQA attention over the paged bf16 cache, decode and prefill in
 * one launch (attention.cu). Every query token t (of sequence tok_seq[t] at
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

/* out (n, m) f32 = x (n, k) bf16 @ w (m, k)^T bf16, plus beta * out
 * (beta 0 or 1: 1 adds the product into out, the residual add for free).
 * cublasGemmEx, fp32 accumulation, tensor cores. ldo: row stride of out. */
int kn_cuda_gemm_bf16(struct kn_cuda *c, float *out, size_t ldo, const void *x, const void *w,
                      int n, int k, int m, float beta);
/* Batch-1 decode: out (m) = W (m, k) @ x (k), or out += that with
 * accumulate, W the raw GGUF rows (row stride row_bytes) of a type
 * kn_cuda_matvec_supported accepts (Q4_0, Q4_1, Q8_0), x f32, k a multiple
 * of 32; dequantization fused into the product (matvec.cu). */
int kn_cuda_matvec_supported(uint32_t type);
int kn_cuda_matvec_q(struct kn_cuda *c, float *out, int accumulate, const float *x, const void *w,
                     uint32_t type, size_t row_bytes, int m, int k);
/* fp32 SGEMM with TF32 disabled (device pointers). */
int kn_cuda_matmul_f32(struct kn_cuda *c, float *out, const float *x, const float *w, int n, int k,
                       int m);

/* ---- host-copy entry points (self-check) ---- */

/* RMSNorm, same contract as kn_rmsnorm_f32. Tolerance vs the CPU reference:
 * 1e-5 relative (different summation order only). */
int kn_cuda_rmsnorm_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w,
                             int n_rows, int dim, float eps);

/* out (n, m) = x (n, k) @ w (m, k)^T through cuBLAS SGEMM (TF32 tensor cores
 * disabled: strict fp32). Tolerance vs the CPU reference: 1e-4 relative L2. */
int kn_cuda_matmul_f32_host(struct kn_cuda *c, float *out, const float *x, const float *w, int n,
                            int k, int m);

#ifdef __cplusplus
}
#endif

#endif
