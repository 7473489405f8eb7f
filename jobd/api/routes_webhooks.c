/*
 * routes_webhooks.c - webhook endpoints and their delivery log
 * (spec/webhooks.md):
 *   POST   /v1/webhook_endpoints                 register (the secret is shown once, here)
 *   GET    /v1/webhook_endpoints                 list (both kinds; no secrets)
 *   GET    /v1/webhook_endpoints/{id}            one (status, disabled_reason)
 *   DELETE /v1/webhook_endpoints/{id}            delete it and its deliveries
 *   GET    /v1/webhook_endpoints/{id}/deliveries delivery log, newest first, with attempts
 *   POST   /v1/webhook_endpoints/{id}/deliveries/{delivery_id}/redeliver
 *   POST   /v1/webhook_endpoints/{id}/test       queue a webhook.test event to it
 *   GET    /v1/webhook_secret                    the tenant's default secret (per-batch URLs)
 *
 * The body is checked on the loop thread; the URL's DNS check (SSRF guard
 * at registration) and the database work run on the thread pool.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "jobd/api/app_int.h"
#include "jobd/store/store_webhook.h"
#include "jobd/webhook/webhook.h"

struct wh_in {
    char url[STORE_WH_URL_MAX + 1];
    char types[STORE_WH_TYPES_MAX];
    int64_t delivery_id;
};

/* ---- JSON ----------------------------------------------------------------------------- */

static void json_str_or_null(struct buf *b, const char *s)
{
    if (s && *s)
        js_escape(b, s, strlen(s));
    else
        buf_append_str(b, "null");
}

static void json_int_or_null(struct buf *b, int64_t v, int present)
{
    if (present)
        buf_printf(b, "%lld", (long long)v);
    else
        buf_append_str(b, "null");
}

static int endpoint_json(struct buf *b, const struct store_wh_endpoint *e, const char *secret)
{
    buf_printf(b, "{\"id\":\"%s\",\"object\":\"webhook_endpoint\",\"kind\":\"%s\",\"url\":", e->id, e->kind);
    js_escape(b, e->url, strlen(e->url));
    buf_append_str(b, ",\"event_types\":[");
    const char *p = e->event_types;
    for (int first = 1; *p; first = 0) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (!first)
            buf_append_byte(b, ',');
        js_escape(b, p, n);
        p += n + (c ? 1 : 0);
    }
    buf_printf(b, "],\"status\":\"%s\",\"disabled_at\":", e->disabled_at ? "disabled" : "enabled");
    json_int_or_null(b, e->disabled_at, e->disabled_at != 0);
    buf_append_str(b, ",\"disabled_reason\":");
    json_str_or_null(b, e->disabled_reason);
    buf_append_str(b, ",\"failing_since\":");
    json_int_or_null(b, e->failing_since, e->failing_since != 0);
    buf_printf(b, ",\"created_at\":%lld", (long long)e->created_at);
    if (secret) {
        buf_append_str(b, ",\"secret\":");
        js_escape(b, secret, strlen(secret));
    }
    return buf_append_byte(b, '}');
}

static int delivery_json(struct buf *b, const struct store_wh_delivery *d)
{
    buf_printf(b, "{\"id\":\"whd_%lld\",\"object\":\"webhook_delivery\",\"event_id\":\"%s\",\"event_type\":",
               (long long)d->id, d->event_id);
    js_escape(b, d->event_type, strlen(d->event_type));
    buf_printf(b, ",\"endpoint_id\":\"%s\",\"status\":\"%s\",\"attempts\":%lld,\"next_attempt_at\":",
               d->endpoint_id, d->status, (long long)d->attempts);
    json_int_or_null(b, d->next_attempt_at, strcmp(d->status, "pending") == 0);
    buf_append_str(b, ",\"last_status_code\":");
    json_int_or_null(b, d->last_status, d->last_status != 0);
    buf_append_str(b, ",\"last_error\":");
    json_str_or_null(b, d->last_error);
    buf_append_str(b, ",\"last_latency_ms\":");
    json_int_or_null(b, d->last_latency_ms, d->last_latency_ms >= 0);
    buf_printf(b, ",\"created_at\":%lld,\"last_attempt_at\":", (long long)d->created_at);
    json_int_or_null(b, d->last_attempt_at, d->last_attempt_at != 0);
    buf_append_str(b, ",\"delivered_at\":");
    json_int_or_null(b, d->delivered_at, d->delivered_at != 0);
    buf_append_str(b, ",\"attempt_log\":[");
    for (size_t i = 0; i < d->n_log; i++) {
        const struct store_wh_attempt *a = &d->log[i];
        buf_printf(b, "%s{\"attempt\":%lld,\"started_at\":%lld,\"status_code\":", i ? "," : "",
                   (long long)a->attempt, (long long)a->started_at);
        json_int_or_null(b, a->status_code, a->status_code != 0);
        buf_printf(b, ",\"latency_ms\":%lld,\"outcome\":\"%s\",\"error\":", (long long)a->latency_ms, a->outcome);
        json_str_or_null(b, a->error);
        buf_append_byte(b, '}');
    }
    return buf_append_str(b, "]}");
}

static void endpoint_not_found(struct op *op)
{
    op_error(op, API_ERR_NOT_FOUND, "id", "No such webhook endpoint: '%s'.", op->id);
}

/* ---- POST /v1/webhook_endpoints ---------------------------------------------------------- */

static void create_fn(struct op *op, struct store *st)
{
    struct wh_in *in = op->in;
    char msg[400];
    int rc = webhook_url_check(in->url, op->app->cfg.webhook.allow_private, 1, msg, sizeof msg);
    if (rc) {
        op_error(op, rc == ERR_UNSUPPORTED ? API_ERR_URL_NOT_ALLOWED : API_ERR_INVALID_URL, "url", "%s", msg);
        return;
    }
    char secret[STORE_WH_SECRET_MAX];
    if ((rc = webhook_secret_new(secret))) {
        op_internal(op, rc, "webhook secret");
        return;
    }
    if (op_idem_begin(op, st))
        return;
    struct store_wh_endpoint e;
    if ((rc = store_tx_begin(st))) {
        op_idem_release(op, st);
        op_internal(op, rc, "begin");
        return;
    }
    rc = store_wh_endpoint_create(st, op->tenant, in->url, in->types, secret, clock_wall_s(), &e);
    if (rc == ERR_TOOBIG) {
        op_error(op, API_ERR_LIMIT_EXCEEDED, NULL, "A tenant may register at most %d webhook endpoints.",
                 STORE_WH_MAX_ENDPOINTS);
    } else if (!rc) {
        buf_reset(&op->out);
        if ((rc = endpoint_json(&op->out, &e, secret)))
            op_internal(op, rc, "render endpoint");
        else
            op->status = 200;
    } else {
        op_internal(op, rc, "create webhook endpoint");
    }
    if (!rc && !(rc = op_idem_complete(op, st)) && !(rc = store_tx_commit(st)))
        return;
    store_tx_rollback(st);
    op_idem_release(op, st);
    if (op->status == 200)
        op_internal(op, rc, "create webhook endpoint");
}

static void endpoints_create(struct http_req *req, void *arg)
{
    (void)arg;
    size_t len;
    const char *body = http_req_body(req, &len);
    json_t *root = NULL, *types = NULL;
    struct js_error je;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    if (js_parse(body, len, &lim, &root, &je) || !json_is_object(root)) {
        json_decref(root);
        api_respond_error(req, API_ERR_INVALID_JSON, NULL,
                           "We could not parse the JSON body of your request (expected an object).");
        return;
    }
    struct wh_in *in = calloc(1, sizeof *in);
    const char *url = NULL;
    char msg[400];
    int r;
    if (!in) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        goto out;
    }
    if ((r = js_get_str(root, "url", &url))) {
        api_respond_error(req, r == ERR_NOTFOUND ? API_ERR_MISSING_PARAMETER : API_ERR_INVALID_TYPE,
                           "url", "Missing or invalid 'url': expected a string such as \"https://example.com/hook\".");
        goto out;
    }
    if (webhook_url_check(url, 1, 0, msg, sizeof msg)) {
        api_respond_error(req, API_ERR_INVALID_URL, "url", "%s", msg);
        goto out;
    }
    snprintf(in->url, sizeof in->url, "%s", url);
    types = json_object_get(root, "event_types");
    if (!types || json_is_null(types)) {
        snprintf(in->types, sizeof in->types, "*");
    } else if (!json_is_array(types) || json_array_size(types) == 0 || json_array_size(types) > 8) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "event_types",
                           "event_types must be a non-empty array of event types (or omitted for all).");
        goto out;
    } else {
        struct buf tb;
        buf_init(&tb, sizeof in->types - 1);
        size_t i;
        json_t *v;
        json_array_foreach(types, i, v) {
            const char *t = json_string_value(v);
            if (!t || (!webhook_event_type_valid(t) && strcmp(t, "*") != 0)) {
                buf_release(&tb);
                api_respond_error(req, API_ERR_INVALID_VALUE, "event_types",
                                   "Unknown event type: use batch.completed, batch.failed, batch.expired, "
                                   "batch.cancelled or \"*\".");
                goto out;
            }
            if (strcmp(t, "*") == 0) {
                buf_reset(&tb);
                buf_append_str(&tb, "*");
                break;
            }
            if (tb.len)
                buf_append_byte(&tb, ',');
            buf_append_str(&tb, t);
        }
        snprintf(in->types, sizeof in->types, "%.*s", (int)tb.len, tb.data ? tb.data : "");
        buf_release(&tb);
    }
    struct op *op = app_op_new(req, create_fn);
    if (op) {
        op->in = in;
        op->in_free = free;
        in = NULL;
        store_idem_fingerprint("POST", "/v1/webhook_endpoints", body, len, op->fp);
    }
    app_op_run(req, op);
out:
    free(in);
    json_decref(root);
}

/* ---- GET list / one, DELETE ------------------------------------------------------------------- */

static void list_fn(struct op *op, struct store *st)
{
    struct store_wh_endpoint *items = NULL;
    size_t n = 0;
    int rc = store_wh_endpoint_list(st, op->tenant, &items, &n);
    if (rc) {
        op_internal(op, rc, "list webhook endpoints");
        return;
    }
    buf_append_str(&op->out, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(&op->out, ',');
        rc = endpoint_json(&op->out, &items[i], NULL);
    }
    free(items);
    if (rc || (rc = buf_append_str(&op->out, "],\"has_more\":false}")))
        op_internal(op, rc, "render endpoints");
    else
        op->status = 200;
}

static void get_fn(struct op *op, struct store *st)
{
    struct store_wh_endpoint e;
    int rc = store_wh_endpoint_get(st, op->tenant, op->id, &e);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(op);
    else if (rc)
        op_internal(op, rc, "get webhook endpoint");
    else if ((rc = endpoint_json(&op->out, &e, NULL)))
        op_internal(op, rc, "render endpoint");
    else
        op->status = 200;
}

static void delete_fn(struct op *op, struct store *st)
{
    int rc = store_wh_endpoint_delete(st, op->tenant, op->id);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(op);
    else if (rc)
        op_internal(op, rc, "delete webhook endpoint");
    else if ((rc = buf_printf(&op->out, "{\"id\":\"%s\",\"object\":\"webhook_endpoint.deleted\",\"deleted\":true}",
                              op->id)))
        op_internal(op, rc, "render");
    else
        op->status = 200;
}

/* ---- deliveries ------------------------------------------------------------------------------ */

/* Render the one delivery `id` of the endpoint (after a redeliver / test). */
static void answer_delivery(struct op *op, struct store *st, int64_t id)
{
    struct store_wh_delivery *items = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_wh_delivery_list(st, op->tenant, op->id, id + 1, 1, &items, &n, &more);
    if (rc || n != 1 || items[0].id != id) {
        store_wh_delivery_list_free(items, n);
        op_internal(op, rc ? rc : ERR_INTERNAL, "read delivery");
        return;
    }
    buf_reset(&op->out);
    rc = delivery_json(&op->out, &items[0]);
    store_wh_delivery_list_free(items, n);
    if (rc)
        op_internal(op, rc, "render delivery");
    else
        op->status = 200;
}

static void deliveries_fn(struct op *op, struct store *st)
{
    struct wh_in *in = op->in;
    struct store_wh_delivery *items = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_wh_delivery_list(st, op->tenant, op->id, in->delivery_id, op->limit, &items, &n, &more);
    if (rc == ERR_NOTFOUND) {
        endpoint_not_found(op);
        return;
    }
    if (rc) {
        op_internal(op, rc, "list deliveries");
        return;
    }
    struct buf *b = &op->out;
    buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(b, ',');
        rc = delivery_json(b, &items[i]);
    }
    if (!rc) {
        buf_append_str(b, "],\"first_id\":");
        if (n)
            buf_printf(b, "\"whd_%lld\",\"last_id\":\"whd_%lld\"", (long long)items[0].id, (long long)items[n - 1].id);
        else
            buf_append_str(b, "null,\"last_id\":null");
        rc = buf_printf(b, ",\"has_more\":%s}", more ? "true" : "false");
    }
    store_wh_delivery_list_free(items, n);
    if (rc)
        op_internal(op, rc, "render deliveries");
    else
        op->status = 200;
}

static void redeliver_fn(struct op *op, struct store *st)
{
    struct wh_in *in = op->in;
    int rc = store_wh_redeliver(st, op->tenant, op->id, in->delivery_id, clock_wall_s());
    if (rc == ERR_NOTFOUND)
        op_error(op, API_ERR_NOT_FOUND, "delivery_id", "No such delivery 'whd_%lld' of endpoint '%s'.",
                 (long long)in->delivery_id, op->id);
    else if (rc == ERR_BADSTATE)
        op_error(op, API_ERR_ENDPOINT_DISABLED, "id",
                 "Webhook endpoint '%s' is disabled; delete it and register it again.", op->id);
    else if (rc)
        op_internal(op, rc, "redeliver");
    else
        answer_delivery(op, st, in->delivery_id);
}

static void test_fn(struct op *op, struct store *st)
{
    int64_t did = 0;
    int rc = store_wh_test_event(st, op->tenant, op->id, clock_wall_s(), &did);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(op);
    else if (rc == ERR_BADSTATE)
        op_error(op, API_ERR_ENDPOINT_DISABLED, "id",
                 "Webhook endpoint '%s' is disabled; delete it and register it again.", op->id);
    else if (rc)
        op_internal(op, rc, "test event");
    else
        answer_delivery(op, st, did);
}

static void secret_fn(struct op *op, struct store *st)
{
    char fresh[STORE_WH_SECRET_MAX], secret[STORE_WH_SECRET_MAX];
    int rc = webhook_secret_new(fresh);
    if (!rc)
        rc = store_wh_tenant_secret(st, op->tenant, fresh, clock_wall_s(), secret);
    if (rc) {
        op_internal(op, rc, "tenant webhook secret");
        return;
    }
    buf_append_str(&op->out, "{\"object\":\"webhook_secret\",\"secret\":");
    js_escape(&op->out, secret, strlen(secret));
    buf_append_str(&op->out, "}");
    op->status = 200;
}

/* ---- handlers: parse ids and queue -------------------------------------------------------------- */

static int parse_delivery_id(const char *s, int64_t *out)
{
    if (!s || strncmp(s, "whd_", 4) != 0)
        return ERR_INVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s + 4, &end, 10);
    if (errno || end == s + 4 || *end || v < 1)
        return ERR_INVAL;
    *out = v;
    return 0;
}

/* A new op with the {id} path parameter and a struct wh_in. NULL when answered. */
static struct op *endpoint_op(struct http_req *req, op_fn fn)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= ID_MAX) {
        api_respond_error(req, API_ERR_NOT_FOUND, "id", "No such webhook endpoint.");
        return NULL;
    }
    struct op *op = app_op_new(req, fn);
    struct wh_in *in = calloc(1, sizeof *in);
    if (!op || !in) {
        free(in);
        app_op_free(op);
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return NULL;
    }
    snprintf(op->id, sizeof op->id, "%s", id);
    op->in = in;
    op->in_free = free;
    return op;
}

static void endpoints_list(struct http_req *req, void *arg)
{
    (void)arg;
    app_op_run(req, app_op_new(req, list_fn));
}

static void endpoints_get(struct http_req *req, void *arg)
{
    (void)arg;
    struct op *op = endpoint_op(req, get_fn);
    if (op)
        app_op_run(req, op);
}

static void endpoints_delete(struct http_req *req, void *arg)
{
    (void)arg;
    struct op *op = endpoint_op(req, delete_fn);
    if (op)
        app_op_run(req, op);
}

static void deliveries_list(struct http_req *req, void *arg)
{
    (void)arg;
    int64_t limit;
    if (app_query_int(req, "limit", 1, 100, 20, &limit)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to 100.");
        return;
    }
    const char *after = http_req_query(req, "after");
    int64_t before = 0;
    if (after && parse_delivery_id(after, &before)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "after", "after must be a delivery id (whd_...).");
        return;
    }
    struct op *op = endpoint_op(req, deliveries_fn);
    if (!op)
        return;
    op->limit = (int)limit;
    ((struct wh_in *)op->in)->delivery_id = before;
    app_op_run(req, op);
}

static void deliveries_redeliver(struct http_req *req, void *arg)
{
    (void)arg;
    int64_t did;
    if (parse_delivery_id(http_req_param(req, "delivery_id"), &did)) {
        api_respond_error(req, API_ERR_NOT_FOUND, "delivery_id", "No such delivery.");
        return;
    }
    struct op *op = endpoint_op(req, redeliver_fn);
    if (!op)
        return;
    ((struct wh_in *)op->in)->delivery_id = did;
    app_op_run(req, op);
}

static void endpoints_test(struct http_req *req, void *arg)
{
    (void)arg;
    struct op *op = endpoint_op(req, test_fn);
    if (op)
        app_op_run(req, op);
}

static void secret_get(struct http_req *req, void *arg)
{
    (void)arg;
    app_op_run(req, app_op_new(req, secret_fn));
}

int routes_webhooks_add(struct app *app)
{
    struct http_server *s = app->srv;
    const struct http_route routes[] = {
        {"POST", "/v1/webhook_endpoints", endpoints_create, app_head_auth, 64 * 1024, app},
        {"GET", "/v1/webhook_endpoints", endpoints_list, app_head_auth, 0, app},
        {"GET", "/v1/webhook_endpoints/{id}", endpoints_get, app_head_auth, 0, app},
        {"DELETE", "/v1/webhook_endpoints/{id}", endpoints_delete, app_head_auth, 0, app},
        {"GET", "/v1/webhook_endpoints/{id}/deliveries", deliveries_list, app_head_auth, 0, app},
        {"POST", "/v1/webhook_endpoints/{id}/deliveries/{delivery_id}/redeliver", deliveries_redeliver,
         app_head_auth, 0, app},
        {"POST", "/v1/webhook_endpoints/{id}/test", endpoints_test, app_head_auth, 0, app},
        {"GET", "/v1/webhook_secret", secret_get, app_head_auth, 0, app},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int rc = http_server_route(s, &routes[i]);
        if (rc)
            return rc;
    }
    return 0;
}
