/*
 * api_err.c - the API error table's accessors and the one renderer of its
 * answers (see api_err.h). Pure, except api_respond_error (loop thread).
 */
#include "jobd/api/api_err.h"

#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/js.h"
#include "jobd/http/http.h"

struct api_err_entry {
    int status;
    const char *type;
    const char *code;
};

static const struct api_err_entry table[API_ERR__COUNT] = {
#define API_ERR_ROW_(name, status, type, code) {status, type, code},
    API_ERR_LIST(API_ERR_ROW_)
#undef API_ERR_ROW_
};

static const struct api_err_entry *entry(enum api_err e)
{
    return (unsigned)e < API_ERR__COUNT ? &table[e] : &table[API_ERR_INTERNAL];
}

enum api_err api_err_of_rc(int rc)
{
    return rc == ERR_NOSPACE ? API_ERR_INSUFFICIENT_STORAGE : rc == ERR_BUSY ? API_ERR_UNAVAILABLE : API_ERR_INTERNAL;
}

int api_err_status(enum api_err e)
{
    return entry(e)->status;
}

const char *api_err_type(enum api_err e)
{
    return entry(e)->type;
}

const char *api_err_code(enum api_err e)
{
    return entry(e)->code;
}

int api_err_json(struct buf *out, enum api_err e, const char *param, const char *msg)
{
    const struct api_err_entry *t = entry(e);
    int rc;
    if ((rc = buf_append_str(out, "{\"error\":{\"message\":")) || (rc = js_escape(out, msg, strlen(msg))) ||
        (rc = buf_append_str(out, ",\"type\":")) || (rc = js_escape(out, t->type, strlen(t->type))) ||
        (rc = buf_append_str(out, ",\"param\":")) ||
        (rc = param ? js_escape(out, param, strlen(param)) : buf_append_str(out, "null")) ||
        (rc = buf_append_str(out, ",\"code\":")) ||
        (rc = t->code ? js_escape(out, t->code, strlen(t->code)) : buf_append_str(out, "null")))
        return rc;
    return buf_append_str(out, "}}");
}

int api_respond_error(struct http_req *req, enum api_err e, const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const struct api_err_entry *t = entry(e);
    return http_respond_error(req, t->status, t->type, t->code, param, "%s", msg);
}

const char *api_err_anthropic_type(enum api_err e)
{
    switch (entry(e)->status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return entry(e)->status < 500 ? "invalid_request_error" : "api_error";
    }
}

int api_err_json_anthropic(struct buf *out, enum api_err e, const char *msg)
{
    const char *type = api_err_anthropic_type(e);
    int rc;
    if ((rc = buf_append_str(out, "{\"type\":\"error\",\"error\":{\"type\":")) ||
        (rc = js_escape(out, type, strlen(type))) || (rc = buf_append_str(out, ",\"message\":")) ||
        (rc = js_escape(out, msg, strlen(msg))))
        return rc;
    return buf_append_str(out, "}}");
}

int api_respond_error_anthropic(struct http_req *req, enum api_err e, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct buf b;
    buf_init(&b, 4096);
    int rc = api_err_json_anthropic(&b, e, msg);
    if (rc) {
        buf_release(&b);
        static const char fallback[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                       "\"message\":\"internal error\"}}";
        return http_respond(req, 500, "application/json", fallback, sizeof fallback - 1);
    }
    rc = http_respond(req, api_err_status(e), "application/json", b.data, b.len);
    buf_release(&b);
    return rc;
}
