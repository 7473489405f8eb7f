/* httpc.c - HTTP client over libcurl with timeouts and retries (see httpc.h). */
#include "httpc.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "crypto.h"
#include "err.h"
#include "log.h"

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;
static void httpc_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void httpc_response_init(struct httpc_response *r)
{
    r->status = 0;
    r->attempts = 0;
    buf_init(&r->body, 0);
    buf_init(&r->headers, 256u << 10);
}

void httpc_response_release(struct httpc_response *r)
{
    if (!r)
        return;
    buf_release(&r->body);
    buf_release(&r->headers);
}

struct httpc_sink {
    struct buf *b;
    int overflow;
    CURL *h;                  /* body sink only: to read the status */
    const struct httpc_stream *st;
    unsigned long long n_sunk; /* bytes handed to st->sink */
    int err;                  /* the sink's error */
};

static size_t httpc_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    struct httpc_sink *s = ud;
    size_t n = size * nmemb;
    if (s->st && s->st->sink) {
        long code = 0;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200 && code < 300) {
            int rc = s->st->sink(s->st->sink_ctx, p, n);
            if (rc) {
                s->err = rc;
                return 0;
            }
            s->n_sunk += n;
            return n;
        }
    }
    if (buf_append(s->b, p, n)) {
        s->overflow = 1;
        return 0; /* makes curl abort with CURLE_WRITE_ERROR */
    }
    return n;
}

struct httpc_src {
    const struct httpc_stream *st;
    int started; /* the source was read since the last rewind */
    int err;
};

static size_t httpc_read_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    struct httpc_src *s = ud;
    s->started = 1;
    long n = s->st->source(s->st->source_ctx, p, size * nmemb);
    if (n < 0) {
        s->err = (int)n;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)n;
}

static size_t httpc_header_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    struct httpc_sink *s = ud;
    size_t n = size * nmemb;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0)
        buf_reset(s->b); /* a new response (e.g. after 100 Continue or a redirect) */
    else if (buf_append(s->b, p, n)) {
        s->overflow = 1;
        return 0;
    }
    return n;
}

long httpc_backoff_cap_ms(long base_ms, long max_ms, int attempt)
{
    long d = base_ms;
    for (int i = 0; i < attempt && d < max_ms; i++)
        d *= 2;
    return d < max_ms ? d : max_ms;
}

static int httpc_status_retryable(long st)
{
    return st == 408 || st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

static int httpc_method_idempotent(const char *m)
{
    return strcmp(m, "POST") != 0 && strcmp(m, "PATCH") != 0;
}

int httpc_response_header(const struct httpc_response *r, const char *name, char *out,
                          size_t out_len)
{
    size_t nlen = strlen(name);
    const char *p = r->headers.data;
    if (!p)
        return ERR_NOTFOUND;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t line_len = eol ? (size_t)(eol - p) : strlen(p);
        if (line_len > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1, *end = p + line_len;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
                end--;
            size_t vlen = (size_t)(end - v);
            if (vlen + 1 > out_len)
                return ERR_TOOBIG;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return 0;
        }
        if (!eol)
            break;
        p = eol + 1;
    }
    return ERR_NOTFOUND;
}

static long httpc_jitter_ms(long cap_ms)
{
    uint32_t r = 0;
    if (cap_ms <= 0 || crypto_random(&r, sizeof r))
        return cap_ms > 0 ? cap_ms : 0;
    return (long)(r % (uint32_t)(cap_ms + 1));
}

static int httpc_do(const struct httpc_opts *opts, const char *method, const char *url,
                    const char *const *headers, const void *body, size_t body_len,
                    const struct httpc_stream *st, struct httpc_response *resp)
{
    pthread_once(&httpc_once, httpc_global_init);
    CURL *h = curl_easy_init();
    if (!h)
        return ERR_NOMEM;
    struct curl_slist *hl = NULL;
    for (size_t i = 0; headers && headers[i]; i++) {
        struct curl_slist *n = curl_slist_append(hl, headers[i]);
        if (!n) {
            curl_slist_free_all(hl);
            curl_easy_cleanup(h);
            return ERR_NOMEM;
        }
        hl = n;
    }
    int streamed_body = st && st->source;
    if (body_len || streamed_body) { /* curl would otherwise add "Expect: 100-continue" and wait */
        struct curl_slist *n = curl_slist_append(hl, "Expect:");
        if (n && streamed_body && st->body_len < 0)
            n = curl_slist_append(n, "Transfer-Encoding: chunked");
        if (!n) {
            curl_slist_free_all(hl);
            curl_easy_cleanup(h);
            return ERR_NOMEM;
        }
        hl = n;
    }

    resp->body.max_bytes = opts->max_response_bytes;
    struct httpc_sink body_sink = {&resp->body, 0, h, st, 0, 0}, hdr_sink = {&resp->headers, 0, NULL, NULL, 0, 0};
    struct httpc_src src = {st, 0, 0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, opts->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, opts->timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, httpc_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body_sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, httpc_header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hdr_sink);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (opts->stall_timeout_ms > 0) {
        long secs = (opts->stall_timeout_ms + 999) / 1000;
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, secs);
    }
    if (streamed_body) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, httpc_read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, &src);
        if (st->body_len >= 0)
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)st->body_len);
    } else if (body_len || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body_len ? body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }

    int may_retry = httpc_method_idempotent(method) || opts->retry_unsafe;
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        buf_reset(&resp->body);
        buf_reset(&resp->headers);
        body_sink.overflow = hdr_sink.overflow = 0;
        resp->status = 0;
        resp->attempts = attempt + 1;
        CURLcode cc = curl_easy_perform(h);
        int retryable;
        if (src.err || body_sink.err) {
            rc = src.err ? src.err : body_sink.err;
            retryable = 0;
        } else if (cc == CURLE_OK) {
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
            rc = 0;
            retryable = httpc_status_retryable(resp->status);
        } else if (body_sink.overflow || hdr_sink.overflow) {
            rc = ERR_TOOBIG;
            retryable = 0;
        } else if (cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL) {
            log_warn("http %s %s: %s", method, url, curl_easy_strerror(cc));
            rc = ERR_INVAL;
            retryable = 0;
        } else {
            log_debug("http %s %s: %s (attempt %d)", method, url, curl_easy_strerror(cc),
                      attempt + 1);
            rc = cc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_CONN;
            retryable = 1;
        }
        if (body_sink.n_sunk) /* bytes already delivered cannot be taken back */
            retryable = 0;
        if (!retryable || !may_retry || attempt >= opts->max_retries)
            break;
        if (streamed_body && src.started) { /* start the body again, or give up */
            if (!st->rewind || st->rewind(st->source_ctx))
                break;
            src.started = 0;
        }
        long delay = httpc_jitter_ms(httpc_backoff_cap_ms(opts->backoff_base_ms,
                                                           opts->backoff_max_ms, attempt));
        char ra[32];
        if (resp->status && httpc_response_header(resp, "Retry-After", ra, sizeof ra) == 0) {
            char *end;
            long s = strtol(ra, &end, 10);
            if (end != ra && *end == '\0' && s >= 0)
                delay = s * 1000 < opts->backoff_max_ms ? s * 1000 : opts->backoff_max_ms;
        }
        clock_sleep_ms((uint64_t)delay);
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return rc;
}

int httpc_request(const struct httpc_opts *opts, const char *method, const char *url,
                  const char *const *headers, const void *body, size_t body_len,
                  struct httpc_response *resp)
{
    return httpc_do(opts, method, url, headers, body, body_len, NULL, resp);
}

int httpc_request_stream(const struct httpc_opts *opts, const char *method, const char *url,
                         const char *const *headers, const struct httpc_stream *st,
                         struct httpc_response *resp)
{
    return httpc_do(opts, method, url, headers, NULL, 0, st, resp);
}
