/*
 * ops.h - CPU reference ops of the transformer forward pass.
 *
 * Each op is plain C in its own file under kernels/cpu/ (embed.c, rope.c,
 * attention.c, swiglu.c): the CPU path of the engine and the reference the
 * CUDA kernels will be tested against. Tensors are dense row-major float32
 * unless named otherwise; shapes are (rows, cols) in the comments. Ops can't
 * fail: shapes and indices are the caller's contract (worker/engine/forward.c
 * validates everything that came from outside before calling them).
 *
 * Pure functions, no state: safe from any thread on disjoint outputs.
 */
#ifndef KERNELS_CPU_OPS_H
#define KERNELS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Embedding lookup: out row r = dequantized row ids[r] of a table of rows of
 * dim values in ggml type `type` (row stride row_bytes). out: (n, dim).
 * The type must be supported by kernels/cpu/quant.h and dim a multiple of
 * its block size. */
void kn_get_rows(float *out, const void *table, uint32_t type, size_t row_bytes,
                 const int32_t *ids, int n, int dim);

/* RoPE layouts (llama.cpp's rope modes). NORM rotates adjacent pairs
 * (x[2i], x[2i+1]) - what GGUF `llama` expects, its Q/K rows being permuted
 * by the converter; NEOX rotates (x[i], x[i + n_rot/2]) - HF's rotate-half,
 * used by qwen2. */
enum kn_rope_mode { KN_ROPE_NORM = 0, KN_ROPE_NEOX = 2 };

/* Rotary position embedding in place. x: (n_tok, n_head * head_dim); token t
 * is at position pos[t]. For pair i < n_rot/2 the angle is
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

/* Causal attention of one query token over a paged K/V cache (GQA).
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
 * attention.c). The scalar, AVX2 and AVX-512 paths (kn_simd_level) give identical
 * bits. */
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

/* SwiGLU: out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)).
 * out may alias gate or up. */
void kn_swiglu_f32(float *out, const float *gate, const float *up, size_t n);

/* x[i] += y[i]. */
void kn_add_f32(float *x, const float *y, size_t n);

/* Add a bias row to each of n rows: x (n, dim) += b (dim). */
void kn_add_bias_f32(float *x, const float *b, int n, int dim);

/* Index of the largest of x[0..n) (the first one on ties; NaNs never win);
 * -1 for n <= 0. */
int kn_argmax_f32(const float *x, int n);

#endif
