/*
 * http_resp.c - response heads, OpenAI error envelopes, reason phrases.
 *
 * The head of every response is built here, in one place, so the wire
 * format is easy to check against the golden bytes in tests/unit/jobd/http/test_http.c:
 *
 *   HTTP/1.1 <status> <reason>\r\n
 *   Content-Type: <type>\r\n               (when given)
 *   Content-Length: <n>\r\n                (or Transfer-Encoding: chunked)
 *   x-request-id: req_...\r\n
 *   <extra headers from http_resp_header, in order>
 *   Connection: close\r\n                  (when the connection will close)
 *   Connection: keep-alive\r\n             (HTTP/1.0 client that asked for it)
 *   \r\n
 *
 * Pure code; loop thread in practice.
 */
#include <string.h>
#include <strings.h>

#include "common/err.h"
#include "common/js.h"
#include "jobd/http/http_int.h"

const char *http_status_reason(int status)
{
    switch (status) {
#define XX(num, name, string) \
    case num:                 \
        return #string;
        HTTP_STATUS_MAP(XX)
#undef XX
    default:
        return "Unknown";
    }
}

int http_error_json(struct buf *out, int status, const char *type, const char *code,
                    const char *param, const char *message)
{
    if (!type)
        type = status >= 500 ? "server_error"
               : status == 429 ? "rate_limit_error"
                               : "invalid_request_error";
    int rc = buf_append_str(out, "{\"error\":{\"message\":");
    if (!rc)
        rc = js_escape(out, message, strlen(message));
    if (!rc)
        rc = buf_append_str(out, ",\"type\":");
    if (!rc)
        rc = js_escape(out, type, strlen(type));
    if (!rc)
        rc = buf_append_str(out, ",\"param\":");
    if (!rc)
        rc = param ? js_escape(out, param, strlen(param)) : buf_append_str(out, "null");
    if (!rc)
        rc = buf_append_str(out, ",\"code\":");
    if (!rc)
        rc = code ? js_escape(out, code, strlen(code)) : buf_append_str(out, "null");
    if (!rc)
        rc = buf_append_str(out, "}}");
    return rc;
}

int http_head_build(struct buf *out, const struct http_req *req, int status,
                    const char *content_type, int64_t body_len, int close_conn)
{
    int rc = buf_printf(out, "HTTP/1.1 %d %s\r\n", status, http_status_reason(status));
    int no_body = (status >= 100 && status < 200) || status == 204 || status == 304;
    if (!rc && content_type && !no_body)
        rc = buf_printf(out, "Content-Type: %s\r\n", content_type);
    if (!rc && !no_body) {
        if (body_len >= 0)
            rc = buf_printf(out, "Content-Length: %lld\r\n", (long long)body_len);
        else if (req->http_major == 1 && req->http_minor >= 1)
            rc = buf_append_str(out, "Transfer-Encoding: chunked\r\n");
    }
    if (!rc)
        rc = buf_printf(out, "x-request-id: %s\r\n", req->id);
    if (!rc && req->resp_hdrs.len)
        rc = buf_append(out, req->resp_hdrs.data, req->resp_hdrs.len);
    if (!rc && close_conn)
        rc = buf_append_str(out, "Connection: close\r\n");
    else if (!rc && req->http_major == 1 && req->http_minor == 0)
        rc = buf_append_str(out, "Connection: keep-alive\r\n");
    if (!rc)
        rc = buf_append_str(out, "\r\n");
    return rc;
}

static int is_token_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

int http_resp_header(struct http_req *req, const char *name, const char *value)
{
    if (!req || !name || !value || !*name || req->responded)
        return req && req->responded ? ERR_BADSTATE : ERR_INVAL;
    for (const char *p = name; *p; p++)
        if (!is_token_char((unsigned char)*p))
            return ERR_INVAL;
    for (const char *p = value; *p; p++)
        if (*p == '\r' || *p == '\n')
            return ERR_INVAL;
    if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
        strcasecmp(name, "connection") == 0)
        return ERR_INVAL;
    size_t old = req->resp_hdrs.len;
    int rc = buf_printf(&req->resp_hdrs, "%s: %s\r\n", name, value);
    if (rc) {
        req->resp_hdrs.len = old;
        if (req->resp_hdrs.data)
            req->resp_hdrs.data[old] = '\0';
    }
    return rc;
}

/* Digits at *p into *v (at most 19: no overflow); 0, or -1 for none or too many. */
static int range_num(const char **p, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    int n = 0;
    while (*s >= '0' && *s <= '9') {
        if (++n > 19)
            return -1;
        x = x * 10 + (uint64_t)(*s++ - '0');
    }
    if (n == 0)
        return -1;
    *v = x;
    *p = s;
    return 0;
}

enum http_range http_range_parse(const char *value, uint64_t size, uint64_t *first, uint64_t *len)
{
    if (!value || strncasecmp(value, "bytes=", 6) != 0)
        return HTTP_RANGE_NONE;
    const char *p = value + 6;
    uint64_t a = 0, b = 0;
    if (*p == '-') { /* the last b bytes */
        p++;
        if (range_num(&p, &b) || *p)
            return HTTP_RANGE_NONE;
        if (b == 0 || size == 0)
            return HTTP_RANGE_UNSATISFIABLE;
        *first = b < size ? size - b : 0;
        *len = size - *first;
        return HTTP_RANGE_OK;
    }
    if (range_num(&p, &a) || *p++ != '-')
        return HTTP_RANGE_NONE;
    if (*p == 0) {
        b = UINT64_MAX;
    } else if (range_num(&p, &b) || *p || b < a) {
        return HTTP_RANGE_NONE; /* trailing text, a second range, or last < first */
    }
    if (a >= size)
        return HTTP_RANGE_UNSATISFIABLE;
    if (b >= size)
        b = size - 1;
    *first = a;
    *len = b - a + 1;
    return HTTP_RANGE_OK;
}

void http_resp_headers_clear(struct http_req *req)
{
    if (req && !req->responded)
        buf_reset(&req->resp_hdrs);
}

int http_etag_matches(const char *inm, const char *etag)
{
    size_t el = strlen(etag);
    const char *p = inm;
    while (p && *p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        const char *t = end;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if (el && (size_t)(t - p) == el && memcmp(p, etag, el) == 0)
            return 1;
        p = end;
    }
    return 0;
}
