/* oneshot.c - one request through the generate driver (jobworker
 * --prompt/--chat/--json) and the engine benchmark (--bench); see oneshot.h. */
#include "worker/oneshot.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "kernels/kn.h"
#include "text/chat.h"
#include "worker/engine/engine.h"
#include "worker/engine/generate.h"
#include "worker/engine/model.h"
#include "text/tok.h"
#include "worker/run/embed_req.h"
#include "worker/run/request.h"

#define ONESHOT_BATCH 512   /* tokens per prefill step */

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

/* A request refused with an OpenAI-shaped error: its JSON body on out for
 * --json, and the message in err. */
/* A --json body is a /v1/responses body when it has "input" (as an
 * embeddings body does) and a field only Responses bodies have, or input
 * items (objects); {"model","input":"text"} alone stays an embeddings body. */
static int responses_body(const json_t *body)
{
    static const char *const only[] = {"instructions", "max_output_tokens", "text", "tools",
                                       "tool_choice", "reasoning", "previous_response_id",
                                       "conversation", "include", "top_logprobs", "store",
                                       "truncation", "temperature", "top_p", "metadata", NULL};
    const json_t *input = json_object_get(body, "input");
    if (!input || json_object_get(body, "messages") || json_object_get(body, "prompt"))
        return 0;
    if (json_is_object(json_array_get(input, 0)))
        return 1;
    for (int i = 0; only[i]; i++)
        if (json_object_get(body, only[i]))
            return 1;
    return 0;
}

static void request_error(const struct oneshot_opts *o, FILE *out, const struct problem *gerr, int rc,
                          char *err, size_t err_len)
{
    if (o->json_path) {
        json_t *eb = gp_error_json(gerr);
        char *dump = eb ? json_dumps(eb, JSON_COMPACT) : NULL;
        if (dump)
            fprintf(out, "%s\n", dump);
        free(dump);
        json_decref(eb);
    }
    fail(err, err_len, rc, "request error%s%s%s: %s", gerr->param[0] ? " (" : "", gerr->param,
         gerr->param[0] ? ")" : "", gerr->message);
}

static double rate(int64_t n, uint64_t ns)
{
    return ns ? (double)n / ((double)ns / 1e9) : 0.0;
}

/* The engine, a model context with one slot, and what the slot's cache holds. */
struct slot {
    struct engine *eng;
    struct model *m;         /* eng->model */
    struct tok *t;           /* eng->tok */
    struct kn_pool *pool;    /* eng->pool */
    struct model_ctx *c;
    int n_ctx, n_batch;
    int32_t *fed;            /* (n_ctx) ids whose K/V are in slot 0, n_fed of them */
    int n_fed;
    int32_t *pos, *seq;      /* (n_batch) batch scratch */
    uint8_t *mark;           /* (n_batch) */
    uint64_t last_choice;    /* choice of the previous call; UINT64_MAX = none */
    int64_t n_prompt_tok, n_dec_tok;
    uint64_t prompt_ns, dec_ns;
    FILE *errout;
    int print_ids;
};

static void slot_release(struct slot *e)
{
    model_ctx_free(e->c);
    engine_close(e->eng);
    free(e->fed);
    free(e->pos);
    free(e->seq);
    free(e->mark);
    memset(e, 0, sizeof *e);
}

static int slot_init(struct slot *e, const char *path, int threads, int n_ctx, int exact,
                       int device, int kv_type, char *err, size_t err_len)
{
    memset(e, 0, sizeof *e);
    e->last_choice = UINT64_MAX;
    struct engine_opts eo = {.model_path = path, .device = device, .threads = threads,
                             .exact_matmul = exact, .n_ctx = n_ctx, .kv_type = kv_type};
    int rc = engine_open(&eo, &e->eng, err, err_len);
    if (rc)
        return rc;
    e->m = e->eng->model;
    e->t = e->eng->tok;
    e->pool = e->eng->pool;
    int n_train = e->m->hp.n_ctx_train;
    if (n_ctx <= 0)
        n_ctx = n_train < 4096 ? n_train : 4096;
    if (n_ctx > n_train) {
        rc = fail(err, err_len, ERR_INVAL, "--ctx %d is larger than the model's context (%d)",
                  n_ctx, n_train);
        goto out;
    }
    e->n_ctx = n_ctx;
    e->n_batch = n_ctx < ONESHOT_BATCH ? n_ctx : ONESHOT_BATCH;
    struct model_ctx_params p;
    engine_ctx_params(e->eng, &p);
    p.n_ctx = n_ctx;
    p.n_batch_max = e->n_batch;
    p.n_out_max = 1;
    p.n_seq_max = 1;
    if ((rc = model_ctx_new(e->m, &p, &e->c))) {
        fail(err, err_len, rc, "cannot allocate the context: %s", err_msg(rc));
        goto out;
    }
    rc = ERR_NOMEM;
    e->fed = malloc((size_t)n_ctx * sizeof *e->fed);
    e->pos = malloc((size_t)e->n_batch * sizeof *e->pos);
    e->seq = calloc((size_t)e->n_batch, sizeof *e->seq);
    e->mark = calloc((size_t)e->n_batch, 1);
    if (!e->fed || !e->pos || !e->seq || !e->mark) {
        fail(err, err_len, rc, "out of memory");
        goto out;
    }
    return 0;
out:
    slot_release(e);
    return rc;
}

/* gen_logits_fn: logits after tokens[0..n), feeding only what the slot's
 * cache does not hold yet. */
static int slot_next_logits(void *ctx, uint64_t choice, const int32_t *tokens, size_t n,
                              const float **logits)
{
    struct slot *e = ctx;
    if (n == 0 || n > (size_t)e->n_ctx)
        return ERR_INVAL;
    int keep = 0;
    while (keep < e->n_fed && (size_t)keep < n && e->fed[keep] == tokens[keep])
        keep++;
    if ((size_t)keep == n)
        keep--; /* everything is cached: feed the last token again for its logits */
    int trc = kv_seq_truncate(model_ctx_kv(e->c), 0, keep);
    if (trc == ERR_BADSTATE) { /* a sliding-window ring lost the window before keep */
        keep = 0;
        trc = kv_seq_truncate(model_ctx_kv(e->c), 0, 0);
    }
    if (trc)
        return ERR_INTERNAL;
    e->n_fed = keep;
    int first = choice != e->last_choice;
    e->last_choice = choice;
    uint64_t t0 = clock_mono_ns();
    int at = keep;
    while ((size_t)at < n) {
        int k = (int)n - at < e->n_batch ? (int)n - at : e->n_batch;
        for (int i = 0; i < k; i++) {
            e->pos[i] = at + i;
            e->mark[i] = (size_t)(at + i) == n - 1;
        }
        struct model_batch b = {k, tokens + at, e->pos, e->seq, e->mark};
        int n_out;
        int rc = model_forward(e->c, &b, logits, &n_out);
        if (rc)
            return rc;
        memcpy(e->fed + at, tokens + at, (size_t)k * sizeof *tokens);
        at += k;
        e->n_fed = at;
    }
    uint64_t dt = clock_mono_ns() - t0;
    if (first) {
        e->n_prompt_tok += (int64_t)n - keep;
        e->prompt_ns += dt;
    } else {
        e->n_dec_tok += (int64_t)n - keep;
        e->dec_ns += dt;
    }
    return 0;
}

static int slot_on_done(void *ctx, uint64_t choice, const struct gen_seq *s)
{
    struct slot *e = ctx;
    if (!e->print_ids)
        return 0;
    fprintf(e->errout, "choice %llu\nprompt ids:", (unsigned long long)choice);
    for (size_t i = 0; i < s->n_prompt; i++)
        fprintf(e->errout, " %d", s->prompt[i]);
    fputs("\ncompletion ids:", e->errout);
    for (size_t i = 0; i < s->n_gen && !tok_is_eog(e->t, s->gen[i]); i++)
        fprintf(e->errout, " %d", s->gen[i]);
    fputc('\n', e->errout);
    return 0;
}

/* The request body of --prompt/--chat. */
static int build_body(const struct oneshot_opts *o, json_t **out)
{
    json_t *b = json_object();
    if (!b)
        return ERR_NOMEM;
    int bad = 0;
    if (o->embed) {
        bad |= json_object_set_new(b, "input", json_stringn(o->text, strlen(o->text)));
        if (bad) {
            json_decref(b);
            return ERR_NOMEM;
        }
        *out = b;
        return 0;
    }
    if (o->chat) {
        json_t *msgs = json_array(), *msg = json_object();
        bad |= !msgs || !msg;
        bad |= json_object_set_new(msg, "role", json_string("user"));
        bad |= json_object_set_new(msg, "content", json_stringn(o->text, strlen(o->text)));
        bad |= json_array_append_new(msgs, msg);
        bad |= json_object_set_new(b, "messages", msgs);
    } else {
        bad |= json_object_set_new(b, "prompt", json_stringn(o->text, strlen(o->text)));
    }
    bad |= json_object_set_new(b, "max_tokens", json_integer(o->max_tokens));
    if (o->has_temperature)
        bad |= json_object_set_new(b, "temperature", json_real(o->temperature));
    if (o->has_top_p)
        bad |= json_object_set_new(b, "top_p", json_real(o->top_p));
    if (o->has_top_k)
        bad |= json_object_set_new(b, "top_k", json_integer(o->top_k));
    if (o->has_seed)
        bad |= json_object_set_new(b, "seed", json_integer(o->seed));
    if (o->n)
        bad |= json_object_set_new(b, "n", json_integer(o->n));
    if (o->n_stop) {
        json_t *a = json_array();
        bad |= !a;
        for (size_t i = 0; i < o->n_stop; i++)
            bad |= json_array_append_new(a, json_string(o->stop[i]));
        bad |= json_object_set_new(b, "stop", a);
    }
    if (bad) {
        json_decref(b);
        return ERR_NOMEM;
    }
    *out = b;
    return 0;
}

static int read_body(const char *path, json_t **out, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, err_len, ERR_IO, "cannot open '%s'", path);
    struct buf b;
    buf_init(&b, ONESHOT_MAX_BODY_BYTES);
    char chunk[65536];
    size_t k;
    int rc = 0;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((rc = buf_append(&b, chunk, k)))
            break;
    if (!rc && ferror(f))
        rc = ERR_IO;
    fclose(f);
    if (rc) {
        buf_release(&b);
        return fail(err, err_len, rc, "cannot read '%s': %s", path, err_msg(rc));
    }
    struct js_limits lim = JS_LIMITS_DEFAULT;
    lim.max_bytes = ONESHOT_MAX_BODY_BYTES;
    struct js_error jerr;
    memset(&jerr, 0, sizeof jerr);
    rc = js_parse(b.data ? b.data : "", b.len, &lim, out, &jerr);
    buf_release(&b);
    if (rc)
        return fail(err, err_len, rc, "'%s': line %d column %d: %s", path, jerr.line,
                    jerr.column, jerr.message);
    if (!json_is_object(*out)) {
        json_decref(*out);
        return fail(err, err_len, ERR_INVAL, "'%s': the request body must be a JSON object", path);
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* An /v1/embeddings body (see oneshot.h). Takes body. */
static int run_embed(const struct oneshot_opts *o, json_t *body, FILE *out, FILE *errout, char *err,
                     size_t err_len)
{
    struct engine *eng = NULL;
    struct model_ctx *c = NULL;
    json_t *resp = NULL;
    char *dump = NULL;
    struct engine_opts eo = {.model_path = o->model_path, .device = o->device,
                             .threads = o->threads, .exact_matmul = o->exact, .n_ctx = o->n_ctx,
                             .kv_type = o->kv_type};
    int rc = engine_open(&eo, &eng, err, err_len);
    if (rc)
        goto out;
    struct model_ctx_params cp;
    engine_ctx_params(eng, &cp);
    cp.embeddings = 1;
    cp.n_seq_max = 16;
    cp.n_batch_max = ONESHOT_BATCH;
    cp.n_out_max = ONESHOT_BATCH;
    int n_ctx = cp.n_ctx ? cp.n_ctx
                         : (eng->model->hp.n_ctx_train < 4096 ? eng->model->hp.n_ctx_train : 4096);
    cp.n_kv_blocks = (n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS * 2; /* see embed.c */
    if ((rc = model_ctx_new(eng->model, &cp, &c))) {
        fail(err, err_len, rc, "cannot create the embeddings context: %s", err_msg(rc));
        goto out;
    }
    const char *name = json_string_value(json_object_get(body, "model"));
    struct problem gerr;
    memset(&gerr, 0, sizeof gerr);
    int64_t n_tok = 0;
    uint64_t t0 = clock_mono_ns();
    rc = oembed_run(c, eng->tok, name ? name : base_name(o->model_path), body, &resp, &n_tok, &gerr);
    uint64_t dt = clock_mono_ns() - t0;
    if (rc == ERR_INVAL && gerr.message[0]) {
        request_error(o, out, &gerr, rc, err, err_len);
        goto out;
    }
    if (rc) {
        fail(err, err_len, rc, "embedding failed: %s", err_msg(rc));
        goto out;
    }
    if (!(dump = json_dumps(resp, JSON_COMPACT | JSON_REAL_PRECISION(9)))) {
        rc = fail(err, err_len, ERR_NOMEM, "out of memory");
        goto out;
    }
    fprintf(out, "%s\n", dump);
    if (fflush(out)) {
        rc = fail(err, err_len, ERR_IO, "cannot write the response");
        goto out;
    }
    fprintf(errout, "embed: %lld tokens, %.3f s (%.1f tok/s)\n", (long long)n_tok, (double)dt / 1e9,
            rate(n_tok, dt));
out:
    free(dump);
    json_decref(resp);
    json_decref(body);
    model_ctx_free(c);
    engine_close(eng);
    return rc;
}

int oneshot_run(const struct oneshot_opts *o, FILE *out, FILE *errout, char *err, size_t err_len)
{
    struct slot e;
    json_t *body = NULL, *resp = NULL;
    char *dump = NULL;
    int rc;
    if (o->json_path)
        rc = read_body(o->json_path, &body, err, err_len);
    else
        rc = build_body(o, &body);
    if (rc) {
        if (rc == ERR_NOMEM)
            fail(err, err_len, rc, "out of memory");
        return rc;
    }
    enum gp_endpoint ep = json_object_get(body, "messages") ? GP_CHAT : GP_COMPLETIONS;
    if (!o->embed && responses_body(body))
        ep = GP_RESPONSES;
    else if (o->embed || (json_object_get(body, "input") && !json_object_get(body, "messages") &&
                          !json_object_get(body, "prompt")))
        return run_embed(o, body, out, errout, err, err_len);
    if ((rc = slot_init(&e, o->model_path, o->threads, o->n_ctx, o->exact, o->device, o->kv_type,
                        err, err_len))) {
        json_decref(body);
        return rc;
    }
    e.errout = errout;
    e.print_ids = o->print_ids;
    const struct chat_tmpl *ct = e.eng->tmpl;
    if (ep != GP_COMPLETIONS && !ct) {
        rc = fail(err, err_len, e.eng->tmpl_rc, "no usable chat template: %s",
                  err_msg(e.eng->tmpl_rc));
        goto out;
    }
    const char *name = json_string_value(json_object_get(body, "model"));
    struct oreq_model gm = {e.t, ct, (size_t)e.n_ctx, name ? name : base_name(o->model_path),
                            NULL, slot_next_logits, &e};
    struct oreq_opts go = {NULL, 0, slot_on_done, &e};
    struct problem gerr;
    memset(&gerr, 0, sizeof gerr);
    rc = oreq_run(&gm, ep, body, &go, &resp, &gerr);
    if (rc == ERR_INVAL && gerr.message[0]) {
        request_error(o, out, &gerr, rc, err, err_len);
        goto out;
    }
    if (rc) {
        fail(err, err_len, rc, "generation failed: %s", err_msg(rc));
        goto out;
    }
    if (o->json_path) {
        if (!(dump = json_dumps(resp, JSON_COMPACT))) {
            rc = fail(err, err_len, ERR_NOMEM, "out of memory");
            goto out;
        }
        fprintf(out, "%s\n", dump);
    } else {
        json_t *choices = json_object_get(resp, "choices"); /* --prompt / --chat: never a Response */
        for (size_t i = 0; i < json_array_size(choices); i++) {
            json_t *c = json_array_get(choices, i);
            json_t *txt = ep == GP_CHAT ? json_object_get(json_object_get(c, "message"), "content")
                                        : json_object_get(c, "text");
            fwrite(json_string_value(txt), 1, json_string_length(txt), out);
            fputc('\n', out);
        }
    }
    if (fflush(out)) {
        rc = fail(err, err_len, ERR_IO, "cannot write the response");
        goto out;
    }
    fprintf(errout, "prompt: %lld tokens, %.2f s (%.1f tok/s); decode: %lld tokens, %.2f s "
            "(%.1f tok/s)\n", (long long)e.n_prompt_tok, (double)e.prompt_ns / 1e9,
            rate(e.n_prompt_tok, e.prompt_ns), (long long)e.n_dec_tok, (double)e.dec_ns / 1e9,
            rate(e.n_dec_tok, e.dec_ns));
out:
    free(dump);
    json_decref(resp);
    json_decref(body);
    slot_release(&e);
    return rc;
}

/* CPU time of the process (all threads), ns. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int oneshot_bench(const struct oneshot_bench_opts *o, FILE *out, char *err, size_t err_len)
{
    static const char unit[] = "The quick brown fox jumps over the lazy dog. ";
    struct slot e;
    struct buf text;
    int32_t *ids = NULL;
    uint64_t *step_ns = NULL; /* (n_dec) wall time of each decode step */
    int reps = o->n_prompt_repeat > 0 ? o->n_prompt_repeat : 6;
    int n_dec = o->n_decode > 0 ? o->n_decode : 128;
    buf_init(&text, 1u << 24);
    int rc = 0;
    for (int i = 0; i < reps && !rc; i++)
        rc = buf_append(&text, unit, sizeof unit - 1);
    if (rc) {
        buf_release(&text);
        return fail(err, err_len, rc, "prompt: %s", err_msg(rc));
    }
    if ((rc = slot_init(&e, o->model_path, o->threads, 0, o->exact, o->device, o->kv_type, err,
                        err_len))) {
        buf_release(&text);
        return rc;
    }
    size_t cap = TOK_ENCODE_BOUND(text.len), n = 0;
    if (!(ids = malloc((cap + (size_t)n_dec + 1) * sizeof *ids))) {
        rc = fail(err, err_len, ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = tok_encode(e.t, text.data, text.len, TOK_ADD_SPECIAL, ids, cap, &n))) {
        fail(err, err_len, rc, "cannot tokenize: %s", err_msg(rc));
        goto out;
    }
    if (n == 0 || n + (size_t)n_dec > (size_t)e.n_ctx || n > (size_t)e.n_batch) {
        rc = fail(err, err_len, ERR_INVAL, "prompt of %zu tokens + %d does not fit", n, n_dec);
        goto out;
    }
    if (!(step_ns = malloc((size_t)n_dec * sizeof *step_ns))) {
        rc = fail(err, err_len, ERR_NOMEM, "out of memory");
        goto out;
    }
    const float *lg;
    uint64_t t0 = clock_mono_ns(), c0 = cpu_ns();
    if ((rc = slot_next_logits(&e, 0, ids, n, &lg)))
        goto fwd;
    uint64_t t1 = clock_mono_ns(), ts = t1, c1 = cpu_ns();
    for (int i = 0; i < n_dec; i++) {
        ids[n] = kn_argmax_f32(lg, e.m->hp.n_vocab);
        n++;
        if ((rc = slot_next_logits(&e, 0, ids, n, &lg)))
            goto fwd;
        uint64_t te = clock_mono_ns();
        step_ns[i] = te - ts;
        ts = te;
    }
    uint64_t t2 = clock_mono_ns(), c2 = cpu_ns();
    /* the median step and the process CPU time per token as well: on a
     * shared machine the mean moves with the other jobs' load, the median
     * and (at 1 thread) the CPU time much less */
    qsort(step_ns, (size_t)n_dec, sizeof *step_ns, cmp_u64);
    size_t n_pre = n - (size_t)n_dec;
    fprintf(out, "threads %d: prefill %zu tok %.1f tok/s, decode %d tok %.1f tok/s, median step %.1f tok/s; "
            "cpu prefill %.3f ms/tok, decode %.3f ms/tok\n",
            kn_pool_threads(e.pool), n_pre, rate((int64_t)n_pre, t1 - t0), n_dec, rate(n_dec, t2 - t1),
            rate(1, step_ns[n_dec / 2]), (double)(c1 - c0) / 1e6 / (double)n_pre,
            (double)(c2 - c1) / 1e6 / n_dec);
    goto out;
fwd:
    fail(err, err_len, rc, "forward pass failed: %s", err_msg(rc));
out:
    free(step_ns);
    free(ids);
    buf_release(&text);
    slot_release(&e);
    return rc;
}
