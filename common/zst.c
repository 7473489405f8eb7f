/* zst.c - zstd streams over callbacks (see zst.h). */
#include "zst.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "err.h"
#include "log.h"

int zst_fd_sink(void *ctx, const void *data, size_t n)
{
    int fd = *(int *)ctx;
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == ENOSPC || errno == EDQUOT ? ERR_NOSPACE : ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t zst_fd_source(void *ctx, void *data, size_t cap)
{
    int fd = *(int *)ctx;
    for (;;) {
        ssize_t r = read(fd, data, cap);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return ERR_IO;
    }
}

int zst_buf_sink(void *ctx, const void *data, size_t n)
{
    return buf_append((struct buf *)ctx, data, n);
}

struct zst_writer {
    ZSTD_CCtx *cctx;
    zst_sink_fn sink;
    void *ctx;
    int open;                    /* bytes written since the last frame end */
    unsigned long long bytes_in;
    size_t out_cap;
    char *out;                   /* (out_cap) compressed staging */
};

int zst_writer_new(int level, zst_sink_fn sink, void *ctx, struct zst_writer **out)
{
    if (level < 1 || level > ZSTD_maxCLevel())
        return ERR_INVAL;
    struct zst_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ERR_NOMEM;
    w->cctx = ZSTD_createCCtx();
    w->out_cap = ZSTD_CStreamOutSize();
    w->out = malloc(w->out_cap);
    if (!w->cctx || !w->out) {
        zst_writer_free(w);
        return ERR_NOMEM;
    }
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    w->sink = sink;
    w->ctx = ctx;
    *out = w;
    return 0;
}

int zst_writer_window(struct zst_writer *w, int window_log)
{
    if (window_log < 10 || window_log > ZST_WINDOW_LOG_MAX)
        return ERR_INVAL;
    return ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_windowLog, window_log)) ? ERR_INVAL : 0;
}

/* Drive the compressor with the given directive until it has consumed the
 * input and (for flush/end) emptied its buffers. */
static int zst_writer_pump(struct zst_writer *w, const void *data, size_t n, ZSTD_EndDirective mode)
{
    ZSTD_inBuffer in = {data, n, 0};
    for (;;) {
        ZSTD_outBuffer ob = {w->out, w->out_cap, 0};
        size_t left = ZSTD_compressStream2(w->cctx, &ob, &in, mode);
        if (ZSTD_isError(left)) {
            log_error("zstd compress: %s", ZSTD_getErrorName(left));
            return ERR_INTERNAL;
        }
        if (ob.pos) {
            int rc = w->sink(w->ctx, w->out, ob.pos);
            if (rc)
                return rc;
        }
        if (mode == ZSTD_e_continue ? in.pos == in.size : left == 0)
            return 0;
    }
}

int zst_writer_write(struct zst_writer *w, const void *data, size_t n)
{
    if (!n)
        return 0;
    w->open = 1;
    w->bytes_in += n;
    return zst_writer_pump(w, data, n, ZSTD_e_continue);
}

int zst_writer_flush(struct zst_writer *w)
{
    return w->open ? zst_writer_pump(w, NULL, 0, ZSTD_e_flush) : 0;
}

int zst_writer_end_frame(struct zst_writer *w)
{
    if (!w->open)
        return 0;
    w->open = 0;
    return zst_writer_pump(w, NULL, 0, ZSTD_e_end);
}

unsigned long long zst_writer_bytes_in(const struct zst_writer *w)
{
    return w->bytes_in;
}

void zst_writer_free(struct zst_writer *w)
{
    if (!w)
        return;
    ZSTD_freeCCtx(w->cctx);
    free(w->out);
    free(w);
}

struct zst_reader {
    ZSTD_DCtx *dctx;
    zst_source_fn source;
    void *ctx;
    char *in;          /* (in_cap) compressed bytes from the source */
    size_t in_cap, in_len, in_pos;
    int eof;           /* source said 0 */
    size_t frame_left; /* last ZSTD_decompressStream hint: 0 = between frames */
};

int zst_reader_new(zst_source_fn source, void *ctx, struct zst_reader **out)
{
    struct zst_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ERR_NOMEM;
    r->dctx = ZSTD_createDCtx();
    r->in_cap = ZSTD_DStreamInSize();
    r->in = malloc(r->in_cap);
    if (!r->dctx || !r->in) {
        zst_reader_free(r);
        return ERR_NOMEM;
    }
    ZSTD_DCtx_setParameter(r->dctx, ZSTD_d_windowLogMax, ZST_WINDOW_LOG_MAX);
    r->source = source;
    r->ctx = ctx;
    *out = r;
    return 0;
}

ssize_t zst_reader_read(struct zst_reader *r, void *data, size_t cap)
{
    if (cap == 0)
        return 0;
    for (;;) {
        if (r->in_pos == r->in_len && !r->eof) {
            ssize_t got = r->source(r->ctx, r->in, r->in_cap);
            if (got < 0)
                return got;
            if (got == 0)
                r->eof = 1;
            r->in_len = (size_t)got;
            r->in_pos = 0;
        }
        if (r->in_pos == r->in_len && r->eof)
            return r->frame_left ? ERR_CORRUPT : 0;
        ZSTD_inBuffer in = {r->in, r->in_len, r->in_pos};
        ZSTD_outBuffer ob = {data, cap, 0};
        size_t hint = ZSTD_decompressStream(r->dctx, &ob, &in);
        if (ZSTD_isError(hint)) {
            log_debug("zstd decompress: %s", ZSTD_getErrorName(hint));
            return ERR_CORRUPT;
        }
        r->in_pos = in.pos;
        r->frame_left = hint;
        if (ob.pos)
            return (ssize_t)ob.pos;
    }
}

void zst_reader_free(struct zst_reader *r)
{
    if (!r)
        return;
    ZSTD_freeDCtx(r->dctx);
    free(r->in);
    free(r);
}

int zst_compress_buf(const void *data, size_t n, int level, struct buf *out)
{
    struct zst_writer *w;
    int rc = zst_writer_new(level, zst_buf_sink, out, &w);
    if (rc)
        return rc;
    rc = zst_writer_write(w, data, n);
    if (!rc)
        rc = zst_writer_end_frame(w);
    zst_writer_free(w);
    return rc;
}

struct zst_mem_src {
    const char *p;
    size_t left;
};

static ssize_t zst_mem_source(void *ctx, void *data, size_t cap)
{
    struct zst_mem_src *m = ctx;
    size_t n = m->left < cap ? m->left : cap;
    if (n)
        memcpy(data, m->p, n);
    m->p += n;
    m->left -= n;
    return (ssize_t)n;
}

int zst_decompress_buf(const void *data, size_t n, struct buf *out)
{
    struct zst_mem_src m = {data, n};
    struct zst_reader *r;
    int rc = zst_reader_new(zst_mem_source, &m, &r);
    if (rc)
        return rc;
    char tmp[16384];
    for (;;) {
        ssize_t got = zst_reader_read(r, tmp, sizeof tmp);
        if (got <= 0) {
            rc = (int)got;
            break;
        }
        rc = buf_append(out, tmp, (size_t)got);
        if (rc)
            break;
    }
    zst_reader_free(r);
    return rc;
}
