/* libFuzzer target: the HTTP request parsing layer (jobd/http/http_parse.c) and
 * the router (a trailing-slash route included) and the If-None-Match matcher,
 * on memory - no sockets. The first byte picks the body mode
 * and a piece size; the rest is the byte stream of a connection. The stream
 * is parsed twice, in one feed and in pieces, and the two transcripts of
 * events (heads, routes, params, bodies) must agree; an error must end both
 * (its status may differ: a size limit can trip before a later syntax error
 * when the bytes come in pieces). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "jobd/http/http_int.h"

static void nop(struct http_req *req, void *arg)
{
    (void)req;
    (void)arg;
}

static struct http_router *router(void)
{
    static struct http_router rt;
    static int init;
    if (!init) {
        static const struct http_route routes[] = {
            {"GET", "/v1/batches/{id}", nop, NULL, 0, NULL},
            {"POST", "/v1/batches/{id}/cancel", nop, NULL, 0, NULL},
            {"GET", "/v1/batches/search", nop, NULL, 0, NULL},
            {"POST", "/v1/files", nop, NULL, 0, NULL},
            {"GET", "/v1/files/{id}/content", nop, NULL, 0, NULL},
            {"GET", "/ui/", nop, NULL, 0, NULL},
            {"GET", "/ui/{id}", nop, NULL, 0, NULL},
        };
        http_router_init(&rt);
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            http_router_add(&rt, &routes[i]);
        init = 1;
    }
    return &rt;
}

/* Returns 1 if the transcript ended in an error. */
static int transcript(const uint8_t *in, size_t len, size_t step, int stream, struct buf *out)
{
    static const struct http_limits lim = {2048, 32, 512, 16};
    struct http_rx rx;
    struct buf pending, allow;
    int err = 0;
    http_rx_init(&rx, &lim);
    buf_init(&pending, len + 1);
    buf_init(&allow, 256);
    size_t fed = 0;
    while (fed < len && !err) {
        size_t n = step && step < len - fed ? step : len - fed;
        buf_append(&pending, in + fed, n);
        fed += n;
        for (;;) {
            size_t used;
            int ev = http_rx_feed(&rx, pending.data ? pending.data : "", pending.len, &used);
            if (used > pending.len)
                abort();
            if (ev == HTTP_RX_HEAD) {
                struct http_req *r = rx.req;
                buf_printf(out, "H %s %s %s q%zu h%zu;", http_req_method(r), http_req_target(r),
                           http_req_path(r), http_req_query_count(r), http_req_header_count(r));
                const char *name, *value;
                for (size_t i = 0; http_req_header_at(r, i, &name, &value) == 0; i++)
                    if (strlen(name) > 4096 || strlen(value) > 4096)
                        abort();
                buf_printf(out, "e%d;", http_etag_matches(http_req_header(r, "If-None-Match"), "\"0123456789abcdef\""));
                int m = http_router_match(router(), r, &allow);
                buf_printf(out, "m%d %s;", m, m == 0 ? r->route->pattern : "");
                if (m == 0 && http_req_param(r, "id"))
                    buf_printf(out, "id=%s;", http_req_param(r, "id"));
                r->body_limit = 300;
                r->body_kind = stream ? HTTP_BODY_KIND_STREAM : HTTP_BODY_KIND_BUFFER;
                if (!stream)
                    buf_init(&r->body, 300);
            } else if (ev == HTTP_RX_BODY) {
                if (!rx.chunk || rx.chunk_len == 0 || rx.chunk_len > len)
                    abort();
                buf_append(out, rx.chunk, rx.chunk_len);
            } else if (ev == HTTP_RX_DONE) {
                struct http_req *r = http_rx_take(&rx);
                size_t bl;
                const char *b = http_req_body(r, &bl);
                if (bl > 300)
                    abort();
                buf_printf(out, "D%d ", r->keep_alive);
                buf_append(out, b, bl);
                http_req_destroy(r);
            } else if (ev == HTTP_RX_ERROR) {
                if (rx.err_status < 400 || rx.err_status > 505)
                    abort();
                err = 1;
                break;
            }
            buf_consume(&pending, used);
            if (ev == HTTP_RX_MORE)
                break;
        }
    }
    buf_release(&pending);
    buf_release(&allow);
    http_rx_release(&rx);
    return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    int stream = data[0] & 1;
    size_t step = 1 + (data[0] >> 1);
    struct buf a, b;
    buf_init(&a, 1u << 20);
    buf_init(&b, 1u << 20);
    int ea = transcript(data + 1, size - 1, 0, stream, &a);
    int eb = transcript(data + 1, size - 1, step, stream, &b);
    if (ea != eb)
        abort();
    if (!ea && (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0)))
        abort();
    /* with an error, the events before it must agree up to the shorter one */
    if (ea) {
        size_t n = a.len < b.len ? a.len : b.len;
        if (n && memcmp(a.data, b.data, n) != 0)
            abort();
    }
    buf_release(&a);
    buf_release(&b);
    return 0;
}
