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
 * and rename the file to <data>/files/<id>.jsonl.zst, then insert the row
 * with the key's answer in one transaction (store_file_submit).
 *
 * Download: the stored zstd stream is sent as is to a client that accepts
 * zstd (Content-Encoding: zstd); otherwise it is decompressed as a streamed
 * answer (http_respond_stream: read on the thread pool, chunk by chunk,
 * with backpressure), so memory stays bounded whatever the client's speed.
 *
 * Threads: handlers on the loop, the *_run functions on the thread pool.
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
#include "jobd/api/api_auth.h"
#include "jobd/api/api_idem.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/blob/blob.h"
#include "jobd/http/http.h"
#include "jobd/http/multipart.h"
#include "jobd/intake/ingest.h"
#include "jobd/intake/upload.h"

#define OTHER_FIELDS_MAX (64u * 1024)

/* ---- POST /v1/files -------------------------------------------------------------- */

struct fup {
    struct api *api;
    struct http_req *req;
    struct mp_parser mp;
    struct upload *up;
    int part;                 /* 0 none, 1 file, 2 purpose, 3 other, 4 expires_after[anchor], 5 [seconds] */
    int have_file, have_purpose;
    char purpose[32];
    size_t purpose_len;
    char exp_anchor[32], exp_seconds[32]; /* the expires_after fields ("" = absent) */
    size_t exp_anchor_len, exp_seconds_len; /* >= sizeof: too long */
    int have_exp_anchor, have_exp_seconds;
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
        int rc = upload_new(f->api->tmp_dir, UPLOAD_IDENTITY, f->api->cfg.limits.max_file_bytes,
                            f->api->cfg.zstd_level, &f->up);
        if (rc)
            return rc;
        snprintf(f->filename, sizeof f->filename, "%s", filename && *filename ? filename : "upload.jsonl");
        f->part = 1;
    } else if (strcmp(name, "purpose") == 0) {
        f->part = 2;
        f->purpose_len = 0;
        f->have_purpose = 1;
    } else if (strcmp(name, "expires_after[anchor]") == 0) {
        f->part = 4;
        f->exp_anchor_len = 0;
        f->have_exp_anchor = 1;
    } else if (strcmp(name, "expires_after[seconds]") == 0) {
        f->part = 5;
        f->exp_seconds_len = 0;
        f->have_exp_seconds = 1;
    } else {
        f->part = 3;
    }
    return 0;
}

/* Append to a short text field; over its size it is marked too long (len = cap). */
static void small_field(char *dst, size_t cap, size_t *len, const char *d, size_t n)
{
    if (*len >= cap || *len + n >= cap) {
        *len = cap;
        return;
    }
    memcpy(dst + *len, d, n);
    *len += n;
    dst[*len] = '\0';
}

static int fup_part_data(void *ctx, const char *d, size_t n)
{
    struct fup *f = ctx;
    switch (f->part) {
    case 4:
        small_field(f->exp_anchor, sizeof f->exp_anchor, &f->exp_anchor_len, d, n);
        return 0;
    case 5:
        small_field(f->exp_seconds, sizeof f->exp_seconds, &f->exp_seconds_len, d, n);
        return 0;
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
        api_respond_error(req, API_ERR_INVALID_VALUE, "file", "The file name must be valid UTF-8.");
    else if (rc == ERR_TOOBIG && f->part == 1)
        api_respond_error(req, API_ERR_FILE_TOO_LARGE, "file",
                           "The file is larger than the limit of %llu bytes.",
                           (unsigned long long)f->api->cfg.limits.max_file_bytes);
    else if (rc == ERR_PARSE || rc == ERR_TOOBIG)
        api_respond_error(req, API_ERR_INVALID_MULTIPART, NULL,
                           "The multipart/form-data body is malformed (%s).", err_msg(rc));
    else
        api_respond_error(req, api_err_of_rc(rc), NULL, "Could not store the upload: %s.", err_msg(rc));
    return rc;
}

static void files_create_head(struct http_req *req, void *arg)
{
    struct api *api = arg;
    struct api_rctx *rc = api_auth_tenant(req, api);
    if (!rc)
        return;
    char boundary[MP_MAX_BOUNDARY + 1];
    int r = mp_boundary_from_content_type(http_req_header(req, "Content-Type"), boundary, sizeof boundary);
    if (r == ERR_UNSUPPORTED) {
        api_respond_error(req, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "Upload files as multipart/form-data with fields 'file' and 'purpose'.");
        return;
    }
    if (r) {
        api_respond_error(req, API_ERR_INVALID_MULTIPART, NULL,
                           "The multipart/form-data boundary is missing or invalid.");
        return;
    }
    struct fup *f = calloc(1, sizeof *f);
    if (!f) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    f->api = api;
    f->req = req;
    mp_init(&f->mp, boundary, &fup_cb, f);
    rc->route_data = f;
    rc->route_free = fup_free;
    http_req_body_stream(req, api->cfg.max_upload_bytes, fup_body, f);
}

struct create_job {
    struct api_job job;
    struct fup *f; /* the request's (it outlives the job) */
    int64_t expires_s; /* expires_after.seconds, or jobd's --file-retention; 0 = never */
};

static void create_free(struct api_job *job)
{
    free(job);
}

/* store_idem_answer's render: the new file is the answer. */
static int render_file(void *arg, const void *obj)
{
    struct api_job *job = arg;
    buf_reset(&job->out);
    int rc = api_file_json(&job->out, obj);
    if (!rc)
        job->status = 200;
    return rc;
}

/* upload_commit without a connection: an S3 upload of 512 MiB takes seconds. */
struct commit_call {
    struct upload *up;
    struct blob_store *bs;
    const char *key;
    int rc;
};

static void commit_call(void *ctx)
{
    struct commit_call *c = ctx;
    c->rc = upload_commit(c->up, c->bs, c->key);
}

static void files_create_run(struct api_job *job, struct store *st)
{
    struct fup *f = ((struct create_job *)job)->f;
    if (api_idem_begin(job, st))
        return;
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    int rc = id_new("file-", sf.id, sizeof sf.id);
    if (rc) {
        api_idem_release(job, st);
        api_job_internal(job, rc, "file id");
        return;
    }
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", job->tenant);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "%s", f->filename);
    sf.bytes = (int64_t)upload_bytes(f->up);
    snprintf(sf.sha256, sizeof sf.sha256, "%s", upload_sha256_hex(f->up));
    store_path_upload_rel(sf.id, sf.storage_path);
    snprintf(sf.encoding, sizeof sf.encoding, "zstd");
    snprintf(sf.status, sizeof sf.status, "processed");
    sf.created_at = clock_wall_s();
    int64_t exp = ((struct create_job *)job)->expires_s;
    sf.expires_at = exp ? sf.created_at + exp : 0;
    struct commit_call cc = {f->up, store_blobs(st), sf.storage_path, 0};
    st = api_job_unlocked(job, st, commit_call, &cc);
    if ((rc = cc.rc)) {
        api_idem_release(job, st);
        api_job_internal(job, rc, "store upload");
        return;
    }
    struct store_idem_answer ans = api_idem_answer(job, render_file, job);
    if ((rc = store_file_submit(st, &sf, &ans))) {
        if (blob_delete(store_blobs(st), sf.storage_path))
            log_warn("create file: the unused upload %s is left for the orphan sweep", sf.storage_path);
        api_idem_release(job, st);
        api_job_internal(job, rc, "create file");
    }
}

static void files_create(struct http_req *req, void *arg)
{
    struct api_rctx *rc = http_req_data(req);
    struct fup *f = rc->route_data;
    if (mp_finish(&f->mp) != 0) {
        api_respond_error(req, API_ERR_INVALID_MULTIPART, NULL,
                           "The multipart/form-data body is incomplete (no closing boundary).");
        return;
    }
    if (!f->have_file) {
        api_respond_error(req, API_ERR_MISSING_PARAMETER, "file",
                           "Missing required parameter: 'file'.");
        return;
    }
    if (!f->have_purpose) {
        api_respond_error(req, API_ERR_MISSING_PARAMETER, "purpose",
                           "Missing required parameter: 'purpose'.");
        return;
    }
    if (f->purpose_len >= sizeof f->purpose || strcmp(f->purpose, "batch") != 0) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "purpose",
                           "Invalid value for 'purpose': jobd accepts only 'batch'.");
        return;
    }
    int64_t expires_s = f->api->cfg.file_retention_s;
    if (f->have_exp_anchor || f->have_exp_seconds) {
        char msg[256], *end = NULL;
        long long v = f->exp_seconds_len < sizeof f->exp_seconds ? strtoll(f->exp_seconds, &end, 10) : 0;
        if (!f->have_exp_seconds || !f->have_exp_anchor) {
            api_respond_error(req, API_ERR_MISSING_PARAMETER, f->have_exp_seconds ? "expires_after.anchor"
                                                                                   : "expires_after.seconds",
                              "Missing required parameter: '%s'.",
                              f->have_exp_seconds ? "expires_after[anchor]" : "expires_after[seconds]");
            return;
        }
        if (!end || end == f->exp_seconds || *end) {
            api_respond_error(req, API_ERR_INVALID_TYPE, "expires_after.seconds",
                              "expires_after[seconds] must be an integer number of seconds.");
            return;
        }
        const char *anchor = f->exp_anchor_len < sizeof f->exp_anchor ? f->exp_anchor : "(too long)";
        if (api_expiry_check(anchor, v, f->api->cfg.expiry_min_s, msg, sizeof msg)) {
            api_respond_error(req, API_ERR_INVALID_VALUE,
                              strcmp(anchor, "created_at") ? "expires_after.anchor" : "expires_after.seconds",
                              "%s", msg);
            return;
        }
        expires_s = v;
    }
    int r = upload_finish(f->up);
    if (r) {
        api_respond_error(req, api_err_of_rc(r), NULL, "Could not store the upload: %s.", err_msg(r));
        return;
    }
    struct create_job *cj = calloc(1, sizeof *cj);
    if (cj) {
        api_job_init_req(&cj->job, req, files_create_run, create_free);
        cj->f = f;
        cj->expires_s = expires_s;
        struct buf fp;
        buf_init(&fp, 1024);
        buf_printf(&fp, "%s\n%s\n%s", f->purpose, f->filename, upload_sha256_hex(f->up));
        if (f->have_exp_seconds) /* only then: keys stored before the option existed still match */
            buf_printf(&fp, "\n%lld", (long long)expires_s);
        r = store_idem_fingerprint("POST", "/v1/files", fp.data, fp.len, cj->job.fp);
        buf_release(&fp);
        if (r) {
            api_job_free(&cj->job);
            cj = NULL;
        }
    }
    api_job_run(req, cj ? &cj->job : NULL);
}

/* ---- GET /v1/files ----------------------------------------------------------------- */

struct list_job {
    struct api_job job;
    char after[ID_MAX]; /* "" = from the start */
    char purpose[32];   /* "" = any */
    int limit, desc;
};

static void list_job_free(struct api_job *job)
{
    free(job);
}

static void files_list_run(struct api_job *job, struct store *st)
{
    struct list_job *lj = (struct list_job *)job;
    struct store_file *items = NULL;
    size_t n = 0;
    int has_more = 0;
    int rc = store_file_list(st, job->tenant, lj->purpose[0] ? lj->purpose : NULL, lj->desc,
                             lj->after[0] ? lj->after : NULL, lj->limit, &items, &n, &has_more);
    if (rc) {
        api_job_internal(job, rc, "list files");
        return;
    }
    struct buf *b = &job->out;
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
        api_job_internal(job, rc, "list files");
    else
        job->status = 200;
}

static void files_list(struct http_req *req, void *arg)
{
    int64_t limit;
    if (api_query_int(req, "limit", 1, 10000, 10000, &limit)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to 10000.");
        return;
    }
    const char *order = http_req_query(req, "order");
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "order", "order must be 'asc' or 'desc'.");
        return;
    }
    const char *after = http_req_query(req, "after");
    const char *purpose = http_req_query(req, "purpose");
    if ((after && strlen(after) >= ID_MAX) || (purpose && strlen(purpose) >= 32)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, after && strlen(after) >= ID_MAX ? "after" : "purpose",
                          "Parameter too long.");
        return;
    }
    struct list_job *lj = calloc(1, sizeof *lj);
    if (lj) {
        api_job_init_req(&lj->job, req, files_list_run, list_job_free);
        lj->limit = (int)limit;
        lj->desc = !order || strcmp(order, "desc") == 0;
        if (after && *after)
            snprintf(lj->after, sizeof lj->after, "%s", after);
        if (purpose && *purpose)
            snprintf(lj->purpose, sizeof lj->purpose, "%s", purpose);
    }
    api_job_run(req, lj ? &lj->job : NULL);
}

/* ---- GET / DELETE /v1/files/{id}, GET /v1/files/{id}/content ------------------------------ */

struct file_job {
    struct api_job job;
    char id[ID_MAX];
    int accept_zstd;        /* content: the client sent Accept-Encoding: zstd */
    /* content: the file to answer with */
    struct blob_reader *br; /* the stored bytes, open (local: sent with sendfile) */
    int fd_zstd_raw;        /* they are the raw zstd stream: send Content-Encoding: zstd */
    int fd_decompress;      /* they are zstd: stream them decompressed */
    /* content: the Range asked for (http_range_parse), over the file's bytes as uploaded */
    char range[96];         /* the request's Range header ("" none) */
    enum http_range rk;
    uint64_t first, len;    /* HTTP_RANGE_OK: the bytes to send */
    uint64_t size;          /* the file's bytes (Content-Range) */
};

static void file_job_free(struct api_job *job)
{
    struct file_job *fj = (struct file_job *)job;
    blob_reader_free(fj->br);
    free(fj);
}

static void not_found(struct file_job *fj)
{
    api_job_error(&fj->job, API_ERR_NOT_FOUND, "file_id", "No such File object: '%s'.", fj->id);
}

/* store_file_get, where a file whose expires_at has passed is gone (the
 * sweeper deletes its bytes and row soon; from this second on it is 404). */
static int file_get_live(struct store *st, const char *tenant, const char *id, struct store_file *f)
{
    int rc = store_file_get(st, tenant, id, f);
    if (!rc && f->expires_at && f->expires_at <= clock_wall_s())
        rc = ERR_NOTFOUND;
    return rc;
}

static void files_get_run(struct api_job *job, struct store *st)
{
    struct file_job *fj = (struct file_job *)job;
    struct store_file f;
    int rc = file_get_live(st, job->tenant, fj->id, &f);
    if (rc == ERR_NOTFOUND)
        not_found(fj);
    else if (rc)
        api_job_internal(job, rc, "get file");
    else if ((rc = api_file_json(&job->out, &f)))
        api_job_internal(job, rc, "get file");
    else
        job->status = 200;
}

/* The row goes, then the bytes (a failure to remove them leaves an orphan
 * for the sweep, jobd/work/retention.h). */
static void files_delete_run(struct api_job *job, struct store *st)
{
    struct file_job *fj = (struct file_job *)job;
    char path[256];
    int rc = store_file_delete(st, job->tenant, fj->id, path);
    if (rc == ERR_NOTFOUND) {
        not_found(fj);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "delete file");
        return;
    }
    if ((rc = blob_delete(store_blobs(st), path)))
        log_warn("file %s deleted, but its bytes %s stay for the orphan sweep: %s", fj->id, path, err_msg(rc));
    buf_printf(&job->out, "{\"id\":\"%s\",\"object\":\"file\",\"deleted\":true}", fj->id);
    job->status = 200;
}

static void files_content_run(struct api_job *job, struct store *st)
{
    struct file_job *fj = (struct file_job *)job;
    struct store_file f;
    int rc = file_get_live(st, job->tenant, fj->id, &f);
    if (rc == ERR_NOTFOUND) {
        not_found(fj);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get file");
        return;
    }
    rc = blob_reader_open(store_blobs(st), f.storage_path, &fj->br);
    if (rc == ERR_NOTFOUND) {
        log_error("file %s: its bytes %s are missing", f.id, f.storage_path);
        api_job_error(job, API_ERR_NOT_FOUND, "file_id", "The content of file '%s' is missing.", fj->id);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "open file content");
        return;
    }
    fj->size = (uint64_t)f.bytes;
    fj->rk = http_range_parse(fj->range[0] ? fj->range : NULL, fj->size, &fj->first, &fj->len);
    if (fj->rk == HTTP_RANGE_UNSATISFIABLE) {
        blob_reader_free(fj->br);
        fj->br = NULL;
        api_job_error(job, API_ERR_RANGE_NOT_SATISFIABLE, NULL,
                      "The range '%s' is not satisfiable: file '%s' has %llu bytes.", fj->range, fj->id,
                      (unsigned long long)fj->size);
        return;
    }
    /* a range is of the bytes as uploaded: it is answered decompressed
     * whatever Accept-Encoding says */
    if (strcmp(f.encoding, "zstd") == 0) {
        if (fj->accept_zstd && fj->rk != HTTP_RANGE_OK)
            fj->fd_zstd_raw = 1;
        else
            fj->fd_decompress = 1;
    }
    job->status = 200;
}

/* A download streamed off the loop (http_respond_stream's reader): the
 * stored bytes as they are, or decompressed. */
struct dl {
    struct blob_reader *br;
    struct zst_reader *zr; /* NULL: raw */
    uint64_t skip;         /* a range: bytes still to read and drop before it */
    uint64_t left;         /* a range: bytes of it still to send; UINT64_MAX: to the end */
};

static ssize_t dl_pull(struct dl *d, char *buf, size_t cap)
{
    return d->zr ? zst_reader_read(d->zr, buf, cap) : blob_read(d->br, buf, cap);
}

/* The next bytes of the answer: a range is cut out of the stream (what
 * comes before it is read and dropped: a zstd stream has no index to
 * seek with, so a range costs the decompression of what precedes it). */
static int dl_read(void *arg, char *buf, size_t cap, size_t *n)
{
    struct dl *d = arg;
    while (d->skip > 0) {
        ssize_t r = dl_pull(d, buf, d->skip < cap ? (size_t)d->skip : cap);
        if (r < 0)
            return (int)r;
        if (r == 0)
            return ERR_CORRUPT; /* shorter than its row says */
        d->skip -= (uint64_t)r;
    }
    if (d->left < cap)
        cap = (size_t)d->left;
    ssize_t r = cap ? dl_pull(d, buf, cap) : 0;
    if (r < 0)
        return (int)r;
    if (d->left != UINT64_MAX)
        d->left -= (uint64_t)r;
    *n = (size_t)r;
    return 0;
}

static void dl_free(struct dl *d)
{
    zst_reader_free(d->zr);
    blob_reader_free(d->br);
    free(d);
}

static void dl_done(void *arg, int err)
{
    if (err)
        log_error("file download: %s after streaming part of the file", err_msg(err));
    dl_free(arg);
}

/* The file itself (raw, or decompressed as a stream), or the error. */
static int files_content_answer(struct http_req *req, struct api_job *job)
{
    struct file_job *fj = (struct file_job *)job;
    char cr[96];
    if (!fj->br) {
        if (fj->rk == HTTP_RANGE_UNSATISFIABLE) {
            snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)fj->size);
            http_resp_header(req, "Content-Range", cr);
        }
        api_job_answer(req, job);
        return 0;
    }
    struct blob_reader *br = fj->br;
    fj->br = NULL;
    int ranged = fj->rk == HTTP_RANGE_OK, status = ranged ? 206 : 200;
    http_resp_header(req, "Accept-Ranges", "bytes");
    if (ranged) {
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)fj->first,
                 (unsigned long long)(fj->first + fj->len - 1), (unsigned long long)fj->size);
        http_resp_header(req, "Content-Range", cr);
    }
    if (fj->fd_zstd_raw)
        http_resp_header(req, "Content-Encoding", "zstd");
    if (!fj->fd_decompress && blob_reader_fd(br) >= 0) { /* local: sendfile */
        uint64_t off = ranged ? fj->first : 0, len = ranged ? fj->len : blob_reader_size(br);
        int fd = blob_reader_take_fd(br);
        blob_reader_free(br);
        http_respond_fd(req, status, "application/octet-stream", fd, off, len);
        return 0;
    }
    struct dl *d = calloc(1, sizeof *d);
    if (d) {
        d->br = br;
        d->skip = ranged ? fj->first : 0;
        d->left = ranged ? fj->len : UINT64_MAX;
    }
    int rc = ERR_NOMEM, local = blob_reader_fd(br) >= 0;
    if (!d || (fj->fd_decompress && zst_reader_new(blob_read, br, &d->zr) != 0) ||
        (rc = http_respond_stream(req, status, "application/octet-stream", dl_read, dl_done, d)) != 0) {
        if (d)
            dl_free(d);
        else
            blob_reader_free(br);
        http_resp_headers_clear(req);
        if (rc == ERR_BUSY) { /* --max-streams run: each holds up to ~0.75 MiB (bench/NOTES.md) */
            http_resp_header(req, "Retry-After", "1");
            api_respond_error(req, API_ERR_UNAVAILABLE, NULL,
                              local ? "Too many downloads are being streamed; retry shortly, or ask for the "
                                      "stored bytes with Accept-Encoding: zstd."
                                    : "Too many downloads are being streamed; retry shortly.");
        } else {
            api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        }
    }
    return 0;
}

/* ---- route handlers --------------------------------------------------------------------- */

static void files_by_id(struct http_req *req, api_job_fn run, int (*answer)(struct http_req *, struct api_job *))
{
    struct file_job *fj = calloc(1, sizeof *fj);
    if (!fj) {
        api_job_run(req, NULL);
        return;
    }
    api_job_init_req(&fj->job, req, run, file_job_free);
    fj->job.answer = answer;
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= sizeof fj->id) {
        api_job_free(&fj->job);
        api_respond_error(req, API_ERR_NOT_FOUND, "file_id", "No such File object.");
        return;
    }
    snprintf(fj->id, sizeof fj->id, "%s", id);
    fj->accept_zstd = api_accepts_coding(http_req_header(req, "Accept-Encoding"), "zstd");
    const char *range = http_req_header(req, "Range");
    if (range && strlen(range) < sizeof fj->range) /* longer: no range we understand */
        snprintf(fj->range, sizeof fj->range, "%s", range);
    api_job_run(req, &fj->job);
}

static void files_get(struct http_req *req, void *arg)
{
    files_by_id(req, files_get_run, NULL);
}

static void files_delete(struct http_req *req, void *arg)
{
    files_by_id(req, files_delete_run, NULL);
}

static void files_content(struct http_req *req, void *arg)
{
    files_by_id(req, files_content_run, files_content_answer);
}

int routes_files_add(struct api *app)
{
    struct http_server *s = app->srv;
    int rc;
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/files", files_create,
                                                        files_create_head, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files", files_list, api_head_tenant, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files/{id}", files_get, api_head_tenant, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"DELETE", "/v1/files/{id}", files_delete,
                                                        api_head_tenant, 0, app})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/files/{id}/content", files_content,
                                                        api_head_tenant, 0, app})))
        return rc;
    return 0;
}
