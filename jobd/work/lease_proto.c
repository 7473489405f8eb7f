/*
 * lease_proto.c - the worker protocol's pure parts: message parsers, the
 * results chunk parser and the JSON answers, over the messages of
 * common/wproto.h (fuzzed with it: tests/fuzz/fuzz_wproto.c), translated
 * into the store's types and the spec's error answers. No store access, so
 * the fuzzer links it alone. See lease.h. Thread-safe.
 */
#include "jobd/work/lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "common/wproto.h"
#include "common/zst.h"

static const struct lease_opts *opts_or_default(const struct lease_opts *o, struct lease_opts *tmp)
{
    if (o)
        return o;
    lease_opts_default(tmp);
    return tmp;
}

void lease_opts_default(struct lease_opts *o)
{
    memset(o, 0, sizeof *o);
    o->retry = STORE_RETRY_DEFAULT;
    o->lease_s_default = 120;
    o->lease_s_min = 10;
    o->lease_s_max = 3600;
    o->max_requests = 1024;
    o->max_bytes = 32u << 20;
    o->prefix_bytes = 256;
    o->worker_ttl_s = 120;
    o->retry_after_ms = 1000;
    o->reuse_retention_s = 7 * 86400;
}

/* ---- errors --------------------------------------------------------------------------- */

/* e as the spec's answer (status, code, message; no param, no line); returns rc. */
static int fail(struct problem *e, int rc, int status, const char *code, const char *msg)
{
    if (e) {
        e->line = 0;
        problem_setf(e, code, NULL, "%s", msg);
        e->status = status;
    }
    return rc;
}

void lease_error_from(int err, struct problem *e)
{
    switch (err) {
    case ERR_NOTFOUND: fail(e, err, 404, "not_found", "unknown worker or lease (register again)"); break;
    case ERR_BADSTATE: fail(e, err, 409, "stale_lease", "the lease has ended (expired or completed)"); break;
    case ERR_INVAL: fail(e, err, 400, "invalid_request", "invalid field or model not registered"); break;
    case ERR_TOOBIG: fail(e, err, 413, "too_large", "message exceeds a size limit"); break;
    case ERR_PARSE:
    case ERR_DEPTH:
    case ERR_UTF8:
    case ERR_CORRUPT: fail(e, err, 400, "invalid_request", "malformed message"); break;
    case ERR_BUSY: fail(e, err, 503, "busy", "the store is busy; retry"); break;
    case ERR_NOSPACE: fail(e, err, 507, "insufficient_storage", "the server's disk is full; retry later"); break;
    default: fail(e, err, 500, "server_error", err_msg(err)); break;
    }
}

/* ---- message parsers -------------------------------------------------------------------- */

/* A common/wproto.h reader's error (rc, msg) as the spec's answer. */
static int proto_fail(struct problem *e, int rc, const char *msg)
{
    switch (rc) {
    case ERR_INVAL: return fail(e, rc, 400, "invalid_request", msg);
    case ERR_TOOBIG: return fail(e, rc, 413, "too_large", msg);
    case ERR_NOMEM: return fail(e, rc, 500, "server_error", "out of memory");
    default: return fail(e, rc, 400, "invalid_json", msg);
    }
}

static int parse_obj(const char *json, size_t len, json_t **root, struct problem *e)
{
    char msg[200];
    int rc = wproto_msg_parse(json, len, root, msg, sizeof msg);
    return rc ? proto_fail(e, rc, msg) : 0;
}

static int want_str(json_t *o, const char *key, size_t max, int required, const char **out,
                    struct problem *e)
{
    char msg[200];
    int rc = wproto_get_str(o, key, max, required, out, msg, sizeof msg);
    return rc ? proto_fail(e, rc, msg) : 0;
}

static int want_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                    struct problem *e)
{
    char msg[200];
    int rc = wproto_get_int(o, key, lo, hi, dflt, out, msg, sizeof msg);
    return rc ? proto_fail(e, rc, msg) : 0;
}

static int id_field(json_t *o, const char *key, const char *prefix, const char **out, struct problem *e)
{
    char msg[200];
    int rc = wproto_get_id(o, key, prefix, out, msg, sizeof msg);
    return rc ? proto_fail(e, rc, msg) : 0;
}

/* STORE_EP_* of a protocol endpoint (0 for none). */
static unsigned store_ep(enum wproto_endpoint ep)
{
    switch (ep) {
    case WPROTO_EP_CHAT: return STORE_EP_CHAT;
    case WPROTO_EP_COMPLETIONS: return STORE_EP_COMPLETIONS;
    case WPROTO_EP_EMBEDDINGS: return STORE_EP_EMBEDDINGS;
    case WPROTO_EP_RESPONSES: return STORE_EP_RESPONSES;
    case WPROTO_EP_NONE: break;
    }
    return 0;
}

int lease_parse_register(const char *json, size_t len, struct lease_register *out, struct problem *e)
{
    struct lease_register r;
    memset(&r, 0, sizeof r);
    int rc = parse_obj(json, len, &r.root, e);
    if (rc)
        return rc;
    json_t *models = NULL, *cap = NULL;
    int64_t kv = 0, pack = 0;
    if ((rc = want_str(r.root, "name", 128, 1, &r.w.name, e)) ||
        (rc = want_str(r.root, "device", 128, 0, &r.w.device, e)))
        goto out;
    if (js_get_arr(r.root, "models", &models) || json_array_size(models) < 1) {
        rc = fail(e, ERR_INVAL, 400, "invalid_request", "'models' must be a non-empty array");
        goto out;
    }
    int crc = js_get_obj(r.root, "capacity", &cap);
    if (crc == ERR_INVAL) {
        rc = fail(e, ERR_INVAL, 400, "invalid_request", "'capacity' must be an object");
        goto out;
    }
    if (cap && ((rc = want_int(cap, "kv_tokens", 0, INT64_C(1) << 40, 0, &kv, e)) ||
                (rc = want_int(cap, "pack_size", 0, STORE_LEASE_MAX_REQUESTS, 0, &pack, e))))
        goto out;
    r.w.kv_tokens = kv;
    r.w.pack_size = pack;
    if ((rc = want_int(r.root, "hourly_cost_micros", 0, STORE_HOURLY_COST_MAX, -1, &r.w.hourly_cost_micros, e)))
        goto out;
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m)
    {
        const char *id;
        json_t *aliases = NULL;
        if (!json_is_object(m) || (rc = want_str(m, "id", STORE_MODEL_MAX, 1, &id, e))) {
            rc = fail(e, ERR_INVAL, 400, "invalid_request", "each model needs an 'id' string of 1..128 bytes");
            goto out;
        }
        /* endpoints served for this model: absent = the first three (STORE_EP_DEFAULT) */
        json_t *eps = NULL;
        unsigned epmask = 0;
        int erc = js_get_arr(m, "endpoints", &eps);
        if (erc == ERR_INVAL || (eps && json_array_size(eps) == 0)) {
            rc = fail(e, ERR_INVAL, 400, "invalid_request",
                      "'endpoints' must be a non-empty array of endpoint urls");
            goto out;
        }
        size_t k;
        json_t *ep;
        json_array_foreach(eps, k, ep)
        {
            unsigned bit = store_ep(wproto_endpoint_of(json_string_value(ep)));
            if (!bit) {
                rc = fail(e, ERR_INVAL, 400, "invalid_request",
                          "'endpoints' entries must be \"/v1/chat/completions\", "
                          "\"/v1/completions\", \"/v1/embeddings\" or \"/v1/responses\"");
                goto out;
            }
            epmask |= bit;
        }
        /* the model file's content hash (result reuse): 64 lowercase hex digits */
        const char *sha = NULL;
        int src = js_get_str(m, "sha256", &sha);
        if (src == ERR_INVAL || (sha && (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64))) {
            rc = fail(e, ERR_INVAL, 400, "invalid_request",
                      "'sha256' must be 64 lowercase hex digits (the model file's SHA-256)");
            goto out;
        }
        if (r.w.n_models >= STORE_WORKER_MAX_MODELS)
            goto toomany;
        r.models[r.w.n_models++] = (struct store_model_name){id, id, epmask, sha};
        int arc = js_get_arr(m, "aliases", &aliases);
        if (arc == ERR_INVAL) {
            rc = fail(e, ERR_INVAL, 400, "invalid_request", "'aliases' must be an array of strings");
            goto out;
        }
        size_t j;
        json_t *a;
        json_array_foreach(aliases, j, a)
        {
            const char *as = json_string_value(a);
            if (!as || !*as || strlen(as) > STORE_MODEL_MAX) {
                rc = fail(e, ERR_INVAL, 400, "invalid_request", "'aliases' must be an array of strings of 1..128 bytes");
                goto out;
            }
            if (r.w.n_models >= STORE_WORKER_MAX_MODELS)
                goto toomany;
            r.models[r.w.n_models++] = (struct store_model_name){id, as, epmask, sha};
        }
    }
    r.w.models = r.models;
    goto out;
toomany:
    rc = fail(e, ERR_INVAL, 400, "invalid_request", "more than 64 model names");
out:
    if (rc) {
        json_decref(r.root);
        return rc;
    }
    *out = r;
    out->w.models = out->models; /* point into the caller's copy */
    return 0;
}

void lease_register_release(struct lease_register *r)
{
    if (r) {
        json_decref(r->root);
        r->root = NULL;
    }
}

int lease_parse_ask(const struct lease_opts *o, const char *json, size_t len, struct lease_ask_msg *out,
                    struct problem *e)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    struct lease_ask_msg m;
    memset(&m, 0, sizeof m);
    int rc = parse_obj(json, len, &m.root, e);
    if (rc)
        return rc;
    int64_t n = 0, tok = 0, secs = 0, bytes = 0;
    if ((rc = id_field(m.root, "worker_id", "wrk_", &m.ask.worker_id, e)) ||
        (rc = want_str(m.root, "model", STORE_MODEL_MAX, 1, &m.ask.model, e)) ||
        (rc = want_int(m.root, "max_requests", 1, STORE_LEASE_MAX_REQUESTS, 64, &n, e)) ||
        (rc = want_int(m.root, "max_tokens", 0, INT64_C(1) << 40, 0, &tok, e)) ||
        (rc = want_int(m.root, "max_bytes", 0, INT64_C(1) << 40, 0, &bytes, e)) ||
        (rc = want_int(m.root, "lease_seconds", 1, 86400, o->lease_s_default, &secs, e)) ||
        (rc = want_int(m.root, "wait_ms", 0, 5000, 0, &m.wait_ms, e))) {
        json_decref(m.root);
        return rc;
    }
    m.ask.max_requests = (int)n;
    m.ask.max_tokens = tok;
    m.ask.max_bytes = (size_t)bytes;
    m.ask.lease_s = secs;
    *out = m;
    return 0;
}

void lease_ask_release(struct lease_ask_msg *m)
{
    if (m) {
        json_decref(m->root);
        m->root = NULL;
    }
}

int lease_parse_heartbeat(const struct lease_opts *o, const char *json, size_t len,
                          struct lease_heartbeat_msg *out, struct problem *e)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    struct wproto_heartbeat h;
    char msg[200];
    int rc = wproto_heartbeat_parse(json, len, o->lease_s_default, &h, msg, sizeof msg);
    if (rc)
        return proto_fail(e, rc, msg);
    *out = (struct lease_heartbeat_msg){h.root, h.worker_id, h.lease_id, h.extend_s, h.tokens_per_s,
                                        h.completed};
    return 0;
}

void lease_heartbeat_release(struct lease_heartbeat_msg *m)
{
    if (m) {
        json_decref(m->root);
        m->root = NULL;
    }
}

int lease_parse_release(const char *json, size_t len, struct lease_release_msg *out, struct problem *e)
{
    struct lease_release_msg m;
    memset(&m, 0, sizeof m);
    int rc = parse_obj(json, len, &m.root, e);
    if (rc)
        return rc;
    json_t *ids = NULL;
    if ((rc = id_field(m.root, "worker_id", "wrk_", &m.worker_id, e)) ||
        (rc = id_field(m.root, "lease_id", "lease_", &m.lease_id, e)))
        goto out;
    int arc = js_get_arr(m.root, "request_ids", &ids);
    if (arc == ERR_INVAL || json_array_size(ids) > STORE_LEASE_MAX_REQUESTS) {
        rc = fail(e, ERR_INVAL, 400, "invalid_request", "'request_ids' must be an array of at most 4096 ids");
        goto out;
    }
    if (ids) {
        m.n = json_array_size(ids);
        if (m.n && !(m.ids = calloc(m.n, sizeof *m.ids))) {
            rc = fail(e, ERR_NOMEM, 500, "server_error", "out of memory");
            goto out;
        }
        for (size_t i = 0; i < m.n; i++) {
            const char *s = json_string_value(json_array_get(ids, i));
            if (!s || !id_valid("req_", s)) {
                rc = fail(e, ERR_INVAL, 400, "invalid_request", "'request_ids' must hold req_... ids");
                goto out;
            }
            snprintf(m.ids[i], ID_MAX, "%s", s);
        }
        if (!m.n) { /* an empty list releases nothing: keep a non-NULL array */
            if (!(m.ids = calloc(1, sizeof *m.ids))) {
                rc = fail(e, ERR_NOMEM, 500, "server_error", "out of memory");
                goto out;
            }
        }
    }
out:
    if (rc) {
        free(m.ids);
        json_decref(m.root);
        return rc;
    }
    *out = m;
    return 0;
}

void lease_release_msg_release(struct lease_release_msg *m)
{
    if (m) {
        free(m->ids);
        m->ids = NULL;
        json_decref(m->root);
        m->root = NULL;
    }
}

/* ---- results chunk ------------------------------------------------------------------------ */

void lease_results_release(struct lease_results *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->owned && i < 3 * r->n; i++)
        free(r->owned[i]);
    free(r->owned);
    free(r->items);
    r->owned = NULL;
    r->items = NULL;
    r->n = 0;
}

static int line_fail(struct problem *e, int64_t line, const char *msg)
{
    fail(e, ERR_PARSE, 400, "invalid_results", msg);
    if (e)
        e->line = line;
    return ERR_PARSE;
}

static char *dump_str(const json_t *v, size_t *len)
{
    struct buf b;
    buf_init(&b, LEASE_LINE_MAX_BYTES);
    if (js_dump(&b, v)) {
        buf_release(&b);
        return NULL;
    }
    return buf_detach(&b, len);
}

/* Parse one results line into it (owned strings into own[0..2]). */
static int parse_result_line(const char *line, size_t len, int64_t lineno, struct store_result *it,
                             char **own, struct problem *e)
{
    struct wproto_result r;
    char msg[200];
    memset(it, 0, sizeof *it);
    if (wproto_result_parse(line, len, &r, msg, sizeof msg))
        return line_fail(e, lineno, msg);
    static const enum store_result_kind kinds[] = {
        [WPROTO_RESULT_SUCCESS] = STORE_RESULT_SUCCESS,
        [WPROTO_RESULT_INVALID] = STORE_RESULT_INVALID,
        [WPROTO_RESULT_TRANSIENT] = STORE_RESULT_TRANSIENT,
    };
    int rc = ERR_NOMEM;
    it->prompt_tokens = r.prompt_tokens;
    it->completion_tokens = r.completion_tokens;
    it->cached_tokens = r.cached_tokens;
    it->queue_ms = r.queue_ms;
    it->prefill_ms = r.prefill_ms;
    it->decode_ms = r.decode_ms;
    it->gpu_ms = r.device_ms;
    it->kind = kinds[r.kind];
    it->status_code = r.status_code;
    if (!(own[0] = strdup(r.request_id)))
        goto out;
    it->request_id = own[0];
    if (r.kind == WPROTO_RESULT_SUCCESS) {
        if (!(own[1] = dump_str(r.body, &it->body_len)))
            goto out;
        it->body = own[1];
    } else if (r.kind == WPROTO_RESULT_INVALID) {
        json_t *env = json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", r.message, "type",
                                "invalid_request_error", "param", r.param, "code", r.code);
        if (!env)
            goto out;
        own[1] = dump_str(env, &it->body_len);
        json_decref(env);
        if (!own[1])
            goto out;
        it->body = own[1];
    } else {
        char tmpmsg[4200];
        snprintf(tmpmsg, sizeof tmpmsg, "%s%s%s", r.code ? r.code : "", r.code ? ": " : "", r.message);
        if (!(own[2] = strdup(tmpmsg)))
            goto out;
        it->error = own[2];
    }
    rc = 0;
out:
    wproto_result_release(&r);
    return rc;
}

int lease_results_parse(const void *data, size_t len, int compressed, struct lease_results *out,
                        struct problem *e)
{
    if (len > LEASE_CHUNK_MAX_BYTES)
        return fail(e, ERR_TOOBIG, 413, "too_large", "results chunk over 64 MiB");
    struct buf dec;
    buf_init(&dec, LEASE_CHUNK_MAX_DECODED);
    const char *text = data;
    size_t n = len;
    int rc = 0;
    if (compressed) {
        rc = zst_decompress_buf(data, len, &dec);
        if (rc == ERR_TOOBIG)
            return fail(e, rc, 413, "too_large", "results chunk decompresses to over 256 MiB");
        if (rc) {
            buf_release(&dec);
            return fail(e, ERR_CORRUPT, 400, "invalid_results", "results chunk is not valid zstd");
        }
        text = dec.data ? dec.data : "";
        n = dec.len;
    }
    struct lease_results r = {0};
    size_t cap = 0;
    int64_t lineno = 0;
    for (size_t pos = 0; pos < n && !rc;) {
        const char *nl = memchr(text + pos, '\n', n - pos);
        size_t l = nl ? (size_t)(nl - (text + pos)) : n - pos;
        const char *line = text + pos;
        pos += l + (nl ? 1 : 0);
        lineno++;
        if (l && line[l - 1] == '\r')
            l--;
        size_t blank = 0;
        while (blank < l && (line[blank] == ' ' || line[blank] == '\t'))
            blank++;
        if (blank == l)
            continue;
        if (l > LEASE_LINE_MAX_BYTES) {
            rc = fail(e, ERR_TOOBIG, 413, "too_large", "a results line is over 16 MiB");
            if (e)
                e->line = lineno;
            break;
        }
        if (r.n == LEASE_CHUNK_MAX_LINES) {
            rc = fail(e, ERR_TOOBIG, 413, "too_large", "more than 4096 results in one chunk");
            break;
        }
        if (r.n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            struct store_result *ni = realloc(r.items, nc * sizeof *ni);
            if (ni)
                r.items = ni;
            char **no = ni ? realloc(r.owned, 3 * nc * sizeof *no) : NULL;
            if (!ni || !no) {
                rc = fail(e, ERR_NOMEM, 500, "server_error", "out of memory");
                break;
            }
            r.owned = no;
            memset(r.owned + 3 * cap, 0, 3 * (nc - cap) * sizeof *no);
            cap = nc;
        }
        rc = parse_result_line(line, l, lineno, &r.items[r.n], r.owned + 3 * r.n, e);
        r.n++; /* owned strings of a failed line are freed with the rest */
        if (rc == ERR_NOMEM)
            fail(e, rc, 500, "server_error", "out of memory");
    }
    buf_release(&dec);
    if (!rc && r.n == 0)
        rc = fail(e, ERR_PARSE, 400, "invalid_results", "the results chunk holds no results");
    if (rc) {
        lease_results_release(&r);
        return rc;
    }
    *out = r;
    return 0;
}

/* ---- answers ---------------------------------------------------------------------------------- */

static int put_str(struct buf *b, const char *s)
{
    return s ? js_escape(b, s, strlen(s)) : buf_append_str(b, "null");
}

int lease_write_register(struct buf *b, const struct lease_opts *o, const char *worker_id)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    return buf_printf(b,
                      "{\"worker_id\":\"%s\",\"lease_seconds\":%lld,\"heartbeat_interval_s\":%lld,"
                      "\"max_requests\":%d,\"max_attempts\":%d}",
                      worker_id, (long long)o->lease_s_default, (long long)(o->lease_s_default / 3),
                      o->max_requests, o->retry.max_attempts);
}

int lease_write_lease(struct buf *b, const struct lease_opts *o, const struct store_lease *l)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    if (l->n == 0)
        return wproto_lease_write_empty(b, o->retry_after_ms);
    int rc = wproto_lease_write_begin(b, l->id, l->expires_at);
    for (size_t i = 0; !rc && i < l->n; i++) {
        const struct store_leased *it = &l->items[i];
        struct wproto_lease_item w = {it->id, it->custom_id, it->endpoint, it->attempt, it->body,
                                      it->body_len};
        rc = wproto_lease_write_item(b, i, &w);
    }
    return rc ? rc : wproto_lease_write_end(b);
}

int lease_write_heartbeat(struct buf *b, const char *lease_id, int64_t expires_at,
                          char (*stop_ids)[ID_MAX], size_t n)
{
    return wproto_hb_answer_write(b, lease_id, expires_at, (const char (*)[ID_MAX])stop_ids, n);
}

int lease_write_models(struct buf *b, const struct store_model_served *m, size_t n)
{
    int rc = buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; !rc && i < n; i++) {
        rc = buf_append_str(b, i ? ",{\"id\":" : "{\"id\":");
        if (!rc)
            rc = put_str(b, m[i].name);
        if (!rc)
            rc = buf_append_str(b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"jobd\",\"root\":");
        if (!rc)
            rc = put_str(b, m[i].canonical);
        if (!rc)
            rc = buf_printf(b, ",\"workers\":%lld,\"endpoints\":[", (long long)m[i].n_workers);
        for (int k = 0, first = 1; !rc && k < WPROTO_N_ENDPOINTS; k++)
            if (m[i].endpoints & store_ep(wproto_endpoints[k])) {
                rc = buf_printf(b, "%s\"%s\"", first ? "" : ",", wproto_endpoint_url(wproto_endpoints[k]));
                first = 0;
            }
        if (!rc)
            rc = buf_append_str(b, "]}");
    }
    return rc ? rc : buf_append_str(b, "]}");
}

int lease_write_error(struct buf *b, const struct problem *e)
{
    int rc = buf_append_str(b, "{\"error\":{\"message\":");
    if (!rc)
        rc = put_str(b, e->message);
    if (!rc)
        rc = buf_printf(b, ",\"type\":\"%s\",\"param\":null,\"code\":",
                        e->status >= 500 ? "server_error" : "invalid_request_error");
    if (!rc)
        rc = put_str(b, e->code);
    if (!rc && e->line)
        rc = buf_printf(b, ",\"line\":%lld", (long long)e->line);
    return rc ? rc : buf_append_str(b, "}}");
}

int lease_commit_http_status(const enum store_commit_outcome *outcomes, size_t n)
{
    size_t stale = 0;
    for (size_t i = 0; i < n; i++)
        stale += outcomes[i] == STORE_COMMIT_STALE;
    return n > 0 && stale == n ? 409 : 200;
}
