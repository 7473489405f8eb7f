/*
 * s3xml.c - the S3 answers' XML, one pass (see s3xml.h).
 */
#include "jobd/blob/s3xml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/utf8.h"

struct walk {
    const char *p, *end;
    char path[S3XML_PATH_MAX];
    size_t path_len;
    size_t mark[S3XML_DEPTH_MAX]; /* path_len before each open element's name */
    int depth;
    int had_child[S3XML_DEPTH_MAX];
    char text[S3XML_TEXT_MAX];
    size_t text_len;
};

static int starts(const struct walk *w, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(w->end - w->p) >= n && memcmp(w->p, s, n) == 0;
}

/* Move past the first occurrence of s. ERR_PARSE if there is none. */
static int skip_past(struct walk *w, const char *s)
{
    size_t n = strlen(s);
    for (const char *q = w->p; (size_t)(w->end - q) >= n; q++)
        if (memcmp(q, s, n) == 0) {
            w->p = q + n;
            return 0;
        }
    return ERR_PARSE;
}

static int text_add(struct walk *w, const char *s, size_t n)
{
    if (n >= sizeof w->text - w->text_len)
        return ERR_TOOBIG;
    memcpy(w->text + w->text_len, s, n);
    w->text_len += n;
    w->text[w->text_len] = '\0';
    return 0;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int is_name_char(char c)
{
    return c != '\0' && !is_space(c) && c != '>' && c != '/' && c != '<' && c != '=' && c != '"' &&
           c != '\'' && c != '&';
}

/* One entity at w->p ('&'): decoded into the text. */
static int entity(struct walk *w)
{
    static const struct { const char *name; char c; } named[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (starts(w, named[i].name)) {
            w->p += strlen(named[i].name);
            return text_add(w, &named[i].c, 1);
        }
    if (!starts(w, "&#"))
        return ERR_PARSE;
    const char *q = w->p + 2;
    int hex = q < w->end && *q == 'x';
    q += hex;
    uint32_t cp = 0;
    int digits = 0;
    for (; q < w->end && *q != ';'; q++, digits++) {
        int d;
        if (*q >= '0' && *q <= '9')
            d = *q - '0';
        else if (hex && *q >= 'a' && *q <= 'f')
            d = *q - 'a' + 10;
        else if (hex && *q >= 'A' && *q <= 'F')
            d = *q - 'A' + 10;
        else
            return ERR_PARSE;
        if (digits >= 8)
            return ERR_PARSE;
        cp = cp * (hex ? 16u : 10u) + (uint32_t)d;
    }
    if (q >= w->end || digits == 0 || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return ERR_PARSE;
    w->p = q + 1;
    char u[4];
    size_t n = utf8_encode(cp, u);
    return n ? text_add(w, u, n) : ERR_PARSE;
}

/* Skip the attributes of a start tag up to '>' or "/>"; *empty = 1 for "/>". */
static int attrs(struct walk *w, int *empty)
{
    while (w->p < w->end) {
        char c = *w->p;
        if (c == '>') {
            w->p++;
            *empty = 0;
            return 0;
        }
        if (c == '/' && w->p + 1 < w->end && w->p[1] == '>') {
            w->p += 2;
            *empty = 1;
            return 0;
        }
        if (c == '"' || c == '\'') {
            const char *q = memchr(w->p + 1, c, (size_t)(w->end - w->p - 1));
            if (!q)
                return ERR_PARSE;
            w->p = q + 1;
            continue;
        }
        if (c == '<')
            return ERR_PARSE;
        w->p++;
    }
    return ERR_PARSE;
}

/* The local part of the name at w->p (prefix "ns:" dropped); advances. */
static int name(struct walk *w, const char **s, size_t *n)
{
    const char *b = w->p;
    while (w->p < w->end && is_name_char(*w->p))
        w->p++;
    if (w->p == b)
        return ERR_PARSE;
    const char *colon = memchr(b, ':', (size_t)(w->p - b));
    *s = colon ? colon + 1 : b;
    *n = (size_t)(w->p - *s);
    return *n ? 0 : ERR_PARSE;
}

static int open_elem(struct walk *w, const char *s, size_t n)
{
    if (w->depth >= S3XML_DEPTH_MAX)
        return ERR_TOOBIG;
    size_t need = n + (w->depth ? 1 : 0);
    if (need >= sizeof w->path - w->path_len)
        return ERR_TOOBIG;
    if (w->depth)
        w->had_child[w->depth - 1] = 1;
    w->mark[w->depth] = w->path_len;
    if (w->depth)
        w->path[w->path_len++] = '/';
    memcpy(w->path + w->path_len, s, n);
    w->path_len += n;
    w->path[w->path_len] = '\0';
    w->had_child[w->depth] = 0;
    w->depth++;
    w->text_len = 0;
    w->text[0] = '\0';
    return 0;
}

static int close_elem(struct walk *w, s3xml_fn fn, void *ctx)
{
    w->depth--;
    const char *t = w->had_child[w->depth] ? "" : w->text;
    size_t tn = w->had_child[w->depth] ? 0 : w->text_len;
    int rc = fn ? fn(ctx, w->path, t, tn) : 0;
    w->path_len = w->mark[w->depth];
    w->path[w->path_len] = '\0';
    w->text_len = 0;
    w->text[0] = '\0';
    return rc;
}

/* The markup at w->p ('<'). *done = 1 once the root has closed. */
static int markup(struct walk *w, s3xml_fn fn, void *ctx, int *seen_root, int *done)
{
    if (starts(w, "<?"))
        return skip_past(w, "?>");
    if (starts(w, "<!--"))
        return skip_past(w, "-->");
    if (starts(w, "<![CDATA[")) {
        if (!w->depth)
            return ERR_PARSE;
        w->p += 9;
        const char *b = w->p;
        int rc = skip_past(w, "]]>");
        size_t len = (size_t)(w->p - 3 - b);
        if (!rc && memchr(b, '\0', len)) /* raw NULs are refused here as in plain text */
            rc = ERR_PARSE;
        return rc ? rc : text_add(w, b, len);
    }
    if (starts(w, "<!"))
        return ERR_UNSUPPORTED; /* DOCTYPE and other declarations */
    const char *s;
    size_t n;
    int rc;
    if (starts(w, "</")) {
        w->p += 2;
        if ((rc = name(w, &s, &n)))
            return rc;
        while (w->p < w->end && is_space(*w->p))
            w->p++;
        if (w->p >= w->end || *w->p != '>' || !w->depth)
            return ERR_PARSE;
        w->p++;
        size_t top = w->mark[w->depth - 1] + (w->depth > 1 ? 1 : 0);
        if (w->path_len - top != n || memcmp(w->path + top, s, n) != 0)
            return ERR_PARSE;
        if ((rc = close_elem(w, fn, ctx)))
            return rc;
        *done = w->depth == 0;
        return 0;
    }
    w->p++;
    if (!w->depth && *seen_root)
        return ERR_PARSE; /* a second root */
    if ((rc = name(w, &s, &n)) || (rc = open_elem(w, s, n)))
        return rc;
    *seen_root = 1;
    int empty = 0;
    if ((rc = attrs(w, &empty)))
        return rc;
    if (empty) {
        if ((rc = close_elem(w, fn, ctx)))
            return rc;
        *done = w->depth == 0;
    }
    return 0;
}

int s3xml_walk(const char *xml, size_t n, s3xml_fn fn, void *ctx)
{
    struct walk *w = calloc(1, sizeof *w);
    if (!w)
        return ERR_NOMEM;
    w->p = xml;
    w->end = xml + n;
    int seen_root = 0, done = 0, rc = 0;
    while (!rc && w->p < w->end) {
        char c = *w->p;
        if (c == '<') {
            rc = markup(w, fn, ctx, &seen_root, &done);
        } else if (!w->depth) {
            if (!is_space(c))
                rc = ERR_PARSE; /* text outside the root */
            w->p++;
        } else if (c == '&') {
            rc = entity(w);
        } else if (c == '\0') {
            rc = ERR_PARSE;
        } else {
            const char *b = w->p;
            while (w->p < w->end && *w->p != '<' && *w->p != '&' && *w->p != '\0')
                w->p++;
            rc = text_add(w, b, (size_t)(w->p - b));
        }
    }
    if (!rc && (!done || w->depth))
        rc = ERR_PARSE; /* no root, or unterminated */
    free(w);
    return rc;
}

/* ---- the answers ------------------------------------------------------------------ */

static void copy_trunc(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s);
}

struct err_ctx {
    struct s3xml_error *e;
    int is_error;
};

static int on_error(void *ctx, const char *path, const char *text, size_t n)
{
    struct err_ctx *c = ctx;
    if (strcmp(path, "Error/Code") == 0)
        copy_trunc(c->e->code, sizeof c->e->code, text);
    else if (strcmp(path, "Error/Message") == 0)
        copy_trunc(c->e->message, sizeof c->e->message, text);
    else if (strcmp(path, "Error") == 0)
        c->is_error = 1;
    return 0;
}

int s3xml_error_parse(const char *xml, size_t n, struct s3xml_error *out)
{
    struct s3xml_error e;
    memset(&e, 0, sizeof e);
    struct err_ctx c = {&e, 0};
    int rc = s3xml_walk(xml, n, on_error, &c);
    if (rc)
        return rc;
    if (!c.is_error)
        return ERR_PARSE;
    *out = e;
    return 0;
}

struct id_ctx {
    char *out;
    size_t cap;
    int rc; /* 1: not seen yet */
};

static int on_upload_id(void *ctx, const char *path, const char *text, size_t n)
{
    struct id_ctx *c = ctx;
    if (strcmp(path, "InitiateMultipartUploadResult/UploadId") != 0)
        return 0;
    if (n == 0)
        return ERR_PARSE;
    if (n >= c->cap)
        return ERR_TOOBIG;
    memcpy(c->out, text, n + 1);
    c->rc = 0;
    return 0;
}

int s3xml_upload_id(const char *xml, size_t n, char *out, size_t cap)
{
    struct id_ctx c = {out, cap, 1};
    int rc = s3xml_walk(xml, n, on_upload_id, &c);
    if (rc)
        return rc;
    return c.rc ? ERR_PARSE : 0;
}

/* "2026-12-03T12:46:07.000Z" (ISO 8601, UTC) as unix seconds; 0 if unreadable. */
static int64_t iso8601_s(const char *s)
{
    int y, mo, d, h, mi, sec;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6)
        return 0;
    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 ||
        h < 0 || mi < 0 || sec < 0)
        return 0;
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    return t < 0 ? 0 : (int64_t)t;
}

struct list_ctx {
    s3xml_object_fn fn;
    void *ctx;
    struct s3xml_object o;
    int have_key, is_list, truncated;
    char *token;
    size_t cap;
};

static int on_list(void *ctx, const char *path, const char *text, size_t n)
{
    struct list_ctx *c = ctx;
    if (strncmp(path, "ListBucketResult", 16) != 0 || (path[16] && path[16] != '/'))
        return ERR_PARSE;
    const char *sub = path[16] ? path + 17 : "";
    if (!strcmp(sub, "Contents/Key")) {
        if (n == 0)
            return ERR_PARSE;
        memcpy(c->o.key, text, n + 1);
        c->have_key = 1;
    } else if (!strcmp(sub, "Contents/Size")) {
        char *e = NULL;
        if (n == 0 || n > 20 || text[0] < '0' || text[0] > '9')
            return ERR_PARSE;
        unsigned long long v = strtoull(text, &e, 10);
        if (*e)
            return ERR_PARSE;
        c->o.size_bytes = v;
    } else if (!strcmp(sub, "Contents/LastModified")) {
        c->o.mtime_s = iso8601_s(text);
    } else if (!strcmp(sub, "Contents")) {
        if (!c->have_key)
            return ERR_PARSE;
        int rc = c->fn ? c->fn(c->ctx, &c->o) : 0;
        memset(&c->o, 0, sizeof c->o);
        c->have_key = 0;
        return rc;
    } else if (!strcmp(sub, "IsTruncated")) {
        c->truncated = strcmp(text, "true") == 0;
    } else if (!strcmp(sub, "NextContinuationToken")) {
        if (n >= c->cap)
            return ERR_TOOBIG;
        memcpy(c->token, text, n + 1);
    } else if (!*sub) {
        c->is_list = 1;
    }
    return 0;
}

int s3xml_list_parse(const char *xml, size_t n, s3xml_object_fn fn, void *ctx, int *truncated,
                     char *token, size_t cap)
{
    if (cap == 0)
        return ERR_TOOBIG;
    struct list_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ERR_NOMEM;
    c->fn = fn;
    c->ctx = ctx;
    c->token = token;
    c->cap = cap;
    token[0] = '\0';
    int rc = s3xml_walk(xml, n, on_list, c);
    if (!rc && !c->is_list)
        rc = ERR_PARSE;
    if (!rc && c->truncated && !token[0])
        rc = ERR_PARSE; /* a page that says "more" without saying where */
    if (!rc)
        *truncated = c->truncated;
    free(c);
    return rc;
}
