/* Tests for jobd/api/api_job.c: the pool-job runner's connection handling. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/err.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_job.h"
#include "tests/th.h"

struct seen {
    struct api *api;
    size_t n_idle;
    int writers;
    int calls;
};

static void scan(void *ctx)
{
    struct seen *s = ctx;
    s->n_idle = s->api->pool.n_idle;
    s->writers = atomic_load(&s->api->writers);
    s->calls++;
}

/* Regression: the budget estimate scanned a submission's whole file while
 * its job held one of the pool's connections (and counted as a writer the
 * ingest thread yields to). api_job_unlocked, which the admission scan runs
 * under, hands the connection back for the duration of the scan. */
TEST(budget_scan_holds_no_pooled_connection)
{
    struct api api;
    memset(&api, 0, sizeof api);
    atomic_init(&api.writers, 0);
    CHECK_EQ_INT(api_pool_open(&api.pool, th_tmpdir(), NULL, 1), 0);
    struct api_job job;
    api_job_init(&job, &api, NULL, NULL, 1, 0);
    /* what the runner does before run: check the only connection out, count the writer */
    CHECK_EQ_INT((int)api.pool.n_idle, 1);
    struct store *st = api.pool.idle[--api.pool.n_idle];
    job.st = st;
    atomic_fetch_add(&api.writers, 1);

    struct seen s = {.api = &api};
    struct store *back = api_job_unlocked(&job, st, scan, &s);
    CHECK_EQ_INT(s.calls, 1);
    CHECK_EQ_INT((int)s.n_idle, 1); /* the connection was idle while the scan ran */
    CHECK_EQ_INT(s.writers, 0);     /* and the job was no writer */
    CHECK(back == st);              /* the pool's one connection, checked out again */
    CHECK(job.st == back);          /* the runner puts back the one run ends with */
    CHECK_EQ_INT((int)api.pool.n_idle, 0);
    CHECK_EQ_INT(atomic_load(&api.writers), 1);

    api.pool.idle[api.pool.n_idle++] = back;
    buf_release(&job.out);
    api_pool_close(&api.pool);
}

/* ---- the read pool falls back on idle main-pool connections --------------------- */

/* Two pools of one connection each, as on PostgreSQL: rpool {R}, pool {M}.
 * A reader thread's job holds R and, in api_job_unlocked, finds R and M
 * both taken by others: it must wait for either (before, it waited for the
 * read pool only, however many main connections were idle). The test thread
 * hands M back through a writing job; the reader must get it, return it to
 * the main pool (not the read pool), and prefer R once R is idle again. */
struct two {
    struct api api;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct store *r, *m;      /* the pools' connections */
    struct store *taken_m;    /* reader's fn1: M taken from the main pool, for the test thread */
    struct store *back1, *back2;
    size_t main_idle_in_fn2, read_idle_in_fn2;
    int fn2_ran, done;
};

static void two_signal(struct two *t, int *flag)
{
    pthread_mutex_lock(&t->mu);
    *flag = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Wait up to 30 s for *flag (a hang is the bug: report it, don't hang). */
static int two_wait(struct two *t, const int *flag)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    int ok = 1;
    pthread_mutex_lock(&t->mu);
    while (!*flag && ok)
        ok = pthread_cond_timedwait(&t->cv, &t->mu, &dl) != ETIMEDOUT || *flag;
    pthread_mutex_unlock(&t->mu);
    return ok;
}

static void reader_fn1(void *ctx) /* others take R and M meanwhile */
{
    struct two *t = ctx;
    struct api_pool *rp = &t->api.rpool, *mp = &t->api.pool;
    pthread_mutex_lock(&rp->mu);
    struct store *r = rp->n_idle ? rp->idle[--rp->n_idle] : NULL;
    pthread_mutex_unlock(&rp->mu);
    pthread_mutex_lock(&mp->mu);
    struct store *m = mp->n_idle ? mp->idle[--mp->n_idle] : NULL;
    pthread_mutex_unlock(&mp->mu);
    (void)r; /* R stays out until reader_fn2 */
    pthread_mutex_lock(&t->mu);
    t->taken_m = m;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void reader_fn2(void *ctx) /* R comes back to the read pool */
{
    struct two *t = ctx;
    struct api_pool *rp = &t->api.rpool, *mp = &t->api.pool;
    pthread_mutex_lock(&mp->mu);
    t->main_idle_in_fn2 = mp->n_idle;
    pthread_mutex_unlock(&mp->mu);
    pthread_mutex_lock(&rp->mu);
    t->read_idle_in_fn2 = rp->n_idle;
    rp->idle[rp->n_idle++] = t->r;
    pthread_cond_signal(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    two_signal(t, &t->fn2_ran);
}

static void *reader(void *arg)
{
    struct two *t = arg;
    struct api_job job;
    api_job_init(&job, &t->api, NULL, NULL, 0, 0); /* a GET: writes nothing */
    job.st = t->r;
    t->back1 = api_job_unlocked(&job, t->r, reader_fn1, t);
    t->back2 = api_job_unlocked(&job, t->back1, reader_fn2, t);
    buf_release(&job.out);
    two_signal(t, &t->done);
    return NULL;
}

static void writer_fn(void *ctx) /* hold the writer's get until the reader's fn2 put R back */
{
    struct two *t = ctx;
    two_wait(t, &t->fn2_ran);
}

static int have_taken_m(struct two *t)
{
    pthread_mutex_lock(&t->mu);
    int got = t->taken_m != NULL;
    pthread_mutex_unlock(&t->mu);
    return got;
}

TEST(read_job_takes_an_idle_main_connection_when_the_read_pool_is_busy)
{
    static struct two t; /* static: a reader left blocked by a failure must not point into a dead frame */
    memset(&t, 0, sizeof t);
    atomic_init(&t.api.writers, 0);
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    CHECK_EQ_INT(api_pool_open(&t.api.pool, th_tmpdir(), NULL, 1), 0);
    CHECK_EQ_INT(api_pool_open(&t.api.rpool, th_tmpdir(), NULL, 1), 0);
    t.m = t.api.pool.idle[0];
    t.r = t.api.rpool.idle[--t.api.rpool.n_idle]; /* the reader's job holds R */

    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, reader, &t), 0);
    for (int i = 0; i < 3000 && !have_taken_m(&t); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    CHECK(have_taken_m(&t));
    CHECK(t.taken_m == t.m);
    /* a writing job hands M back (the reader, busy pools, takes it) */
    struct api_job w;
    api_job_init(&w, &t.api, NULL, NULL, 1, 0);
    w.st = t.m;
    atomic_fetch_add(&t.api.writers, 1);
    struct store *wback = api_job_unlocked(&w, t.m, writer_fn, &t);
    CHECK(two_wait(&t, &t.done)); /* before: the reader waited on the read pool forever */
    CHECK_EQ_INT(pthread_join(th, NULL), 0);

    CHECK(t.back1 == t.m);                   /* the idle main connection, as no read one was idle */
    CHECK_EQ_INT((int)t.main_idle_in_fn2, 1); /* handed back to the main pool */
    CHECK_EQ_INT((int)t.read_idle_in_fn2, 0); /* not to the read pool */
    CHECK(t.back2 == t.r);                   /* a read connection first, when one is idle */
    CHECK(wback == t.m);                     /* writers keep to the main pool */
    CHECK_EQ_INT((int)t.api.pool.n_idle, 0);
    CHECK_EQ_INT((int)t.api.rpool.n_idle, 0);

    t.api.pool.idle[t.api.pool.n_idle++] = wback;
    t.api.rpool.idle[t.api.rpool.n_idle++] = t.back2;
    buf_release(&w.out);
    api_pool_close(&t.api.pool);
    api_pool_close(&t.api.rpool);
    pthread_mutex_destroy(&t.mu);
    pthread_cond_destroy(&t.cv);
}
