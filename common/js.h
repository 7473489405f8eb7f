/*
 * js.h - JSON helpers over jansson.
 *
 * Outside JSON (HTTP bodies, JSONL lines, worker messages) is parsed with
 * js_parse: a size cap and a nesting-depth cap are checked *before* jansson
 * sees the bytes (jansson's own depth limit is a compile-time 2048, and a
 * deep document costs stack), duplicate object keys are rejected, NUL bytes
 * inside strings are rejected, invalid UTF-8 is rejected. Errors carry the
 * 1-based line/column and a message that can be shown to the user.
 *
 * The typed getters return 0, ERR_NOTFOUND (key absent or JSON null) or
 * ERR_INVAL (present with the wrong type), so callers can tell "missing" from
 * "wrong" when building error messages. Pointers returned by getters are
 * borrowed from the json_t they came from.
 *
 * Prefix js_ (not json_) keeps clear of jansson's namespace.
 */
#ifndef COMMON_JS_H
#define COMMON_JS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

struct js_limits {
    size_t max_bytes;   /* documents longer than this are ERR_TOOBIG */
    int max_depth;      /* more nested arrays/objects than this is ERR_DEPTH */
    int any_value;      /* 0: top level must be an object or array; 1: any value */
};

/* Defaults used for HTTP request bodies: 1 MiB, depth 32, object/array only. */
#define JS_LIMITS_DEFAULT ((struct js_limits){1u << 20, 32, 0})

struct js_error {
    int line;           /* 1-based; 0 when not applicable */
    int column;         /* 1-based; 0 when not applicable */
    size_t position;    /* byte offset of the problem */
    char message[160];  /* e.g. "nesting deeper than 32 levels" */
};

/* Parse len bytes of data (need not be NUL-terminated). On success returns 0
 * and *out is a new reference the caller must json_decref. On failure returns
 * ERR_TOOBIG, ERR_DEPTH or ERR_PARSE, fills *err (if not NULL), *out untouched. */
int js_parse(const char *data, size_t len, const struct js_limits *lim, json_t **out,
             struct js_error *err);

/* Maximum nesting depth of a JSON text (strings are skipped correctly), or -1
 * if it exceeds limit (scan stops there; *stop_at gets the offset if not NULL). */
int js_depth(const char *data, size_t len, int limit, size_t *stop_at);

/* Typed getters: 0, ERR_NOTFOUND (absent or null), ERR_INVAL (wrong type). */
int js_get_str(const json_t *obj, const char *key, const char **out);
int js_get_int(const json_t *obj, const char *key, int64_t *out);
int js_get_num(const json_t *obj, const char *key, double *out); /* int or real */
int js_get_bool(const json_t *obj, const char *key, int *out);
int js_get_obj(const json_t *obj, const char *key, json_t **out);
int js_get_arr(const json_t *obj, const char *key, json_t **out);

/* Append s (n bytes, UTF-8) as a quoted JSON string literal to b: escapes
 * quotes, backslashes and control characters; a byte that does not start a
 * valid UTF-8 sequence (e.g. a multi-byte character cut by truncation) is
 * written as \ufffd, so the output is always valid JSON. Same errors as
 * buf_append. */
int js_escape(struct buf *b, const char *s, size_t n);

/* Append the compact serialisation of v to b (keys in insertion order).
 * Returns 0, ERR_NOMEM, ERR_TOOBIG. */
int js_dump(struct buf *b, const json_t *v);

#endif
