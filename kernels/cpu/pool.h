/*
 * pool.h - a persistent thread pool for the CPU kernels.
 *
 * The CPU backend runs one op at a time on all threads, as ggml does: the
 * caller hands a function to kn_pool_run(), every thread of the pool (the
 * caller's thread counts as thread 0) calls it with its index, and the call
 * returns when all have finished. The op splits its own work by (ith, nth).
 *
 * Design: n_threads - 1 worker threads are created once, in kn_pool_new().
 * A run publishes (fn, ctx) and bumps a generation counter; workers that are
 * still spinning (a short busy-wait with the CPU's pause hint, about tens of
 * microseconds) start at once, workers that went to sleep are woken through
 * a condition variable. Completion works the same way in reverse: the caller
 * spins on a counter, then sleeps until the last worker signals. So ops that
 * come back to back (a forward pass) never pay a syscall, and an idle pool
 * costs no CPU. kn_pool_run() allocates nothing.
 *
 * Threads: one caller at a time per pool (kn_pool_run is not reentrant and
 * must not be called concurrently on the same pool, nor from inside fn).
 * kn_pool_new/kn_pool_free from the thread that owns the pool.
 */
#ifndef KERNELS_CPU_POOL_H
#define KERNELS_CPU_POOL_H

struct kn_pool;

/* A pool of n_threads threads in all (the caller's thread included, so
 * n_threads - 1 are created); n_threads <= 0 means one per online CPU.
 * Capped at KN_POOL_MAX_THREADS. Returns 0 and *out, ERR_NOMEM (allocation
 * or thread creation failed; nothing is left behind). */
#define KN_POOL_MAX_THREADS 256
int kn_pool_new(int n_threads, struct kn_pool **out);

/* Stop and join the workers, free the pool. NULL is ok. */
void kn_pool_free(struct kn_pool *p);

/* Number of threads a run uses (>= 1); 1 for NULL. */
int kn_pool_threads(const struct kn_pool *p);

/* Call fn(ctx, ith, nth) once for every ith in [0, nth), nth =
 * kn_pool_threads(p), concurrently, and return when all calls have
 * returned (everything they wrote is then visible to the caller). ith 0
 * runs on the calling thread. p NULL: fn(ctx, 0, 1) on the caller. Can't
 * fail. */
void kn_pool_run(struct kn_pool *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);

#endif
