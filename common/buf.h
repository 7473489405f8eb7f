/*
 * buf.h - growable byte buffers with a hard cap.
 *
 * A struct buf owns a heap array that grows geometrically as bytes are
 * appended, but never beyond max_bytes: an append that would exceed the cap
 * fails with ERR_TOOBIG and leaves the buffer unchanged, so code that buffers
 * outside input (HTTP bodies, JSONL lines, responses) states its limit once,
 * at init. The contents are always NUL-terminated (the terminator is not
 * counted in len and does not count against the cap), so text can be used as
 * a C string directly.
 *
 * Not thread-safe; one owner at a time.
 */
#ifndef COMMON_BUF_H
#define COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;        /* NUL-terminated; NULL until the first append */
    size_t len;        /* bytes in use, excluding the terminator */
    size_t alloc;      /* bytes allocated for data */
    size_t max_bytes;  /* hard cap on len */
};

/* Grow a heap array *p of *cap elements of elem bytes so that it holds at
 * least need elements (doubling, starting at 16). Returns 0 (unchanged if
 * already big enough) or ERR_NOMEM (also when need * elem overflows); on
 * error *p and *cap are unchanged. For typed arrays beside a struct buf. */
int buf_grow_array(void **p, size_t *cap, size_t need, size_t elem);

/* Set up an empty buffer whose length may never exceed max_bytes. Can't fail. */
void buf_init(struct buf *b, size_t max_bytes);

/* Free the contents; the buffer is empty (and reusable) afterwards. NULL ok. */
void buf_release(struct buf *b);

/* Make the buffer empty, keeping its allocation. */
void buf_reset(struct buf *b);

/* Append n bytes. Returns 0, ERR_TOOBIG (cap would be exceeded) or ERR_NOMEM;
 * on error the buffer is unchanged. */
int buf_append(struct buf *b, const void *data, size_t n);

/* Append a C string (without its terminator). Same errors as buf_append. */
int buf_append_str(struct buf *b, const char *s);

/* Append one byte. Same errors as buf_append. */
int buf_append_byte(struct buf *b, char c);

/* Append printf-formatted text. Same errors as buf_append, plus ERR_INVAL for
 * a bad format. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);

/* Make room for at least n more bytes without changing len. Same errors. */
int buf_reserve(struct buf *b, size_t n);

/* Take ownership of the contents (a NUL-terminated heap string, never NULL on
 * success; *len_out gets the length if len_out is not NULL). The buffer is
 * left empty. Returns NULL only when out of memory. */
char *buf_detach(struct buf *b, size_t *len_out);

/* Drop the first n bytes (n > len drops everything). */
void buf_consume(struct buf *b, size_t n);

#endif
