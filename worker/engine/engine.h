/*
 * engine.h - one model brought up for serving: the GGUF model, its
 * tokenizer and chat template, the kernel thread pool, the device, and the
 * scheduler's sizes (KV budget, slots, tokens per step). Every front-end
 * (serve, batchrun, oneshot) opens its engine here, so the bring-up and its
 * error messages exist once.
 *
 * engine_open loads, in order: the model (model_load: the file, validated),
 * its tokenizer (model_tokenizer), its chat template (model_chat_tmpl; a
 * model without a usable one still opens: tmpl is NULL and tmpl_rc says
 * why, and chat requests are then refused by whoever needs the template),
 * the thread pool (kn_pool_new). The device and the scheduler's sizes are
 * only recorded: the model context (and on CUDA the device memory) is
 * created by the scheduler (sched_new with engine_sched_opts) or by the
 * caller (model_ctx_new with engine_ctx_params), with the sizes it needs.
 *
 * Thread: an engine is opened and closed on one thread; the model,
 * tokenizer and template are immutable and may be read from any thread;
 * the pool is used by one model context at a time.
 */
#ifndef WORKER_ENGINE_H
#define WORKER_ENGINE_H

#include <stddef.h>

struct model;
struct tok;
struct chat_tmpl;
struct kn_pool;
struct model_ctx_params;
struct sched_opts;

struct engine_opts {
    const char *model_path;   /* required: the GGUF file */
    int device;               /* enum kn_device: KN_DEVICE_CPU (0) or KN_DEVICE_CUDA */
    int threads;              /* kernel threads; <= 0: one per online CPU */
    int exact_matmul;         /* 1: the reference matmul (model_ctx_params.exact_matmul) */
    /* the scheduler's sizes (sched_opts); 0 = its defaults */
    int n_ctx;                /* positions per sequence */
    int max_batch_tokens;     /* tokens per forward step */
    int max_seqs;             /* sequence slots */
    size_t kv_mem_bytes;      /* K/V budget in bytes */
    int no_prefix_cache;      /* 1: never share KV blocks */
    int swa_full;             /* 1: sliding-window layers keep every position (sched_opts.swa_full) */
    int spec_off;             /* 1: no speculation (sched_opts.spec SCHED_SPEC_OFF) */
    int spec_max_seqs;        /* sched_opts.spec_max_seqs; 0 = its default */
    int kv_type;              /* model_ctx_params.kv_type (enum model_kv_type; 0 = default) */
};

struct engine {
    struct engine_opts o;     /* as opened (model_path borrowed from the caller) */
    struct model *model;
    struct tok *tok;
    struct chat_tmpl *tmpl;   /* NULL: the model has no usable chat template */
    int tmpl_rc;              /* why tmpl is NULL (model_chat_tmpl's error), else 0 */
    struct kn_pool *pool;
};

/* Open the engine described by o (o->model_path is borrowed and must
 * outlive the engine). Returns 0 and *out (engine_close), or with a
 * one-line message in err: model_load's errors (ERR_IO, ERR_PARSE,
 * ERR_CORRUPT, ERR_UNSUPPORTED...), model_tokenizer's, kn_pool_new's,
 * ERR_INVAL (NULL arguments, an unknown device), ERR_NOMEM. */
int engine_open(const struct engine_opts *o, struct engine **out, char *err, size_t err_len);

/* Free everything engine_open made. Contexts and schedulers over it must
 * be freed first. NULL ok. */
void engine_close(struct engine *e);

/* Scheduler options from the engine: its sizes, pool, device and matmul;
 * the caller sets on_result and cb_ctx (or lets worker/run/request.h's
 * oreq_sched_new set them). Can't fail. */
void engine_sched_opts(const struct engine *e, struct sched_opts *so);

/* Model context parameters from the engine: pool, device, matmul, and
 * n_ctx (the engine's, 0 = the model's default); the caller sets the batch
 * sizes. Can't fail. */
void engine_ctx_params(const struct engine *e, struct model_ctx_params *p);

#endif
