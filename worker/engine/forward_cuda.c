/*
 * forward_cuda.c - the forward pass on a CUDA GPU (see forward_cuda.h).
 *
 * Per step, for a flat batch of n tokens (device buffers of struct fwdcuda):
 *
 *   x = dequant(token_embd rows)                    f32, from the quantized table
 *   per layer:
 *     xb = rmsnorm(x) * attn_norm                   bf16
 *     qkv = xb @ Wqkv^T (+ bqkv)                    f32, one GEMM for Q|K|V
 *     rope(q), rope(k)                              in place in qkv
 *     K/V cache rows of the tokens = k, v           bf16, paged
 *     att = attention(q, paged K/V)                 bf16, causal, GQA
 *     x += att @ Wo^T (+ bo)                        GEMM with beta = 1
 *     xb = rmsnorm(x) * ffn_norm                    bf16
 *     gu = xb @ Wgu^T                               f32, one GEMM for gate|up
 *     hb = silu(gate) * up                          bf16
 *     x += hb @ Wd^T                                GEMM with beta = 1
 *   logits = rmsnorm(x[marked]) * output_norm @ Wout^T   f32, copied to the host
 *
 * The host side of a step: cache slot of each new token (from its block
 * table), tiles of consecutive tokens of one sequence for the attention,
 * the block tables themselves - packed into one staging buffer and uploaded
 * with one copy.
 */
#include "worker/engine/forward_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "kernels/kn.h"

#ifndef KN_HAVE_CUDA

int fwdcuda_new(const struct model *m, const struct model_ctx_params *p,
                const struct kv_cache *kv, struct fwdcuda **out)
{
    (void)m, (void)p, (void)kv, (void)out;
    log_error("cuda: this build has no CUDA backend (make CUDA=1)");
    return ERR_UNSUPPORTED;
}

void fwdcuda_free(struct fwdcuda *f)
{
    (void)f;
}

int fwdcuda_forward(struct fwdcuda *f, const struct kv_cache *kv, const struct model_batch *b,
                    const int32_t *out_rows, int n_out, float *logits)
{
    (void)f, (void)kv, (void)b, (void)out_rows, (void)n_out, (void)logits;
    return ERR_UNSUPPORTED;
}

int fwdcuda_new_synthetic(const struct model_hparams *hp, const struct model_ctx_params *p,
                          const struct kv_cache *kv, uint64_t seed, struct fwdcuda **out)
{
    (void)hp, (void)p, (void)kv, (void)seed, (void)out;
    return ERR_UNSUPPORTED;
}

int fwdcuda_forward_greedy(struct fwdcuda *f, const struct kv_cache *kv,
                           const struct model_batch *b, const int32_t *out_rows, int n_out,
                           int32_t *ids)
{
    (void)f, (void)kv, (void)b, (void)out_rows, (void)n_out, (void)ids;
    return ERR_UNSUPPORTED;
}

void fwdcuda_copy_block(void *f, int32_t dst, int32_t src, int n_pos)
{
    (void)f, (void)dst, (void)src, (void)n_pos;
}

#else

#define ATTN_WORK_MAX ((size_t)256 << 20)

/* A weight kept in its GGUF encoding for the batch-1 matvec. */
struct fw_raw {
    void *data;                  /* (rows, row_bytes) device */
    uint32_t type;
    size_t row_bytes;
};

struct fw_layer {
    float *attn_norm, *ffn_norm; /* (n_embd) f32 */
    float *bqkv;                 /* (qkv_dim) f32 or NULL */
    float *bo;                   /* (n_embd) f32 or NULL */
    void *wqkv;                  /* (qkv_dim, n_embd) bf16 */
    void *wo;                    /* (n_embd, q_dim) bf16 */
    void *wgu;                   /* (2*n_ff, n_embd) bf16 */
    void *wd;                    /* (n_embd, n_ff) bf16 */
    struct fw_raw rq, rk, rv, ro, rg, ru, rd; /* the same, raw (matvec models only) */
};

struct fwdcuda {
    struct kn_cuda *c;
    const struct model *m;       /* NULL for a synthetic model */
    struct model_hparams hp;
    uint32_t embd_type;          /* type of tok_embd_raw */
    size_t embd_row_bytes;
    int n_batch_max, n_out_max, n_seq, max_blocks, block_tokens, n_ctx;
    int q_dim, kv_dim, qkv_dim, tile_max;
    int err;                     /* sticky error of fwdcuda_copy_block */
    struct fw_layer *layers;     /* (n_layer) */
    void *tok_embd_raw;          /* token_embd as in the file, device */
    void *wout;                  /* (n_vocab, n_embd) bf16 */
    float *output_norm;          /* (n_embd) */
    double *theta;               /* (n_rot/2) rope angle units */
    int matvec;                  /* 1: every projection has a raw copy; steps of one token
                                  * use the fused dequant matvec (kn_cuda_matvec_q) */
    struct fw_raw rout;          /* the LM head, raw (matvec models only) */
    float *xf;                   /* (max(n_embd, q_dim, n_ff)) f32 input of a matvec */
    void *kc, *vc;               /* (n_layer, n_blocks*block_tokens, kv_dim) bf16 */
    size_t layer_rows;           /* n_blocks * block_tokens */
    float *x;                    /* (nb, n_embd) residual stream */
    void *xb;                    /* (nb, n_embd) bf16 */
    float *qkv;                  /* (nb, qkv_dim) */
    void *att;                   /* (nb, q_dim) bf16 */
    float *gu;                   /* (nb, 2*n_ff) */
    void *hb;                    /* (nb, n_ff) bf16 */
    void *xo;                    /* (no, n_embd) bf16 */
    float *logits;               /* (no, n_vocab) */
    float *work;                 /* attention workspace */
    size_t work_bytes;
    /* step inputs: one staging area on the host, its mirror on the device */
    size_t off_tok, off_pos, off_seq, off_tiles, off_out, off_tab, off_slot, stage_bytes;
    unsigned char *stage;        /* host */
    unsigned char *dstage;       /* device */
    void **allocs;               /* every device allocation, for fwdcuda_free */
    int n_allocs, cap_allocs;
};

static int fw_alloc(struct fwdcuda *f, size_t bytes, void **out)
{
    if (f->n_allocs == f->cap_allocs) {
        int cap = f->cap_allocs ? 2 * f->cap_allocs : 64;
        void **a = realloc(f->allocs, (size_t)cap * sizeof *a);
        if (!a)
            return ERR_NOMEM;
        f->allocs = a;
        f->cap_allocs = cap;
    }
    int rc = kn_cuda_alloc(f->c, bytes, out);
    if (!rc)
        f->allocs[f->n_allocs++] = *out;
    return rc;
}

void fwdcuda_free(struct fwdcuda *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_allocs; i++)
        kn_cuda_release(f->c, f->allocs[i]);
    free(f->allocs);
    free(f->layers);
    free(f->stage);
    kn_cuda_free(f->c);
    free(f);
}

/* A vector of n floats (host) copied to a new device buffer. */
static int fw_vec(struct fwdcuda *f, const float *v, int n, float **out)
{
    void *d;
    int rc = fw_alloc(f, (size_t)n * sizeof(float), &d);
    if (!rc)
        rc = kn_cuda_upload(f->c, d, v, (size_t)n * sizeof(float));
    if (!rc)
        *out = d;
    return rc;
}

/* Dequantize matrix w into rows [row0, row0 + w->rows) of the bf16 matrix
 * dst (cols w->cols), through the raw staging buffer. */
static int fw_mat(struct fwdcuda *f, void *dst, int row0, const struct model_mat *w, void *raw,
                  size_t raw_cap)
{
    size_t bytes = (size_t)w->rows * w->row_bytes;
    if (!kn_cuda_dequant_supported(w->type)) {
        const char *tn = ggml_type_name(w->type);
        log_error("cuda: weight type %s is not supported by the CUDA backend", tn ? tn : "?");
        return ERR_UNSUPPORTED;
    }
    if (bytes > raw_cap)
        return ERR_INTERNAL;
    int rc = kn_cuda_upload(f->c, raw, w->data, bytes);
    if (!rc)
        rc = kn_cuda_dequant(f->c, (char *)dst + (size_t)row0 * (size_t)w->cols * 2, 1, raw, w->type,
                             w->row_bytes, NULL, w->rows, w->cols);
    if (!rc)
        rc = kn_cuda_sync(f->c); /* raw is reused by the next matrix */
    return rc;
}

static size_t mat_bytes(const struct model_mat *w)
{
    return (size_t)w->rows * w->row_bytes;
}

/* Keep w in its GGUF encoding on the device too (for the matvec). */
static int fw_raw(struct fwdcuda *f, const struct model_mat *w, struct fw_raw *r)
{
    int rc = fw_alloc(f, mat_bytes(w), &r->data);
    if (!rc)
        rc = kn_cuda_upload(f->c, r->data, w->data, mat_bytes(w));
    r->type = w->type;
    r->row_bytes = w->row_bytes;
    return rc;
}

/* 1 when every projection (and the LM head) has a type the matvec takes. */
static int model_matvec_ok(const struct model *m)
{
    if (!kn_cuda_matvec_supported(m->output.type))
        return 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_mat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                        &L->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
            if (!kn_cuda_matvec_supported(ms[i]->type) || ms[i]->cols % 32)
                return 0;
    }
    return 1;
}

static int upload_weights(struct fwdcuda *f)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    f->embd_type = m->tok_embd.type;
    f->embd_row_bytes = m->tok_embd.row_bytes;
    size_t raw_cap = mat_bytes(&m->tok_embd);
    if (mat_bytes(&m->output) > raw_cap)
        raw_cap = mat_bytes(&m->output);
    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_mat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                        &L->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
            if (mat_bytes(ms[i]) > raw_cap)
                raw_cap = mat_bytes(ms[i]);
    }
    void *raw = NULL;
    int rc = kn_cuda_alloc(f->c, raw_cap, &raw);
    if (rc)
        return rc;
    size_t e = (size_t)hp->n_embd;
    /* embedding table stays quantized; the LM head becomes bf16 */
    size_t te = mat_bytes(&m->tok_embd);
    if ((rc = fw_alloc(f, te, &f->tok_embd_raw)) ||
        (rc = kn_cuda_upload(f->c, f->tok_embd_raw, m->tok_embd.data, te)))
        goto out;
    if (!kn_cuda_dequant_supported(m->tok_embd.type)) {
        rc = ERR_UNSUPPORTED;
        goto out;
    }
    if ((rc = fw_alloc(f, (size_t)hp->n_vocab * e * 2, &f->wout)) ||
        (rc = fw_mat(f, f->wout, 0, &m->output, raw, raw_cap)) ||
        (rc = fw_vec(f, m->output_norm, hp->n_embd, &f->output_norm)))
        goto out;
    f->matvec = model_matvec_ok(m);
    if (f->matvec) {
        if (m->tied) { /* the LM head is the embedding table already on the device */
            f->rout.data = f->tok_embd_raw;
            f->rout.type = m->tok_embd.type;
            f->rout.row_bytes = m->tok_embd.row_bytes;
        } else if ((rc = fw_raw(f, &m->output, &f->rout))) {
            goto out;
        }
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        struct fw_layer *F = &f->layers[l];
        size_t nff = (size_t)hp->n_ff;
        if ((rc = fw_vec(f, L->attn_norm, hp->n_embd, &F->attn_norm)) ||
            (rc = fw_vec(f, L->ffn_norm, hp->n_embd, &F->ffn_norm)) ||
            (rc = fw_alloc(f, (size_t)f->qkv_dim * e * 2, &F->wqkv)) ||
            (rc = fw_mat(f, F->wqkv, 0, &L->wq, raw, raw_cap)) ||
            (rc = fw_mat(f, F->wqkv, f->q_dim, &L->wk, raw, raw_cap)) ||
            (rc = fw_mat(f, F->wqkv, f->q_dim + f->kv_dim, &L->wv, raw, raw_cap)) ||
            (rc = fw_alloc(f, e * (size_t)f->q_dim * 2, &F->wo)) ||
            (rc = fw_mat(f, F->wo, 0, &L->wo, raw, raw_cap)) ||
            (rc = fw_alloc(f, 2 * nff * e * 2, &F->wgu)) ||
            (rc = fw_mat(f, F->wgu, 0, &L->w_gate, raw, raw_cap)) ||
            (rc = fw_mat(f, F->wgu, hp->n_ff, &L->w_up, raw, raw_cap)) ||
            (rc = fw_alloc(f, e * nff * 2, &F->wd)) ||
            (rc = fw_mat(f, F->wd, 0, &L->w_down, raw, raw_cap)))
            goto out;
        if (f->matvec &&
            ((rc = fw_raw(f, &L->wq, &F->rq)) || (rc = fw_raw(f, &L->wk, &F->rk)) ||
             (rc = fw_raw(f, &L->wv, &F->rv)) || (rc = fw_raw(f, &L->wo, &F->ro)) ||
             (rc = fw_raw(f, &L->w_gate, &F->rg)) || (rc = fw_raw(f, &L->w_up, &F->ru)) ||
             (rc = fw_raw(f, &L->w_down, &F->rd))))
            goto out;
        if (L->bq) {
            float *b = malloc((size_t)f->qkv_dim * sizeof(float));
            if (!b) {
                rc = ERR_NOMEM;
                goto out;
            }
            memcpy(b, L->bq, (size_t)f->q_dim * sizeof(float));
            memcpy(b + f->q_dim, L->bk, (size_t)f->kv_dim * sizeof(float));
            memcpy(b + f->q_dim + f->kv_dim, L->bv, (size_t)f->kv_dim * sizeof(float));
            rc = fw_vec(f, b, f->qkv_dim, &F->bqkv);
            free(b);
            if (rc)
                goto out;
        }
        if (L->bo && (rc = fw_vec(f, L->bo, hp->n_embd, &F->bo)))
            goto out;
    }
out:
    kn_cuda_release(f->c, raw);
    return rc;
}

static size_t align8(size_t x)
{
    return (x + 7) & ~(size_t)7;
}

/* Random bf16 weights of the shapes of hp (synthetic benchmark models):
 * uniform in +-1/sqrt(fan_in), norms 1, no biases; the embedding table is a
 * BF16 "GGUF" table. */
static int random_weights(struct fwdcuda *f, uint64_t seed)
{
    const struct model_hparams *hp = &f->hp;
    size_t e = (size_t)hp->n_embd, nff = (size_t)hp->n_ff, nv = (size_t)hp->n_vocab;
    float *ones = malloc(e * sizeof(float));
    if (!ones)
        return ERR_NOMEM;
    for (size_t i = 0; i < e; i++)
        ones[i] = 1.0f;
    float se = 1.0f / sqrtf((float)e), sq = 1.0f / sqrtf((float)f->q_dim);
    float sf = 1.0f / sqrtf((float)nff);
    int rc;
    f->embd_type = GGML_TYPE_BF16;
    f->embd_row_bytes = e * 2;
    if ((rc = fw_alloc(f, nv * e * 2, &f->tok_embd_raw)) ||
        (rc = kn_cuda_fill_random_bf16(f->c, f->tok_embd_raw, nv * e, seed++, 1.0f)) ||
        (rc = fw_alloc(f, nv * e * 2, &f->wout)) ||
        (rc = kn_cuda_fill_random_bf16(f->c, f->wout, nv * e, seed++, se)) ||
        (rc = fw_vec(f, ones, hp->n_embd, &f->output_norm)))
        goto out;
    for (int l = 0; l < hp->n_layer; l++) {
        struct fw_layer *F = &f->layers[l];
        if ((rc = fw_vec(f, ones, hp->n_embd, &F->attn_norm)) ||
            (rc = fw_vec(f, ones, hp->n_embd, &F->ffn_norm)) ||
            (rc = fw_alloc(f, (size_t)f->qkv_dim * e * 2, &F->wqkv)) ||
            (rc = kn_cuda_fill_random_bf16(f->c, F->wqkv, (size_t)f->qkv_dim * e, seed++, se)) ||
            (rc = fw_alloc(f, e * (size_t)f->q_dim * 2, &F->wo)) ||
            (rc = kn_cuda_fill_random_bf16(f->c, F->wo, e * (size_t)f->q_dim, seed++, sq)) ||
            (rc = fw_alloc(f, 2 * nff * e * 2, &F->wgu)) ||
            (rc = kn_cuda_fill_random_bf16(f->c, F->wgu, 2 * nff * e, seed++, se)) ||
            (rc = fw_alloc(f, e * nff * 2, &F->wd)) ||
            (rc = kn_cuda_fill_random_bf16(f->c, F->wd, e * nff, seed++, sf)))
            goto out;
    }
out:
    free(ones);
    return rc;
}

static int fwdcuda_create(const struct model *m, const struct model_hparams *hp,
                          const struct model_ctx_params *p, const struct kv_cache *kv,
                          uint64_t seed, struct fwdcuda **out)
{
    if (hp->head_dim % 8 || hp->head_dim > 256) {
        log_error("cuda: head dim %d is not supported (a multiple of 8 up to 256)", hp->head_dim);
        return ERR_UNSUPPORTED;
    }
    if (hp->n_head / hp->n_head_kv > 32) {
        log_error("cuda: GQA group %d is not supported (<= 32)", hp->n_head / hp->n_head_kv);
        return ERR_UNSUPPORTED;
    }
    struct fwdcuda *f = calloc(1, sizeof *f);
    if (!f)
        return ERR_NOMEM;
    int rc = kn_cuda_new(0, 1u << 20, &f->c);
    if (rc) {
        free(f);
        return rc;
    }
    f->m = m;
    f->hp = *hp;
    f->n_batch_max = p->n_batch_max;
    f->n_out_max = p->n_out_max;
    f->n_seq = kv->n_seq;
    f->max_blocks = kv->max_blocks_per_seq;
    f->block_tokens = kv->block_tokens;
    f->n_ctx = p->n_ctx;
    f->q_dim = hp->n_head * hp->head_dim;
    f->kv_dim = hp->n_head_kv * hp->head_dim;
    f->qkv_dim = f->q_dim + 2 * f->kv_dim;
    f->tile_max = kn_cuda_attention_tile_max(hp->n_head, hp->n_head_kv);
    rc = ERR_NOMEM;
    if (!(f->layers = calloc((size_t)hp->n_layer, sizeof *f->layers)))
        goto out;
    if ((rc = m ? upload_weights(f) : random_weights(f, seed)))
        goto out;
    double *theta = malloc((size_t)(hp->n_rot / 2) * sizeof(double));
    if (!theta) {
        rc = ERR_NOMEM;
        goto out;
    }
    kn_cuda_rope_theta(theta, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale,
                       m ? m->rope_freqs : NULL);
    void *dth = NULL;
    rc = fw_alloc(f, (size_t)(hp->n_rot / 2) * sizeof(double), &dth);
    if (!rc)
        rc = kn_cuda_upload(f->c, dth, theta, (size_t)(hp->n_rot / 2) * sizeof(double));
    free(theta);
    if (rc)
        goto out;
    f->theta = dth;
    /* KV pool: same geometry as the host cache, bf16 */
    f->layer_rows = (size_t)kv->n_blocks * (size_t)kv->block_tokens;
    size_t kvb = (size_t)hp->n_layer * f->layer_rows * (size_t)f->kv_dim * 2;
    size_t nb = (size_t)p->n_batch_max, no = (size_t)p->n_out_max, e = (size_t)hp->n_embd;
    size_t nff = (size_t)hp->n_ff;
    size_t xbw = e > (size_t)f->q_dim ? e : (size_t)f->q_dim;
    f->work_bytes = kn_cuda_attention_work_bytes(p->n_batch_max, hp->n_head, hp->head_dim, p->n_ctx);
    if (f->work_bytes > ATTN_WORK_MAX)
        f->work_bytes = ATTN_WORK_MAX;
    size_t xfw = xbw > nff ? xbw : nff;
    void *pk, *pv, *px, *pxb, *pqkv, *patt, *pgu, *phb, *pxo, *plog, *pw, *pxf;
    if ((rc = fw_alloc(f, kvb, &pk)) || (rc = fw_alloc(f, kvb, &pv)) ||
        (rc = fw_alloc(f, nb * e * 4, &px)) || (rc = fw_alloc(f, nb * xbw * 2, &pxb)) ||
        (rc = fw_alloc(f, nb * (size_t)f->qkv_dim * 4, &pqkv)) ||
        (rc = fw_alloc(f, nb * (size_t)f->q_dim * 2, &patt)) ||
        (rc = fw_alloc(f, nb * 2 * nff * 4, &pgu)) || (rc = fw_alloc(f, nb * nff * 2, &phb)) ||
        (rc = fw_alloc(f, no * e * 2, &pxo)) ||
        (rc = fw_alloc(f, no * (size_t)hp->n_vocab * 4, &plog)) ||
        (rc = fw_alloc(f, f->work_bytes, &pw)) || (rc = fw_alloc(f, xfw * 4, &pxf)))
        goto out;
    f->xf = pxf;
    f->kc = pk, f->vc = pv, f->x = px, f->xb = pxb, f->qkv = pqkv, f->att = patt, f->gu = pgu;
    f->hb = phb, f->xo = pxo, f->logits = plog, f->work = pw;
    /* a synthetic model starts with random K/V everywhere (benchmarks attend to it) */
    if (!m && ((rc = kn_cuda_fill_random_bf16(f->c, pk, kvb / 2, seed + 1000, 1.0f)) ||
               (rc = kn_cuda_fill_random_bf16(f->c, pv, kvb / 2, seed + 1001, 1.0f))))
        goto out;
    /* staging: tokens, pos, seq (nb int32 each), tiles (2 nb), out rows (no),
     * block tables (n_seq * max_blocks), slots (nb int64) */
    size_t o = 0;
    f->off_tok = o, o = align8(o + nb * 4);
    f->off_pos = o, o = align8(o + nb * 4);
    f->off_seq = o, o = align8(o + nb * 4);
    f->off_tiles = o, o = align8(o + 2 * nb * 4);
    f->off_out = o, o = align8(o + no * 4);
    f->off_tab = o, o = align8(o + (size_t)f->n_seq * (size_t)f->max_blocks * 4);
    f->off_slot = o, o = align8(o + nb * 8);
    f->stage_bytes = o;
    void *ds;
    if ((rc = fw_alloc(f, o, &ds)))
        goto out;
    f->dstage = ds;
    rc = ERR_NOMEM;
    if (!(f->stage = malloc(o)))
        goto out;
    if ((rc = kn_cuda_sync(f->c)))
        goto out;
    *out = f;
    f = NULL;
    rc = 0;
out:
    fwdcuda_free(f);
    return rc;
}

int fwdcuda_new(const struct model *m, const struct model_ctx_params *p,
                const struct kv_cache *kv, struct fwdcuda **out)
{
    return fwdcuda_create(m, &m->hp, p, kv, 0, out);
}

int fwdcuda_new_synthetic(const struct model_hparams *hp, const struct model_ctx_params *p,
                          const struct kv_cache *kv, uint64_t seed, struct fwdcuda **out)
{
    return fwdcuda_create(NULL, hp, p, kv, seed, out);
}

void fwdcuda_copy_block(void *fp, int32_t dst, int32_t src, int n_pos)
{
    struct fwdcuda *f = fp;
    const struct model_hparams *hp = &f->hp;
    size_t bt = (size_t)f->block_tokens, kd = (size_t)f->kv_dim;
    for (int l = 0; l < hp->n_layer && !f->err; l++) {
        size_t base = (size_t)l * f->layer_rows * kd * 2;
        size_t so = base + (size_t)src * bt * kd * 2, d = base + (size_t)dst * bt * kd * 2;
        size_t n = (size_t)n_pos * kd * 2;
        int rc = kn_cuda_copy(f->c, (char *)f->kc + d, (char *)f->kc + so, n);
        if (!rc)
            rc = kn_cuda_copy(f->c, (char *)f->vc + d, (char *)f->vc + so, n);
        if (rc)
            f->err = rc;
    }
}

/* Fill the staging area for batch b; returns the number of attention tiles,
 * their largest token count in *tile_used (the attention launches one warp
 * per query head and tile token: a decode-only step uses tiles of 1). */
static int stage_batch(struct fwdcuda *f, const struct kv_cache *kv, const struct model_batch *b,
                       const int32_t *out_rows, int n_out, int *max_ctx, int *tile_used)
{
    int n = b->n_tokens, n_tiles = 0, mc = 0;
    *tile_used = 1;
    int32_t *tok = (int32_t *)(f->stage + f->off_tok), *pos = (int32_t *)(f->stage + f->off_pos);
    int32_t *seq = (int32_t *)(f->stage + f->off_seq);
    int32_t *tiles = (int32_t *)(f->stage + f->off_tiles);
    int64_t *slot = (int64_t *)(f->stage + f->off_slot);
    memcpy(tok, b->token, (size_t)n * 4);
    memcpy(pos, b->pos, (size_t)n * 4);
    memcpy(seq, b->seq, (size_t)n * 4);
    memcpy(f->stage + f->off_out, out_rows, (size_t)n_out * 4);
    /* the block tables are one contiguous array, slot s at s * max_blocks (kv.h) */
    memcpy(f->stage + f->off_tab, kv->seqs[0].blocks,
           (size_t)f->n_seq * (size_t)f->max_blocks * 4);
    for (int i = 0; i < n; i++) {
        const struct kv_seq *s = &kv->seqs[b->seq[i]];
        int p = b->pos[i];
        slot[i] = (int64_t)s->blocks[p / f->block_tokens] * f->block_tokens + p % f->block_tokens;
        if (p + 1 > mc)
            mc = p + 1;
        /* a new tile unless this token continues the previous one's sequence */
        if (n_tiles > 0) {
            int32_t *t = tiles + 2 * (n_tiles - 1);
            if (b->seq[t[0]] == b->seq[i] && t[1] < f->tile_max && b->pos[i - 1] + 1 == p &&
                b->seq[i - 1] == b->seq[i]) {
                t[1]++;
                if (t[1] > *tile_used)
                    *tile_used = t[1];
                continue;
            }
        }
        tiles[2 * n_tiles] = i;
        tiles[2 * n_tiles + 1] = 1;
        n_tiles++;
    }
    *max_ctx = mc;
    return n_tiles;
}

/* A step of one token on a matvec model: every projection is a fused
 * dequant matvec on f32 activations (the weights are read in their GGUF
 * encoding, 4.5-8.5 bits instead of bf16's 16). Inputs staged and the
 * embedding row in f->x already. */
static int run_step_matvec(struct fwdcuda *f, int n_tiles, int max_ctx, int n_out)
{
    const struct model_hparams *hp = &f->hp;
    struct kn_cuda *c = f->c;
    const int32_t *d_pos = (const int32_t *)(f->dstage + f->off_pos);
    const int32_t *d_seq = (const int32_t *)(f->dstage + f->off_seq);
    const int32_t *d_tiles = (const int32_t *)(f->dstage + f->off_tiles);
    const int32_t *d_out = (const int32_t *)(f->dstage + f->off_out);
    const int32_t *d_tab = (const int32_t *)(f->dstage + f->off_tab);
    const int64_t *d_slot = (const int64_t *)(f->dstage + f->off_slot);
    int e = hp->n_embd, nff = hp->n_ff, qd = f->q_dim, kd = f->kv_dim, qkv = f->qkv_dim;
    float *xf = f->xf;
    int rc;
#define MV(out, acc, w, rows, cols) \
    kn_cuda_matvec_q(c, (out), (acc), xf, (w).data, (w).type, (w).row_bytes, (rows), (cols))
    for (int l = 0; l < hp->n_layer; l++) {
        const struct fw_layer *L = &f->layers[l];
        size_t kv_off = (size_t)l * f->layer_rows * (size_t)kd * 2;
        void *kc = (char *)f->kc + kv_off, *vc = (char *)f->vc + kv_off;
        struct kn_cuda_attn a = {xf, 0, f->qkv, (size_t)qkv, kc, vc, d_tab, f->max_blocks,
                                 d_seq, d_pos, d_tiles, n_tiles, 1, 1, hp->n_head,
                                 hp->n_head_kv, hp->head_dim, f->block_tokens, max_ctx,
                                 1.0f / sqrtf((float)hp->head_dim), f->work, f->work_bytes};
        if ((rc = kn_cuda_rmsnorm(c, xf, 0, f->x, L->attn_norm, NULL, 1, e, hp->rms_eps)) ||
            (rc = MV(f->qkv, 0, L->rq, qd, e)) || (rc = MV(f->qkv + qd, 0, L->rk, kd, e)) ||
            (rc = MV(f->qkv + qd + kd, 0, L->rv, kd, e)) ||
            (L->bqkv && (rc = kn_cuda_add_bias(c, f->qkv, L->bqkv, 1, qkv, (size_t)qkv))) ||
            (rc = kn_cuda_rope(c, f->qkv, 1, (size_t)qkv, hp->n_head, hp->head_dim, hp->n_rot,
                               d_pos, f->theta, hp->rope_neox)) ||
            (rc = kn_cuda_rope(c, f->qkv + qd, 1, (size_t)qkv, hp->n_head_kv, hp->head_dim,
                               hp->n_rot, d_pos, f->theta, hp->rope_neox)) ||
            (rc = kn_cuda_kv_append(c, kc, vc, f->qkv + qd, f->qkv + qd + kd, (size_t)qkv, d_slot,
                                    1, kd)) ||
            (rc = kn_cuda_attention(c, &a)) || (rc = MV(f->x, 1, L->ro, e, qd)) ||
            (L->bo && (rc = kn_cuda_add_bias(c, f->x, L->bo, 1, e, (size_t)e))) ||
            (rc = kn_cuda_rmsnorm(c, xf, 0, f->x, L->ffn_norm, NULL, 1, e, hp->rms_eps)) ||
            (rc = MV(f->gu, 0, L->rg, nff, e)) || (rc = MV(f->gu + nff, 0, L->ru, nff, e)) ||
            (rc = kn_cuda_swiglu(c, xf, 0, f->gu, f->gu + nff, 1, nff, 2 * (size_t)nff)) ||
            (rc = MV(f->x, 1, L->rd, e, nff)))
            return rc;
    }
    if (n_out > 0 &&
        ((rc = kn_cuda_rmsnorm(c, xf, 0, f->x, f->output_norm, d_out, 1, e, hp->rms_eps)) ||
         (rc = MV(f->logits, 0, f->rout, hp->n_vocab, e))))
        return rc;
#undef MV
    return 0;
}

/* The layers and the LM head of one step; logits stay on the device. */
static int run_step(struct fwdcuda *f, const struct kv_cache *kv, const struct model_batch *b,
                    const int32_t *out_rows, int n_out)
{
    const struct model_hparams *hp = &f->hp;
    struct kn_cuda *c = f->c;
    int n = b->n_tokens, rc;
    if (f->err)
        return f->err;
    if (n < 1 || n > f->n_batch_max || n_out > f->n_out_max || kv->n_seq != f->n_seq)
        return ERR_INVAL;
    int max_ctx = 0;
    int tile_used = 1;
    int n_tiles = stage_batch(f, kv, b, out_rows, n_out, &max_ctx, &tile_used);
    if ((rc = kn_cuda_upload(c, f->dstage, f->stage, f->stage_bytes)))
        return rc;
    const int32_t *d_tok = (const int32_t *)(f->dstage + f->off_tok);
    const int32_t *d_pos = (const int32_t *)(f->dstage + f->off_pos);
    const int32_t *d_seq = (const int32_t *)(f->dstage + f->off_seq);
    const int32_t *d_tiles = (const int32_t *)(f->dstage + f->off_tiles);
    const int32_t *d_out = (const int32_t *)(f->dstage + f->off_out);
    const int32_t *d_tab = (const int32_t *)(f->dstage + f->off_tab);
    const int64_t *d_slot = (const int64_t *)(f->dstage + f->off_slot);
    int e = hp->n_embd, nff = hp->n_ff, qd = f->q_dim, kd = f->kv_dim, qkv = f->qkv_dim;
    int neox = hp->rope_neox;
    if ((rc = kn_cuda_dequant(c, f->x, 0, f->tok_embd_raw, f->embd_type, f->embd_row_bytes, d_tok,
                              n, e)))
        return rc;
    if (f->matvec && n == 1)
        return run_step_matvec(f, n_tiles, max_ctx, n_out); /* one tile of one token */
    for (int l = 0; l < hp->n_layer; l++) {
        const struct fw_layer *L = &f->layers[l];
        size_t kv_off = (size_t)l * f->layer_rows * (size_t)kd * 2;
        void *kc = (char *)f->kc + kv_off, *vc = (char *)f->vc + kv_off;
        struct kn_cuda_attn a = {f->att, 1, f->qkv, (size_t)qkv, kc, vc, d_tab, f->max_blocks,
                                 d_seq, d_pos, d_tiles, n_tiles, tile_used, n, hp->n_head,
                                 hp->n_head_kv, hp->head_dim, f->block_tokens, max_ctx,
                                 1.0f / sqrtf((float)hp->head_dim), f->work, f->work_bytes};
        if ((rc = kn_cuda_rmsnorm(c, f->xb, 1, f->x, L->attn_norm, NULL, n, e, hp->rms_eps)) ||
            (rc = kn_cuda_gemm_bf16(c, f->qkv, (size_t)qkv, f->xb, L->wqkv, n, e, qkv, 0.0f)) ||
            (L->bqkv && (rc = kn_cuda_add_bias(c, f->qkv, L->bqkv, n, qkv, (size_t)qkv))) ||
            (rc = kn_cuda_rope(c, f->qkv, n, (size_t)qkv, hp->n_head, hp->head_dim, hp->n_rot,
                               d_pos, f->theta, neox)) ||
            (rc = kn_cuda_rope(c, f->qkv + qd, n, (size_t)qkv, hp->n_head_kv, hp->head_dim,
                               hp->n_rot, d_pos, f->theta, neox)) ||
            (rc = kn_cuda_kv_append(c, kc, vc, f->qkv + qd, f->qkv + qd + kd, (size_t)qkv, d_slot,
                                    n, kd)) ||
            (rc = kn_cuda_attention(c, &a)) ||
            (rc = kn_cuda_gemm_bf16(c, f->x, (size_t)e, f->att, L->wo, n, qd, e, 1.0f)) ||
            (L->bo && (rc = kn_cuda_add_bias(c, f->x, L->bo, n, e, (size_t)e))) ||
            (rc = kn_cuda_rmsnorm(c, f->xb, 1, f->x, L->ffn_norm, NULL, n, e, hp->rms_eps)) ||
            (rc = kn_cuda_gemm_bf16(c, f->gu, 2 * (size_t)nff, f->xb, L->wgu, n, e, 2 * nff,
                                    0.0f)) ||
            (rc = kn_cuda_swiglu(c, f->hb, 1, f->gu, f->gu + nff, n, nff, 2 * (size_t)nff)) ||
            (rc = kn_cuda_gemm_bf16(c, f->x, (size_t)e, f->hb, L->wd, n, nff, e, 1.0f)))
            return rc;
    }
    if (n_out > 0 &&
        ((rc = kn_cuda_rmsnorm(c, f->xo, 1, f->x, f->output_norm, d_out, n_out, e, hp->rms_eps)) ||
         (rc = kn_cuda_gemm_bf16(c, f->logits, (size_t)hp->n_vocab, f->xo, f->wout, n_out, e,
                                 hp->n_vocab, 0.0f))))
        return rc;
    return 0;
}

int fwdcuda_forward(struct fwdcuda *f, const struct kv_cache *kv, const struct model_batch *b,
                    const int32_t *out_rows, int n_out, float *logits)
{
    int rc = run_step(f, kv, b, out_rows, n_out);
    if (rc)
        return rc;
    if (n_out > 0)
        return kn_cuda_download(f->c, logits, f->logits,
                                (size_t)n_out * (size_t)f->hp.n_vocab * sizeof(float));
    return kn_cuda_sync(f->c);
}

int fwdcuda_forward_greedy(struct fwdcuda *f, const struct kv_cache *kv,
                           const struct model_batch *b, const int32_t *out_rows, int n_out,
                           int32_t *ids)
{
    int rc = run_step(f, kv, b, out_rows, n_out);
    if (rc)
        return rc;
    if (n_out > 0) {
        /* the ids land in the (now consumed) token slot of the device staging area */
        int32_t *d_ids = (int32_t *)(f->dstage + f->off_tok);
        if ((rc = kn_cuda_argmax(f->c, d_ids, f->logits, n_out, f->hp.n_vocab)))
            return rc;
        return kn_cuda_download(f->c, ids, d_ids, (size_t)n_out * sizeof(int32_t));
    }
    return kn_cuda_sync(f->c);
}

#endif
