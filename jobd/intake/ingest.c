/*
 * ingest.c - the ingest driver: stream the input file line by line, check
 * each line, insert valid ones in checkpointed transactions, and finish the
 * batch atomically (see ingest.h for the design and crash behaviour).
 * Runs on the caller's thread.
 */
#include "jobd/intake/ingest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "common/zst.h"

#define CHUNK_BYTES (256u << 10)

/* ---- line reader ------------------------------------------------------------------------- */

struct reader {
    int fd;
    struct zst_reader *z;   /* NULL for a plain file */
    char *chunk;            /* CHUNK_BYTES */
    size_t len, pos;        /* bytes in chunk, scan position */
    struct buf line;        /* a line spanning chunks, capped at max_line + 1 */
    size_t max_line;
    uint64_t total;         /* decompressed bytes read so far */
    uint64_t max_total;
    int eof;
    /* the pending prefix read to sniff the format, served before the stream */
    unsigned char head[4];
    size_t head_len, head_pos;
};

enum { RD_LINE = 1, RD_EOF = 0, RD_TOOBIG = 2 };

static ssize_t reader_fill(struct reader *r)
{
    size_t off = 0;
    while (r->head_pos < r->head_len && off < CHUNK_BYTES)
        r->chunk[off++] = (char)r->head[r->head_pos++];
    if (off)
        return (ssize_t)off;
    if (r->z)
        return zst_reader_read(r->z, r->chunk, CHUNK_BYTES);
    for (;;) {
        ssize_t n = read(r->fd, r->chunk, CHUNK_BYTES);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return ERR_IO;
    }
}

/* Next line (without '\n'): RD_LINE with *p and *n (valid until the next call;
 * *too_long set if it exceeded max_line, in which case *n is not meaningful),
 * RD_EOF, RD_TOOBIG (max_total exceeded), or a negative ERR_*. */
static int reader_next(struct reader *r, const char **p, size_t *n, int *too_long)
{
    buf_reset(&r->line);
    int over = 0;
    for (;;) {
        if (r->pos == r->len) {
            if (r->eof)
                break;
            ssize_t got = reader_fill(r);
            if (got < 0)
                return (int)got;
            if (got == 0) {
                r->eof = 1;
                break;
            }
            r->len = (size_t)got;
            r->pos = 0;
            r->total += (uint64_t)got;
            if (r->total > r->max_total)
                return RD_TOOBIG;
        }
        char *start = r->chunk + r->pos;
        size_t avail = r->len - r->pos;
        char *nl = memchr(start, '\n', avail);
        size_t seg = nl ? (size_t)(nl - start) : avail;
        r->pos += seg + (nl ? 1 : 0);
        if (nl && r->line.len == 0 && !over) { /* whole line inside the chunk: no copy */
            *too_long = seg > r->max_line;
            *p = start;
            *n = seg;
            return RD_LINE;
        }
        if (!over && buf_append(&r->line, start, seg) != 0)
            over = 1; /* past the cap: keep scanning for the newline, drop bytes */
        if (nl)
            goto line;
    }
    if (r->line.len == 0 && !over)
        return RD_EOF; /* clean end (a final newline, or an empty file) */
line:
    *too_long = over || r->line.len > r->max_line;
    *p = r->line.data ? r->line.data : "";
    *n = r->line.len;
    return RD_LINE;
}

/* Take fd (closed by the owner of r) and sniff the zstd magic (28 b5 2f fd);
 * the sniffed bytes are served again by the reader. 0, ERR_IO, ERR_NOMEM. */
static int reader_attach(struct reader *r, int fd)
{
    r->fd = fd;
    while (r->head_len < 4) {
        ssize_t n = read(fd, r->head + r->head_len, 4 - r->head_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ERR_IO;
        if (n == 0)
            break;
        r->head_len += (size_t)n;
    }
    static const unsigned char magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (r->head_len == 4 && memcmp(r->head, magic, 4) == 0) {
        r->head_len = 0; /* the zstd reader reads from the start of the file */
        if (lseek(fd, 0, SEEK_SET) != 0)
            return ERR_IO;
        return zst_reader_new(zst_fd_source, &r->fd, &r->z);
    }
    return 0;
}

/* ---- errors ----------------------------------------------------------------------------- */

struct errlist {
    json_t *arr; /* [{code, line, message, param}] */
};

static int errlist_add(struct errlist *el, const struct ingest_error *e)
{
    json_t *o = json_pack("{s:s, s:o, s:s, s:o}", "code", e->code, "line",
                          e->line > 0 ? json_integer(e->line) : json_null(), "message", e->message,
                          "param", *e->param ? json_string(e->param) : json_null());
    if (!o || json_array_append_new(el->arr, o))
        return ERR_NOMEM;
    return 0;
}

__attribute__((format(printf, 5, 6))) static int errlist_addf(struct errlist *el, const char *code,
                                                              int64_t line, const char *param,
                                                              const char *fmt, ...)
{
    struct ingest_error e = {.line = line};
    snprintf(e.code, sizeof e.code, "%s", code);
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return errlist_add(el, &e);
}

static char *errlist_dump(const struct errlist *el)
{
    return json_array_size(el->arr) ? json_dumps(el->arr, JSON_COMPACT) : NULL;
}

/* ---- the driver -------------------------------------------------------------------------- */

struct ingest {
    struct store *st;
    const struct ingest_limits *lim;
    const struct ingest_hooks *hooks;
    struct store_batch b;
    struct reader rd;
    struct errlist el;
    struct buf body;      /* compact JSON of the current body */
    char model[128];      /* the batch's model (first valid line) */
    int64_t n_requests;   /* committed + pending rows */
    int64_t rows_in_tx;
    int64_t now;          /* created_at of the rows: refreshed at each checkpoint */
    int in_tx;
};

static int open_input(struct ingest *g, int *fail_batch)
{
    struct store_file f;
    int rc = store_file_get(g->st, g->b.tenant_id, g->b.input_file_id, &f);
    if (rc == ERR_NOTFOUND) {
        *fail_batch = 1;
        return errlist_addf(&g->el, "file_not_found", 0, "input_file_id",
                            "The input file %s does not exist.", g->b.input_file_id);
    }
    if (rc)
        return rc;
    char path[STORE_PATH_MAX];
    if ((rc = store_path_abs(store_data_dir(g->st), f.storage_path, path, sizeof path))) {
        if (rc == ERR_CORRUPT)
            log_error("ingest: %s: refusing storage path '%s'", g->b.id, f.storage_path);
        return rc;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            *fail_batch = 1;
            log_error("ingest: %s: input file %s is missing: %s", g->b.id, f.id, path);
            return errlist_addf(&g->el, "file_not_found", 0, "input_file_id",
                                "The content of input file %s is missing.", f.id);
        }
        log_error("ingest: %s: cannot open %s: %s", g->b.id, path, strerror(errno));
        return ERR_IO;
    }
    return reader_attach(&g->rd, fd);
}

static int tx_open(struct ingest *g)
{
    if (g->in_tx)
        return 0;
    int rc = store_tx_begin(g->st);
    if (!rc)
        g->in_tx = 1;
    return rc;
}

static void tx_abort(struct ingest *g)
{
    if (g->in_tx)
        store_tx_rollback(g->st);
    g->in_tx = 0;
}

/* Commit the open chunk with a checkpoint at `line`. */
static int tx_checkpoint(struct ingest *g, int64_t line)
{
    if (!g->in_tx)
        return 0;
    char *errs = errlist_dump(&g->el);
    int rc = store_ingest_checkpoint(g->st, g->b.id, line, g->n_requests, errs,
                                     *g->model ? g->model : NULL);
    free(errs);
    if (!rc) {
        g->in_tx = 0;
        rc = store_tx_commit(g->st);
        if (!rc && g->hooks && g->hooks->on_commit)
            g->hooks->on_commit(g->hooks->ctx, line);
    }
    g->rows_in_tx = 0;
    g->now = clock_wall_s();
    return rc;
}

static int handle_line(struct ingest *g, const char *p, size_t n, int64_t ln)
{
    struct ingest_error e = {.line = ln};
    struct ingest_line l = {0};
    int rc = ingest_line_check(p, n, g->b.endpoint, g->lim, &l, &e);
    if (rc == ERR_PARSE) {
        e.line = ln;
        return errlist_add(&g->el, &e);
    }
    if (rc)
        return rc;
    if (!*g->model) {
        snprintf(g->model, sizeof g->model, "%s", l.model);
    } else if (strcmp(g->model, l.model) != 0) {
        rc = errlist_addf(&g->el, "mismatched_model", ln, "body.model",
                          "The model '%.60s' differs from '%.60s' used by earlier lines; a batch "
                          "uses a single model.", l.model, g->model);
        goto out;
    }
    buf_reset(&g->body);
    if ((!l.body_raw && (rc = js_dump(&g->body, l.body))) || (rc = tx_open(g)))
        goto out;
    struct store_request_new q = {
        .batch_id = g->b.id, .tenant_id = g->b.tenant_id, .line = ln, .custom_id = l.custom_id,
        .model = l.model, .body = l.body_raw ? l.body_raw : g->body.data,
        .body_len = l.body_raw ? l.body_raw_len : g->body.len,
        .prompt_tokens_est = l.prompt_tokens_est, .max_tokens = l.max_tokens,
        .now = g->now,
    };
    int64_t dup = 0;
    rc = store_request_add(g->st, &q, &dup);
    if (rc == ERR_EXISTS) {
        rc = errlist_addf(&g->el, "duplicate_custom_id", ln, "custom_id",
                          "The custom_id '%.100s' is a duplicate of line %lld; custom_id must be "
                          "unique within a batch.", l.custom_id, (long long)dup);
    } else if (!rc) {
        g->n_requests++;
        g->rows_in_tx++;
    }
out:
    ingest_line_release(&l);
    return rc;
}

/* Load the errors of an earlier run (checkpointed JSON array) into el. */
static int errlist_load(struct errlist *el, const char *text)
{
    if (!text)
        return 0;
    json_t *v = json_loads(text, 0, NULL);
    if (!json_is_array(v)) {
        json_decref(v);
        return ERR_CORRUPT;
    }
    json_decref(el->arr);
    el->arr = v;
    return 0;
}

/* Read the whole file. Returns 0 when the reading part is over (errors
 * collected in g->el), or an error that leaves the batch resumable. */
static int ingest_stream(struct ingest *g, int64_t *n_lines)
{
    const struct ingest_limits *lim = g->lim;
    int64_t ckpt = g->b.ingest_line, ln = 0, nonblank = 0;
    int rc = 0;
    for (;;) {
        const char *p = NULL;
        size_t n = 0;
        int too_long = 0;
        int r = reader_next(&g->rd, &p, &n, &too_long);
        if (r < 0) {
            if (r == ERR_CORRUPT)
                return errlist_addf(&g->el, "invalid_file", ln + 1, NULL,
                                    "The input is not a valid zstd stream (corrupt or truncated).");
            return r;
        }
        if (r == RD_TOOBIG)
            return errlist_addf(&g->el, "file_too_large", ln + 1, NULL,
                                "The input file is larger than the limit of %llu bytes.",
                                (unsigned long long)lim->max_file_bytes);
        if (r == RD_EOF)
            break;
        ln++;
        if (too_long) {
            nonblank++;
            if (ln > ckpt &&
                (rc = errlist_addf(&g->el, "line_too_long", ln, NULL,
                                   "This line is longer than the limit of %zu bytes.", lim->max_line_bytes)))
                return rc;
        } else {
            if (ln == 1 && n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) {
                p += 3; /* UTF-8 byte order mark */
                n -= 3;
            }
            if (n && p[n - 1] == '\r')
                n--;
            size_t i = 0;
            while (i < n && (p[i] == ' ' || p[i] == '\t'))
                i++;
            if (i == n)
                goto next; /* blank line: ignored, but it keeps its line number */
            if (++nonblank > lim->max_requests)
                return errlist_addf(&g->el, "too_many_requests_in_file", ln, NULL,
                                    "The input file has more than %lld requests.",
                                    (long long)lim->max_requests);
            if (ln > ckpt && (rc = handle_line(g, p, n, ln)))
                return rc;
        }
        if ((int)json_array_size(g->el.arr) >= lim->max_errors)
            break;
        if (g->rows_in_tx >= lim->rows_per_tx && (rc = tx_checkpoint(g, ln)))
            return rc;
    next:
        if (g->hooks && g->hooks->on_line && g->hooks->on_line(g->hooks->ctx, ln))
            return ERR_BUSY;
    }
    *n_lines = ln;
    if (nonblank == 0 && json_array_size(g->el.arr) == 0)
        return errlist_addf(&g->el, "empty_file", 0, NULL, "The input file has no requests.");
    return 0;
}

/* The batch left 'validating' under us: finish a cancellation. */
static int ingest_lost_race(struct ingest *g, struct ingest_report *rep)
{
    tx_abort(g);
    struct store_batch cur;
    int rc = store_batch_get(g->st, NULL, g->b.id, &cur);
    if (rc)
        return rc;
    enum store_batch_status s = cur.status;
    store_batch_release(&cur);
    if (s != STORE_BATCH_CANCELLING)
        return ERR_BADSTATE;
    if ((rc = store_ingest_cancelled(g->st, g->b.id, clock_wall_s())))
        return rc;
    rep->outcome = INGEST_CANCELLED;
    return 0;
}

int ingest_batch(struct store *st, const char *batch_id, const struct ingest_limits *lim,
                 const struct ingest_hooks *hooks, struct ingest_report *out)
{
    struct ingest_limits deflim;
    if (!lim) {
        ingest_limits_default(&deflim);
        lim = &deflim;
    }
    struct ingest g = {.st = st, .lim = lim, .hooks = hooks, .now = clock_wall_s()};
    struct ingest_report rep = {0};
    g.rd.fd = -1;
    g.rd.max_line = lim->max_line_bytes;
    g.rd.max_total = lim->max_file_bytes;
    buf_init(&g.rd.line, lim->max_line_bytes + 1);
    buf_init(&g.body, lim->max_line_bytes + 64);
    g.el.arr = json_array();
    g.rd.chunk = malloc(CHUNK_BYTES);
    int rc = 0, fail_batch = 0;
    if (!g.el.arr || !g.rd.chunk) {
        rc = ERR_NOMEM;
        goto out;
    }
    if ((rc = store_batch_get(st, NULL, batch_id, &g.b)))
        goto out;
    if (g.b.status == STORE_BATCH_CANCELLING) {
        rc = ingest_lost_race(&g, &rep);
        goto out;
    }
    if (g.b.status != STORE_BATCH_VALIDATING) {
        rc = ERR_BADSTATE;
        goto out;
    }
    rep.resumed = g.b.ingest_line > 0;
    g.n_requests = g.b.ingest_requests;
    snprintf(g.model, sizeof g.model, "%s", g.b.model);
    if ((rc = errlist_load(&g.el, g.b.errors)))
        goto out;
    if ((rc = open_input(&g, &fail_batch)))
        goto out;
    if (!fail_batch && (rc = ingest_stream(&g, &rep.n_lines)))
        goto out;
    rep.n_errors = (int)json_array_size(g.el.arr);
    if (rep.n_errors) {
        tx_abort(&g);
        char *errs = errlist_dump(&g.el);
        rc = errs ? store_ingest_fail(st, batch_id, errs, clock_wall_s()) : ERR_NOMEM;
        free(errs);
        rep.outcome = INGEST_INVALID;
    } else {
        /* the last rows, n_total and validating -> in_progress: one transaction */
        if (!(rc = tx_open(&g)) && !(rc = store_ingest_succeed(st, batch_id, g.model, clock_wall_s()))) {
            g.in_tx = 0;
            rc = store_tx_commit(st);
        }
        rep.outcome = INGEST_VALID;
        rep.n_requests = g.n_requests;
    }
    if (rc == ERR_BADSTATE)
        rc = ingest_lost_race(&g, &rep);
    if (!rc && rep.outcome == INGEST_CANCELLED) {
        rep.n_requests = 0;
    }
    if (!rc)
        log_info("ingest: %s: %s, %lld requests, %d errors, %lld lines%s", batch_id,
                 rep.outcome == INGEST_VALID     ? "valid"
                 : rep.outcome == INGEST_INVALID ? "invalid"
                                                 : "cancelled",
                 (long long)rep.n_requests, rep.n_errors, (long long)rep.n_lines,
                 rep.resumed ? " (resumed)" : "");
out:
    if (rc == ERR_BADSTATE && g.in_tx)
        rc = ingest_lost_race(&g, &rep);
    tx_abort(&g);
    zst_reader_free(g.rd.z);
    if (g.rd.fd >= 0)
        close(g.rd.fd);
    free(g.rd.chunk);
    buf_release(&g.rd.line);
    buf_release(&g.body);
    json_decref(g.el.arr);
    store_batch_release(&g.b);
    if (!rc && out)
        *out = rep;
    return rc;
}

int ingest_resume_all(struct store *st, const struct ingest_limits *lim, int *n_done)
{
    char(*ids)[ID_MAX] = NULL;
    size_t n = 0;
    int rc = store_batch_ids_in(st, STORE_BATCH_VALIDATING, &ids, &n);
    if (rc)
        return rc;
    int first = 0, done = 0;
    for (size_t i = 0; i < n; i++) {
        struct ingest_report rep;
        int r = ingest_batch(st, ids[i], lim, NULL, &rep);
        if (r) {
            log_error("ingest: resume of %s failed: %s", ids[i], err_msg(r));
            if (!first)
                first = r;
        } else {
            done++;
        }
    }
    free(ids);
    if (n_done)
        *n_done = done;
    return first;
}

int ingest_scan_file(const char *path, const char *endpoint, const struct ingest_limits *lim,
                     void (*on_line)(void *ctx, const struct ingest_line *l), void *ctx,
                     int64_t *n_lines)
{
    struct ingest_limits deflim;
    if (!lim) {
        ingest_limits_default(&deflim);
        lim = &deflim;
    }
    struct reader rd = {.fd = -1, .max_line = lim->max_line_bytes, .max_total = lim->max_file_bytes};
    buf_init(&rd.line, lim->max_line_bytes + 1);
    rd.chunk = malloc(CHUNK_BYTES);
    int rc = 0;
    int64_t ln = 0, nonblank = 0;
    if (!rd.chunk) {
        rc = ERR_NOMEM;
        goto out;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? ERR_NOTFOUND : ERR_IO;
        goto out;
    }
    if ((rc = reader_attach(&rd, fd)))
        goto out;
    for (;;) {
        const char *p = NULL;
        size_t n = 0;
        int too_long = 0;
        int r = reader_next(&rd, &p, &n, &too_long);
        if (r == ERR_CORRUPT || r == RD_TOOBIG || r == RD_EOF)
            break; /* what ingest will reject is not this scan's business */
        if (r < 0) {
            rc = r;
            goto out;
        }
        ln++;
        if (too_long)
            continue;
        if (ln == 1 && n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) {
            p += 3;
            n -= 3;
        }
        if (n && p[n - 1] == '\r')
            n--;
        size_t i = 0;
        while (i < n && (p[i] == ' ' || p[i] == '\t'))
            i++;
        if (i == n)
            continue;
        if (++nonblank > lim->max_requests)
            break;
        struct ingest_error e;
        struct ingest_line l = {0};
        int c = ingest_line_check(p, n, endpoint, lim, &l, &e);
        if (c == 0 && on_line)
            on_line(ctx, &l);
        ingest_line_release(&l);
        if (c && c != ERR_PARSE) {
            rc = c;
            goto out;
        }
    }
    if (n_lines)
        *n_lines = ln;
out:
    zst_reader_free(rd.z);
    if (rd.fd >= 0)
        close(rd.fd);
    free(rd.chunk);
    buf_release(&rd.line);
    return rc;
}
