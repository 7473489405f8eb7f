/*
 * retention.h - file expiry: files whose expires_at has passed are deleted,
 * bytes and row.
 *
 * Design. expires_at is set when a file is created: an upload's
 * expires_after (or jobd --file-retention), a batch's output and error
 * files from its output_expires_after (or --file-retention). The sweeper
 * calls retention_sweep every pass: it lists up to max expired files
 * (store_files_expired; a file a validating batch still reads is skipped
 * until that batch is past ingestion), removes each one's bytes, then its
 * row (store_file_purge) in its own transaction. Bytes first, so a crash in
 * between leaves a row without bytes (the next pass finishes it), never
 * bytes without a row. The API already answers 404 for a file from the
 * second it expires (jobd/api/routes_files.c), so the sweeper's delay is
 * invisible to clients. Batches keep the ids of their deleted files
 * (output_file_id stays set, as OpenAI does).
 *
 * Threads: the sweeper thread (its own store); blocking disk work.
 */
#ifndef JOBD_RETENTION_H
#define JOBD_RETENTION_H

#include <stdint.h>

#include "jobd/store/store.h"

#define RETENTION_MAX_PER_PASS 256 /* files deleted per sweeper pass */

/* Delete up to max expired files (now: unix seconds) as above. *n_deleted
 * (may be NULL) gets how many rows went. Returns 0 or the first error
 * (store errors; a file whose bytes cannot be removed, other than already
 * missing, is logged, kept and skipped: ERR_IO after the others). */
int retention_sweep(struct store *st, int64_t now, int max, int64_t *n_deleted);

#endif
