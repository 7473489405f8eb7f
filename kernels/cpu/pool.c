/*
 * pool.c - a persistent thread pool for the CPU kernels, with a
 * spin-then-sleep handshake (kn_pool_*; contracts in kernels/kn.h).
 *
 * The CPU backend runs one op at a time on all threads, as ggml does: the
 * caller hands a function to kn_pool_run(), every thread of the pool (the
 * caller's thread counts as thread 0) calls it with its index, and the call
 * returns when all have finished. The op splits its own work by (ith, nth).
 *
 * Design: n_threads - 1 worker threads are created once, in kn_pool_new().
 * A run publishes (fn, ctx) and bumps a generation counter; that is all it
 * does while the workers are spinning (no lock, no syscall). A waiting
 * thread - a worker waiting for the next run, the caller waiting for the
 * workers to finish - goes through three phases:
 *   1. POOL_PAUSES rounds of the CPU's pause hint (~3 us on the Xeon of
 *      bench/NOTES.md, where one pause is ~11 ns): the gaps between the ops
 *      of a layer;
 *   2. sched_yield() rounds, up to POOL_SPIN rounds in all: on a quiet
 *      machine sched_yield returns at once (~0.2-0.3 us), so this is still
 *      a spin, with wake-ups a few hundred nanoseconds late; on an
 *      oversubscribed one the waiting thread hands its core to the thread
 *      it waits for instead of burning its time slice. (Pausing for 30-200
 *      us instead made 2-thread decode 1.4-3x slower on a loaded 2-core
 *      box: bench/NOTES.md, issue 34.)
 *   3. sleep on a condition variable: an idle pool costs no CPU.
 * Only a thread that reached phase 3 costs the other side a lock and a
 * wake-up: the sleepers are counted (n_sleeping, caller_sleeping), and the
 * side that makes progress takes the mutex only when that count says
 * someone sleeps. kn_pool_run() allocates nothing.
 *
 * Threads: one caller at a time per pool (kn_pool_run is not reentrant and
 * must not be called concurrently on the same pool, nor from inside fn).
 * kn_pool_new/kn_pool_free from the thread that owns the pool.
 *
 * Memory ordering: the caller writes fn/ctx, then increments `gen`; a
 * worker that reads the new `gen` (acquire, or stronger) sees fn/ctx. Each
 * worker increments `n_done` after fn returns; the caller reads it with
 * acquire order, so the workers' writes are visible when kn_pool_run
 * returns. No lost wake-up (a Dekker pair, all four operations seq_cst):
 * a worker about to sleep increments n_sleeping under the mutex, then
 * re-reads gen; the caller increments gen, then reads n_sleeping. In the
 * single order of seq_cst operations one of the two comes first, so either
 * the worker sees the new gen and does not sleep, or the caller sees the
 * sleeper and broadcasts under the mutex, which the sleeper holds until it
 * waits. Completion is the same pair with n_done and caller_sleeping.
 * What the caller writes, what the workers write and what both only read
 * live on separate cache lines.
 */
#include "kernels/kn.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"

/* Waiting rounds before a thread blocks: POOL_PAUSES pause rounds, then
 * sched_yield() rounds up to POOL_SPIN in all (phases 1 and 2 above). */
#define POOL_PAUSES 256
#define POOL_SPIN (POOL_PAUSES + 1024)

struct pool_worker {
    struct kn_pool *pool;
    int ith;
    pthread_t tid;
};

struct kn_pool {
    /* written by the caller once per run */
    _Alignas(64) atomic_uint gen; /* bumped once per run */
    void (*fn)(void *ctx, int ith, int nth);
    void *ctx;
    /* written by the workers once per run */
    _Alignas(64) atomic_int n_done; /* workers finished with the current run */
    /* read-mostly */
    _Alignas(64) atomic_int n_sleeping; /* workers in (or entering) phase 3, under mu */
    atomic_int caller_sleeping;         /* the caller in phase 3, under mu */
    atomic_int stop;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* workers sleep here waiting for gen to move */
    pthread_cond_t cv_done; /* the caller sleeps here waiting for n_done */
    int n_workers_created;
    struct pool_worker *workers; /* n_threads - 1 */
};

/* Round i of a wait in phases 1 and 2. */
static inline void spin_round(int i)
{
    if (i >= POOL_PAUSES) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *worker_main(void *arg)
{
    struct pool_worker *wk = arg;
    struct kn_pool *p = wk->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int i = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire)) {
            if (++i < POOL_SPIN) {
                spin_round(i);
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add_explicit(&p->n_sleeping, 1, memory_order_seq_cst);
            while (atomic_load_explicit(&p->gen, memory_order_seq_cst) == seen &&
                   !atomic_load_explicit(&p->stop, memory_order_acquire))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub_explicit(&p->n_sleeping, 1, memory_order_relaxed);
            pthread_mutex_unlock(&p->mu);
            i = 0;
        }
        if (g == seen) /* stop, and no run pending */
            break;
        seen = g;
        p->fn(p->ctx, wk->ith, p->n_threads);
        int done = atomic_fetch_add_explicit(&p->n_done, 1, memory_order_seq_cst) + 1;
        if (done == p->n_threads - 1 && atomic_load_explicit(&p->caller_sleeping, memory_order_seq_cst)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > KN_POOL_MAX_THREADS ? KN_POOL_MAX_THREADS : (int)n;
}

int kn_pool_new(int n_threads, struct kn_pool **out)
{
    if (n_threads <= 0)
        n_threads = online_cpus();
    if (n_threads > KN_POOL_MAX_THREADS)
        n_threads = KN_POOL_MAX_THREADS;
    size_t sz = (sizeof(struct kn_pool) + 63) / 64 * 64;
    struct kn_pool *p = aligned_alloc(64, sz);
    if (!p)
        return ERR_NOMEM;
    memset(p, 0, sz);
    atomic_init(&p->gen, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->caller_sleeping, 0);
    p->n_threads = n_threads;
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            free(p);
            return ERR_NOMEM;
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i + 1;
        if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
            kn_pool_free(p);
            return ERR_NOMEM;
        }
        p->n_workers_created++;
    }
    *out = p;
    return 0;
}

void kn_pool_free(struct kn_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers_created; i++)
        pthread_join(p->workers[i].tid, NULL);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_work);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int kn_pool_threads(const struct kn_pool *p)
{
    return p ? p->n_threads : 1;
}

void kn_pool_run(struct kn_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx)
{
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    int n_workers = p->n_threads - 1;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->n_sleeping, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    fn(ctx, 0, p->n_threads);

    for (int i = 0; atomic_load_explicit(&p->n_done, memory_order_acquire) != n_workers; i++) {
        if (i < POOL_SPIN) {
            spin_round(i);
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_store_explicit(&p->caller_sleeping, 1, memory_order_seq_cst);
        while (atomic_load_explicit(&p->n_done, memory_order_seq_cst) != n_workers)
            pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store_explicit(&p->caller_sleeping, 0, memory_order_relaxed);
        pthread_mutex_unlock(&p->mu);
        break;
    }
}
