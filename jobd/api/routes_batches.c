/*
 * routes_batches.c - the Batch API: POST /v1/batches, GET /v1/batches,
 * GET /v1/batches/{id} (ETag / If-None-Match / Retry-After),
 * POST /v1/batches/{id}/cancel, and the native one-call submission
 * POST /v1/jobs (the JSONL is the request body).
 *
 * A new batch is committed in status validating (with its idempotency
 * record in the same transaction) and, once answered, queued for the
 * ingest thread; if jobd dies before the queueing, the ingest thread's
 * startup scan picks the batch up.
 *
 * Budgets: when the tenant has a limit, the submission is estimated and
 * checked before the batch row is inserted, and the batch gets its
 * reservation in the same transaction (routes_budget.c); a refusal (429)
 * rolls everything back (for /v1/jobs also the file row and its bytes).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/api/app_int.h"
#include "jobd/intake/ingest.h"
#include "jobd/work/lease.h"
#include "jobd/intake/upload.h"

struct batch_in {
    char endpoint[32];
    char input_file_id[ID_MAX];
    int64_t window_s;
    char *metadata; /* JSON object text or NULL */
    /* /v1/jobs */
    struct upload *up;
    char filename[256];
};

static void batch_in_free(void *p)
{
    struct batch_in *bi = p;
    if (!bi)
        return;
    upload_free(bi->up);
    free(bi->metadata);
    free(bi);
}

static int endpoint_ok(const char *e)
{
    return strcmp(e, "/v1/chat/completions") == 0 || strcmp(e, "/v1/completions") == 0;
}

static int retry_hint(enum store_batch_status s)
{
    switch (s) {
    case STORE_BATCH_VALIDATING:
        return 1;
    case STORE_BATCH_IN_PROGRESS:
    case STORE_BATCH_FINALIZING:
    case STORE_BATCH_CANCELLING:
        return 5;
    default:
        return 0;
    }
}

/* The effect shared by POST /v1/batches and /v1/jobs, inside the caller's
 * transaction: create the batch and render it. */
static int create_batch_tx(struct op *op, struct store *st, const struct batch_in *bi)
{
    struct store_batch_new nb = {bi->endpoint, bi->input_file_id, bi->window_s, bi->metadata};
    struct store_batch b;
    int rc = store_batch_create(st, op->tenant, &nb, clock_wall_s(), &b);
    if (rc == ERR_NOTFOUND) {
        op_error(op, 404, NULL, "not_found", "input_file_id", "No such File object: '%s'.",
                 bi->input_file_id);
        return rc;
    }
    if (rc == ERR_INVAL) {
        op_error(op, 400, NULL, "invalid_value", "input_file_id",
                 "File '%s' cannot be a batch input: its purpose must be 'batch'.", bi->input_file_id);
        return rc;
    }
    if (rc) {
        op_internal(op, rc, "create batch");
        return rc;
    }
    buf_reset(&op->out);
    rc = api_batch_json(&op->out, &b);
    snprintf(op->push_batch, sizeof op->push_batch, "%s", b.id);
    store_batch_release(&b);
    if (rc) {
        op_internal(op, rc, "render batch");
        return rc;
    }
    op->status = 200;
    return 0;
}

/* ---- POST /v1/batches -------------------------------------------------------------------- */

static void batches_create_fn(struct op *op, struct store *st)
{
    struct batch_in *bi = op->in;
    if (op_idem_begin(op, st))
        return;
    struct app_admit adm;
    int rc = app_admit_prepare(op, st, NULL, bi->input_file_id, bi->endpoint, &adm);
    if (rc) {
        op_idem_release(op, st);
        op_internal(op, rc, "budget estimate");
        return;
    }
    rc = store_tx_begin(st);
    if (rc) {
        op_idem_release(op, st);
        op_internal(op, rc, "begin");
        return;
    }
    if (!(rc = app_admit_check(op, st, &adm)) && !(rc = create_batch_tx(op, st, bi)) &&
        !(rc = app_admit_reserve(op, st, &adm, op->push_batch)) && !(rc = op_idem_complete(op, st)) &&
        !(rc = store_tx_commit(st)))
        return;
    store_tx_rollback(st);
    op->push_batch[0] = '\0';
    op_idem_release(op, st);
    if (op->status == 200)
        op_internal(op, rc, "create batch");
}

/* Read options shared by both creation routes from a JSON object. Answers
 * 400 and returns -1 on a bad value. */
static int parse_metadata(struct http_req *req, json_t *md, struct batch_in *bi)
{
    if (!md || json_is_null(md))
        return 0;
    char msg[200];
    if (api_metadata_check(md, msg, sizeof msg)) {
        http_respond_error(req, 400, NULL, "invalid_value", "metadata", "%s", msg);
        return -1;
    }
    bi->metadata = json_dumps(md, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!bi->metadata) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return -1;
    }
    return 0;
}

static int parse_window(struct http_req *req, const char *w, struct batch_in *bi)
{
    if (!w) {
        bi->window_s = 86400;
        return 0;
    }
    struct rctx *rc = http_req_data(req);
    if (api_window_parse(w, rc->app->cfg.window_min_s, &bi->window_s)) {
        http_respond_error(req, 400, NULL, "invalid_value", "completion_window",
                           "Invalid completion_window '%s': use a duration from 1m to 30d, "
                           "e.g. \"24h\" (the default), \"1h\" or \"7d\".", w);
        return -1;
    }
    return 0;
}

static void batches_create(struct http_req *req, void *arg)
{
    const char *ct = http_req_header(req, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16) != 0) {
        http_respond_error(req, 415, NULL, "unsupported_media_type", NULL,
                           "Send the request body as application/json.");
        return;
    }
    size_t len;
    const char *body = http_req_body(req, &len);
    json_t *root = NULL;
    struct js_error je;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    if (js_parse(body, len, &lim, &root, &je) || !json_is_object(root)) {
        json_decref(root);
        http_respond_error(req, 400, NULL, "invalid_json", NULL,
                           "We could not parse the JSON body of your request (expected an object).");
        return;
    }
    struct batch_in *bi = calloc(1, sizeof *bi);
    const char *fid = NULL, *ep = NULL, *win = NULL;
    int r;
    if (!bi) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        goto out;
    }
    if ((r = js_get_str(root, "input_file_id", &fid)) || !*fid || strlen(fid) >= ID_MAX) {
        http_respond_error(req, 400, NULL, r == ERR_NOTFOUND ? "missing_required_parameter" : "invalid_value",
                           "input_file_id", r == ERR_NOTFOUND ? "Missing required parameter: 'input_file_id'."
                                                              : "Invalid 'input_file_id': expected a file id.");
        goto out;
    }
    if ((r = js_get_str(root, "endpoint", &ep)) || !endpoint_ok(ep)) {
        http_respond_error(req, 400, NULL, r == ERR_NOTFOUND ? "missing_required_parameter" : "invalid_value",
                           "endpoint", r == ERR_NOTFOUND ? "Missing required parameter: 'endpoint'."
                                                         : "Invalid 'endpoint': jobd supports "
                                                           "'/v1/chat/completions' and '/v1/completions'.");
        goto out;
    }
    if ((r = js_get_str(root, "completion_window", &win)) && r != ERR_NOTFOUND) {
        http_respond_error(req, 400, NULL, "invalid_type", "completion_window",
                           "completion_window must be a string such as \"24h\".");
        goto out;
    }
    if (parse_window(req, r ? NULL : win, bi) || parse_metadata(req, json_object_get(root, "metadata"), bi))
        goto out;
    snprintf(bi->endpoint, sizeof bi->endpoint, "%s", ep);
    snprintf(bi->input_file_id, sizeof bi->input_file_id, "%s", fid);
    struct op *op = app_op_new(req, batches_create_fn);
    if (op) {
        op->in = bi;
        op->in_free = batch_in_free;
        bi = NULL;
        store_idem_fingerprint("POST", "/v1/batches", body, len, op->fp);
    }
    app_op_run(req, op);
out:
    batch_in_free(bi);
    json_decref(root);
}

/* The batch JSON with the "waiting_for_model" extension (served: the model
 * names live workers serve, looked up once per request; a failed lookup
 * just leaves the field out). */
struct served {
    int looked_up, ok;
    struct store_model_served *items;
    size_t n;
};

static int batch_json_served(struct op *op, struct store *st, struct buf *out, const struct store_batch *b,
                             struct served *sv)
{
    if (b->status == STORE_BATCH_IN_PROGRESS && !sv->looked_up) {
        sv->looked_up = 1;
        sv->ok = lease_models_served(st, &op->app->cfg.lease, lease_clock_s(), &sv->items, &sv->n) == 0;
    }
    if (b->status != STORE_BATCH_IN_PROGRESS || !sv->ok)
        return api_batch_json(out, b);
    return api_batch_json_ext(out, b, sv->items, sv->n);
}

/* ---- GET /v1/batches/{id} ------------------------------------------------------------------ */

static void batch_not_found(struct op *op)
{
    op_error(op, 404, NULL, "not_found", "batch_id", "No such Batch object: '%s'.", op->id);
}

static int etag_matches(const char *inm, const char *etag)
{
    if (!inm[0])
        return 0;
    if (strcmp(inm, "*") == 0)
        return 1;
    /* a list of entity tags; compare each, ignoring a weak W/ prefix */
    const char *bare = etag;
    size_t n = strlen(bare);
    for (const char *p = inm; (p = strstr(p, bare)); p += n) {
        char after = p[n];
        if (after == '\0' || after == ',' || after == ' ')
            return 1;
    }
    return 0;
}

static void batches_get_fn(struct op *op, struct store *st)
{
    struct store_batch b;
    int rc = store_batch_get(st, op->tenant, op->id, &b);
    if (rc == ERR_NOTFOUND) {
        batch_not_found(op);
        return;
    }
    if (rc) {
        op_internal(op, rc, "get batch");
        return;
    }
    struct served sv = {0};
    rc = batch_json_served(op, st, &op->out, &b, &sv);
    free(sv.items);
    op->retry_after = retry_hint(b.status);
    store_batch_release(&b);
    if (rc) {
        op_internal(op, rc, "render batch");
        return;
    }
    uint8_t d[SHA256_LEN];
    char hex[2 * SHA256_LEN + 1];
    sha256(op->out.data, op->out.len, d);
    hex_encode(d, 16, hex);
    snprintf(op->etag, sizeof op->etag, "\"%s\"", hex);
    if (etag_matches(op->if_none_match, op->etag)) {
        buf_reset(&op->out);
        op->status = 304;
        return;
    }
    op->status = 200;
}

static int copy_batch_id(struct http_req *req, struct op *op)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= sizeof op->id) {
        http_respond_error(req, 404, NULL, "not_found", "batch_id", "No such Batch object.");
        return -1;
    }
    snprintf(op->id, sizeof op->id, "%s", id);
    return 0;
}

static void batches_get(struct http_req *req, void *arg)
{
    struct op *op = app_op_new(req, batches_get_fn);
    if (op && copy_batch_id(req, op)) {
        app_op_free(op);
        return;
    }
    const char *inm = op ? http_req_header(req, "If-None-Match") : NULL;
    if (inm)
        snprintf(op->if_none_match, sizeof op->if_none_match, "%s", inm);
    app_op_run(req, op);
}

/* ---- GET /v1/batches ------------------------------------------------------------------------ */

static void batches_list_fn(struct op *op, struct store *st)
{
    struct store_batch *items = NULL;
    size_t n = 0;
    int has_more = 0;
    int rc = store_batch_list(st, op->tenant, op->has_after ? op->after_id : NULL, op->limit, &items, &n,
                              &has_more);
    if (rc == ERR_NOTFOUND) {
        op_error(op, 400, NULL, "invalid_value", "after", "No batch '%s' to list after.", op->after_id);
        return;
    }
    if (rc) {
        op_internal(op, rc, "list batches");
        return;
    }
    struct buf *b = &op->out;
    struct served sv = {0};
    buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(b, ',');
        rc = batch_json_served(op, st, b, &items[i], &sv);
    }
    free(sv.items);
    if (!rc)
        rc = buf_printf(b, "],\"first_id\":%s%s%s,\"last_id\":%s%s%s,\"has_more\":%s}", n ? "\"" : "",
                        n ? items[0].id : "null", n ? "\"" : "", n ? "\"" : "",
                        n ? items[n - 1].id : "null", n ? "\"" : "", has_more ? "true" : "false");
    store_batch_list_free(items, n);
    if (rc)
        op_internal(op, rc, "list batches");
    else
        op->status = 200;
}

static void batches_list(struct http_req *req, void *arg)
{
    int64_t limit;
    if (app_query_int(req, "limit", 1, 100, 20, &limit)) {
        http_respond_error(req, 400, NULL, "invalid_value", "limit", "limit must be an integer from 1 to 100.");
        return;
    }
    const char *after = http_req_query(req, "after");
    if (after && strlen(after) >= ID_MAX) {
        http_respond_error(req, 400, NULL, "invalid_value", "after", "Invalid 'after'.");
        return;
    }
    struct op *op = app_op_new(req, batches_list_fn);
    if (op) {
        op->limit = (int)limit;
        if (after && *after) {
            op->has_after = 1;
            snprintf(op->after_id, sizeof op->after_id, "%s", after);
        }
    }
    app_op_run(req, op);
}

/* ---- POST /v1/batches/{id}/cancel ----------------------------------------------------------- */

static void batches_cancel_fn(struct op *op, struct store *st)
{
    if (op_idem_begin(op, st))
        return;
    int rc = store_tx_begin(st);
    if (rc) {
        op_idem_release(op, st);
        op_internal(op, rc, "begin");
        return;
    }
    struct store_batch b;
    rc = store_batch_cancel(st, op->tenant, op->id, clock_wall_s(), &b);
    if (!rc) {
        rc = api_batch_json(&op->out, &b);
        store_batch_release(&b);
        op->status = 200;
        if (!rc && !(rc = op_idem_complete(op, st)) && !(rc = store_tx_commit(st))) {
            app_sweeper_wake(op->app); /* it ends queued requests and finishes the batch */
            return;
        }
        op->status = 0;
    }
    store_tx_rollback(st);
    op_idem_release(op, st);
    if (rc == ERR_NOTFOUND) {
        batch_not_found(op);
    } else if (rc == ERR_BADSTATE) {
        const char *s = "?";
        if (store_batch_get(st, op->tenant, op->id, &b) == 0) {
            s = store_batch_status_name(b.status);
            store_batch_release(&b);
        }
        op_error(op, 400, NULL, "invalid_state", NULL, "Cannot cancel a batch with status '%s'.", s);
    } else {
        op_internal(op, rc, "cancel batch");
    }
}

static void batches_cancel(struct http_req *req, void *arg)
{
    struct op *op = app_op_new(req, batches_cancel_fn);
    if (op && copy_batch_id(req, op)) {
        app_op_free(op);
        return;
    }
    if (op) {
        size_t len;
        const char *body = http_req_body(req, &len);
        store_idem_fingerprint("POST", http_req_path(req), body, len, op->fp);
    }
    app_op_run(req, op);
}

/* ---- POST /v1/jobs ------------------------------------------------------------------------------ */

static void jobs_fn(struct op *op, struct store *st)
{
    struct batch_in *bi = op->in;
    if (op_idem_begin(op, st))
        return;
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    int rc = id_new("file-", sf.id, sizeof sf.id);
    char final[STORE_PATH_MAX] = "";
    if (!rc) {
        snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", op->tenant);
        snprintf(sf.purpose, sizeof sf.purpose, "batch");
        snprintf(sf.filename, sizeof sf.filename, "%s", bi->filename);
        sf.bytes = (int64_t)upload_bytes(bi->up);
        snprintf(sf.sha256, sizeof sf.sha256, "%s", upload_sha256_hex(bi->up));
        store_path_upload_rel(sf.id, sf.storage_path);
        snprintf(sf.encoding, sizeof sf.encoding, "zstd");
        sf.created_at = clock_wall_s();
        if (!(rc = store_path_abs(op->app->cfg.data_dir, sf.storage_path, final, sizeof final)))
            rc = upload_commit(bi->up, final);
    }
    if (rc) {
        op_idem_release(op, st);
        op_internal(op, rc, "store upload");
        return;
    }
    snprintf(bi->input_file_id, sizeof bi->input_file_id, "%s", sf.id);
    struct app_admit adm;
    if ((rc = app_admit_prepare(op, st, final, NULL, bi->endpoint, &adm)) == 0 &&
        (rc = store_tx_begin(st)) == 0) {
        if (!(rc = app_admit_check(op, st, &adm)) && !(rc = store_file_create(st, &sf)) &&
            !(rc = create_batch_tx(op, st, bi)) && !(rc = app_admit_reserve(op, st, &adm, op->push_batch)) &&
            !(rc = op_idem_complete(op, st)))
            rc = store_tx_commit(st);
        else
            store_tx_rollback(st);
    }
    if (rc) {
        unlink(final);
        op->push_batch[0] = '\0';
        op_idem_release(op, st);
        if (op->status != 429)
            op_internal(op, rc, "create job");
    }
}

static int jobs_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct batch_in *bi = arg;
    int rc = upload_write(bi->up, data, len);
    if (!rc)
        return 0;
    if (rc == ERR_TOOBIG)
        http_respond_error(req, 413, NULL, "file_too_large", NULL,
                           "The JSONL body is larger than the limit of %llu bytes (decoded).",
                           (unsigned long long)((struct rctx *)http_req_data(req))->app->cfg.limits.max_file_bytes);
    else if (rc == ERR_CORRUPT)
        http_respond_error(req, 400, NULL, "invalid_encoding", NULL,
                           "The request body is not valid data for its Content-Encoding.");
    else
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the body: %s.", err_msg(rc));
    return rc;
}

/* An option from the query string (first) or a header. */
static const char *opt(struct http_req *req, const char *q1, const char *q2, const char *header)
{
    const char *v = http_req_query(req, q1);
    if (!v && q2)
        v = http_req_query(req, q2);
    if (!v && header)
        v = http_req_header(req, header);
    return v;
}

/* metadata: ?metadata={"k":"v"} or Jobd-Metadata: {...}, and/or ?metadata[k]=v */
static int jobs_metadata(struct http_req *req, struct batch_in *bi)
{
    const char *text = opt(req, "metadata", NULL, "Jobd-Metadata");
    json_t *md = NULL;
    if (text) {
        struct js_limits lim = {16384, 4, 0};
        if (js_parse(text, strlen(text), &lim, &md, NULL) || !json_is_object(md)) {
            json_decref(md);
            http_respond_error(req, 400, NULL, "invalid_value", "metadata",
                               "metadata must be a JSON object of string values.");
            return -1;
        }
    }
    size_t nq = http_req_query_count(req);
    for (size_t i = 0; i < nq; i++) {
        const char *name, *value;
        if (http_req_query_at(req, i, &name, &value))
            continue;
        size_t nl = strlen(name);
        if (nl > 10 && strncmp(name, "metadata[", 9) == 0 && name[nl - 1] == ']') {
            if (!md && !(md = json_object())) {
                http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
                return -1;
            }
            char key[STORE_METADATA_MAX_KEY + 2];
            size_t kl = nl - 10;
            if (kl > STORE_METADATA_MAX_KEY)
                kl = STORE_METADATA_MAX_KEY + 1; /* caught by the check */
            memcpy(key, name + 9, kl);
            key[kl] = '\0';
            json_object_set_new(md, key, json_string(value));
        }
    }
    int rc = parse_metadata(req, md, bi);
    json_decref(md);
    return rc;
}

static void jobs_head(struct http_req *req, void *arg)
{
    struct app *app = arg;
    struct rctx *rc = app_on_head_auth(req, app);
    if (!rc)
        return;
    enum upload_encoding enc;
    if (upload_encoding_parse(http_req_header(req, "Content-Encoding"), &enc)) {
        http_respond_error(req, 415, NULL, "unsupported_encoding", NULL,
                           "Unsupported Content-Encoding: use identity, zstd or gzip.");
        return;
    }
    struct batch_in *bi = calloc(1, sizeof *bi);
    if (!bi) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    rc->route_data = bi;
    rc->route_free = batch_in_free;
    const char *ep = opt(req, "endpoint", NULL, "Jobd-Endpoint");
    if (!ep)
        ep = "/v1/chat/completions";
    if (!endpoint_ok(ep)) {
        http_respond_error(req, 400, NULL, "invalid_value", "endpoint",
                           "Invalid endpoint '%s': jobd supports '/v1/chat/completions' and "
                           "'/v1/completions'.", ep);
        return;
    }
    snprintf(bi->endpoint, sizeof bi->endpoint, "%s", ep);
    if (parse_window(req, opt(req, "completion_window", "window", "Jobd-Completion-Window"), bi) ||
        jobs_metadata(req, bi))
        return;
    const char *fn = opt(req, "filename", NULL, "Jobd-Filename");
    if (fn && (strlen(fn) >= sizeof bi->filename || !ingest_utf8_valid(fn, strlen(fn)))) {
        http_respond_error(req, 400, NULL, "invalid_value", "filename",
                           "The filename must be valid UTF-8 of at most %zu bytes.", sizeof bi->filename - 1);
        return;
    }
    snprintf(bi->filename, sizeof bi->filename, "%s", fn && *fn ? fn : "jobs.jsonl");
    int r = upload_new(app->tmp_dir, enc, app->cfg.limits.max_file_bytes, app->cfg.zstd_level, &bi->up);
    if (r) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the body: %s.", err_msg(r));
        return;
    }
    http_req_body_stream(req, app->cfg.max_upload_bytes, jobs_body, bi);
}

static void jobs_create(struct http_req *req, void *arg)
{
    struct rctx *rc = http_req_data(req);
    struct batch_in *bi = rc->route_data;
    int r = upload_finish(bi->up);
    if (r == ERR_CORRUPT) {
        http_respond_error(req, 400, NULL, "invalid_encoding", NULL,
                           "The request body ends in the middle of a compressed stream.");
        return;
    }
    if (r) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the body: %s.", err_msg(r));
        return;
    }
    char win[32];
    api_window_format(bi->window_s, win, sizeof win);
    struct op *op = app_op_new(req, jobs_fn);
    if (op) {
        op->in = bi; /* owned by the rctx, which outlives the op */
        struct buf fp;
        buf_init(&fp, 4096);
        buf_printf(&fp, "%s\n%s\n%s\n%s\n%s", bi->endpoint, win, bi->metadata ? bi->metadata : "",
                   bi->filename, upload_sha256_hex(bi->up));
        r = store_idem_fingerprint("POST", "/v1/jobs", fp.data, fp.len, op->fp);
        buf_release(&fp);
        if (r) {
            app_op_free(op);
            op = NULL;
        }
    }
    app_op_run(req, op);
}

int routes_batches_add(struct app *app)
{
    struct http_server *s = app->srv;
    int rc;
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches", batches_create, app_head_auth,
                                                        app->cfg.max_json_bytes, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches", batches_list, app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches/{id}", batches_get, app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches/{id}/cancel", batches_cancel,
                                                        app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/jobs", jobs_create, jobs_head, 0, app})))
        return rc;
    return 0;
}
