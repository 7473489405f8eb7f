/*
 * ingestq.h - jobd's ingest thread: a queue of batch ids, validated and
 * ingested one at a time (jobd/intake/ingest.h) on a dedicated thread with its own
 * store connection, so the event loop never waits on a 200 MB file.
 *
 * Design. The loop (route handlers, after a batch row committed) pushes batch
 * ids; the thread pops them in order and runs ingest_batch. At start the
 * thread first scans for batches still in 'validating' (a previous jobd died
 * mid-ingest, or between committing a batch and queueing it) and resumes
 * them from their checkpoints. A transient failure (ERR_IO, ERR_BUSY from a
 * locked database) retries the batch after a second; the batch stays
 * resumable either way. Pushing an id twice is harmless: the second run
 * finds the batch no longer validating (ERR_BADSTATE) and drops it.
 *
 * Several jobd instances (PostgreSQL): each batch is ingested by the
 * instance that owns it (store_own_try, STORE_OWN_INGEST; the others skip
 * it), and every chunk is fenced by store_ingest_fence, so two ingesters
 * never both write a batch's requests. An idle thread re-scans for
 * validating batches every INGESTQ_RESCAN_MS and takes over those whose
 * owner died (its connection closed, so its ownership ended). On SQLite (one
 * jobd per data directory) there is no re-scan.
 *
 * Stopping (SIGTERM): ingestq_stop sets a flag the ingest's per-line hook
 * reads, so a running ingest stops at the next line boundary leaving its
 * last committed checkpoint (the batch resumes after restart), and the
 * thread exits; ingestq_free joins it.
 *
 * Fairness: SQLite's busy handler polls, so a writer waiting for the lock
 * can starve behind the ingest's back-to-back chunk transactions. When
 * *writers_waiting (maintained by the API's write handlers) is non-zero,
 * the thread pauses after each chunk commit (up to 1 s) until it is zero,
 * so an upload or batch creation is never refused as "busy" because of an
 * ingest in progress.
 *
 * Counters are atomics readable from any thread (the metrics route).
 */
#ifndef JOBD_INGESTQ_H
#define JOBD_INGESTQ_H

#include <stdatomic.h>
#include <stdint.h>

#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"

#define INGESTQ_RESCAN_MS 2000 /* PostgreSQL: idle re-scan for orphaned validating batches */

struct ingestq;

struct ingestq_stats {
    uint64_t lines;            /* input lines handled (all batches, including resumed runs) */
    uint64_t bytes;            /* decoded input bytes of batches whose ingest reached a final state */
    uint64_t batches_valid, batches_invalid, batches_cancelled;
    uint64_t queued;           /* ids waiting */
    int busy;                  /* 1 while a batch is being ingested */
};

/* Start the thread: it opens its own store on data_dir with opts, scans for
 * 'validating' batches, then serves the queue. lim is copied (NULL =
 * defaults). writers_waiting (may be NULL) must outlive the queue. Returns 0, ERR_NOMEM, ERR_INTERNAL (thread). A store that
 * fails to open is logged and the thread retries every second until stopped. */
int ingestq_start(const char *data_dir, const struct store_opts *opts,
                  const struct ingest_limits *lim, atomic_int *writers_waiting,
                  struct ingestq **out);

/* Queue a batch id (copied). Any thread. 0 or ERR_NOMEM / ERR_BADSTATE (stopping). */
int ingestq_push(struct ingestq *q, const char *batch_id);

/* Ask the thread to stop at the next line boundary. Any thread; idempotent. */
void ingestq_stop(struct ingestq *q);

void ingestq_stats(struct ingestq *q, struct ingestq_stats *out);

/* 1 once the startup scan is done (the thread is serving the queue). */
int ingestq_ready(struct ingestq *q);

/* Stop, join the thread (closing its store) and free. NULL ok. */
void ingestq_free(struct ingestq *q);

#endif
