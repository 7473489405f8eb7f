/*
 * sched.h - the engine's scheduler: static plus continuous batching of a
 * pack of requests over one model context, with chunked prefill, prefix
 * sharing and preemption by recompute. Token level: no request or
 * response bodies here (worker/run/request.h turns OpenAI bodies into
 * sched_add calls and results into response bodies).
 *
 * Input: requests added with sched_add - an id, generation parameters
 * (generate.h) and one or more tokenized prompts. A request with n choices
 * or several prompts becomes one sequence per choice. Output: one callback
 * per request, in finishing order, with each choice's text, finish reason
 * and logprob records, the token counts and timings.
 *
 * Design (vLLM v1 style). Each sequence knows its tokens (prompt, then the
 * tokens it sampled) and how many of them are in the KV cache; a step
 * feeds every running sequence the tokens it still lacks, up to
 * max_batch_tokens in all: one token for a decoding sequence, a chunk for
 * a prefilling one, and asks for logits at a sequence's last known token.
 *   - static part: added requests are ordered for throughput before they
 *     are admitted - lexicographically by prompt tokens, which is the DFS
 *     order of the prefix tree (shared prefixes adjacent, shorter first);
 *   - continuous part: every step, running sequences are served oldest
 *     first (decodes and prefill chunks mixed), finished ones leave and
 *     free their blocks, then waiting ones are admitted in order while a
 *     slot is free, the step's token budget is not spent, and the KV pool
 *     can hold their whole remaining prompt on top of what running
 *     sequences still need (plus a 1% watermark);
 *   - prefix sharing (kv.h): an admitted sequence first takes the cached
 *     full blocks of its prompt, then copies the matching head of a cached
 *     block that follows the same prefix (kv_seq_share_partial: a system
 *     prompt of 300 tokens is shared to the token, not to 288); after each
 *     step the full prompt blocks computed are published. A waiting sequence whose prompt shares full
 *     blocks with a running sequence that has not computed them yet waits
 *     for it, so a shared system prompt is computed once. Choices 2..n of
 *     a request thereby fork after the first choice's prefill: they share
 *     its prompt blocks and compute only the prompt's last partial block;
 *   - preemption: when the pool cannot hold a step's new positions, the
 *     most recently admitted running sequence is preempted (blocks freed,
 *     state kept) and goes back to the front of the queue; readmitted, it
 *     recomputes prompt and generated tokens (its prompt blocks usually
 *     still cached) and continues with the same sampler state.
 * Batch invariance (CPU backend; the CUDA backend is deterministic for a
 * given pack but not invariant to it, see README "Running on a GPU"): the
 * forward pass gives a token the same logits
 * whatever shares its batch or however its prompt was chunked or shared,
 * and sampling is per sequence (own random stream, seeded from the
 * request's seed and choice index), so a request's output does not depend
 * on the pack, the budget, preemptions, the prefix cache or speculation.
 *
 * Seeds: a request whose parameters carry no seed (seed_given 0) gets one
 * derived from its id (FNV-1a), so a retried request reproduces its text.
 *
 * Speculation (sched_opts.spec; prompt lookup, no second model). While at
 * most spec_max_seqs sequences run (a single request, the drain tail of a
 * pack), a decoding sequence whose last tokens (3, 2 or 1 of them) occurred
 * earlier in its prompt or output drafts the k tokens that followed that
 * occurrence (the newest one), and the step feeds the last token plus the
 * k drafts as k + 1 positions of the sequence, with logits at each. The
 * rows are then sampled in order exactly as plain decoding would sample
 * them (gen_seq_step: same penalties over the tokens so far, same
 * structured-output mask, same stop strings, the sequence's own random
 * stream, one draw per sampled token): while the sampled token equals the
 * draft the next row is valid and sampling goes on; the first token that
 * differs (or the one after the last draft) ends the step, and the K/V of
 * the rejected drafts is cut off (kv_seq_truncate; within a ring too, whose
 * size covers a whole step). Since a row's logits are bit-identical whatever
 * shares its step (the batch invariance above), the tokens, text and
 * logprobs are bit-identical to decoding without speculation, greedy and
 * seeded alike, whatever the pack. For a sampled sequence this is standard
 * speculative sampling with a point-mass draft q = [x]: x is accepted with
 * probability p(x) (the token drawn from p is x) and otherwise the token
 * is drawn from p restricted to tokens != x, which is the residual
 * normalize(max(p - q, 0)) - computed by coupling both to the draw plain
 * decoding makes, so the distribution, the seed's stream and the output
 * stay those of plain decoding. The draft length k (0..SCHED_SPEC_K_MAX)
 * follows the sequence's acceptance rate per match length (sched.c
 * spec_k_for: the k that maximises expected tokens per unit of step cost,
 * each extra position costing about a fifth of a small step; 0 when drafts
 * do not pay, with a one-token probe now and then), capped by the step
 * budget, max_tokens, the context, and the blank KV blocks not needed by
 * the other running sequences' known tokens (drafts never preempt anyone
 * nor evict a cached prefix block). The step's logits rows grow to
 * spec_max_seqs x (1 + SCHED_SPEC_K_MAX). Off on the CUDA backend (its
 * logits depend on the pack, so drafts would change output).
 *
 * Thread: a sched and its callbacks run on the caller's thread; the model
 * context may use a kn_pool for the matmuls.
 */
#ifndef WORKER_SCHED_H
#define WORKER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "worker/engine/generate.h"

struct model;
struct tok;
struct kn_pool;
struct sched;

/* What one finished request produced; everything is borrowed for the
 * duration of the callback. */
struct sched_result {
    const char *id;              /* as given to sched_add */
    void *user;                  /* as given to sched_add */
    const struct gen_params *gp; /* the request's parameters */
    const struct gen_choice *choices; /* (n_choices) index = prompt_index * n + i */
    size_t n_choices;
    int64_t prompt_tokens;       /* usage: every prompt's tokens once */
    int64_t completion_tokens;
    int64_t cached_tokens;       /* prompt positions taken from the prefix cache */
    double queue_s;              /* added -> first sequence admitted */
    double prefill_s;            /* admitted -> first token sampled */
    double decode_s;             /* first token -> last sequence finished */
    double cpu_s;                /* share of the process CPU time of the steps it was in,
                                  * split by tokens computed */
};

/* Returns 0, or an error that aborts sched_step with it (the request then
 * stays in the scheduler until sched_free). */
typedef int (*sched_result_fn)(void *ctx, const struct sched_result *r);

struct sched_opts {
    int n_ctx;                   /* positions per sequence; 0 = model default (<= 4096);
                                  * lowered to what the KV budget holds */
    int max_batch_tokens;        /* tokens per forward step (default 512) */
    int max_seqs;                /* sequence slots (default 64) */
    size_t kv_mem_bytes;         /* K/V budget in bytes (default 256 MiB) */
    int no_prefix_cache;         /* 1: never share KV blocks */
    int swa_full;                /* model_ctx_params.swa_full: 1 keeps every position of
                                  * sliding-window layers (prefix caching on for them); 0 (default)
                                  * rings of window + max_batch_tokens - 1 positions per slot, paid
                                  * from kv_mem_bytes first, when that many positions per slot
                                  * at full size fit in kv_mem_bytes (then the rings hold more
                                  * tokens in flight than full blocks would); else as 1 */
    struct kn_pool *pool;        /* for the matmuls; NULL = caller's thread */
    int exact_matmul;            /* 1: the reference matmul (model_ctx_params.exact_matmul) */
    int device;                  /* model_ctx_params.device (KN_DEVICE_CPU = 0) */
    int spec;                    /* SCHED_SPEC_OFF (default) or SCHED_SPEC_AUTO: prompt-lookup
                                  * speculation while few sequences run (see above); ignored
                                  * on CUDA */
    int spec_max_seqs;           /* speculate while at most this many sequences run
                                  * (default SCHED_SPEC_MAX_SEQS) */
    int spec_k;                  /* 0 (default): draft lengths adapt to each sequence's
                                  * acceptance; 1..SCHED_SPEC_K_MAX: always draft this many
                                  * when a match exists (tests, benchmarks) */
    int kv_type;                 /* model_ctx_params.kv_type (MODEL_KV_DEFAULT = 0) */
    sched_result_fn on_result;   /* required */
    void *cb_ctx;
};

enum { SCHED_SPEC_OFF = 0, SCHED_SPEC_AUTO = 1 };
#define SCHED_SPEC_MAX_SEQS 2   /* default sched_opts.spec_max_seqs */
#define SCHED_SPEC_K_MAX 8      /* most drafted tokens per sequence and step */

void sched_opts_init(struct sched_opts *o);

/* Counters since sched_new. */
struct sched_stats {
    int64_t n_steps;
    int64_t n_requests;          /* finished */
    int64_t n_request_errors;    /* always 0 here: requests refused before sched_add are
                                  * counted by the caller (worker/run/request.h) */
    int64_t prompt_tokens;       /* prompt positions of every admission (choices, resumes) */
    int64_t prefill_computed;    /* prompt positions fed to the model */
    int64_t prefix_reused;       /* prompt positions taken from the prefix cache */
    int64_t decode_tokens;       /* generated tokens fed to the model the first time */
    int64_t recomputed;          /* generated tokens fed again after a preemption */
    int64_t output_tokens;       /* tokens sampled */
    int64_t n_preemptions;
    int64_t spec_steps;          /* sequence-steps that verified drafts */
    int64_t spec_drafted;        /* drafted tokens fed to the model */
    int64_t spec_accepted;       /* of them, accepted (their K/V kept, counted in decode_tokens) */
    int64_t n_cancelled;         /* requests dropped by sched_cancel */
    int64_t blocks_evicted;      /* cached blocks reused for other data */
    int kv_blocks;               /* pool size in blocks of KV_BLOCK_TOKENS positions */
    int n_ctx;
    double kv_util_avg;          /* mean over steps of used blocks / pool */
    double kv_util_peak;
    double wall_s;               /* time inside sched_step */
    double forward_s;            /* time inside model_forward */
    double mask_s;               /* time computing structured-output token masks */
    int64_t n_masks;             /* token masks computed (constrained sequence-steps) */
    double cpu_s;                /* process CPU time inside sched_step */
};

/* A scheduler over model m and its tokenizer t, which must outlive it.
 * Allocates the model context and KV pool. Returns 0 and *out (sched_free),
 * ERR_INVAL (bad options, no callback, a budget under two blocks),
 * ERR_TOOBIG, ERR_NOMEM. */
int sched_new(const struct model *m, const struct tok *t, const struct sched_opts *o,
              struct sched **out);

/* Free everything, dropping unfinished requests without callbacks (their
 * user_free is called). NULL ok. */
void sched_free(struct sched *s);

/* The context length (positions per sequence) the scheduler settled on:
 * prompts must be shorter, prompt + max_tokens no longer. */
int sched_n_ctx(const struct sched *s);

/* Queue request id (copied) with parameters *gp and the tokenized prompts
 * pr[0..n_pr) (each non-empty and within sched_n_ctx, as the caller
 * checked); each prompt gets gp->n choices. The scheduler takes ownership
 * of *gp (moved out: *gp is zeroed), of pr and its ids, and of user
 * (handed back in the result; user_free(user), when not NULL, is called
 * when the request leaves: finished, cancelled, withdrawn or freed),
 * whatever the return. Returns 0; ERR_INVAL (NULL arguments, n_pr 0, gp->n
 * < 1, or a stop string gen_seq_init refuses), ERR_TOOBIG (a prompt longer
 * than the context allows), ERR_NOMEM. May be called between steps: new
 * requests join the running pack. */
int sched_add(struct sched *s, const char *id, struct gen_params *gp, struct gen_prompt *pr,
              size_t n_pr, void *user, void (*user_free)(void *));

/* Drop request id (as given to sched_add) now, without a callback: its
 * waiting sequences leave the queue, its running ones stop and return their
 * KV blocks at once (published prompt blocks stay cached for others). For
 * a batch cancelled or a lease lost while the request runs. Call between
 * steps. Returns 0, ERR_INVAL (NULL arguments), ERR_NOTFOUND (not queued or
 * running: unknown, already finished or answered with an error). */
int sched_cancel(struct sched *s, const char *id);

/* Drop request id, as sched_cancel does, only if it has not started: none
 * of its sequences was ever admitted, so it computed nothing (it is not
 * counted as cancelled). For handing back requests queued here that a
 * draining worker will not run. Call between steps. Returns 0 (dropped),
 * ERR_BUSY (started: left alone), ERR_INVAL (NULL arguments), ERR_NOTFOUND
 * (not queued or running). */
int sched_withdraw(struct sched *s, const char *id);

/* One step: admit, run one forward pass, sample, finish. Returns 1 when it
 * did work, 0 when nothing is queued or running, or an engine error
 * (ERR_CORRUPT non-finite logits, ERR_NOMEM, ERR_INTERNAL), after which
 * the scheduler should be freed. */
int sched_step(struct sched *s);

/* sched_step until idle. Returns 0 or the first error. */
int sched_run(struct sched *s);

/* Sequences waiting / running now. */
int sched_n_waiting(const struct sched *s);
int sched_n_running(const struct sched *s);

void sched_get_stats(const struct sched *s, struct sched_stats *out);

/* The model context (tests: KV pool inspection). */
struct model_ctx *sched_model_ctx(struct sched *s);

#endif
