/*
 * http.h - jobd's HTTP/1.1 server: libuv event loop + http-parser, a router,
 * deadlines against slow clients, buffered or streamed request bodies,
 * memory / file / chunked responses, graceful shutdown, counters.
 *
 * Design. One event-loop thread owns the server, every connection and every
 * request; all functions below must be called on that thread unless stated
 * otherwise. A connection handles one request at a time: bytes that arrive
 * while a request is being handled are buffered (up to max_pipeline_bytes,
 * then reading pauses) and parsed only after the previous response has been
 * completely written, so pipelined requests are answered strictly in order.
 *
 * A request goes through three steps:
 *   1. headers complete: the router picks the route (404 / 405 with Allow
 *      otherwise, in OpenAI's error envelope). The route's optional on_head
 *      hook may answer at once (e.g. 401) or choose the body mode:
 *      buffered in memory (default, capped by max_body_bytes) or streamed
 *      to a callback chunk by chunk. A Content-Length over the limit is
 *      answered 413 before a byte of the body is read, and the connection
 *      closes; "Expect: 100-continue" gets "100 Continue" only at this
 *      point, when the request has been accepted.
 *   2. body: buffered or streamed; a chunked body that grows past the limit
 *      gets 413 and the connection closes.
 *   3. handler: called once the body is complete. It answers with one of the
 *      http_respond* calls, now or later (a "deferred" response: return
 *      without answering, answer later from the loop thread, e.g. from the
 *      after-callback of http_req_queue_work). Every request that reaches
 *      its handler must be answered exactly once. If the client goes away
 *      meanwhile, the late answer is accepted and discarded; the request
 *      stays valid until then.
 * Any response sent before the request body was fully read closes the
 * connection afterwards (the unread body cannot be skipped safely).
 *
 * Deadlines (all configurable): a new connection must deliver a complete
 * header block within header_timeout_ms of being accepted; a kept-alive
 * connection may sit idle for idle_timeout_ms, and once the first byte of
 * its next request arrives the header block must be complete within
 * header_timeout_ms; a body must make progress every body_timeout_ms (and,
 * optionally, average at least body_min_rate_bps after the first
 * body_timeout_ms); a response write must make progress every
 * send_timeout_ms. Header and body timeouts answer 408 (best effort, no
 * waiting) and close; idle timeouts close silently. A timeout of 0 turns
 * that deadline off (the min-rate grace period is then 10 s).
 *
 * Connection cap: at max_connections open connections, a new connection
 * first evicts the connection that has been idle longest (no request bytes
 * pending: fresh or kept-alive), or failing that the oldest one still
 * sending its header block (a slowloris); only when every connection is
 * busy with a real request is the newcomer answered "503" (written without
 * waiting) and closed. So a flood of idle connections, even larger than the
 * cap, cannot lock out a real client, and in-flight requests are never cut.
 *
 * Responses carry Content-Length (or Transfer-Encoding: chunked for
 * http_respond_begin), x-request-id (the request's "req_" id, also in the
 * access log line), Connection: close when the connection will close, and
 * no Date header. HEAD is routed to GET routes and gets no body.
 *
 * Limits on outside bytes: request line + headers <= max_header_bytes and
 * <= max_headers fields (else 431), URL <= max_url_bytes (else 414),
 * malformed syntax / bad chunk encoding / bad percent-encoding -> 400; each
 * of these closes the connection. Request smuggling shapes (Content-Length
 * with Transfer-Encoding, duplicate Content-Length, other transfer codings)
 * are rejected by http-parser (400).
 *
 * Typical owner (jobd main):
 *
 *   struct http_config cfg;  http_config_default(&cfg);  cfg.port = 8080;
 *   // the owner creates the uv_loop_t; every libuv handle of a request
 *   // (timers, work, file reads) is the server's (http_req_timer_start, ...)
 *   struct http_server *srv;  http_server_new(loop, &cfg, &srv);
 *   http_server_route(srv, &(struct http_route){"GET", "/v1/batches/{id}", get_batch, NULL, 0, app});
 *   http_server_listen(srv);
 *   ... a uv_signal_t for SIGTERM calls http_server_shutdown(srv, on_done, app);
 *   ... on_done closes the database, then http_server_free(srv), and the loop ends.
 *
 * A route handler:
 *
 *   static void get_batch(struct http_req *req, void *arg)
 *   {
 *       struct app *app = arg;
 *       const char *id = http_req_param(req, "id");     // decoded path segment
 *       struct buf out;  buf_init(&out, 1u << 20);
 *       if (app_batch_json(app, id, &out) == ERR_NOTFOUND)
 *           http_respond_error(req, 404, NULL, NULL, NULL, "No batch found with id '%s'.", id);
 *       else
 *           http_respond(req, 200, "application/json", out.data, out.len);
 *       buf_release(&out);
 *   }
 */
#ifndef JOBD_HTTP_H
#define JOBD_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct http_server;
struct http_req;
struct uv_loop_s; /* libuv's loop (uv_loop_t); only the owner of the server needs <uv.h> */

/* ---- configuration ---------------------------------------------------------- */

struct http_config {
    const char *host;             /* numeric IPv4/IPv6 address or "localhost"; default "127.0.0.1" */
    int port;                     /* 0: an ephemeral port (see http_server_port) */
    int backlog;                  /* listen(2) backlog; default 1024 */
    size_t max_connections;       /* open connections; default 4096 */
    size_t max_header_bytes;      /* request line + headers; default 16 KiB (431 above) */
    size_t max_headers;           /* header fields; default 100 (431 above) */
    size_t max_url_bytes;         /* request target; default 8 KiB (414 above) */
    size_t max_query_params;      /* default 64 (400 above) */
    uint64_t max_body_bytes;      /* default limit of a buffered body; default 1 MiB */
    size_t max_pipeline_bytes;    /* input buffered while a request is handled; default 64 KiB */
    uint64_t header_timeout_ms;   /* default 10000 */
    uint64_t body_timeout_ms;     /* no body byte for this long -> 408; default 30000 */
    uint64_t body_min_rate_bps;   /* 0: off (default) */
    uint64_t idle_timeout_ms;     /* keep-alive idle; default 60000 */
    uint64_t send_timeout_ms;     /* no write progress for this long -> close; default 60000 */
    size_t max_streams;           /* streamed answers at once (http_respond_stream); default 256 */
    uint64_t shutdown_timeout_ms; /* graceful shutdown deadline; default 30000 */
    int access_log;               /* 1 (default): one info line per request */
};

/* Fill *cfg with the defaults above. Can't fail. */
void http_config_default(struct http_config *cfg);

/* ---- routes ----------------------------------------------------------------- */

/* Called when the request (head and body) is complete. Must answer, now or
 * later (deferred), exactly once. */
typedef void (*http_handler_fn)(struct http_req *req, void *arg);

/* Optional: called when the headers are complete, before any body byte is
 * read. May answer early (any http_respond*; the handler is then not
 * called), or call http_req_body_buffer / http_req_body_stream; doing
 * nothing means "buffer, up to the route's limit". */
typedef void (*http_head_fn)(struct http_req *req, void *arg);

struct http_route {
    const char *method;       /* "GET", "POST", ... (copied) */
    const char *pattern;      /* "/v1/batches/{id}/cancel": literal and {name} segments (copied) */
    http_handler_fn handler;  /* required */
    http_head_fn on_head;     /* optional */
    uint64_t max_body_bytes;  /* 0: the server default */
    void *arg;                /* passed to handler and on_head */
};

/* ---- server ----------------------------------------------------------------- */

/* Create a server on loop (not listening yet). cfg is copied (host too).
 * Returns 0, ERR_INVAL (bad cfg) or ERR_NOMEM. The server must be shut down
 * (http_server_shutdown) before it is freed, even if it never listened. */
int http_server_new(struct uv_loop_s *loop, const struct http_config *cfg, struct http_server **out);

/* Add a route. The most specific match wins (a literal segment beats a
 * {param} at the same position, leftmost first); a GET route also answers
 * HEAD. A pattern may end in "/" ("/ui/"): it matches only paths that end
 * in "/" too, and no {param} matches that empty last segment. Returns 0, ERR_INVAL (bad pattern: not starting with '/', empty or
 * unbalanced braces, more than 16 segments, no handler), ERR_EXISTS (same
 * method and shape already routed) or ERR_NOMEM. */
int http_server_route(struct http_server *srv, const struct http_route *route);

/* Bind and listen on cfg->host:cfg->port. Returns 0, ERR_INVAL (bad host),
 * ERR_BUSY (address in use), ERR_IO (other socket error; logged). */
int http_server_listen(struct http_server *srv);

/* The bound port (useful with port 0), or 0 when not listening. */
int http_server_port(const struct http_server *srv);

/* Graceful shutdown: stop accepting, close idle connections, let in-flight
 * requests finish (their responses carry Connection: close); at
 * shutdown_timeout_ms force-close what is left. done(arg) is called on the
 * loop thread once every connection is closed and every request has been
 * answered (a deferred request whose connection was force-closed still
 * waits for its handler's answer, so work on the thread pool is never cut
 * off) - typically the owner closes its database there. The server may be
 * freed from done. Calling it twice is harmless (the second done is ignored). */
void http_server_shutdown(struct http_server *srv, void (*done)(void *arg), void *arg);

/* Free the server. Only before listening-without-shutdown is forbidden:
 * call it from or after the shutdown's done callback. NULL ok. */
void http_server_free(struct http_server *srv);

/* Counters for the metrics endpoint (a consistent snapshot; loop thread). */
struct http_stats {
    uint64_t conns_open;        /* currently open */
    uint64_t conns_accepted;    /* total accepted (including evicted ones) */
    uint64_t conns_rejected;    /* answered 503 at the cap */
    uint64_t conns_evicted;     /* idle/slow connections closed to make room at the cap */
    uint64_t conns_timed_out;   /* closed by a header/body/idle/send deadline */
    uint64_t requests_total;    /* requests answered (any status) */
    uint64_t requests_inflight; /* parsed and not yet fully answered */
    uint64_t bytes_in, bytes_out;
    uint64_t stream_waits;      /* times a streamed answer found its send queue full and waited (backpressure) */
    uint64_t streams_open;      /* streamed answers in progress (at most max_streams) */
    uint64_t streams_refused;   /* http_respond_stream calls refused at max_streams (ERR_BUSY) */
};
void http_server_stats(const struct http_server *srv, struct http_stats *out);

/* Requests by route and status: fn is called once per (route, status) pair
 * with a non-zero count. Requests that matched no route are reported with
 * method "" and pattern "(unmatched)". */
typedef void (*http_count_fn)(void *arg, const char *method, const char *pattern, int status,
                              uint64_t count);
void http_server_route_counts(const struct http_server *srv, http_count_fn fn, void *arg);

/* ---- request accessors (valid until the request is answered) ---------------- */

const char *http_req_id(const struct http_req *req);      /* "req_..." */
const char *http_req_method(const struct http_req *req);  /* "GET" */
const char *http_req_path(const struct http_req *req);    /* raw path, no query: "/v1/files/a%20b" */
const char *http_req_target(const struct http_req *req);  /* raw request target as sent */

/* Value of the {name} segment of the matched pattern, percent-decoded, or NULL. */
const char *http_req_param(const struct http_req *req, const char *name);

/* First value of query parameter name (percent-decoded, '+' is a space), ""
 * for "?name" without '=', or NULL when absent. */
const char *http_req_query(const struct http_req *req, const char *name);
/* Number of query parameters, and the i-th (0-based) name/value; 0 or ERR_NOTFOUND. */
size_t http_req_query_count(const struct http_req *req);
int http_req_query_at(const struct http_req *req, size_t i, const char **name, const char **value);

/* First header named name (case-insensitive), value trimmed, or NULL. */
const char *http_req_header(const struct http_req *req, const char *name);
size_t http_req_header_count(const struct http_req *req);
int http_req_header_at(const struct http_req *req, size_t i, const char **name, const char **value);

/* The buffered body (NUL-terminated, not counted in *len; "" when empty or
 * streamed). */
const char *http_req_body(const struct http_req *req, size_t *len);

/* Content-Length as sent, or -1 when absent (e.g. chunked). */
int64_t http_req_content_length(const struct http_req *req);

/* Attach per-request data; free_fn (may be NULL) is called with it exactly
 * once when the request ends - answered, or aborted because the client went
 * away or a deadline passed - so files opened in on_head cannot leak. */
void http_req_set_data(struct http_req *req, void *data, void (*free_fn)(void *data));
void *http_req_data(const struct http_req *req);

/* ---- body modes (only from on_head) ----------------------------------------- */

/* Buffer the body in memory, at most max_bytes (0: the route's limit).
 * Returns 0, or ERR_BADSTATE when not called from on_head. */
int http_req_body_buffer(struct http_req *req, uint64_t max_bytes);

#define HTTP_BODY_PAUSE 1
/* Streamed body: fn gets each piece of the body as it arrives (len > 0; the
 * bytes are valid only during the call). It returns 0 to continue,
 * HTTP_BODY_PAUSE to stop delivery (and reading from the socket) until
 * http_req_body_resume - e.g. while a uv_fs_write of the piece is in flight
 * (copy it first) - or a negative ERR_* to abort: the server then answers
 * 500 unless fn already answered, and closes the connection. A synchronous
 * write(2) to a local file inside fn is acceptable for now. max_bytes caps
 * the total (0: unlimited). The body-progress deadline does not run while
 * paused. Returns 0, or ERR_BADSTATE when not called from on_head. */
typedef int (*http_body_fn)(struct http_req *req, const char *data, size_t len, void *arg);
int http_req_body_stream(struct http_req *req, uint64_t max_bytes, http_body_fn fn, void *arg);

/* Resume delivery after fn returned HTTP_BODY_PAUSE (loop thread, from
 * any callback after fn has returned, e.g. a uv_fs_write completion). Do not
 * call it once the request's data_free has run (the client went away and
 * the request is gone). Returns 0 or ERR_BADSTATE (not paused). */
int http_req_body_resume(struct http_req *req);

/* ---- responses ---------------------------------------------------------------- */

/* Add a response header (before answering): name a token, value without
 * CR/LF/NUL (else ERR_INVAL); at most 8 KiB of extra headers (ERR_TOOBIG).
 * Content-Length, Transfer-Encoding and Connection are the server's. */
int http_resp_header(struct http_req *req, const char *name, const char *value);

/* Drop the headers added so far (before answering: an error answer
 * instead of the one they were meant for). NULL ok; can't fail. */
void http_resp_headers_clear(struct http_req *req);

/* Answer with a body from memory (copied; content_type may be NULL when
 * len is 0). Returns 0; ERR_BADSTATE if already answered; ERR_NOMEM. If the
 * client is gone, returns 0 and the request is simply finished. On any
 * return the request must not be used again, except after ERR_BADSTATE /
 * ERR_INVAL before an answer went out (where it is still owed one). */
int http_respond(struct http_req *req, int status, const char *content_type, const void *body,
                 size_t len);

/* Answer with OpenAI's error envelope, Content-Type application/json (the
 * HTTP layer's own answers: 404, 405, 413...; the API answers from its
 * error table, jobd/api/api_err.h):
 *   {"error":{"message":"...","type":"...","param":...,"code":...}}
 * type NULL picks: 5xx "server_error", 429 "rate_limit_error", 401
 * "invalid_request_error"... (every other status "invalid_request_error");
 * param / code NULL give JSON null. Same returns as http_respond. */
int http_respond_error(struct http_req *req, int status, const char *type, const char *code,
                       const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Answer with len bytes of the open file fd from offset, read with uv_fs
 * on the thread pool and written as the socket drains (never the whole
 * file in memory). Takes ownership of fd (closed when done or on error).
 * Returns as http_respond, plus ERR_IO if fd cannot be read (fstat). */
int http_respond_fd(struct http_req *req, int status, const char *content_type, int fd,
                    uint64_t offset, uint64_t len);

/* Open path and answer with all of it (as http_respond_fd). Returns
 * ERR_NOTFOUND / ERR_IO when it cannot be opened - then nothing was sent
 * and the request still owes an answer (e.g. a 404). */
int http_respond_file(struct http_req *req, int status, const char *content_type,
                      const char *path);

/* Chunked response: begin sends the head (Transfer-Encoding: chunked; to an
 * HTTP/1.0 client, no length and Connection: close), write queues one chunk
 * (copied; len 0 is a no-op), end sends the last chunk and finishes the
 * request. Each returns 0, ERR_BADSTATE (wrong order) or ERR_NOMEM; when the
 * client is gone they return ERR_CONN, and the owner must still call end.
 * Use http_req_send_queue to apply backpressure (e.g. wait for it to fall
 * under 1 MiB before producing more), or let http_respond_stream do it. */
int http_respond_begin(struct http_req *req, int status, const char *content_type);
int http_respond_write(struct http_req *req, const void *data, size_t len);
int http_respond_end(struct http_req *req);
/* End a chunked answer that cannot be finished (its producer failed
 * midway): the connection is closed without the last chunk, so the client
 * sees a cut answer, never a short one that looks whole. 0, or
 * ERR_BADSTATE (not a chunked answer in progress). */
int http_respond_abort(struct http_req *req);

/* Bytes queued for the socket and not yet written (0 when the client is gone). */
size_t http_req_send_queue(const struct http_req *req);

/* ---- deferred work ------------------------------------------------------------ */

/* Run work(arg) on libuv's thread pool (it must not touch req or the server),
 * then after(req, status, arg) on the loop thread, which answers the request.
 * status is 0, or UV_ECANCELED if the loop cancelled the work. The request
 * stays valid in between even if the client disconnects. Returns 0,
 * ERR_NOMEM or ERR_INTERNAL (uv_queue_work failed: answer yourself). */
int http_req_queue_work(struct http_req *req, void (*work)(void *arg),
                        void (*after)(struct http_req *req, int status, void *arg), void *arg);

/* Call cb(req, arg) on the loop thread in ms milliseconds, while the request
 * waits for its (deferred) answer - e.g. to poll again. One timer per
 * request: starting it again re-arms it. It is cancelled automatically when
 * the request is answered or ends, so cb never sees a finished request.
 * Returns 0, ERR_BADSTATE (already answered), ERR_NOMEM or ERR_INTERNAL. */
int http_req_timer_start(struct http_req *req, uint64_t ms, void (*cb)(struct http_req *req, void *arg),
                         void *arg);

/* A streamed answer produced off the loop: read(arg, buf, cap, &n) runs on
 * the thread pool and fills buf with up to cap bytes (*n = 0: the end; a
 * negative ERR_* stops the stream). Each filled chunk (64 KiB) is written
 * as one HTTP chunk of a chunked answer (http_respond_begin), and the next
 * one is read only once the socket's send queue is at most 128 KiB, so a
 * stream holds one chunk and at most 128 KiB + a chunk queued whatever the
 * client's speed; while the queue is full it looks again after 5 ms,
 * doubling up to 250 ms (http_stats.stream_waits counts the looks). At
 * most max_streams streams run at once (their memory, one chunk, the queue
 * and the reader's state, is then a number, not a multiple of the
 * connection cap): past it the call returns ERR_BUSY and the route answers
 * 503 itself. When the stream ends (the
 * end, an error, or the client gone) the answer is finished (on read's
 * error without its last chunk: http_respond_abort) and then done(arg, err)
 * is called on the loop (err: 0, or read's error, which the owner logs; the
 * head is sent, so the client sees a cut stream) - it
 * frees arg. Returns 0 (arg now belongs to the stream), or ERR_BUSY
 * (max_streams are running) / ERR_NOMEM / ERR_INTERNAL / ERR_BADSTATE:
 * nothing was sent, arg is still the caller's and the request still owes
 * an answer. */
typedef int (*http_read_fn)(void *arg, char *buf, size_t cap, size_t *n);
int http_respond_stream(struct http_req *req, int status, const char *content_type, http_read_fn read,
                        void (*done)(void *arg, int err), void *arg);

/* ---- helpers (pure; any thread) ----------------------------------------------- */

/* Percent-decode n bytes of s into out (appending); plus_space turns '+'
 * into ' ' (query strings). Returns 0, ERR_PARSE (bad %-escape, or one
 * that decodes to NUL) or the errors of buf_append. */
struct buf;
int http_pct_decode(const char *s, size_t n, int plus_space, struct buf *out);

/* Does an If-None-Match header value (NULL ok) name etag (a quoted
 * strong tag)? Understands "*", W/ weak tags and comma lists (RFC 9110
 * weak comparison). 1 or 0. */
int http_etag_matches(const char *if_none_match, const char *etag);

/* A Range request header (RFC 9110 14.2) against a representation of size
 * bytes. Understands one byte range: "bytes=A-B" (B past the end is the
 * end), "bytes=A-", "bytes=-N" (the last N). HTTP_RANGE_NONE when value is
 * NULL, not a bytes range, malformed, or several ranges (the caller sends
 * the whole representation: a server may ignore Range);
 * HTTP_RANGE_UNSATISFIABLE when it starts at or past the end (or asks for
 * the last 0 bytes): answer 416 with Content-Range "bytes * /size" (no
 * space); HTTP_RANGE_OK with *first and *len (len >= 1) set: answer 206
 * with Content-Range "bytes first-(first+len-1)/size". */
enum http_range { HTTP_RANGE_NONE = 0, HTTP_RANGE_OK, HTTP_RANGE_UNSATISFIABLE };
enum http_range http_range_parse(const char *value, uint64_t size, uint64_t *first, uint64_t *len);

/* Reason phrase for a status ("Not Found"), "Unknown" if none. */
const char *http_status_reason(int status);

#endif
