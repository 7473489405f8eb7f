/*
 * blob_s3.c - the S3 half of the file store (see blob.h): path-style
 * requests signed by libcurl's SigV4, retried with backoff, multipart
 * uploads from a local file, ranged reads.
 *
 * Requests used (object key = <prefix>/<key>; query strings are written
 * already sorted and encoded, as SigV4's canonical request wants them):
 *   HEAD   /bucket                                   the check at open
 *   PUT    /bucket/okey                              a file of one part
 *   POST   /bucket/okey?uploads=                     -> <UploadId>
 *   PUT    /bucket/okey?partNumber=N&uploadId=U      -> ETag header
 *   POST   /bucket/okey?uploadId=U                   CompleteMultipartUpload
 *                                                    (may answer 200 with <Error>)
 *   DELETE /bucket/okey?uploadId=U                   abort
 *   HEAD   /bucket/okey                              a reader's size
 *   GET    /bucket/okey  Range: bytes=A-B            a reader's next range
 *   DELETE /bucket/okey
 *   GET    /bucket?continuation-token=T&list-type=2&prefix=P
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/blob/blob_int.h"
#include "jobd/blob/s3xml.h"

#define XML_MAX (4u << 20)   /* an XML answer we read (a listing page of 1000 keys) */
#define MAX_PARTS 10000      /* S3's limit */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3 {
    char endpoint[512]; /* no trailing '/' */
    char bucket[64];
    char prefix[256];   /* no leading or trailing '/'; "" = none */
    char sigv4[128];    /* "aws:amz:REGION:s3" */
    char userpwd[512];  /* "ACCESS:SECRET" */
    uint64_t part_bytes;
    int max_attempts, connect_timeout_ms, timeout_ms;
};

/* ---- one request --------------------------------------------------------------- */

struct req {
    const char *method;  /* GET HEAD PUT POST DELETE */
    const char *okey;    /* the object key; NULL = the bucket */
    const char *query;   /* "" or sorted, encoded "a=b&c=d" */
    const void *body;
    size_t body_len;
    const char *range;   /* "bytes=A-B" or NULL */
    /* answer */
    long status;
    struct buf resp;     /* the caller sets its cap */
    char etag[256];
    int64_t length;      /* Content-Length; -1 = none */
};

static void req_init(struct req *r, const char *method, const char *okey, const char *query, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->method = method;
    r->okey = okey;
    r->query = query ? query : "";
    buf_init(&r->resp, cap);
}

/* AWS's URI encoding: unreserved bytes kept, '/' kept when slash, the rest %XX. */
static int uri_encode(struct buf *b, const char *s, int slash)
{
    int rc = 0;
    for (; !rc && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '.' || c == '_' || c == '~' || (slash && c == '/'))
            rc = buf_append_byte(b, (char)c);
        else
            rc = buf_printf(b, "%%%02X", c);
    }
    return rc;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct req *r = arg;
    return buf_append(&r->resp, p, size * n) ? 0 : size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct req *r = arg;
    size_t len = size * n;
    if (len > 5 && strncasecmp(p, "ETag:", 5) == 0) {
        size_t i = 5, e = len;
        while (i < e && (p[i] == ' ' || p[i] == '\t'))
            i++;
        while (e > i && (p[e - 1] == '\r' || p[e - 1] == '\n' || p[e - 1] == ' '))
            e--;
        if (e - i < sizeof r->etag) {
            memcpy(r->etag, p + i, e - i);
            r->etag[e - i] = '\0';
        }
    }
    return len;
}

/* One attempt on handle c. The CURLcode, or CURLE_OK with r->status set. */
static CURLcode attempt(struct s3 *s, CURL *c, struct req *r)
{
    struct buf url, h;
    buf_init(&url, 8192);
    buf_init(&h, 256);
    CURLcode cc = CURLE_OUT_OF_MEMORY;
    struct curl_slist *hl = NULL, *t;
    char hash[2 * SHA256_LEN + 1] = EMPTY_SHA256;
    if (r->body_len) {
        uint8_t d[SHA256_LEN];
        if (sha256(r->body, r->body_len, d))
            goto out;
        hex_encode(d, SHA256_LEN, hash);
    }
    if (buf_printf(&url, "%s/%s", s->endpoint, s->bucket) ||
        (r->okey && (buf_append_byte(&url, '/') || uri_encode(&url, r->okey, 1))) ||
        (r->query[0] && buf_printf(&url, "?%s", r->query)))
        goto out;
    if (buf_printf(&h, "x-amz-content-sha256: %s", hash) || !(t = curl_slist_append(hl, h.data)))
        goto out;
    hl = t;
    /* no "Header:" removals: libcurl 7.88 signs them as empty headers */
    if (r->range) {
        buf_reset(&h);
        if (buf_printf(&h, "Range: %s", r->range) || !(t = curl_slist_append(hl, h.data)))
            goto out;
        hl = t;
    }
    buf_reset(&r->resp);
    r->etag[0] = '\0';
    r->status = 0;
    r->length = -1;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.data);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(c, CURLOPT_USERPWD, s->userpwd);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)s->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body_len ? r->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        if (!strcmp(r->method, "PUT"))
            curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    }
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_off_t len = -1;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        if (curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) == CURLE_OK)
            r->length = len;
    }
out:
    curl_slist_free_all(hl);
    buf_release(&url);
    buf_release(&h);
    return cc;
}

static int transient_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Log the store's answer to a failed request. */
static void log_answer(const struct s3 *s, const struct req *r, const char *what)
{
    struct s3xml_error e = {"", ""};
    if (r->resp.len)
        s3xml_error_parse(r->resp.data, r->resp.len, &e);
    log_error("s3: %s %s/%s: HTTP %ld %s%s%s", what, s->bucket, r->okey ? r->okey : "", r->status,
              e.code, e.message[0] ? ": " : "", e.message);
}

/* The request with retries, on c (NULL: a handle of its own). 0 with
 * r->status < 300; else ERR_CONN (unreachable / 5xx after the retries),
 * ERR_NOTFOUND (404), ERR_AUTH (401, 403), ERR_HTTP (another status),
 * ERR_TOOBIG (the answer passed its cap), ERR_NOMEM. 404 is not logged. */
static int call(struct s3 *s, CURL *c, struct req *r, const char *what)
{
    CURL *own = NULL;
    if (!c && !(c = own = curl_easy_init()))
        return ERR_NOMEM;
    int rc = ERR_CONN;
    long backoff = 100;
    for (int i = 0; i < s->max_attempts; i++) {
        if (i) {
            sleep_ms(backoff);
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
        }
        CURLcode cc = attempt(s, c, r);
        if (cc == CURLE_WRITE_ERROR) {
            rc = ERR_TOOBIG;
            break;
        }
        if (cc == CURLE_OUT_OF_MEMORY) {
            rc = ERR_NOMEM;
            break;
        }
        if (cc != CURLE_OK) {
            log_warn("s3: %s %s/%s: %s (try %d of %d)", what, s->bucket, r->okey ? r->okey : "",
                     curl_easy_strerror(cc), i + 1, s->max_attempts);
            if (!transient_curl(cc)) {
                rc = ERR_CONN;
                break;
            }
            continue;
        }
        if (r->status >= 500 || r->status == 429) {
            log_answer(s, r, what);
            continue;
        }
        if (r->status >= 200 && r->status < 300)
            rc = 0;
        else if (r->status == 404)
            rc = ERR_NOTFOUND;
        else if (r->status == 401 || r->status == 403)
            rc = ERR_AUTH;
        else
            rc = ERR_HTTP;
        if (rc && rc != ERR_NOTFOUND)
            log_answer(s, r, what);
        break;
    }
    if (own)
        curl_easy_cleanup(own);
    return rc;
}

/* ---- open ------------------------------------------------------------------------ */

static const char *env_or(const char *v, const char *name)
{
    if (v && *v)
        return v;
    const char *e = getenv(name);
    return e && *e ? e : NULL;
}

/* "s3://BUCKET[/PREFIX]" into s. 0 or ERR_INVAL. */
static int parse_url(struct s3 *s, const char *url)
{
    if (strncmp(url, "s3://", 5) != 0)
        return ERR_INVAL;
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl >= sizeof s->bucket)
        return ERR_INVAL;
    for (size_t i = 0; i < bl; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.'))
            return ERR_INVAL;
    memcpy(s->bucket, b, bl);
    const char *p = slash ? slash + 1 : "";
    size_t pl = strlen(p);
    while (pl && p[pl - 1] == '/')
        pl--;
    if (pl >= sizeof s->prefix)
        return ERR_INVAL;
    memcpy(s->prefix, p, pl);
    s->prefix[pl] = '\0';
    return !pl || blob_key_ok(s->prefix) ? 0 : ERR_INVAL;
}

int s3_open(const struct blob_config *cfg, struct s3 **out, char *desc, size_t desc_cap)
{
    static int curl_ready;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = 1;
    }
    struct s3 *s = calloc(1, sizeof *s);
    if (!s)
        return ERR_NOMEM;
    int rc = ERR_INVAL;
    if (parse_url(s, cfg->url)) {
        log_error("s3: '%s' is not s3://BUCKET[/PREFIX] (bucket: 3..63 of a-z 0-9 . -)", cfg->url);
        goto fail;
    }
    const char *region = env_or(cfg->region, "AWS_REGION");
    region = region ? region : env_or(NULL, "AWS_DEFAULT_REGION");
    region = region ? region : "us-east-1";
    char aws[300];
    const char *ep = env_or(cfg->endpoint, "AWS_ENDPOINT_URL");
    if (!ep) {
        snprintf(aws, sizeof aws, "https://s3.%s.amazonaws.com", region);
        ep = aws;
    }
    size_t el = strlen(ep);
    while (el && ep[el - 1] == '/')
        el--;
    if ((strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)) || el >= sizeof s->endpoint ||
        strlen(region) > 64 || strchr(region, ':')) {
        log_error("s3: bad endpoint '%s' or region '%s'", ep, region);
        goto fail;
    }
    memcpy(s->endpoint, ep, el);
    const char *ak = env_or(cfg->access_key, "AWS_ACCESS_KEY_ID");
    const char *sk = env_or(cfg->secret_key, "AWS_SECRET_ACCESS_KEY");
    if (!ak || !sk || strchr(ak, ':')) {
        log_error("s3: bucket %s: no credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", s->bucket);
        goto fail;
    }
    if ((size_t)snprintf(s->userpwd, sizeof s->userpwd, "%s:%s", ak, sk) >= sizeof s->userpwd)
        goto fail;
    snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", region);
    s->part_bytes = cfg->part_bytes ? cfg->part_bytes : BLOB_PART_DEFAULT;
    s->max_attempts = cfg->max_attempts ? cfg->max_attempts : 4;
    s->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 2000;
    s->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 60000;
    if (s->part_bytes < BLOB_PART_MIN || s->part_bytes > (1u << 30) || s->max_attempts < 1 ||
        s->max_attempts > 20) {
        log_error("s3: part size must be 5M..1G and attempts 1..20");
        goto fail;
    }
    struct req r;
    req_init(&r, "HEAD", NULL, NULL, XML_MAX);
    rc = call(s, NULL, &r, "check bucket");
    buf_release(&r.resp);
    if (rc == ERR_AUTH)
        log_error("s3: bucket %s at %s refused the credentials of access key %s", s->bucket, s->endpoint, ak);
    else if (rc == ERR_NOTFOUND)
        log_error("s3: no bucket %s at %s", s->bucket, s->endpoint);
    else if (rc)
        log_error("s3: bucket %s at %s: %s", s->bucket, s->endpoint, err_msg(rc));
    if (rc)
        goto fail;
    snprintf(desc, desc_cap, "s3://%s%s%s at %s", s->bucket, s->prefix[0] ? "/" : "", s->prefix, s->endpoint);
    *out = s;
    return 0;
fail:
    free(s);
    return rc;
}

void s3_free(struct s3 *s)
{
    free(s);
}

static int object_key(const struct s3 *s, const char *key, char out[BLOB_KEY_MAX + 256])
{
    size_t cap = BLOB_KEY_MAX + 256;
    return (size_t)snprintf(out, cap, "%s%s%s", s->prefix, s->prefix[0] ? "/" : "", key) < cap ? 0 : ERR_TOOBIG;
}

/* ---- writes -------------------------------------------------------------------------- */

/* Read exactly n bytes at off of fd into p. 0 or ERR_IO. */
static int pread_full(int fd, void *p, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)p + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ERR_IO;
        got += (size_t)k;
    }
    return 0;
}

static int put_one(struct s3 *s, const char *okey, const void *body, size_t n)
{
    struct req r;
    req_init(&r, "PUT", okey, NULL, XML_MAX);
    r.body = body;
    r.body_len = n;
    int rc = call(s, NULL, &r, "put");
    buf_release(&r.resp);
    return rc;
}

/* XML text of s (ETags are quoted hex; escape anyway). */
static int xml_text(struct buf *b, const char *s)
{
    int rc = 0;
    for (; !rc && *s; s++)
        rc = *s == '&' ? buf_append_str(b, "&amp;") : *s == '<' ? buf_append_str(b, "&lt;")
           : *s == '>' ? buf_append_str(b, "&gt;") : buf_append_byte(b, *s);
    return rc;
}

static void abort_upload(struct s3 *s, CURL *c, const char *okey, const char *qid)
{
    struct req r;
    char q[1200];
    snprintf(q, sizeof q, "uploadId=%s", qid);
    req_init(&r, "DELETE", okey, q, XML_MAX);
    if (call(s, c, &r, "abort multipart upload"))
        log_warn("s3: multipart upload of %s/%s left for the bucket's lifecycle rule", s->bucket, okey);
    buf_release(&r.resp);
}

static int put_multipart(struct s3 *s, const char *okey, int fd, uint64_t size, char *part)
{
    CURL *c = curl_easy_init();
    if (!c)
        return ERR_NOMEM;
    struct req r;
    req_init(&r, "POST", okey, "uploads=", XML_MAX);
    struct buf qid, done;
    buf_init(&qid, 2048);
    buf_init(&done, 2u << 20);
    char id[1024], q[1400];
    int started = 0;
    int rc = call(s, c, &r, "start multipart upload");
    if (!rc && (rc = s3xml_upload_id(r.resp.data, r.resp.len, id, sizeof id)))
        log_error("s3: start multipart upload %s/%s: no UploadId in the answer", s->bucket, okey);
    if (!rc)
        rc = uri_encode(&qid, id, 0);
    started = !rc;
    if (!rc)
        rc = buf_append_str(&done, "<CompleteMultipartUpload>");
    int n_parts = 0;
    for (uint64_t off = 0; !rc && off < size; off += s->part_bytes) {
        size_t n = size - off < s->part_bytes ? (size_t)(size - off) : (size_t)s->part_bytes;
        if (++n_parts > MAX_PARTS) {
            rc = ERR_TOOBIG;
            break;
        }
        if ((rc = pread_full(fd, part, n, off)))
            break;
        snprintf(q, sizeof q, "partNumber=%d&uploadId=%s", n_parts, qid.data);
        buf_release(&r.resp);
        req_init(&r, "PUT", okey, q, XML_MAX);
        r.body = part;
        r.body_len = n;
        if ((rc = call(s, c, &r, "upload part")))
            break;
        if (!r.etag[0]) {
            log_error("s3: upload part %d of %s/%s: no ETag in the answer", n_parts, s->bucket, okey);
            rc = ERR_HTTP;
            break;
        }
        rc = buf_printf(&done, "<Part><PartNumber>%d</PartNumber><ETag>", n_parts);
        if (!rc)
            rc = xml_text(&done, r.etag);
        if (!rc)
            rc = buf_append_str(&done, "</ETag></Part>");
    }
    if (!rc)
        rc = buf_append_str(&done, "</CompleteMultipartUpload>");
    if (!rc) {
        snprintf(q, sizeof q, "uploadId=%s", qid.data);
        buf_release(&r.resp);
        req_init(&r, "POST", okey, q, XML_MAX);
        r.body = done.data;
        r.body_len = done.len;
        rc = call(s, c, &r, "complete multipart upload");
        struct s3xml_error e;
        if (!rc && r.resp.len && s3xml_error_parse(r.resp.data, r.resp.len, &e) == 0) {
            log_error("s3: complete multipart upload %s/%s: %s: %s", s->bucket, okey, e.code, e.message);
            rc = ERR_CONN; /* S3 may fail a completion after its 200: retry it later */
        }
    }
    if (rc && started)
        abort_upload(s, c, okey, qid.data);
    buf_release(&r.resp);
    buf_release(&qid);
    buf_release(&done);
    curl_easy_cleanup(c);
    return rc;
}

int s3_put_file(struct s3 *s, const char *key, const char *path)
{
    char okey[BLOB_KEY_MAX + 256];
    int rc = object_key(s, key, okey);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        log_error("s3: cannot read '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return ERR_IO;
    }
    uint64_t size = (uint64_t)sb.st_size;
    size_t bufsz = size < s->part_bytes ? (size_t)size : (size_t)s->part_bytes;
    char *part = malloc(bufsz ? bufsz : 1);
    if (!part) {
        close(fd);
        return ERR_NOMEM;
    }
    if (size <= s->part_bytes)
        rc = (rc = pread_full(fd, part, (size_t)size, 0)) ? rc : put_one(s, okey, part, (size_t)size);
    else
        rc = put_multipart(s, okey, fd, size, part);
    free(part);
    close(fd);
    return rc;
}

int s3_delete(struct s3 *s, const char *key)
{
    char okey[BLOB_KEY_MAX + 256];
    int rc = object_key(s, key, okey);
    if (rc)
        return rc;
    struct req r;
    req_init(&r, "DELETE", okey, NULL, XML_MAX);
    rc = call(s, NULL, &r, "delete");
    buf_release(&r.resp);
    return rc == ERR_NOTFOUND ? 0 : rc;
}

/* ---- listing --------------------------------------------------------------------------- */

struct list_ctx {
    const struct s3 *s;
    blob_list_fn fn;
    void *ctx;
};

static int on_object(void *arg, const struct s3xml_object *o)
{
    struct list_ctx *l = arg;
    const char *k = o->key;
    size_t pl = strlen(l->s->prefix);
    if (pl) {
        if (strncmp(k, l->s->prefix, pl) != 0 || k[pl] != '/')
            return 0; /* not ours */
        k += pl + 1;
    }
    return blob_key_ok(k) ? l->fn(l->ctx, k, o->size_bytes, o->mtime_s) : 0;
}

int s3_list(struct s3 *s, const char *prefix, blob_list_fn fn, void *ctx)
{
    char okey[BLOB_KEY_MAX + 256];
    int rc;
    if (strlen(prefix) >= BLOB_KEY_MAX || (rc = object_key(s, prefix, okey)))
        return ERR_INVAL;
    if (!prefix[0] && s->prefix[0])
        snprintf(okey, sizeof okey, "%s/", s->prefix);
    CURL *c = curl_easy_init();
    if (!c)
        return ERR_NOMEM;
    char token[S3XML_TEXT_MAX] = "";
    struct buf q;
    buf_init(&q, 16384);
    struct list_ctx l = {s, fn, ctx};
    struct req r;
    req_init(&r, "GET", NULL, NULL, XML_MAX);
    for (int truncated = 1; !rc && truncated;) {
        buf_reset(&q);
        if (token[0] && (buf_append_str(&q, "continuation-token=") || uri_encode(&q, token, 0) ||
                         buf_append_byte(&q, '&'))) {
            rc = ERR_NOMEM;
            break;
        }
        if (buf_append_str(&q, "list-type=2&prefix=") || uri_encode(&q, okey, 0)) {
            rc = ERR_NOMEM;
            break;
        }
        r.query = q.data;
        if ((rc = call(s, c, &r, "list")))
            break;
        rc = s3xml_list_parse(r.resp.data ? r.resp.data : "", r.resp.len, on_object, &l, &truncated, token,
                              sizeof token);
        if (rc == ERR_PARSE || rc == ERR_TOOBIG)
            log_error("s3: list %s/%s: the answer is not a listing", s->bucket, okey);
    }
    buf_release(&r.resp);
    buf_release(&q);
    curl_easy_cleanup(c);
    return rc;
}

/* ---- reads ------------------------------------------------------------------------------ */

struct s3_reader {
    struct s3 *s;
    CURL *c;
    char okey[BLOB_KEY_MAX + 256];
    uint64_t size, off;  /* off: the next byte to fetch */
    struct req r;        /* its resp holds the current range */
    size_t pos;          /* bytes of resp already handed out */
};

int s3_reader_open(struct s3 *s, const char *key, struct s3_reader **out, uint64_t *size)
{
    struct s3_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return ERR_NOMEM;
    rd->s = s;
    int rc = object_key(s, key, rd->okey);
    if (!rc && !(rd->c = curl_easy_init()))
        rc = ERR_NOMEM;
    req_init(&rd->r, "HEAD", rd->okey, NULL, BLOB_RANGE_BYTES);
    if (!rc)
        rc = call(s, rd->c, &rd->r, "head");
    if (!rc && rd->r.length < 0) {
        log_error("s3: head %s/%s: no Content-Length", s->bucket, rd->okey);
        rc = ERR_HTTP;
    }
    if (rc) {
        s3_reader_free(rd);
        return rc;
    }
    rd->size = (uint64_t)rd->r.length;
    *size = rd->size;
    *out = rd;
    return 0;
}

ssize_t s3_reader_read(struct s3_reader *rd, void *buf, size_t cap)
{
    if (rd->pos == rd->r.resp.len) {
        if (rd->off >= rd->size)
            return 0;
        uint64_t want = rd->size - rd->off < BLOB_RANGE_BYTES ? rd->size - rd->off : BLOB_RANGE_BYTES;
        char range[64];
        snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)rd->off,
                 (unsigned long long)(rd->off + want - 1));
        rd->r.method = "GET";
        rd->r.range = range;
        int rc = call(rd->s, rd->c, &rd->r, "get");
        rd->r.range = NULL;
        rd->pos = 0;
        if (rc == ERR_TOOBIG || (!rc && rd->r.resp.len != want) ||
            (!rc && rd->r.status != 206 && !(rd->off == 0 && want == rd->size))) {
            log_error("s3: get %s/%s: the object changed under the reader (HTTP %ld, %zu of %llu bytes)",
                      rd->s->bucket, rd->okey, rd->r.status, rd->r.resp.len, (unsigned long long)want);
            buf_reset(&rd->r.resp);
            return ERR_CORRUPT;
        }
        if (rc) {
            buf_reset(&rd->r.resp);
            return rc;
        }
        rd->off += want;
    }
    size_t n = rd->r.resp.len - rd->pos;
    n = n < cap ? n : cap;
    memcpy(buf, rd->r.resp.data + rd->pos, n);
    rd->pos += n;
    return (ssize_t)n;
}

void s3_reader_free(struct s3_reader *rd)
{
    if (!rd)
        return;
    if (rd->c)
        curl_easy_cleanup(rd->c);
    buf_release(&rd->r.resp);
    free(rd);
}
