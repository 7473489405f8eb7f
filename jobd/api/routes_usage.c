/*
 * routes_usage.c - GET /v1/usage: the caller's usage report, and GET
 * /v1/admin/usage: the same report across tenants (admin token; optional
 * tenant= filter, group_by=tenant) (spec/usage.md).
 *
 * Query: since, until (unix seconds, "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SSZ",
 * UTC; since <= created_at < until; defaults
 * 0 and "now + 1 day"), group_by = batch | model | day (default model),
 * batch = one batch's rows only (e.g. a mixed batch's usage per model). The
 * answer is a list of buckets ordered by key plus the range totals, each with
 * tokens, requests and cost (integer micro-dollars). Sums of usage_ledger
 * rows (jobd/store/store_usage.h), so they agree exactly with each batch's usage.
 * The database work runs on the thread pool (jobd/api/api_job.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_fleet.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/http/http.h"
#include "jobd/store/store_usage.h"

struct usage_job {
    struct api_job job;
    int64_t since, until;
    enum store_usage_group group;
    int admin;       /* across tenants */
    char tenant[80]; /* admin filter: name or ten_... id; "" = every tenant */
    char batch[ID_MAX]; /* batch= filter; "" = every batch */
    int fleet;       /* view=fleet: worker time priced and attributed (api_fleet.h) */
};

static const char *const group_name[] = {"batch", "model", "day", "tenant"};

static int sums_json(struct buf *b, const struct store_usage_row *r)
{
    return buf_printf(b,
                      "\"input_tokens\":%lld,\"input_cached_tokens\":%lld,\"output_tokens\":%lld,"
                      "\"total_tokens\":%lld,\"num_model_requests\":%lld,\"cost\":{\"amount_micros\":%lld},"
                      "\"reused_tokens\":%lld,\"num_reused_requests\":%lld",
                      (long long)r->prompt_tokens, (long long)r->cached_tokens,
                      (long long)r->completion_tokens, (long long)(r->prompt_tokens + r->completion_tokens),
                      (long long)r->requests, (long long)r->cost_micros, (long long)r->reused_tokens,
                      (long long)r->reused_requests);
}

static void usage_job_free(struct api_job *job)
{
    free(job);
}

static void usage_run(struct api_job *job, struct store *st)
{
    const struct usage_job *in = (const struct usage_job *)job;
    struct store_usage_row *rows = NULL, tot;
    struct store_tenant t;
    size_t n = 0;
    int more = 0, rc;
    const char *tenant = job->tenant;
    if (in->admin) {
        tenant = NULL;
        if (in->tenant[0]) {
            rc = store_tenant_resolve(st, in->tenant, &t);
            if (rc == ERR_NOTFOUND) {
                api_job_error(job, API_ERR_NOT_FOUND, "tenant", "No such tenant: '%s'.", in->tenant);
                return;
            }
            if (rc) {
                api_job_internal(job, rc, "get tenant");
                return;
            }
            tenant = t.id;
        }
    }
    if (in->fleet) {
        rc = api_fleet_report(job->api, st, in->since, in->until, (enum fleet_group)in->group, tenant, in->admin,
                              &job->out);
        if (rc)
            api_job_internal(job, rc, "fleet report");
        else
            job->status = 200;
        return;
    }
    rc = store_usage_report(st, tenant, in->since, in->until, in->batch[0] ? in->batch : NULL, in->group, &rows, &n,
                            &more, &tot);
    if (rc) {
        api_job_internal(job, rc, "usage report");
        return;
    }
    struct buf *b = &job->out;
    rc = buf_printf(b, "{\"object\":\"list\",\"group_by\":\"%s\",\"since\":%lld,\"until\":%lld,",
                    group_name[in->group], (long long)in->since, (long long)in->until);
    if (!rc && in->admin)
        rc = tenant ? buf_printf(b, "\"tenant_id\":\"%s\",", tenant) : buf_append_str(b, "\"tenant_id\":null,");
    if (!rc)
        rc = buf_append_str(b, "\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if ((rc = buf_append_str(b, i ? ",{\"object\":\"usage.bucket\",\"key\":" : "{\"object\":\"usage.bucket\",\"key\":")) ||
            (rc = js_escape(b, rows[i].key, strlen(rows[i].key))) ||
            (rc = buf_printf(b, ",\"start_time\":%lld,", (long long)rows[i].start_time)) ||
            (rc = sums_json(b, &rows[i])))
            break;
        rc = buf_append_byte(b, '}');
    }
    free(rows);
    if (!rc && !(rc = buf_append_str(b, "],\"totals\":{")) && !(rc = sums_json(b, &tot)))
        rc = buf_printf(b, "},\"has_more\":%s}", more ? "true" : "false");
    if (rc)
        api_job_internal(job, rc, "usage report");
    else
        job->status = 200;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* A query time: absent -> def; unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ. */
static int query_time(struct http_req *req, const char *name, int64_t def, int64_t *out)
{
    const char *v = http_req_query(req, name);
    if (!v) {
        *out = def;
        return 0;
    }
    int64_t x;
    if (api_query_int(req, name, 0, INT64_MAX / 2, def, &x) == 0) {
        *out = x;
        return 0;
    }
    size_t n = strlen(v);
    int f[6] = {0};
    static const int at[6] = {0, 5, 8, 11, 14, 17}, len[6] = {4, 2, 2, 2, 2, 2};
    if (n != 10 && !(n == 20 && v[10] == 'T' && v[13] == ':' && v[16] == ':' && v[19] == 'Z'))
        return ERR_INVAL;
    if (v[4] != '-' || v[7] != '-')
        return ERR_INVAL;
    for (int i = 0; i < (n == 10 ? 3 : 6); i++)
        for (int k = 0; k < len[i]; k++) {
            char c = v[at[i] + k];
            if (c < '0' || c > '9')
                return ERR_INVAL;
            f[i] = f[i] * 10 + (c - '0');
        }
    if (f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > 31 || f[3] > 23 || f[4] > 59 || f[5] > 59 || f[0] < 1970)
        return ERR_INVAL;
    *out = days_from_civil(f[0], f[1], f[2]) * 86400 + f[3] * 3600 + f[4] * 60 + f[5];
    return 0;
}

/* Parse since/until/group_by (and, admin, tenant) into *in; answers 400 and
 * returns -1 on a bad value. groups = how many group_by values are allowed. */
static int parse_query(struct http_req *req, struct usage_job *in, size_t groups)
{
    int64_t now = clock_wall_s();
    if (query_time(req, "since", 0, &in->since) || query_time(req, "until", now + 86400, &in->until)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, NULL,
                           "since and until must be unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC).");
        return -1;
    }
    const char *g = http_req_query(req, "group_by");
    if (g) {
        size_t i = 0;
        while (i < groups && strcmp(g, group_name[i]) != 0)
            i++;
        if (i == groups) {
            api_respond_error(req, API_ERR_INVALID_VALUE, "group_by",
                               groups == 4 ? "group_by must be one of batch, model, day, tenant."
                                           : "group_by must be one of batch, model, day.");
            return -1;
        }
        in->group = (enum store_usage_group)i;
    }
    const char *view = http_req_query(req, "view");
    if (view && strcmp(view, "fleet") != 0 && strcmp(view, "tokens") != 0) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "view", "view must be tokens (the default) or fleet.");
        return -1;
    }
    in->fleet = view && strcmp(view, "fleet") == 0;
    const char *bid = http_req_query(req, "batch");
    if (bid && in->fleet) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "batch",
                          "batch is not a filter of view=fleet: GET /v1/batches/{id} has the batch's fleet_cost.");
        return -1;
    }
    if (bid && (!*bid || strlen(bid) >= sizeof in->batch)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "batch", "batch must be a batch id.");
        return -1;
    }
    if (bid)
        snprintf(in->batch, sizeof in->batch, "%s", bid);
    if (in->admin) {
        const char *t = http_req_query(req, "tenant");
        if (t && (!*t || strlen(t) >= sizeof in->tenant)) {
            api_respond_error(req, API_ERR_INVALID_VALUE, "tenant",
                               "tenant must be a tenant name or ten_... id.");
            return -1;
        }
        if (t)
            snprintf(in->tenant, sizeof in->tenant, "%s", t);
    }
    return 0;
}

static void usage_get(struct http_req *req, void *arg)
{
    (void)arg;
    struct usage_job *in = calloc(1, sizeof *in);
    if (!in) {
        api_job_run(req, NULL);
        return;
    }
    in->group = STORE_USAGE_MODEL;
    if (parse_query(req, in, 3)) {
        free(in);
        return;
    }
    api_job_init_req(&in->job, req, usage_run, usage_job_free);
    api_job_run(req, &in->job);
}

/* GET /v1/admin/usage: admin token (api_head_admin); no tenant context. */
static void admin_usage_get(struct http_req *req, void *arg)
{
    struct usage_job *in = calloc(1, sizeof *in);
    if (!in) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    in->group = STORE_USAGE_TENANT;
    in->admin = 1;
    if (parse_query(req, in, 4)) {
        free(in);
        return;
    }
    api_job_init(&in->job, arg, usage_run, usage_job_free, 0, 64u << 20);
    api_job_run(req, &in->job);
}

int routes_usage_add(struct api *api)
{
    int rc = http_server_route(api->srv, &(struct http_route){"GET", "/v1/usage", usage_get, api_head_tenant, 0, api});
    if (!rc)
        rc = http_server_route(api->srv,
                               &(struct http_route){"GET", "/v1/admin/usage", admin_usage_get, api_head_admin, 0, api});
    return rc;
}
