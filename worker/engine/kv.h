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
 *   k, v: (n_layer, n_blocks, block_tokens, kv_dim) IEEE binary16 (f16, as
 *         llama.cpp's default cache: half the memory traffic of float32;
 *         a value is rounded to nearest even once, when it is appended,
 *         and converted back exactly when attention reads it); or, for a
 *         cache made with f32 = 1 (the exact path that matches HF
 *         transformers to ~1e-6), float32 in k32, v32 instead, kv_dim =
 *         n_head_kv * head_dim; or, for a cache made with type KV_TYPE_Q8,
 *         int8 in k8, v8 with one float32 scale per 32 values in k8d, v8d
 *         (symmetric, kn_kv_quantize_q8: value = q * d; 1.125 bytes per
 *         value; the scale of the value at offset e is at e / 32, so the
 *         addressing below serves both; kv_dim a multiple of 32); with
 *         KV_TYPE_Q8V keys in binary16 (k) and values in int8 (v8, v8d);
 *         position p of slot s, layer l is at
 *         k + layer_off[l] + table[s][p / block_tokens]*block_stride
 *           + (p % block_tokens)*kv_dim   (layer_off below)
 *
 * The cache knows how many positions of each slot hold data (n_pos); the
 * forward pass only appends (a token's position must equal its slot's
 * n_pos), and kv_seq_truncate rewinds. Everything is allocated by
 * kv_cache_new; the per-step functions never allocate.
 *
 * Sliding-window rings (kv_cache_new_ring). A layer that only attends to
 * the last `window` positions (Gemma 2/3 local layers, Mistral) does not
 * need the rest. Such "ring layers" keep their K/V in a ring of
 * ring_blocks blocks per slot instead of the shared pool: slot s's ring
 * table (kv_seq.ring) maps block j to s*ring_blocks + j % ring_blocks, so
 * position p of a ring layer is at
 *         k + layer_off[l] + ring[p / block_tokens]*block_stride
 *           + (p % block_tokens)*kv_dim
 * (the same element addressing as the pool, through another table):
 * position p lands at p mod (ring_blocks * block_tokens) of the slot's
 * ring, overwriting position p - ring_blocks * block_tokens. ring_blocks
 * is chosen so one step that appends up to max_chunk positions never
 * overwrites a position that the step's first token still attends to. ring_lo is the first
 * position whose ring-layer K/V the slot still holds (kv_seq_commit moves
 * it); kv_seq_truncate refuses a cut whose window starts below it. The
 * pool blocks (their count, reservations, free list) are unchanged and
 * still bound every slot's length; they just hold fewer layers. Ring
 * layers' K/V of a prefix is not kept once the slot moves on, so a cache
 * with rings publishes and shares nothing (the prefix functions return 0).
 *
 * Layers: layer_off[l] is the offset (in values) of layer l's K in k or k32
 * (and V in v or v32); pool layers come first, each layer_stride long, then the
 * ring layers, each ring_layer_stride long.
 *
 * Prefix sharing (vLLM-style automatic prefix caching). Every block has a
 * reference count: the number of slot tables that hold it. A FULL block
 * whose tokens are known can be published (kv_seq_publish): it gets the
 * key hash(parent key, its block_tokens token ids) chained from the hash
 * seed (set per model: kv_cache_set_seed), so a key names the whole
 * prefix up to the block's end, and goes into a hash table (the tokens and
 * parent key are stored too and compared on lookup: a 64-bit collision
 * cannot alias two prefixes). A new sequence calls kv_seq_share_prefix
 * first: its leading full blocks that are published are taken by
 * reference (refcount + 1) instead of computed, and its n_pos starts after
 * them. Shared blocks are read-only by construction: a slot only writes
 * at positions >= n_pos, and a shared block is always full and below
 * n_pos (kv_seq_truncate into a shared block copies it first). When the
 * last holder lets go, a published block is not freed but kept, still
 * findable, in an LRU list; allocation takes never-used blocks first, then
 * evicts the least recently released cached block. n_free counts both
 * kinds (what an allocation can get); a slot releases its blocks last
 * first, so the tail of a finished prompt is evicted before its head.
 *
 * Not thread-safe: owned by the thread that runs the forward pass.
 */
#ifndef WORKER_KV_H
#define WORKER_KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS 16

/* The element type of a cache (kv_cache_new's type): binary16 (the
 * default), float32 (the exact path), int8 with a scale per 32 values;
 * or binary16 keys (k) with int8 values (v8, v8d). */
enum kv_type { KV_TYPE_F16 = 0, KV_TYPE_F32 = 1, KV_TYPE_Q8 = 2, KV_TYPE_Q8V = 3 };

struct kv_seq {
    int32_t *blocks;       /* (max_blocks_per_seq) block table; first n_blocks valid */
    const int32_t *ring;   /* (max_blocks_per_seq) ring table of the ring layers (fixed);
                            * NULL when the cache has no ring layers */
    int ring_lo;           /* ring layers hold positions ring_lo..n_pos-1 */
    int n_blocks;
    int n_pos;             /* positions 0..n_pos-1 hold keys/values */
    int n_hashed;          /* leading blocks that are published (shared or shareable) */
    uint64_t last_key;     /* key of block n_hashed-1 (the seed when n_hashed is 0) */
};

struct kv_cache {
    int n_layer, kv_dim, block_tokens, n_blocks, n_seq;
    int max_pos;           /* positions per slot (the context length) */
    int max_blocks_per_seq;
    size_t block_stride;   /* values per block of one layer = block_tokens * kv_dim */
    size_t layer_stride;   /* values per pool layer = n_blocks * block_stride */
    int f32;               /* 1: float32 values in k32/v32 (k, v NULL); 0: binary16 in k/v,
                            * or int8 (type KV_TYPE_Q8) */
    int type;              /* enum kv_type */
    uint16_t *k, *v;       /* binary16 bits; see the file comment */
    float *k32, *v32;      /* float32 values (f32 caches only) */
    int8_t *k8, *v8;       /* int8 values (k8: KV_TYPE_Q8 only; v8: KV_TYPE_Q8 and _Q8V) */
    float *k8d, *v8d;      /* their scales, one per 32 values */
    size_t *layer_off;     /* (n_layer) offset of layer l in k and v (or k32, v32), in values */
    uint8_t *layer_ring;   /* (n_layer) 1: layer l keeps its K/V in the slots' rings */
    int n_layer_ring;      /* ring layers (0: none, every layer in the pool) */
    int window;            /* positions a ring layer attends to (0 without rings) */
    int ring_blocks;       /* ring blocks per slot (0 without rings) */
    size_t ring_layer_stride; /* values per ring layer = n_seq * ring_blocks * block_stride */
    int32_t *free_list;    /* (n_blocks) never-used/unpublished free ids; first n_blank valid */
    int n_blank;
    int n_free;            /* blocks an allocation can get: n_blank + n_cached */
    int n_cached;          /* published blocks no slot holds (LRU, evictable) */
    struct kv_seq *seqs;   /* (n_seq) */
    int32_t *tables_;      /* private: storage of the block tables */
    /* private, per block (n_blocks): */
    int32_t *ref_;         /* slot tables holding the block */
    uint8_t *pub_;         /* 1: published (in the hash table) */
    uint64_t *key_;        /* key of a published block */
    uint64_t *parent_;     /* its parent's key */
    int32_t *btok_;        /* (n_blocks, block_tokens) its token ids */
    int32_t *hnext_;       /* hash chain link */
    int32_t *lprev_, *lnext_; /* LRU links of cached blocks */
    int32_t *hhead_;       /* (hmask + 1) hash buckets */
    uint32_t hmask;
    int32_t lru_head, lru_tail; /* least / most recently released cached block */
    uint64_t seed;         /* key of the empty prefix */
    uint64_t n_evicted;    /* cached blocks evicted so far */
    /* When the K/V values live elsewhere (a GPU: k and v are then NULL), the
     * owner sets copy_hook: kv_seq_truncate's private copy of a shared block
     * calls copy_hook(copy_ud, dst, src, n_pos) instead of copying k/v. */
    void (*copy_hook)(void *ud, int32_t dst, int32_t src, int n_pos);
    void *copy_ud;
};

/* A cache for n_seq slots of up to max_pos positions each, with n_blocks
 * blocks of block_tokens positions in all (n_blocks 0 = enough for every
 * slot to reach max_pos); type: enum kv_type (KV_TYPE_F32 = 1 is the old
 * "f32" flag). Returns 0 and *out (kv_cache_free), ERR_INVAL (a count <=
 * 0, an unknown type, KV_TYPE_Q8 or _Q8V with kv_dim not a multiple of 32),
 * ERR_TOOBIG (the size overflows or exceeds max_bytes, 0 = no cap),
 * ERR_NOMEM. */
int kv_cache_new(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq, int max_pos,
                 int type, size_t max_bytes, struct kv_cache **out);
void kv_cache_free(struct kv_cache *kv);

/* Bytes kv_cache_new would allocate for K and V of n_blocks pool blocks of
 * n_layer layers (0 on overflow or a bad type): 2 bytes per value, 4 with
 * KV_TYPE_F32, 1 + 4/32 with KV_TYPE_Q8, 2 for keys and 1 + 4/32 for
 * values with KV_TYPE_Q8V (those two: kv_dim a multiple of 32). A
 * cache with rings allocates this for its pool layers plus
 * kv_cache_ring_bytes. */
size_t kv_cache_bytes(int n_layer, int kv_dim, int block_tokens, int n_blocks, int type);

/* Ring blocks per slot for layers attending to the last `window`
 * positions when one step appends up to max_chunk positions per slot:
 * ceil((window + max_chunk - 1) / block_tokens). 0 on bad input. */
int kv_ring_blocks(int window, int max_chunk, int block_tokens);

/* kv_cache_new, with the layers l where ring_layers[l] is 1 kept in
 * per-slot rings of kv_ring_blocks(window, max_chunk, block_tokens)
 * blocks (see the file comment). ring_layers NULL or all 0 = kv_cache_new.
 * max_bytes bounds pool and rings together. Same returns, and ERR_INVAL
 * for window or max_chunk < 1 with ring layers. */
int kv_cache_new_ring(int n_layer, int kv_dim, int block_tokens, int n_blocks, int n_seq,
                      int max_pos, const uint8_t *ring_layers, int window, int max_chunk, int type,
                      size_t max_bytes, struct kv_cache **out);

/* Bytes of K and V that kv_cache_new_ring puts in the rings (0 without
 * ring layers or on overflow). */
size_t kv_cache_ring_bytes(int n_layer_ring, int kv_dim, int block_tokens, int n_seq, int window,
                           int max_chunk, int type);

/* Set slot seq's length to n_pos >= its current one after a step wrote
 * positions up to n_pos - 1 (the forward pass calls it), and advance
 * ring_lo past what the ring overwrote. Can't fail (seq must be valid). */
void kv_seq_commit(struct kv_cache *kv, int seq, int n_pos);

/* Blocks slot seq needs in addition to its current ones to hold n_pos
 * positions (0 if it has enough). seq and n_pos must be valid. */
int kv_seq_blocks_needed(const struct kv_cache *kv, int seq, int n_pos);

/* Make slot seq hold blocks for positions [0, n_pos). Returns 0, ERR_INVAL
 * (seq out of range, n_pos < 0 or > max_pos), ERR_BUSY (not enough free
 * blocks: nothing changed). Does not change n_pos. */
int kv_seq_reserve(struct kv_cache *kv, int seq, int n_pos);

/* Forget positions >= n_pos of slot seq and return the blocks no longer
 * needed. 0, ERR_INVAL (seq out of range, n_pos < 0), ERR_BUSY (the cut
 * falls inside a published block other slots hold, and no block is free
 * for the private copy: nothing changed), ERR_BADSTATE (the cache has
 * rings and they no longer hold the window before n_pos > 0: only a cut
 * to 0 is possible; nothing changed). A published block cut inside
 * and held by this slot alone is unpublished. n_pos above the current
 * length changes nothing. */
int kv_seq_truncate(struct kv_cache *kv, int seq, int n_pos);

/* kv_seq_truncate(kv, seq, 0). Invalid seq ignored. */
void kv_seq_clear(struct kv_cache *kv, int seq);

/* ---- prefix sharing ---- */

/* Set the key of the empty prefix (e.g. a hash of the model identity) and
 * forget every published block (cached ones become plain free blocks).
 * Slots holding published blocks keep them, unpublished. Can't fail. */
void kv_cache_set_seed(struct kv_cache *kv, uint64_t seed);

/* For an empty slot seq (n_blocks 0), take by reference the longest run of
 * published blocks that matches the leading full blocks of
 * tokens[0..n_tokens), and set n_pos to the positions they cover
 * (a multiple of block_tokens, <= n_tokens). Callers that need logits of
 * the last token pass n_tokens - 1 so at least one token is left to
 * compute. Returns the number of positions taken (>= 0; always 0 in a
 * cache with rings), ERR_INVAL (seq out of range, n_tokens < 0, tokens
 * NULL with n_tokens > 0), ERR_BADSTATE (the slot is not empty).
 * Allocates nothing. */
int kv_seq_share_prefix(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens);

/* After kv_seq_share_prefix: when the next positions of slot seq
 * (tokens[n_pos..n_tokens)) begin like a published block that follows the
 * same prefix, copy the keys/values of the longest such match (1 to
 * block_tokens positions) into a new private block of the slot and advance
 * n_pos past them, so a prompt that diverges inside a block (a shared
 * system prompt whose length is not a multiple of block_tokens) recomputes
 * only its own tokens. The source block stays published and untouched.
 * Callers that need logits pass n_tokens - 1 as for kv_seq_share_prefix.
 * Returns the positions copied (0: no match, no free block, or a cache
 * with rings), ERR_INVAL,
 * ERR_BADSTATE (n_pos is not exactly the slot's published full blocks). */
int kv_seq_share_partial(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens);

/* Publish the full blocks of slot seq that lie within its computed
 * positions and within tokens[0..n_tokens) (the slot's token ids from
 * position 0), so later kv_seq_share_prefix calls find them. A block whose
 * key is already published by another block is replaced in this slot's
 * table by that block (same contents: the forward pass is deterministic),
 * and its own block is released. Idempotent. Returns the number of the
 * slot's leading blocks now published (0 in a cache with rings), or
 * ERR_INVAL. Allocates nothing. */
int kv_seq_publish(struct kv_cache *kv, int seq, const int32_t *tokens, int n_tokens);

/* Blocks held by at least one slot: n_blocks - n_free. */
int kv_cache_n_used(const struct kv_cache *kv);

/* The chained key of one block of tokens (block_tokens ids) after a prefix
 * with key parent (exposed for tests). Can't fail. */
uint64_t kv_block_key(uint64_t parent, const int32_t *tokens, int n);

#endif
