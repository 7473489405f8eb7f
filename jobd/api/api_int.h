/*
 * api_int.h - the API's shared state (struct api) and the route tables, for
 * the files of jobd/api/ only.
 *
 * Request flow. Every /v1 route has an on_head hook that authenticates
 * (jobd/api/api_auth.h, loop thread). The handler parses and checks the
 * request on the loop, then describes its database work as a job - a
 * route struct embedding struct api_job - and hands it to the one pool-job
 * runner (jobd/api/api_job.h), which runs it on a thread-pool thread with a
 * pooled connection and answers from the loop. Errors are entries of the
 * API error table (jobd/api/api_err.h).
 */
#ifndef JOBD_API_INT_H
#define JOBD_API_INT_H

#include <stdatomic.h>

#include "common/id.h"
#include "jobd/api/api.h"
#include "jobd/api/api_job.h"

struct api {
    struct api_config cfg;
    char tmp_dir[1024];            /* uploads in progress (store_path_dir) */
    struct store *loop_st;         /* loop thread: authentication only */
    struct api_pool pool;          /* thread-pool threads */
    struct api_pool rpool;         /* PostgreSQL: API_READ_CONNS more for jobs that do not write
                                      (GET), so reads never wait behind lease and commit jobs
                                      (a read also takes an idle pool connection; api_job.c);
                                      empty (n 0) on SQLite */
    struct http_server *srv;       /* routes added to it (metrics read its counters) */
    struct ingestq *iq;            /* api_attach: ingest thread (new batches, /readyz) */
    struct sweeper *sweeper;       /* api_attach: woken after cancels and commits */
    struct webhook_dispatcher *wh; /* api_attach: delivery counters for /metrics */
    int auth_required;
    char default_tenant[ID_MAX];   /* no-auth mode: the tenant of every request */
    int draining;                  /* api_drain: /readyz answers 503 */
    atomic_int writers;            /* write jobs running on the pool (the ingest thread yields to them) */
    atomic_uint_fast64_t n_leases, n_leased, n_results, n_commit_dead; /* worker routes, for /metrics */
    atomic_uint_fast64_t n_budget_rejected[4]; /* submissions refused, by enum budget_verdict */
    atomic_uint_fast64_t wake_gen; /* +1 per api_wake_pollers: parked long polls run again */
    atomic_int listening;          /* api_set_listening: wake-ups arrive, polling is a fallback */
};

/* The create sequence of POST /v1/jobs (routes_batches.c: idempotency,
 * admission, one submit transaction, then the ingest thread) for a route
 * that writes its own input lines: a /v1/chat/completions batch with a
 * 24 h window, created through contract api. */
struct upload;
struct api_create_src {
    const char *api;      /* the batch's contract (static text): "anthropic" */
    const char *filename; /* the input file's name */
    /* pool thread, first: write the JSONL lines with upload_write(up, ...);
     * 0, or non-zero with the job answered (api_job_error) */
    int (*lines)(struct api_job *job, struct upload *up, void *arg);
    /* the new batch as the answer (also what an idempotency key keeps),
     * arg as below; NULL: the OpenAI batch object. 0 or buf's error. */
    int (*render)(struct buf *out, const struct store_batch *b, void *arg);
    void *arg;                  /* lines' argument, owned by the job */
    void (*arg_free)(void *arg); /* frees arg (NULL: nothing) */
    int64_t window_s;           /* the batch's completion window in seconds; 0 = 24 h */
};

/* A create job for req (authenticated; its fingerprint fp is the caller's
 * to set) over a copy of src. NULL on no memory (src->arg freed then). */
struct api_job *api_create_job_new(struct http_req *req, const struct api_create_src *src);

/* The route tables, one per file (each adds its routes to api->srv; 0 or
 * http_server_route's error). */
int routes_ops_add(struct api *api);      /* routes_ops.c: /healthz, /readyz, /metrics */
int routes_files_add(struct api *api);    /* routes_files.c: /v1/files */
int routes_batches_add(struct api *api);  /* routes_batches.c: /v1/batches, /v1/jobs */
int routes_results_add(struct api *api);  /* routes_results.c: /v1/batches/{id}/results */
int routes_worker_add(struct api *api);   /* routes_worker.c: worker protocol, models, dead letters, workers */
int routes_usage_add(struct api *api);    /* routes_usage.c: /v1/usage, /v1/admin/usage */
int routes_budget_add(struct api *api);   /* routes_budget.c: /v1/admin/tenants/{tenant}/limits */
int routes_webhooks_add(struct api *api); /* routes_webhooks.c: /v1/webhook_endpoints, /v1/webhook_secret */
int routes_messages_add(struct api *api); /* routes_messages.c: /v1/messages/batches (Anthropic's contract) */

#endif
