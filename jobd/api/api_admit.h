/*
 * api_admit.h - admission of a batch submission under the tenant's budget
 * limits (spec/usage.md "Budgets").
 *
 * A submission's job calls api_admit_prepare before its transaction: it
 * reads the tenant's limits and, only when one is in force, scans the input
 * file for the estimate (jobd/account/budget.h). Inside the transaction
 * that creates the batch (store_batch_submit), api_admit_check reads the
 * tenant's use and refuses with 429 insufficient_quota, before the insert;
 * the reservation is recorded in the same transaction. So a refused
 * submission leaves no row, and two concurrent ones are serialised by the
 * write lock. Pool thread.
 */
#ifndef JOBD_API_ADMIT_H
#define JOBD_API_ADMIT_H

#include "jobd/account/budget.h"
#include "jobd/store/store.h"
#include "jobd/store/store_budget.h"

struct api_job;

struct api_admit {
    struct api_job *job;         /* the submission: tenant, api, where refusals are answered */
    int active;                  /* the tenant has a limit: estimate made, check and reserve */
    struct store_limits limits;
    struct budget_estimate est;
};

/* Before the transaction (none open on *st): read job->tenant's limits;
 * when one is in force, estimate the input (key: its storage_path in the
 * file store, or else file_id's stored bytes; a missing or non-batch file leaves adm inactive: the creation
 * answers it). The scan runs without a connection (api_job_unlocked), so
 * *st may be another connection afterwards. 0 or an error (the caller
 * answers it: api_job_internal). */
int api_admit_prepare(struct api_job *job, struct store **st, const char *key, const char *file_id,
                      const char *endpoint, struct api_admit *adm);

/* store_submit's admit callback (arg: the struct api_admit): inside the
 * transaction, 0 = admitted; else the job's answer is set (429 naming the
 * limit, or 500) and the error returned. */
int api_admit_check(void *arg, struct store *st);

/* Fill s's reservation from adm (nothing when inactive). Can't fail. */
void api_admit_reservation(const struct api_admit *adm, struct store_submit *s);

#endif
