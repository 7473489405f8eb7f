/*
 * Unit tests of the paged KV pool with prefix sharing (worker/engine/kv.c) and the
 * scheduler (worker/engine/sched.c, driven with request bodies through
 * worker/run/request.c), on the tiny llama fixture
 * (tests/fixtures/model/llama_tied.q8_0.gguf: 2 layers, vocab 300, context
 * 256, byte-level BPE with a ChatML template).
 *
 * - KV pool: random operation sequences (share, reserve+compute, publish,
 *   share_partial, truncate, clear) checked against a simple model after every operation:
 *   refcounts equal table references, free/cached/used counts add up, no
 *   held block is free or cached, and every slot reads back, through its
 *   table, the token ids "computed" at its positions (so sharing and
 *   eviction never hand out or overwrite a block still in use).
 * - Batch invariance: 32 requests (greedy and seeded sampling, some with
 *   n > 1) give identical choices run alone and inside a pack of 256
 *   mixed-length requests with a small step budget (chunked prefill, mixed
 *   decode/prefill steps).
 * - Prefix sharing: a pack of 200 sharing a long system prompt computes it once
 *   (prefill count == unique tokens when the prefix is block-aligned) and
 *   outputs equal a run without the prefix cache.
 * - Preemption: a KV budget far too small for the pack completes it, with
 *   preemptions, and outputs equal an unconstrained run.
 * - Chunked prefill: budgets of 1, 7 and 512 tokens give equal outputs.
 * - Request errors come back as OpenAI error bodies.
 * - The token-level API (sched_add with token prompts, no bodies) gives
 *   the texts the wrapper gives for the equivalent body.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "text/chat.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"
#include "worker/engine/sched.h"
#include "text/tok.h"
#include "worker/run/request.h"

#define TINY "tests/fixtures/model/llama_tied.q8_0.gguf"

/* The token-level scheduler inside the OpenAI wrapper the tests drive. */
static struct sched *eng(struct oreq_sched *s) { return oreq_sched_engine(s); }

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* ---- KV pool against a model -------------------------------------------------- */

#define KB 4    /* block tokens */
#define KSEQ 5
#define KPOS 40

struct kmodel {
    int n_pos[KSEQ];
    int32_t tok[KSEQ][KPOS]; /* token id at each computed position */
};

/* "Compute" positions [n_pos, to) of slot s: write the token id into K of
 * layer 0 (every value of the row, as raw 16-bit bits) through the slot's table. */
static void k_compute(struct kv_cache *kv, struct kmodel *m, int s, int to)
{
    struct kv_seq *q = &kv->seqs[s];
    for (int p = q->n_pos; p < to; p++) {
        uint16_t *row = kv->k + (size_t)q->blocks[p / KB] * kv->block_stride + (size_t)(p % KB) * (size_t)kv->kv_dim;
        for (int d = 0; d < kv->kv_dim; d++)
            row[d] = (uint16_t)m->tok[s][p];
    }
    q->n_pos = to;
    m->n_pos[s] = to;
}

static void k_check(const struct kv_cache *kv, const struct kmodel *m)
{
    int refs[64] = {0};
    CHECK(kv->n_blocks <= 64);
    for (int s = 0; s < KSEQ; s++) {
        const struct kv_seq *q = &kv->seqs[s];
        CHECK_EQ_INT(q->n_pos, m->n_pos[s]);
        CHECK(q->n_blocks >= (q->n_pos + KB - 1) / KB);
        CHECK(q->n_hashed <= q->n_pos / KB);
        for (int j = 0; j < q->n_blocks; j++)
            refs[q->blocks[j]]++;
        for (int p = 0; p < q->n_pos; p++) {
            const uint16_t *row = kv->k + (size_t)q->blocks[p / KB] * kv->block_stride + (size_t)(p % KB) * (size_t)kv->kv_dim;
            CHECK_EQ_INT((int)row[0], m->tok[s][p]);
        }
        for (int j = 0; j < q->n_hashed; j++)
            CHECK(kv->pub_[q->blocks[j]]);
    }
    int used = 0, cached = 0;
    for (int b = 0; b < kv->n_blocks; b++) {
        CHECK_EQ_INT(kv->ref_[b], refs[b]);
        used += refs[b] > 0;
        cached += refs[b] == 0 && kv->pub_[b];
    }
    CHECK_EQ_INT(kv->n_free, kv->n_blocks - used);
    CHECK_EQ_INT(kv_cache_n_used(kv), used);
    CHECK_EQ_INT(kv->n_cached, cached);
    CHECK_EQ_INT(kv->n_blank + kv->n_cached, kv->n_free);
    for (int i = 0; i < kv->n_blank; i++)
        CHECK(refs[kv->free_list[i]] == 0 && !kv->pub_[kv->free_list[i]]);
    int n = 0;
    for (int32_t b = kv->lru_head; b >= 0; b = kv->lnext_[b], n++)
        CHECK(refs[b] == 0 && kv->pub_[b]);
    CHECK_EQ_INT(n, kv->n_cached);
}

TEST(kv_pool_random_ops_match_model)
{
    int64_t shared = 0, partial = 0;
    for (int round = 0; round < 20; round++) {
        struct kv_cache *kv;
        int n_blocks = 12 + (int)rnd(20);
        CHECK_EQ_INT(kv_cache_new(1, 2, KB, n_blocks, KSEQ, KPOS, 0, 0, &kv), 0);
        struct kmodel m;
        memset(&m, 0, sizeof m);
        /* token streams drawn from a few shared "system prompts" so prefixes collide */
        int32_t base[3][KPOS];
        for (int i = 0; i < 3; i++)
            for (int p = 0; p < KPOS; p++)
                base[i][p] = (int32_t)rnd(5);
        for (int op = 0; op < 600; op++) {
            int s = (int)rnd(KSEQ);
            switch (rnd(6)) {
            case 0: { /* start a sequence: share what is cached */
                if (kv->seqs[s].n_blocks)
                    break;
                int b = (int)rnd(3), len = 1 + (int)rnd(KPOS);
                for (int p = 0; p < KPOS; p++)
                    m.tok[s][p] = p < len && rnd(8) ? base[b][p] : (int32_t)rnd(5);
                int n = kv_seq_share_prefix(kv, s, m.tok[s], len);
                CHECK(n >= 0 && n % KB == 0 && n <= len);
                shared += n;
                m.n_pos[s] = n;
                if (rnd(2)) { /* and the head of a cached block that continues it */
                    int pn = kv_seq_share_partial(kv, s, m.tok[s], len);
                    CHECK(pn >= 0 && pn <= KB && n + pn <= len);
                    partial += pn;
                    m.n_pos[s] = n + pn;
                }
                break;
            }
            case 1:
            case 2: { /* compute more positions */
                int to = m.n_pos[s] + 1 + (int)rnd(10);
                if (to > KPOS)
                    to = KPOS;
                int rc = kv_seq_reserve(kv, s, to);
                if (rc == ERR_BUSY)
                    break;
                CHECK_EQ_INT(rc, 0);
                k_compute(kv, &m, s, to);
                break;
            }
            case 3:
                CHECK(kv_seq_publish(kv, s, m.tok[s], m.n_pos[s]) >= 0);
                break;
            case 4: {
                int to = (int)rnd((uint32_t)m.n_pos[s] + 1);
                int rc = kv_seq_truncate(kv, s, to);
                if (rc == ERR_BUSY)
                    break;
                CHECK_EQ_INT(rc, 0);
                m.n_pos[s] = to;
                break;
            }
            case 5:
                if (rnd(3) == 0) {
                    kv_seq_clear(kv, s);
                    m.n_pos[s] = 0;
                }
                break;
            }
            k_check(kv, &m);
        }
        for (int s = 0; s < KSEQ; s++) {
            kv_seq_clear(kv, s);
            m.n_pos[s] = 0;
        }
        k_check(kv, &m);
        CHECK_EQ_INT(kv->n_free, kv->n_blocks);
        kv_cache_free(kv);
    }
    CHECK(shared > 0 && partial > 0); /* the sequences did share, whole and partial blocks */
}

/* The cache's size: 2 bytes per value (binary16), 4 with f32; the arrays
 * of the other type are not allocated. */
TEST(kv_cache_bytes_f16_and_f32)
{
    CHECK_EQ_INT(kv_cache_bytes(30, 192, 16, 1, 0), (size_t)30 * 192 * 16 * 2 * 2);
    CHECK_EQ_INT(kv_cache_bytes(30, 192, 16, 1, 1), (size_t)30 * 192 * 16 * 2 * 4);
    CHECK_EQ_INT(kv_cache_bytes(0, 192, 16, 1, 0), 0);
    struct kv_cache *kv = NULL;
    CHECK_EQ_INT(kv_cache_new(2, 8, KB, 4, 1, 16, 0, 0, &kv), 0);
    CHECK(kv->k && kv->v && !kv->k32 && !kv->v32 && !kv->f32);
    kv_cache_free(kv);
    CHECK_EQ_INT(kv_cache_new(2, 8, KB, 4, 1, 16, 1, 0, &kv), 0);
    CHECK(!kv->k && !kv->v && kv->k32 && kv->v32 && kv->f32);
    kv_cache_free(kv);
    /* max_bytes counts the element size */
    CHECK_EQ_INT(kv_cache_new(2, 8, KB, 4, 1, 16, 0, kv_cache_bytes(2, 8, KB, 4, 0), &kv), 0);
    kv_cache_free(kv);
    CHECK_EQ_INT(kv_cache_new(2, 8, KB, 4, 1, 16, 1, kv_cache_bytes(2, 8, KB, 4, 0), &kv), ERR_TOOBIG);
}

/* The int8 cache (KV_TYPE_Q8): 1 byte per value plus a float scale per
 * 32, only its own arrays allocated, kv_dim a multiple of 32; a
 * truncation inside a shared block copies quants and scales. */
TEST(kv_q8_cache_layout_and_private_copy)
{
    CHECK_EQ_INT(kv_cache_bytes(30, 192, 16, 1, KV_TYPE_Q8), (size_t)30 * 192 * 16 * 2 * 9 / 8);
    CHECK_EQ_INT(kv_cache_bytes(30, 40, 16, 1, KV_TYPE_Q8), 0); /* kv_dim not a multiple of 32 */
    CHECK_EQ_INT(kv_cache_bytes(30, 192, 16, 1, KV_TYPE_Q8V), (size_t)30 * 192 * 16 * (2 + 9 / 8.0));
    CHECK_EQ_INT(kv_cache_bytes(30, 192, 16, 1, 4), 0);
    struct kv_cache *kv = NULL;
    CHECK_EQ_INT(kv_cache_new(2, 40, KB, 4, 1, 16, KV_TYPE_Q8, 0, &kv), ERR_INVAL);
    CHECK_EQ_INT(kv_cache_new(2, 64, KB, 4, 1, 16, 4, 0, &kv), ERR_INVAL);
    CHECK_EQ_INT(kv_cache_new(2, 64, KB, 4, 1, 16, KV_TYPE_Q8V, 0, &kv), 0);
    CHECK(kv->k && !kv->v && !kv->k8 && !kv->k8d && kv->v8 && kv->v8d && !kv->f32);
    kv_cache_free(kv);
    CHECK_EQ_INT(kv_cache_new(2, 64, KB, 6, 3, 24, KV_TYPE_Q8,
                              kv_cache_bytes(2, 64, KB, 6, KV_TYPE_Q8), &kv), 0);
    CHECK(kv->k8 && kv->v8 && kv->k8d && kv->v8d && !kv->k && !kv->k32 && !kv->f32);
    CHECK_EQ_INT(kv->type, KV_TYPE_Q8);
    /* slot 0 holds 2 full blocks with known bytes in both layers */
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 8), 0);
    for (int l = 0; l < 2; l++)
        for (int p = 0; p < 8; p++) {
            size_t off = kv->layer_off[l] + (size_t)kv->seqs[0].blocks[p / KB] * kv->block_stride +
                         (size_t)(p % KB) * 64;
            for (int d = 0; d < 64; d++) {
                kv->k8[off + (size_t)d] = (int8_t)(p * 7 + d + l);
                kv->v8[off + (size_t)d] = (int8_t)(p * 5 - d - l);
            }
            kv->k8d[off / 32] = (float)(p + l) + 0.5f;
            kv->k8d[off / 32 + 1] = (float)(p + l) + 0.25f;
            kv->v8d[off / 32] = -(float)(p + l);
            kv->v8d[off / 32 + 1] = -(float)(p + l) - 0.5f;
        }
    kv->seqs[0].n_pos = 8;
    CHECK_EQ_INT(kv_seq_publish(kv, 0, t, 8), 2);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 8), 8);
    CHECK_EQ_INT(kv_seq_truncate(kv, 1, 6), 0); /* inside the shared second block */
    int32_t a = kv->seqs[0].blocks[1], b = kv->seqs[1].blocks[1];
    CHECK(a != b);
    for (int l = 0; l < 2; l++) {
        size_t sa = kv->layer_off[l] + (size_t)a * kv->block_stride,
               sb = kv->layer_off[l] + (size_t)b * kv->block_stride, n = 2 * 64;
        CHECK(memcmp(kv->k8 + sa, kv->k8 + sb, n) == 0 && memcmp(kv->v8 + sa, kv->v8 + sb, n) == 0);
        CHECK(memcmp(kv->k8d + sa / 32, kv->k8d + sb / 32, n / 32 * sizeof(float)) == 0);
        CHECK(memcmp(kv->v8d + sa / 32, kv->v8d + sb / 32, n / 32 * sizeof(float)) == 0);
    }
    kv_cache_free(kv);
}

TEST(kv_prefix_share_and_lru_eviction)
{
    struct kv_cache *kv;
    CHECK_EQ_INT(kv_cache_new(1, 2, KB, 6, 3, 24, 0, 0, &kv), 0);
    int32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 0, t, 12), 0);
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 10), 0);
    kv->seqs[0].n_pos = 10;
    CHECK_EQ_INT(kv_seq_publish(kv, 0, t, 12), 2); /* 2 full blocks below n_pos */
    /* a second sequence shares them (a partial third block is never shared) */
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 12), 8);
    CHECK_EQ_INT(kv->ref_[kv->seqs[0].blocks[0]], 2);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 12), ERR_BADSTATE);
    /* a different second block stops the match */
    int32_t u[12] = {1, 2, 3, 4, 5, 6, 0, 8};
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 2, u, 8), 4);
    kv_seq_clear(kv, 2);
    /* truncating into a shared block copies it */
    CHECK_EQ_INT(kv_seq_truncate(kv, 1, 6), 0);
    CHECK(kv->seqs[1].blocks[1] != kv->seqs[0].blocks[1]);
    CHECK_EQ_INT(kv->seqs[1].n_hashed, 1);
    kv_seq_clear(kv, 1);
    /* the owner finishes: its blocks stay cached, findable, and count as free */
    kv_seq_clear(kv, 0);
    CHECK_EQ_INT(kv->n_free, 6);
    CHECK_EQ_INT(kv->n_cached, 2);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 2, t, 12), 8);
    kv_seq_clear(kv, 2);
    /* taking every block evicts the cached ones (tail block first) */
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 20), 0);
    CHECK_EQ_INT(kv->n_cached, 1);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 12), 4); /* the head block survived */
    kv_seq_clear(kv, 1);
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 24), 0);
    CHECK_EQ_INT(kv->n_cached, 0);
    CHECK_EQ_INT(kv->n_free, 0);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 12), 0);
    CHECK_EQ_INT((int)kv->n_evicted, 2);
    kv_cache_free(kv);
}

/* Sliding-window rings: layers 1 and 3 of 4 keep only a ring per slot;
 * layout, ring tables, the window bookkeeping (ring_lo), the truncation
 * it allows, and no prefix sharing. */
TEST(kv_rings_layout_and_window_bookkeeping)
{
    /* window 5, steps of up to 3 positions, blocks of 4: ceil(7/4) = 2 ring blocks */
    CHECK_EQ_INT(kv_ring_blocks(5, 3, KB), 2);
    CHECK_EQ_INT(kv_ring_blocks(0, 3, KB), 0);
    CHECK_EQ_INT(kv_ring_blocks(4, 1, KB), 1);
    CHECK_EQ_INT(kv_ring_blocks(4, 2, KB), 2);
    const uint8_t ring[4] = {0, 1, 0, 1};
    struct kv_cache *kv;
    CHECK_EQ_INT(kv_cache_new_ring(4, 2, KB, 20, 2, 40, ring, 0, 3, 0, 0, &kv), ERR_INVAL);
    CHECK_EQ_INT(kv_cache_new_ring(4, 2, KB, 20, 2, 40, ring, 5, 3, 0, 0, &kv), 0);
    CHECK_EQ_INT(kv->n_layer_ring, 2);
    CHECK_EQ_INT(kv->ring_blocks, 2);
    CHECK_EQ_INT(kv->window, 5);
    /* pool layers first (20 blocks each), then the rings (2 slots x 2 blocks) */
    size_t bs = kv->block_stride, pool = 20 * bs, rl = 4 * bs;
    CHECK(kv->layer_off[0] == 0 && kv->layer_off[2] == pool);
    CHECK(kv->layer_off[1] == 2 * pool && kv->layer_off[3] == 2 * pool + rl);
    CHECK(kv->ring_layer_stride == rl);
    CHECK_EQ_INT(!kv->layer_ring[0] && kv->layer_ring[1] && !kv->layer_ring[2] && kv->layer_ring[3],
                 1);
    /* bytes: 2 pool layers of 20 blocks + 2 ring layers of 4 blocks, K and V */
    CHECK(kv_cache_ring_bytes(2, 2, KB, 2, 5, 3, 0) == kv_cache_bytes(2, 2, KB, 4, 0));
    CHECK(kv_cache_ring_bytes(2, 2, KB, 2, 5, 3, 1) == kv_cache_bytes(2, 2, KB, 4, 1));
    CHECK(kv_cache_bytes(2, 2, KB, 20, 0) + kv_cache_ring_bytes(2, 2, KB, 2, 5, 3, 0) <
          kv_cache_bytes(4, 2, KB, 20, 0));
    /* slot 1's ring table: block j -> 2 + j % 2 */
    for (int j = 0; j < kv->max_blocks_per_seq; j++) {
        CHECK_EQ_INT(kv->seqs[1].ring[j], 2 + j % 2);
        CHECK_EQ_INT(kv->seqs[0].ring[j], j % 2);
    }
    /* steps of 3: the ring keeps the last 8 positions written */
    for (int n = 3; n <= 30; n += 3) {
        CHECK_EQ_INT(kv_seq_reserve(kv, 0, n), 0);
        kv_seq_commit(kv, 0, n);
        CHECK_EQ_INT(kv->seqs[0].ring_lo, n > 8 ? n - 8 : 0);
        /* the next step's first token (position n) sees its window n-4..n */
        CHECK(kv->seqs[0].ring_lo <= (n > 4 ? n - 4 : 0));
    }
    CHECK_EQ_INT(kv->seqs[0].n_pos, 30);
    CHECK_EQ_INT(kv->seqs[0].ring_lo, 22); /* positions 22..29 */
    /* a cut whose window (n - 4 ..) starts below ring_lo is refused, nothing changed */
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 25), ERR_BADSTATE);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 30);
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 26), 0);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 26);
    CHECK_EQ_INT(kv->seqs[0].ring_lo, 22);
    CHECK_EQ_INT(kv->seqs[0].n_blocks, 7); /* the pool keeps every position */
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 0), 0); /* always possible */
    CHECK_EQ_INT(kv->seqs[0].ring_lo, 0);
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 30), 0);
    kv_seq_commit(kv, 0, 30);
    kv_seq_clear(kv, 0);
    CHECK_EQ_INT(kv->seqs[0].ring_lo, 0);
    /* nothing is published or shared */
    int32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 12), 0);
    kv_seq_commit(kv, 0, 12);
    CHECK_EQ_INT(kv_seq_publish(kv, 0, t, 12), 0);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, t, 12), 0);
    CHECK_EQ_INT(kv_seq_share_partial(kv, 1, t, 12), 0);
    CHECK_EQ_INT(kv->seqs[1].n_pos, 0);
    kv_cache_free(kv);
    /* every layer in rings: the pool holds no bytes, only counts blocks */
    const uint8_t all[2] = {1, 1};
    CHECK_EQ_INT(kv_cache_new_ring(2, 2, KB, 20, 2, 40, all, 5, 3, 0, 0, &kv), 0);
    CHECK_EQ_INT(kv->n_layer_ring, 2);
    CHECK(kv->layer_off[0] == 0 && kv->layer_off[1] == 4 * kv->block_stride);
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 40), 0);
    CHECK_EQ_INT(kv->n_free, 10);
    kv_cache_free(kv);
    /* no ring layers = kv_cache_new */
    const uint8_t none[2] = {0, 0};
    CHECK_EQ_INT(kv_cache_new_ring(2, 2, KB, 20, 2, 40, none, 5, 3, 0, 0, &kv), 0);
    CHECK(kv->n_layer_ring == 0 && kv->seqs[0].ring == NULL && kv->layer_off[1] == kv->layer_stride);
    kv_cache_free(kv);
}

/* ---- the scheduler --------------------------------------------------------------- */

struct env {
    struct model *m;
    struct tok *t;
    struct chat_tmpl *tmpl;
};

static void env_init_file(struct env *e, const char *path)
{
    char err[256];
    CHECK_EQ_INT(model_load(path, &e->m, err, sizeof err), 0);
    CHECK_EQ_INT(model_tokenizer(e->m, &e->t, err, sizeof err), 0);
    CHECK_EQ_INT(model_chat_tmpl(e->m, e->t, &e->tmpl), 0);
}

static void env_init(struct env *e)
{
    char err[256];
    CHECK_EQ_INT(model_load(TINY, &e->m, err, sizeof err), 0);
    CHECK_EQ_INT(model_tokenizer(e->m, &e->t, err, sizeof err), 0);
    CHECK_EQ_INT(model_chat_tmpl(e->m, e->t, &e->tmpl), 0);
}

static void env_release(struct env *e)
{
    chat_tmpl_free(e->tmpl);
    tok_free(e->t);
    model_free(e->m);
}

#define MAXR 300

struct results {
    char *choices[MAXR];   /* JSON of "choices" of request i */
    int status[MAXR];
    int64_t completion[MAXR], cached[MAXR];
    int n;
};

static void on_result(void *ctx, const struct oreq_result *r)
{
    struct results *res = ctx;
    int i = (int)strtol(r->id + 1, NULL, 10); /* "r<i>" */
    CHECK(i >= 0 && i < MAXR && !res->choices[i]);
    res->status[i] = r->status;
    res->completion[i] = r->completion_tokens;
    res->cached[i] = r->cached_tokens;
    const json_t *c = r->status == 200 ? json_object_get(r->body, "choices") : r->body;
    CHECK(c != NULL);
    res->choices[i] = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK(r->queue_s >= 0 && r->prefill_s >= 0 && r->decode_s >= 0 && r->cpu_s >= 0);
    res->n++;
}

static void results_release(struct results *r)
{
    for (int i = 0; i < MAXR; i++)
        free(r->choices[i]);
    memset(r, 0, sizeof *r);
}

/* A completions request with a token-id prompt. */
static json_t *body_new(const int32_t *ids, int n, int max_tokens, int sampled, int n_choices,
                        uint64_t seed)
{
    json_t *b = json_object(), *p = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(p, json_integer(ids[i]));
    json_object_set_new(b, "model", json_string("tiny"));
    json_object_set_new(b, "prompt", p);
    json_object_set_new(b, "max_tokens", json_integer(max_tokens));
    if (sampled) {
        json_object_set_new(b, "temperature", json_real(1.9));
        json_object_set_new(b, "top_k", json_integer(50));
        json_object_set_new(b, "seed", json_integer((json_int_t)seed));
    } else {
        json_object_set_new(b, "temperature", json_integer(0));
    }
    if (n_choices > 1)
        json_object_set_new(b, "n", json_integer(n_choices));
    return b;
}

struct reqset {
    json_t *body[MAXR];
    int n;
};

static void reqset_release(struct reqset *rs)
{
    for (int i = 0; i < rs->n; i++)
        json_decref(rs->body[i]);
    rs->n = 0;
}

/* sched_opts.spec of the schedulers sched_make makes (tests that count steps
 * turn speculation off: it changes how many steps a sequence takes, never
 * its output) */
static int g_spec = SCHED_SPEC_AUTO;

static struct oreq_sched *sched_make(struct env *e, struct results *res, int max_batch,
                                     int max_seqs, size_t kv_mem, int no_cache)
{
    struct sched_opts o;
    sched_opts_init(&o);
    o.spec = g_spec;
    o.max_batch_tokens = max_batch;
    o.max_seqs = max_seqs;
    o.kv_mem_bytes = kv_mem;
    o.no_prefix_cache = no_cache;
    struct oreq_sched_opts oo = {NULL, on_result, res};
    struct oreq_sched *s;
    CHECK_EQ_INT(oreq_sched_new(e->m, e->t, e->tmpl, &o, &oo, &s), 0);
    return s;
}

static void add_all(struct oreq_sched *s, const struct reqset *rs, int from, int to)
{
    char id[16];
    for (int i = from; i < to; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK_EQ_INT(oreq_sched_add(s, id, GP_COMPLETIONS, rs->body[i]), 0);
    }
}

/* Bytes per KV block of the tiny model: 2 layers * 16 positions * kv_dim 32 * K,V
 * * 2 (binary16). */
#define TINY_BLOCK_BYTES (2u * 16u * 32u * 2u * 2u)

TEST(sched_batch_invariance_alone_vs_pack_of_256)
{
    struct env e;
    env_init(&e);
    struct reqset rs = {.n = 256};
    int32_t ids[200];
    for (int i = 0; i < rs.n; i++) {
        int len = 3 + (int)rnd(i % 4 == 0 ? 180 : 60);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        if (i % 5 == 1) /* some share a 40-token head */
            for (int j = 0; j < len && j < 40; j++)
                ids[j] = (int32_t)(j * 7 % 298);
        int max_tokens = 4 + (int)rnd(28);
        rs.body[i] = body_new(ids, len, max_tokens, i % 2, i % 8 == 3 ? 3 : 1, 1000 + (uint64_t)i);
    }
    /* the first 32 alone, each in a fresh scheduler */
    struct results alone = {0};
    for (int i = 0; i < 32; i++) {
        struct oreq_sched *s = sched_make(&e, &alone, 512, 4, 64 * TINY_BLOCK_BYTES, 1);
        add_all(s, &rs, i, i + 1);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        oreq_sched_free(s);
    }
    CHECK_EQ_INT(alone.n, 32);
    /* all 256 together: chunked prefill, mixed steps, prefix cache, preemptions possible */
    struct results pack = {0};
    struct oreq_sched *s = sched_make(&e, &pack, 48, 64, 160 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, 256);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    oreq_sched_free(s);
    CHECK_EQ_INT(pack.n, 256);
    int sampled_differs = 0;
    for (int i = 0; i < 32; i++) {
        CHECK_EQ_INT(alone.status[i], 200);
        CHECK_EQ_INT(pack.status[i], 200);
        if (strcmp(alone.choices[i], pack.choices[i]) != 0)
            th_fail(__FILE__, __LINE__, "alone == pack", "request %d:\n%s\n%s", i,
                    alone.choices[i], pack.choices[i]);
        CHECK_EQ_INT(alone.completion[i], pack.completion[i]);
    }
    /* n = 3 sampled choices differ from each other (independent streams) */
    json_t *c = json_loads(pack.choices[11], 0, NULL);
    CHECK_EQ_INT((int)json_array_size(c), 3);
    const char *a0 = json_string_value(json_object_get(json_array_get(c, 0), "text"));
    const char *a1 = json_string_value(json_object_get(json_array_get(c, 1), "text"));
    sampled_differs = strcmp(a0, a1) != 0;
    if (!sampled_differs)
        fprintf(stderr, "%s\n", pack.choices[11]);
    json_decref(c);
    CHECK(sampled_differs);
    CHECK(st.n_steps > 0 && st.prefix_reused > 0 && st.output_tokens > 0);
    CHECK(st.kv_util_peak > 0.5);
    results_release(&alone);
    results_release(&pack);
    reqset_release(&rs);
    env_release(&e);
}

TEST(sched_prefix_sharing_computes_system_prompt_once)
{
    struct env e;
    env_init(&e);
    for (int aligned = 1; aligned >= 0; aligned--) {
        int plen = aligned ? 192 : 200; /* 12 blocks, or 12.5 */
        int32_t sys[200], ids[240];
        for (int j = 0; j < plen; j++)
            sys[j] = (int32_t)rnd(298);
        struct reqset rs = {.n = 200};
        int64_t unique = plen;
        for (int i = 0; i < rs.n; i++) {
            int sl = 3 + (int)rnd(12);
            memcpy(ids, sys, (size_t)plen * sizeof *ids);
            for (int j = 0; j < sl; j++)
                ids[plen + j] = (int32_t)rnd(298);
            ids[plen] = (int32_t)i; /* own tokens from the first one on: unique = plen + sum(sl) */
            unique += sl;
            rs.body[i] = body_new(ids, plen + sl, 8, i % 2, 1, (uint64_t)i);
        }
        struct results shared = {0}, plain = {0};
        struct oreq_sched *s = sched_make(&e, &shared, 256, 32, 400 * TINY_BLOCK_BYTES, 0);
        add_all(s, &rs, 0, rs.n);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        struct sched_stats st;
        oreq_sched_get_stats(s, &st);
        oreq_sched_free(s);
        s = sched_make(&e, &plain, 256, 32, 400 * TINY_BLOCK_BYTES, 1);
        add_all(s, &rs, 0, rs.n);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        struct sched_stats st0;
        oreq_sched_get_stats(s, &st0);
        oreq_sched_free(s);
        fprintf(stderr, "plen %d: unique %lld, prefill computed %lld, reused %lld\n", plen,
                (long long)unique, (long long)st.prefill_computed, (long long)st.prefix_reused);
        if (aligned) {
            CHECK_EQ_INT((int)st.prefill_computed, (int)unique);
            CHECK_EQ_INT((int)st.prefix_reused, (rs.n - 1) * plen);
        } else {
            /* the block holding the prompt's end (192..207) is copied in part from a
             * request that published it; requests computed before any did recompute
             * its 8 shared tokens: within a few percent of the unique tokens */
            CHECK(st.prefill_computed >= unique);
            CHECK(st.prefill_computed * 100 <= unique * 103);
            CHECK(st.prefix_reused >= (rs.n - 1) * (plen / 16) * 16);
        }
        CHECK_EQ_INT((int)(st.prefill_computed + st.prefix_reused), (int)st.prompt_tokens);
        CHECK_EQ_INT((int)st0.prefill_computed, (int)(unique + (int64_t)(rs.n - 1) * plen));
        CHECK_EQ_INT((int)st0.prefix_reused, 0);
        int64_t cached = 0;
        for (int i = 0; i < rs.n; i++) {
            CHECK_EQ_STR(shared.choices[i], plain.choices[i]);
            cached += shared.cached[i];
        }
        CHECK_EQ_INT((int)cached, (int)st.prefix_reused);
        results_release(&shared);
        results_release(&plain);
        reqset_release(&rs);
    }
    env_release(&e);
}

TEST(sched_preemption_small_kv_budget_same_outputs)
{
    struct env e;
    env_init(&e);
    struct reqset rs = {.n = 24};
    int32_t ids[100];
    for (int i = 0; i < rs.n; i++) {
        int len = 20 + (int)rnd(60);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 40, i % 2, i == 5 ? 2 : 1, 77 + (uint64_t)i);
    }
    struct results big = {0}, small = {0};
    struct oreq_sched *s = sched_make(&e, &big, 512, 32, 512 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    struct sched_stats st_big;
    oreq_sched_get_stats(s, &st_big);
    oreq_sched_free(s);
    /* 20 blocks = 320 positions: about three sequences' worth */
    s = sched_make(&e, &small, 512, 32, 20 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    oreq_sched_free(s);
    CHECK_EQ_INT(st_big.n_preemptions, 0);
    CHECK(st.n_preemptions > 0);
    CHECK(st.recomputed > 0);
    CHECK_EQ_INT(st.kv_blocks, 20);
    CHECK_EQ_INT(st.n_ctx, 256);
    CHECK_EQ_INT(small.n, rs.n);
    for (int i = 0; i < rs.n; i++)
        CHECK_EQ_STR(small.choices[i], big.choices[i]);
    CHECK_EQ_INT((int)st.output_tokens, (int)st_big.output_tokens);
    results_release(&big);
    results_release(&small);
    reqset_release(&rs);
    env_release(&e);
}

/* A sliding-window model (tiny gemma3: 5 of 6 layers, window 4) under one
 * K/V budget: with rings (the default) the pool holds 1 layer per block
 * instead of 6, so the budget buys far more blocks, fewer sequences are
 * preempted, and every output is the same as with every position kept. */
TEST(sched_sliding_window_rings_buy_blocks_same_outputs)
{
    struct env e;
    env_init_file(&e, "tests/fixtures/model/gemma3_tied.q8_0.gguf");
    struct reqset rs = {.n = 16};
    int32_t ids[100];
    for (int i = 0; i < rs.n; i++) {
        int len = 20 + (int)rnd(60);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 40, i % 2, 1, 91 + (uint64_t)i);
    }
    /* 6 layers x (2 heads x 16) x 16 positions x K,V x 2 bytes (binary16) */
    size_t full_block = 6 * 32 * 16 * 2 * 2, budget = 24 * full_block;
    struct results r[2] = {0};
    struct sched_stats st[2];
    for (int k = 0; k < 2; k++) {
        struct sched_opts o;
        sched_opts_init(&o);
        o.max_batch_tokens = 8;
        o.max_seqs = 8;
        o.kv_mem_bytes = budget;
        o.swa_full = k;
        o.spec = SCHED_SPEC_OFF; /* the preemption counts below assume one token per step */
        struct oreq_sched_opts oo = {NULL, on_result, &r[k]};
        struct oreq_sched *s;
        CHECK_EQ_INT(oreq_sched_new(e.m, e.t, e.tmpl, &o, &oo, &s), 0);
        add_all(s, &rs, 0, rs.n);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        oreq_sched_get_stats(s, &st[k]);
        oreq_sched_free(s);
    }
    /* rings: 5 layers x 8 slots x 1 block; the rest at 1 layer per block */
    CHECK_EQ_INT(st[1].kv_blocks, 24);
    CHECK_EQ_INT(st[0].kv_blocks, (int)((budget - 5 * 8 * full_block / 6) / (full_block / 6)));
    CHECK(st[1].n_preemptions > 0);
    CHECK_EQ_INT(st[0].n_preemptions, 0);
    printf("# gemma3 tiny, budget of 24 full blocks: %d blocks with rings; preemptions %d vs %d\n",
           st[0].kv_blocks, (int)st[0].n_preemptions, (int)st[1].n_preemptions);
    CHECK_EQ_INT(r[0].n, rs.n);
    CHECK_EQ_INT(r[1].n, rs.n);
    for (int i = 0; i < rs.n; i++)
        CHECK_EQ_STR(r[0].choices[i], r[1].choices[i]);
    results_release(&r[0]);
    results_release(&r[1]);
    reqset_release(&rs);
    env_release(&e);
}

TEST(sched_chunked_prefill_equivalence)
{
    struct env e;
    env_init(&e);
    struct reqset rs = {.n = 12};
    int32_t ids[150];
    for (int i = 0; i < rs.n; i++) {
        int len = 1 + (int)rnd(140);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 12, i % 2, 1, (uint64_t)i * 3);
    }
    static struct results r[3];
    memset(r, 0, sizeof r);
    int budgets[3] = {512, 7, 1};
    int64_t steps[3];
    for (int k = 0; k < 3; k++) {
        struct oreq_sched *s = sched_make(&e, &r[k], budgets[k], 8, 256 * TINY_BLOCK_BYTES, k == 1);
        add_all(s, &rs, 0, rs.n);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        struct sched_stats st;
        oreq_sched_get_stats(s, &st);
        steps[k] = st.n_steps;
        oreq_sched_free(s);
    }
    CHECK(steps[1] > steps[0] && steps[2] > steps[1]);
    for (int i = 0; i < rs.n; i++) {
        CHECK_EQ_STR(r[1].choices[i], r[0].choices[i]);
        CHECK_EQ_STR(r[2].choices[i], r[0].choices[i]);
    }
    for (int k = 0; k < 3; k++)
        results_release(&r[k]);
    reqset_release(&rs);
    env_release(&e);
}

TEST(sched_request_errors_and_chat)
{
    struct env e;
    env_init(&e);
    struct results res = {0};
    struct oreq_sched *s = sched_make(&e, &res, 64, 4, 64 * TINY_BLOCK_BYTES, 0);
    json_t *bad = json_pack("{s:s, s:[i,i], s:f}", "model", "tiny", "prompt", 5, 6, "temperature", 7.0);
    CHECK_EQ_INT(oreq_sched_add(s, "r0", GP_COMPLETIONS, bad), 0);
    CHECK_EQ_INT(res.status[0], 400);
    CHECK(strstr(res.choices[0], "temperature") != NULL);
    int32_t ids[250];
    for (int j = 0; j < 250; j++)
        ids[j] = 5;
    json_t *longp = body_new(ids, 250, 20, 0, 1, 0);
    CHECK_EQ_INT(oreq_sched_add(s, "r1", GP_COMPLETIONS, longp), 0);
    CHECK_EQ_INT(res.status[1], 400);
    CHECK(strstr(res.choices[1], "context_length_exceeded") != NULL);
    json_t *chat = json_pack("{s:s, s:[{s:s, s:s}], s:i, s:i}", "model", "tiny", "messages", "role",
                             "user", "content", "hello there", "max_tokens", 5, "temperature", 0);
    CHECK_EQ_INT(oreq_sched_add(s, "r2", GP_CHAT, chat), 0);
    CHECK_EQ_INT(sched_n_waiting(eng(s)), 1);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    CHECK_EQ_INT(res.status[2], 200);
    CHECK(strstr(res.choices[2], "\"role\":\"assistant\"") != NULL);
    CHECK_EQ_INT(sched_n_running(eng(s)), 0);
    CHECK_EQ_INT(sched_step(eng(s)), 0);
    /* a request left unfinished is dropped by sched_free without leaks */
    CHECK_EQ_INT(oreq_sched_add(s, "r3", GP_CHAT, chat), 0);
    CHECK_EQ_INT(sched_step(eng(s)), 1);
    oreq_sched_free(s);
    json_decref(bad);
    json_decref(longp);
    json_decref(chat);
    results_release(&res);
    env_release(&e);
}

/* The token-level API without any body: token prompts and C parameters in,
 * choices and counts out, user data handed back and freed once; the text
 * equals what the same request gives through the OpenAI wrapper. */
struct tok_results {
    char text[2][256];
    int64_t prompt_tokens, completion_tokens;
    int n_calls;
    void *user;
};

static int on_tok_result(void *ctx, const struct sched_result *r)
{
    struct tok_results *tr = ctx;
    CHECK_EQ_STR(r->id, "t0");
    CHECK_EQ_INT((int)r->n_choices, 2);
    for (size_t i = 0; i < r->n_choices && i < 2; i++) {
        CHECK(r->choices[i].finish == STOP_FINISH_LENGTH);
        snprintf(tr->text[i], sizeof tr->text[i], "%.*s", (int)r->choices[i].text_len,
                 r->choices[i].text);
    }
    CHECK_EQ_INT(r->gp->n, 2);
    tr->prompt_tokens = r->prompt_tokens;
    tr->completion_tokens = r->completion_tokens;
    tr->user = r->user;
    tr->n_calls++;
    return 0;
}

static int n_user_frees;
static void user_free_count(void *p)
{
    CHECK(p == &n_user_frees);
    n_user_frees++;
}

TEST(sched_token_api_without_bodies)
{
    struct env e;
    env_init(&e);
    struct tok_results tr;
    memset(&tr, 0, sizeof tr);
    struct sched_opts o;
    sched_opts_init(&o);
    o.max_seqs = 4;
    o.kv_mem_bytes = 64 * TINY_BLOCK_BYTES;
    o.on_result = on_tok_result;
    o.cb_ctx = &tr;
    struct sched *s;
    CHECK_EQ_INT(sched_new(e.m, e.t, &o, &s), 0);
    static const int32_t ids[6] = {11, 12, 13, 14, 15, 16};
    struct gen_params gp;
    memset(&gp, 0, sizeof gp);
    smp_params_init(&gp.smp);
    gp.smp.temperature = 1.9;
    gp.smp.top_k = 50;
    gp.max_tokens = 7;
    gp.seed = 42;
    gp.seed_given = 1;
    gp.n = 2;
    struct gen_prompt *pr = calloc(1, sizeof *pr);
    pr->ids = malloc(sizeof ids);
    memcpy(pr->ids, ids, sizeof ids);
    pr->n = 6;
    CHECK_EQ_INT(sched_add(s, "t0", &gp, pr, 1, &n_user_frees, user_free_count), 0);
    CHECK_EQ_INT(gp.n, 0); /* moved into the scheduler */
    CHECK_EQ_INT(sched_run(s), 0);
    CHECK_EQ_INT(tr.n_calls, 1);
    CHECK(tr.user == &n_user_frees);
    CHECK_EQ_INT(n_user_frees, 1);
    CHECK_EQ_INT(tr.prompt_tokens, 6);
    CHECK_EQ_INT(tr.completion_tokens, 14);
    /* refused arguments still take ownership (no leak under ASan) */
    struct gen_prompt *pr2 = calloc(1, sizeof *pr2);
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(sched_add(s, "t1", &gp, pr2, 1, &n_user_frees, user_free_count), ERR_INVAL);
    CHECK_EQ_INT(n_user_frees, 2);
    sched_free(s);

    /* the same request as a body through the wrapper: the same texts */
    struct results res = {0};
    struct oreq_sched *os = sched_make(&e, &res, 512, 4, 64 * TINY_BLOCK_BYTES, 0);
    json_t *b = body_new(ids, 6, 7, 1, 2, 42);
    CHECK_EQ_INT(oreq_sched_add(os, "r0", GP_COMPLETIONS, b), 0);
    CHECK_EQ_INT(sched_run(eng(os)), 0);
    CHECK_EQ_INT(res.status[0], 200);
    json_error_t jerr;
    json_t *ch = json_loads(res.choices[0], 0, &jerr);
    CHECK_EQ_INT((int)json_array_size(ch), 2);
    for (size_t i = 0; i < 2; i++)
        CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(ch, i), "text")),
                     tr.text[i]);
    json_decref(ch);
    json_decref(b);
    oreq_sched_free(os);
    results_release(&res);
    env_release(&e);
}

TEST(sched_cancel_running_and_waiting_requests)
{
    struct env e;
    env_init(&e);
    struct reqset rs = {.n = 12};
    int32_t ids[120];
    for (int i = 0; i < rs.n; i++) {
        int len = 30 + (int)rnd(80);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 40, i % 2, i == 2 ? 2 : 1, 5 + (uint64_t)i);
    }
    /* reference: everything, uncancelled */
    struct results ref = {0}, got = {0};
    struct oreq_sched *s = sched_make(&e, &ref, 64, 4, 256 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    oreq_sched_free(s);
    CHECK_EQ_INT(ref.n, rs.n);

    s = sched_make(&e, &got, 64, 4, 256 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_cancel(eng(s), "nope"), ERR_NOTFOUND);
    /* step until four sequences run and decode */
    for (int k = 0; k < 8; k++)
        CHECK_EQ_INT(sched_step(eng(s)), 1);
    CHECK_EQ_INT(sched_n_running(eng(s)), 4);
    CHECK_EQ_INT(got.n, 0);
    struct kv_cache *kv = model_ctx_kv(sched_model_ctx(eng(s)));
    int used0 = kv_cache_n_used(kv);
    /* cancel in id order until two running requests are gone (the ones met
     * before them were waiting) */
    int n_cancel = 0, cancelled[MAXR] = {0};
    char id[16];
    int running_before = sched_n_running(eng(s)), waiting_before = sched_n_waiting(eng(s));
    for (int i = 0; i < rs.n && n_cancel < 2; i++) {
        snprintf(id, sizeof id, "r%d", i);
        int run0 = sched_n_running(eng(s));
        int wait0 = sched_n_waiting(eng(s));
        CHECK_EQ_INT(sched_cancel(eng(s), id), 0);
        cancelled[i] = 1;
        if (sched_n_running(eng(s)) < run0)
            n_cancel++; /* it was running */
        else
            CHECK(sched_n_waiting(eng(s)) < wait0);
    }
    CHECK(n_cancel == 2);
    CHECK(sched_n_running(eng(s)) <= running_before - 2);
    CHECK(sched_n_running(eng(s)) + sched_n_waiting(eng(s)) < running_before + waiting_before);
    CHECK(kv_cache_n_used(kv) < used0); /* their private blocks went back at once */
    CHECK_EQ_INT(sched_cancel(eng(s), "r0"), ERR_NOTFOUND); /* already gone */
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    CHECK_EQ_INT(kv_cache_n_used(kv), 0);
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    oreq_sched_free(s);
    int n_can = 0;
    for (int i = 0; i < rs.n; i++) {
        if (cancelled[i]) {
            n_can++;
            CHECK(got.choices[i] == NULL); /* no callback */
            continue;
        }
        CHECK_EQ_INT(got.status[i], 200);
        CHECK_EQ_STR(got.choices[i], ref.choices[i]); /* the others are not disturbed */
    }
    CHECK_EQ_INT((int)st.n_cancelled, n_can);
    CHECK_EQ_INT(got.n, rs.n - n_can);
    results_release(&ref);
    results_release(&got);
    reqset_release(&rs);
    env_release(&e);
}

TEST(sched_withdraw_only_requests_not_started)
{
    struct env e;
    env_init(&e);
    struct reqset rs = {.n = 8};
    int32_t ids[120];
    for (int i = 0; i < rs.n; i++) {
        int len = 30 + (int)rnd(80);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 20, i % 2, 1, 7 + (uint64_t)i);
    }
    struct results ref = {0}, got = {0};
    struct oreq_sched *s = sched_make(&e, &ref, 64, 2, 256 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    oreq_sched_free(s);
    CHECK_EQ_INT(ref.n, rs.n);

    g_spec = SCHED_SPEC_OFF; /* six steps below must leave both first requests running */
    s = sched_make(&e, &got, 64, 2, 256 * TINY_BLOCK_BYTES, 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_withdraw(eng(s), "nope"), ERR_NOTFOUND);
    for (int k = 0; k < 6; k++)
        CHECK_EQ_INT(sched_step(eng(s)), 1);
    CHECK_EQ_INT(sched_n_running(eng(s)), 2);
    CHECK_EQ_INT(sched_n_waiting(eng(s)), rs.n - 2);
    /* two slots: exactly two requests started; the others withdraw */
    int n_busy = 0, withdrawn[MAXR] = {0};
    char id[16];
    for (int i = 0; i < rs.n; i++) {
        snprintf(id, sizeof id, "r%d", i);
        int rc = sched_withdraw(eng(s), id);
        if (rc == ERR_BUSY) {
            n_busy++;
            continue;
        }
        CHECK_EQ_INT(rc, 0);
        withdrawn[i] = 1;
        CHECK_EQ_INT(sched_withdraw(eng(s), id), ERR_NOTFOUND); /* gone */
    }
    CHECK_EQ_INT(n_busy, 2);
    CHECK_EQ_INT(sched_n_waiting(eng(s)), 0);
    CHECK_EQ_INT(sched_n_running(eng(s)), 2);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    oreq_sched_free(s);
    CHECK_EQ_INT((int)st.n_cancelled, 0);
    CHECK_EQ_INT(got.n, 2);
    for (int i = 0; i < rs.n; i++) {
        if (withdrawn[i]) {
            CHECK(got.choices[i] == NULL); /* no callback */
            continue;
        }
        CHECK_EQ_INT(got.status[i], 200);
        CHECK_EQ_STR(got.choices[i], ref.choices[i]);
    }
    results_release(&ref);
    results_release(&got);
    reqset_release(&rs);
    env_release(&e);
}

/* Structured outputs in the batched step: constrained requests (regex,
 * choice, JSON Schema; greedy and seeded) give the same choices alone as in
 * a pack of 96 mixed with unconstrained ones, whose masks the scheduler
 * computes on a 2-thread pool; every "stop" output is in its language. */
TEST(sched_constrained_masks_on_the_pool_batch_invariant)
{
    struct env e;
    env_init(&e);
    static const char *const kinds[] = {
        "\"guided_regex\":\"[a-c]{2,6}( [0-9]{1,3})?\"",
        "\"guided_choice\":[\"alpha\",\"beta\",\"gamma delta\"]",
        "\"guided_json\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"maxLength\":5},"
        "\"v\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},\"maxItems\":3}},"
        "\"required\":[\"k\",\"v\"],\"additionalProperties\":false}",
    };
    struct reqset rs = {.n = 96};
    int32_t ids[64];
    for (int i = 0; i < rs.n; i++) {
        int len = 3 + (int)rnd(40);
        for (int j = 0; j < len; j++)
            ids[j] = (int32_t)rnd(298);
        rs.body[i] = body_new(ids, len, 60, i % 2, i % 7 == 2 ? 2 : 1, 500 + (uint64_t)i);
        if (i % 4 != 3) {   /* three in four constrained */
            char buf[512];
            snprintf(buf, sizeof buf, "{%s}", kinds[i % 3]);
            json_t *extra = json_loads(buf, 0, NULL);
            CHECK(extra != NULL);
            json_object_update(rs.body[i], extra);
            json_decref(extra);
        }
    }
    struct results alone = {0};
    for (int i = 0; i < 12; i++) {
        struct oreq_sched *s = sched_make(&e, &alone, 512, 4, 64 * TINY_BLOCK_BYTES, 1);
        add_all(s, &rs, i, i + 1);
        CHECK_EQ_INT(sched_run(eng(s)), 0);
        oreq_sched_free(s);
    }
    struct kn_pool *pool = NULL;
    CHECK_EQ_INT(kn_pool_new(2, &pool), 0);
    struct results pack = {0};
    struct sched_opts o;
    sched_opts_init(&o);
    o.max_batch_tokens = 64;
    o.max_seqs = 32;
    o.kv_mem_bytes = 160 * TINY_BLOCK_BYTES;
    o.pool = pool;
    struct oreq_sched_opts oo = {NULL, on_result, &pack};
    struct oreq_sched *s;
    CHECK_EQ_INT(oreq_sched_new(e.m, e.t, e.tmpl, &o, &oo, &s), 0);
    add_all(s, &rs, 0, rs.n);
    CHECK_EQ_INT(sched_run(eng(s)), 0);
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    oreq_sched_free(s);
    kn_pool_free(pool);
    CHECK_EQ_INT(pack.n, rs.n);
    CHECK(st.n_masks > 0 && st.mask_s >= 0);
    for (int i = 0; i < 12; i++)
        if (strcmp(alone.choices[i], pack.choices[i]) != 0)
            th_fail(__FILE__, __LINE__, "alone == pack", "request %d:\n%s\n%s", i, alone.choices[i],
                    pack.choices[i]);
    int n_stop = 0;
    for (int i = 0; i < rs.n; i++) {
        CHECK_EQ_INT(pack.status[i], 200);
        if (i % 4 == 3)
            continue;
        struct gram *g = NULL;
        struct problem ge;
        CHECK_EQ_INT(gp_format_parse(rs.body[i], &g, &ge), 0);
        json_t *c = json_loads(pack.choices[i], 0, NULL);
        for (size_t k = 0; k < json_array_size(c); k++) {
            json_t *ch = json_array_get(c, k);
            const char *txt = json_string_value(json_object_get(ch, "text"));
            if (strcmp(json_string_value(json_object_get(ch, "finish_reason")), "stop") != 0)
                continue;
            n_stop++;
            if (!gram_match(g, txt, strlen(txt)))
                th_fail(__FILE__, __LINE__, "in language", "request %d: '%s'", i, txt);
        }
        json_decref(c);
        gram_unref(g);
    }
    CHECK(n_stop >= 40);
    results_release(&alone);
    results_release(&pack);
    reqset_release(&rs);
    env_release(&e);
}
