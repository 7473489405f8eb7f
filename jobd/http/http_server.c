/*
 * http_server.c - the libuv side of jobd/http/http.h: listener, connections,
 * deadlines, writes, file streaming, graceful shutdown, counters.
 *
 * A connection (struct http_conn) embeds its uv_tcp_t and uv_timer_t and is
 * freed only when both close callbacks and any uv_fs / uv_shutdown request
 * in flight have come back (c->refs). Its phase says what it waits for:
 *
 *   IDLE     no byte of a request yet        deadline: header (fresh) / idle (kept alive)
 *   HEAD     request line + headers arriving deadline: header_timeout from the first byte
 *   BODY     body arriving                   deadline: body_timeout since the last byte
 *   PAUSED   streamed body paused by the app no deadline
 *   HANDLING handler owes the answer         no deadline (send_timeout while writing)
 *   SENDING  answer being written            send_timeout since the last write progress
 *   LINGER   answered, closing: write side shut down, input discarded until EOF
 *            (so the client reads our answer instead of a reset), at most 2 s
 *
 * Input is parsed only in IDLE/HEAD/BODY, so a pipelined request waits in
 * c->in until the previous answer has been completely written; in the other
 * phases reading continues until max_pipeline_bytes are buffered, then
 * stops. One request at a time per connection keeps responses in order and
 * bounds memory per connection.
 *
 * Requests: the parse layer owns a request until its body is complete
 * (or until an early answer detaches it); then the connection owns it. If
 * the connection closes while the handler owes an answer, the request is
 * orphaned (req->conn = NULL) and freed when the answer comes. The server
 * counts live requests so graceful shutdown can wait for them.
 *
 * Loop thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/http/http_int.h"

#define READ_CHUNK 65536
#define FILE_CHUNK (256u * 1024)
#define LINGER_MS 2000
#define LINGER_MAX_BYTES (1u << 20)

enum phase { PH_IDLE, PH_HEAD, PH_BODY, PH_PAUSED, PH_HANDLING, PH_SENDING, PH_LINGER };

struct http_fsend {
    uv_fs_t fs;
    int fd;
    int busy;       /* uv_fs_read in flight */
    uint64_t off, remaining;
    char *buf;
};

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    struct http_server *srv;
    struct http_conn *prev, *next; /* srv->conns while open */
    int refs;
    enum phase phase;
    uint64_t phase_since, head_start, last_rx, body_start, last_tx;
    struct http_rx rx;
    struct buf in;
    size_t in_off;
    struct http_req *req;
    struct http_fsend *fsend;
    size_t writes_pending, send_queue;
    size_t linger_bytes;
    int closing, peer_eof, reading, processing, reprocess;
    int close_after, stop_parse, fresh, listed;
};

struct http_server {
    uv_loop_t *loop;
    struct http_config cfg;
    char host[64];
    struct http_limits lim;
    struct http_router router;
    struct http_route_ent unmatched;
    uv_tcp_t listener;
    uv_timer_t shutdown_timer;
    int listening, port;
    int shutting_down, listener_closed, timer_closed, done_called;
    void (*done)(void *arg);
    void *done_arg;
    struct http_conn *conns;
    size_t n_open, n_conns, n_reqs_live;
    struct http_stats st;
    char rbuf[READ_CHUNK];
};

struct wreq {
    uv_write_t w;
    struct http_conn *c;
    size_t len;
    int file_chunk;
    char data[];
};

static void conn_close(struct http_conn *c);
static void conn_process(struct http_conn *c);
static void conn_update_io(struct http_conn *c);
static void maybe_done(struct http_server *srv);
static void fsend_next(struct http_conn *c);

/* ---- config ---------------------------------------------------------------- */

void http_config_default(struct http_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 0;
    cfg->backlog = 1024;
    cfg->max_connections = 4096;
    cfg->max_streams = 256;
    cfg->max_header_bytes = 16 * 1024;
    cfg->max_headers = 100;
    cfg->max_url_bytes = 8 * 1024;
    cfg->max_query_params = 64;
    cfg->max_body_bytes = 1u << 20;
    cfg->max_pipeline_bytes = 64 * 1024;
    cfg->header_timeout_ms = 10000;
    cfg->body_timeout_ms = 30000;
    cfg->body_min_rate_bps = 0;
    cfg->idle_timeout_ms = 60000;
    cfg->send_timeout_ms = 60000;
    cfg->shutdown_timeout_ms = 30000;
    cfg->access_log = 1;
}

/* ---- requests and the server's books ---------------------------------------- */

static struct http_route_ent *route_ent(struct http_server *srv, const struct http_req *req)
{
    if (req->route && req->route->index >= 1 && req->route->index <= srv->router.n_routes)
        return srv->router.routes[req->route->index - 1];
    return &srv->unmatched;
}

static void req_attach(struct http_server *srv, struct http_conn *c, struct http_req *req)
{
    if (req->srv)
        return;
    req->srv = srv;
    req->conn = c;
    srv->n_reqs_live++;
}

/* ---- per-request timer ------------------------------------------------------------------ */

/* A request's timer (http_req_timer_start) is allocated on first use and
 * hangs off the request; answering stops it (answer_begin), retiring the
 * request closes it (req_retire), and the handle is freed in its close
 * callback (libuv's rule), which may run after the request is gone. */

struct http_rtimer {
    uv_timer_t t;
    struct http_req *req; /* NULL once closing */
    void (*cb)(struct http_req *req, void *arg);
    void *arg;
};

static void rtimer_fire(uv_timer_t *t)
{
    struct http_rtimer *rt = t->data;
    if (rt->req && !rt->req->responded)
        rt->cb(rt->req, rt->arg);
}

static void rtimer_closed(uv_handle_t *h)
{
    free(h->data);
}

int http_req_timer_start(struct http_req *req, uint64_t ms, void (*cb)(struct http_req *req, void *arg),
                         void *arg)
{
    if (!req || !cb || !req->srv)
        return ERR_INVAL;
    if (req->responded)
        return ERR_BADSTATE;
    if (!req->timer) {
        struct http_rtimer *rt = calloc(1, sizeof *rt);
        if (!rt)
            return ERR_NOMEM;
        if (uv_timer_init(http_req_loop(req), &rt->t) != 0) {
            free(rt);
            return ERR_INTERNAL;
        }
        rt->t.data = rt;
        rt->req = req;
        req->timer = rt;
    }
    req->timer->cb = cb;
    req->timer->arg = arg;
    return uv_timer_start(&req->timer->t, rtimer_fire, ms, 0) == 0 ? 0 : ERR_INTERNAL;
}

static void req_timer_stop(struct http_req *req)
{
    if (req->timer)
        uv_timer_stop(&req->timer->t);
}

static void req_timer_close(struct http_req *req)
{
    struct http_rtimer *rt = req->timer;
    if (!rt)
        return;
    req->timer = NULL;
    rt->req = NULL;
    uv_close((uv_handle_t *)&rt->t, rtimer_closed);
}

/* Log and count an answered request, then free it. */
static void req_retire(struct http_server *srv, struct http_req *req, const char *note)
{
    if (req->responded) {
        srv->st.requests_total++;
        http_route_count_add(route_ent(srv, req), req->status);
        if (srv->cfg.access_log)
            log_write(LOG_INFO, req->id,
                      "http method=%s path=%s status=%d bytes=%llu duration_ms=%llu%s",
                      http_req_method(req), http_req_path(req), req->status,
                      (unsigned long long)req->bytes_out,
                      (unsigned long long)(clock_mono_ms() - req->start_ms), note ? note : "");
    }
    if (req->srv)
        srv->n_reqs_live--;
    req_timer_close(req);
    http_req_destroy(req);
    maybe_done(srv);
}

static int body_pending(const struct http_req *req)
{
    return !req->body_done && (req->chunked || (req->has_clen && req->content_length > 0));
}

/* An answer began while the parse layer still holds the request: detach it. */
static void req_detach(struct http_conn *c, struct http_req *req)
{
    if (c->rx.req != req)
        return;
    c->rx.req = NULL;
    c->rx.detached = 1;
    if (body_pending(req))
        c->stop_parse = 1;
}

/* ---- writing ------------------------------------------------------------------- */

static void on_write(uv_write_t *w, int status)
{
    struct wreq *wr = (struct wreq *)w;
    struct http_conn *c = wr->c;
    int file_chunk = wr->file_chunk;
    c->writes_pending--;
    c->send_queue -= wr->len;
    free(wr);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->last_tx = clock_mono_ms();
    if (file_chunk) {
        fsend_next(c);
        return;
    }
    conn_update_io(c);
}

static struct wreq *wreq_new(struct http_conn *c, size_t len)
{
    struct wreq *wr = malloc(sizeof *wr + len);
    if (!wr)
        return NULL;
    memset(wr, 0, sizeof *wr);
    wr->c = c;
    wr->len = len;
    return wr;
}

static int wreq_send(struct http_conn *c, struct wreq *wr, const char *data)
{
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)wr->len);
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        free(wr);
        return ERR_CONN;
    }
    c->writes_pending++;
    c->send_queue += wr->len;
    c->srv->st.bytes_out += wr->len;
    if (c->writes_pending == 1)
        c->last_tx = clock_mono_ms();
    return 0;
}

/* Queue a copy of a then b (either may be empty). */
static int conn_write2(struct http_conn *c, const void *a, size_t an, const void *b, size_t bn)
{
    if (an + bn == 0)
        return 0;
    if (an + bn < an || an + bn > (size_t)UINT32_MAX)
        return ERR_TOOBIG;
    struct wreq *wr = wreq_new(c, an + bn);
    if (!wr)
        return ERR_NOMEM;
    if (an)
        memcpy(wr->data, a, an);
    if (bn)
        memcpy(wr->data + an, b, bn);
    return wreq_send(c, wr, wr->data);
}

/* ---- answering ------------------------------------------------------------------ */

static int decide_close(struct http_conn *c, const struct http_req *req)
{
    return !req->keep_alive || c->close_after || c->srv->shutting_down || body_pending(req) ||
           c->stop_parse;
}

/* Common start of an answer. Returns 1 when the client is gone (request
 * retired here), 0 to go on, or a negative error. */
static int answer_begin(struct http_req *req, int status, int retire_if_gone)
{
    if (!req)
        return ERR_INVAL;
    if (req->responded)
        return ERR_BADSTATE;
    if (status < 100 || status > 999)
        return ERR_INVAL;
    req->responded = 1;
    req->status = status;
    req_timer_stop(req);
    if (!req->conn && !retire_if_gone)
        return 1;
    if (!req->conn) {
        if (req->srv)
            req_retire(req->srv, req, " client_gone=1");
        else
            http_req_destroy(req);
        return 1;
    }
    req_detach(req->conn, req);
    return 0;
}

/* The connection failed us mid-answer: close it (the request goes with it). */
static int answer_abort(struct http_req *req, int rc)
{
    struct http_conn *c = req->conn;
    req->state = HTTP_REQ_SENDING; /* so conn_close retires it */
    conn_close(c);
    return rc;
}

static int no_body_status(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

/* The head of a whole answer of len body bytes into head (initialised here;
 * the caller releases it on 0), deciding whether the connection closes after
 * it. 0, or http_head_build's error with head released. */
static int answer_head(struct http_req *req, int status, const char *content_type, int64_t len,
                       struct buf *head)
{
    struct http_conn *c = req->conn;
    int close_conn = decide_close(c, req);
    if (close_conn)
        c->close_after = 1;
    buf_init(head, 64 * 1024);
    int rc = http_head_build(head, req, status, content_type, len, close_conn);
    if (rc)
        buf_release(head);
    return rc;
}

int http_respond(struct http_req *req, int status, const char *content_type, const void *body,
                 size_t len)
{
    int rc = answer_begin(req, status, 1);
    if (rc)
        return rc > 0 ? 0 : rc;
    struct http_conn *c = req->conn;
    if (no_body_status(status))
        len = 0;
    struct buf head;
    rc = answer_head(req, status, content_type, (int64_t)len, &head);
    if (rc)
        return answer_abort(req, rc);
    size_t send_len = req->method == HTTP_HEAD ? 0 : len;
    rc = conn_write2(c, head.data, head.len, body, send_len);
    buf_release(&head);
    if (rc)
        return answer_abort(req, rc);
    req->bytes_out = send_len;
    req->state = HTTP_REQ_SENDING;
    c->phase = PH_SENDING;
    conn_update_io(c);
    return 0;
}

int http_respond_error(struct http_req *req, int status, const char *type, const char *code,
                       const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct buf b;
    buf_init(&b, 16 * 1024);
    int rc = http_error_json(&b, status, type, code, param, msg);
    if (rc) {
        buf_release(&b);
        static const char fallback[] = "{\"error\":{\"message\":\"internal error\","
                                       "\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return http_respond(req, 500, "application/json", fallback, sizeof fallback - 1);
    }
    rc = http_respond(req, status, "application/json", b.data, b.len);
    buf_release(&b);
    return rc;
}

static void on_fs_read(uv_fs_t *fs);

static void fsend_free(struct http_fsend *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->buf);
    free(f);
}

static void fsend_next(struct http_conn *c)
{
    struct http_fsend *f = c->fsend;
    if (!f || c->closing)
        return;
    if (f->remaining == 0) {
        close(f->fd);
        f->fd = -1;
        conn_update_io(c);
        return;
    }
    size_t want = f->remaining < FILE_CHUNK ? (size_t)f->remaining : FILE_CHUNK;
    uv_buf_t b = uv_buf_init(f->buf, (unsigned)want);
    f->fs.data = c;
    if (uv_fs_read(c->srv->loop, &f->fs, f->fd, &b, 1, (int64_t)f->off, on_fs_read) != 0) {
        conn_close(c);
        return;
    }
    f->busy = 1;
    c->refs++;
}

static void conn_unref(struct http_conn *c);

static void on_fs_read(uv_fs_t *fs)
{
    struct http_conn *c = fs->data;
    struct http_fsend *f = c->fsend;
    ssize_t r = fs->result;
    uv_fs_req_cleanup(fs);
    f->busy = 0;
    if (c->closing) {
        conn_unref(c);
        return;
    }
    c->refs--;
    if (r <= 0) {
        /* read error or the file shrank: the promised length cannot be kept */
        log_warn("http: file read failed while answering %s: %s",
                 c->req ? c->req->id : "?", r < 0 ? uv_strerror((int)r) : "unexpected end of file");
        conn_close(c);
        return;
    }
    f->off += (uint64_t)r;
    f->remaining -= (uint64_t)r;
    struct wreq *wr = wreq_new(c, (size_t)r);
    if (!wr) {
        conn_close(c);
        return;
    }
    wr->file_chunk = 1;
    if (c->req)
        c->req->bytes_out += (uint64_t)r;
    if (wreq_send(c, wr, f->buf) != 0)
        conn_close(c);
}

int http_respond_fd(struct http_req *req, int status, const char *content_type, int fd,
                    uint64_t offset, uint64_t len)
{
    struct stat st;
    if (!req || req->responded) {
        if (fd >= 0)
            close(fd);
        return req ? ERR_BADSTATE : ERR_INVAL;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return ERR_IO;
    }
    int rc = answer_begin(req, status, 1);
    if (rc) {
        close(fd);
        return rc > 0 ? 0 : rc;
    }
    struct http_conn *c = req->conn;
    if (no_body_status(status))
        len = 0;
    struct buf head;
    rc = answer_head(req, status, content_type, (int64_t)len, &head);
    if (!rc) {
        rc = conn_write2(c, head.data, head.len, NULL, 0);
        buf_release(&head);
    }
    if (rc) {
        close(fd);
        return answer_abort(req, rc);
    }
    req->state = HTTP_REQ_SENDING;
    c->phase = PH_SENDING;
    if (req->method == HTTP_HEAD || len == 0) {
        close(fd);
        conn_update_io(c);
        return 0;
    }
    struct http_fsend *f = calloc(1, sizeof *f);
    if (f)
        f->buf = malloc(FILE_CHUNK);
    if (!f || !f->buf) {
        free(f);
        close(fd);
        return answer_abort(req, ERR_NOMEM);
    }
    f->fd = fd;
    f->off = offset;
    f->remaining = len;
    fsend_free(c->fsend);
    c->fsend = f;
    fsend_next(c);
    return 0;
}

int http_respond_file(struct http_req *req, int status, const char *content_type,
                      const char *path)
{
    if (!req || !path)
        return ERR_INVAL;
    if (req->responded)
        return ERR_BADSTATE;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? ERR_NOTFOUND : ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ERR_IO;
    }
    return http_respond_fd(req, status, content_type, fd, 0, (uint64_t)st.st_size);
}

int http_respond_begin(struct http_req *req, int status, const char *content_type)
{
    int rc = answer_begin(req, status, 0);
    if (rc > 0) {
        req->chunked_resp = 1; /* client gone: writes fail, end retires the request */
        return ERR_CONN;
    }
    if (rc)
        return rc;
    struct http_conn *c = req->conn;
    int http11 = req->http_major == 1 && req->http_minor >= 1;
    int close_conn = decide_close(c, req) || !http11;
    if (close_conn)
        c->close_after = 1;
    struct buf head;
    buf_init(&head, 64 * 1024);
    rc = http_head_build(&head, req, status, content_type, -1, close_conn);
    if (!rc)
        rc = conn_write2(c, head.data, head.len, NULL, 0);
    buf_release(&head);
    if (rc)
        return answer_abort(req, rc);
    req->chunked_resp = http11 ? 1 : 2; /* 2: close-delimited */
    return 0;
}

int http_respond_write(struct http_req *req, const void *data, size_t len)
{
    if (!req || !req->responded || !req->chunked_resp || req->chunked_ended)
        return ERR_BADSTATE;
    if (!req->conn)
        return ERR_CONN;
    if (len == 0 || req->method == HTTP_HEAD)
        return 0;
    struct http_conn *c = req->conn;
    char pre[32];
    int pn = 0;
    if (req->chunked_resp == 1)
        pn = snprintf(pre, sizeof pre, "%zx\r\n", len);
    struct wreq *wr = wreq_new(c, (size_t)pn + len + (req->chunked_resp == 1 ? 2 : 0));
    if (!wr)
        return ERR_NOMEM;
    memcpy(wr->data, pre, (size_t)pn);
    memcpy(wr->data + pn, data, len);
    if (req->chunked_resp == 1)
        memcpy(wr->data + pn + len, "\r\n", 2);
    if (wreq_send(c, wr, wr->data) != 0)
        return ERR_CONN;
    req->bytes_out += len;
    conn_update_io(c);
    return 0;
}

int http_respond_end(struct http_req *req)
{
    if (!req || !req->responded || !req->chunked_resp || req->chunked_ended)
        return ERR_BADSTATE;
    req->chunked_ended = 1;
    if (!req->conn) {
        if (req->srv)
            req_retire(req->srv, req, " client_gone=1");
        else
            http_req_destroy(req);
        return 0;
    }
    struct http_conn *c = req->conn;
    if (req->chunked_resp == 1 && req->method != HTTP_HEAD) {
        if (conn_write2(c, "0\r\n\r\n", 5, NULL, 0) != 0)
            return answer_abort(req, ERR_NOMEM);
    }
    req->state = HTTP_REQ_SENDING;
    c->phase = PH_SENDING;
    conn_update_io(c);
    return 0;
}

int http_respond_abort(struct http_req *req)
{
    if (!req || !req->responded || !req->chunked_resp || req->chunked_ended)
        return ERR_BADSTATE;
    req->chunked_ended = 1;
    if (!req->conn) {
        if (req->srv)
            req_retire(req->srv, req, " client_gone=1");
        else
            http_req_destroy(req);
        return 0;
    }
    answer_abort(req, 0); /* no last chunk: the client sees the answer end short */
    return 0;
}

size_t http_req_send_queue(const struct http_req *req)
{
    return req && req->conn ? req->conn->send_queue : 0;
}

void http_req_stream_waited(struct http_req *req)
{
    if (req && req->srv)
        req->srv->st.stream_waits++;
}

int http_req_stream_acquire(struct http_req *req, struct http_server **srv)
{
    if (!req || !req->srv)
        return ERR_INVAL;
    struct http_server *s = req->srv;
    if (s->st.streams_open >= s->cfg.max_streams) {
        s->st.streams_refused++;
        return ERR_BUSY;
    }
    s->st.streams_open++;
    *srv = s;
    return 0;
}

void http_server_stream_release(struct http_server *srv)
{
    if (srv && srv->st.streams_open > 0)
        srv->st.streams_open--;
}

/* ---- request accessors that need the server ----------------------------------- */

uv_loop_t *http_req_loop(const struct http_req *req)
{
    return req->srv ? req->srv->loop : NULL;
}

void http_req_set_data(struct http_req *req, void *data, void (*free_fn)(void *data))
{
    req->data = data;
    req->data_free = free_fn;
}

void *http_req_data(const struct http_req *req)
{
    return req->data;
}

int http_req_body_buffer(struct http_req *req, uint64_t max_bytes)
{
    if (!req->in_head_hook)
        return ERR_BADSTATE;
    req->body_kind = HTTP_BODY_KIND_BUFFER;
    if (max_bytes)
        req->body_limit = max_bytes;
    return 0;
}

int http_req_body_stream(struct http_req *req, uint64_t max_bytes, http_body_fn fn, void *arg)
{
    if (!req->in_head_hook || !fn)
        return req->in_head_hook ? ERR_INVAL : ERR_BADSTATE;
    req->body_kind = HTTP_BODY_KIND_STREAM;
    req->body_limit = max_bytes;
    req->body_fn = fn;
    req->body_arg = arg;
    return 0;
}

int http_req_body_resume(struct http_req *req)
{
    if (!req->body_paused)
        return ERR_BADSTATE;
    req->body_paused = 0;
    struct http_conn *c = req->conn;
    if (!c || c->closing)
        return 0;
    if (c->phase == PH_PAUSED) {
        c->phase = PH_BODY;
        c->last_rx = clock_mono_ms();
    }
    conn_process(c);
    return 0;
}

/* ---- connection lifecycle ------------------------------------------------------ */

static void conn_unlist(struct http_conn *c)
{
    struct http_server *srv = c->srv;
    if (!c->listed)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->listed = 0;
    srv->n_open--;
}

static void conn_unref(struct http_conn *c)
{
    if (--c->refs > 0)
        return;
    struct http_server *srv = c->srv;
    fsend_free(c->fsend);
    buf_release(&c->in);
    free(c);
    srv->n_conns--;
    srv->st.conns_open = srv->n_conns;
    maybe_done(srv);
}

static void on_handle_close(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void conn_close(struct http_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    struct http_server *srv = c->srv;
    conn_unlist(c);
    struct http_req *req = c->req;
    c->req = NULL;
    if (c->rx.req && c->rx.req != req)
        http_rx_release(&c->rx); /* a request still being parsed, not attached yet */
    if (req) {
        if (c->rx.req == req)
            c->rx.req = NULL;
        if (req->state == HTTP_REQ_HANDLING) {
            req->conn = NULL; /* orphan: freed when the handler answers */
        } else {
            req->conn = NULL;
            req_retire(srv, req, req->responded ? " aborted=1" : NULL);
        }
    }
    http_rx_release(&c->rx);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, on_handle_close);
    uv_close((uv_handle_t *)&c->timer, on_handle_close);
}

/* Canned answer when we cannot afford a request object (cap, timeouts). */
static void conn_try_write_error(struct http_conn *c, int status, const char *msg)
{
    /* no request reaches req_retire (the access log) on this path: log here */
    log_warn("http: status=%d %s Closing the connection.", status, msg);
    struct buf body, all;
    buf_init(&body, 4096);
    buf_init(&all, 8192);
    if (http_error_json(&body, status, NULL, NULL, NULL, msg) == 0 &&
        buf_printf(&all,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n%s",
                   status, http_status_reason(status), body.len, body.data) == 0) {
        uv_buf_t b = uv_buf_init(all.data, (unsigned)all.len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n > 0)
            c->srv->st.bytes_out += (uint64_t)n;
    }
    buf_release(&body);
    buf_release(&all);
}

static void on_shutdown(uv_shutdown_t *s, int status)
{
    struct http_conn *c = s->data;
    if (status < 0 && !c->closing)
        conn_close(c);
    conn_unref(c);
}

/* Answer written and the connection must close: shut our side, read and
 * discard what the client still sends, close on EOF or after LINGER_MS. */
static void conn_linger(struct http_conn *c)
{
    c->phase = PH_LINGER;
    c->phase_since = clock_mono_ms();
    c->shut.data = c;
    if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    c->refs++;
    conn_update_io(c);
}

/* The current request is completely answered and written. */
static void req_finished(struct http_conn *c)
{
    struct http_req *req = c->req;
    c->req = NULL;
    if (c->fsend) {
        fsend_free(c->fsend);
        c->fsend = NULL;
    }
    req->conn = NULL;
    req_retire(c->srv, req, NULL);
    if (c->close_after || c->srv->shutting_down) {
        conn_linger(c);
        return;
    }
    c->phase = PH_IDLE;
    c->fresh = 0;
    c->phase_since = clock_mono_ms();
    conn_process(c);
}

static void on_timer(uv_timer_t *t)
{
    struct http_conn *c = t->data;
    struct http_server *srv = c->srv;
    if (c->closing)
        return;
    switch (c->phase) {
    case PH_HEAD:
    case PH_BODY:
        srv->st.conns_timed_out++;
        conn_try_write_error(c, 408, c->phase == PH_HEAD ? "Request headers not received in time."
                                                         : "Request body not received in time.");
        break;
    case PH_LINGER:
        break;
    default:
        srv->st.conns_timed_out++;
        break;
    }
    conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    struct http_conn *c = h->data;
    (void)suggested;
    *b = uv_buf_init(c->srv->rbuf, sizeof c->srv->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/* Set reading and the deadline for the current phase; finish the answer
 * when it has been completely written; close when nothing more can come. */
static void conn_update_io(struct http_conn *c)
{
    if (c->closing)
        return;
    struct http_server *srv = c->srv;
    const struct http_config *cfg = &srv->cfg;
    uint64_t now = clock_mono_ms(), deadline = 0;
    int want_read = 0;

    struct http_req *req = c->req;
    if (c->phase == PH_SENDING && req && c->writes_pending == 0 &&
        (!c->fsend || (c->fsend->remaining == 0 && !c->fsend->busy)) &&
        (!req->chunked_resp || req->chunked_ended)) {
        req_finished(c);
        return;
    }
    if (c->peer_eof && (c->phase == PH_IDLE || c->phase == PH_HEAD || c->phase == PH_BODY ||
                        c->phase == PH_LINGER)) {
        conn_close(c); /* the client said all it will say, and it is not a whole request */
        return;
    }

    /* a timeout of 0 disables that deadline */
#define AFTER(t0, ms) ((ms) ? (t0) + (ms) : 0)
    switch (c->phase) {
    case PH_IDLE:
        want_read = 1;
        deadline = c->fresh ? AFTER(c->phase_since, cfg->header_timeout_ms)
                            : AFTER(c->phase_since, cfg->idle_timeout_ms);
        break;
    case PH_HEAD:
        want_read = 1;
        deadline = AFTER(c->head_start, cfg->header_timeout_ms);
        break;
    case PH_BODY:
        want_read = 1;
        deadline = AFTER(c->last_rx, cfg->body_timeout_ms);
        break;
    case PH_PAUSED:
        break;
    case PH_HANDLING:
    case PH_SENDING:
        want_read = c->in.len < cfg->max_pipeline_bytes && !c->stop_parse;
        if (c->writes_pending)
            deadline = AFTER(c->last_tx, cfg->send_timeout_ms);
        break;
    case PH_LINGER:
        want_read = 1;
        deadline = c->phase_since + LINGER_MS;
        break;
    }
#undef AFTER
    if (c->peer_eof)
        want_read = 0;
    if (want_read && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->reading = 1;
    } else if (!want_read && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
    if (deadline)
        uv_timer_start(&c->timer, on_timer, deadline > now ? deadline - now : 0, 0);
    else
        uv_timer_stop(&c->timer);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct http_conn *c = s->data;
    struct http_server *srv = c->srv;
    if (c->closing)
        return;
    if (nread > 0) {
        srv->st.bytes_in += (uint64_t)nread;
        uint64_t now = clock_mono_ms();
        if (c->phase == PH_LINGER) {
            c->linger_bytes += (size_t)nread;
            if (c->linger_bytes > LINGER_MAX_BYTES)
                conn_close(c);
            return;
        }
        if (buf_append(&c->in, b->base, (size_t)nread) != 0) {
            conn_close(c); /* cannot happen while reading stops at the caps */
            return;
        }
        if (c->phase == PH_BODY) {
            c->last_rx = now;
            uint64_t rate = srv->cfg.body_min_rate_bps;
            uint64_t grace = srv->cfg.body_timeout_ms ? srv->cfg.body_timeout_ms : 10000;
            if (rate && c->req && now - c->body_start > grace &&
                c->req->body_bytes * 1000 / (now - c->body_start) < rate) {
                srv->st.conns_timed_out++;
                conn_try_write_error(c, 408, "Request body arriving too slowly.");
                conn_close(c);
                return;
            }
        }
        conn_process(c);
        return;
    }
    if (nread == 0)
        return;
    if (nread == UV_EOF) {
        c->peer_eof = 1;
        if (c->phase == PH_LINGER) {
            conn_close(c);
            return;
        }
        conn_process(c);
        return;
    }
    conn_close(c); /* ECONNRESET and friends */
}

/* ---- the request state machine (per connection) --------------------------------- */

static void early_error(struct http_req *req, int status, const char *msg)
{
    http_respond_error(req, status, NULL, NULL, NULL, "%s", msg);
}

/* Headers complete: route, head hook, limits, 100-continue. */
static void on_head(struct http_conn *c)
{
    struct http_server *srv = c->srv;
    struct http_req *req = c->rx.req;
    uint64_t now = clock_mono_ms();
    c->req = req;
    req_attach(srv, c, req);
    req->state = HTTP_REQ_PARSING;
    if (srv->shutting_down)
        req->keep_alive = 0;
    c->phase = PH_BODY;
    c->body_start = c->last_rx = now;

    if (req->expect_bad) {
        early_error(req, 417, "Unsupported Expect header.");
        return;
    }
    struct buf allow;
    buf_init(&allow, 512);
    int m = http_router_match(&srv->router, req, &allow);
    if (m == ERR_PARSE) {
        buf_release(&allow);
        early_error(req, 400, "Invalid percent-encoding in the URL path.");
        return;
    }
    if (m == HTTP_MATCH_NOPATH || m == HTTP_MATCH_NOMETHOD) {
        if (m == HTTP_MATCH_NOMETHOD) {
            http_resp_header(req, "Allow", allow.data ? allow.data : "");
            http_respond_error(req, 405, NULL, NULL, NULL, "Method not allowed (%s %s).",
                               http_req_method(req), http_req_path(req));
        } else {
            http_respond_error(req, 404, NULL, NULL, NULL, "Invalid URL (%s %s)",
                               http_req_method(req), http_req_path(req));
        }
        buf_release(&allow);
        return;
    }
    buf_release(&allow);
    req->body_kind = HTTP_BODY_KIND_BUFFER;
    req->body_limit = req->route->r.max_body_bytes ? req->route->r.max_body_bytes
                                                   : srv->cfg.max_body_bytes;
    if (req->route->r.on_head) {
        req->in_head_hook = 1;
        req->route->r.on_head(req, req->route->r.arg);
        req->in_head_hook = 0;
        if (req->responded)
            return;
    }
    if (req->body_kind == HTTP_BODY_KIND_BUFFER) {
        uint64_t cap = req->body_limit ? req->body_limit : (uint64_t)SIZE_MAX - 1;
        buf_init(&req->body, cap > (uint64_t)SIZE_MAX - 1 ? SIZE_MAX - 1 : (size_t)cap);
    }
    if (req->has_clen && req->body_limit && req->content_length > req->body_limit) {
        http_respond_error(req, 413, NULL, "request_too_large", NULL,
                           "Request body too large: %llu bytes, the limit is %llu bytes.",
                           (unsigned long long)req->content_length,
                           (unsigned long long)req->body_limit);
        return;
    }
    if (req->expect_continue && body_pending(req)) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (conn_write2(c, cont, sizeof cont - 1, NULL, 0) != 0)
            conn_close(c);
    }
}

static void on_body_piece(struct http_conn *c)
{
    struct http_req *req = c->req;
    if (!req || !req->body_fn)
        return;
    int r = req->body_fn(req, c->rx.chunk, c->rx.chunk_len, req->body_arg);
    if (c->closing)
        return;
    if (r < 0) {
        if (!req->responded)
            http_respond_error(req, 500, NULL, NULL, NULL, "Could not store the request body.");
        c->stop_parse = 1;
        c->close_after = 1;
        return;
    }
    if (req->responded)
        return;
    if (r == HTTP_BODY_PAUSE && !req->body_done) {
        req->body_paused = 1;
        c->phase = PH_PAUSED;
    }
}

static void on_done(struct http_conn *c)
{
    struct http_req *req = http_rx_take(&c->rx);
    if (!req) {
        /* the end of a request answered early (detached): back to idle */
        c->phase = PH_IDLE;
        c->phase_since = clock_mono_ms();
        return;
    }
    c->req = req;
    if (req->responded)
        return; /* answered from the body callback; wait for the write */
    if (!req->route) {
        early_error(req, 500, "Internal error: no route.");
        return;
    }
    req->state = HTTP_REQ_HANDLING;
    c->phase = PH_HANDLING;
    req->route->r.handler(req, req->route->r.arg);
}

static void on_parse_error(struct http_conn *c)
{
    struct http_server *srv = c->srv;
    struct http_req *req = c->rx.req;
    c->stop_parse = 1;
    c->close_after = 1;
    if (req && req->responded) {
        /* an answer is already on its way; just stop */
        return;
    }
    if (!req) {
        req = http_req_alloc();
        if (!req) {
            conn_close(c);
            return;
        }
        req->http_major = 1;
        req->http_minor = 1;
        c->rx.req = req;
    }
    if (!req->http_major) {
        req->http_major = 1;
        req->http_minor = 1;
    }
    c->req = req;
    req_attach(srv, c, req);
    req->keep_alive = 0;
    req->state = HTTP_REQ_PARSING;
    int st = c->rx.err_status;
    const char *code = st == 413 ? "request_too_large" : NULL;
    http_respond_error(req, st, NULL, code, NULL, "%s", c->rx.err_msg);
}

static int can_parse(const struct http_conn *c)
{
    return !c->closing && !c->stop_parse &&
           (c->phase == PH_IDLE || c->phase == PH_HEAD || c->phase == PH_BODY);
}

static void conn_process(struct http_conn *c)
{
    if (c->processing) {
        c->reprocess = 1;
        return;
    }
    c->processing = 1;
    do {
        c->reprocess = 0;
        while (can_parse(c) && c->in_off < c->in.len) {
            if (c->phase == PH_IDLE) {
                /* a fresh connection's header deadline runs from accept */
                c->phase = PH_HEAD;
                c->head_start = c->fresh ? c->phase_since : clock_mono_ms();
            }
            size_t used = 0;
            int ev = http_rx_feed(&c->rx, c->in.data + c->in_off, c->in.len - c->in_off, &used);
            c->in_off += used;
            if (ev == HTTP_RX_MORE)
                break;
            if (ev == HTTP_RX_ERROR)
                on_parse_error(c);
            else if (ev == HTTP_RX_HEAD)
                on_head(c);
            else if (ev == HTTP_RX_BODY)
                on_body_piece(c);
            else if (ev == HTTP_RX_DONE)
                on_done(c);
        }
        if (c->closing)
            break;
        if (c->in_off) {
            buf_consume(&c->in, c->in_off);
            c->in_off = 0;
        }
    } while (c->reprocess);
    c->processing = 0;
    conn_update_io(c);
}

/* ---- accepting ------------------------------------------------------------------ */

/* At the cap: close the longest-idle connection, else the oldest still in
 * its header block. 1 if one was closed. */
static int evict_one(struct http_server *srv)
{
    struct http_conn *idle = NULL, *head = NULL;
    for (struct http_conn *c = srv->conns; c; c = c->next) {
        if (c->phase == PH_IDLE && c->in.len == 0) {
            if (!idle || c->phase_since < idle->phase_since)
                idle = c;
        } else if (c->phase == PH_HEAD) {
            if (!head || c->head_start < head->head_start)
                head = c;
        }
    }
    struct http_conn *victim = idle ? idle : head;
    if (!victim)
        return 0;
    srv->st.conns_evicted++;
    conn_close(victim);
    return 1;
}

static void on_connection(uv_stream_t *l, int status)
{
    struct http_server *srv = l->data;
    if (status < 0) {
        log_warn("http: accept failed: %s", uv_strerror(status));
        return;
    }
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return; /* the connection stays in the backlog; we try again on the next event */
    c->srv = srv;
    buf_init(&c->in, srv->cfg.max_header_bytes + srv->cfg.max_pipeline_bytes + READ_CHUNK);
    http_rx_init(&c->rx, &srv->lim);
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->refs = 2;
    srv->n_conns++;
    srv->st.conns_open = srv->n_conns;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_handle_close);
        uv_close((uv_handle_t *)&c->timer, on_handle_close);
        return;
    }
    srv->st.conns_accepted++;
    if (srv->n_open >= srv->cfg.max_connections && !evict_one(srv)) {
        srv->st.conns_rejected++;
        conn_try_write_error(c, 503, "The server is at its connection limit; retry later.");
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    c->listed = 1;
    srv->n_open++;
    c->phase = PH_IDLE;
    c->fresh = 1;
    c->phase_since = clock_mono_ms();
    conn_update_io(c);
}

/* ---- server ------------------------------------------------------------------------- */

int http_server_new(uv_loop_t *loop, const struct http_config *cfg, struct http_server **out)
{
    if (!loop || !cfg || cfg->port < 0 || cfg->port > 65535 || cfg->max_connections == 0 ||
        cfg->max_header_bytes < 64 || cfg->max_headers == 0 || cfg->max_url_bytes < 16)
        return ERR_INVAL;
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    if (strlen(host) >= sizeof ((struct http_server *)0)->host)
        return ERR_INVAL;
    struct http_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return ERR_NOMEM;
    srv->loop = loop;
    srv->cfg = *cfg;
    snprintf(srv->host, sizeof srv->host, "%s", host);
    srv->cfg.host = srv->host;
    if (srv->cfg.max_header_bytes > UINT16_MAX * 4u)
        srv->cfg.max_header_bytes = UINT16_MAX * 4u;
    if (srv->cfg.max_url_bytes > UINT16_MAX)
        srv->cfg.max_url_bytes = UINT16_MAX; /* http_parser_url offsets are 16-bit */
    srv->lim.max_header_bytes = srv->cfg.max_header_bytes;
    srv->lim.max_headers = srv->cfg.max_headers;
    srv->lim.max_url_bytes = srv->cfg.max_url_bytes;
    srv->lim.max_query_params = srv->cfg.max_query_params;
    http_router_init(&srv->router);
    uv_tcp_init(loop, &srv->listener);
    uv_timer_init(loop, &srv->shutdown_timer);
    srv->listener.data = srv;
    srv->shutdown_timer.data = srv;
    *out = srv;
    return 0;
}

int http_server_route(struct http_server *srv, const struct http_route *route)
{
    return http_router_add(&srv->router, route);
}

int http_server_listen(struct http_server *srv)
{
    struct sockaddr_storage ss;
    const char *host = strcmp(srv->host, "localhost") == 0 ? "127.0.0.1" : srv->host;
    if (srv->listening || srv->shutting_down)
        return ERR_BADSTATE;
    if (uv_ip4_addr(host, srv->cfg.port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, srv->cfg.port, (struct sockaddr_in6 *)&ss) != 0)
        return ERR_INVAL;
    int r = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&srv->listener, srv->cfg.backlog > 0 ? srv->cfg.backlog : 1024,
                      on_connection);
    if (r != 0) {
        log_error("http: cannot listen on %s:%d: %s", srv->host, srv->cfg.port, uv_strerror(r));
        return r == UV_EADDRINUSE ? ERR_BUSY : ERR_IO;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &len) == 0) {
        if (bound.ss_family == AF_INET)
            srv->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        else
            srv->port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    }
    srv->listening = 1;
    return 0;
}

int http_server_port(const struct http_server *srv)
{
    return srv->listening ? srv->port : 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    srv->timer_closed = 1;
    if (srv->done) {
        void (*done)(void *) = srv->done;
        srv->done = NULL;
        done(srv->done_arg); /* may free srv */
    }
}

static void maybe_done(struct http_server *srv)
{
    if (!srv->shutting_down || srv->done_called || !srv->listener_closed || srv->n_conns ||
        srv->n_reqs_live)
        return;
    srv->done_called = 1;
    uv_timer_stop(&srv->shutdown_timer);
    uv_close((uv_handle_t *)&srv->shutdown_timer, on_timer_closed);
}

static void on_listener_closed(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    srv->listener_closed = 1;
    maybe_done(srv);
}

static void on_shutdown_deadline(uv_timer_t *t)
{
    struct http_server *srv = t->data;
    size_t n = 0;
    while (srv->conns) {
        conn_close(srv->conns);
        n++;
    }
    if (n)
        log_warn("http: shutdown deadline passed, closed %zu connection(s)", n);
    maybe_done(srv);
}

void http_server_shutdown(struct http_server *srv, void (*done)(void *arg), void *arg)
{
    if (srv->shutting_down)
        return;
    srv->shutting_down = 1;
    srv->done = done;
    srv->done_arg = arg;
    srv->listening = 0;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    struct http_conn *c = srv->conns;
    while (c) {
        struct http_conn *next = c->next;
        if ((c->phase == PH_IDLE && c->in.len == 0) || c->phase == PH_LINGER)
            conn_close(c);
        else
            c->close_after = 1;
        c = next;
    }
    uv_timer_start(&srv->shutdown_timer, on_shutdown_deadline, srv->cfg.shutdown_timeout_ms, 0);
    maybe_done(srv);
}

void http_server_free(struct http_server *srv)
{
    if (!srv)
        return;
    http_router_release(&srv->router);
    free(srv->unmatched.counts);
    free(srv);
}

void http_server_stats(const struct http_server *srv, struct http_stats *out)
{
    *out = srv->st;
    out->conns_open = srv->n_conns;
    out->requests_inflight = srv->n_reqs_live;
}

void http_server_route_counts(const struct http_server *srv, http_count_fn fn, void *arg)
{
    for (size_t i = 0; i < srv->unmatched.n_counts; i++)
        fn(arg, "", "(unmatched)", srv->unmatched.counts[i].status, srv->unmatched.counts[i].n);
    for (size_t r = 0; r < srv->router.n_routes; r++) {
        const struct http_route_ent *e = srv->router.routes[r];
        for (size_t i = 0; i < e->n_counts; i++)
            fn(arg, e->method, e->pattern, e->counts[i].status, e->counts[i].n);
    }
}
