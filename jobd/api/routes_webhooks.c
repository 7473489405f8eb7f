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
 * at registration) and the database work run on the thread pool (each
 * route's *_run, jobd/api/api_job.h).
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
#include "jobd/api/api_auth.h"
#include "jobd/api/api_idem.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/http/http.h"
#include "jobd/store/store_webhook.h"
#include "jobd/webhook/webhook.h"

/* POST /v1/webhook_endpoints */
struct create_job {
    struct api_job job;
    char url[STORE_WH_URL_MAX + 1];
    char types[STORE_WH_TYPES_MAX];
};

/* the routes on one endpoint ({id}) */
struct endpoint_job {
    struct api_job job;
    char id[ID_MAX];
    int64_t delivery_id; /* redeliver: the delivery; list: list before it (0 = newest) */
    int limit;           /* list */
};

static void job_free(struct api_job *job)
{
    free(job);
}

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
    buf_append_str(b, ",\"object_id\":");
    js_escape(b, d->object_id, strlen(d->object_id));
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

static void endpoint_not_found(struct endpoint_job *ej)
{
    api_job_error(&ej->job, API_ERR_NOT_FOUND, "id", "No such webhook endpoint: '%s'.", ej->id);
}

/* ---- POST /v1/webhook_endpoints ---------------------------------------------------------- */

/* store_idem_answer's render: the new endpoint with its secret (shown once). */
struct created {
    struct api_job *job;
    const char *secret;
    int failed; /* render answered the error */
};

static int render_endpoint(void *arg, const void *obj)
{
    struct created *c = arg;
    buf_reset(&c->job->out);
    int rc = endpoint_json(&c->job->out, obj, c->secret);
    c->failed = rc != 0;
    if (rc)
        api_job_internal(c->job, rc, "render endpoint");
    else
        c->job->status = 200;
    return rc;
}

static void create_run(struct api_job *job, struct store *st)
{
    struct create_job *in = (struct create_job *)job;
    char msg[400];
    int rc = webhook_url_check(in->url, job->api->cfg.webhook_allow_private, 1, msg, sizeof msg);
    if (rc) {
        api_job_error(job, rc == ERR_UNSUPPORTED ? API_ERR_URL_NOT_ALLOWED : API_ERR_INVALID_URL, "url", "%s", msg);
        return;
    }
    char secret[STORE_WH_SECRET_MAX];
    if ((rc = webhook_secret_new(secret))) {
        api_job_internal(job, rc, "webhook secret");
        return;
    }
    if (api_idem_begin(job, st))
        return;
    struct created c = {job, secret, 0};
    struct store_idem_answer ans = api_idem_answer(job, render_endpoint, &c);
    rc = store_wh_endpoint_create_keyed(st, job->tenant, in->url, in->types, secret, clock_wall_s(), &ans);
    if (!rc)
        return;
    api_idem_release(job, st);
    if (rc == ERR_TOOBIG)
        api_job_error(job, API_ERR_LIMIT_EXCEEDED, NULL, "A tenant may register at most %d webhook endpoints.",
                      STORE_WH_MAX_ENDPOINTS);
    else if (!c.failed)
        api_job_internal(job, rc, "create webhook endpoint");
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
    struct create_job *in = calloc(1, sizeof *in);
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
    api_job_init_req(&in->job, req, create_run, job_free);
    store_idem_fingerprint("POST", "/v1/webhook_endpoints", body, len, in->job.fp);
    api_job_run(req, &in->job);
    in = NULL;
out:
    free(in);
    json_decref(root);
}

/* ---- GET list / one, DELETE ------------------------------------------------------------------- */

static void list_run(struct api_job *job, struct store *st)
{
    struct store_wh_endpoint *items = NULL;
    size_t n = 0;
    int rc = store_wh_endpoint_list(st, job->tenant, &items, &n);
    if (rc) {
        api_job_internal(job, rc, "list webhook endpoints");
        return;
    }
    buf_append_str(&job->out, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(&job->out, ',');
        rc = endpoint_json(&job->out, &items[i], NULL);
    }
    free(items);
    if (rc || (rc = buf_append_str(&job->out, "],\"has_more\":false}")))
        api_job_internal(job, rc, "render endpoints");
    else
        job->status = 200;
}

static void get_run(struct api_job *job, struct store *st)
{
    struct endpoint_job *ej = (struct endpoint_job *)job;
    struct store_wh_endpoint e;
    int rc = store_wh_endpoint_get(st, job->tenant, ej->id, &e);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(ej);
    else if (rc)
        api_job_internal(job, rc, "get webhook endpoint");
    else if ((rc = endpoint_json(&job->out, &e, NULL)))
        api_job_internal(job, rc, "render endpoint");
    else
        job->status = 200;
}

static void delete_run(struct api_job *job, struct store *st)
{
    struct endpoint_job *ej = (struct endpoint_job *)job;
    int rc = store_wh_endpoint_delete(st, job->tenant, ej->id);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(ej);
    else if (rc)
        api_job_internal(job, rc, "delete webhook endpoint");
    else if ((rc = buf_printf(&job->out, "{\"id\":\"%s\",\"object\":\"webhook_endpoint.deleted\",\"deleted\":true}",
                              ej->id)))
        api_job_internal(job, rc, "render");
    else
        job->status = 200;
}

/* ---- deliveries ------------------------------------------------------------------------------ */

/* Render the one delivery `id` of the endpoint (after a redeliver / test). */
static void answer_delivery(struct endpoint_job *ej, struct store *st, int64_t id)
{
    struct api_job *job = &ej->job;
    struct store_wh_delivery *items = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_wh_delivery_list(st, job->tenant, ej->id, id + 1, 1, &items, &n, &more);
    if (rc || n != 1 || items[0].id != id) {
        store_wh_delivery_list_free(items, n);
        api_job_internal(job, rc ? rc : ERR_INTERNAL, "read delivery");
        return;
    }
    buf_reset(&job->out);
    rc = delivery_json(&job->out, &items[0]);
    store_wh_delivery_list_free(items, n);
    if (rc)
        api_job_internal(job, rc, "render delivery");
    else
        job->status = 200;
}

static void deliveries_run(struct api_job *job, struct store *st)
{
    struct endpoint_job *ej = (struct endpoint_job *)job;
    struct store_wh_delivery *items = NULL;
    size_t n = 0;
    int more = 0;
    int rc = store_wh_delivery_list(st, job->tenant, ej->id, ej->delivery_id, ej->limit, &items, &n, &more);
    if (rc == ERR_NOTFOUND) {
        endpoint_not_found(ej);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "list deliveries");
        return;
    }
    struct buf *b = &job->out;
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
        api_job_internal(job, rc, "render deliveries");
    else
        job->status = 200;
}

static void redeliver_run(struct api_job *job, struct store *st)
{
    struct endpoint_job *ej = (struct endpoint_job *)job;
    int rc = store_wh_redeliver(st, job->tenant, ej->id, ej->delivery_id, clock_wall_s());
    if (rc == ERR_NOTFOUND)
        api_job_error(job, API_ERR_NOT_FOUND, "delivery_id", "No such delivery 'whd_%lld' of endpoint '%s'.",
                 (long long)ej->delivery_id, ej->id);
    else if (rc == ERR_BADSTATE)
        api_job_error(job, API_ERR_ENDPOINT_DISABLED, "id",
                 "Webhook endpoint '%s' is disabled; delete it and register it again.", ej->id);
    else if (rc)
        api_job_internal(job, rc, "redeliver");
    else
        answer_delivery(ej, st, ej->delivery_id);
}

static void test_run(struct api_job *job, struct store *st)
{
    struct endpoint_job *ej = (struct endpoint_job *)job;
    int64_t did = 0;
    int rc = store_wh_test_event(st, job->tenant, ej->id, clock_wall_s(), &did);
    if (rc == ERR_NOTFOUND)
        endpoint_not_found(ej);
    else if (rc == ERR_BADSTATE)
        api_job_error(job, API_ERR_ENDPOINT_DISABLED, "id",
                 "Webhook endpoint '%s' is disabled; delete it and register it again.", ej->id);
    else if (rc)
        api_job_internal(job, rc, "test event");
    else
        answer_delivery(ej, st, did);
}

static void secret_run(struct api_job *job, struct store *st)
{
    char fresh[STORE_WH_SECRET_MAX], secret[STORE_WH_SECRET_MAX];
    int rc = webhook_secret_new(fresh);
    if (!rc)
        rc = store_wh_tenant_secret(st, job->tenant, fresh, clock_wall_s(), secret);
    if (rc) {
        api_job_internal(job, rc, "tenant webhook secret");
        return;
    }
    buf_append_str(&job->out, "{\"object\":\"webhook_secret\",\"secret\":");
    js_escape(&job->out, secret, strlen(secret));
    buf_append_str(&job->out, "}");
    job->status = 200;
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

/* A new job on the endpoint named by the {id} parameter. NULL when answered. */
static struct endpoint_job *endpoint_job_new(struct http_req *req, api_job_fn run)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= ID_MAX) {
        api_respond_error(req, API_ERR_NOT_FOUND, "id", "No such webhook endpoint.");
        return NULL;
    }
    struct endpoint_job *ej = calloc(1, sizeof *ej);
    if (!ej) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return NULL;
    }
    api_job_init_req(&ej->job, req, run, job_free);
    snprintf(ej->id, sizeof ej->id, "%s", id);
    return ej;
}

/* A job of the tenant with no input. */
static void tenant_job(struct http_req *req, api_job_fn run)
{
    struct api_job *job = calloc(1, sizeof *job);
    if (job)
        api_job_init_req(job, req, run, job_free);
    api_job_run(req, job);
}

static void endpoints_list(struct http_req *req, void *arg)
{
    (void)arg;
    tenant_job(req, list_run);
}

static void endpoints_get(struct http_req *req, void *arg)
{
    (void)arg;
    struct endpoint_job *ej = endpoint_job_new(req, get_run);
    if (ej)
        api_job_run(req, &ej->job);
}

static void endpoints_delete(struct http_req *req, void *arg)
{
    (void)arg;
    struct endpoint_job *ej = endpoint_job_new(req, delete_run);
    if (ej)
        api_job_run(req, &ej->job);
}

static void deliveries_list(struct http_req *req, void *arg)
{
    (void)arg;
    int64_t limit;
    if (api_query_int(req, "limit", 1, 100, 20, &limit)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to 100.");
        return;
    }
    const char *after = http_req_query(req, "after");
    int64_t before = 0;
    if (after && parse_delivery_id(after, &before)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "after", "after must be a delivery id (whd_...).");
        return;
    }
    struct endpoint_job *ej = endpoint_job_new(req, deliveries_run);
    if (!ej)
        return;
    ej->limit = (int)limit;
    ej->delivery_id = before;
    api_job_run(req, &ej->job);
}

static void deliveries_redeliver(struct http_req *req, void *arg)
{
    (void)arg;
    int64_t did;
    if (parse_delivery_id(http_req_param(req, "delivery_id"), &did)) {
        api_respond_error(req, API_ERR_NOT_FOUND, "delivery_id", "No such delivery.");
        return;
    }
    struct endpoint_job *ej = endpoint_job_new(req, redeliver_run);
    if (!ej)
        return;
    ej->delivery_id = did;
    api_job_run(req, &ej->job);
}

static void endpoints_test(struct http_req *req, void *arg)
{
    (void)arg;
    struct endpoint_job *ej = endpoint_job_new(req, test_run);
    if (ej)
        api_job_run(req, &ej->job);
}

static void secret_get(struct http_req *req, void *arg)
{
    (void)arg;
    tenant_job(req, secret_run);
}

int routes_webhooks_add(struct api *app)
{
    struct http_server *s = app->srv;
    const struct http_route routes[] = {
        {"POST", "/v1/webhook_endpoints", endpoints_create, api_head_tenant, 64 * 1024, app},
        {"GET", "/v1/webhook_endpoints", endpoints_list, api_head_tenant, 0, app},
        {"GET", "/v1/webhook_endpoints/{id}", endpoints_get, api_head_tenant, 0, app},
        {"DELETE", "/v1/webhook_endpoints/{id}", endpoints_delete, api_head_tenant, 0, app},
        {"GET", "/v1/webhook_endpoints/{id}/deliveries", deliveries_list, api_head_tenant, 0, app},
        {"POST", "/v1/webhook_endpoints/{id}/deliveries/{delivery_id}/redeliver", deliveries_redeliver,
         api_head_tenant, 0, app},
        {"POST", "/v1/webhook_endpoints/{id}/test", endpoints_test, api_head_tenant, 0, app},
        {"GET", "/v1/webhook_secret", secret_get, api_head_tenant, 0, app},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int rc = http_server_route(s, &routes[i]);
        if (rc)
            return rc;
    }
    return 0;
}
