/*
 * s3xml.h - the few XML answers of the S3 API that jobd reads: an error
 * (<Error><Code>, <Message>), InitiateMultipartUpload's <UploadId> and a
 * ListObjectsV2 page (<Contents> Key / Size / LastModified, IsTruncated,
 * NextContinuationToken).
 *
 * Design. One pass over the bytes (s3xml_walk), no DOM, no allocation: a
 * stack of element names (depth <= S3XML_DEPTH_MAX) joined by '/' into a
 * path of at most S3XML_PATH_MAX bytes ("ListBucketResult/Contents/Key";
 * a namespace prefix "s3:Key" is dropped to "Key"), and the text of the
 * element being closed, decoded (&amp; &lt; &gt; &quot; &apos;, &#N; and
 * &#xN; up to U+10FFFF, CDATA sections), capped at S3XML_TEXT_MAX bytes.
 * The callback runs at each end tag. The XML declaration, processing
 * instructions and comments are skipped; a DOCTYPE is refused (no entity
 * definitions, so no entity expansion); attributes are skipped (quoted
 * values may hold '>'). Anything else - a mismatched or unterminated tag,
 * text past a cap, an unknown entity, a second root - is ERR_PARSE or
 * ERR_TOOBIG, never a crash: these bytes come from the network (the store
 * may be a proxy, or not S3 at all). Fuzzed: tests/fuzz/fuzz_s3xml.c.
 *
 * Threads: pure functions, any thread.
 */
#ifndef JOBD_S3XML_H
#define JOBD_S3XML_H

#include <stddef.h>
#include <stdint.h>

#define S3XML_DEPTH_MAX 8
#define S3XML_PATH_MAX 256   /* the '/'-joined element path, NUL included */
#define S3XML_TEXT_MAX 2048  /* one element's decoded text, NUL included (S3 keys: 1024) */

/* Called at every end tag: path of the element closed, its decoded text
 * (NUL-terminated; "" for an element with children) and its length.
 * A non-zero return stops the walk and is returned by s3xml_walk. */
typedef int (*s3xml_fn)(void *ctx, const char *path, const char *text, size_t n);

/* Walk n bytes of XML. 0 (one root element, closed), the callback's
 * non-zero return, ERR_PARSE (malformed), ERR_TOOBIG (a cap above),
 * ERR_UNSUPPORTED (a DOCTYPE). */
int s3xml_walk(const char *xml, size_t n, s3xml_fn fn, void *ctx);

/* An <Error> document's Code and Message (each truncated to its field).
 * 0, or ERR_PARSE when the bytes are not an <Error> document. */
struct s3xml_error {
    char code[64];
    char message[256];
};
int s3xml_error_parse(const char *xml, size_t n, struct s3xml_error *out);

/* InitiateMultipartUploadResult's UploadId into out (cap bytes). 0,
 * ERR_PARSE (no UploadId, or an empty one), ERR_TOOBIG (does not fit). */
int s3xml_upload_id(const char *xml, size_t n, char *out, size_t cap);

/* One object of a ListObjectsV2 page. */
struct s3xml_object {
    char key[S3XML_TEXT_MAX];
    uint64_t size_bytes;
    int64_t mtime_s;   /* LastModified as unix seconds; 0 if absent or unreadable */
};
typedef int (*s3xml_object_fn)(void *ctx, const struct s3xml_object *o);

/* Call fn for each <Contents> of a ListBucketResult page (a non-zero
 * return stops and is returned), then set *truncated (IsTruncated is
 * "true") and the NextContinuationToken into token (cap bytes; "" when
 * absent). 0, fn's return, ERR_PARSE (not a ListBucketResult, a Contents
 * without a Key, a bad Size; or truncated without a token), ERR_TOOBIG. */
int s3xml_list_parse(const char *xml, size_t n, s3xml_object_fn fn, void *ctx, int *truncated,
                     char *token, size_t cap);

#endif
