/*
 * sweeper.c - the lease-expiry and finalization thread (see sweeper.h).
 */
#include "jobd/work/sweeper.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/work/finalize.h"
#include "jobd/work/retention.h"

#define SWEEP_MAX_BATCHES 64 /* batches finalize_sweep looks at per pass */

struct sweeper {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake, stop; /* under mu */
    struct store *st;
    struct lease_opts lopts;
    int64_t interval_ms;
    int64_t orphans_at;  /* wall seconds of the last orphan sweep; 0 = not yet */
    struct finalize_retry *retry; /* backoff of failed finalizations */
    atomic_uint_fast64_t passes, expired, requeued, dead, finished, errors, files_expired;
};

static void pass(struct sweeper *sw)
{
    int64_t now = lease_clock_s(); /* leases run on the lease clock (lease.h) */
    struct store_sweep_report rep;
    int rc = lease_expire_sweep(sw->st, &sw->lopts, now, &rep);
    if (rc) {
        log_warn("sweeper: lease expiry: %s", err_msg(rc));
        atomic_fetch_add(&sw->errors, 1);
    }
    /* the report accumulates also on a partial failure */
    atomic_fetch_add(&sw->expired, (uint64_t)rep.n_leases);
    atomic_fetch_add(&sw->requeued, (uint64_t)rep.n_requeued);
    atomic_fetch_add(&sw->dead, (uint64_t)rep.n_dead);
    if (rep.n_leases)
        log_info("sweeper: %lld lapsed leases ended (%lld requeued, %lld dead-lettered, %lld closed)",
                 (long long)rep.n_leases, (long long)rep.n_requeued, (long long)rep.n_dead,
                 (long long)rep.n_closed);
    int n_fin = 0;
    rc = finalize_sweep(sw->st, clock_wall_s(), SWEEP_MAX_BATCHES, sw->retry, (int64_t)clock_mono_ms(), &n_fin);
    if (rc) {
        log_warn("sweeper: finalize: %s", err_msg(rc));
        atomic_fetch_add(&sw->errors, 1);
    }
    atomic_fetch_add(&sw->finished, (uint64_t)n_fin);
    int64_t n_files = 0;
    rc = retention_sweep(sw->st, clock_wall_s(), RETENTION_MAX_PER_PASS, &n_files);
    if (rc) {
        log_warn("sweeper: file expiry: %s", err_msg(rc));
        atomic_fetch_add(&sw->errors, 1);
    }
    atomic_fetch_add(&sw->files_expired, (uint64_t)n_files);
    /* reusable results past --reuse-retention (all of them when reuse is off;
     * their created_at is on the lease clock, like the lookup's bound) */
    int64_t ret = sw->lopts.reuse_retention_s;
    if ((rc = store_reuse_expire(sw->st, ret > 0 ? now - ret : now + 1, NULL))) {
        log_warn("sweeper: reuse expiry: %s", err_msg(rc));
        atomic_fetch_add(&sw->errors, 1);
    }
    int64_t wall = clock_wall_s();
    if (!sw->orphans_at || wall - sw->orphans_at >= RETENTION_ORPHAN_EVERY_S) {
        sw->orphans_at = wall;
        if ((rc = retention_orphans(sw->st, wall, RETENTION_ORPHAN_GRACE_S, NULL))) {
            log_warn("sweeper: orphaned files: %s", err_msg(rc));
            atomic_fetch_add(&sw->errors, 1);
        }
    }
    atomic_fetch_add(&sw->passes, 1);
}

static void deadline_in(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *thread_main(void *arg)
{
    struct sweeper *sw = arg;
    for (;;) {
        uint64_t t0 = clock_mono_ms();
        pass(sw);
        /* a minimum gap, then wait for the interval or a wake-up */
        uint64_t spent = clock_mono_ms() - t0;
        if (spent < SWEEPER_MIN_GAP_MS)
            clock_sleep_ms(SWEEPER_MIN_GAP_MS - spent);
        pthread_mutex_lock(&sw->mu);
        struct timespec ts;
        deadline_in(&ts, sw->interval_ms);
        while (!sw->wake && !sw->stop)
            if (pthread_cond_timedwait(&sw->cv, &sw->mu, &ts) != 0)
                break;
        int stop = sw->stop;
        sw->wake = 0;
        pthread_mutex_unlock(&sw->mu);
        if (stop)
            break;
    }
    return NULL;
}

int sweeper_start(const char *data_dir, const struct store_opts *sopts,
                  const struct lease_opts *lopts, int64_t interval_ms, struct sweeper **out)
{
    if (!data_dir || !lopts || interval_ms < 10)
        return ERR_INVAL;
    struct sweeper *sw = calloc(1, sizeof *sw);
    if (!sw)
        return ERR_NOMEM;
    sw->lopts = *lopts;
    sw->interval_ms = interval_ms;
    if (!(sw->retry = finalize_retry_new())) {
        free(sw);
        return ERR_NOMEM;
    }
    int rc = store_open(data_dir, sopts, &sw->st);
    if (rc) {
        free(sw->retry);
        free(sw);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&sw->mu, NULL);
    pthread_cond_init(&sw->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&sw->th, NULL, thread_main, sw) != 0) {
        pthread_mutex_destroy(&sw->mu);
        pthread_cond_destroy(&sw->cv);
        store_close(sw->st);
        free(sw->retry);
        free(sw);
        return ERR_INTERNAL;
    }
    *out = sw;
    return 0;
}

void sweeper_wake(struct sweeper *sw)
{
    if (!sw)
        return;
    pthread_mutex_lock(&sw->mu);
    sw->wake = 1;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
}

void sweeper_stats(struct sweeper *sw, struct sweeper_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!sw)
        return;
    out->passes = atomic_load(&sw->passes);
    out->leases_expired = atomic_load(&sw->expired);
    out->requeued = atomic_load(&sw->requeued);
    out->dead_lettered = atomic_load(&sw->dead);
    out->batches_finished = atomic_load(&sw->finished);
    out->errors = atomic_load(&sw->errors);
    out->files_expired = atomic_load(&sw->files_expired);
}

void sweeper_free(struct sweeper *sw)
{
    if (!sw)
        return;
    pthread_mutex_lock(&sw->mu);
    sw->stop = 1;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    pthread_join(sw->th, NULL);
    pthread_mutex_destroy(&sw->mu);
    pthread_cond_destroy(&sw->cv);
    store_close(sw->st);
    free(sw->retry);
    free(sw);
}
