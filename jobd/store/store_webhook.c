/*
 * store_webhook.c - webhook endpoints, the outbox, deliveries and their
 * attempt log (see store_webhook.h for the design). Statements are in
 * STORE_SQL_WEBHOOK (store_int.h). Same threading as store.c.
 */
#include "jobd/store/store_webhook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/store/store_int.h"

/* ---- outbox ---------------------------------------------------------------------- */

static const char *event_type_for(enum store_batch_status to)
{
    switch (to) {
    case STORE_BATCH_COMPLETED: return "batch.completed";
    case STORE_BATCH_FAILED: return "batch.failed";
    case STORE_BATCH_EXPIRED: return "batch.expired";
    case STORE_BATCH_CANCELLED: return "batch.cancelled";
    default: return NULL;
    }
}

/* The thin payload (OpenAI's shape). Ids are [a-z0-9_-] (common/id.h), so no escaping. */
static int event_payload(char *out, size_t cap, const char *evt_id, const char *type, int64_t now,
                         const char *object_id)
{
    int n = snprintf(out, cap,
                     "{\"id\":\"%s\",\"object\":\"event\",\"type\":\"%s\",\"created_at\":%lld,"
                     "\"data\":{\"id\":\"%s\"}}",
                     evt_id, type, (long long)now, object_id);
    return n > 0 && (size_t)n < cap ? 0 : ERR_TOOBIG;
}

int store_wh_event_for_batch(struct store *st, const char *batch_id, enum store_batch_status to,
                             int64_t now)
{
    const char *type = event_type_for(to);
    if (!type)
        return 0;
    char evt[ID_MAX], payload[512];
    int rc = id_new("evt_", evt, sizeof evt);
    if (rc || (rc = event_payload(payload, sizeof payload, evt, type, now, batch_id)))
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WH_EVENT_INSERT, &rc);
    if (!s)
        return rc;
    if (!(rc = store_bind_text(st, s, 1, evt)) && !(rc = store_bind_text(st, s, 2, type)) &&
        !(rc = store_bind_text(st, s, 3, payload)) && !(rc = store_bind_int(st, s, 4, now)) &&
        !(rc = store_bind_text(st, s, 5, batch_id)))
        rc = store_step_done(st, s, "insert webhook event");
    if (!rc && sdb_changes(st->db) != 1)
        rc = ERR_NOTFOUND;
    return rc;
}

/* ---- endpoints ------------------------------------------------------------------- */

static void ep_row(struct sdb_stmt *s, struct store_wh_endpoint *e)
{
    memset(e, 0, sizeof *e);
    store_col_text(s, 0, e->id, sizeof e->id);
    store_col_text(s, 1, e->tenant_id, sizeof e->tenant_id);
    store_col_text(s, 2, e->kind, sizeof e->kind);
    store_col_text(s, 3, e->url, sizeof e->url);
    store_col_text(s, 4, e->event_types, sizeof e->event_types);
    e->created_at = sdb_column_int64(s, 5);
    e->disabled_at = sdb_column_int64(s, 6);
    store_col_text(s, 7, e->disabled_reason, sizeof e->disabled_reason);
    e->failing_since = sdb_column_int64(s, 8);
}

int store_wh_endpoint_create(struct store *st, const char *tenant_id, const char *url,
                             const char *event_types, const char *secret, int64_t now,
                             struct store_wh_endpoint *out)
{
    if (!url || !*url || strlen(url) > STORE_WH_URL_MAX || !event_types || !*event_types ||
        strlen(event_types) >= STORE_WH_TYPES_MAX || !secret || strlen(secret) >= STORE_WH_SECRET_MAX)
        return ERR_INVAL;
    char id[ID_MAX];
    int rc = id_new("whep_", id, sizeof id);
    if (rc || (rc = store_w_begin(st)))
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_COUNT, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, tenant_id))) {
        int r = sdb_step(s);
        if (r != SDB_ROW)
            rc = store_sqlerr(st, r, "count endpoints");
        else if (sdb_column_int64(s, 0) >= STORE_WH_MAX_ENDPOINTS)
            rc = ERR_TOOBIG;
        sdb_reset(s);
    }
    if (!rc && (s = store_stmt(st, S_WH_EP_INSERT, &rc)) && !(rc = store_bind_text(st, s, 1, id)) &&
        !(rc = store_bind_text(st, s, 2, tenant_id)) && !(rc = store_bind_text(st, s, 3, url)) &&
        !(rc = store_bind_text(st, s, 4, secret)) && !(rc = store_bind_text(st, s, 5, event_types)) &&
        !(rc = store_bind_int(st, s, 6, now)) && !(rc = store_bind_text(st, s, 7, "endpoint")))
        rc = store_step_done(st, s, "insert webhook endpoint");
    if ((rc = store_w_end(st, rc)))
        return rc;
    return out ? store_wh_endpoint_get(st, tenant_id, id, out) : 0;
}

int store_wh_endpoint_get(struct store *st, const char *tenant_id, const char *id,
                          struct store_wh_endpoint *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)) || (rc = store_bind_text(st, s, 2, tenant_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        ep_row(s, out);
    else
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get webhook endpoint");
    sdb_reset(s);
    return rc;
}

static int ep_list_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    (void)ctx;
    ep_row(s, elem);
    return 0;
}

int store_wh_endpoint_list(struct store *st, const char *tenant_id, struct store_wh_endpoint **items,
                           size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_wh_endpoint), ep_list_row, NULL,
                                          "list webhook endpoints"};
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_LIST, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, tenant_id)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

int store_wh_endpoint_delete(struct store *st, const char *tenant_id, const char *id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_DELETE, &rc);
    if (!s || (rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, id)) && !(rc = store_bind_text(st, s, 2, tenant_id)) &&
        !(rc = store_step_done(st, s, "delete webhook endpoint")) && sdb_changes(st->db) == 0)
        rc = ERR_NOTFOUND;
    return store_w_end(st, rc);
}

int store_wh_tenant_secret(struct store *st, const char *tenant_id, const char *secret_new,
                           int64_t now, char out[STORE_WH_SECRET_MAX])
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WH_SECRET_INSERT, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, tenant_id)) &&
        !(rc = store_bind_text(st, s, 2, secret_new)) && !(rc = store_bind_int(st, s, 3, now)))
        rc = store_step_done(st, s, "insert tenant secret");
    if (!rc && (s = store_stmt(st, S_WH_SECRET_GET, &rc)) && !(rc = store_bind_text(st, s, 1, tenant_id))) {
        int r = sdb_step(s);
        if (r == SDB_ROW)
            store_col_text(s, 0, out, STORE_WH_SECRET_MAX);
        else
            rc = r == SDB_DONE ? ERR_INTERNAL : store_sqlerr(st, r, "get tenant secret");
        sdb_reset(s);
    }
    return store_w_end(st, rc);
}

/* ---- fan-out ----------------------------------------------------------------------- */

struct pending_event {
    char id[ID_MAX], tenant_id[ID_MAX], type[64], object_id[ID_MAX];
    char url[STORE_WH_URL_MAX + 1]; /* metadata.webhook_url, "" = none */
};

/* The batch_url endpoint for (tenant, url), created if missing. */
static int batch_url_endpoint(struct store *st, const struct pending_event *ev, int64_t now,
                              char id[ID_MAX])
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_BY_URL, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, ev->tenant_id)) || (rc = store_bind_text(st, s, 2, ev->url)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        store_col_text(s, 0, id, ID_MAX);
    else if (r != SDB_DONE)
        rc = store_sqlerr(st, r, "find batch url endpoint");
    sdb_reset(s);
    if (rc || r == SDB_ROW)
        return rc;
    if ((rc = id_new("whep_", id, ID_MAX)))
        return rc;
    if ((s = store_stmt(st, S_WH_EP_INSERT, &rc)) && !(rc = store_bind_text(st, s, 1, id)) &&
        !(rc = store_bind_text(st, s, 2, ev->tenant_id)) && !(rc = store_bind_text(st, s, 3, ev->url)) &&
        !(rc = store_bind_text(st, s, 4, "")) && !(rc = store_bind_text(st, s, 5, "*")) &&
        !(rc = store_bind_int(st, s, 6, now)) && !(rc = store_bind_text(st, s, 7, "batch_url")))
        rc = store_step_done(st, s, "insert batch url endpoint");
    return rc;
}

static int fanout_one(struct store *st, const struct pending_event *ev, int64_t now,
                      const char *secret_new)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WH_FANOUT_ENDPOINTS, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, ev->id)) && !(rc = store_bind_int(st, s, 2, now)) &&
        !(rc = store_bind_text(st, s, 3, ev->tenant_id)) && !(rc = store_bind_text(st, s, 4, ev->type)))
        rc = store_step_done(st, s, "fan out event");
    if (!rc && ev->url[0]) {
        char ep[ID_MAX], sec[STORE_WH_SECRET_MAX];
        if (!(rc = store_wh_tenant_secret(st, ev->tenant_id, secret_new, now, sec)) &&
            !(rc = batch_url_endpoint(st, ev, now, ep)) &&
            (s = store_stmt(st, S_WH_DELIVERY_INSERT, &rc)) && !(rc = store_bind_text(st, s, 1, ev->id)) &&
            !(rc = store_bind_text(st, s, 2, ep)) && !(rc = store_bind_int(st, s, 3, now)))
            rc = store_step_done(st, s, "batch url delivery");
    }
    if (!rc && (s = store_stmt(st, S_WH_EVENT_DONE, &rc)) && !(rc = store_bind_text(st, s, 1, ev->id)))
        rc = store_step_done(st, s, "event fanned out");
    return store_w_end(st, rc);
}

int store_wh_fanout(struct store *st, int64_t now, int max_events, const char *secret_new,
                    int *n_done)
{
    if (max_events < 1 || max_events > 1000)
        return ERR_INVAL;
    struct pending_event *evs = calloc((size_t)max_events, sizeof *evs);
    if (!evs)
        return ERR_NOMEM;
    int rc = 0, n = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EVENTS_PENDING, &rc);
    if (s && !(rc = store_bind_int(st, s, 1, max_events))) {
        int r;
        while (n < max_events && (r = sdb_step(s)) == SDB_ROW) {
            struct pending_event *e = &evs[n++];
            store_col_text(s, 0, e->id, sizeof e->id);
            store_col_text(s, 1, e->tenant_id, sizeof e->tenant_id);
            store_col_text(s, 2, e->type, sizeof e->type);
            store_col_text(s, 3, e->object_id, sizeof e->object_id);
            /* a non-string or oversized webhook_url is ignored (metadata values are
               strings of <= 512 bytes, checked at batch creation) */
            if (sdb_column_type(s, 4) == SDB_TEXT &&
                (size_t)sdb_column_bytes(s, 4) <= STORE_WH_URL_MAX)
                store_col_text(s, 4, e->url, sizeof e->url);
        }
        if (r != SDB_ROW && r != SDB_DONE)
            rc = store_sqlerr(st, r, "pending events");
        sdb_reset(s);
    }
    int done = 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = fanout_one(st, &evs[i], now, secret_new);
        if (!rc)
            done++;
    }
    free(evs);
    if (!rc && n_done)
        *n_done = done;
    return rc;
}

/* ---- claim and record ------------------------------------------------------------------ */

void store_wh_job_release(struct store_wh_job *j)
{
    if (j) {
        free(j->payload);
        j->payload = NULL;
    }
}

int store_wh_claim(struct store *st, int64_t now, int64_t hold_s, struct store_wh_job *out,
                   int *found)
{
    struct store_wh_job j;
    memset(&j, 0, sizeof j);
    /* a plain read first: an idle dispatcher never takes the write lock */
    int rc = 0, got = 0, due = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_DUE, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, now)))
        return rc;
    int r0 = sdb_step(s);
    due = r0 == SDB_ROW;
    if (r0 != SDB_ROW && r0 != SDB_DONE)
        rc = store_sqlerr(st, r0, "due deliveries");
    sdb_reset(s);
    if (rc || !due) {
        if (!rc)
            *found = 0;
        return rc;
    }
    /* row-locked (PostgreSQL: FOR NO KEY UPDATE SKIP LOCKED, the writer
     * lock shared): dispatchers on every instance claim at once, each
     * delivery by one of them */
    if ((rc = store_w_begin_shared(st)))
        return rc;
    s = store_stmt(st, S_WH_CLAIM, &rc);
    if (s && !(rc = store_bind_int(st, s, 1, now)) && !(rc = store_bind_int(st, s, 2, now + hold_s))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            got = 1;
            j.delivery_id = sdb_column_int64(s, 0);
            j.attempt = sdb_column_int64(s, 1);
            store_col_text(s, 2, j.event_id, sizeof j.event_id);
            store_col_text(s, 3, j.endpoint_id, sizeof j.endpoint_id);
            r = sdb_step(s);
        }
        if (r != SDB_DONE)
            rc = store_sqlerr(st, r, "claim delivery");
        sdb_reset(s);
    }
    if (!rc && got && (s = store_stmt(st, S_WH_JOB, &rc)) && !(rc = store_bind_text(st, s, 1, j.event_id)) &&
        !(rc = store_bind_text(st, s, 2, j.endpoint_id))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            j.payload_len = (size_t)sdb_column_bytes(s, 0);
            j.payload = store_col_dup(s, 0, &rc);
            store_col_text(s, 1, j.url, sizeof j.url);
            store_col_text(s, 2, j.secret, sizeof j.secret);
        } else {
            rc = r == SDB_DONE ? ERR_CORRUPT : store_sqlerr(st, r, "delivery job");
        }
        sdb_reset(s);
    }
    if ((rc = store_w_end(st, rc))) {
        store_wh_job_release(&j);
        return rc;
    }
    if (got)
        *out = j;
    *found = got;
    return 0;
}

static const char *outcome_name(enum store_wh_result r)
{
    switch (r) {
    case STORE_WH_DELIVERED: return "delivered";
    case STORE_WH_RETRY: return "retry";
    case STORE_WH_EXHAUSTED: return "failed";
    case STORE_WH_GONE: return "disabled";
    case STORE_WH_BLOCKED: return "blocked";
    }
    return "failed";
}

static int endpoint_disable(struct store *st, const char *ep, const char *reason, int64_t now)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_EP_DISABLE, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, ep)) && !(rc = store_bind_int(st, s, 2, now)) &&
        !(rc = store_bind_text(st, s, 3, reason)))
        rc = store_step_done(st, s, "disable endpoint");
    if (!rc && (s = store_stmt(st, S_WH_EP_FAIL_PENDING, &rc)) && !(rc = store_bind_text(st, s, 1, ep)))
        rc = store_step_done(st, s, "fail pending deliveries");
    if (!rc)
        log_warn("webhook: endpoint %s disabled: %s", ep, reason);
    return rc;
}

int store_wh_record(struct store *st, const struct store_wh_outcome *o, int64_t now,
                    enum store_wh_result *applied)
{
    char err[STORE_WH_ERROR_MAX + 1] = "";
    if (o->error)
        snprintf(err, sizeof err, "%s", o->error);
    enum store_wh_result res = o->result;
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    /* the fence: still pending at this attempt? */
    char ep[ID_MAX] = "";
    int64_t failing_since = 0;
    int current = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_DELIVERY_FENCE, &rc);
    if (s && !(rc = store_bind_int(st, s, 1, o->delivery_id)) && !(rc = store_bind_int(st, s, 2, o->attempt))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            current = 1;
            store_col_text(s, 0, ep, sizeof ep);
            failing_since = sdb_column_int64(s, 1);
        } else if (r != SDB_DONE) {
            rc = store_sqlerr(st, r, "delivery fence");
        }
        sdb_reset(s);
    }
    char reason[STORE_WH_REASON_MAX] = "";
    if (!rc && current && res == STORE_WH_RETRY && o->disable_after_s > 0 && failing_since > 0 &&
        now - failing_since >= o->disable_after_s) {
        snprintf(reason, sizeof reason, "every delivery failed for %lld s (since %lld); last error: %s",
                 (long long)(now - failing_since), (long long)failing_since, err[0] ? err : "none");
        res = STORE_WH_EXHAUSTED;
    } else if (!rc && current && res == STORE_WH_GONE) {
        snprintf(reason, sizeof reason, "the endpoint answered 410 Gone");
    }
    /* the attempt row (also when stale: it happened) */
    if (!rc && (s = store_stmt(st, S_WH_ATTEMPT_INSERT, &rc)) &&
        !(rc = store_bind_int(st, s, 1, o->delivery_id)) && !(rc = store_bind_int(st, s, 2, o->attempt)) &&
        !(rc = store_bind_int(st, s, 3, o->started_at)) &&
        !(rc = o->status_code ? store_bind_int(st, s, 4, o->status_code) : store_bind_text(st, s, 4, NULL)) &&
        !(rc = store_bind_int(st, s, 5, o->latency_ms)) &&
        !(rc = store_bind_text(st, s, 6, reason[0] ? "disabled" : outcome_name(res))) &&
        !(rc = store_bind_text(st, s, 7, err[0] ? err : NULL)))
        rc = store_step_done(st, s, "insert attempt");
    if (!rc && current) {
        const char *status = res == STORE_WH_DELIVERED ? "delivered" : res == STORE_WH_RETRY ? "pending" : "failed";
        if ((s = store_stmt(st, S_WH_DELIVERY_SET, &rc)) && !(rc = store_bind_int(st, s, 1, o->delivery_id)) &&
            !(rc = store_bind_text(st, s, 2, status)) &&
            !(rc = store_bind_int(st, s, 3, res == STORE_WH_RETRY ? o->next_attempt_at : 0)) &&
            !(rc = o->status_code ? store_bind_int(st, s, 4, o->status_code) : store_bind_text(st, s, 4, NULL)) &&
            !(rc = store_bind_text(st, s, 5, err[0] ? err : NULL)) &&
            !(rc = store_bind_int(st, s, 6, o->latency_ms)) &&
            !(rc = res == STORE_WH_DELIVERED ? store_bind_int(st, s, 7, now) : store_bind_text(st, s, 7, NULL)))
            rc = store_step_done(st, s, "update delivery");
        if (!rc && res == STORE_WH_DELIVERED) {
            if ((s = store_stmt(st, S_WH_EP_OK, &rc)) && !(rc = store_bind_text(st, s, 1, ep)))
                rc = store_step_done(st, s, "endpoint ok");
        } else if (!rc && res != STORE_WH_BLOCKED) {
            if ((s = store_stmt(st, S_WH_EP_FAILING, &rc)) && !(rc = store_bind_text(st, s, 1, ep)) &&
                !(rc = store_bind_int(st, s, 2, o->started_at)))
                rc = store_step_done(st, s, "endpoint failing");
        }
        if (!rc && reason[0])
            rc = endpoint_disable(st, ep, reason, now);
    }
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (applied)
        *applied = current ? res : o->result;
    return 0;
}

/* ---- delivery log ------------------------------------------------------------------------ */

void store_wh_delivery_list_free(struct store_wh_delivery *items, size_t n)
{
    for (size_t i = 0; items && i < n; i++)
        free(items[i].log);
    free(items);
}

static int load_attempts(struct store *st, struct store_wh_delivery *d)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_ATTEMPT_LIST, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, d->id)))
        return rc;
    d->log = calloc(50, sizeof *d->log);
    if (!d->log) {
        sdb_reset(s);
        return ERR_NOMEM;
    }
    int r;
    while (d->n_log < 50 && (r = sdb_step(s)) == SDB_ROW) {
        struct store_wh_attempt *a = &d->log[d->n_log++];
        a->attempt = sdb_column_int64(s, 0);
        a->started_at = sdb_column_int64(s, 1);
        a->status_code = sdb_column_int(s, 2);
        a->latency_ms = sdb_column_int64(s, 3);
        store_col_text(s, 4, a->outcome, sizeof a->outcome);
        store_col_text(s, 5, a->error, sizeof a->error);
    }
    sdb_reset(s);
    return 0;
}

static int delivery_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_wh_delivery *d = elem;
    (void)ctx;
    d->id = sdb_column_int64(s, 0);
    store_col_text(s, 1, d->event_id, sizeof d->event_id);
    store_col_text(s, 2, d->event_type, sizeof d->event_type);
    store_col_text(s, 3, d->endpoint_id, sizeof d->endpoint_id);
    store_col_text(s, 4, d->status, sizeof d->status);
    d->attempts = sdb_column_int64(s, 5);
    d->next_attempt_at = sdb_column_int64(s, 6);
    d->last_status = sdb_column_int(s, 7);
    store_col_text(s, 8, d->last_error, sizeof d->last_error);
    d->last_latency_ms = sdb_column_type(s, 9) == SDB_NULL ? -1 : sdb_column_int64(s, 9);
    d->created_at = sdb_column_int64(s, 10);
    d->last_attempt_at = sdb_column_int64(s, 11);
    d->delivered_at = sdb_column_int64(s, 12);
    store_col_text(s, 13, d->object_id, sizeof d->object_id);
    return 0;
}

int store_wh_delivery_list(struct store *st, const char *tenant_id, const char *endpoint_id,
                           int64_t before, int limit, struct store_wh_delivery **items, size_t *n,
                           int *has_more)
{
    static const struct store_rows how = {sizeof(struct store_wh_delivery), delivery_row, NULL,
                                          "list webhook deliveries"};
    if (limit < 1 || limit > 100)
        return ERR_INVAL;
    struct store_wh_endpoint ep;
    int rc = store_wh_endpoint_get(st, tenant_id, endpoint_id, &ep);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_WH_DELIVERY_LIST, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, endpoint_id)) || (rc = store_bind_int(st, s, 2, before)) ||
        (rc = store_bind_int(st, s, 3, limit + 1)))
        return rc;
    struct store_wh_delivery *arr;
    void *p;
    size_t cnt;
    int more;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &p, &cnt, &more)))
        return rc;
    arr = p;
    for (size_t i = 0; !rc && i < cnt; i++)
        rc = load_attempts(st, &arr[i]);
    if (rc) {
        store_wh_delivery_list_free(arr, cnt);
        return rc;
    }
    *items = arr;
    *n = cnt;
    *has_more = more;
    return 0;
}

int store_wh_redeliver(struct store *st, const char *tenant_id, const char *endpoint_id,
                       int64_t delivery_id, int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct store_wh_endpoint ep;
    if (!(rc = store_wh_endpoint_get(st, tenant_id, endpoint_id, &ep)) && ep.disabled_at)
        rc = ERR_BADSTATE;
    struct sdb_stmt *s;
    if (!rc && (s = store_stmt(st, S_WH_REDELIVER, &rc)) && !(rc = store_bind_int(st, s, 1, delivery_id)) &&
        !(rc = store_bind_text(st, s, 2, endpoint_id)) && !(rc = store_bind_int(st, s, 3, now)) &&
        !(rc = store_step_done(st, s, "redeliver")) && sdb_changes(st->db) == 0)
        rc = ERR_NOTFOUND;
    return store_w_end(st, rc);
}

int store_wh_test_event(struct store *st, const char *tenant_id, const char *endpoint_id,
                        int64_t now, int64_t *delivery_id)
{
    char evt[ID_MAX], payload[512];
    int rc = id_new("evt_", evt, sizeof evt);
    if (rc || (rc = event_payload(payload, sizeof payload, evt, "webhook.test", now, endpoint_id)))
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    struct store_wh_endpoint ep;
    if (!(rc = store_wh_endpoint_get(st, tenant_id, endpoint_id, &ep)) && ep.disabled_at)
        rc = ERR_BADSTATE;
    struct sdb_stmt *s;
    if (!rc && (s = store_stmt(st, S_WH_TEST_EVENT, &rc)) && !(rc = store_bind_text(st, s, 1, evt)) &&
        !(rc = store_bind_text(st, s, 2, tenant_id)) && !(rc = store_bind_text(st, s, 3, endpoint_id)) &&
        !(rc = store_bind_text(st, s, 4, payload)) && !(rc = store_bind_int(st, s, 5, now)))
        rc = store_step_done(st, s, "insert test event");
    int64_t did = 0;
    if (!rc && (s = store_stmt(st, S_WH_DELIVERY_INSERT, &rc)) && !(rc = store_bind_text(st, s, 1, evt)) &&
        !(rc = store_bind_text(st, s, 2, endpoint_id)) && !(rc = store_bind_int(st, s, 3, now))) {
        int r = sdb_step(s); /* RETURNING id: the event is new, so the row is too */
        if (r == SDB_ROW)
            did = sdb_column_int64(s, 0);
        else
            rc = store_sqlerr(st, r == SDB_DONE ? SDB_INTERNAL : r, "insert test delivery");
        sdb_reset(s);
    }
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (delivery_id)
        *delivery_id = did;
    return 0;
}

int store_wh_stats(struct store *st, struct store_wh_stats *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_WH_STATS, &rc);
    if (!s)
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        out->events_pending = sdb_column_int64(s, 0);
        out->deliveries_pending = sdb_column_int64(s, 1);
        out->deliveries_delivered = sdb_column_int64(s, 2);
        out->deliveries_failed = sdb_column_int64(s, 3);
        out->endpoints_disabled = sdb_column_int64(s, 4);
    } else {
        rc = store_sqlerr(st, r, "webhook stats");
    }
    sdb_reset(s);
    return rc;
}
