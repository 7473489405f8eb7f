/*
 * http_int.h - internals shared by the files of jobd/http/ (not for other modules).
 *
 * Layers, bottom up:
 *   http_parse.c   struct http_rx: bytes in, request events out. Wraps
 *                  http-parser, assembles the head in one capped arena,
 *                  parses the URL and query, enforces the head limits and the
 *                  body limit. No sockets: the fuzzer drives it on memory.
 *   http_router.c  struct http_router: pattern matching, params, Allow.
 *   http_resp.c    response heads, error envelopes, status reasons.
 *   http_server.c  libuv: listener, connections, deadlines, writes, file
 *                  streaming, shutdown, counters; each request's lifecycle
 *                  and its timer.
 *   http_defer.c   deferred answers on top of the server: thread-pool work
 *                  and streamed answers with backpressure (through the
 *                  server's calls only).
 * Everything runs on the loop thread (the parse/router layers are pure).
 */
#ifndef JOBD_HTTP_INT_H
#define JOBD_HTTP_INT_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/id.h"
#include "jobd/http/http.h"

#define HTTP_MAX_SEGMENTS 16
#define HTTP_MAX_PARAMS 8

struct http_kv {
    const char *name;
    const char *value;
};

struct http_conn;
struct http_route_ent;

enum http_req_state {
    HTTP_REQ_PARSING = 0, /* head or body still arriving; owned by the connection */
    HTTP_REQ_HANDLING,    /* the handler owes an answer */
    HTTP_REQ_SENDING,     /* answer being written; owned by the connection */
};

enum http_body_kind { HTTP_BODY_KIND_BUFFER = 0, HTTP_BODY_KIND_STREAM };

struct http_fsend; /* file streaming state (http_server.c) */
struct http_rtimer; /* a request's timer (http_server.c) */

struct http_req {
    struct http_server *srv;        /* NULL when parsed without a server (fuzzer) */
    struct http_conn *conn;         /* NULL once the client is gone */
    const struct http_route_ent *route;
    char id[ID_MAX];
    int method;                     /* enum http_method */
    int http_major, http_minor;
    enum http_req_state state;

    /* head, assembled in one arena; pointers are fixed at headers-complete */
    struct buf arena;
    size_t head_bytes;              /* bytes counted against max_header_bytes */
    size_t url_off, url_len;
    size_t (*hoff)[4];              /* per header: name off, len, value off, len */
    size_t n_hdrs, cap_hdrs;
    int piece;                      /* 0 none, 1 url, 2 field, 3 value */
    const char *target, *path, *query_raw;
    struct http_kv *hdrs;
    struct http_kv *query;
    size_t n_query;
    struct http_kv params[HTTP_MAX_PARAMS];
    size_t n_params;
    struct buf pbuf;                /* decoded params */

    int keep_alive;                 /* may the connection be reused afterwards */
    int chunked, has_clen, expect_continue, expect_bad;
    uint64_t content_length;

    /* body */
    int head_done, body_done, in_head_hook;
    enum http_body_kind body_kind;
    uint64_t body_limit;
    uint64_t body_bytes;
    struct buf body;
    http_body_fn body_fn;
    void *body_arg;
    int body_paused;

    /* answer */
    int responded;                  /* an answer has started */
    int status;
    int chunked_resp, chunked_ended;
    struct buf resp_hdrs;           /* extra header lines */
    uint64_t bytes_out;
    uint64_t start_ms;
    struct http_fsend *fsend;

    struct http_rtimer *timer;      /* http_req_timer_start; NULL until then */

    void *data;
    void (*data_free)(void *data);
};

/* The loop of the request's server (NULL without a server). */
uv_loop_t *http_req_loop(const struct http_req *req);

/* Count one wait of a streamed answer on a full send queue
 * (http_stats.stream_waits). Loop thread. */
void http_req_stream_waited(struct http_req *req);

/* A place for one more streamed answer on req's server: 0 and *srv (give
 * it back with http_server_stream_release when the stream is freed), or
 * ERR_BUSY when max_streams run (counted in streams_refused), ERR_INVAL
 * without a server. Loop thread. */
int http_req_stream_acquire(struct http_req *req, struct http_server **srv);
void http_server_stream_release(struct http_server *srv);

/* ---- parse layer (http_parse.c) ---- */

struct http_limits {
    size_t max_header_bytes, max_headers, max_url_bytes, max_query_params;
};

enum http_rx_event {
    HTTP_RX_MORE = 0, /* every byte consumed; feed more */
    HTTP_RX_HEAD,     /* rx->req's head is complete: choose the body mode, then feed on */
    HTTP_RX_BODY,     /* streamed piece in rx->chunk / rx->chunk_len (until the next feed) */
    HTTP_RX_DONE,     /* request complete: take it with http_rx_take */
    HTTP_RX_ERROR,    /* rx->err_status / err_msg; the connection must close */
};

struct http_rx {
    http_parser p;
    struct http_limits lim;
    struct http_req *req;
    int event;
    const char *chunk;
    size_t chunk_len;
    int err_status;
    char err_msg[160];
    int detached;    /* the request was taken by an early answer; swallow its end */
    size_t raw_head; /* bytes fed since the last request ended, while in the head */
    int dead;
};

void http_rx_init(struct http_rx *rx, const struct http_limits *lim);
/* Frees a partly parsed request. */
void http_rx_release(struct http_rx *rx);
/* Feed len bytes; *consumed (<= len) tells how many were used. Returns an
 * enum http_rx_event. After HTTP_RX_ERROR every feed returns it again. */
int http_rx_feed(struct http_rx *rx, const char *data, size_t len, size_t *consumed);
/* After HTTP_RX_DONE: the finished request (caller owns it). */
struct http_req *http_rx_take(struct http_rx *rx);

/* A new empty request / free one (calls its data_free). */
struct http_req *http_req_alloc(void);
void http_req_destroy(struct http_req *req);

/* ---- router (http_router.c) ---- */

struct http_route_ent {
    struct http_route r;
    char *method, *pattern;
    char *segs[HTTP_MAX_SEGMENTS]; /* literal text, or NULL for a {param} */
    char *names[HTTP_MAX_SEGMENTS]; /* param names */
    size_t n_segs;
    size_t index;                  /* 1-based (0 is "unmatched") */
    struct http_route_count *counts;
    size_t n_counts, cap_counts;
};

struct http_route_count {
    int status;
    uint64_t n;
};

struct http_router {
    struct http_route_ent **routes;
    size_t n_routes;
};

void http_router_init(struct http_router *rt);
void http_router_release(struct http_router *rt);
int http_router_add(struct http_router *rt, const struct http_route *route);

enum { HTTP_MATCH_OK = 0, HTTP_MATCH_NOPATH = 1, HTTP_MATCH_NOMETHOD = 2 };
/* Match req's method and path. OK: req->route and params set. NOMETHOD: allow
 * gets "GET, HEAD, POST". ERR_PARSE: bad percent-encoding in a segment. */
int http_router_match(const struct http_router *rt, struct http_req *req, struct buf *allow);

/* Count one answered request under ent (NULL: unmatched bucket in *unmatched). */
void http_route_count_add(struct http_route_ent *ent, int status);

/* ---- responses (http_resp.c) ---- */

/* Build the error envelope JSON into out. */
int http_error_json(struct buf *out, int status, const char *type, const char *code,
                    const char *param, const char *message);
/* Build a response head into out. body_len < 0: chunked (or close-delimited
 * for HTTP/1.0). no_length: 1xx/204/304. */
int http_head_build(struct buf *out, const struct http_req *req, int status,
                    const char *content_type, int64_t body_len, int close_conn);

#endif
