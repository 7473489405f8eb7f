/*
 * routes_budget.c - budgets (spec/usage.md "Budgets"): the admin routes
 * GET/PUT /v1/admin/tenants/{tenant}/limits. (Admission of submissions
 * under the limits: jobd/api/api_admit.h.)
 *
 * The routes take the admin token (like GET /v1/workers) and name the
 * tenant by name (or by its "ten_..." id). The database work runs on the
 * thread pool (limits_run).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/account/budget.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_int.h"
#include "jobd/http/http.h"
#include "jobd/store/store_budget.h"

/* ---- GET/PUT /v1/admin/tenants/{tenant}/limits ------------------------------------------------ */

struct limits_job {
    struct api_job job;
    char tenant[80];
    int put;
    struct store_limits l;
};

static void opt_json(struct buf *b, const char *key, int has, int64_t v)
{
    if (has)
        buf_printf(b, ",\"%s\":%lld", key, (long long)v);
    else
        buf_printf(b, ",\"%s\":null", key);
}

static void limits_job_free(struct api_job *job)
{
    free(job);
}

static void limits_run(struct api_job *job, struct store *st)
{
    struct limits_job *in = (struct limits_job *)job;
    struct store_tenant t;
    int rc = store_tenant_resolve(st, in->tenant, &t);
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_NOT_FOUND, "tenant", "No such tenant: '%s'.", in->tenant);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get tenant");
        return;
    }
    int64_t now = clock_wall_s();
    if (in->put && (rc = store_limits_put(st, t.id, &in->l, now))) {
        api_job_internal(job, rc, "put limits");
        return;
    }
    struct store_limits l;
    struct store_budget_use u;
    if ((rc = store_limits_get(st, t.id, &l)) ||
        (rc = store_budget_use(st, t.id, budget_day_start(now), budget_month_start(now), &u))) {
        api_job_internal(job, rc, "get limits");
        return;
    }
    struct buf *b = &job->out;
    buf_reset(b);
    buf_printf(b, "{\"object\":\"tenant.limits\",\"tenant\":\"%s\",\"tenant_id\":\"%s\"", t.name, t.id);
    opt_json(b, "max_queued_tokens", l.has_queued_tokens, l.max_queued_tokens);
    opt_json(b, "max_daily_spend_micros", l.has_daily, l.max_daily_micros);
    opt_json(b, "max_monthly_spend_micros", l.has_monthly, l.max_monthly_micros);
    opt_json(b, "updated_at", l.updated_at != 0, l.updated_at);
    rc = buf_printf(b,
                    ",\"usage\":{\"queued_tokens\":%lld,\"reserved_micros\":%lld,\"spent_today_micros\":%lld,"
                    "\"spent_this_month_micros\":%lld}}",
                    (long long)u.queued_tokens, (long long)u.reserved_micros, (long long)u.spent_day_micros,
                    (long long)u.spent_month_micros);
    if (rc)
        api_job_internal(job, rc, "render limits");
    else
        job->status = 200;
}

/* One limit of the PUT body: absent or null -> none; else an integer in [0, 2^53]. */
static int body_limit(struct http_req *req, json_t *root, const char *key, int *has, int64_t *v)
{
    json_t *x = json_object_get(root, key);
    *has = 0;
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1LL << 53)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, key,
                           "'%s' must be null or an integer from 0 to 2^53.", key);
        return -1;
    }
    *has = 1;
    *v = json_integer_value(x);
    return 0;
}

static void limits_route(struct http_req *req, void *arg)
{
    struct api *api = arg;
    const char *name = http_req_param(req, "tenant");
    struct limits_job *in = calloc(1, sizeof *in);
    json_t *root = NULL;
    if (!in) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    if (!name || !*name || strlen(name) >= sizeof in->tenant) {
        api_respond_error(req, API_ERR_NOT_FOUND, "tenant", "No such tenant.");
        goto fail;
    }
    snprintf(in->tenant, sizeof in->tenant, "%s", name);
    in->put = strcmp(http_req_method(req), "PUT") == 0;
    if (in->put) {
        size_t len;
        const char *body = http_req_body(req, &len);
        struct js_limits lim = JS_LIMITS_DEFAULT;
        if (js_parse(body, len, &lim, &root, NULL) || !json_is_object(root)) {
            api_respond_error(req, API_ERR_INVALID_JSON, NULL,
                               "We could not parse the JSON body of your request (expected an object).");
            goto fail;
        }
        const char *key;
        json_t *val;
        json_object_foreach(root, key, val) {
            if (strcmp(key, "max_queued_tokens") != 0 && strcmp(key, "max_daily_spend_micros") != 0 &&
                strcmp(key, "max_monthly_spend_micros") != 0) {
                api_respond_error(req, API_ERR_UNKNOWN_PARAMETER, key, "Unknown parameter: '%s'.", key);
                goto fail;
            }
        }
        if (body_limit(req, root, "max_queued_tokens", &in->l.has_queued_tokens, &in->l.max_queued_tokens) ||
            body_limit(req, root, "max_daily_spend_micros", &in->l.has_daily, &in->l.max_daily_micros) ||
            body_limit(req, root, "max_monthly_spend_micros", &in->l.has_monthly, &in->l.max_monthly_micros))
            goto fail;
        json_decref(root);
        root = NULL;
    }
    api_job_init(&in->job, api, limits_run, limits_job_free, in->put, 1u << 16);
    api_job_run(req, &in->job);
    return;
fail:
    json_decref(root);
    free(in);
}

int routes_budget_add(struct api *api)
{
    int rc;
    if ((rc = http_server_route(api->srv, &(struct http_route){"GET", "/v1/admin/tenants/{tenant}/limits",
                                                               limits_route, api_head_admin, 0, api})) ||
        (rc = http_server_route(api->srv, &(struct http_route){"PUT", "/v1/admin/tenants/{tenant}/limits",
                                                               limits_route, api_head_admin, 64u << 10, api})))
        return rc;
    return 0;
}
