/*
 * api_idem.c - Idempotency-Key handling of a job (see api_idem.h). Pool
 * thread.
 */
#include "jobd/api/api_idem.h"

#include <stdlib.h>

#include "common/clock.h"
#include "common/err.h"
#include "jobd/api/api_job.h"

int api_idem_begin(struct api_job *job, struct store *st)
{
    if (!job->idem_key[0])
        return 0;
    struct store_idem r;
    int rc = store_idem_reserve(st, job->tenant, job->idem_key, job->fp, clock_wall_s(), &r);
    if (rc) {
        api_job_internal(job, rc, "idempotency key");
        return 1;
    }
    switch (r.outcome) {
    case STORE_IDEM_NEW:
        return 0;
    case STORE_IDEM_REPLAY:
        buf_reset(&job->out);
        if (buf_append(&job->out, r.body, r.body_len))
            api_job_internal(job, ERR_NOMEM, "idempotent replay");
        else
            job->status = r.status_code;
        job->replayed = 1;
        free(r.body);
        return 1;
    case STORE_IDEM_IN_FLIGHT:
        job->retry_after = 1;
        api_job_error(job, API_ERR_IDEMPOTENCY_KEY_IN_USE, NULL,
                      "A request with this Idempotency-Key is still being processed; retry later.");
        return 1;
    case STORE_IDEM_MISMATCH:
    default:
        api_job_error(job, API_ERR_IDEMPOTENCY_KEY_REUSED, NULL,
                      "This Idempotency-Key was used with a different request (method, path or body).");
        return 1;
    }
}

void api_idem_release(struct api_job *job, struct store *st)
{
    if (job->idem_key[0])
        store_idem_release(st, job->tenant, job->idem_key);
}

struct store_idem_answer api_idem_answer(struct api_job *job, int (*render)(void *arg, const void *obj),
                                         void *arg)
{
    struct store_idem_answer a = {job->tenant, job->idem_key, render, arg, &job->status, &job->out,
                                  clock_wall_s()};
    return a;
}
