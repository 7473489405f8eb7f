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
 * row (store_file_purge) in its own transaction. Bytes first, and their
 * removal durable (blob_delete fsyncs files/) before the row goes, so a
 * crash or power loss in between leaves an expired row without bytes (never
 * served: the API answers 404 from expires_at; the next pass finishes it),
 * never bytes without a row.
 *
 * The API already answers
 * 404 for a file from the second it expires (jobd/api/routes_files.c), so
 * the sweeper's delay is invisible to clients. Batches keep the ids of
 * their deleted files (output_file_id stays set, as OpenAI does). The bytes
 * go through the file store (jobd/blob/blob.h: local directory or S3).
 *
 * Orphans. A crash (or a file store that failed a delete) can leave bytes
 * no row names: an upload made durable whose row never committed (the
 * client got no 2xx), or a deleted file whose bytes the file store failed
 * to remove. Two collectors:
 *   - retention_orphans lists every key under files/ (uploads and batch
 *     result files) and removes each one older than a grace period that no
 *     file row names (the grace covers an upload whose row is about to
 *     commit; a finalization whose commit failed writes its files again on
 *     its next try, so removing them is safe). The sweeper
 *     runs it every RETENTION_ORPHAN_EVERY_S and at start; any store.
 *   - retention_orphans_local, run once at startup before jobd listens (so
 *     nothing is between its rename and its commit), removes every entry of
 *     the local files/ that no files row names (store_file_path_named:
 *     uploads and result files alike), then fsyncs files/. SQLite with the
 *     local file store only: there the data directory has one jobd;
 *     instances sharing a database share their files, where another
 *     instance's upload may be in flight.
 *
 * Threads: the sweeper thread (its own store), retention_orphans the
 * starting thread; blocking disk work.
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

/* Remove the entries of files/ that no files row names, then fsync files/
 * (see Orphans above; call before the API listens; SQLite, local files). *n_removed
 * (may be NULL) gets how many went. 0, ERR_IO (files/ unreadable or not
 * synced) or a store error; an entry that cannot be removed is logged and
 * skipped. */
int retention_orphans_local(struct store *st, int64_t *n_removed);

#define RETENTION_ORPHAN_GRACE_S 3600 /* bytes under files/ this old without a row are an orphan */
#define RETENTION_ORPHAN_EVERY_S 600  /* how often the sweeper looks for orphans */

/* Remove the keys under files/ older than now - grace_s that no file row
 * names, as above. *n_deleted (may be NULL) gets how many. 0, or the
 * first error (the listing's, the database's, or a delete's after the
 * others). */
int retention_orphans(struct store *st, int64_t now, int64_t grace_s, int64_t *n_deleted);

#endif
