/* oneshot.c - one-off greedy completion (jobworker --prompt/--chat); see oneshot.h. */
#include "worker/oneshot.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "kernels/cpu/ops.h"
#include "worker/chat.h"
#include "worker/model.h"
#include "worker/tok.h"

static int fail(char *err, size_t err_len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t err_len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return rc;
}

static double rate(int n, uint64_t ns)
{
    return ns ? (double)n / ((double)ns / 1e9) : 0.0;
}

int oneshot_run(const struct oneshot_opts *o, FILE *out, FILE *errout, char *err, size_t err_len)
{
    struct model *m = NULL;
    struct tok *t = NULL;
    struct chat_tmpl *ct = NULL;
    struct model_ctx *c = NULL;
    struct buf text, piece;
    int32_t *ids = NULL;
    buf_init(&text, CHAT_MAX_PROMPT_BYTES);
    buf_init(&piece, 1 << 16);
    int rc = model_load(o->model_path, &m, err, err_len);
    if (rc)
        goto out;
    if ((rc = model_tokenizer(m, &t, err, err_len)))
        goto out;
    size_t len = strlen(o->text), n_prompt = 0;
    if (o->chat) {
        if ((rc = model_chat_tmpl(m, t, &ct))) {
            fail(err, err_len, rc, "no usable chat template: %s", err_msg(rc));
            goto out;
        }
        struct chat_msg msg = {CHAT_USER, o->text, len};
        if ((rc = chat_render(ct, &msg, 1, 1, &text))) {
            fail(err, err_len, rc, "cannot render the chat template: %s", err_msg(rc));
            goto out;
        }
    } else if ((rc = buf_append(&text, o->text, len))) {
        fail(err, err_len, rc, "prompt: %s", err_msg(rc));
        goto out;
    }
    size_t cap = TOK_ENCODE_BOUND(text.len);
    if (!(ids = malloc(cap * sizeof *ids))) {
        rc = ERR_NOMEM;
        goto out;
    }
    rc = o->chat ? chat_encode(t, text.data ? text.data : "", text.len, ids, cap, &n_prompt)
                 : tok_encode(t, text.data ? text.data : "", text.len, TOK_ADD_SPECIAL, ids, cap,
                              &n_prompt);
    if (rc) {
        fail(err, err_len, rc, "cannot tokenize the prompt: %s", err_msg(rc));
        goto out;
    }
    if (n_prompt == 0) {
        rc = fail(err, err_len, ERR_INVAL, "the prompt is empty");
        goto out;
    }
    int n_ctx_train = m->hp.n_ctx_train;
    int64_t want = (int64_t)n_prompt + o->max_tokens;
    if ((int64_t)n_prompt >= n_ctx_train) {
        rc = fail(err, err_len, ERR_TOOBIG, "the prompt has %zu tokens; the context is %d",
                  n_prompt, n_ctx_train);
        goto out;
    }
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = want < n_ctx_train ? (int)want : n_ctx_train;
    p.n_batch_max = (int)n_prompt;
    if ((rc = model_ctx_new(m, &p, &c))) {
        fail(err, err_len, rc, "cannot allocate the context: %s", err_msg(rc));
        goto out;
    }
    uint8_t *marks = calloc(n_prompt, 1);
    int32_t *pos = malloc(n_prompt * sizeof *pos), *seq = calloc(n_prompt, sizeof *seq);
    if (!marks || !pos || !seq) {
        free(marks);
        free(pos);
        free(seq);
        rc = ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n_prompt; i++)
        pos[i] = (int32_t)i;
    marks[n_prompt - 1] = 1;
    struct model_batch b = {(int)n_prompt, ids, pos, seq, marks};
    const float *logits;
    int n_out;
    uint64_t t0 = clock_mono_ns();
    rc = model_forward(c, &b, &logits, &n_out);
    uint64_t t_prompt = clock_mono_ns() - t0;
    free(marks);
    free(pos);
    free(seq);
    if (rc) {
        fail(err, err_len, rc, "forward pass failed: %s", err_msg(rc));
        goto out;
    }
    if (o->print_ids) {
        fputs("prompt ids:", errout);
        for (size_t i = 0; i < n_prompt; i++)
            fprintf(errout, " %d", ids[i]);
        fputc('\n', errout);
    }
    struct tok_stream ts;
    tok_stream_init(&ts, t, 0);
    int n_gen = 0, n_dec = 0;
    int32_t cur_pos = (int32_t)n_prompt, zero = 0;
    uint8_t one = 1;
    t0 = clock_mono_ns();
    for (;;) {
        int32_t next = kn_argmax_f32(logits, m->hp.n_vocab);
        if (next < 0 || tok_is_eog(t, next))
            break;
        n_gen++;
        if (o->print_ids)
            fprintf(errout, "%s%d", n_gen == 1 ? "completion ids: " : " ", next);
        buf_reset(&piece);
        if ((rc = tok_stream_push(&ts, next, &piece)))
            goto out;
        if (piece.len && fwrite(piece.data, 1, piece.len, out) != piece.len) {
            rc = fail(err, err_len, ERR_IO, "cannot write the completion");
            goto out;
        }
        fflush(out);
        if (n_gen >= o->max_tokens || cur_pos >= p.n_ctx)
            break;
        struct model_batch d = {1, &next, &cur_pos, &zero, &one};
        if ((rc = model_forward(c, &d, &logits, &n_out))) {
            fail(err, err_len, rc, "forward pass failed: %s", err_msg(rc));
            goto out;
        }
        n_dec++;
        cur_pos++;
    }
    uint64_t t_dec = clock_mono_ns() - t0;
    buf_reset(&piece);
    if ((rc = tok_stream_flush(&ts, &piece)))
        goto out;
    if (piece.len)
        fwrite(piece.data, 1, piece.len, out);
    fputc('\n', out);
    if (o->print_ids && n_gen)
        fputc('\n', errout);
    fprintf(errout, "prompt: %zu tokens, %.2f s (%.1f tok/s); decode: %d tokens, %.2f s (%.1f tok/s)\n",
            n_prompt, (double)t_prompt / 1e9, rate((int)n_prompt, t_prompt), n_dec,
            (double)t_dec / 1e9, rate(n_dec, t_dec));
out:
    free(ids);
    buf_release(&text);
    buf_release(&piece);
    model_ctx_free(c);
    chat_tmpl_free(ct);
    tok_free(t);
    model_free(m);
    return rc;
}
