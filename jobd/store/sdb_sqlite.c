/*
 * sdb_sqlite.c - the SQLite driver of the store's driver layer (sdb.h).
 *
 * Each function is one sqlite3_* call: the driver layer was modelled on
 * SQLite's C API, so nothing is translated here (result codes, parameter
 * numbering and column lifetimes are SQLite's own). Bound text and blobs
 * are SQLITE_STATIC: the caller keeps them alive until the next reset.
 */
#include "jobd/store/sdb.h"

#include <stdlib.h>

#include <sqlite3.h>

_Static_assert(SDB_OK == SQLITE_OK && SDB_ERROR == SQLITE_ERROR && SDB_INTERNAL == SQLITE_INTERNAL &&
                   SDB_PERM == SQLITE_PERM && SDB_BUSY == SQLITE_BUSY && SDB_LOCKED == SQLITE_LOCKED &&
                   SDB_NOMEM == SQLITE_NOMEM && SDB_READONLY == SQLITE_READONLY &&
                   SDB_IOERR == SQLITE_IOERR && SDB_CORRUPT == SQLITE_CORRUPT &&
                   SDB_FULL == SQLITE_FULL && SDB_CANTOPEN == SQLITE_CANTOPEN &&
                   SDB_TOOBIG == SQLITE_TOOBIG && SDB_CONSTRAINT == SQLITE_CONSTRAINT &&
                   SDB_MISUSE == SQLITE_MISUSE && SDB_NOTADB == SQLITE_NOTADB &&
                   SDB_ROW == SQLITE_ROW && SDB_DONE == SQLITE_DONE,
               "sdb result codes are SQLite's");
_Static_assert(SDB_BUSY_TIMEOUT == SQLITE_BUSY_TIMEOUT && SDB_CONSTRAINT_FOREIGNKEY == SQLITE_CONSTRAINT_FOREIGNKEY &&
                   SDB_CONSTRAINT_PRIMARYKEY == SQLITE_CONSTRAINT_PRIMARYKEY &&
                   SDB_CONSTRAINT_UNIQUE == SQLITE_CONSTRAINT_UNIQUE,
               "sdb extended codes are SQLite's");
_Static_assert(SDB_INTEGER == SQLITE_INTEGER && SDB_FLOAT == SQLITE_FLOAT && SDB_TEXT == SQLITE_TEXT &&
                   SDB_BLOB == SQLITE_BLOB && SDB_NULL == SQLITE_NULL,
               "sdb column types are SQLite's");

struct sdb_sqlite {
    struct sdb base; /* first: a struct sdb * is a struct sdb_sqlite * */
    sqlite3 *db;
};

struct sdb_sqlite_stmt {
    struct sdb_stmt base;
    sqlite3_stmt *s;
};

#define DB(d) (((struct sdb_sqlite *)(d))->db)
#define ST(x) (((struct sdb_sqlite_stmt *)(x))->s)

static const struct sdb_ops sdb_sqlite_ops;

static void lite_close(struct sdb *d)
{
    sqlite3_close(DB(d));
    free(d);
}

static int lite_prepare(struct sdb *d, const char *sql, struct sdb_stmt **out)
{
    struct sdb_sqlite_stmt *w = malloc(sizeof *w);
    if (!w)
        return SDB_NOMEM;
    w->base.ops = &sdb_sqlite_ops;
    int r = sqlite3_prepare_v3(DB(d), sql, -1, SQLITE_PREPARE_PERSISTENT, &w->s, NULL);
    if (r != SQLITE_OK) {
        free(w);
        return r;
    }
    *out = &w->base;
    return SDB_OK;
}

static int lite_exec(struct sdb *d, const char *script)
{
    return sqlite3_exec(DB(d), script, NULL, NULL, NULL);
}

static int64_t lite_changes(struct sdb *d)
{
    return sqlite3_changes(DB(d));
}

static int64_t lite_last_insert_rowid(struct sdb *d)
{
    return sqlite3_last_insert_rowid(DB(d));
}

static int lite_in_tx(struct sdb *d)
{
    return !sqlite3_get_autocommit(DB(d));
}

static const char *lite_errmsg(struct sdb *d)
{
    return sqlite3_errmsg(DB(d));
}

static void lite_finalize(struct sdb_stmt *s)
{
    sqlite3_finalize(ST(s));
    free(s);
}

static int lite_step(struct sdb_stmt *s)
{
    return sqlite3_step(ST(s));
}

static void lite_reset(struct sdb_stmt *s)
{
    sqlite3_reset(ST(s));
}

static void lite_clear_bindings(struct sdb_stmt *s)
{
    sqlite3_clear_bindings(ST(s));
}

static int lite_bind_param_count(struct sdb_stmt *s)
{
    return sqlite3_bind_parameter_count(ST(s));
}

static int lite_bind_null(struct sdb_stmt *s, int i)
{
    return sqlite3_bind_null(ST(s), i);
}

static int lite_bind_int64(struct sdb_stmt *s, int i, int64_t v)
{
    return sqlite3_bind_int64(ST(s), i, v);
}

static int lite_bind_double(struct sdb_stmt *s, int i, double v)
{
    return sqlite3_bind_double(ST(s), i, v);
}

static int lite_bind_text(struct sdb_stmt *s, int i, const char *v, int len)
{
    return sqlite3_bind_text(ST(s), i, v, len, SQLITE_STATIC);
}

static int lite_bind_blob(struct sdb_stmt *s, int i, const void *v, int len)
{
    return sqlite3_bind_blob(ST(s), i, v, len, SQLITE_STATIC);
}

static int lite_column_type(struct sdb_stmt *s, int col)
{
    return sqlite3_column_type(ST(s), col);
}

static int64_t lite_column_int64(struct sdb_stmt *s, int col)
{
    return sqlite3_column_int64(ST(s), col);
}

static double lite_column_double(struct sdb_stmt *s, int col)
{
    return sqlite3_column_double(ST(s), col);
}

static const unsigned char *lite_column_text(struct sdb_stmt *s, int col)
{
    return sqlite3_column_text(ST(s), col);
}

static const void *lite_column_blob(struct sdb_stmt *s, int col)
{
    return sqlite3_column_blob(ST(s), col);
}

static int lite_column_bytes(struct sdb_stmt *s, int col)
{
    return sqlite3_column_bytes(ST(s), col);
}

static const struct sdb_ops sdb_sqlite_ops = {
    .name = "sqlite",
    .close = lite_close,
    .prepare = lite_prepare,
    .exec = lite_exec,
    .changes = lite_changes,
    .last_insert_rowid = lite_last_insert_rowid,
    .in_tx = lite_in_tx,
    .errmsg = lite_errmsg,
    .finalize = lite_finalize,
    .step = lite_step,
    .reset = lite_reset,
    .clear_bindings = lite_clear_bindings,
    .bind_param_count = lite_bind_param_count,
    .bind_null = lite_bind_null,
    .bind_int64 = lite_bind_int64,
    .bind_double = lite_bind_double,
    .bind_text = lite_bind_text,
    .bind_blob = lite_bind_blob,
    .column_type = lite_column_type,
    .column_int64 = lite_column_int64,
    .column_double = lite_column_double,
    .column_text = lite_column_text,
    .column_blob = lite_column_blob,
    .column_bytes = lite_column_bytes,
};

int sdb_sqlite_open(const char *path, int busy_timeout_ms, struct sdb **out)
{
    *out = NULL;
    struct sdb_sqlite *w = calloc(1, sizeof *w);
    if (!w)
        return SDB_NOMEM;
    w->base.ops = &sdb_sqlite_ops;
    int r = sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                            NULL);
    if (r != SQLITE_OK) {
        sqlite3_close(w->db);
        free(w);
        return r;
    }
    sqlite3_extended_result_codes(w->db, 1);
    sqlite3_busy_timeout(w->db, busy_timeout_ms > 0 ? busy_timeout_ms : 0);
    *out = &w->base;
    return SDB_OK;
}

const char *sdb_errstr(int rc)
{
    return sqlite3_errstr(rc);
}
