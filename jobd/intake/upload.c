/*
 * upload.c - incoming files streamed to disk (see upload.h).
 */
#include "jobd/intake/upload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/zst.h"
#include "jobd/blob/blob.h"

#define DEC_CHUNK (128u * 1024)

struct upload {
    enum upload_encoding enc;
    int fd;
    char tmp_path[1024];
    int committed;
    uint64_t max_bytes, bytes;
    struct sha256_ctx *sha;
    struct zst_writer *zw;
    ZSTD_DCtx *zd;
    size_t zd_last;     /* last ZSTD_decompressStream hint: 0 = at a frame boundary */
    z_stream gz;
    int gz_init, gz_in_member;
    char *dec;          /* DEC_CHUNK bytes of decoded output */
    char hex[2 * SHA256_LEN + 1];
    int finished;
};

int upload_encoding_parse(const char *v, enum upload_encoding *out)
{
    if (!v || !*v || strcasecmp(v, "identity") == 0)
        *out = UPLOAD_IDENTITY;
    else if (strcasecmp(v, "zstd") == 0)
        *out = UPLOAD_ZSTD;
    else if (strcasecmp(v, "gzip") == 0 || strcasecmp(v, "x-gzip") == 0)
        *out = UPLOAD_GZIP;
    else
        return ERR_UNSUPPORTED;
    return 0;
}

int upload_new(const char *tmp_dir, enum upload_encoding enc, uint64_t max_bytes, int level,
               struct upload **out)
{
    struct upload *u = calloc(1, sizeof *u);
    if (!u)
        return ERR_NOMEM;
    u->fd = -1;
    u->enc = enc;
    u->max_bytes = max_bytes;
    int rc = ERR_NOMEM;
    if ((size_t)snprintf(u->tmp_path, sizeof u->tmp_path, "%s/up-XXXXXX", tmp_dir) >= sizeof u->tmp_path) {
        rc = ERR_TOOBIG;
        goto fail;
    }
    u->fd = mkostemp(u->tmp_path, O_CLOEXEC);
    if (u->fd < 0) {
        log_error("upload: cannot create a temporary file in %s: %s", tmp_dir, strerror(errno));
        u->tmp_path[0] = '\0';
        rc = ERR_IO;
        goto fail;
    }
    if (!(u->sha = sha256_new()) || !(u->dec = malloc(DEC_CHUNK)))
        goto fail;
    if ((rc = zst_writer_new(level, zst_fd_sink, &u->fd, &u->zw)) ||
        (rc = zst_writer_window(u->zw, ZST_STORED_WINDOW_LOG)))
        goto fail;
    rc = ERR_NOMEM;
    if (enc == UPLOAD_ZSTD) {
        if (!(u->zd = ZSTD_createDCtx()))
            goto fail;
        ZSTD_DCtx_setParameter(u->zd, ZSTD_d_windowLogMax, ZST_WINDOW_LOG_MAX);
    } else if (enc == UPLOAD_GZIP) {
        if (inflateInit2(&u->gz, 16 + MAX_WBITS) != Z_OK)
            goto fail;
        u->gz_init = 1;
    }
    *out = u;
    return 0;
fail:
    upload_free(u);
    return rc;
}

/* decoded bytes: count, hash, compress */
static int sink(struct upload *u, const void *d, size_t n)
{
    if (n == 0)
        return 0;
    if (n > u->max_bytes - u->bytes)
        return ERR_TOOBIG;
    u->bytes += n;
    int rc = sha256_update(u->sha, d, n);
    return rc ? rc : zst_writer_write(u->zw, d, n);
}

int upload_write(struct upload *u, const void *data, size_t n)
{
    int rc;
    if (u->finished)
        return ERR_INVAL;
    if (u->enc == UPLOAD_IDENTITY)
        return sink(u, data, n);
    if (u->enc == UPLOAD_ZSTD) {
        ZSTD_inBuffer in = {data, n, 0};
        for (;;) {
            ZSTD_outBuffer o = {u->dec, DEC_CHUNK, 0};
            size_t before = in.pos;
            size_t r = ZSTD_decompressStream(u->zd, &o, &in);
            if (ZSTD_isError(r))
                return ERR_CORRUPT;
            if (in.pos > before || o.pos > 0)
                u->zd_last = r; /* a call without progress says nothing new */
            if ((rc = sink(u, u->dec, o.pos)))
                return rc;
            if (in.pos == in.size && o.pos < o.size)
                return 0;
        }
    }
    /* gzip, possibly several members */
    u->gz.next_in = (Bytef *)(uintptr_t)data;
    u->gz.avail_in = (uInt)n;
    while (u->gz.avail_in > 0) {
        u->gz_in_member = 1;
        u->gz.next_out = (Bytef *)u->dec;
        u->gz.avail_out = DEC_CHUNK;
        int r = inflate(&u->gz, Z_NO_FLUSH);
        if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR)
            return ERR_CORRUPT;
        if ((rc = sink(u, u->dec, DEC_CHUNK - u->gz.avail_out)))
            return rc;
        if (r == Z_STREAM_END) {
            u->gz_in_member = 0;
            if (inflateReset(&u->gz) != Z_OK)
                return ERR_CORRUPT;
        } else if (r == Z_BUF_ERROR && u->gz.avail_out != 0) {
            return ERR_CORRUPT; /* no progress possible */
        }
    }
    /* drain output still buffered inside zlib */
    while (u->gz_in_member) {
        u->gz.next_out = (Bytef *)u->dec;
        u->gz.avail_out = DEC_CHUNK;
        int r = inflate(&u->gz, Z_NO_FLUSH);
        size_t got = DEC_CHUNK - u->gz.avail_out;
        if ((rc = sink(u, u->dec, got)))
            return rc;
        if (r == Z_STREAM_END) {
            u->gz_in_member = 0;
            if (inflateReset(&u->gz) != Z_OK)
                return ERR_CORRUPT;
        }
        if (got < DEC_CHUNK)
            break;
    }
    return 0;
}

int upload_finish(struct upload *u)
{
    if (u->finished)
        return 0;
    if (u->enc == UPLOAD_ZSTD && u->zd_last != 0)
        return ERR_CORRUPT; /* truncated frame */
    if (u->enc == UPLOAD_GZIP && u->gz_in_member)
        return ERR_CORRUPT;
    int rc = zst_writer_end_frame(u->zw);
    if (rc)
        return rc;
    uint8_t d[SHA256_LEN];
    rc = sha256_final(u->sha, d);
    u->sha = NULL;
    if (rc)
        return rc;
    hex_encode(d, SHA256_LEN, u->hex);
    u->finished = 1;
    return 0;
}

uint64_t upload_bytes(const struct upload *u)
{
    return u->bytes;
}

const char *upload_sha256_hex(const struct upload *u)
{
    return u->hex;
}

int upload_commit(struct upload *u, struct blob_store *bs, const char *key)
{
    if (!u->finished || u->fd < 0)
        return ERR_INVAL;
    if (close(u->fd) != 0) {
        log_error("upload: cannot close %s: %s", u->tmp_path, strerror(errno));
        u->fd = -1;
        return ERR_IO;
    }
    u->fd = -1;
    int rc = blob_put_file(bs, key, u->tmp_path);
    if (!rc)
        u->committed = 1;
    return rc;
}

void upload_free(struct upload *u)
{
    if (!u)
        return;
    if (u->fd >= 0)
        close(u->fd);
    if (!u->committed && u->tmp_path[0])
        unlink(u->tmp_path);
    sha256_free(u->sha);
    zst_writer_free(u->zw);
    ZSTD_freeDCtx(u->zd);
    if (u->gz_init)
        inflateEnd(&u->gz);
    free(u->dec);
    free(u);
}
