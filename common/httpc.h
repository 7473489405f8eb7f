/*
 * httpc.h - an HTTP client over libcurl with timeouts and retries.
 *
 * One call, one logical request: httpc_request sends it, and when the answer
 * is a transport failure (connection refused/reset, timeout) or a retryable
 * status (408, 429, 500, 502, 503, 504) it tries again up to max_retries
 * times, sleeping a jittered exponential backoff ("full jitter": a uniform
 * random delay in [0, min(backoff_max_ms, backoff_base_ms * 2^attempt)]),
 * or the server's Retry-After (seconds, capped at backoff_max_ms) when it
 * gives one. Non-idempotent methods (POST, PATCH) are retried only when the
 * caller says the request is safe to repeat (retry_unsafe, e.g. because it
 * carries an Idempotency-Key). The response body is buffered up to a cap.
 *
 * Streaming (httpc_request_stream): the request body may come from a source
 * callback (sent with a known length, or chunked when the length is unknown)
 * and a 2xx response body may go to a sink callback instead of memory, so a
 * 50 GB upload or download needs only curl's buffers. A streamed request is
 * retried only while that is safe: the source can be rewound (or was never
 * read), and no byte has reached the sink yet.
 *
 * Thread-safe: each call uses its own curl handle; libcurl's global init runs
 * once.
 */
#ifndef COMMON_HTTPC_H
#define COMMON_HTTPC_H

#include <stddef.h>

#include "buf.h"

struct httpc_opts {
    long connect_timeout_ms;   /* per attempt; default 5000 */
    long timeout_ms;           /* per attempt, whole exchange; default 30000 */
    int max_retries;           /* extra attempts after the first; default 3 */
    long backoff_base_ms;      /* default 200 */
    long backoff_max_ms;       /* default 10000 */
    size_t max_response_bytes; /* body cap; default 64 MiB */
    int retry_unsafe;          /* also retry POST/PATCH */
    long stall_timeout_ms;     /* abort when no byte moved for this long; 0 = off (default) */
};

/* Defaults as documented above. */
#define HTTPC_OPTS_DEFAULT ((struct httpc_opts){5000, 30000, 3, 200, 10000, 64u << 20, 0, 0})

struct httpc_response {
    long status;         /* final HTTP status; 0 when no response arrived */
    int attempts;        /* how many times the request was sent */
    struct buf body;     /* final response body */
    struct buf headers;  /* final response header block, "Name: value\r\n" lines */
};

/* Initialise an empty response (call before httpc_request) / free its buffers. */
void httpc_response_init(struct httpc_response *r);
void httpc_response_release(struct httpc_response *r);

/* Send method to url with optional headers (NULL-terminated array of
 * "Name: value" strings, may be NULL) and body (may be NULL when body_len is
 * 0). Returns 0 when a response arrived (whatever its status - check
 * resp->status), ERR_CONN / ERR_TIMEOUT when none did after all attempts,
 * ERR_TOOBIG when the body exceeded the cap, ERR_INVAL for a bad URL. */
int httpc_request(const struct httpc_opts *opts, const char *method, const char *url,
                  const char *const *headers, const void *body, size_t body_len,
                  struct httpc_response *resp);

/* Request body source: fill up to cap bytes; return the count, 0 at the end,
 * or a negative ERR_* (the request is aborted and httpc returns it). */
typedef long (*httpc_source_fn)(void *ctx, void *data, size_t cap);
/* Start the source again from its first byte (before a retry): 0 or ERR_*. */
typedef int (*httpc_rewind_fn)(void *ctx);
/* 2xx response body sink: consume n bytes; 0 or a negative ERR_* (aborts). */
typedef int (*httpc_sink_fn)(void *ctx, const void *data, size_t n);

struct httpc_stream {
    httpc_source_fn source;  /* request body from a callback; NULL: no body */
    httpc_rewind_fn rewind;  /* NULL: once the source was read, no retry */
    void *source_ctx;
    long long body_len;      /* bytes the source gives; -1: unknown, sent chunked */
    httpc_sink_fn sink;      /* 2xx bodies go here (resp->body stays empty); NULL: buffer */
    void *sink_ctx;
};

/* httpc_request with a streamed body and/or response (see the file comment).
 * Non-2xx response bodies are still buffered in resp->body (capped), so the
 * caller can read the error. Returns as httpc_request, plus the source's or
 * sink's own error when one of them failed. */
int httpc_request_stream(const struct httpc_opts *opts, const char *method, const char *url,
                         const char *const *headers, const struct httpc_stream *st,
                         struct httpc_response *resp);

/* Value of the named response header (case-insensitive), copied into out
 * (trimmed). Returns 0 or ERR_NOTFOUND / ERR_TOOBIG. */
int httpc_response_header(const struct httpc_response *r, const char *name, char *out,
                          size_t out_len);

/* The backoff delay before retry number attempt (0-based), before jitter is
 * applied: min(max_ms, base_ms << attempt). Exposed for tests. */
long httpc_backoff_cap_ms(long base_ms, long max_ms, int attempt);

#endif
