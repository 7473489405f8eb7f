/*
 * generate.h - one request's sequences from prompt tokens to finished text:
 * the generation parameters, the per-sequence step API (used by the
 * batched scheduler) and a sequential driver over a "next logits" callback
 * (used by one-off runs and tests). Token level: prompts come in as token
 * ids, results go out as text, finish reasons, logprob records and token
 * counts; request bodies and response bodies are openai/'s business.
 *
 * Per-step API. A struct gen_seq is one choice of one request: its prompt
 * ids (borrowed), its generated ids, its random stream (seed, choice index),
 * its streaming decoder and stop matcher, its emitted text and logprob
 * records. The scheduler, for every sequence in a step, hands the sequence's
 * float32 logits row to gen_seq_step (sample + accept), or samples itself
 * (smp_sample with gen_seq_smp_params / s->rng) and calls gen_seq_accept.
 * Either way a sequence's tokens depend only on its own row, parameters,
 * stream and history: batch invariance. After gen_seq_step returns 1, the
 * sequence is finished and gen_seq_choice describes it.
 *
 * Termination, checked after each sampled token, in this order:
 *   1. EOG token (tok_is_eog)        -> finish "stop"; the token's text is not
 *                                       emitted and it has no logprob entry.
 *   2. a stop string completed       -> finish "stop"; text cut before it.
 *   3. max_gen tokens generated      -> finish "length", where max_gen =
 *                                       max_tokens if given, else n_ctx - prompt.
 * completion_tokens counts every sampled token, including an EOG token and
 * the tokens of a stop string (they were computed; vLLM counts the same).
 * Logprob entries are kept for the tokens whose text begins before the end
 * of the returned text (so tokens wholly inside a cut-off stop string are
 * dropped).
 *
 * Constrained decoding (gp->grammar set). Before each draw the sequence's
 * token mask is computed from its grammar matcher (gen_seq_mask; the
 * scheduler does this for all constrained sequences of a step on its thread
 * pool) and applied before sampling (smp_sample_masked), so greedy and
 * seeded draws both honour it; EOG tokens are allowed exactly when the
 * grammar accepts the bytes so far. An accepted token advances the matcher
 * over the token's bytes. When the grammar accepts and nothing more can
 * follow, the sequence finishes at once with "stop" (no EOG step needed).
 * max_tokens reached first gives "length" and output that need not parse
 * (as OpenAI). Stop strings still apply and may cut the output. A lazy
 * grammar (gen_params.gram_after / gram_trigger) leaves the sequence
 * unconstrained (gen_seq_constrained 0) until its markers appear in the
 * decoded output; the matcher then starts over the bytes from the trigger
 * on, and is dropped if it refuses them.
 *
 * Thinking budget (gen_params.n_think_close > 0, with think_end). Once
 * think_budget tokens are generated and the thinking block is still open
 * (and no grammar is active), the next tokens are the close's,
 * think_close[0..n), one per step: gen_seq_step samples through a mask of
 * that one token (so logprobs stay the raw row's), gen_seq_accept refuses
 * any other (ERR_INVAL). A character half decoded at the budget is given
 * up to 3 more tokens to complete first. The close counts as generated
 * (and reasoning) tokens like any other; max_tokens still ends the
 * sequence wherever it falls.
 *
 * Thread: a gen_seq belongs to one thread at a time; gen_run is reentrant
 * (its callback decides the rest).
 */
#ifndef WORKER_GENERATE_H
#define WORKER_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/gram/gram.h"
#include "text/gen.h"
#include "text/tok.h"
#include "worker/engine/sample.h"
#include "worker/engine/stop.h"

#define GEN_MAX_TEXT_BYTES (16u << 20)   /* emitted text of one choice */

struct gen_seq {
    const struct gen_params *gp;   /* borrowed */
    const struct tok *t;           /* borrowed */
    const int32_t *prompt;         /* (n_prompt) borrowed */
    size_t n_prompt;
    int32_t *gen;                  /* (n_gen) generated ids, owned */
    size_t n_gen, cap_gen;
    size_t max_gen;                /* stop with "length" at this many */
    struct smp_rng rng;
    struct tok_stream ts;
    struct stop_match sm;
    struct buf piece;              /* scratch: decoder output of one token */
    struct buf text;               /* the returned text so far */
    size_t stream_bytes;           /* bytes the decoder produced so far */
    struct gen_lp *lp;             /* (n_lp) owned, when gp->logprobs */
    size_t n_lp, cap_lp;
    enum stop_finish finish;       /* STOP_NONE while running */
    /* constrained decoding (gp->grammar): the matcher over the bytes so far,
     * the vocabulary trie (owned by the tokenizer) and the next token's mask */
    struct gram_matcher *gm;
    const struct gram_vocab *gv;
    const int32_t *eog_ids;        /* (n_eog) borrowed from the tokenizer */
    size_t n_eog;
    uint32_t *mask;                /* (gram_mask_words) allowed tokens, when mask_ready */
    int32_t keep_ids[GEN_KEEP_MAX]; /* (n_keep) gp->keep_special's control tokens */
    size_t n_keep;
    int mask_ready;
    size_t mask_allowed;           /* tokens allowed by the last mask (with EOG) */
    /* a lazy grammar (gp->gram_after / gram_trigger): which marker it waits
     * for and the output bytes since the last one that may hold it */
    int lazy;                      /* GEN_LAZY_* (generate.c); 0 = not lazy or armed */
    struct buf lazy_win;
    struct buf think_win;          /* the same for gp->think_end */
    int think_done;
    size_t n_reason;
    /* the thinking budget (gp->n_think_close): tokens of the close forced
     * so far, and the one-token mask of a forced step ((n_vocab + 31) / 32
     * words, owned; NULL without a budget) */
    size_t n_forced;
    uint32_t *force_mask;
    size_t force_words;
};

/* Set up choice `choice` (0-based overall index: prompt_index * n + i; it
 * selects the random stream) of a request with parameters gp, over the
 * tokenized prompt[0..n_prompt) (borrowed, must outlive s) and a context of
 * n_ctx tokens. Returns 0, ERR_TOOBIG (prompt >= n_ctx, or prompt +
 * max_tokens > n_ctx), ERR_INVAL (empty prompt, bad stop strings),
 * ERR_NOMEM. On error nothing needs releasing. */
int gen_seq_init(struct gen_seq *s, const struct gen_params *gp, const struct tok *t,
                 const int32_t *prompt, size_t n_prompt, size_t n_ctx, uint64_t choice);
void gen_seq_release(struct gen_seq *s);

/* One step: sample from logits[0..n_vocab) (float32 row of this sequence)
 * with scratch, then gen_seq_accept. Returns 1 when the sequence finished,
 * 0 when it continues, or an error (smp_sample's, buffer errors, ERR_BADSTATE
 * when already finished). */
int gen_seq_step(struct gen_seq *s, const float *logits, size_t n_vocab,
                 struct smp_scratch *scratch);

/* Compute the next token's mask of a constrained sequence (no-op when it is
 * not constrained or the mask is ready). Thread-safe for distinct sequences.
 * Returns 0, ERR_NOMEM. */
int gen_seq_mask(struct gen_seq *s);

/* 1 when s is constrained and still running (its next step needs a mask). */
int gen_seq_constrained(const struct gen_seq *s);

/* Take a token sampled elsewhere (r->token; r's logprobs used when the
 * request asked for them). Returns 1 finished, 0 continue, or an error
 * (ERR_INVAL also for a token the sequence's grammar does not allow). */
int gen_seq_accept(struct gen_seq *s, const struct smp_result *r);

/* The sampling parameters smp_sample needs for this sequence. */
const struct smp_params *gen_seq_smp_params(const struct gen_seq *s);

/* Describe a finished sequence (pointers borrowed from s). Returns 0 or
 * ERR_BADSTATE when not finished. */
int gen_seq_choice(const struct gen_seq *s, struct gen_choice *c);

/* ---- sequential driver ----------------------------------------------------- */

/* Logits of the next position for the sequence tokens[0..n_tokens) (prompt
 * then generated tokens) of choice `choice`: set *logits to n_vocab floats
 * valid until the next call. Return 0 or a negative ERR_*. */
typedef int (*gen_logits_fn)(void *ctx, uint64_t choice, const int32_t *tokens, size_t n_tokens,
                             const float **logits);

/* Called when a choice has finished (s->prompt, s->gen, s->finish are
 * final). Returning an error aborts gen_run with it. */
typedef int (*gen_done_fn)(void *ctx, uint64_t choice, const struct gen_seq *s);

struct gen_model {
    const struct tok *t;
    size_t n_ctx;                      /* context length in tokens */
    gen_logits_fn next_logits;
    void *ctx;
};

/* Generate every choice of a request with parameters gp over the prompts
 * pr[0..n_pr) (each checked by the caller: non-empty, within n_ctx), one
 * after the other, each to its end: choice i * gp->n + k of prompt i goes to
 * seqs[i * gp->n + k] (caller storage for n_pr * gp->n sequences). on_done
 * (NULL = none) sees each finished choice. Returns 0 with every sequence
 * finished (the caller releases each with gen_seq_release); or an error
 * (gen_seq_init's, the callbacks', ERR_NOMEM, ERR_CORRUPT from non-finite
 * logits...), with nothing left to release. */
int gen_run(const struct gen_model *m, const struct gen_params *gp, const struct gen_prompt *pr,
            size_t n_pr, gen_done_fn on_done, void *done_ctx, struct gen_seq *seqs);

#endif
