/*
 * jsonl.h - the one reader of a submission's JSONL lines: every pass over
 * an input file (ingest, the admission estimate) reads it through this, so
 * they agree on what a line is.
 *
 * Design. The file (plain, or zstd-compressed: detected by the magic bytes
 * 28 b5 2f fd) is read in 256 KiB chunks and split at '\n'; a line inside
 * one chunk is handed out without a copy, one spanning chunks is assembled
 * in a buffer capped at max_line_bytes + 1, so no more than one line is ever
 * held in memory. The rules of spec/jsonl.md, in one place:
 *   - lines are numbered from 1 (physical lines: blank ones keep their number);
 *   - a UTF-8 byte order mark (ef bb bf) at the start of line 1 is dropped;
 *   - one '\r' before the '\n' is dropped (CRLF files);
 *   - a line of only spaces and tabs is blank: ignored;
 *   - a line longer than max_line_bytes is "too long" (it counts as a request);
 *   - a non-blank line past max_requests ends the file ("too many");
 *   - more than max_file_bytes of (decompressed) input ends the file ("too big");
 *   - a corrupt or truncated zstd stream ends the file ("corrupt").
 * What to do with each kind is the caller's: ingest turns the last four into
 * the file's errors, the estimate stops quietly.
 *
 * Threads: a reader is used by one thread at a time; it does blocking reads
 * (never on the event loop).
 */
#ifndef JOBD_JSONL_H
#define JOBD_JSONL_H

#include <stddef.h>
#include <stdint.h>

struct jsonl_caps {
    size_t max_line_bytes;   /* one line without its newline */
    uint64_t max_file_bytes; /* decompressed bytes */
    int64_t max_requests;    /* non-blank lines */
};

enum jsonl_kind {
    JSONL_EOF = 0,  /* clean end; line = the number of lines read */
    JSONL_REQUEST,  /* a non-blank line: p, n (BOM and CR removed) */
    JSONL_BLANK,    /* only spaces and tabs */
    JSONL_TOO_LONG, /* over max_line_bytes (p, n not meaningful) */
    JSONL_TOO_MANY, /* the non-blank line that passed max_requests; the file ends here */
    JSONL_TOO_BIG,  /* input passed max_file_bytes while reading line `line`; ends here */
    JSONL_CORRUPT,  /* bad zstd data while reading line `line`; ends here */
};

struct jsonl_line {
    enum jsonl_kind kind;
    const char *p;       /* valid until the next call */
    size_t n;
    int64_t line;        /* 1-based physical line number */
    int64_t n_requests;  /* non-blank lines so far, this one included */
};

struct jsonl_reader;

/* A reader over fd, which it owns from now on (closed by jsonl_reader_free,
 * or here on failure). Sniffs the format (reading 4 bytes, served again:
 * no seek). 0, ERR_IO, ERR_NOMEM. */
int jsonl_reader_new(int fd, const struct jsonl_caps *caps, struct jsonl_reader **out);

/* Open path and jsonl_reader_new it. 0, ERR_NOTFOUND (no file), ERR_IO, ERR_NOMEM. */
int jsonl_reader_open(const char *path, const struct jsonl_caps *caps, struct jsonl_reader **out);

/* The same over a stored file's bytes (jobd/blob/blob.h): br is the
 * reader's from now on (freed with it, or here on failure); _open_blob
 * opens key in bs first. 0, blob_reader_open's errors, the first read's
 * (ERR_CONN: the file store is out), ERR_NOMEM. */
struct blob_reader;
struct blob_store;
int jsonl_reader_new_blob(struct blob_reader *br, const struct jsonl_caps *caps, struct jsonl_reader **out);
int jsonl_reader_open_blob(struct blob_store *bs, const char *key, const struct jsonl_caps *caps,
                           struct jsonl_reader **out);

/* The next line into *out. After an ending kind (EOF, TOO_MANY, TOO_BIG,
 * CORRUPT) do not call again. 0, or ERR_IO / ERR_NOMEM (*out unset). */
int jsonl_reader_next(struct jsonl_reader *r, struct jsonl_line *out);

/* Physical lines read so far. */
int64_t jsonl_reader_lines(const struct jsonl_reader *r);

/* Close the file and free. NULL ok. */
void jsonl_reader_free(struct jsonl_reader *r);

#endif
