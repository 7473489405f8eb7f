/*
 * End to end against llama.cpp on the default model (SmolLM2-135M Q4_1):
 * greedy continuations of 20 prompts x 64 tokens, recorded by
 * tests/oracle/make_smollm2_greedy.py with llama-cpp-python, must be
 * token-identical. All prompts run together as one batch (20 sequence
 * slots, prefill of every prompt in one step, then 64 decode steps of 20
 * tokens), so this also exercises the batched path on a real model.
 *
 * A divergence is accepted only where llama.cpp's own top-2 margin was a
 * near tie (< SMOLLM2_TIE_MARGIN): llama.cpp multiplies Q4_1 weights with
 * activations quantized to Q8_1, our reference matmul uses float
 * activations, and that difference can flip a near tie (see
 * tests/fixtures/model/NOTES.md). The case is then compared only up to that
 * step.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/err.h"
#include "kernels/cpu/ops.h"
#include "tests/th.h"
#include "worker/model.h"

#define MODEL_PATH ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GREEDY_JSON "tests/fixtures/model/smollm2_greedy.json"
#define SMOLLM2_TIE_MARGIN 0.05
#define MAX_CASES 32
#define N_GEN 64

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
    int n_prompt;
    int32_t *prompt;
    int32_t expect[N_GEN];
    double margin[N_GEN];
    int32_t got[N_GEN];
};

/* Run cases [first, first+n) of the fixture. */
static void run_greedy(int first, int n_want)
{
    need_model();
    json_error_t jerr;
    json_t *doc = json_load_file(GREEDY_JSON, 0, &jerr);
    CHECK(doc != NULL);
    json_t *cases = json_object_get(doc, "cases");
    CHECK(json_is_array(cases));
    int n = (int)json_array_size(cases) - first;
    if (n > n_want)
        n = n_want;
    CHECK(n > 0 && n <= MAX_CASES);
    static struct gcase gc[MAX_CASES];
    int total_prompt = 0, max_prompt = 0;
    for (int i = 0; i < n; i++) {
        json_t *c = json_array_get(cases, (size_t)(first + i));
        json_t *p = json_object_get(c, "prompt"), *e = json_object_get(c, "expect"),
               *mg = json_object_get(c, "margin");
        CHECK(json_array_size(e) == N_GEN && json_array_size(mg) == N_GEN);
        gc[i].n_prompt = (int)json_array_size(p);
        gc[i].prompt = malloc((size_t)gc[i].n_prompt * sizeof(int32_t));
        CHECK(gc[i].prompt != NULL);
        for (int j = 0; j < gc[i].n_prompt; j++)
            gc[i].prompt[j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
        for (int j = 0; j < N_GEN; j++) {
            gc[i].expect[j] = (int32_t)json_integer_value(json_array_get(e, (size_t)j));
            gc[i].margin[j] = json_number_value(json_array_get(mg, (size_t)j));
        }
        total_prompt += gc[i].n_prompt;
        if (gc[i].n_prompt > max_prompt)
            max_prompt = gc[i].n_prompt;
    }
    json_decref(doc);

    struct model *m;
    char err[256];
    CHECK_EQ_INT(model_load(MODEL_PATH, &m, err, sizeof err), 0);
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = max_prompt + N_GEN;
    p.n_seq_max = n;
    p.n_out_max = n;
    p.n_batch_max = total_prompt;
    struct model_ctx *ctx;
    CHECK_EQ_INT(model_ctx_new(m, &p, &ctx), 0);
    int32_t *tok = malloc((size_t)total_prompt * sizeof(int32_t));
    int32_t *pos = malloc((size_t)total_prompt * sizeof(int32_t));
    int32_t *seq = malloc((size_t)total_prompt * sizeof(int32_t));
    uint8_t *out = calloc((size_t)total_prompt, 1);
    CHECK(tok && pos && seq && out);
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < gc[i].n_prompt; j++, k++) {
            tok[k] = gc[i].prompt[j];
            pos[k] = j;
            seq[k] = i;
            out[k] = j == gc[i].n_prompt - 1;
        }
    struct model_batch b = {total_prompt, tok, pos, seq, out};
    const float *logits;
    int n_out;
    for (int step = 0; step < N_GEN; step++) {
        CHECK_EQ_INT(model_forward(ctx, &b, &logits, &n_out), 0);
        CHECK_EQ_INT(n_out, n);
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * (size_t)m->hp.n_vocab;
            int best = kn_argmax_f32(row, m->hp.n_vocab);
            gc[i].got[step] = best;
            /* feed llama.cpp's token so one flip does not derail the rest */
            tok[i] = gc[i].expect[step];
            pos[i] = gc[i].n_prompt + step;
            seq[i] = i;
            out[i] = 1;
        }
        b.n_tokens = n;
    }
    int exact = 0, diverged = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < N_GEN && gc[i].got[j] == gc[i].expect[j])
            j++;
        if (j == N_GEN) {
            exact++;
        } else {
            diverged++;
            printf("# case %d: step %d: got %d, llama.cpp %d (llama.cpp margin %.4f)\n", first + i,
                   j, gc[i].got[j], gc[i].expect[j], gc[i].margin[j]);
            if (!(gc[i].margin[j] < SMOLLM2_TIE_MARGIN))
                th_fail(__FILE__, __LINE__, "greedy", "case %d diverges at step %d (margin %.4f)",
                        first + i, j, gc[i].margin[j]);
        }
    }
    printf("# %d/%d cases token-identical for %d tokens, %d diverged at a near tie\n", exact, n,
           N_GEN, diverged);
    for (int i = 0; i < n; i++)
        free(gc[i].prompt);
    free(tok);
    free(pos);
    free(seq);
    free(out);
    model_ctx_free(ctx);
    model_free(m);
}

TEST(model_smollm2_greedy_matches_llamacpp)
{
    run_greedy(0, MAX_CASES);
}
