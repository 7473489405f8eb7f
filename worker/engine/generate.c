/*
 * generate.c - per-sequence generation steps and the sequential request
 * driver (see generate.h).
 */
#include "worker/engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- one sequence ---------------------------------------------------------- */

int gen_seq_init(struct gen_seq *s, const struct gen_params *gp, const struct tok *t,
                 const int32_t *prompt, size_t n_prompt, size_t n_ctx, uint64_t choice)
{
    int rc;
    if (!s || !gp || !t || !prompt || n_prompt == 0)
        return ERR_INVAL;
    if (n_prompt >= n_ctx)
        return ERR_TOOBIG;
    if (gp->max_tokens >= 0 && (uint64_t)gp->max_tokens > n_ctx - n_prompt)
        return ERR_TOOBIG;
    memset(s, 0, sizeof *s);
    if ((rc = stop_init(&s->sm, (const char *const *)gp->stop, gp->stop_len, gp->n_stop)) != 0)
        return rc;
    s->gp = gp;
    s->t = t;
    s->prompt = prompt;
    s->n_prompt = n_prompt;
    s->max_gen = gp->max_tokens >= 0 ? (size_t)gp->max_tokens : n_ctx - n_prompt;
    smp_rng_init(&s->rng, gp->seed, choice);
    tok_stream_init(&s->ts, t, 0);
    buf_init(&s->piece, 4 * TOK_MAX_TOKEN_BYTES + 16);
    buf_init(&s->text, GEN_MAX_TEXT_BYTES);
    s->finish = STOP_NONE;
    return 0;
}

void gen_seq_release(struct gen_seq *s)
{
    if (!s)
        return;
    free(s->gen);
    free(s->lp);
    stop_release(&s->sm);
    buf_release(&s->piece);
    buf_release(&s->text);
    memset(s, 0, sizeof *s);
}

const struct smp_params *gen_seq_smp_params(const struct gen_seq *s) { return &s->gp->smp; }

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return ERR_NOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

/* End of the sequence without a stop string so far: flush the decoder
 * (an incomplete character becomes U+FFFD) and the stop matcher. */
static int finalize(struct gen_seq *s, enum stop_finish why)
{
    int rc;
    buf_reset(&s->piece);
    if ((rc = tok_stream_flush(&s->ts, &s->piece)) != 0)
        return rc;
    s->stream_bytes += s->piece.len;
    rc = stop_feed(&s->sm, s->piece.data, s->piece.len, &s->text);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        why = STOP_FINISH_STOP;
    } else if ((rc = stop_flush(&s->sm, &s->text)) != 0) {
        return rc;
    }
    s->finish = why;
    return 1;
}

int gen_seq_accept(struct gen_seq *s, const struct smp_result *r)
{
    int rc;
    if (!s || !r)
        return ERR_INVAL;
    if (s->finish != STOP_NONE)
        return ERR_BADSTATE;
    int32_t tok = r->token;
    if (tok < 0 || (size_t)tok >= tok_n_vocab(s->t))
        return ERR_INVAL;
    if ((rc = grow((void **)&s->gen, &s->cap_gen, s->n_gen + 1, sizeof *s->gen)) != 0)
        return rc;
    s->gen[s->n_gen++] = tok;

    if (tok_is_eog(s->t, tok))
        return finalize(s, STOP_FINISH_STOP);

    if (s->gp->logprobs) {
        if ((rc = grow((void **)&s->lp, &s->cap_lp, s->n_lp + 1, sizeof *s->lp)) != 0)
            return rc;
        s->lp[s->n_lp].r = *r;
        s->lp[s->n_lp].text_offset = s->stream_bytes;
        s->n_lp++;
    }
    buf_reset(&s->piece);
    if ((rc = tok_stream_push(&s->ts, tok, &s->piece)) != 0)
        return rc;
    s->stream_bytes += s->piece.len;
    rc = stop_feed(&s->sm, s->piece.data, s->piece.len, &s->text);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        /* keep logprobs only for tokens whose text starts inside the result */
        while (s->n_lp && s->lp[s->n_lp - 1].text_offset >= s->text.len)
            s->n_lp--;
        s->finish = STOP_FINISH_STOP;
        return 1;
    }
    if (s->n_gen >= s->max_gen)
        return finalize(s, STOP_FINISH_LENGTH);
    return 0;
}

int gen_seq_step(struct gen_seq *s, const float *logits, size_t n_vocab,
                 struct smp_scratch *scratch)
{
    struct smp_result r;
    if (!s)
        return ERR_INVAL;
    if (s->finish != STOP_NONE)
        return ERR_BADSTATE;
    const struct smp_params *p = &s->gp->smp;
    int rc = smp_sample(p, logits, n_vocab, s->gen, s->n_gen,
                        p->repetition_penalty != 1.0 ? s->prompt : NULL,
                        p->repetition_penalty != 1.0 ? s->n_prompt : 0, &s->rng, scratch, &r);
    if (rc)
        return rc;
    return gen_seq_accept(s, &r);
}

int gen_seq_choice(const struct gen_seq *s, struct resp_choice *c)
{
    if (!s || s->finish == STOP_NONE)
        return ERR_BADSTATE;
    memset(c, 0, sizeof *c);
    c->text = s->text.data ? s->text.data : "";
    c->text_len = s->text.len;
    c->finish = s->finish;
    c->lp = s->lp;
    c->n_lp = s->n_lp;
    return 0;
}

/* ---- the sequential driver -------------------------------------------------- */


static int ctx_error(struct gp_error *err, enum gp_endpoint ep, size_t n_ctx, size_t n_prompt,
                     int64_t max_tokens, int overflow)
{
    const char *param = ep == GP_CHAT ? "messages" : "prompt";
    if (overflow)
        return gp_fail(err, param, "context_length_exceeded",
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in more than %zu tokens. Please reduce the length of the %s.",
                       n_ctx, param, n_ctx, param);
    if (max_tokens < 0)
        return gp_fail(err, param, "context_length_exceeded",
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in %zu tokens, leaving no room for the completion. Please "
                       "reduce the length of the %s.", n_ctx, param, n_prompt, param);
    return gp_fail(err, param, "context_length_exceeded",
                   "This model's maximum context length is %zu tokens. However, you requested "
                   "%zu tokens (%zu in the %s, %lld in the completion). Please reduce the "
                   "length of the %s or completion.", n_ctx, n_prompt + (size_t)max_tokens,
                   n_prompt, param, (long long)max_tokens, param);
}

/* Tokenize text into a fresh array of at most n_ctx ids. */
static int encode_capped(const struct gen_model *m, enum gp_endpoint ep, const char *text,
                         size_t len, struct gen_prompt *out, struct gp_error *err)
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

static int build_prompts(const struct gen_model *m, enum gp_endpoint ep, const json_t *body,
                         const struct gen_params *gp, struct gen_prompt *pr, size_t n_pr,
                         struct gp_error *err)
{
    int rc;
    if (ep == GP_CHAT) {
        json_t *msgs = json_object_get(body, "messages");
        struct chat_msgs cm;
        struct buf text;
        if (!msgs || json_is_null(msgs))
            return gp_fail(err, "messages", "missing_required_parameter",
                           "Missing required parameter: 'messages'.");
        if (!m->tmpl)
            return ERR_INVAL;
        rc = chat_msgs_parse(msgs, &cm);
        if (rc == ERR_INVAL)
            return gp_fail(err, "messages", "invalid_value",
                           "Invalid 'messages': expected a non-empty array of {role, content} "
                           "objects with roles system, developer, user or assistant and text "
                           "content.");
        if (rc == ERR_TOOBIG)
            return gp_fail(err, "messages", "invalid_value",
                           "Invalid 'messages': too many messages or content too long.");
        if (rc)
            return rc;
        buf_init(&text, CHAT_MAX_PROMPT_BYTES);
        rc = chat_render(m->tmpl, cm.v, cm.n, 1, &text);
        chat_msgs_release(&cm);
        if (rc == ERR_INVAL)
            rc = gp_fail(err, "messages", "invalid_value",
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

void gen_prompts_free(struct gen_prompt *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++)
        free(p[i].ids);
    free(p);
}

int gen_prompts_build(const struct gen_model *m, enum gp_endpoint ep, const json_t *body,
                      const struct gen_params *gp, struct gen_prompt **out, size_t *n_out,
                      struct gp_error *err)
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
            rc = gp_fail(err, ep == GP_CHAT ? "messages" : "prompt", "invalid_value",
                         "Invalid '%s': the prompt is empty after tokenization.",
                         ep == GP_CHAT ? "messages" : "prompt");
        else if (pr[i].n >= m->n_ctx ||
                 (gp->max_tokens >= 0 && (uint64_t)gp->max_tokens > m->n_ctx - pr[i].n))
            rc = ctx_error(err, ep, m->n_ctx, pr[i].n, gp->max_tokens, 0);
    }
    if (rc) {
        gen_prompts_free(pr, n_pr);
        return rc;
    }
    *out = pr;
    *n_out = n_pr;
    return 0;
}

int gen_run(const struct gen_model *m, enum gp_endpoint ep, const json_t *body,
            const struct gen_opts *opts, json_t **response, struct gp_error *err)
{
    struct gen_params gp;
    struct gen_prompt *pr = NULL;
    struct gen_seq *seqs = NULL;
    struct resp_choice *ch = NULL;
    struct smp_scratch scratch;
    int32_t *all = NULL;
    size_t n_pr = 0, n_seq = 0, n_vocab;
    int rc, have_gp = 0;

    memset(&scratch, 0, sizeof scratch);
    if (!m || !m->t || !m->next_logits || !body || !response || m->n_ctx == 0)
        return ERR_INVAL;
    n_vocab = tok_n_vocab(m->t);
    if ((rc = gp_parse(body, ep, n_vocab, &gp, err)) != 0)
        return rc;
    have_gp = 1;

    n_pr = ep == GP_CHAT ? 1 : gp.n_prompts;
    pr = calloc(n_pr, sizeof *pr);
    seqs = calloc(n_pr * (size_t)gp.n, sizeof *seqs);
    ch = calloc(n_pr * (size_t)gp.n, sizeof *ch);
    all = malloc(m->n_ctx * sizeof *all);
    if (!pr || !seqs || !ch || !all) {
        rc = ERR_NOMEM;
        goto out;
    }
    if ((rc = build_prompts(m, ep, body, &gp, pr, n_pr, err)) != 0)
        goto out;
    for (size_t i = 0; i < n_pr; i++) {
        if (pr[i].n == 0) {
            rc = gp_fail(err, ep == GP_CHAT ? "messages" : "prompt", "invalid_value",
                         "Invalid '%s': the prompt is empty after tokenization.",
                         ep == GP_CHAT ? "messages" : "prompt");
            goto out;
        }
        if (pr[i].n >= m->n_ctx || (gp.max_tokens >= 0 &&
                                    (uint64_t)gp.max_tokens > m->n_ctx - pr[i].n)) {
            rc = ctx_error(err, ep, m->n_ctx, pr[i].n, gp.max_tokens, 0);
            goto out;
        }
    }
    if ((rc = smp_scratch_init(&scratch, n_vocab)) != 0)
        goto out;

    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (size_t i = 0; i < n_pr; i++) {
        prompt_tokens += (int64_t)pr[i].n;
        for (int k = 0; k < gp.n; k++) {
            uint64_t choice = (uint64_t)i * (uint64_t)gp.n + (uint64_t)k;
            struct gen_seq *s = &seqs[n_seq];
            if ((rc = gen_seq_init(s, &gp, m->t, pr[i].ids, pr[i].n, m->n_ctx, choice)) != 0)
                goto out;
            n_seq++;
            memcpy(all, pr[i].ids, pr[i].n * sizeof *all);
            size_t n_all = pr[i].n;
            for (;;) {
                const float *row = NULL;
                if ((rc = m->next_logits(m->ctx, choice, all, n_all, &row)) != 0)
                    goto out;
                if (!row) {
                    rc = ERR_INTERNAL;
                    goto out;
                }
                rc = gen_seq_step(s, row, n_vocab, &scratch);
                if (rc < 0)
                    goto out;
                all[n_all++] = s->gen[s->n_gen - 1];
                if (rc == 1)
                    break;
            }
            completion_tokens += (int64_t)s->n_gen;
            if (opts && opts->on_done && (rc = opts->on_done(opts->on_done_ctx, choice, s)) != 0)
                goto out;
            if ((rc = gen_seq_choice(s, &ch[n_seq - 1])) != 0)
                goto out;
        }
    }

    struct resp_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.id = opts ? opts->id : NULL;
    meta.created = opts ? opts->created : 0;
    meta.model = m->model_name;
    meta.system_fingerprint = m->system_fingerprint;
    meta.prompt_tokens = prompt_tokens;
    meta.completion_tokens = completion_tokens;
    meta.logprobs = gp.logprobs;
    rc = ep == GP_CHAT ? resp_chat_build(&meta, ch, n_seq, m->t, response)
                       : resp_completion_build(&meta, ch, n_seq, m->t, response);
out:
    for (size_t i = 0; i < n_seq; i++)
        gen_seq_release(&seqs[i]);
    for (size_t i = 0; pr && i < n_pr; i++)
        free(pr[i].ids);
    free(pr);
    free(seqs);
    free(ch);
    free(all);
    smp_scratch_release(&scratch);
    if (have_gp)
        gp_release(&gp);
    return rc;
}
