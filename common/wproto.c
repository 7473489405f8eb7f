/* wproto.c - the worker-protocol messages (see wproto.h). */
#include "common/wproto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"

/* ---- endpoints ------------------------------------------------------------------------ */

static const struct {
    enum wproto_endpoint ep;
    const char *url;
} endpoints[WPROTO_N_ENDPOINTS] = {
    {WPROTO_EP_CHAT, "/v1/chat/completions"},
    {WPROTO_EP_COMPLETIONS, "/v1/completions"},
    {WPROTO_EP_EMBEDDINGS, "/v1/embeddings"},
    {WPROTO_EP_RESPONSES, "/v1/responses"},
};

const enum wproto_endpoint wproto_endpoints[WPROTO_N_ENDPOINTS] = {
    WPROTO_EP_CHAT, WPROTO_EP_COMPLETIONS, WPROTO_EP_EMBEDDINGS, WPROTO_EP_RESPONSES,
};

const char *wproto_endpoint_url(enum wproto_endpoint ep)
{
    for (size_t k = 0; k < WPROTO_N_ENDPOINTS; k++)
        if (endpoints[k].ep == ep)
            return endpoints[k].url;
    return NULL;
}

enum wproto_endpoint wproto_endpoint_of(const char *url)
{
    for (size_t k = 0; url && k < WPROTO_N_ENDPOINTS; k++)
        if (strcmp(url, endpoints[k].url) == 0)
            return endpoints[k].ep;
    return WPROTO_EP_NONE;
}

/* ---- strict readers --------------------------------------------------------------------- */

int wproto_msg_parse(const char *json, size_t len, json_t **root, char *err, size_t err_len)
{
    struct js_limits lim = {WPROTO_MSG_MAX_BYTES, 16, 0};
    struct js_error je;
    int rc = js_parse(json, len, &lim, root, &je);
    if (rc)
        return err_setf(err, err_len, rc, "%s", je.message);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return err_setf(err, err_len, ERR_PARSE, "the message must be a JSON object");
    }
    return 0;
}

int wproto_get_str(const json_t *o, const char *key, size_t max, int required, const char **out,
                   char *err, size_t err_len)
{
    int rc = js_get_str(o, key, out);
    if (rc == ERR_NOTFOUND && !required) {
        *out = NULL;
        return 0;
    }
    if (rc || !**out || strlen(*out) > max)
        return err_setf(err, err_len, ERR_INVAL, "'%s' must be a string of 1..%zu bytes", key, max);
    return 0;
}

int wproto_get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                   int64_t *out, char *err, size_t err_len)
{
    int rc = js_get_int(o, key, out);
    if (rc == ERR_NOTFOUND) {
        *out = dflt;
        return 0;
    }
    if (rc || *out < lo || *out > hi)
        return err_setf(err, err_len, ERR_INVAL, "'%s' must be an integer in %lld..%lld", key,
                        (long long)lo, (long long)hi);
    return 0;
}

int wproto_get_id(const json_t *o, const char *key, const char *prefix, const char **out, char *err,
                  size_t err_len)
{
    int rc = wproto_get_str(o, key, ID_MAX - 1, 1, out, err, err_len);
    if (!rc && !id_valid(prefix, *out))
        return err_setf(err, err_len, ERR_INVAL, "'%s' is not a %s... id", key, prefix);
    return rc;
}

/* ---- lease answer ----------------------------------------------------------------------- */

static int put_str(struct buf *b, const char *s)
{
    return s ? js_escape(b, s, strlen(s)) : buf_append_str(b, "null");
}

int wproto_lease_write_empty(struct buf *b, int retry_after_ms)
{
    return buf_printf(b, "{\"lease_id\":null,\"requests\":[],\"retry_after_ms\":%d}", retry_after_ms);
}

int wproto_lease_write_begin(struct buf *b, const char *lease_id, int64_t expires_at)
{
    return buf_printf(b, "{\"lease_id\":\"%s\",\"expires_at\":%lld,\"requests\":[", lease_id,
                      (long long)expires_at);
}

int wproto_lease_write_item(struct buf *b, size_t i, const struct wproto_lease_item *it)
{
    int rc = buf_printf(b, "%s{\"request_id\":\"%s\",\"custom_id\":", i ? "," : "", it->request_id);
    if (!rc)
        rc = put_str(b, it->custom_id);
    if (!rc && it->url && it->url[0]) {
        rc = buf_append_str(b, ",\"url\":");
        if (!rc)
            rc = put_str(b, it->url);
    }
    if (!rc)
        rc = buf_printf(b, ",\"attempt\":%lld,\"body\":", (long long)it->attempt);
    if (!rc)
        rc = buf_append(b, it->body, it->body_len);
    return rc ? rc : buf_append_byte(b, '}');
}

int wproto_lease_write_end(struct buf *b)
{
    return buf_append_str(b, "]}");
}

int wproto_lease_parse(const json_t *ans, struct wproto_lease *out)
{
    struct wproto_lease l;
    memset(&l, 0, sizeof l);
    const char *lease_id = NULL;
    json_t *reqs = NULL;
    if (js_get_str(ans, "lease_id", &lease_id)) { /* null or absent: no work */
        js_get_int(ans, "retry_after_ms", &l.retry_after_ms);
        *out = l;
        return 0;
    }
    if (strlen(lease_id) >= ID_MAX || js_get_arr(ans, "requests", &reqs))
        return ERR_PARSE;
    l.lease_id = lease_id;
    size_t n = json_array_size(reqs);
    if (n && !(l.reqs = calloc(n, sizeof *l.reqs)))
        return ERR_NOMEM;
    size_t i;
    json_t *r;
    json_array_foreach(reqs, i, r) {
        const char *rid = NULL;
        json_t *body = NULL;
        if (js_get_str(r, "request_id", &rid) || strlen(rid) >= ID_MAX || js_get_obj(r, "body", &body)) {
            l.n_skipped++;
            continue;
        }
        struct wproto_lease_req *q = &l.reqs[l.n++];
        q->request_id = rid;
        q->body = body;
        const char *url = json_string_value(json_object_get(r, "url"));
        if (url)
            q->ep = wproto_endpoint_of(url);
        else
            q->ep = json_object_get(body, "messages") || !json_object_get(body, "prompt")
                        ? WPROTO_EP_CHAT
                        : WPROTO_EP_COMPLETIONS;
    }
    *out = l;
    return 0;
}

void wproto_lease_release(struct wproto_lease *l)
{
    if (l) {
        free(l->reqs);
        l->reqs = NULL;
        l->n = 0;
    }
}

/* ---- heartbeat -------------------------------------------------------------------------- */

json_t *wproto_heartbeat_json(const char *worker_id, const char *lease_id, int64_t extend_seconds,
                              int64_t completed, double tokens_per_s)
{
    return json_pack("{s:s, s:s, s:I, s:{s:I, s:f}}", "worker_id", worker_id, "lease_id", lease_id,
                     "extend_seconds", (json_int_t)extend_seconds, "progress", "completed",
                     (json_int_t)completed, "tokens_per_s", tokens_per_s >= 0 ? tokens_per_s : 0.0);
}

int wproto_heartbeat_parse(const char *json, size_t len, int64_t extend_default,
                           struct wproto_heartbeat *out, char *err, size_t err_len)
{
    struct wproto_heartbeat m;
    memset(&m, 0, sizeof m);
    m.tokens_per_s = -1;
    int rc = wproto_msg_parse(json, len, &m.root, err, err_len);
    if (rc)
        return rc;
    json_t *prog = NULL;
    if ((rc = wproto_get_id(m.root, "worker_id", "wrk_", &m.worker_id, err, err_len)) ||
        (rc = wproto_get_id(m.root, "lease_id", "lease_", &m.lease_id, err, err_len)) ||
        (rc = wproto_get_int(m.root, "extend_seconds", 1, 86400, extend_default, &m.extend_s, err,
                             err_len)))
        goto out;
    if (js_get_obj(m.root, "progress", &prog) == ERR_INVAL) {
        rc = err_setf(err, err_len, ERR_INVAL, "'progress' must be an object");
        goto out;
    }
    if (prog) {
        double tps = 0;
        int trc = js_get_num(prog, "tokens_per_s", &tps);
        if (trc == ERR_INVAL || (trc == 0 && !(tps >= 0 && tps < 1e12))) {
            rc = err_setf(err, err_len, ERR_INVAL, "'progress.tokens_per_s' must be a number >= 0");
            goto out;
        }
        if (trc == 0)
            m.tokens_per_s = tps;
        if ((rc = wproto_get_int(prog, "completed", 0, INT64_C(1) << 40, 0, &m.completed, err,
                                 err_len)))
            goto out;
    }
out:
    if (rc) {
        json_decref(m.root);
        return rc;
    }
    *out = m;
    return 0;
}

void wproto_heartbeat_release(struct wproto_heartbeat *h)
{
    if (h) {
        json_decref(h->root);
        h->root = NULL;
    }
}

int wproto_hb_answer_write(struct buf *b, const char *lease_id, int64_t expires_at,
                           const char (*cancelled)[ID_MAX], size_t n)
{
    int rc = buf_printf(b, "{\"lease_id\":\"%s\",\"expires_at\":%lld,\"cancelled\":[", lease_id,
                        (long long)expires_at);
    for (size_t i = 0; !rc && i < n; i++)
        rc = buf_printf(b, "%s\"%s\"", i ? "," : "", cancelled[i]);
    return rc ? rc : buf_append_str(b, "]}");
}

json_t *wproto_hb_answer_cancelled(const json_t *ans)
{
    json_t *c = ans ? json_object_get(ans, "cancelled") : NULL;
    return json_is_array(c) ? c : NULL;
}

/* ---- results line ----------------------------------------------------------------------- */

/* Non-negative integer fields of an optional object. */
static int opt_counts(const json_t *obj, const char *const *keys, int64_t *const *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        int rc = js_get_int(obj, keys[i], &v);
        if (rc == ERR_NOTFOUND)
            continue;
        if (rc || v < 0 || v > (INT64_C(1) << 40))
            return -1;
        *dst[i] = v;
    }
    return 0;
}

static const char *const usage_keys[3] = {"prompt_tokens", "completion_tokens", "cached_tokens"};
static const char *const timing_keys[4] = {"queue_ms", "prefill_ms", "decode_ms", "device_ms"};

int wproto_result_parse(const char *line, size_t len, struct wproto_result *out, char *err,
                        size_t err_len)
{
    struct wproto_result r;
    memset(&r, 0, sizeof r);
    struct js_limits lim = {WPROTO_LINE_MAX_BYTES, 64, 0};
    struct js_error je;
    if (js_parse(line, len, &lim, &r.root, &je))
        return err_setf(err, err_len, ERR_PARSE, "%s", je.message);
    int rc = ERR_PARSE;
    const char *status = NULL;
    json_t *root = r.root, *usage = NULL, *timings = NULL;
#define BAD(msg)                                                                                   \
    do {                                                                                           \
        err_setf(err, err_len, ERR_PARSE, "%s", msg);                                              \
        goto out;                                                                                  \
    } while (0)
    if (!json_is_object(root))
        BAD("a results line must be a JSON object");
    if (js_get_str(root, "request_id", &r.request_id) || !id_valid("req_", r.request_id))
        BAD("'request_id' must be a req_... id");
    if (js_get_str(root, "status", &status) ||
        (strcmp(status, "success") != 0 && strcmp(status, "error") != 0))
        BAD("'status' must be \"success\" or \"error\"");
    if (js_get_obj(root, "usage", &usage) == ERR_INVAL || js_get_obj(root, "timings", &timings) == ERR_INVAL)
        BAD("'usage' and 'timings' must be objects");
    int64_t *const udst[3] = {&r.prompt_tokens, &r.completion_tokens, &r.cached_tokens};
    int64_t *const tdst[4] = {&r.queue_ms, &r.prefill_ms, &r.decode_ms, &r.device_ms};
    if ((usage && opt_counts(usage, usage_keys, udst, 3)) || (timings && opt_counts(timings, timing_keys, tdst, 4)))
        BAD("usage and timings fields must be integers >= 0");
    if (r.cached_tokens > r.prompt_tokens)
        BAD("'usage.cached_tokens' exceeds 'usage.prompt_tokens'");
    if (strcmp(status, "success") == 0) {
        json_t *resp = NULL;
        int64_t code = 200;
        json_t *body = NULL;
        if (js_get_obj(root, "response", &resp) || js_get_obj(resp, "body", &body))
            BAD("a success needs 'response.body' (a JSON object)");
        r.body = body;
        int crc = js_get_int(resp, "status_code", &code);
        if (crc == ERR_INVAL || code < 200 || code > 299)
            BAD("'response.status_code' of a success must be 2xx");
        r.kind = WPROTO_RESULT_SUCCESS;
        r.status_code = (int)code;
    } else {
        json_t *e = NULL;
        const char *cls = NULL;
        int64_t sc = 400;
        if (js_get_obj(root, "error", &e) || js_get_str(e, "class", &cls) ||
            js_get_str(e, "message", &r.message))
            BAD("an error needs 'error.class' and 'error.message' strings");
        if (js_get_str(e, "code", &r.code) == ERR_INVAL || js_get_str(e, "param", &r.param) == ERR_INVAL ||
            strlen(r.message) > WPROTO_MESSAGE_MAX || (r.code && strlen(r.code) > WPROTO_CODE_MAX) ||
            (r.param && strlen(r.param) > WPROTO_PARAM_MAX))
            BAD("'error.code' (<= 64 bytes), 'error.param' (<= 256), 'error.message' (<= 4096) must be strings");
        if (strcmp(cls, "invalid_request") == 0) {
            int crc = js_get_int(e, "status_code", &sc);
            if (crc == ERR_INVAL || sc < 400 || sc > 499)
                BAD("'error.status_code' of an invalid_request must be 4xx");
            r.kind = WPROTO_RESULT_INVALID;
            r.status_code = (int)sc;
        } else if (strcmp(cls, "transient") == 0) {
            r.kind = WPROTO_RESULT_TRANSIENT;
        } else {
            BAD("'error.class' must be \"invalid_request\" or \"transient\"");
        }
    }
#undef BAD
    rc = 0;
out:
    if (rc) {
        json_decref(r.root);
        return rc;
    }
    *out = r;
    return 0;
}

void wproto_result_release(struct wproto_result *r)
{
    if (r) {
        json_decref(r->root);
        r->root = NULL;
    }
}

/* Copy at most max bytes of s, cut on a UTF-8 character boundary. */
static json_t *str_cap(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    return json_stringn(s, n);
}

static json_t *timings_json(const struct wproto_result *r)
{
    return json_pack("{s:I, s:I, s:I, s:I}", timing_keys[0], (json_int_t)r->queue_ms, timing_keys[1],
                     (json_int_t)r->prefill_ms, timing_keys[2], (json_int_t)r->decode_ms,
                     timing_keys[3], (json_int_t)r->device_ms);
}

json_t *wproto_result_json(const struct wproto_result *r)
{
    /* json_pack's "O" takes a new reference to the body; the value is not changed */
    json_t *body = (json_t *)r->body;
    if (r->kind == WPROTO_RESULT_SUCCESS)
        return json_pack("{s:s, s:s, s:{s:i, s:O}, s:{s:I, s:I, s:I}, s:o}", "request_id",
                         r->request_id, "status", "success", "response", "status_code",
                         r->status_code, "body", body, "usage", usage_keys[0],
                         (json_int_t)r->prompt_tokens, usage_keys[1],
                         (json_int_t)r->completion_tokens, usage_keys[2],
                         (json_int_t)r->cached_tokens, "timings", timings_json(r));
    json_t *err = r->kind == WPROTO_RESULT_INVALID
                      ? json_pack("{s:s, s:i, s:o}", "class", "invalid_request", "status_code",
                                  r->status_code, "message", str_cap(r->message, WPROTO_MESSAGE_MAX))
                      : json_pack("{s:s, s:o}", "class", "transient", "message",
                                  str_cap(r->message, WPROTO_MESSAGE_MAX));
    if (err && r->code && r->code[0])
        json_object_set_new(err, "code", str_cap(r->code, WPROTO_CODE_MAX));
    if (err && r->param && r->param[0])
        json_object_set_new(err, "param", str_cap(r->param, WPROTO_PARAM_MAX));
    return json_pack("{s:s, s:s, s:o, s:{s:i, s:i, s:i}, s:o}", "request_id", r->request_id,
                     "status", "error", "error", err, "usage", usage_keys[0], 0, usage_keys[1], 0,
                     usage_keys[2], 0, "timings", timings_json(r));
}
