/*
 * blob.h - where the bytes of jobd's files live: uploaded input files and
 * the output / error files of batches. Two stores behind one interface:
 *
 *   local  (default)  <data_dir>/<key>: files on the data directory's file
 *                     system, as jobd always kept them.
 *   s3                an S3-compatible bucket (AWS S3, MinIO, Ceph,
 *                     SeaweedFS): object <prefix>/<key>, path-style URLs
 *                     (<endpoint>/<bucket>/<prefix>/<key>), every request
 *                     signed with AWS SigV4 by libcurl (CURLOPT_AWS_SIGV4)
 *                     and carrying the SHA-256 of its body
 *                     (x-amz-content-sha256), so the store checks each part.
 *
 * A key is a files.storage_path ("files/<file id>.jsonl.zst",
 * jobd/store/store.h): '/'-separated, no "..", no leading '/'.
 *
 * Design. Writers make a complete local file first (an upload streams
 * into <data_dir>/tmp, compressed; the finalizer writes its files there
 * too) and then blob_put_file makes it durable under its key in one step
 * that is all or nothing: local: fsync, rename(2) into place, fsync of the
 * directory; s3: one PUT when the file fits in one part, else a multipart
 * upload (parts of part_bytes read from the file one at a time, so memory
 * is one part, never the file; CompleteMultipartUpload makes the object
 * appear whole, and a failed upload is aborted), so a reader never sees a
 * half-written object. The caller commits the database row that names the
 * key only after blob_put_file returned 0; an object whose row was never
 * committed (a crash in between) is an orphan, which blob_list lets the
 * sweeper find (jobd/work/retention.h). Readers stream: local: the file
 * descriptor (blob_reader_fd, for sendfile); s3: GETs of BLOB_RANGE_BYTES
 * ranges, one in memory at a time, each retried on its own.
 *
 * Failures (s3). Each HTTP request is retried up to max_attempts times
 * with doubling backoff (100 ms, 200 ms, ... capped at 2 s) when the
 * connection fails or times out or the store answers 5xx / 429; a part is
 * re-sent from its buffer. What is left after the retries is ERR_CONN
 * (unreachable, timed out, 5xx): the store is out, callers answer 503 +
 * Retry-After (the API) or try again later (the finalizer). A 403 is
 * ERR_AUTH, a 404 ERR_NOTFOUND; any other answer ERR_HTTP; the store's
 * <Error> Code and Message are logged.
 *
 * Threads: a struct blob_store is immutable after blob_store_open and may
 * be used by any number of threads at once (each call makes its own curl
 * handle); a reader belongs to one thread at a time. Every call blocks:
 * never on the event loop.
 */
#ifndef JOBD_BLOB_H
#define JOBD_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BLOB_KEY_MAX 512                    /* a key, NUL included */
#define BLOB_RANGE_BYTES (4u << 20)         /* s3: one ranged GET of a reader */
#define BLOB_PART_MIN (5u << 20)            /* S3's smallest part but the last */
#define BLOB_PART_DEFAULT (8u << 20)

struct blob_config {
    const char *url;        /* NULL or "": local; "s3://BUCKET[/PREFIX]" */
    const char *data_dir;   /* local: the directory keys are under */
    const char *endpoint;   /* s3: "http[s]://HOST[:PORT]" (NULL: AWS_ENDPOINT_URL, else
                               https://s3.REGION.amazonaws.com) */
    const char *region;     /* s3: NULL: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1 */
    const char *access_key; /* s3: NULL: AWS_ACCESS_KEY_ID */
    const char *secret_key; /* s3: NULL: AWS_SECRET_ACCESS_KEY */
    uint64_t part_bytes;    /* s3: multipart part size, >= BLOB_PART_MIN; 0 = BLOB_PART_DEFAULT */
    int max_attempts;       /* s3: tries per request, 1..20; 0 = 4 */
    int connect_timeout_ms; /* s3: 0 = 2000 */
    int timeout_ms;         /* s3: one request, start to end; 0 = 60000 */
};

struct blob_store;
struct blob_reader;

/* Open the store cfg names (its strings are copied). s3: the bucket is
 * checked with one signed request, so wrong credentials or a missing
 * bucket fail here, naming the bucket in the log. 0 and *out, or
 * ERR_INVAL (a bad url, endpoint, part size; no credentials), ERR_AUTH
 * (refused: credentials), ERR_NOTFOUND (no such bucket), ERR_CONN
 * (unreachable), ERR_NOMEM. */
int blob_store_open(const struct blob_config *cfg, struct blob_store **out);

/* Free the store (no reader may be open). NULL ok. */
void blob_store_free(struct blob_store *bs);

/* 1 for an s3 store, 0 for local. */
int blob_is_remote(const struct blob_store *bs);

/* What the store is, for logs: the data directory, or "s3://bucket/prefix at endpoint". */
const char *blob_describe(const struct blob_store *bs);

/* Make the complete, closed file at path durable as key (replacing an
 * object of that key). local: path must be on the data directory's file
 * system (<data_dir>/tmp): it is synced and renamed into place, so it is
 * gone on success. s3: it is uploaded (one PUT or multipart, above) and
 * then removed. On failure the key is as it was (never half an object)
 * and path is still there, the caller's to remove. 0, ERR_INVAL (a bad
 * key), ERR_IO (local file system; reading path), ERR_CONN, ERR_AUTH,
 * ERR_HTTP, ERR_NOMEM. */
int blob_put_file(struct blob_store *bs, const char *key, const char *path);

/* A reader of key's bytes from the start. 0 and *out (blob_reader_free),
 * ERR_NOTFOUND (no such object), ERR_INVAL (a bad key), ERR_IO,
 * ERR_CONN, ERR_AUTH, ERR_HTTP, ERR_NOMEM. */
int blob_reader_open(struct blob_store *bs, const char *key, struct blob_reader **out);

/* Up to cap bytes into buf: > 0 bytes read, 0 at the end, or a negative
 * ERR_* (ERR_IO, ERR_CONN, ERR_CORRUPT: the object changed size under the
 * reader). Its signature is zst_source_fn's (common/zst.h). */
ssize_t blob_read(void *reader, void *buf, size_t cap);

/* The object's size in bytes, known at open. */
uint64_t blob_reader_size(const struct blob_reader *r);

/* local: the open file descriptor (the reader still owns it; it may be
 * sent with sendfile from offset 0); s3: -1. */
int blob_reader_fd(const struct blob_reader *r);

/* Take the local reader's file descriptor (the caller closes it); -1 for
 * s3. The reader is still to be freed. */
int blob_reader_take_fd(struct blob_reader *r);

/* NULL ok. */
void blob_reader_free(struct blob_reader *r);

/* Remove key; an absent key is success. local: the removal is made
 * durable (fsync of the directory) before 0 is returned, so a row that
 * named the key may be deleted next; an absent key's directory is synced
 * too (a try that removed it may have failed that fsync). 0, ERR_INVAL,
 * ERR_IO, ERR_CONN, ERR_AUTH, ERR_HTTP. */
int blob_delete(struct blob_store *bs, const char *key);

/* Call fn for every key under prefix ("files/": a key prefix, not only a
 * folder) with its size and modification time (unix seconds); a non-zero
 * return from fn stops the listing and is returned. Keys come in no
 * promised order (s3: UTF-8 binary order, pages of 1000). 0, fn's return,
 * ERR_INVAL, ERR_IO, ERR_CONN, ERR_AUTH, ERR_HTTP, ERR_PARSE (a page that
 * is not a listing). */
typedef int (*blob_list_fn)(void *ctx, const char *key, uint64_t size_bytes, int64_t mtime_s);
int blob_list(struct blob_store *bs, const char *prefix, blob_list_fn fn, void *ctx);

/* 1 if key is one blob accepts: 1..BLOB_KEY_MAX-1 bytes of [A-Za-z0-9._-/],
 * no leading '/', no empty or "." / ".." segment. Pure. */
int blob_key_ok(const char *key);

#endif
