/*
 * store_reuse.c - the rows of result reuse (jobd/work/reuse.h decides what
 * is reused; this file only reads and writes reuse_results, the reuse key
 * of a request and the reused_tokens of a result and its ledger row). See
 * store.h "Result reuse".
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store_int.h"

int store_reuse_worker(struct store *st, const char *worker_id, const char *canonical, char sha[65],
                       char device[129])
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REUSE_WORKER, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, worker_id)) || (rc = store_bind_text(st, s, 2, canonical)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        store_col_text(s, 0, sha, 65);
        store_col_text(s, 1, device, 129);
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "reuse worker");
    }
    sdb_reset(s);
    return rc;
}

int store_reuse_get(struct store *st, const char *tenant_id, const char *key, int64_t since,
                    struct store_reuse_hit *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REUSE_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_text(st, s, 2, key)) ||
        (rc = store_bind_int(st, s, 3, since)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        char enc[16];
        store_col_text(s, 2, enc, sizeof enc);
        int n = sdb_column_bytes(s, 1);
        const void *p = sdb_column_blob(s, 1);
        if (strcmp(enc, "identity") != 0 || n <= 0 || !p) {
            rc = ERR_NOTFOUND; /* a compressed body is not reused (none is written today) */
        } else if (!(out->body = malloc((size_t)n + 1))) {
            rc = ERR_NOMEM;
        } else {
            memcpy(out->body, p, (size_t)n);
            out->body[n] = '\0';
            out->body_len = (size_t)n;
            out->status_code = sdb_column_int(s, 0);
            out->prompt_tokens = sdb_column_int64(s, 3);
            out->completion_tokens = sdb_column_int64(s, 4);
        }
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "reuse get");
    }
    sdb_reset(s);
    return rc;
}

int store_reuse_key_set(struct store *st, const char *request_id, const char *lease_id, const char *key)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REUSE_KEY_SET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, request_id)) || (rc = store_bind_text(st, s, 2, key)) ||
        (rc = store_bind_text(st, s, 3, lease_id)))
        return rc;
    return store_step_done(st, s, "set reuse key");
}

int store_reuse_record(struct store *st, const char *lease_id, int64_t now)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REUSE_RECORD, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, lease_id)) || (rc = store_bind_int(st, s, 2, now)))
        return rc;
    return store_step_done(st, s, "record reusable results");
}

static int mark(struct store *st, enum store_stmt_id which, const char *request_id, int64_t tokens)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, which, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, request_id)) || (rc = store_bind_int(st, s, 2, tokens)))
        return rc;
    return store_step_done(st, s, "mark reused");
}

int store_reuse_commit(struct store *st, const char *lease_id, const char *worker_id,
                       const struct store_result *items, const int64_t *reused_tokens, size_t n,
                       int64_t now, enum store_commit_outcome *outcomes)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].kind != STORE_RESULT_SUCCESS || items[i].prompt_tokens || items[i].completion_tokens ||
            items[i].cached_tokens || reused_tokens[i] < 0)
            return ERR_INVAL;
    int rc = store_w_begin_shared(st);
    if (rc)
        return rc;
    rc = store_results_commit(st, lease_id, worker_id, items, n, NULL, now, outcomes);
    for (size_t i = 0; !rc && i < n; i++)
        if (outcomes[i] == STORE_COMMIT_OK && !(rc = mark(st, S_REUSE_RESULT_MARK, items[i].request_id,
                                                           reused_tokens[i])))
            rc = mark(st, S_REUSE_LEDGER_MARK, items[i].request_id, reused_tokens[i]);
    return store_w_end(st, rc);
}

int store_reuse_expire(struct store *st, int64_t before, int64_t *n_deleted)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REUSE_EXPIRE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    int64_t n = 0;
    if (!(rc = store_bind_int(st, s, 1, before)) && !(rc = store_step_done(st, s, "expire reuse results")))
        n = sdb_changes(st->db);
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (n_deleted)
        *n_deleted = n;
    return 0;
}
