/* bench_kv_accuracy - what an int8 K/V cache costs in accuracy: the
 * teacher-forced log-probability of every next token of a text, with the
 * cache in binary16 (the default, the reference), float32, int8
 * (--kv-type q8) and binary16 keys with int8 values (q8v), same model,
 * same matmuls.
 *
 * usage: bench_kv_accuracy MODEL.gguf TEXT_FILE [WINDOW] [MAX_WINDOWS] [THREADS] [exact]
 *   WINDOW: tokens per sequence (default 1024; each window is a fresh
 *   sequence fed in chunks of 256 tokens, every position's logits read),
 *   MAX_WINDOWS: how many consecutive windows of the text (default 8);
 *   exact: the reference float matmuls instead of the 8-bit-activation
 *   kernels, which isolates the cache's own error (with the default
 *   matmuls a tiny change of an attention output can move an activation
 *   across an 8-bit rounding step, so even binary16 vs float32 K/V differ
 *   visibly).
 *
 * Printed per cache type: mean negative log-likelihood (and perplexity),
 * and against the binary16 cache: mean, p99 and max |delta log p| of the
 * reference tokens, and the share of positions whose argmax differs. The
 * float32 row is the scale of "no loss": binary16 itself against exact
 * K/V. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "text/tok.h"
#include "worker/engine/engine.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"

enum { CHUNK = 256, N_TYPES = 4 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* lp[t], am[t] for positions t < n - 1 of ids: log p(ids[t+1]) and argmax */
static int run_window(struct model_ctx *c, const int32_t *ids, int n, int n_vocab, double *lp,
                      int32_t *am)
{
    kv_seq_clear(model_ctx_kv(c), 0);
    int32_t pos[CHUNK], seq[CHUNK] = {0};
    uint8_t mark[CHUNK];
    for (int at = 0; at < n; at += CHUNK) {
        int m = n - at < CHUNK ? n - at : CHUNK;
        for (int i = 0; i < m; i++) {
            pos[i] = at + i;
            mark[i] = 1;
        }
        struct model_batch b = {m, ids + at, pos, seq, mark};
        const float *lg;
        int n_out, rc = model_forward(c, &b, &lg, &n_out);
        if (rc)
            return rc;
        for (int i = 0; i < m && at + i + 1 < n; i++) {
            const float *row = lg + (size_t)i * (size_t)n_vocab;
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < n_vocab; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < n_vocab; v++)
                s += exp((double)row[v] - mx);
            lp[at + i] = (double)row[ids[at + i + 1]] - mx - log(s);
            am[at + i] = kn_argmax_f32(row, n_vocab);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_kv_accuracy MODEL.gguf TEXT_FILE [WINDOW] [MAX_WINDOWS] [THREADS]\n");
        return 2;
    }
    int window = argc > 3 ? atoi(argv[3]) : 1024, max_windows = argc > 4 ? atoi(argv[4]) : 8;
    int threads = argc > 5 ? atoi(argv[5]) : 0, exact = argc > 6 && strcmp(argv[6], "exact") == 0;
    if (window < 2 || max_windows < 1)
        return 2;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "cannot open '%s'\n", argv[2]);
        return 1;
    }
    static char text[TOK_MAX_INPUT_BYTES];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    char err[512];
    struct engine_opts eo = {.model_path = argv[1], .threads = threads, .exact_matmul = exact};
    struct engine *e;
    if (engine_open(&eo, &e, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t cap = TOK_ENCODE_BOUND(len), n_ids = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids || tok_encode(e->tok, text, len, TOK_ADD_SPECIAL, ids, cap, &n_ids)) {
        fprintf(stderr, "cannot tokenize\n");
        return 1;
    }
    int n_win = (int)(n_ids / (size_t)window);
    if (n_win > max_windows)
        n_win = max_windows;
    if (n_win < 1) {
        fprintf(stderr, "text too short: %zu tokens for a window of %d\n", n_ids, window);
        return 1;
    }
    int n_vocab = e->model->hp.n_vocab;
    size_t per = (size_t)n_win * (size_t)(window - 1);
    double *lp[N_TYPES];
    int32_t *am[N_TYPES];
    const int types[N_TYPES] = {MODEL_KV_F16, MODEL_KV_F32, MODEL_KV_Q8, MODEL_KV_Q8V};
    const char *names[N_TYPES] = {"f16", "f32", "q8", "q8v"};
    printf("%s: %zu tokens of %s, %d windows of %d tokens (%zu predictions), %s matmuls, %d "
           "threads\n",
           argv[1], n_ids, argv[2], n_win, window, per, exact ? "exact float" : "default",
           kn_pool_threads(e->pool));
    for (int t = 0; t < N_TYPES; t++) {
        lp[t] = malloc(per * sizeof(double));
        am[t] = malloc(per * sizeof(int32_t));
        struct model_ctx_params cp;
        engine_ctx_params(e, &cp);
        cp.n_ctx = window;
        cp.n_batch_max = CHUNK;
        cp.n_out_max = CHUNK;
        cp.kv_type = types[t];
        struct model_ctx *c;
        int rc = model_ctx_new(e->model, &cp, &c);
        if (rc) {
            fprintf(stderr, "%s: cannot create the context: %s\n", names[t], err_msg(rc));
            return 1;
        }
        for (int w = 0; w < n_win; w++)
            if ((rc = run_window(c, ids + (size_t)w * (size_t)window, window, n_vocab,
                                 lp[t] + (size_t)w * (size_t)(window - 1),
                                 am[t] + (size_t)w * (size_t)(window - 1)))) {
                fprintf(stderr, "%s: forward failed: %s\n", names[t], err_msg(rc));
                return 1;
            }
        model_ctx_free(c);
    }
    double *d = malloc(per * sizeof *d);
    printf("%-4s %10s %8s %12s %12s %12s %10s\n", "kv", "mean NLL", "ppl", "mean|dlogp|",
           "p99|dlogp|", "max|dlogp|", "argmax!=");
    for (int t = 0; t < N_TYPES; t++) {
        double nll = 0, sum = 0, mx = 0;
        size_t diff = 0;
        for (size_t i = 0; i < per; i++) {
            nll -= lp[t][i];
            d[i] = fabs(lp[t][i] - lp[0][i]);
            sum += d[i];
            mx = d[i] > mx ? d[i] : mx;
            diff += am[t][i] != am[0][i];
        }
        qsort(d, per, sizeof *d, cmp_double);
        printf("%-4s %10.5f %8.3f %12.6f %12.6f %12.6f %9.2f%%\n", names[t], nll / (double)per,
               exp(nll / (double)per), sum / (double)per, d[(size_t)((double)per * 0.99)], mx,
               100.0 * (double)diff / (double)per);
    }
    for (int t = 0; t < N_TYPES; t++) {
        free(lp[t]);
        free(am[t]);
    }
    free(d);
    free(ids);
    engine_close(e);
    return 0;
}
