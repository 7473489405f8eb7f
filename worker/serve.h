/*
 * serve.h - `jobworker --jobd URL --model M.gguf`: the worker process that
 * serves jobd (spec/worker-protocol.md).
 *
 * Two threads share one lock-protected table of leased requests:
 *   - the engine thread (the caller's) owns the scheduler (worker/engine/sched.h)
 *     and steps it without pause: every leased request is fed to it at
 *     once, as `--batch-file` does, so the scheduler orders the whole pack
 *     and admits from it as slots and KV blocks free up - requests of the
 *     next pack join the running batch the moment they arrive (continuous
 *     batching across packs: the CPU never idles between packs). (Feeding
 *     only a few at a time in lease order made the jobd path run a
 *     different, worse schedule than --batch-file: at 128 requests x 128
 *     tokens, 11 preemptions, 3.8k positions recomputed and a thin tail.)
 *     A fed request that has not started (no sequence admitted yet) is
 *     still released untouched on a drain (sched_withdraw) and dropped on
 *     a cancel (sched_cancel). Each
 *     finished request becomes one results line (response body or
 *     invalid_request error, usage, timings) in the outbox (worker/client.h).
 *   - the communication thread registers, leases the next pack while fewer
 *     than pack_size/2 wait for a slot (leased requests not fed plus the
 *     scheduler's waiting sequences; long-poll when idle),
 *     heartbeats every live lease every lease_seconds/3 (so a long request
 *     never lets its lease lapse), uploads the outbox as zstd JSONL chunks
 *     (kept until acknowledged: jobd being down or restarting loses
 *     nothing, the upload is retried with backoff), releases what it will
 *     not run, and obeys the `cancelled` ids of heartbeat answers: a
 *     cancelled request not started yet is released and never run, one
 *     running is released and its result dropped, one finished is still
 *     uploaded. A lease that jobd reports gone (404 / 409) drops its
 *     requests (they belong to someone else now).
 *
 * Model id: --model-id, else the GGUF's general.name, else the file name
 * without directory and ".gguf"; aliases are registered with it. Requests
 * are routed by jobd on those names, and responses echo the body's model.
 *
 * Endpoint: a lease item carries the line's body and its `url` (the
 * batch's endpoint): /v1/chat/completions or /v1/completions (through the
 * scheduler), /v1/responses (the same, on the chat path: openai/responses.h
 * translates the body in and the chat.completion out; declared only when the
 * model has a chat template), or /v1/embeddings (answered at once on the engine thread by
 * worker/run/embed_req.h on an embeddings context of 16 slots and 512
 * tokens a step, made on first use - CPU only; no generation, one forward
 * per input, a request's inputs packed together); any other url
 * becomes an invalid_request result with code "invalid_url". An item
 * without a url (an older jobd) runs as a chat completion when its body has
 * "messages" or no "prompt", else as a completion (jobd validated each line
 * against the batch's endpoint at submission).
 *
 * Seeds: a request without "seed" is sampled with a seed derived from its
 * request id (FNV-1a, worker/engine/sched.c), so a retried lease - on this worker
 * or another one - reproduces the same text.
 *
 * Drain: when *o->stop becomes non-zero (SIGTERM/SIGINT), no more leases
 * are asked for, requests not started (leased, or waiting in the scheduler
 * without ever being admitted) are released at once, running ones
 * get drain_timeout_ms to finish; then what is still running is released,
 * every finished result is uploaded, and serve_run returns 0. A crash
 * leaves the leases to lapse (jobd's sweeper requeues their requests).
 *
 * Logs: one info line per finished lease (pack) with its request count and
 * tokens per second; warnings while jobd is unreachable.
 */
#ifndef WORKER_SERVE_H
#define WORKER_SERVE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct model;

struct serve_opts {
    const char *jobd_url;           /* required */
    const char *token;              /* worker token or NULL */
    const char *model_path;         /* required */
    const char *model_id;           /* NULL = derived (see above) */
    const char *const *aliases;     /* extra names requests may use */
    size_t n_aliases;
    const char *name;               /* NULL = "<host>/<pid>/<device>" */
    const char *device;             /* "cpu" or "cuda" (model_ctx_params.device) */
    int threads;                    /* kernel threads; <= 0: one per CPU */
    int pack_size;                  /* requests per lease; 0 = 64 */
    int lease_seconds;              /* 0 = 120 */
    int64_t drain_timeout_ms;       /* < 0 = 30000 */
    int max_batch_tokens, max_seqs; /* scheduler; 0 = its defaults */
    size_t kv_mem_bytes;            /* 0 = scheduler default */
    int n_ctx;                      /* 0 = scheduler default */
    int no_prefix_cache;
    int swa_full;                   /* sched_opts.swa_full */
    int spec_off;                   /* 1: no speculation (sched_opts.spec) */
    int spec_max_seqs;              /* sched_opts.spec_max_seqs; 0 = its default */
    int kv_type;                    /* sched_opts.kv_type (enum model_kv_type; 0 = default) */
    int64_t hourly_cost_micros;     /* declared to jobd at registration (fleet cost) */
    int hourly_cost_declared;       /* 1: declare hourly_cost_micros even when 0 (--hourly-cost 0);
                                     * 0: declare it only when > 0 (none: jobd's class, else unpriced) */
    volatile sig_atomic_t *stop;    /* set non-zero to drain; required */
};

/* The model id of m loaded from path (see the file comment) into out.
 * Returns 0 or ERR_TOOBIG (out_len too small for the file name). */
int serve_model_id(const struct model *m, const char *path, char *out, size_t out_len);

/* Serve jobd until *o->stop (then drain) or a fatal engine error. Returns 0
 * after a clean drain; ERR_INVAL (bad options), model load / scheduler
 * errors, or the engine's error (after releasing what it held), with a
 * one-line message in err. */
int serve_run(const struct serve_opts *o, char *err, size_t err_len);

#endif
