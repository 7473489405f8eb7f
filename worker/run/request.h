/*
 * request.h - OpenAI request bodies through the token-level engine and
 * back: one request run by the sequential driver (oreq_run), and a pack
 * of requests run by the batched scheduler (struct oreq_sched), each
 * answered with its chat.completion / text_completion body (response.h) or
 * an OpenAI error body. A /v1/responses body (GP_RESPONSES) is translated
 * onto a chat body by openai/responses.h, runs as chat, and is answered
 * with the Response object built from its chat.completion (a refusal names
 * the Responses field).
 *
 * Prompts are built by openai/prompt.h (the code jobd counts tokens with).
 *
 * The scheduler wrapper keeps, per request, what the response body needs
 * and the engine does not know (endpoint, model name), as the request's
 * user data in the scheduler; requests refused before they reach the
 * scheduler (bad parameters, no chat template, prompt too long) are
 * answered at once through the callback with status 400 and counted in the
 * stats as requests and request errors, as the scheduler counts the ones
 * it finishes.
 *
 * Thread: an oreq_sched and its callbacks run on the caller's thread, like
 * the scheduler; oreq_run is reentrant.
 */
#ifndef WORKER_RUN_REQUEST_H
#define WORKER_RUN_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "openai/prompt.h"
#include "text/chat.h"
#include "worker/engine/generate.h"
#include "worker/engine/sched.h"
#include "text/tok.h"
#include "openai/params.h"

struct model;

/* ---- prompts and the sequential driver ------------------------------------ */

struct oreq_model {
    const struct tok *t;
    const struct chat_tmpl *tmpl;      /* for chat requests; NULL: none */
    size_t n_ctx;                      /* context length in tokens */
    const char *model_name;            /* echoed as "model" (oreq_run) */
    const char *system_fingerprint;    /* NULL -> null */
    gen_logits_fn next_logits;         /* oreq_run only */
    void *ctx;
};

/* Optional overrides (tests, deterministic ids); NULL = none. */
struct oreq_opts {
    const char *id;          /* response id */
    int64_t created;         /* 0 = now */
    gen_done_fn on_done;     /* each finished choice; NULL = none (see gen_run) */
    void *on_done_ctx;
};

/* Run one request body for endpoint ep (GP_CHAT, GP_COMPLETIONS or
 * GP_RESPONSES): parse parameters, build and
 * tokenize the prompt(s), generate every choice (gen_run: one after the
 * other, each to its end), and build the response body. Returns 0 and
 * *response (new reference, the 200 body); ERR_INVAL with *err filled for a
 * request error (send gp_error_json(err) with status 400); or another error
 * (the callbacks', ERR_NOMEM, ERR_CORRUPT from non-finite logits...). */
int oreq_run(const struct oreq_model *m, enum gp_endpoint ep, const json_t *body,
             const struct oreq_opts *opts, json_t **response, struct problem *err);

/* ---- a pack of requests through the scheduler ------------------------------ */

/* What one request produced; everything is borrowed for the duration of
 * the callback. */
struct oreq_result {
    const char *id;              /* as given to oreq_sched_add */
    int status;                  /* 200, or 400 for a request error */
    const json_t *body;          /* chat.completion / text_completion / response, or {"error":{...}} */
    int64_t prompt_tokens;       /* usage (0 for errors) */
    int64_t completion_tokens;
    int64_t cached_tokens;       /* prompt positions taken from the prefix cache */
    double queue_s;              /* added -> first sequence admitted */
    double prefill_s;            /* admitted -> first token sampled */
    double decode_s;             /* first token -> last sequence finished */
    double cpu_s;                /* share of the process CPU time of the steps it was in */
};

typedef void (*oreq_result_fn)(void *ctx, const struct oreq_result *r);

struct oreq_sched_opts {
    const char *model_name;      /* "model" of responses whose body has none */
    oreq_result_fn on_result;    /* required */
    void *cb_ctx;
};

struct oreq_sched;

/* A scheduler (sched_new with so; its on_result and cb_ctx are this
 * wrapper's) over model m, tokenizer t and chat template tmpl (NULL: chat
 * requests get a 400), which must outlive it. Returns 0 and *out
 * (oreq_sched_free), sched_new's errors, ERR_INVAL (no callback), ERR_NOMEM. */
int oreq_sched_new(const struct model *m, const struct tok *t, const struct chat_tmpl *tmpl,
                   const struct sched_opts *so, const struct oreq_sched_opts *oo,
                   struct oreq_sched **out);

/* Free the scheduler and the wrapper. NULL ok. */
void oreq_sched_free(struct oreq_sched *os);

/* The scheduler inside, for sched_step / sched_run / sched_cancel /
 * sched_withdraw / sched_n_waiting ... (request ids are the same). */
struct sched *oreq_sched_engine(struct oreq_sched *os);

/* Queue request id (copied) for endpoint ep (GP_CHAT, GP_COMPLETIONS or
 * GP_RESPONSES) with body (read during the call only). A request error (bad parameters, empty or too long prompt,
 * chat without a template) is answered at once through the callback with
 * status 400, and returns 0. Returns 0, ERR_INVAL (NULL arguments),
 * ERR_NOMEM, ERR_CRYPTO, ERR_TOOBIG. May be called between steps: new
 * requests join the running pack. */
int oreq_sched_add(struct oreq_sched *os, const char *id, enum gp_endpoint ep,
                   const json_t *body);

/* sched_get_stats, with the requests answered with a 400 here added to
 * n_requests and n_request_errors. */
void oreq_sched_get_stats(const struct oreq_sched *os, struct sched_stats *out);

#endif
