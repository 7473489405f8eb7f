/* request.c - OpenAI request bodies through the token-level engine (see
 * request.h). */
#include "worker/run/request.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "worker/engine/model.h"
#include "openai/prompt.h"
#include "openai/response.h"
#include "openai/responses.h"

/* ---- /v1/responses: in through the chat path, out as a Response ------------------ */

/* A Responses body's settings, echoed in its Response: a deep copy of every
 * member but the input (which the Response does not echo). NULL on no memory. */
static json_t *responses_settings(const json_t *body)
{
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        if (o && strcmp(k, "input") != 0 && json_object_set_new(o, k, json_deep_copy(v))) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* The answer body: the chat.completion cc as it is, or for a Responses
 * request (settings not NULL) the Response built from it, whose
 * usage.input_tokens_details.cached_tokens is the prompt positions taken
 * from the prefix cache (cached; handed over as the chat usage's
 * prompt_tokens_details, which oresp_from_chat reads). Takes cc. */
static int answer_body(const json_t *settings, json_t *cc, int64_t cached, json_t **out)
{
    if (!settings) {
        *out = cc;
        return 0;
    }
    json_t *u = json_object_get(cc, "usage");
    if (u && json_object_set_new(u, "prompt_tokens_details",
                                 json_pack("{s:I}", "cached_tokens", (json_int_t)cached))) {
        json_decref(cc);
        return ERR_NOMEM;
    }
    int rc = oresp_from_chat(settings, cc, out);
    json_decref(cc);
    return rc;
}

/* ---- the sequential driver ------------------------------------------------ */

int oreq_run(const struct oreq_model *m, enum gp_endpoint ep, const json_t *body,
             const struct oreq_opts *opts, json_t **response, struct problem *err)
{
    struct gp_request gp;
    struct gen_prompt *pr = NULL;
    struct gen_seq *seqs = NULL;
    struct gen_choice *ch = NULL;
    size_t n_pr = 0, n_seq = 0, n_done = 0;
    int rc;

    json_t *chat = NULL, *settings = NULL;
    if (!m || !m->t || !m->next_logits || !body || !response || m->n_ctx == 0)
        return ERR_INVAL;
    memset(&gp, 0, sizeof gp);
    if (ep == GP_RESPONSES) {
        if ((rc = oresp_to_chat(body, &chat, err)) != 0)
            return rc;
        if (!(settings = responses_settings(body))) {
            json_decref(chat);
            return ERR_NOMEM;
        }
        body = chat;
        ep = GP_CHAT;
    }
    if ((rc = gp_parse(body, ep, tok_n_vocab(m->t), &gp, err)) != 0)
        goto out;
    struct prompt_model pm = {m->t, m->tmpl, m->n_ctx};
    if ((rc = prompt_build(&pm, ep, body, &gp, &pr, &n_pr, err)) != 0 ||
        (rc = prompt_arm(&pm, &gp, err)) != 0)
        goto out;
    n_seq = n_pr * (size_t)gp.gen.n;
    seqs = calloc(n_seq, sizeof *seqs);
    ch = calloc(n_seq, sizeof *ch);
    if (!seqs || !ch) {
        rc = ERR_NOMEM;
        goto out;
    }
    struct gen_model gm = {m->t, m->n_ctx, m->next_logits, m->ctx};
    if ((rc = gen_run(&gm, &gp.gen, pr, n_pr, opts ? opts->on_done : NULL,
                      opts ? opts->on_done_ctx : NULL, seqs)) != 0)
        goto out;
    n_done = n_seq;

    struct resp_meta meta;
    memset(&meta, 0, sizeof meta);
    for (size_t i = 0; i < n_pr; i++)
        meta.prompt_tokens += (int64_t)pr[i].n;
    for (size_t i = 0; i < n_seq; i++) {
        meta.completion_tokens += (int64_t)seqs[i].n_gen;
        if ((rc = gen_seq_choice(&seqs[i], &ch[i])) != 0)
            goto out;
    }
    meta.id = opts ? opts->id : NULL;
    meta.created = opts ? opts->created : 0;
    meta.model = m->model_name;
    meta.system_fingerprint = m->system_fingerprint;
    meta.logprobs = gp.gen.logprobs;
    if (ep == GP_CHAT && m->tmpl) {
        meta.tools = &gp.tools;
        meta.tool_fmt = chat_tmpl_tool_format(m->tmpl);
        meta.think = gp.gen.think_end[0] != 0;
    }
    json_t *built = NULL;
    rc = ep == GP_CHAT ? resp_chat_build(&meta, ch, n_seq, m->t, &built)
                       : resp_completion_build(&meta, ch, n_seq, m->t, &built);
    if (rc == 0)
        rc = answer_body(settings, built, 0, response); /* a fresh context: nothing cached */
out:
    if (rc == ERR_INVAL && settings)
        oresp_problem_from_chat(err);
    json_decref(chat);
    json_decref(settings);
    for (size_t i = 0; i < n_done; i++)
        gen_seq_release(&seqs[i]);
    gen_prompts_free(pr, n_pr);
    free(seqs);
    free(ch);
    gp_release(&gp);
    return rc;
}

/* ---- the scheduler wrapper ---------------------------------------------------- */

struct oreq_sched {
    struct sched *s;
    const struct tok *t;
    const struct chat_tmpl *tmpl;
    size_t n_vocab;              /* the model's: bounds token ids in bodies */
    struct oreq_sched_opts o;
    int64_t n_refused;           /* answered with a 400 before the scheduler */
};

/* A request's user data in the scheduler: what its response body needs. */
struct oreq_item {
    enum gp_endpoint ep;         /* GP_CHAT or GP_COMPLETIONS: what the engine runs */
    char *model;                 /* the body's "model", else the default name */
    struct gp_tools tools;       /* chat: the request's tools (moved from its gp_request) */
    enum chat_tool_format tool_fmt;
    int think;
    json_t *settings;            /* a Responses request's settings (responses_settings), else NULL */
};

static void item_free(void *p)
{
    struct oreq_item *it = p;
    if (!it)
        return;
    gp_tools_release(&it->tools);
    free(it->model);
    json_decref(it->settings);
    free(it);
}

/* sched_result_fn: the response body of a finished request to the caller. */
static int on_sched_result(void *ctx, const struct sched_result *r)
{
    struct oreq_sched *os = ctx;
    const struct oreq_item *it = r->user;
    json_t *body = NULL;
    struct resp_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.model = it->model;
    meta.prompt_tokens = r->prompt_tokens;
    meta.completion_tokens = r->completion_tokens;
    meta.logprobs = r->gp->logprobs;
    meta.tools = &it->tools;
    meta.tool_fmt = it->tool_fmt;
    meta.think = it->think;
    json_t *built = NULL;
    int rc = it->ep == GP_CHAT ? resp_chat_build(&meta, r->choices, r->n_choices, os->t, &built)
                               : resp_completion_build(&meta, r->choices, r->n_choices, os->t,
                                                       &built);
    if (rc == 0)
        rc = answer_body(it->settings, built, r->cached_tokens, &body);
    if (rc)
        return rc;
    struct oreq_result res = {r->id,          200,          body,         r->prompt_tokens,
                              r->completion_tokens, r->cached_tokens, r->queue_s,
                              r->prefill_s,   r->decode_s,  r->cpu_s};
    os->o.on_result(os->o.cb_ctx, &res);
    json_decref(body);
    return 0;
}

/* Answer request id with the error body of err (status 400). */
static int refuse(struct oreq_sched *os, const char *id, const struct problem *err)
{
    json_t *body = gp_error_json(err);
    if (!body)
        return ERR_NOMEM;
    struct oreq_result res;
    memset(&res, 0, sizeof res);
    res.id = id;
    res.status = 400;
    res.body = body;
    os->n_refused++;
    os->o.on_result(os->o.cb_ctx, &res);
    json_decref(body);
    return 0;
}

int oreq_sched_new(const struct model *m, const struct tok *t, const struct chat_tmpl *tmpl,
                   const struct sched_opts *so, const struct oreq_sched_opts *oo,
                   struct oreq_sched **out)
{
    if (!m || !t || !so || !oo || !oo->on_result || !out)
        return ERR_INVAL;
    struct oreq_sched *os = calloc(1, sizeof *os);
    if (!os)
        return ERR_NOMEM;
    os->t = t;
    os->tmpl = tmpl;
    os->n_vocab = (size_t)m->hp.n_vocab;
    os->o = *oo;
    struct sched_opts o = *so;
    o.on_result = on_sched_result;
    o.cb_ctx = os;
    int rc = sched_new(m, t, &o, &os->s);
    if (rc) {
        free(os);
        return rc;
    }
    *out = os;
    return 0;
}

void oreq_sched_free(struct oreq_sched *os)
{
    if (!os)
        return;
    sched_free(os->s);
    free(os);
}

struct sched *oreq_sched_engine(struct oreq_sched *os)
{
    return os->s;
}

int oreq_sched_add(struct oreq_sched *os, const char *id, enum gp_endpoint ep,
                   const json_t *body)
{
    struct problem err;
    struct gp_request gp;
    struct gen_prompt *pr = NULL;
    size_t n_pr = 0;
    struct oreq_item *it = NULL;
    json_t *chat = NULL, *settings = NULL;
    int rc;
    if (!os || !id || !body || (ep != GP_CHAT && ep != GP_COMPLETIONS && ep != GP_RESPONSES))
        return ERR_INVAL;
    memset(&err, 0, sizeof err);
    memset(&gp, 0, sizeof gp);
    if (ep == GP_RESPONSES) { /* the chat path runs it: translated in, a Response out */
        if ((rc = oresp_to_chat(body, &chat, &err)) != 0)
            return rc == ERR_INVAL ? refuse(os, id, &err) : rc;
        if (!(settings = responses_settings(body))) {
            json_decref(chat);
            return ERR_NOMEM;
        }
        body = chat;
        ep = GP_CHAT;
    }
    rc = gp_parse(body, ep, os->n_vocab, &gp, &err);
    if (rc)
        goto out;
    const char *model = json_string_value(json_object_get(body, "model"));
    it = calloc(1, sizeof *it);
    if (!it || !(it->model = strdup(model ? model : os->o.model_name ? os->o.model_name : ""))) {
        rc = ERR_NOMEM;
        goto out;
    }
    it->ep = ep;
    it->settings = settings;
    settings = NULL;
    if (ep == GP_CHAT && !os->tmpl) {
        problem_setf(&err, "unsupported_value", "messages",
                "This model has no chat template; use /v1/completions.");
        rc = ERR_INVAL;
        goto out;
    }
    struct prompt_model pm = {os->t, os->tmpl, (size_t)sched_n_ctx(os->s)};
    if ((rc = prompt_build(&pm, ep, body, &gp, &pr, &n_pr, &err)) != 0 ||
        (rc = prompt_arm(&pm, &gp, &err)) != 0)
        goto out;
    if (ep == GP_CHAT) {
        it->tools = gp.tools;
        memset(&gp.tools, 0, sizeof gp.tools);
        it->tool_fmt = chat_tmpl_tool_format(os->tmpl);
        it->think = gp.gen.think_end[0] != 0;
    }
    /* the scheduler owns the parameters, the prompts and the item from here */
    rc = sched_add(os->s, id, &gp.gen, pr, n_pr, it, item_free);
    pr = NULL;
    it = NULL;
    if (rc == ERR_INVAL) /* stop strings were validated by gp_parse */
        problem_setf(&err, "invalid_value", "stop", "Invalid 'stop'.");
out:
    if (rc == ERR_INVAL && chat)
        oresp_problem_from_chat(&err);
    if (rc == ERR_INVAL)
        rc = refuse(os, id, &err);
    gen_prompts_free(pr, n_pr);
    item_free(it);
    gp_release(&gp);
    json_decref(settings);
    json_decref(chat);
    return rc;
}

void oreq_sched_get_stats(const struct oreq_sched *os, struct sched_stats *out)
{
    sched_get_stats(os->s, out);
    out->n_requests += os->n_refused;
    out->n_request_errors += os->n_refused;
}
