/* th_pg.c - see th_pg.h. */
#include "tests/unit/th_pg.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "common/hash.h"
#include "tests/th.h"

static void th_pg_quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

int th_pg_on(void)
{
    const char *u = getenv("JOBD_TEST_PG_URL");
    return u && *u;
}

/* Thread-safe (tests open stores from many threads at once): each
 * directory's URL is written once, under the lock, into a slot that is never
 * rewritten, and every caller gets that slot. */
void th_pg_opts(const char *dir, const struct store_opts *base, struct store_opts *o)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        uint64_t h;
        char url[1024];
    } dbs[64];
    static int n_dbs;

    *o = base ? *base : STORE_OPTS_DEFAULT;
    if (!th_pg_on())
        return;
    const char *url = getenv("JOBD_TEST_PG_URL");
    uint64_t h = hash_fnv(dir, strlen(dir)); /* a database per directory */
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_dbs; i++)
        if (dbs[i].h == h) {
            o->database = dbs[i].url;
            pthread_mutex_unlock(&mu);
            return;
        }
    CHECK(n_dbs < 64);
    char name[40];
    snprintf(name, sizeof name, "th_%016llx", (unsigned long long)h);

    /* <scheme>://<authority>/<db>[?params] -> the same with db = name */
    const char *auth = strstr(url, "://");
    CHECK(auth != NULL);
    const char *slash = strchr(auth + 3, '/');
    const char *q = slash ? strchr(slash, '?') : NULL;
    size_t head = slash ? (size_t)(slash - url) : strlen(url);
    dbs[n_dbs].h = h;
    snprintf(dbs[n_dbs].url, sizeof dbs[n_dbs].url, "%.*s/%s%s", (int)head, url, name, q ? q : "");

    /* The first use of dir in this process (each test is one) makes the
     * database afresh: temp directory names come back in later runs. */
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK)
        th_fail(__FILE__, __LINE__, "connect", "%s", PQerrorMessage(c));
    PQsetNoticeProcessor(c, th_pg_quiet, NULL);
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        th_fail(__FILE__, __LINE__, "drop database", "%s", PQresultErrorMessage(r));
    PQclear(r);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        th_fail(__FILE__, __LINE__, "create database", "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    o->database = dbs[n_dbs++].url;
    pthread_mutex_unlock(&mu);
}

int th_pg_query1(const char *dir, const char *sql, const char *const *params, int n, char *out, size_t cap)
{
    struct store_opts o;
    th_pg_opts(dir, NULL, &o);
    CHECK(o.database != NULL);
    PGconn *c = PQconnectdb(o.database);
    if (PQstatus(c) != CONNECTION_OK)
        th_fail(__FILE__, __LINE__, "connect", "%s", PQerrorMessage(c));
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        th_fail(__FILE__, __LINE__, sql, "%s", PQresultErrorMessage(r));
    int rc = -1;
    if (PQntuples(r) > 0) {
        snprintf(out, cap, "%s", PQgetisnull(r, 0, 0) ? "" : PQgetvalue(r, 0, 0));
        rc = 0;
    }
    PQclear(r);
    PQfinish(c);
    return rc;
}

int th_store_open(const char *dir, const struct store_opts *base, struct store **out)
{
    struct store_opts o;
    th_pg_opts(dir, base, &o);
    return store_open(dir, &o, out);
}

struct sdb *th_db_open(const char *dir)
{
    struct store_opts o;
    th_pg_opts(dir, NULL, &o);
    struct sdb *db = NULL;
    char err[512] = "";
    int r;
    if (o.database) {
        r = sdb_pg_open(o.database, 5000, 0, &db, err, sizeof err);
    } else {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, STORE_DB_NAME);
        r = sdb_sqlite_open(path, 5000, &db);
    }
    if (r != SDB_OK)
        th_fail(__FILE__, __LINE__, "th_db_open", "rc %d: %s", r, err);
    return db;
}

int64_t th_db_int(const char *dir, const char *sql)
{
    struct sdb *db = th_db_open(dir);
    struct sdb_stmt *s = NULL;
    int r = sdb_prepare(db, sql, &s);
    if (r != SDB_OK)
        th_fail(__FILE__, __LINE__, sql, "prepare: rc %d: %s", r, sdb_errmsg(db));
    r = sdb_step(s);
    if (r != SDB_ROW)
        th_fail(__FILE__, __LINE__, sql, "step: rc %d: %s", r, sdb_errmsg(db));
    int64_t v = sdb_column_int64(s, 0);
    sdb_finalize(s);
    sdb_close(db);
    return v;
}
