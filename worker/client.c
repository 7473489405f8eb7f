/* client.c - worker protocol calls and the results outbox (see client.h). */
#include "worker/client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/httpc.h"
#include "common/id.h"
#include "common/js.h"
#include "common/wproto.h"
#include "common/log.h"
#include "common/zst.h"

struct wcl {
    char *base;           /* without trailing '/' */
    char *auth;           /* "Authorization: Bearer ..." or NULL */
    long timeout_ms;
    int max_retries;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

int wcl_new(const struct wcl_opts *o, struct wcl **out)
{
    if (!o || !o->base_url || !out ||
        (strncmp(o->base_url, "http://", 7) != 0 && strncmp(o->base_url, "https://", 8) != 0))
        return ERR_INVAL;
    struct wcl *c = calloc(1, sizeof *c);
    if (!c)
        return ERR_NOMEM;
    c->base = dup_str(o->base_url);
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    c->max_retries = o->max_retries >= 0 ? o->max_retries : 2;
    if (c->base) {
        size_t n = strlen(c->base);
        while (n > 0 && c->base[n - 1] == '/')
            c->base[--n] = '\0';
    }
    if (o->token && o->token[0]) {
        struct buf b;
        buf_init(&b, 4096);
        if (buf_printf(&b, "Authorization: Bearer %s", o->token) == 0)
            c->auth = b.data;
        else
            buf_release(&b);
        if (!c->auth) {
            wcl_free(c);
            return ERR_NOMEM;
        }
    }
    if (!c->base) {
        wcl_free(c);
        return ERR_NOMEM;
    }
    *out = c;
    return 0;
}

void wcl_free(struct wcl *c)
{
    if (!c)
        return;
    free(c->base);
    free(c->auth);
    free(c);
}

void wcl_answer_release(struct wcl_answer *a)
{
    if (!a)
        return;
    json_decref(a->body);
    a->body = NULL;
    a->status = 0;
}

const char *wcl_answer_code(const struct wcl_answer *a)
{
    json_t *e = a && a->body ? json_object_get(a->body, "error") : NULL;
    const char *code = NULL;
    if (e && js_get_str(e, "code", &code) == 0 && code)
        return code;
    return "";
}

/* One HTTP call: body bytes with the given extra headers. */
static int call(struct wcl *c, const char *path, const char *const *extra, const void *body,
                size_t len, long extra_ms, int retry, struct wcl_answer *a)
{
    struct buf url;
    buf_init(&url, 8192);
    struct httpc_response r;
    httpc_response_init(&r);
    const char *headers[8];
    size_t nh = 0;
    if (c->auth)
        headers[nh++] = c->auth;
    for (size_t i = 0; extra && extra[i] && nh < 7; i++)
        headers[nh++] = extra[i];
    headers[nh] = NULL;
    struct httpc_opts ho = HTTPC_OPTS_DEFAULT;
    ho.timeout_ms = c->timeout_ms + extra_ms;
    ho.connect_timeout_ms = 3000;
    ho.max_retries = retry ? c->max_retries : 0;
    ho.retry_unsafe = retry;
    ho.backoff_base_ms = 100;
    ho.backoff_max_ms = 2000;
    ho.max_response_bytes = WCL_MAX_ANSWER_BYTES;
    int rc = buf_printf(&url, "%s%s", c->base, path);
    if (rc)
        goto out;
    rc = httpc_request(&ho, "POST", url.data, headers, body, len, &r);
    if (rc)
        goto out;
    a->status = r.status;
    a->body = NULL;
    if (r.body.len) {
        struct js_limits lim = {WCL_MAX_ANSWER_BYTES, 64, 0};
        json_t *j = NULL;
        if (js_parse(r.body.data, r.body.len, &lim, &j, NULL) == 0)
            a->body = j;
    }
out:
    httpc_response_release(&r);
    buf_release(&url);
    return rc;
}

int wcl_post(struct wcl *c, const char *path, const json_t *body, long extra_ms, int retry,
             struct wcl_answer *a)
{
    if (!c || !path || !body || !a)
        return ERR_INVAL;
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text)
        return ERR_NOMEM;
    static const char *const json_ct[] = {"Content-Type: application/json", NULL};
    int rc = call(c, path, json_ct, text, strlen(text), extra_ms, retry, a);
    free(text);
    return rc;
}

/* Build an object from pairs and post it; the object is freed here. */
static int post_obj(struct wcl *c, const char *path, json_t *o, long extra_ms, int retry,
                    struct wcl_answer *a)
{
    if (!o)
        return ERR_NOMEM;
    int rc = wcl_post(c, path, o, extra_ms, retry, a);
    json_decref(o);
    return rc;
}

int wcl_register(struct wcl *c, const char *name, const char *device, const char *model_id,
                 const char *const *aliases, size_t n_aliases, const char *const *endpoints,
                 size_t n_endpoints, int64_t kv_tokens, int64_t pack_size, int64_t hourly_cost_micros,
                 const char *model_sha256, struct wcl_answer *a)
{
    json_t *al = json_array();
    for (size_t i = 0; al && i < n_aliases; i++)
        if (json_array_append_new(al, json_string(aliases[i])))
            break;
    if (!al)
        return ERR_NOMEM;
    json_t *m = json_pack("{s:s, s:o}", "id", model_id, "aliases", al);
    if (!m)
        return ERR_NOMEM;
    if (model_sha256 && *model_sha256 && json_object_set_new(m, "sha256", json_string(model_sha256))) {
        json_decref(m);
        return ERR_NOMEM;
    }
    if (n_endpoints) {
        json_t *ep = json_array();
        for (size_t i = 0; ep && i < n_endpoints; i++)
            if (json_array_append_new(ep, json_string(endpoints[i])))
                break;
        if (!ep || json_object_set_new(m, "endpoints", ep)) {
            json_decref(m);
            return ERR_NOMEM;
        }
    }
    json_t *o = json_pack("{s:s, s:s, s:[o], s:{s:I, s:I}}", "name", name, "device",
                          device ? device : "", "models", m, "capacity", "kv_tokens",
                          (json_int_t)kv_tokens, "pack_size", (json_int_t)pack_size);
    if (o && hourly_cost_micros >= 0 &&
        json_object_set_new(o, "hourly_cost_micros", json_integer((json_int_t)hourly_cost_micros))) {
        json_decref(o);
        return ERR_NOMEM;
    }
    return post_obj(c, "/v1/worker/register", o, 0, 0, a);
}

int wcl_lease(struct wcl *c, const char *worker_id, const char *model, int64_t max_requests,
              int64_t max_tokens, int64_t lease_seconds, int64_t wait_ms, struct wcl_answer *a)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "worker_id", worker_id, "model", model,
                          "max_requests", (json_int_t)max_requests, "max_tokens",
                          (json_int_t)max_tokens, "lease_seconds", (json_int_t)lease_seconds,
                          "wait_ms", (json_int_t)wait_ms);
    return post_obj(c, "/v1/worker/lease", o, (long)wait_ms, 0, a);
}

int wcl_heartbeat(struct wcl *c, const char *worker_id, const char *lease_id,
                  int64_t extend_seconds, int64_t completed, double tokens_per_s,
                  struct wcl_answer *a)
{
    json_t *o = wproto_heartbeat_json(worker_id, lease_id, extend_seconds, completed, tokens_per_s);
    return post_obj(c, "/v1/worker/heartbeat", o, 0, 1, a);
}

int wcl_release(struct wcl *c, const char *worker_id, const char *lease_id,
                const char *const *ids, size_t n_ids, struct wcl_answer *a)
{
    json_t *o = json_pack("{s:s, s:s}", "worker_id", worker_id, "lease_id", lease_id);
    if (o && ids) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n_ids; i++)
            if (json_array_append_new(arr, json_string(ids[i])))
                break;
        if (!arr || json_object_set_new(o, "request_ids", arr)) {
            json_decref(o);
            return ERR_NOMEM;
        }
    }
    return post_obj(c, "/v1/worker/release", o, 0, 1, a);
}

int wcl_results(struct wcl *c, const char *worker_id, const char *lease_id, const char *jsonl,
                size_t len, struct wcl_answer *a)
{
    if (!c || !worker_id || !lease_id || !jsonl || !a)
        return ERR_INVAL;
    struct buf z, hw, hl;
    buf_init(&z, (size_t)64 << 20);
    buf_init(&hw, 256);
    buf_init(&hl, 256);
    int rc = zst_compress_buf(jsonl, len, 3, &z);
    if (!rc)
        rc = buf_printf(&hw, "X-Worker-Id: %s", worker_id);
    if (!rc)
        rc = buf_printf(&hl, "X-Lease-Id: %s", lease_id);
    if (!rc) {
        const char *const extra[] = {"Content-Type: application/x-ndjson",
                                     "Content-Encoding: zstd", hw.data, hl.data, NULL};
        rc = call(c, "/v1/worker/results", extra, z.data ? z.data : "", z.len, 0, 1, a);
    }
    buf_release(&z);
    buf_release(&hw);
    buf_release(&hl);
    return rc;
}

/* ---- outbox ---- */

struct ob_line {
    char lease_id[ID_MAX];
    char request_id[ID_MAX];
    char *line;
    size_t len;
    int inflight;         /* being uploaded by the flusher */
    int replaced;         /* already replaced by a transient error line */
    unsigned tried;       /* the flush round that last sent it */
};

struct wcl_outbox {
    pthread_mutex_t mu;
    struct ob_line **v;
    size_t n, cap;
    unsigned round;       /* flush rounds so far: a line is sent once per round */
};

int wcl_outbox_new(struct wcl_outbox **out)
{
    struct wcl_outbox *ob = calloc(1, sizeof *ob);
    if (!ob)
        return ERR_NOMEM;
    if (pthread_mutex_init(&ob->mu, NULL)) {
        free(ob);
        return ERR_NOMEM;
    }
    *out = ob;
    return 0;
}

static void line_free(struct ob_line *l)
{
    if (l) {
        free(l->line);
        free(l);
    }
}

void wcl_outbox_free(struct wcl_outbox *ob)
{
    if (!ob)
        return;
    for (size_t i = 0; i < ob->n; i++)
        line_free(ob->v[i]);
    free(ob->v);
    pthread_mutex_destroy(&ob->mu);
    free(ob);
}

static int copy_id(char *dst, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n == 0 || n >= ID_MAX)
        return ERR_INVAL;
    memcpy(dst, src, n + 1);
    return 0;
}

int wcl_outbox_add(struct wcl_outbox *ob, const char *lease_id, const char *request_id,
                   const char *line, size_t len)
{
    if (!ob || !line || len == 0 || memchr(line, '\n', len))
        return ERR_INVAL;
    struct ob_line *l = calloc(1, sizeof *l);
    if (!l)
        return ERR_NOMEM;
    if (copy_id(l->lease_id, lease_id) || copy_id(l->request_id, request_id)) {
        free(l);
        return ERR_INVAL;
    }
    if (!(l->line = malloc(len + 1))) {
        free(l);
        return ERR_NOMEM;
    }
    memcpy(l->line, line, len);
    l->line[len] = '\0';
    l->len = len;
    pthread_mutex_lock(&ob->mu);
    int rc = 0;
    if (ob->n == ob->cap) {
        size_t nc = ob->cap ? ob->cap * 2 : 64;
        struct ob_line **p = realloc(ob->v, nc * sizeof *p);
        if (!p)
            rc = ERR_NOMEM;
        else {
            ob->v = p;
            ob->cap = nc;
        }
    }
    if (!rc)
        ob->v[ob->n++] = l;
    pthread_mutex_unlock(&ob->mu);
    if (rc)
        line_free(l);
    return rc;
}

size_t wcl_outbox_count(struct wcl_outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    size_t n = ob->n;
    pthread_mutex_unlock(&ob->mu);
    return n;
}

/* Remove (and free) entries matching pred; caller holds the lock. */
static size_t remove_if(struct wcl_outbox *ob, int (*pred)(const struct ob_line *, const void *),
                        const void *arg)
{
    size_t w = 0, n = 0;
    for (size_t i = 0; i < ob->n; i++) {
        if (pred(ob->v[i], arg)) {
            line_free(ob->v[i]);
            n++;
        } else
            ob->v[w++] = ob->v[i];
    }
    ob->n = w;
    return n;
}

static int same_lease_idle(const struct ob_line *l, const void *arg)
{
    return !l->inflight && strcmp(l->lease_id, (const char *)arg) == 0;
}

size_t wcl_outbox_drop_lease(struct wcl_outbox *ob, const char *lease_id)
{
    pthread_mutex_lock(&ob->mu);
    size_t n = remove_if(ob, same_lease_idle, lease_id);
    pthread_mutex_unlock(&ob->mu);
    return n;
}

static int is_done(const struct ob_line *l, const void *arg)
{
    (void)arg;
    return l->inflight == 2;
}

/* Take the next chunk: idle lines of the first idle line's lease, marked
 * in flight. Returns the count (0 = nothing to send). */
static size_t take_chunk(struct wcl_outbox *ob, unsigned round, struct ob_line **chunk,
                         size_t max_lines)
{
    size_t n = 0, bytes = 0;
    const char *lease = NULL;
    pthread_mutex_lock(&ob->mu);
    for (size_t i = 0; i < ob->n && n < max_lines; i++) {
        struct ob_line *l = ob->v[i];
        if (l->inflight || l->tried == round)
            continue;
        if (lease && strcmp(lease, l->lease_id) != 0)
            continue;
        if (n > 0 && bytes + l->len + 1 > WCL_CHUNK_BYTES)
            break;
        lease = l->lease_id;
        l->inflight = 1;
        l->tried = round;
        bytes += l->len + 1;
        chunk[n++] = l;
    }
    pthread_mutex_unlock(&ob->mu);
    return n;
}

/* Settle a chunk: lines marked 2 leave, the others become idle again. */
static void settle(struct wcl_outbox *ob, struct ob_line **chunk, size_t n)
{
    pthread_mutex_lock(&ob->mu);
    for (size_t i = 0; i < n; i++)
        if (chunk[i]->inflight != 2)
            chunk[i]->inflight = 0;
    remove_if(ob, is_done, NULL);
    pthread_mutex_unlock(&ob->mu);
}

static void done(struct ob_line *l, const char *status, wcl_ack_fn ack, void *ctx)
{
    l->inflight = 2;
    if (ack)
        ack(ctx, l->lease_id, l->request_id, status);
}

/* Replace l's line by a transient error result (its success was refused). */
static int make_transient(struct ob_line *l, long status)
{
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "request_id", l->request_id, "status",
                          "error", "error", "class", "transient", "code", "result_refused",
                          "message", status == 413 ? "the result was too large to upload"
                                                   : "jobd refused the result line");
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t)
        return ERR_NOMEM;
    free(l->line);
    l->line = t;
    l->len = strlen(t);
    l->replaced = 1;
    return 0;
}

/* Send chunk[0..n) and settle what was answered. Returns 0 or a transport /
 * 5xx error (nothing settled). */
static int send_chunk(struct wcl *c, const char *worker_id, struct ob_line **chunk, size_t n,
                      wcl_ack_fn ack, void *ctx)
{
    struct buf body;
    buf_init(&body, (size_t)WCL_CHUNK_BYTES + (size_t)WCL_CHUNK_LINES + 16);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        rc = buf_append(&body, chunk[i]->line, chunk[i]->len);
        if (!rc)
            rc = buf_append_byte(&body, '\n');
    }
    if (rc) { /* one line over the chunk cap: let jobd judge it alone */
        buf_release(&body);
        buf_init(&body, chunk[0]->len + 2);
        if ((rc = buf_append(&body, chunk[0]->line, chunk[0]->len)) == 0)
            rc = buf_append_byte(&body, '\n');
        n = 1;
        if (rc) {
            buf_release(&body);
            return rc;
        }
    }
    struct wcl_answer a = {0, NULL};
    rc = wcl_results(c, worker_id, chunk[0]->lease_id, body.data, body.len, &a);
    buf_release(&body);
    if (rc)
        return rc;
    if (a.status >= 500) {
        log_warn("results upload: jobd answered %ld", a.status);
        wcl_answer_release(&a);
        return ERR_HTTP;
    }
    json_t *res = a.body ? json_object_get(a.body, "results") : NULL;
    if ((a.status == 200 || a.status == 409) && json_is_array(res)) {
        size_t i;
        json_t *v;
        json_array_foreach(res, i, v) {
            const char *rid = NULL, *st = NULL;
            if (js_get_str(v, "request_id", &rid) || js_get_str(v, "status", &st))
                continue;
            for (size_t k = 0; k < n; k++)
                if (chunk[k]->inflight == 1 && strcmp(chunk[k]->request_id, rid) == 0) {
                    done(chunk[k], st, ack, ctx);
                    break;
                }
        }
    } else if (a.status == 404) {
        log_warn("results upload: lease %s is gone (%s); %zu result(s) dropped",
                 chunk[0]->lease_id, wcl_answer_code(&a), n);
        for (size_t k = 0; k < n; k++)
            done(chunk[k], "gone", ack, ctx);
    } else if ((a.status == 400 || a.status == 413) && n > 1) {
        /* resend one by one below (caller's next round takes them singly) */
        log_warn("results upload: chunk of %zu refused (%ld %s); resending line by line", n,
                 a.status, wcl_answer_code(&a));
        for (size_t k = 0; k < n && rc == 0; k++)
            rc = send_chunk(c, worker_id, &chunk[k], 1, ack, ctx);
    } else if (a.status == 400 || a.status == 413) {
        if (!chunk[0]->replaced && make_transient(chunk[0], a.status) == 0) {
            log_error("results upload: the result of %s was refused (%ld %s); sending a "
                      "transient error instead", chunk[0]->request_id, a.status,
                      wcl_answer_code(&a));
            rc = send_chunk(c, worker_id, chunk, 1, ack, ctx);
        } else {
            log_error("results upload: %s refused (%ld %s); dropped", chunk[0]->request_id,
                      a.status, wcl_answer_code(&a));
            done(chunk[0], "dropped", ack, ctx);
        }
    } else {
        log_warn("results upload: unexpected answer %ld %s", a.status, wcl_answer_code(&a));
        rc = ERR_HTTP;
    }
    wcl_answer_release(&a);
    return rc;
}

int wcl_outbox_flush(struct wcl_outbox *ob, struct wcl *c, const char *worker_id,
                     wcl_ack_fn ack, void *ctx)
{
    struct ob_line *chunk[WCL_CHUNK_LINES];
    int rc = 0;
    pthread_mutex_lock(&ob->mu);
    unsigned round = ++ob->round;
    if (round == 0) /* wrapped: 0 is every new line's "never tried" */
        round = ob->round = 1;
    pthread_mutex_unlock(&ob->mu);
    for (;;) {
        size_t n = take_chunk(ob, round, chunk, WCL_CHUNK_LINES);
        if (n == 0)
            break;
        rc = send_chunk(c, worker_id, chunk, n, ack, ctx);
        settle(ob, chunk, n);
        if (rc)
            break;
    }
    return rc;
}
