/* kv.c - paged K/V cache: block pool with refcounts, per-slot block tables,
 * and the prefix cache (published blocks in a hash table + LRU). See kv.h. */
#include "worker/engine/kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

size_t kv_cache_bytes(int n_layer, int kv_dim, int block_tokens, int n_blocks, int type)
{
    if (n_layer <= 0 || kv_dim <= 0 || block_tokens <= 0 || n_blocks <= 0 || type < KV_TYPE_F16 ||
        type > KV_TYPE_Q8V || (type >= KV_TYPE_Q8 && kv_dim % 32))
        return 0;
    size_t n = (size_t)n_layer;
    size_t f[3] = {(size_t)kv_dim, (size_t)block_tokens, (size_t)n_blocks};
    for (int i = 0; i < 3; i++) {
        if (n > SIZE_MAX / f[i])
            return 0;
        n *= f[i];
    }
    if (type >= KV_TYPE_Q8) { /* one byte per value, a float scale per 32 */
        size_t q8 = n + n / 32 * sizeof(float), k = type == KV_TYPE_Q8 ? q8 : n * 2;
        return n > SIZE_MAX / 8 ? 0 : k + q8;
    }
    size_t el = type == KV_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    if (n > SIZE_MAX / (2 * el))
        return 0;
    return n * 2 * el;
}

int kv_ring_blocks(int window, int max_chunk, int block_tokens)
{
    if (window < 1 || max_chunk < 1 || block_tokens < 1)
        return 0;
    /* block j -> ring block j % w is position p -> p mod (w * block_tokens):
     * a ring of w * block_tokens positions, and a step's first token
     * needs the window + max_chunk - 1 positions up to the step's last */
    int64_t span = (int64_t)window + max_chunk - 1;
    int64_t w = (span + block_tokens - 1) / block_tokens;
    return w > INT32_MAX / 2 ? 0 : (int)w;
}

size_t kv_cache_ring_bytes(int n_layer_ring, int kv_dim, int block_tokens, int n_seq, int window,
                           int max_chunk, int type)
{
    int w = kv_ring_blocks(window, max_chunk, block_tokens);
    if (n_layer_ring <= 0 || n_seq <= 0 || w == 0 || (int64_t)w * n_seq > INT32_MAX / 2)
        return 0;
    return kv_cache_bytes(n_layer_ring, kv_dim, block_tokens, w * n_seq, type);
}

int kv_cache_new(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq, int max_pos,
                 int type, size_t max_bytes, struct kv_cache **out)
{
    return kv_cache_new_ring(n_layer, kv_dim, block_tokens, n_blocks, n_seq, max_pos, NULL, 0, 0,
                             type, max_bytes, out);
}

int kv_cache_new_ring(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq,
                      int max_pos, const uint8_t *ring_layers, int window, int max_chunk, int type,
                      size_t max_bytes, struct kv_cache **out)
{
    if (n_layer <= 0 || kv_dim <= 0 || block_tokens <= 0 || n_seq <= 0 || max_pos <= 0 ||
        n_blocks < 0 || type < KV_TYPE_F16 || type > KV_TYPE_Q8V ||
        (type >= KV_TYPE_Q8 && kv_dim % 32))
        return ERR_INVAL;
    int n_ring = 0;
    for (int l = 0; ring_layers && l < n_layer; l++)
        n_ring += ring_layers[l] != 0;
    int ring_blocks = 0;
    if (n_ring > 0) {
        ring_blocks = kv_ring_blocks(window, max_chunk, block_tokens);
        if (ring_blocks == 0)
            return ERR_INVAL;
    }
    int per_seq = (int)(((int64_t)max_pos + block_tokens - 1) / block_tokens);
    if (n_blocks == 0) {
        int64_t all = (int64_t)per_seq * n_seq;
        if (all > INT32_MAX / 2)
            return ERR_TOOBIG;
        n_blocks = (int)all;
    }
    if (n_blocks > INT32_MAX / 2)
        return ERR_TOOBIG;
    /* the pool holds the other layers (none when every layer slides: the
     * pool's blocks then only count positions) */
    int n_pool = n_layer - n_ring;
    size_t pool_bytes = n_pool ? kv_cache_bytes(n_pool, kv_dim, block_tokens, n_blocks, type) : 0;
    size_t ring_bytes = n_ring ? kv_cache_ring_bytes(n_ring, kv_dim, block_tokens, n_seq, window,
                                                     max_chunk, type)
                               : 0;
    if ((n_pool && pool_bytes == 0) || (n_ring && ring_bytes == 0) ||
        pool_bytes > SIZE_MAX - ring_bytes)
        return ERR_TOOBIG;
    size_t bytes = pool_bytes + ring_bytes;
    if (bytes == 0 || (max_bytes && bytes > max_bytes))
        return ERR_TOOBIG;
    if ((size_t)n_seq > SIZE_MAX / sizeof(int32_t) / (size_t)per_seq / 2)
        return ERR_TOOBIG;
    if ((size_t)n_blocks > SIZE_MAX / sizeof(int32_t) / (size_t)block_tokens)
        return ERR_TOOBIG;
    uint32_t nh = 1;
    while (nh < (uint32_t)n_blocks)
        nh <<= 1;
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
    kv->n_layer_ring = n_ring;
    kv->window = n_ring ? window : 0;
    kv->ring_blocks = ring_blocks;
    kv->ring_layer_stride = (size_t)n_seq * (size_t)ring_blocks * kv->block_stride;
    kv->type = type;
    kv->f32 = type == KV_TYPE_F32;
    if (kv->f32) {
        kv->k32 = malloc(bytes / 2);
        kv->v32 = malloc(bytes / 2);
    } else if (type >= KV_TYPE_Q8) { /* int8 values, a float scale per 32 */
        size_t nv = (size_t)n_pool * kv->layer_stride + (size_t)n_ring * kv->ring_layer_stride;
        if (type == KV_TYPE_Q8) {
            kv->k8 = malloc(nv);
            kv->k8d = malloc(nv / 32 * sizeof(float));
        } else {
            kv->k = malloc(nv * sizeof(uint16_t));
        }
        kv->v8 = malloc(nv);
        kv->v8d = malloc(nv / 32 * sizeof(float));
    } else {
        kv->k = malloc(bytes / 2);
        kv->v = malloc(bytes / 2);
    }
    size_t nb = (size_t)n_blocks;
    size_t nt = (size_t)n_seq * (size_t)per_seq;
    kv->layer_off = malloc((size_t)n_layer * sizeof *kv->layer_off);
    kv->layer_ring = calloc((size_t)n_layer, 1);
    kv->free_list = malloc(nb * sizeof *kv->free_list);
    kv->seqs = calloc((size_t)n_seq, sizeof *kv->seqs);
    kv->tables_ = malloc((n_ring ? 2 : 1) * nt * sizeof *kv->tables_);
    kv->ref_ = calloc(nb, sizeof *kv->ref_);
    kv->pub_ = calloc(nb, sizeof *kv->pub_);
    kv->key_ = calloc(nb, sizeof *kv->key_);
    kv->parent_ = calloc(nb, sizeof *kv->parent_);
    kv->btok_ = calloc(nb * (size_t)block_tokens, sizeof *kv->btok_);
    kv->hnext_ = malloc(nb * sizeof *kv->hnext_);
    kv->lprev_ = malloc(nb * sizeof *kv->lprev_);
    kv->lnext_ = malloc(nb * sizeof *kv->lnext_);
    kv->hhead_ = malloc((size_t)nh * sizeof *kv->hhead_);
    if (!(kv->f32 ? kv->k32 && kv->v32
                  : type == KV_TYPE_Q8  ? kv->k8 && kv->v8 && kv->k8d && kv->v8d
                  : type == KV_TYPE_Q8V ? kv->k && kv->v8 && kv->v8d
                                        : kv->k && kv->v) ||
        !kv->layer_off || !kv->layer_ring ||
        !kv->free_list || !kv->seqs || !kv->tables_ || !kv->ref_ || !kv->pub_ || !kv->key_ ||
        !kv->parent_ || !kv->btok_ || !kv->hnext_ || !kv->lprev_ || !kv->lnext_ || !kv->hhead_)
        goto out;
    /* pool layers first, then the ring layers */
    size_t off = 0;
    for (int l = 0; l < n_layer; l++)
        if (!(ring_layers && ring_layers[l])) {
            kv->layer_off[l] = off;
            off += kv->layer_stride;
        }
    for (int l = 0; l < n_layer; l++)
        if (ring_layers && ring_layers[l]) {
            kv->layer_ring[l] = 1;
            kv->layer_off[l] = off;
            off += kv->ring_layer_stride;
        }
    kv->hmask = nh - 1;
    for (uint32_t i = 0; i < nh; i++)
        kv->hhead_[i] = -1;
    /* free list as a stack: block 0 is handed out first */
    for (int i = 0; i < n_blocks; i++) {
        kv->free_list[i] = n_blocks - 1 - i;
        kv->hnext_[i] = kv->lprev_[i] = kv->lnext_[i] = -1;
    }
    kv->n_blank = n_blocks;
    kv->n_free = n_blocks;
    kv->lru_head = kv->lru_tail = -1;
    kv->seed = 0x6b76636163686531ull; /* "kvcache1" */
    for (int s = 0; s < n_seq; s++) {
        kv->seqs[s].blocks = kv->tables_ + (size_t)s * (size_t)per_seq;
        kv->seqs[s].last_key = kv->seed;
        if (n_ring) {
            int32_t *ring = kv->tables_ + nt + (size_t)s * (size_t)per_seq;
            for (int j = 0; j < per_seq; j++)
                ring[j] = s * ring_blocks + j % ring_blocks;
            kv->seqs[s].ring = ring;
        }
    }
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
    free(kv->k32);
    free(kv->v32);
    free(kv->k8);
    free(kv->v8);
    free(kv->k8d);
    free(kv->v8d);
    free(kv->layer_off);
    free(kv->layer_ring);
    free(kv->free_list);
    free(kv->seqs);
    free(kv->tables_);
    free(kv->ref_);
    free(kv->pub_);
    free(kv->key_);
    free(kv->parent_);
    free(kv->btok_);
    free(kv->hnext_);
    free(kv->lprev_);
    free(kv->lnext_);
    free(kv->hhead_);
    free(kv);
}

int kv_cache_n_used(const struct kv_cache *kv)
{
    return kv->n_blocks - kv->n_free;
}

/* ---- keys, hash table, LRU ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t kv_block_key(uint64_t parent, const int32_t *tokens, int n)
{
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++)
        h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
    return mix64(h ^ (uint64_t)n);
}

static uint32_t bucket(const struct kv_cache *kv, uint64_t key)
{
    return (uint32_t)(key ^ (key >> 32)) & kv->hmask;
}

/* The published block with this key, parent and tokens, or -1. */
static int32_t ht_find(const struct kv_cache *kv, uint64_t key, uint64_t parent,
                       const int32_t *tokens)
{
    size_t bt = (size_t)kv->block_tokens;
    for (int32_t b = kv->hhead_[bucket(kv, key)]; b >= 0; b = kv->hnext_[b])
        if (kv->key_[b] == key && kv->parent_[b] == parent &&
            memcmp(kv->btok_ + (size_t)b * bt, tokens, bt * sizeof *tokens) == 0)
            return b;
    return -1;
}

static void ht_insert(struct kv_cache *kv, int32_t b)
{
    uint32_t h = bucket(kv, kv->key_[b]);
    kv->hnext_[b] = kv->hhead_[h];
    kv->hhead_[h] = b;
    kv->pub_[b] = 1;
}

static void ht_remove(struct kv_cache *kv, int32_t b)
{
    int32_t *pp = &kv->hhead_[bucket(kv, kv->key_[b])];
    while (*pp >= 0 && *pp != b)
        pp = &kv->hnext_[*pp];
    if (*pp == b)
        *pp = kv->hnext_[b];
    kv->hnext_[b] = -1;
    kv->pub_[b] = 0;
}

static void lru_unlink(struct kv_cache *kv, int32_t b)
{
    int32_t p = kv->lprev_[b], n = kv->lnext_[b];
    if (p >= 0)
        kv->lnext_[p] = n;
    else
        kv->lru_head = n;
    if (n >= 0)
        kv->lprev_[n] = p;
    else
        kv->lru_tail = p;
    kv->lprev_[b] = kv->lnext_[b] = -1;
    kv->n_cached--;
}

static void lru_push(struct kv_cache *kv, int32_t b)
{
    kv->lprev_[b] = kv->lru_tail;
    kv->lnext_[b] = -1;
    if (kv->lru_tail >= 0)
        kv->lnext_[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

/* Take one more reference to block b (a published one when shared). */
static void block_acquire(struct kv_cache *kv, int32_t b)
{
    if (kv->ref_[b]++ == 0) {
        /* only published blocks can be found with refcount 0: they sit in the LRU */
        lru_unlink(kv, b);
        kv->n_free--;
    }
}

/* Drop one reference; the last one frees the block (to the LRU when published). */
static void block_release(struct kv_cache *kv, int32_t b)
{
    if (--kv->ref_[b] > 0)
        return;
    if (kv->pub_[b])
        lru_push(kv, b);
    else
        kv->free_list[kv->n_blank++] = b;
    kv->n_free++;
}

/* A block for exclusive use (refcount 1). The caller checked n_free > 0. */
static int32_t block_alloc(struct kv_cache *kv)
{
    int32_t b;
    if (kv->n_blank > 0) {
        b = kv->free_list[--kv->n_blank];
    } else {
        b = kv->lru_head;
        lru_unlink(kv, b);
        ht_remove(kv, b);
        kv->n_evicted++;
    }
    kv->ref_[b] = 1;
    kv->n_free--;
    return b;
}

static void copy_block(struct kv_cache *kv, int32_t dst, int32_t src, int n_pos)
{
    if (kv->copy_hook) {
        kv->copy_hook(kv->copy_ud, dst, src, n_pos);
        return;
    }
    size_t n = (size_t)n_pos * (size_t)kv->kv_dim;
    for (int l = 0; l < kv->n_layer; l++) {
        if (kv->layer_ring[l]) /* rings are never shared: nothing published to copy from */
            continue;
        size_t d = kv->layer_off[l] + (size_t)dst * kv->block_stride;
        size_t s = kv->layer_off[l] + (size_t)src * kv->block_stride;
        if (kv->f32) {
            memcpy(kv->k32 + d, kv->k32 + s, n * sizeof(float));
            memcpy(kv->v32 + d, kv->v32 + s, n * sizeof(float));
        } else if (kv->type >= KV_TYPE_Q8) { /* kv_dim % 32 == 0: whole scale blocks */
            if (kv->type == KV_TYPE_Q8) {
                memcpy(kv->k8 + d, kv->k8 + s, n);
                memcpy(kv->k8d + d / 32, kv->k8d + s / 32, n / 32 * sizeof(float));
            } else {
                memcpy(kv->k + d, kv->k + s, n * sizeof(uint16_t));
            }
            memcpy(kv->v8 + d, kv->v8 + s, n);
            memcpy(kv->v8d + d / 32, kv->v8d + s / 32, n / 32 * sizeof(float));
        } else {
            memcpy(kv->k + d, kv->k + s, n * sizeof(uint16_t));
            memcpy(kv->v + d, kv->v + s, n * sizeof(uint16_t));
        }
    }
}

void kv_cache_set_seed(struct kv_cache *kv, uint64_t seed)
{
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        if (!kv->pub_[b])
            continue;
        ht_remove(kv, b);
        if (kv->ref_[b] == 0) {
            lru_unlink(kv, b);
            kv->free_list[kv->n_blank++] = b;
        }
    }
    kv->seed = seed;
    for (int s = 0; s < kv->n_seq; s++) {
        kv->seqs[s].n_hashed = 0;
        kv->seqs[s].last_key = seed;
    }
}

/* ---- slots ---- */

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
        s->blocks[s->n_blocks++] = block_alloc(kv);
    return 0;
}

int kv_seq_truncate(struct kv_cache *kv, int seq, int n_pos)
{
    if (seq < 0 || seq >= kv->n_seq || n_pos < 0)
        return ERR_INVAL;
    struct kv_seq *s = &kv->seqs[seq];
    if (n_pos >= s->n_pos)
        return 0;
    if (n_pos > 0 && s->ring_lo > 0 && n_pos - kv->window + 1 < s->ring_lo)
        return ERR_BADSTATE; /* the ring overwrote part of the window before n_pos */
    int bt = kv->block_tokens;
    int keep = (int)(((int64_t)n_pos + bt - 1) / bt);
    if (n_pos % bt && keep <= s->n_blocks) {
        /* the cut lands inside block keep-1: make it private before the
         * slot writes into it again */
        int32_t b = s->blocks[keep - 1];
        if (kv->pub_[b] && kv->ref_[b] > 1) {
            if (kv->n_free < 1)
                return ERR_BUSY;
            int32_t c = block_alloc(kv);
            copy_block(kv, c, b, n_pos % bt);
            block_release(kv, b);
            s->blocks[keep - 1] = c;
        } else if (kv->pub_[b]) {
            ht_remove(kv, b);
        }
    }
    s->n_pos = n_pos;
    if (n_pos == 0)
        s->ring_lo = 0;
    while (s->n_blocks > keep)
        block_release(kv, s->blocks[--s->n_blocks]);
    if (s->n_hashed > n_pos / bt) {
        s->n_hashed = n_pos / bt;
        s->last_key = s->n_hashed ? kv->key_[s->blocks[s->n_hashed - 1]] : kv->seed;
    }
    return 0;
}

void kv_seq_commit(struct kv_cache *kv, int seq, int n_pos)
{
    struct kv_seq *s = &kv->seqs[seq];
    if (n_pos > s->n_pos)
        s->n_pos = n_pos;
    if (kv->ring_blocks) {
        /* the ring holds the last ring_blocks * block_tokens positions written */
        int64_t lo = (int64_t)s->n_pos - (int64_t)kv->ring_blocks * kv->block_tokens;
        if (lo > s->ring_lo)
            s->ring_lo = (int)lo;
    }
}

void kv_seq_clear(struct kv_cache *kv, int seq)
{
    if (seq < 0 || seq >= kv->n_seq)
        return;
    struct kv_seq *s = &kv->seqs[seq];
    s->n_pos = 0;
    s->ring_lo = 0;
    s->n_hashed = 0;
    s->last_key = kv->seed;
    while (s->n_blocks > 0)
        block_release(kv, s->blocks[--s->n_blocks]);
}

int kv_seq_share_prefix(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens)
{
    if (seq < 0 || seq >= kv->n_seq || n_tokens < 0 || (n_tokens > 0 && !tokens))
        return ERR_INVAL;
    struct kv_seq *s = &kv->seqs[seq];
    if (s->n_blocks != 0 || s->n_pos != 0)
        return ERR_BADSTATE;
    if (kv->n_layer_ring)
        return 0; /* rings keep no prefix: nothing is ever published */
    int bt = kv->block_tokens;
    int n_full = n_tokens / bt;
    if (n_full > kv->max_blocks_per_seq)
        n_full = kv->max_blocks_per_seq;
    uint64_t parent = kv->seed;
    for (int j = 0; j < n_full; j++) {
        const int32_t *t = tokens + (size_t)j * (size_t)bt;
        uint64_t key = kv_block_key(parent, t, bt);
        int32_t b = ht_find(kv, key, parent, t);
        if (b < 0)
            break;
        block_acquire(kv, b);
        s->blocks[s->n_blocks++] = b;
        parent = key;
    }
    s->n_hashed = s->n_blocks;
    s->last_key = parent;
    s->n_pos = s->n_blocks * bt;
    return s->n_pos;
}

int kv_seq_share_partial(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens)
{
    if (seq < 0 || seq >= kv->n_seq || n_tokens < 0 || (n_tokens > 0 && !tokens))
        return ERR_INVAL;
    struct kv_seq *s = &kv->seqs[seq];
    int bt = kv->block_tokens;
    if (s->n_pos != s->n_blocks * bt || s->n_hashed != s->n_blocks)
        return ERR_BADSTATE;
    if (kv->n_layer_ring)
        return 0;
    int rest = n_tokens - s->n_pos;
    if (rest <= 0 || s->n_blocks >= kv->max_blocks_per_seq)
        return 0;
    if (rest > bt)
        rest = bt;
    const int32_t *t = tokens + s->n_pos;
    int32_t best = -1;
    int best_m = 0;
    /* the published children of this prefix: a linear scan (admissions are rare
     * next to forward passes, and pools hold thousands of blocks, not millions) */
    for (int32_t b = 0; b < kv->n_blocks && best_m < rest; b++) {
        if (!kv->pub_[b] || kv->parent_[b] != s->last_key)
            continue;
        const int32_t *bt_tok = kv->btok_ + (size_t)b * (size_t)bt;
        int m = 0;
        while (m < rest && bt_tok[m] == t[m])
            m++;
        if (m > best_m) {
            best_m = m;
            best = b;
        }
    }
    if (best < 0)
        return 0;
    block_acquire(kv, best); /* pinned: the allocation below cannot evict it */
    if (kv->n_free < 1) {
        block_release(kv, best);
        return 0;
    }
    int32_t c = block_alloc(kv);
    copy_block(kv, c, best, best_m);
    block_release(kv, best);
    s->blocks[s->n_blocks++] = c;
    s->n_pos += best_m;
    return best_m;
}

int kv_seq_publish(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens)
{
    if (seq < 0 || seq >= kv->n_seq || n_tokens < 0 || (n_tokens > 0 && !tokens))
        return ERR_INVAL;
    struct kv_seq *s = &kv->seqs[seq];
    if (kv->n_layer_ring)
        return 0; /* the ring layers' K/V of these blocks will be overwritten */
    int bt = kv->block_tokens;
    int lim = n_tokens < s->n_pos ? n_tokens : s->n_pos;
    while ((s->n_hashed + 1) * bt <= lim) {
        int j = s->n_hashed;
        const int32_t *t = tokens + (size_t)j * (size_t)bt;
        uint64_t key = kv_block_key(s->last_key, t, bt);
        int32_t b = s->blocks[j];
        int32_t e = ht_find(kv, key, s->last_key, t);
        if (e >= 0 && e != b) {
            block_acquire(kv, e);
            s->blocks[j] = e;
            block_release(kv, b);
        } else if (e < 0) {
            if (kv->pub_[b]) /* published under another prefix (cannot happen for a full
                              * block below n_pos; kept for safety) */
                ht_remove(kv, b);
            kv->key_[b] = key;
            kv->parent_[b] = s->last_key;
            memcpy(kv->btok_ + (size_t)b * (size_t)bt, t, (size_t)bt * sizeof *t);
            ht_insert(kv, b);
        }
        s->last_key = key;
        s->n_hashed++;
    }
    return s->n_hashed;
}
