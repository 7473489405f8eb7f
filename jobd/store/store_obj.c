/*
 * store_obj.c - files, batches and requests: rows, tenant-scoped reads,
 * cursor pagination, and the two state-transition functions (the only
 * writers of batches.status and requests.status), plus the ingest support
 * calls. See store.h for the state tables. Same threading as store.c.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/store/store_int.h"
#include "jobd/store/store_webhook.h"

/* ---- files ---------------------------------------------------------------------------- */

static int one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(s, *set) == 0)
            return 1;
    return 0;
}

int store_file_create(struct store *st, struct store_file *f)
{
    static const char *const purposes[] = {"batch", "batch_output", NULL};
    static const char *const encodings[] = {"identity", "zstd", NULL};
    static const char *const statuses[] = {"uploaded", "processed", "error", NULL};
    if (!*f->encoding)
        snprintf(f->encoding, sizeof f->encoding, "identity");
    if (!*f->status)
        snprintf(f->status, sizeof f->status, "processed");
    if (!one_of(f->purpose, purposes) || !one_of(f->encoding, encodings) ||
        !one_of(f->status, statuses) || f->bytes < 0 || !*f->storage_path)
        return ERR_INVAL;
    int rc = 0;
    if (!*f->id && (rc = id_new("file-", f->id, sizeof f->id)))
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_FILE_INSERT, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, f->id)) && !(rc = store_bind_text(st, s, 2, f->tenant_id)) &&
        !(rc = store_bind_text(st, s, 3, f->purpose)) &&
        !(rc = store_bind_text(st, s, 4, f->filename)) && !(rc = store_bind_int(st, s, 5, f->bytes)) &&
        !(rc = store_bind_text(st, s, 6, f->sha256)) &&
        !(rc = store_bind_text(st, s, 7, f->storage_path)) &&
        !(rc = store_bind_text(st, s, 8, f->encoding)) && !(rc = store_bind_text(st, s, 9, f->status)) &&
        !(rc = store_bind_int(st, s, 10, f->created_at))) {
        if (f->expires_at)
            rc = store_bind_int(st, s, 11, f->expires_at);
        if (!rc)
            rc = store_step_done(st, s, "insert file");
    }
    return store_w_end(st, rc);
}

static void file_row(struct sdb_stmt *s, struct store_file *f)
{
    memset(f, 0, sizeof *f);
    store_col_text(s, 0, f->id, sizeof f->id);
    store_col_text(s, 1, f->tenant_id, sizeof f->tenant_id);
    store_col_text(s, 2, f->purpose, sizeof f->purpose);
    store_col_text(s, 3, f->filename, sizeof f->filename);
    f->bytes = sdb_column_int64(s, 4);
    store_col_text(s, 5, f->sha256, sizeof f->sha256);
    store_col_text(s, 6, f->storage_path, sizeof f->storage_path);
    store_col_text(s, 7, f->encoding, sizeof f->encoding);
    store_col_text(s, 8, f->status, sizeof f->status);
    f->created_at = sdb_column_int64(s, 9);
    f->expires_at = sdb_column_int64(s, 10);
}

int store_file_get(struct store *st, const char *tenant_id, const char *id, struct store_file *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_FILE_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)) || (rc = store_bind_text(st, s, 2, tenant_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        file_row(s, out);
    else
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get file");
    sdb_reset(s);
    return rc;
}

static int file_list_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    (void)ctx;
    file_row(s, elem);
    return 0;
}

int store_file_list(struct store *st, const char *tenant_id, const char *purpose, int desc,
                    const char *after, int limit, struct store_file **items, size_t *n,
                    int *has_more)
{
    static const struct store_rows how = {sizeof(struct store_file), file_list_row, NULL, "list files"};
    if (limit < 1 || limit > 10000)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, desc ? S_FILE_LIST_DESC : S_FILE_LIST_ASC, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_text(st, s, 2, purpose)) ||
        (rc = store_bind_text(st, s, 3, after)) || (rc = store_bind_int(st, s, 4, limit + 1))) {
        sdb_reset(s);
        return rc;
    }
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &arr, n, has_more)))
        return rc;
    *items = arr;
    return 0;
}

int store_file_delete(struct store *st, const char *tenant_id, const char *id,
                      char storage_path_out[256])
{
    int rc = 0;
    char path[256] = "";
    struct sdb_stmt *s = store_stmt(st, S_FILE_DELETE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, id)) && !(rc = store_bind_text(st, s, 2, tenant_id))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            store_col_text(s, 0, path, sizeof path);
            rc = store_step_done(st, s, "delete file");
        } else {
            rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "delete file");
        }
        sdb_reset(s);
    }
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (storage_path_out)
        snprintf(storage_path_out, 256, "%s", path);
    return 0;
}

/* ---- batches: states ------------------------------------------------------------------- */

static const char *const batch_status_names[STORE_BATCH__COUNT] = {
    "validating", "failed", "in_progress", "finalizing",
    "completed",  "expired", "cancelling", "cancelled",
};

const char *store_batch_status_name(enum store_batch_status s)
{
    return (unsigned)s < STORE_BATCH__COUNT ? batch_status_names[s] : "?";
}

int store_batch_status_parse(const char *s, enum store_batch_status *out)
{
    for (int i = 0; s && i < STORE_BATCH__COUNT; i++)
        if (strcmp(s, batch_status_names[i]) == 0) {
            *out = (enum store_batch_status)i;
            return 0;
        }
    return ERR_INVAL;
}

int store_batch_edge_allowed(enum store_batch_status from, enum store_batch_status to)
{
    switch (from) {
    case STORE_BATCH_VALIDATING:
        return to == STORE_BATCH_IN_PROGRESS || to == STORE_BATCH_FAILED || to == STORE_BATCH_CANCELLING;
    case STORE_BATCH_IN_PROGRESS:
        return to == STORE_BATCH_FINALIZING || to == STORE_BATCH_EXPIRED || to == STORE_BATCH_CANCELLING;
    case STORE_BATCH_FINALIZING:
        return to == STORE_BATCH_COMPLETED || to == STORE_BATCH_EXPIRED || to == STORE_BATCH_CANCELLING;
    case STORE_BATCH_CANCELLING:
        return to == STORE_BATCH_CANCELLED;
    default:
        return 0;
    }
}

/* ---- batches: rows ---------------------------------------------------------------------- */

void store_batch_release(struct store_batch *b)
{
    if (!b)
        return;
    free(b->metadata);
    free(b->errors);
    b->metadata = b->errors = NULL;
}

void store_batch_list_free(struct store_batch *items, size_t n)
{
    for (size_t i = 0; items && i < n; i++)
        store_batch_release(&items[i]);
    free(items);
}

int store_batch_row(struct sdb_stmt *s, struct store_batch *b)
{
    int rc = 0;
    memset(b, 0, sizeof *b);
    store_col_text(s, 0, b->id, sizeof b->id);
    store_col_text(s, 1, b->tenant_id, sizeof b->tenant_id);
    store_col_text(s, 2, b->endpoint, sizeof b->endpoint);
    store_col_text(s, 3, b->input_file_id, sizeof b->input_file_id);
    b->completion_window_s = sdb_column_int64(s, 4);
    if (store_batch_status_parse((const char *)sdb_column_text(s, 5), &b->status))
        return ERR_CORRUPT;
    store_col_text(s, 6, b->model, sizeof b->model);
    b->metadata = store_col_dup(s, 7, &rc);
    b->errors = store_col_dup(s, 8, &rc);
    store_col_text(s, 9, b->output_file_id, sizeof b->output_file_id);
    store_col_text(s, 10, b->error_file_id, sizeof b->error_file_id);
    b->n_total = sdb_column_int64(s, 11);
    b->n_completed = sdb_column_int64(s, 12);
    b->n_failed = sdb_column_int64(s, 13);
    b->created_at = sdb_column_int64(s, 14);
    b->expires_at = sdb_column_int64(s, 15);
    b->at[STORE_BATCH_VALIDATING] = b->created_at;
    b->at[STORE_BATCH_IN_PROGRESS] = sdb_column_int64(s, 16);
    b->at[STORE_BATCH_FINALIZING] = sdb_column_int64(s, 17);
    b->at[STORE_BATCH_COMPLETED] = sdb_column_int64(s, 18);
    b->at[STORE_BATCH_FAILED] = sdb_column_int64(s, 19);
    b->at[STORE_BATCH_EXPIRED] = sdb_column_int64(s, 20);
    b->at[STORE_BATCH_CANCELLING] = sdb_column_int64(s, 21);
    b->at[STORE_BATCH_CANCELLED] = sdb_column_int64(s, 22);
    b->ingest_line = sdb_column_int64(s, 23);
    b->ingest_requests = sdb_column_int64(s, 24);
    b->priority = sdb_column_int64(s, 25);
    b->usage_prompt_tokens = sdb_column_int64(s, 26);
    b->usage_completion_tokens = sdb_column_int64(s, 27);
    b->usage_cached_tokens = sdb_column_int64(s, 28);
    b->usage_cost_micros = sdb_column_int64(s, 29);
    b->output_expires_after_s = sdb_column_int64(s, 30);
    store_col_text(s, 31, b->api, sizeof b->api);
    if (rc)
        store_batch_release(b);
    return rc;
}

/* Metadata: a JSON object of <= 16 string pairs, key <= 64, value <= 512
 * bytes; a "priority" value must be an integer -1000..1000 in decimal text,
 * which goes to *priority. */
static int metadata_ok(const char *text, int64_t *priority)
{
    json_t *v = NULL;
    struct js_limits lim = {16384, 2, 0};
    if (js_parse(text, strlen(text), &lim, &v, NULL))
        return 0;
    int ok = json_is_object(v) && json_object_size(v) <= STORE_METADATA_MAX_PAIRS;
    const char *k;
    json_t *val;
    json_object_foreach(v, k, val)
    {
        if (!ok)
            break;
        ok = strlen(k) <= STORE_METADATA_MAX_KEY && json_is_string(val) &&
             json_string_length(val) <= STORE_METADATA_MAX_VALUE;
        if (ok && strcmp(k, "priority") == 0) {
            const char *p = json_string_value(val);
            char *end = NULL;
            errno = 0;
            long long pr = strtoll(p, &end, 10);
            ok = *p && end && *end == '\0' && errno == 0 && pr >= -STORE_PRIORITY_MAX &&
                 pr <= STORE_PRIORITY_MAX;
            if (ok)
                *priority = pr;
        }
    }
    json_decref(v);
    return ok;
}

int store_batch_create(struct store *st, const char *tenant_id, const struct store_batch_new *nb,
                       int64_t now, struct store_batch *out)
{
    int64_t priority = 0;
    if (!nb->endpoint || (strcmp(nb->endpoint, "/v1/chat/completions") != 0 &&
                          strcmp(nb->endpoint, "/v1/completions") != 0 &&
                          strcmp(nb->endpoint, "/v1/embeddings") != 0 &&
                          strcmp(nb->endpoint, "/v1/responses") != 0))
        return ERR_INVAL;
    const char *api = nb->api ? nb->api : "openai";
    if (strcmp(api, "openai") && strcmp(api, "anthropic"))
        return ERR_INVAL;
    if (nb->completion_window_s <= 0 || nb->completion_window_s > 365 * 86400 ||
        nb->output_expires_after_s < 0 || (nb->metadata && !metadata_ok(nb->metadata, &priority)))
        return ERR_INVAL;
    struct store_file f;
    int rc = store_file_get(st, tenant_id, nb->input_file_id ? nb->input_file_id : "", &f);
    if (rc)
        return rc;
    if (f.expires_at && f.expires_at <= now)
        return ERR_NOTFOUND; /* expired: the sweeper may delete its bytes at any moment */
    if (strcmp(f.purpose, "batch") != 0)
        return ERR_INVAL;
    char id[ID_MAX];
    if ((rc = id_new("batch_", id, sizeof id)))
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_INSERT, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, id)) && !(rc = store_bind_text(st, s, 2, tenant_id)) &&
        !(rc = store_bind_text(st, s, 3, nb->endpoint)) &&
        !(rc = store_bind_text(st, s, 4, nb->input_file_id)) &&
        !(rc = store_bind_int(st, s, 5, nb->completion_window_s)) &&
        !(rc = store_bind_text(st, s, 6, nb->metadata)) && !(rc = store_bind_int(st, s, 7, now)) &&
        !(rc = store_bind_int(st, s, 8, now + nb->completion_window_s)) &&
        !(rc = store_bind_int(st, s, 9, priority)) && !(rc = store_bind_int(st, s, 10, nb->output_expires_after_s)) &&
        !(rc = store_bind_text(st, s, 11, api)))
        rc = store_step_done(st, s, "insert batch");
    sdb_clear_bindings(s);
    if (!rc && out)
        rc = store_batch_get(st, tenant_id, id, out);
    return store_w_end(st, rc);
}

int store_batch_get(struct store *st, const char *tenant_id, const char *id, struct store_batch *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)) || (rc = store_bind_text(st, s, 2, tenant_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW)
        rc = store_batch_row(s, out);
    else
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get batch");
    sdb_reset(s);
    return rc;
}

int store_batch_list(struct store *st, const char *tenant_id, const char *after, int limit,
                     struct store_batch **items, size_t *n, int *has_more)
{
    return store_batch_list_status(st, tenant_id, NULL, after, limit, items, n, has_more);
}

static int batch_list_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    (void)ctx;
    return store_batch_row(s, elem);
}

static void batch_list_release(void *elem)
{
    store_batch_release(elem);
}

int store_batch_list_status(struct store *st, const char *tenant_id, const char *status, const char *after,
                            int limit, struct store_batch **items, size_t *n, int *has_more)
{
    static const struct store_rows how = {sizeof(struct store_batch), batch_list_row, batch_list_release,
                                          "list batches"};
    if (limit < 1 || limit > 100)
        return ERR_INVAL;
    int rc = 0;
    if (after) { /* a cursor must be one of the tenant's own batches */
        struct store_batch cur;
        if ((rc = store_batch_get(st, tenant_id, after, &cur)))
            return rc;
        store_batch_release(&cur);
    }
    struct sdb_stmt *s = store_stmt(st, S_BATCH_LIST, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_text(st, s, 2, after)) ||
        (rc = store_bind_int(st, s, 3, limit + 1)) || (rc = store_bind_text(st, s, 4, status))) {
        sdb_reset(s);
        return rc;
    }
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &arr, n, has_more)))
        return rc;
    *items = arr;
    return 0;
}

int store_batch_list_api(struct store *st, const char *tenant_id, const char *api, const char *before,
                         const char *after, int limit, struct store_batch **items, size_t *n, int *has_more)
{
    static const struct store_rows how = {sizeof(struct store_batch), batch_list_row, batch_list_release,
                                          "list batches"};
    if (limit < 1 || limit > 1000 || (before && after))
        return ERR_INVAL;
    int rc = 0;
    const char *cur = before ? before : after;
    if (cur) {
        struct store_batch b;
        if ((rc = store_batch_get(st, tenant_id, cur, &b)))
            return rc;
        store_batch_release(&b);
    }
    struct sdb_stmt *s = store_stmt(st, before ? S_BATCH_LIST_API_ASC : S_BATCH_LIST_API, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_text(st, s, 1, tenant_id)) || (rc = store_bind_text(st, s, 2, cur)) ||
        (rc = store_bind_int(st, s, 3, limit + 1)) || (rc = store_bind_text(st, s, 4, api))) {
        sdb_reset(s);
        return rc;
    }
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, limit, &arr, n, has_more)))
        return rc;
    struct store_batch *v = arr;
    for (size_t i = 0; before && i < *n / 2; i++) { /* the ascending scan, newest first */
        struct store_batch t = v[i];
        v[i] = v[*n - 1 - i];
        v[*n - 1 - i] = t;
    }
    *items = v;
    return 0;
}

int store_batch_stop_counts(struct store *st, const char *batch_id, int64_t *n_cancelled, int64_t *n_expired)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_STOP_COUNTS, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)))
        return rc;
    int64_t c = 0, e = 0;
    int r;
    while ((r = sdb_step(s)) == SDB_ROW) {
        const char *code = (const char *)sdb_column_text(s, 0);
        if (code && !strcmp(code, "batch_cancelled"))
            c = sdb_column_int64(s, 1);
        else if (code)
            e = sdb_column_int64(s, 1);
    }
    rc = r == SDB_DONE ? 0 : store_sqlerr(st, r, "batch stop counts");
    sdb_reset(s);
    if (!rc) {
        *n_cancelled = c;
        *n_expired = e;
    }
    return rc;
}

int store_batch_delete(struct store *st, const char *tenant_id, const char *api, const char *id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_DELETE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, id)) && !(rc = store_bind_text(st, s, 2, tenant_id)) &&
        !(rc = store_bind_text(st, s, 3, api)) && !(rc = store_step_done(st, s, "delete batch")) &&
        sdb_changes(st->db) == 0) {
        struct store_batch b;
        rc = store_batch_get(st, tenant_id, id, &b);
        if (!rc) {
            rc = strcmp(b.api, api) ? ERR_NOTFOUND : ERR_BADSTATE;
            store_batch_release(&b);
        }
    }
    sdb_clear_bindings(s);
    return store_w_end(st, rc);
}

int store_batch_ids_in(struct store *st, enum store_batch_status status, char (**ids)[ID_MAX],
                       size_t *n)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_IDS_IN, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, store_batch_status_name(status))))
        return rc;
    return store_collect_ids(st, s, ids, n);
}

/* After an UPDATE ... WHERE id AND status changed nothing: NOTFOUND or BADSTATE. */
static int batch_why_unchanged(struct store *st, const char *id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_EXISTS, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)))
        return rc;
    int r = sdb_step(s);
    rc = r == SDB_ROW ? ERR_BADSTATE : r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "batch");
    sdb_reset(s);
    return rc;
}

int store_batch_transition(struct store *st, const char *id, enum store_batch_status from,
                           enum store_batch_status to, int64_t now)
{
    if (!store_batch_edge_allowed(from, to)) {
        log_warn("store: refused batch transition %s -> %s for %s", store_batch_status_name(from),
                 store_batch_status_name(to), id);
        return ERR_BADSTATE;
    }
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_TRANSITION, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, id)) &&
        !(rc = store_bind_text(st, s, 2, store_batch_status_name(to))) &&
        !(rc = store_bind_text(st, s, 3, store_batch_status_name(from))) &&
        !(rc = store_bind_int(st, s, 4, now)) && !(rc = store_step_done(st, s, "batch transition")) &&
        sdb_changes(st->db) == 0) {
        rc = batch_why_unchanged(st, id);
        if (rc == ERR_BADSTATE)
            log_warn("store: batch %s is not %s (wanted -> %s)", id, store_batch_status_name(from),
                     store_batch_status_name(to));
    }
    /* the outbox: a terminal state's webhook event commits with the change itself */
    if (!rc)
        rc = store_wh_event_for_batch(st, id, to, now);
    if (!rc && to == STORE_BATCH_IN_PROGRESS)
        st->notify = 1; /* its requests are leasable: wake long polls on every instance */
    return store_w_end(st, rc);
}

int store_batch_cancel(struct store *st, const char *tenant_id, const char *id, int64_t now,
                       struct store_batch *out)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct store_batch b;
    if ((rc = store_batch_get(st, tenant_id, id, &b)))
        return store_w_end(st, rc);
    enum store_batch_status cur = b.status;
    store_batch_release(&b);
    if (cur != STORE_BATCH_CANCELLING && cur != STORE_BATCH_CANCELLED)
        rc = store_batch_transition(st, id, cur, STORE_BATCH_CANCELLING, now);
    if (!rc && out)
        rc = store_batch_get(st, tenant_id, id, out);
    return store_w_end(st, rc);
}

int store_batch_count_by_status(struct store *st, int64_t counts[STORE_BATCH__COUNT])
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_BATCH_STATUS_COUNTS, &rc);
    if (!s)
        return rc;
    int64_t tmp[STORE_BATCH__COUNT] = {0};
    int r;
    while ((r = sdb_step(s)) == SDB_ROW) {
        enum store_batch_status b;
        if (store_batch_status_parse((const char *)sdb_column_text(s, 0), &b) == 0)
            tmp[b] = sdb_column_int64(s, 1);
    }
    if (r != SDB_DONE)
        rc = store_sqlerr(st, r, "count batches");
    sdb_reset(s);
    if (!rc)
        memcpy(counts, tmp, sizeof tmp);
    return rc;
}

/* ---- requests ------------------------------------------------------------------------------ */

static const char *const req_status_names[STORE_REQ__COUNT] = {"queued", "leased", "succeeded",
                                                               "failed"};

const char *store_request_status_name(enum store_request_status s)
{
    return (unsigned)s < STORE_REQ__COUNT ? req_status_names[s] : "?";
}

int store_request_edge_allowed(enum store_request_status from, enum store_request_status to)
{
    switch (from) {
    case STORE_REQ_QUEUED: return to == STORE_REQ_LEASED || to == STORE_REQ_FAILED;
    case STORE_REQ_LEASED:
        return to == STORE_REQ_QUEUED || to == STORE_REQ_SUCCEEDED || to == STORE_REQ_FAILED;
    case STORE_REQ_FAILED: return to == STORE_REQ_QUEUED; /* dead-letter retry */
    default: return 0;
    }
}

int store_request_transition(struct store *st, const char *id, enum store_request_status from,
                             enum store_request_status to, const struct store_request_change *ch,
                             int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    return store_w_end(st, store_req_transition_in(st, id, from, to, ch, now, NULL));
}

int store_req_transition_in(struct store *st, const char *id, enum store_request_status from,
                            enum store_request_status to, const struct store_request_change *ch, int64_t now,
                            struct store_count_acc *acc)
{
    static const struct store_request_change none = {0};
    if (!ch)
        ch = &none;
    if (!store_request_edge_allowed(from, to)) {
        log_warn("store: refused request transition %s -> %s for %s",
                 store_request_status_name(from), store_request_status_name(to), id);
        return ERR_BADSTATE;
    }
    if (to == STORE_REQ_LEASED && (!ch->lease_id || !*ch->lease_id))
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_TRANSITION, &rc);
    if (!s)
        return rc;
    char batch_id[ID_MAX] = "";
    if (!(rc = store_bind_text(st, s, 1, id)) &&
        !(rc = store_bind_text(st, s, 2, store_request_status_name(to))) &&
        !(rc = store_bind_text(st, s, 3, store_request_status_name(from))) &&
        !(rc = store_bind_text(st, s, 4, from == STORE_REQ_LEASED ? ch->lease_id : NULL)) &&
        !(rc = store_bind_int(st, s, 5, now)) &&
        !(rc = store_bind_text(st, s, 6, to == STORE_REQ_LEASED ? ch->lease_id : NULL)) &&
        !(rc = store_bind_int(st, s, 7, ch->next_attempt_at)) &&
        !(rc = store_bind_text(st, s, 8, ch->error)) &&
        !(rc = store_bind_int(st, s, 9, from == STORE_REQ_LEASED && to == STORE_REQ_QUEUED && ch->give_back))) {
        int r = sdb_step(s);
        if (r == SDB_ROW) {
            store_col_text(s, 0, batch_id, sizeof batch_id);
            rc = store_step_done(st, s, "request transition");
        } else if (r == SDB_DONE) {
            struct store_request q;
            sdb_reset(s);
            rc = store_request_get(st, id, &q);
            if (!rc) {
                rc = ERR_BADSTATE;
                log_warn("store: request %s is %s (wanted %s -> %s)", id,
                         store_request_status_name(q.status), store_request_status_name(from),
                         store_request_status_name(to));
            }
        } else {
            rc = store_sqlerr(st, r, "request transition");
        }
        sdb_reset(s);
    }
    if (!rc && to == STORE_REQ_QUEUED && ch->next_attempt_at <= now)
        st->notify = 1; /* leasable again now (released, retried dead letter) */
    if (!rc && (to == STORE_REQ_SUCCEEDED || to == STORE_REQ_FAILED || from == STORE_REQ_FAILED))
        rc = store_count_add(st, acc, batch_id, to == STORE_REQ_SUCCEEDED,
                             from == STORE_REQ_FAILED ? -1 : to == STORE_REQ_FAILED);
    return rc;
}

static int count_write(struct store *st, const char *batch_id, int64_t ok, int64_t failed)
{
    int rc = 0;
    struct sdb_stmt *c = store_stmt(st, S_BATCH_COUNT_DONE, &rc);
    if (c && !(rc = store_bind_text(st, c, 1, batch_id)) && !(rc = store_bind_int(st, c, 2, ok)) &&
        !(rc = store_bind_int(st, c, 3, failed)))
        rc = store_step_done(st, c, "count request");
    return rc;
}

int store_count_add(struct store *st, struct store_count_acc *acc, const char *batch_id, int64_t ok,
                    int64_t failed)
{
    if (!acc)
        return count_write(st, batch_id, ok, failed);
    for (int i = 0; i < acc->n; i++)
        if (strcmp(acc->b[i].batch_id, batch_id) == 0) {
            acc->b[i].ok += ok;
            acc->b[i].failed += failed;
            return 0;
        }
    if (acc->n == STORE_COUNT_ACC_MAX) {
        int rc = store_count_flush(st, acc);
        if (rc)
            return rc;
    }
    snprintf(acc->b[acc->n].batch_id, ID_MAX, "%s", batch_id);
    acc->b[acc->n].ok = ok;
    acc->b[acc->n].failed = failed;
    acc->n++;
    return 0;
}

int store_count_flush(struct store *st, struct store_count_acc *acc)
{
    int rc = 0;
    for (int i = 0; !rc && i < acc->n; i++)
        if (acc->b[i].ok || acc->b[i].failed)
            rc = count_write(st, acc->b[i].batch_id, acc->b[i].ok, acc->b[i].failed);
    acc->n = 0;
    return rc;
}

int store_request_get(struct store *st, const char *id, struct store_request *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_GET, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        struct store_request q;
        memset(&q, 0, sizeof q);
        store_col_text(s, 0, q.id, sizeof q.id);
        store_col_text(s, 1, q.batch_id, sizeof q.batch_id);
        q.line = sdb_column_int64(s, 2);
        store_col_text(s, 3, q.custom_id, sizeof q.custom_id);
        store_col_text(s, 4, q.model, sizeof q.model);
        const char *status = (const char *)sdb_column_text(s, 5);
        q.status = STORE_REQ__COUNT;
        for (int i = 0; status && i < STORE_REQ__COUNT; i++)
            if (strcmp(status, req_status_names[i]) == 0)
                q.status = (enum store_request_status)i;
        q.attempts = sdb_column_int64(s, 6);
        q.next_attempt_at = sdb_column_int64(s, 7);
        store_col_text(s, 8, q.lease_id, sizeof q.lease_id);
        q.prompt_tokens_est = sdb_column_int64(s, 9);
        q.max_tokens = sdb_column_int64(s, 10);
        if (q.status == STORE_REQ__COUNT)
            rc = ERR_CORRUPT;
        else
            *out = q;
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get request");
    }
    sdb_reset(s);
    return rc;
}

int store_request_count(struct store *st, const char *batch_id, int64_t *n, int64_t *n_distinct)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_COUNT, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        *n = sdb_column_int64(s, 0);
        *n_distinct = sdb_column_int64(s, 1);
    } else {
        rc = store_sqlerr(st, r, "count requests");
    }
    sdb_reset(s);
    return rc;
}

int store_files_expired(struct store *st, int64_t now, int max, struct store_file_ref **items, size_t *n)
{
    if (max < 1)
        return ERR_INVAL;
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_FILE_EXPIRED, &rc);
    if (!s || (rc = store_bind_int(st, s, 1, now)) || (rc = store_bind_int(st, s, 2, max)))
        return rc;
    struct store_file_ref *v = calloc((size_t)max, sizeof *v);
    if (!v) {
        sdb_reset(s);
        return ERR_NOMEM;
    }
    size_t cnt = 0;
    int r;
    while ((r = sdb_step(s)) == SDB_ROW && cnt < (size_t)max) {
        const char *id = (const char *)sdb_column_text(s, 0);
        const char *path = (const char *)sdb_column_text(s, 1);
        if (!id || !path || strlen(id) >= sizeof v[cnt].id || strlen(path) >= sizeof v[cnt].storage_path) {
            rc = ERR_CORRUPT;
            break;
        }
        snprintf(v[cnt].id, sizeof v[cnt].id, "%s", id);
        snprintf(v[cnt].storage_path, sizeof v[cnt].storage_path, "%s", path);
        cnt++;
    }
    if (!rc && r != SDB_DONE && r != SDB_ROW)
        rc = store_sqlerr(st, r, "list expired files");
    sdb_reset(s);
    if (rc) {
        free(v);
        return rc;
    }
    *items = v;
    *n = cnt;
    return 0;
}

int store_file_path_named(struct store *st, const char *storage_path, int *named)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_FILE_NAMED, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, storage_path)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW || r == SDB_DONE)
        *named = r == SDB_ROW;
    else
        rc = store_sqlerr(st, r, "find file by path");
    sdb_reset(s);
    return rc;
}

int store_file_exists(struct store *st, const char *id, int *exists)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_FILE_EXISTS, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW || r == SDB_DONE)
        *exists = r == SDB_ROW;
    else
        rc = store_sqlerr(st, r, "file exists");
    sdb_reset(s);
    return rc;
}

int store_file_purge(struct store *st, const char *id, int64_t now, int *deleted)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_FILE_PURGE, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, id)) && !(rc = store_bind_int(st, s, 2, now)))
        rc = store_step_done(st, s, "purge file");
    if (!rc && deleted)
        *deleted = sdb_changes(st->db) > 0;
    return store_w_end(st, rc);
}

int store_request_scan_rerun(struct store *st, const char *batch_id, enum store_rerun_only only,
                             int (*fn)(void *ctx, const struct store_rerun_row *row), void *ctx,
                             int64_t *n_rows)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_RERUN_SCAN, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, batch_id)) || (rc = store_bind_int(st, s, 2, (int64_t)only)))
        return rc;
    int r;
    int64_t cnt = 0;
    while ((r = sdb_step(s)) == SDB_ROW) {
        struct store_rerun_row row = {
            .line = sdb_column_int64(s, 0),
            .custom_id = (const char *)sdb_column_text(s, 1),
            .body = (const char *)sdb_column_text(s, 2),
        };
        if (!row.custom_id || !row.body) {
            rc = ERR_CORRUPT;
            break;
        }
        row.body_len = (size_t)sdb_column_bytes(s, 2);
        cnt++;
        if ((rc = fn(ctx, &row)))
            break;
    }
    if (!rc && r != SDB_DONE)
        rc = store_sqlerr(st, r, "scan requests for a rerun");
    sdb_reset(s);
    if (!rc)
        *n_rows = cnt;
    return rc;
}

/* ---- ingest support ------------------------------------------------------------------------- */

/* A new "req_" id of the common/id.h shape (48-bit ms + 80 bits, Crockford
 * base32), generated as ULIDs in monotonic mode: the 80 bits are drawn from
 * the CSPRNG when the millisecond changes and incremented within one. Ids
 * from one store therefore sort in insertion order (line order within a
 * batch), stay unguessable across milliseconds, and cost one random draw per
 * ms instead of one per row (ingest inserts ~10^5 rows/s). */
static int store_request_id(struct store *st, char out[ID_MAX])
{
    static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
    int64_t ms = clock_wall_ms();
    if (ms > st->rid_ms) {
        if (crypto_random(st->rid_rnd, sizeof st->rid_rnd))
            return ERR_CRYPTO;
        st->rid_rnd[0] &= 0x7f; /* headroom: increments never wrap */
        st->rid_ms = ms;
    } else {
        for (int i = 9; i >= 0 && ++st->rid_rnd[i] == 0; i--)
            ;
    }
    uint8_t bits[16];
    uint64_t t = (uint64_t)st->rid_ms & 0xffffffffffffull;
    for (int i = 0; i < 6; i++)
        bits[i] = (uint8_t)(t >> (40 - 8 * i));
    memcpy(bits + 6, st->rid_rnd, 10);
    memcpy(out, "req_", 4);
    /* 26 digits of 5 bits over 130 bits, the top two zero (as id.c) */
    unsigned __int128 v = 0;
    for (int i = 0; i < 16; i++)
        v = v << 8 | bits[i];
    for (int d = ID_BODY_LEN - 1; d >= 0; d--) {
        out[4 + d] = alphabet[(unsigned)(v & 31)];
        v >>= 5;
    }
    out[4 + ID_BODY_LEN] = '\0';
    return 0;
}

/* The first line of the batch's request holding custom_id: 0 or an ERR_*. */
static int request_dup_line(struct store *st, const char *batch_id, const char *custom_id, int64_t *line)
{
    int rc = 0;
    struct sdb_stmt *d = store_stmt(st, S_REQ_DUP_LINE, &rc);
    if (!d || (rc = store_bind_text(st, d, 1, batch_id)) || (rc = store_bind_text(st, d, 2, custom_id)))
        return rc;
    int r = sdb_step(d);
    if (r == SDB_ROW)
        *line = sdb_column_int64(d, 0);
    rc = r == SDB_ROW ? 0 : store_sqlerr(st, r == SDB_DONE ? SDB_INTERNAL : r, "dup line");
    sdb_reset(d);
    return rc;
}

static int request_dup(struct store *st, const char *batch_id, int64_t line, const char *custom_id,
                       store_dup_fn on_dup, void *ctx)
{
    int64_t first = 0;
    int rc = request_dup_line(st, batch_id, custom_id, &first);
    if (rc)
        return rc;
    return on_dup ? on_dup(ctx, line, custom_id, first) : ERR_EXISTS;
}

/* SQLite: one INSERT per row, at once. */
static int request_add_one(struct store *st, const struct store_request_new *q, const char *id,
                           store_dup_fn on_dup, void *ctx)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_INSERT, &rc);
    if (!s)
        return rc;
    int r;
    if ((r = sdb_bind_text(s, 1, id, -1)) ||
        (r = sdb_bind_text(s, 2, q->batch_id, -1)) ||
        (r = sdb_bind_text(s, 3, q->tenant_id, -1)) ||
        (r = sdb_bind_int64(s, 4, q->line)) ||
        (r = sdb_bind_text(s, 5, q->custom_id, -1)) ||
        (r = sdb_bind_text(s, 6, q->model, -1)) ||
        (r = sdb_bind_text(s, 7, q->body, (int)q->body_len)) ||
        (r = sdb_bind_int64(s, 8, q->prompt_tokens_est)) ||
        (r = sdb_bind_int64(s, 9, q->max_tokens)) || (r = sdb_bind_int64(s, 10, q->now)))
        return store_sqlerr(st, r, "bind request");
    if ((rc = store_step_done(st, s, "insert request")))
        return rc;
    if (sdb_changes(st->db) == 1)
        return 0;
    /* ON CONFLICT DO NOTHING: the custom_id is taken */
    return request_dup(st, q->batch_id, q->line, q->custom_id, on_dup, ctx);
}

/* PostgreSQL's ingest queue: the rows as array literals (store_arr_*), one
 * per column, plus each row's line and custom_id for its duplicate report.
 * A full queue is sent (sdb_pg_send) and the next one fills while the
 * server inserts it: the rows of the chunk in flight wait in `flight` for
 * its answer, read before the next chunk goes and by every flush. */
struct inq_rows {
    int64_t *lines;      /* (n) line of each row, ascending as added */
    char **cids;         /* (n) custom_id of each, owned */
    unsigned char *done; /* (n) scratch: 1 when the INSERT returned its line */
    size_t n, cap;
};

struct store_ingest_q {
    struct buf id, line, cid, model, body, pte, mt; /* array literals, open */
    struct inq_rows rows;   /* queued */
    struct inq_rows flight; /* sent, not yet answered (n > 0) */
    struct sdb_stmt *f_stmt; /* the INSERT in flight (store_stmt would reset it) */
    store_dup_fn f_on_dup;  /* the on_dup and batch of the rows in flight */
    void *f_ctx;
    char f_batch_id[ID_MAX];
    size_t body_bytes;
    int broken; /* a row could not be queued: the flush fails (ERR_NOMEM), nothing is written */
    char batch_id[ID_MAX], tenant_id[ID_MAX];
    int64_t now;
};

static void inq_rows_clear(struct inq_rows *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->cids[i]);
    r->n = 0;
}

static void inq_clear(struct store_ingest_q *q)
{
    inq_rows_clear(&q->rows);
    q->body_bytes = 0;
    q->broken = 0;
}

/* The chunk in flight is forgotten: its answer read and dropped. */
static void inq_flight_drop(struct store_ingest_q *q)
{
    if (q->flight.n) {
        sdb_clear_bindings(q->f_stmt);
        sdb_reset(q->f_stmt);
    }
    inq_rows_clear(&q->flight);
}

void store_ingest_q_drop(struct store *st)
{
    if (st->inq) {
        inq_flight_drop(st->inq);
        inq_clear(st->inq);
    }
}

void store_ingest_q_free(struct store *st)
{
    struct store_ingest_q *q = st->inq;
    if (!q)
        return;
    store_ingest_q_drop(st);
    buf_release(&q->id), buf_release(&q->line), buf_release(&q->cid), buf_release(&q->model);
    buf_release(&q->body), buf_release(&q->pte), buf_release(&q->mt);
    struct inq_rows *both[] = {&q->rows, &q->flight};
    for (size_t i = 0; i < 2; i++)
        free(both[i]->lines), free(both[i]->cids), free(both[i]->done);
    free(q);
    st->inq = NULL;
}

static int inq_open(struct store_ingest_q *q)
{
    struct buf *all[] = {&q->id, &q->line, &q->cid, &q->model, &q->body, &q->pte, &q->mt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (store_arr_begin(all[i]))
            return ERR_NOMEM;
    return 0;
}

static int inq_lines_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Send the queued rows as one INSERT (the flight must be empty); they move
 * to q->flight. On an error nothing is in flight and the rows are dropped. */
static int inq_send(struct store *st, struct store_ingest_q *q, store_dup_fn on_dup, void *ctx)
{
    int rc = 0, r;
    struct buf *all[] = {&q->id, &q->line, &q->cid, &q->model, &q->body, &q->pte, &q->mt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (store_arr_end(all[i]))
            rc = ERR_NOMEM;
    struct sdb_stmt *s = rc ? NULL : store_stmt(st, S_REQ_INSERT_MANY, &rc);
    if (s && !((rc = store_bind_text(st, s, 1, q->id.data)) || (rc = store_bind_text(st, s, 2, q->batch_id)) ||
               (rc = store_bind_text(st, s, 3, q->tenant_id)) || (rc = store_bind_text(st, s, 4, q->line.data)) ||
               (rc = store_bind_text(st, s, 5, q->cid.data)) || (rc = store_bind_text(st, s, 6, q->model.data)) ||
               (rc = store_bind_text(st, s, 7, q->body.data)) || (rc = store_bind_text(st, s, 8, q->pte.data)) ||
               (rc = store_bind_text(st, s, 9, q->mt.data)) || (rc = store_bind_int(st, s, 10, q->now)))) {
        if ((r = sdb_pg_send(s)) != SDB_OK) {
            rc = store_sqlerr(st, r, "insert requests");
            sdb_clear_bindings(s);
            sdb_reset(s);
        }
    }
    if (rc) {
        inq_clear(q);
        return rc;
    }
    struct inq_rows t = q->flight; /* empty: its arrays are the next queue's */
    q->flight = q->rows;
    q->rows = t;
    q->f_stmt = s;
    q->f_on_dup = on_dup;
    q->f_ctx = ctx;
    snprintf(q->f_batch_id, sizeof q->f_batch_id, "%s", q->batch_id);
    inq_clear(q);
    return 0;
}

/* Wait for the chunk in flight: the rows the INSERT did not return (their
 * custom_id was taken) go to its on_dup, in line order. */
static int inq_collect(struct store *st, struct store_ingest_q *q)
{
    struct inq_rows *f = &q->flight;
    if (!f->n)
        return 0;
    int rc = 0, r;
    struct sdb_stmt *s = q->f_stmt;
    memset(f->done, 0, f->n);
    while ((r = sdb_step(s)) == SDB_ROW) {
        int64_t ln = sdb_column_int64(s, 0);
        int64_t *at = bsearch(&ln, f->lines, f->n, sizeof *f->lines, inq_lines_cmp);
        if (at)
            f->done[at - f->lines] = 1;
    }
    if (r != SDB_DONE)
        rc = store_sqlerr(st, r, "insert requests");
    sdb_clear_bindings(s);
    sdb_reset(s);
    for (size_t i = 0; !rc && i < f->n; i++)
        if (!f->done[i])
            rc = request_dup(st, q->f_batch_id, f->lines[i], f->cids[i], q->f_on_dup, q->f_ctx);
    inq_rows_clear(f);
    return rc;
}

int store_request_flush(struct store *st, store_dup_fn on_dup, void *ctx)
{
    struct store_ingest_q *q = st->inq;
    if (!q)
        return 0;
    if (q->broken) {
        store_ingest_q_drop(st);
        return ERR_NOMEM;
    }
    int rc = inq_collect(st, q);
    if (!rc && q->rows.n && !(rc = inq_send(st, q, on_dup, ctx)))
        rc = inq_collect(st, q);
    if (rc)
        store_ingest_q_drop(st);
    return rc;
}

/* PostgreSQL: append the row to the queue (sent when full, written by
 * store_request_flush at the latest). */
static int request_queue(struct store *st, const struct store_request_new *r, const char *id,
                         store_dup_fn on_dup, void *ctx)
{
    struct store_ingest_q *q = st->inq;
    int rc;
    if (q && q->rows.n) {
        int full = q->rows.n >= STORE_INGEST_Q_ROWS || q->body_bytes + r->body_len > STORE_INGEST_Q_BYTES;
        if (full && !q->broken) { /* the last chunk's answer, then this one goes while the next fills */
            if ((rc = inq_collect(st, q)) || (rc = inq_send(st, q, on_dup, ctx))) {
                store_ingest_q_drop(st);
                return rc;
            }
        } else if ((full || strcmp(q->batch_id, r->batch_id) || strcmp(q->tenant_id, r->tenant_id) ||
                    q->now != r->now) && (rc = store_request_flush(st, on_dup, ctx))) {
            return rc;
        }
    }
    if (!q) {
        if (!(q = calloc(1, sizeof *q)))
            return ERR_NOMEM;
        /* bounded by the queue's caps (rows, body bytes) before the next row */
        struct buf *all[] = {&q->id, &q->line, &q->cid, &q->model, &q->body, &q->pte, &q->mt};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            buf_init(all[i], SIZE_MAX);
        st->inq = q;
    }
    struct inq_rows *w = &q->rows;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        int64_t *l = realloc(w->lines, cap * sizeof *l);
        if (l)
            w->lines = l;
        char **c = l ? realloc(w->cids, cap * sizeof *c) : NULL;
        if (c)
            w->cids = c;
        unsigned char *d = c ? realloc(w->done, cap) : NULL;
        if (!d)
            return ERR_NOMEM;
        w->done = d;
        w->cap = cap;
    }
    if (w->n == 0) {
        if ((rc = inq_open(q)))
            return rc;
        snprintf(q->batch_id, sizeof q->batch_id, "%s", r->batch_id);
        snprintf(q->tenant_id, sizeof q->tenant_id, "%s", r->tenant_id);
        q->now = r->now;
    }
    char *cid = strdup(r->custom_id);
    if (!cid || store_arr_text(&q->id, id) || store_arr_int(&q->line, r->line) ||
        store_arr_text(&q->cid, r->custom_id) || store_arr_text(&q->model, r->model) ||
        store_arr_textn(&q->body, r->body, r->body_len) || store_arr_int(&q->pte, r->prompt_tokens_est) ||
        store_arr_int(&q->mt, r->max_tokens)) {
        free(cid);
        inq_clear(q);
        q->broken = 1; /* the literals are out of step: the transaction must not commit */
        return ERR_NOMEM;
    }
    w->lines[w->n] = r->line;
    w->cids[w->n] = cid;
    w->n++;
    q->body_bytes += r->body_len;
    return 0;
}

int store_request_add(struct store *st, const struct store_request_new *q, store_dup_fn on_dup, void *ctx)
{
    if (st->depth == 0)
        return ERR_BADSTATE;
    char id[ID_MAX];
    int rc = store_request_id(st, id);
    if (rc)
        return rc;
    return st->pg ? request_queue(st, q, id, on_dup, ctx) : request_add_one(st, q, id, on_dup, ctx);
}

int store_ingest_checkpoint(struct store *st, const char *batch_id, int64_t line,
                            int64_t n_requests, const char *errors, const char *model)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_INGEST_CHECKPOINT, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, batch_id)) && !(rc = store_bind_int(st, s, 2, line)) &&
        !(rc = store_bind_int(st, s, 3, n_requests)) && !(rc = store_bind_text(st, s, 4, errors)) &&
        !(rc = store_bind_text(st, s, 5, model)) &&
        !(rc = store_step_done(st, s, "ingest checkpoint")) && sdb_changes(st->db) == 0)
        rc = batch_why_unchanged(st, batch_id);
    return store_w_end(st, rc);
}

int store_ingest_fence(struct store *st, const char *batch_id, int64_t line)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_INGEST_FENCE, &rc);
    if (!s)
        return rc;
    if ((rc = store_bind_text(st, s, 1, batch_id)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        int64_t at = sdb_column_int64(s, 0);
        if (at != line) {
            log_warn("store: ingest of %s moved on elsewhere (checkpoint %lld, this ingester's %lld): "
                     "this ingester stops",
                     batch_id, (long long)at, (long long)line);
            rc = ERR_BADSTATE;
        }
    } else if (r == SDB_DONE) {
        rc = ERR_BADSTATE;
    } else {
        rc = store_sqlerr(st, r, "ingest fence");
    }
    sdb_reset(s);
    return rc;
}

int store_ingest_succeed(struct store *st, const char *batch_id, const char *model, int64_t now)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_INGEST_TOTAL, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, batch_id)) && !(rc = store_bind_text(st, s, 2, model)) &&
        !(rc = store_step_done(st, s, "ingest total"))) {
        if (sdb_changes(st->db) == 0)
            rc = batch_why_unchanged(st, batch_id);
        else
            rc = store_batch_transition(st, batch_id, STORE_BATCH_VALIDATING,
                                        STORE_BATCH_IN_PROGRESS, now);
    }
    if (!rc && model && strcmp(model, STORE_MODEL_MIXED) == 0 && (s = store_stmt(st, S_BATCH_MODELS_FILL, &rc)) &&
        !(rc = store_bind_text(st, s, 1, batch_id)))
        rc = store_step_done(st, s, "batch models");
    return store_w_end(st, rc);
}

static int delete_requests(struct store *st, const char *batch_id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_REQ_DELETE_BATCH, &rc);
    if (s && !(rc = store_bind_text(st, s, 1, batch_id)))
        rc = store_step_done(st, s, "delete requests");
    return rc;
}

int store_ingest_fail(struct store *st, const char *batch_id, const char *errors, int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    rc = store_batch_transition(st, batch_id, STORE_BATCH_VALIDATING, STORE_BATCH_FAILED, now);
    if (!rc)
        rc = delete_requests(st, batch_id);
    if (!rc) {
        struct sdb_stmt *s = store_stmt(st, S_INGEST_ERRORS, &rc);
        if (s && !(rc = store_bind_text(st, s, 1, batch_id)) && !(rc = store_bind_text(st, s, 2, errors)))
            rc = store_step_done(st, s, "ingest errors");
    }
    return store_w_end(st, rc);
}

int store_ingest_cancelled(struct store *st, const char *batch_id, int64_t now)
{
    int rc = store_w_begin(st);
    if (rc)
        return rc;
    rc = store_batch_transition(st, batch_id, STORE_BATCH_CANCELLING, STORE_BATCH_CANCELLED, now);
    if (!rc)
        rc = delete_requests(st, batch_id);
    return store_w_end(st, rc);
}
