/*
 * api_err.h - the API's one error table: every error answer of a /v1 route
 * (OpenAI's envelope {"error":{"message","type","param","code"}}).
 *
 * The list below is an X-macro (like common/err.h): it generates the enum
 * and the status / type / code of each entry, so a route names an entry and
 * a message, never a status or a code string. spec/openapi.yaml documents
 * every code the table can answer, with its status; tests/py/test_api_errors.py
 * checks the two against each other.
 *
 * Not in the table: the HTTP layer's own answers (404 unknown route, 405,
 * 408, 413 request_too_large, 414, 431, malformed HTTP; jobd/http), and the
 * worker protocol's errors (jobd/work/lease.h writes those, same envelope).
 *
 * Pure; any thread.
 */
#ifndef JOBD_API_ERR_H
#define JOBD_API_ERR_H

#include <stdarg.h>
#include <stddef.h>

struct buf;
struct http_req;

/*    name                      status  type                     code (NULL: JSON null) */
#define API_ERR_LIST(X)                                                                                 \
    X(INVALID_JSON,             400, "invalid_request_error", "invalid_json")                           \
    X(INVALID_VALUE,            400, "invalid_request_error", "invalid_value")                          \
    X(INVALID_TYPE,             400, "invalid_request_error", "invalid_type")                           \
    X(MISSING_PARAMETER,        400, "invalid_request_error", "missing_required_parameter")             \
    X(UNKNOWN_PARAMETER,        400, "invalid_request_error", "unknown_parameter")                      \
    X(INVALID_MULTIPART,        400, "invalid_request_error", "invalid_multipart")                      \
    X(INVALID_ENCODING,         400, "invalid_request_error", "invalid_encoding")                       \
    X(INVALID_STATE,            400, "invalid_request_error", "invalid_state")                          \
    X(INVALID_IDEMPOTENCY_KEY,  400, "invalid_request_error", "invalid_idempotency_key")                \
    X(INVALID_CURSOR,           400, "invalid_request_error", "invalid_cursor")                         \
    X(INVALID_URL,              400, "invalid_request_error", "invalid_url")                            \
    X(URL_NOT_ALLOWED,          400, "invalid_request_error", "url_not_allowed")                        \
    X(ENDPOINT_DISABLED,        400, "invalid_request_error", "endpoint_disabled")                      \
    X(LIMIT_EXCEEDED,           400, "invalid_request_error", "limit_exceeded")                         \
    X(MISSING_API_KEY,          401, "invalid_request_error", "missing_api_key")                        \
    X(INVALID_API_KEY,          401, "invalid_request_error", "invalid_api_key")                        \
    X(INVALID_WORKER_TOKEN,     401, "invalid_request_error", "invalid_worker_token")                   \
    X(INVALID_ADMIN_TOKEN,      401, "invalid_request_error", "invalid_admin_token")                    \
    X(NOT_FOUND,                404, "invalid_request_error", "not_found")                              \
    X(IDEMPOTENCY_KEY_IN_USE,   409, "invalid_request_error", "idempotency_key_in_use")                 \
    X(BATCH_NOT_FINISHED,       409, "invalid_request_error", "batch_not_finished")                     \
    X(FILE_TOO_LARGE,           413, "invalid_request_error", "file_too_large")                         \
    X(UNSUPPORTED_MEDIA_TYPE,   415, "invalid_request_error", "unsupported_media_type")                 \
    X(UNSUPPORTED_ENCODING,     415, "invalid_request_error", "unsupported_encoding")                   \
    X(RANGE_NOT_SATISFIABLE,    416, "invalid_request_error", "range_not_satisfiable")                  \
    X(IDEMPOTENCY_KEY_REUSED,   422, "invalid_request_error", "idempotency_key_reused")                 \
    X(QUEUED_TOKENS_LIMIT,      429, "insufficient_quota",    "queued_tokens_limit_exceeded")           \
    X(DAILY_SPEND_LIMIT,        429, "insufficient_quota",    "daily_spend_limit_exceeded")             \
    X(MONTHLY_SPEND_LIMIT,      429, "insufficient_quota",    "monthly_spend_limit_exceeded")           \
    X(INTERNAL,                 500, "server_error",          NULL)                                     \
    X(UNAVAILABLE,              503, "server_error",          NULL)                                     \
    X(INSUFFICIENT_STORAGE,     507, "server_error",          "insufficient_storage")                   \
    X(STARTING,                 503, "server_error",          "starting")                               \
    X(SHUTTING_DOWN,            503, "server_error",          "shutting_down")

enum api_err {
#define API_ERR_ENUM_(name, status, type, code) API_ERR_##name,
    API_ERR_LIST(API_ERR_ENUM_)
#undef API_ERR_ENUM_
    API_ERR__COUNT
};

/* The entry that answers a failure rc of the server's own (not the
 * client's): ERR_NOSPACE -> INSUFFICIENT_STORAGE (507: the disk is full,
 * nothing was stored), ERR_BUSY -> UNAVAILABLE, anything else -> INTERNAL.
 * Can't fail. */
enum api_err api_err_of_rc(int rc);

/* The entry's HTTP status, error.type and error.code (NULL for JSON null).
 * Can't fail (an out-of-range e reads as API_ERR_INTERNAL). */
int api_err_status(enum api_err e);
const char *api_err_type(enum api_err e);
const char *api_err_code(enum api_err e);

/* Append the envelope of entry e with param (NULL: null) and msg to out.
 * 0, or buf_append's error (out may hold a partial envelope then). */
int api_err_json(struct buf *out, enum api_err e, const char *param, const char *msg);

/* Answer req with entry e: its status, Content-Type application/json, the
 * envelope. Headers (WWW-Authenticate, Retry-After) are the caller's, set
 * before. The message is cut at 1023 bytes. Returns as http_respond (on no memory: a fixed 500 envelope). */
int api_respond_error(struct http_req *req, enum api_err e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Anthropic's envelope of entry e, for the /v1/messages routes:
 * {"type":"error","error":{"type","message"}}, the type from the entry's
 * status (400/409/415/422 invalid_request_error, 401 authentication_error,
 * 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
 * overloaded_error, else api_error). Returns as api_err_json. */
const char *api_err_anthropic_type(enum api_err e);
int api_err_json_anthropic(struct buf *out, enum api_err e, const char *msg);

/* api_respond_error in Anthropic's envelope. */
int api_respond_error_anthropic(struct http_req *req, enum api_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
