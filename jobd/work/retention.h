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
 * (output_file_id stays set, as OpenAI does). The bytes go through the
 * file store (jobd/blob/blob.h: local directory or S3).
 *
 * Orphans. An upload's bytes are made durable before its row commits
 * (jobd/intake/upload.h), and a deleted file's row goes before its bytes,
 * so a crash (or a file store that failed a delete) can leave bytes no row
 * names. retention_orphans lists the uploads' keys (files/file-*) and
 * removes each one older than a grace period whose file row does not
 * exist; the grace covers an upload whose row is about to commit. The
 * sweeper runs it every RETENTION_ORPHAN_EVERY_S and at start.
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

#define RETENTION_ORPHAN_GRACE_S 3600 /* an upload's bytes this old without a row are an orphan */
#define RETENTION_ORPHAN_EVERY_S 600  /* how often the sweeper looks for orphans */

/* Remove the uploads' bytes older than now - grace_s that no file row
 * names, as above. *n_deleted (may be NULL) gets how many. 0, or the
 * first error (the listing's, the database's, or a delete's after the
 * others). */
int retention_orphans(struct store *st, int64_t now, int64_t grace_s, int64_t *n_deleted);

#endif
