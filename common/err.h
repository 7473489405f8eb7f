/*
 * err.h - the project's one error list.
 *
 * Every function that can fail returns int: 0 on success, a negative ERR_*
 * value on failure. The list below is an X-macro: it generates the enum, the
 * names (err_name) and the human messages (err_msg), so the three can never
 * disagree. Library errors (errno, SQLITE_*, CURLcode, cudaError_t) are
 * translated at the module edge into one of these; the original goes to the
 * log.
 */
#ifndef COMMON_ERR_H
#define COMMON_ERR_H

#include <stddef.h>

/*    name          message */
#define ERR_LIST(X)                                                   \
    X(NOMEM,        "out of memory")                                  \
    X(INVAL,        "invalid argument")                               \
    X(TOOBIG,       "size limit exceeded")                            \
    X(IO,           "input/output error")                             \
    X(NOSPACE,      "no space left on device")                        \
    X(NOTFOUND,     "not found")                                      \
    X(EXISTS,       "already exists")                                 \
    X(PARSE,        "malformed input")                                \
    X(DEPTH,        "nesting too deep")                               \
    X(UTF8,         "invalid UTF-8")                                  \
    X(TIMEOUT,      "timed out")                                      \
    X(CONN,         "connection failed")                              \
    X(HTTP,         "unexpected HTTP status")                         \
    X(CORRUPT,      "corrupt data")                                   \
    X(UNSUPPORTED,  "unsupported")                                    \
    X(BADSTATE,     "invalid state transition")                       \
    X(AUTH,         "authentication failed")                          \
    X(BUSY,         "resource busy")                                  \
    X(CRYPTO,       "cryptography library error")                     \
    X(NODEVICE,     "no such device")                                 \
    X(INTERNAL,     "internal error")

enum err_code {
    ERR_OK = 0,
    ERR__FIRST = -1000,
#define ERR_ENUM_(name, msg) ERR_##name,
    ERR_LIST(ERR_ENUM_)
#undef ERR_ENUM_
    ERR__LAST
};

/* "ERR_TOOBIG" for ERR_TOOBIG, "ERR_OK" for 0, "ERR_UNKNOWN" otherwise. Can't fail. */
const char *err_name(int code);

/* "size limit exceeded" for ERR_TOOBIG, "ok" for 0, "unknown error" otherwise. Can't fail. */
const char *err_msg(int code);

/* Format a message into err (err_len bytes, truncated; nothing when err is
 * NULL or err_len 0) and return rc: `return err_setf(err, len, ERR_PARSE,
 * "bad key %s", k);` for the functions that take `char *err, size_t err_len`. */
int err_setf(char *err, size_t err_len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
