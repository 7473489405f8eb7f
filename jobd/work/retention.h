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
 * between leaves a row without bytes (the next pass finishes it); a power
 * loss may undo an unlink that was not followed by an fsync of files/,
 * leaving bytes without a row, which the next start collects (below).
 *
 * Orphans. A crash can still leave bytes no row names: an upload renamed
 * into files/ whose row never committed (the client got no 2xx), or a
 * deleted or expired file whose unlink did not happen or was undone.
 * retention_orphans, run once at startup before jobd listens (so no upload
 * is between its rename and its commit), removes every entry of files/ that
 * no files row names (store_file_path_named). SQLite only: there the data
 * directory has one jobd; instances sharing a PostgreSQL database also
 * share files/, where another instance's upload may be in flight. The API already answers 404 for a file from the
 * second it expires (jobd/api/routes_files.c), so the sweeper's delay is
 * invisible to clients. Batches keep the ids of their deleted files
 * (output_file_id stays set, as OpenAI does).
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
 * (see Orphans above; call before the API listens, SQLite only). *n_removed
 * (may be NULL) gets how many went. 0, ERR_IO (files/ unreadable or not
 * synced) or a store error; an entry that cannot be removed is logged and
 * skipped. */
int retention_orphans(struct store *st, int64_t *n_removed);

#endif
