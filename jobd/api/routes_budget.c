/*
 * routes_budget.c - budgets (spec/usage.md "Budgets"): admission of new
 * batches under per-tenant limits (used by routes_batches.c), and the admin
 * routes GET/PUT /v1/admin/tenants/{tenant}/limits.
 *
 * Admission runs inside a submission's op on a thread-pool thread:
 * app_admit_prepare (before the write transaction) reads the tenant's
 * limits and, only when one is in force, scans the input file for the
 * estimate (jobd/account/budget.h); app_admit_check (inside the transaction that
 * creates the batch, before the insert) reads the tenant's use and refuses
 * with 429 insufficient_quota; app_admit_reserve (same transaction, after
 * the insert) records the batch's reservation. So a refused submission
 * leaves no row, and two concurrent ones are serialised by the write lock.
 *
 * Admin routes take the admin token (like GET /v1/workers) and name the
 * tenant by name (or by its "ten_..." id).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/api/app_int.h"
#include "jobd/account/budget.h"

/* ---- admission ------------------------------------------------------------------------------ */

int app_admit_prepare(struct op *op, struct store *st, const char *path, const char *file_id,
                      const char *endpoint, struct app_admit *adm)
{
    memset(adm, 0, sizeof *adm);
    int rc = store_limits_get(st, op->tenant, &adm->limits);
    if (rc)
        return rc;
    if (!adm->limits.has_queued_tokens && !adm->limits.has_daily && !adm->limits.has_monthly)
        return 0; /* no limits: no estimate, no reservation */
    char buf[STORE_PATH_MAX];
    if (!path) {
        struct store_file f;
        rc = store_file_get(st, op->tenant, file_id, &f);
        if (rc == ERR_NOTFOUND || (!rc && strcmp(f.purpose, "batch") != 0))
            return 0; /* the creation answers 404 / 400 */
        if (rc)
            return rc;
        if ((rc = store_path_abs(op->app->cfg.data_dir, f.storage_path, buf, sizeof buf)))
            return rc;
        path = buf;
    }
    /* the scan reads a file and wants no write lock: while it runs, this op
     * is not a writer the ingest thread should yield to (jobd/intake/ingestq.c) */
    if (op->writes)
        atomic_fetch_sub(&op->app->writers, 1);
    rc = budget_estimate_file(path, endpoint, &op->app->cfg.limits, op->app->cfg.store.prices, &adm->est);
    if (op->writes)
        atomic_fetch_add(&op->app->writers, 1);
    if (rc == ERR_NOTFOUND)
        return 0; /* missing bytes: ingest fails the batch */
    if (rc)
        return rc;
    adm->active = 1;
    return 0;
}

int app_admit_check(struct op *op, struct store *st, const struct app_admit *adm)
{
    if (!adm->active)
        return 0;
    int64_t now = clock_wall_s();
    struct store_budget_use u;
    int rc = store_budget_use(st, op->tenant, budget_day_start(now), budget_month_start(now), &u);
    if (rc) {
        op_internal(op, rc, "budget use");
        return rc;
    }
    char msg[480];
    enum budget_verdict v = budget_check(&adm->limits, &u, &adm->est, msg, sizeof msg);
    if (v == BUDGET_OK)
        return 0;
    atomic_fetch_add(&op->app->n_budget_rejected[v], 1);
    log_info("budget: tenant %s refused: %s", op->tenant, msg);
    op_error(op, 429, "insufficient_quota", budget_verdict_code(v), NULL, "%s", msg);
    return ERR_BUSY;
}

int app_admit_reserve(struct op *op, struct store *st, const struct app_admit *adm, const char *batch_id)
{
    if (!adm->active)
        return 0;
    int rc = store_batch_reserve(st, batch_id, adm->est.tokens, adm->est.micros, adm->est.price_in,
                                 adm->est.price_out);
    if (rc)
        op_internal(op, rc, "reserve budget");
    return rc;
}

/* ---- GET/PUT /v1/admin/tenants/{tenant}/limits ------------------------------------------------ */

struct limits_in {
    char tenant[80];
    int put;
    struct store_limits l;
};

int app_admin_ok(struct app *app, struct http_req *req)
{
    return app_token_ok(app, req, app->cfg.admin_token);
}

void app_admin_head(struct http_req *req, void *arg)
{
    if (!app_admin_ok(arg, req)) {
        http_resp_header(req, "WWW-Authenticate", "Bearer");
        http_respond_error(req, 401, NULL, "invalid_admin_token", NULL,
                           "Missing or wrong admin token (Authorization: Bearer <JOBD_ADMIN_TOKEN>).");
    }
}

static void opt_json(struct buf *b, const char *key, int has, int64_t v)
{
    if (has)
        buf_printf(b, ",\"%s\":%lld", key, (long long)v);
    else
        buf_printf(b, ",\"%s\":null", key);
}

static void limits_fn(struct op *op, struct store *st)
{
    struct limits_in *in = op->in;
    struct store_tenant t;
    int rc = store_tenant_resolve(st, in->tenant, &t);
    if (rc == ERR_NOTFOUND) {
        op_error(op, 404, NULL, "not_found", "tenant", "No such tenant: '%s'.", in->tenant);
        return;
    }
    if (rc) {
        op_internal(op, rc, "get tenant");
        return;
    }
    int64_t now = clock_wall_s();
    if (in->put && (rc = store_limits_put(st, t.id, &in->l, now))) {
        op_internal(op, rc, "put limits");
        return;
    }
    struct store_limits l;
    struct store_budget_use u;
    if ((rc = store_limits_get(st, t.id, &l)) ||
        (rc = store_budget_use(st, t.id, budget_day_start(now), budget_month_start(now), &u))) {
        op_internal(op, rc, "get limits");
        return;
    }
    struct buf *b = &op->out;
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
        op_internal(op, rc, "render limits");
    else
        op->status = 200;
}

/* One limit of the PUT body: absent or null -> none; else an integer in [0, 2^53]. */
static int body_limit(struct http_req *req, json_t *root, const char *key, int *has, int64_t *v)
{
    json_t *x = json_object_get(root, key);
    *has = 0;
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1LL << 53)) {
        http_respond_error(req, 400, NULL, "invalid_value", key,
                           "'%s' must be null or an integer from 0 to 2^53.", key);
        return -1;
    }
    *has = 1;
    *v = json_integer_value(x);
    return 0;
}

static void limits_route(struct http_req *req, void *arg)
{
    struct app *app = arg;
    const char *name = http_req_param(req, "tenant");
    struct limits_in *in = calloc(1, sizeof *in);
    json_t *root = NULL;
    if (!in) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    if (!name || !*name || strlen(name) >= sizeof in->tenant) {
        http_respond_error(req, 404, NULL, "not_found", "tenant", "No such tenant.");
        goto fail;
    }
    snprintf(in->tenant, sizeof in->tenant, "%s", name);
    in->put = strcmp(http_req_method(req), "PUT") == 0;
    if (in->put) {
        size_t len;
        const char *body = http_req_body(req, &len);
        struct js_limits lim = JS_LIMITS_DEFAULT;
        if (js_parse(body, len, &lim, &root, NULL) || !json_is_object(root)) {
            http_respond_error(req, 400, NULL, "invalid_json", NULL,
                               "We could not parse the JSON body of your request (expected an object).");
            goto fail;
        }
        const char *key;
        json_t *val;
        json_object_foreach(root, key, val) {
            if (strcmp(key, "max_queued_tokens") != 0 && strcmp(key, "max_daily_spend_micros") != 0 &&
                strcmp(key, "max_monthly_spend_micros") != 0) {
                http_respond_error(req, 400, NULL, "unknown_parameter", key, "Unknown parameter: '%s'.", key);
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
    app_op_run(req, app_op_new_bare(app, limits_fn, in->put, in, free, 1u << 16));
    return;
fail:
    json_decref(root);
    free(in);
}

int routes_budget_add(struct app *app)
{
    int rc;
    if ((rc = http_server_route(app->srv, &(struct http_route){"GET", "/v1/admin/tenants/{tenant}/limits",
                                                               limits_route, app_admin_head, 0, app})) ||
        (rc = http_server_route(app->srv, &(struct http_route){"PUT", "/v1/admin/tenants/{tenant}/limits",
                                                               limits_route, app_admin_head, 64u << 10, app})))
        return rc;
    return 0;
}
