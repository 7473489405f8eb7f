/*
 * store_webhook.h - the webhook tables: endpoints, the transactional outbox
 * (webhook_events), deliveries and their attempt log (spec/webhooks.md).
 *
 * Design. An event row is written by store_batch_transition itself when a
 * batch enters a terminal state (completed, failed, expired, cancelled), in
 * the same transaction as the status change: every path that ends a batch
 * (ingest failure, finalization, cancel, expiry) produces exactly one event,
 * and a rollback removes both. The dispatcher (jobd/webhook/webhook.h) then, on its
 * own connections:
 *   1. fans pending events out (store_wh_fanout): one delivery per active
 *      endpoint of the tenant whose filter matches, plus one to the batch's
 *      metadata.webhook_url (an endpoint row of kind batch_url, signed with
 *      the tenant's default secret), and marks the event fanned out - one
 *      transaction per event, so a crash repeats nothing (UNIQUE(event,
 *      endpoint) makes a re-run harmless anyway);
 *   2. claims a due delivery (store_wh_claim): attempts+1 and next_attempt_at
 *      pushed past the send timeout in one statement, so a crash during the
 *      POST leaves it pending and it is sent again later (at-least-once,
 *      the webhook-id = event id stays the same);
 *   3. records the outcome (store_wh_record): an attempt row, and delivered /
 *      retry at a time / failed / endpoint disabled, fenced by the attempt
 *      number (a redelivery meanwhile wins).
 *
 * Threads: like every store function, one connection per thread.
 */
#ifndef JOBD_STORE_WEBHOOK_H
#define JOBD_STORE_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "common/id.h"
#include "jobd/store/store.h"

#define STORE_WH_URL_MAX 2048    /* bytes of an endpoint URL */
#define STORE_WH_SECRET_MAX 128  /* "whsec_" + base64 of up to 64 bytes + NUL */
#define STORE_WH_TYPES_MAX 256   /* event_types text */
#define STORE_WH_REASON_MAX 512
#define STORE_WH_ERROR_MAX 256   /* attempt error text kept */
#define STORE_WH_MAX_ENDPOINTS 100 /* registered endpoints per tenant */

struct store_wh_endpoint {
    char id[ID_MAX];                     /* "whep_..." */
    char tenant_id[ID_MAX];
    char kind[16];                       /* "endpoint" | "batch_url" */
    char url[STORE_WH_URL_MAX + 1];
    char event_types[STORE_WH_TYPES_MAX]; /* "*" or "batch.completed,batch.failed" */
    int64_t created_at;
    int64_t disabled_at;                 /* 0 = active */
    char disabled_reason[STORE_WH_REASON_MAX]; /* "" unless disabled */
    int64_t failing_since;               /* 0 = not failing */
};

/* Outbox: insert the event for a batch that just entered `to` (a terminal
 * state; other states: 0, nothing written). Called by store_batch_transition
 * inside its transaction. 0 or store errors. */
int store_wh_event_for_batch(struct store *st, const char *batch_id, enum store_batch_status to,
                             int64_t now);

/* Register an endpoint for a tenant (a new "whep_" id). url and event_types
 * are checked by the caller (jobd/webhook/webhook.h); secret is the "whsec_" text.
 * ERR_TOOBIG when the tenant already has STORE_WH_MAX_ENDPOINTS. */
int store_wh_endpoint_create(struct store *st, const char *tenant_id, const char *url,
                             const char *event_types, const char *secret, int64_t now,
                             struct store_wh_endpoint *out);

/* A tenant's endpoint (either kind). ERR_NOTFOUND if absent or another tenant's. */
int store_wh_endpoint_get(struct store *st, const char *tenant_id, const char *id,
                          struct store_wh_endpoint *out);

/* A tenant's endpoints (both kinds), oldest first. *items: heap (free()). */
int store_wh_endpoint_list(struct store *st, const char *tenant_id, struct store_wh_endpoint **items,
                           size_t *n);

/* Delete an endpoint and its deliveries. ERR_NOTFOUND if absent / another tenant's. */
int store_wh_endpoint_delete(struct store *st, const char *tenant_id, const char *id);

/* The tenant's default signing secret (per-batch URLs), created with
 * secret_new when it does not exist yet. secret_new: "whsec_..." text the
 * caller generated (used only on creation). */
int store_wh_tenant_secret(struct store *st, const char *tenant_id, const char *secret_new,
                           int64_t now, char out[STORE_WH_SECRET_MAX]);

/* Fan out up to max_events pending events (one transaction each). A batch
 * URL endpoint needs the tenant secret: secret_new is used if the tenant has
 * none yet. *n_done (may be NULL) gets the events fanned out. */
int store_wh_fanout(struct store *st, int64_t now, int max_events, const char *secret_new,
                    int *n_done);

/* A claimed delivery: what the sender needs. */
struct store_wh_job {
    int64_t delivery_id;
    int64_t attempt;                   /* 1-based, the fence for store_wh_record */
    char event_id[ID_MAX];             /* webhook-id */
    char endpoint_id[ID_MAX];
    char url[STORE_WH_URL_MAX + 1];
    char secret[STORE_WH_SECRET_MAX];
    char *payload;                     /* heap, the exact body; store_wh_job_release */
    size_t payload_len;
};

void store_wh_job_release(struct store_wh_job *j);

/* Claim the most overdue pending delivery of an active endpoint with
 * next_attempt_at <= now: attempts+1, next_attempt_at = now + hold_s (so a
 * crash during the send retries it after hold_s). *found = 0 when nothing is
 * due (out untouched). */
int store_wh_claim(struct store *st, int64_t now, int64_t hold_s, struct store_wh_job *out,
                   int *found);

enum store_wh_result {
    STORE_WH_DELIVERED = 0, /* 2xx */
    STORE_WH_RETRY,         /* failed; try again at next_attempt_at */
    STORE_WH_EXHAUSTED,     /* failed; no attempts left: delivery failed */
    STORE_WH_GONE,          /* 410: delivery failed, endpoint disabled */
    STORE_WH_BLOCKED,       /* the SSRF guard refused the address: delivery failed */
};

struct store_wh_outcome {
    int64_t delivery_id, attempt;  /* from the job */
    enum store_wh_result result;
    int64_t started_at;            /* unix seconds */
    int status_code;               /* 0 = no response */
    int64_t latency_ms;
    const char *error;             /* NULL on success; truncated to STORE_WH_ERROR_MAX */
    int64_t next_attempt_at;       /* RETRY */
    int64_t disable_after_s;       /* > 0: a failure when the endpoint has been failing
                                      this long disables it (delivery failed) */
};

/* Record one attempt (always logged) and apply its result, in one
 * transaction, unless the delivery moved on meanwhile (redelivered, deleted:
 * then only nothing or the log row is written). *applied (may be NULL) gets
 * the result actually applied (RETRY can become GONE-like disabling through
 * disable_after_s: then STORE_WH_EXHAUSTED with the endpoint disabled). */
int store_wh_record(struct store *st, const struct store_wh_outcome *o, int64_t now,
                    enum store_wh_result *applied);

struct store_wh_attempt {
    int64_t attempt;
    int64_t started_at;
    int status_code;     /* 0 = none */
    int64_t latency_ms;
    char outcome[16];
    char error[STORE_WH_ERROR_MAX + 1];
};

struct store_wh_delivery {
    int64_t id;
    char event_id[ID_MAX];
    char event_type[64];
    char object_id[ID_MAX];    /* what the event is about (the batch id) */
    char endpoint_id[ID_MAX];
    char status[16];           /* pending | delivered | failed */
    int64_t attempts;
    int64_t next_attempt_at;   /* meaningful while pending */
    int last_status;           /* 0 = none */
    char last_error[STORE_WH_ERROR_MAX + 1];
    int64_t last_latency_ms;   /* -1 = none */
    int64_t created_at, last_attempt_at, delivered_at; /* 0 = none */
    struct store_wh_attempt *log; /* heap, oldest first, at most 50 (the newest) */
    size_t n_log;
};

void store_wh_delivery_list_free(struct store_wh_delivery *items, size_t n);

/* An endpoint's deliveries, newest first, with id < before (0 = from the
 * newest), at most limit (1..100). ERR_NOTFOUND: no such endpoint for tenant. */
int store_wh_delivery_list(struct store *st, const char *tenant_id, const char *endpoint_id,
                           int64_t before, int limit, struct store_wh_delivery **items, size_t *n,
                           int *has_more);

/* Make a delivery pending and due now again (attempts restart at 0).
 * ERR_NOTFOUND (no such delivery of this tenant's endpoint), ERR_BADSTATE
 * (the endpoint is disabled). */
int store_wh_redeliver(struct store *st, const char *tenant_id, const char *endpoint_id,
                       int64_t delivery_id, int64_t now);

/* Queue a "webhook.test" event (data.id = the endpoint id) for one endpoint
 * only, due now. *delivery_id gets the new delivery. ERR_NOTFOUND,
 * ERR_BADSTATE (disabled). */
int store_wh_test_event(struct store *st, const char *tenant_id, const char *endpoint_id,
                        int64_t now, int64_t *delivery_id);

struct store_wh_stats {
    int64_t events_pending;       /* outbox rows not fanned out yet */
    int64_t deliveries_pending;   /* deliveries waiting to be sent */
    int64_t deliveries_delivered, deliveries_failed;
    int64_t endpoints_disabled;
};

int store_wh_stats(struct store *st, struct store_wh_stats *out);

#endif
