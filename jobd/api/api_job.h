/*
 * api_job.h - the one pool-job runner: every route's database work runs on
 * libuv's thread pool (through http_req_queue_work) with a store
 * connection checked out of a small pool, then answers from the loop.
 *
 * A route embeds struct api_job in its own struct, which holds the route's
 * inputs; api_job_init names the work (run, on a pool thread), how the
 * route struct is freed, and optionally a custom answer (loop thread).
 * run fills status and out (the JSON body, also what an idempotency key
 * keeps); the default answer sends them with the Idempotent-Replayed, ETag
 * and Retry-After headers the job asked for. Every GET answered 200 by
 * the default answer gets an ETag (a hash of the body) unless run set its
 * own, and an If-None-Match naming it is answered 304 with no body, so a
 * poller (the dashboard) re-reads nothing that did not change (a custom
 * answer that ends in api_job_answer sets answer_sends_out to keep that). A custom answer may instead
 * send a file, stream, or run the job again later (api_job_again: the
 * worker's long poll), all without touching libuv.
 *
 * The pool: one connection per thread-pool thread, so a checkout never
 * waits in practice (it blocks while none is idle). On PostgreSQL a job
 * that does not write takes a read-pool connection (api.h API_READ_CONNS),
 * else an idle main-pool one, and blocks only while both pools are busy. A
 * writing job counts itself in api->writers while it runs (the ingest
 * thread yields to it).
 */
#ifndef JOBD_API_JOB_H
#define JOBD_API_JOB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/id.h"
#include "jobd/api/api_err.h"
#include "jobd/store/store.h"

struct api;
struct http_req;

/* ---- connection pool ------------------------------------------------------------- */

struct api_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct store **all;  /* n connections */
    struct store **idle; /* n_idle of them, free to check out */
    size_t n, n_idle;
    int inited;          /* the mutex and condition exist */
};

/* Open n connections to data_dir. 0, or ERR_NOMEM / store_open's error
 * (close what was opened with api_pool_close). */
int api_pool_open(struct api_pool *p, const char *data_dir, const struct store_opts *opts, size_t n);
/* Close every connection (none may be checked out). Zeroed storage ok. */
void api_pool_close(struct api_pool *p);

/* ---- jobs ------------------------------------------------------------------------ */

struct api_job;
typedef void (*api_job_fn)(struct api_job *job, struct store *st);

struct api_job {
    struct api *api;
    api_job_fn run;                            /* pool thread: fill status / out */
    /* loop thread: answer req from the job (NULL: api_job_answer). Returns 0
     * when answered, 1 when the job was queued again (api_job_again). */
    int (*answer)(struct http_req *req, struct api_job *job);
    int answer_sends_out;                      /* the custom answer sends out as the body: ETag it too */
    void (*free)(struct api_job *job);         /* frees the route struct (not out) */
    char tenant[ID_MAX];                       /* "" = none (admin and ops routes) */
    char idem_key[STORE_IDEM_KEY_MAX + 1];     /* "" = none */
    uint8_t fp[SHA256_LEN];                    /* idempotency fingerprint (api_idem.h) */
    int writes;                                /* run writes: counted in api->writers */
    /* outputs of run */
    int status;                                /* 0: not answered (internal error) */
    struct buf out;                            /* response body */
    const char *content_type;                  /* NULL: application/json */
    char etag[80];                             /* set by run, or by the runner (below) */
    int is_get;                                /* api_job_run: a GET or HEAD (gets a computed ETag) */
    char if_none_match[160];                   /* GET/HEAD: the request's If-None-Match ("" = none) */
    int retry_after;                           /* seconds, 0 = none */
    int replayed;                              /* Idempotent-Replayed: true */
    int wake_sweeper;                          /* wake the sweeper before answering */
    struct store *st;                          /* the connection run holds (api_job_unlocked) */
    int anthropic;                             /* errors in Anthropic's envelope (a /v1/messages route) */
};

/* Set up job (zeroing it): api, run, free_fn (frees the struct embedding
 * job), whether run writes, and out's cap. Can't fail. */
void api_job_init(struct api_job *job, struct api *api, api_job_fn run, void (*free_fn)(struct api_job *job),
                  int writes, size_t out_cap);

/* Set up job for a tenant request (authenticated by api_auth_tenant): the
 * tenant and idempotency key come from the request, writes from the method
 * (not GET / HEAD), out's cap is 64 MiB. Can't fail. */
void api_job_init_req(struct api_job *job, struct http_req *req, api_job_fn run,
                      void (*free_fn)(struct api_job *job));

/* Queue job on the pool; it answers req afterwards and frees job. job NULL
 * (allocation failed) or a failed queueing: answers 500 itself (and frees
 * job). Takes ownership. */
void api_job_run(struct http_req *req, struct api_job *job);

/* In run, with no transaction open on st: run fn(ctx) without holding a
 * store connection (a long file scan must not keep one of the pool's few
 * connections, nor count as a writer the ingest thread yields to). st goes
 * back to the pool, fn runs, and a connection is checked out again and
 * returned: run goes on with the returned one (perhaps another). Can't fail
 * (a checkout waits for an idle connection). */
struct store *api_job_unlocked(struct api_job *job, struct store *st, void (*fn)(void *ctx), void *ctx);

/* Outside a job, on a pool thread (a streamed answer's reader, which
 * outlives its job): check out a connection as a job that does not write
 * (api_job_run) and give it back after a short read, so a slow client never
 * holds one between chunks. Checkout can't fail (it waits for an idle
 * connection); return takes NULL. */
struct store *api_store_checkout(struct api *api);
void api_store_return(struct api *api, struct store *st);

/* Free job (out and the route struct). NULL ok. */
void api_job_free(struct api_job *job);

/* From a custom answer: run the job again in ms milliseconds (the request
 * keeps waiting; a timer of the HTTP layer). Returns 1 (queued: the answer
 * hook returns it), or 0 when it cannot (the caller answers now). */
int api_job_again(struct http_req *req, struct api_job *job, uint64_t ms);

/* The default answer: status and out, with the headers asked for. */
void api_job_answer(struct http_req *req, struct api_job *job);

/* In run: set status / out to the error entry e (api_err.h) with param and
 * message (in Anthropic's envelope, without param, when job->anthropic); a
 * 503 entry also asks for Retry-After: 1. Can't fail (on no
 * memory status stays 0: a plain 500). */
void api_job_error(struct api_job *job, enum api_err e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* In run: 500 for an unexpected error rc (logged with what), or 503 with
 * Retry-After when the database is busy (ERR_BUSY) or the file store is
 * out (ERR_CONN, jobd/blob/blob.h). */
void api_job_internal(struct api_job *job, int rc, const char *what);

#endif
