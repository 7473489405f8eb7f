/*
 * forward.c - model contexts and the one dispatch of the forward pass:
 * the CPU backend (forward_cpu.h) or the CUDA backend (forward_cuda.h),
 * chosen by model_ctx_params.device at model_ctx_new.
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
 *   slot lengths += new positions
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
#include "worker/engine/forward_cpu.h"
#include "worker/engine/forward_cuda.h"

struct model_ctx {
    const struct model *m;
    struct model_ctx_params p;   /* with defaults filled in */
    struct kv_cache *kv;
    float *logits;     /* (n_out_max, n_vocab) host rows of the marked tokens */
    int32_t *new_len;  /* (n_seq_max) slot lengths after the step (validation) */
    int32_t *out_rows; /* (n_out_max) batch index of each marked token */
    struct fwdcpu *cpu; /* device KN_DEVICE_CPU: the CPU forward pass (forward_cpu.h) */
    struct fwdcuda *cu; /* device KN_DEVICE_CUDA: the GPU forward pass (forward_cuda.h) */
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

int model_ctx_new(const struct model *m, const struct model_ctx_params *pin, struct model_ctx **out)
{
    const struct model_hparams *hp = &m->hp;
    struct model_ctx_params p = *pin;
    if (p.n_ctx == 0)
        p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_out_max == 0)
        p.n_out_max = p.n_seq_max;
    if (p.n_ctx < 1 || p.n_ctx > hp->n_ctx_train || p.n_batch_max < 1 || p.n_seq_max < 1 ||
        p.n_out_max < 1 || p.n_out_max > p.n_batch_max || p.n_kv_blocks < 0 ||
        p.n_batch_max > (1 << 20) || p.n_seq_max > (1 << 20) ||
        (p.device != KN_DEVICE_CPU && p.device != KN_DEVICE_CUDA))
        return ERR_INVAL;
    /* the CUDA forward implements llama and qwen2 only (no q/k norms,
     * GeGLU, post-norms, sliding windows, soft-capping or LongRoPE there) */
    if (p.device == KN_DEVICE_CUDA && hp->arch != MODEL_ARCH_LLAMA && hp->arch != MODEL_ARCH_QWEN2) {
        log_error("cuda: architecture '%s' runs on the CPU only (--device cpu)",
                  model_arch_name(hp->arch));
        return ERR_UNSUPPORTED;
    }
    int kv_dim = hp->n_head_kv * hp->head_dim;
    size_t no = (size_t)p.n_out_max;
    size_t total = 0;
    if ((p.device == KN_DEVICE_CPU && fwdcpu_bytes(m, &p, &total)) ||
        add_bytes(&total, no, (size_t)hp->n_vocab * sizeof(float)))
        return ERR_TOOBIG;
    int per_seq = (p.n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    int64_t blocks = p.n_kv_blocks ? p.n_kv_blocks : (int64_t)per_seq * p.n_seq_max;
    if (blocks > INT32_MAX)
        return ERR_TOOBIG;
    /* binary16 K/V, or float32 for the exact path (HF parity to ~1e-6) */
    int kv_f32 = p.device == KN_DEVICE_CPU && p.exact_matmul;
    size_t kvb = kv_cache_bytes(hp->n_layer, kv_dim, KV_BLOCK_TOKENS, (int)blocks, kv_f32);
    if (kvb == 0 || add_bytes(&total, 1, kvb) || (p.max_bytes && total > p.max_bytes))
        return ERR_TOOBIG;

    int rc = ERR_NOMEM;
    struct model_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ERR_NOMEM;
    c->m = m;
    c->p = p;
    rc = kv_cache_new(hp->n_layer, kv_dim, KV_BLOCK_TOKENS, (int)blocks, p.n_seq_max, p.n_ctx,
                      kv_f32, 0, &c->kv);
    if (rc)
        goto out;
    rc = ERR_NOMEM;
    c->logits = malloc(no * (size_t)hp->n_vocab * sizeof(float));
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
    } else if ((rc = fwdcpu_new(m, &p, c->kv, &c->cpu))) {
        goto out;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    model_ctx_free(c);
    return rc;
}

void model_ctx_free(struct model_ctx *c)
{
    if (!c)
        return;
    fwdcuda_free(c->cu);
    fwdcpu_free(c->cpu);
    kv_cache_free(c->kv);
    free(c->logits);
    free(c->new_len);
    free(c->out_rows);
    free(c);
}

/* Check the batch against the model and the cache; fills new_len and
 * out_rows, returns the number of marked tokens in *n_out. Changes no
 * state visible outside the context. */
static int check_batch(struct model_ctx *c, const struct model_batch *b, int *n_out)
{
    const struct kv_cache *kv = c->kv;
    if (!b || b->n_tokens < 1 || b->n_tokens > c->p.n_batch_max || !b->token || !b->pos || !b->seq)
        return ERR_INVAL;
    for (int s = 0; s < kv->n_seq; s++)
        c->new_len[s] = kv->seqs[s].n_pos;
    int no = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int32_t t = b->token[i], s = b->seq[i], p = b->pos[i];
        if (t < 0 || t >= c->m->hp.n_vocab || s < 0 || s >= kv->n_seq)
            return ERR_INVAL;
        if (p != c->new_len[s] || p >= c->p.n_ctx)
            return ERR_INVAL;
        c->new_len[s] = p + 1;
        if (b->out && b->out[i]) {
            if (no >= c->p.n_out_max)
                return ERR_INVAL;
            c->out_rows[no++] = i;
        }
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
    for (int s = 0; s < kv->n_seq; s++)
        if (c->new_len[s] > kv->seqs[s].n_pos && kv_seq_reserve(kv, s, c->new_len[s]))
            return ERR_INTERNAL; /* counted in check_batch: cannot happen */
    rc = c->cu ? fwdcuda_forward(c->cu, kv, b, c->out_rows, no, c->logits)
               : fwdcpu_forward(c->cpu, kv, b, c->out_rows, no, c->logits);
    if (rc)
        return rc;
    for (int s = 0; s < kv->n_seq; s++)
        if (c->new_len[s] > kv->seqs[s].n_pos)
            kv->seqs[s].n_pos = c->new_len[s];
    *logits = c->logits;
    *n_out = no;
    return 0;
}
