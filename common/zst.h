/*
 * zst.h - zstd streams: a writer and a reader over callbacks.
 *
 * The writer compresses whatever is written to it and hands compressed bytes
 * to a sink callback. zst_writer_end_frame closes the current frame; writing
 * again opens a new one, so an output file can grow by appended frames (a
 * crash leaves the earlier, complete frames readable) - zstd defines a
 * concatenation of frames as one stream, and the reader (and the zstd CLI)
 * decodes it as the concatenated content.
 *
 * The reader pulls compressed bytes from a source callback and returns
 * decompressed bytes; input that ends in the middle of a frame is
 * ERR_CORRUPT, not a silent short read. Decoder memory is bounded by a
 * maximum window (ZST_WINDOW_LOG_MAX), so a hostile frame cannot make us
 * allocate gigabytes.
 *
 * One owner at a time; not thread-safe.
 */
#ifndef COMMON_ZST_H
#define COMMON_ZST_H

#include <stddef.h>
#include <sys/types.h>

#include "buf.h"

#define ZST_WINDOW_LOG_MAX 27 /* 128 MiB: the largest window we decode */
/* The window of the files jobd stores (uploads, output and error files):
 * 128 KiB, so each reader of one (a download decompressed for the client,
 * ingestion) holds about 128 KiB of window plus the decoder's ~100 KiB,
 * whatever the file's size (level 3's default window would be 2 MiB at
 * every frame of 2 MiB or more: 1,000 slow downloads held 3.5 GiB). */
#define ZST_STORED_WINDOW_LOG 17

/* Sink: consume n compressed bytes. Return 0 or a negative ERR_*. */
typedef int (*zst_sink_fn)(void *ctx, const void *data, size_t n);
/* Source: fill up to cap bytes. Return bytes read, 0 at end, or a negative ERR_*. */
typedef ssize_t (*zst_source_fn)(void *ctx, void *data, size_t cap);

/* Ready-made callbacks for a file descriptor; ctx points to the int fd.
 * A failed write is ERR_NOSPACE for ENOSPC / EDQUOT (a full disk), else
 * ERR_IO; errno keeps the cause. */
int zst_fd_sink(void *ctx, const void *data, size_t n);
ssize_t zst_fd_source(void *ctx, void *data, size_t cap);
/* Sink appending to a struct buf (ctx); ERR_TOOBIG past the buf's cap. */
int zst_buf_sink(void *ctx, const void *data, size_t n);

struct zst_writer;

/* New writer at compression level (1..19; 3 is zstd's default). Returns 0 or
 * ERR_NOMEM/ERR_INVAL; *out written only on success. */
int zst_writer_new(int level, zst_sink_fn sink, void *ctx, struct zst_writer **out);
/* Cap the window of the frames written from now on at 2^window_log bytes
 * (10..ZST_WINDOW_LOG_MAX): their readers need that much memory. 0 or
 * ERR_INVAL. */
int zst_writer_window(struct zst_writer *w, int window_log);
/* Compress n bytes. 0, or the sink's error / ERR_INTERNAL. */
int zst_writer_write(struct zst_writer *w, const void *data, size_t n);
/* Emit everything written so far as complete blocks (frame stays open). */
int zst_writer_flush(struct zst_writer *w);
/* Finish the current frame (no-op when nothing was written since the last end). */
int zst_writer_end_frame(struct zst_writer *w);
/* Uncompressed bytes written in total. */
unsigned long long zst_writer_bytes_in(const struct zst_writer *w);
/* Free; does not end the frame. NULL ok. */
void zst_writer_free(struct zst_writer *w);

struct zst_reader;

int zst_reader_new(zst_source_fn source, void *ctx, struct zst_reader **out);
/* Read up to cap decompressed bytes: returns the count (>0), 0 at the clean end
 * of the stream, ERR_CORRUPT (bad or truncated data) or the source's error. */
ssize_t zst_reader_read(struct zst_reader *r, void *data, size_t cap);
void zst_reader_free(struct zst_reader *r);

/* One-shot helpers. zst_decompress_buf fails with ERR_TOOBIG when the output
 * would exceed out's cap, and ERR_CORRUPT for bad input. */
int zst_compress_buf(const void *data, size_t n, int level, struct buf *out);
int zst_decompress_buf(const void *data, size_t n, struct buf *out);

#endif
