/*
 * store.h - jobd's durable state: one SQLite database in the data directory
 * (the default), or one PostgreSQL database (store_opts.database).
 *
 * PostgreSQL. The same functions and contracts on a second engine:
 * schema_pg.sql (its own migration numbering, applied under an advisory
 * lock; the version is the schema_version row), the libpq driver sdb_pg.c
 * and STORE_SQL_PG for the statements whose dialect differs (store_int.h).
 * Writes run in READ COMMITTED under the writer lock (STORE_PG_WRITE_LOCK,
 * pg_advisory_xact_lock, taken with BEGIN in one round trip); reads run in
 * REPEATABLE READ snapshots. A dropped connection answers ERR_BUSY (503 +
 * Retry-After at the API) and reconnects with backoff.
 *
 * Several jobd instances on one PostgreSQL database. Where the
 * writer lock is exclusive and where it is shared:
 *
 *   - Shared (pg_advisory_xact_lock_shared), the hot paths, on row locks:
 *     the acquire (store_tx_enter_lease: ready requests' requests_queued
 *     rows taken FOR UPDATE SKIP LOCKED, then claimed by one statement
 *     fenced by status that leases the requests and deletes those rows,
 *     schema_pg.sql migration 13; the fairness cursor lease_rr is one
 *     upserted row per model, updated last),
 *     store_results_commit, store_lease_heartbeat, store_lease_release, the
 *     lease sweep (one transaction per lease), store_worker_seen and the
 *     webhook claim (FOR NO KEY UPDATE SKIP LOCKED: one dispatcher per
 *     delivery). These run at once on every connection and instance. What
 *     keeps them exact: every operation on a lease locks its leases row
 *     first (a commit, heartbeat, release or sweep of one lease runs alone,
 *     so what it reads of the lease's requests stays true to its commit);
 *     request transitions are fenced by status and lease id in the UPDATE's
 *     WHERE (READ COMMITTED re-checks it on the newest row version, so of
 *     two writers one changes the row); results.request_id is a primary key;
 *     batch counters are increments by one UPDATE per batch (row-locked);
 *     results.seq is taken under the batch's row lock (schema_pg.sql
 *     migration 3), so within a batch seq order is commit order. Row lock
 *     order, so that two hot-path transactions never deadlock: the lease
 *     row, then the worker row (commit and heartbeat update last_seen right
 *     after the lease row), then the rows of the batches the transaction
 *     may end requests of, all at once in id order (a commit: its items'
 *     batches; a sweep: those of every request the lease holds; a release:
 *     those not in_progress), then usage_totals rows (the ledger trigger,
 *     last). Request rows are the lease's own (an acquire skips the
 *     locked requests_queued rows of requests another one is claiming).
 *   - Exclusive (pg_advisory_xact_lock), everything else: submissions,
 *     ingest chunks, batch transitions and cancels, stop steps (cancel /
 *     expiry), finalization, idempotency keys, files, keys, tenants,
 *     webhook fan-out and delivery records, retention. They keep the
 *     global order SQLite's single writer gives - each sees no hot-path
 *     transaction in flight - which their check-then-write steps rely on
 *     (a stop step that ends a batch's queued and leased requests and then
 *     moves the batch on must not race an acquire claiming one; an
 *     idempotency reservation is one locked transaction, so of two
 *     instances given the same key one creates, the other answers "in
 *     flight" or, once it is complete, the stored answer). They are rare
 *     or short next to the hot paths.
 *
 * What spans several transactions is owned by one instance at a time
 * (store_own_try: a session advisory lock, ended by the owner or by its
 * connection's end, so a killed instance's work is taken over): the ingest
 * of a validating batch (each chunk also fenced by store_ingest_fence) and
 * the finalization of a batch (its files have fixed names). The lease
 * sweep, cancel / expiry steps and retention are one transaction per step,
 * fenced by status, and may run on every instance. A commit that makes
 * work leasable NOTIFYs (store_work_listen), so a worker long-polling one
 * instance is woken when work is submitted to another. The file bytes
 * (store_blobs) must be one store every instance reaches: an S3 bucket
 * (jobd --files), or a data directory on one shared POSIX file system.
 *
 * Design (SQLite; PostgreSQL as above). The schema lives in schema.sql (repo root), embedded at build time
 * as store_schema_sql and applied by a migration runner keyed on PRAGMA
 * user_version: the file is split at "-- @migration N" lines and every block
 * newer than the database runs once, in its own BEGIN IMMEDIATE transaction
 * that also sets user_version = N. A database newer than the binary is
 * refused (ERR_UNSUPPORTED).
 *
 * Connections: the database is <data_dir>/jobd.db in WAL mode, with
 * foreign_keys=ON, busy_timeout (default 5 s) and synchronous=FULL by
 * default. Durability option: STORE_DURABILITY_FULL syncs the WAL on every
 * commit (an answered 2xx survives power loss); STORE_DURABILITY_NORMAL syncs
 * only at checkpoints (survives a process crash, the last commits may roll
 * back after an OS crash / power cut; never corrupts).
 *
 * Threads: a struct store is one connection and must be used by one thread
 * at a time. Threads that need the database concurrently (the event loop,
 * the ingest thread, finalizers) each open their own store on the same
 * directory; SQLite serialises writers (BEGIN IMMEDIATE waits up to the busy
 * timeout, then ERR_BUSY).
 *
 * Statements are prepared on first use and kept until store_close. Every
 * write runs in a BEGIN IMMEDIATE transaction; when the caller already holds
 * one (store_tx_begin), the function runs inside it under a SAVEPOINT, so a
 * failed call leaves the caller's transaction as it was. This is how an
 * HTTP handler commits an effect and its idempotency record atomically:
 *
 *     store_tx_begin(st);
 *     rc = store_batch_create(st, ...);
 *     if (!rc) rc = store_idem_complete(st, tenant, key, 200, body, len, now);
 *     rc ? store_tx_rollback(st) : (rc = store_tx_commit(st));
 *
 * Errors: functions return 0 or a negative ERR_* (common/err.h). The
 * driver's result codes (SQLite's numbers, sdb.h; PostgreSQL SQLSTATEs are
 * mapped onto them) are translated here (BUSY/LOCKED -> ERR_BUSY,
 * CORRUPT/NOTADB -> ERR_CORRUPT, FULL -> ERR_NOSPACE, IOERR/CANTOPEN/READONLY/PERM ->
 * ERR_IO, NOMEM -> ERR_NOMEM, TOOBIG -> ERR_TOOBIG, CONSTRAINT_UNIQUE /
 * _PRIMARYKEY -> ERR_EXISTS, CONSTRAINT_FOREIGNKEY -> ERR_NOTFOUND, other
 * CONSTRAINT -> ERR_INVAL, others ERR_INTERNAL) and the original message is
 * logged. Out-parameters are written only on success.
 * Objects owned by another tenant are ERR_NOTFOUND, never "forbidden".
 *
 * State machines (the only writers of status are the two transition
 * functions; each updates WHERE id=? AND status=<from>):
 *
 *   batch:   from          -> allowed to
 *            validating    -> in_progress, failed, cancelling
 *            in_progress   -> finalizing, expired, cancelling
 *            finalizing    -> completed, expired, cancelling
 *            cancelling    -> cancelled
 *            failed, completed, expired, cancelled: terminal
 *
 *   request: queued        -> leased (attempts+1, lease_id set), failed
 *            leased        -> queued (lease expired / transient error; lease_id
 *                             cleared, next_attempt_at = backoff; a release
 *                             by a draining worker also gives the attempt
 *                             back: attempts-1), succeeded, failed
 *            failed        -> queued (dead-letter retry only, while the batch is
 *                             in_progress: attempts reset to 0, n_failed-1)
 *            succeeded: terminal; failed: terminal except for that retry (a dead
 *                             letter is a failed request plus a dead_letters row)
 *
 *   Every request that ends (succeeded or failed) has exactly one results row
 *   (results.request_id is the primary key): the worker's response, the 4xx
 *   envelope of an invalid request, or an error code (max_attempts_exceeded,
 *   batch_cancelled, batch_expired). Finalization streams that table.
 *
 * Times are unix seconds passed in by the caller (now), so tests control them.
 *
 * The backend interface. This header (with store_budget.h, store_usage.h
 * and store_webhook.h) is everything jobd asks of its database. It is
 * implemented once, by the jobd/store/store*.c files (their statements all
 * sit in STORE_SQL, store_int.h), on top of an internal driver layer
 * (sdb.h: prepare / bind / step / column / exec, SQLite's model and result
 * codes) with one driver per engine: sdb_sqlite.c (the only file that
 * includes sqlite3.h) and sdb_pg.c (libpq, PostgreSQL). An engine
 * therefore brings a driver, its schema migration and the statements whose
 * dialect differs, not a second copy of this interface; writers that
 * SQLite serialises globally (BEGIN IMMEDIATE) take row locks on
 * PostgreSQL (leasing: FOR UPDATE SKIP LOCKED) -- see the guarantee
 * column.
 * Nothing above this folder changes. What the interface promises:
 *
 *   group                    functions                               guarantee
 *   lifecycle                store_open/_close, store_schema_*       open migrates; one connection
 *   transactions             store_tx_begin/_commit/_rollback,      serializable writes (one writer
 *                            store_tx_enter/_leave/_enter_lease      at a time here; row locks there)
 *   tenants, keys            store_tenant_*, store_key_*            each call atomic
 *   files, batches,          store_file_*, store_batch_*,           each write one transaction (or a
 *   requests, ingest         store_request_*, store_ingest_*        savepoint inside the caller's);
 *                                                                    transitions fenced by status
 *   workers, leasing         store_worker_*, store_models_*,        the leasing primitives run inside
 *                            store_lease_* (primitives, heartbeat,  the acquire's transaction
 *                            release, sweep), store_results_commit, (jobd/work/lease_policy.c); commit
 *                            store_batch_stop_step,                 is exactly-once per request id
 *                            store_dead_letter_*
 *   finalization             store_results_scan, store_batch_ids_to_finalize,
 *                            store_batch_has_leased, store_batch_finish
 *   idempotency              store_idem_reserve/_complete/_release/_expire
 *   operators                store_workers_list, store_work_stats   reads
 *   budgets, usage           store_budget.h, store_usage.h          reads see one snapshot
 *   webhooks                 store_webhook.h                        outbox rows written in the
 *                                                                    transaction of their event
 *
 * Shared by every backend (no database): the state-machine tables
 * (store_*_status_name/_parse, store_*_edge_allowed), store_backoff_s,
 * store_idem_fingerprint, store_lease_clear / store_leased_clear and the
 * data-directory paths (store_path_*: storage_path is the file's key in the
 * file store, jobd/blob/blob.h, whatever the database).
 *
 * Who calls, on which thread (each with its own struct store):
 *   event loop        store_key_verify (auth), startup tenant/keys
 *   API pool threads  the routes' operations (one pooled connection per job)
 *   ingest thread     store_ingest_*, store_request_add (intake/ingestq.c)
 *   sweeper thread    store_lease_sweep, finalization, store_batch_stop_step
 *   webhook threads   store_webhook.h (webhook/webhook_disp.c)
 */
#ifndef JOBD_STORE_H
#define JOBD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/crypto.h"
#include "common/id.h"

/* The embedded schema.sql (build/gen/schema_sql.c), NUL-terminated. */
extern const char store_schema_sql[];
/* The embedded schema_pg.sql (build/gen/schema_pg_sql.c): the PostgreSQL store's. */
extern const char store_schema_pg_sql[];

struct store;

enum store_durability {
    STORE_DURABILITY_FULL = 0, /* synchronous=FULL: every commit is synced (default) */
    STORE_DURABILITY_NORMAL,   /* synchronous=NORMAL: synced at checkpoints only */
};

/* The price of one committed result: micro-dollars of prompt (of which
 * cached) and completion tokens of model into *micros; 0 or an error (the
 * row then records INT64_MAX). Pure, called on the committing thread. The
 * store knows no prices: the account layer provides this
 * (usage_cost_hook, jobd/account/usage.h) and the wiring sets it. */
typedef int (*store_cost_fn)(const void *ctx, const char *model, int64_t prompt, int64_t cached,
                             int64_t completion, int64_t *micros);

struct store_opts {
    enum store_durability durability;
    int busy_timeout_ms;             /* wait for the write lock this long (default 5000) */
    int64_t idem_retention_s;        /* idempotency keys are kept this long (default 86400) */
    int64_t idem_inflight_timeout_s; /* an in-flight reservation older than this is
                                        abandoned (its holder died) and may be taken over
                                        (default 300) */
    store_cost_fn cost;              /* prices each committed result's usage_ledger row;
                                        NULL = everything costs 0 */
    const void *cost_ctx;            /* cost's first argument; borrowed, outlives the store */
    const char *database;            /* NULL or "": SQLite, <data_dir>/jobd.db; a
                                        "postgresql://" or "postgres://" URL: that
                                        PostgreSQL database (store_database_is_pg);
                                        borrowed, outlives the store */
    struct blob_store *blobs;        /* where the bytes of files live, the store every
                                        files.storage_path is a key of (jobd/blob/blob.h;
                                        the store never calls it, it hands it out:
                                        store_blobs); NULL: the local data directory;
                                        borrowed, outlives the store */
    int64_t worker_ttl_s;            /* a worker silent longer than this that calls again was
                                        gone meanwhile: the call records the gap (worker_gaps,
                                        fleet cost); the daemon's lease_opts.worker_ttl_s
                                        (default 120); 0 records none */
    int statement_timeout_ms;        /* PostgreSQL: a statement running longer is cancelled
                                        by the server (ERR_BUSY: 503 + Retry-After at the
                                        API); 0 = no limit (default
                                        STORE_PG_STATEMENT_TIMEOUT_MS; migrations run
                                        without one). SQLite: unused */
};
#define STORE_PG_STATEMENT_TIMEOUT_MS 60000
#define STORE_OPTS_DEFAULT \
    ((struct store_opts){STORE_DURABILITY_FULL, 5000, 86400, 300, NULL, NULL, NULL, NULL, 120, \
                         STORE_PG_STATEMENT_TIMEOUT_MS})

/* 1 if url names a PostgreSQL database (postgresql:// or postgres://). Pure. */
int store_database_is_pg(const char *url);

#define STORE_DB_NAME "jobd.db" /* file name inside the data directory */

/* ---- lifecycle ------------------------------------------------------------ */

/* Open (creating the directory, mode 0700, and the database if missing) and
 * migrate <data_dir>/jobd.db. opts NULL means STORE_OPTS_DEFAULT. Returns 0,
 * ERR_IO (cannot create/open), ERR_CORRUPT (not a database), ERR_UNSUPPORTED
 * (schema newer than this binary), ERR_BUSY, ERR_NOMEM. *out is the caller's
 * (store_close). */
int store_open(const char *data_dir, const struct store_opts *opts, struct store **out);

/* Finalize every kept statement and close. Rolls back an open transaction. NULL ok. */
void store_close(struct store *st);

/* 1 on a PostgreSQL store, 0 on SQLite. */
int store_is_pg(const struct store *st);

/* Work that one jobd instance at a time must do (several jobd may share a
 * PostgreSQL database): the ingest of a validating batch and the
 * finalization of a batch. store_own_try takes ownership of (kind, id) for
 * the connection st: PostgreSQL: a session advisory lock keyed (kind,
 * hashtext(id)) (pg_try_advisory_lock: never waits); *owned = 1 when this
 * connection now owns it, 0 when another connection does. Ownership ends
 * with store_own_release or with the connection (a killed jobd's locks go
 * when PostgreSQL notices its connection closed, so another instance takes
 * its work over at once; a connection the driver re-opens has lost them).
 * Two ids of one kind whose hashes collide share an owner (harmless: one
 * waits). Ownership avoids duplicated work; correctness does not rest on
 * it (each step stays fenced in its transaction: the batch's status, and
 * for ingest store_ingest_fence). SQLite: the data directory has one jobd,
 * so *owned = 1 and release does nothing. Call outside a transaction.
 * 0 or a database error. */
enum store_own_kind { STORE_OWN_INGEST = 1, STORE_OWN_FINALIZE = 2 };
int store_own_try(struct store *st, enum store_own_kind kind, const char *id, int *owned);
void store_own_release(struct store *st, enum store_own_kind kind, const char *id);

/* Wake-ups between jobd instances (PostgreSQL LISTEN/NOTIFY). A
 * transaction that makes work leasable now - a batch reaching in_progress
 * (its ingest done), a request queued again with next_attempt_at <= now (a
 * release, a dead-letter retry), an acquire that locked ready requests it
 * did not claim (store_lease_left_ready) - NOTIFYs the channel "jobd_work" with its
 * COMMIT (same round trip). store_work_listen makes st, a connection opened
 * for this alone and used by one thread, LISTEN on it; store_work_wait then
 * waits up to timeout_ms: *woke = 1 when notifications arrived (from any
 * connection of any instance, this one's included) or when the connection
 * was re-established after a drop (what was sent meanwhile is lost, so that
 * counts as one), 0 on timeout. ERR_BUSY while the connection is down (it
 * reconnects with backoff, each call waiting at most timeout_ms);
 * ERR_UNSUPPORTED on SQLite (one process: nothing to listen to). */
int store_work_listen(struct store *st);
int store_work_wait(struct store *st, int timeout_ms, int *woke);

/* The data directory given to store_open (borrowed). */
const char *store_data_dir(const struct store *st);

/* The file store of this store's rows: opts.blobs, or the local one over
 * the data directory that store_open made when it was NULL (borrowed,
 * never NULL; thread-safe, so it may outlive a job's use of st). */
struct blob_store;
struct blob_store *store_blobs(const struct store *st);

/* Current PRAGMA user_version into *out. 0 or an ERR_*. */
int store_schema_version(struct store *st, int *out);

/* Highest migration number in the embedded schema. */
int store_schema_latest(void);
/* Highest migration number in the embedded PostgreSQL schema (schema_pg.sql:
 * its own numbering, which store_schema_version reports on PostgreSQL). */
int store_schema_pg_latest(void);

/* ---- data directory ----------------------------------------------------------
 *
 * The store owns the layout of the data directory; every other module asks
 * these functions (store_path.c) instead of spelling a path:
 *
 *   <data_dir>/jobd.db                        the database (STORE_DB_NAME)
 *   <data_dir>/files/<file id>.jsonl.zst      an uploaded file's bytes (zstd)
 *   <data_dir>/files/<batch>-<kind>.jsonl.zst a batch's output / error file
 *   <data_dir>/tmp/                           uploads and result files being
 *                                             written (scratch, local even with
 *                                             an S3 file store; leftovers are
 *                                             removed at start)
 *
 * files/... are keys of the file store (store_blobs): paths under the
 * data directory by default, objects in a bucket with jobd --files.
 *
 * files.storage_path holds the part after <data_dir>/. Pure string work:
 * any thread, no connection. */

#define STORE_REL_PATH_MAX 256  /* a storage_path, NUL included */
#define STORE_PATH_MAX 1400     /* a path under the data directory, NUL included */

enum store_dir { STORE_DIR_FILES, STORE_DIR_TMP };

/* <data_dir>/files or <data_dir>/tmp into out (cap bytes). 0, ERR_INVAL,
 * ERR_TOOBIG (does not fit; out is then truncated). */
int store_path_dir(const char *data_dir, enum store_dir which, char *out, size_t cap);
/* The storage_path of a new uploaded file's bytes. 0 or ERR_TOOBIG. */
int store_path_upload_rel(const char *file_id, char rel[STORE_REL_PATH_MAX]);
/* The file id of an uploaded file's storage_path (store_path_upload_rel's
 * inverse). 0, or ERR_INVAL when rel is not one. */
int store_path_upload_id(const char *rel, char id[ID_MAX]);
/* The storage_path of a batch's output (kind "output") or error ("errors")
 * file. 0 or ERR_TOOBIG. */
int store_path_batch_rel(const char *batch_id, const char *kind, char rel[STORE_REL_PATH_MAX]);
/* The storage_path of an entry named `name` of files/ (one path component).
 * 0, ERR_INVAL, ERR_TOOBIG. */
int store_path_files_rel(const char *name, char rel[STORE_REL_PATH_MAX]);
/* The path of a storage_path under data_dir into out (cap bytes). 0,
 * ERR_CORRUPT (rel is absolute or contains ".."), ERR_TOOBIG. */
int store_path_abs(const char *data_dir, const char *rel, char *out, size_t cap);

/* ---- transactions ---------------------------------------------------------- */

/* BEGIN IMMEDIATE (waits for the write lock up to busy_timeout). Not nestable:
 * ERR_BADSTATE if one is open. 0, ERR_BUSY, ERR_IO... */
int store_tx_begin(struct store *st);
/* COMMIT. On failure the transaction is rolled back and the error returned. */
int store_tx_commit(struct store *st);
/* ROLLBACK; no-op when no transaction is open. Can't fail. */
void store_tx_rollback(struct store *st);

/* One unit of work that nests: BEGIN IMMEDIATE when no transaction is open,
 * else a SAVEPOINT inside it (the form every write function of the store
 * takes). store_tx_leave(st, rc) commits / releases when rc == 0, rolls
 * back (to the savepoint) otherwise, and returns rc or the commit's error.
 * Every enter that returned 0 needs exactly one leave. */
int store_tx_enter(struct store *st);
int store_tx_leave(struct store *st, int rc);
/* store_tx_enter for an acquire (jobd/work/lease_policy.c): on PostgreSQL
 * the outermost level takes the writer lock shared, so acquires (and the
 * other row-locked hot paths: results commits, heartbeats, releases, the
 * lease sweep, webhook claims) run concurrently on every connection and
 * instance, their rows taken with FOR UPDATE SKIP LOCKED / fenced updates,
 * while every other writer still runs alone. Only the leasing primitives
 * (store_lease_*) may run inside it. SQLite: store_tx_enter. */
int store_tx_enter_lease(struct store *st);
/* Inside store_tx_enter_lease's transaction: the acquire read ready
 * requests it does not claim. On PostgreSQL it locked them (their
 * requests_queued rows, FOR UPDATE SKIP LOCKED), so acquires elsewhere skipped them until this
 * transaction ends; its COMMIT then also NOTIFYs (store_work_listen) so
 * that long polls parked meanwhile look again at once. No-op on SQLite or
 * outside a transaction. Can't fail. */
void store_lease_left_ready(struct store *st);

/* ---- tenants ----------------------------------------------------------------- */

struct store_tenant {
    char id[ID_MAX];
    char name[65];
    int64_t created_at;
};

/* Create a tenant. name: 1..64 bytes of [A-Za-z0-9._-] (else ERR_INVAL).
 * ERR_EXISTS if the name is taken. */
int store_tenant_create(struct store *st, const char *name, int64_t now, struct store_tenant *out);
/* Look a tenant up by name / id. ERR_NOTFOUND if absent. */
int store_tenant_get_by_name(struct store *st, const char *name, struct store_tenant *out);
int store_tenant_get(struct store *st, const char *id, struct store_tenant *out);
/* Look a tenant up by name, else (for "ten_...") by id: how admin routes name
 * a tenant. ERR_NOTFOUND if neither matches. */
int store_tenant_resolve(struct store *st, const char *name_or_id, struct store_tenant *out);

/* ---- API keys ----------------------------------------------------------------- */

#define STORE_KEY_PREFIX "sk-jobd-"
#define STORE_KEY_ID_LEN 10     /* Crockford base32 chars */
#define STORE_KEY_SECRET_LEN 48 /* Crockford base32 chars = 240 bits */
/* "sk-jobd-" + id + "_" + secret + NUL */
#define STORE_KEY_MAX (sizeof STORE_KEY_PREFIX + STORE_KEY_ID_LEN + 1 + STORE_KEY_SECRET_LEN)

struct store_key {
    char id[STORE_KEY_ID_LEN + 1];       /* public key id (what `keys revoke` takes) */
    char prefix[sizeof STORE_KEY_PREFIX + STORE_KEY_ID_LEN]; /* "sk-jobd-<id>": safe to show */
    char tenant_id[ID_MAX];
    char tenant_name[65];
    int64_t created_at;
    int64_t revoked_at; /* 0 while valid */
};

/* Create a key for tenant_id. plaintext (STORE_KEY_MAX bytes) receives the
 * full key "sk-jobd-<id>_<secret>": the only time it exists - only the
 * SHA-256 of the secret is stored. info (may be NULL) gets the metadata.
 * ERR_NOTFOUND (no such tenant), ERR_CRYPTO, store errors. */
int store_key_create(struct store *st, const char *tenant_id, int64_t now,
                     char plaintext[STORE_KEY_MAX], struct store_key *info);

/* Authenticate a presented key (e.g. from "Authorization: Bearer ..."). The
 * hash comparison is constant-time. Returns 0 with *out filled, or ERR_AUTH
 * for a malformed, unknown or revoked key alike (same error, so callers
 * cannot leak which); store errors (ERR_BUSY...) otherwise. */
int store_key_verify(struct store *st, const char *presented, struct store_key *out);

/* All keys, oldest first, optionally of one tenant (tenant_id NULL = all).
 * *items is a heap array (free()) of *n entries. 0 or store errors. */
int store_key_list(struct store *st, const char *tenant_id, struct store_key **items, size_t *n);

/* Revoke key key_id (the public id, or a full "sk-jobd-<id>..." prefix).
 * 0; ERR_NOTFOUND if no such key; revoking a revoked key is 0 (idempotent). */
int store_key_revoke(struct store *st, const char *key_id, int64_t now);

/* ---- files ---------------------------------------------------------------------- */

struct store_file {
    char id[ID_MAX];
    char tenant_id[ID_MAX];
    char purpose[16];        /* "batch" | "batch_output" */
    char filename[256];      /* display only */
    int64_t bytes;           /* logical size */
    char sha256[2 * SHA256_LEN + 1];
    char storage_path[256];  /* relative to the data directory */
    char encoding[12];       /* "identity" | "zstd" */
    char status[12];         /* "uploaded" | "processed" | "error" */
    int64_t created_at;
    int64_t expires_at;      /* 0 = none */
};

/* Insert a file row from f (id: if f->id is empty a new "file-" id is
 * generated and written back into f->id; status "" means "processed",
 * encoding "" means "identity"). ERR_INVAL for bad purpose/encoding/status,
 * ERR_NOTFOUND for an unknown tenant, ERR_EXISTS for a duplicate id. */
int store_file_create(struct store *st, struct store_file *f);

/* A file to expire: its id and where its bytes are. */
struct store_file_ref {
    char id[ID_MAX];
    char storage_path[256]; /* relative to the data directory */
};

/* Files whose expires_at <= now, oldest expiry first, at most max (>= 1,
 * else ERR_INVAL), leaving out the input file of any batch still
 * validating (its ingestion reads it; a batch cannot be created on an
 * expired file, see store_batch_create). *items: heap array (free()). */
int store_files_expired(struct store *st, int64_t now, int max, struct store_file_ref **items, size_t *n);

/* Delete the row of file id if it is still expired at now, one
 * transaction; *deleted (may be NULL) gets 1 if a row went. The caller
 * removes the bytes first (store_files_expired's storage_path): a crash in
 * between leaves a row without bytes, which the next pass deletes. */
int store_file_purge(struct store *st, const char *id, int64_t now, int *deleted);

/* *named = 1 when some files row has this storage_path (any tenant, expired
 * or not), else 0 (index files_storage_path). 0 or a database error. */
int store_file_path_named(struct store *st, const char *storage_path, int *named);
/* Whether a file row of id exists (any tenant): the orphan sweep
 * (jobd/work/retention.h). 0 or a database error. */
int store_file_exists(struct store *st, const char *id, int *exists);

/* Get a tenant's file. ERR_NOTFOUND if absent or another tenant's. */
int store_file_get(struct store *st, const char *tenant_id, const char *id, struct store_file *out);

/* A tenant's files, newest first (desc=1) or oldest first (desc=0), only of
 * purpose (NULL = any), strictly after cursor id `after` in that order
 * (NULL = from the start), at most limit (1..10000, else ERR_INVAL).
 * *items: heap array (free()); *has_more: more exist beyond this page. */
int store_file_list(struct store *st, const char *tenant_id, const char *purpose, int desc,
                    const char *after, int limit, struct store_file **items, size_t *n,
                    int *has_more);

/* Delete a tenant's file row; storage_path_out (may be NULL, 256 bytes) gets
 * the relative path of the bytes, which the caller unlinks after this
 * commits. ERR_NOTFOUND if absent or another tenant's. */
int store_file_delete(struct store *st, const char *tenant_id, const char *id,
                      char storage_path_out[256]);

/* ---- batches --------------------------------------------------------------------- */

enum store_batch_status {
    STORE_BATCH_VALIDATING = 0,
    STORE_BATCH_FAILED,
    STORE_BATCH_IN_PROGRESS,
    STORE_BATCH_FINALIZING,
    STORE_BATCH_COMPLETED,
    STORE_BATCH_EXPIRED,
    STORE_BATCH_CANCELLING,
    STORE_BATCH_CANCELLED,
    STORE_BATCH__COUNT
};

/* "validating"... for a status; "?" out of range. */
const char *store_batch_status_name(enum store_batch_status s);
/* Parse a status name. 0 or ERR_INVAL. */
int store_batch_status_parse(const char *s, enum store_batch_status *out);
/* 1 if from -> to is an edge of the batch state machine (table above). */
int store_batch_edge_allowed(enum store_batch_status from, enum store_batch_status to);

#define STORE_METADATA_MAX_PAIRS 16
#define STORE_METADATA_MAX_KEY 64
#define STORE_METADATA_MAX_VALUE 512
#define STORE_BATCH_MAX_ERRORS 100

#define STORE_PRIORITY_MAX 1000 /* metadata "priority": "-1000".."1000" */

struct store_batch {
    char id[ID_MAX];
    char tenant_id[ID_MAX];
    char endpoint[32];
    char input_file_id[ID_MAX];
    int64_t completion_window_s;
    enum store_batch_status status;
    char model[128];          /* "" until validated */
    char *metadata;           /* heap JSON object text or NULL */
    char *errors;             /* heap JSON array text ([{code,line,message,param}]) or NULL */
    char output_file_id[ID_MAX]; /* "" = none */
    char error_file_id[ID_MAX];  /* "" = none */
    int64_t n_total, n_completed, n_failed; /* request_counts */
    int64_t created_at, expires_at;
    int64_t at[STORE_BATCH__COUNT]; /* unix seconds of entering each state, 0 = never
                                       (at[STORE_BATCH_VALIDATING] = created_at) */
    int64_t ingest_line, ingest_requests; /* ingest checkpoint (see ingest.h) */
    int64_t priority;                     /* metadata "priority" (0 if absent) */
    int64_t usage_prompt_tokens, usage_completion_tokens, usage_cached_tokens; /* set at finalization */
    int64_t usage_cost_micros; /* sum of the batch's usage_ledger cost, set at finalization */
    int64_t output_expires_after_s; /* output/error files expire this long after they are written; 0 = never */
    char api[16];                   /* the contract it was created through: "openai" or "anthropic" */
};

/* Free metadata and errors of b (not b itself). NULL ok. */
void store_batch_release(struct store_batch *b);
/* Free an array returned by store_batch_list (releases each). NULL ok. */
void store_batch_list_free(struct store_batch *items, size_t n);

struct store_batch_new {
    const char *endpoint;         /* "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
                                     or "/v1/responses" */
    const char *input_file_id;    /* a file of this tenant with purpose "batch" */
    int64_t completion_window_s;  /* > 0 */
    const char *metadata;         /* JSON object text or NULL: <= 16 pairs, string
                                     values, key <= 64 bytes, value <= 512 bytes */
    int64_t output_expires_after_s; /* >= 0; 0 = output files never expire */
    const char *api;              /* NULL or "openai" (the default), or "anthropic" (POST /v1/messages/batches) */
};

/* Create a batch in status validating (expires_at = now + window). The
 * input file must not have expired (expires_at <= now: ERR_NOTFOUND). A
 * metadata "priority" value must be the decimal text of an integer in
 * -1000..1000 (else ERR_INVAL); it orders the tenant's own batches for
 * leasing (jobd/work/lease.h). Checks
 * the input file exists for this tenant with purpose batch (ERR_NOTFOUND).
 * ERR_INVAL for a bad endpoint, window or metadata. *out (may be NULL) gets
 * the row; release it with store_batch_release. */
int store_batch_create(struct store *st, const char *tenant_id, const struct store_batch_new *nb,
                       int64_t now, struct store_batch *out);

/* Get a tenant's batch (tenant_id NULL = any tenant: internal callers only).
 * ERR_NOTFOUND if absent or another tenant's. */
int store_batch_get(struct store *st, const char *tenant_id, const char *id, struct store_batch *out);

/* A tenant's batches newest first, strictly older than `after` (NULL =
 * from the newest), at most limit (1..100, else ERR_INVAL). *items: free
 * with store_batch_list_free. *has_more: older batches exist. An `after`
 * that is not one of the tenant's batches is ERR_NOTFOUND. */
int store_batch_list(struct store *st, const char *tenant_id, const char *after, int limit,
                     struct store_batch **items, size_t *n, int *has_more);

/* A tenant's batches created through contract api ("openai" or
 * "anthropic"), newest first, at most limit (1..1000, else ERR_INVAL):
 * with after (an id, or NULL) those strictly older than it; with before
 * (an id, or NULL; not both) the limit batches strictly newer than it,
 * nearest first in the scan but returned newest first. *has_more: more
 * exist beyond the page in the direction of the scan. *items: free with
 * store_batch_list_free. A cursor that is not one of the tenant's batches
 * is ERR_NOTFOUND. */
int store_batch_list_api(struct store *st, const char *tenant_id, const char *api, const char *before,
                         const char *after, int limit, struct store_batch **items, size_t *n, int *has_more);

/* How many of a batch's requests were ended by its cancel (results with
 * error code batch_cancelled) and by its expiry (batch_expired). 0 or a
 * store error. */
int store_batch_stop_counts(struct store *st, const char *batch_id, int64_t *n_cancelled, int64_t *n_expired);

/* Delete a tenant's ended batch (completed, failed, expired, cancelled)
 * created through contract api, with its requests and results (usage
 * ledger rows stay: they are the bill). Files stay until their retention.
 * ERR_NOTFOUND (absent, another tenant's or another contract's),
 * ERR_BADSTATE (not ended), store errors. */
int store_batch_delete(struct store *st, const char *tenant_id, const char *api, const char *id);

/* store_batch_list with only the batches whose status is `status` (a
 * status name; NULL = any); `after` need not have that status. */
int store_batch_list_status(struct store *st, const char *tenant_id, const char *status, const char *after,
                            int limit, struct store_batch **items, size_t *n, int *has_more);

/* THE batch state change: UPDATE ... SET status=to, <to>_at=now WHERE id=?
 * AND status=from. ERR_BADSTATE if from->to is not an edge or the batch is
 * no longer in `from` (row unchanged); ERR_NOTFOUND if no such batch.
 * Entering a terminal state (completed, failed, expired, cancelled) also
 * writes its webhook event (batch.<state>) into the outbox in the same
 * transaction (jobd/store/store_webhook.h), so no path can change the state
 * without the event or emit the event without the change. */
int store_batch_transition(struct store *st, const char *id, enum store_batch_status from,
                           enum store_batch_status to, int64_t now);

/* Cancel a tenant's batch: validating|in_progress|finalizing -> cancelling.
 * Already cancelling or cancelled: 0 (idempotent). Other terminal states:
 * ERR_BADSTATE. ERR_NOTFOUND if absent or another tenant's. *out (may be
 * NULL) gets the batch after the change. */
int store_batch_cancel(struct store *st, const char *tenant_id, const char *id, int64_t now,
                       struct store_batch *out);

/* Ids of all batches in a status, oldest first (startup scans: resume
 * ingestion of 'validating' batches). *ids: heap array of ID_MAX strings
 * (free()). */
int store_batch_ids_in(struct store *st, enum store_batch_status status, char (**ids)[ID_MAX],
                       size_t *n);

/* Number of batches in each status (all tenants; the metrics endpoint):
 * counts[s] for every enum store_batch_status s. 0 or store errors. */
int store_batch_count_by_status(struct store *st, int64_t counts[STORE_BATCH__COUNT]);

/* ---- requests -------------------------------------------------------------------- */

#define STORE_CUSTOM_ID_MAX 512 /* bytes */

enum store_request_status {
    STORE_REQ_QUEUED = 0,
    STORE_REQ_LEASED,
    STORE_REQ_SUCCEEDED,
    STORE_REQ_FAILED,
    STORE_REQ__COUNT
};

const char *store_request_status_name(enum store_request_status s);
int store_request_edge_allowed(enum store_request_status from, enum store_request_status to);

struct store_request {
    char id[ID_MAX];
    char batch_id[ID_MAX];
    int64_t line;
    char custom_id[STORE_CUSTOM_ID_MAX + 1];
    char model[128];
    enum store_request_status status;
    int64_t attempts;
    int64_t next_attempt_at;
    char lease_id[ID_MAX]; /* "" = none */
    int64_t prompt_tokens_est, max_tokens;
};

/* What a transition carries besides the status. */
struct store_request_change {
    const char *lease_id;    /* -> leased: the new lease (required). From leased: if not
                                NULL the current lease must equal it (fencing: a
                                stale worker cannot complete a re-leased request) */
    int64_t next_attempt_at; /* -> queued: earliest next lease time */
    const char *error;       /* -> queued / failed: last_error (may be NULL) */
    int give_back;           /* leased -> queued only: 1 = the attempt does not count
                                (attempts-1: a draining worker released it) */
};

/* THE request state change: UPDATE requests SET status=to ... WHERE id=? AND
 * status=from [AND lease_id=?]. Entering succeeded / failed also bumps the
 * batch's n_completed / n_failed in the same transaction. ERR_BADSTATE if
 * not an edge, or the request is not in `from` (or holds another lease): row
 * unchanged. ERR_NOTFOUND if no such request; ERR_INVAL if -> leased without
 * a lease id. */
int store_request_transition(struct store *st, const char *id, enum store_request_status from,
                             enum store_request_status to, const struct store_request_change *ch,
                             int64_t now);

/* Get a request by id (internal). ERR_NOTFOUND. */
int store_request_get(struct store *st, const char *id, struct store_request *out);

/* Number of requests of a batch, and how many distinct custom_ids they carry. */
int store_request_count(struct store *st, const char *batch_id, int64_t *n, int64_t *n_distinct);

/* Which requests of an ended batch a rerun takes (POST /v1/batches/{id}/rerun). */
enum store_rerun_only {
    STORE_RERUN_FAILED = 0,          /* executed and failed: a non-2xx response (4xx) or dead-lettered
                                        (max_attempts_exceeded); not the ones that never ran */
    STORE_RERUN_FAILED_AND_EXPIRED,  /* every request without a 2xx response: the above plus
                                        batch_expired, batch_cancelled (and any without a result) */
    STORE_RERUN_ALL,                 /* every request */
};

/* One request's input, as a rerun needs it (borrowed; valid during the callback). */
struct store_rerun_row {
    int64_t line;            /* its line in the batch's input file */
    const char *custom_id;
    const char *body;        /* the line's body JSON text exactly as sent */
    size_t body_len;
};

/* Call fn for each request of batch_id that `only` selects, in input line
 * order, reading one snapshot; *n_rows gets the count. Meant for a batch in
 * a terminal state (its results no longer change). A non-zero fn return
 * stops the scan and is returned. 0 or store errors. */
int store_request_scan_rerun(struct store *st, const char *batch_id, enum store_rerun_only only,
                             int (*fn)(void *ctx, const struct store_rerun_row *row), void *ctx,
                             int64_t *n_rows);

/* ---- ingest support (used by jobd/intake/ingest.c) ----------------------------------------- */

struct store_request_new {
    const char *batch_id, *tenant_id;
    int64_t line;
    const char *custom_id;
    const char *model;
    const char *body;       /* the body's JSON text */
    size_t body_len;
    int64_t prompt_tokens_est, max_tokens;
    int64_t now;
};

/* A request of store_request_add whose custom_id is already used in its
 * batch: line and custom_id are its own, first_line the line of the
 * request that holds the custom_id. Returns 0 to go on or an ERR_* that the
 * add / flush returns. custom_id is valid only during the call. */
typedef int (*store_dup_fn)(void *ctx, int64_t line, const char *custom_id, int64_t first_line);

/* Insert one queued request (a new "req_" id). Must run inside
 * store_tx_begin. SQLite writes the row at once; PostgreSQL queues it and
 * writes the queue as one INSERT ... SELECT FROM unnest (STORE_INGEST_Q_ROWS
 * rows or STORE_INGEST_Q_BYTES of bodies, or at store_request_flush), one
 * round trip and one statement for up to a thousand rows instead of one per
 * row; a full queue is sent without waiting (sdb_pg_send), so the server
 * inserts it while the caller queues the next rows, and its answer is read
 * before the next queue goes or at the flush. A request whose custom_id is taken in the batch (by a committed row,
 * or an earlier one of the same queue) is not inserted and is handed to
 * on_dup, by this call or by a later add / flush of the same transaction,
 * in line order; with on_dup NULL it fails the call with ERR_EXISTS. The
 * rows queued belong to the open transaction: store_tx_commit writes what
 * is left (a duplicate then fails the commit with ERR_EXISTS), a rollback
 * drops them. Rows of one queue must share batch_id, tenant_id and now (a
 * row that differs writes the queue first). 0, ERR_BADSTATE outside a
 * transaction, ERR_NOMEM, the error of on_dup, or a database error. */
#define STORE_INGEST_Q_ROWS 1000
#define STORE_INGEST_Q_BYTES (4u << 20)
int store_request_add(struct store *st, const struct store_request_new *r, store_dup_fn on_dup, void *ctx);

/* Write the requests store_request_add queued (PostgreSQL; SQLite has none)
 * and hand their duplicates to on_dup as store_request_add does. 0 or an
 * error as store_request_add's. */
int store_request_flush(struct store *st, store_dup_fn on_dup, void *ctx);

/* Record ingest progress of a validating batch (inside the caller's chunk
 * transaction): lines 1..line done, n_requests committed, errors so far
 * (JSON array or NULL), the batch's model so far (or NULL). ERR_BADSTATE if the batch left 'validating' (it was
 * cancelled): the caller stops. */
int store_ingest_checkpoint(struct store *st, const char *batch_id, int64_t line,
                            int64_t n_requests, const char *errors, const char *model);

/* Inside the ingester's chunk transaction, before its first write: 0 if
 * batch_id is validating with its checkpoint still at line (what this
 * ingester last committed or started from), else ERR_BADSTATE (the batch
 * left validating, or another ingester committed past line: this one must
 * stop, its chunk rolled back). On PostgreSQL the write transaction holds
 * the writer lock, so the check and the chunk are one atomic step. */
int store_ingest_fence(struct store *st, const char *batch_id, int64_t line);

/* End of a successful ingest, atomically: n_total = requests of the batch,
 * model set, validating -> in_progress. ERR_BADSTATE if no longer validating. */
int store_ingest_succeed(struct store *st, const char *batch_id, const char *model, int64_t now);

/* End of a failed ingest, atomically: delete the batch's requests, store
 * errors, validating -> failed. ERR_BADSTATE if no longer validating. */
int store_ingest_fail(struct store *st, const char *batch_id, const char *errors, int64_t now);

/* A batch cancelled while validating: delete its requests and move
 * cancelling -> cancelled, atomically. ERR_BADSTATE if not cancelling. */
int store_ingest_cancelled(struct store *st, const char *batch_id, int64_t now);

/* ---- work distribution (store_lease.c; the protocol layer is jobd/work/lease.h) ------------ */

#define STORE_MODEL_MAX 128           /* bytes of a model name, without NUL */
#define STORE_MODEL_MIXED "mixed"     /* batches.model of a batch whose lines name several models */
#define STORE_LEASE_MAX_REQUESTS 4096 /* requests per lease */
#define STORE_WORKER_MAX_MODELS 64    /* (canonical, name) pairs per worker */
#define STORE_HOURLY_COST_MAX 10000000000LL /* micro-dollars per hour: $10,000/h */

/* Endpoints a worker serves for a model (store_model_name.endpoints). */
#define STORE_EP_CHAT 1u        /* /v1/chat/completions */
#define STORE_EP_COMPLETIONS 2u /* /v1/completions */
#define STORE_EP_EMBEDDINGS 4u  /* /v1/embeddings */
#define STORE_EP_RESPONSES 8u   /* /v1/responses */
#define STORE_EP_DEFAULT 7u     /* a worker that declares none: the first three (a worker
                                 * serves /v1/responses only when it says so) */

/* One name a worker answers to: canonical == name for the model itself,
 * or an alias of it. */
struct store_model_name {
    const char *canonical;
    const char *name;
    unsigned endpoints;     /* STORE_EP_* the worker serves for canonical (its lines of other
                             * endpoints are not leased to it); 0 = STORE_EP_DEFAULT. The union over
                             * the entries of one canonical name counts */
    const char *sha256;     /* lowercase hex SHA-256 of the model file (64 chars), NULL or "" when
                             * unknown (result reuse: jobd/work/reuse.h) */
};

struct store_worker_new {
    const char *name;        /* 1..128 bytes */
    const char *device;      /* 0..128 bytes */
    int64_t kv_tokens;       /* >= 0 */
    int64_t pack_size;       /* >= 0 */
    const struct store_model_name *models; /* 1..STORE_WORKER_MAX_MODELS pairs */
    size_t n_models;
    int64_t hourly_cost_micros; /* 0..STORE_HOURLY_COST_MAX: price of its registered time */
    int unpriced;               /* 1: no one gave a price (no --worker-costs class matched, none
                                 * declared): hourly_cost_micros is 0 and the fleet view flags it */
};

/* Register a worker (new "wrk_" id into id_out). ERR_INVAL for bad fields. */
int store_worker_register(struct store *st, const struct store_worker_new *w, int64_t now,
                          char id_out[ID_MAX]);

/* Bookkeeping on every worker call: last_seen = now, and tokens_per_s when
 * >= 0; a worker last seen before now - opts.worker_ttl_s gets its gap
 * [last_seen, now) recorded (worker_gaps: fleet cost does not count it as
 * registered). ERR_NOTFOUND for an unknown worker (it must register again). */
int store_worker_seen(struct store *st, const char *worker_id, double tokens_per_s, int64_t now);

struct store_model_served {
    char name[STORE_MODEL_MAX + 1];      /* a name requests may use (canonical or alias) */
    char canonical[STORE_MODEL_MAX + 1]; /* the model it belongs to */
    int64_t n_workers;                   /* workers seen since `since` that serve it */
    unsigned endpoints;                  /* STORE_EP_* those workers serve for it (union) */
};

/* Model names served by workers seen at or after `since` (now - worker TTL),
 * sorted by name. *items: heap array (free()). */
int store_models_served(struct store *st, int64_t since, struct store_model_served **items,
                        size_t *n);

struct store_model_waiting {
    char model[STORE_MODEL_MAX + 1]; /* body.model of in_progress batches ... */
    int64_t n_batches;               /* ... that no worker seen since `since` serves */
};

/* Models with in_progress batches that no live worker serves ("waiting for
 * model M"), sorted by name. *items: heap array (free()). */
int store_models_waiting(struct store *st, int64_t since, struct store_model_waiting **items,
                         size_t *n);

/* Retry policy for transient failures and expired leases. */
struct store_retry_policy {
    int max_attempts;       /* attempts before dead-lettering (default 3) */
    int64_t backoff_base_s; /* first retry after base/2..base seconds (default 10) */
    int64_t backoff_cap_s;  /* delay cap (default 600) */
};
#define STORE_RETRY_DEFAULT ((struct store_retry_policy){3, 10, 600})

/* Seconds to wait before attempt `attempts`+1 after `attempts` failed ones:
 * d = min(cap, base * 2^(attempts-1)), result uniform in [d/2, d] (equal
 * jitter; rnd is a uniform 32-bit draw). */
int64_t store_backoff_s(const struct store_retry_policy *p, int64_t attempts, uint32_t rnd);

struct store_lease_ask {
    const char *worker_id;
    const char *model;     /* canonical name the worker registered */
    int max_requests;      /* 1..STORE_LEASE_MAX_REQUESTS */
    int64_t max_tokens;    /* cap on sum(prompt_tokens_est + max_tokens); 0 = none. The
                              first request is taken even if it alone exceeds it */
    size_t max_bytes;      /* cap on the sum of body sizes; 0 = none (same first-request rule) */
    int64_t lease_s;       /* lease duration, > 0 */
};

struct store_leased {
    char id[ID_MAX];
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];
    char *custom_id;           /* heap */
    char *body;                /* heap, the body JSON text as submitted */
    size_t body_len;
    int64_t attempt;           /* 1 for the first attempt */
    int64_t prompt_tokens_est, max_tokens;
    char endpoint[32];         /* its batch's endpoint (the line's url); filled by
                                  lease_acquire, "" from store_lease_ready */
};

struct store_lease {
    char id[ID_MAX];       /* "" when nothing was leased */
    int64_t expires_at;
    size_t n;
    struct store_leased *items; /* heap; store_lease_clear */
};

/* Free the items of a lease result (not l itself). NULL ok. */
void store_lease_clear(struct store_lease *l);

/* ---- leasing primitives ----
 *
 * Which tenant and batch go next (fairness, the pack's caps) is policy, in
 * C, in jobd/work/lease_policy.c; the store offers the small operations it
 * is built from. The policy runs them all inside one transaction
 * (store_tx_enter / store_tx_leave), so an acquire is all or nothing and
 * two acquires never hand out the same request. A backend with row locks
 * implements store_lease_ready as SELECT ... FOR UPDATE SKIP LOCKED, so
 * concurrent acquires skip each other's rows instead of waiting. */

/* The worker must have registered model: mark it seen (last_seen = now).
 * 0, ERR_NOTFOUND (unknown worker), ERR_INVAL (model not registered by this
 * worker), store errors. */
int store_lease_worker_check(struct store *st, const char *worker_id, const char *model, int64_t now);

/* A batch that may have work for a lease. */
struct store_lease_cand {
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];
    int64_t priority;   /* metadata "priority" */
    int64_t expires_at; /* the batch's deadline (created_at + completion window) */
};

/* The in_progress, unexpired (expires_at > now) batches whose model is any
 * of the names worker_id registered for the canonical model, or that mix
 * models (STORE_MODEL_MIXED) one of which is such a name, grouped by
 * tenant id (ascending); within a tenant ordered by priority desc, then
 * expires_at (earliest deadline first), then batch id (oldest first) - the
 * order the lease policy serves them in (it re-sorts each group with
 * lease_batch_cmp, so a backend need only group by tenant). *items: heap
 * array (free(); NULL when *n == 0). 0, ERR_NOMEM, store errors. */
int store_lease_candidates(struct store *st, const char *worker_id, const char *model, int64_t now,
                           struct store_lease_cand **items, size_t *n);

/* What a completion estimate needs (lease_batch_eta, jobd/work/lease.h). */
struct store_backlog_batch {
    struct store_lease_cand cand;   /* batch_id, tenant_id, priority, expires_at */
    int64_t remaining;              /* requests not ended (n_total - n_completed - n_failed) */
    double tokens_per_request;      /* output tokens per remaining request: the mean completion
                                       tokens of its last 256 results, else the mean max_tokens of
                                       256 of its requests, else 0 */
};

struct store_backlog {
    struct store_backlog_batch *items; /* the tenant's in_progress batches of the model (heap) */
    size_t n;
    double tokens_per_s;   /* sum of the last reported throughput of workers seen at or after
                              seen_since that answer to the model name */
    int64_t n_tenants;     /* tenants with unfinished in_progress batches of the model name */
};

/* Read the backlog of tenant_id's batches whose model is `model` (one
 * model name, as the batches store it). 0 or ERR_NOMEM / store errors;
 * release with store_backlog_release. */
int store_backlog_get(struct store *st, const char *tenant_id, const char *model, int64_t seen_since,
                      struct store_backlog *out);
void store_backlog_release(struct store_backlog *b);

/* The tenant served last for model by the round-robin ("" when none). */
int store_lease_rr_get(struct store *st, const char *model, char tenant_id[ID_MAX]);
/* Remember tenant_id as the one served last for model. */
int store_lease_rr_put(struct store *st, const char *model, const char *tenant_id);

/* Up to limit (>= 1) ready requests of batch_id (queued, next_attempt_at <=
 * now) whose body.model is one of the names worker_id registered for the
 * canonical model (a batch may mix models: STORE_MODEL_MIXED), fresh ones
 * in line order then due retries (next_attempt_at order),
 * into items[0 .. *n) (the caller's array of limit entries): id, batch_id,
 * custom_id and body (heap: store_leased_clear), attempt (the one a claim
 * starts), estimates; tenant_id and endpoint are left "". The rows stay
 * queued until store_lease_claim. 0, ERR_INVAL, ERR_NOMEM, store errors
 * (nothing is returned then). */
int store_lease_ready(struct store *st, const char *batch_id, const char *worker_id, const char *model,
                      int64_t now, int limit, struct store_leased *items, size_t *n);
/* Free the heap strings of items[0 .. n) and clear their pointers. NULL ok. */
void store_leased_clear(struct store_leased *items, size_t n);

/* queued -> leased under lease_id (attempts+1) for each of ids, in order.
 * Only inside a transaction (store_tx_enter; else ERR_BADSTATE): on an
 * error the first ids may be claimed already, and the caller's
 * store_tx_leave with that error undoes them. 0, ERR_BADSTATE (one is no
 * longer queued), ERR_INVAL, store errors. */
int store_lease_claim(struct store *st, const char *lease_id, const char (*ids)[ID_MAX], size_t n,
                      int64_t now);

/* Insert the lease row (lease_id made by the caller, "lease_" ids) holding
 * n_requests claimed requests until expires_at, and its lease_batches rows
 * (the batches of the requests claimed under lease_id so far: call it
 * after store_lease_claim). 0, ERR_EXISTS, store errors. */
int store_lease_open(struct store *st, const char *lease_id, const char *worker_id, const char *model,
                     int64_t n_requests, int64_t now, int64_t expires_at);

/* Extend a live lease to max(expires_at, now + extend_s), mark the worker
 * seen (tokens_per_s >= 0 is recorded). *stop_ids (heap array, free(); may be
 * empty) gets the lease's requests the worker should stop: still leased but
 * their batch is cancelling/cancelled or past expires_at, or already ended
 * by a cancel/expiry while this lease held them. ERR_NOTFOUND unknown lease
 * or another worker's; ERR_BADSTATE the lease has ended (swept, or all its
 * requests are done): 409. */
int store_lease_heartbeat(struct store *st, const char *lease_id, const char *worker_id,
                          int64_t extend_s, double tokens_per_s, int64_t now,
                          int64_t *expires_at, char (**stop_ids)[ID_MAX], size_t *n_stop);

enum store_result_kind {
    STORE_RESULT_SUCCESS = 0, /* body = the OpenAI response JSON, status_code 200 */
    STORE_RESULT_INVALID,     /* never retried: body = OpenAI error envelope, status_code 4xx */
    STORE_RESULT_TRANSIENT,   /* retried: error = message */
};

struct store_result {
    const char *request_id;
    enum store_result_kind kind;
    int status_code;
    const char *body;         /* SUCCESS / INVALID */
    size_t body_len;
    const char *error;        /* TRANSIENT: message (may be NULL) */
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    int64_t queue_ms, prefill_ms, decode_ms, gpu_ms;
};

enum store_commit_outcome {
    STORE_COMMIT_OK = 0,      /* success / invalid committed; request ended */
    STORE_COMMIT_RETRY,       /* transient: requeued with backoff */
    STORE_COMMIT_DEAD,        /* transient at the attempt limit: dead-lettered, failed */
    STORE_COMMIT_CLOSED,      /* transient/none on a batch no longer running: failed batch_cancelled */
    STORE_COMMIT_DUPLICATE,   /* this lease already committed it: nothing changed, acknowledged */
    STORE_COMMIT_STALE,       /* not (any more) leased by this lease: refused (409) */
    STORE_COMMIT_UNKNOWN,     /* no such request: refused */
};

/* "ok", "retry", "dead_lettered", "closed", "duplicate", "stale", "unknown". */
const char *store_commit_outcome_name(enum store_commit_outcome o);

/* Commit one lease's results, in one transaction, each exactly once
 * (results.request_id is the key). Per item, into outcomes[i]: a request
 * leased by this lease is committed (SUCCESS: results row + succeeded +
 * usage_ledger row; INVALID: results row with the 4xx envelope + failed;
 * TRANSIENT: queued with backoff, or at the attempt limit dead_letters row +
 * results row max_attempts_exceeded + failed; on a batch that is not
 * in_progress a TRANSIENT ends the request as batch_cancelled/batch_expired).
 * A request this lease already committed is DUPLICATE; one that is queued,
 * leased by another lease, or ended otherwise is STALE. The lease ends
 * (released_at) when it holds no request any more. ERR_NOTFOUND unknown
 * lease or another worker's (worker_id NULL skips that check); ERR_INVAL
 * bad items (nothing committed). */
int store_results_commit(struct store *st, const char *lease_id, const char *worker_id,
                         const struct store_result *items, size_t n,
                         const struct store_retry_policy *policy, int64_t now,
                         enum store_commit_outcome *outcomes);

/* A draining worker gives requests back: each of ids (all the lease's
 * requests when ids is NULL) still leased by this lease goes back to queued,
 * due now, attempts-1 (the attempt does not count); on a batch that is not
 * in_progress it ends as batch_cancelled instead. Others are ignored.
 * *n_released (may be NULL) gets the count. ERR_NOTFOUND unknown lease. */
int store_lease_release(struct store *st, const char *lease_id, const char *worker_id,
                        const char (*ids)[ID_MAX], size_t n, int64_t now, int64_t *n_released);

struct store_sweep_report {
    int64_t n_leases;   /* expired leases ended */
    int64_t n_requeued; /* requests back to queued (attempts+1 already counted at lease) */
    int64_t n_dead;     /* requests dead-lettered */
    int64_t n_closed;   /* requests ended batch_cancelled (their batch is cancelling) */
};

/* End up to max_leases leases whose expires_at <= now, one transaction
 * each: their still-leased requests are requeued with backoff, or
 * dead-lettered (reason lease_expired) at the attempt limit, or ended as
 * batch_cancelled when their batch is cancelling. *rep accumulates. */
int store_lease_sweep(struct store *st, int64_t now, const struct store_retry_policy *policy,
                      int max_leases, struct store_sweep_report *rep);

/* Cancel / expiry work on one batch, at most `chunk` requests per call, one
 * transaction: a cancelling batch (that was in_progress) has queued
 * requests ended as batch_cancelled (leased ones are left to their leases);
 * an in_progress batch whose expires_at <= now has queued and leased
 * requests ended as batch_expired, and once none is left moves to
 * finalizing in the same transaction. *n_done gets the requests ended,
 * *left (may be NULL) 1 if more calls are needed before finalization can
 * start (queued or leased requests remain). Other states: 0, nothing done. */
int store_batch_stop_step(struct store *st, const char *batch_id, int64_t now, int chunk,
                          int64_t *n_done, int *left);

/* ---- dead letters ---- */

struct store_dead_letter {
    char request_id[ID_MAX];
    char batch_id[ID_MAX];
    char tenant_id[ID_MAX];
    char custom_id[STORE_CUSTOM_ID_MAX + 1];
    int64_t attempts;
    char reason[32];
    char *last_error; /* heap or NULL */
    char *line;       /* heap: the original input line */
    int64_t created_at;
};

/* Free an array of dead letters. NULL ok. */
void store_dead_letter_list_free(struct store_dead_letter *items, size_t n);

/* Dead letters ordered by request id (= creation order), strictly after
 * `after` (NULL = from the start), at most limit (1..1000, else ERR_INVAL).
 * batch_id NULL = every batch; tenant_id NULL = every tenant (admin).
 * *has_more: more exist. */
int store_dead_letter_list(struct store *st, const char *tenant_id, const char *batch_id,
                           const char *after, int limit, struct store_dead_letter **items,
                           size_t *n, int *has_more);

/* Retry a dead-lettered request (tenant_id NULL = admin): allowed only while
 * its batch is in_progress and unexpired (ERR_BADSTATE otherwise: once a
 * batch is finalizing its files are being written; resubmit the `line`s in
 * a new batch instead). Deletes the dead letter and the results row and
 * moves the request failed -> queued (attempts 0, due now), in one
 * transaction. ERR_NOTFOUND: no such dead letter (for this tenant). */
int store_dead_letter_retry(struct store *st, const char *tenant_id, const char *request_id,
                            int64_t now);

/* ---- finalization support (jobd/work/finalize.h) ---- */

/* One results row with what an output line needs (borrowed; valid during the callback). */
struct store_result_row {
    int64_t seq;            /* commit sequence number (results.seq): > 0, unique, increasing in commit order */
    const char *request_id;
    const char *custom_id;
    int status_code;        /* 0 = none (SQL NULL) */
    const char *body;       /* NULL = none */
    size_t body_len;
    const char *error_code; /* NULL = none */
    const char *error_message;
    int64_t prompt_tokens, completion_tokens, cached_tokens;
};

/* Call fn for up to limit results rows of a batch with seq > *cursor, in
 * seq order; *cursor advances past the rows seen and *n_rows gets their
 * count (0 = end). A non-zero fn return stops the scan and is returned
 * (*cursor and *n_rows untouched then). *cursor 0 = from the start.
 *
 * The sequence (results.seq): every results row gets a number when it is
 * inserted, from one counter that never goes back (a deleted row's number
 * is never reused), and a row of a batch becomes visible only after every
 * row of that batch with a smaller number. So a reader that pages with
 * "seq > last seen" meets every row committed so far exactly once, whatever
 * commits meanwhile; this is what GET /v1/batches/{id}/results relies on.
 * SQLite: one writer. PostgreSQL: the number is taken under the batch's row
 * lock, held to commit (schema_pg.sql migration 3). */
int store_results_scan(struct store *st, const char *batch_id, int64_t *cursor, int limit,
                       int (*fn)(void *ctx, const struct store_result_row *row), void *ctx,
                       int *n_rows);

/* Batches that need finalization work: in_progress and (every request ended
 * or expires_at <= now), finalizing, or cancelling after having been
 * in_progress. Oldest first, at most max. *ids: heap array (free()). */
int store_batch_ids_to_finalize(struct store *st, int64_t now, int max, char (**ids)[ID_MAX],
                                size_t *n);

/* 1 if the batch has leased requests, else 0 (into *yes). */
int store_batch_has_leased(struct store *st, const char *batch_id, int *yes);

struct store_batch_final {
    struct store_file *output; /* NULL = no output file; else inserted (id filled in) */
    struct store_file *errors; /* NULL = no error file; idem */
    int64_t n_completed, n_failed;
    int64_t prompt_tokens, completion_tokens, cached_tokens;
};

/* The last step of finalization, one transaction: insert the file rows,
 * set output_file_id / error_file_id, request_counts and usage, and move
 * the batch from -> to. ERR_BADSTATE if the batch left `from` meanwhile
 * (nothing written). */
int store_batch_finish(struct store *st, const char *batch_id, enum store_batch_status from,
                       enum store_batch_status to, const struct store_batch_final *fin,
                       int64_t now);

/* ---- idempotency keys ------------------------------------------------------------- */

#define STORE_IDEM_KEY_MAX 255

enum store_idem_outcome {
    STORE_IDEM_NEW = 0,   /* reserved for this caller: run the effect, then complete */
    STORE_IDEM_REPLAY,    /* done before: answer with status_code + body */
    STORE_IDEM_IN_FLIGHT, /* another request with this key is running: 409 */
    STORE_IDEM_MISMATCH,  /* key reused with a different request: 422 */
};

struct store_idem {
    enum store_idem_outcome outcome;
    int status_code; /* REPLAY only */
    char *body;      /* REPLAY only: heap (free()), NUL-terminated */
    size_t body_len;
};

/* sha256(method "\n" path "\n" body) - the request fingerprint. 0 or ERR_CRYPTO/ERR_NOMEM. */
int store_idem_fingerprint(const char *method, const char *path, const void *body, size_t body_len,
                           uint8_t out[SHA256_LEN]);

/* Reserve (tenant, key) for a request with this fingerprint, in its own
 * transaction (not inside store_tx_begin: ERR_BADSTATE). A row older than
 * the retention counts as absent; an in-flight row older than the in-flight
 * timeout is taken over (NEW). ERR_INVAL for a key of 0 or > 255 bytes. */
int store_idem_reserve(struct store *st, const char *tenant_id, const char *key,
                       const uint8_t fp[SHA256_LEN], int64_t now, struct store_idem *out);

/* Store the response of a NEW reservation. Call inside the transaction that
 * commits the effect. ERR_BADSTATE if the key is not reserved and in flight. */
int store_idem_complete(struct store *st, const char *tenant_id, const char *key, int status_code,
                        const void *body, size_t body_len, int64_t now);

/* Drop an in-flight reservation (the handler failed before any effect, so
 * a retry should run afresh). 0 also when there is nothing to drop. */
int store_idem_release(struct store *st, const char *tenant_id, const char *key);

/* Delete keys older than the retention; *n_deleted (may be NULL) gets the count. */
int store_idem_expire(struct store *st, int64_t now, int64_t *n_deleted);


/* ---- admin views and metrics (store_admin.c) ---- */

struct store_worker_info {
    char id[ID_MAX];
    char name[129];
    char device[129];
    char models[1024];      /* canonical names, comma-separated (truncated at 1023 bytes) */
    int64_t registered_at, last_seen;
    double tokens_per_s;    /* last reported */
    int64_t leases_held;    /* leases not yet ended */
    int64_t requests_held;  /* requests leased under them */
    int64_t hourly_cost_micros; /* its price per registered hour (fleet cost) */
};

/* Workers seen at or after `since` (0 = all), newest registration first,
 * at most limit (1..1000, else ERR_INVAL). *items: heap array (free()). */
int store_workers_list(struct store *st, int64_t since, int limit, struct store_worker_info **items,
                       size_t *n);

/* Requests waiting or running, by model (all tenants; metrics). */
struct store_model_depth {
    char model[STORE_MODEL_MAX + 1];
    int64_t queued, leased;
};

struct store_work_stats {
    struct store_model_depth *models; /* heap array (free()), sorted by model */
    size_t n_models;
    int64_t leases_outstanding;       /* leases not yet ended */
    int64_t dead_letters;             /* rows in dead_letters */
};

/* Fill *out (free out->models). 0 or store errors. */
int store_work_stats(struct store *st, struct store_work_stats *out);

/* ==== effects with their idempotency record, one transaction each (store_txn.c) ====
 *
 * The API's writes that an Idempotency-Key covers. Each opens its own
 * transaction (not inside store_tx_begin: ERR_BADSTATE), applies the
 * effect, lets the caller render the answer of what was created, keeps that
 * answer with the key, and commits; any failure rolls everything back and
 * is returned (the key's reservation is the caller's to release). */

struct buf;

/* The answer an Idempotency-Key keeps. Inside the transaction, after the
 * effect, render(arg, obj) renders the answer (obj: the created object, as
 * each operation says) into *body with *status; then, when key is not NULL
 * or "", the pair is stored with (tenant_id, key), reserved before with
 * store_idem_reserve. render returns 0 or an error (the transaction rolls
 * back and the error is returned). */
struct store_idem_answer {
    const char *tenant_id;
    const char *key;                  /* NULL or "": no record */
    int (*render)(void *arg, const void *obj);
    void *arg;
    const int *status;                /* read after render */
    const struct buf *body;           /* read after render */
    int64_t now;                      /* the record's time */
};

/* A batch submission (POST /v1/batches, POST /v1/jobs). */
struct store_submit {
    const char *tenant_id;
    struct store_file *file;          /* NULL, or the input file's row, inserted first (its bytes are in place) */
    struct store_batch_new batch;     /* input_file_id: file->id when file is set */
    int64_t now;
    /* admission: admit(admit_arg, st) runs first inside the transaction
     * (reads the tenant's use); non-zero refuses and is returned. NULL: none. */
    int (*admit)(void *admit_arg, struct store *st);
    void *admit_arg;
    /* budget reservation of the new batch (store_batch_reserve), when reserve is set */
    int reserve;
    int64_t reserve_tokens, reserve_micros, price_in, price_out;
    struct store_idem_answer idem;    /* render's obj: the new const struct store_batch * */
};

/* Admit, insert the file row (if any) and the batch (status validating),
 * reserve its budget and keep the answer, atomically. 0 with the batch id in
 * batch_id; ERR_NOTFOUND (no such input file), ERR_INVAL (not a batch
 * file), admit's or render's error, store errors. */
int store_batch_submit(struct store *st, const struct store_submit *s, char batch_id[ID_MAX]);

/* Insert a file row (store_file_create) and keep the answer (render's obj:
 * f), atomically. 0 or store_file_create's / render's / store errors. */
int store_file_submit(struct store *st, struct store_file *f, const struct store_idem_answer *idem);

/* Cancel a tenant's batch (store_batch_cancel) and keep the answer
 * (render's obj: the batch after the change), atomically. 0, ERR_NOTFOUND,
 * ERR_BADSTATE, render's or store errors. */
int store_batch_cancel_keyed(struct store *st, const char *tenant_id, const char *id, int64_t now,
                             const struct store_idem_answer *idem);

/* Register a webhook endpoint (store_wh_endpoint_create) and keep the
 * answer (render's obj: the new const struct store_wh_endpoint *),
 * atomically. 0, ERR_TOOBIG (too many endpoints), render's or store
 * errors. */
int store_wh_endpoint_create_keyed(struct store *st, const char *tenant_id, const char *url,
                                   const char *event_types, const char *secret, int64_t now,
                                   const struct store_idem_answer *idem);

/* ---- result reuse (jobd/work/reuse.h; schema.sql migration 12) ----
 *
 * reuse_results holds the first computed 2xx result per (tenant, reuse
 * key), recorded by store_results_commit from the requests whose reuse key
 * the lease set. Runs on the thread that owns the store. */

/* The model hash (register's models[].sha256, "" when none was sent) and
 * the device of worker_id's canonical model. 0, ERR_NOTFOUND (no such
 * worker or model), or a database error. */
int store_reuse_worker(struct store *st, const char *worker_id, const char *canonical, char sha[65],
                       char device[129]);

struct store_reuse_hit {
    int status_code;
    char *body;                 /* heap, NUL-terminated; free() */
    size_t body_len;
    int64_t prompt_tokens, completion_tokens; /* what the original computed */
};

/* The result recorded for (tenant_id, key) at or after since into *out.
 * 0, ERR_NOTFOUND (none, or a stored body that is not plain JSON), ERR_NOMEM
 * or a database error. */
int store_reuse_get(struct store *st, const char *tenant_id, const char *key, int64_t since,
                    struct store_reuse_hit *out);

/* Set (key) or clear (NULL) the reuse key of request_id while lease_id
 * holds it (no row changes otherwise); every claim clears it. 0 or a
 * database error. */
int store_reuse_key_set(struct store *st, const char *request_id, const char *lease_id, const char *key);

/* Commit reused answers as lease_id's results in one transaction:
 * store_results_commit of items (each a SUCCESS with 0 tokens: ERR_INVAL
 * otherwise), then reused_tokens[i] on the results and usage_ledger rows
 * of those committed (outcomes[i] STORE_COMMIT_OK). Errors as
 * store_results_commit. */
int store_reuse_commit(struct store *st, const char *lease_id, const char *worker_id,
                       const struct store_result *items, const int64_t *reused_tokens, size_t n,
                       int64_t now, enum store_commit_outcome *outcomes);

/* Delete the reuse_results rows created before `before` (the retention
 * sweep). *n_deleted (may be NULL) gets the count. 0 or a database error. */
int store_reuse_expire(struct store *st, int64_t before, int64_t *n_deleted);

#endif
