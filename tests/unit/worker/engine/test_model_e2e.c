/*
 * End to end on the default model (SmolLM2-135M-Instruct Q4_1), 20 prompts
 * (10 raw, 10 ChatML) x 64 greedy tokens, against two independent
 * implementations recorded in tests/fixtures/model/smollm2_greedy.json:
 *
 * 1. HF transformers (tests/oracle/make_smollm2_hf.py): float32 forward on
 *    the GGUF's weights dequantized by gguf-py. Our reference engine
 *    computes the same function, so the free-running greedy continuation
 *    must be token-identical; a divergence is accepted only at an exact
 *    tie in transformers' own logits (top1 - top2 < HF_TIE_MARGIN).
 * 2. llama.cpp (tests/oracle/make_smollm2_greedy.py, llama-cpp-python):
 *    teacher-forced with llama.cpp's own tokens, at every step llama.cpp's
 *    choice must be our argmax or within LLAMACPP_NOISE of our best logit.
 *    llama.cpp quantizes activations to Q8 and keeps K/V in F16; its logits
 *    are 1-25% (relative L2) away from transformers' on this model while
 *    ours are within 1e-5 (tests/fixtures/model/NOTES.md), so it flips
 *    choices that are not near ties in exact arithmetic: we count and
 *    print the identical steps, and bound the size of each disagreement.
 *
 * Both run twice: with the exact (reference) matmul, whose free-running
 * slots must follow transformers, and with the default fast matmul (8-bit
 * activations like llama.cpp), whose free-running slots must follow
 * llama.cpp except at llama.cpp's own near ties (top-2 margin <
 * LLAMACPP_TIE_MARGIN); the counts are printed.
 *
 * All cases run as one batch: slot i free-running, slot n+i teacher-forced
 * (llama.cpp pass); every prompt is prefilled in the same step, then decode
 * steps of 2n tokens. make test runs two cases (the reference matmul under
 * ASan is slow); E2E_CASES=all runs the 20 x 64:
 *   E2E_CASES=all TH_TIMEOUT=1800 build/asan/tests/unit model_smollm2
 * (~20 min under ASan; ~3 min when this file is linked with th.c and the
 * -O2 objects of build/obj. Results of the full run:
 * tests/fixtures/model/NOTES.md).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "worker/engine/model.h"

#define MODEL_PATH ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GREEDY_JSON "tests/fixtures/model/smollm2_greedy.json"
#define HF_TIE_MARGIN 1e-3  /* transformers top1-top2 below this = a tie at our precision */
#define LLAMACPP_NOISE 0.5  /* exact path: bound on our logit gap where llama.cpp chose differently */
#define LLAMACPP_NOISE_FAST 1.0 /* the same on the fast path, whose own 8-bit activations add
                                 * noise of the same kind as llama.cpp's (seen: 0.53) */
#define LLAMACPP_TIE_MARGIN 0.25 /* fast path: free-running divergence from llama.cpp allowed only
                                  * at a near tie: llama.cpp's own top1-top2 margin, or our logit
                                  * gap between our token and llama.cpp's, below this (nats) */
#define MAX_CASES 32
#define N_GEN 64
/* Cases run by default: one raw prompt and one chat prompt, 64 steps, or
 * under ASan 8 (exact path) and 16 (fast path) to keep make test fast.
 * E2E_CASES=all runs all 20 cases x 64 steps. */
static const int default_cases[] = {0, 10};
#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_STEPS 8
#define DEFAULT_STEPS_FAST 16
#else
#define DEFAULT_STEPS N_GEN
#define DEFAULT_STEPS_FAST N_GEN
#endif

static void need_model(void)
{
    struct stat st;
    if (stat(MODEL_PATH, &st) != 0) {
        char out[1024];
        char *argv[] = {"scripts/fetch-model", NULL};
        if (th_run(argv, out, sizeof out, 50000) != 0 || stat(MODEL_PATH, &st) != 0)
            SKIP("default model not available (scripts/fetch-model failed: offline?)");
    }
}

struct gcase {
    int ci;                  /* index in the fixture */
    int n_prompt;
    int32_t *prompt;
    int32_t lc[N_GEN];       /* llama.cpp's greedy ids */
    double lc_margin[N_GEN];
    int32_t hf[N_GEN];       /* transformers' greedy ids */
    double hf_margin[N_GEN];
    int32_t got[N_GEN];      /* ours, free-running */
    double own_gap[N_GEN];   /* our logit of got minus that of the reference's token (0 if same) */
    int lc_same;             /* teacher-forced steps where our argmax == llama.cpp's */
    double lc_worst;         /* largest logit gap where it was not */
};

static void get_ids(json_t *c, const char *key, int32_t *ids, double *margins, const char *mkey)
{
    json_t *a = json_object_get(c, key), *mg = json_object_get(c, mkey);
    if (json_array_size(a) != N_GEN || json_array_size(mg) != N_GEN)
        th_fail(__FILE__, __LINE__, key, "fixture entry missing or not %d long", N_GEN);
    for (int j = 0; j < N_GEN; j++) {
        ids[j] = (int32_t)json_integer_value(json_array_get(a, (size_t)j));
        margins[j] = json_number_value(json_array_get(mg, (size_t)j));
    }
}

/* exact = 1: the reference matmul, free-running slots compared with
 * transformers; exact = 0: the default path (8-bit activations, as
 * llama.cpp), free-running slots compared with llama.cpp. Both: the
 * teacher-forced slots bound the disagreements with llama.cpp. */
static void run_e2e(int exact)
{
    need_model();
    json_error_t jerr;
    json_t *doc = json_load_file(GREEDY_JSON, 0, &jerr);
    CHECK(doc != NULL);
    json_t *cases = json_object_get(doc, "cases");
    int n_all = (int)json_array_size(cases);
    CHECK(n_all >= 20 && n_all <= MAX_CASES);
    const char *sel = getenv("E2E_CASES");
    int all = sel && strcmp(sel, "all") == 0;
    int n = all ? n_all : (int)(sizeof default_cases / sizeof default_cases[0]);
    int n_steps = all ? N_GEN : exact ? DEFAULT_STEPS : DEFAULT_STEPS_FAST;
    static struct gcase gc[MAX_CASES];
    int total_prompt = 0, max_prompt = 0;
    for (int i = 0; i < n; i++) {
        int ci = all ? i : default_cases[i];
        json_t *c = json_array_get(cases, (size_t)ci), *p = json_object_get(c, "prompt");
        gc[i].ci = ci;
        gc[i].n_prompt = (int)json_array_size(p);
        CHECK(gc[i].n_prompt > 0);
        gc[i].prompt = malloc((size_t)gc[i].n_prompt * sizeof(int32_t));
        CHECK(gc[i].prompt != NULL);
        for (int j = 0; j < gc[i].n_prompt; j++)
            gc[i].prompt[j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
        get_ids(c, "expect", gc[i].lc, gc[i].lc_margin, "margin");
        get_ids(c, "hf_expect", gc[i].hf, gc[i].hf_margin, "hf_margin");
        gc[i].lc_same = 0;
        gc[i].lc_worst = 0;
        total_prompt += gc[i].n_prompt;
        if (gc[i].n_prompt > max_prompt)
            max_prompt = gc[i].n_prompt;
    }
    json_decref(doc);

    struct model *m;
    char err[256];
    CHECK_EQ_INT(model_load(MODEL_PATH, &m, err, sizeof err), 0);
    int nv = m->hp.n_vocab;
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = max_prompt + n_steps;
    p.n_seq_max = 2 * n;
    p.n_out_max = 2 * n;
    p.n_batch_max = 2 * total_prompt;
    p.exact_matmul = exact;
    struct model_ctx *ctx;
    CHECK_EQ_INT(model_ctx_new(m, &p, &ctx), 0);
    size_t cap = (size_t)p.n_batch_max;
    int32_t *tok = malloc(cap * sizeof(int32_t)), *pos = malloc(cap * sizeof(int32_t)),
            *seq = malloc(cap * sizeof(int32_t));
    uint8_t *out = calloc(cap, 1);
    CHECK(tok && pos && seq && out);
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < gc[i].n_prompt; j++, k++) {
                tok[k] = gc[i].prompt[j];
                pos[k] = j;
                seq[k] = pass * n + i;
                out[k] = j == gc[i].n_prompt - 1;
            }
    struct model_batch b = {k, tok, pos, seq, out};
    for (int step = 0; step < n_steps; step++) {
        const float *logits;
        int n_out;
        CHECK_EQ_INT(model_forward(ctx, &b, &logits, &n_out), 0);
        CHECK_EQ_INT(n_out, 2 * n);
        for (int i = 0; i < n; i++) {
            /* slot i: free-running, compared with transformers afterwards */
            const float *row = logits + (size_t)i * (size_t)nv;
            gc[i].got[step] = kn_argmax_f32(row, nv);
            int32_t ref = exact ? gc[i].hf[step] : gc[i].lc[step];
            gc[i].own_gap[step] = (double)row[gc[i].got[step]] - (double)row[ref];
            /* slot n+i: llama.cpp's token was fed; is its next choice ours? */
            row = logits + (size_t)(n + i) * (size_t)nv;
            int best = kn_argmax_f32(row, nv);
            if (best == gc[i].lc[step]) {
                gc[i].lc_same++;
            } else {
                double gap = (double)row[best] - (double)row[gc[i].lc[step]];
                if (gap > gc[i].lc_worst)
                    gc[i].lc_worst = gap;
            }
        }
        for (int i = 0; i < 2 * n; i++) {
            int c = i % n;
            tok[i] = i < n ? gc[c].got[step] : gc[c].lc[step];
            pos[i] = gc[c].n_prompt + step;
            seq[i] = i;
            out[i] = 1;
        }
        b.n_tokens = 2 * n;
    }
    int same = 0, lc_steps = 0;
    double lc_worst = 0;
    for (int i = 0; i < n; i++) {
        const int32_t *want = exact ? gc[i].hf : gc[i].lc;
        const double *margin = exact ? gc[i].hf_margin : gc[i].lc_margin;
        double tie = exact ? HF_TIE_MARGIN : LLAMACPP_TIE_MARGIN;
        const char *who = exact ? "transformers" : "llama.cpp";
        int j = 0;
        while (j < n_steps && gc[i].got[j] == want[j])
            j++;
        if (j == n_steps)
            same++;
        /* exact path: transformers' own tie; fast path: either side's near tie */
        else if (!(margin[j] < tie || (!exact && gc[i].own_gap[j] < tie)))
            th_fail(__FILE__, __LINE__, who, "case %d: step %d: got %d, expected %d "
                    "(%s margin %.5f, our gap %.5f)", gc[i].ci, j, gc[i].got[j], want[j], who,
                    margin[j], gc[i].own_gap[j]);
        else
            printf("# case %d: near-tie with %s at step %d (its margin %.5f, our gap %.5f)\n",
                   gc[i].ci, who, j, margin[j], gc[i].own_gap[j]);
        lc_steps += gc[i].lc_same;
        if (gc[i].lc_worst > lc_worst)
            lc_worst = gc[i].lc_worst;
        if (!(gc[i].lc_worst < (exact ? LLAMACPP_NOISE : LLAMACPP_NOISE_FAST)))
            th_fail(__FILE__, __LINE__, "llama.cpp", "case %d: llama.cpp chose a token %.3f below "
                    "our best logit", gc[i].ci, gc[i].lc_worst);
    }
    printf("# %s path: free-running, %d/%d cases token-identical to %s for %d tokens\n",
           exact ? "exact" : "fast", same, n, exact ? "transformers" : "llama.cpp", n_steps);
    printf("# llama.cpp (teacher-forced): %d/%d steps identical, largest gap where not %.3f\n",
           lc_steps, n * n_steps, lc_worst);
    for (int i = 0; i < n; i++)
        free(gc[i].prompt);
    free(tok);
    free(pos);
    free(seq);
    free(out);
    model_ctx_free(ctx);
    model_free(m);
}

TEST(model_smollm2_exact_greedy_matches_hf_and_llamacpp)
{
    run_e2e(1);
}

TEST(model_smollm2_fast_greedy_matches_llamacpp)
{
    run_e2e(0);
}
