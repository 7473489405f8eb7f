/*
 * generate.h - one request from body to response: the per-sequence step
 * API (used by the batched scheduler) and a sequential driver over a "next
 * logits" callback (used by one-off runs and tests).
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
 * Prompts. Chat: messages -> chat_render (generation prompt) -> chat_encode.
 * Completions: text prompts are tokenized with TOK_ADD_SPECIAL |
 * TOK_PARSE_SPECIAL (BOS per the vocabulary; special-token text such as
 * <|im_start|> is parsed, as HF tokenizers / vLLM / llama.cpp's server do);
 * token-array prompts are used as given. A prompt of n_ctx tokens or more,
 * or prompt + explicit max_tokens > n_ctx, is a 400
 * "context_length_exceeded"; an empty tokenized prompt is a 400 on "prompt".
 *
 * Thread: a gen_seq belongs to one thread at a time; gen_run is reentrant
 * (its callback decides the rest).
 */
#ifndef WORKER_GENERATE_H
#define WORKER_GENERATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "worker/engine/chat.h"
#include "worker/openai/params.h"
#include "worker/openai/response.h"
#include "worker/engine/sample.h"
#include "worker/engine/stop.h"
#include "worker/engine/tok.h"

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
    struct resp_lp *lp;            /* (n_lp) owned, when gp->logprobs */
    size_t n_lp, cap_lp;
    enum stop_finish finish;       /* STOP_NONE while running */
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

/* Take a token sampled elsewhere (r->token; r's logprobs used when the
 * request asked for them). Returns 1 finished, 0 continue, or an error. */
int gen_seq_accept(struct gen_seq *s, const struct smp_result *r);

/* The sampling parameters smp_sample needs for this sequence. */
const struct smp_params *gen_seq_smp_params(const struct gen_seq *s);

/* Describe a finished sequence as a response choice (pointers borrowed from
 * s). Returns 0 or ERR_BADSTATE when not finished. */
int gen_seq_choice(const struct gen_seq *s, struct resp_choice *c);

/* ---- sequential driver ----------------------------------------------------- */

/* Logits of the next position for the sequence tokens[0..n_tokens) (prompt
 * then generated tokens) of choice `choice`: set *logits to n_vocab floats
 * valid until the next call. Return 0 or a negative ERR_*. */
typedef int (*gen_logits_fn)(void *ctx, uint64_t choice, const int32_t *tokens, size_t n_tokens,
                             const float **logits);

struct gen_model {
    const struct tok *t;
    const struct chat_tmpl *tmpl;      /* for chat requests */
    size_t n_ctx;                      /* context length in tokens */
    const char *model_name;            /* echoed as "model" */
    const char *system_fingerprint;    /* NULL -> null */
    gen_logits_fn next_logits;
    void *ctx;
};

/* Tokenized prompts of one request (m->next_logits is not used). */
struct gen_prompt {
    int32_t *ids;    /* (n) owned */
    size_t n;
};

/* Build and tokenize the prompt(s) of body for endpoint ep with parameters
 * gp (already parsed): one for chat, gp->n_prompts for completions, and
 * check each against m->n_ctx (empty, too long, prompt + max_tokens).
 * Returns 0 and *out (gen_prompts_free(*out, *n_out)), ERR_INVAL with *err
 * filled for a request error (a 400), or ERR_NOMEM / tokenizer errors. */
int gen_prompts_build(const struct gen_model *m, enum gp_endpoint ep, const json_t *body,
                      const struct gen_params *gp, struct gen_prompt **out, size_t *n_out,
                      struct gp_error *err);
void gen_prompts_free(struct gen_prompt *p, size_t n);

/* Optional overrides (tests, deterministic ids); NULL = none. */
struct gen_opts {
    const char *id;          /* response id */
    int64_t created;         /* 0 = now */
    /* Called when a choice has finished (s->prompt, s->gen, s->finish are
     * final); NULL = none. Returning an error aborts gen_run with it. */
    int (*on_done)(void *ctx, uint64_t choice, const struct gen_seq *s);
    void *on_done_ctx;
};

/* Run one request body for endpoint ep: parse parameters, build and
 * tokenize the prompt(s), generate every choice (one after the other, each
 * to its end), and build the response body. Returns 0 and *response (new
 * reference, the 200 body); ERR_INVAL with *err filled for a request error
 * (send gp_error_json(err) with status 400); or another error (the
 * callback's, ERR_NOMEM, ERR_CORRUPT from non-finite logits...). */
int gen_run(const struct gen_model *m, enum gp_endpoint ep, const json_t *body,
            const struct gen_opts *opts, json_t **response, struct gp_error *err);

#endif
