/* bench_attn - cost of the CPU paged attention at long contexts, on the
 * engine's shapes: one layer of a paged binary16 cache (blocks of 16
 * positions scattered over a pool), 1 thread, best of several bursts.
 *
 * usage: bench_attn [seconds per case] [f32,f16,q8] [FILTER]
 *   (FILTER: only the cases whose "shape case" line contains it, e.g.
 *   "smollm2" or "prefill")
 *
 * Cases, per model shape (SmolLM2-135M 9/3 heads x 64, Qwen2.5-0.5B 14/2 x
 * 64, Qwen2.5-1.5B 12/2 x 128) and context C in {1024, 2048}:
 *   decode x1    one sequence, one query token at position C-1
 *   decode x64   64 sequences (each its own pages), one query each
 *   prefill 64   the last 64 tokens of a C-token prompt (positions
 *                C-64..C-1 of one sequence), as one chunk of a prefill
 * "per-token" calls kn_attn_paged_win_heads_* once per token (all heads),
 * as the engine did before issue 34; "tile" calls kn_attn_tile on the
 * tokens of one sequence together (the engine's tiling). Printed: us per
 * case (the thread's CPU time, best burst: on a shared box the wall clock
 * also counts other processes), ns per (query head x position), and the
 * K/V bytes read once per sequence / time (GB/s). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kernels/kn.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void)
{
    return (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
}

enum { BT = 16, NSEQ_MAX = 64, TQ = 64 };

struct shape {
    const char *name;
    int n_head, n_head_kv, head_dim;
};

struct setup {
    struct shape s;
    int ctx, n_seq, kvt; /* kvt: 0 f32, 1 f16, 2 q8 */
    int kv_dim, n_blocks;
    size_t bs;
    uint16_t *k16, *v16;
    float *k32, *v32;
    int8_t *k8, *v8;
    float *ks, *vs;
    int32_t *tables; /* (n_seq, ctx / BT) */
    float *q, *out;  /* (TQ or n_seq, n_head * head_dim) */
    float *scores;
    void *scratch;
};

static void setup_init(struct setup *u, struct shape s, int ctx, int n_seq, int kvt)
{
    memset(u, 0, sizeof *u);
    u->s = s;
    u->ctx = ctx;
    u->n_seq = n_seq;
    u->kvt = kvt;
    u->kv_dim = s.n_head_kv * s.head_dim;
    int per = ctx / BT;
    u->n_blocks = per * n_seq;
    u->bs = (size_t)BT * (size_t)u->kv_dim;
    size_t n = (size_t)u->n_blocks * u->bs;
    if (kvt == 0) {
        u->k32 = malloc(n * sizeof(float));
        u->v32 = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            u->k32[i] = rndf();
            u->v32[i] = rndf();
        }
    } else if (kvt == 1) {
        u->k16 = malloc(n * sizeof(uint16_t));
        u->v16 = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            u->k16[i] = kn_fp32_to_fp16(rndf());
            u->v16[i] = kn_fp32_to_fp16(rndf());
        }
    } else {
#ifdef KN_ATTN_TILE
        u->k8 = malloc(n);
        u->v8 = malloc(n);
        u->ks = malloc(n / 32 * sizeof(float));
        u->vs = malloc(n / 32 * sizeof(float));
        float tmp[32];
        for (size_t i = 0; i < n; i += 32) {
            for (int j = 0; j < 32; j++)
                tmp[j] = rndf();
            kn_kv_quantize_q8(u->k8 + i, u->ks + i / 32, tmp, 32);
            for (int j = 0; j < 32; j++)
                tmp[j] = rndf();
            kn_kv_quantize_q8(u->v8 + i, u->vs + i / 32, tmp, 32);
        }
#endif
    }
    /* each sequence's pages: a random permutation of the pool */
    u->tables = malloc((size_t)u->n_blocks * sizeof(int32_t));
    for (int i = 0; i < u->n_blocks; i++)
        u->tables[i] = i;
    for (int i = u->n_blocks - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1));
        int32_t t = u->tables[i];
        u->tables[i] = u->tables[j];
        u->tables[j] = t;
    }
    int rows = n_seq > TQ ? n_seq : TQ;
    size_t qd = (size_t)s.n_head * (size_t)s.head_dim;
    u->q = malloc((size_t)rows * qd * sizeof(float));
    u->out = malloc((size_t)rows * qd * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * qd; i++)
        u->q[i] = rndf() * 0.3f;
    u->scores = malloc((size_t)ctx * sizeof(float));
#ifdef KN_ATTN_TILE
    u->scratch = malloc(kn_attn_tile_scratch_bytes(TQ, s.n_head, s.n_head_kv, s.head_dim, ctx));
#endif
}

static void setup_free(struct setup *u)
{
    free(u->k16);
    free(u->v16);
    free(u->k32);
    free(u->v32);
    free(u->k8);
    free(u->v8);
    free(u->ks);
    free(u->vs);
    free(u->tables);
    free(u->q);
    free(u->out);
    free(u->scores);
    free(u->scratch);
}

/* per-token calls: token t of sequence seq at position pos */
static void run_token(struct setup *u, int seq, int t, int pos)
{
    const struct shape *s = &u->s;
    size_t qd = (size_t)s->n_head * (size_t)s->head_dim;
    const int32_t *table = u->tables + (size_t)seq * (size_t)(u->ctx / BT);
    if (u->kvt == 1)
        kn_attn_paged_win_heads_f16(u->out + (size_t)t * qd, u->q + (size_t)t * qd, u->k16, u->v16,
                                    table, BT, u->bs, 0, pos + 1, s->n_head, s->n_head_kv,
                                    s->head_dim, 0, s->n_head, 0.125f, 0.0f, u->scores);
    else if (u->kvt == 0)
        kn_attn_paged_win_heads_f32(u->out + (size_t)t * qd, u->q + (size_t)t * qd, u->k32, u->v32,
                                    table, BT, u->bs, 0, pos + 1, s->n_head, s->n_head_kv,
                                    s->head_dim, 0, s->n_head, 0.125f, 0.0f, u->scores);
}

#ifdef KN_ATTN_TILE
/* one tile: n_q tokens of sequence seq at positions pos0.. */
static void run_tile(struct setup *u, int seq, int t0, int n_q, int pos0)
{
    const struct shape *s = &u->s;
    size_t qd = (size_t)s->n_head * (size_t)s->head_dim;
    int32_t n_ctx[TQ];
    for (int i = 0; i < n_q; i++)
        n_ctx[i] = pos0 + i + 1;
    struct kn_kv_layer kv = {u->kvt, NULL, NULL, NULL, NULL,
                             u->tables + (size_t)seq * (size_t)(u->ctx / BT), BT, u->bs};
    if (u->kvt == 0) {
        kv.k = u->k32;
        kv.v = u->v32;
    } else if (u->kvt == 1) {
        kv.k = u->k16;
        kv.v = u->v16;
    } else {
        kv.k = u->k8;
        kv.v = u->v8;
        kv.k_scale = u->ks;
        kv.v_scale = u->vs;
    }
    kn_attn_tile(u->out + (size_t)t0 * qd, qd, u->q + (size_t)t0 * qd, qd, n_ctx, n_q, &kv,
                 s->n_head, s->n_head_kv, s->head_dim, 0, s->n_head, 0, 0.125f, 0.0f, u->scratch);
}
#endif

enum kase { DEC1, DEC64, PRE64 };

static void run_case(struct setup *u, enum kase k, int tile)
{
    int C = u->ctx;
    if (k == DEC1 || k == DEC64) {
        int ns = k == DEC1 ? 1 : u->n_seq;
        for (int sq = 0; sq < ns; sq++) {
#ifdef KN_ATTN_TILE
            if (tile) {
                run_tile(u, sq, sq, 1, C - 1);
                continue;
            }
#endif
            run_token(u, sq, sq, C - 1);
        }
        return;
    }
#ifdef KN_ATTN_TILE
    if (tile) {
        int tq = kn_attn_tile_queries(u->s.n_head, u->s.n_head_kv);
        for (int t = 0; t < TQ; t += tq)
            run_tile(u, 0, t, TQ - t < tq ? TQ - t : tq, C - TQ + t);
        return;
    }
#endif
    for (int t = 0; t < TQ; t++)
        run_token(u, 0, t, C - TQ + t);
}

/* This thread's CPU time: on a shared box the wall clock also counts the
 * time other processes hold the core. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double time_case(struct setup *u, enum kase k, int tile, double secs)
{
    double best = 1e30;
    uint64_t start = clock_mono_ns();
    do {
        double t0 = cpu_s();
        run_case(u, k, tile);
        double t = cpu_s() - t0;
        if (t < best)
            best = t;
    } while ((double)(clock_mono_ns() - start) / 1e9 < secs);
    return best;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    const char *types = argc > 2 ? argv[2] : "f16";
    const char *filter = argc > 3 ? argv[3] : "";
    if (secs <= 0)
        secs = 0.3;
    const struct shape shapes[] = {{"smollm2-135m 9/3x64", 9, 3, 64},
                                   {"qwen2.5-0.5b 14/2x64", 14, 2, 64},
                                   {"qwen2.5-1.5b 12/2x128", 12, 2, 128}};
    const char *tn[3] = {"f32", "f16", "q8"};
    const char *kn[3] = {"decode x1", "decode x64", "prefill 64"};
    printf("simd %s, 1 thread, thread CPU time, best of bursts over %.2f s per case\n", kn_simd_name(kn_simd_level()),
           secs);
    printf("%-22s %-4s %5s %-11s %-9s %10s %8s %7s\n", "shape", "kv", "ctx", "case", "path", "us",
           "ns/h.p", "GB/s");
    for (int kvt = 0; kvt < 3; kvt++) {
        if (!strstr(types, tn[kvt]))
            continue;
#ifndef KN_ATTN_TILE
        if (kvt == 2)
            continue;
#endif
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            for (int C = 1024; C <= 2048; C *= 2) {
                struct setup u;
                setup_init(&u, shapes[si], C, NSEQ_MAX, kvt);
                double el = kvt == 0 ? 4 : kvt == 1 ? 2 : 1.125;
                for (int k = DEC1; k <= PRE64; k++) {
                    char what[128];
                    snprintf(what, sizeof what, "%s %s", shapes[si].name, kn[k]);
                    if (!strstr(what, filter))
                        continue;
                    for (int tile = 0; tile <= 1; tile++) {
#ifndef KN_ATTN_TILE
                        if (tile)
                            continue;
#endif
                        if (kvt == 2 && !tile)
                            continue;
                        double t = time_case(&u, (enum kase)k, tile, secs);
                        int ns = k == DEC64 ? NSEQ_MAX : 1;
                        /* (query head x position) pairs */
                        double hp = k == PRE64 ? (double)shapes[si].n_head * (double)TQ * (C - TQ / 2.0)
                                               : (double)ns * shapes[si].n_head * C;
                        double bytes = (double)ns * C * u.kv_dim * 2 * el;
                        printf("%-22s %-4s %5d %-11s %-9s %10.1f %8.3f %7.2f\n", shapes[si].name,
                               tn[kvt], C, kn[k], tile ? "tile" : "per-token", t * 1e6,
                               t * 1e9 / hp, bytes / t / 1e9);
                        fflush(stdout);
                    }
                }
                setup_free(&u);
            }
        }
    }
    return 0;
}
