/*
 * api_idem.h - Idempotency-Key handling of a job (spec/openapi.yaml,
 * "Idempotency"): reserve the key before the effect, replay or refuse a
 * repeated one, and hand the store the response to keep with the effect.
 *
 * The key and the request fingerprint (job->fp, computed by the route on
 * the loop) sit in the job. The effect's transaction completes the key
 * (a store operation of jobd/store/store_txn.c given api_idem_answer);
 * an effect that fails before committing releases it. Pool thread.
 */
#ifndef JOBD_API_IDEM_H
#define JOBD_API_IDEM_H

#include "jobd/store/store.h"

struct api_job;

/* No key -> 0 (go on). Else reserve it: NEW -> 0 (go on, then complete it
 * in the effect's transaction); REPLAY -> the stored response is the
 * answer (replayed = 1); IN_FLIGHT -> 409 + Retry-After; MISMATCH -> 422;
 * errors -> 500. Each of those returns 1 with the answer set. */
int api_idem_begin(struct api_job *job, struct store *st);

/* The effect failed before committing: drop the reservation. */
void api_idem_release(struct api_job *job, struct store *st);

/* What the store keeps with the key (none when the job has no key):
 * the job's status and out once render(arg, obj) has filled them. */
struct store_idem_answer api_idem_answer(struct api_job *job, int (*render)(void *arg, const void *obj),
                                         void *arg);

#endif
