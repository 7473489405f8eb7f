/*
 * http_defer.c - what a handler needs while a request waits for its
 * deferred answer, with every libuv handle owned here (so the routes above
 * never touch libuv): work on the thread pool (http_req_queue_work) and a
 * streamed answer produced on the thread pool with backpressure
 * (http_respond_stream). It sits above http_server.c and uses only the
 * server's calls (http_req_loop, http_req_send_queue, http_respond_*); the
 * request's own timer belongs to the request's lifecycle and lives there.
 *
 * Ownership. A stream owns a uv_work_t and a uv_timer_t in one struct,
 * freed in the timer's close callback after done(arg) ran.
 *
 * Loop thread, except the work and read callbacks (thread pool).
 */
#include <stdlib.h>

#include "common/err.h"
#include "jobd/http/http_int.h"

/* ---- work on the thread pool ------------------------------------------------------------ */

struct qwork {
    uv_work_t w;
    struct http_req *req;
    void (*work)(void *arg);
    void (*after)(struct http_req *req, int status, void *arg);
    void *arg;
};

static void qw_work(uv_work_t *w)
{
    struct qwork *q = w->data;
    q->work(q->arg);
}

static void qw_after(uv_work_t *w, int status)
{
    struct qwork *q = w->data;
    q->after(q->req, status, q->arg);
    free(q);
}

int http_req_queue_work(struct http_req *req, void (*work)(void *arg),
                        void (*after)(struct http_req *req, int status, void *arg), void *arg)
{
    if (!req || !req->srv || !work || !after)
        return ERR_INVAL;
    struct qwork *q = calloc(1, sizeof *q);
    if (!q)
        return ERR_NOMEM;
    q->req = req;
    q->work = work;
    q->after = after;
    q->arg = arg;
    q->w.data = q;
    if (uv_queue_work(http_req_loop(req), &q->w, qw_work, qw_after) != 0) {
        free(q);
        return ERR_INTERNAL;
    }
    return 0;
}

/* ---- streamed answer -------------------------------------------------------------------- */

/* Per stream: one chunk, at most STREAM_QUEUE_MAX + a chunk queued for the
 * socket. While the queue is over the mark the stream looks again after
 * STREAM_POLL_MS, doubling up to STREAM_POLL_MAX_MS while it stays full, so
 * a thousand clients reading at 1 KB/s cost the loop a few thousand timer
 * callbacks a second, not 200,000 (each looked every 5 ms). */
#define STREAM_CHUNK (64u * 1024)
#define STREAM_QUEUE_MAX (128u * 1024)
#define STREAM_POLL_MS 5
#define STREAM_POLL_MAX_MS 250

struct http_stream {
    uv_work_t w;
    uv_timer_t t;
    struct http_server *srv; /* holds one of its max_streams places */
    struct http_req *req;
    http_read_fn read;
    void (*done)(void *arg, int err);
    void *arg;
    char *chunk;
    size_t len;
    int eof, err;
    unsigned poll_ms; /* the next wait while the queue is full */
};

static void stream_closed(uv_handle_t *h)
{
    struct http_stream *s = h->data;
    s->done(s->arg, s->err);
    http_server_stream_release(s->srv);
    free(s->chunk);
    free(s);
}

static void stream_finish(struct http_stream *s)
{
    if (s->err)
        http_respond_abort(s->req); /* a cut answer, not a short one that looks whole */
    else
        http_respond_end(s->req);
    s->req = NULL;
    uv_close((uv_handle_t *)&s->t, stream_closed);
}

static void stream_work(uv_work_t *w)
{
    struct http_stream *s = w->data;
    s->len = 0;
    while (s->len < STREAM_CHUNK) {
        size_t n = 0;
        int rc = s->read(s->arg, s->chunk + s->len, STREAM_CHUNK - s->len, &n);
        if (rc < 0) {
            s->err = rc;
            break;
        }
        if (n == 0) {
            s->eof = 1;
            break;
        }
        s->len += n;
    }
}

static void stream_next(struct http_stream *s);

static void stream_after(uv_work_t *w, int status)
{
    struct http_stream *s = w->data;
    if (status)
        s->err = ERR_INTERNAL;
    if (s->len && http_respond_write(s->req, s->chunk, s->len) == ERR_CONN) {
        stream_finish(s); /* the client went away */
        return;
    }
    if (s->err || s->eof) {
        stream_finish(s);
        return;
    }
    stream_next(s);
}

static void stream_tick(uv_timer_t *t)
{
    stream_next(t->data);
}

static void stream_next(struct http_stream *s)
{
    if (http_req_send_queue(s->req) > STREAM_QUEUE_MAX) {
        http_req_stream_waited(s->req);
        s->poll_ms = s->poll_ms ? (s->poll_ms * 2 > STREAM_POLL_MAX_MS ? STREAM_POLL_MAX_MS : s->poll_ms * 2)
                                : STREAM_POLL_MS;
        uv_timer_start(&s->t, stream_tick, s->poll_ms, 0);
        return;
    }
    s->poll_ms = 0;
    if (uv_queue_work(http_req_loop(s->req), &s->w, stream_work, stream_after) != 0) {
        s->err = ERR_INTERNAL;
        stream_finish(s);
    }
}

int http_respond_stream(struct http_req *req, int status, const char *content_type, http_read_fn read,
                        void (*done)(void *arg, int err), void *arg)
{
    if (!req || !req->srv || !read || !done || status < 100 || status > 999)
        return ERR_INVAL;
    if (req->responded)
        return ERR_BADSTATE;
    struct http_server *srv;
    int rc = http_req_stream_acquire(req, &srv);
    if (rc)
        return rc;
    struct http_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->chunk = malloc(STREAM_CHUNK))) {
        free(s);
        http_server_stream_release(srv);
        return ERR_NOMEM;
    }
    if (uv_timer_init(http_req_loop(req), &s->t) != 0) {
        free(s->chunk);
        free(s);
        http_server_stream_release(srv);
        return ERR_INTERNAL;
    }
    s->srv = srv;
    s->req = req;
    s->read = read;
    s->done = done;
    s->arg = arg;
    s->w.data = s;
    s->t.data = s;
    rc = http_respond_begin(req, status, content_type);
    if (rc && rc != ERR_CONN) {
        /* the head could not be built or written: the connection was closed
         * and the request retired with it (the arguments were checked above,
         * so no other error is left). The stream ends before its first read;
         * done runs from the timer's close callback. */
        s->err = rc;
        s->req = NULL;
        uv_close((uv_handle_t *)&s->t, stream_closed);
        return 0;
    }
    stream_next(s); /* ERR_CONN: the client is gone; the first chunk's write fails and ends it */
    return 0;
}
