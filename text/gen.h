/*
 * gen.h - what one request asks the engine to generate, and what it got
 * back, as plain data: sampling parameters, stop strings, the output
 * grammar, tokenized prompts, and each finished choice with its logprob
 * records.
 *
 * The contract between the request front-end (openai/: a request body ->
 * struct gen_params and prompts; a choice -> a response body) and the
 * engine (worker/engine: sample.h, stop.h, generate.h run them), so that
 * jobd can validate a body with the same parser the worker runs it with
 * without linking the engine. Token level, no JSON. The prefixes are the
 * engine modules whose inputs these are (smp_ sampling, stop_ stop
 * strings, gen_ one request's sequences).
 *
 * Thread: any; plain data.
 */
#ifndef TEXT_GEN_H
#define TEXT_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/gram/gram.h"

/* ---- sampling (worker/engine/sample.h) ------------------------------------ */

#define SMP_MAX_TOP_LOGPROBS 20
#define SMP_GREEDY_EPS 1e-5
#define SMP_LOGPROB_FLOOR (-9999.0)

struct smp_bias {
    int32_t id;
    float bias;
};

/* Sampling parameters of one sequence (a subset of struct gen_params, so the
 * sampler does not depend on JSON). Neutral values: temperature 1, top_k 0,
 * top_p 1, min_p 0, penalties 0, repetition_penalty 1. */
struct smp_params {
    double temperature;          /* >= 0; < SMP_GREEDY_EPS = greedy */
    int64_t top_k;               /* 0 = off */
    double top_p;                /* (0, 1]; 1 = off */
    double min_p;                /* [0, 1]; 0 = off */
    double frequency_penalty;    /* [-2, 2] */
    double presence_penalty;     /* [-2, 2] */
    double repetition_penalty;   /* > 0; 1 = off */
    const struct smp_bias *bias; /* (n_bias) borrowed; ids must be < n_vocab */
    size_t n_bias;
    int n_top_logprobs;          /* -1: no logprobs; 0..SMP_MAX_TOP_LOGPROBS */
};

/* Neutral parameters (see above), logprobs off. Can't fail. */
void smp_params_init(struct smp_params *p);

/* What one step produced. */
struct smp_result {
    int32_t token;
    double logprob;                            /* raw logprob of token (if asked) */
    int n_top;                                 /* alternatives filled (0..20) */
    int32_t top_id[SMP_MAX_TOP_LOGPROBS];      /* logprob desc, id asc */
    double top_logprob[SMP_MAX_TOP_LOGPROBS];
};

/* ---- stop strings and finish reasons (worker/engine/stop.h) -------------- */

#define STOP_MAX 4                /* OpenAI: up to 4 stop sequences */
#define STOP_MAX_BYTES 1024       /* bytes in one stop string (our cap) */

enum stop_finish {
    STOP_NONE = 0,       /* still generating */
    STOP_FINISH_STOP,    /* EOG token or a stop string: finish_reason "stop" */
    STOP_FINISH_LENGTH,  /* max_tokens or the context limit: "length" */
};

/* "stop", "length", or NULL for STOP_NONE. Can't fail. */
const char *stop_finish_name(enum stop_finish f);

/* ---- one request (worker/engine/generate.h) ------------------------------ */

#define GEN_MARK_MAX 32           /* bytes in a lazy-grammar or thinking marker */
#define GEN_CLOSE_MAX 16          /* tokens of a forced thinking close */
#define GEN_THINK_CLOSE "\n</think>\n\n" /* the close a thinking budget forces (Qwen3's own) */
#define GEN_KEEP_MAX 4            /* control tokens one request may keep (keep_special) */

/* Generation parameters of one request (every choice of it). The request
 * parser (openai/params.h) fills them with OpenAI's defaults and
 * ranges; a gen_params owns its heap copies (gen_params_release). */
struct gen_params {
    int64_t max_tokens;          /* -1 = not given (context limit) */
    struct smp_params smp;       /* temperature, top_k/p, min_p, penalties, bias;
                                  * smp.n_top_logprobs: -1 off, else alternatives */
    struct smp_bias *bias;       /* owned; smp.bias points here */
    uint64_t seed;
    int seed_given;              /* 0: the scheduler derives the seed from the request id */
    char *stop[STOP_MAX];        /* owned, NUL-terminated copies */
    size_t stop_len[STOP_MAX];
    size_t n_stop;
    int logprobs;                /* 1 = keep logprob records */
    int n;                       /* choices per prompt */
    struct gram *grammar;        /* owned reference, or NULL: every choice's output is a
                                  * sentence of this grammar (structured outputs) */
    /* A lazy grammar (tool calls in "auto" mode, answers after a thinking
     * block): with gram_after and/or gram_trigger set, the output is free
     * until it contains gram_after (those bytes are not the grammar's),
     * then until it contains gram_trigger (those bytes are the grammar's
     * first: a tool call's start tag); from there on it is constrained.
     * Bytes the grammar refuses at that point drop it (the output stays
     * free and is returned as text). Both "" = the grammar applies from
     * the first token. */
    char gram_after[GEN_MARK_MAX + 1];
    char gram_trigger[GEN_MARK_MAX + 1];
    /* gram_trigger only at the start of the output (after gram_after, if
     * any; whitespace before it skipped): other first bytes leave the
     * output free for good. */
    int gram_trigger_at_start;
    /* Control tokens whose text is kept in the output, and which a grammar
     * may take where it allows their text (llama.cpp's preserved_tokens): a
     * tool format's markers that the vocabulary makes control tokens
     * (Mistral's [TOOL_CALLS], [ARGS], [CALL_ID]). Other control tokens
     * give no text and are never in a grammar's mask. Texts of tokens that
     * are not control tokens, or not in the vocabulary, are ignored; ""
     * ends the list. */
    char keep_special[GEN_KEEP_MAX][GEN_MARK_MAX + 1];
    /* The end of a thinking block ("</think>"; "" = none): the tokens up to
     * and including the one that completes it are the choice's reasoning
     * tokens (gen_choice.n_reason). */
    char think_end[GEN_MARK_MAX + 1];
    /* A thinking budget (thinking_token_budget; Anthropic's budget_tokens):
     * with n_think_close > 0, once think_budget tokens have been generated
     * and the thinking block is still open (think_end not seen), the tokens
     * think_close[0..n_think_close) are forced, one per step, as the next
     * tokens (the model's own close, "\n</think>\n\n", tokenized by the
     * worker); the answer follows freely. A token that would complete a
     * character held back by the decoder is waited for first (at most 3).
     * n_think_close 0 = no budget (think_budget is then not read). */
    int64_t think_budget;        /* >= 0 */
    int32_t think_close[GEN_CLOSE_MAX];
    size_t n_think_close;
};

/* Free the stop strings and the bias, and zero p. NULL ok. */
void gen_params_release(struct gen_params *p);

/* One tokenized prompt. */
struct gen_prompt {
    int32_t *ids;    /* (n) owned */
    size_t n;
};

/* Free prompts p[0..n) and the array. NULL ok. */
void gen_prompts_free(struct gen_prompt *p, size_t n);

/* Logprob record of one generated token that is part of the returned text. */
struct gen_lp {
    struct smp_result r;    /* token, its logprob, the top alternatives */
    size_t text_offset;     /* byte offset of the token's text in the choice text */
};

/* What one finished sequence produced (pointers borrowed from its gen_seq). */
struct gen_choice {
    const char *text;           /* UTF-8, text_len bytes */
    size_t text_len;
    enum stop_finish finish;    /* STOP_FINISH_STOP or STOP_FINISH_LENGTH */
    const struct gen_lp *lp;    /* (n_lp); kept when gen_params.logprobs */
    size_t n_lp;
    const char *stop;           /* the stop string that ended it (borrowed from
                                 * gen_params.stop, stop_len bytes), NULL: none */
    size_t stop_len;
    size_t n_reason;            /* generated tokens inside the thinking block
                                 * (gen_params.think_end), all of them when it
                                 * never ended; 0 without think_end */
};

#endif
