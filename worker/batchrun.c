/* batchrun.c - an OpenAI batch input file through the scheduler (see batchrun.h). */
#include "worker/batchrun.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "kernels/kn.h"
#include "worker/engine/engine.h"
#include "worker/engine/sched.h"
#include "worker/run/request.h"

#define BATCHRUN_MAX_LINE (16u << 20)

struct brun {
    FILE *out;
    char **custom_ids;    /* (n_lines) by line index */
    size_t n_lines, cap;
    int io_error;
};

static void emit(struct brun *b, size_t line, const char *custom_id, int status,
                 const json_t *body, const char *code, const char *msg)
{
    char id[48], rid[48];
    snprintf(id, sizeof id, "batch_req_%zu", line + 1);
    snprintf(rid, sizeof rid, "req_%zu", line + 1);
    json_t *o = json_object();
    if (!o) {
        b->io_error = 1;
        return;
    }
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "custom_id", custom_id ? json_string(custom_id) : json_null());
    if (body) {
        json_t *r = json_object();
        json_object_set_new(r, "status_code", json_integer(status));
        json_object_set_new(r, "request_id", json_string(rid));
        json_object_set(r, "body", (json_t *)body);
        json_object_set_new(o, "response", r);
        json_object_set_new(o, "error", json_null());
    } else {
        json_object_set_new(o, "response", json_null());
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", code, "message", msg));
    }
    if (json_dumpf(o, b->out, JSON_COMPACT) != 0 || fputc('\n', b->out) == EOF)
        b->io_error = 1;
    json_decref(o);
}

static void on_result(void *ctx, const struct oreq_result *r)
{
    struct brun *b = ctx;
    size_t line = (size_t)strtoull(r->id, NULL, 10);
    emit(b, line, line < b->n_lines ? b->custom_ids[line] : NULL, r->status, r->body, NULL, NULL);
}

static int add_line(struct brun *b, struct oreq_sched *s, size_t line, const char *text, size_t len)
{
    json_t *j = NULL;
    struct js_limits lim = {BATCHRUN_MAX_LINE, 32, 0};
    const char *custom_id = NULL, *url = NULL;
    json_t *body = NULL;
    int rc;
    if (js_parse(text, len, &lim, &j, NULL) != 0 || !json_is_object(j)) {
        emit(b, line, NULL, 0, NULL, "invalid_json_line", "This line is not a JSON object.");
        json_decref(j);
        return 0;
    }
    if (js_get_str(j, "custom_id", &custom_id) != 0 || js_get_str(j, "url", &url) != 0 ||
        js_get_obj(j, "body", &body) != 0) {
        emit(b, line, custom_id, 0, NULL, "missing_required_parameter",
             "A line needs a string custom_id, a string url and an object body.");
        json_decref(j);
        return 0;
    }
    enum gp_endpoint ep;
    if (strcmp(url, "/v1/chat/completions") == 0)
        ep = GP_CHAT;
    else if (strcmp(url, "/v1/completions") == 0)
        ep = GP_COMPLETIONS;
    else if (strcmp(url, "/v1/responses") == 0)
        ep = GP_RESPONSES;
    else {
        emit(b, line, custom_id, 0, NULL, "invalid_url",
             "The url must be /v1/chat/completions, /v1/completions or /v1/responses.");
        json_decref(j);
        return 0;
    }
    size_t n = strlen(custom_id);
    b->custom_ids[line] = malloc(n + 1);
    if (!b->custom_ids[line]) {
        json_decref(j);
        return ERR_NOMEM;
    }
    memcpy(b->custom_ids[line], custom_id, n + 1);
    char id[32];
    snprintf(id, sizeof id, "%zu", line);
    rc = oreq_sched_add(s, id, ep, body);
    json_decref(j);
    return rc;
}

int batchrun_file(const struct batchrun_opts *o, FILE *out, FILE *errout, char *err,
                  size_t err_len)
{
    struct engine *e = NULL;
    struct oreq_sched *s = NULL;
    struct brun b = {out, NULL, 0, 0, 0};
    FILE *in = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    int rc;

    struct engine_opts eo = {
        .model_path = o->model_path, .device = o->device, .threads = o->threads,
        .exact_matmul = o->exact_matmul, .n_ctx = o->n_ctx,
        .max_batch_tokens = o->max_batch_tokens, .max_seqs = o->max_seqs,
        .kv_mem_bytes = o->kv_mem_bytes, .no_prefix_cache = o->no_prefix_cache, .swa_full = o->swa_full,
        .spec_off = o->spec_off, .spec_max_seqs = o->spec_max_seqs,
        .kv_type = o->kv_type,
    };
    if ((rc = engine_open(&eo, &e, err, err_len)) != 0)
        goto out;
    struct sched_opts so;
    engine_sched_opts(e, &so);
    const char *slash = strrchr(o->model_path, '/');
    struct oreq_sched_opts oo = {slash ? slash + 1 : o->model_path, on_result, &b};
    if ((rc = oreq_sched_new(e->model, e->tok, e->tmpl, &so, &oo, &s)) != 0) {
        snprintf(err, err_len, "cannot create the scheduler (check --kv-mem, --max-seqs, "
                 "--max-batch-tokens): %s", err_msg(rc));
        goto out;
    }
    in = fopen(o->batch_file, "rb");
    if (!in) {
        snprintf(err, err_len, "cannot open '%s'", o->batch_file);
        rc = ERR_IO;
        goto out;
    }
    for (size_t ln = 0;; ln++) {
        ssize_t n = getline(&line, &line_cap, in);
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n == 0) {
            ln--;
            continue;
        }
        if (b.n_lines == b.cap) {
            size_t nc = b.cap ? b.cap * 2 : 1024;
            char **p = realloc(b.custom_ids, nc * sizeof *p);
            if (!p) {
                rc = ERR_NOMEM;
                goto out;
            }
            b.custom_ids = p;
            b.cap = nc;
        }
        b.custom_ids[b.n_lines++] = NULL;
        if ((size_t)n > BATCHRUN_MAX_LINE) {
            emit(&b, ln, NULL, 0, NULL, "line_too_long", "This line is longer than 16 MiB.");
            continue;
        }
        if ((rc = add_line(&b, s, ln, line, (size_t)n)) != 0) {
            snprintf(err, err_len, "line %zu: %s", ln + 1, err_msg(rc));
            goto out;
        }
    }
    if (ferror(in)) {
        snprintf(err, err_len, "cannot read '%s'", o->batch_file);
        rc = ERR_IO;
        goto out;
    }
    if ((rc = sched_run(oreq_sched_engine(s))) != 0) {
        snprintf(err, err_len, "engine error: %s", err_msg(rc));
        goto out;
    }
    if (fflush(out) != 0 || b.io_error) {
        snprintf(err, err_len, "cannot write the output");
        rc = ERR_IO;
        goto out;
    }
    struct sched_stats st;
    oreq_sched_get_stats(s, &st);
    int64_t prompt = st.prefill_computed + st.prefix_reused;
    double w = st.wall_s > 0 ? st.wall_s : 1e-9;
    fprintf(errout,
            "sched-stats: {\"requests\":%lld,\"request_errors\":%lld,\"steps\":%lld,"
            "\"prompt_tokens\":%lld,\"prefill_computed\":%lld,\"prefix_reused\":%lld,"
            "\"completion_tokens\":%lld,\"recomputed\":%lld,\"preemptions\":%lld,"
            "\"blocks_evicted\":%lld,\"kv_blocks\":%d,\"n_ctx\":%d,\"kv_util_avg\":%.3f,"
            "\"kv_util_peak\":%.3f,\"wall_s\":%.3f,\"forward_s\":%.3f,\"mask_s\":%.3f,\"masks\":%lld,\"cpu_s\":%.3f,"
            "\"spec_steps\":%lld,\"spec_drafted\":%lld,\"spec_accepted\":%lld,"
            "\"threads\":%d,\"output_tok_s\":%.2f,\"total_tok_s\":%.2f}\n",
            (long long)st.n_requests, (long long)st.n_request_errors, (long long)st.n_steps,
            (long long)prompt, (long long)st.prefill_computed, (long long)st.prefix_reused,
            (long long)st.output_tokens, (long long)st.recomputed, (long long)st.n_preemptions,
            (long long)st.blocks_evicted, st.kv_blocks, st.n_ctx, st.kv_util_avg,
            st.kv_util_peak, st.wall_s, st.forward_s, st.mask_s, (long long)st.n_masks, st.cpu_s,
            (long long)st.spec_steps, (long long)st.spec_drafted, (long long)st.spec_accepted,
            kn_pool_threads(e->pool),
            (double)st.output_tokens / w, (double)(st.output_tokens + prompt) / w);
    rc = 0;
out:
    if (in)
        fclose(in);
    free(line);
    oreq_sched_free(s);
    for (size_t i = 0; i < b.n_lines; i++)
        free(b.custom_ids[i]);
    free(b.custom_ids);
    engine_close(e);
    return rc;
}
