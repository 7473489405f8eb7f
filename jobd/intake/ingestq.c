/*
 * ingestq.c - the ingest thread (see ingestq.h).
 */
#include "jobd/intake/ingestq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

struct qitem {
    struct qitem *next;
    char id[ID_MAX];
};

struct ingestq {
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct qitem *head, *tail;
    uint64_t n_queued;
    atomic_int stop;
    atomic_int ready;
    atomic_int busy;
    char *data_dir;
    struct store_opts opts;
    struct ingest_limits lim;
    atomic_uint_fast64_t lines, bytes, n_valid, n_invalid, n_cancelled;
    atomic_int *writers_waiting;
};

static int on_line(void *ctx, int64_t line)
{
    struct ingestq *q = ctx;
    (void)line;
    atomic_fetch_add(&q->lines, 1);
    return atomic_load(&q->stop);
}

/* After a chunk commit: let waiting API writers take the lock first. */
static void on_commit(void *ctx, int64_t line)
{
    struct ingestq *q = ctx;
    (void)line;
    for (int i = 0; i < 1000 && q->writers_waiting && atomic_load(q->writers_waiting) > 0 &&
                    !atomic_load(&q->stop);
         i++)
        clock_sleep_ms(1);
}

/* Wait up to ms for a stop request (or a push). Returns 1 when stopping. */
static int nap(struct ingestq *q, int ms)
{
    pthread_mutex_lock(&q->mu);
    if (!atomic_load(&q->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return atomic_load(&q->stop);
}

static int run_owned(struct ingestq *q, struct store *st, const char *id, const struct ingest_hooks *hk);

/* Ingest one batch until it reaches a final state, retrying transient
 * errors. Returns 1 if stopped. */
static int run_one(struct ingestq *q, struct store *st, const char *id)
{
    struct ingest_hooks hooks = {on_line, q, on_commit};
    /* several jobd on one PostgreSQL database: the instance that owns the
     * batch ingests it; the others skip it (their rescan takes it over if
     * the owner dies). SQLite: always owned. */
    int owned = 0, orc = store_own_try(st, STORE_OWN_INGEST, id, &owned);
    if (orc) {
        log_warn("ingest: %s: cannot take ownership: %s; the rescan retries", id, err_msg(orc));
        return 0;
    }
    if (!owned)
        return 0;
    int stopped = run_owned(q, st, id, &hooks);
    store_own_release(st, STORE_OWN_INGEST, id);
    return stopped;
}

/* run_one's loop, while this instance owns the batch. */
static int run_owned(struct ingestq *q, struct store *st, const char *id, const struct ingest_hooks *hk)
{
    struct ingest_hooks hooks = *hk;
    for (;;) {
        if (atomic_load(&q->stop))
            return 1;
        struct ingest_report rep;
        atomic_store(&q->busy, 1);
        int rc = ingest_batch(st, id, &q->lim, &hooks, &rep);
        atomic_store(&q->busy, 0);
        if (!rc) {
            if (rep.outcome == INGEST_VALID)
                atomic_fetch_add(&q->n_valid, 1);
            else if (rep.outcome == INGEST_INVALID)
                atomic_fetch_add(&q->n_invalid, 1);
            else
                atomic_fetch_add(&q->n_cancelled, 1);
            struct store_batch b;
            if (store_batch_get(st, NULL, id, &b) == 0) {
                struct store_file f;
                if (store_file_get(st, b.tenant_id, b.input_file_id, &f) == 0)
                    atomic_fetch_add(&q->bytes, (uint64_t)f.bytes);
                store_batch_release(&b);
            }
            return 0;
        }
        if (rc == ERR_NOTFOUND || rc == ERR_BADSTATE)
            return 0; /* gone, or already done (queued twice) */
        if (atomic_load(&q->stop)) {
            log_info("ingest: stopped in %s at a line boundary; it resumes on the next start", id);
            return 1;
        }
        log_warn("ingest: %s: %s; retrying in 1 s", id, err_msg(rc));
        if (nap(q, 1000))
            return 1;
    }
}

/* Run every batch in 'validating' (the ones another instance owns are
 * skipped by run_one). Returns 1 if stopped. */
static int rescan_then(struct ingestq *q, struct store *st, const char *what, int ready);

static int rescan(struct ingestq *q, struct store *st, const char *what)
{
    return rescan_then(q, st, what, 0);
}

/* rescan; ready: mark the queue ready once the list is read (the startup scan). */
static int rescan_then(struct ingestq *q, struct store *st, const char *what, int ready)
{
    char(*ids)[ID_MAX] = NULL;
    size_t n = 0;
    int rc = store_batch_ids_in(st, STORE_BATCH_VALIDATING, &ids, &n);
    if (rc)
        log_error("ingest: scan for validating batches failed: %s", err_msg(rc));
    if (n && !store_is_pg(st))
        log_info("ingest: %s %zu batch(es) left in validating", what, n);
    if (ready)
        atomic_store(&q->ready, 1);
    int stopped = 0;
    for (size_t i = 0; i < n && !stopped; i++)
        stopped = atomic_load(&q->stop) || run_one(q, st, ids[i]);
    free(ids);
    return stopped;
}

static void *thread_main(void *arg)
{
    struct ingestq *q = arg;
    struct store *st = NULL;
    while (!atomic_load(&q->stop)) {
        int rc = store_open(q->data_dir, &q->opts, &st);
        if (!rc)
            break;
        log_error("ingest: cannot open the database: %s; retrying", err_msg(rc));
        st = NULL;
        if (nap(q, 1000))
            break;
    }
    if (!st)
        return NULL;
    /* resume what a previous run left in 'validating' */
    if (rescan_then(q, st, "resuming", 1) == 1) {
        store_close(st);
        return NULL;
    }
    uint64_t next_scan = clock_mono_ms() + INGESTQ_RESCAN_MS;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (!q->head && !atomic_load(&q->stop)) {
            if (!store_is_pg(st)) {
                pthread_cond_wait(&q->cv, &q->mu);
                continue;
            }
            /* PostgreSQL, maybe several jobd: look for validating batches
             * no instance owns (their ingester died) every INGESTQ_RESCAN_MS */
            uint64_t now = clock_mono_ms();
            if (now >= next_scan)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (next_scan - now) * 1000000ull;
            ts.tv_sec += (time_t)(ns / 1000000000ull);
            ts.tv_nsec = (long)(ns % 1000000000ull);
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
        if (atomic_load(&q->stop)) {
            pthread_mutex_unlock(&q->mu);
            break;
        }
        if (!q->head) {
            pthread_mutex_unlock(&q->mu);
            next_scan = clock_mono_ms() + INGESTQ_RESCAN_MS;
            if (rescan(q, st, "taking over") == 1)
                break;
            continue;
        }
        struct qitem *it = q->head;
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        q->n_queued--;
        pthread_mutex_unlock(&q->mu);
        int stopped = run_one(q, st, it->id);
        free(it);
        if (stopped)
            break;
    }
    store_close(st);
    return NULL;
}

int ingestq_start(const char *data_dir, const struct store_opts *opts,
                  const struct ingest_limits *lim, atomic_int *writers_waiting,
                  struct ingestq **out)
{
    struct ingestq *q = calloc(1, sizeof *q);
    if (!q || !(q->data_dir = strdup(data_dir))) {
        free(q);
        return ERR_NOMEM;
    }
    q->opts = opts ? *opts : STORE_OPTS_DEFAULT;
    q->writers_waiting = writers_waiting;
    if (lim)
        q->lim = *lim;
    else
        ingest_limits_default(&q->lim);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, thread_main, q) != 0) {
        ingestq_free(q);
        return ERR_INTERNAL;
    }
    q->started = 1;
    *out = q;
    return 0;
}

int ingestq_push(struct ingestq *q, const char *batch_id)
{
    if (atomic_load(&q->stop))
        return ERR_BADSTATE;
    struct qitem *it = calloc(1, sizeof *it);
    if (!it)
        return ERR_NOMEM;
    snprintf(it->id, sizeof it->id, "%s", batch_id);
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->n_queued++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void ingestq_stop(struct ingestq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    atomic_store(&q->stop, 1);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void ingestq_stats(struct ingestq *q, struct ingestq_stats *out)
{
    memset(out, 0, sizeof *out);
    out->lines = atomic_load(&q->lines);
    out->bytes = atomic_load(&q->bytes);
    out->batches_valid = atomic_load(&q->n_valid);
    out->batches_invalid = atomic_load(&q->n_invalid);
    out->batches_cancelled = atomic_load(&q->n_cancelled);
    out->busy = atomic_load(&q->busy);
    pthread_mutex_lock(&q->mu);
    out->queued = q->n_queued;
    pthread_mutex_unlock(&q->mu);
}

int ingestq_ready(struct ingestq *q)
{
    return atomic_load(&q->ready);
}

void ingestq_free(struct ingestq *q)
{
    if (!q)
        return;
    ingestq_stop(q);
    if (q->started)
        pthread_join(q->th, NULL);
    while (q->head) {
        struct qitem *it = q->head;
        q->head = it->next;
        free(it);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->data_dir);
    free(q);
}
