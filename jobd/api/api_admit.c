/*
 * api_admit.c - admission of batch submissions under budget limits (see
 * api_admit.h). Pool thread.
 */
#include "jobd/api/api_admit.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/api/api_int.h"

struct estimate_call {
    struct blob_store *bs;
    const char *key, *endpoint;
    struct api *api;
    struct budget_estimate *out;
    int rc;
};

static void estimate_call(void *ctx)
{
    struct estimate_call *c = ctx;
    c->rc = ingest_estimate_file(c->bs, c->key, c->endpoint, &c->api->cfg.limits, c->api->cfg.prices, c->out);
}

int api_admit_prepare(struct api_job *op, struct store **stp, const char *key, const char *file_id,
                      const char *endpoint, struct api_admit *adm)
{
    struct store *st = *stp;
    memset(adm, 0, sizeof *adm);
    adm->job = op;
    int rc = store_limits_get(st, op->tenant, &adm->limits);
    if (rc)
        return rc;
    if (!adm->limits.has_queued_tokens && !adm->limits.has_daily && !adm->limits.has_monthly)
        return 0; /* no limits: no estimate, no reservation */
    struct store_file f;
    if (!key) {
        rc = store_file_get(st, op->tenant, file_id, &f);
        if (rc == ERR_NOTFOUND || (!rc && strcmp(f.purpose, "batch") != 0))
            return 0; /* the creation answers 404 / 400 */
        if (rc)
            return rc;
        key = f.storage_path;
    }
    /* the scan reads the whole file: it holds no connection of the pool and
     * is not a writer the ingest thread should yield to (jobd/intake/ingestq.c) */
    struct estimate_call c = {store_blobs(st), key, endpoint, op->api, &adm->est, 0};
    *stp = api_job_unlocked(op, st, estimate_call, &c);
    rc = c.rc;
    if (rc == ERR_NOTFOUND)
        return 0; /* missing bytes: ingest fails the batch */
    if (rc)
        return rc;
    adm->active = 1;
    return 0;
}

/* The error table's entry of a refusal (its code is budget_verdict_code(v)). */
static enum api_err verdict_err(enum budget_verdict v)
{
    switch (v) {
    case BUDGET_QUEUED_TOKENS: return API_ERR_QUEUED_TOKENS_LIMIT;
    case BUDGET_DAILY_SPEND: return API_ERR_DAILY_SPEND_LIMIT;
    case BUDGET_MONTHLY_SPEND: return API_ERR_MONTHLY_SPEND_LIMIT;
    default: return API_ERR_INTERNAL;
    }
}

int api_admit_check(void *arg, struct store *st)
{
    const struct api_admit *adm = arg;
    struct api_job *job = adm->job;
    if (!adm->active)
        return 0;
    int64_t now = clock_wall_s();
    struct store_budget_use u;
    int rc = store_budget_use(st, job->tenant, budget_day_start(now), budget_month_start(now), &u);
    if (rc) {
        api_job_internal(job, rc, "budget use");
        return rc;
    }
    char msg[480];
    enum budget_verdict v = budget_check(&adm->limits, &u, &adm->est, msg, sizeof msg);
    if (v == BUDGET_OK)
        return 0;
    atomic_fetch_add(&job->api->n_budget_rejected[v], 1);
    log_info("budget: tenant %s refused: %s", job->tenant, msg);
    api_job_error(job, verdict_err(v), NULL, "%s", msg);
    return ERR_BUSY;
}

void api_admit_reservation(const struct api_admit *adm, struct store_submit *s)
{
    s->reserve = adm->active;
    if (!adm->active)
        return;
    s->reserve_tokens = adm->est.tokens;
    s->reserve_micros = adm->est.micros;
    s->price_in = adm->est.price_in;
    s->price_out = adm->est.price_out;
}
