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
};

/* Defaults as documented above. */
#define HTTPC_OPTS_DEFAULT ((struct httpc_opts){5000, 30000, 3, 200, 10000, 64u << 20, 0})

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

/* Value of the named response header (case-insensitive), copied into out
 * (trimmed). Returns 0 or ERR_NOTFOUND / ERR_TOOBIG. */
int httpc_response_header(const struct httpc_response *r, const char *name, char *out,
                          size_t out_len);

/* The backoff delay before retry number attempt (0-based), before jitter is
 * applied: min(max_ms, base_ms << attempt). Exposed for tests. */
long httpc_backoff_cap_ms(long base_ms, long max_ms, int attempt);

#endif
