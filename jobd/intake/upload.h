/*
 * upload.h - an incoming file, streamed to disk: decode -> hash -> zstd ->
 * temporary file -> (commit) final path.
 *
 * Design. Bytes arrive in pieces from the HTTP body callback (multipart file
 * part of POST /v1/files, or the whole body of POST /v1/jobs). If the body
 * is Content-Encoded (zstd or gzip) the pieces are decoded first, with push
 * decoders whose memory is bounded (zstd window <= 2^ZST_WINDOW_LOG_MAX); the
 * decoded ("logical") bytes are counted against max_bytes (so a
 * decompression bomb stops at the limit), hashed (SHA-256: the file's
 * sha256 column), and compressed into one zstd frame written to a temporary
 * file under <data>/tmp. Nothing is held in memory beyond the codecs'
 * buffers.
 *
 * upload_commit (meant for a thread-pool thread, it syncs or uploads)
 * closes the file and hands it to the file store (jobd/blob/blob.h:
 * blob_put_file: local, fsync + rename + fsync of the directory; S3, a
 * multipart upload of the file), so when the database row that names the
 * key commits, the bytes are already durable.
 *
 * Threads: write/finish on the loop (each piece costs a few hundred
 * microseconds of CPU at most); commit/abort on any thread, one at a time.
 */
#ifndef JOBD_UPLOAD_H
#define JOBD_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "common/crypto.h"

enum upload_encoding { UPLOAD_IDENTITY = 0, UPLOAD_ZSTD, UPLOAD_GZIP };

struct upload;

/* Parse a Content-Encoding value: NULL/""/"identity" -> IDENTITY, "zstd",
 * "gzip"/"x-gzip". 0 or ERR_UNSUPPORTED (also "gzip" when built without
 * zlib). */
int upload_encoding_parse(const char *value, enum upload_encoding *out);

/* Create a temporary file in tmp_dir and a pipeline decoding enc, at most
 * max_bytes decoded bytes, compressing at zstd level. Returns 0, ERR_IO,
 * ERR_NOMEM. *out is the caller's (upload_free). */
int upload_new(const char *tmp_dir, enum upload_encoding enc, uint64_t max_bytes, int level,
               struct upload **out);

/* Feed n encoded bytes. Returns 0, ERR_TOOBIG (decoded size over the
 * limit), ERR_CORRUPT (bad zstd/gzip data), ERR_NOSPACE (disk full), ERR_IO (disk), ERR_NOMEM. */
int upload_write(struct upload *u, const void *data, size_t n);

/* End of input: checks the encoded stream ended cleanly (ERR_CORRUPT if
 * truncated), ends the zstd frame. Then upload_bytes / upload_sha256_hex
 * are final. */
int upload_finish(struct upload *u);

uint64_t upload_bytes(const struct upload *u);
/* Lowercase hex of the decoded bytes' SHA-256 (65 bytes incl. NUL), after finish. */
const char *upload_sha256_hex(const struct upload *u);

/* Close the temporary file and make it key in bs (blob_put_file). After
 * success the temporary file is gone and upload_free leaves the object
 * alone; after a failure there is no object and upload_free removes the
 * file. 0, ERR_INVAL (not finished), or blob_put_file's errors (ERR_IO,
 * ERR_CONN: the file store is out, ...). */
struct blob_store;
int upload_commit(struct upload *u, struct blob_store *bs, const char *key);

/* Close and unlink the temporary file (if not committed) and free. NULL ok. */
void upload_free(struct upload *u);

#endif
