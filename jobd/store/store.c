/*
 * store.c - the store's core: open, pragmas, migrations, the statement
 * cache, transactions and error translation; tenants and API keys.
 * (Files, batches and requests: store_obj.c; idempotency: store_idem.c.)
 * Runs on whichever thread owns the struct store (see store.h).
 */
#include "jobd/store/store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/blob/blob.h"

/* ---- errors and statements ---------------------------------------------------- */

int store_sqlerr(struct store *st, int sqlite_rc, const char *what)
{
    int prim = sqlite_rc & 0xff;
    int ext = sqlite_rc;
    const char *msg = st && st->db ? sdb_errmsg(st->db) : sdb_errstr(sqlite_rc);
    int e;
    switch (prim) {
    case SDB_BUSY:
    case SDB_LOCKED: e = ERR_BUSY; break;
    case SDB_NOMEM: e = ERR_NOMEM; break;
    case SDB_CORRUPT:
    case SDB_NOTADB: e = ERR_CORRUPT; break;
    case SDB_FULL: e = ERR_NOSPACE; break;
    case SDB_IOERR:
    case SDB_CANTOPEN:
    case SDB_READONLY:
    case SDB_PERM: e = ERR_IO; break;
    case SDB_CONSTRAINT:
        e = (ext == SDB_CONSTRAINT_UNIQUE || ext == SDB_CONSTRAINT_PRIMARYKEY) ? ERR_EXISTS
            : ext == SDB_CONSTRAINT_FOREIGNKEY                                    ? ERR_NOTFOUND
                                                                                     : ERR_INVAL;
        break;
    case SDB_TOOBIG: e = ERR_TOOBIG; break;
    default: e = ERR_INTERNAL; break;
    }
    /* Constraint violations are expected outcomes (duplicates), and so is a
     * lock wait that gives up; the rest are not. A statement that ran past
     * its timeout (PostgreSQL's statement_timeout) is busy for the caller,
     * but an operator wants to see it. */
    log_write(ext == SDB_BUSY_TIMEOUT                        ? LOG_WARN
              : prim == SDB_CONSTRAINT || prim == SDB_BUSY ? LOG_DEBUG
                                                           : LOG_ERROR,
              NULL,
              "store: %s: %s error %d (%s): %s", what, st && st->db ? st->db->ops->name : "sqlite",
              sqlite_rc, sdb_errstr(sqlite_rc),
              msg ? msg : "");
    return e;
}

static const char *const store_sql_text[S__COUNT] = {
#define STORE_SQL_TEXT_(name, sql) sql,
    STORE_SQL(STORE_SQL_TEXT_)
    STORE_SQL_WEBHOOK(STORE_SQL_TEXT_)
#undef STORE_SQL_TEXT_
};

/* The PostgreSQL texts that differ (NULL: the common text serves). */
static const char *const store_sql_pg_text[S__COUNT] = {
#define STORE_SQL_PG_TEXT_(name, sql) [S_##name] = sql,
    STORE_SQL_PG(STORE_SQL_PG_TEXT_)
#undef STORE_SQL_PG_TEXT_
};

static const char *store_sql(const struct store *st, enum store_stmt_id id)
{
    return st->pg && store_sql_pg_text[id] ? store_sql_pg_text[id] : store_sql_text[id];
}

struct sdb_stmt *store_stmt(struct store *st, enum store_stmt_id id, int *rc)
{
    struct sdb_stmt *s = st->stmts[id];
    if (s) {
        sdb_reset(s);
        sdb_clear_bindings(s);
        return s;
    }
    int r = sdb_prepare(st->db, store_sql(st, id), &s);
    if (r != SDB_OK) {
        *rc = store_sqlerr(st, r, store_sql(st, id));
        return NULL;
    }
    st->stmts[id] = s;
    return s;
}

int store_step_done(struct store *st, struct sdb_stmt *s, const char *what)
{
    int r;
    while ((r = sdb_step(s)) == SDB_ROW)
        ;
    int rc = r == SDB_DONE ? 0 : store_sqlerr(st, r, what);
    sdb_reset(s);
    return rc;
}

static int store_run(struct store *st, enum store_stmt_id id)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    return s ? store_step_done(st, s, store_sql(st, id)) : rc;
}

int store_bind_text(struct store *st, struct sdb_stmt *s, int i, const char *v)
{
    int r = v ? sdb_bind_text(s, i, v, -1) : sdb_bind_null(s, i);
    return r == SDB_OK ? 0 : store_sqlerr(st, r, "bind");
}

int store_bind_int(struct store *st, struct sdb_stmt *s, int i, int64_t v)
{
    int r = sdb_bind_int64(s, i, v);
    return r == SDB_OK ? 0 : store_sqlerr(st, r, "bind");
}

void store_col_text(struct sdb_stmt *s, int col, char *dst, size_t cap)
{
    const unsigned char *t = sdb_column_text(s, col);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

int store_rows_collect(struct store *st, struct sdb_stmt *s, const struct store_rows *how, void *ctx,
                       int limit, void **items, size_t *n, int *has_more)
{
    const size_t esz = how->elem_size;
    unsigned char *arr = NULL;
    size_t cnt = 0, cap = 0;
    int r = SDB_DONE, rc = 0, more = 0;
    if (limit > 0) {
        if (!(arr = calloc((size_t)limit, esz))) {
            sdb_reset(s);
            return ERR_NOMEM;
        }
        cap = (size_t)limit;
    }
    while ((r = sdb_step(s)) == SDB_ROW) {
        if (limit > 0 && cnt == (size_t)limit) {
            more = 1;
            break;
        }
        if (cnt == cap) {
            void *p = arr;
            if ((rc = buf_grow_array(&p, &cap, cnt + 1, esz)))
                break;
            arr = p;
        }
        unsigned char *e = arr + cnt * esz;
        memset(e, 0, esz);
        if ((rc = how->row(s, e, ctx)))
            break;
        cnt++;
    }
    if (!rc && !more && r != SDB_DONE)
        rc = store_sqlerr(st, r, how->what);
    sdb_reset(s);
    if (rc) {
        for (size_t i = 0; how->release && i < cnt; i++)
            how->release(arr + i * esz);
        free(arr);
        return rc;
    }
    *items = arr;
    *n = cnt;
    if (has_more)
        *has_more = more;
    return 0;
}

static int id_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    (void)ctx;
    store_col_text(s, 0, elem, ID_MAX);
    return 0;
}

int store_collect_ids(struct store *st, struct sdb_stmt *s, char (**ids)[ID_MAX], size_t *n)
{
    static const struct store_rows how = {ID_MAX, id_row, NULL, "collect ids"};
    void *arr;
    int rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL);
    if (!rc)
        *ids = arr;
    return rc;
}

char *store_col_dup(struct sdb_stmt *s, int col, int *err)
{
    const unsigned char *t = sdb_column_text(s, col);
    if (!t)
        return NULL;
    char *d = strdup((const char *)t);
    if (!d)
        *err = ERR_NOMEM;
    return d;
}

/* ---- PostgreSQL array literals ------------------------------------------------ */

int store_arr_begin(struct buf *b)
{
    buf_reset(b);
    return buf_append_byte(b, '{') ? ERR_NOMEM : 0;
}

static int arr_sep(struct buf *b)
{
    return b->len > 1 && buf_append_byte(b, ',') ? ERR_NOMEM : 0;
}

int store_arr_text(struct buf *b, const char *v)
{
    if (arr_sep(b))
        return ERR_NOMEM;
    if (!v)
        return buf_append_str(b, "NULL") ? ERR_NOMEM : 0;
    if (buf_reserve(b, strlen(v) + 2) || buf_append_byte(b, '"'))
        return ERR_NOMEM;
    for (const char *p = v; *p; p++)
        if (((*p == '"' || *p == '\\') && buf_append_byte(b, '\\')) || buf_append_byte(b, *p))
            return ERR_NOMEM;
    return buf_append_byte(b, '"') ? ERR_NOMEM : 0;
}

int store_arr_textn(struct buf *b, const char *v, size_t n)
{
    if (arr_sep(b) || buf_reserve(b, n + 2) || buf_append_byte(b, '"'))
        return ERR_NOMEM;
    for (size_t i = 0; i < n && v[i]; i++) /* a text ends at a NUL, as a bound one does (sdb_pg) */
        if (((v[i] == '"' || v[i] == '\\') && buf_append_byte(b, '\\')) || buf_append_byte(b, v[i]))
            return ERR_NOMEM;
    return buf_append_byte(b, '"') ? ERR_NOMEM : 0;
}

int store_arr_int(struct buf *b, int64_t v)
{
    if (arr_sep(b))
        return ERR_NOMEM;
    return buf_printf(b, "%lld", (long long)v) ? ERR_NOMEM : 0;
}

int store_arr_hex(struct buf *b, const void *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    if (arr_sep(b) || buf_reserve(b, 2 * n + 2) || buf_append_byte(b, '"'))
        return ERR_NOMEM;
    const unsigned char *u = p;
    for (size_t i = 0; i < n; i++) {
        char two[2] = {hx[u[i] >> 4], hx[u[i] & 15]};
        if (buf_append(b, two, 2))
            return ERR_NOMEM;
    }
    return buf_append_byte(b, '"') ? ERR_NOMEM : 0;
}

int store_arr_end(struct buf *b)
{
    return buf_append_byte(b, '}') ? ERR_NOMEM : 0;
}

/* ---- transactions -------------------------------------------------------------- */

/* PostgreSQL, depth 0: BEGIN and the writer lock (exclusive, or shared for
 * the row-locked hot paths) in one round trip (a simple-protocol script). */
static int pg_begin(struct store *st, int shared)
{
    st->notify = 0;
    int r = sdb_exec(st->db, shared ? STORE_PG_BEGIN_SHARED : STORE_PG_BEGIN_EXCL);
    if (r != SDB_OK) {
        int rc = store_sqlerr(st, r, shared ? "begin (shared writer lock)" : "begin (writer lock)");
        if (sdb_in_tx(st->db))
            store_run(st, S_ROLLBACK);
        return rc;
    }
    st->depth++;
    return 0;
}

int store_w_begin(struct store *st)
{
    if (st->pg && st->depth == 0)
        return pg_begin(st, 0);
    int rc = store_run(st, st->depth == 0 ? S_BEGIN : S_SAVEPOINT);
    if (!rc)
        st->depth++;
    return rc;
}

int store_work_listen(struct store *st)
{
    if (!st->pg)
        return ERR_UNSUPPORTED;
    int r = sdb_pg_listen(st->db, STORE_PG_CHANNEL);
    return r == SDB_OK ? 0 : store_sqlerr(st, r, "listen");
}

int store_work_wait(struct store *st, int timeout_ms, int *woke)
{
    if (!st->pg)
        return ERR_UNSUPPORTED;
    int r = sdb_pg_wait(st->db, timeout_ms);
    if (r == 0 || r == 1) {
        *woke = r;
        return 0;
    }
    return r == SDB_BUSY ? ERR_BUSY : store_sqlerr(st, r, "wait for notifications");
}

int store_w_begin_shared(struct store *st)
{
    if (st->pg && st->depth == 0)
        return pg_begin(st, 1);
    return store_w_begin(st);
}

int store_r_begin(struct store *st)
{
    int rc = store_run(st, st->depth == 0 ? S_BEGIN_READ : S_SAVEPOINT);
    if (!rc)
        st->depth++;
    return rc;
}

int store_r_end(struct store *st, int rc)
{
    return store_w_end(st, rc);
}

int store_w_end(struct store *st, int rc)
{
    if (st->depth <= 0)
        return rc ? rc : ERR_INTERNAL;
    if (st->depth == 1 && st->inq) { /* ingest rows still queued: written with the commit, or dropped */
        if (rc == 0)
            rc = store_request_flush(st, NULL, NULL);
        store_ingest_q_drop(st);
    }
    st->depth--;
    if (st->depth == 0) {
        int notify = st->pg && st->notify;
        st->notify = 0;
        if (rc == 0) {
            /* NOTIFY is transactional: sent with the COMMIT, one round trip */
            int c = 0;
            if (notify) {
                int r = sdb_exec(st->db, STORE_PG_NOTIFY_COMMIT);
                c = r == SDB_OK ? 0 : store_sqlerr(st, r, "notify and commit");
            } else {
                c = store_run(st, S_COMMIT);
            }
            if (c == 0)
                return 0;
            rc = c;
        }
        if (sdb_in_tx(st->db))
            store_run(st, S_ROLLBACK);
        return rc;
    }
    if (rc)
        store_run(st, S_ROLLBACK_TO);
    int r = store_run(st, S_RELEASE);
    return rc ? rc : r;
}

int store_tx_enter(struct store *st)
{
    return store_w_begin(st);
}

int store_tx_enter_lease(struct store *st)
{
    return store_w_begin_shared(st);
}

void store_lease_left_ready(struct store *st)
{
    if (st->pg && st->depth)
        st->notify = 1;
}

int store_tx_leave(struct store *st, int rc)
{
    return store_w_end(st, rc);
}

int store_tx_begin(struct store *st)
{
    if (st->depth)
        return ERR_BADSTATE;
    int rc = store_w_begin(st);
    if (!rc)
        st->user_tx = 1;
    return rc;
}

int store_tx_commit(struct store *st)
{
    if (!st->user_tx || st->depth != 1)
        return ERR_BADSTATE;
    st->user_tx = 0;
    return store_w_end(st, 0);
}

void store_tx_rollback(struct store *st)
{
    if (!st->user_tx)
        return;
    st->user_tx = 0;
    st->depth = 1;
    store_w_end(st, ERR_INTERNAL);
}

/* ---- migrations ------------------------------------------------------------------ */

/* Split the embedded schema at its "-- @migration N" lines. Returns the
 * number of blocks, or -1 if they are not numbered 1, 2, 3...; when block k
 * (0-based) exists, *start / *len get its text and *num its number. */
static int schema_block(const char *schema, int k, const char **start, size_t *len, int *num)
{
    static const char marker[] = "-- @migration ";
    const size_t mlen = sizeof marker - 1;
    const char *p = schema, *cur = NULL;
    int count = 0;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *next = eol ? eol + 1 : p + strlen(p);
        if (strncmp(p, marker, mlen) == 0) {
            long n = strtol(p + mlen, NULL, 10);
            if (n != count + 1)
                return -1;
            if (count - 1 == k && cur)
                *len = (size_t)(p - cur);
            if (count == k) {
                cur = next;
                *start = next;
                *num = (int)n;
            }
            count++;
        }
        p = next;
    }
    if (cur && k == count - 1)
        *len = strlen(cur);
    return count;
}

int store_schema_latest(void)
{
    const char *s;
    size_t l;
    int n;
    int c = schema_block(store_schema_sql, -1, &s, &l, &n);
    return c < 0 ? 0 : c;
}

int store_schema_pg_latest(void)
{
    const char *s;
    size_t l;
    int n;
    int c = schema_block(store_schema_pg_sql, -1, &s, &l, &n);
    return c < 0 ? 0 : c;
}

static int store_user_version(struct store *st, int *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_USER_VERSION, &rc);
    if (!s)
        return rc;
    int r = sdb_step(s);
    if (r != SDB_ROW)
        rc = store_sqlerr(st, r, "read user_version");
    else
        *out = sdb_column_int(s, 0);
    sdb_reset(s);
    return rc;
}

int store_schema_version(struct store *st, int *out)
{
    return store_user_version(st, out);
}

static int store_migrate(struct store *st)
{
    int latest = store_schema_latest();
    if (latest <= 0) {
        log_error("store: embedded schema has no valid '-- @migration N' blocks");
        return ERR_INTERNAL;
    }
    int v = 0, rc = store_user_version(st, &v);
    if (rc)
        return rc;
    if (v > latest) {
        log_error("store: database schema version %d is newer than this binary's %d", v, latest);
        return ERR_UNSUPPORTED;
    }
    for (int k = v; k < latest; k++) {
        const char *text;
        size_t len = 0;
        int num = 0;
        if (schema_block(store_schema_sql, k, &text, &len, &num) < 0)
            return ERR_INTERNAL;
        if ((rc = store_w_begin(st)))
            return rc;
        int cur = 0;
        rc = store_user_version(st, &cur); /* someone may have migrated meanwhile */
        if (!rc && cur < num) {
            char *sql = malloc(len + 64);
            if (!sql) {
                rc = ERR_NOMEM;
            } else {
                memcpy(sql, text, len);
                snprintf(sql + len, 64, "\nPRAGMA user_version = %d;\n", num);
                int r = sdb_exec(st->db, sql);
                if (r != SDB_OK) {
                    log_error("store: migration %d failed: %s", num, sdb_errmsg(st->db));
                    rc = store_sqlerr(st, r, "migration");
                }
                free(sql);
            }
            if (!rc)
                log_info("store: migrated %s to schema version %d", st->db_path, num);
        }
        if ((rc = store_w_end(st, rc)))
            return rc;
    }
    return 0;
}

/* PostgreSQL: every pending block of schema_pg.sql in one transaction (DDL
 * is transactional there) under an advisory lock, so jobd instances starting
 * together migrate once; the version is the one row of schema_version. */
#define STORE_PG_MIGRATE_LOCK "7240619002"
static int store_migrate_pg(struct store *st)
{
    int latest = store_schema_pg_latest();
    if (latest <= 0) {
        log_error("store: embedded PostgreSQL schema has no valid '-- @migration N' blocks");
        return ERR_INTERNAL;
    }
    /* no statement timeout inside: a migration rewrites whole tables */
    int r = sdb_exec(st->db, "BEGIN; SET LOCAL statement_timeout = 0; "
                             "SELECT pg_advisory_xact_lock(" STORE_PG_MIGRATE_LOCK "); "
                             "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL); "
                             "INSERT INTO schema_version(version) SELECT 0 WHERE NOT EXISTS "
                             "(SELECT 1 FROM schema_version)");
    if (r != SDB_OK) {
        int rc = store_sqlerr(st, r, "prepare migration");
        sdb_exec(st->db, "ROLLBACK");
        return rc;
    }
    int v = 0, rc = store_user_version(st, &v);
    if (!rc && v > latest) {
        log_error("store: database schema version %d is newer than this binary's %d", v, latest);
        rc = ERR_UNSUPPORTED;
    }
    for (int k = v; !rc && k < latest; k++) {
        const char *text;
        size_t len = 0;
        int num = 0;
        if (schema_block(store_schema_pg_sql, k, &text, &len, &num) < 0) {
            rc = ERR_INTERNAL;
            break;
        }
        char *sql = malloc(len + 64);
        if (!sql) {
            rc = ERR_NOMEM;
            break;
        }
        memcpy(sql, text, len);
        snprintf(sql + len, 64, "\nUPDATE schema_version SET version = %d;\n", num);
        r = sdb_exec(st->db, sql);
        free(sql);
        if (r != SDB_OK) {
            log_error("store: PostgreSQL migration %d failed: %s", num, sdb_errmsg(st->db));
            rc = store_sqlerr(st, r, "migration");
        } else {
            log_info("store: migrated %s to schema version %d", st->db_path, num);
        }
    }
    r = sdb_exec(st->db, rc ? "ROLLBACK" : "COMMIT");
    if (!rc && r != SDB_OK)
        rc = store_sqlerr(st, r, "commit migration");
    return rc;
}

/* ---- open / close ------------------------------------------------------------------ */

static int store_pragma(struct store *st, const char *sql)
{
    int r = sdb_exec(st->db, sql);
    return r == SDB_OK ? 0 : store_sqlerr(st, r, sql);
}

int store_database_is_pg(const char *url)
{
    return url && (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0);
}

/* The URL with the password of its user info replaced by "***" (for logs). */
static char *store_url_masked(const char *url)
{
    char *m = strdup(url);
    if (!m)
        return NULL;
    char *scheme = strstr(m, "://");
    char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    char *colon = at ? memchr(scheme + 3, ':', (size_t)(at - (scheme + 3))) : NULL;
    if (colon && at - colon > 1) {
        memmove(colon + 4, at, strlen(at) + 1);
        memcpy(colon + 1, "***", 3);
    }
    return m;
}

/* Connect and migrate a PostgreSQL store (st->opts.database). A failure to
 * connect (no server, wrong host, password or database name) is ERR_IO with
 * libpq's message in the log, naming the URL without its password. */
static int store_open_pg(struct store *st)
{
    free(st->db_path);
    st->db_path = store_url_masked(st->opts.database);
    if (!st->db_path)
        return ERR_NOMEM;
    st->pg = 1;
    char err[512];
    int r = sdb_pg_open(st->opts.database, st->opts.busy_timeout_ms, st->opts.statement_timeout_ms, &st->db, err, sizeof err);
    if (r != SDB_OK) {
        log_error("store: cannot open the PostgreSQL database %s: %s", st->db_path, err[0] ? err : sdb_errstr(r));
        return r == SDB_NOMEM ? ERR_NOMEM : ERR_IO;
    }
    return store_migrate_pg(st);
}

int store_open(const char *data_dir, const struct store_opts *opts, struct store **out)
{
    if (!data_dir || !*data_dir)
        return ERR_INVAL;
    if (mkdir(data_dir, 0700) != 0 && errno != EEXIST) {
        log_error("store: cannot create data directory '%s': %s", data_dir, strerror(errno));
        return ERR_IO;
    }
    struct store *st = calloc(1, sizeof *st);
    if (!st)
        return ERR_NOMEM;
    int rc = 0;
    st->opts = opts ? *opts : STORE_OPTS_DEFAULT;
    size_t plen = strlen(data_dir) + sizeof STORE_DB_NAME + 2;
    st->dir = strdup(data_dir);
    st->db_path = malloc(plen);
    if (!st->dir || !st->db_path) {
        rc = ERR_NOMEM;
        goto out;
    }
    if (!st->opts.blobs &&
        (rc = blob_store_open(&(struct blob_config){.data_dir = data_dir}, &st->own_blobs)))
        goto out;
    if (store_database_is_pg(st->opts.database)) {
        rc = store_open_pg(st);
        goto opened;
    }
    snprintf(st->db_path, plen, "%s/%s", data_dir, STORE_DB_NAME);
    int r = sdb_sqlite_open(st->db_path, st->opts.busy_timeout_ms, &st->db);
    if (r != SDB_OK) {
        rc = store_sqlerr(st, r, "open");
        goto out;
    }
    if ((rc = store_pragma(st, "PRAGMA journal_mode=WAL")) ||
        (rc = store_pragma(st, st->opts.durability == STORE_DURABILITY_NORMAL
                                   ? "PRAGMA synchronous=NORMAL"
                                   : "PRAGMA synchronous=FULL")) ||
        (rc = store_pragma(st, "PRAGMA foreign_keys=ON")))
        goto out;
    rc = store_migrate(st);
opened:
    if (rc)
        goto out;
    *out = st;
    st = NULL;
out:
    store_close(st);
    return rc;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    if (st->db && sdb_in_tx(st->db))
        sdb_exec(st->db, "ROLLBACK");
    for (int i = 0; i < S__COUNT; i++)
        sdb_finalize(st->stmts[i]);
    store_ingest_q_free(st);
    if (st->db)
        sdb_close(st->db);
    blob_store_free(st->own_blobs);
    free(st->dir);
    free(st->db_path);
    free(st);
}

int store_is_pg(const struct store *st)
{
    return st->pg;
}

static int own_call(struct store *st, int which, enum store_own_kind kind, const char *id, int *yes)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, which, &rc);
    if (!s)
        return rc;
    if (!(rc = store_bind_int(st, s, 1, (int64_t)kind)) && !(rc = store_bind_text(st, s, 2, id))) {
        int r = sdb_step(s);
        if (r != SDB_ROW)
            rc = store_sqlerr(st, r, "work ownership");
        else if (yes)
            *yes = sdb_column_int64(s, 0) != 0;
    }
    sdb_reset(s);
    return rc;
}

int store_own_try(struct store *st, enum store_own_kind kind, const char *id, int *owned)
{
    if (!st->pg) {
        *owned = 1;
        return 0;
    }
    int yes = 0;
    int rc = own_call(st, S_OWN_TRY, kind, id, &yes);
    if (!rc)
        *owned = yes;
    return rc;
}

void store_own_release(struct store *st, enum store_own_kind kind, const char *id)
{
    if (st->pg && !sdb_in_tx(st->db))
        own_call(st, S_OWN_RELEASE, kind, id, NULL);
}

const char *store_data_dir(const struct store *st)
{
    return st->dir;
}

struct blob_store *store_blobs(const struct store *st)
{
    return st->opts.blobs ? st->opts.blobs : st->own_blobs;
}

/* ---- tenants ---------------------------------------------------------------------------- */

static int tenant_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int tenant_fetch(struct store *st, enum store_stmt_id id, const char *arg,
                        struct store_tenant *out)
{
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, id, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, arg)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        store_col_text(s, 0, out->id, sizeof out->id);
        store_col_text(s, 1, out->name, sizeof out->name);
        out->created_at = sdb_column_int64(s, 2);
    } else {
        rc = r == SDB_DONE ? ERR_NOTFOUND : store_sqlerr(st, r, "get tenant");
    }
    sdb_reset(s);
    return rc;
}

int store_tenant_get_by_name(struct store *st, const char *name, struct store_tenant *out)
{
    return tenant_fetch(st, S_TENANT_BY_NAME, name, out);
}

int store_tenant_get(struct store *st, const char *id, struct store_tenant *out)
{
    return tenant_fetch(st, S_TENANT_BY_ID, id, out);
}

int store_tenant_resolve(struct store *st, const char *name_or_id, struct store_tenant *out)
{
    int rc = store_tenant_get_by_name(st, name_or_id, out);
    if (rc == ERR_NOTFOUND && strncmp(name_or_id, "ten_", 4) == 0)
        rc = store_tenant_get(st, name_or_id, out);
    return rc;
}

int store_tenant_create(struct store *st, const char *name, int64_t now, struct store_tenant *out)
{
    if (!tenant_name_ok(name))
        return ERR_INVAL;
    struct store_tenant t = {.created_at = now};
    int rc = id_new("ten_", t.id, sizeof t.id);
    if (rc)
        return rc;
    snprintf(t.name, sizeof t.name, "%s", name);
    struct sdb_stmt *s = store_stmt(st, S_TENANT_INSERT, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, t.id)) && !(rc = store_bind_text(st, s, 2, t.name)) &&
        !(rc = store_bind_int(st, s, 3, now)))
        rc = store_step_done(st, s, "insert tenant");
    if ((rc = store_w_end(st, rc)))
        return rc;
    if (out)
        *out = t;
    return 0;
}

/* ---- API keys ------------------------------------------------------------------------------ */

static const char key_alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* Crockford, as ids */

static int key_random(char *out, size_t n)
{
    uint8_t rnd[64];
    if (n > sizeof rnd || crypto_random(rnd, n))
        return ERR_CRYPTO;
    for (size_t i = 0; i < n; i++)
        out[i] = key_alphabet[rnd[i] & 31]; /* 256 % 32 == 0: uniform */
    out[n] = '\0';
    return 0;
}

static int key_chars_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !memchr(key_alphabet, s[i], sizeof key_alphabet - 1))
            return 0;
    return 1;
}

int store_key_create(struct store *st, const char *tenant_id, int64_t now,
                     char plaintext[STORE_KEY_MAX], struct store_key *info)
{
    struct store_tenant t;
    int rc = store_tenant_get(st, tenant_id, &t);
    if (rc)
        return rc;
    char kid[STORE_KEY_ID_LEN + 1], secret[STORE_KEY_SECRET_LEN + 1];
    uint8_t hash[SHA256_LEN];
    for (int attempt = 0;; attempt++) {
        if ((rc = key_random(kid, STORE_KEY_ID_LEN)) ||
            (rc = key_random(secret, STORE_KEY_SECRET_LEN)) ||
            (rc = sha256(secret, STORE_KEY_SECRET_LEN, hash)))
            goto out;
        struct sdb_stmt *s = store_stmt(st, S_KEY_INSERT, &rc);
        if (!s)
            goto out;
        if ((rc = store_w_begin(st)))
            goto out;
        if (!(rc = store_bind_text(st, s, 1, kid)) && !(rc = store_bind_text(st, s, 2, tenant_id))) {
            int r = sdb_bind_blob(s, 3, hash, SHA256_LEN);
            rc = r == SDB_OK ? store_bind_int(st, s, 4, now) : store_sqlerr(st, r, "bind");
            if (!rc)
                rc = store_step_done(st, s, "insert api key");
        }
        sdb_clear_bindings(s);
        rc = store_w_end(st, rc);
        if (rc != ERR_EXISTS || attempt >= 3) /* key id collision: draw again */
            break;
    }
    if (rc)
        goto out;
    snprintf(plaintext, STORE_KEY_MAX, "%s%s_%s", STORE_KEY_PREFIX, kid, secret);
    if (info) {
        memset(info, 0, sizeof *info);
        snprintf(info->id, sizeof info->id, "%s", kid);
        snprintf(info->prefix, sizeof info->prefix, "%s%s", STORE_KEY_PREFIX, kid);
        snprintf(info->tenant_id, sizeof info->tenant_id, "%s", tenant_id);
        snprintf(info->tenant_name, sizeof info->tenant_name, "%s", t.name);
        info->created_at = now;
    }
out:
    memset(secret, 0, sizeof secret);
    return rc;
}

int store_key_verify(struct store *st, const char *presented, struct store_key *out)
{
    static const uint8_t dummy[SHA256_LEN];
    const size_t plen = sizeof STORE_KEY_PREFIX - 1;
    if (!presented || strlen(presented) != plen + STORE_KEY_ID_LEN + 1 + STORE_KEY_SECRET_LEN ||
        memcmp(presented, STORE_KEY_PREFIX, plen) != 0 ||
        !key_chars_ok(presented + plen, STORE_KEY_ID_LEN) ||
        presented[plen + STORE_KEY_ID_LEN] != '_' ||
        !key_chars_ok(presented + plen + STORE_KEY_ID_LEN + 1, STORE_KEY_SECRET_LEN))
        return ERR_AUTH;
    char kid[STORE_KEY_ID_LEN + 1];
    memcpy(kid, presented + plen, STORE_KEY_ID_LEN);
    kid[STORE_KEY_ID_LEN] = '\0';
    uint8_t hash[SHA256_LEN];
    int rc = sha256(presented + plen + STORE_KEY_ID_LEN + 1, STORE_KEY_SECRET_LEN, hash);
    if (rc)
        return rc;
    struct sdb_stmt *s = store_stmt(st, S_KEY_LOOKUP, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, kid)))
        return rc;
    int r = sdb_step(s);
    if (r == SDB_ROW) {
        const void *stored = sdb_column_blob(s, 1);
        int ok = sdb_column_bytes(s, 1) == SHA256_LEN && stored &&
                 crypto_equal(stored, hash, SHA256_LEN);
        if (ok) {
            memset(out, 0, sizeof *out);
            snprintf(out->id, sizeof out->id, "%s", kid);
            snprintf(out->prefix, sizeof out->prefix, "%s%s", STORE_KEY_PREFIX, kid);
            store_col_text(s, 0, out->tenant_id, sizeof out->tenant_id);
            out->created_at = sdb_column_int64(s, 2);
            store_col_text(s, 3, out->tenant_name, sizeof out->tenant_name);
        } else {
            rc = ERR_AUTH;
        }
    } else if (r == SDB_DONE) {
        (void)crypto_equal(dummy, hash, SHA256_LEN); /* same work as a real miss */
        rc = ERR_AUTH;
    } else {
        rc = store_sqlerr(st, r, "verify api key");
    }
    sdb_reset(s);
    return rc;
}

static int key_row(struct sdb_stmt *s, void *elem, void *ctx)
{
    struct store_key *k = elem;
    (void)ctx;
    store_col_text(s, 0, k->id, sizeof k->id);
    snprintf(k->prefix, sizeof k->prefix, "%s%s", STORE_KEY_PREFIX, k->id);
    store_col_text(s, 1, k->tenant_id, sizeof k->tenant_id);
    store_col_text(s, 2, k->tenant_name, sizeof k->tenant_name);
    k->created_at = sdb_column_int64(s, 3);
    k->revoked_at = sdb_column_int64(s, 4);
    return 0;
}

int store_key_list(struct store *st, const char *tenant_id, struct store_key **items, size_t *n)
{
    static const struct store_rows how = {sizeof(struct store_key), key_row, NULL, "list api keys"};
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_KEY_LIST, &rc);
    if (!s || (rc = store_bind_text(st, s, 1, tenant_id)))
        return rc;
    void *arr;
    if ((rc = store_rows_collect(st, s, &how, NULL, 0, &arr, n, NULL)))
        return rc;
    *items = arr;
    return 0;
}

int store_key_revoke(struct store *st, const char *key_id, int64_t now)
{
    const size_t plen = sizeof STORE_KEY_PREFIX - 1;
    if (key_id && strncmp(key_id, STORE_KEY_PREFIX, plen) == 0)
        key_id += plen;
    char kid[STORE_KEY_ID_LEN + 1];
    if (!key_id || strlen(key_id) < STORE_KEY_ID_LEN || !key_chars_ok(key_id, STORE_KEY_ID_LEN) ||
        (key_id[STORE_KEY_ID_LEN] != '\0' && key_id[STORE_KEY_ID_LEN] != '_'))
        return ERR_NOTFOUND;
    memcpy(kid, key_id, STORE_KEY_ID_LEN);
    kid[STORE_KEY_ID_LEN] = '\0';
    int rc = 0;
    struct sdb_stmt *s = store_stmt(st, S_KEY_REVOKE, &rc);
    if (!s)
        return rc;
    if ((rc = store_w_begin(st)))
        return rc;
    if (!(rc = store_bind_text(st, s, 1, kid)) && !(rc = store_bind_int(st, s, 2, now)) &&
        !(rc = store_step_done(st, s, "revoke api key")) && sdb_changes(st->db) == 0)
        rc = ERR_NOTFOUND;
    return store_w_end(st, rc);
}
