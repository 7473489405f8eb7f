/*
 * encoder.c - the BERT encoder forward pass over packed whole inputs. See
 * encoder.h for the step's pseudocode and the numerics.
 */
#include "worker/engine/encoder.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "worker/engine/forward_cpu.h"

struct encoder {
    const struct model *m;
    struct kn_pool *pool;
    int exact;
    int cap;           /* tokens per step (n_batch_max) */
    int max_len;       /* longest input (n_ctx) */
    float *x;          /* (cap, n_embd) residual stream */
    float *q, *k, *v;  /* (cap, n_embd) */
    float *att;        /* (cap, n_embd) attention output */
    float *proj;       /* (cap, n_embd) Wo / Wdown output */
    float *hb;         /* (cap, n_ff) FFN inner */
    float *scores;     /* (n_threads, max_len) one score row per pool thread */
    float *row;        /* (n_embd) dequantized type row */
    int32_t *start;    /* (cap) first token of each token's input (its run) */
    int32_t *len;      /* (cap) length of each token's input */
    void *mm;          /* matmul scratch */
    size_t mm_bytes;
    int n_threads;
    int n_tok;         /* tokens in the current step */
};

void encoder_free(struct encoder *e)
{
    if (!e)
        return;
    free(e->x);
    free(e->q);
    free(e->k);
    free(e->v);
    free(e->att);
    free(e->proj);
    free(e->hb);
    free(e->scores);
    free(e->row);
    free(e->start);
    free(e->len);
    free(e->mm);
    free(e);
}

/* The float rows of a step of cap tokens: 6 of n_embd and one of n_ff per
 * token; SIZE_MAX on overflow. */
static size_t step_floats(const struct model_hparams *hp, int cap)
{
    size_t c = (size_t)cap, d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    if (c > SIZE_MAX / sizeof(float) / (6 * d + f))
        return SIZE_MAX;
    return c * (6 * d + f);
}

int encoder_bytes(const struct model *m, const struct model_ctx_params *p, size_t *total)
{
    const struct model_hparams *hp = &m->hp;
    int k_max = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
    size_t mm = fwdcpu_linear_scratch_bytes(p->n_batch_max, k_max);
    size_t fl = step_floats(hp, p->n_batch_max);
    size_t sc = (size_t)kn_pool_threads(p->pool) * (size_t)p->n_ctx + (size_t)hp->n_embd;
    size_t ids = 2 * (size_t)p->n_batch_max * sizeof(int32_t);
    if (mm == SIZE_MAX || fl == SIZE_MAX || sc > SIZE_MAX / sizeof(float))
        return ERR_TOOBIG;
    size_t parts[] = {mm, fl * sizeof(float), sc * sizeof(float), ids};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (*total > SIZE_MAX - parts[i])
            return ERR_TOOBIG;
        *total += parts[i];
    }
    return 0;
}

int encoder_new(const struct model *m, const struct model_ctx_params *p, struct encoder **out)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->arch != MODEL_ARCH_BERT)
        return ERR_INVAL;
    size_t need = 0;
    if (encoder_bytes(m, p, &need))
        return ERR_TOOBIG;
    struct encoder *e = calloc(1, sizeof *e);
    if (!e)
        return ERR_NOMEM;
    e->m = m;
    e->pool = p->pool;
    e->exact = p->exact_matmul;
    e->cap = p->n_batch_max;
    e->max_len = p->n_ctx;
    e->n_threads = kn_pool_threads(p->pool);
    int k_max = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
    e->mm_bytes = fwdcpu_linear_scratch_bytes(e->cap, k_max);
    size_t c = (size_t)e->cap, d = (size_t)hp->n_embd;
    e->x = malloc(c * d * sizeof(float));
    e->q = malloc(c * d * sizeof(float));
    e->k = malloc(c * d * sizeof(float));
    e->v = malloc(c * d * sizeof(float));
    e->att = malloc(c * d * sizeof(float));
    e->proj = malloc(c * d * sizeof(float));
    e->hb = malloc(c * (size_t)hp->n_ff * sizeof(float));
    e->scores = malloc((size_t)e->n_threads * (size_t)e->max_len * sizeof(float));
    e->row = malloc(d * sizeof(float));
    e->start = malloc(c * sizeof(int32_t));
    e->len = malloc(c * sizeof(int32_t));
    e->mm = malloc(e->mm_bytes);
    if (!e->x || !e->q || !e->k || !e->v || !e->att || !e->proj || !e->hb || !e->scores ||
        !e->row || !e->start || !e->len || !e->mm) {
        encoder_free(e);
        return ERR_NOMEM;
    }
    *out = e;
    return 0;
}

/* out = LN(x) * w + b per row, in place allowed; mean and variance in
 * double (biased variance, as torch.nn.LayerNorm). */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n, int dim,
                      float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * (size_t)dim;
        float *o = out + (size_t)r * (size_t)dim;
        double mean = 0, var = 0;
        for (int i = 0; i < dim; i++)
            mean += xr[i];
        mean /= dim;
        for (int i = 0; i < dim; i++) {
            double t = xr[i] - mean;
            var += t * t;
        }
        var /= dim;
        float inv = (float)(1.0 / sqrt(var + (double)eps)), mf = (float)mean;
        for (int i = 0; i < dim; i++)
            o[i] = (xr[i] - mf) * inv * w[i] + b[i];
    }
}

static int linear(struct encoder *e, float *out, const float *x, int n, const struct model_mat *w,
                  const float *bias)
{
    int rc = fwdcpu_linear(e->pool, e->exact, out, x, n, w, e->mm, e->mm_bytes);
    if (rc)
        return ERR_INTERNAL;
    if (bias)
        kn_add_bias_f32(out, bias, n, w->rows);
    return 0;
}

/* Bidirectional attention within each token's input range: the input's K/V
 * rows are one "page" of kn_attn_paged_heads_f32 (block_tokens = the
 * input's length, block 0 at the input's first row) and every query
 * attends all of it (n_ctx = length), so the kernel's SIMD paths and fixed
 * operation order serve the encoder too. Tokens split evenly over the pool
 * (each token's numbers are the same whatever thread computes it). */
static void attn_run(void *arg, int ith, int nth)
{
    struct encoder *e = arg;
    const struct model_hparams *hp = &e->m->hp;
    size_t d = (size_t)hp->n_embd;
    int lo = (int)((int64_t)e->n_tok * ith / nth), hi = (int)((int64_t)e->n_tok * (ith + 1) / nth);
    float *sc = e->scores + (size_t)ith * (size_t)e->max_len;
    static const int32_t page0 = 0;
    for (int i = lo; i < hi; i++) {
        size_t s0 = (size_t)e->start[i];
        int n = e->len[i];
        kn_attn_paged_heads_f32(e->att + (size_t)i * d, e->q + (size_t)i * d, e->k + s0 * d,
                                e->v + s0 * d, &page0, n, 0, n, hp->n_head, hp->n_head,
                                hp->head_dim, 0, hp->n_head, hp->attn_scale, sc);
    }
}

static void gelu_erf(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

/* One step over the n tokens of ids and pos (e->start, e->len filled):
 * e->x holds the final hidden states after. */
static int enc_step(struct encoder *e, const int32_t *ids, const int32_t *pos, int n)
{
    const struct model *m = e->m;
    const struct model_hparams *hp = &m->hp;
    int d = hp->n_embd, rc;
    kn_get_rows(e->x, m->tok_embd.data, m->tok_embd.type, m->tok_embd.row_bytes, ids, n, d);
    int32_t zero = 0;
    kn_get_rows(e->row, m->tok_types.data, m->tok_types.type, m->tok_types.row_bytes, &zero, 1, d);
    kn_add_bias_f32(e->x, e->row, n, d);
    kn_get_rows(e->proj, m->pos_embd.data, m->pos_embd.type, m->pos_embd.row_bytes, pos, n, d);
    kn_add_f32(e->x, e->proj, (size_t)n * (size_t)d);
    layernorm(e->x, e->x, m->tok_norm, m->tok_norm_b, n, d, hp->norm_eps);
    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if ((rc = linear(e, e->q, e->x, n, &L->wq, L->bq)) ||
            (rc = linear(e, e->k, e->x, n, &L->wk, L->bk)) ||
            (rc = linear(e, e->v, e->x, n, &L->wv, L->bv)))
            return rc;
        if (e->n_threads > 1 && n > 1)
            kn_pool_run(e->pool, attn_run, e);
        else
            attn_run(e, 0, 1);
        if ((rc = linear(e, e->proj, e->att, n, &L->wo, L->bo)))
            return rc;
        kn_add_f32(e->x, e->proj, (size_t)n * (size_t)d);
        layernorm(e->x, e->x, L->attn_norm, L->attn_norm_b, n, d, hp->norm_eps);
        if ((rc = linear(e, e->hb, e->x, n, &L->w_up, L->b_up)))
            return rc;
        gelu_erf(e->hb, (size_t)n * (size_t)hp->n_ff);
        if ((rc = linear(e, e->proj, e->hb, n, &L->w_down, L->b_down)))
            return rc;
        kn_add_f32(e->x, e->proj, (size_t)n * (size_t)d);
        layernorm(e->x, e->x, L->ffn_norm, L->ffn_norm_b, n, d, hp->norm_eps);
    }
    return 0;
}

int encoder_forward(struct encoder *e, const struct model_batch *b, const int32_t *out_rows,
                    int n_out, float *hidden)
{
    int n = b->n_tokens, d = e->m->hp.n_embd, rc;
    /* each input's run: it starts at a position 0 and holds its positions */
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && b->pos[j] != 0)
            j++;
        for (int t = i; t < j; t++) {
            e->start[t] = i;
            e->len[t] = j - i;
        }
        i = j;
    }
    e->n_tok = n;
    if ((rc = enc_step(e, b->token, b->pos, n)))
        return rc;
    for (int r = 0; r < n_out; r++)
        memcpy(hidden + (size_t)r * (size_t)d, e->x + (size_t)out_rows[r] * (size_t)d,
               (size_t)d * sizeof(float));
    return 0;
}
