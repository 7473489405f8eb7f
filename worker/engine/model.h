/*
 * model.h - a decoder-only transformer loaded from GGUF (llama, qwen2,
 * qwen3, gemma2, gemma3, phi3), and its batched forward pass on the CPU.
 *
 * Loading (worker/engine/model.c). model_load maps the GGUF file (text/gguf.h)
 * and reads the hyperparameters of `general.architecture` (anything else:
 * "unsupported architecture 'mamba'"). Weights are not copied: each is a
 * pointer into the mapping, kept in its file type (norms and biases must be
 * F32; projection matrices any type kernels/cpu/quant.c decodes). Every
 * tensor the architecture needs is checked for presence, type and exact
 * shape against the hyperparameters, with an error naming it
 * ("blk.3.attn_k.weight: shape [64, 64], expected [64, 32]", "missing
 * tensor blk.3.attn_q_norm.weight"). output.weight absent = tied embeddings
 * (token_embd is the LM head). What each architecture adds to the llama
 * block, all read from the GGUF (tensor names as llama.cpp's converter
 * writes them):
 *   llama   Q/K rows permuted by the converter, NORM (adjacent-pair) RoPE;
 *           rope_freqs.weight (llama3 scaling) and linear rope.scaling;
 *           Mistral-style sliding window if attention.sliding_window is set
 *   qwen2   NEOX (rotate-half) RoPE, Q/K/V biases
 *   qwen3   NEOX, per-head RMSNorm of q and k (attn_{q,k}_norm) before RoPE
 *   gemma2  NEOX, embedding * sqrt(n_embd), GeGLU (tanh GELU), RMSNorm of the
 *           attention and FFN outputs (post_attention_norm, post_ffw_norm),
 *           the converter having folded Gemma's (1 + w) into the weights;
 *           even layers slide (window attention.sliding_window), attention
 *           and final logit soft-capping
 *   gemma3  gemma2 without soft-capping, plus q/k norms; 5 of 6 layers slide
 *           (attention.sliding_window_pattern) with rope.freq_base_swa
 *           (default 10000), the others use rope.freq_base and its scaling
 *   phi3    NEOX, fused attn_qkv and ffn_up (gate|up) used as row ranges,
 *           LongRoPE rope_factors_{short,long}.weight chosen per context by
 *           n_ctx vs rope.scaling.original_context_length, cos/sin times
 *           rope.scaling.attn_factor
 *   bert    an encoder for embeddings only (worker/engine/encoder.h): learned
 *           absolute position_embd, token_types (row 0 used),
 *           token_embd_norm (LayerNorm with bias), post-LN blocks
 *           (attn_output_norm, layer_output_norm, with biases), biases on
 *           every projection, ffn_up/ffn_down with GELU (no gate), no
 *           output_norm / LM head; attention.causal must be false;
 *           attention.layer_norm_epsilon. Its model_forward is the
 *           encoder's (encoder.h): whole inputs per step, see model_forward.
 * YaRN and other rope scaling types are refused. The CUDA forward
 * implements llama and qwen2 only; a CUDA context for the others is
 * refused (ERR_UNSUPPORTED).
 *
 * Running (worker/engine/forward.c, the dispatch to forward_cpu.c or
 * forward_cuda.c). A struct model_ctx holds every buffer of the forward pass, sized at creation for n_batch_max tokens per step, and the
 * paged KV cache (worker/engine/kv.h) for n_seq_max sequence slots; model_forward
 * never allocates. One step takes a flat batch of tokens from any number of
 * sequences - each token with its id, position and slot - (prefill chunks
 * and decode tokens mixed), appends their K/V to their slots, and returns
 * float32 logits for the tokens the caller marked. A token's logits are
 * bit-identical whatever else shares the batch (every op is per token with
 * a fixed accumulation order), so a sequence run alone, in a batch, or
 * prefilled in chunks gives the same numbers (tests/unit/worker/engine/test_model.c).
 *
 * Threads: a struct model is immutable after model_load and may be shared
 * by any number of contexts on any threads; a model_ctx belongs to one
 * thread at a time. A struct kn_pool may be given at context creation for
 * the matmuls and the attention (the reference matmul ignores it).
 */
#ifndef WORKER_MODEL_H
#define WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "text/gguf.h"
#include "worker/engine/kv.h"

struct kn_pool;
struct tok;
struct chat_tmpl;

enum model_arch {
    MODEL_ARCH_LLAMA = 1,
    MODEL_ARCH_QWEN2 = 2,
    MODEL_ARCH_QWEN3 = 3,
    MODEL_ARCH_GEMMA2 = 4,
    MODEL_ARCH_GEMMA3 = 5,
    MODEL_ARCH_PHI3 = 6,
    MODEL_ARCH_BERT = 7, /* encoder: embeddings only (worker/engine/encoder.h) */
};

/* How a sequence's hidden states become one embedding: `<arch>.pooling_type`
 * as llama.cpp's converter writes it from a sentence-transformers
 * 1_Pooling/config.json (gguf-py PoolingType; absent = NONE). */
enum model_pooling {
    MODEL_POOL_NONE = 0, /* not an embedding model (or per-token outputs) */
    MODEL_POOL_MEAN = 1, /* mean of the sequence's final-norm hidden states */
    MODEL_POOL_CLS = 2,  /* the first token's */
    MODEL_POOL_LAST = 3, /* the last token's (decoder embedders: Qwen3-Embedding) */
    MODEL_POOL_RANK = 4, /* reranker head: not supported for embeddings */
};

/* Feed-forward activation: silu(gate) * up, or gelu_tanh(gate) * up. */
enum model_ffn_act { MODEL_FFN_SWIGLU = 0, MODEL_FFN_GEGLU = 1 };

/* Caps on hyperparameters (far above real models; keep hostile headers
 * from sizing absurd buffers). Shapes are also bounded by the file. */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_EMBD (1 << 16)
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_FF (1 << 20)
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_CTX (1 << 20)

struct model_hparams {
    enum model_arch arch;
    int n_layer;
    int n_embd;            /* hidden size */
    int n_head, n_head_kv; /* query heads, key/value heads (GQA: n_head % n_head_kv == 0) */
    int head_dim;          /* attention.key_length (= value_length), default n_embd / n_head */
    int n_rot;             /* rope.dimension_count, default head_dim */
    int n_ff;              /* SwiGLU inner size */
    int n_vocab;           /* rows of token_embd */
    int n_ctx_train;       /* context_length */
    float rms_eps;         /* attention.layer_norm_rms_epsilon */
    float rope_freq_base;  /* rope.freq_base, default 10000 */
    float rope_freq_scale; /* 1 / rope.scaling.factor (linear), default 1 */
    int rope_neox;         /* 1: NEOX (rotate-half) layout, 0: NORM (adjacent pairs) */
    /* what the newer architectures add (defaults = the llama behaviour) */
    enum model_ffn_act ffn_act; /* gemma: GEGLU */
    float embd_scale;      /* embedding rows times this (gemma: sqrt(n_embd) in float); 1 = none */
    float attn_scale;      /* q.k factor: 1/sqrt(head_dim), or attention.scale; gemma 27B:
                            * 1/sqrt(n_embd/n_head) as llama.cpp */
    float attn_softcap;    /* gemma2: attn_logit_softcapping (default 50); 0 = none */
    float final_softcap;   /* gemma2: final_logit_softcapping (default 30); gemma3 when the
                            * key is present; 0 = none */
    int n_swa;             /* attention.sliding_window: a sliding-window layer attends to the
                            * last n_swa positions (itself included); 0 = none */
    float rope_freq_base_swa;  /* rope base of sliding-window layers (gemma3: rope.freq_base_swa,
                                * default 10000; gemma2: rope.freq_base) */
    float rope_freq_scale_swa; /* rope scale of sliding-window layers (gemma3: 1) */
    int n_ctx_orig;        /* phi3 LongRoPE: rope.scaling.original_context_length (0 = none) */
    float rope_attn_factor; /* phi3 LongRoPE: rope.scaling.attn_factor, times cos and sin (1 = none) */
    enum model_pooling pooling; /* <arch>.pooling_type (0..4), default MODEL_POOL_NONE */
    float norm_eps;        /* bert: attention.layer_norm_epsilon (LayerNorm) */
};

/* A weight matrix: rows x cols values of type `type`, row stride row_bytes,
 * pointing into the model's file mapping. (GGUF ne = [cols, rows].) */
struct model_mat {
    const void *data;
    uint32_t type;         /* ggml type id (enum ggml_type) */
    int rows, cols;
    size_t row_bytes;
};

struct model_layer {
    const float *attn_norm;        /* (n_embd); bert: attn_output_norm (after the attention) */
    struct model_mat wq;           /* (n_head*head_dim, n_embd) */
    struct model_mat wk, wv;       /* (n_head_kv*head_dim, n_embd) */
    struct model_mat wo;           /* (n_embd, n_head*head_dim) */
    const float *bq, *bk, *bv;     /* qwen2: (n_head*head_dim), (kv_dim), (kv_dim); else NULL */
    const float *bo;               /* optional attn_output.bias (n_embd) or NULL */
    const float *ffn_norm;         /* (n_embd); bert: layer_output_norm (after the FFN) */
    const float *attn_norm_b, *ffn_norm_b; /* bert: LayerNorm biases (n_embd); else NULL */
    const float *b_up, *b_down;    /* bert: ffn_up.bias (n_ff), ffn_down.bias (n_embd); else NULL */
    struct model_mat w_gate, w_up; /* (n_ff, n_embd) */
    struct model_mat w_down;       /* (n_embd, n_ff) */
    const float *attn_q_norm;      /* qwen3, gemma3: per-head RMSNorm of q (head_dim); else NULL */
    const float *attn_k_norm;      /* ... and of k (head_dim) */
    const float *post_attn_norm;   /* gemma2/3: RMSNorm of the attention output (n_embd); else NULL */
    const float *post_ffn_norm;    /* gemma2/3: RMSNorm of the FFN output (n_embd); else NULL */
    int swa;                       /* 1: sliding-window layer (hp.n_swa, rope_freq_base_swa) */
};

struct model {
    struct gguf *gguf;             /* owned: the mapping all weights point into */
    struct model_hparams hp;
    struct model_mat tok_embd;     /* (n_vocab, n_embd) */
    struct model_mat output;       /* (n_vocab, n_embd): output.weight, or tok_embd when tied */
    int tied;                      /* 1 when output.weight is absent */
    const float *output_norm;      /* (n_embd) */
    const float *rope_freqs;       /* (n_rot/2) frequency divisors or NULL */
    const float *rope_factors_short; /* phi3 LongRoPE (n_rot/2) divisors for contexts up to
                                      * hp.n_ctx_orig, or NULL */
    const float *rope_factors_long;  /* ... and for longer contexts (chosen per model_ctx by n_ctx) */
    struct model_layer *layers;    /* (n_layer) */
    /* bert only (zeroed otherwise) */
    struct model_mat pos_embd;     /* (n_ctx_train, n_embd) absolute position embeddings */
    struct model_mat tok_types;    /* (n_token_types, n_embd); row 0 is added to every token */
    const float *tok_norm, *tok_norm_b; /* (n_embd) LayerNorm of the embeddings */
};

/* Open and validate the GGUF at path. Returns 0 and *out (model_free), or
 * ERR_IO/ERR_PARSE/ERR_TOOBIG/... from gguf_open, ERR_UNSUPPORTED
 * (architecture, rope scaling type, per-layer head counts), ERR_CORRUPT (a
 * tensor missing or of the wrong shape/type, a hyperparameter missing or
 * inconsistent), ERR_NOMEM. err gets a one-line message naming the problem. */
int model_load(const char *path, struct model **out, char *err, size_t err_len);

/* The same on an opened GGUF, whose ownership passes to the model on
 * success (on error the caller keeps it). */
int model_load_gguf(struct gguf *g, struct model **out, char *err, size_t err_len);

/* Free the model and unmap its file. NULL ok. All contexts must be freed
 * first. */
void model_free(struct model *m);

/* "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "bert" ("?" otherwise). */
const char *model_arch_name(enum model_arch a);

/* Tokenizer of the model, built from its tokenizer.ggml.* keys (see
 * text/tok_gguf.h). Returns 0 and *out (tok_free), or an error with a
 * message in err. */
int model_tokenizer(const struct model *m, struct tok **out, char *err, size_t err_len);

/* Chat template of the model from tokenizer.chat_template; when the GGUF
 * has none, the architecture's default (gemma2/3: Gemma's turns, phi3:
 * Phi-3's), else the ChatML fallback when the vocabulary has <|im_start|>
 * (see text/chat.h).
 * Returns 0 and *out (chat_tmpl_free), ERR_UNSUPPORTED, ERR_NOMEM. */
int model_chat_tmpl(const struct model *m, const struct tok *t, struct chat_tmpl **out);

/* ---- the forward pass ---- */

struct model_ctx_params {
    int n_ctx;             /* max positions per sequence; 0 = n_ctx_train (capped at 4096);
                            * larger than n_ctx_train is refused */
    int n_batch_max;       /* max tokens per model_forward call (default 512); an encoder
                            * (bert): raised to n_ctx if below, so a step holds any input */
    int n_out_max;         /* max tokens marked for logits per call (default n_seq_max);
                            * an encoder: raised to n_ctx if below */
    int n_seq_max;         /* sequence slots (default 1) */
    int n_kv_blocks;       /* KV blocks of KV_BLOCK_TOKENS positions; 0 = n_seq_max * n_ctx worth */
    size_t max_bytes;      /* cap on all buffers together (0 = no cap) */
    struct kn_pool *pool;  /* for the matmuls and the attention; NULL = caller's thread.
                            * Must outlive the context; results do not depend on it */
    int exact_matmul;      /* 1: the reference matmul (forward_cpu.c linear_exact: float dot products
                            * on dequantized weights, matches HF transformers to ~1e-6) and a
                            * float32 KV cache; 0 (default): kn_matmul_w (8-bit activations, as
                            * llama.cpp) and a binary16 KV cache (kv.h), as llama.cpp's default */
    int device;            /* enum kn_device (kernels/kn.h): KN_DEVICE_CPU (0, default) or
                            * KN_DEVICE_CUDA - weights, K/V values and activations on the GPU
                            * (worker/engine/forward_cuda.h; bf16 numerics, exact_matmul ignored);
                            * the block tables and prefix cache stay in the host kv_cache,
                            * whose k/v arrays are then NULL */
    int swa_full;          /* sliding-window layers (model_layer.swa) on the CPU: 0 (default)
                            * keep only a per-slot ring of their last window + n_batch_max
                            * positions when that is shorter than n_ctx (kv.h "rings"; less
                            * memory, same bits, no prefix caching); 1 keep every position
                            * like the other layers (prefix caching stays on) */
    int kv_type;           /* enum model_kv_type: the K/V cache's values. MODEL_KV_DEFAULT (0)
                            * = float32 with exact_matmul on the CPU, else binary16;
                            * MODEL_KV_Q8: int8 with a float scale per 32 values (CPU only,
                            * n_head_kv * head_dim a multiple of 32; 1.125 bytes per value,
                            * 56% of binary16; its accuracy cost in bench/NOTES.md);
                            * MODEL_KV_Q8V: binary16 keys, int8 values (78% of binary16;
                            * the same conditions) */
    int embeddings;        /* 1: model_forward returns, for each marked token, its final-norm
                            * hidden state (n_embd floats: output_norm applied, no LM head,
                            * no soft-capping) instead of logits - what worker/engine/embed.h
                            * pools. CPU only (ERR_UNSUPPORTED on CUDA) */
};

/* model_ctx_params.kv_type */
enum model_kv_type { MODEL_KV_DEFAULT = 0, MODEL_KV_F16, MODEL_KV_F32, MODEL_KV_Q8, MODEL_KV_Q8V };

/* "f16" / "f32" / "q8" / "q8v" -> enum model_kv_type in *out: 0 or ERR_INVAL. */
int model_kv_type_parse(const char *s, int *out);

void model_ctx_params_init(struct model_ctx_params *p);

/* The element type (enum kv_type, kv.h) of the K/V cache of a context
 * made with p: kv_type, its default resolved. */
int model_ctx_kv_type(const struct model_ctx_params *p);

/* 1 when a context made with p keeps its K/V in float32 (the exact CPU
 * path, HF parity to ~1e-6), 0 for binary16 or int8 (kv.h). */
int model_ctx_kv_f32(const struct model_ctx_params *p);

/* The K/V bytes model_ctx_new would allocate for m with p (defaults
 * applied as model_ctx_new does): *block_bytes per block of the shared
 * pool (0 when every layer keeps its K/V in rings) and *ring_bytes for
 * the sliding-window rings of all n_seq_max slots (0 without rings).
 * Returns 0, ERR_INVAL (p refused by model_ctx_new), ERR_TOOBIG. */
int model_ctx_kv_bytes(const struct model *m, const struct model_ctx_params *p, size_t *block_bytes,
                       size_t *ring_bytes);

struct model_ctx;

/* Allocate the buffers and KV cache for m (which must outlive the
 * context). Returns 0 and *out (model_ctx_free), ERR_INVAL (bad params,
 * n_ctx above the model's), ERR_TOOBIG (sizes overflow or exceed
 * max_bytes), ERR_NOMEM; with device KN_DEVICE_CUDA also the errors of
 * fwdcuda_new (ERR_UNSUPPORTED without a CUDA build, ERR_NODEVICE...). */
int model_ctx_new(const struct model *m, const struct model_ctx_params *p, struct model_ctx **out);
void model_ctx_free(struct model_ctx *c);

/* The context's KV cache (for sequence management: kv_seq_clear when a
 * sequence ends, kv_seq_truncate to rewind, free-block accounting). */
struct kv_cache *model_ctx_kv(struct model_ctx *c);
int model_ctx_n_ctx(const struct model_ctx *c);
/* The context's model and its parameters with the defaults filled in. */
const struct model *model_ctx_model(const struct model_ctx *c);
const struct model_ctx_params *model_ctx_get_params(const struct model_ctx *c);

/* One step: a flat batch of n_tokens tokens. */
struct model_batch {
    int n_tokens;
    const int32_t *token;  /* (n_tokens) token ids, 0..n_vocab-1 */
    const int32_t *pos;    /* (n_tokens) position of each token in its sequence */
    const int32_t *seq;    /* (n_tokens) sequence slot, 0..n_seq_max-1 */
    const uint8_t *out;    /* (n_tokens) 1 = return this token's logits; NULL = none */
};

/* Run the batch. Tokens of one slot must come in position order, the first
 * at the slot's current length (kv->seqs[s].n_pos) and each next one +1:
 * the step appends to each sequence. A token attends to positions 0..pos of
 * its own slot (earlier steps and earlier tokens of this batch).
 * On success returns 0, *logits points to (n_out, n_vocab) float32 rows -
 * the marked tokens in batch order; (n_out, n_embd) hidden-state rows with
 * model_ctx_params.embeddings - valid until the next call, and the
 * slots' lengths have grown. Errors, with nothing changed: ERR_INVAL
 * (n_tokens 0 or > n_batch_max, more than n_out_max marked, a token id,
 * slot or position out of range or out of order), ERR_BUSY (the KV cache
 * has too few free blocks for the new positions).
 *
 * An encoder (bert) keeps nothing between steps (no KV cache): a batch is
 * whole inputs back to back, each a run of tokens in one slot at positions
 * 0, 1, ..., len-1 (a position 0 starts the next input; slots may repeat),
 * and every token attends to its own input in both directions; *logits
 * gets the marked tokens' final hidden rows (n_out, n_embd). ERR_INVAL for
 * a token id, slot or position out of range or a run out of order. */
int model_forward(struct model_ctx *c, const struct model_batch *b, const float **logits,
                  int *n_out);

#endif
