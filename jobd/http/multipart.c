/*
 * multipart.c - streaming multipart/form-data parser (see multipart.h).
 * Pure state machine; no allocation.
 */
#include "jobd/http/multipart.h"

#include <string.h>
#include <strings.h>

#include "common/err.h"

/* RFC 2046 bchars: DIGIT / ALPHA / "'()+_,-./:=?" and space (not last) */
static int bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("'()+_,-./:=? ", c) != NULL);
}

static int boundary_ok(const char *b, size_t n)
{
    if (n < 1 || n > MP_MAX_BOUNDARY || b[n - 1] == ' ')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!bchar(b[i]))
            return 0;
    return 1;
}

static const char *skip_ows(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Parse one parameter value at *s (quoted-string or token) into out (cap
 * bytes incl. NUL); advance *s past it. 0, ERR_PARSE, ERR_TOOBIG. */
static int param_value(const char **s, char *out, size_t cap)
{
    const char *p = *s;
    size_t n = 0;
    if (*p == '"') {
        p++;
        for (;;) {
            char c = *p;
            if (c == '\0')
                return ERR_PARSE; /* unterminated */
            if (c == '"') {
                p++;
                break;
            }
            if (c == '\\' && p[1])
                c = *++p;
            if (n + 1 >= cap)
                return ERR_TOOBIG;
            out[n++] = c;
            p++;
        }
    } else {
        while (*p && *p != ';' && *p != ' ' && *p != '\t') {
            if (n + 1 >= cap)
                return ERR_TOOBIG;
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    *s = p;
    return 0;
}

int mp_boundary_from_content_type(const char *ct, char *out, size_t out_len)
{
    static const char type[] = "multipart/form-data";
    if (!ct)
        return ERR_UNSUPPORTED;
    ct = skip_ows(ct);
    if (strncasecmp(ct, type, sizeof type - 1) != 0)
        return ERR_UNSUPPORTED;
    const char *p = ct + sizeof type - 1;
    p = skip_ows(p);
    if (*p != ';' && *p != '\0')
        return ERR_UNSUPPORTED;
    while (*p == ';') {
        p = skip_ows(p + 1);
        const char *eq = strchr(p, '=');
        if (!eq)
            return ERR_PARSE;
        size_t nlen = (size_t)(eq - p);
        const char *v = eq + 1;
        char val[MP_MAX_BOUNDARY + 2];
        int rc = param_value(&v, val, sizeof val);
        if (rc)
            return ERR_PARSE;
        if (nlen == 8 && strncasecmp(p, "boundary", 8) == 0) {
            size_t n = strlen(val);
            if (!boundary_ok(val, n) || n + 1 > out_len)
                return ERR_PARSE;
            memcpy(out, val, n + 1);
            return 0;
        }
        p = skip_ows(v);
        if (*p && *p != ';')
            return ERR_PARSE;
    }
    return ERR_PARSE;
}

int mp_init(struct mp_parser *p, const char *boundary, const struct mp_callbacks *cb, void *ctx)
{
    size_t n = boundary ? strlen(boundary) : 0;
    if (!boundary_ok(boundary ? boundary : "", n) || !cb)
        return ERR_INVAL;
    memset(p, 0, sizeof *p);
    memcpy(p->delim, "\r\n--", 4);
    memcpy(p->delim + 4, boundary, n);
    p->delim_len = 4 + n;
    p->delim[p->delim_len] = '\0';
    p->match = 2; /* the stream is matched as if it began with CRLF */
    p->state = MP_PREAMBLE;
    p->cb = cb;
    p->ctx = ctx;
    return 0;
}

static int fail(struct mp_parser *p, int rc)
{
    p->err = rc;
    p->state = MP_ERROR;
    return rc;
}

static int emit(struct mp_parser *p, const char *d, size_t n)
{
    if (p->state != MP_BODY || n == 0 || !p->cb->on_part_data)
        return 0;
    return p->cb->on_part_data(p->ctx, d, n);
}

/* The header block (without its final empty line) is complete: find
 * Content-Disposition and start the part. */
static int headers_done(struct mp_parser *p)
{
    char name[MP_MAX_NAME + 1], filename[MP_MAX_NAME + 1];
    int have_name = 0, have_filename = 0, have_disp = 0;
    p->hdr[p->hdr_len] = '\0';
    if (memchr(p->hdr, '\0', p->hdr_len))
        return ERR_PARSE;
    char *line = p->hdr;
    while (*line) {
        char *eol = strstr(line, "\r\n");
        if (!eol)
            return ERR_PARSE;
        *eol = '\0';
        char *colon = strchr(line, ':');
        if (!colon || colon == line)
            return ERR_PARSE;
        *colon = '\0';
        if (strcasecmp(line, "content-disposition") == 0) {
            if (have_disp)
                return ERR_PARSE;
            have_disp = 1;
            const char *v = skip_ows(colon + 1);
            if (strncasecmp(v, "form-data", 9) != 0)
                return ERR_PARSE;
            v = skip_ows(v + 9);
            while (*v == ';') {
                v = skip_ows(v + 1);
                const char *eq = strchr(v, '=');
                if (!eq)
                    return ERR_PARSE;
                size_t nlen = (size_t)(eq - v);
                while (nlen && (v[nlen - 1] == ' ' || v[nlen - 1] == '\t'))
                    nlen--;
                const char *val = skip_ows(eq + 1);
                char tmp[MP_MAX_NAME + 1];
                int rc = param_value(&val, tmp, sizeof tmp);
                if (rc)
                    return rc;
                if (nlen == 4 && strncasecmp(v, "name", 4) == 0) {
                    if (have_name)
                        return ERR_PARSE;
                    memcpy(name, tmp, sizeof tmp);
                    have_name = 1;
                } else if (nlen == 8 && strncasecmp(v, "filename", 8) == 0) {
                    if (have_filename)
                        return ERR_PARSE;
                    memcpy(filename, tmp, sizeof tmp);
                    have_filename = 1;
                } /* other parameters (filename*) are ignored */
                v = skip_ows(val);
                if (*v && *v != ';')
                    return ERR_PARSE;
            }
            if (*v)
                return ERR_PARSE;
        }
        line = eol + 2;
    }
    if (!have_disp || !have_name)
        return ERR_PARSE;
    if (++p->n_parts > MP_MAX_PARTS)
        return ERR_TOOBIG;
    p->state = MP_BODY;
    return p->cb->on_part_begin ? p->cb->on_part_begin(p->ctx, name, have_filename ? filename : NULL)
                                : 0;
}

/* PREAMBLE or BODY: scan for the delimiter. Returns bytes consumed (stops
 * right after a complete delimiter) or a negative error. */
static long scan(struct mp_parser *p, const char *d, size_t n)
{
    size_t start = 0; /* d[start..i) are pending data bytes */
    int rc;
    for (size_t i = 0; i < n; i++) {
        char c = d[i];
        if (c == p->delim[p->match]) {
            if (p->match == 0 && (rc = emit(p, d + start, i - start)))
                return rc;
            p->match++;
            start = i + 1;
            if (p->match == p->delim_len) {
                p->match = 0;
                if (p->state == MP_BODY && p->cb->on_part_end && (rc = p->cb->on_part_end(p->ctx)))
                    return rc;
                p->state = MP_AFTER_DELIM;
                return (long)(i + 1);
            }
            continue;
        }
        if (p->match > 0) {
            if ((rc = emit(p, p->delim, p->match)))
                return rc;
            p->match = 0;
            if (c == p->delim[0]) {
                p->match = 1;
                start = i + 1;
                continue;
            }
            start = i;
        }
    }
    if ((rc = emit(p, d + start, n - start)))
        return rc;
    return (long)n;
}

int mp_feed(struct mp_parser *p, const char *data, size_t n)
{
    if (p->state == MP_ERROR)
        return p->err;
    size_t i = 0;
    while (i < n) {
        switch (p->state) {
        case MP_PREAMBLE:
        case MP_BODY: {
            long k = scan(p, data + i, n - i);
            if (k < 0)
                return fail(p, (int)k);
            i += (size_t)k;
            break;
        }
        case MP_AFTER_DELIM: {
            char c = data[i++];
            if (c == '-')
                p->state = MP_AFTER_DELIM_DASH;
            else if (c == '\r')
                p->state = MP_AFTER_DELIM_CR;
            else if (c != ' ' && c != '\t') /* transport padding */
                return fail(p, ERR_PARSE);
            break;
        }
        case MP_AFTER_DELIM_DASH:
            if (data[i++] != '-')
                return fail(p, ERR_PARSE);
            p->state = MP_EPILOGUE;
            break;
        case MP_AFTER_DELIM_CR:
            if (data[i++] != '\n')
                return fail(p, ERR_PARSE);
            p->state = MP_HEADERS;
            p->hdr_len = 0;
            break;
        case MP_HEADERS: {
            if (p->hdr_len >= MP_MAX_HEADER_BYTES)
                return fail(p, ERR_TOOBIG);
            p->hdr[p->hdr_len++] = data[i++];
            size_t L = p->hdr_len;
            if (L == 2 && memcmp(p->hdr, "\r\n", 2) == 0) {
                p->hdr_len = 0; /* no headers at all */
                int rc = headers_done(p);
                if (rc)
                    return fail(p, rc);
            } else if (L >= 4 && memcmp(p->hdr + L - 4, "\r\n\r\n", 4) == 0) {
                p->hdr_len = L - 2; /* keep the last line's CRLF */
                int rc = headers_done(p);
                if (rc)
                    return fail(p, rc);
            }
            break;
        }
        case MP_EPILOGUE:
            return 0;
        case MP_ERROR:
            return p->err;
        }
    }
    return 0;
}

int mp_finish(const struct mp_parser *p)
{
    if (p->state == MP_ERROR)
        return p->err;
    return p->state == MP_EPILOGUE ? 0 : ERR_PARSE;
}
