/*
 * test_sample.c - worker/sample against a numpy reference and statistics.
 *
 * tests/fixtures/sample/filters.json comes from tests/oracle/sample_fixtures.py
 * (numpy; definitions in its docstring): for random logits rows and
 * parameter sets, the surviving token set with renormalised probabilities,
 * and raw logprobs with top alternatives. Plus: chi-square goodness of fit of
 * 20k seeded draws, determinism and batch invariance, greedy tie-breaks,
 * non-finite logits.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "worker/engine/sample.h"

static json_t *load_fix(void)
{
    json_error_t e;
    json_t *j = json_load_file("tests/fixtures/sample/filters.json", 0, &e);
    if (!j)
        th_fail(__FILE__, __LINE__, "load", "cannot load fixture: %s", e.text);
    return j;
}

static float fnum(json_t *v)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "nan") == 0)
            return NAN;
        return strcmp(s, "inf") == 0 ? INFINITY : -INFINITY;
    }
    return (float)json_number_value(v);
}

static double pget(json_t *prm, const char *k, double def)
{
    json_t *v = json_object_get(prm, k);
    return v ? json_number_value(v) : def;
}

struct fcase {
    float *logits;
    size_t n;
    int32_t *gen, *prompt;
    size_t n_gen, n_prompt;
    struct smp_params p;
    struct smp_bias bias[8];
};

static int32_t *ids_of(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static void case_load(json_t *c, struct fcase *f)
{
    memset(f, 0, sizeof *f);
    json_t *lg = json_object_get(c, "logits"), *prm = json_object_get(c, "params");
    f->n = json_array_size(lg);
    f->logits = malloc(f->n * sizeof *f->logits);
    for (size_t i = 0; i < f->n; i++)
        f->logits[i] = fnum(json_array_get(lg, i));
    f->gen = ids_of(json_object_get(c, "gen"), &f->n_gen);
    f->prompt = ids_of(json_object_get(c, "prompt"), &f->n_prompt);
    smp_params_init(&f->p);
    f->p.temperature = pget(prm, "temperature", 1.0);
    f->p.top_k = (int64_t)pget(prm, "top_k", 0);
    f->p.top_p = pget(prm, "top_p", 1.0);
    f->p.min_p = pget(prm, "min_p", 0.0);
    f->p.frequency_penalty = pget(prm, "frequency_penalty", 0.0);
    f->p.presence_penalty = pget(prm, "presence_penalty", 0.0);
    f->p.repetition_penalty = pget(prm, "repetition_penalty", 1.0);
    json_t *lb = json_object_get(prm, "logit_bias");
    for (size_t i = 0; i < json_array_size(lb) && i < 8; i++) {
        f->bias[i].id = (int32_t)json_integer_value(json_array_get(json_array_get(lb, i), 0));
        f->bias[i].bias = (float)json_number_value(json_array_get(json_array_get(lb, i), 1));
        f->p.n_bias = i + 1;
    }
    f->p.bias = f->bias;
}

static void case_free(struct fcase *f)
{
    free(f->logits);
    free(f->gen);
    free(f->prompt);
}

TEST(sample_filters_match_numpy)
{
    json_t *fix = load_fix(), *cases = json_object_get(fix, "cases");
    CHECK(json_array_size(cases) >= 40);
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        struct fcase f;
        case_load(c, &f);
        struct smp_scratch s;
        CHECK_EQ_INT(smp_scratch_init(&s, f.n), 0);
        int32_t *ids = malloc(f.n * sizeof *ids);
        double *prob = malloc(f.n * sizeof *prob);
        size_t nk = 0;
        CHECK_EQ_INT(smp_filter(&f.p, f.logits, f.n, f.gen, f.n_gen, f.prompt, f.n_prompt, &s, ids,
                                prob, &nk), 0);
        json_t *eids = json_object_get(c, "ids"), *eprob = json_object_get(c, "probs");
        if (nk != json_array_size(eids))
            th_fail(__FILE__, __LINE__, "survivors", "case %zu: %zu survivors vs numpy %zu", ci,
                    nk, json_array_size(eids));
        for (size_t i = 0; i < nk; i++) {
            CHECK_EQ_INT(ids[i], json_integer_value(json_array_get(eids, i)));
            CHECK_NEAR(prob[i], json_number_value(json_array_get(eprob, i)), 1e-9);
        }
        /* the scratch counters are clean after a call: a second call agrees */
        size_t nk2 = 0;
        CHECK_EQ_INT(smp_filter(&f.p, f.logits, f.n, f.gen, f.n_gen, f.prompt, f.n_prompt, &s, ids,
                                prob, &nk2), 0);
        CHECK_EQ_INT(nk2, nk);
        for (size_t i = 0; i < f.n; i++)
            CHECK(s.count[i] == 0 && s.mark[i] == 0);
        free(ids);
        free(prob);
        smp_scratch_release(&s);
        case_free(&f);
    }
    json_decref(fix);
}

TEST(sample_logprobs_match_numpy)
{
    json_t *fix = load_fix(), *cases = json_object_get(fix, "cases");
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *c = json_array_get(cases, ci);
        struct fcase f;
        case_load(c, &f);
        struct smp_result r;
        int32_t tok = (int32_t)json_integer_value(json_object_get(c, "token"));
        int n_top = (int)json_integer_value(json_object_get(c, "n_top"));
        CHECK_EQ_INT(smp_logprobs(f.logits, f.n, tok, n_top, &r), 0);
        CHECK_NEAR(r.logprob, json_number_value(json_object_get(c, "logprob")), 1e-9);
        json_t *tid = json_object_get(c, "top_ids"), *tlp = json_object_get(c, "top_logprobs");
        CHECK_EQ_INT(r.n_top, json_array_size(tid));
        for (int j = 0; j < r.n_top; j++) {
            CHECK_EQ_INT(r.top_id[j], json_integer_value(json_array_get(tid, (size_t)j)));
            CHECK_NEAR(r.top_logprob[j], json_number_value(json_array_get(tlp, (size_t)j)), 1e-9);
        }
        case_free(&f);
    }
    json_decref(fix);
}

/* Chi-square statistic of counts vs expected probabilities. */
static double chi2(const size_t *cnt, const double *p, size_t k, size_t n)
{
    double x = 0;
    for (size_t i = 0; i < k; i++) {
        double e = p[i] * (double)n;
        x += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
    }
    return x;
}

TEST(sample_empirical_distribution_chi_square)
{
    /* 6 tokens; expected = softmax(l / T) computed here in plain C. Chi-square
     * critical value for 5 degrees of freedom at p = 1e-6 is about 35.9; the
     * seed is fixed, so the outcome is deterministic (no flakes). */
    const float l[6] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
    double T = 0.8, e[6], z = 0;
    for (int i = 0; i < 6; i++)
        z += (e[i] = exp(l[i] / T));
    for (int i = 0; i < 6; i++)
        e[i] /= z;
    struct smp_params p;
    smp_params_init(&p);
    p.temperature = T;
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, 6), 0);
    struct smp_rng rng;
    smp_rng_init(&rng, 12345, 0);
    size_t cnt[6] = {0}, N = 20000;
    for (size_t i = 0; i < N; i++) {
        struct smp_result r;
        CHECK_EQ_INT(smp_sample(&p, l, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
        CHECK(r.token >= 0 && r.token < 6);
        cnt[r.token]++;
    }
    double x = chi2(cnt, e, 6, N);
    if (!(x < 35.9))
        th_fail(__FILE__, __LINE__, "chi2 < 35.9", "chi2 = %.3f", x);

    /* top_k = 3: only tokens 3, 0, 1, renormalised (2 dof: critical ~27.6) */
    p.top_k = 3;
    size_t c3[6] = {0};
    for (size_t i = 0; i < N; i++) {
        struct smp_result r;
        CHECK_EQ_INT(smp_sample(&p, l, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
        c3[r.token]++;
    }
    CHECK(c3[2] == 0 && c3[4] == 0 && c3[5] == 0);
    double z3 = e[0] + e[1] + e[3];
    double e3[3] = {e[0] / z3, e[1] / z3, e[3] / z3};
    size_t k3[3] = {c3[0], c3[1], c3[3]};
    x = chi2(k3, e3, 3, N);
    if (!(x < 27.6))
        th_fail(__FILE__, __LINE__, "chi2 < 27.6", "chi2 top_k = %.3f", x);
    smp_scratch_release(&s);
}

/* A deterministic pseudo-model: logits depend on (step, seq tag). */
static void fake_row(float *row, size_t n, uint32_t tag, size_t step)
{
    uint64_t x = tag * 0x9e3779b97f4a7c15ull + step * 0xbf58476d1ce4e5b9ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 29;
        row[i] = (float)((double)(x >> 40) / (double)(1ull << 24) * 6.0 - 3.0);
    }
}

static void run_alone(const struct smp_params *p, uint64_t seed, uint64_t choice, uint32_t tag,
                      int32_t *out, size_t steps, size_t n)
{
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, n), 0);
    struct smp_rng rng;
    smp_rng_init(&rng, seed, choice);
    float *row = malloc(n * sizeof *row);
    for (size_t t = 0; t < steps; t++) {
        struct smp_result r;
        fake_row(row, n, tag, t);
        CHECK_EQ_INT(smp_sample(p, row, n, out, t, NULL, 0, &rng, &s, &r), 0);
        out[t] = r.token;
    }
    free(row);
    smp_scratch_release(&s);
}

TEST(sample_determinism_and_batch_invariance)
{
    enum { N = 300, STEPS = 64 };
    struct smp_params a, b;
    smp_params_init(&a);
    a.temperature = 1.0;
    a.top_p = 0.9;
    a.frequency_penalty = 0.5;
    smp_params_init(&b);
    b.temperature = 0.7;
    b.top_k = 40;
    b.presence_penalty = 0.3;
    int32_t a1[STEPS], a2[STEPS], a3[STEPS], b1[STEPS];
    run_alone(&a, 42, 0, 1, a1, STEPS, N);
    run_alone(&a, 42, 0, 1, a2, STEPS, N);
    CHECK(memcmp(a1, a2, sizeof a1) == 0);            /* same seed, same tokens */
    run_alone(&a, 42, 1, 1, a3, STEPS, N);
    CHECK(memcmp(a1, a3, sizeof a1) != 0);            /* choice 1: another stream */
    run_alone(&a, 43, 0, 1, a3, STEPS, N);
    CHECK(memcmp(a1, a3, sizeof a1) != 0);            /* another seed */
    run_alone(&b, 7, 0, 2, b1, STEPS, N);

    /* Interleave the two requests step by step with ONE shared scratch (as a
     * batched sampler thread would): each gets exactly its solo tokens. */
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, N), 0);
    struct smp_rng ra, rb;
    smp_rng_init(&ra, 42, 0);
    smp_rng_init(&rb, 7, 0);
    int32_t ia[STEPS], ib[STEPS];
    float row[N];
    for (size_t t = 0; t < STEPS; t++) {
        struct smp_result r;
        fake_row(row, N, 2, t);
        CHECK_EQ_INT(smp_sample(&b, row, N, ib, t, NULL, 0, &rb, &s, &r), 0);
        ib[t] = r.token;
        fake_row(row, N, 1, t);
        CHECK_EQ_INT(smp_sample(&a, row, N, ia, t, NULL, 0, &ra, &s, &r), 0);
        ia[t] = r.token;
    }
    CHECK(memcmp(ia, a1, sizeof ia) == 0);
    CHECK(memcmp(ib, b1, sizeof ib) == 0);
    smp_scratch_release(&s);
}

TEST(sample_rng_reference_values)
{
    /* xoshiro256** with a known state gives the published first outputs
     * (state 1,2,3,4 -> 11520, 0, 1509978240, 1215971899390074240). */
    struct smp_rng r = {{1, 2, 3, 4}};
    CHECK(smp_rng_next(&r) == 11520ull);
    CHECK(smp_rng_next(&r) == 0ull);
    CHECK(smp_rng_next(&r) == 1509978240ull);
    CHECK(smp_rng_next(&r) == 1215971899390074240ull);
    struct smp_rng a, b;
    smp_rng_init(&a, 0, 0);
    smp_rng_init(&b, 0, 0);
    for (int i = 0; i < 100; i++) {
        double u = smp_rng_uniform(&a);
        CHECK(u >= 0 && u < 1);
        CHECK(u == smp_rng_uniform(&b));
    }
}

TEST(sample_greedy_ties_and_nonfinite)
{
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, 6), 0);
    struct smp_params p;
    smp_params_init(&p);
    p.temperature = 0;
    struct smp_rng rng;
    smp_rng_init(&rng, 1, 0);
    struct smp_rng before = rng;
    struct smp_result r;
    float tie[6] = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 2.0f};
    CHECK_EQ_INT(smp_sample(&p, tie, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 1);                        /* lowest id among ties */
    CHECK(memcmp(&before, &rng, sizeof rng) == 0);   /* greedy draws nothing */

    /* NaN never sampled; +inf wins greedily and takes all the mass */
    float nf[6] = {NAN, 1.0f, INFINITY, NAN, -INFINITY, 3.0f};
    CHECK_EQ_INT(smp_sample(&p, nf, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 2);
    p.temperature = 1.0;
    p.n_top_logprobs = 3;
    for (int i = 0; i < 50; i++) {
        CHECK_EQ_INT(smp_sample(&p, nf, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
        CHECK_EQ_INT(r.token, 2);
        CHECK_NEAR(r.logprob, 0.0, 1e-12);
        /* 1 - FLT_MAX and 3 - FLT_MAX round to the same double: a tie, by id */
        CHECK(r.n_top == 3 && r.top_id[0] == 2 && r.top_id[1] == 1 && r.top_id[2] == 5);
        CHECK(r.top_logprob[1] == SMP_LOGPROB_FLOOR);  /* -FLT_MAX-ish -> floor */
    }
    /* two +inf: uniform between them */
    float two[6] = {INFINITY, 0, 0, INFINITY, NAN, 0};
    size_t c0 = 0, c3 = 0;
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ_INT(smp_sample(&p, two, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
        c0 += r.token == 0;
        c3 += r.token == 3;
        CHECK_NEAR(r.logprob, -log(2.0), 1e-12);
    }
    CHECK_EQ_INT(c0 + c3, 2000);
    CHECK(c0 > 850 && c3 > 850);
    /* only NaN / -inf: an error, not UB */
    float bad[6] = {NAN, NAN, -INFINITY, NAN, -INFINITY, NAN};
    CHECK_EQ_INT(smp_sample(&p, bad, 6, NULL, 0, NULL, 0, &rng, &s, &r), ERR_CORRUPT);
    p.temperature = 0;
    CHECK_EQ_INT(smp_sample(&p, bad, 6, NULL, 0, NULL, 0, &rng, &s, &r), ERR_CORRUPT);
    /* a logit_bias of -100 on every finite token still samples (finite) */
    p.temperature = 1;
    struct smp_bias bias[2] = {{1, -100}, {5, -100}};
    p.bias = bias;
    p.n_bias = 2;
    float fin[6] = {-INFINITY, 1, -INFINITY, -INFINITY, -INFINITY, 2};
    CHECK_EQ_INT(smp_sample(&p, fin, 6, NULL, 0, NULL, 0, &rng, &s, &r), 0);
    CHECK(r.token == 1 || r.token == 5);
    /* out-of-range ids are refused */
    bias[1].id = 6;
    CHECK_EQ_INT(smp_sample(&p, fin, 6, NULL, 0, NULL, 0, &rng, &s, &r), ERR_INVAL);
    p.n_bias = 0;
    int32_t hist[2] = {1, -1};
    CHECK_EQ_INT(smp_sample(&p, fin, 6, hist, 2, NULL, 0, &rng, &s, &r), ERR_INVAL);
    CHECK_EQ_INT(smp_sample(&p, fin, 5, NULL, 0, NULL, 0, &rng, &s, &r), ERR_INVAL);
    smp_scratch_release(&s);
}

TEST(sample_penalties_greedy_effect)
{
    /* token 0 leads by 1.0; three earlier uses with frequency 0.5 cost 1.5 */
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, 4), 0);
    struct smp_params p;
    smp_params_init(&p);
    p.temperature = 0;
    p.frequency_penalty = 0.5;
    struct smp_rng rng;
    smp_rng_init(&rng, 1, 0);
    struct smp_result r;
    float l[4] = {3.0f, 2.0f, 0.0f, -1.0f};
    int32_t g[3] = {0, 0, 0};
    CHECK_EQ_INT(smp_sample(&p, l, 4, g, 3, NULL, 0, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 1);
    CHECK_EQ_INT(smp_sample(&p, l, 4, g, 1, NULL, 0, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 0);  /* 3 - 0.5 > 2 */
    /* presence: once is enough */
    p.frequency_penalty = 0;
    p.presence_penalty = 1.5;
    CHECK_EQ_INT(smp_sample(&p, l, 4, g, 1, NULL, 0, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 1);
    /* repetition penalty counts the prompt too: 3/2 < 2 */
    p.presence_penalty = 0;
    p.repetition_penalty = 2.0;
    CHECK_EQ_INT(smp_sample(&p, l, 4, NULL, 0, g, 1, &rng, &s, &r), 0);
    CHECK_EQ_INT(r.token, 1);
    smp_scratch_release(&s);
}
