/*
 * forward_cpu.c - the batched forward pass of a model (model.h) on the
 * CPU (see forward_cpu.h; forward.c dispatches here).
 *
 * Per step (fwdcpu_forward), for a flat batch of n tokens (shapes in the
 * buffer comments of struct model_ctx):
 *
 *   x = token_embd[token] (* sqrt(n_embd): gemma)         embedding rows, dequantized
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h @ Wq^T (+bq), h @ Wk^T (+bk), h @ Wv^T (+bv)
 *     q, k = rmsnorm per head (qwen3, gemma3)
 *     rope(q), rope(k) at each token's position           NORM (llama) / NEOX (others);
 *                                                          own table for gemma3's sliding layers
 *     K/V cache[slot][pos] = k, v                         all tokens first (the pool, or the
 *                                                          slot's ring on sliding layers: kv.h;
 *                                                          binary16, float32 or int8) ...
 *     a = softmax(cap(q.K^T * scale)) V over the window   ... then attention (GQA); window
 *                                                          0..pos, or the last n_swa positions
 *                                                          on sliding layers; cap: gemma2
 *     o = a @ Wo^T (rmsnorm * post_attn_norm: gemma); x += o
 *     h = rmsnorm(x) * ffn_norm
 *     f = (act(h @ Wg^T) * (h @ Wu^T)) @ Wd^T             act = silu, or tanh-GELU (gemma)
 *     x += f (rmsnorm * post_ffn_norm: gemma)
 *   logits = rmsnorm(x[marked]) * output_norm @ Wout^T (soft-capped: gemma2)
 *
 * Every op works per token with a fixed accumulation order, so a token's
 * numbers do not depend on its batch neighbours. All matmuls go through
 * model_linear (one place; model_linear_multi for q/k/v and gate/up, the
 * same bits): by default the kernels' kn_matmul_w / kn_matmul_w_multi
 * (kernels/cpu/matq.c: activations quantized to 8 bits per block, integer
 * dot products, the context's thread pool; the products sharing x quantize
 * it once and take two pool barriers in all), or with exact_matmul the
 * reference linear_exact (dequantized weights, the kernels' float
 * kn_matmul_f32: the path verified against HF transformers). Both have a
 * fixed reduction order independent of n and of the thread count.
 *
 * Threads: the matmuls, the attention and SwiGLU run on the context's
 * pool. The attention splits its (token, query head) pairs into contiguous
 * ranges of about equal work (a pair at position p costs ~p + 17), one per
 * thread; a thread runs its range as tiles (kn_attn_tile: up to tile_q
 * consecutive tokens of one sequence, grouped by kv head, so that each K/V
 * row is read once per tile, not once per query head). Every pair's
 * numbers are the same whatever tile or thread computes it (the kernel's
 * contract), so results are bit-identical for every thread count and
 * batch. RoPE angles are
 * computed once per step (kn_rope_table) and shared by every layer's q and k.
 *
 * Allocation: none per step. fwdcpu_new sizes every buffer (the matmul
 * scratch for kn_matmul_w_scratch(n_batch_max, k_max, Q8_0), which covers
 * every weight type, and per pool thread the scratch of one attention
 * tile: kn_attn_tile_scratch_bytes);
 * kn_matmul_w and kn_pool_run allocate nothing (tests/unit/worker/engine/test_model.c
 * model_forward_allocates_nothing checks with a counting malloc hook).
 */
#include "worker/engine/forward_cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"

struct fwdcpu {
    const struct model *m;
    struct model_ctx_params p;   /* with defaults filled in */
    struct kv_cache *kv;         /* the context's cache (borrowed): geometry, K/V values */
    float *x;          /* (n_batch_max, n_embd) residual stream */
    float *xb;         /* (n_batch_max, n_embd) normed input of a block */
    float *q;          /* (n_batch_max, n_head*hd) */
    float *k, *v;      /* (n_batch_max, n_head_kv*hd) */
    float *att;        /* (n_batch_max, n_head*hd) attention output */
    float *proj;       /* (n_batch_max, n_embd) output of Wo / Wd */
    float *hb, *hb2;   /* (n_batch_max, n_ff) gate / up */
    float *xo;         /* (n_out_max, n_embd) rows of the marked tokens */
    unsigned char *att_scratch; /* (n_threads, att_scratch_bytes) kn_attn_tile scratch per
                                 * pool thread */
    size_t att_scratch_bytes;
    int tile_q;        /* queries per attention tile: kn_attn_tile_queries */
    int n_threads;     /* kn_pool_threads(p.pool) */
    int64_t *att_split; /* (n_threads + 1) first (token, head) pair of each thread, per step */
    float *rope_cs;    /* (n_batch_max, n_rot) RoPE cos/sin of the step's positions (all layers) */
    float *rope_cs_swa; /* (n_batch_max, n_rot) the same for sliding-window layers when their
                         * rope base/scale differ (gemma3), else NULL (rope_cs is used) */
    const float *rope_factors; /* divisors of the rope angles: rope_freqs.weight, or phi3's
                                * LongRoPE short/long factors chosen by n_ctx; or NULL */
    void *mm_scratch;  /* matmul scratch, mm_scratch_bytes */
    size_t mm_scratch_bytes;
};

/* Scratch bytes of linear_exact for n activation rows of k values: one
 * dequantized weight row and one output column. */
static size_t linear_exact_scratch_bytes(int n, int k)
{
    return ((size_t)(n > 0 ? n : 0) + (size_t)(k > 0 ? k : 0)) * sizeof(float);
}

/* The reference product out (n, m) = x (n, k) @ W^T: each weight row is
 * dequantized once with the bit-exact quant.c decoder, then dotted in float
 * with every activation row by the kernels' kn_matmul_f32 (four
 * accumulators, fixed order), so out[r][c] depends only on x row r and W
 * row c. Runs on the caller's thread. Returns 0, ERR_UNSUPPORTED (w_type
 * not decodable), ERR_INVAL (k not a multiple of the block size), ERR_TOOBIG
 * (scratch too small). */
static int linear_exact(float *out, const float *x, int n, int k, const void *w, int w_type,
                        int m, void *scratch, size_t scratch_bytes)
{
    if (n < 0 || k < 0 || m < 0 || w_type < 0)
        return ERR_INVAL;
    if (!ggml_type_supported((uint32_t)w_type))
        return ERR_UNSUPPORTED;
    int64_t row_bytes;
    int rc = ggml_type_row_bytes((uint32_t)w_type, k, &row_bytes);
    if (rc)
        return rc;
    if (scratch_bytes < linear_exact_scratch_bytes(n, k))
        return ERR_TOOBIG;
    float *row = scratch;              /* (k) dequantized weight row c */
    float *col = row + (size_t)k;      /* (n) out[.][c] */
    const unsigned char *wb = w;
    for (int c = 0; c < m; c++) {
        rc = kn_dequant_row((uint32_t)w_type, wb + (size_t)c * (size_t)row_bytes, row, k);
        if (rc)
            return rc;
        kn_matmul_f32(col, x, row, n, k, 1);
        for (int r = 0; r < n; r++)
            out[(size_t)r * (size_t)m + (size_t)c] = col[r];
    }
    return 0;
}

/* The one call site of the weight matmul: out (n, w->rows) = x (n, w->cols) @ W^T. */
static int model_linear(struct fwdcpu *c, float *out, const float *x, int n,
                        const struct model_mat *w)
{
    if (c->p.exact_matmul)
        return linear_exact(out, x, n, w->cols, w->data, (int)w->type, w->rows, c->mm_scratch,
                            c->mm_scratch_bytes);
    return kn_matmul_w(c->p.pool, out, x, n, w->cols, w->data, (int)w->type, w->rows,
                       c->mm_scratch, c->mm_scratch_bytes);
}

/* Two or three products sharing x (q/k/v, gate/up): the same bits as one
 * model_linear each; kn_matmul_w_multi quantizes x once and dispatches the
 * pool once for all of them. */
static int model_linear_multi(struct fwdcpu *c, float *const *out, const float *x, int n,
                              const struct model_mat *const *w, int n_w)
{
    if (c->p.exact_matmul) {
        for (int i = 0; i < n_w; i++) {
            int rc = model_linear(c, out[i], x, n, w[i]);
            if (rc)
                return rc;
        }
        return 0;
    }
    struct kn_wmat wm[KN_MATMUL_MULTI_MAX];
    for (int i = 0; i < n_w; i++)
        wm[i] = (struct kn_wmat){out[i], w[i]->data, (int)w[i]->type, w[i]->rows};
    return kn_matmul_w_multi(c->p.pool, x, n, w[0]->cols, wm, n_w, c->mm_scratch, c->mm_scratch_bytes);
}

/* Scratch model_linear needs for rows of up to k_max values and n_max
 * activation rows: the reference needs one dequantized row and one output
 * column, kn_matmul_w the quantized activations (the Q8_0 size bounds every
 * weight type).
 * SIZE_MAX on overflow. */
static size_t model_linear_scratch_bytes(int n_max, int k_max)
{
    size_t a = linear_exact_scratch_bytes(n_max, k_max);
    size_t b = kn_matmul_w_scratch(n_max, k_max, GGML_TYPE_Q8_0);
    return a > b ? a : b;
}

/* *total += n * size, with overflow detection. */
static int add_bytes(size_t *total, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return ERR_TOOBIG;
    if (*total > SIZE_MAX - n * size)
        return ERR_TOOBIG;
    *total += n * size;
    return 0;
}

/* The widest matmul input: n_embd, n_head * head_dim or n_ff. */
static int k_max_of(const struct model_hparams *hp)
{
    int k_max = hp->n_embd, q_dim = hp->n_head * hp->head_dim;
    if (q_dim > k_max)
        k_max = q_dim;
    if (hp->n_ff > k_max)
        k_max = hp->n_ff;
    return k_max;
}

int fwdcpu_bytes(const struct model *m, const struct model_ctx_params *p, size_t *total)
{
    const struct model_hparams *hp = &m->hp;
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    size_t nb = (size_t)p->n_batch_max, no = (size_t)p->n_out_max;
    size_t mm = model_linear_scratch_bytes(p->n_batch_max, k_max_of(hp));
    if (mm == SIZE_MAX)
        return ERR_TOOBIG;
    int n_threads = kn_pool_threads(p->pool);
    size_t att = kn_attn_tile_scratch_bytes(kn_attn_tile_queries(hp->n_head, hp->n_head_kv),
                                            hp->n_head, hp->n_head_kv, hp->head_dim, p->n_ctx);
    if (att == SIZE_MAX)
        return ERR_TOOBIG;
    if (add_bytes(total, nb * 3, (size_t)hp->n_embd * sizeof(float)) ||
        add_bytes(total, nb * 2, (size_t)q_dim * sizeof(float)) ||
        add_bytes(total, nb * 2, (size_t)kv_dim * sizeof(float)) ||
        add_bytes(total, nb * 2, (size_t)hp->n_ff * sizeof(float)) ||
        add_bytes(total, no, (size_t)hp->n_embd * sizeof(float)) ||
        add_bytes(total, (size_t)n_threads, att) ||
        add_bytes(total, (size_t)n_threads + 1, sizeof(int64_t)) ||
        add_bytes(total, nb * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * 2, sizeof(float)) ||
        add_bytes(total, 1, mm))
        return ERR_TOOBIG;
    return 0;
}

int fwdcpu_new(const struct model *m, const struct model_ctx_params *p, struct kv_cache *kv,
               struct fwdcpu **out)
{
    const struct model_hparams *hp = &m->hp;
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    size_t nb = (size_t)p->n_batch_max, no = (size_t)p->n_out_max;
    size_t mm = model_linear_scratch_bytes(p->n_batch_max, k_max_of(hp));
    if (mm == SIZE_MAX)
        return ERR_TOOBIG;
    int n_threads = kn_pool_threads(p->pool);
    struct fwdcpu *c = calloc(1, sizeof *c);
    if (!c)
        return ERR_NOMEM;
    c->m = m;
    c->p = *p;
    c->kv = kv;
    c->x = malloc(nb * (size_t)hp->n_embd * sizeof(float));
    c->xb = malloc(nb * (size_t)hp->n_embd * sizeof(float));
    c->proj = malloc(nb * (size_t)hp->n_embd * sizeof(float));
    c->q = malloc(nb * (size_t)q_dim * sizeof(float));
    c->att = malloc(nb * (size_t)q_dim * sizeof(float));
    c->k = malloc(nb * (size_t)kv_dim * sizeof(float));
    c->v = malloc(nb * (size_t)kv_dim * sizeof(float));
    c->hb = malloc(nb * (size_t)hp->n_ff * sizeof(float));
    c->hb2 = malloc(nb * (size_t)hp->n_ff * sizeof(float));
    c->xo = malloc(no * (size_t)hp->n_embd * sizeof(float));
    c->n_threads = n_threads;
    c->tile_q = kn_attn_tile_queries(hp->n_head, hp->n_head_kv);
    c->att_scratch_bytes = kn_attn_tile_scratch_bytes(c->tile_q, hp->n_head, hp->n_head_kv,
                                                      hp->head_dim, p->n_ctx);
    c->att_scratch = c->att_scratch_bytes == SIZE_MAX
                         ? NULL
                         : malloc((size_t)n_threads * c->att_scratch_bytes);
    c->att_split = malloc(((size_t)n_threads + 1) * sizeof *c->att_split);
    c->rope_cs = malloc(nb * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * sizeof(float));
    int any_swa = 0;
    for (int l = 0; l < hp->n_layer; l++)
        any_swa |= m->layers[l].swa;
    int swa_table = any_swa && (hp->rope_freq_base_swa != hp->rope_freq_base ||
                                hp->rope_freq_scale_swa != hp->rope_freq_scale);
    if (swa_table)
        c->rope_cs_swa = malloc(nb * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * sizeof(float));
    /* phi3 LongRoPE: the long factors when this context reaches beyond the
     * original training context (llama.cpp's choice, per context) */
    c->rope_factors = m->rope_freqs;
    if (m->rope_factors_short)
        c->rope_factors = p->n_ctx > hp->n_ctx_orig ? m->rope_factors_long : m->rope_factors_short;
    c->mm_scratch = malloc(mm);
    c->mm_scratch_bytes = mm;
    if (!c->x || !c->xb || !c->proj || !c->q || !c->att || !c->k || !c->v || !c->hb || !c->hb2 ||
        !c->xo || !c->att_scratch || !c->att_split || !c->rope_cs || !c->mm_scratch ||
        (swa_table && !c->rope_cs_swa)) {
        fwdcpu_free(c);
        return ERR_NOMEM;
    }
    *out = c;
    return 0;
}

void fwdcpu_free(struct fwdcpu *c)
{
    if (!c)
        return;
    free(c->x);
    free(c->xb);
    free(c->proj);
    free(c->q);
    free(c->att);
    free(c->k);
    free(c->v);
    free(c->hb);
    free(c->hb2);
    free(c->xo);
    free(c->att_scratch);
    free(c->att_split);
    free(c->rope_cs);
    free(c->rope_cs_swa);
    free(c->mm_scratch);
    free(c);
}

/* Split the step's (token, head) pairs into contiguous ranges of about equal
 * attention work, one per pool thread: a pair of a token at position p
 * costs about p + 1 + 16 (its q.k and V passes over p + 1 positions, plus a
 * fixed part). A decode token deep in its context weighs far more than an
 * early prefill position, so equal pair counts would leave one thread
 * waiting. The same for every layer; the numbers do not depend on it (each
 * pair is computed by the same code whatever thread takes it). */
static void attn_plan(struct fwdcpu *c, const struct model_batch *b)
{
    int nth = c->n_threads, nh = c->m->hp.n_head;
    int64_t total = 0;
    for (int i = 0; i < b->n_tokens; i++)
        total += (int64_t)b->pos[i] + 17;
    c->att_split[0] = 0;
    int t = 1;
    int64_t acc = 0;
    for (int i = 0; i < b->n_tokens && t < nth; i++) {
        int64_t w = (int64_t)b->pos[i] + 17;
        /* heads of token i: pair (i, h) ends at acc + w * (h + 1) / nh of the work */
        for (int h = 0; h < nh && t < nth; h++)
            while (t < nth && (acc + w * (h + 1) / nh) * nth >= total * t)
                c->att_split[t++] = (int64_t)i * nh + h + 1;
        acc += w;
    }
    while (t <= nth)
        c->att_split[t++] = (int64_t)b->n_tokens * nh;
}

/* The attention of one layer, split over the pool by (token, head) pairs. */
struct attn_job {
    struct fwdcpu *c;
    const struct model_batch *b;
    struct kn_kv_layer kvl; /* this layer's K/V (block_table set per tile) */
    float scale;
    float softcap;         /* attention logit soft-capping, 0 = none */
    int window;            /* sliding window (positions attended, itself included), 0 = all */
    int ring;              /* 1: the layer's K/V are in the slots' rings (kv.h), else the pool */
};

/* A thread's pairs as tiles: a run of whole tokens of one sequence (up to
 * tile_q), or the part of a token the range holds at either end. */
static void attn_run(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    const struct fwdcpu *c = j->c;
    const struct model_batch *b = j->b;
    const struct model_hparams *hp = &c->m->hp;
    const struct kv_cache *kv = c->kv;
    int nh = hp->n_head, q_dim = nh * hp->head_dim;
    int64_t lo = c->att_split[ith], hi = c->att_split[ith + 1];
    if (nth == 1) { /* the caller's thread alone (a single pair) */
        lo = 0;
        hi = (int64_t)b->n_tokens * nh;
    }
    void *scratch = c->att_scratch + (size_t)ith * c->att_scratch_bytes;
    struct kn_kv_layer kvl = j->kvl;
    int32_t n_ctx[KN_ATTN_TILE_Q_MAX];
    while (lo < hi) {
        int i = (int)(lo / nh), h0 = (int)(lo % nh);
        int h1 = hi - (int64_t)i * nh < nh ? (int)(hi - (int64_t)i * nh) : nh;
        int n_q = 1;
        n_ctx[0] = b->pos[i] + 1;
        while (h0 == 0 && h1 == nh && n_q < c->tile_q && i + n_q < b->n_tokens &&
               (int64_t)(i + n_q + 1) * nh <= hi && b->seq[i + n_q] == b->seq[i]) {
            n_ctx[n_q] = b->pos[i + n_q] + 1;
            n_q++;
        }
        const struct kv_seq *s = &kv->seqs[b->seq[i]];
        kvl.block_table = j->ring ? s->ring : s->blocks;
        kn_attn_tile(c->att + (size_t)i * (size_t)q_dim, (size_t)q_dim,
                     c->q + (size_t)i * (size_t)q_dim, (size_t)q_dim, n_ctx, n_q, &kvl, nh,
                     hp->n_head_kv, hp->head_dim, h0, h1, j->window, j->scale, j->softcap, scratch);
        lo = (int64_t)(i + n_q - 1) * nh + h1;
    }
}

/* SwiGLU in place over the pool: contiguous element ranges, each element
 * computed alone, so the bits do not depend on the split. */
struct swiglu_job {
    float *gate;
    const float *up;
    size_t n;
    enum model_ffn_act act; /* SwiGLU or GeGLU */
};

static void swiglu_run(void *arg, int ith, int nth)
{
    const struct swiglu_job *j = arg;
    size_t lo = j->n * (size_t)ith / (size_t)nth, hi = j->n * (size_t)(ith + 1) / (size_t)nth;
    if (j->act == MODEL_FFN_GEGLU)
        kn_geglu_f32(j->gate + lo, j->gate + lo, j->up + lo, hi - lo);
    else
        kn_swiglu_f32(j->gate + lo, j->gate + lo, j->up + lo, hi - lo);
}

static int run_layer(struct fwdcpu *c, const struct model_batch *b, int l)
{
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[l];
    struct kv_cache *kv = c->kv;
    int n = b->n_tokens;
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    enum kn_rope_mode mode = hp->rope_neox ? KN_ROPE_NEOX : KN_ROPE_NORM;
    int rc;

    kn_rmsnorm_f32(c->xb, c->x, L->attn_norm, n, hp->n_embd, hp->rms_eps);
    float *const qkv_out[3] = {c->q, c->k, c->v};
    const struct model_mat *const qkv[3] = {&L->wq, &L->wk, &L->wv};
    if ((rc = model_linear_multi(c, qkv_out, c->xb, n, qkv, 3)))
        return rc;
    if (L->bq)
        kn_add_bias_f32(c->q, L->bq, n, q_dim);
    if (L->bk)
        kn_add_bias_f32(c->k, L->bk, n, kv_dim);
    if (L->bv)
        kn_add_bias_f32(c->v, L->bv, n, kv_dim);
    if (L->attn_q_norm) { /* qwen3, gemma3: RMSNorm of each head's q and k */
        kn_rmsnorm_f32(c->q, c->q, L->attn_q_norm, n * hp->n_head, hp->head_dim, hp->rms_eps);
        kn_rmsnorm_f32(c->k, c->k, L->attn_k_norm, n * hp->n_head_kv, hp->head_dim, hp->rms_eps);
    }
    /* the angles of the step's positions were computed once (model_forward) */
    const float *cs = L->swa && c->rope_cs_swa ? c->rope_cs_swa : c->rope_cs;
    kn_rope_apply_f32(c->q, n, hp->n_head, hp->head_dim, hp->n_rot, cs, mode);
    kn_rope_apply_f32(c->k, n, hp->n_head_kv, hp->head_dim, hp->n_rot, cs, mode);

    /* append every token's K/V before any attention: a token may attend to
     * earlier tokens of its own sequence in this same batch */
    size_t lo = kv->layer_off[l];
    struct kn_kv_layer kvl = {KN_KV_F16, NULL, NULL, NULL, NULL, NULL, kv->block_tokens,
                              kv->block_stride};
    if (kv->f32) {
        kvl.type = KN_KV_F32;
        kvl.k = kv->k32 + lo;
        kvl.v = kv->v32 + lo;
    } else if (kv->type == KV_TYPE_Q8) { /* scales: one per 32 values, at offset / 32 */
        kvl.type = KN_KV_Q8;
        kvl.k = kv->k8 + lo;
        kvl.v = kv->v8 + lo;
        kvl.k_scale = kv->k8d + lo / 32;
        kvl.v_scale = kv->v8d + lo / 32;
    } else if (kv->type == KV_TYPE_Q8V) {
        kvl.type = KN_KV_F16_Q8;
        kvl.k = kv->k + lo;
        kvl.v = kv->v8 + lo;
        kvl.v_scale = kv->v8d + lo / 32;
    } else {
        kvl.k = kv->k + lo;
        kvl.v = kv->v + lo;
    }
    int ring = kv->layer_ring[l];
    for (int i = 0; i < n; i++) {
        const struct kv_seq *s = &kv->seqs[b->seq[i]];
        const int32_t *table = ring ? s->ring : s->blocks;
        int p = b->pos[i];
        size_t off = lo + (size_t)table[p / kv->block_tokens] * kv->block_stride +
                     (size_t)(p % kv->block_tokens) * (size_t)kv_dim;
        const float *ki = c->k + (size_t)i * (size_t)kv_dim, *vi = c->v + (size_t)i * (size_t)kv_dim;
        if (kv->f32) {
            memcpy(kv->k32 + off, ki, (size_t)kv_dim * sizeof(float));
            memcpy(kv->v32 + off, vi, (size_t)kv_dim * sizeof(float));
        } else if (kv->type == KV_TYPE_Q8) { /* quantized once, here */
            kn_kv_quantize_q8(kv->k8 + off, kv->k8d + off / 32, ki, (size_t)kv_dim);
            kn_kv_quantize_q8(kv->v8 + off, kv->v8d + off / 32, vi, (size_t)kv_dim);
        } else if (kv->type == KV_TYPE_Q8V) {
            kn_f32_to_f16(kv->k + off, ki, (size_t)kv_dim);
            kn_kv_quantize_q8(kv->v8 + off, kv->v8d + off / 32, vi, (size_t)kv_dim);
        } else { /* rounded to binary16 once, here */
            kn_f32_to_f16(kv->k + off, ki, (size_t)kv_dim);
            kn_f32_to_f16(kv->v + off, vi, (size_t)kv_dim);
        }
    }
    struct attn_job job = {c, b, kvl, hp->attn_scale, hp->attn_softcap, L->swa ? hp->n_swa : 0,
                           ring};
    if (c->n_threads > 1 && (size_t)n * (size_t)hp->n_head > 1)
        kn_pool_run(c->p.pool, attn_run, &job);
    else
        attn_run(&job, 0, 1);
    if ((rc = model_linear(c, c->proj, c->att, n, &L->wo)))
        return rc;
    if (L->bo)
        kn_add_bias_f32(c->proj, L->bo, n, hp->n_embd);
    if (L->post_attn_norm)
        kn_rmsnorm_f32(c->proj, c->proj, L->post_attn_norm, n, hp->n_embd, hp->rms_eps);
    kn_add_f32(c->x, c->proj, (size_t)n * (size_t)hp->n_embd);

    kn_rmsnorm_f32(c->xb, c->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps);
    float *const gu_out[2] = {c->hb, c->hb2};
    const struct model_mat *const gu[2] = {&L->w_gate, &L->w_up};
    if ((rc = model_linear_multi(c, gu_out, c->xb, n, gu, 2)))
        return rc;
    struct swiglu_job sj = {c->hb, c->hb2, (size_t)n * (size_t)hp->n_ff, hp->ffn_act};
    if (c->n_threads > 1 && n >= 4)
        kn_pool_run(c->p.pool, swiglu_run, &sj);
    else
        swiglu_run(&sj, 0, 1);
    if ((rc = model_linear(c, c->proj, c->hb, n, &L->w_down)))
        return rc;
    if (L->post_ffn_norm)
        kn_rmsnorm_f32(c->proj, c->proj, L->post_ffn_norm, n, hp->n_embd, hp->rms_eps);
    kn_add_f32(c->x, c->proj, (size_t)n * (size_t)hp->n_embd);
    return 0;
}


int fwdcpu_forward(struct fwdcpu *c, struct kv_cache *kv, const struct model_batch *b,
                   const int32_t *out_rows, int n_out, float *logits)
{
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    int n = b->n_tokens;
    c->kv = kv;
    attn_plan(c, b);
    kn_rope_table(c->rope_cs, n, hp->n_rot, b->pos, hp->rope_freq_base, hp->rope_freq_scale,
                  c->rope_factors);
    if (c->rope_cs_swa)
        kn_rope_table(c->rope_cs_swa, n, hp->n_rot, b->pos, hp->rope_freq_base_swa,
                      hp->rope_freq_scale_swa, c->rope_factors);
    if (hp->rope_attn_factor != 1.0f) { /* phi3 LongRoPE: cos and sin times the factor */
        kn_scale_f32(c->rope_cs, hp->rope_attn_factor, (size_t)n * (size_t)hp->n_rot);
        if (c->rope_cs_swa)
            kn_scale_f32(c->rope_cs_swa, hp->rope_attn_factor, (size_t)n * (size_t)hp->n_rot);
    }
    kn_get_rows(c->x, m->tok_embd.data, m->tok_embd.type, m->tok_embd.row_bytes, b->token, n,
                hp->n_embd);
    if (hp->embd_scale != 1.0f) /* gemma: embedding times sqrt(n_embd) */
        kn_scale_f32(c->x, hp->embd_scale, (size_t)n * (size_t)hp->n_embd);
    for (int l = 0; l < hp->n_layer; l++)
        if (run_layer(c, b, l))
            return ERR_INTERNAL; /* types validated at load: cannot happen */
    for (int o = 0; o < n_out; o++)
        memcpy(c->xo + (size_t)o * (size_t)hp->n_embd, c->x + (size_t)out_rows[o] * (size_t)hp->n_embd,
               (size_t)hp->n_embd * sizeof(float));
    if (n_out && c->p.embeddings) { /* final-norm hidden states (worker/engine/embed.h) */
        kn_rmsnorm_f32(logits, c->xo, m->output_norm, n_out, hp->n_embd, hp->rms_eps);
    } else if (n_out) {
        kn_rmsnorm_f32(c->xo, c->xo, m->output_norm, n_out, hp->n_embd, hp->rms_eps);
        if (model_linear(c, logits, c->xo, n_out, &m->output))
            return ERR_INTERNAL;
        if (hp->final_softcap > 0) /* gemma2: logits = cap * tanh(logits / cap) */
            kn_softcap_f32(logits, hp->final_softcap, (size_t)n_out * (size_t)hp->n_vocab);
    }
    return 0;
}

int fwdcpu_linear(struct kn_pool *pool, int exact, float *out, const float *x, int n,
                  const struct model_mat *w, void *scratch, size_t scratch_bytes)
{
    if (exact)
        return linear_exact(out, x, n, w->cols, w->data, (int)w->type, w->rows, scratch,
                            scratch_bytes);
    return kn_matmul_w(pool, out, x, n, w->cols, w->data, (int)w->type, w->rows, scratch,
                       scratch_bytes);
}

size_t fwdcpu_linear_scratch_bytes(int n_max, int k_max)
{
    return model_linear_scratch_bytes(n_max, k_max);
}
