/*
 * oneshot.h - one request without jobd (`jobworker --model M.gguf --prompt
 * TEXT | --chat TEXT | --json BODY.json`), and the engine benchmark
 * (`jobworker --bench`).
 *
 * oneshot_run opens the engine (engine_open), creates a context with one sequence slot on
 * a thread pool of `threads` threads, and runs one OpenAI request through
 * the sequential driver (worker/run/request.h oreq_run over
 * worker/engine/generate.h gen_run): full sampling
 * (temperature, top_p, top_k, seed, stop strings, n choices, logprobs...).
 * --prompt/--chat build the request body from the flags (a completions body
 * {"prompt": TEXT} or a chat body with one user message; flags left unset
 * stay absent, so OpenAI's defaults apply - temperature 1 - except
 * max_tokens, which the CLI defaults to 256); --json takes the body from a
 * file ("messages" present = /v1/chat/completions; "input" with a field
 * only Responses bodies have - instructions, max_output_tokens, text, tools,
 * reasoning, temperature... - or with input items = /v1/responses, printed
 * as the Response object; else /v1/completions).
 *
 * The next-logits callback keeps the KV cache of the slot: it remembers the
 * ids already in the cache, keeps their longest common prefix with the
 * requested ids, rewinds the cache to it (kv_seq_truncate) and feeds only
 * the new tokens, in chunks of at most n_batch_max (so a decode step feeds
 * one token, and choice 2 of n=2 reuses the prompt of choice 1, feeding
 * just its last token again to get its logits).
 *
 * --embed TEXT (or a --json body with "input", neither "messages" nor
 * "prompt", and nothing of a Responses body) is an /v1/embeddings request instead (worker/run/embed_req.h):
 * no generation, one forward per input on an embeddings context of 16
 * slots and 512 tokens a step; it prints the embedding response body (one
 * line of JSON) and on errout "embed: N tokens, S s (R tok/s)".
 *
 * Output: --json prints the exact OpenAI response body (one line of JSON)
 * on out; --prompt/--chat print the text of each choice followed by a
 * newline. A summary with the prompt and decode speeds goes to errout:
 *   prompt: 12 tokens, 0.21 s (57.1 tok/s); decode: 64 tokens, 3.10 s (20.6 tok/s)
 * where "prompt" counts the tokens fed by the first call of each choice and
 * "decode" the others. A request error (bad parameter, prompt longer than
 * the context) is an OpenAI error body on out for --json, and the error
 * message in err in both cases (ERR_INVAL).
 *
 * Runs on the caller's thread plus the pool's threads.
 */
#ifndef WORKER_ONESHOT_H
#define WORKER_ONESHOT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "worker/engine/stop.h"

#define ONESHOT_MAX_BODY_BYTES (16u << 20)  /* --json file cap */

struct oneshot_opts {
    const char *model_path;
    const char *text;          /* --prompt / --chat text, or NULL with json_path */
    int chat;                  /* 1: text is a user message for the chat template */
    int embed;                 /* 1: text is the input of an /v1/embeddings body (--embed) */
    const char *json_path;     /* request body file (instead of text) */
    int64_t max_tokens;        /* --prompt/--chat: tokens to generate at most (> 0) */
    int has_temperature, has_top_p, has_top_k, has_seed;
    double temperature, top_p;
    int64_t top_k, seed;
    const char *stop[STOP_MAX];
    size_t n_stop;
    int64_t n;                 /* choices (0 = absent) */
    int threads;               /* pool threads; <= 0: one per online CPU */
    int n_ctx;                 /* context length; 0 = the model's, capped at 4096 */
    int exact;                 /* 1: reference matmul (model_ctx_params.exact_matmul) */
    int device;                /* model_ctx_params.device (KN_DEVICE_CPU = 0) */
    int kv_type;               /* model_ctx_params.kv_type (enum model_kv_type; 0 = default) */
    int print_ids;             /* 1: also print each choice's prompt and completion ids on
                                * errout ("prompt ids: 1 2 3" / "completion ids: 4 5";
                                * the completion ids stop before an end-of-generation token) */
};

/* Run it. Returns 0, or an error with a one-line message in err: the
 * model's load errors, ERR_INVAL (a request error: parameter, empty prompt,
 * prompt or prompt + max_tokens longer than the context), ERR_UNSUPPORTED
 * (--chat without a template), ERR_IO (reading the body or writing out
 * failed), ERR_TOOBIG (body file too large), ERR_NOMEM. */
int oneshot_run(const struct oneshot_opts *o, FILE *out, FILE *errout, char *err, size_t err_len);

struct oneshot_bench_opts {
    const char *model_path;
    int threads;               /* as in oneshot_opts */
    int n_prompt_repeat;       /* the prompt is "The quick brown fox jumps over the lazy dog. "
                                * this many times (tests/bench/llamacpp_decode.py uses 6) */
    int n_decode;              /* greedy tokens to decode, end-of-generation ignored */
    int exact;
    int device;                /* model_ctx_params.device (KN_DEVICE_CPU = 0) */
    int kv_type;               /* model_ctx_params.kv_type (enum model_kv_type; 0 = default) */
};

/* The engine benchmark: prefill the prompt in one step, then decode
 * n_decode tokens one step each (argmax), and print one line on out:
 *   threads 2: prefill 61 tok 512.3 tok/s, decode 128 tok 130.2 tok/s
 * (the format of tests/bench/llamacpp_decode.py). Returns 0 or an error
 * with a message in err. */
int oneshot_bench(const struct oneshot_bench_opts *o, FILE *out, char *err, size_t err_len);

#endif
