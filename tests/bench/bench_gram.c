/* bench_gram - cost of a structured-output token mask per token per
 * sequence on a real vocabulary (SmolLM2's 49,152 tokens).
 *
 * usage: bench_gram [MODEL.gguf] [tests/fixtures/gram/corpus.json]
 *
 * For every schema of the corpus and each of its valid instances (as the
 * model's tokenizer splits them), walks the instance token by token and at
 * each position computes the mask three ways: the trie walk alone
 * (gram_matcher_mask_uncached: a cold cache, the worst case), and through
 * the per-grammar mask cache on a first pass and on a second pass over the
 * same instances (what the 2nd..nth sequence of a batch sharing a schema
 * pays). Prints per-schema and overall mean / p50 / p99 / max in
 * microseconds per mask, and the trie size. Single thread. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/gram/gram.h"
#include "text/gguf.h"
#include "text/tok.h"
#include "text/tok_gguf.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stats {
    double *v;
    size_t n, cap;
};

static void push(struct stats *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static void report(const char *what, struct stats *s)
{
    if (!s->n)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    printf("  %-26s n=%-5zu mean %8.1f us  p50 %8.1f  p99 %8.1f  max %8.1f\n", what, s->n, sum / (double)s->n,
           s->v[s->n / 2], s->v[(size_t)((double)s->n * 0.99)], s->v[s->n - 1]);
}

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *corpus = argc > 2 ? argv[2] : "tests/fixtures/gram/corpus.json";
    char err[256];
    struct gguf *gg = NULL;
    struct tok *t = NULL;
    if (gguf_open(model, &gg, err, sizeof err) != 0 || tok_gguf_new(gg, &t, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gram: %s: %s\n", model, err);
        return 1;
    }
    const struct gram_vocab *gv = NULL;
    uint64_t t0 = clock_mono_ns();
    if (tok_gram_vocab(t, &gv, NULL, NULL) != 0) {
        fprintf(stderr, "bench_gram: vocabulary trie failed\n");
        return 1;
    }
    printf("vocabulary: %zu tokens, trie built in %.1f ms\n", gram_vocab_n(gv),
           (double)(clock_mono_ns() - t0) * 1e-6);
    json_error_t je;
    json_t *root = json_load_file(corpus, 0, &je);
    if (!root) {
        fprintf(stderr, "bench_gram: %s: %s\n", corpus, je.text);
        return 1;
    }
    uint32_t *mask = malloc(gram_mask_words(gv) * sizeof *mask);
    int32_t ids[4096];
    struct stats all_cold = {0}, all_first = {0}, all_second = {0};
    json_t *schemas = json_object_get(root, "schemas");
    for (size_t i = 0; i < json_array_size(schemas); i++) {
        json_t *s = json_array_get(schemas, i), *st = json_object_get(s, "schema");
        struct gram *g = NULL;
        struct problem ge;
        if (gram_compile_json_schema(json_string_value(st), json_string_length(st), &g, &ge) != 0) {
            fprintf(stderr, "bench_gram: %s\n", ge.message);
            return 1;
        }
        struct stats cold = {0}, first = {0}, second = {0};
        for (int pass = 0; pass < 3; pass++) {
            json_t *cases = json_object_get(s, "cases");
            for (size_t k = 0; k < json_array_size(cases); k++) {
                json_t *c = json_array_get(cases, k);
                if (!json_is_true(json_object_get(c, "valid")) || json_is_true(json_object_get(c, "outside")))
                    continue;
                json_t *tx = json_object_get(c, "text");
                size_t n = 0;
                if (tok_encode(t, json_string_value(tx), json_string_length(tx), 0, ids, 4096, &n) != 0)
                    continue;
                struct gram_matcher *m = NULL;
                gram_matcher_new(g, &m);
                for (size_t p = 0; p <= n; p++) {
                    uint64_t a = clock_mono_ns();
                    if (pass == 0)
                        gram_matcher_mask_uncached(m, gv, mask, NULL);
                    else
                        gram_matcher_mask(m, gv, mask, NULL);
                    double us = (double)(clock_mono_ns() - a) * 1e-3;
                    push(pass == 0 ? &cold : pass == 1 ? &first : &second, us);
                    push(pass == 0 ? &all_cold : pass == 1 ? &all_first : &all_second, us);
                    if (p == n)
                        break;
                    struct buf piece;
                    buf_init(&piece, 1 << 16);
                    tok_piece(t, ids[p], 0, &piece);
                    if (gram_matcher_accept(m, piece.data, piece.len) != 0) {
                        buf_release(&piece);
                        break;   /* tokenization outside the grammar's form */
                    }
                    buf_release(&piece);
                }
                gram_matcher_free(m);
            }
        }
        printf("%s (%zu rules, %zu elements)\n", json_string_value(json_object_get(s, "name")),
               gram_n_rules(g), gram_n_elems(g));
        report("trie walk (cold)", &cold);
        report("cached, first pass", &first);
        report("cached, second pass", &second);
        free(cold.v);
        free(first.v);
        free(second.v);
        gram_unref(g);
    }
    printf("ALL SCHEMAS\n");
    report("trie walk (cold)", &all_cold);
    report("cached, first pass", &all_first);
    report("cached, second pass", &all_second);
    json_decref(root);
    free(mask);
    tok_free(t);
    gguf_free(gg);
    return 0;
}
