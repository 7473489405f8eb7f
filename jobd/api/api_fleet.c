/*
 * api_fleet.c - fleet-cost JSON (see api_fleet.h; field meanings in
 * spec/usage.md "Fleet cost").
 */
#include "jobd/api/api_fleet.h"

#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "jobd/api/api_int.h"
#include "jobd/store/store_fleet.h"
#include "jobd/work/lease.h"

static const char *const group_name[] = {"batch", "model", "day", "tenant"};

static int opt_int(struct buf *b, const char *name, int64_t v)
{
    return v < 0 ? buf_printf(b, ",\"%s\":null", name) : buf_printf(b, ",\"%s\":%lld", name, (long long)v);
}

static double per_s(int64_t tokens, int64_t ms)
{
    return ms > 0 ? (double)tokens * 1000.0 / (double)ms : 0.0;
}

/* The sums of a bucket (after its key), reference fields when a table is set. */
static int sums_json(struct buf *b, const struct fleet_bucket *x, int has_ref, int fleet_time)
{
    int64_t in1m, out1m;
    fleet_effective(x, &in1m, &out1m);
    int64_t computed = x->prompt_tokens - x->cached_tokens + x->completion_tokens;
    int rc = buf_printf(b,
                        "\"worker_ms\":%lld,\"fleet_cost\":{\"amount_micros\":%lld},"
                        "\"lapsed\":{\"worker_ms\":%lld,\"amount_micros\":%lld},"
                        "\"input_tokens\":%lld,\"input_cached_tokens\":%lld,\"output_tokens\":%lld,"
                        "\"computed_tokens\":%lld,\"reused_tokens\":%lld,\"requests_leased\":%lld,"
                        "\"tokens_per_worker_second\":%.3f,\"output_tokens_per_worker_second\":%.3f",
                        (long long)x->worker_ms, (long long)x->cost_micros, (long long)x->lapsed_ms,
                        (long long)x->lapsed_micros, (long long)x->prompt_tokens, (long long)x->cached_tokens,
                        (long long)x->completion_tokens, (long long)computed, (long long)x->reused_tokens,
                        (long long)x->requests,
                        per_s(computed, x->worker_ms), per_s(x->completion_tokens, x->worker_ms));
    if (!rc)
        rc = opt_int(b, "effective_micros_per_1m_input", in1m);
    if (!rc)
        rc = opt_int(b, "effective_micros_per_1m_output", out1m);
    if (!rc)
        rc = has_ref ? buf_printf(b, ",\"reference_cost\":{\"amount_micros\":%lld},\"reference_difference_micros\":%lld",
                                  (long long)x->reference_micros, (long long)(x->reference_micros - x->cost_micros))
                     : buf_append_str(b, ",\"reference_cost\":null,\"reference_difference_micros\":null");
    if (!rc && fleet_time)
        rc = buf_printf(b, ",\"registered_ms\":%lld,\"idle_ms\":%lld,\"idle\":{\"amount_micros\":%lld},\"utilization\":%.4f",
                        (long long)x->registered_ms, (long long)x->idle_ms, (long long)x->idle_micros,
                        x->registered_ms ? (double)(x->registered_ms - x->idle_ms) / (double)x->registered_ms : 0.0);
    return rc;
}

static int worker_json(struct buf *b, const struct fleet_worker_fig *w, int first)
{
    int rc = buf_append_str(b, first ? "{\"id\":" : ",{\"id\":");
    if (!rc && !(rc = js_escape(b, w->id, strlen(w->id))) && !(rc = buf_append_str(b, ",\"name\":")) &&
        !(rc = js_escape(b, w->name, strlen(w->name))) && !(rc = buf_append_str(b, ",\"device\":")) &&
        !(rc = js_escape(b, w->device, strlen(w->device))) && !(rc = buf_append_str(b, ",\"model\":")))
        rc = js_escape(b, w->model, strlen(w->model));
    if (!rc)
        rc = buf_printf(b,
                        ",\"state\":\"%s\",\"hourly_cost_micros\":%lld,\"unpriced\":%s,\"registered_ms\":%lld,\"busy_ms\":%lld,"
                        "\"idle_ms\":%lld,\"utilization\":%.4f,\"cost\":{\"amount_micros\":%lld},"
                        "\"busy\":{\"amount_micros\":%lld},\"idle\":{\"amount_micros\":%lld},"
                        "\"computed_tokens\":%lld,\"tokens_per_s\":%.3f,\"output_tokens_per_s\":%.3f}",
                        fleet_state_name(w->state), (long long)w->hourly_cost_micros,
                        w->unpriced ? "true" : "false", (long long)w->registered_ms,
                        (long long)w->busy_ms, (long long)w->idle_ms,
                        w->registered_ms ? (double)w->busy_ms / (double)w->registered_ms : 0.0,
                        (long long)w->cost_micros, (long long)w->busy_micros, (long long)w->idle_micros,
                        (long long)w->computed_tokens, per_s(w->computed_tokens, w->busy_ms),
                        per_s(w->completion_tokens, w->busy_ms));
    return rc;
}

int api_fleet_report(struct api *api, struct store *st, int64_t since, int64_t until, enum fleet_group group,
                     const char *tenant_id, int admin, struct buf *b)
{
    int64_t now = lease_clock_s();
    int64_t ttl = api->cfg.lease.worker_ttl_s;
    if (until < since)
        until = since; /* an empty range, as the ledger report answers it */
    struct store_fleet in;
    int rc = store_fleet_read(st, since, until, now, ttl, NULL, &in);
    if (rc)
        return rc;
    const struct usage_prices *ref = api->cfg.reference_prices;
    int has_ref = ref && ref->n > 0;
    struct fleet_opts o = {since, until, now, ttl, group, tenant_id, NULL, ref};
    struct fleet_report r;
    rc = fleet_compute(&in, &o, &r);
    store_fleet_release(&in);
    if (rc)
        return rc;
    int days = group == FLEET_BY_DAY;
    rc = buf_printf(b, "{\"object\":\"list\",\"view\":\"fleet\",\"group_by\":\"%s\",\"since\":%lld,\"until\":%lld,",
                    group_name[group], (long long)since, (long long)until);
    if (!rc && admin)
        rc = tenant_id ? buf_printf(b, "\"tenant_id\":\"%s\",", tenant_id) : buf_append_str(b, "\"tenant_id\":null,");
    if (!rc)
        rc = buf_append_str(b, "\"data\":[");
    for (size_t i = 0; i < r.n && !rc; i++) {
        const struct fleet_bucket *x = &r.buckets[i];
        if ((rc = buf_append_str(b, i ? ",{\"object\":\"usage.fleet_bucket\",\"key\":"
                                      : "{\"object\":\"usage.fleet_bucket\",\"key\":")) ||
            (rc = js_escape(b, x->key, strlen(x->key))) ||
            (rc = buf_printf(b, ",\"start_time\":%lld,", (long long)x->start_time)) ||
            (rc = sums_json(b, x, has_ref, days)))
            break;
        rc = buf_append_byte(b, '}');
    }
    if (!rc && !(rc = buf_append_str(b, "],\"totals\":{")) && !(rc = sums_json(b, &r.total, has_ref, days)) &&
        !(rc = buf_append_str(b, "},\"fleet\":{")) && !(rc = sums_json(b, &r.fleet, has_ref, 1)))
        rc = buf_printf(b, ",\"busy_ms\":%lld,\"cost\":{\"amount_micros\":%lld},\"workers\":%zu}",
                        (long long)r.fleet.worker_ms, (long long)(r.fleet.cost_micros + r.fleet.idle_micros),
                        r.n_workers);
    if (!rc && admin) {
        rc = buf_append_str(b, ",\"workers\":[");
        for (size_t i = 0; i < r.n_workers && !rc; i++)
            rc = worker_json(b, &r.workers[i], i == 0);
        if (!rc)
            rc = buf_append_byte(b, ']');
    }
    if (!rc)
        rc = buf_printf(b, ",\"has_more\":%s}", r.has_more ? "true" : "false");
    fleet_report_release(&r);
    return rc;
}

int api_fleet_by_model(struct api *api, struct store *st, int64_t window_s, struct fleet_report *out)
{
    int64_t now = lease_clock_s(), ttl = api->cfg.lease.worker_ttl_s;
    struct store_fleet in;
    int rc = store_fleet_read(st, now - window_s, now + 1, now, ttl, NULL, &in);
    if (rc)
        return rc;
    struct fleet_opts o = {now - window_s, now + 1, now, ttl, FLEET_BY_MODEL, NULL, NULL, NULL};
    rc = fleet_compute(&in, &o, out);
    store_fleet_release(&in);
    return rc;
}

int api_fleet_batch(struct api *api, struct store *st, const char *batch_id, struct buf *b)
{
    int64_t now = lease_clock_s();
    int64_t ttl = api->cfg.lease.worker_ttl_s;
    struct store_fleet in;
    int rc = store_fleet_read(st, 0, 0, now, ttl, batch_id, &in);
    if (rc)
        return rc;
    const struct usage_prices *ref = api->cfg.reference_prices;
    struct fleet_opts o = {0, INT64_MAX / 4, now, ttl, FLEET_BY_BATCH, NULL, batch_id, ref};
    struct fleet_report r;
    rc = fleet_compute(&in, &o, &r);
    store_fleet_release(&in);
    if (rc)
        return rc;
    struct fleet_bucket zero;
    memset(&zero, 0, sizeof zero);
    const struct fleet_bucket *x = r.n ? &r.buckets[0] : &zero;
    int64_t in1m, out1m;
    fleet_effective(x, &in1m, &out1m);
    rc = buf_printf(b,
                    ",\"fleet_cost\":{\"amount_micros\":%lld,\"worker_ms\":%lld,\"lapsed_micros\":%lld,"
                    "\"lapsed_worker_ms\":%lld,\"computed_tokens\":%lld,\"reused_tokens\":%lld",
                    (long long)x->cost_micros, (long long)x->worker_ms, (long long)x->lapsed_micros,
                    (long long)x->lapsed_ms,
                    (long long)(x->prompt_tokens - x->cached_tokens + x->completion_tokens),
                    (long long)x->reused_tokens);
    if (!rc)
        rc = opt_int(b, "effective_micros_per_1m_input", in1m);
    if (!rc)
        rc = opt_int(b, "effective_micros_per_1m_output", out1m);
    if (!rc)
        rc = ref && ref->n ? buf_printf(b, ",\"reference_micros\":%lld}", (long long)x->reference_micros)
                           : buf_append_str(b, ",\"reference_micros\":null}");
    fleet_report_release(&r);
    return rc;
}
