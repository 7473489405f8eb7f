/*
 * store_txn.c - the API's effects that an Idempotency-Key covers, each one
 * transaction: the effect, the caller's rendering of its answer, the key's
 * record (see store.h, "effects with their idempotency record"). Built
 * from the public store operations, which run under a SAVEPOINT inside the
 * transaction opened here. Any thread with its own connection.
 */
#include "jobd/store/store.h"

#include <stdio.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/store/store_budget.h"
#include "jobd/store/store_webhook.h"

/* Render the answer of obj and keep it with the key. */
static int keep_answer(struct store *st, const struct store_idem_answer *a, const void *obj)
{
    int rc = a->render(a->arg, obj);
    if (rc || !a->key || !a->key[0])
        return rc;
    return store_idem_complete(st, a->tenant_id, a->key, *a->status, a->body->data, a->body->len, a->now);
}

/* Commit when rc is 0, else roll back; rc or the commit's error. */
static int finish(struct store *st, int rc)
{
    if (rc) {
        store_tx_rollback(st);
        return rc;
    }
    return store_tx_commit(st);
}

/* ERR_NOTFOUND / ERR_INVAL of a step other than the batch insert would read
 * as the input file's: they are internal errors here (the original logged). */
static int internal(int rc, const char *what)
{
    if (rc != ERR_NOTFOUND && rc != ERR_INVAL)
        return rc;
    log_error("%s: %s", what, err_msg(rc));
    return ERR_INTERNAL;
}

int store_batch_submit(struct store *st, const struct store_submit *s, char batch_id[ID_MAX])
{
    int rc = store_tx_begin(st);
    if (rc)
        return rc;
    struct store_batch b;
    int have_b = 0;
    if (s->admit)
        rc = s->admit(s->admit_arg, st);
    if (!rc && s->file)
        rc = internal(store_file_create(st, s->file), "submit: file row");
    if (!rc && !(rc = store_batch_create(st, s->tenant_id, &s->batch, s->now, &b)))
        have_b = 1;
    if (!rc && s->reserve)
        rc = internal(store_batch_reserve(st, b.id, s->reserve_tokens, s->reserve_micros, s->price_in,
                                          s->price_out),
                      "submit: reservation");
    if (!rc)
        rc = keep_answer(st, &s->idem, &b);
    if (have_b) {
        if (!rc)
            snprintf(batch_id, ID_MAX, "%s", b.id);
        store_batch_release(&b);
    }
    rc = finish(st, rc);
    if (rc && have_b)
        batch_id[0] = '\0';
    return rc;
}

int store_file_submit(struct store *st, struct store_file *f, const struct store_idem_answer *idem)
{
    int rc = store_tx_begin(st);
    if (rc)
        return rc;
    if (!(rc = store_file_create(st, f)))
        rc = keep_answer(st, idem, f);
    return finish(st, rc);
}

int store_batch_cancel_keyed(struct store *st, const char *tenant_id, const char *id, int64_t now,
                             const struct store_idem_answer *idem)
{
    int rc = store_tx_begin(st);
    if (rc)
        return rc;
    struct store_batch b;
    if (!(rc = store_batch_cancel(st, tenant_id, id, now, &b))) {
        rc = keep_answer(st, idem, &b);
        store_batch_release(&b);
    }
    return finish(st, rc);
}

int store_wh_endpoint_create_keyed(struct store *st, const char *tenant_id, const char *url,
                                   const char *event_types, const char *secret, int64_t now,
                                   const struct store_idem_answer *idem)
{
    int rc = store_tx_begin(st);
    if (rc)
        return rc;
    struct store_wh_endpoint e;
    if (!(rc = store_wh_endpoint_create(st, tenant_id, url, event_types, secret, now, &e)))
        rc = keep_answer(st, idem, &e);
    return finish(st, rc);
}
