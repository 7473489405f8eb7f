/* Tests for jobd/api/api_job.c: the pool-job runner's connection handling. */
#include <stdatomic.h>
#include <string.h>

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
