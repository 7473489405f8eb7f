/*
 * api_fleet.h - the fleet-cost answers of the API (spec/usage.md "Fleet
 * cost"): GET /v1/usage?view=fleet and /v1/admin/usage?view=fleet (the
 * report, routes_usage.c), and the fleet_cost object of GET
 * /v1/batches/{id} (routes_batches.c). Reads through store_fleet_read and
 * prices with jobd/account/fleet.h at the lease clock's now. Pool threads.
 */
#ifndef JOBD_API_FLEET_H
#define JOBD_API_FLEET_H

#include <stdint.h>

#include "common/buf.h"
#include "jobd/account/fleet.h"
#include "jobd/store/store.h"

struct api;

/* Append the report's JSON to b: buckets of group over [since, until) of
 * tenant_id (NULL = every tenant; then with the worker list). 0, or the
 * store's / ERR_NOMEM. */
int api_fleet_report(struct api *api, struct store *st, int64_t since, int64_t until, enum fleet_group group,
                     const char *tenant_id, int admin, struct buf *b);

/* The fleet's measured figures per canonical model over the last window_s
 * seconds (every tenant): the buckets of group model (fleet_report_release).
 * For capacity hints (POST /v1/batches/estimate). 0 or the store's error. */
int api_fleet_by_model(struct api *api, struct store *st, int64_t window_s, struct fleet_report *out);

/* Append ,"fleet_cost":{...} (the batch's share of worker time) to b. */
int api_fleet_batch(struct api *api, struct store *st, const char *batch_id, struct buf *b);

#endif
