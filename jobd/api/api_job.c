/*
 * api_job.c - the connection pool and the one pool-job runner (see
 * api_job.h). run on a thread-pool thread; everything else on the loop.
 */
#include "jobd/api/api_job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_int.h"
#include "jobd/http/http.h"
#include "jobd/work/sweeper.h"

/* ---- connection pool ------------------------------------------------------------- */

int api_pool_open(struct api_pool *p, const char *data_dir, const struct store_opts *opts, size_t n)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->inited = 1;
    p->all = calloc(n, sizeof *p->all);
    p->idle = calloc(n, sizeof *p->idle);
    if (!p->all || !p->idle)
        return ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = store_open(data_dir, opts, &p->all[i]);
        if (rc)
            return rc;
        p->n++;
        p->idle[p->n_idle++] = p->all[i];
    }
    return 0;
}

void api_pool_close(struct api_pool *p)
{
    if (!p->inited)
        return; /* zeroed, or closed already */
    for (size_t i = 0; i < p->n; i++)
        store_close(p->all[i]);
    free(p->all);
    free(p->idle);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    memset(p, 0, sizeof *p);
}

static struct store *pool_get(struct api_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->n_idle == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    struct store *st = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->mu);
    return st;
}

static void pool_put(struct api_pool *p, struct store *st)
{
    pthread_mutex_lock(&p->mu);
    p->idle[p->n_idle++] = st;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- jobs ------------------------------------------------------------------------ */

void api_job_init(struct api_job *job, struct api *api, api_job_fn run, void (*free_fn)(struct api_job *job),
                  int writes, size_t out_cap)
{
    memset(job, 0, sizeof *job);
    job->api = api;
    job->run = run;
    job->free = free_fn;
    job->writes = writes;
    buf_init(&job->out, out_cap);
}

void api_job_init_req(struct api_job *job, struct http_req *req, api_job_fn run,
                      void (*free_fn)(struct api_job *job))
{
    struct api_rctx *rc = http_req_data(req);
    const char *m = http_req_method(req);
    api_job_init(job, rc->api, run, free_fn, strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0, 64u << 20);
    snprintf(job->tenant, sizeof job->tenant, "%s", rc->tenant);
    snprintf(job->idem_key, sizeof job->idem_key, "%s", rc->idem_key);
    job->anthropic = rc->anthropic;
}

/* Pool thread, after run: the ETag of a GET's 200 body (see api_job.h). */
static void job_etag(struct api_job *job)
{
    if (!job->is_get || (job->answer && !job->answer_sends_out) || job->status != 200 || job->etag[0])
        return;
    uint8_t d[SHA256_LEN];
    char hex[2 * SHA256_LEN + 1];
    if (sha256(job->out.data ? job->out.data : "", job->out.len, d))
        return;
    hex_encode(d, 16, hex);
    snprintf(job->etag, sizeof job->etag, "\"%s\"", hex);
    if (job->if_none_match[0] && http_etag_matches(job->if_none_match, job->etag)) {
        buf_reset(&job->out);
        job->status = 304;
    }
}

void api_job_free(struct api_job *job)
{
    if (!job)
        return;
    buf_release(&job->out);
    job->free(job);
}

void api_job_error(struct api_job *job, enum api_err e, const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    buf_reset(&job->out);
    int rc = job->anthropic ? api_err_json_anthropic(&job->out, e, msg) : api_err_json(&job->out, e, param, msg);
    job->status = rc ? 0 : api_err_status(e);
    if (api_err_status(e) == 503)
        job->retry_after = 1;
}

void api_job_internal(struct api_job *job, int rc, const char *what)
{
    log_error("%s: %s", what, err_msg(rc));
    if (rc == ERR_BUSY)
        api_job_error(job, API_ERR_UNAVAILABLE, NULL, "The database is busy (%s); retry shortly.", what);
    else if (rc == ERR_NOSPACE)
        api_job_error(job, API_ERR_INSUFFICIENT_STORAGE, NULL,
                      "The server's disk is full (%s): nothing was stored; retry once space is freed.", what);
    else if (rc == ERR_CONN)
        api_job_error(job, API_ERR_UNAVAILABLE, NULL, "The file store is unavailable (%s); retry shortly.", what);
    else
        api_job_error(job, API_ERR_INTERNAL, NULL, "Internal error (%s): %s.", what, err_msg(rc));
}

/* A job's connection. A job that writes takes one of the main pool's. A
 * job that does not write, where there is a read pool (PostgreSQL), takes
 * an idle one of the read pool's, else an idle one of the main pool's, and
 * waits only while both pools are busy: a burst of GETs never parks more
 * pool threads than there are connections in use (every connection busy),
 * so lease / commit jobs and file I/O do not queue behind reads waiting for
 * the read pool. Lock order: rpool.mu -> pool.mu. A connection goes back to
 * the pool it came from; a put on the main pool also wakes a reader waiting
 * on the read pool's condition (taking rpool.mu after dropping pool.mu, so a
 * reader that found the main pool empty under rpool.mu is already waiting
 * or sees the connection). */
static struct store *conn_get(struct api *api, int writes)
{
    struct api_pool *rp = &api->rpool, *mp = &api->pool;
    if (writes || !rp->n)
        return pool_get(mp);
    struct store *st = NULL;
    pthread_mutex_lock(&rp->mu);
    while (!st) {
        if (rp->n_idle) {
            st = rp->idle[--rp->n_idle];
            break;
        }
        pthread_mutex_lock(&mp->mu);
        if (mp->n_idle)
            st = mp->idle[--mp->n_idle];
        pthread_mutex_unlock(&mp->mu);
        if (!st)
            pthread_cond_wait(&rp->cv, &rp->mu);
    }
    pthread_mutex_unlock(&rp->mu);
    return st;
}

static void conn_put(struct api *api, struct store *st)
{
    struct api_pool *rp = &api->rpool;
    for (size_t i = 0; i < rp->n; i++)
        if (rp->all[i] == st) {
            pool_put(rp, st);
            return;
        }
    pool_put(&api->pool, st);
    if (rp->n) {
        pthread_mutex_lock(&rp->mu);
        pthread_cond_signal(&rp->cv);
        pthread_mutex_unlock(&rp->mu);
    }
}

static struct store *job_get(const struct api_job *job)
{
    return conn_get(job->api, job->writes);
}

static void job_put(const struct api_job *job, struct store *st)
{
    conn_put(job->api, st);
}

struct store *api_store_checkout(struct api *api)
{
    return conn_get(api, 0);
}

void api_store_return(struct api *api, struct store *st)
{
    if (st)
        conn_put(api, st);
}

static void job_work(void *arg)
{
    struct api_job *job = arg;
    struct api *api = job->api;
    if (job->writes)
        atomic_fetch_add(&api->writers, 1);
    job->st = job_get(job);
    buf_reset(&job->out);
    job->status = 0;
    job->retry_after = 0;
    job->run(job, job->st);
    job_etag(job);
    job_put(job, job->st); /* the one run ended with (api_job_unlocked may swap it) */
    job->st = NULL;
    if (job->writes)
        atomic_fetch_sub(&api->writers, 1);
}

struct store *api_job_unlocked(struct api_job *job, struct store *st, void (*fn)(void *ctx), void *ctx)
{
    struct api *api = job->api;
    if (job->writes)
        atomic_fetch_sub(&api->writers, 1);
    job_put(job, st);
    fn(ctx);
    job->st = job_get(job);
    if (job->writes)
        atomic_fetch_add(&api->writers, 1);
    return job->st;
}

void api_job_answer(struct http_req *req, struct api_job *job)
{
    if (!job->status) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Internal error.");
        return;
    }
    char v[32];
    if (job->replayed)
        http_resp_header(req, "Idempotent-Replayed", "true");
    if (job->etag[0])
        http_resp_header(req, "ETag", job->etag);
    if (job->retry_after) {
        snprintf(v, sizeof v, "%d", job->retry_after);
        http_resp_header(req, "Retry-After", v);
    }
    if (job->status == 304)
        http_respond(req, 304, NULL, NULL, 0);
    else
        http_respond(req, job->status, job->content_type ? job->content_type : "application/json",
                     job->out.data ? job->out.data : "", job->out.len);
}

static void job_after(struct http_req *req, int status, void *arg)
{
    struct api_job *job = arg;
    if (status != 0 && !job->status)
        api_job_error(job, API_ERR_INTERNAL, NULL, "The operation was cancelled.");
    if (job->wake_sweeper)
        sweeper_wake(job->api->sweeper);
    job->wake_sweeper = 0;
    if (status == 0 && job->answer) {
        if (job->answer(req, job))
            return; /* queued again */
    } else {
        api_job_answer(req, job);
    }
    api_job_free(job);
}

static void job_rerun(struct http_req *req, void *arg)
{
    struct api_job *job = arg;
    if (http_req_queue_work(req, job_work, job_after, job) != 0) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Could not schedule the request.");
        api_job_free(job);
    }
}

int api_job_again(struct http_req *req, struct api_job *job, uint64_t ms)
{
    return http_req_timer_start(req, ms, job_rerun, job) == 0;
}

void api_job_run(struct http_req *req, struct api_job *job)
{
    if (!job) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    const char *m = http_req_method(req);
    job->is_get = !job->writes && (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0);
    const char *inm = http_req_header(req, "If-None-Match");
    if (inm && job->is_get)
        snprintf(job->if_none_match, sizeof job->if_none_match, "%s", inm);
    if (http_req_queue_work(req, job_work, job_after, job) != 0) {
        api_job_free(job);
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Could not schedule the request.");
    }
}
