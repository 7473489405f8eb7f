/*
 * sdb.h - the store's database driver layer (internal to jobd/store; not an
 * API for anything above it).
 *
 * Design. Every store function (store*.c) talks to its database through
 * this thin layer instead of a client library: prepare / bind / step /
 * column / reset on statements, exec of a script, the row count of the
 * last write and the transaction state of a connection. A driver is a
 * table of functions (struct sdb_ops); a connection and each statement it
 * prepared carry their driver's table, so one store binary can speak to
 * several engines and the store code above stays one copy.
 *
 *   driver     file           connection                   store_open uses it when
 *   SQLite     sdb_sqlite.c   sdb_sqlite_open(path, ...)   store_opts.database is not a
 *                                                          PostgreSQL URL (the default)
 *   PostgreSQL sdb_pg.c       sdb_pg_open(url, ...)        it is one (store_database_is_pg)
 *
 * Both drivers are tested on their own (tests/unit/jobd/store/test_sdb_pg.c
 * for libpq) and under the whole store (the store tests run on each engine).
 *
 * The model is SQLite's (the store was written against it): a statement is
 * compiled once and kept, parameters are numbered from 1 (?N in the SQL
 * text; a driver whose engine spells them differently rewrites the text at
 * prepare time), columns from 0, step returns SDB_ROW per row and SDB_DONE
 * at the end, reset makes the statement runnable again with its bindings
 * kept, clear_bindings sets every parameter to NULL. Text and blob columns
 * stay valid until the next step, reset or finalize of that statement
 * (SQLite's rule; a PGresult-backed driver keeps the result that long).
 * Bound text and blobs are borrowed: the caller keeps them alive until the
 * statement's next reset (SQLITE_STATIC semantics).
 *
 * Result codes are SQLite's primary and extended codes (SDB_* below carry
 * the same numbers), so store_sqlerr translates every driver's errors with
 * one table; another driver maps its own errors onto them (for PostgreSQL:
 * SQLSTATE 23505 -> SDB_CONSTRAINT_UNIQUE, 40001/40P01/55P03 -> SDB_BUSY,
 * 57014 (statement_timeout, cancel) -> SDB_BUSY_TIMEOUT,
 * 08xxx -> SDB_IOERR, a dropped connection -> SDB_BUSY while it reconnects). sdb_errmsg gives the engine's message of the
 * last failure on a connection.
 *
 * Threads: a connection and its statements belong to one thread at a time
 * (the struct store rule, store.h).
 */
#ifndef JOBD_STORE_SDB_H
#define JOBD_STORE_SDB_H

#include <stddef.h>
#include <stdint.h>

/* Result codes: SQLite's numbers (sqlite3.h), checked at build time in sdb_sqlite.c. */
enum {
    SDB_OK = 0,
    SDB_ERROR = 1,
    SDB_INTERNAL = 2,
    SDB_PERM = 3,
    SDB_BUSY = 5,
    SDB_LOCKED = 6,
    SDB_NOMEM = 7,
    SDB_READONLY = 8,
    SDB_IOERR = 10,
    SDB_CORRUPT = 11,
    SDB_FULL = 13,
    SDB_CANTOPEN = 14,
    SDB_TOOBIG = 18,
    SDB_CONSTRAINT = 19,
    SDB_MISUSE = 21,
    SDB_NOTADB = 26,
    SDB_ROW = 100,
    SDB_DONE = 101,
    SDB_CONSTRAINT_FOREIGNKEY = SDB_CONSTRAINT | (3 << 8),
    SDB_CONSTRAINT_PRIMARYKEY = SDB_CONSTRAINT | (6 << 8),
    SDB_CONSTRAINT_UNIQUE = SDB_CONSTRAINT | (8 << 8),
    SDB_BUSY_TIMEOUT = SDB_BUSY | (3 << 8), /* PostgreSQL: statement_timeout cancelled it (57014) */
};

/* Column types (sdb_column_type): SQLite's fundamental datatypes. */
enum { SDB_INTEGER = 1, SDB_FLOAT = 2, SDB_TEXT = 3, SDB_BLOB = 4, SDB_NULL = 5 };

struct sdb;
struct sdb_stmt;

/* A driver's functions; each takes the object it is called on first. The
 * sdb_* wrappers below dispatch through it and are what store*.c call. */
struct sdb_ops {
    const char *name; /* "sqlite", "postgresql" */
    void (*close)(struct sdb *db);
    int (*prepare)(struct sdb *db, const char *sql, struct sdb_stmt **out);
    int (*exec)(struct sdb *db, const char *script);
    int64_t (*changes)(struct sdb *db);
    int64_t (*last_insert_rowid)(struct sdb *db);
    int (*in_tx)(struct sdb *db);
    const char *(*errmsg)(struct sdb *db);
    void (*finalize)(struct sdb_stmt *s);
    int (*step)(struct sdb_stmt *s);
    void (*reset)(struct sdb_stmt *s);
    void (*clear_bindings)(struct sdb_stmt *s);
    int (*bind_param_count)(struct sdb_stmt *s);
    int (*bind_null)(struct sdb_stmt *s, int i);
    int (*bind_int64)(struct sdb_stmt *s, int i, int64_t v);
    int (*bind_double)(struct sdb_stmt *s, int i, double v);
    int (*bind_text)(struct sdb_stmt *s, int i, const char *v, int len);
    int (*bind_blob)(struct sdb_stmt *s, int i, const void *v, int len);
    int (*column_type)(struct sdb_stmt *s, int col);
    int64_t (*column_int64)(struct sdb_stmt *s, int col);
    double (*column_double)(struct sdb_stmt *s, int col);
    const unsigned char *(*column_text)(struct sdb_stmt *s, int col);
    const void *(*column_blob)(struct sdb_stmt *s, int col);
    int (*column_bytes)(struct sdb_stmt *s, int col);
};

/* The head of every driver's connection and statement object. */
struct sdb {
    const struct sdb_ops *ops;
};
struct sdb_stmt {
    const struct sdb_ops *ops;
};

/* ---- the SQLite driver (sdb_sqlite.c) ---------------------------------------- */

/* Open (creating if missing) the SQLite database at path with extended
 * result codes and the busy timeout; no pragmas (store_open sets them).
 * SDB_OK with *out set, or an SDB_* code (*out then NULL; the message is
 * logged by the caller through sdb_errstr). */
int sdb_sqlite_open(const char *path, int busy_timeout_ms, struct sdb **out);

/* The engine's description of a result code (static string). */
const char *sdb_errstr(int rc);

/* ---- the PostgreSQL driver (sdb_pg.c) ------------------------------------------- */

/* Connect to url (a libpq connection string or postgresql:// URI), then set
 * lock_timeout (a lock wait longer than that is SDB_BUSY, like SQLite's
 * busy timeout), statement_timeout (a statement that runs longer is
 * cancelled by the server: SDB_BUSY, the connection stays usable; 0 = none),
 * UTC and client_min_messages=warning; both timeouts are set again on every
 * reconnected session. SDB_OK with *out set; otherwise SDB_CANTOPEN (cannot
 * connect, wrong password, no such database) or another code, and libpq's
 * message in err (err_cap bytes). */
int sdb_pg_open(const char *url, int lock_timeout_ms, int statement_timeout_ms, struct sdb **out, char *err,
                size_t err_cap);

/* Rewrite SQLite-style ?N placeholders as $N outside quoted strings and
 * identifiers; *out (caller frees) and the highest N in *nparams. SDB_OK,
 * SDB_NOMEM, or SDB_ERROR (N out of 1..64, a bare ?, an unclosed quote).
 * Pure; exposed for tests. */
int sdb_pg_rewrite(const char *sql, char **out, int *nparams);

/* Start s (bound, not stepped) on its PostgreSQL connection and return
 * without waiting for the server: the bound values are copied on the way
 * out, so the caller may rebind them or free what they borrowed. The next
 * sdb_step of s returns what its first step would have (SDB_ROW, SDB_DONE
 * or the error); any other call on the connection first waits for s and
 * keeps that outcome for s's next step; sdb_reset of s waits and drops it.
 * One statement in flight per connection: the caller overlaps its own work
 * with the server's (the ingest parses the next rows while the last ones
 * are inserted). SDB_OK, the error of sending it, or SDB_MISUSE (another
 * engine, or s already started). */
int sdb_pg_send(struct sdb_stmt *s);

/* LISTEN on channel (an identifier: [a-z_]) on a PostgreSQL connection
 * kept for it (one thread); re-issued by sdb_pg_wait after a reconnect or
 * a failed LISTEN. SDB_OK or an error (SDB_MISUSE on another engine); after
 * an error other than SDB_MISUSE sdb_pg_wait keeps trying. */
int sdb_pg_listen(struct sdb *db, const char *channel);

/* Wait up to timeout_ms for notifications on a LISTENing connection and
 * consume them: 1 when at least one arrived, or when LISTEN was issued
 * again (after a reconnect, by this call or by a statement on the same
 * connection, or after a failed LISTEN; what was sent meanwhile is lost, so
 * the caller treats it as one), 0 on timeout, SDB_BUSY while the connection
 * is down or LISTEN keeps failing (reconnects and LISTENs are retried with
 * backoffs of 100 ms doubling to 5 s, waiting at most timeout_ms per
 * call). */
int sdb_pg_wait(struct sdb *db, int timeout_ms);

/* Tests: the next n LISTENs on db (a PostgreSQL connection) fail as a
 * server error would, so the retry of a failed LISTEN can be tested
 * deterministically. */
void sdb_pg_fail_listens(struct sdb *db, int n);

/* The SDB_* code of a PostgreSQL SQLSTATE (5 characters; NULL -> SDB_ERROR):
 * 23505 CONSTRAINT_UNIQUE, 23503 CONSTRAINT_FOREIGNKEY, other 23xxx
 * CONSTRAINT, 40001 / 40P01 / 55P03 / 57014 BUSY, 53100 FULL, 53200 NOMEM,
 * 08xxx / 53xxx / 57Pxx / 58xxx IOERR, 28xxx / 42501 PERM, 22001 / 54xxx
 * TOOBIG, XX001 / XX002 CORRUPT, 25006 READONLY, the rest ERROR. Pure. */
int sdb_pg_sqlstate(const char *state);

/* ---- dispatch ------------------------------------------------------------------ */

/* Close the connection (statements must be finalized first). NULL ok. */
static inline void sdb_close(struct sdb *db)
{
    if (db)
        db->ops->close(db);
}
/* Compile sql (one statement) into *out: SDB_OK or an error code. */
static inline int sdb_prepare(struct sdb *db, const char *sql, struct sdb_stmt **out)
{
    return db->ops->prepare(db, sql, out);
}
/* Run a script of ';'-separated statements without results: SDB_OK or an
 * error code (message: sdb_errmsg). */
static inline int sdb_exec(struct sdb *db, const char *script)
{
    return db->ops->exec(db, script);
}
/* Rows changed by the last INSERT/UPDATE/DELETE on this connection. */
static inline int64_t sdb_changes(struct sdb *db)
{
    return db->ops->changes(db);
}
/* Row id of the last INSERT into a rowid table (SQLite only; a driver
 * without rowids returns 0 and the statement must use RETURNING instead). */
static inline int64_t sdb_last_insert_rowid(struct sdb *db)
{
    return db->ops->last_insert_rowid(db);
}
/* 1 while a transaction is open on the connection. */
static inline int sdb_in_tx(struct sdb *db)
{
    return db->ops->in_tx(db);
}
static inline const char *sdb_errmsg(struct sdb *db)
{
    return db->ops->errmsg(db);
}
/* Free a statement. NULL ok. */
static inline void sdb_finalize(struct sdb_stmt *s)
{
    if (s)
        s->ops->finalize(s);
}
/* SDB_ROW, SDB_DONE or an error code. */
static inline int sdb_step(struct sdb_stmt *s)
{
    return s->ops->step(s);
}
static inline void sdb_reset(struct sdb_stmt *s)
{
    s->ops->reset(s);
}
static inline void sdb_clear_bindings(struct sdb_stmt *s)
{
    s->ops->clear_bindings(s);
}
/* The highest parameter number in the statement. */
static inline int sdb_bind_parameter_count(struct sdb_stmt *s)
{
    return s->ops->bind_param_count(s);
}
static inline int sdb_bind_null(struct sdb_stmt *s, int i)
{
    return s->ops->bind_null(s, i);
}
static inline int sdb_bind_int64(struct sdb_stmt *s, int i, int64_t v)
{
    return s->ops->bind_int64(s, i, v);
}
static inline int sdb_bind_int(struct sdb_stmt *s, int i, int v)
{
    return s->ops->bind_int64(s, i, v);
}
static inline int sdb_bind_double(struct sdb_stmt *s, int i, double v)
{
    return s->ops->bind_double(s, i, v);
}
/* len < 0: up to the NUL. Borrowed until the next reset. */
static inline int sdb_bind_text(struct sdb_stmt *s, int i, const char *v, int len)
{
    return s->ops->bind_text(s, i, v, len);
}
static inline int sdb_bind_blob(struct sdb_stmt *s, int i, const void *v, int len)
{
    return s->ops->bind_blob(s, i, v, len);
}
static inline int sdb_column_type(struct sdb_stmt *s, int col)
{
    return s->ops->column_type(s, col);
}
static inline int64_t sdb_column_int64(struct sdb_stmt *s, int col)
{
    return s->ops->column_int64(s, col);
}
static inline int sdb_column_int(struct sdb_stmt *s, int col)
{
    return (int)s->ops->column_int64(s, col);
}
static inline double sdb_column_double(struct sdb_stmt *s, int col)
{
    return s->ops->column_double(s, col);
}
/* NUL-terminated text, or NULL for SQL NULL. */
static inline const unsigned char *sdb_column_text(struct sdb_stmt *s, int col)
{
    return s->ops->column_text(s, col);
}
static inline const void *sdb_column_blob(struct sdb_stmt *s, int col)
{
    return s->ops->column_blob(s, col);
}
/* Bytes of the text or blob of the column (after column_text/_blob). */
static inline int sdb_column_bytes(struct sdb_stmt *s, int col)
{
    return s->ops->column_bytes(s, col);
}

#endif
