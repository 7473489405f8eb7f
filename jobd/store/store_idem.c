/*
 * store_idem.c - idempotency keys (Stripe / IETF draft semantics).
 *
 * reserve runs its read-then-write in one BEGIN IMMEDIATE transaction, so
 * concurrent reservations of one key from any number of connections are
 * serialised by SQLite's write lock and exactly one sees "absent" and wins
 * (NEW); the others see the in-flight row (IN_FLIGHT) or, once the winner
 * completed, its stored response (REPLAY). complete is an UPDATE meant to
 * run inside the caller's effect transaction. Same threading as store.c.
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

int store_idem_fingerprint(const char *method, const char *path, const void *body, size_t body_len,
                           uint8_t out[SHA256_LEN])
{
    struct sha256_ctx *c = sha256_new();
    if (!c)
        return ERR_NOMEM;
    int rc = 0;
    if ((rc = sha256_update(c, method, strlen(method))) || (rc = sha256_update(c, "\n", 1)) ||
        (rc = sha256_update(c, path, strlen(path))) || (rc = sha256_update(c, "\n", 1)) ||
        (body_len && (rc = sha256_update(c, body, body_len)))) {
        sha256_free(c);
        return rc;
    }
    return sha256_final(c, out);
}

static int key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    return n >= 1 && n <= STORE_IDEM_KEY_MAX;
}

int store_idem_reserve(struct store *st, const char *tenant_id, const char *key,
                       const uint8_t fp[SHA256_LEN], int64_t now, struct store_idem *out)
{
    if (st->depth)
        return ERR_BADSTATE;
    if (!key_ok(key))
        return ERR_INVAL;
    struct store_idem res = {STORE_IDEM_NEW, 0, NULL, 0};
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_IDEM_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_text(st, s, 2, key)))
        goto out;
    int r = sdb_step(s);
    int take = 0;
    if (r == SDB_DONE) {
        take = 1;
    } else if (r == SDB_ROW) {
        int64_t created = sdb_column_int64(s, 3);
        int in_flight = sdb_column_type(s, 1) == SDB_NULL;
        int same = sdb_column_bytes(s, 0) == SHA256_LEN &&
                   memcmp(sdb_column_blob(s, 0), fp, SHA256_LEN) == 0;
        if (created <= now - st->opts.idem_retention_s) {
            take = 1; /* expired: as if never seen */
        } else if (in_flight && created <= now - st->opts.idem_inflight_timeout_s) {
            take = 1; /* abandoned by a holder that died */
        } else if (!same) {
            res.outcome = STORE_IDEM_MISMATCH;
        } else if (in_flight) {
            res.outcome = STORE_IDEM_IN_FLIGHT;
        } else {
            res.outcome = STORE_IDEM_REPLAY;
            res.status_code = sdb_column_int(s, 1);
            const void *b = sdb_column_blob(s, 2);
            res.body_len = (size_t)sdb_column_bytes(s, 2);
            res.body = malloc(res.body_len + 1);
            if (!res.body) {
                rc = ERR_NOMEM;
            } else {
                if (res.body_len)
                    memcpy(res.body, b, res.body_len);
                res.body[res.body_len] = '\0';
            }
        }
    } else {
        rc = store_sqlerr(st, r, "get idempotency key");
    }
    sdb_reset(s);
    if (!rc && take) {
        struct sdb_stmt *p = store_stmt(st, S_IDEM_PUT, &rc);
        if (p && !(rc = store_bind_text(st, p, 1, tenant_id)) && !(rc = store_bind_text(st, p, 2, key))) {
            int b = sdb_bind_blob(p, 3, fp, SHA256_LEN);
            rc = b != SDB_OK ? store_sqlerr(st, b, "bind") : store_bind_int(st, p, 4, now);
            if (!rc)
                rc = store_step_done(st, p, "reserve idempotency key");
            sdb_clear_bindings(p);
        }
    }
out:
    rc = store_w_end(st, rc);
    if (rc) {
        free(res.body);
        return rc;
    }
    *out = res;
    return 0;
}

int store_idem_complete(struct store *st, const char *tenant_id, const char *key, int status_code,
                        const void *body, size_t body_len, int64_t now)
{
    if (!key_ok(key) || body_len > (size_t)0x7fffffff)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_IDEM_COMPLETE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, tenant_id)) && !(rc = store_bind_text(st, s, 2, key)) &&
        !(rc = store_bind_int(st, s, 3, status_code))) {
        int b = sdb_bind_blob(s, 4, body ? body : "", (int)body_len);
        rc = b != SDB_OK ? store_sqlerr(st, b, "bind") : store_bind_int(st, s, 5, now);
        if (!rc && !(rc = store_step_done(st, s, "complete idempotency key")) &&
            sdb_changes(st->db) == 0)
            rc = ERR_BADSTATE;
        sdb_clear_bindings(s);
    }
    return store_w_end(st, rc);
}

int store_idem_release(struct store *st, const char *tenant_id, const char *key)
{
    if (!key_ok(key))
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_IDEM_RELEASE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, tenant_id)) && !(rc = store_bind_text(st, s, 2, key)))
        rc = store_step_done(st, s, "release idempotency key");
    return store_w_end(st, rc);
}

int store_idem_expire(struct store *st, int64_t now, int64_t *n_deleted)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_IDEM_EXPIRE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    int64_t n = 0;
    if (!(rc = store_bind_int(st, s, 1, now - st->opts.idem_retention_s)) &&
        !(rc = store_step_done(st, s, "expire idempotency keys")))
        n = sdb_changes(st->db);
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (n_deleted)
        *n_deleted = n;
    return 0;
}
