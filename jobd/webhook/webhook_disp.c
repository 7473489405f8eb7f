/*
 * webhook_disp.c - the webhook dispatcher: `concurrency` sender threads,
 * each with its own store connection (see webhook.h). Thread 0 also fans
 * the outbox out. A thread that found nothing to do sleeps poll_ms (woken
 * early by stop).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/webhook/webhook.h"

struct sender {
    struct webhook_dispatcher *d;
    int index;
    struct store *st;
    pthread_t th;
    int started;
};

struct webhook_dispatcher {
    struct webhook_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    struct sender *s;
    int n;
    /* counters */
    atomic_uint_fast64_t delivered, retried, failed, disabled, blocked;
    atomic_uint_fast64_t lat_le[8], lat_count, lat_sum;
};

static const int64_t lat_bounds[8] = WEBHOOK_LATENCY_BOUNDS_MS;

static int stopping(struct webhook_dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    int s = d->stop;
    pthread_mutex_unlock(&d->mu);
    return s;
}

static void nap(struct webhook_dispatcher *d, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->mu);
    if (!d->stop)
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    pthread_mutex_unlock(&d->mu);
}

static void count(struct webhook_dispatcher *d, enum store_wh_result res, int64_t latency_ms)
{
    switch (res) {
    case STORE_WH_DELIVERED: atomic_fetch_add(&d->delivered, 1); break;
    case STORE_WH_RETRY: atomic_fetch_add(&d->retried, 1); break;
    case STORE_WH_EXHAUSTED: atomic_fetch_add(&d->failed, 1); break;
    case STORE_WH_GONE: atomic_fetch_add(&d->disabled, 1); break;
    case STORE_WH_BLOCKED: atomic_fetch_add(&d->blocked, 1); break;
    }
    if (res == STORE_WH_BLOCKED)
        return;
    for (int i = 0; i < 8; i++)
        if (latency_ms <= lat_bounds[i])
            atomic_fetch_add(&d->lat_le[i], 1);
    atomic_fetch_add(&d->lat_count, 1);
    atomic_fetch_add(&d->lat_sum, (uint64_t)(latency_ms > 0 ? latency_ms : 0));
}

/* One claim-send-record round. Returns 1 if a delivery was handled. */
static int send_one(struct sender *s)
{
    struct webhook_dispatcher *d = s->d;
    const struct webhook_config *cfg = &d->cfg;
    struct store_wh_job job;
    int found = 0;
    int64_t now = clock_wall_s();
    /* hold the claim past the send timeout, so only a crash makes it due again */
    int64_t hold_s = cfg->timeout_ms / 1000 + 30;
    int rc = store_wh_claim(s->st, now, hold_s, &job, &found);
    if (rc) {
        if (rc != ERR_BUSY)
            log_warn("webhook: claim: %s", err_msg(rc));
        return 0;
    }
    if (!found)
        return 0;
    struct webhook_send_result r;
    int64_t started = clock_wall_s();
    webhook_send(cfg, &job, started, &r);
    struct store_wh_outcome o = {
        .delivery_id = job.delivery_id,
        .attempt = job.attempt,
        .result = webhook_classify(cfg, &r, job.attempt),
        .started_at = started,
        .status_code = r.status,
        .latency_ms = r.latency_ms,
        .error = r.error[0] ? r.error : NULL,
        .disable_after_s = cfg->disable_after_s,
    };
    uint32_t rnd = 0;
    crypto_random(&rnd, sizeof rnd);
    int64_t delay_ms = webhook_backoff_ms(cfg, job.attempt, rnd);
    o.next_attempt_at = clock_wall_s() + (delay_ms + 999) / 1000;
    enum store_wh_result applied = o.result;
    for (int tries = 0; tries < 20; tries++) {
        rc = store_wh_record(s->st, &o, clock_wall_s(), &applied);
        if (rc != ERR_BUSY || stopping(d))
            break;
        clock_sleep_ms(100);
    }
    if (rc)
        log_warn("webhook: cannot record delivery %lld attempt %lld: %s (it is retried after %lld s)",
                 (long long)job.delivery_id, (long long)job.attempt, err_msg(rc), (long long)hold_s);
    else
        count(d, applied, r.latency_ms);
    log_write(applied == STORE_WH_DELIVERED ? LOG_DEBUG : LOG_INFO, NULL,
              "webhook: delivery %lld (event %s) attempt %lld to %s: %s%s%s", (long long)job.delivery_id,
              job.event_id, (long long)job.attempt, job.endpoint_id,
              applied == STORE_WH_DELIVERED ? "delivered" : "failed", r.error[0] ? ": " : "", r.error);
    store_wh_job_release(&job);
    return 1;
}

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    struct webhook_dispatcher *d = s->d;
    while (!stopping(d)) {
        int busy = 0;
        if (s->index == 0) {
            char secret[STORE_WH_SECRET_MAX];
            int n = 0;
            if (webhook_secret_new(secret) == 0) {
                int rc = store_wh_fanout(s->st, clock_wall_s(), 100, secret, &n);
                if (rc && rc != ERR_BUSY)
                    log_warn("webhook: fan-out: %s", err_msg(rc));
            }
            busy |= n > 0;
        }
        busy |= send_one(s);
        if (!busy)
            nap(d, d->cfg.poll_ms);
    }
    return NULL;
}

int webhook_dispatcher_start(const char *data_dir, const struct store_opts *so,
                             const struct webhook_config *cfg, struct webhook_dispatcher **out)
{
    if (cfg->concurrency < 1 || cfg->concurrency > 64 || cfg->timeout_ms < 1 || cfg->max_attempts < 1 ||
        cfg->retry_base_ms < 0 || cfg->retry_cap_ms < 0 || cfg->poll_ms < 1 || cfg->retry_factor < 1)
        return ERR_INVAL;
    struct webhook_dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return ERR_NOMEM;
    d->cfg = *cfg;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->s = calloc((size_t)cfg->concurrency, sizeof *d->s);
    if (!d->s) {
        webhook_dispatcher_free(d);
        return ERR_NOMEM;
    }
    int rc = 0;
    for (int i = 0; i < cfg->concurrency && !rc; i++) {
        struct sender *s = &d->s[i];
        s->d = d;
        s->index = i;
        if ((rc = store_open(data_dir, so, &s->st)))
            break;
        d->n++;
    }
    for (int i = 0; i < d->n && !rc; i++) {
        if (pthread_create(&d->s[i].th, NULL, sender_main, &d->s[i]) != 0)
            rc = ERR_NOMEM;
        else
            d->s[i].started = 1;
    }
    if (rc) {
        webhook_dispatcher_free(d);
        return rc;
    }
    log_info("webhook dispatcher: %d sender(s), timeout %lld ms, %d attempts%s", d->n,
             (long long)cfg->timeout_ms, cfg->max_attempts,
             cfg->allow_private ? ", private addresses ALLOWED (--webhook-allow-private)" : "");
    *out = d;
    return 0;
}

void webhook_dispatcher_stop(struct webhook_dispatcher *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void webhook_dispatcher_free(struct webhook_dispatcher *d)
{
    if (!d)
        return;
    webhook_dispatcher_stop(d);
    for (int i = 0; d->s && i < d->n; i++) {
        if (d->s[i].started)
            pthread_join(d->s[i].th, NULL);
        store_close(d->s[i].st);
    }
    free(d->s);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

void webhook_dispatcher_counters(struct webhook_dispatcher *d, struct webhook_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!d)
        return;
    out->delivered = atomic_load(&d->delivered);
    out->retried = atomic_load(&d->retried);
    out->failed = atomic_load(&d->failed);
    out->disabled = atomic_load(&d->disabled);
    out->blocked = atomic_load(&d->blocked);
    for (int i = 0; i < 8; i++)
        out->latency_le[i] = atomic_load(&d->lat_le[i]);
    out->latency_count = atomic_load(&d->lat_count);
    out->latency_sum_ms = atomic_load(&d->lat_sum);
}
