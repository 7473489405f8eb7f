/*
 * forward.c - model contexts and the one dispatch of the forward pass:
 * the CPU backend (forward_cpu.h) or the CUDA backend (forward_cuda.h),
 * chosen by model_ctx_params.device at model_ctx_new, or for an encoder
 * model (bert) the encoder (encoder.h), CPU only.
 *
 * What is common to both lives here: the parameters' defaults and checks,
 * the byte budget (max_bytes), the KV cache with its block tables and
 * prefix cache (always on the host; with CUDA its K/V arrays are freed and
 * block copies go to the device through the cache's copy hook), the
 * validation of every batch against the cache (check_batch) with the
 * reservation of the new positions' blocks before the step and the commit
 * of the slots' lengths after it, and the host logits rows handed back. A
 * backend computes one validated step: model_forward reads
 *
 *   check_batch(b)                    ids, slots, positions, marked rows, free blocks
 *   kv_seq_reserve(new positions)
 *   logits = cpu or cuda forward(b)   (n_out, n_vocab) rows of the marked tokens
 *   slot lengths += new positions      (kv_seq_commit: also what the rings still hold)
 *
 * An encoder step keeps nothing: check_batch asks for whole inputs (each
 * a run of positions 0..len-1) instead of the slots' next positions, and
 * the encoder's hidden rows of the marked tokens come back, with no
 * reservation or commit in the cache.
 *
 * Allocation: none per step (the backends allocate at creation).
 * Threads: the thread that owns the context.
 */
#include "worker/engine/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "kernels/kn.h"
#include "worker/engine/encoder.h"
#include "worker/engine/forward_cpu.h"
#include "worker/engine/forward_cuda.h"

struct model_ctx {
    const struct model *m;
    struct model_ctx_params p;   /* with defaults filled in */
    struct kv_cache *kv;
    float *logits;     /* (n_out_max, n_vocab) host rows of the marked tokens;
                        * (n_out_max, n_embd) hidden states with p.embeddings */
    int32_t *new_len;  /* (n_seq_max) slot lengths after the step (validation) */
    int32_t *out_rows; /* (n_out_max) batch index of each marked token */
    struct fwdcpu *cpu; /* device KN_DEVICE_CPU: the CPU forward pass (forward_cpu.h) */
    struct fwdcuda *cu; /* device KN_DEVICE_CUDA: the GPU forward pass (forward_cuda.h) */
    struct encoder *enc; /* an encoder model (bert): its forward pass (encoder.h), CPU */
};

void model_ctx_params_init(struct model_ctx_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_batch_max = 512;
    p->n_seq_max = 1;
}

struct kv_cache *model_ctx_kv(struct model_ctx *c)
{
    return c->kv;
}

int model_ctx_n_ctx(const struct model_ctx *c)
{
    return c->p.n_ctx;
}

const struct model *model_ctx_model(const struct model_ctx *c)
{
    return c->m;
}

const struct model_ctx_params *model_ctx_get_params(const struct model_ctx *c)
{
    return &c->p;
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

/* p with model_ctx_new's defaults, checked. 0 or ERR_INVAL. */
static int fill_params(const struct model *m, struct model_ctx_params *p)
{
    const struct model_hparams *hp = &m->hp;
    if (p->n_ctx == 0)
        p->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p->n_out_max == 0)
        p->n_out_max = p->n_seq_max;
    if (hp->arch == MODEL_ARCH_BERT) { /* an encoder step holds whole inputs, any all marked */
        if (p->n_batch_max < p->n_ctx)
            p->n_batch_max = p->n_ctx;
        if (p->n_out_max < p->n_ctx)
            p->n_out_max = p->n_ctx;
    }
    if (p->n_ctx < 1 || p->n_ctx > hp->n_ctx_train || p->n_batch_max < 1 || p->n_seq_max < 1 ||
        p->n_out_max < 1 || p->n_out_max > p->n_batch_max || p->n_kv_blocks < 0 ||
        p->n_batch_max > (1 << 20) || p->n_seq_max > (1 << 20) ||
        (p->device != KN_DEVICE_CPU && p->device != KN_DEVICE_CUDA) || p->kv_type < 0 ||
        p->kv_type > MODEL_KV_Q8V)
        return ERR_INVAL;
    if ((p->kv_type == MODEL_KV_Q8 || p->kv_type == MODEL_KV_Q8V) &&
        (p->device != KN_DEVICE_CPU || (hp->n_head_kv * hp->head_dim) % KN_KV_Q8_BLOCK)) {
        log_error("kv type %s: %s", p->kv_type == MODEL_KV_Q8 ? "q8" : "q8v",
                  p->device != KN_DEVICE_CPU
                                        ? "CPU only (--device cpu)"
                                        : "n_head_kv * head_dim must be a multiple of 32");
        return ERR_INVAL;
    }
    return 0;
}

/* Which layers keep their K/V in rings (kv.h): the sliding-window ones on
 * the CPU, unless swa_full, and only when a ring is shorter than a slot's
 * context. Fills ring[n_layer] (may be NULL) and returns their count. */
static int ring_layers(const struct model *m, const struct model_ctx_params *p, uint8_t *ring)
{
    const struct model_hparams *hp = &m->hp;
    int per_seq = (p->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    int w = kv_ring_blocks(hp->n_swa, p->n_batch_max, KV_BLOCK_TOKENS);
    int on = p->device == KN_DEVICE_CPU && !p->swa_full && hp->n_swa > 0 && w > 0 && w < per_seq;
    int n = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int r = on && m->layers[l].swa;
        if (ring)
            ring[l] = (uint8_t)r;
        n += r;
    }
    return n;
}

int model_kv_type_parse(const char *s, int *out)
{
    static const char *const names[] = {"f16", "f32", "q8", "q8v"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = MODEL_KV_F16 + i;
            return 0;
        }
    return ERR_INVAL;
}

int model_ctx_kv_type(const struct model_ctx_params *p)
{
    switch (p->kv_type) {
    case MODEL_KV_F16:
        return KV_TYPE_F16;
    case MODEL_KV_F32:
        return p->device == KN_DEVICE_CPU ? KV_TYPE_F32 : KV_TYPE_F16;
    case MODEL_KV_Q8:
        return KV_TYPE_Q8;
    case MODEL_KV_Q8V:
        return KV_TYPE_Q8V;
    default:
        return p->device == KN_DEVICE_CPU && p->exact_matmul ? KV_TYPE_F32 : KV_TYPE_F16;
    }
}

int model_ctx_kv_f32(const struct model_ctx_params *p)
{
    return model_ctx_kv_type(p) == KV_TYPE_F32;
}

int model_ctx_kv_bytes(const struct model *m, const struct model_ctx_params *pin, size_t *block_bytes,
                       size_t *ring_bytes)
{
    const struct model_hparams *hp = &m->hp;
    struct model_ctx_params p = *pin;
    if (fill_params(m, &p))
        return ERR_INVAL;
    int kv_dim = hp->n_head_kv * hp->head_dim;
    int n_ring = ring_layers(m, &p, NULL);
    size_t bb = 0, rb = 0;
    if (n_ring < hp->n_layer &&
        (bb = kv_cache_bytes(hp->n_layer - n_ring, kv_dim, KV_BLOCK_TOKENS, 1, model_ctx_kv_type(&p))) == 0)
        return ERR_TOOBIG;
    if (n_ring && (rb = kv_cache_ring_bytes(n_ring, kv_dim, KV_BLOCK_TOKENS, p.n_seq_max, hp->n_swa,
                                            p.n_batch_max, model_ctx_kv_type(&p))) == 0)
        return ERR_TOOBIG;
    *block_bytes = bb;
    *ring_bytes = rb;
    return 0;
}

int model_ctx_new(const struct model *m, const struct model_ctx_params *pin, struct model_ctx **out)
{
    const struct model_hparams *hp = &m->hp;
    struct model_ctx_params p = *pin;
    if (fill_params(m, &p))
        return ERR_INVAL;
    /* the CUDA forward implements llama and qwen2 without sliding windows
     * (no q/k norms, GeGLU, post-norms, windows, soft-capping or LongRoPE there) */
    int any_swa = 0;
    for (int l = 0; l < hp->n_layer; l++)
        any_swa |= hp->n_swa > 0 && m->layers[l].swa;
    if (p.device == KN_DEVICE_CUDA &&
        ((hp->arch != MODEL_ARCH_LLAMA && hp->arch != MODEL_ARCH_QWEN2) || any_swa)) {
        log_error("cuda: %s'%s' runs on the CPU only (--device cpu)",
                  any_swa ? "sliding-window attention of " : "architecture ",
                  model_arch_name(hp->arch));
        return ERR_UNSUPPORTED;
    }
    if (hp->arch == MODEL_ARCH_BERT && !p.embeddings) {
        log_error("%s: an encoder model serves embeddings only", model_arch_name(hp->arch));
        return ERR_UNSUPPORTED;
    }
    if (p.device == KN_DEVICE_CUDA && p.embeddings) {
        log_error("cuda: embeddings run on the CPU only (--device cpu)");
        return ERR_UNSUPPORTED;
    }
    int kv_dim = hp->n_head_kv * hp->head_dim;
    size_t no = (size_t)p.n_out_max;
    /* a row of the output: logits, or the hidden state with embeddings */
    size_t row = (size_t)(p.embeddings ? hp->n_embd : hp->n_vocab);
    size_t total = 0;
    int enc = hp->arch == MODEL_ARCH_BERT;
    if ((enc && encoder_bytes(m, &p, &total)) ||
        (!enc && p.device == KN_DEVICE_CPU && fwdcpu_bytes(m, &p, &total)) ||
        add_bytes(&total, no, row * sizeof(float)))
        return ERR_TOOBIG;
    int per_seq = (p.n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    int64_t blocks = p.n_kv_blocks ? p.n_kv_blocks : (int64_t)per_seq * p.n_seq_max;
    if (blocks > INT32_MAX)
        return ERR_TOOBIG;
    /* binary16 K/V, or float32 for the exact path (HF parity to ~1e-6) */
    size_t bb, rb;
    if (model_ctx_kv_bytes(m, &p, &bb, &rb) || (bb && (size_t)blocks > SIZE_MAX / bb) ||
        add_bytes(&total, 1, bb * (size_t)blocks) || add_bytes(&total, 1, rb) ||
        (p.max_bytes && total > p.max_bytes))
        return ERR_TOOBIG;
    uint8_t *ring = malloc((size_t)hp->n_layer);
    if (!ring)
        return ERR_NOMEM;
    ring_layers(m, &p, ring);

    int rc = ERR_NOMEM;
    struct model_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        free(ring);
        return ERR_NOMEM;
    }
    c->m = m;
    c->p = p;
    rc = kv_cache_new_ring(hp->n_layer, kv_dim, KV_BLOCK_TOKENS, (int)blocks, p.n_seq_max, p.n_ctx,
                           ring, hp->n_swa, p.n_batch_max, model_ctx_kv_type(&p), 0, &c->kv);
    if (rc)
        goto out;
    rc = ERR_NOMEM;
    c->logits = malloc(no * row * sizeof(float));
    c->new_len = malloc((size_t)p.n_seq_max * sizeof(int32_t));
    c->out_rows = malloc(no * sizeof(int32_t));
    if (!c->logits || !c->new_len || !c->out_rows)
        goto out;
    if (p.device == KN_DEVICE_CUDA) {
        if ((rc = fwdcuda_new(m, &p, c->kv, &c->cu)))
            goto out;
        /* the K/V values live on the GPU */
        free(c->kv->k);
        free(c->kv->v);
        c->kv->k = c->kv->v = NULL; /* (a binary16 cache: kv_f32 is CPU-only) */
        c->kv->copy_hook = fwdcuda_copy_block;
        c->kv->copy_ud = c->cu;
    } else if (enc) {
        if ((rc = encoder_new(m, &p, &c->enc)))
            goto out;
    } else if ((rc = fwdcpu_new(m, &p, c->kv, &c->cpu))) {
        goto out;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    free(ring);
    model_ctx_free(c);
    return rc;
}

void model_ctx_free(struct model_ctx *c)
{
    if (!c)
        return;
    fwdcuda_free(c->cu);
    fwdcpu_free(c->cpu);
    encoder_free(c->enc);
    kv_cache_free(c->kv);
    free(c->logits);
    free(c->new_len);
    free(c->out_rows);
    free(c);
}

/* Check the batch against the model and the cache; fills new_len and
 * out_rows, returns the number of marked tokens in *n_out. Changes no
 * state visible outside the context. An encoder's batch is whole inputs
 * back to back: a token at position 0 starts one, each next token of it
 * is in the same slot at the next position; the cache is not asked. */
static int check_batch(struct model_ctx *c, const struct model_batch *b, int *n_out)
{
    const struct kv_cache *kv = c->kv;
    int enc = c->enc != NULL;
    if (!b || b->n_tokens < 1 || b->n_tokens > c->p.n_batch_max || !b->token || !b->pos || !b->seq)
        return ERR_INVAL;
    for (int s = 0; s < kv->n_seq; s++)
        c->new_len[s] = kv->seqs[s].n_pos;
    int no = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t t = b->token[i], s = b->seq[i], p = b->pos[i];
        if (t < 0 || t >= c->m->hp.n_vocab || s < 0 || s >= kv->n_seq)
            return ERR_INVAL;
        if (enc ? p != 0 && (i == 0 || s != b->seq[i - 1] || p != b->pos[i - 1] + 1)
                : p != c->new_len[s])
            return ERR_INVAL;
        if (p >= c->p.n_ctx)
            return ERR_INVAL;
        c->new_len[s] = p + 1;
        if (b->out && b->out[i]) {
            if (no >= c->p.n_out_max)
                return ERR_INVAL;
            c->out_rows[no++] = i;
        }
    }
    if (enc) {
        *n_out = no;
        return 0;
    }
    int64_t need = 0;
    for (int s = 0; s < kv->n_seq; s++)
        if (c->new_len[s] > kv->seqs[s].n_pos)
            need += kv_seq_blocks_needed(kv, s, c->new_len[s]);
    if (need > kv->n_free)
        return ERR_BUSY;
    *n_out = no;
    return 0;
}


int model_forward(struct model_ctx *c, const struct model_batch *b, const float **logits,
                  int *n_out)
{
    struct kv_cache *kv = c->kv;
    int no = 0;
    int rc = check_batch(c, b, &no);
    if (rc)
        return rc;
    if (c->enc) { /* nothing kept between steps */
        if ((rc = encoder_forward(c->enc, b, c->out_rows, no, c->logits)))
            return rc;
        *logits = c->logits;
        *n_out = no;
        return 0;
    }
    for (int s = 0; s < kv->n_seq; s++)
        if (c->new_len[s] > kv->seqs[s].n_pos && kv_seq_reserve(kv, s, c->new_len[s]))
            return ERR_INTERNAL; /* counted in check_batch: cannot happen */
    rc = c->cu ? fwdcuda_forward(c->cu, kv, b, c->out_rows, no, c->logits)
               : fwdcpu_forward(c->cpu, kv, b, c->out_rows, no, c->logits);
    if (rc)
        return rc;
    for (int s = 0; s < kv->n_seq; s++)
        if (c->new_len[s] > kv->seqs[s].n_pos)
            kv_seq_commit(kv, s, c->new_len[s]);
    *logits = c->logits;
    *n_out = no;
    return 0;
}
