/* Whole-model parity of the CUDA forward pass (worker/engine/forward_cuda.c)
 * against the CPU engine (worker/engine/forward_cpu.c, reference matmul), built only
 * with make CUDA=1; every test skips without a GPU.
 *
 *  - logits of every position on the tiny verification models
 *    (tests/fixtures/model: llama/llama3/qwen2, F32/F16/Q8_0/Q4_0/Q4_1/
 *    Q5_0/Q5_1): max relative L2 error of a logits row under TOL_BF16,
 *    with multi-token steps (bf16 cuBLAS) and single-token steps (the
 *    fused dequant matvec on Q4_0/Q4_1/Q8_0 models).
 *  - a mixed batch (prefill chunks and decode tokens of several sequences)
 *    gives the logits of each sequence run alone (TOL_BATCH: on the GPU the
 *    split of the attention and cuBLAS' algorithm depend on the batch, so
 *    only rounding-level agreement is expected).
 *  - the default model (SmolLM2-135M Q4_1; $KN_MODEL or
 *    .cache/models/, skipped when absent): logits within TOL_BF16_REAL, and
 *    greedy 64-token continuations of 20 prompts: each divergence from the
 *    CPU engine is printed with the CPU's top-2 logit gap at that step and
 *    must be a near-tie (gap < TIE_GAP); at least 90% identical
 *    (KN_GREEDY_MIN_PCT lowers it for a layer slice of the model).
 *
 * Tolerances: bf16 weights carry a relative rounding error up to 2^-9 and
 * activations are rounded to bf16 before each GEMM; on the tiny models this
 * moves logits by ~1e-2 relative L2 (quantization itself moves them 1-19%,
 * tests/fixtures/model/NOTES.md), hence TOL_BF16 = 3e-2. These bounds are
 * first estimates: nothing here has been run on a GPU yet (see
 * bench/NOTES.md); the first GPU run prints the observed errors. The CPU
 * engine with the GPU's bf16 roundings emulated (weights, every GEMM input,
 * K/V) lands at 6-8e-3 on the tiny models and 2.2e-2 on the 11-layer slice
 * of the default model: 4x and 2.3x inside the bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"
#include "text/tok.h"

#define TOL_BF16 3e-2
#define TOL_BF16_REAL 5e-2
#define TOL_BATCH 1e-2
#define TIE_GAP 1.0
#define FIX "tests/fixtures/model/"

static struct model *load(const char *path)
{
    struct model *m = NULL;
    char err[256];
    int rc = model_load(path, &m, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s: %s\n", path, err);
    CHECK_EQ_INT(rc, 0);
    return m;
}

/* A context on device dev for n_seq sequences; skips when the GPU is absent. */
static struct model_ctx *ctx_new(const struct model *m, int dev, int n_seq, int n_batch,
                                 int n_ctx, struct kn_pool *pool)
{
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = n_ctx < m->hp.n_ctx_train ? n_ctx : m->hp.n_ctx_train;
    p.n_batch_max = n_batch;
    p.n_out_max = n_batch;
    p.n_seq_max = n_seq;
    p.exact_matmul = 1;
    p.pool = pool;
    p.device = dev;
    struct model_ctx *c = NULL;
    int rc = model_ctx_new(m, &p, &c);
    if (rc == ERR_NODEVICE)
        SKIP("no GPU (no CUDA device or driver on this machine)");
    CHECK_EQ_INT(rc, 0);
    return c;
}

/* Logits of every position of toks[0..n) as one sequence (slot 0), fed in
 * chunks of chunk tokens, the last tail1 of them one per step (single-token
 * steps take the fused matvec path on Q4_0/Q4_1/Q8_0 models); out (n, n_vocab). */
static void seq_logits(struct model_ctx *c, int n_vocab, const int32_t *toks, int n, int chunk,
                       int tail1, float *out)
{
    int32_t *pos = malloc((size_t)chunk * 4), *seq = calloc((size_t)chunk, 4);
    uint8_t *mark = malloc((size_t)chunk);
    memset(mark, 1, (size_t)chunk);
    for (int at = 0; at < n;) {
        int k = n - tail1 - at < chunk ? n - tail1 - at : chunk;
        if (k <= 0)
            k = 1;
        for (int i = 0; i < k; i++)
            pos[i] = at + i;
        struct model_batch b = {k, toks + at, pos, seq, mark};
        const float *lg;
        int n_out;
        CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
        CHECK_EQ_INT(n_out, k);
        memcpy(out + (size_t)at * n_vocab, lg, (size_t)k * n_vocab * sizeof(float));
        at += k;
    }
    free(pos), free(seq), free(mark);
}

static double max_row_err(const float *got, const float *want, int rows, int n_vocab)
{
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double e = th_rel_l2(got + (size_t)r * n_vocab, want + (size_t)r * n_vocab, n_vocab);
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}

static void fill_tokens(int32_t *t, int n, int n_vocab, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)n_vocab);
    }
}

TEST(cuda_model_logits_match_cpu_on_tiny_models)
{
    static const char *files[] = {"llama_tied.f32.gguf",    "llama3_untied.f32.gguf",
                                  "qwen2_tied.f32.gguf",    "qwen2_tied.f16.gguf",
                                  "llama_tied.q8_0.gguf",   "llama_tied.q4_0.gguf",
                                  "llama_tied.q4_1.gguf",   "llama_tied.q5_0.gguf",
                                  "llama_tied.q5_1.gguf",   "llama3_untied.q8_0.gguf",
                                  "qwen2_tied.q8_0.gguf"};
    enum { N = 40 };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", files[f]);
        struct model *m = load(path);
        int nv = m->hp.n_vocab;
        struct model_ctx *gpu = ctx_new(m, KN_DEVICE_CUDA, 1, 16, 64, NULL);
        struct model_ctx *cpu = ctx_new(m, KN_DEVICE_CPU, 1, N, 64, NULL);
        int32_t toks[N];
        fill_tokens(toks, N, nv, 7 + (uint32_t)f);
        float *want = malloc((size_t)N * nv * 4), *got = malloc((size_t)N * nv * 4);
        seq_logits(cpu, nv, toks, N, N, 0, want);
        seq_logits(gpu, nv, toks, N, 16, 8, got); /* 16 + 16, then 8 single-token steps */
        double e = max_row_err(got, want, N, nv);
        printf("  %-26s max rel L2 of a logits row %.3e (tol %.0e)\n", files[f], e, TOL_BF16);
        CHECK(e < TOL_BF16);
        free(want), free(got);
        model_ctx_free(gpu), model_ctx_free(cpu);
        model_free(m);
    }
}

/* Three sequences in one batch (a fresh prompt, a prompt after a cached
 * prefix, decode tokens) against each run alone on the GPU. */
TEST(cuda_model_mixed_batch_matches_single)
{
    struct model *m = load(FIX "llama3_untied.q8_0.gguf");
    int nv = m->hp.n_vocab;
    enum { L0 = 23, L1 = 30, L2 = 9 };
    int32_t t0[L0], t1[L1], t2[L2];
    fill_tokens(t0, L0, nv, 1), fill_tokens(t1, L1, nv, 2), fill_tokens(t2, L2, nv, 3);
    /* alone */
    float *a0 = malloc((size_t)L0 * nv * 4), *a1 = malloc((size_t)L1 * nv * 4);
    float *a2 = malloc((size_t)L2 * nv * 4);
    struct model_ctx *g = ctx_new(m, KN_DEVICE_CUDA, 1, 64, 64, NULL);
    seq_logits(g, nv, t0, L0, 64, 0, a0);
    kv_seq_clear(model_ctx_kv(g), 0);
    seq_logits(g, nv, t1, L1, 64, 0, a1);
    kv_seq_clear(model_ctx_kv(g), 0);
    seq_logits(g, nv, t2, L2, 64, 0, a2);
    model_ctx_free(g);
    /* together: step 1 = seq 1's first 10 tokens + seq 2's first 8;
     * step 2 = all of seq 0, seq 1's other 20, seq 2's last token (a decode) */
    g = ctx_new(m, KN_DEVICE_CUDA, 3, 64, 64, NULL);
    int32_t tok[64], pos[64], seq[64];
    uint8_t mark[64];
    int n = 0;
    for (int i = 0; i < 10; i++, n++)
        tok[n] = t1[i], pos[n] = i, seq[n] = 1, mark[n] = 0;
    for (int i = 0; i < 8; i++, n++)
        tok[n] = t2[i], pos[n] = i, seq[n] = 2, mark[n] = 0;
    struct model_batch b1 = {n, tok, pos, seq, mark};
    const float *lg;
    int n_out;
    CHECK_EQ_INT(model_forward(g, &b1, &lg, &n_out), 0);
    n = 0;
    for (int i = 0; i < L0; i++, n++)
        tok[n] = t0[i], pos[n] = i, seq[n] = 0, mark[n] = 1;
    for (int i = 10; i < L1; i++, n++)
        tok[n] = t1[i], pos[n] = i, seq[n] = 1, mark[n] = 1;
    tok[n] = t2[8], pos[n] = 8, seq[n] = 2, mark[n] = 1, n++;
    struct model_batch b2 = {n, tok, pos, seq, mark};
    CHECK_EQ_INT(model_forward(g, &b2, &lg, &n_out), 0);
    CHECK_EQ_INT(n_out, n);
    double e0 = max_row_err(lg, a0, L0, nv);
    double e1 = max_row_err(lg + (size_t)L0 * nv, a1 + (size_t)10 * nv, L1 - 10, nv);
    double e2 = max_row_err(lg + (size_t)(L0 + L1 - 10) * nv, a2 + (size_t)8 * nv, 1, nv);
    printf("  mixed batch vs alone: %.3e %.3e %.3e (tol %.0e)\n", e0, e1, e2, TOL_BATCH);
    CHECK(e0 < TOL_BATCH && e1 < TOL_BATCH && e2 < TOL_BATCH);
    model_ctx_free(g);
    free(a0), free(a1), free(a2);
    model_free(m);
}

/* ---- the default model ---- */

static const char *default_model(void)
{
    const char *p = getenv("KN_MODEL");
    static const char dflt[] = ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!p || !*p)
        p = dflt;
    FILE *f = fopen(p, "rb");
    if (!f)
        SKIP("default model absent (set KN_MODEL or run scripts/fetch-model)");
    fclose(f);
    return p;
}

static const char *prompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "In 1969, the first humans",
    "A good recipe for pancakes starts with",
    "The quick brown fox",
    "Photosynthesis is the process by which",
    "To be or not to be,",
    "The largest planet in our solar system is",
    "Here is a list of fruits: apple, banana,",
    "Machine learning is",
    "The meaning of life is",
    "Dear customer, thank you for",
    "import numpy as np\n",
    "The Eiffel Tower is located in",
    "My favourite book is",
    "1, 2, 3, 4, 5,",
    "The sun rises in the",
};
#define N_PROMPTS ((int)(sizeof prompts / sizeof prompts[0]))
#define N_GEN 64
#define MAX_PROMPT 32

/* Tokenized prompts into ids (N_PROMPTS, MAX_PROMPT), lengths into len. */
static void tokenize_prompts(const struct model *m, int32_t *ids, int *len)
{
    struct tok *t = NULL;
    char err[256];
    CHECK_EQ_INT(model_tokenizer(m, &t, err, sizeof err), 0);
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t n = 0;
        CHECK_EQ_INT(tok_encode(t, prompts[i], strlen(prompts[i]), TOK_ADD_SPECIAL,
                                ids + (size_t)i * MAX_PROMPT, MAX_PROMPT, &n),
                     0);
        CHECK(n > 0);
        len[i] = (int)n;
    }
    tok_free(t);
}

/* Greedy continuations of every prompt, all sequences in one context:
 * step 0 prefills every prompt (one batch), then N_GEN - 1 decode steps of
 * one token per sequence. gen (N_PROMPTS, N_GEN); gap (same shape, may be
 * NULL): top-1 minus top-2 logit at each step. */
static void greedy(const struct model *m, int dev, const int32_t *ids, const int *len, int32_t *gen,
                   float *gap, struct kn_pool *pool)
{
    int nv = m->hp.n_vocab;
    struct model_ctx *c = ctx_new(m, dev, N_PROMPTS, N_PROMPTS * MAX_PROMPT, 256, pool);
    int cap = N_PROMPTS * MAX_PROMPT;
    int32_t *tok = malloc((size_t)cap * 4), *pos = malloc((size_t)cap * 4);
    int32_t *seq = malloc((size_t)cap * 4);
    uint8_t *mark = malloc((size_t)cap);
    int n = 0;
    for (int s = 0; s < N_PROMPTS; s++)
        for (int i = 0; i < len[s]; i++, n++) {
            tok[n] = ids[(size_t)s * MAX_PROMPT + i];
            pos[n] = i;
            seq[n] = s;
            mark[n] = i == len[s] - 1;
        }
    for (int step = 0; step < N_GEN; step++) {
        struct model_batch b = {n, tok, pos, seq, mark};
        const float *lg;
        int n_out;
        CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
        CHECK_EQ_INT(n_out, N_PROMPTS);
        for (int s = 0; s < N_PROMPTS; s++) {
            const float *row = lg + (size_t)s * nv;
            int best = kn_argmax_f32(row, nv);
            CHECK(best >= 0);
            gen[s * N_GEN + step] = best;
            if (gap) {
                float second = -INFINITY;
                for (int v = 0; v < nv; v++)
                    if (v != best && row[v] > second)
                        second = row[v];
                gap[s * N_GEN + step] = row[best] - second;
            }
        }
        for (int s = 0; s < N_PROMPTS; s++) {
            tok[s] = gen[s * N_GEN + step];
            pos[s] = len[s] + step;
            seq[s] = s;
            mark[s] = 1;
        }
        n = N_PROMPTS;
    }
    free(tok), free(pos), free(seq), free(mark);
    model_ctx_free(c);
}

TEST(cuda_model_default_logits_match_cpu)
{
    const char *path = default_model();
    struct model *m = load(path);
    int nv = m->hp.n_vocab;
    int32_t ids[N_PROMPTS * MAX_PROMPT];
    int len[N_PROMPTS];
    tokenize_prompts(m, ids, len);
    struct kn_pool *pool = NULL;
    CHECK_EQ_INT(kn_pool_new(0, &pool), 0);
    struct model_ctx *gpu = ctx_new(m, KN_DEVICE_CUDA, 1, MAX_PROMPT, 256, NULL);
    struct model_ctx *cpu = ctx_new(m, KN_DEVICE_CPU, 1, MAX_PROMPT, 256, pool);
    float *want = malloc((size_t)MAX_PROMPT * nv * 4), *got = malloc((size_t)MAX_PROMPT * nv * 4);
    double worst = 0;
    for (int s = 0; s < 4; s++) {
        const int32_t *t = ids + (size_t)s * MAX_PROMPT;
        kv_seq_clear(model_ctx_kv(gpu), 0);
        kv_seq_clear(model_ctx_kv(cpu), 0);
        seq_logits(cpu, nv, t, len[s], len[s], 0, want);
        seq_logits(gpu, nv, t, len[s], 3, s % 2 ? len[s] : 0, got); /* odd: matvec steps */
        double e = max_row_err(got, want, len[s], nv);
        worst = e > worst ? e : worst;
    }
    printf("  default model: max rel L2 of a logits row %.3e (tol %.0e)\n", worst, TOL_BF16_REAL);
    CHECK(worst < TOL_BF16_REAL);
    free(want), free(got);
    model_ctx_free(gpu), model_ctx_free(cpu);
    kn_pool_free(pool);
    model_free(m);
}

TEST(cuda_model_default_greedy_matches_cpu)
{
    const char *path = default_model();
    struct model *m = load(path);
    int32_t ids[N_PROMPTS * MAX_PROMPT];
    int len[N_PROMPTS];
    tokenize_prompts(m, ids, len);
    struct kn_pool *pool = NULL;
    CHECK_EQ_INT(kn_pool_new(0, &pool), 0);
    int32_t *gc = malloc(sizeof(int32_t) * N_PROMPTS * N_GEN);
    int32_t *gg = malloc(sizeof(int32_t) * N_PROMPTS * N_GEN);
    float *gap = malloc(sizeof(float) * N_PROMPTS * N_GEN);
    greedy(m, KN_DEVICE_CUDA, ids, len, gg, NULL, NULL);
    greedy(m, KN_DEVICE_CPU, ids, len, gc, gap, pool);
    int same = 0, unexplained = 0;
    for (int s = 0; s < N_PROMPTS; s++) {
        int d = 0;
        while (d < N_GEN && gc[s * N_GEN + d] == gg[s * N_GEN + d])
            d++;
        if (d == N_GEN) {
            same++;
            continue;
        }
        float g = gap[s * N_GEN + d];
        printf("  prompt %2d diverges at token %2d: cpu %d gpu %d, cpu top-2 gap %.4f%s\n", s, d,
               gc[s * N_GEN + d], gg[s * N_GEN + d], g, g < TIE_GAP ? " (near-tie)" : "");
        if (!(g < TIE_GAP))
            unexplained++;
    }
    printf("  greedy %d tokens: %d/%d prompts identical to the CPU engine\n", N_GEN, same,
           N_PROMPTS);
    /* The check that matters: every divergence is at a near-tie. How many
     * prompts meet one in 64 tokens depends on the model. The floor is
     * 90% for a real model; KN_GREEDY_MIN_PCT lowers it for the
     * layer slice scripts/gpu-check carries (scripts/gpu-model): the CPU
     * engine with the GPU's bf16 roundings emulated (weights, every GEMM
     * input, K/V) matched 17/20 on the 11-layer slice, each divergence at a
     * top-2 gap < 0.03, so 90% would fail a correct GPU there. */
    int min_pct = 90;
    const char *mp = getenv("KN_GREEDY_MIN_PCT");
    if (mp && *mp) {
        char *end;
        long v = strtol(mp, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 100)
            min_pct = (int)v;
    }
    printf("  floor: %d%% identical (KN_GREEDY_MIN_PCT)\n", min_pct);
    CHECK(same * 100 >= N_PROMPTS * min_pct);
    CHECK_EQ_INT(unexplained, 0);
    free(gc), free(gg), free(gap);
    kn_pool_free(pool);
    model_free(m);
}
