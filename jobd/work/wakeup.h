/*
 * wakeup.h - wake-ups from the database: work that became leasable on any
 * jobd instance sharing a PostgreSQL database.
 *
 * Design. One thread with a store connection of its own LISTENs for the
 * store's "jobd_work" notifications (store_work_listen / store_work_wait:
 * a batch whose ingest finished, requests released or retried), sent with
 * the COMMIT of the transaction that made the work leasable, by whichever
 * instance ran it (this one included). For each wake-up it calls
 * fn(arg, WAKEUP_WORK); the owner wakes its long-polling lease requests and
 * its sweeper. The connection's state is reported too: WAKEUP_UP once
 * listening (again), WAKEUP_DOWN when it dropped (the driver reconnects
 * with backoff; notifications sent meanwhile are lost, so a reconnect is
 * also reported as WAKEUP_WORK). While it is down the owner falls back to
 * polling. On SQLite there is nothing to listen to: wakeup_start answers
 * ERR_UNSUPPORTED and the owner polls.
 *
 * Threads: wakeup_start / wakeup_free from the owner; fn runs on the
 * wake-up thread (it must be quick and thread-safe: set a flag, signal).
 */
#ifndef JOBD_WAKEUP_H
#define JOBD_WAKEUP_H

#include <stdint.h>

#include "jobd/store/store.h"

enum wakeup_event { WAKEUP_WORK, WAKEUP_UP, WAKEUP_DOWN };

struct wakeup;

/* Open a store on data_dir (opts as the daemon's; must be PostgreSQL,
 * else ERR_UNSUPPORTED), LISTEN, start the thread. opts is copied. 0,
 * ERR_UNSUPPORTED, ERR_NOMEM, ERR_INTERNAL (thread) or the store's error;
 * *out is the caller's (wakeup_free). */
int wakeup_start(const char *data_dir, const struct store_opts *sopts,
                 void (*fn)(void *arg, enum wakeup_event ev), void *arg, struct wakeup **out);

/* Wake-ups reported since start (WAKEUP_WORK; one may stand for several
 * notifications). Any thread. */
uint64_t wakeup_count(struct wakeup *w);

/* Stop (within WAKEUP_POLL_MS), join, close the store. NULL ok. */
#define WAKEUP_POLL_MS 200
void wakeup_free(struct wakeup *w);

#endif
