/*
 * http_parse.c - the request parsing layer: bytes in, request events out.
 *
 * Wraps http-parser (Debian's libhttp-parser 2.9). The parser is paused in
 * on_headers_complete, in on_body of a streamed body and in
 * on_message_complete, so each http_rx_feed call stops exactly at an event
 * and reports how many bytes it used; the caller keeps the rest (the next
 * pipelined request) until it is ready. Pausing in http-parser 2.9 keeps
 * byte offsets exact (the byte that completed the event is consumed or left
 * for the next call consistently), which tests/unit/jobd/http/test_http.c checks by
 * feeding the same stream in every split.
 *
 * The head (URL, header names and values, then copies of path and query and
 * the decoded query) is assembled in one capped arena; pointers into it are
 * fixed once, at headers-complete, when the arena stops growing. Limits:
 * raw head bytes (request line + header lines) over max_header_bytes or
 * more than max_headers fields -> 431, URL over max_url_bytes -> 414,
 * anything http-parser rejects, whitespace in a header field name (RFC 9112
 * section 5.1), a bad URL or bad %-escape -> 400, a body
 * over req->body_limit -> 413. No sockets here; runs on any one thread.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/utf8.h"
#include "jobd/http/http_int.h"

struct http_req *http_req_alloc(void)
{
    struct http_req *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    if (id_new("req_", req->id, sizeof req->id) != 0)
        snprintf(req->id, sizeof req->id, "req_unknown");
    buf_init(&req->arena, 0);
    buf_init(&req->pbuf, 0);
    buf_init(&req->body, 0);
    buf_init(&req->resp_hdrs, 8192);
    req->start_ms = clock_mono_ms();
    req->method = -1; /* not parsed (yet) */
    return req;
}

void http_req_destroy(struct http_req *req)
{
    if (!req)
        return;
    if (req->data_free) {
        void (*f)(void *) = req->data_free;
        req->data_free = NULL;
        f(req->data);
    }
    buf_release(&req->arena);
    buf_release(&req->pbuf);
    buf_release(&req->body);
    buf_release(&req->resp_hdrs);
    free(req->hoff);
    free(req->hdrs);
    free(req->query);
    free(req);
}

static int rx_fail(struct http_rx *rx, int status, const char *msg)
{
    if (!rx->err_status) {
        rx->err_status = status;
        snprintf(rx->err_msg, sizeof rx->err_msg, "%s", msg);
    }
    return -1;
}

/* End the piece being assembled with a NUL (so pieces are C strings). */
static int piece_end(struct http_rx *rx, struct http_req *req)
{
    if (req->piece == 0)
        return 0;
    if (buf_append_byte(&req->arena, '\0'))
        return rx_fail(rx, 431, "request header block too large");
    req->piece = 0;
    return 0;
}

static int head_count(struct http_rx *rx, struct http_req *req, size_t n)
{
    req->head_bytes += n;
    if (req->head_bytes > rx->lim.max_header_bytes)
        return rx_fail(rx, 431, "request header block too large");
    return 0;
}

static int cb_message_begin(http_parser *p)
{
    struct http_rx *rx = p->data;
    if (rx->req)
        return rx_fail(rx, 400, "malformed request");
    rx->detached = 0;
    struct http_req *req = http_req_alloc();
    if (!req)
        return rx_fail(rx, 503, "out of memory");
    size_t cap = rx->lim.max_header_bytes + 3 * rx->lim.max_url_bytes + 2 * rx->lim.max_headers + 1024;
    buf_init(&req->arena, cap);
    rx->req = req;
    return 0;
}

static int cb_url(http_parser *p, const char *at, size_t n)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    if (!req)
        return rx_fail(rx, 400, "malformed request");
    if (req->piece != 1) {
        if (req->piece != 0 || req->url_len)
            return rx_fail(rx, 400, "malformed request line");
        req->url_off = req->arena.len;
        req->piece = 1;
    }
    req->url_len += n;
    if (req->url_len > rx->lim.max_url_bytes)
        return rx_fail(rx, 414, "request URL too long");
    if (head_count(rx, req, n) || buf_append(&req->arena, at, n))
        return rx_fail(rx, 431, "request header block too large");
    return 0;
}

static int cb_header_field(http_parser *p, const char *at, size_t n)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    if (!req)
        return rx_fail(rx, 400, "malformed request");
    /* http-parser outside its strict mode accepts a space in a field name and
     * still frames by "Content-Length " or "Transfer-Encoding ", which the
     * application (exact name match) would not see: request smuggling behind
     * a proxy. RFC 9112 section 5.1: whitespace between the field name and
     * the colon gets 400 (a tab already fails http-parser's token check). */
    if (memchr(at, ' ', n) || memchr(at, '\t', n))
        return rx_fail(rx, 400, "whitespace in a header field name");
    if (req->piece != 2) {
        if (piece_end(rx, req))
            return -1;
        if (req->n_hdrs >= rx->lim.max_headers)
            return rx_fail(rx, 431, "too many request headers");
        if (req->n_hdrs == req->cap_hdrs) {
            size_t nc = req->cap_hdrs ? req->cap_hdrs * 2 : 16;
            if (nc > rx->lim.max_headers)
                nc = rx->lim.max_headers;
            void *nh = realloc(req->hoff, nc * sizeof *req->hoff);
            if (!nh)
                return rx_fail(rx, 503, "out of memory");
            req->hoff = nh;
            req->cap_hdrs = nc;
        }
        size_t *h = req->hoff[req->n_hdrs++];
        h[0] = req->arena.len;
        h[1] = 0;
        h[2] = 0;
        h[3] = 0;
        req->piece = 2;
        if (head_count(rx, req, 4))
            return -1;
    }
    req->hoff[req->n_hdrs - 1][1] += n;
    if (head_count(rx, req, n) || buf_append(&req->arena, at, n))
        return rx_fail(rx, 431, "request header block too large");
    return 0;
}

static int cb_header_value(http_parser *p, const char *at, size_t n)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    if (!req || req->n_hdrs == 0)
        return rx_fail(rx, 400, "malformed header");
    if (req->piece != 3) {
        if (req->piece != 2 || piece_end(rx, req))
            return rx_fail(rx, 400, "malformed header");
        req->hoff[req->n_hdrs - 1][2] = req->arena.len;
        req->piece = 3;
    }
    req->hoff[req->n_hdrs - 1][3] += n;
    if (head_count(rx, req, n) || buf_append(&req->arena, at, n))
        return rx_fail(rx, 431, "request header block too large");
    return 0;
}

struct qoff {
    size_t name, value;
};

/* Split the raw query (arena offset qo, length qn) on '&', decode names and
 * values into the arena. */
static int query_decode(struct http_rx *rx, struct http_req *req, size_t qo, size_t qn,
                        struct qoff **out, size_t *n_out)
{
    struct qoff *q = NULL;
    size_t n = 0, i = 0;
    while (i < qn) {
        size_t j = i;
        while (j < qn && req->arena.data[qo + j] != '&')
            j++;
        if (j > i) {
            if (n >= rx->lim.max_query_params) {
                free(q);
                return rx_fail(rx, 400, "too many query parameters");
            }
            if (!q) {
                q = calloc(rx->lim.max_query_params ? rx->lim.max_query_params : 1, sizeof *q);
                if (!q)
                    return rx_fail(rx, 503, "out of memory");
            }
            size_t eq = i;
            while (eq < j && req->arena.data[qo + eq] != '=')
                eq++;
            /* decode from a copy: decoding appends to the arena, which may move */
            size_t name_len = eq - i, val_len = eq < j ? j - eq - 1 : 0;
            size_t name_src = qo + i, val_src = qo + eq + 1;
            q[n].name = req->arena.len;
            struct buf tmp;
            buf_init(&tmp, rx->lim.max_url_bytes + 1);
            int rc = buf_append(&tmp, req->arena.data + name_src, name_len);
            if (!rc)
                rc = http_pct_decode(tmp.data ? tmp.data : "", name_len, 1, &req->arena);
            if (!rc)
                rc = buf_append_byte(&req->arena, '\0');
            q[n].value = req->arena.len;
            buf_reset(&tmp);
            if (!rc && val_len)
                rc = buf_append(&tmp, req->arena.data + val_src, val_len);
            if (!rc)
                rc = http_pct_decode(tmp.data ? tmp.data : "", val_len, 1, &req->arena);
            if (!rc)
                rc = buf_append_byte(&req->arena, '\0');
            buf_release(&tmp);
            if (rc) {
                free(q);
                return rx_fail(rx, 400, rc == ERR_PARSE ? "invalid percent-encoding in query"
                                                         : "query too large");
            }
            n++;
        }
        i = j + 1;
    }
    *out = q;
    *n_out = n;
    return 0;
}

static void trim_value(char *v)
{
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        v[--n] = '\0';
}

static int cb_headers_complete(http_parser *p)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    struct qoff *q = NULL;
    size_t nq = 0;
    if (!req || req->url_len == 0)
        return rx_fail(rx, 400, "malformed request line");
    if (piece_end(rx, req))
        return -1;
    if (p->method == HTTP_CONNECT)
        return rx_fail(rx, 400, "CONNECT is not supported");
    if (p->http_major != 1)
        return rx_fail(rx, 505, "HTTP version not supported");
    req->method = p->method;
    req->http_major = p->http_major;
    req->http_minor = p->http_minor;
    req->keep_alive = http_should_keep_alive(p);
    if (p->flags & F_UPGRADE)
        req->keep_alive = 0; /* we do not upgrade; the stream after this request is not ours */
    req->chunked = (p->flags & F_CHUNKED) != 0;
    req->has_clen = (p->flags & F_CONTENTLENGTH) != 0;
    req->content_length = req->has_clen ? p->content_length : 0;

    /* URL: origin-form or absolute-form; we need the path and the query */
    struct http_parser_url u;
    http_parser_url_init(&u);
    const char *url = req->arena.data + req->url_off;
    if (http_parser_parse_url(url, req->url_len, 0, &u) != 0)
        return rx_fail(rx, 400, "invalid request URL");
    size_t po = 0, pn = 0, qo = 0, qn = 0;
    if (u.field_set & (1u << UF_PATH)) {
        po = req->url_off + u.field_data[UF_PATH].off;
        pn = u.field_data[UF_PATH].len;
    }
    if (u.field_set & (1u << UF_QUERY)) {
        qo = req->url_off + u.field_data[UF_QUERY].off;
        qn = u.field_data[UF_QUERY].len;
    }
    if (pn == 0 || req->arena.data[po] != '/')
        return rx_fail(rx, 400, "invalid request URL");
    /* copy path and query after the head (via a temporary: appending a
     * pointer into the arena itself is unsafe if the arena reallocates) */
    size_t path_off = req->arena.len;
    {
        struct buf tmp;
        buf_init(&tmp, rx->lim.max_url_bytes + 1);
        int rc = buf_append(&tmp, req->arena.data + po, pn);
        if (!rc)
            rc = buf_append(&req->arena, tmp.data, pn);
        if (!rc)
            rc = buf_append_byte(&req->arena, '\0');
        size_t qcopy = req->arena.len;
        buf_reset(&tmp);
        if (!rc && qn)
            rc = buf_append(&tmp, req->arena.data + qo, qn);
        if (!rc && qn)
            rc = buf_append(&req->arena, tmp.data, qn);
        if (!rc)
            rc = buf_append_byte(&req->arena, '\0');
        buf_release(&tmp);
        if (rc)
            return rx_fail(rx, 431, "request header block too large");
        qo = qcopy;
    }
    if (query_decode(rx, req, qo, qn, &q, &nq))
        return -1;

    /* the arena is final: fix pointers */
    char *a = req->arena.data;
    req->target = a + req->url_off;
    req->path = a + path_off;
    req->query_raw = a + qo;
    if (req->n_hdrs) {
        req->hdrs = calloc(req->n_hdrs, sizeof *req->hdrs);
        if (!req->hdrs) {
            free(q);
            return rx_fail(rx, 503, "out of memory");
        }
        for (size_t i = 0; i < req->n_hdrs; i++) {
            size_t *h = req->hoff[i];
            req->hdrs[i].name = a + h[0];
            if (h[3] == 0) {
                /* a header without a value: point at the name's terminator */
                req->hdrs[i].value = a + h[0] + h[1];
            } else {
                req->hdrs[i].value = a + h[2];
                trim_value(a + h[2]);
            }
        }
    }
    if (nq) {
        req->query = calloc(nq, sizeof *req->query);
        if (!req->query) {
            free(q);
            return rx_fail(rx, 503, "out of memory");
        }
        for (size_t i = 0; i < nq; i++) {
            req->query[i].name = a + q[i].name;
            req->query[i].value = a + q[i].value;
        }
        req->n_query = nq;
    }
    free(q);

    const char *expect = http_req_header(req, "expect");
    if (expect) {
        if (strcasecmp(expect, "100-continue") == 0 && req->http_major == 1 && req->http_minor >= 1)
            req->expect_continue = 1;
        else if (strcasecmp(expect, "100-continue") != 0)
            req->expect_bad = 1;
    }
    req->head_done = 1;
    rx->event = HTTP_RX_HEAD;
    http_parser_pause(p, 1);
    return 0;
}

static int cb_body(http_parser *p, const char *at, size_t n)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    if (!req && rx->detached)
        return 0; /* answered early; the rest of this body is not ours to keep */
    if (!req)
        return rx_fail(rx, 400, "malformed request");
    if (n == 0)
        return 0;
    if (req->body_limit && (n > req->body_limit || req->body_bytes > req->body_limit - n))
        return rx_fail(rx, 413, "request body too large");
    req->body_bytes += n;
    if (req->body_kind == HTTP_BODY_KIND_STREAM) {
        rx->chunk = at;
        rx->chunk_len = n;
        rx->event = HTTP_RX_BODY;
        http_parser_pause(p, 1);
        return 0;
    }
    int rc = buf_append(&req->body, at, n);
    if (rc == ERR_TOOBIG)
        return rx_fail(rx, 413, "request body too large");
    if (rc)
        return rx_fail(rx, 503, "out of memory");
    return 0;
}

/* A chunk announcing more than the body limit still allows is refused at
 * once (413), instead of waiting (up to the body timeout) for bytes that
 * could never be accepted. p->content_length holds the chunk's size here. */
static int cb_chunk_header(http_parser *p)
{
    struct http_rx *rx = p->data;
    struct http_req *req = rx->req;
    if (!req || !req->body_limit)
        return 0;
    uint64_t n = p->content_length;
    if (n > req->body_limit || req->body_bytes > req->body_limit - n)
        return rx_fail(rx, 413, "request body too large");
    return 0;
}

static int cb_message_complete(http_parser *p)
{
    struct http_rx *rx = p->data;
    if (!rx->req && rx->detached) {
        rx->detached = 0;
        rx->event = HTTP_RX_DONE; /* http_rx_take gives NULL */
        http_parser_pause(p, 1);
        return 0;
    }
    if (!rx->req || !rx->req->head_done)
        return rx_fail(rx, 400, "malformed request");
    rx->req->body_done = 1;
    rx->event = HTTP_RX_DONE;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings rx_settings = {
    .on_message_begin = cb_message_begin,
    .on_url = cb_url,
    .on_header_field = cb_header_field,
    .on_header_value = cb_header_value,
    .on_headers_complete = cb_headers_complete,
    .on_body = cb_body,
    .on_message_complete = cb_message_complete,
    .on_chunk_header = cb_chunk_header,
};

void http_rx_init(struct http_rx *rx, const struct http_limits *lim)
{
    memset(rx, 0, sizeof *rx);
    http_parser_init(&rx->p, HTTP_REQUEST);
    rx->p.data = rx;
    rx->lim = *lim;
}

void http_rx_release(struct http_rx *rx)
{
    http_req_destroy(rx->req);
    rx->req = NULL;
}

static int rx_error(struct http_rx *rx)
{
    rx->dead = 1;
    if (!rx->err_status) {
        enum http_errno e = HTTP_PARSER_ERRNO(&rx->p);
        /* a method http-parser does not know (QUERY, garbage) is malformed HTTP here: 400 */
        rx->err_status = e == HPE_HEADER_OVERFLOW ? 431 : 400;
        snprintf(rx->err_msg, sizeof rx->err_msg, "malformed request: %s",
                 http_errno_description(e));
    }
    return HTTP_RX_ERROR;
}

int http_rx_feed(struct http_rx *rx, const char *data, size_t len, size_t *consumed)
{
    *consumed = 0;
    if (rx->dead)
        return HTTP_RX_ERROR;
    if (len == 0)
        return HTTP_RX_MORE; /* http-parser would take an empty feed as end of stream */
    rx->event = HTTP_RX_MORE;
    rx->chunk = NULL;
    rx->chunk_len = 0;
    int in_head = !rx->detached && (!rx->req || !rx->req->head_done);
    size_t n = http_parser_execute(&rx->p, &rx_settings, data, len);
    if (n > len)
        n = len;
    *consumed = n;
    enum http_errno e = HTTP_PARSER_ERRNO(&rx->p);
    if (e == HPE_PAUSED) {
        http_parser_pause(&rx->p, 0);
    } else if (e != HPE_OK || rx->err_status) {
        return rx_error(rx);
    }
    /* raw head size (request line, header lines, CRLFs): every byte fed
     * before the HEAD event belongs to the head */
    if (in_head) {
        rx->raw_head += n;
        if (rx->raw_head > rx->lim.max_header_bytes) {
            rx_fail(rx, 431, "request header block too large");
            return rx_error(rx);
        }
    }
    if (rx->event == HTTP_RX_MORE && n < len) {
        /* the parser stopped without an event (e.g. after an upgrade) */
        rx_fail(rx, 400, "unexpected bytes after request");
        return rx_error(rx);
    }
    return rx->event;
}

struct http_req *http_rx_take(struct http_rx *rx)
{
    struct http_req *req = rx->req;
    rx->req = NULL;
    rx->raw_head = 0;
    return req;
}

/* ---- accessors that need no server ---- */

const char *http_req_header(const struct http_req *req, const char *name)
{
    if (!req->hdrs)
        return NULL;
    for (size_t i = 0; i < req->n_hdrs; i++)
        if (strcasecmp(req->hdrs[i].name, name) == 0)
            return req->hdrs[i].value;
    return NULL;
}

size_t http_req_header_count(const struct http_req *req)
{
    return req->hdrs ? req->n_hdrs : 0;
}

int http_req_header_at(const struct http_req *req, size_t i, const char **name, const char **value)
{
    if (!req->hdrs || i >= req->n_hdrs)
        return ERR_NOTFOUND;
    *name = req->hdrs[i].name;
    *value = req->hdrs[i].value;
    return 0;
}

const char *http_req_query(const struct http_req *req, const char *name)
{
    for (size_t i = 0; i < req->n_query; i++)
        if (strcmp(req->query[i].name, name) == 0)
            return req->query[i].value;
    return NULL;
}

size_t http_req_query_count(const struct http_req *req)
{
    return req->n_query;
}

int http_req_query_at(const struct http_req *req, size_t i, const char **name, const char **value)
{
    if (i >= req->n_query)
        return ERR_NOTFOUND;
    *name = req->query[i].name;
    *value = req->query[i].value;
    return 0;
}

const char *http_req_param(const struct http_req *req, const char *name)
{
    for (size_t i = 0; i < req->n_params; i++)
        if (strcmp(req->params[i].name, name) == 0)
            return req->params[i].value;
    return NULL;
}

const char *http_req_id(const struct http_req *req)
{
    return req->id;
}

const char *http_req_method(const struct http_req *req)
{
    return req->method < 0 ? "-" : http_method_str((enum http_method)req->method);
}

const char *http_req_path(const struct http_req *req)
{
    return req->path ? req->path : "";
}

const char *http_req_target(const struct http_req *req)
{
    return req->target ? req->target : "";
}

const char *http_req_body(const struct http_req *req, size_t *len)
{
    if (len)
        *len = req->body.len;
    return req->body.data ? req->body.data : "";
}

int64_t http_req_content_length(const struct http_req *req)
{
    return req->has_clen ? (int64_t)req->content_length : -1;
}

int http_pct_decode(const char *s, size_t n, int plus_space, struct buf *out)
{
    size_t start = out->len;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (n - i < 3)
                goto bad;
            int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                goto bad;
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_space) {
            c = ' ';
        } else if (c == '\0') {
            goto bad;
        }
        int rc = buf_append_byte(out, c);
        if (rc) {
            out->len = start;
            if (out->data)
                out->data[start] = '\0';
            return rc;
        }
    }
    return 0;
bad:
    out->len = start;
    if (out->data)
        out->data[start] = '\0';
    return ERR_PARSE;
}
