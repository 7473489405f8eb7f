/* engine.c - model, tokenizer, chat template and thread pool brought up
 * once for every front-end (see engine.h). */
#include "worker/engine/engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/log.h"
#include "kernels/kn.h"
#include "text/chat.h"
#include "worker/engine/model.h"
#include "worker/engine/sched.h"
#include "text/tok.h"

int engine_open(const struct engine_opts *o, struct engine **out, char *err, size_t err_len)
{
    int rc;
    if (!o || !o->model_path || !out) {
        snprintf(err, err_len, "no model given");
        return ERR_INVAL;
    }
    if (o->device != KN_DEVICE_CPU && o->device != KN_DEVICE_CUDA) {
        snprintf(err, err_len, "unknown device %d", o->device);
        return ERR_INVAL;
    }
    struct engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_len, "out of memory");
        return ERR_NOMEM;
    }
    e->o = *o;
    if ((rc = model_load(o->model_path, &e->model, err, err_len)) != 0)
        goto out;
    if ((rc = model_tokenizer(e->model, &e->tok, err, err_len)) != 0)
        goto out;
    if ((e->tmpl_rc = model_chat_tmpl(e->model, e->tok, &e->tmpl)) != 0 || !e->tmpl) {
        e->tmpl = NULL;
        if (!e->tmpl_rc)
            e->tmpl_rc = ERR_UNSUPPORTED;
    } else if (chat_tmpl_why(e->tmpl)[0]) {
        log_warn("the model's chat template does not parse (%s); chat prompts use the built-in "
                 "'%s' format", chat_tmpl_why(e->tmpl), chat_format_name(chat_tmpl_format(e->tmpl)));
    }
    if ((rc = kn_pool_new(o->threads, &e->pool)) != 0) {
        snprintf(err, err_len, "cannot start the thread pool: %s", err_msg(rc));
        goto out;
    }
    *out = e;
    e = NULL;
out:
    engine_close(e);
    return rc;
}

void engine_close(struct engine *e)
{
    if (!e)
        return;
    kn_pool_free(e->pool);
    chat_tmpl_free(e->tmpl);
    tok_free(e->tok);
    model_free(e->model);
    free(e);
}

void engine_sched_opts(const struct engine *e, struct sched_opts *so)
{
    sched_opts_init(so);
    if (e->o.max_batch_tokens > 0)
        so->max_batch_tokens = e->o.max_batch_tokens;
    if (e->o.max_seqs > 0)
        so->max_seqs = e->o.max_seqs;
    if (e->o.kv_mem_bytes > 0)
        so->kv_mem_bytes = e->o.kv_mem_bytes;
    so->n_ctx = e->o.n_ctx;
    so->no_prefix_cache = e->o.no_prefix_cache;
    so->swa_full = e->o.swa_full;
    if (e->o.spec_off)
        so->spec = SCHED_SPEC_OFF;
    if (e->o.spec_max_seqs > 0)
        so->spec_max_seqs = e->o.spec_max_seqs;
    so->pool = e->pool;
    so->exact_matmul = e->o.exact_matmul;
    so->device = e->o.device;
    so->kv_type = e->o.kv_type;
}

void engine_ctx_params(const struct engine *e, struct model_ctx_params *p)
{
    model_ctx_params_init(p);
    p->n_ctx = e->o.n_ctx;
    p->pool = e->pool;
    p->exact_matmul = e->o.exact_matmul;
    p->device = e->o.device;
    p->swa_full = e->o.swa_full;
    p->kv_type = e->o.kv_type;
}
