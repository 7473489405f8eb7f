/*
 * jsonl.c - the JSONL line reader (see jsonl.h for the rules).
 */
#include "jobd/intake/jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/zst.h"
#include "jobd/blob/blob.h"

#define CHUNK_BYTES (256u << 10)

struct jsonl_reader {
    int fd;                 /* a file's, or -1 */
    struct blob_reader *br; /* a stored file's, or NULL */
    struct zst_reader *z;   /* NULL for a plain file */
    char *chunk;            /* CHUNK_BYTES */
    size_t len, pos;        /* bytes in chunk, scan position */
    struct buf line;        /* a line spanning chunks, capped at max_line + 1 */
    struct jsonl_caps caps;
    uint64_t total;         /* decompressed bytes read so far */
    int eof;
    int64_t ln, nonblank;   /* lines handed out, non-blank ones among them */
    /* the pending prefix read to sniff the format, served before the stream */
    unsigned char head[4];
    size_t head_len, head_pos;
};

enum { RD_LINE = 1, RD_EOF = 0, RD_TOOBIG = 2 };

/* The raw bytes (the file as stored): its fd or its blob reader. */
static ssize_t raw_read(struct jsonl_reader *r, void *data, size_t cap)
{
    if (r->br)
        return blob_read(r->br, data, cap);
    for (;;) {
        ssize_t n = read(r->fd, data, cap);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return ERR_IO;
    }
}

/* The raw bytes with the sniffed prefix served first (zst_source_fn). */
static ssize_t raw_source(void *ctx, void *data, size_t cap)
{
    struct jsonl_reader *r = ctx;
    size_t off = 0;
    while (r->head_pos < r->head_len && off < cap)
        ((char *)data)[off++] = (char)r->head[r->head_pos++];
    return off ? (ssize_t)off : raw_read(r, data, cap);
}

static ssize_t reader_fill(struct jsonl_reader *r)
{
    if (r->z)
        return zst_reader_read(r->z, r->chunk, CHUNK_BYTES);
    return raw_source(r, r->chunk, CHUNK_BYTES);
}

/* Next physical line (without '\n'): RD_LINE with *p and *n (valid until the
 * next call; *too_long set if it exceeded max_line, in which case *n is not
 * meaningful), RD_EOF, RD_TOOBIG (max_total exceeded), or a negative ERR_*. */
static int reader_raw(struct jsonl_reader *r, const char **p, size_t *n, int *too_long)
{
    buf_reset(&r->line);
    int over = 0;
    for (;;) {
        if (r->pos == r->len) {
            if (r->eof)
                break;
            ssize_t got = reader_fill(r);
            if (got < 0)
                return (int)got;
            if (got == 0) {
                r->eof = 1;
                break;
            }
            r->len = (size_t)got;
            r->pos = 0;
            r->total += (uint64_t)got;
            if (r->total > r->caps.max_file_bytes)
                return RD_TOOBIG;
        }
        char *start = r->chunk + r->pos;
        size_t avail = r->len - r->pos;
        char *nl = memchr(start, '\n', avail);
        size_t seg = nl ? (size_t)(nl - start) : avail;
        r->pos += seg + (nl ? 1 : 0);
        if (nl && r->line.len == 0 && !over) { /* whole line inside the chunk: no copy */
            *too_long = seg > r->caps.max_line_bytes;
            *p = start;
            *n = seg;
            return RD_LINE;
        }
        if (!over && buf_append(&r->line, start, seg) != 0)
            over = 1; /* past the cap: keep scanning for the newline, drop bytes */
        if (nl)
            goto line;
    }
    if (r->line.len == 0 && !over)
        return RD_EOF; /* clean end (a final newline, or an empty file) */
line:
    *too_long = over || r->line.len > r->caps.max_line_bytes;
    *p = r->line.data ? r->line.data : "";
    *n = r->line.len;
    return RD_LINE;
}

int jsonl_reader_next(struct jsonl_reader *r, struct jsonl_line *out)
{
    const char *p = NULL;
    size_t n = 0;
    int too_long = 0;
    int rc = reader_raw(r, &p, &n, &too_long);
    struct jsonl_line l = {.line = r->ln + 1, .n_requests = r->nonblank};
    if (rc == ERR_CORRUPT) {
        l.kind = JSONL_CORRUPT;
    } else if (rc < 0) {
        return rc;
    } else if (rc == RD_TOOBIG) {
        l.kind = JSONL_TOO_BIG;
    } else if (rc == RD_EOF) {
        l.kind = JSONL_EOF;
        l.line = r->ln;
    } else {
        r->ln++;
        if (too_long) {
            l.kind = JSONL_TOO_LONG;
            l.n_requests = ++r->nonblank;
        } else {
            if (r->ln == 1 && n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) {
                p += 3; /* UTF-8 byte order mark */
                n -= 3;
            }
            if (n && p[n - 1] == '\r')
                n--;
            size_t i = 0;
            while (i < n && (p[i] == ' ' || p[i] == '\t'))
                i++;
            if (i == n) {
                l.kind = JSONL_BLANK; /* ignored, but it keeps its line number */
            } else {
                l.n_requests = ++r->nonblank;
                l.kind = r->nonblank > r->caps.max_requests ? JSONL_TOO_MANY : JSONL_REQUEST;
                l.p = p;
                l.n = n;
            }
        }
    }
    *out = l;
    return 0;
}

int64_t jsonl_reader_lines(const struct jsonl_reader *r)
{
    return r->ln;
}

/* Sniff the zstd magic; the sniffed bytes are served again (raw_source). */
static int reader_start(struct jsonl_reader *r, const struct jsonl_caps *caps, struct jsonl_reader **out)
{
    r->caps = *caps;
    buf_init(&r->line, caps->max_line_bytes + 1);
    int rc = 0;
    if (!(r->chunk = malloc(CHUNK_BYTES))) {
        rc = ERR_NOMEM;
        goto out;
    }
    while (r->head_len < 4) {
        ssize_t n = raw_read(r, r->head + r->head_len, 4 - r->head_len);
        if (n < 0) {
            rc = (int)n;
            goto out;
        }
        if (n == 0)
            break;
        r->head_len += (size_t)n;
    }
    static const unsigned char magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (r->head_len == 4 && memcmp(r->head, magic, 4) == 0)
        rc = zst_reader_new(raw_source, r, &r->z);
out:
    if (rc) {
        jsonl_reader_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int jsonl_reader_new(int fd, const struct jsonl_caps *caps, struct jsonl_reader **out)
{
    struct jsonl_reader *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return ERR_NOMEM;
    }
    r->fd = fd;
    return reader_start(r, caps, out);
}

int jsonl_reader_new_blob(struct blob_reader *br, const struct jsonl_caps *caps, struct jsonl_reader **out)
{
    struct jsonl_reader *r = calloc(1, sizeof *r);
    if (!r) {
        blob_reader_free(br);
        return ERR_NOMEM;
    }
    r->fd = -1;
    r->br = br;
    return reader_start(r, caps, out);
}

int jsonl_reader_open(const char *path, const struct jsonl_caps *caps, struct jsonl_reader **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? ERR_NOTFOUND : ERR_IO;
    return jsonl_reader_new(fd, caps, out);
}

int jsonl_reader_open_blob(struct blob_store *bs, const char *key, const struct jsonl_caps *caps,
                           struct jsonl_reader **out)
{
    struct blob_reader *br = NULL;
    int rc = blob_reader_open(bs, key, &br);
    return rc ? rc : jsonl_reader_new_blob(br, caps, out);
}

void jsonl_reader_free(struct jsonl_reader *r)
{
    if (!r)
        return;
    zst_reader_free(r->z);
    if (r->fd >= 0)
        close(r->fd);
    blob_reader_free(r->br);
    free(r->chunk);
    buf_release(&r->line);
    free(r);
}
