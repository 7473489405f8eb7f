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
#include "jobd/intake/jsonl.h"

/* ---- errors ----------------------------------------------------------------------------- */

struct errlist {
    json_t *arr; /* [{code, line, message, param}] */
};

static int errlist_add(struct errlist *el, const struct problem *e)
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
    struct problem e;
    char msg[sizeof e.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    problem_setf(&e, code, param, "%s", msg);
    e.line = line;
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
    struct jsonl_reader *rd;
    struct errlist el;
    struct buf body;      /* compact JSON of the current body */
    char model[128];      /* the batch's model (first valid line) */
    int64_t n_requests;   /* committed + pending rows */
    int64_t rows_in_tx;
    int64_t now;          /* created_at of the rows: refreshed at each checkpoint */
    int64_t ckpt;         /* the checkpoint line this ingester last committed or began from */
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
    struct jsonl_caps caps = {g->lim->max_line_bytes, g->lim->max_file_bytes, g->lim->max_requests};
    rc = jsonl_reader_open_blob(store_blobs(g->st), f.storage_path, &caps, &g->rd);
    if (rc == ERR_NOTFOUND) {
        *fail_batch = 1;
        log_error("ingest: %s: input file %s is missing: %s", g->b.id, f.id, f.storage_path);
        return errlist_addf(&g->el, "file_not_found", 0, "input_file_id",
                            "The content of input file %s is missing.", f.id);
    }
    if (rc == ERR_INVAL)
        log_error("ingest: %s: refusing storage path '%s'", g->b.id, f.storage_path);
    else if (rc)
        log_error("ingest: %s: cannot read input file %s: %s", g->b.id, f.id, err_msg(rc));
    return rc;
}

/* A queued row whose custom_id was taken (store_request_add's on_dup). */
static int on_dup(void *ctx, int64_t line, const char *custom_id, int64_t first_line)
{
    struct ingest *g = ctx;
    g->n_requests--;
    g->rows_in_tx--;
    return errlist_addf(&g->el, "duplicate_custom_id", line, "custom_id",
                        "The custom_id '%.100s' is a duplicate of line %lld; custom_id must be "
                        "unique within a batch.", custom_id, (long long)first_line);
}

/* Write the rows the store queued (their duplicates join the errors, in
 * line order, before any error of a later line). */
static int rows_flush(struct ingest *g)
{
    return g->in_tx ? store_request_flush(g->st, on_dup, g) : 0;
}

static int tx_open(struct ingest *g)
{
    if (g->in_tx)
        return 0;
    int rc = store_tx_begin(g->st);
    if (rc)
        return rc;
    g->in_tx = 1;
    /* another jobd instance may have ingested past our checkpoint (its
     * ownership outlived ours, store_own_try): then this chunk must not be
     * written (ERR_BADSTATE: stop) */
    return store_ingest_fence(g->st, g->b.id, g->ckpt);
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
    int rc = rows_flush(g);
    if (rc)
        return rc;
    char *errs = errlist_dump(&g->el);
    rc = store_ingest_checkpoint(g->st, g->b.id, line, g->n_requests, errs, *g->model ? g->model : NULL);
    free(errs);
    if (!rc) {
        g->in_tx = 0;
        rc = store_tx_commit(g->st);
        if (!rc)
            g->ckpt = line;
        if (!rc && g->hooks && g->hooks->on_commit)
            g->hooks->on_commit(g->hooks->ctx, line);
    }
    g->rows_in_tx = 0;
    g->now = clock_wall_s();
    return rc;
}

static int handle_line(struct ingest *g, const char *p, size_t n, int64_t ln)
{
    struct problem e = {.line = ln};
    struct ingest_line l = {0};
    int rc = ingest_line_check(p, n, g->b.endpoint, g->lim, &l, &e);
    if (rc == ERR_INVAL) {
        e.line = ln;
        return (rc = rows_flush(g)) ? rc : errlist_add(&g->el, &e);
    }
    if (rc)
        return rc;
    if (!*g->model)
        snprintf(g->model, sizeof g->model, "%s", l.model);
    else if (strcmp(g->model, l.model) != 0) /* several models: each request routes by its own */
        snprintf(g->model, sizeof g->model, "%s", STORE_MODEL_MIXED);
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
    /* counted now; on_dup takes a duplicate back out when the store finds it */
    g->n_requests++;
    g->rows_in_tx++;
    rc = store_request_add(g->st, &q, on_dup, g);
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
    int64_t ckpt = g->b.ingest_line, nonblank = 0;
    int rc = 0;
    for (;;) {
        struct jsonl_line l;
        if ((rc = jsonl_reader_next(g->rd, &l)))
            return rc;
        nonblank = l.n_requests;
        /* an error of this line follows the duplicates of the rows before it */
        if (l.kind != JSONL_REQUEST && l.kind != JSONL_BLANK && l.kind != JSONL_EOF && (rc = rows_flush(g)))
            return rc;
        switch (l.kind) {
        case JSONL_EOF: goto done;
        case JSONL_CORRUPT:
            return errlist_addf(&g->el, "invalid_file", l.line, NULL,
                                "The input is not a valid zstd stream (corrupt or truncated).");
        case JSONL_TOO_BIG:
            return errlist_addf(&g->el, "file_too_large", l.line, NULL,
                                "The input file is larger than the limit of %llu bytes.",
                                (unsigned long long)lim->max_file_bytes);
        case JSONL_TOO_MANY:
            return errlist_addf(&g->el, "too_many_requests_in_file", l.line, NULL,
                                "The input file has more than %lld requests.", (long long)lim->max_requests);
        case JSONL_BLANK: goto next;
        case JSONL_TOO_LONG:
            if (l.line > ckpt &&
                (rc = errlist_addf(&g->el, "line_too_long", l.line, NULL,
                                   "This line is longer than the limit of %zu bytes.", lim->max_line_bytes)))
                return rc;
            break;
        case JSONL_REQUEST:
            if (l.line > ckpt && (rc = handle_line(g, l.p, l.n, l.line)))
                return rc;
            break;
        }
        if ((int)json_array_size(g->el.arr) >= lim->max_errors)
            break;
        if (g->rows_in_tx >= lim->rows_per_tx && (rc = tx_checkpoint(g, l.line)))
            return rc;
    next:
        if (g->hooks && g->hooks->on_line && g->hooks->on_line(g->hooks->ctx, l.line))
            return ERR_BUSY;
    }
done:
    if ((rc = rows_flush(g)))
        return rc;
    /* the last rows' duplicates may go past the cap: the first max_errors stay */
    while ((int)json_array_size(g->el.arr) > lim->max_errors)
        json_array_remove(g->el.arr, json_array_size(g->el.arr) - 1);
    *n_lines = jsonl_reader_lines(g->rd);
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
    buf_init(&g.body, lim->max_line_bytes + 64);
    g.el.arr = json_array();
    int rc = 0, fail_batch = 0;
    if (!g.el.arr) {
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
    g.ckpt = g.b.ingest_line;
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
        rc = errs ? tx_open(&g) : ERR_NOMEM;
        if (!rc && !(rc = store_ingest_fail(st, batch_id, errs, clock_wall_s()))) {
            g.in_tx = 0;
            rc = store_tx_commit(st);
        }
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
    jsonl_reader_free(g.rd);
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

/* Feed every valid line of rd to on_line (rd is freed). */
static int scan_reader(struct jsonl_reader *rd, const char *endpoint, const struct ingest_limits *lim,
                       void (*on_line)(void *ctx, const struct ingest_line *l), void *ctx, int64_t *n_lines)
{
    int rc;
    for (;;) {
        struct jsonl_line l;
        if ((rc = jsonl_reader_next(rd, &l)))
            goto out;
        if (l.kind == JSONL_BLANK || l.kind == JSONL_TOO_LONG)
            continue;
        if (l.kind != JSONL_REQUEST)
            break; /* the end, or where ingest fails the whole file: not this scan's business */
        struct problem e;
        struct ingest_line il = {0};
        int c = ingest_line_check(l.p, l.n, endpoint, lim, &il, &e);
        if (c == 0 && on_line)
            on_line(ctx, &il);
        ingest_line_release(&il);
        if (c && c != ERR_INVAL) {
            rc = c;
            goto out;
        }
    }
    if (n_lines)
        *n_lines = jsonl_reader_lines(rd);
out:
    jsonl_reader_free(rd);
    return rc;
}

int ingest_scan_file(struct blob_store *bs, const char *path, const char *endpoint,
                     const struct ingest_limits *lim, void (*on_line)(void *ctx, const struct ingest_line *l),
                     void *ctx, int64_t *n_lines)
{
    struct ingest_limits deflim;
    if (!lim) {
        ingest_limits_default(&deflim);
        lim = &deflim;
    }
    struct jsonl_caps caps = {lim->max_line_bytes, lim->max_file_bytes, lim->max_requests};
    struct jsonl_reader *rd = NULL;
    int rc = bs ? jsonl_reader_open_blob(bs, path, &caps, &rd) : jsonl_reader_open(path, &caps, &rd);
    return rc ? rc : scan_reader(rd, endpoint, lim, on_line, ctx, n_lines);
}

/* ---- admission estimate ------------------------------------------------------ */

struct estimate_scan {
    const struct usage_prices *prices;
    struct budget_estimate e;
    int rc;
};

static void estimate_line(void *ctx, const struct ingest_line *l)
{
    struct estimate_scan *sc = ctx;
    if (!sc->rc)
        sc->rc = budget_estimate_add(&sc->e, sc->prices, l->model, l->prompt_tokens_est, l->max_tokens);
}

int ingest_estimate_file(struct blob_store *bs, const char *path, const char *endpoint, const struct ingest_limits *lim,
                         const struct usage_prices *prices, struct budget_estimate *out)
{
    struct estimate_scan sc;
    memset(&sc, 0, sizeof sc);
    sc.prices = prices;
    int rc = ingest_scan_file(bs, path, endpoint, lim, estimate_line, &sc, NULL);
    if (!rc)
        rc = sc.rc;
    if (!rc)
        *out = sc.e;
    return rc;
}
