/*
 * generate.c - per-sequence generation steps and the sequential request
 * driver (see generate.h).
 */
#include "worker/engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

/* ---- one sequence ---------------------------------------------------------- */

enum { GEN_LAZY_NONE = 0, GEN_LAZY_AFTER, GEN_LAZY_TRIGGER };

/* Look for mark in win after appending p[0..n). Returns 1 with win holding
 * the bytes from the mark on (with_mark) or after it, else 0 with win cut to
 * the tail that may begin the mark; or an error. */
static int mark_scan(struct buf *win, const char *mark, const char *p, size_t n, int with_mark)
{
    size_t ml = strlen(mark);
    int rc = buf_append(win, p, n);
    if (rc < 0)
        return rc;
    if (!win->data || win->len == 0)
        return 0;
    const char *d = win->data;
    for (size_t i = 0; ml && i + ml <= win->len; i++)
        if (memcmp(d + i, mark, ml) == 0) {
            size_t from = with_mark ? i : i + ml;
            memmove(win->data, d + from, win->len - from);
            win->len -= from;
            return 1;
        }
    if (win->len >= ml) {
        size_t keep = ml ? ml - 1 : 0;
        memmove(win->data, d + win->len - keep, keep);
        win->len = keep;
    }
    return 0;
}

/* Feed the decoded output bytes p[0..n) to a waiting lazy grammar: arm it
 * when its markers have appeared. */
static int lazy_feed(struct gen_seq *s, const char *p, size_t n)
{
    int rc;
    if (s->lazy == GEN_LAZY_AFTER) {
        if ((rc = mark_scan(&s->lazy_win, s->gp->gram_after, p, n, 0)) <= 0)
            return rc;
        s->lazy = s->gp->gram_trigger[0] ? GEN_LAZY_TRIGGER : GEN_LAZY_NONE;
        p = "";
        n = 0;
    }
    if (s->lazy == GEN_LAZY_TRIGGER && s->gp->gram_trigger_at_start) {
        /* the output (since gram_after) must begin with the trigger */
        const char *tr = s->gp->gram_trigger;
        size_t tl = strlen(tr);
        if ((rc = buf_append(&s->lazy_win, p, n)) < 0)
            return rc;
        size_t ws = 0;   /* whitespace before the start is no output yet */
        while (ws < s->lazy_win.len && (s->lazy_win.data[ws] == ' ' || s->lazy_win.data[ws] == '\n' ||
                                         s->lazy_win.data[ws] == '\t' || s->lazy_win.data[ws] == '\r'))
            ws++;
        memmove(s->lazy_win.data, s->lazy_win.data + ws, s->lazy_win.len - ws);
        s->lazy_win.len -= ws;
        size_t k = s->lazy_win.len < tl ? s->lazy_win.len : tl;
        if (k && memcmp(s->lazy_win.data, tr, k) != 0) {
            s->lazy = GEN_LAZY_NONE;   /* it began otherwise: free for good */
            buf_reset(&s->lazy_win);
            return 0;
        }
        if (s->lazy_win.len < tl)
            return 0;
        s->lazy = GEN_LAZY_NONE;
    } else if (s->lazy == GEN_LAZY_TRIGGER) {
        if ((rc = mark_scan(&s->lazy_win, s->gp->gram_trigger, p, n, 1)) <= 0)
            return rc;
        s->lazy = GEN_LAZY_NONE;
    }
    if ((rc = gram_matcher_new(s->gp->grammar, &s->gm)) != 0)
        return rc;
    if (s->lazy_win.len && gram_matcher_accept(s->gm, s->lazy_win.data, s->lazy_win.len) != 0) {
        gram_matcher_free(s->gm);   /* the output does not follow the grammar: stay free */
        s->gm = NULL;
    }
    s->mask_ready = 0;
    buf_reset(&s->lazy_win);
    return 0;
}

/* Count reasoning tokens: the thinking block ends with gp->think_end. */
static int think_feed(struct gen_seq *s, const char *p, size_t n)
{
    if (!s->gp->think_end[0] || s->think_done)
        return 0;
    s->n_reason = s->n_gen;
    int rc = mark_scan(&s->think_win, s->gp->think_end, p, n, 0);
    if (rc == 1)
        s->think_done = 1;
    return rc < 0 ? rc : 0;
}

/* The token the thinking budget forces next, or -1 for a free step: the
 * close goes on once begun; it begins when the budget is spent, the block
 * still open, no grammar active and no character half decoded (waited for
 * at most 3 tokens). */
static int32_t think_forced(const struct gen_seq *s)
{
    const struct gen_params *gp = s->gp;
    if (!gp->n_think_close || !gp->think_end[0])
        return -1;
    if (s->n_forced)
        return s->n_forced < gp->n_think_close ? gp->think_close[s->n_forced] : -1;
    if (s->think_done || s->gm || gp->think_budget < 0 || s->n_gen < (uint64_t)gp->think_budget)
        return -1;
    if (s->ts.n_pend && s->n_gen < (uint64_t)gp->think_budget + 3)
        return -1;
    return gp->think_close[0];
}

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
    for (size_t i = 0; i < GEN_KEEP_MAX && gp->keep_special[i][0]; i++) {
        const char *k = gp->keep_special[i];
        int32_t id = tok_find(t, k, strnlen(k, GEN_MARK_MAX));
        if (id >= 0 && tok_token_type(t, id) == TOK_TYPE_CONTROL && !tok_is_eog(t, id))
            s->keep_ids[s->n_keep++] = id;
    }
    buf_init(&s->lazy_win, GEN_MARK_MAX * 2 + 16 * TOK_MAX_TOKEN_BYTES);
    buf_init(&s->think_win, GEN_MARK_MAX * 2 + 16 * TOK_MAX_TOKEN_BYTES);
    if (gp->n_think_close) {
        size_t nv = tok_n_vocab(t);
        if (gp->n_think_close > GEN_CLOSE_MAX) {
            gen_seq_release(s);
            return ERR_INVAL;
        }
        for (size_t i = 0; i < gp->n_think_close; i++)
            if (gp->think_close[i] < 0 || (size_t)gp->think_close[i] >= nv) {
                gen_seq_release(s);
                return ERR_INVAL;
            }
        s->force_words = (nv + 31) / 32;
        if (!(s->force_mask = malloc(s->force_words * sizeof *s->force_mask))) {
            gen_seq_release(s);
            return ERR_NOMEM;
        }
    }
    if (gp->grammar) {
        s->lazy = gp->gram_after[0] ? GEN_LAZY_AFTER : gp->gram_trigger[0] ? GEN_LAZY_TRIGGER
                                                                          : GEN_LAZY_NONE;
        if ((rc = tok_gram_vocab(t, &s->gv, &s->eog_ids, &s->n_eog)) != 0 ||
            (!s->lazy && (rc = gram_matcher_new(gp->grammar, &s->gm)) != 0) ||
            !(s->mask = malloc(gram_mask_words(s->gv) * sizeof *s->mask))) {
            gen_seq_release(s);
            return rc ? rc : ERR_NOMEM;
        }
    }
    return 0;
}

int gen_seq_constrained(const struct gen_seq *s)
{
    return s && s->gm && s->finish == STOP_NONE;
}

int gen_seq_mask(struct gen_seq *s)
{
    if (!s)
        return ERR_INVAL;
    if (!s->gm || s->mask_ready)
        return 0;
    size_t n = 0;
    int rc = gram_matcher_mask(s->gm, s->gv, s->mask, &n);
    if (rc)
        return rc;
    /* EOG exactly when the grammar accepts; also when nothing else is possible
     * (a vocabulary that cannot spell what the grammar needs: end rather than
     * sample from an empty set) */
    /* kept control tokens: allowed where the grammar takes their text */
    for (size_t i = 0; i < s->n_keep; i++) {
        int32_t id = s->keep_ids[i];
        size_t len = 0;
        const char *txt = tok_text(s->t, id, &len);
        if (txt && !((s->mask[id >> 5] >> (id & 31)) & 1u) &&
            gram_matcher_allows(s->gm, txt, len)) {
            s->mask[id >> 5] |= 1u << (id & 31);
            n++;
        }
    }
    if (gram_matcher_accepting(s->gm) || n == 0) {
        for (size_t i = 0; i < s->n_eog; i++) {
            int32_t id = s->eog_ids[i];
            if (!((s->mask[id >> 5] >> (id & 31)) & 1u))
                n++;
            s->mask[id >> 5] |= 1u << (id & 31);
        }
    }
    s->mask_allowed = n;
    s->mask_ready = 1;
    return 0;
}

void gen_seq_release(struct gen_seq *s)
{
    if (!s)
        return;
    free(s->gen);
    free(s->lp);
    free(s->mask);
    free(s->force_mask);
    gram_matcher_free(s->gm);
    buf_release(&s->lazy_win);
    buf_release(&s->think_win);
    stop_release(&s->sm);
    buf_release(&s->piece);
    buf_release(&s->text);
    memset(s, 0, sizeof *s);
}

const struct smp_params *gen_seq_smp_params(const struct gen_seq *s) { return &s->gp->smp; }

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

/* TOK_RENDER_SPECIAL for a kept control token (gp->keep_special), else 0. */
static int keep_flags(const struct gen_seq *s, int32_t tok)
{
    for (size_t i = 0; i < s->n_keep; i++)
        if (s->keep_ids[i] == tok)
            return TOK_RENDER_SPECIAL;
    return 0;
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
    int32_t forced = think_forced(s);
    if (forced >= 0 && tok != forced)
        return ERR_INVAL;   /* the thinking budget's close goes first */
    if (forced >= 0)
        s->n_forced++;
    if (s->gm) {
        s->mask_ready = 0;
        if (!tok_is_eog(s->t, tok)) {
            buf_reset(&s->piece);
            if ((rc = tok_piece(s->t, tok, keep_flags(s, tok), &s->piece)) != 0)
                return rc;
            if (s->piece.len == 0 ||
                gram_matcher_accept(s->gm, s->piece.data, s->piece.len) != 0)
                return ERR_INVAL;   /* not allowed by the grammar */
        }
    }
    if ((rc = buf_grow_array((void **)&s->gen, &s->cap_gen, s->n_gen + 1, sizeof *s->gen)) != 0)
        return rc;
    s->gen[s->n_gen++] = tok;

    if (tok_is_eog(s->t, tok))
        return finalize(s, STOP_FINISH_STOP);

    if (s->gp->logprobs) {
        if ((rc = buf_grow_array((void **)&s->lp, &s->cap_lp, s->n_lp + 1, sizeof *s->lp)) != 0)
            return rc;
        s->lp[s->n_lp].r = *r;
        s->lp[s->n_lp].text_offset = s->stream_bytes;
        s->n_lp++;
    }
    buf_reset(&s->piece);
    s->ts.flags = keep_flags(s, tok);
    rc = tok_stream_push(&s->ts, tok, &s->piece);
    s->ts.flags = 0;
    if (rc != 0)
        return rc;
    s->stream_bytes += s->piece.len;
    if ((rc = think_feed(s, s->piece.data, s->piece.len)) != 0 ||
        (s->lazy && (rc = lazy_feed(s, s->piece.data, s->piece.len)) != 0))
        return rc;
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
    if (s->gm && gram_matcher_accepting(s->gm) && !gram_matcher_can_continue(s->gm))
        return finalize(s, STOP_FINISH_STOP);   /* the output is complete */
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
    int rc;
    int32_t forced = think_forced(s);
    const uint32_t *allow = NULL;
    if (forced >= 0) {
        if ((n_vocab + 31) / 32 > s->force_words)
            return ERR_INVAL;
        memset(s->force_mask, 0, s->force_words * sizeof *s->force_mask);
        s->force_mask[forced >> 5] = 1u << (forced & 31);
        allow = s->force_mask;
    } else if (s->gm) {
        if ((rc = gen_seq_mask(s)) != 0)
            return rc;
        allow = s->mask;
    }
    rc = smp_sample_masked(p, logits, allow, n_vocab, s->gen, s->n_gen,
                           p->repetition_penalty != 1.0 ? s->prompt : NULL,
                           p->repetition_penalty != 1.0 ? s->n_prompt : 0, &s->rng, scratch, &r);
    if (rc == ERR_CORRUPT && forced >= 0) { /* the row gives the forced token no finite logit */
        memset(&r, 0, sizeof r);
        r.token = forced;
        r.logprob = SMP_LOGPROB_FLOOR;
        rc = 0;
    }
    if (rc)
        return rc;
    return gen_seq_accept(s, &r);
}

int gen_seq_choice(const struct gen_seq *s, struct gen_choice *c)
{
    if (!s || s->finish == STOP_NONE)
        return ERR_BADSTATE;
    memset(c, 0, sizeof *c);
    c->text = s->text.data ? s->text.data : "";
    c->text_len = s->text.len;
    c->finish = s->finish;
    c->lp = s->lp;
    c->n_lp = s->n_lp;
    c->n_reason = s->gp->think_end[0] ? (s->think_done ? s->n_reason : s->n_gen) : 0;
    if (s->sm.hit && s->sm.hit_index < s->sm.n_stops) {
        c->stop = s->sm.stops[s->sm.hit_index];
        c->stop_len = s->sm.lens[s->sm.hit_index];
    }
    return 0;
}

/* ---- the sequential driver -------------------------------------------------- */

int gen_run(const struct gen_model *m, const struct gen_params *gp, const struct gen_prompt *pr,
            size_t n_pr, gen_done_fn on_done, void *done_ctx, struct gen_seq *seqs)
{
    struct smp_scratch scratch;
    int32_t *all = NULL;
    size_t n_seq = 0, n_vocab;
    int rc;

    memset(&scratch, 0, sizeof scratch);
    if (!m || !m->t || !m->next_logits || !gp || !pr || !seqs || m->n_ctx == 0 || gp->n < 1)
        return ERR_INVAL;
    n_vocab = tok_n_vocab(m->t);
    all = malloc(m->n_ctx * sizeof *all);
    if (!all)
        return ERR_NOMEM;
    if ((rc = smp_scratch_init(&scratch, n_vocab)) != 0)
        goto out;
    for (size_t i = 0; i < n_pr; i++) {
        for (int k = 0; k < gp->n; k++) {
            uint64_t choice = (uint64_t)i * (uint64_t)gp->n + (uint64_t)k;
            struct gen_seq *s = &seqs[n_seq];
            if ((rc = gen_seq_init(s, gp, m->t, pr[i].ids, pr[i].n, m->n_ctx, choice)) != 0)
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
            if (on_done && (rc = on_done(done_ctx, choice, s)) != 0)
                goto out;
        }
    }
    rc = 0;
out:
    if (rc)
        for (size_t i = 0; i < n_seq; i++)
            gen_seq_release(&seqs[i]);
    free(all);
    smp_scratch_release(&scratch);
    return rc;
}
