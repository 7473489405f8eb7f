/*
 * finalize.c - cancel/expiry processing and the output/error files of a
 * batch (see finalize.h for the design). Runs on a finalizer thread.
 */
#include "jobd/work/finalize.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "common/zst.h"
#include "jobd/blob/blob.h"

void finalize_output_id(const char *request_id, char out[ID_MAX])
{
    const char *body = strncmp(request_id, "req_", 4) == 0 ? request_id + 4 : request_id;
    snprintf(out, ID_MAX, "batch_req_%s", body);
}

/* One output file being written. */
struct ff {
    char tmp[STORE_PATH_MAX], rel[STORE_REL_PATH_MAX]; /* tmp: <data>/tmp/fin-<batch>-<kind> */
    int fd;
    struct zst_writer *zw;
    struct sha256_ctx *sha;
    uint64_t bytes, since_frame;
    int64_t lines;
};

static void ff_abandon(struct ff *f)
{
    zst_writer_free(f->zw);
    sha256_free(f->sha);
    if (f->fd >= 0) {
        close(f->fd);
        unlink(f->tmp);
    }
    f->zw = NULL;
    f->sha = NULL;
    f->fd = -1;
}

static int ff_open(struct ff *f, const char *dir, const char *batch_id, const char *kind)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char tdir[STORE_PATH_MAX];
    int rc;
    if ((rc = store_path_batch_rel(batch_id, kind, f->rel)) ||
        (rc = store_path_dir(dir, STORE_DIR_TMP, tdir, sizeof tdir)))
        return rc;
    if ((size_t)snprintf(f->tmp, sizeof f->tmp, "%s/fin-%s-%s", tdir, batch_id, kind) >= sizeof f->tmp)
        return ERR_TOOBIG;
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f->fd < 0) {
        log_error("finalize: cannot create '%s': %s", f->tmp, strerror(errno));
        return ERR_IO;
    }
    rc = zst_writer_new(3, zst_fd_sink, &f->fd, &f->zw);
    if (!rc)
        rc = zst_writer_window(f->zw, ZST_STORED_WINDOW_LOG);
    if (!rc && !(f->sha = sha256_new()))
        rc = ERR_NOMEM;
    if (rc)
        ff_abandon(f);
    return rc;
}

/* Log why a write to the temp file failed (ERR_IO comes from write(2) in
 * zst_fd_sink or fsync: errno is still its error), so that a full disk
 * reads as one in the log. */
static int ff_io_error(const struct ff *f, int rc, const char *what)
{
    if (rc == ERR_IO || rc == ERR_NOSPACE)
        log_error("finalize: %s '%s': %s", what, f->tmp, strerror(errno));
    return rc;
}

static int ff_write(struct ff *f, const char *data, size_t n)
{
    int rc = zst_writer_write(f->zw, data, n);
    if (rc)
        return ff_io_error(f, rc, "cannot write");
    rc = sha256_update(f->sha, data, n);
    f->bytes += n;
    f->since_frame += n;
    if (!rc && f->since_frame >= FINALIZE_FRAME_BYTES) {
        rc = ff_io_error(f, zst_writer_end_frame(f->zw), "cannot write");
        f->since_frame = 0;
    }
    return rc;
}

/* Close the frame, hand the file to the file store (blob_put_file: in
 * place whole or not at all), fill the file row. With no lines the temp
 * file is removed, so is an object an earlier try left, and *used = 0. */
static int ff_finish(struct ff *f, struct blob_store *bs, const char *tenant_id, const char *batch_id,
                     const char *kind, int64_t now, int64_t expires_after_s, struct store_file *row, int *used)
{
    int rc = 0;
    *used = f->lines > 0;
    if (!*used) {
        ff_abandon(f);
        return blob_delete(bs, f->rel);
    }
    uint8_t dig[SHA256_LEN];
    rc = ff_io_error(f, zst_writer_end_frame(f->zw), "cannot write");
    if (!rc) {
        rc = sha256_final(f->sha, dig);
        f->sha = NULL;
    }
    if (rc) {
        ff_abandon(f);
        return rc;
    }
    zst_writer_free(f->zw);
    f->zw = NULL;
    int cr = close(f->fd);
    f->fd = -1;
    if (cr != 0)
        rc = ff_io_error(f, ERR_IO, "cannot close");
    if (!rc && (rc = blob_put_file(bs, f->rel, f->tmp)))
        log_error("finalize: cannot store %s: %s", f->rel, err_msg(rc));
    if (rc) {
        unlink(f->tmp);
        return rc;
    }
    memset(row, 0, sizeof *row);
    snprintf(row->tenant_id, sizeof row->tenant_id, "%s", tenant_id);
    snprintf(row->purpose, sizeof row->purpose, "batch_output");
    snprintf(row->filename, sizeof row->filename, "%s_%s.jsonl", batch_id, kind);
    row->bytes = (int64_t)f->bytes;
    hex_encode(dig, SHA256_LEN, row->sha256);
    snprintf(row->storage_path, sizeof row->storage_path, "%s", f->rel);
    snprintf(row->encoding, sizeof row->encoding, "zstd");
    row->created_at = now;
    row->expires_at = expires_after_s > 0 ? now + expires_after_s : 0;
    return rc;
}

struct writer {
    struct ff out, err;
    struct buf line;
    int64_t n_expired;
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    const struct finalize_hooks *hooks;
};

int finalize_line(struct buf *b, const struct store_result_row *r, int *is_ok)
{
    char oid[ID_MAX];
    finalize_output_id(r->request_id, oid);
    buf_reset(b);
    int rc = buf_printf(b, "{\"id\":\"%s\",\"custom_id\":", oid);
    if (!rc)
        rc = js_escape(b, r->custom_id, strlen(r->custom_id));
    int ok = r->status_code >= 200 && r->status_code < 300;
    if (!rc && r->status_code > 0 && r->body) {
        rc = buf_printf(b, ",\"response\":{\"status_code\":%d,\"request_id\":\"%s\",\"body\":",
                        r->status_code, r->request_id);
        if (!rc)
            rc = buf_append(b, r->body, r->body_len);
        if (!rc)
            rc = buf_append_str(b, "},\"error\":null}\n");
    } else if (!rc) {
        const char *code = r->error_code ? r->error_code : "internal_error";
        const char *msg = r->error_message ? r->error_message : "";
        rc = buf_append_str(b, ",\"response\":null,\"error\":{\"code\":");
        if (!rc)
            rc = js_escape(b, code, strlen(code));
        if (!rc)
            rc = buf_append_str(b, ",\"message\":");
        if (!rc)
            rc = js_escape(b, msg, strlen(msg));
        if (!rc)
            rc = buf_append_str(b, "}}\n");
        ok = 0;
    }
    if (!rc && is_ok)
        *is_ok = ok;
    return rc;
}

static int write_row(void *ctx, const struct store_result_row *r)
{
    struct writer *w = ctx;
    if (w->hooks && w->hooks->on_step)
        w->hooks->on_step(w->hooks->ctx);
    int is_ok = 0;
    int rc = finalize_line(&w->line, r, &is_ok);
    if (rc)
        return rc;
    if (!is_ok && r->error_code && strcmp(r->error_code, "batch_expired") == 0 &&
        !(r->status_code > 0 && r->body))
        w->n_expired++;
    struct ff *f = is_ok ? &w->out : &w->err;
    if ((rc = ff_write(f, w->line.data, w->line.len)))
        return rc;
    f->lines++;
    w->prompt_tokens += r->prompt_tokens;
    w->completion_tokens += r->completion_tokens;
    w->cached_tokens += r->cached_tokens;
    return 0;
}

/* Write both files of a batch whose requests have all ended, and finish it
 * from -> (completed | expired | cancelled). */
static int write_and_finish(struct store *st, const struct store_batch *b, enum store_batch_status from,
                            int64_t now, const struct finalize_hooks *hooks, struct finalize_report *rep)
{
    const char *dir = store_data_dir(st);
    char fdir[STORE_PATH_MAX];
    if (store_path_dir(dir, STORE_DIR_TMP, fdir, sizeof fdir))
        return ERR_TOOBIG;
    if (mkdir(fdir, 0700) != 0 && errno != EEXIST) {
        log_error("finalize: cannot create '%s': %s", fdir, strerror(errno));
        return ERR_IO;
    }
    struct writer w;
    memset(&w, 0, sizeof w);
    w.hooks = hooks;
    buf_init(&w.line, 64u << 20);
    w.out.fd = w.err.fd = -1;
    int rc = ff_open(&w.out, dir, b->id, "output");
    if (!rc)
        rc = ff_open(&w.err, dir, b->id, "errors");
    int64_t cursor = 0;
    int n_rows = 1;
    while (!rc && n_rows > 0)
        rc = store_results_scan(st, b->id, &cursor, FINALIZE_PAGE_ROWS, write_row, &w, &n_rows);
    struct store_file fo, fe;
    int used_o = 0, used_e = 0;
    if (!rc)
        rc = ff_finish(&w.out, store_blobs(st), b->tenant_id, b->id, "output", now, b->output_expires_after_s, &fo, &used_o);
    if (!rc)
        rc = ff_finish(&w.err, store_blobs(st), b->tenant_id, b->id, "errors", now, b->output_expires_after_s, &fe, &used_e);
    buf_release(&w.line);
    if (rc) {
        ff_abandon(&w.out);
        ff_abandon(&w.err);
        return rc;
    }
    if (hooks && hooks->on_step)
        hooks->on_step(hooks->ctx);
    enum store_batch_status to = from == STORE_BATCH_CANCELLING ? STORE_BATCH_CANCELLED
                                 : w.n_expired > 0            ? STORE_BATCH_EXPIRED
                                                              : STORE_BATCH_COMPLETED;
    struct store_batch_final fin = {
        .output = used_o ? &fo : NULL,
        .errors = used_e ? &fe : NULL,
        .n_completed = w.out.lines,
        .n_failed = w.err.lines,
        .prompt_tokens = w.prompt_tokens,
        .completion_tokens = w.completion_tokens,
        .cached_tokens = w.cached_tokens,
    };
    if (w.out.lines + w.err.lines != b->n_total)
        log_warn("finalize: batch %s has %lld result lines for %lld requests", b->id,
                 (long long)(w.out.lines + w.err.lines), (long long)b->n_total);
    if ((rc = store_batch_finish(st, b->id, from, to, &fin, now)))
        return rc;
    rep->done = 1;
    rep->status = to;
    rep->n_output_lines = w.out.lines;
    rep->n_error_lines = w.err.lines;
    log_info("finalize: batch %s %s: %lld output lines, %lld error lines", b->id,
             store_batch_status_name(to), (long long)w.out.lines, (long long)w.err.lines);
    return 0;
}

int finalize_batch(struct store *st, const char *batch_id, int64_t now,
                   const struct finalize_hooks *hooks, struct finalize_report *rep)
{
    struct finalize_report r = {0};
    struct store_batch b;
    int rc = store_batch_get(st, NULL, batch_id, &b);
    if (rc)
        return rc;
    store_batch_release(&b); /* only scalar fields are used below */
    r.status = b.status;
    int64_t n_done = 0;
    int left = 0;
    switch (b.status) {
    case STORE_BATCH_IN_PROGRESS:
        if (b.expires_at <= now) {
            do {
                if (hooks && hooks->on_step)
                    hooks->on_step(hooks->ctx);
                rc = store_batch_stop_step(st, batch_id, now, FINALIZE_STOP_CHUNK, &n_done, &left);
            } while (!rc && left);
        } else if (b.n_completed + b.n_failed >= b.n_total) {
            rc = store_batch_transition(st, batch_id, STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, now);
        } else {
            break; /* still running */
        }
        if (rc == ERR_BADSTATE) /* changed under us (cancelled): next call sees it */
            rc = 0;
        else if (!rc && (rc = store_batch_get(st, NULL, batch_id, &b)) == 0) {
            store_batch_release(&b);
            r.status = b.status;
            if (b.status == STORE_BATCH_FINALIZING)
                rc = write_and_finish(st, &b, STORE_BATCH_FINALIZING, now, hooks, &r);
        }
        break;
    case STORE_BATCH_FINALIZING:
        rc = write_and_finish(st, &b, STORE_BATCH_FINALIZING, now, hooks, &r);
        break;
    case STORE_BATCH_CANCELLING:
        if (!b.at[STORE_BATCH_IN_PROGRESS])
            break; /* cancelled while validating: ingest finishes it */
        do {
            if (hooks && hooks->on_step)
                hooks->on_step(hooks->ctx);
            rc = store_batch_stop_step(st, batch_id, now, FINALIZE_STOP_CHUNK, &n_done, &left);
        } while (!rc && left && n_done > 0);
        if (!rc && !left)
            rc = write_and_finish(st, &b, STORE_BATCH_CANCELLING, now, hooks, &r);
        break;
    case STORE_BATCH_VALIDATING:
        break;
    default:
        r.done = 1;
        break;
    }
    if (rc == ERR_BADSTATE) {
        /* the batch changed state meanwhile (e.g. cancelled while finalizing):
         * nothing was committed; the next call finishes it in its new state */
        log_info("finalize: batch %s changed state during finalization; will retry", batch_id);
        rc = 0;
        r.done = 0;
    }
    if (!rc)
        *rep = r;
    return rc;
}

/* ---- retries of failed finalizations ------------------------------------------- */

struct retry_slot {
    char id[ID_MAX]; /* "" = free */
    int fails;
    int64_t next_ms;
};

struct finalize_retry {
    struct retry_slot s[FINALIZE_RETRY_SLOTS];
};

struct finalize_retry *finalize_retry_new(void)
{
    return calloc(1, sizeof(struct finalize_retry));
}

int64_t finalize_retry_delay_ms(int k)
{
    int64_t d = FINALIZE_RETRY_FIRST_MS;
    for (int i = 1; i < k && d < FINALIZE_RETRY_CAP_MS; i++)
        d *= 2;
    return d < FINALIZE_RETRY_CAP_MS ? d : FINALIZE_RETRY_CAP_MS;
}

static const struct retry_slot *retry_find(const struct finalize_retry *rt, const char *id)
{
    for (int i = 0; i < FINALIZE_RETRY_SLOTS; i++)
        if (rt->s[i].id[0] && strcmp(rt->s[i].id, id) == 0)
            return &rt->s[i];
    return NULL;
}

int finalize_retry_due(const struct finalize_retry *rt, const char *batch_id, int64_t now_ms)
{
    const struct retry_slot *e = rt ? retry_find(rt, batch_id) : NULL;
    return !e || now_ms >= e->next_ms;
}

int finalize_retry_fails(const struct finalize_retry *rt, const char *batch_id)
{
    const struct retry_slot *e = rt ? retry_find(rt, batch_id) : NULL;
    return e ? e->fails : 0;
}

int64_t finalize_retry_failed(struct finalize_retry *rt, const char *batch_id, int64_t now_ms)
{
    struct retry_slot *e = (struct retry_slot *)retry_find(rt, batch_id);
    if (!e) { /* a free slot, else the one due soonest */
        for (int i = 0; i < FINALIZE_RETRY_SLOTS; i++)
            if (!rt->s[i].id[0]) {
                e = &rt->s[i];
                break;
            }
        if (!e) {
            e = &rt->s[0];
            for (int i = 1; i < FINALIZE_RETRY_SLOTS; i++)
                if (rt->s[i].next_ms < e->next_ms)
                    e = &rt->s[i];
        }
        memset(e, 0, sizeof *e);
        snprintf(e->id, sizeof e->id, "%s", batch_id);
    }
    if (e->fails < 1 << 20)
        e->fails++;
    int64_t d = finalize_retry_delay_ms(e->fails);
    e->next_ms = now_ms + d;
    return d;
}

void finalize_retry_clear(struct finalize_retry *rt, const char *batch_id)
{
    struct retry_slot *e = rt ? (struct retry_slot *)retry_find(rt, batch_id) : NULL;
    if (e)
        memset(e, 0, sizeof *e);
}

int finalize_sweep(struct store *st, int64_t now, int max_batches, struct finalize_retry *rt, int64_t mono_ms,
                   int *n_finished)
{
    char(*ids)[ID_MAX] = NULL;
    size_t n = 0;
    int rc = store_batch_ids_to_finalize(st, now, max_batches, &ids, &n);
    if (rc)
        return rc;
    int first = 0, fin = 0;
    for (size_t i = 0; i < n; i++) {
        struct finalize_report rep;
        if (!finalize_retry_due(rt, ids[i], mono_ms))
            continue; /* failed lately: its backoff has not passed */
        /* several jobd on one PostgreSQL database: one finalizes a batch at
         * a time (its files have fixed names); the others skip it */
        int owned = 0;
        int r = store_own_try(st, STORE_OWN_FINALIZE, ids[i], &owned);
        if (!r && !owned)
            continue;
        if (!r) {
            r = finalize_batch(st, ids[i], now, NULL, &rep);
            store_own_release(st, STORE_OWN_FINALIZE, ids[i]);
        }
        if (r) {
            if (rt) {
                int64_t d = finalize_retry_failed(rt, ids[i], mono_ms);
                log_warn("finalize: batch %s: %s (attempt %d; next in %lld ms)", ids[i], err_msg(r),
                         finalize_retry_fails(rt, ids[i]), (long long)d);
            } else {
                log_warn("finalize: batch %s: %s", ids[i], err_msg(r));
            }
            if (!first)
                first = r;
        } else {
            finalize_retry_clear(rt, ids[i]);
            if (rep.done)
                fin++;
        }
    }
    free(ids);
    if (n_finished)
        *n_finished = fin;
    return first;
}
