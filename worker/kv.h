/*
 * kv.h - the paged key/value cache of the forward pass.
 *
 * Keys and values of every layer live in fixed-size blocks of block_tokens
 * positions. A sequence slot (0..n_seq-1) owns a block table: entry j is
 * the block holding its positions [j*block_tokens, (j+1)*block_tokens).
 * Blocks come from one free list shared by all slots, so memory follows the
 * tokens actually cached, not n_seq x n_ctx; a slot that finishes returns
 * its blocks at once (continuous batching refills it).
 *
 *   k, v: (n_layer, n_blocks, block_tokens, kv_dim) float32, kv_dim =
 *         n_head_kv * head_dim; position p of slot s, layer l is at
 *         k + l*layer_stride + table[s][p / block_tokens]*block_stride
 *           + (p % block_tokens)*kv_dim
 *
 * The cache knows how many positions of each slot hold data (n_pos); the
 * forward pass only appends (a token's position must equal its slot's
 * n_pos), and kv_seq_truncate rewinds. Everything is allocated by
 * kv_cache_new; the per-step functions never allocate.
 *
 * Not thread-safe: owned by the thread that runs the forward pass.
 */
#ifndef WORKER_KV_H
#define WORKER_KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS 16

struct kv_seq {
    int32_t *blocks;       /* (max_blocks_per_seq) block table; first n_blocks valid */
    int n_blocks;
    int n_pos;             /* positions 0..n_pos-1 hold keys/values */
};

struct kv_cache {
    int n_layer, kv_dim, block_tokens, n_blocks, n_seq;
    int max_pos;           /* positions per slot (the context length) */
    int max_blocks_per_seq;
    size_t block_stride;   /* floats per block of one layer = block_tokens * kv_dim */
    size_t layer_stride;   /* floats per layer = n_blocks * block_stride */
    float *k, *v;          /* see the file comment */
    int32_t *free_list;    /* (n_blocks) free block ids; first n_free valid */
    int n_free;
    struct kv_seq *seqs;   /* (n_seq) */
    int32_t *tables_;      /* private: storage of the block tables */
};

/* A cache for n_seq slots of up to max_pos positions each, with n_blocks
 * blocks of block_tokens positions in all (n_blocks 0 = enough for every
 * slot to reach max_pos). Returns 0 and *out (kv_cache_free), ERR_INVAL
 * (a count <= 0), ERR_TOOBIG (the size overflows or exceeds max_bytes,
 * 0 = no cap), ERR_NOMEM. */
int kv_cache_new(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq, int max_pos,
                 size_t max_bytes, struct kv_cache **out);
void kv_cache_free(struct kv_cache *kv);

/* Bytes kv_cache_new would allocate for K and V (0 on overflow). */
size_t kv_cache_bytes(int n_layer, int kv_dim, int block_tokens, int n_blocks);

/* Blocks slot seq needs in addition to its current ones to hold n_pos
 * positions (0 if it has enough). seq and n_pos must be valid. */
int kv_seq_blocks_needed(const struct kv_cache *kv, int seq, int n_pos);

/* Make slot seq hold blocks for positions [0, n_pos). Returns 0, ERR_INVAL
 * (seq out of range, n_pos < 0 or > max_pos), ERR_BUSY (not enough free
 * blocks: nothing changed). Does not change n_pos. */
int kv_seq_reserve(struct kv_cache *kv, int seq, int n_pos);

/* Forget positions >= n_pos of slot seq and return the blocks no longer
 * needed. 0 or ERR_INVAL (seq out of range, n_pos < 0). n_pos above the
 * current length changes nothing. */
int kv_seq_truncate(struct kv_cache *kv, int seq, int n_pos);

/* kv_seq_truncate(kv, seq, 0). Invalid seq ignored. */
void kv_seq_clear(struct kv_cache *kv, int seq);

#endif
