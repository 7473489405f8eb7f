/*
 * batchrun.h - `jobworker --model M.gguf --batch-file requests.jsonl`: run
 * an OpenAI batch input file through the scheduler without jobd (offline
 * runs and the engine benchmark).
 *
 * Input: one JSON object per line, {"custom_id","method","url","body"}
 * (spec/jsonl.md); url /v1/chat/completions, /v1/completions or
 * /v1/responses (worker/run/request.h). Output on
 * out: one line per request, as jobd's output file has them, in finishing
 * order:
 *   {"id":"batch_req_<line>","custom_id":...,"response":{"status_code":200,
 *    "request_id":"req_<line>","body":{...}},"error":null}
 * A request error (bad parameters, prompt too long) is a response with
 * status_code 400 and an OpenAI error body; a line that cannot be read
 * (not JSON, no custom_id, unknown url) is {"response":null,"error":{...}}.
 * At the end one line goes to errout:
 *   sched-stats: {"requests":..,"prompt_tokens":..,"completion_tokens":..,
 *                 "wall_s":..,"output_tok_s":..,"total_tok_s":..,...}
 * The whole file is queued before the first step (static batching of the
 * pack), then the scheduler runs it to the end.
 * Thread: the caller's (plus the kernel thread pool).
 */
#ifndef WORKER_BATCHRUN_H
#define WORKER_BATCHRUN_H

#include <stddef.h>
#include <stdio.h>

struct batchrun_opts {
    const char *model_path;
    const char *batch_file;
    int threads;              /* kernel threads; <= 0: one per CPU */
    int max_batch_tokens;     /* 0 = scheduler default */
    int max_seqs;             /* 0 = scheduler default */
    size_t kv_mem_bytes;      /* 0 = scheduler default */
    int n_ctx;                /* 0 = scheduler default */
    int no_prefix_cache;
    int exact_matmul;         /* 1: the reference matmul (jobworker --exact) */
    int device;               /* model_ctx_params.device (KN_DEVICE_CPU = 0) */
    int swa_full;             /* sched_opts.swa_full (jobworker --swa-full) */
    int spec_off;             /* 1: no speculation (jobworker --spec off) */
    int spec_max_seqs;        /* sched_opts.spec_max_seqs (--spec-max-seqs); 0 = default */
    int kv_type;              /* sched_opts.kv_type (jobworker --kv-type) */
};

/* Run it. Returns 0, or an error with a one-line message in err: model
 * load errors, ERR_IO (the file cannot be read, out cannot be written),
 * engine errors, ERR_NOMEM. */
int batchrun_file(const struct batchrun_opts *o, FILE *out, FILE *errout, char *err,
                  size_t err_len);

#endif
