/*
 * Unit tests of the scheduler's prompt-lookup speculation (worker/engine/sched.c,
 * sched.h "Speculation") on the tiny random-weight fixtures
 * (tests/fixtures/model), through the token-level API (sched_add).
 *
 * Every request's result is reduced to a fingerprint: per choice the finish
 * reason, the text bytes and, per logprob record, the token id, its logprob
 * and the top-5 alternatives as exact hex floats. Speculation must not move
 * one bit of it:
 * - greedy: identical with and without speculation, on prompts whose
 *   n-grams repeat (drafts mostly confirmed) and random ones (drafts mostly
 *   refused), on pool and ring (sliding-window) caches, the exact matmul,
 *   and step budgets that cut drafts short;
 * - seeded sampling (temperature, top-k/p, min-p, every penalty, a bias,
 *   a stop string): identical per seed, since verification samples each
 *   row with the sequence's own stream exactly as plain decoding would;
 * - structured outputs (a regex grammar, greedy and sampled): identical, and
 *   every output that finished "stop" is in the language;
 * - each of those with the adaptive draft lengths, with 4 drafts whenever
 *   a match exists (sched_opts.spec_k: both outcomes of a verification
 *   happen hundreds of times), and with a 3-token step budget;
 * - and the distribution check the issue asks for: 6000 seeded requests of
 *   three sampled tokens with speculation on (two running at a time), a
 *   chi-square test of the (t1, t2, t3) counts against the exact joint
 *   distribution computed from the model's logits with smp_filter (fixed
 *   seeds: the statistic is a fixed number, 42.6 on 52 degrees of freedom,
 *   compared with the 0.1% point, 89.3). It has teeth: the target at
 *   temperature 7 instead of 8 gives 429, and a verification that keeps a
 *   refused draft one time in four (about 200 of the 6000) gives 106;
 * - batch invariance: a speculating sequence shares its steps with
 *   prefilling and decoding neighbours and gives what it gives alone;
 * - KV rollback: after a verification step's rejected positions are cut
 *   off, the next token's logits equal those of a sequence that never saw
 *   the drafts (pool and rings), and every block returns to the pool.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "common/problem.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "text/tok.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"
#include "worker/engine/sample.h"
#include "worker/engine/sched.h"

#define FIX "tests/fixtures/model/"
#define MAXQ 64
#define FP_BYTES (1u << 16)

struct env {
    struct model *m;
    struct tok *t;
};

static void env_init(struct env *e, const char *file)
{
    char path[256], err[256];
    snprintf(path, sizeof path, FIX "%s", file);
    if (model_load(path, &e->m, err, sizeof err) != 0)
        th_fail(__FILE__, __LINE__, path, "model_load: %s", err);
    CHECK_EQ_INT(model_tokenizer(e->m, &e->t, err, sizeof err), 0);
}

static void env_release(struct env *e)
{
    tok_free(e->t);
    model_free(e->m);
}

/* ---- requests and fingerprints ------------------------------------------------------ */

/* One request: a token prompt and its sampling parameters. */
struct req {
    int32_t ids[200];
    int n;
    int max_tokens;
    int n_choices;
    int sampled;        /* 0 greedy; 1 temperature, top-k/p, min-p; 2 also every penalty,
                         * a bias and a stop string */
    int constrained;    /* 1: the output must match CONSTRAINT (structured outputs) */
    double temperature; /* when sampled */
    uint64_t seed;
};

/* Words of 1-3 letters a-e, each followed by a space or a comma, then a
 * period: a language with short repeating pieces, so drafts fire, whose
 * mask changes from token to token (the verification computes one per row). */
#define CONSTRAINT "([a-e]{1,3}[ ,]){3,30}\\."

static void gp_of(const struct req *q, struct gen_params *gp)
{
    memset(gp, 0, sizeof *gp);
    if (q->constrained) {
        struct problem pe;
        CHECK_EQ_INT(gram_compile_regex(CONSTRAINT, strlen(CONSTRAINT), &gp->grammar, &pe), 0);
    }
    smp_params_init(&gp->smp);
    gp->max_tokens = q->max_tokens;
    gp->n = q->n_choices > 0 ? q->n_choices : 1;
    gp->seed = q->seed;
    gp->seed_given = 1;
    gp->logprobs = 1;
    gp->smp.n_top_logprobs = 5;
    if (q->sampled == 0) {
        gp->smp.temperature = 0;
        return;
    }
    gp->smp.temperature = q->temperature;
    gp->smp.top_k = 40;
    gp->smp.top_p = 0.95;
    gp->smp.min_p = 0.01;
    if (q->sampled < 2)
        return;
    gp->smp.repetition_penalty = 1.15;
    gp->smp.frequency_penalty = 0.4;
    gp->smp.presence_penalty = 0.3;
    gp->bias = malloc(2 * sizeof *gp->bias);
    CHECK(gp->bias != NULL);
    gp->bias[0] = (struct smp_bias){7, 2.5f};
    gp->bias[1] = (struct smp_bias){q->ids[0], -3.0f};
    gp->smp.bias = gp->bias;
    gp->smp.n_bias = 2;
    gp->stop[0] = malloc(3);
    CHECK(gp->stop[0] != NULL);
    memcpy(gp->stop[0], "e,", 3);
    gp->stop_len[0] = 2;
    gp->n_stop = 1;
}

struct fps {
    char *fp[MAXQ];     /* fingerprint of request q<i> */
    int64_t completion[MAXQ];
    int n;
};

static void fps_release(struct fps *f)
{
    for (int i = 0; i < MAXQ; i++)
        free(f->fp[i]);
    memset(f, 0, sizeof *f);
}

static int n_in_language; /* constrained choices that finished "stop", each checked */

static int on_result(void *ctx, const struct sched_result *r)
{
    struct fps *f = ctx;
    for (size_t c = 0; r->gp->grammar && c < r->n_choices; c++) {
        const struct gen_choice *ch = &r->choices[c];
        if (ch->finish != STOP_FINISH_STOP)
            continue;
        if (!gram_match(r->gp->grammar, ch->text, ch->text_len))
            th_fail(__FILE__, __LINE__, "in the language", "'%.*s'", (int)ch->text_len, ch->text);
        n_in_language++;
    }
    int i = (int)strtol(r->id + 1, NULL, 10);
    CHECK(i >= 0 && i < MAXQ && !f->fp[i]);
    char *b = malloc(FP_BYTES);
    CHECK(b != NULL);
    size_t at = 0;
#define FP_PUT(...)                                                                    \
    do {                                                                               \
        int n_ = snprintf(b + at, FP_BYTES - at, __VA_ARGS__);                         \
        CHECK(n_ >= 0 && (size_t)n_ < FP_BYTES - at);                                  \
        at += (size_t)n_;                                                              \
    } while (0)
    for (size_t c = 0; c < r->n_choices; c++) {
        const struct gen_choice *ch = &r->choices[c];
        FP_PUT("#%zu %d %zu:%.*s|", c, (int)ch->finish, ch->text_len, (int)ch->text_len, ch->text);
        for (size_t k = 0; k < ch->n_lp; k++) {
            const struct smp_result *s = &ch->lp[k].r;
            FP_PUT("%d@%zu=%a[", s->token, ch->lp[k].text_offset, s->logprob);
            for (int t = 0; t < s->n_top; t++)
                FP_PUT("%d:%a,", s->top_id[t], s->top_logprob[t]);
            FP_PUT("]");
        }
    }
#undef FP_PUT
    f->fp[i] = b;
    f->completion[i] = r->completion_tokens;
    f->n++;
    return 0;
}

struct cfg {
    int spec;            /* sched_opts.spec */
    int spec_max_seqs;   /* 0 = default */
    int spec_k;          /* sched_opts.spec_k: 0 adaptive, else drafts of this length */
    int max_seqs;
    int max_batch_tokens;
    int exact;
    int no_prefix_cache;
};

static struct sched *sched_make(const struct env *e, const struct cfg *c, struct fps *out)
{
    struct sched_opts o;
    sched_opts_init(&o);
    o.spec = c->spec;
    if (c->spec_max_seqs)
        o.spec_max_seqs = c->spec_max_seqs;
    o.spec_k = c->spec_k;
    o.max_seqs = c->max_seqs;
    o.max_batch_tokens = c->max_batch_tokens;
    o.kv_mem_bytes = (size_t)8 << 20;
    o.exact_matmul = c->exact;
    o.no_prefix_cache = c->no_prefix_cache;
    o.on_result = on_result;
    o.cb_ctx = out;
    struct sched *s;
    CHECK_EQ_INT(sched_new(e->m, e->t, &o, &s), 0);
    return s;
}

static void add_req(struct sched *s, int i, const struct req *q)
{
    char id[16];
    snprintf(id, sizeof id, "q%d", i);
    struct gen_params gp;
    gp_of(q, &gp);
    struct gen_prompt *pr = calloc(1, sizeof *pr);
    CHECK(pr != NULL);
    pr->ids = malloc((size_t)q->n * sizeof *pr->ids);
    CHECK(pr->ids != NULL);
    memcpy(pr->ids, q->ids, (size_t)q->n * sizeof *pr->ids);
    pr->n = (size_t)q->n;
    CHECK_EQ_INT(sched_add(s, id, &gp, pr, 1, NULL, NULL), 0);
}

/* Run requests qs[0..n) under c: together in one scheduler, or (alone) each
 * in a fresh one. Stats summed into *st when not NULL. */
static void run(const struct env *e, const struct cfg *c, const struct req *qs, int n, int alone,
                struct fps *out, struct sched_stats *st)
{
    memset(out, 0, sizeof *out);
    if (st)
        memset(st, 0, sizeof *st);
    for (int i = 0; i < n;) {
        struct sched *s = sched_make(e, c, out);
        int to = alone ? i + 1 : n;
        for (int j = i; j < to; j++)
            add_req(s, j, &qs[j]);
        CHECK_EQ_INT(sched_run(s), 0);
        struct kv_cache *kv = model_ctx_kv(sched_model_ctx(s));
        CHECK_EQ_INT(kv_cache_n_used(kv), 0); /* every block back, drafts' too */
        struct sched_stats x;
        sched_get_stats(s, &x);
        if (st) {
            st->n_steps += x.n_steps;
            st->output_tokens += x.output_tokens;
            st->decode_tokens += x.decode_tokens;
            st->spec_steps += x.spec_steps;
            st->spec_drafted += x.spec_drafted;
            st->spec_accepted += x.spec_accepted;
        }
        sched_free(s);
        i = to;
    }
    CHECK_EQ_INT(out->n, n);
}

static void check_same(const struct fps *a, const struct fps *b, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(a->fp[i], b->fp[i]) != 0)
            th_fail(__FILE__, __LINE__, what, "request %d:\n%.600s\n%.600s", i, a->fp[i], b->fp[i]);
        CHECK_EQ_INT(a->completion[i], b->completion[i]);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* A prompt of len tokens below n_vocab: a period-`period` pattern repeated
 * (its n-grams recur: drafts fire and mostly hold on a model that follows the
 * pattern) or, with period 0, random tokens. */
static void prompt_fill(struct req *q, int len, int period, int n_vocab)
{
    int32_t pat[16];
    for (int j = 0; j < 16; j++)
        pat[j] = 3 + (int32_t)rnd((uint32_t)n_vocab - 3);
    for (int j = 0; j < len; j++)
        q->ids[j] = period ? pat[j % period] : 3 + (int32_t)rnd((uint32_t)n_vocab - 3);
    q->n = len;
}

/* A mixed set: repetitive and random prompts, greedy or sampled per `sampled`
 * (at temperature T). */
static int make_set(struct req *qs, int n, int sampled, double T, int n_vocab, int max_tokens)
{
    for (int i = 0; i < n; i++) {
        memset(&qs[i], 0, sizeof qs[i]);
        prompt_fill(&qs[i], 12 + (int)rnd(60), i % 3 == 2 ? 0 : 2 + i % 5, n_vocab);
        qs[i].max_tokens = max_tokens;
        qs[i].sampled = sampled;
        qs[i].temperature = T;
        qs[i].seed = 1000 + (uint64_t)i;
        qs[i].n_choices = i % 4 == 3 ? 2 : 1;
    }
    return n;
}

/* ---- greedy and seeded output identical ----------------------------------------- */

/* The tiny fixtures are random weights. With tied embeddings (llama_tied,
 * gemma3_tied, mistral_swa...) a token's own embedding dominates the LM
 * head: the model repeats its last token with logits near 40 above the rest,
 * so greedy drafts always hold, and sampling needs a temperature near 8 to
 * make the repeat a coin toss. Untied or soft-capped ones (llama3_untied,
 * phi3_longrope, gemma2_tied) are nearly flat: greedy drafts mostly fail. */
struct tally {
    int64_t drafted, accepted;
};

static void check_identical_c(const char *file, int sampled, double T, int exact, int constrained,
                              struct tally *ta)
{
    struct env e;
    env_init(&e, file);
    static struct req qs[12];
    int n = make_set(qs, 12, sampled, T, e.m->hp.n_vocab, 40);
    for (int i = 0; i < n; i++)
        qs[i].constrained = constrained;
    struct cfg off = {SCHED_SPEC_OFF, 0, 0, 1, 512, exact, 0};
    struct cfg on = {SCHED_SPEC_AUTO, 0, 0, 1, 512, exact, 0};     /* adaptive */
    struct cfg forced = {SCHED_SPEC_AUTO, 0, 4, 1, 512, exact, 0}; /* 4 whenever a match */
    struct cfg tight = {SCHED_SPEC_AUTO, 0, 8, 1, 3, exact, 1};    /* budget: at most 2 */
    struct fps a, b, c, d;
    struct sched_stats st_off, st_on, st_forced, st_tight;
    run(&e, &off, qs, n, 0, &a, &st_off);
    run(&e, &on, qs, n, 0, &b, &st_on);
    run(&e, &forced, qs, n, 0, &c, &st_forced);
    run(&e, &tight, qs, n, 0, &d, &st_tight);
    printf("# %s %s%s%s: %lld steps plain, %lld with speculation (%lld drafted, %lld accepted), "
           "k = 4: %lld (%lld, %lld)\n",
           file, sampled ? "sampled" : "greedy", exact ? " exact" : "",
           constrained ? " constrained" : "", (long long)st_off.n_steps,
           (long long)st_on.n_steps, (long long)st_on.spec_drafted, (long long)st_on.spec_accepted,
           (long long)st_forced.n_steps, (long long)st_forced.spec_drafted,
           (long long)st_forced.spec_accepted);
    check_same(&a, &b, n, "plain == speculative");
    check_same(&a, &c, n, "plain == speculative, k = 4");
    check_same(&a, &d, n, "plain == speculative, budget 3");
    CHECK_EQ_INT(st_off.spec_drafted, 0);
    CHECK_EQ_INT(st_on.output_tokens, st_off.output_tokens);
    CHECK(st_on.n_steps <= st_off.n_steps);
    CHECK(st_forced.spec_drafted > 0);
    CHECK(st_tight.spec_drafted > 0 && st_tight.spec_drafted <= 2 * st_tight.spec_steps);
    /* every generated token's K/V computed once: the accepted drafts plus the plain decodes */
    CHECK_EQ_INT(st_forced.decode_tokens, st_off.decode_tokens);
    ta->drafted += st_forced.spec_drafted;
    ta->accepted += st_forced.spec_accepted;
    fps_release(&a);
    fps_release(&b);
    fps_release(&c);
    fps_release(&d);
    env_release(&e);
}

static void check_identical(const char *file, int sampled, double T, int exact, struct tally *ta)
{
    check_identical_c(file, sampled, T, exact, 0, ta);
}

/* Both outcomes of a verification happened often enough to matter. */
static void check_tally(const struct tally *ta)
{
    printf("# %lld drafts, %lld accepted\n", (long long)ta->drafted, (long long)ta->accepted);
    CHECK(ta->accepted >= 100);
    CHECK(ta->drafted - ta->accepted >= 100);
}

TEST(spec_greedy_identical_tokens_and_logprobs)
{
    struct tally ta = {0};
    check_identical("llama_tied.q8_0.gguf", 0, 0, 0, &ta);   /* drafts hold */
    check_identical("llama3_untied.q8_0.gguf", 0, 0, 0, &ta); /* drafts fail */
    check_identical("phi3_longrope.q8_0.gguf", 0, 0, 0, &ta);
    check_identical("qwen2_tied.q8_0.gguf", 0, 0, 0, &ta);
    check_identical("llama_tied.q4_1.gguf", 1, 8.0, 0, &ta); /* the default model's type */
    check_identical("llama3_untied.f32.gguf", 0, 0, 1, &ta); /* the reference matmul, float32 K/V */
    check_tally(&ta);
}

/* Sliding-window models keep their local layers' K/V in rings (kv.h): the
 * rejected drafts are cut off there too. */
TEST(spec_greedy_identical_sliding_window_rings)
{
    struct tally ta = {0};
    check_identical("gemma3_tied.q8_0.gguf", 0, 0, 0, &ta);
    check_identical("mistral_swa.q8_0.gguf", 0, 0, 0, &ta);
    check_identical("gemma2_tied.q8_0.gguf", 0, 0, 0, &ta); /* soft-capped: nearly flat */
    check_identical("gemma3_tied.q8_0.gguf", 1, 8.0, 0, &ta);
    check_identical("mistral_swa.q8_0.gguf", 1, 8.0, 0, &ta);
    check_tally(&ta);
}

TEST(spec_seeded_sampling_identical_per_seed)
{
    struct tally ta = {0};
    check_identical("llama_tied.q8_0.gguf", 1, 8.0, 0, &ta);
    check_identical("llama_tied.q8_0.gguf", 2, 8.0, 0, &ta); /* penalties, bias, a stop string */
    check_identical("llama3_untied.q8_0.gguf", 2, 0.7, 0, &ta);
    check_tally(&ta);
}

/* Structured outputs: each verified row is sampled under the mask of the
 * tokens before it (gen_seq_step computes it), so drafts the grammar refuses
 * are simply not confirmed. */
TEST(spec_constrained_identical_and_in_the_language)
{
    struct tally ta = {0};
    check_identical_c("llama_tied.q8_0.gguf", 0, 0, 0, 1, &ta);
    check_identical_c("llama_tied.q8_0.gguf", 1, 8.0, 0, 1, &ta);
    check_identical_c("llama3_untied.q8_0.gguf", 0, 0, 0, 1, &ta);
    check_tally(&ta);
    printf("# %d outputs checked in the language\n", n_in_language);
    CHECK(n_in_language >= 20);
}

/* ---- the distribution: chi-square against the exact joint ------------------------- */

/* The filtered distribution (ids, probabilities) of the token after
 * tokens[0..n), computed with a fresh context: what plain decoding samples
 * from (no penalties in this test). */
static size_t next_dist(const struct model *m, const struct smp_params *p, const int32_t *tokens,
                        int n, struct smp_scratch *sc, int32_t *ids, double *prob)
{
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 256;
    cp.n_batch_max = 256;
    cp.n_out_max = 1;
    struct model_ctx *c;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), 0);
    static int32_t pos[256], seq[256];
    static uint8_t mark[256];
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        seq[i] = 0;
        mark[i] = i == n - 1;
    }
    struct model_batch b = {n, tokens, pos, seq, mark};
    const float *lg;
    int n_out;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
    size_t k = 0;
    CHECK_EQ_INT(smp_filter(p, lg, (size_t)m->hp.n_vocab, NULL, 0, NULL, 0, sc, ids, prob, &k), 0);
    model_ctx_free(c);
    return k;
}

/* Upper 0.1% point of chi-square with df degrees of freedom
 * (Wilson-Hilferty; within 1% of the table for df >= 5). */
static double chi2_crit_001(int df)
{
    double z = 3.0902, a = 2.0 / (9.0 * df), t = 1.0 - a + z * sqrt(a);
    return df * t * t * t;
}

#define CHI_N 6000   /* requests */
#define CHI_K 5      /* top_k: at most 125 cells */

struct cell {
    int32_t t[3];
    double p;
    int64_t seen;
};

static struct cell cells[CHI_K * CHI_K * CHI_K];
static int n_cells;
static int32_t chi_tok[CHI_N][3];
static int chi_n;

static int on_chi(void *ctx, const struct sched_result *r)
{
    (void)ctx;
    int i = (int)strtol(r->id + 1, NULL, 10);
    CHECK(chi_n < CHI_N && i >= 0 && i < CHI_N);
    CHECK_EQ_INT((int)r->choices[0].n_lp, 3);
    for (int k = 0; k < 3; k++)
        chi_tok[i][k] = r->choices[0].lp[k].r.token;
    chi_n++;
    return 0;
}

/* CHI_N seeded requests (seeds 1..CHI_N) of 3 sampled tokens after prompt,
 * two running at a time (both speculate: the default gate); the tokens of
 * request i in chi_tok[i], the stats in *st. */
static void chi_run(const struct env *e, const int32_t *prompt, int n, const struct smp_params *p,
                    int spec, struct sched_stats *st)
{
    struct sched_opts o;
    sched_opts_init(&o);
    o.spec = spec;
    o.spec_k = 2; /* a draft at t2 (and t3 when it held), whatever the policy thinks */
    o.max_seqs = 2;
    o.kv_mem_bytes = (size_t)4 << 20;
    o.on_result = on_chi;
    struct sched *s;
    CHECK_EQ_INT(sched_new(e->m, e->t, &o, &s), 0);
    chi_n = 0;
    for (int i = 0; i < CHI_N; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        struct gen_params gp;
        memset(&gp, 0, sizeof gp);
        gp.smp = *p;
        gp.smp.n_top_logprobs = 0;
        gp.logprobs = 1;
        gp.max_tokens = 3;
        gp.n = 1;
        gp.seed = 1 + (uint64_t)i;
        gp.seed_given = 1;
        struct gen_prompt *pr = calloc(1, sizeof *pr);
        pr->ids = malloc((size_t)n * sizeof *pr->ids);
        memcpy(pr->ids, prompt, (size_t)n * sizeof *pr->ids);
        pr->n = (size_t)n;
        CHECK_EQ_INT(sched_add(s, id, &gp, pr, 1, NULL, NULL), 0);
    }
    CHECK_EQ_INT(sched_run(s), 0);
    CHECK_EQ_INT(chi_n, CHI_N);
    sched_get_stats(s, st);
    sched_free(s);
}

TEST(spec_sampling_chi_square_matches_the_model)
{
    struct env e;
    env_init(&e, "llama_tied.q8_0.gguf");
    struct smp_params p;
    smp_params_init(&p);
    p.temperature = 8.0; /* the repeat a coin toss (see check_identical) */
    p.top_k = CHI_K;
    /* a prompt of a repeated 4-token pattern whose last token (the context of
     * t1) and likely continuations recur: the lookup drafts at t2 and t3 */
    int32_t prompt[64];
    static const int32_t pat[4] = {41, 97, 152, 230};
    int n = 0;
    for (; n < 17; n++) /* 16 shared through the prefix cache, 1 computed per request */
        prompt[n] = pat[n % 4];
    /* the exact joint of (t1, t2, t3) */
    struct smp_scratch sc;
    CHECK_EQ_INT(smp_scratch_init(&sc, (size_t)e.m->hp.n_vocab), 0);
    static int32_t ids1[512], ids2[512], ids3[512];
    static double p1[512], p2[512], p3[512];
    size_t k1 = next_dist(e.m, &p, prompt, n, &sc, ids1, p1);
    n_cells = 0;
    for (size_t a = 0; a < k1; a++) {
        prompt[n] = ids1[a];
        size_t k2 = next_dist(e.m, &p, prompt, n + 1, &sc, ids2, p2);
        for (size_t b = 0; b < k2; b++) {
            prompt[n + 1] = ids2[b];
            size_t k3 = next_dist(e.m, &p, prompt, n + 2, &sc, ids3, p3);
            for (size_t c = 0; c < k3; c++)
                cells[n_cells++] = (struct cell){{ids1[a], ids2[b], ids3[c]}, p1[a] * p2[b] * p3[c], 0};
        }
    }
    smp_scratch_release(&sc);
    /* sample it with speculation on; then plain, which must agree seed by seed */
    static int32_t spec_tok[CHI_N][3];
    struct sched_stats st_on, st_off;
    chi_run(&e, prompt, n, &p, SCHED_SPEC_AUTO, &st_on);
    memcpy(spec_tok, chi_tok, sizeof spec_tok);
    chi_run(&e, prompt, n, &p, SCHED_SPEC_OFF, &st_off);
    CHECK(memcmp(spec_tok, chi_tok, sizeof spec_tok) == 0);
    for (int i = 0; i < CHI_N; i++) {
        int c = 0;
        while (c < n_cells && memcmp(cells[c].t, spec_tok[i], sizeof cells[c].t) != 0)
            c++;
        CHECK(c < n_cells); /* never outside the support */
        cells[c].seen++;
    }
    /* Pearson's statistic over cells expecting >= 5, the rest pooled */
    double chi = 0, rest_e = 0;
    int64_t rest_o = 0;
    int df = -1;
    for (int c = 0; c < n_cells; c++) {
        double ex = cells[c].p * CHI_N;
        if (ex < 5) {
            rest_e += ex;
            rest_o += cells[c].seen;
            continue;
        }
        chi += (cells[c].seen - ex) * (cells[c].seen - ex) / ex;
        df++;
    }
    if (rest_e >= 5) {
        chi += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        df++;
    }
    double crit = chi2_crit_001(df);
    printf("# chi-square %.1f, %d degrees of freedom, 0.1%% point %.1f; %d cells; drafts: %lld in "
           "%lld steps, %lld accepted\n",
           chi, df, crit, n_cells, (long long)st_on.spec_drafted, (long long)st_on.spec_steps,
           (long long)st_on.spec_accepted);
    CHECK(df >= 10);
    CHECK(chi < crit);
    /* both branches of the verification ran often: accepted and rejected drafts */
    CHECK(st_on.spec_accepted >= CHI_N / 10);
    CHECK(st_on.spec_drafted - st_on.spec_accepted >= CHI_N / 10);
    CHECK_EQ_INT(st_off.spec_drafted, 0);
    env_release(&e);
}

/* ---- batch invariance ------------------------------------------------------------ */

/* A speculating sequence among others: with spec_max_seqs 3 it drafts while
 * two neighbours prefill in chunks and decode in the same steps (budget 24);
 * every request's output equals its output alone without speculation. */
TEST(spec_batch_invariance_speculating_among_others)
{
    struct env e;
    env_init(&e, "llama_tied.q8_0.gguf");
    static struct req qs[9];
    int n = make_set(qs, 9, 0, 8.0, e.m->hp.n_vocab, 48);
    for (int i = 0; i < n; i++) {
        qs[i].sampled = i % 2 ? 1 : 0;
        qs[i].max_tokens = i == 4 ? 64 : 16 + i; /* a long drain tail for the default gate */
        if (i % 3 == 1) /* long prompts: prefill chunks beside the drafts */
            prompt_fill(&qs[i], 120 + (int)rnd(60), 0, e.m->hp.n_vocab);
    }
    struct cfg alone = {SCHED_SPEC_OFF, 0, 0, 4, 512, 0, 1};
    struct cfg pack = {SCHED_SPEC_AUTO, 3, 4, 3, 24, 0, 0};
    struct cfg tail = {SCHED_SPEC_AUTO, 0, 4, 8, 64, 0, 0}; /* default gate: the drain tail */
    struct fps a, b, c;
    struct sched_stats st_b, st_c;
    run(&e, &alone, qs, n, 1, &a, NULL);
    run(&e, &pack, qs, n, 0, &b, &st_b);
    run(&e, &tail, qs, n, 0, &c, &st_c);
    printf("# pack of 3: %lld verification steps, %lld/%lld drafts accepted; 8 slots: %lld steps\n",
           (long long)st_b.spec_steps, (long long)st_b.spec_accepted, (long long)st_b.spec_drafted,
           (long long)st_c.spec_steps);
    check_same(&a, &b, n, "alone == pack of 3 speculating");
    check_same(&a, &c, n, "alone == pack of 9, speculating in the tail");
    CHECK(st_b.spec_accepted > 0 && st_c.spec_accepted > 0);
    fps_release(&a);
    fps_release(&b);
    fps_release(&c);
    env_release(&e);
}

/* ---- KV rollback ------------------------------------------------------------------ */

/* After prompt, feed [x, d1, d2, d3, d4] in one step (logits at each), cut
 * back to keep x and d1 (as a verification that confirmed d1), then feed y:
 * y's logits must equal those of a fresh context fed prompt, x, d1, y; and the
 * rolled-back context continues like the fresh one for a few more tokens. */
static void check_rollback(const char *file)
{
    struct env e;
    env_init(&e, file);
    int nv = e.m->hp.n_vocab;
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 128;
    cp.n_batch_max = 8; /* rings (sliding-window layers) sized for steps of 8 */
    cp.n_out_max = 8;
    struct model_ctx *c, *f;
    CHECK_EQ_INT(model_ctx_new(e.m, &cp, &c), 0);
    CHECK_EQ_INT(model_ctx_new(e.m, &cp, &f), 0);
    int32_t toks[64], pos[8], seq[8] = {0};
    uint8_t mark[8];
    for (int i = 0; i < 40; i++)
        toks[i] = (int32_t)((i * 37 + 5) % nv);
    const float *lg;
    int n_out;
    static float want[8][512];
    CHECK(nv <= 512);
    /* both contexts: the 38-token prompt in chunks of 8 */
    for (int at = 0; at < 38; at += 8) {
        int k = 38 - at < 8 ? 38 - at : 8;
        for (int i = 0; i < k; i++) {
            pos[i] = at + i;
            mark[i] = 0;
        }
        struct model_batch b = {k, toks + at, pos, seq, mark};
        CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
        CHECK_EQ_INT(model_forward(f, &b, &lg, &n_out), 0);
    }
    struct kv_cache *kv = model_ctx_kv(c);
    int used = kv_cache_n_used(kv);
    /* c: x, d1..d3 at 38..42, then the cut at 40 (inside block 2) */
    int32_t spec[5] = {toks[38], toks[39], 11, 12, 13};
    for (int i = 0; i < 5; i++) {
        pos[i] = 38 + i;
        mark[i] = 1;
    }
    struct model_batch b5 = {5, spec, pos, seq, mark};
    CHECK_EQ_INT(model_forward(c, &b5, &lg, &n_out), 0);
    CHECK_EQ_INT(n_out, 5);
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 40), 0);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 40);
    CHECK(kv_cache_n_used(kv) >= used);
    /* f: x, d1 one at a time */
    for (int i = 38; i < 40; i++) {
        pos[0] = i;
        mark[0] = 1;
        struct model_batch b1 = {1, toks + i, pos, seq, mark};
        CHECK_EQ_INT(model_forward(f, &b1, &lg, &n_out), 0);
    }
    /* both continue with the same 6 tokens, one step each: same logits */
    for (int i = 40; i < 46; i++) {
        pos[0] = i;
        mark[0] = 1;
        toks[i] = (int32_t)((i * 53 + 1) % nv);
        struct model_batch b1 = {1, toks + i, pos, seq, mark};
        CHECK_EQ_INT(model_forward(f, &b1, &lg, &n_out), 0);
        memcpy(want[i - 40], lg, (size_t)nv * sizeof(float));
        CHECK_EQ_INT(model_forward(c, &b1, &lg, &n_out), 0);
        CHECK(memcmp(want[i - 40], lg, (size_t)nv * sizeof(float)) == 0);
    }
    /* a cut back across a block boundary returns the block (a ring keeps
     * too little of the past for that cut: refused, nothing changed) */
    int before = kv_cache_n_used(kv);
    if (kv->n_layer_ring) {
        CHECK_EQ_INT(kv_seq_truncate(kv, 0, 30), ERR_BADSTATE);
        CHECK_EQ_INT(kv->seqs[0].n_pos, 46);
    } else {
        CHECK_EQ_INT(kv_seq_truncate(kv, 0, 30), 0);
        CHECK_EQ_INT(kv_cache_n_used(kv), before - 1);
        CHECK_EQ_INT(kv->seqs[0].n_blocks, 2);
    }
    model_ctx_free(c);
    model_ctx_free(f);
    env_release(&e);
}

TEST(spec_kv_rollback_next_token_as_if_never_drafted)
{
    check_rollback("llama_tied.q8_0.gguf");
    check_rollback("gemma3_tied.q8_0.gguf"); /* rings of window 4 + 8 - 1 positions */
    check_rollback("mistral_swa.q8_0.gguf");
}

/* ---- options ---------------------------------------------------------------------- */

TEST(spec_options_checked)
{
    struct env e;
    env_init(&e, "llama_tied.q8_0.gguf");
    struct fps f = {0};
    struct sched_opts o;
    sched_opts_init(&o);
    CHECK_EQ_INT(o.spec, SCHED_SPEC_AUTO);
    CHECK_EQ_INT(o.spec_max_seqs, SCHED_SPEC_MAX_SEQS);
    o.on_result = on_result;
    o.cb_ctx = &f;
    o.kv_mem_bytes = (size_t)1 << 20;
    struct sched *s = NULL;
    o.spec = 2;
    CHECK_EQ_INT(sched_new(e.m, e.t, &o, &s), ERR_INVAL);
    o.spec = SCHED_SPEC_AUTO;
    o.spec_max_seqs = -1;
    CHECK_EQ_INT(sched_new(e.m, e.t, &o, &s), ERR_INVAL);
    o.spec_max_seqs = 1;
    o.spec_k = SCHED_SPEC_K_MAX + 1;
    CHECK_EQ_INT(sched_new(e.m, e.t, &o, &s), ERR_INVAL);
    o.spec_k = 0;
    o.spec_max_seqs = 0; /* never */
    CHECK_EQ_INT(sched_new(e.m, e.t, &o, &s), 0);
    struct req q = {.max_tokens = 30, .seed = 1};
    prompt_fill(&q, 20, 3, e.m->hp.n_vocab);
    add_req(s, 0, &q);
    CHECK_EQ_INT(sched_run(s), 0);
    struct sched_stats st;
    sched_get_stats(s, &st);
    CHECK_EQ_INT(st.spec_drafted, 0);
    sched_free(s);
    fps_release(&f);
    env_release(&e);
}
