/*
 * fleet.h - fleet cost: worker time priced by the hour and attributed to
 * the batches it served (spec/usage.md "Fleet cost" is the rule, with a
 * worked example; this header is its contract).
 *
 * The rule, over the rows of jobd/store/store_fleet.h:
 *   - A worker is registered from registered_at until now while it is live
 *     (seen within the worker TTL), else until the later of its last call
 *     and the end of its last lease, less its gaps (silences longer than
 *     the TTL it came back from: store_fleet_gap) where it held no lease.
 *     It is busy while it holds at least one lease (start to end, an
 *     abandoned lease counting until it lapses), idle otherwise.
 *   - Its price is a meter: meter(t) = floor(t * hourly_cost_micros / 3600)
 *     micro-dollars at unix second t. An interval [a, b) costs
 *     meter(b) - meter(a): exact integers, never negative, and the pieces
 *     of any interval add up to the whole exactly (|whole - seconds *
 *     price / 3600| < 1 micro-dollar).
 *   - Its timeline is cut at every lease start and end, gap start and end,
 *     at 00:00 UTC and at the report's since/until. A piece in a gap with
 *     no lease is not registered time (no cost). Another piece with no
 *     lease is idle: its cost is
 *     the fleet's idle line, never spread over batches. A busy piece is
 *     split between the (lease, batch) units of the leases held during it
 *     by tokens computed: prompt tokens not served from the prefix cache
 *     plus generated tokens, the lease's whole sums (when every unit has 0,
 *     by requests leased). Cost and milliseconds are split by largest
 *     remainder (ties to the earlier unit: leases by start then id, then
 *     batch id), so the shares add up exactly.
 *   - Tokens count once per unit, in the range and the day its lease
 *     started.
 * So for any report: sum over buckets (all tenants) + idle = sum over
 * workers of meter(end) - meter(start), exactly.
 *
 * Worker cost classes: jobd --worker-costs NAME_GLOB=USD[/h],... (fnmatch
 * globs on the registered name, first match wins, over the worker's own
 * declaration).
 *
 * Pure functions over caller's data: any thread.
 */
#ifndef JOBD_FLEET_H
#define JOBD_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "jobd/account/usage.h"
#include "jobd/store/store_fleet.h"

#define FLEET_COST_CLASSES_MAX 64
#define FLEET_MAX_BUCKETS 1000

struct fleet_cost_class {
    char glob[129];
    int64_t hourly_cost_micros;
};

struct fleet_costs {
    struct fleet_cost_class v[FLEET_COST_CLASSES_MAX];
    size_t n;
};

/* Parse "GLOB=USD[/h],..." (USD a decimal with at most 6 places, 0 ..
 * 10000) into *out. NULL or "" gives no classes. 0, or ERR_INVAL with a
 * message in msg (syntax, a negative or absurd price, an empty or repeated
 * glob, a glob an earlier one shadows - every name it matches the earlier
 * one matches, so it could never apply: "*=1,gpu-*=2" - too many classes). */
int fleet_costs_parse(const char *spec, struct fleet_costs *out, char *msg, size_t cap);

/* The hourly cost of a worker named name: the first class whose glob
 * matches, else declared (the worker's own price; -1 when it declared
 * none). -1 when neither gives one: the worker is unpriced (its time costs
 * 0, and the fleet view says so). c NULL ok. */
int64_t fleet_cost_for(const struct fleet_costs *c, const char *name, int64_t declared);

/* micro-dollars of [a, b) at hourly micro-dollars h: meter(b) - meter(a). */
int64_t fleet_meter_cost(int64_t h, int64_t a, int64_t b);

enum fleet_group { FLEET_BY_BATCH, FLEET_BY_MODEL, FLEET_BY_DAY, FLEET_BY_TENANT };

struct fleet_bucket {
    char key[128];             /* batch id, canonical model, "YYYY-MM-DD" or tenant id */
    int64_t start_time;        /* day: 00:00 UTC; else the earliest piece or lease start in it */
    int64_t worker_ms;         /* worker time attributed */
    int64_t cost_micros;       /* its cost */
    int64_t lapsed_ms, lapsed_micros; /* the part from leases that lapsed (worker gone or stalled) */
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int64_t requests;          /* requests leased (a retried request counts per lease) */
    int64_t reused_tokens;     /* tokens saved: results answered from reuse (jobd/work/reuse.h), at no cost */
    int64_t reference_micros;  /* the same tokens at the reference prices (0 without a table) */
    /* the fleet's own time in it (every tenant's): day buckets and totals only (0 otherwise) */
    int64_t registered_ms, idle_ms, idle_micros;
};

enum fleet_state { FLEET_BUSY, FLEET_IDLE, FLEET_GONE };

struct fleet_worker_fig {
    char id[ID_MAX];
    char name[129];
    char device[129];
    char model[STORE_MODEL_MAX + 1];
    enum fleet_state state;
    int unpriced;              /* registered with no price from anyone: costs 0, flagged */
    int64_t hourly_cost_micros;
    int64_t registered_ms, busy_ms, idle_ms; /* within the range; state: busy = holds a live lease */
    int64_t cost_micros, busy_micros, idle_micros;
    int64_t computed_tokens, completion_tokens; /* of its leases started in the range */
};

struct fleet_opts {
    int64_t since, until;      /* the range, [since, until) */
    int64_t now, ttl_s;        /* liveness: seen at or after now - ttl_s */
    enum fleet_group group;
    const char *tenant_id;     /* buckets and totals of this tenant only; NULL = all */
    const char *batch_id;      /* ... of this batch only; NULL = all */
    const struct usage_prices *reference; /* NULL = none */
};

struct fleet_report {
    struct fleet_bucket *buckets; /* ordered by key */
    size_t n;
    int has_more;                 /* more than FLEET_MAX_BUCKETS */
    struct fleet_bucket total;    /* sums of every bucket (also those past the cap) */
    struct fleet_worker_fig *workers; /* by id; the fleet's own figures */
    size_t n_workers;
    struct fleet_bucket fleet;    /* the whole fleet: every tenant's share, registered, idle */
};

/* Compute the report of the range from the rows of store_fleet_read (either
 * mode: rows without their worker get a worker spanning its leases, never
 * idle). *out is the caller's (fleet_report_release). 0 or ERR_NOMEM,
 * ERR_INVAL (o NULL or since > until). */
int fleet_compute(const struct store_fleet *in, const struct fleet_opts *o, struct fleet_report *out);
void fleet_report_release(struct fleet_report *r);

/* Effective prices of a bucket, micro-dollars per 1M tokens, rounded half
 * up: a computed token costs the same whatever its kind and a cached prompt
 * token nothing, so per 1M output = cost * 1e6 / computed, per 1M input =
 * cost * 1e6 * (prompt - cached) / (computed * prompt). -1 when a
 * denominator is 0. */
void fleet_effective(const struct fleet_bucket *b, int64_t *in_per_1m, int64_t *out_per_1m);

/* "busy", "idle", "gone". */
const char *fleet_state_name(enum fleet_state s);

#endif
