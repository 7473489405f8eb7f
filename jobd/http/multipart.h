/*
 * multipart.h - a streaming multipart/form-data parser (RFC 7578 / 2046).
 *
 * Design. Bytes are fed in pieces of any size (as they arrive from the
 * socket) and the parser calls back with each part's name and filename
 * (from Content-Disposition), then its data in runs, then its end - it never
 * buffers a part's data, so a 200 MB file part costs no memory. Only a
 * part's header block is held (capped at MP_MAX_HEADER_BYTES).
 *
 * The delimiter is CRLF "--" boundary. The stream is matched as if it began
 * with CRLF, so the first boundary line may start at byte 0; anything before
 * it (the preamble) and after the closing "--boundary--" (the epilogue) is
 * ignored. Matching keeps only a count of delimiter bytes matched so far:
 * because a boundary may not contain CR (RFC 2046 bchars), no proper suffix
 * of a matched prefix can start a new match except at a CR, so a mismatch
 * only needs to emit the held prefix as data and re-test the current byte.
 *
 * Limits on outside bytes: boundary 1..70 bchars, header block per part
 * <= MP_MAX_HEADER_BYTES, parts <= MP_MAX_PARTS, name and filename <= 255
 * bytes (after unquoting). Violations are ERR_PARSE / ERR_TOOBIG, never a
 * crash. Pure code, no I/O; one owner at a time (any thread).
 */
#ifndef JOBD_MULTIPART_H
#define JOBD_MULTIPART_H

#include <stddef.h>

#define MP_MAX_BOUNDARY 70
#define MP_MAX_HEADER_BYTES 8192
#define MP_MAX_PARTS 64
#define MP_MAX_NAME 255

struct mp_callbacks {
    /* A part starts: name and filename from Content-Disposition (filename
     * NULL when absent; both NUL-terminated, valid during the call). */
    int (*on_part_begin)(void *ctx, const char *name, const char *filename);
    /* n > 0 bytes of the current part's data. */
    int (*on_part_data)(void *ctx, const char *data, size_t n);
    /* The current part ended (its closing delimiter was seen). */
    int (*on_part_end)(void *ctx);
    /* Each callback returns 0 to go on, or a negative ERR_* that mp_feed
     * returns at once (the parser then refuses further input). */
};

enum mp_state { MP_PREAMBLE = 0, MP_AFTER_DELIM, MP_AFTER_DELIM_DASH, MP_AFTER_DELIM_CR,
                MP_HEADERS, MP_BODY, MP_EPILOGUE, MP_ERROR };

struct mp_parser {
    char delim[4 + MP_MAX_BOUNDARY + 1]; /* "\r\n--" boundary */
    size_t delim_len;
    size_t match;                        /* delimiter bytes matched so far */
    enum mp_state state;
    char hdr[MP_MAX_HEADER_BYTES + 1];   /* current part's header block */
    size_t hdr_len;
    int n_parts;
    int err;
    const struct mp_callbacks *cb;
    void *ctx;
};

/* Extract the boundary parameter of a Content-Type value
 * ("multipart/form-data; boundary=xyz", quoted or not) into out (at least
 * MP_MAX_BOUNDARY + 1 bytes). Returns 0; ERR_UNSUPPORTED if the type is not
 * multipart/form-data; ERR_PARSE if the boundary is missing or invalid. */
int mp_boundary_from_content_type(const char *content_type, char *out, size_t out_len);

/* Set up a parser for boundary (1..70 bchars, else ERR_INVAL). Can't fail otherwise. */
int mp_init(struct mp_parser *p, const char *boundary, const struct mp_callbacks *cb, void *ctx);

/* Feed n bytes. Returns 0; ERR_PARSE (malformed: bad part headers, missing
 * Content-Disposition name), ERR_TOOBIG (a limit above), or a callback's
 * error. After an error every call returns that error. */
int mp_feed(struct mp_parser *p, const char *data, size_t n);

/* End of input: 0 if the closing delimiter was seen, else ERR_PARSE
 * (truncated body), or the earlier error. */
int mp_finish(const struct mp_parser *p);

#endif
