/* prompt.c - a request body's prompts, built and tokenized (see prompt.h). */
#include "openai/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "openai/chat_msgs.h"

static int ctx_error(struct problem *err, enum gp_endpoint ep, size_t n_ctx, size_t n_prompt,
                     int64_t max_tokens, int overflow)
{
    const char *param = ep == GP_CHAT ? "messages" : "prompt";
    if (overflow)
        return problem_setf(err, "context_length_exceeded", param,
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in more than %zu tokens. Please reduce the length of the %s.",
                       n_ctx, param, n_ctx, param);
    if (max_tokens < 0)
        return problem_setf(err, "context_length_exceeded", param,
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in %zu tokens, leaving no room for the completion. Please "
                       "reduce the length of the %s.", n_ctx, param, n_prompt, param);
    return problem_setf(err, "context_length_exceeded", param,
                   "This model's maximum context length is %zu tokens. However, you requested "
                   "%zu tokens (%zu in the %s, %lld in the completion). Please reduce the "
                   "length of the %s or completion.", n_ctx, n_prompt + (size_t)max_tokens,
                   n_prompt, param, (long long)max_tokens, param);
}

/* Tokenize text into a fresh array of at most n_ctx ids. */
static int encode_capped(const struct prompt_model *m, enum gp_endpoint ep, const char *text,
                         size_t len, struct gen_prompt *out, struct problem *err)
{
    size_t cap = m->n_ctx, n = 0;
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    if (!ids)
        return ERR_NOMEM;
    int rc = ep == GP_CHAT ? chat_encode(m->t, text, len, ids, cap, &n)
                           : tok_encode(m->t, text, len, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids,
                                        cap, &n);
    if (rc == ERR_TOOBIG) {
        free(ids);
        return ctx_error(err, ep, m->n_ctx, 0, -1, 1);
    }
    if (rc) {
        free(ids);
        return rc;
    }
    out->ids = ids;
    out->n = n;
    return 0;
}

static int build_prompts(const struct prompt_model *m, enum gp_endpoint ep, const json_t *body,
                         const struct gp_request *gp, struct gen_prompt *pr, size_t n_pr,
                         struct problem *err)
{
    int rc;
    if (ep == GP_CHAT) {
        struct chat_msgs cm;
        struct buf text;
        const json_t *msgs = json_object_get(body, "messages");
        if (!m->tmpl && msgs && !json_is_null(msgs))
            return ERR_INVAL; /* no template: not a request error (err left empty) */
        if ((rc = chat_msgs_from_body(body, &cm, err)))
            return rc;
        buf_init(&text, CHAT_MAX_PROMPT_BYTES);
        char why[256];
        rc = chat_render_err(m->tmpl, cm.v, cm.n, 1, 0, &text, why, sizeof why);
        chat_msgs_release(&cm);
        if (rc == ERR_INVAL && why[0])
            rc = problem_setf(err, "invalid_value", "messages",
                         "Invalid 'messages': this model's chat template cannot render the "
                         "conversation: %s", why);
        else if (rc == ERR_INVAL)
            rc = problem_setf(err, "invalid_value", "messages",
                         "Invalid 'messages': this model's chat template cannot render the "
                         "conversation (roles must alternate user/assistant%s).",
                         "; some templates accept no system message");
        else if (rc == ERR_TOOBIG)
            rc = ctx_error(err, ep, m->n_ctx, 0, -1, 1);
        else if (rc == 0)
            rc = encode_capped(m, ep, text.data ? text.data : "", text.len, &pr[0], err);
        buf_release(&text);
        return rc;
    }
    for (size_t i = 0; i < n_pr; i++) {
        const struct gp_prompt *p = &gp->prompts[i];
        if (p->ids) {
            if (p->n_ids > m->n_ctx)
                return ctx_error(err, ep, m->n_ctx, 0, -1, 1);
            pr[i].ids = malloc(p->n_ids * sizeof *pr[i].ids);
            if (!pr[i].ids)
                return ERR_NOMEM;
            memcpy(pr[i].ids, p->ids, p->n_ids * sizeof *p->ids);
            pr[i].n = p->n_ids;
        } else if ((rc = encode_capped(m, ep, p->text, p->text_len, &pr[i], err)) != 0) {
            return rc;
        }
    }
    return 0;
}

int prompt_build(const struct prompt_model *m, enum gp_endpoint ep, const json_t *body,
                 const struct gp_request *gp, struct gen_prompt **out, size_t *n_out,
                 struct problem *err)
{
    if (!m || !m->t || !body || !gp || !out || !n_out || m->n_ctx == 0)
        return ERR_INVAL;
    size_t n_pr = ep == GP_CHAT ? 1 : gp->n_prompts;
    struct gen_prompt *pr = calloc(n_pr ? n_pr : 1, sizeof *pr);
    if (!pr)
        return ERR_NOMEM;
    int rc = build_prompts(m, ep, body, gp, pr, n_pr, err);
    for (size_t i = 0; rc == 0 && i < n_pr; i++) {
        if (pr[i].n == 0)
            rc = problem_setf(err, "invalid_value", ep == GP_CHAT ? "messages" : "prompt",
                         "Invalid '%s': the prompt is empty after tokenization.",
                         ep == GP_CHAT ? "messages" : "prompt");
        else if (pr[i].n >= m->n_ctx ||
                 (gp->gen.max_tokens >= 0 && (uint64_t)gp->gen.max_tokens > m->n_ctx - pr[i].n))
            rc = ctx_error(err, ep, m->n_ctx, pr[i].n, gp->gen.max_tokens, 0);
    }
    if (rc) {
        gen_prompts_free(pr, n_pr);
        return rc;
    }
    *out = pr;
    *n_out = n_pr;
    return 0;
}
