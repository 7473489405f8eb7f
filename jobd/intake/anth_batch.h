/*
 * anth_batch.h - Anthropic's Message Batches at the edge of intake: the
 * body of POST /v1/messages/batches becomes the JSONL input file of an
 * ordinary /v1/chat/completions batch, and a results row becomes a line of
 * GET /v1/messages/batches/{id}/results.
 *
 * Design. A second front door, not a second system: each request's params
 * are translated by the one Messages contract (openai/anthropic.h) and the
 * line written is checked with ingest_line_check, the rule the ingest
 * thread applies to it later, so a batch accepted here never fails its
 * ingest and the worker sees a plain chat line. Errors carry the request's
 * index and the Anthropic field: "requests.3.params.max_tokens: Field
 * required" (problem.param holds the path, problem.message the sentence).
 *
 * Limits: at most lim->max_requests requests (the OpenAI path's count
 * limit), each custom_id 1..64 of [A-Za-z0-9_-] and unique in the batch,
 * each line at most lim->max_line_bytes; the body's size is the caller's
 * (the route caps it at lim->max_file_bytes).
 *
 * Thread: any (a pool thread: parsing a large body is not loop work).
 */
#ifndef JOBD_INTAKE_ANTH_BATCH_H
#define JOBD_INTAKE_ANTH_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/problem.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"

#define ANTH_CUSTOM_ID_MAX 64

/* Read a create body (len bytes of JSON: {"requests": [{custom_id,
 * params}, ...]}) and write one chat JSONL line per request with
 * write(ctx, bytes, n) (an upload). *n_requests gets the count. Returns 0,
 * ERR_INVAL with err filled (status 400; or 413 with code
 * "request_too_large" past the request count), ERR_NOMEM, or write's error. */
int anth_batch_lines(const char *body, size_t len, const struct ingest_limits *lim,
                     int (*write)(void *ctx, const void *data, size_t n), void *ctx, int64_t *n_requests,
                     struct problem *err);

/* Append the results line of row r (a results row of an Anthropic batch)
 * to out, with its newline: {"custom_id", "result": {"type": "succeeded",
 * "message": Message} | {"type": "errored", "error": {"type": "error",
 * "error": {"type", "message"}}} | {"type": "canceled"} | {"type":
 * "expired"}}. The message's usage comes from the row (prefix-cache hits
 * as cache_read_input_tokens), except for a reused answer (its body's
 * usage has reused_tokens; its row counts 0): the body's own usage, the
 * original computation's, as on the OpenAI results line. 0, ERR_NOMEM. */
int anth_batch_result_line(struct buf *out, const struct store_result_row *r);

#endif
