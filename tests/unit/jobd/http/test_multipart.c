/* Unit tests: the streaming multipart parser (every split point of a
 * realistic body gives the same events; malformed bodies fail; limits) and
 * the upload pipeline (identity / zstd / gzip decoding, size limit,
 * truncated streams, sha256 and the stored zstd file). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/zst.h"
#include "jobd/blob/blob.h"
#include "jobd/http/multipart.h"
#include "jobd/intake/upload.h"
#include "tests/th.h"

static int ev_begin(void *ctx, const char *name, const char *filename)
{
    return buf_printf(ctx, "<%s|%s>", name, filename ? filename : "-");
}
static int ev_data(void *ctx, const char *d, size_t n)
{
    return buf_append(ctx, d, n);
}
static int ev_end(void *ctx)
{
    return buf_append_str(ctx, "</>");
}
static const struct mp_callbacks evcb = {ev_begin, ev_data, ev_end};

static const char body[] = "preamble\r\n"
                           "--XyZ\r\n"
                           "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                           "batch\r\n"
                           "--XyZ\r\n"
                           "Content-Type: application/octet-stream\r\n"
                           "content-disposition: form-data; name=\"file\"; filename=\"a \\\"q\\\".jsonl\"\r\n\r\n"
                           "line1\r\n\r\n-XyZ a--XyZ\r\n--Xy\r\r\n--\r\n"
                           "--XyZ--\r\nepilogue";
static const char expect[] = "<purpose|->batch</><file|a \"q\".jsonl>line1\r\n\r\n-XyZ a--XyZ\r\n--Xy\r\r\n--</>";

TEST(multipart_every_split_point)
{
    size_t n = sizeof body - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        struct mp_parser p;
        struct buf ev;
        buf_init(&ev, 1 << 16);
        CHECK_EQ_INT(mp_init(&p, "XyZ", &evcb, &ev), 0);
        CHECK_EQ_INT(mp_feed(&p, body, cut), 0);
        CHECK_EQ_INT(mp_feed(&p, body + cut, n - cut), 0);
        CHECK_EQ_INT(mp_finish(&p), 0);
        CHECK_EQ_STR(ev.data, expect);
        buf_release(&ev);
    }
    /* byte by byte */
    struct mp_parser p;
    struct buf ev;
    buf_init(&ev, 1 << 16);
    mp_init(&p, "XyZ", &evcb, &ev);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(mp_feed(&p, body + i, 1), 0);
    CHECK_EQ_INT(mp_finish(&p), 0);
    CHECK_EQ_STR(ev.data, expect);
    buf_release(&ev);
}

static int parse_all(const char *boundary, const char *s)
{
    struct mp_parser p;
    struct buf ev;
    buf_init(&ev, 1 << 20);
    int rc = mp_init(&p, boundary, &evcb, &ev);
    if (!rc)
        rc = mp_feed(&p, s, strlen(s));
    if (!rc)
        rc = mp_finish(&p);
    buf_release(&ev);
    return rc;
}

TEST(multipart_malformed_and_limits)
{
    CHECK_EQ_INT(parse_all("b", "--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("b", "--b\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--b--"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("b", "--b\r\nX: y\r\n\r\nx\r\n--b--"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("b", "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nunterminated"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("b", "--bX\r\n"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("b", "--b\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--b--"), ERR_PARSE);
    CHECK_EQ_INT(parse_all("bad\r", "x"), ERR_INVAL);
    CHECK_EQ_INT(parse_all("", "x"), ERR_INVAL);
    struct buf big;
    buf_init(&big, 1 << 20);
    buf_append_str(&big, "--b\r\nContent-Disposition: form-data; name=a\r\nX: ");
    for (int i = 0; i < MP_MAX_HEADER_BYTES; i++)
        buf_append_byte(&big, 'h');
    buf_append_str(&big, "\r\n\r\nx\r\n--b--");
    CHECK_EQ_INT(parse_all("b", big.data), ERR_TOOBIG);
    buf_reset(&big);
    for (int i = 0; i <= MP_MAX_PARTS; i++)
        buf_append_str(&big, "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n");
    buf_append_str(&big, "--b--");
    CHECK_EQ_INT(parse_all("b", big.data), ERR_TOOBIG);
    buf_release(&big);
    char out[MP_MAX_BOUNDARY + 1];
    CHECK_EQ_INT(mp_boundary_from_content_type("multipart/form-data; boundary=abc", out, sizeof out), 0);
    CHECK_EQ_STR(out, "abc");
    CHECK_EQ_INT(mp_boundary_from_content_type("Multipart/Form-Data;charset=x; boundary=\"a b\"", out, sizeof out), 0);
    CHECK_EQ_STR(out, "a b");
    CHECK_EQ_INT(mp_boundary_from_content_type("application/json", out, sizeof out), ERR_UNSUPPORTED);
    CHECK_EQ_INT(mp_boundary_from_content_type("multipart/form-data", out, sizeof out), ERR_PARSE);
    CHECK_EQ_INT(mp_boundary_from_content_type("multipart/form-data; boundary=a\rb", out, sizeof out), ERR_PARSE);
}

/* read back a stored upload: it is one zstd stream of the decoded bytes */
static void read_back(const char *path, struct buf *out)
{
    int fd = open(path, O_RDONLY);
    struct zst_reader *r;
    zst_reader_new(zst_fd_source, &fd, &r);
    char tmp[65536];
    ssize_t n;
    while ((n = zst_reader_read(r, tmp, sizeof tmp)) > 0)
        buf_append(out, tmp, (size_t)n);
    zst_reader_free(r);
    close(fd);
}

static void gzip_buf(const char *in, size_t n, struct buf *out)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    buf_reserve(out, deflateBound(&z, n) + 64);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out->data;
    z.avail_out = (uInt)out->alloc;
    deflate(&z, Z_FINISH);
    out->len = z.total_out;
    deflateEnd(&z);
}

TEST(upload_encodings_limits_and_commit)
{
    char dir[] = "/tmp/th_upload_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    size_t n = 1u << 20;
    char *plain = malloc(n);
    for (size_t i = 0; i < n; i++)
        plain[i] = (char)("abc\n{}\"x"[(i * 7 + i / 13) % 8]);
    uint8_t d[SHA256_LEN];
    char hex[65];
    sha256(plain, n, d);
    hex_encode(d, SHA256_LEN, hex);
    struct buf z, g;
    buf_init(&z, 8u << 20);
    buf_init(&g, 8u << 20);
    CHECK_EQ_INT(zst_compress_buf(plain, n, 3, &z), 0);
    gzip_buf(plain, n, &g);
    CHECK(g.len > 0);
    const struct buf *enc_in[3] = {NULL, &z, &g};
    for (int e = 0; e < 3; e++) {
        struct upload *u;
        CHECK_EQ_INT(upload_new(dir, (enum upload_encoding)e, n, 3, &u), 0);
        const char *src = e ? enc_in[e]->data : plain;
        size_t len = e ? enc_in[e]->len : n;
        for (size_t i = 0; i < len; i += 777)
            CHECK_EQ_INT(upload_write(u, src + i, len - i < 777 ? len - i : 777), 0);
        CHECK_EQ_INT(upload_finish(u), 0);
        CHECK_EQ_INT((int)(upload_bytes(u) == n), 1);
        CHECK_EQ_STR(upload_sha256_hex(u), hex);
        char final[200], key[32];
        snprintf(key, sizeof key, "final-%d.zst", e);
        snprintf(final, sizeof final, "%s/%s", dir, key);
        struct blob_store *bs = NULL;
        CHECK_EQ_INT(blob_store_open(&(struct blob_config){.data_dir = dir}, &bs), 0);
        CHECK_EQ_INT(upload_commit(u, bs, key), 0);
        blob_store_free(bs);
        upload_free(u);
        struct buf back;
        buf_init(&back, 8u << 20);
        read_back(final, &back);
        CHECK_EQ_INT((int)(back.len == n && memcmp(back.data, plain, n) == 0), 1);
        buf_release(&back);
        unlink(final);
        /* one byte over the decoded limit */
        CHECK_EQ_INT(upload_new(dir, (enum upload_encoding)e, n - 1, 3, &u), 0);
        CHECK_EQ_INT(upload_write(u, src, len), ERR_TOOBIG);
        upload_free(u);
        if (e) { /* truncated and corrupt streams */
            CHECK_EQ_INT(upload_new(dir, (enum upload_encoding)e, n, 3, &u), 0);
            CHECK_EQ_INT(upload_write(u, src, len / 2), 0);
            CHECK_EQ_INT(upload_finish(u), ERR_CORRUPT);
            upload_free(u);
            CHECK_EQ_INT(upload_new(dir, (enum upload_encoding)e, n, 3, &u), 0);
            CHECK_EQ_INT(upload_write(u, "\x01\x02\x03\x04garbage", 11), ERR_CORRUPT);
            upload_free(u);
        }
    }
    enum upload_encoding enc;
    CHECK_EQ_INT(upload_encoding_parse("br", &enc), ERR_UNSUPPORTED);
    CHECK_EQ_INT(upload_encoding_parse("ZSTD", &enc), 0);
    CHECK_EQ_INT(enc, UPLOAD_ZSTD);
    CHECK_EQ_INT(rmdir(dir), 0); /* every temporary file was removed */
    buf_release(&z);
    buf_release(&g);
    free(plain);
}
