/* Unit tests: zstd streams - round trips, concatenated frames, truncation,
 * and interoperability with the zstd command-line tool. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "common/err.h"
#include "common/zst.h"
#include "tests/th.h"

static void fill(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        /* compressible but not trivial: words from a small alphabet */
        p[i] = (seed >> 16) % 7 == 0 ? '\n' : (char)('a' + (seed >> 16) % 11);
    }
}

TEST(zst_round_trip_in_memory)
{
    size_t n = 3u << 20;
    char *in = malloc(n);
    fill(in, n, 1);
    struct buf c, d;
    buf_init(&c, 16u << 20);
    buf_init(&d, 16u << 20);
    CHECK_EQ_INT(zst_compress_buf(in, n, 3, &c), 0);
    CHECK(c.len < n * 3 / 4); /* ~3.5 bits of entropy per byte */
    CHECK_EQ_INT(zst_decompress_buf(c.data, c.len, &d), 0);
    CHECK_EQ_INT(d.len, n);
    CHECK(memcmp(d.data, in, n) == 0);
    buf_release(&c);
    buf_release(&d);
    free(in);
}

TEST(zst_concatenated_frames_read_as_one_stream)
{
    struct buf c, d;
    buf_init(&c, 1u << 20);
    buf_init(&d, 1u << 20);
    struct zst_writer *w;
    CHECK_EQ_INT(zst_writer_new(3, zst_buf_sink, &c, &w), 0);
    CHECK_EQ_INT(zst_writer_write(w, "line one\n", 9), 0);
    CHECK_EQ_INT(zst_writer_end_frame(w), 0);
    size_t first_frame = c.len;
    CHECK(first_frame > 0);
    CHECK_EQ_INT(zst_writer_end_frame(w), 0); /* nothing written: no empty frame */
    CHECK_EQ_INT(c.len, first_frame);
    CHECK_EQ_INT(zst_writer_write(w, "line two\n", 9), 0);
    CHECK_EQ_INT(zst_writer_end_frame(w), 0);
    CHECK_EQ_INT(zst_writer_bytes_in(w), 18);
    zst_writer_free(w);
    CHECK_EQ_INT(zst_decompress_buf(c.data, c.len, &d), 0);
    CHECK_EQ_STR(d.data, "line one\nline two\n");
    /* the first frame alone is a valid stream */
    buf_reset(&d);
    CHECK_EQ_INT(zst_decompress_buf(c.data, first_frame, &d), 0);
    CHECK_EQ_STR(d.data, "line one\n");
    buf_release(&c);
    buf_release(&d);
}

TEST(zst_truncated_or_corrupt_input_is_an_error)
{
    char in[5000];
    fill(in, sizeof in, 2);
    struct buf c, d;
    buf_init(&c, 1u << 20);
    buf_init(&d, 1u << 20);
    CHECK_EQ_INT(zst_compress_buf(in, sizeof in, 3, &c), 0);
    for (size_t cut = 1; cut < c.len; cut += 7) {
        buf_reset(&d);
        CHECK_EQ_INT(zst_decompress_buf(c.data, cut, &d), ERR_CORRUPT);
    }
    c.data[c.len / 2] ^= 0x55; /* checksum or block error */
    buf_reset(&d);
    CHECK_EQ_INT(zst_decompress_buf(c.data, c.len, &d), ERR_CORRUPT);
    buf_reset(&d);
    CHECK_EQ_INT(zst_decompress_buf("not zstd at all", 15, &d), ERR_CORRUPT);
    buf_release(&c);
    buf_release(&d);
}

TEST(zst_decompress_respects_output_cap)
{
    size_t n = 1u << 20;
    char *in = calloc(1, n); /* zeros: tiny compressed, large output */
    struct buf c, d;
    buf_init(&c, 1u << 20);
    buf_init(&d, 4096);
    CHECK_EQ_INT(zst_compress_buf(in, n, 3, &c), 0);
    CHECK_EQ_INT(zst_decompress_buf(c.data, c.len, &d), ERR_TOOBIG);
    buf_release(&c);
    buf_release(&d);
    free(in);
}

TEST(zst_flush_makes_data_readable_before_frame_end)
{
    struct buf c, d;
    buf_init(&c, 1u << 20);
    buf_init(&d, 1u << 20);
    struct zst_writer *w;
    CHECK_EQ_INT(zst_writer_new(3, zst_buf_sink, &c, &w), 0);
    CHECK_EQ_INT(zst_writer_write(w, "partial", 7), 0);
    CHECK_EQ_INT(zst_writer_flush(w), 0);
    struct zst_reader *r;
    /* read through a reader: the 7 bytes come out, then the stream is cut mid-frame */
    int fds[2];
    CHECK_EQ_INT(pipe(fds), 0);
    CHECK_EQ_INT(write(fds[1], c.data, c.len), (long long)c.len);
    close(fds[1]);
    CHECK_EQ_INT(zst_reader_new(zst_fd_source, &fds[0], &r), 0);
    char out[64];
    CHECK_EQ_INT(zst_reader_read(r, out, sizeof out), 7);
    CHECK(memcmp(out, "partial", 7) == 0);
    CHECK_EQ_INT(zst_reader_read(r, out, sizeof out), ERR_CORRUPT);
    zst_reader_free(r);
    close(fds[0]);
    zst_writer_free(w);
    buf_release(&c);
    buf_release(&d);
}

static int shell(const char *cmd)
{
    int rc = system(cmd);
    return rc;
}

TEST(zst_interop_with_zstd_cli)
{
    if (shell("command -v zstd >/dev/null 2>&1") != 0)
        SKIP("zstd command-line tool not installed");
    const char *dir = th_tmpdir();
    char path_in[700], path_zst[700], path_out[700], cmd[3000];
    snprintf(path_in, sizeof path_in, "%s/in.jsonl", dir);
    snprintf(path_zst, sizeof path_zst, "%s/ours.zst", dir);
    snprintf(path_out, sizeof path_out, "%s/out.jsonl", dir);
    size_t n = 200000;
    char *in = malloc(n);
    fill(in, n, 3);
    FILE *f = fopen(path_in, "wb");
    fwrite(in, 1, n, f);
    fclose(f);
    /* ours -> CLI, written as three frames */
    int fd = open(path_zst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct zst_writer *w;
    CHECK_EQ_INT(zst_writer_new(5, zst_fd_sink, &fd, &w), 0);
    for (size_t off = 0; off < n; off += 70000) {
        CHECK_EQ_INT(zst_writer_write(w, in + off, off + 70000 <= n ? 70000 : n - off), 0);
        CHECK_EQ_INT(zst_writer_end_frame(w), 0);
    }
    zst_writer_free(w);
    close(fd);
    snprintf(cmd, sizeof cmd, "zstd -q -d -f '%s' -o '%s' && cmp -s '%s' '%s'", path_zst, path_out,
             path_out, path_in);
    CHECK_EQ_INT(shell(cmd), 0);
    /* CLI -> ours */
    snprintf(cmd, sizeof cmd, "zstd -q -19 -f '%s' -o '%s'", path_in, path_zst);
    CHECK_EQ_INT(shell(cmd), 0);
    fd = open(path_zst, O_RDONLY);
    struct zst_reader *r;
    CHECK_EQ_INT(zst_reader_new(zst_fd_source, &fd, &r), 0);
    size_t got = 0;
    char chunk[4096];
    for (;;) {
        ssize_t k = zst_reader_read(r, chunk, sizeof chunk);
        CHECK(k >= 0);
        if (k == 0)
            break;
        CHECK(got + (size_t)k <= n);
        CHECK(memcmp(chunk, in + got, (size_t)k) == 0);
        got += (size_t)k;
    }
    CHECK_EQ_INT(got, n);
    zst_reader_free(r);
    close(fd);
    free(in);
}

/* The stored files' window: a reader of a 3 MiB frame written under
 * ZST_STORED_WINDOW_LOG needs a 128 KiB window, not level 3's 2 MiB (the
 * memory of each slow download, bench_hostile.py). */
TEST(zst_writer_window_caps_the_frame_window_readers_allocate)
{
    size_t n = 3u << 20;
    char *in = malloc(n);
    fill(in, n, 7);
    for (int capped = 0; capped < 2; capped++) {
        struct buf c, d;
        buf_init(&c, 16u << 20);
        buf_init(&d, 16u << 20);
        struct zst_writer *w = NULL;
        CHECK_EQ_INT(zst_writer_new(3, zst_buf_sink, &c, &w), 0);
        if (capped)
            CHECK_EQ_INT(zst_writer_window(w, ZST_STORED_WINDOW_LOG), 0);
        CHECK_EQ_INT(zst_writer_write(w, in, n), 0);
        CHECK_EQ_INT(zst_writer_end_frame(w), 0);
        zst_writer_free(w);
        /* a decoder allowed only that window decodes the capped frame, not the other */
        ZSTD_DCtx *dc = ZSTD_createDCtx();
        CHECK(dc != NULL);
        ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, ZST_STORED_WINDOW_LOG);
        char *out = malloc(n);
        ZSTD_inBuffer ib = {c.data, c.len, 0};
        ZSTD_outBuffer ob = {out, n, 0};
        size_t r = ZSTD_decompressStream(dc, &ob, &ib);
        CHECK_EQ_INT(ZSTD_isError(r) ? 0 : 1, capped);
        ZSTD_freeDCtx(dc);
        free(out);
        CHECK_EQ_INT(zst_decompress_buf(c.data, c.len, &d), 0);
        CHECK(d.len == n && memcmp(d.data, in, n) == 0);
        buf_release(&c);
        buf_release(&d);
    }
    struct buf c;
    buf_init(&c, 1024);
    struct zst_writer *w = NULL;
    CHECK_EQ_INT(zst_writer_new(3, zst_buf_sink, &c, &w), 0);
    CHECK_EQ_INT(zst_writer_window(w, 9), ERR_INVAL);
    CHECK_EQ_INT(zst_writer_window(w, ZST_WINDOW_LOG_MAX + 1), ERR_INVAL);
    zst_writer_free(w);
    buf_release(&c);
    free(in);
}
