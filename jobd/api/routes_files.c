/*
 * routes_files.c - the Files API: POST /v1/files (multipart upload, streamed
 * to disk zstd-compressed), GET /v1/files, GET/DELETE /v1/files/{id},
 * GET /v1/files/{id}/content.
 *
 * Upload: the body is streamed (never buffered): the multipart parser
 * (jobd/http/multipart.h) hands the "file" part to an upload pipeline
 * (jobd/intake/upload.h: SHA-256 + zstd into <data>/tmp), "purpose" is collected,
 * other fields are skipped (at most 64 KiB). When the body is complete the
 * database work runs on the thread pool: reserve the idempotency key, sync
 * and rename the file to <data>/files/<id>.jsonl.zst, insert the row and
 * store the response in one transaction.
 *
 * Download: the stored zstd stream is sent as is to a client that accepts
 * zstd (Content-Encoding: zstd); otherwise it is decompressed on the
 * thread pool in 256 KiB chunks, each written as one HTTP chunk, and the
 * next chunk is produced only once the socket's send queue is under 1 MiB
 * (backpressure), so memory stays bounded whatever the client's speed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/zst.h"
#include "jobd/api/app_int.h"
#include "jobd/intake/ingest.h"
#include "jobd/http/multipart.h"
#include "jobd/intake/upload.h"

#define OTHER_FIELDS_MAX (64u * 1024)

/* ---- POST /v1/files -------------------------------------------------------------- */

struct fup {
    struct app *app;
    struct http_req *req;
    struct mp_parser mp;
    struct upload *up;
    int part;                 /* 0 none, 1 file, 2 purpose, 3 other */
    int have_file, have_purpose;
    char purpose[32];
    size_t purpose_len;
    char filename[256];
    int bad_filename;         /* the file part's name is not UTF-8 */
    uint64_t other_bytes;
};

static void fup_free(void *p)
{
    struct fup *f = p;
    if (!f)
        return;
    upload_free(f->up);
    free(f);
}

static int fup_part_begin(void *ctx, const char *name, const char *filename)
{
    struct fup *f = ctx;
    if (strcmp(name, "file") == 0) {
        if (f->have_file || f->up)
            return ERR_PARSE;
        if (filename && !ingest_utf8_valid(filename, strlen(filename))) {
            f->bad_filename = 1; /* answered by fup_body */
            return ERR_PARSE;
        }
        int rc = upload_new(f->app->tmp_dir, UPLOAD_IDENTITY, f->app->cfg.limits.max_file_bytes,
                            f->app->cfg.zstd_level, &f->up);
        if (rc)
            return rc;
        snprintf(f->filename, sizeof f->filename, "%s", filename && *filename ? filename : "upload.jsonl");
        f->part = 1;
    } else if (strcmp(name, "purpose") == 0) {
        f->part = 2;
        f->purpose_len = 0;
        f->have_purpose = 1;
    } else {
        f->part = 3;
    }
    return 0;
}

static int fup_part_data(void *ctx, const char *d, size_t n)
{
    struct fup *f = ctx;
    switch (f->part) {
    case 1:
        return upload_write(f->up, d, n);
    case 2:
        if (f->purpose_len + n >= sizeof f->purpose) {
            f->purpose_len = sizeof f->purpose; /* marks "too long" */
            return 0;
        }
        memcpy(f->purpose + f->purpose_len, d, n);
        f->purpose_len += n;
        f->purpose[f->purpose_len] = '\0';
        return 0;
    default:
        f->other_bytes += n;
        return f->other_bytes > OTHER_FIELDS_MAX ? ERR_TOOBIG : 0;
    }
}

static int fup_part_end(void *ctx)
{
    struct fup *f = ctx;
    if (f->part == 1)
        f->have_file = 1;
    f->part = 0;
    return 0;
}

static const struct mp_callbacks fup_cb = {fup_part_begin, fup_part_data, fup_part_end};

static int fup_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct fup *f = arg;
    int rc = mp_feed(&f->mp, data, len);
    if (!rc)
        return 0;
    if (f->bad_filename)
        http_respond_error(req, 400, NULL, "invalid_value", "file", "The file name must be valid UTF-8.");
    else if (rc == ERR_TOOBIG && f->part == 1)
        http_respond_error(req, 413, NULL, "file_too_large", "file",
                           "The file is larger than the limit of %llu bytes.",
                           (unsigned long long)f->app->cfg.limits.max_file_bytes);
    else if (rc == ERR_PARSE || rc == ERR_TOOBIG)
        http_respond_error(req, 400, NULL, "invalid_multipart", NULL,
                           "The multipart/form-data body is malformed (%s).", err_msg(rc));
    else
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the upload: %s.", err_msg(rc));
    return rc;
}

static void files_create_head(struct http_req *req, void *arg)
{
    struct app *app = arg;
    struct rctx *rc = app_on_head_auth(req, app);
    if (!rc)
        return;
    char boundary[MP_MAX_BOUNDARY + 1];
    int r = mp_boundary_from_content_type(http_req_header(req, "Content-Type"), boundary, sizeof boundary);
    if (r == ERR_UNSUPPORTED) {
        http_respond_error(req, 415, NULL, "unsupported_media_type", NULL,
                           "Upload files as multipart/form-data with fields 'file' and 'purpose'.");
        return;
    }
    if (r) {
        http_respond_error(req, 400, NULL, "invalid_multipart", NULL,
                           "The multipart/form-data boundary is missing or invalid.");
        return;
    }
    struct fup *f = calloc(1, sizeof *f);
    if (!f) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    f->app = app;
    f->req = req;
    mp_init(&f->mp, boundary, &fup_cb, f);
    rc->route_data = f;
    rc->route_free = fup_free;
    http_req_body_stream(req, app->cfg.max_upload_bytes, fup_body, f);
}

static void files_create_fn(struct op *op, struct store *st)
{
    struct fup *f = op->in;
    if (op_idem_begin(op, st))
        return;
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    int rc = id_new("file-", sf.id, sizeof sf.id);
    if (rc) {
        op_idem_release(op, st);
        op_internal(op, rc, "file id");
        return;
    }
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", op->tenant);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "%s", f->filename);
    sf.bytes = (int64_t)upload_bytes(f->up);
    snprintf(sf.sha256, sizeof sf.sha256, "%s", upload_sha256_hex(f->up));
    store_path_upload_rel(sf.id, sf.storage_path);
    snprintf(sf.encoding, sizeof sf.encoding, "zstd");
    snprintf(sf.status, sizeof sf.status, "processed");
    sf.created_at = clock_wall_s();
    char final[STORE_PATH_MAX];
    if ((rc = store_path_abs(op->app->cfg.data_dir, sf.storage_path, final, sizeof final)) ||
        (rc = upload_commit(f->up, final))) {
        op_idem_release(op, st);
        op_internal(op, rc, "store upload");
        return;
    }
    if ((rc = store_tx_begin(st)) == 0) {
        if (!(rc = store_file_create(st, &sf))) {
            buf_reset(&op->out);
            rc = api_file_json(&op->out, &sf);
            op->status = 200;
            if (!rc)
                rc = op_idem_complete(op, st);
        }
        if (rc)
            store_tx_rollback(st);
        else
            rc = store_tx_commit(st);
    }
    if (rc) {
        unlink(final);
        op_idem_release(op, st);
        op_internal(op, rc, "create file");
    }
}

static void files_create(struct http_req *req, void *arg)
{
    struct rctx *rc = http_req_data(req);
    struct fup *f = rc->route_data;
    if (mp_finish(&f->mp) != 0) {
        http_respond_error(req, 400, NULL, "invalid_multipart", NULL,
                           "The multipart/form-data body is incomplete (no closing boundary).");
        return;
    }
    if (!f->have_file) {
        http_respond_error(req, 400, NULL, "missing_required_parameter", "file",
                           "Missing required parameter: 'file'.");
        return;
    }
    if (!f->have_purpose) {
        http_respond_error(req, 400, NULL, "missing_required_parameter", "purpose",
                           "Missing required parameter: 'purpose'.");
        return;
    }
    if (f->purpose_len >= sizeof f->purpose || strcmp(f->purpose, "batch") != 0) {
        http_respond_error(req, 400, NULL, "invalid_value", "purpose",
                           "Invalid value for 'purpose': jobd accepts only 'batch'.");
        return;
    }
    int r = upload_finish(f->up);
    if (r) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the upload: %s.", err_msg(r));
        return;
    }
    struct op *op = app_op_new(req, files_create_fn);
    if (op) {
        op->in = f;
        struct buf fp;
        buf_init(&fp, 1024);
        buf_printf(&fp, "%s\n%s\n%s", f->purpose, f->filename, upload_sha256_hex(f->up));
        r = store_idem_fingerprint("POST", "/v1/files", fp.data, fp.len, op->fp);
        buf_release(&fp);
        if (r) {
            app_op_free(op);
            op = NULL;
        }
    }
    app_op_run(req, op);
}

/* ---- GET /v1/files ----------------------------------------------------------------- */

static void files_list_fn(struct op *op, struct store *st)
{
    struct store_file *items = NULL;
    size_t n = 0;
    int has_more = 0;
    int rc = store_file_list(st, op->tenant, op->has_purpose ? op->purpose : NULL, op->desc,
                             op->has_after ? op->after_id : NULL, op->limit, &items, &n, &has_more);
    if (rc) {
        op_internal(op, rc, "list files");
        return;
    }
    struct buf *b = &op->out;
    buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(b, ',');
        rc = api_file_json(b, &items[i]);
    }
    if (!rc)
        rc = buf_printf(b, "],\"first_id\":%s%s%s,\"last_id\":%s%s%s,\"has_more\":%s}", n ? "\"" : "",
                        n ? items[0].id : "null", n ? "\"" : "", n ? "\"" : "",
                        n ? items[n - 1].id : "null", n ? "\"" : "", has_more ? "true" : "false");
    free(items);
    if (rc)
        op_internal(op, rc, "list files");
    else
        op->status = 200;
}

static void files_list(struct http_req *req, void *arg)
{
    int64_t limit;
    if (app_query_int(req, "limit", 1, 10000, 10000, &limit)) {
        http_respond_error(req, 400, NULL, "invalid_value", "limit", "limit must be an integer from 1 to 10000.");
        return;
    }
    const char *order = http_req_query(req, "order");
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
        http_respond_error(req, 400, NULL, "invalid_value", "order", "order must be 'asc' or 'desc'.");
        return;
    }
    const char *after = http_req_query(req, "after");
    const char *purpose = http_req_query(req, "purpose");
    if ((after && strlen(after) >= ID_MAX) || (purpose && strlen(purpose) >= 32)) {
        http_respond_error(req, 400, NULL, "invalid_value", after && strlen(after) >= ID_MAX ? "after" : "purpose",
                           "Parameter too long.");
        return;
    }
    struct op *op = app_op_new(req, files_list_fn);
    if (op) {
        op->limit = (int)limit;
        op->desc = !order || strcmp(order, "desc") == 0;
        if (after && *after) {
            op->has_after = 1;
            snprintf(op->after_id, sizeof op->after_id, "%s", after);
        }
        if (purpose && *purpose) {
            op->has_purpose = 1;
            snprintf(op->purpose, sizeof op->purpose, "%s", purpose);
        }
    }
    app_op_run(req, op);
}

/* ---- GET / DELETE /v1/files/{id} ------------------------------------------------------- */

static void not_found(struct op *op)
{
    op_error(op, 404, NULL, "not_found", "file_id", "No such File object: '%s'.", op->id);
}

static int copy_id(struct http_req *req, struct op *op, const char *param)
{
    const char *id = http_req_param(req, param);
    if (!id || strlen(id) >= sizeof op->id)
        return ERR_INVAL;
    snprintf(op->id, sizeof op->id, "%s", id);
    return 0;
}

static void files_get_fn(struct op *op, struct store *st)
{
    struct store_file f;
    int rc = store_file_get(st, op->tenant, op->id, &f);
    if (rc == ERR_NOTFOUND)
        not_found(op);
    else if (rc)
        op_internal(op, rc, "get file");
    else if ((rc = api_file_json(&op->out, &f)))
        op_internal(op, rc, "get file");
    else
        op->status = 200;
}

static void files_delete_fn(struct op *op, struct store *st)
{
    char path[256];
    int rc = store_file_delete(st, op->tenant, op->id, path);
    if (rc == ERR_NOTFOUND) {
        not_found(op);
        return;
    }
    if (rc) {
        op_internal(op, rc, "delete file");
        return;
    }
    if (store_path_abs(op->app->cfg.data_dir, path, op->unlink_path, sizeof op->unlink_path))
        op->unlink_path[0] = '\0';
    buf_printf(&op->out, "{\"id\":\"%s\",\"object\":\"file\",\"deleted\":true}", op->id);
    op->status = 200;
}

static int accepts_zstd(const char *h)
{
    if (!h)
        return 0;
    const char *p = h;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ')
            p++;
        size_t n = (size_t)(p - tok);
        const char *params = p;
        while (*p && *p != ',')
            p++;
        if (n == 4 && strncasecmp(tok, "zstd", 4) == 0) {
            const char *q = strstr(params, "q=");
            if (q && q < p && strtod(q + 2, NULL) <= 0.0)
                return 0;
            return 1;
        }
    }
    return 0;
}

static void files_content_fn(struct op *op, struct store *st)
{
    struct store_file f;
    int rc = store_file_get(st, op->tenant, op->id, &f);
    if (rc == ERR_NOTFOUND) {
        not_found(op);
        return;
    }
    if (rc) {
        op_internal(op, rc, "get file");
        return;
    }
    char path[STORE_PATH_MAX];
    if ((rc = store_path_abs(op->app->cfg.data_dir, f.storage_path, path, sizeof path))) {
        op_internal(op, rc, "file storage path");
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        log_error("file %s: cannot open %s: %s", f.id, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        op_error(op, 404, NULL, "not_found", "file_id", "The content of file '%s' is missing.", op->id);
        return;
    }
    op->fd = fd;
    op->fd_len = (uint64_t)sb.st_size;
    if (strcmp(f.encoding, "zstd") == 0) {
        if (op->accept_zstd)
            op->fd_zstd_raw = 1;
        else
            op->fd_decompress = 1;
    }
    op->status = 200;
}

/* decompressing download: see the file comment */
#define DL_CHUNK (256u * 1024)
#define DL_QUEUE_MAX (1u << 20)

struct dl {
    uv_work_t w;
    uv_timer_t t;
    struct http_req *req;
    int fd;
    struct zst_reader *zr;
    char *chunk;
    size_t len;
    int eof, err;
};

static void dl_closed(uv_handle_t *h)
{
    struct dl *d = h->data;
    zst_reader_free(d->zr);
    if (d->fd >= 0)
        close(d->fd);
    free(d->chunk);
    free(d);
}

static void dl_finish(struct dl *d)
{
    if (d->err)
        log_error("file download: %s after streaming part of the file", err_msg(d->err));
    http_respond_end(d->req);
    uv_close((uv_handle_t *)&d->t, dl_closed);
}

static void dl_work(uv_work_t *w)
{
    struct dl *d = w->data;
    d->len = 0;
    while (d->len < DL_CHUNK) {
        ssize_t n = zst_reader_read(d->zr, d->chunk + d->len, DL_CHUNK - d->len);
        if (n < 0) {
            d->err = (int)n;
            break;
        }
        if (n == 0) {
            d->eof = 1;
            break;
        }
        d->len += (size_t)n;
    }
}

static void dl_next(struct dl *d);

static void dl_after(uv_work_t *w, int status)
{
    struct dl *d = w->data;
    if (status)
        d->err = ERR_INTERNAL;
    if (d->len && http_respond_write(d->req, d->chunk, d->len) == ERR_CONN) {
        dl_finish(d); /* the client went away */
        return;
    }
    if (d->err || d->eof) {
        dl_finish(d);
        return;
    }
    dl_next(d);
}

static void dl_tick(uv_timer_t *t)
{
    dl_next(t->data);
}

static void dl_next(struct dl *d)
{
    if (http_req_send_queue(d->req) > DL_QUEUE_MAX) {
        uv_timer_start(&d->t, dl_tick, 5, 0);
        return;
    }
    if (uv_queue_work(http_req_loop(d->req), &d->w, dl_work, dl_after) != 0) {
        d->err = ERR_INTERNAL;
        dl_finish(d);
    }
}

void app_send_file(struct http_req *req, struct op *op)
{
    int fd = op->fd;
    op->fd = -1;
    if (!op->fd_decompress) {
        if (op->fd_zstd_raw)
            http_resp_header(req, "Content-Encoding", "zstd");
        http_respond_fd(req, 200, "application/octet-stream", fd, 0, op->fd_len);
        return;
    }
    struct dl *d = calloc(1, sizeof *d);
    if (!d || !(d->chunk = malloc(DL_CHUNK))) {
        if (d)
            free(d);
        close(fd);
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    d->req = req;
    d->fd = fd;
    d->w.data = d;
    d->t.data = d;
    if (zst_reader_new(zst_fd_source, &d->fd, &d->zr) != 0) {
        close(fd);
        free(d->chunk);
        free(d);
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    uv_timer_init(http_req_loop(req), &d->t);
    http_respond_begin(req, 200, "application/octet-stream");
    dl_next(d);
}

/* ---- route handlers --------------------------------------------------------------------- */

static void files_by_id(struct http_req *req, op_fn fn)
{
    struct op *op = app_op_new(req, fn);
    if (op && copy_id(req, op, "id")) {
        op_error(op, 404, NULL, "not_found", "file_id", "No such File object.");
        app_op_free(op);
        http_respond_error(req, 404, NULL, "not_found", "file_id", "No such File object.");
        return;
    }
    if (op)
        op->accept_zstd = accepts_zstd(http_req_header(req, "Accept-Encoding"));
    app_op_run(req, op);
}

static void files_get(struct http_req *req, void *arg)
{
    files_by_id(req, files_get_fn);
}

static void files_delete(struct http_req *req, void *arg)
{
    files_by_id(req, files_delete_fn);
}

static void files_content(struct http_req *req, void *arg)
{
    files_by_id(req, files_content_fn);
}

int routes_files_add(struct app *app)
{
    struct http_server *s = app->srv;
    int rc;
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/files", files_create,
                                                        files_create_head, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files", files_list, app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files/{id}", files_get, app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"DELETE", "/v1/files/{id}", files_delete,
                                                        app_head_auth, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files/{id}/content", files_content,
                                                        app_head_auth, 0, app})))
        return rc;
    return 0;
}
