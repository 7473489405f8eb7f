/* kv.c - paged K/V cache: block free list and per-slot block tables. See kv.h. */
#include "worker/kv.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/err.h"

size_t kv_cache_bytes(int n_layer, int kv_dim, int block_tokens, int n_blocks)
{
    if (n_layer <= 0 || kv_dim <= 0 || block_tokens <= 0 || n_blocks <= 0)
        return 0;
    size_t n = (size_t)n_layer;
    size_t f[3] = {(size_t)kv_dim, (size_t)block_tokens, (size_t)n_blocks};
    for (int i = 0; i < 3; i++) {
        if (n > SIZE_MAX / f[i])
            return 0;
        n *= f[i];
    }
    if (n > SIZE_MAX / (2 * sizeof(float)))
        return 0;
    return n * 2 * sizeof(float);
}

int kv_cache_new(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq, int max_pos,
                 size_t max_bytes, struct kv_cache **out)
{
    if (n_layer <= 0 || kv_dim <= 0 || block_tokens <= 0 || n_seq <= 0 || max_pos <= 0 ||
        n_blocks < 0)
        return ERR_INVAL;
    int per_seq = (int)(((int64_t)max_pos + block_tokens - 1) / block_tokens);
    if (n_blocks == 0) {
        int64_t all = (int64_t)per_seq * n_seq;
        if (all > INT32_MAX)
            return ERR_TOOBIG;
        n_blocks = (int)all;
    }
    size_t bytes = kv_cache_bytes(n_layer, kv_dim, block_tokens, n_blocks);
    if (bytes == 0 || (max_bytes && bytes > max_bytes))
        return ERR_TOOBIG;
    if ((size_t)n_seq > SIZE_MAX / sizeof(int32_t) / (size_t)per_seq)
        return ERR_TOOBIG;
    int rc = ERR_NOMEM;
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return ERR_NOMEM;
    kv->n_layer = n_layer;
    kv->kv_dim = kv_dim;
    kv->block_tokens = block_tokens;
    kv->n_blocks = n_blocks;
    kv->n_seq = n_seq;
    kv->max_pos = max_pos;
    kv->max_blocks_per_seq = per_seq;
    kv->block_stride = (size_t)block_tokens * (size_t)kv_dim;
    kv->layer_stride = (size_t)n_blocks * kv->block_stride;
    kv->k = malloc(bytes / 2);
    kv->v = malloc(bytes / 2);
    kv->free_list = malloc((size_t)n_blocks * sizeof *kv->free_list);
    kv->seqs = calloc((size_t)n_seq, sizeof *kv->seqs);
    kv->tables_ = malloc((size_t)n_seq * (size_t)per_seq * sizeof *kv->tables_);
    if (!kv->k || !kv->v || !kv->free_list || !kv->seqs || !kv->tables_)
        goto out;
    /* free list as a stack: block 0 is handed out first */
    for (int i = 0; i < n_blocks; i++)
        kv->free_list[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    for (int s = 0; s < n_seq; s++)
        kv->seqs[s].blocks = kv->tables_ + (size_t)s * (size_t)per_seq;
    *out = kv;
    kv = NULL;
    rc = 0;
out:
    kv_cache_free(kv);
    return rc;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    free(kv->k);
    free(kv->v);
    free(kv->free_list);
    free(kv->seqs);
    free(kv->tables_);
    free(kv);
}

int kv_seq_blocks_needed(const struct kv_cache *kv, int seq, int n_pos)
{
    int want = (int)(((int64_t)n_pos + kv->block_tokens - 1) / kv->block_tokens);
    int have = kv->seqs[seq].n_blocks;
    return want > have ? want - have : 0;
}

int kv_seq_reserve(struct kv_cache *kv, int seq, int n_pos)
{
    if (seq < 0 || seq >= kv->n_seq || n_pos < 0 || n_pos > kv->max_pos)
        return ERR_INVAL;
    int need = kv_seq_blocks_needed(kv, seq, n_pos);
    if (need > kv->n_free)
        return ERR_BUSY;
    struct kv_seq *s = &kv->seqs[seq];
    for (int i = 0; i < need; i++)
        s->blocks[s->n_blocks++] = kv->free_list[--kv->n_free];
    return 0;
}

int kv_seq_truncate(struct kv_cache *kv, int seq, int n_pos)
{
    if (seq < 0 || seq >= kv->n_seq || n_pos < 0)
        return ERR_INVAL;
    struct kv_seq *s = &kv->seqs[seq];
    if (n_pos >= s->n_pos)
        return 0;
    s->n_pos = n_pos;
    int keep = (int)(((int64_t)n_pos + kv->block_tokens - 1) / kv->block_tokens);
    while (s->n_blocks > keep)
        kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
    return 0;
}

void kv_seq_clear(struct kv_cache *kv, int seq)
{
    if (seq < 0 || seq >= kv->n_seq)
        return;
    struct kv_seq *s = &kv->seqs[seq];
    s->n_pos = 0;
    while (s->n_blocks > 0)
        kv->free_list[kv->n_free++] = s->blocks[--s->n_blocks];
}
