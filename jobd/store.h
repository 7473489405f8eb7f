/*
 * store.h - jobd's durable state: one SQLite database in the data directory.
 *
 * Design. The schema lives in schema.sql (repo root), embedded at build time
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
 * Errors: functions return 0 or a negative ERR_* (common/err.h). SQLite
 * result codes are translated here (BUSY/LOCKED -> ERR_BUSY, CORRUPT/NOTADB
 * -> ERR_CORRUPT, IOERR/FULL/CANTOPEN -> ERR_IO, NOMEM -> ERR_NOMEM,
 * CONSTRAINT -> ERR_EXISTS or ERR_INVAL, others ERR_INTERNAL) and the
 * original message is logged. Out-parameters are written only on success.
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
 */
#ifndef JOBD_STORE_H
#define JOBD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/crypto.h"
#include "common/id.h"

/* The embedded schema.sql (build/gen/schema_sql.c), NUL-terminated. */
extern const char store_schema_sql[];

struct store;

enum store_durability {
    STORE_DURABILITY_FULL = 0, /* synchronous=FULL: every commit is synced (default) */
    STORE_DURABILITY_NORMAL,   /* synchronous=NORMAL: synced at checkpoints only */
};

struct store_opts {
    enum store_durability durability;
    int busy_timeout_ms;             /* wait for the write lock this long (default 5000) */
    int64_t idem_retention_s;        /* idempotency keys are kept this long (default 86400) */
    int64_t idem_inflight_timeout_s; /* an in-flight reservation older than this is
                                        abandoned (its holder died) and may be taken over
                                        (default 300) */
};
#define STORE_OPTS_DEFAULT ((struct store_opts){STORE_DURABILITY_FULL, 5000, 86400, 300})

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

/* The data directory given to store_open (borrowed). */
const char *store_data_dir(const struct store *st);

/* Current PRAGMA user_version into *out. 0 or an ERR_*. */
int store_schema_version(struct store *st, int *out);

/* Highest migration number in the embedded schema. */
int store_schema_latest(void);

/* ---- transactions ---------------------------------------------------------- */

/* BEGIN IMMEDIATE (waits for the write lock up to busy_timeout). Not nestable:
 * ERR_BADSTATE if one is open. 0, ERR_BUSY, ERR_IO... */
int store_tx_begin(struct store *st);
/* COMMIT. On failure the transaction is rolled back and the error returned. */
int store_tx_commit(struct store *st);
/* ROLLBACK; no-op when no transaction is open. Can't fail. */
void store_tx_rollback(struct store *st);

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
};

/* Free metadata and errors of b (not b itself). NULL ok. */
void store_batch_release(struct store_batch *b);
/* Free an array returned by store_batch_list (releases each). NULL ok. */
void store_batch_list_free(struct store_batch *items, size_t n);

struct store_batch_new {
    const char *endpoint;         /* "/v1/chat/completions" or "/v1/completions" */
    const char *input_file_id;    /* a file of this tenant with purpose "batch" */
    int64_t completion_window_s;  /* > 0 */
    const char *metadata;         /* JSON object text or NULL: <= 16 pairs, string
                                     values, key <= 64 bytes, value <= 512 bytes */
};

/* Create a batch in status validating (expires_at = now + window). A
 * metadata "priority" value must be the decimal text of an integer in
 * -1000..1000 (else ERR_INVAL); it orders the tenant's own batches for
 * leasing (jobd/lease.h). Checks
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

/* THE batch state change: UPDATE ... SET status=to, <to>_at=now WHERE id=?
 * AND status=from. ERR_BADSTATE if from->to is not an edge or the batch is
 * no longer in `from` (row unchanged); ERR_NOTFOUND if no such batch. */
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

/* ---- ingest support (used by jobd/ingest.c) ----------------------------------------- */

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

/* Insert one queued request (a new "req_" id). Must run inside
 * store_tx_begin. ERR_EXISTS if the custom_id is already used in the batch:
 * *dup_line (may be NULL) gets that earlier request's line number. */
int store_request_add(struct store *st, const struct store_request_new *r, int64_t *dup_line);

/* Record ingest progress of a validating batch (inside the caller's chunk
 * transaction): lines 1..line done, n_requests committed, errors so far
 * (JSON array or NULL), the batch's model so far (or NULL). ERR_BADSTATE if the batch left 'validating' (it was
 * cancelled): the caller stops. */
int store_ingest_checkpoint(struct store *st, const char *batch_id, int64_t line,
                            int64_t n_requests, const char *errors, const char *model);

/* End of a successful ingest, atomically: n_total = requests of the batch,
 * model set, validating -> in_progress. ERR_BADSTATE if no longer validating. */
int store_ingest_succeed(struct store *st, const char *batch_id, const char *model, int64_t now);

/* End of a failed ingest, atomically: delete the batch's requests, store
 * errors, validating -> failed. ERR_BADSTATE if no longer validating. */
int store_ingest_fail(struct store *st, const char *batch_id, const char *errors, int64_t now);

/* A batch cancelled while validating: delete its requests and move
 * cancelling -> cancelled, atomically. ERR_BADSTATE if not cancelling. */
int store_ingest_cancelled(struct store *st, const char *batch_id, int64_t now);

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

#endif
