/*
 * ingest.h - streaming validation and ingestion of a batch's JSONL input.
 *
 * The input file (plain or zstd-compressed) is read by the one JSONL line
 * reader (jobd/intake/jsonl.h: chunks, BOM, CR, blank lines, line numbers
 * and the size caps); no more than one line (capped at max_line_bytes) is
 * ever held in memory. Each line is
 * checked by ingest_line_check (spec/jsonl.md lists every rule and error
 * code) and, if valid, inserted as a queued request in the batch.
 *
 * Single pass, all or nothing. Valid lines are inserted as they are read,
 * in transactions of rows_per_tx rows; each transaction also records a
 * checkpoint in the batch row (last line done, requests so far, errors so
 * far, the model). The rows are invisible to work distribution while the
 * batch is 'validating'. Duplicate custom_ids are found by the UNIQUE
 * (batch_id, custom_id) index, so memory does not grow with the file.
 * At the end, in one transaction: no errors -> n_total set and the batch
 * moves to in_progress together with the last rows; any error -> every
 * request of the batch is deleted, errors stored (the first max_errors,
 * in line order), batch -> failed. A batch cancelled meanwhile (cancelling)
 * has its rows deleted and moves to cancelled.
 *
 * Crash safety: if the process dies mid-ingest, the last committed
 * checkpoint matches exactly the committed rows (same transaction). Calling
 * ingest_batch again (jobd does so at start for every batch still in
 * 'validating': ingest_resume_all) re-reads the file, skips lines up to the
 * checkpoint without re-validating them (still counting them for the
 * limits) and continues, so the result is exactly what an uninterrupted run
 * gives.
 *
 * Threads: runs on the caller's thread with the caller's store (open a
 * dedicated store for an ingest thread; never the event loop's, since a
 * 200 MB file takes seconds). Each chunk transaction holds the database
 * write lock for its duration (tens of ms at the default size).
 */
#ifndef JOBD_INGEST_H
#define JOBD_INGEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/problem.h"
#include "jobd/account/budget.h"
#include "jobd/store/store.h"

struct ingest_limits {
    uint64_t max_file_bytes;    /* decompressed bytes; default 512 MiB (OpenAI: 200 MB) */
    int64_t max_requests;       /* non-blank lines; default 200,000 (OpenAI: 50,000) */
    size_t max_line_bytes;      /* one line without its newline; default 4 MiB */
    int max_json_depth;         /* nesting of a line; default 32 */
    int64_t max_output_tokens;  /* upper bound for max_tokens / max_completion_tokens,
                                   and the value used when neither is given; default 32768 */
    int64_t rows_per_tx;        /* rows per ingest transaction (checkpoint); default 10,000 */
    int max_errors;             /* errors collected before giving up; default 100 */
};

/* The documented defaults (spec/jsonl.md). */
void ingest_limits_default(struct ingest_limits *lim);

/* One validation error, as in the batch's errors.data[], is a struct
 * problem (common/problem.h): code (spec/jsonl.md), param
 * ("body.messages"; "" = JSON null), message, and line (1-based physical
 * line; 0 = the whole file, JSON null). */

/* A valid line, borrowed from root. */
struct ingest_line {
    json_t *root;              /* owned: ingest_line_release */
    const char *custom_id;
    const char *model;
    json_t *body;
    const char *body_raw;      /* the body's JSON text exactly as in the line (borrowed
                                  from the caller's line bytes), or NULL if it could not
                                  be located (escaped key): then serialise body */
    size_t body_raw_len;
    int64_t prompt_tokens_est; /* bytes of prompt text / 4, rounded up, + 4 per message */
    int64_t max_tokens;        /* requested output cap, or lim->max_output_tokens */
};

/* Check one line (len bytes, without the newline and CR; BOM already
 * removed) against the rules for endpoint ("/v1/chat/completions",
 * "/v1/completions", "/v1/embeddings" or "/v1/responses"); the rules and their order are in
 * ingest_line.c's header. Returns 0 and fills *out (release it), or ERR_INVAL
 * with *err filled (err->line left as it was: the caller's); ERR_NOMEM,
 * ERR_CRYPTO. */
int ingest_line_check(const char *line, size_t len, const char *endpoint,
                      const struct ingest_limits *lim, struct ingest_line *out,
                      struct problem *err);

/* Free a checked line's JSON. NULL ok; idempotent. */
void ingest_line_release(struct ingest_line *l);

/* 1 if the n bytes at s are valid UTF-8 (no overlongs, surrogates, or code
 * points above U+10FFFF), else 0. */
int ingest_utf8_valid(const char *s, size_t n);

/* Optional callbacks. on_line runs after each line is handled (after the
 * chunk commit that line may have triggered); returning non-zero stops the ingest at once with
 * ERR_BUSY, leaving the last checkpoint in place (used for shutdown, and by
 * tests to simulate a crash). */
struct ingest_hooks {
    int (*on_line)(void *ctx, int64_t line);
    void *ctx;
    /* Optional: called after each chunk transaction committed (no
     * transaction is open then), e.g. to let other writers take the
     * database write lock before the next chunk (jobd's API handlers would
     * otherwise starve behind back-to-back chunk transactions). */
    void (*on_commit)(void *ctx, int64_t line);
};

enum ingest_outcome {
    INGEST_VALID = 0,    /* batch is in_progress with n_requests requests */
    INGEST_INVALID,      /* batch is failed with n_errors errors */
    INGEST_CANCELLED,    /* batch was cancelled during validation and is now cancelled */
};

struct ingest_report {
    enum ingest_outcome outcome;
    int64_t n_requests;  /* requests persisted (0 unless VALID) */
    int64_t n_lines;     /* physical lines read */
    int n_errors;
    int resumed;         /* 1 if it continued from a checkpoint */
};

/* Validate and ingest batch_id's input file (the batch must be in
 * 'validating'; a 'cancelling' batch is finished as cancelled). Returns 0
 * with *rep filled when the batch reached a final ingest state (valid,
 * invalid or cancelled); ERR_NOTFOUND (no such batch), ERR_BADSTATE (batch
 * not validating/cancelling), ERR_BUSY (stopped by a hook, or the database
 * stayed locked), ERR_IO / ERR_CONN (the file could not be read, or the
 * file store is out: retry later; the
 * batch stays validating), ERR_NOMEM, store errors. Any non-zero return
 * leaves the batch resumable. lim NULL = defaults; hooks may be NULL. */
int ingest_batch(struct store *st, const char *batch_id, const struct ingest_limits *lim,
                 const struct ingest_hooks *hooks, struct ingest_report *rep);

/* Read the JSONL file at path - with bs, the key path in that file store
 * (jobd/blob/blob.h); NULL: a local path - (plain or zstd) the way ingest does and call
 * on_line for every line that passes ingest_line_check (l is borrowed for
 * the call); invalid, blank and over-long lines are skipped, and the scan
 * stops quietly where ingest would fail the whole file (corrupt stream, size
 * or request limit). Used for admission estimates (ingest_estimate_file), before
 * any batch row exists. Returns 0 (*n_lines, may be NULL: physical lines
 * read), ERR_NOTFOUND (no file), ERR_IO, ERR_CONN (the file store is
 * out), ERR_NOMEM. Any thread. */
struct blob_store;
int ingest_scan_file(struct blob_store *bs, const char *path, const char *endpoint,
                     const struct ingest_limits *lim, void (*on_line)(void *ctx, const struct ingest_line *l),
                     void *ctx, int64_t *n_lines);

/* The admission estimate of the JSONL file at path (bs as above) for endpoint
 * (jobd/account/budget.h): ingest_scan_file feeding budget_estimate_add, so
 * it counts exactly the lines ingest will store. *out written on success
 * only. 0, ERR_NOTFOUND (no file), ERR_TOOBIG (a sum overflows int64),
 * ERR_IO, ERR_NOMEM. Any thread. */
int ingest_estimate_file(struct blob_store *bs, const char *path, const char *endpoint, const struct ingest_limits *lim,
                         const struct usage_prices *prices, struct budget_estimate *out);

/* Ingest every batch in 'validating' (startup scan after a crash), oldest
 * first. Returns 0 or the first error (it goes on with the others); *n_done
 * (may be NULL) gets the number ingested to a final state. */
int ingest_resume_all(struct store *st, const struct ingest_limits *lim, int *n_done);

#endif
