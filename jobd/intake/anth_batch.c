/*
 * anth_batch.c - Message Batches bodies into chat JSONL lines, results
 * rows into Message Batches results lines (see anth_batch.h).
 */
#include "jobd/intake/anth_batch.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "openai/anthropic.h"

/* err = "requests.<i>.<path>: <msg>" with param the same path. */
static int bad_at(struct problem *err, int64_t i, const char *path, const char *msg)
{
    char p[160];
    if (i >= 0)
        snprintf(p, sizeof p, "requests.%lld%s%s", (long long)i, *path ? "." : "", path);
    else
        snprintf(p, sizeof p, "%s", path);
    problem_setf(err, "invalid_request_error", p, "%s: %s", p, msg);
    return ERR_INVAL;
}

static int custom_id_ok(const char *s, size_t n)
{
    if (n < 1 || n > ANTH_CUSTOM_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* The chat line of one request into line (reset first). */
static int one_line(struct buf *line, const char *cid, const json_t *chat)
{
    buf_reset(line);
    int rc = buf_append_str(line, "{\"custom_id\":");
    if (!rc)
        rc = js_escape(line, cid, strlen(cid));
    if (!rc)
        rc = buf_append_str(line, ",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":");
    if (!rc)
        rc = js_dump(line, chat);
    if (!rc)
        rc = buf_append_str(line, "}");
    return rc;
}

int anth_batch_lines(const char *body, size_t len, const struct ingest_limits *lim,
                     int (*write)(void *ctx, const void *data, size_t n), void *ctx, int64_t *n_requests,
                     struct problem *err)
{
    json_t *root = NULL, *seen = NULL;
    struct js_error je;
    struct js_limits jl = {len + 1, lim->max_json_depth + 2, 0};
    struct buf line;
    buf_init(&line, lim->max_line_bytes + 1);
    int rc;
    if (js_parse(body, len, &jl, &root, &je) || !json_is_object(root)) {
        rc = bad_at(err, -1, "body", "expected a JSON object {\"requests\": [...]}");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "requests")) {
            char p[80];
            snprintf(p, sizeof p, "%.64s", k);
            rc = bad_at(err, -1, p, "Extra inputs are not permitted");
            goto out;
        }
    }
    json_t *reqs = json_object_get(root, "requests");
    if (!reqs) {
        rc = bad_at(err, -1, "requests", "Field required");
        goto out;
    }
    if (!json_is_array(reqs) || !json_array_size(reqs)) {
        rc = bad_at(err, -1, "requests", "Input should be a non-empty list of {custom_id, params}");
        goto out;
    }
    if ((int64_t)json_array_size(reqs) > lim->max_requests) {
        char msg[120];
        snprintf(msg, sizeof msg, "at most %lld requests per batch (got %zu)", (long long)lim->max_requests,
                 json_array_size(reqs));
        rc = bad_at(err, -1, "requests", msg);
        err->status = 413;
        snprintf(err->code, sizeof err->code, "request_too_large");
        goto out;
    }
    if (!(seen = json_object())) {
        rc = ERR_NOMEM;
        goto out;
    }
    size_t i;
    json_t *r;
    json_array_foreach(reqs, i, r) {
        if (!json_is_object(r)) {
            rc = bad_at(err, (int64_t)i, "", "Input should be a valid dictionary {custom_id, params}");
            goto out;
        }
        json_object_foreach(r, k, v) {
            if (strcmp(k, "custom_id") && strcmp(k, "params")) {
                char p[80];
                snprintf(p, sizeof p, "%.64s", k);
                rc = bad_at(err, (int64_t)i, p, "Extra inputs are not permitted");
                goto out;
            }
        }
        json_t *cid = json_object_get(r, "custom_id");
        if (!cid) {
            rc = bad_at(err, (int64_t)i, "custom_id", "Field required");
            goto out;
        }
        if (!json_is_string(cid) || !custom_id_ok(json_string_value(cid), json_string_length(cid))) {
            rc = bad_at(err, (int64_t)i, "custom_id", "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'");
            goto out;
        }
        if (json_object_get(seen, json_string_value(cid))) {
            char msg[120];
            snprintf(msg, sizeof msg, "Duplicate custom_id '%s': custom_ids must be unique within a batch",
                     json_string_value(cid));
            rc = bad_at(err, (int64_t)i, "custom_id", msg);
            goto out;
        }
        if (json_object_set_new(seen, json_string_value(cid), json_true())) {
            rc = ERR_NOMEM;
            goto out;
        }
        json_t *params = json_object_get(r, "params");
        if (!params) {
            rc = bad_at(err, (int64_t)i, "params", "Field required");
            goto out;
        }
        json_t *chat = NULL;
        struct problem p = {0};
        if ((rc = anth_params_check(params, &chat, &p))) {
            if (rc == ERR_INVAL) {
                char path[96];
                snprintf(path, sizeof path, "params%s%.64s", *p.param ? "." : "", p.param);
                bad_at(err, (int64_t)i, path, p.message);
            }
            goto out;
        }
        rc = one_line(&line, json_string_value(cid), chat);
        json_decref(chat);
        if (rc == ERR_TOOBIG || (!rc && line.len > lim->max_line_bytes)) {
            char msg[120];
            snprintf(msg, sizeof msg, "the request is larger than %zu bytes", lim->max_line_bytes);
            rc = bad_at(err, (int64_t)i, "params", msg);
            goto out;
        }
        if (rc)
            goto out;
        /* the rule the ingest thread applies to this line later */
        struct ingest_line il;
        if ((rc = ingest_line_check(line.data, line.len, "/v1/chat/completions", lim, &il, &p))) {
            if (rc == ERR_INVAL) {
                const char *f = p.param;
                if (!strncmp(f, "body.", 5))
                    f += 5;
                char path[96];
                snprintf(path, sizeof path, "params%s%.64s", *f && strcmp(f, "body") ? "." : "",
                         strcmp(f, "body") ? f : "");
                bad_at(err, (int64_t)i, path, p.message);
            }
            goto out;
        }
        ingest_line_release(&il);
        if ((rc = buf_append_byte(&line, '\n')) || (rc = write(ctx, line.data, line.len)))
            goto out;
    }
    *n_requests = (int64_t)json_array_size(reqs);
    rc = 0;
out:
    buf_release(&line);
    json_decref(seen);
    json_decref(root);
    return rc;
}

/* ---- results ------------------------------------------------------------------ */

static int put_line(struct buf *out, const char *cid, json_t *result)
{
    json_t *o = result ? json_pack("{s:s, s:o}", "custom_id", cid, "result", result) : NULL;
    if (!o)
        return ERR_NOMEM;
    int rc = js_dump(out, o);
    json_decref(o);
    return rc ? rc : buf_append_byte(out, '\n');
}

static json_t *errored(const char *type, const char *msg)
{
    json_t *e = anth_error_json(type, msg);
    return e ? json_pack("{s:s, s:o}", "type", "errored", "error", e) : NULL;
}

int anth_batch_result_line(struct buf *out, const struct store_result_row *r)
{
    const char *cid = r->custom_id ? r->custom_id : "";
    if (r->error_code && !strcmp(r->error_code, "batch_cancelled"))
        return put_line(out, cid, json_pack("{s:s}", "type", "canceled"));
    if (r->error_code && !strcmp(r->error_code, "batch_expired"))
        return put_line(out, cid, json_pack("{s:s}", "type", "expired"));
    json_t *body = r->body ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
    json_t *res = NULL;
    if (r->status_code == 200 && body) {
        json_t *u = json_object_get(body, "usage");
        /* the ledger's counts: prefix-cache hits as cache reads; but a reused
         * answer's row counts nothing computed (0 tokens, spec/usage.md
         * "Result reuse"): its body keeps the original's usage, as the
         * OpenAI results line does */
        if (json_is_object(u) && !json_object_get(u, "reused_tokens")) {
            json_object_set_new(u, "prompt_tokens", json_integer(r->prompt_tokens));
            json_object_set_new(u, "completion_tokens", json_integer(r->completion_tokens));
            json_object_set_new(u, "prompt_tokens_details", json_pack("{s:I}", "cached_tokens",
                                                                       (json_int_t)r->cached_tokens));
        }
        json_t *m = NULL;
        int rc = anth_message_from_chat(body, &m);
        if (rc == ERR_NOMEM) {
            json_decref(body);
            return rc;
        }
        res = rc ? errored("api_error", "the worker's answer is not a chat completion")
                 : json_pack("{s:s, s:o}", "type", "succeeded", "message", m);
    } else {
        const char *msg = json_string_value(json_object_get(json_object_get(body, "error"), "message"));
        if (!msg)
            msg = r->error_message ? r->error_message : "the request failed";
        res = errored(r->status_code >= 400 && r->status_code < 500 ? "invalid_request_error" : "api_error", msg);
    }
    json_decref(body);
    return put_line(out, cid, res);
}
