/*
 * lease.c - the worker protocol's transactions: clamped wrappers over
 * store_lease.c (the acquire and its policy are in lease_policy.c, the
 * parsers and answers in lease_proto.c). See lease.h. Runs on the thread
 * that owns the store.
 */
#include "jobd/work/lease.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"

/* wall ms minus monotonic ms, taken once */
static int64_t lease_clock_base_ms;
static pthread_once_t lease_clock_once = PTHREAD_ONCE_INIT;

static void lease_clock_init(void)
{
    lease_clock_base_ms = clock_wall_ms() - (int64_t)clock_mono_ms();
}

int64_t lease_clock_s(void)
{
    pthread_once(&lease_clock_once, lease_clock_init);
    return (lease_clock_base_ms + (int64_t)clock_mono_ms()) / 1000;
}

static const struct lease_opts *opts_or_default(const struct lease_opts *o, struct lease_opts *tmp)
{
    if (o)
        return o;
    lease_opts_default(tmp);
    return tmp;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- transactions ---------------------------------------------------------------- */

int lease_worker_register(struct store *st, const struct store_worker_new *w, int64_t now,
                          char id_out[ID_MAX])
{
    return store_worker_register(st, w, now, id_out);
}

int lease_heartbeat(struct store *st, const struct lease_opts *o, const char *lease_id,
                    const char *worker_id, int64_t extend_s, double tokens_per_s, int64_t now,
                    int64_t *expires_at, char (**stop_ids)[ID_MAX], size_t *n_stop)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    extend_s = clamp64(extend_s ? extend_s : o->lease_s_default, o->lease_s_min, o->lease_s_max);
    return store_lease_heartbeat(st, lease_id, worker_id, extend_s, tokens_per_s, now, expires_at,
                                 stop_ids, n_stop);
}

int lease_results_commit(struct store *st, const struct lease_opts *o, const char *lease_id,
                         const char *worker_id, const struct store_result *items, size_t n,
                         int64_t now, enum store_commit_outcome *outcomes)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    return store_results_commit(st, lease_id, worker_id, items, n, &o->retry, now, outcomes);
}

int lease_release(struct store *st, const char *lease_id, const char *worker_id,
                  const char (*ids)[ID_MAX], size_t n, int64_t now, int64_t *n_released)
{
    return store_lease_release(st, lease_id, worker_id, ids, n, now, n_released);
}

int lease_expire_sweep(struct store *st, const struct lease_opts *o, int64_t now,
                       struct store_sweep_report *rep)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    memset(rep, 0, sizeof *rep);
    int64_t before;
    int rc;
    do {
        before = rep->n_leases;
        rc = store_lease_sweep(st, now, &o->retry, 100, rep);
    } while (!rc && rep->n_leases - before == 100);
    return rc;
}

int lease_models_served(struct store *st, const struct lease_opts *o, int64_t now,
                        struct store_model_served **items, size_t *n)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    return store_models_served(st, now - o->worker_ttl_s, items, n);
}

int lease_models_waiting(struct store *st, const struct lease_opts *o, int64_t now,
                         struct store_model_waiting **items, size_t *n)
{
    struct lease_opts tmp;
    o = opts_or_default(o, &tmp);
    return store_models_waiting(st, now - o->worker_ttl_s, items, n);
}

int lease_write_commit(struct buf *b, const char *lease_id, const struct store_result *items,
                       const enum store_commit_outcome *outcomes, size_t n)
{
    int rc = buf_printf(b, "{\"lease_id\":\"%s\",\"results\":[", lease_id);
    for (size_t i = 0; !rc && i < n; i++)
        rc = buf_printf(b, "%s{\"request_id\":\"%s\",\"status\":\"%s\"}", i ? "," : "",
                        items[i].request_id, store_commit_outcome_name(outcomes[i]));
    return rc ? rc : buf_append_str(b, "]}");
}

