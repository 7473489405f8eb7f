/*
 * sample.h - per-request token sampling: random streams, logit processing,
 * the draw, and logprobs.
 *
 * Batch invariance is the design rule: what a sequence samples depends only
 * on its own logits row, its own parameters, its own random stream and its
 * own token history. Nothing here looks at other sequences, and the random
 * stream is owned by the sequence (struct smp_rng), never shared.
 *
 * Random stream. xoshiro256** seeded through SplitMix64 from
 * (request seed, choice index): smp_rng_init(seed, choice) mixes both into
 * the 256-bit state, so choice 0..n-1 of one request get different but
 * reproducible streams. One 64-bit draw (53-bit uniform in [0,1)) is
 * consumed per non-greedy sampling step; greedy steps consume nothing.
 *
 * Processing order (smp_sample), on a double copy of the logits row:
 *   0. sanitise: NaN -> -inf (never sampled), +inf -> FLT_MAX (finite, so
 *      max-subtraction cannot produce inf - inf); -inf means "excluded".
 *      A constraint's token mask (smp_sample_masked) sets every token it
 *      does not allow to -inf here, before everything else, so greedy and
 *      random draws alike only pick allowed tokens.
 *   1. logit_bias:   l[id] += bias                       (OpenAI; -100..100)
 *   2. penalties, like vLLM / llama.cpp, in this order:
 *      repetition:   over prompt AND generated tokens (vLLM semantics): for
 *                    every distinct id seen, l = l > 0 ? l / r : l * r
 *      frequency / presence, OpenAI formula over GENERATED tokens only:
 *                    l[id] -= count[id] * frequency + (count[id] > 0) * presence
 *   3. greedy when temperature < SMP_GREEDY_EPS (vLLM's 1e-5): argmax of the
 *      processed logits, ties -> lowest id. Steps 4-7 are skipped.
 *   4. temperature:  l /= T; p_i = exp(l_i - max) (unnormalised, max token 1)
 *   5. top_k (k > 0): keep the k tokens first in the order (p desc, id asc).
 *   6. top_p (< 1):  renormalise the survivors, sort by (p desc, id asc), keep
 *                    the smallest prefix whose cumulative mass is >= top_p
 *                    (always at least one token).
 *   7. min_p (> 0):  keep survivors with p_i >= min_p * p_max (p_max is the
 *                    largest survivor probability; the top token always stays).
 *   8. draw:         u uniform in [0,1) from the stream; walking the survivors
 *                    in ascending id order, pick the first whose cumulative
 *                    (unnormalised) mass exceeds u * total.
 * This is vLLM's order (penalties, temperature, then top_k/top_p/min_p on the
 * tempered distribution); llama.cpp applies temperature last instead.
 *
 * Logprobs are those of the RAW model distribution: log_softmax of the
 * sanitised logits row before bias, penalties, temperature and filtering.
 * That is vLLM's default (logprobs_mode "raw_logprobs") and matches OpenAI,
 * whose returned logprobs do not change with temperature; it keeps logprobs
 * comparable across sampling settings (scoring, evals) and meaningful for
 * greedy decoding (where the final distribution is one-hot). Top
 * alternatives are the n_top most likely raw tokens, sorted by logprob desc,
 * ties by id asc. -inf logprobs are reported as SMP_LOGPROB_FLOOR (-9999.0,
 * OpenAI's convention), since JSON has no infinity.
 *
 * Numerics: all arithmetic after reading the float row is in double;
 * softmax sums are over exp(l - max) <= 1 in double.
 *
 * Memory: smp_sample allocates nothing; the caller owns a struct smp_scratch
 * sized for n_vocab (one per sampling thread, reusable across sequences).
 *
 * Thread: any; a scratch and an rng belong to one thread at a time.
 */
#ifndef WORKER_SAMPLE_H
#define WORKER_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "text/gen.h"

/* ---- random stream -------------------------------------------------------- */

struct smp_rng {
    uint64_t s[4];   /* xoshiro256** state, never all zero */
};

/* Seed the stream of choice `choice` of a request with seed `seed`. Can't fail. */
void smp_rng_init(struct smp_rng *r, uint64_t seed, uint64_t choice);
/* Next 64 random bits. Can't fail. */
uint64_t smp_rng_next(struct smp_rng *r);
/* Uniform double in [0, 1) with 53 random bits. Can't fail. */
double smp_rng_uniform(struct smp_rng *r);

/* ---- scratch and result --------------------------------------------------- */

struct smp_scratch {
    size_t n_vocab;
    double *val;       /* (n_vocab) processed logits, then probabilities */
    int32_t *idx;      /* (n_vocab) candidate ids */
    uint32_t *count;   /* (n_vocab) all zero between calls */
    uint8_t *mark;     /* (n_vocab) all zero between calls */
};

/* Allocate scratch for n_vocab (1 .. 2^24). Returns 0, ERR_INVAL, ERR_NOMEM. */
int smp_scratch_init(struct smp_scratch *s, size_t n_vocab);
void smp_scratch_release(struct smp_scratch *s);

/* Sample one token from logits[0..n_vocab) (n_vocab == scratch->n_vocab).
 * gen[0..n_gen) are the tokens this sequence generated so far (frequency,
 * presence and repetition penalties); prompt[0..n_prompt) its prompt
 * (repetition penalty only; may be NULL). rng is advanced by one draw unless
 * the step is greedy. Logprobs are filled when p->n_top_logprobs >= 0.
 * Returns 0 and *out, ERR_INVAL (size mismatch, NULL row, a bias or history
 * id out of range), ERR_CORRUPT (no token has a finite logit after
 * processing). Allocates nothing. */
int smp_sample(const struct smp_params *p, const float *logits, size_t n_vocab,
               const int32_t *gen, size_t n_gen, const int32_t *prompt, size_t n_prompt,
               struct smp_rng *rng, struct smp_scratch *scratch, struct smp_result *out);

/* smp_sample with a token mask: allow[id >> 5] bit (id & 31) set = the token
 * may be drawn (NULL = every token). Logprobs stay those of the raw row.
 * Same returns; ERR_CORRUPT also when the mask leaves no finite logit. */
int smp_sample_masked(const struct smp_params *p, const float *logits, const uint32_t *allow,
                      size_t n_vocab, const int32_t *gen, size_t n_gen, const int32_t *prompt,
                      size_t n_prompt, struct smp_rng *rng, struct smp_scratch *scratch,
                      struct smp_result *out);

/* The filter pipeline alone (steps 0-7) for tests and diagnostics: on
 * success writes the surviving ids (ascending) to ids[], their normalised
 * probabilities to prob[] (both (n_vocab)), and the count to *n_out; greedy
 * parameters give the single argmax with probability 1. Same errors as
 * smp_sample. */
int smp_filter(const struct smp_params *p, const float *logits, size_t n_vocab,
               const int32_t *gen, size_t n_gen, const int32_t *prompt, size_t n_prompt,
               struct smp_scratch *scratch, int32_t *ids, double *prob, size_t *n_out);

/* Raw log_softmax of logits (NaN -> -inf, +inf -> FLT_MAX) for one token,
 * and the n_top best alternatives, as smp_sample reports them. Returns 0 or
 * ERR_INVAL / ERR_CORRUPT. */
int smp_logprobs(const float *logits, size_t n_vocab, int32_t token, int n_top,
                 struct smp_result *out);

#endif
