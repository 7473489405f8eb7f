/*
 * sweeper.h - jobd's background thread for the end of leases and batches.
 *
 * Design. One thread with its own store connection runs, every interval
 * (and soon after a wake-up), lease_expire_sweep (lapsed leases: requests
 * requeued or dead-lettered), then finalize_sweep (cancel and expiry
 * processing, output / error files, terminal states), then retention_sweep
 * (expired files deleted, retention.h). Routes wake it after
 * a results commit that ended requests and after a cancel; it also runs
 * once at start, so a crash in the middle of finalization is resumed.
 * Wake-ups are coalesced (a flag under a mutex), and two passes are at
 * least SWEEPER_MIN_GAP_MS apart so a storm of commits cannot keep it
 * spinning. sweeper_free stops it at the end of the current pass: each
 * step is one transaction, so stopping between steps loses nothing.
 *
 * Threads: sweeper_start / sweeper_free from the owner (the loop thread);
 * sweeper_wake and sweeper_stats from any thread.
 */
#ifndef JOBD_SWEEPER_H
#define JOBD_SWEEPER_H

#include <stdint.h>

#include "jobd/work/lease.h"
#include "jobd/store/store.h"

#define SWEEPER_MIN_GAP_MS 20

struct sweeper;

/* Counters since start (monotonic). */
struct sweeper_stats {
    uint64_t passes;          /* sweep passes run */
    uint64_t leases_expired;  /* leases ended because they lapsed */
    uint64_t requeued;        /* requests of lapsed leases put back in the queue */
    uint64_t dead_lettered;   /* requests of lapsed leases that hit the attempt limit */
    uint64_t batches_finished; /* batches that reached a terminal state in a pass */
    uint64_t errors;          /* passes that ended with an error (logged) */
    uint64_t files_expired;   /* files deleted because their expires_at passed (retention.h) */
};

/* Open a store on data_dir (opts as the daemon's), start the thread. The
 * first pass runs at once. opts is copied. interval_ms >= 10. Returns 0,
 * ERR_INVAL, ERR_NOMEM, ERR_INTERNAL (thread), or store_open's error;
 * *out is the caller's (sweeper_free). */
int sweeper_start(const char *data_dir, const struct store_opts *sopts,
                  const struct lease_opts *lopts, int64_t interval_ms, struct sweeper **out);

/* Ask for a pass soon (coalesced). Any thread; NULL ok. */
void sweeper_wake(struct sweeper *sw);

/* A snapshot of the counters. Any thread. */
void sweeper_stats(struct sweeper *sw, struct sweeper_stats *out);

/* Stop after the current step, join, close the store. NULL ok. */
void sweeper_free(struct sweeper *sw);

#endif
