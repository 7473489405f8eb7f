/*
 * store_fleet.h - the raw facts of fleet cost (spec/usage.md "Fleet cost"):
 * each worker's registered interval and hourly price, its leases (start,
 * end, how they ended) and, per lease, the batches it served with the tokens
 * their results computed (kept in lease_batches as results commit: history
 * that deleting a batch does not rewrite). The pricing and attribution over these rows is
 * jobd/account/fleet.h; this file only reads them.
 *
 * A lease's end is min(released_at, expires_at), or min(now, expires_at)
 * while it is open: a lease whose worker vanished counts until it lapses.
 * It lapsed when it ended by expiry (released_at NULL or >= expires_at).
 *
 * Reads only, one snapshot (store_r_begin); any thread, own connection.
 */
#ifndef JOBD_STORE_FLEET_H
#define JOBD_STORE_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "jobd/store/store.h"

struct store_fleet_worker {
    char id[ID_MAX];
    char name[129];
    char device[129];
    char model[STORE_MODEL_MAX + 1]; /* its first canonical model (by name), "" if none */
    int64_t hourly_cost_micros;
    int64_t registered_at, last_seen;
    int64_t lease_end;               /* the latest end of its leases, 0 when none */
    int unpriced;                    /* 1: registered with no price from anyone (cost 0) */
};

/* A silence longer than the worker TTL after which the worker called again
 * (worker_gaps): gone in [gone_at, back_at), except while a lease ran. */
struct store_fleet_gap {
    char worker_id[ID_MAX];
    int64_t gone_at, back_at;
};

struct store_fleet_lease {
    char id[ID_MAX];
    char worker_id[ID_MAX];
    char model[STORE_MODEL_MAX + 1]; /* the canonical model it was asked for */
    int64_t start, end;              /* created_at, and the end above (>= start) */
    int lapsed;                      /* 1: ended (or will end) by expiry */
    int open;                        /* 1: not released yet (held, or lapsed and not swept) */
    int64_t hourly_cost_micros;      /* its worker's, 0 when the worker row is gone */
};

/* One batch's part of one lease. */
struct store_fleet_unit {
    char lease_id[ID_MAX];
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];          /* the batch's tenant ("" only for a part of a batch deleted
                                      * before schema.sql migration 13) */
    int64_t n_requests;              /* its requests handed out in the lease */
    int64_t prompt_tokens, cached_tokens, completion_tokens; /* sums of the results committed under the
                                      * lease, as committed: deleting them later changes nothing */
    int64_t reused_tokens;           /* sum of its results answered from reuse (tokens not computed) */
};

struct store_fleet {
    struct store_fleet_worker *workers; /* by id */
    size_t n_workers;
    struct store_fleet_lease *leases;   /* in no particular order (fleet.c sorts) */
    size_t n_leases;
    struct store_fleet_unit *units;     /* in no particular order */
    size_t n_units;
    struct store_fleet_gap *gaps;       /* range reads only; in no particular order */
    size_t n_gaps;
};

/* Read into *out (caller's; store_fleet_release), one snapshot:
 *   batch_id NULL: the workers whose registered interval meets [since,
 *     until) (registered before until, and seen at or after since - ttl_s,
 *     or holding a lease that ends at or after since), the leases with
 *     start < until and (end > since or start >= since), their units, and
 *     the workers' gaps that meet [since, until);
 *   batch_id set: no workers, no gaps; the leases that served batch_id and every
 *     lease of the same workers that overlaps one of them, and their units
 *     (since, until, ttl_s unused).
 * now prices the end of open leases. 0, ERR_NOMEM, database errors. */
int store_fleet_read(struct store *st, int64_t since, int64_t until, int64_t now, int64_t ttl_s,
                     const char *batch_id, struct store_fleet *out);

/* Free the arrays. NULL ok. */
void store_fleet_release(struct store_fleet *f);

#endif
