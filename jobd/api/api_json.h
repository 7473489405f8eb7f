/*
 * api_json.h - JSON shapes of the API (OpenAI's File and Batch objects),
 * the completion-window and metadata rules, and query parsing. Pure; any
 * thread (api_query_int: loop thread).
 */
#ifndef JOBD_API_JSON_H
#define JOBD_API_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "jobd/api/api.h"
#include "jobd/api/api_err.h"
#include "jobd/store/store.h"

struct http_req;
struct json_t;

/* Append the object to out. 0 or buf's errors. */
int api_file_json(struct buf *out, const struct store_file *f);
int api_batch_json(struct buf *out, const struct store_batch *b);
/* The batch JSON plus the extension field "waiting_for_model" when the
 * batch is in_progress and no live worker serves its model for the batch's
 * endpoint (served: the names live workers serve with their endpoints,
 * n_served of them). */
int api_batch_json_ext(struct buf *out, const struct store_batch *b, const struct store_model_served *served,
                       size_t n_served);

/* "24h" for 86400, "7d" for 604800, "90m", "45s". */
void api_window_format(int64_t seconds, char *out, size_t cap);
/* Parse a completion window ("24h", "1h", "7d", "90m"): min_s (60 s
 * unless --window-min says less, for tests) .. 30 d. 0 or ERR_INVAL. */
int api_window_parse(const char *s, int64_t min_s, int64_t *seconds);

/* Check metadata (a JSON object of <= 16 string pairs, key <= 64, value
 * <= 512 bytes). 0, or ERR_INVAL with a message in msg. */
int api_metadata_check(const struct json_t *md, char *msg, size_t cap);

/* Parse a query integer in [lo, hi]; absent -> def. 0 or ERR_INVAL. */
int api_query_int(struct http_req *req, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out);

/* Check an expiry policy (OpenAI's expires_after / output_expires_after:
 * {"anchor": "created_at", "seconds": N}): anchor must be "created_at"
 * (NULL: absent, taken as created_at), seconds in min_s..API_EXPIRY_MAX_S.
 * 0, or ERR_INVAL with a message for the client in msg. Pure. */
int api_expiry_check(const char *anchor, int64_t seconds, int64_t min_s, char *msg, size_t cap);

/* Parse an expiry policy object from JSON (v: the object). 0 with
 * *seconds; else -1 with *e (INVALID_TYPE, MISSING_PARAMETER,
 * INVALID_VALUE), msg and param (cap 64) filled: param is
 * "<field>.anchor" / "<field>.seconds" / field. */
int api_expiry_parse_json(const struct json_t *v, const char *field, int64_t min_s, int64_t *seconds,
                          enum api_err *e, char *msg, size_t cap, char *param);

/* The cursor of GET /v1/batches/{id}/results (routes_results.c): opaque
 * to clients, "rc1" + 16 hex digits of a results seq + 12 hex digits of
 * SHA-256("jobd results cursor\n" batch_id "\n" seq), so it is bound to
 * its batch. make writes API_CURSOR_LEN + NUL bytes; parse answers 0 with
 * *seq, or ERR_INVAL for anything make did not produce for batch_id. Pure. */
#define API_CURSOR_LEN 31
void api_results_cursor_make(const char *batch_id, int64_t seq, char out[API_CURSOR_LEN + 1]);
int api_results_cursor_parse(const char *batch_id, const char *s, int64_t *seq);

/* 1 when an Accept-Encoding header value h (NULL: absent) lists the
 * content-coding `coding` ("zstd", "gzip") without q=0, else 0. "*" and
 * identity are not treated specially (absent = identity only). Pure. */
int api_accepts_coding(const char *h, const char *coding);

#endif
