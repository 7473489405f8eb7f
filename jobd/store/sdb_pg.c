/*
 * sdb_pg.c - the PostgreSQL driver of the store's driver layer (sdb.h),
 * through libpq.
 *
 * Design. sdb's model is SQLite's, so this file maps it onto libpq:
 *
 *   sdb                      here
 *   prepare(sql)             rewrite ?N -> $N (outside quotes), keep the text;
 *                            nothing goes to the server yet
 *   bind_*                   kept in the statement, typed by the value like
 *                            SQLite's: int64 as int8 (OID 20), double as
 *                            float8 (701), text as text (25), blob as bytea
 *                            (17, binary format), NULL as unknown (OID 0: it
 *                            takes the type of its context, e.g. the column
 *                            of an INSERT). So a parameter that may be NULL
 *                            and whose only context does not type it (a
 *                            bare "?1 IS NULL OR x = ?1") needs a cast in the
 *                            PostgreSQL text of the statement: ?1::text.
 *                            A parameter cast to an array everywhere it
 *                            appears (?N::text[], ?N::bigint[]: the array
 *                            literals of the set-based statements) is
 *                            declared text[] / int8[] (1009 / 1016) instead,
 *                            so the server parses the literal once, when it
 *                            binds it; declared text, the cast is a
 *                            CoerceViaIO that a filter evaluates per row
 *                            (a 256-id "q.id = ANY(?2::text[])" re-parsed
 *                            the array for every row it tested).
 *   step                     the first step runs the statement with every
 *                            parameter (PQprepare once per type signature
 *                            and connection, then PQexecPrepared; a statement
 *                            with an array parameter, below: PQexecParams,
 *                            planned with its values) and keeps the
 *                            PGresult (text format);
 *                            each step moves one row; SDB_DONE after the last
 *   reset                    PQclear (bindings kept); clear_bindings: all NULL
 *   column_*                 parse the row's text: integers and booleans
 *                            (t/f -> 1/0) for int64, strtod for double, bytea
 *                            decoded (PQunescapeBytea) once per row and column
 *   changes                  PQcmdTuples of the last INSERT/UPDATE/DELETE
 *                            (a SELECT leaves it as it was, like SQLite)
 *   in_tx                    PQtransactionStatus != PQTRANS_IDLE
 *   last_insert_rowid        0: PostgreSQL statements use RETURNING instead
 *
 * Errors: SQLSTATE classes are mapped onto SQLite's codes (sdb.h) so the
 * store translates both engines with one table (sdb_pg_sqlstate below).
 * A lost connection is SDB_BUSY (ERR_BUSY above: 503 + Retry-After at the
 * API) and is re-established on a later call, with backoff (pg_ready); a
 * transaction it interrupted stays failed (every call SDB_BUSY) until its
 * owner's ROLLBACK, so no statement of it ever runs outside it. The server's message is
 * kept for sdb_errmsg. A statement that fails inside a transaction puts
 * PostgreSQL's transaction in the failed state: the store's savepoints
 * (store_w_begin inside an open transaction) are what recover from it.
 *
 * Connections (unless the URL says otherwise): connect_timeout
 * SDB_PG_CONNECT_TIMEOUT_S (a server that accepts and never answers fails
 * the open or the reconnect instead of hanging it), TCP keepalives after
 * SDB_PG_KEEPALIVE_IDLE_S idle, every SDB_PG_KEEPALIVE_INTERVAL_S, dropped
 * after SDB_PG_KEEPALIVE_COUNT unanswered (a half-open connection - the
 * server's host gone without a FIN - is found in about 25 s, not the
 * kernel's 2 hours), and tcp_user_timeout for data sent and never
 * acknowledged. A connection found dead is SDB_BUSY and reconnected.
 * Every session also gets lock_timeout and statement_timeout (sdb_pg_open's
 * arguments; jobd's --db-statement-timeout, default 60 s): a statement the
 * server runs longer than that (a runaway plan, a wait that is not a lock)
 * is cancelled by the server, SQLSTATE 57014, SDB_BUSY_TIMEOUT (logged by
 * the store as a warning; ERR_BUSY above it), and the connection
 * stays usable. It bounds the server's side; a server that went silent is
 * the keepalives' and tcp_user_timeout's to find.
 *
 * Results are read whole (PQexecParams, not single-row mode): the store's
 * reads are bounded by LIMITs (scans page through results by seq).
 */
#include "jobd/store/sdb.h"

#define SDB_PG_CONNECT_TIMEOUT_S "5"
#define SDB_PG_KEEPALIVE_IDLE_S "10"
#define SDB_PG_KEEPALIVE_INTERVAL_S "5"
#define SDB_PG_KEEPALIVE_COUNT "3"
#define SDB_PG_TCP_USER_TIMEOUT_MS "30000"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <time.h>

#include <libpq-fe.h>

#define PG_OID_BYTEA 17
#define PG_OID_INT8 20
#define PG_OID_INT2 21
#define PG_OID_INT4 23
#define PG_OID_TEXT 25
#define PG_OID_BOOL 16
#define PG_OID_FLOAT4 700
#define PG_OID_FLOAT8 701
#define PG_OID_NUMERIC 1700
#define PG_OID_TEXT_ARRAY 1009
#define PG_OID_INT8_ARRAY 1016
#define PG_MAX_PARAMS 64

struct sdb_pg {
    struct sdb base; /* first */
    PGconn *conn;
    int64_t changes;
    int lock_timeout_ms;
    int statement_timeout_ms; /* 0: none */
    int in_tx;           /* the server's transaction state after the last call */
    int tx_lost;         /* the connection dropped inside a transaction: fail all but ROLLBACK */
    int backoff_ms;      /* wait before the next reconnect attempt (0: none failed) */
    int64_t next_try_ms; /* monotonic ms of the next reconnect attempt */
    unsigned gen;        /* +1 per reconnect: server-side prepared statements are gone */
    unsigned n_stmts;    /* statements prepared on this connection (names) */
    char listen[64];     /* the LISTEN channel of this connection ("" none), sdb_pg_listen */
    unsigned listen_gen; /* gen of the connection whose LISTEN succeeded */
    int listen_ok;       /* 0: the last LISTEN failed: reconnect and retry (listen_backoff_ms) */
    int listen_backoff_ms;
    int64_t next_listen_ms;
    int fail_listens;    /* tests: LISTENs still to fail (sdb_pg_fail_listens) */
    struct sdb_pg_stmt *pending; /* sent by sdb_pg_send, its result not read yet */
    char err[512];
};

struct pg_param {
    unsigned oid;      /* 0: unknown */
    int fmt;           /* 0 text, 1 binary */
    int len;           /* binary length */
    const char *val;   /* NULL: SQL NULL; borrowed, or own/num */
    char *own;         /* a NUL-terminated copy of counted text */
    char num[32];      /* int64 / double as text */
};

struct pg_col { /* a bytea column of the current row, decoded */
    unsigned char *data;
    size_t len;
    int done;
};

#define PG_VARIANTS 4 /* prepared type signatures kept per statement */
struct pg_variant {
    int used;              /* 0: empty */
    unsigned gen;          /* the connection generation it was prepared on */
    char name[32];         /* server-side name */
    Oid types[PG_MAX_PARAMS];
};

struct sdb_pg_stmt {
    struct sdb_stmt base; /* first */
    struct sdb_pg *db;
    char *sql; /* with $N placeholders */
    int nparams;
    uint64_t used; /* bit N-1: $N appears in sql */
    Oid arr[PG_MAX_PARAMS]; /* text[] / int8[]: every $N of the text is cast so (0: none) */
    int custom;    /* an array parameter: planned for each execution (pg_step) */
    struct pg_variant var[PG_VARIANTS];
    int next_var; /* the slot the next new variant replaces */
    struct pg_param p[PG_MAX_PARAMS];
    PGresult *res;
    int row;  /* current row; -1 before the first step */
    int ncol;
    struct pg_col *cols; /* ncol entries while res is set */
    int sent;     /* PG_SENT: in flight (d->pending); PG_TAKEN: its first step's code in first_rc */
    int first_rc;
};
enum { PG_SENT = 1, PG_TAKEN = 2 };

#define PGDB(d) ((struct sdb_pg *)(d))
#define PGST(x) ((struct sdb_pg_stmt *)(x))

static const struct sdb_ops sdb_pg_ops;

int sdb_pg_rewrite(const char *sql, char **out, int *nparams)
{
    size_t n = strlen(sql);
    char *o = malloc(n + 1);
    if (!o)
        return SDB_NOMEM;
    size_t j = 0;
    int maxp = 0;
    char quote = 0;
    for (size_t i = 0; i < n; i++) {
        char c = sql[i];
        if (quote) {
            if (c == quote)
                quote = 0; /* a doubled quote re-opens at once: same result */
            o[j++] = c;
            continue;
        }
        if (c == '\'' || c == '"') {
            quote = c;
            o[j++] = c;
            continue;
        }
        if (c == '?' && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
            long v = strtol(sql + i + 1, NULL, 10);
            if (v < 1 || v > PG_MAX_PARAMS) {
                free(o);
                return SDB_ERROR;
            }
            if (v > maxp)
                maxp = (int)v;
            o[j++] = '$';
            continue; /* the digits follow unchanged */
        }
        if (c == '?') { /* an unnumbered parameter: not used by the store */
            free(o);
            return SDB_ERROR;
        }
        o[j++] = c;
    }
    o[j] = 0;
    if (quote) {
        free(o);
        return SDB_ERROR;
    }
    *out = o;
    *nparams = maxp;
    return SDB_OK;
}

int sdb_pg_sqlstate(const char *state)
{
    if (!state || strlen(state) != 5)
        return SDB_ERROR;
    if (!strcmp(state, "23505"))
        return SDB_CONSTRAINT_UNIQUE;
    if (!strcmp(state, "23503"))
        return SDB_CONSTRAINT_FOREIGNKEY;
    if (!strncmp(state, "23", 2))
        return SDB_CONSTRAINT;
    /* serialization failure, deadlock, lock_timeout (lock_not_available) */
    if (!strcmp(state, "40001") || !strcmp(state, "40P01") || !strcmp(state, "55P03"))
        return SDB_BUSY;
    if (!strcmp(state, "57014")) /* statement_timeout / cancel */
        return SDB_BUSY_TIMEOUT;
    if (!strcmp(state, "53100"))
        return SDB_FULL;
    if (!strcmp(state, "53200"))
        return SDB_NOMEM;
    if (!strncmp(state, "08", 2) || !strncmp(state, "57P", 3) || !strncmp(state, "58", 2) ||
        !strncmp(state, "53", 2))
        return SDB_IOERR;
    if (!strncmp(state, "28", 2) || !strcmp(state, "42501"))
        return SDB_PERM;
    if (!strcmp(state, "22001") || !strcmp(state, "54000") || !strcmp(state, "54001"))
        return SDB_TOOBIG;
    if (!strncmp(state, "XX", 2))
        return !strcmp(state, "XX001") || !strcmp(state, "XX002") ? SDB_CORRUPT : SDB_INTERNAL;
    if (!strcmp(state, "25006"))
        return SDB_READONLY;
    return SDB_ERROR;
}

static void pg_seterr(struct sdb_pg *d, const char *msg)
{
    snprintf(d->err, sizeof d->err, "%s", msg ? msg : "");
    size_t l = strlen(d->err);
    while (l && (d->err[l - 1] == '\n' || d->err[l - 1] == ' '))
        d->err[--l] = 0;
}

/* The sdb code of a result that is not OK (also records the message). */
static int pg_result_err(struct sdb_pg *d, const PGresult *r)
{
    if (PQstatus(d->conn) == CONNECTION_BAD) { /* retried on the next call (pg_ready) */
        pg_seterr(d, PQerrorMessage(d->conn));
        if (d->in_tx)
            d->tx_lost = 1;
        d->in_tx = 0;
        return SDB_BUSY;
    }
    if (!r) {
        pg_seterr(d, PQerrorMessage(d->conn));
        return SDB_NOMEM;
    }
    pg_seterr(d, PQresultErrorMessage(r));
    return sdb_pg_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE));
}

static int64_t pg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pg_session(struct sdb_pg *d)
{
    char set[200];
    snprintf(set, sizeof set,
             "SET client_min_messages = warning; SET lock_timeout = %d; SET statement_timeout = %d; "
             "SET TIME ZONE 'UTC'",
             d->lock_timeout_ms > 0 ? d->lock_timeout_ms : 0,
             d->statement_timeout_ms > 0 ? d->statement_timeout_ms : 0);
    PGresult *r = PQexec(d->conn, set);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        pg_seterr(d, r ? PQresultErrorMessage(r) : PQerrorMessage(d->conn));
    PQclear(r);
    return ok ? SDB_OK : SDB_IOERR;
}

/* Before a call: a dropped connection is re-established (PQreset), at most
 * once per backoff period (100 ms doubling to 5 s while it keeps failing);
 * meanwhile, and while a transaction that the drop lost is not yet rolled
 * back by its owner, calls fail with SDB_BUSY (the store's ERR_BUSY: 503 +
 * Retry-After at the API), never running a statement outside the
 * transaction it belonged to. is_rollback: the call is a ROLLBACK (not TO a
 * savepoint), which ends a lost transaction. SDB_OK to go on, or SDB_DONE
 * when the call is a ROLLBACK that has nothing left to do. */
/* A new session on d's connection (PQreset): SDB_OK (gen + 1: server-side
 * state is gone), or SDB_BUSY with the next try backed off (100 ms
 * doubling to 5 s). */
static int pg_reconnect(struct sdb_pg *d, int64_t now)
{
    PQreset(d->conn);
    if (PQstatus(d->conn) != CONNECTION_OK || pg_session(d) != SDB_OK) {
        d->backoff_ms = d->backoff_ms ? (d->backoff_ms * 2 > 5000 ? 5000 : d->backoff_ms * 2) : 100;
        d->next_try_ms = now + d->backoff_ms;
        pg_seterr(d, PQerrorMessage(d->conn));
        return SDB_BUSY;
    }
    d->backoff_ms = 0;
    d->gen++;
    return SDB_OK;
}

static int pg_step_result(struct sdb_pg_stmt *s, PGresult *r);

/* Read the result of the statement in flight (sdb_pg_send): its first
 * step's code, the statement left as a stepped one; any further results of
 * the call are drained so that the connection is free. */
static int pg_collect(struct sdb_pg_stmt *s)
{
    struct sdb_pg *d = s->db;
    PGresult *r = PQgetResult(d->conn), *more;
    while ((more = PQgetResult(d->conn)) != NULL)
        PQclear(more);
    d->pending = NULL;
    s->sent = 0;
    return pg_step_result(s, r);
}

static int pg_ready(struct sdb_pg *d, int is_rollback)
{
    if (d->pending) { /* another call on the connection: its statement's turn comes first */
        struct sdb_pg_stmt *p = d->pending;
        p->first_rc = pg_collect(p);
        p->sent = PG_TAKEN;
    }
    if (PQstatus(d->conn) == CONNECTION_BAD) {
        if (d->in_tx)
            d->tx_lost = 1;
        d->in_tx = 0;
        int64_t now = pg_now_ms();
        if (d->backoff_ms && now < d->next_try_ms) {
            if (is_rollback && d->tx_lost) {
                d->tx_lost = 0;
                return SDB_DONE;
            }
            pg_seterr(d, "the PostgreSQL connection is down; reconnecting");
            return SDB_BUSY;
        }
        if (pg_reconnect(d, now) != SDB_OK) {
            if (is_rollback && d->tx_lost) {
                d->tx_lost = 0;
                return SDB_DONE;
            }
            return SDB_BUSY;
        }
    }
    if (d->tx_lost) {
        if (is_rollback) {
            d->tx_lost = 0;
            return SDB_DONE;
        }
        pg_seterr(d, "the PostgreSQL connection dropped inside this transaction");
        return SDB_BUSY;
    }
    return SDB_OK;
}

/* The call's statement is a ROLLBACK of the whole transaction. */
static int pg_is_rollback(const char *sql)
{
    while (*sql == ' ' || *sql == '\n')
        sql++;
    return strncasecmp(sql, "ROLLBACK", 8) == 0 && !strstr(sql + 8, " TO ") && !strstr(sql + 8, " to ");
}

static void pg_after(struct sdb_pg *d)
{
    PGTransactionStatusType t = PQtransactionStatus(d->conn);
    d->in_tx = t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

static void pg_close(struct sdb *db)
{
    PQfinish(PGDB(db)->conn);
    free(db);
}

static int pg_prepare(struct sdb *db, const char *sql, struct sdb_stmt **out)
{
    struct sdb_pg_stmt *s = calloc(1, sizeof *s);
    if (!s)
        return SDB_NOMEM;
    s->base.ops = &sdb_pg_ops;
    s->db = PGDB(db);
    s->row = -1;
    int r = sdb_pg_rewrite(sql, &s->sql, &s->nparams);
    uint64_t plain = 0; /* bit N-1: some $N is not cast to an array type */
    for (const char *p = s->sql; r == SDB_OK && (p = strchr(p, '$')) != NULL; p++) {
        char *end;
        long v = strtol(p + 1, &end, 10);
        if (v < 1 || v > PG_MAX_PARAMS)
            continue;
        s->used |= 1ULL << (v - 1);
        Oid a = !strncmp(end, "::text[]", 8) ? PG_OID_TEXT_ARRAY
                : !strncmp(end, "::bigint[]", 10) ? PG_OID_INT8_ARRAY : 0;
        if (!a || (s->arr[v - 1] && s->arr[v - 1] != a))
            plain |= 1ULL << (v - 1);
        s->arr[v - 1] = a;
    }
    for (int i = 0; i < PG_MAX_PARAMS; i++) {
        if ((plain >> i) & 1)
            s->arr[i] = 0;
        if (s->arr[i])
            s->custom = 1;
    }
    if (r != SDB_OK) {
        pg_seterr(PGDB(db), "cannot rewrite the statement's parameters for PostgreSQL");
        free(s);
        return r;
    }
    *out = &s->base;
    return SDB_OK;
}

static int pg_exec(struct sdb *db, const char *script)
{
    struct sdb_pg *d = PGDB(db);
    int rc = pg_ready(d, pg_is_rollback(script));
    if (rc != SDB_OK)
        return rc == SDB_DONE ? SDB_OK : rc;
    PGresult *r = PQexec(d->conn, script);
    ExecStatusType t = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK && t != PGRES_EMPTY_QUERY)
        rc = pg_result_err(d, r);
    else
        pg_after(d);
    PQclear(r);
    return rc;
}

static int64_t pg_changes(struct sdb *db)
{
    return PGDB(db)->changes;
}

static int64_t pg_last_insert_rowid(struct sdb *db)
{
    return 0;
}

static int pg_in_tx(struct sdb *db)
{
    struct sdb_pg *d = PGDB(db);
    if (d->tx_lost)
        return 1; /* until the owner's ROLLBACK */
    if (PQstatus(d->conn) == CONNECTION_BAD)
        return d->in_tx;
    PGTransactionStatusType t = PQtransactionStatus(d->conn);
    return t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

static const char *pg_errmsg(struct sdb *db)
{
    return PGDB(db)->err;
}

static void pg_clear_result(struct sdb_pg_stmt *s)
{
    if (s->cols) {
        for (int i = 0; i < s->ncol; i++)
            free(s->cols[i].data);
        free(s->cols);
        s->cols = NULL;
    }
    PQclear(s->res);
    s->res = NULL;
    s->row = -1;
    s->ncol = 0;
}

static void pg_param_clear(struct pg_param *p)
{
    free(p->own);
    memset(p, 0, sizeof *p);
}

static void pg_clear_bindings(struct sdb_stmt *x)
{
    struct sdb_pg_stmt *s = PGST(x);
    for (int i = 0; i < PG_MAX_PARAMS; i++)
        pg_param_clear(&s->p[i]);
}

static void pg_finalize(struct sdb_stmt *x)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (s->sent == PG_SENT)
        pg_collect(s);
    pg_clear_result(s);
    pg_clear_bindings(x);
    free(s->sql);
    free(s);
}

static void pg_reset(struct sdb_stmt *x)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (s->sent == PG_SENT)
        pg_collect(s);
    s->sent = 0;
    pg_clear_result(s);
}

static void pg_row_cols_release(struct sdb_pg_stmt *s)
{
    for (int i = 0; s->cols && i < s->ncol; i++) {
        free(s->cols[i].data);
        s->cols[i] = (struct pg_col){0};
    }
}

static int pg_step_next(struct sdb_pg_stmt *s);
static int pg_start(struct sdb_pg_stmt *s, int send);
static int pg_sent(struct sdb_pg_stmt *s, int ok);

static int pg_step(struct sdb_stmt *x)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (s->sent == PG_SENT)
        return pg_collect(s);
    if (s->sent == PG_TAKEN) {
        s->sent = 0;
        return s->first_rc;
    }
    if (!s->res)
        return pg_start(s, 0);
    return pg_step_next(s);
}

int sdb_pg_send(struct sdb_stmt *x)
{
    if (x->ops != &sdb_pg_ops || PGST(x)->sent || PGST(x)->res)
        return SDB_MISUSE;
    return pg_start(PGST(x), 1);
}

/* Run s with its bindings: its first step's code; with send, only start it
 * (SDB_OK, or the error of sending it). */
static int pg_start(struct sdb_pg_stmt *s, int send)
{
    struct sdb_pg *d = s->db;
    int ready = pg_ready(d, pg_is_rollback(s->sql));
    if (ready != SDB_OK)
        return ready;
    const char *vals[PG_MAX_PARAMS];
    int lens[PG_MAX_PARAMS], fmts[PG_MAX_PARAMS];
    Oid types[PG_MAX_PARAMS] = {0};
    for (int i = 0; i < s->nparams; i++) {
        vals[i] = s->p[i].val;
        lens[i] = s->p[i].len;
        fmts[i] = s->p[i].fmt;
        /* a parameter the text never names (SQLite lets ?4 be skipped)
         * must still have a type */
        types[i] = !((s->used >> i) & 1) ? PG_OID_TEXT : s->arr[i] ? s->arr[i] : s->p[i].oid;
    }
    /* server-side prepared once per type signature (parse and plan
     * once, not per row); NULLs are typed unknown, so a statement bound
     * with and without NULLs has two variants. A statement over arrays
     * (the set-based ones) is planned with its values each time
     * instead: a generic plan knows neither the arrays' lengths nor
     * their elements, and the one PostgreSQL settled on for the
     * commit's UPDATE ... FROM unnest after five runs was a nested loop
     * that rescanned the 256-row unnest for each of the 256 requests
     * (25 of its 35 ms); planning costs far less than that. */
    if (s->custom) {
        if (send)
            return pg_sent(s, PQsendQueryParams(d->conn, s->sql, s->nparams, types, vals, lens, fmts, 0));
        PGresult *r = PQexecParams(d->conn, s->sql, s->nparams, types, vals, lens, fmts, 0);
        return pg_step_result(s, r);
    }
    struct pg_variant *v = NULL;
    for (int k = 0; k < PG_VARIANTS && !v; k++)
        if (s->var[k].used && s->var[k].gen == d->gen &&
            !memcmp(s->var[k].types, types, (size_t)s->nparams * sizeof *types))
            v = &s->var[k];
    if (!v) {
        v = &s->var[s->next_var];
        s->next_var = (s->next_var + 1) % PG_VARIANTS;
        if (v->used && v->gen == d->gen) { /* replaced: free the server's copy */
            char sql[64];
            snprintf(sql, sizeof sql, "DEALLOCATE %s", v->name);
            PQclear(PQexec(d->conn, sql));
        }
        v->used = 0;
        snprintf(v->name, sizeof v->name, "sdb%u", ++d->n_stmts);
        PGresult *pr = PQprepare(d->conn, v->name, s->sql, s->nparams, types);
        if (!pr || PQresultStatus(pr) != PGRES_COMMAND_OK) {
            int rc = pg_result_err(d, pr);
            PQclear(pr);
            return rc;
        }
        PQclear(pr);
        memcpy(v->types, types, (size_t)s->nparams * sizeof *types);
        v->gen = d->gen;
        v->used = 1;
    }
    if (send)
        return pg_sent(s, PQsendQueryPrepared(d->conn, v->name, s->nparams, vals, lens, fmts, 0));
    PGresult *r = PQexecPrepared(d->conn, v->name, s->nparams, vals, lens, fmts, 0);
    return pg_step_result(s, r);
}

/* After PQsend*: s in flight, or the error of sending it. */
static int pg_sent(struct sdb_pg_stmt *s, int ok)
{
    struct sdb_pg *d = s->db;
    if (!ok) {
        PGresult *more;
        while ((more = PQgetResult(d->conn)) != NULL)
            PQclear(more);
        return pg_result_err(d, NULL);
    }
    s->sent = PG_SENT;
    d->pending = s;
    return SDB_OK;
}

/* The first step's result r (owned): kept as the statement's rows, or its error. */
static int pg_step_result(struct sdb_pg_stmt *s, PGresult *r)
{
    struct sdb_pg *d = s->db;
    ExecStatusType t = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) {
        int rc = pg_result_err(d, r);
        PQclear(r);
        return rc;
    }
    pg_after(d);
    /* like sqlite3_changes: only INSERT, UPDATE and DELETE count */
    const char *cs = PQcmdStatus(r), *ct = PQcmdTuples(r);
    if (cs && (!strncmp(cs, "INSERT", 6) || !strncmp(cs, "UPDATE", 6) || !strncmp(cs, "DELETE", 6)))
        d->changes = ct && *ct ? strtoll(ct, NULL, 10) : 0;
    s->res = r;
    s->ncol = PQnfields(r);
    s->cols = s->ncol ? calloc((size_t)s->ncol, sizeof *s->cols) : NULL;
    if (s->ncol && !s->cols) {
        pg_clear_result(s);
        return SDB_NOMEM;
    }
    s->row = -1;
    return pg_step_next(s);
}

/* Move to the next row of the kept result. */
static int pg_step_next(struct sdb_pg_stmt *s)
{
    pg_row_cols_release(s);
    if (s->row + 1 >= PQntuples(s->res)) {
        s->row = PQntuples(s->res);
        return SDB_DONE;
    }
    s->row++;
    return SDB_ROW;
}

static int pg_bind_param_count(struct sdb_stmt *x)
{
    return PGST(x)->nparams;
}

static struct pg_param *pg_param_at(struct sdb_stmt *x, int i)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (i < 1 || i > s->nparams)
        return NULL;
    struct pg_param *p = &s->p[i - 1];
    pg_param_clear(p);
    return p;
}

static int pg_bind_null(struct sdb_stmt *x, int i)
{
    return pg_param_at(x, i) ? SDB_OK : SDB_ERROR;
}

static int pg_bind_int64(struct sdb_stmt *x, int i, int64_t v)
{
    struct pg_param *p = pg_param_at(x, i);
    if (!p)
        return SDB_ERROR;
    snprintf(p->num, sizeof p->num, "%lld", (long long)v);
    p->oid = PG_OID_INT8;
    p->val = p->num;
    return SDB_OK;
}

static int pg_bind_double(struct sdb_stmt *x, int i, double v)
{
    struct pg_param *p = pg_param_at(x, i);
    if (!p)
        return SDB_ERROR;
    snprintf(p->num, sizeof p->num, "%.17g", v);
    p->oid = PG_OID_FLOAT8;
    p->val = p->num;
    return SDB_OK;
}

static int pg_bind_text(struct sdb_stmt *x, int i, const char *v, int len)
{
    struct pg_param *p = pg_param_at(x, i);
    if (!p)
        return SDB_ERROR;
    if (!v)
        return SDB_OK;
    p->oid = PG_OID_TEXT;
    if (len < 0) {
        p->val = v;
        return SDB_OK;
    }
    /* PostgreSQL text cannot hold NUL: the text ends at the first one (what
     * a C reader of SQLite's copy sees too) */
    len = (int)strnlen(v, (size_t)len);
    p->own = malloc((size_t)len + 1);
    if (!p->own)
        return SDB_NOMEM;
    memcpy(p->own, v, (size_t)len);
    p->own[len] = 0;
    p->val = p->own;
    return SDB_OK;
}

static int pg_bind_blob(struct sdb_stmt *x, int i, const void *v, int len)
{
    struct pg_param *p = pg_param_at(x, i);
    if (!p)
        return SDB_ERROR;
    if (!v)
        return SDB_OK;
    p->oid = PG_OID_BYTEA;
    p->fmt = 1;
    p->len = len;
    p->val = len ? v : "";
    return SDB_OK;
}

static int pg_valid(struct sdb_pg_stmt *s, int col)
{
    return s->res && s->row >= 0 && s->row < PQntuples(s->res) && col >= 0 && col < s->ncol;
}

static int pg_column_type(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return SDB_NULL;
    switch (PQftype(s->res, col)) {
    case PG_OID_INT2:
    case PG_OID_INT4:
    case PG_OID_INT8:
    case PG_OID_BOOL: return SDB_INTEGER;
    case PG_OID_FLOAT4:
    case PG_OID_FLOAT8:
    case PG_OID_NUMERIC: return SDB_FLOAT;
    case PG_OID_BYTEA: return SDB_BLOB;
    default: return SDB_TEXT;
    }
}

/* The decoded bytes of a bytea column of the current row (cached). */
static struct pg_col *pg_bytea(struct sdb_pg_stmt *s, int col)
{
    struct pg_col *c = &s->cols[col];
    if (!c->done) {
        size_t n = 0;
        unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(s->res, s->row, col), &n);
        /* copied with a NUL after the bytes, so column_text works on a blob */
        unsigned char *z = raw ? malloc(n + 1) : NULL;
        if (z) {
            memcpy(z, raw, n);
            z[n] = 0;
        }
        PQfreemem(raw);
        raw = z;
        if (!raw)
            n = 0;
        c->data = raw;
        c->len = n;
        c->done = 1;
    }
    return c;
}

static const unsigned char *pg_column_text(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return NULL;
    if (PQftype(s->res, col) == PG_OID_BYTEA) {
        struct pg_col *c = pg_bytea(s, col);
        return c->data;
    }
    return (const unsigned char *)PQgetvalue(s->res, s->row, col);
}

static int64_t pg_column_int64(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return 0;
    const char *v = PQgetvalue(s->res, s->row, col);
    if (PQftype(s->res, col) == PG_OID_BOOL)
        return v[0] == 't';
    if (strpbrk(v, ".eE"))
        return (int64_t)strtod(v, NULL);
    return strtoll(v, NULL, 10);
}

static double pg_column_double(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return 0;
    const char *v = PQgetvalue(s->res, s->row, col);
    if (PQftype(s->res, col) == PG_OID_BOOL)
        return v[0] == 't';
    return strtod(v, NULL);
}

static const void *pg_column_blob(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return NULL;
    if (PQftype(s->res, col) == PG_OID_BYTEA)
        return pg_bytea(s, col)->data;
    return PQgetvalue(s->res, s->row, col);
}

static int pg_column_bytes(struct sdb_stmt *x, int col)
{
    struct sdb_pg_stmt *s = PGST(x);
    if (!pg_valid(s, col) || PQgetisnull(s->res, s->row, col))
        return 0;
    if (PQftype(s->res, col) == PG_OID_BYTEA)
        return (int)pg_bytea(s, col)->len;
    return PQgetlength(s->res, s->row, col);
}

static const struct sdb_ops sdb_pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .prepare = pg_prepare,
    .exec = pg_exec,
    .changes = pg_changes,
    .last_insert_rowid = pg_last_insert_rowid,
    .in_tx = pg_in_tx,
    .errmsg = pg_errmsg,
    .finalize = pg_finalize,
    .step = pg_step,
    .reset = pg_reset,
    .clear_bindings = pg_clear_bindings,
    .bind_param_count = pg_bind_param_count,
    .bind_null = pg_bind_null,
    .bind_int64 = pg_bind_int64,
    .bind_double = pg_bind_double,
    .bind_text = pg_bind_text,
    .bind_blob = pg_bind_blob,
    .column_type = pg_column_type,
    .column_int64 = pg_column_int64,
    .column_double = pg_column_double,
    .column_text = pg_column_text,
    .column_blob = pg_column_blob,
    .column_bytes = pg_column_bytes,
};

/* ---- LISTEN / NOTIFY ------------------------------------------------------------------ */

/* LISTEN on the current session. A failure (on a session that cannot
 * LISTEN, e.g. one that came up read-only) is retried on a new session
 * after listen_backoff_ms (100 ms doubling to 5 s), by sdb_pg_wait. */
static int pg_listen_now(struct sdb_pg *d)
{
    int rc;
    if (d->fail_listens > 0) {
        d->fail_listens--;
        pg_seterr(d, "LISTEN failed (sdb_pg_fail_listens)");
        rc = SDB_ERROR;
    } else {
        char sql[96];
        snprintf(sql, sizeof sql, "LISTEN %s", d->listen);
        PGresult *r = PQexec(d->conn, sql);
        rc = r && PQresultStatus(r) == PGRES_COMMAND_OK ? SDB_OK : pg_result_err(d, r);
        PQclear(r);
    }
    if (rc == SDB_OK) {
        d->listen_ok = 1;
        d->listen_gen = d->gen;
        d->listen_backoff_ms = 0;
    } else {
        d->listen_ok = 0;
        d->listen_backoff_ms = d->listen_backoff_ms ? (d->listen_backoff_ms * 2 > 5000 ? 5000 : d->listen_backoff_ms * 2)
                                                    : 100;
        d->next_listen_ms = pg_now_ms() + d->listen_backoff_ms;
    }
    return rc;
}

void sdb_pg_fail_listens(struct sdb *db, int n)
{
    if (db->ops == &sdb_pg_ops)
        PGDB(db)->fail_listens = n;
}

int sdb_pg_listen(struct sdb *db, const char *channel)
{
    if (db->ops != &sdb_pg_ops || !channel || !*channel || strlen(channel) >= sizeof PGDB(db)->listen ||
        strspn(channel, "abcdefghijklmnopqrstuvwxyz_") != strlen(channel))
        return SDB_MISUSE;
    struct sdb_pg *d = PGDB(db);
    snprintf(d->listen, sizeof d->listen, "%s", channel);
    int rc = pg_ready(d, 0);
    return rc == SDB_OK ? pg_listen_now(d) : rc;
}

/* Consume what the socket has; the number of notifications taken. */
static int pg_drain_notifies(struct sdb_pg *d)
{
    int n = 0;
    PGnotify *nf;
    while ((nf = PQnotifies(d->conn)) != NULL) {
        PQfreemem(nf);
        n++;
    }
    return n;
}

int sdb_pg_wait(struct sdb *db, int timeout_ms)
{
    if (db->ops != &sdb_pg_ops || !PGDB(db)->listen[0])
        return SDB_MISUSE;
    struct sdb_pg *d = PGDB(db);
    if (PQstatus(d->conn) == CONNECTION_BAD) {
        int64_t now = pg_now_ms();
        if (d->backoff_ms && now < d->next_try_ms) { /* wait out the backoff, at most timeout_ms */
            int64_t w = d->next_try_ms - now;
            poll(NULL, 0, (int)(w < timeout_ms ? w : timeout_ms));
            if (pg_now_ms() < d->next_try_ms)
                return SDB_BUSY;
        }
        if (pg_ready(d, 0) != SDB_OK)
            return SDB_BUSY;
    }
    if (!d->listen_ok) { /* the last LISTEN failed: a new session, after the backoff */
        int64_t now = pg_now_ms();
        if (now < d->next_listen_ms) {
            int64_t w = d->next_listen_ms - now;
            poll(NULL, 0, (int)(w < timeout_ms ? w : timeout_ms));
            if (pg_now_ms() < d->next_listen_ms)
                return SDB_BUSY;
        }
        if (pg_reconnect(d, pg_now_ms()) != SDB_OK)
            return SDB_BUSY;
    }
    if (d->listen_gen != d->gen) /* a new session: listen again, and say something may have been missed */
        return pg_listen_now(d) == SDB_OK ? 1 : SDB_BUSY;
    if (!PQconsumeInput(d->conn)) {
        pg_seterr(d, PQerrorMessage(d->conn));
        return SDB_BUSY;
    }
    if (pg_drain_notifies(d))
        return 1;
    struct pollfd p = {.fd = PQsocket(d->conn), .events = POLLIN};
    if (p.fd < 0)
        return SDB_BUSY;
    int r = poll(&p, 1, timeout_ms);
    if (r <= 0)
        return 0; /* timeout, or a signal: the caller loops */
    if (!PQconsumeInput(d->conn)) {
        pg_seterr(d, PQerrorMessage(d->conn));
        return SDB_BUSY; /* the next call reconnects */
    }
    return pg_drain_notifies(d) > 0;
}

int sdb_pg_open(const char *url, int lock_timeout_ms, int statement_timeout_ms, struct sdb **out, char *err,
                size_t err_cap)
{
    *out = NULL;
    if (err_cap)
        err[0] = 0;
    struct sdb_pg *d = calloc(1, sizeof *d);
    if (!d)
        return SDB_NOMEM;
    d->base.ops = &sdb_pg_ops;
    /* the defaults first: the URL's own settings, expanded from dbname, win */
    static const char *const keys[] = {"connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
                                       "keepalives_count", "tcp_user_timeout", "dbname", NULL};
    const char *const vals[] = {SDB_PG_CONNECT_TIMEOUT_S, "1", SDB_PG_KEEPALIVE_IDLE_S, SDB_PG_KEEPALIVE_INTERVAL_S,
                                SDB_PG_KEEPALIVE_COUNT, SDB_PG_TCP_USER_TIMEOUT_MS, url, NULL};
    d->conn = PQconnectdbParams(keys, vals, 1);
    if (!d->conn) {
        free(d);
        return SDB_NOMEM;
    }
    if (PQstatus(d->conn) != CONNECTION_OK) {
        pg_seterr(d, PQerrorMessage(d->conn));
        if (err_cap)
            snprintf(err, err_cap, "%s", d->err);
        pg_close(&d->base);
        return SDB_CANTOPEN;
    }
    d->lock_timeout_ms = lock_timeout_ms;
    d->statement_timeout_ms = statement_timeout_ms;
    int rc = pg_session(d);
    if (rc != SDB_OK) {
        if (err_cap)
            snprintf(err, err_cap, "%s", d->err);
        pg_close(&d->base);
        return rc;
    }
    *out = &d->base;
    return SDB_OK;
}
