/*
 * test_sdb_pg.c - the PostgreSQL driver of the store's driver layer
 * (jobd/store/sdb_pg.c): the pure parts (placeholder rewrite, SQLSTATE
 * mapping) always, and the driver against a real server: the one in
 * $JOBD_TEST_PG_URL, or else a throwaway cluster started here with
 * scripts/pg-cluster (skipped when PostgreSQL is not installed).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobd/store/sdb.h"
#include "tests/th.h"

TEST(sdb_pg_rewrite_numbers_placeholders_outside_quotes)
{
    char *o = NULL;
    int n = -1;
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT ?1, '?2', \"a?3\", ?12 FROM t WHERE x = ?2 AND y = 'it''s ?4'", &o,
                                &n),
                 SDB_OK);
    CHECK_EQ_STR(o, "SELECT $1, '?2', \"a?3\", $12 FROM t WHERE x = $2 AND y = 'it''s ?4'");
    CHECK_EQ_INT(n, 12);
    free(o);
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT 1", &o, &n), SDB_OK);
    CHECK_EQ_INT(n, 0);
    free(o);
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT ?", &o, &n), SDB_ERROR);
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT ?65", &o, &n), SDB_ERROR);
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT ?0", &o, &n), SDB_ERROR);
    CHECK_EQ_INT(sdb_pg_rewrite("SELECT 'open", &o, &n), SDB_ERROR);
}

TEST(sdb_pg_sqlstate_maps_classes_onto_sqlite_codes)
{
    CHECK_EQ_INT(sdb_pg_sqlstate("23505"), SDB_CONSTRAINT_UNIQUE);
    CHECK_EQ_INT(sdb_pg_sqlstate("23503"), SDB_CONSTRAINT_FOREIGNKEY);
    CHECK_EQ_INT(sdb_pg_sqlstate("23514"), SDB_CONSTRAINT);
    CHECK_EQ_INT(sdb_pg_sqlstate("40001"), SDB_BUSY);
    CHECK_EQ_INT(sdb_pg_sqlstate("40P01"), SDB_BUSY);
    CHECK_EQ_INT(sdb_pg_sqlstate("55P03"), SDB_BUSY);
    CHECK_EQ_INT(sdb_pg_sqlstate("57014"), SDB_BUSY_TIMEOUT);
    CHECK_EQ_INT(sdb_pg_sqlstate("57014") & 0xff, SDB_BUSY);
    CHECK_EQ_INT(sdb_pg_sqlstate("08006"), SDB_IOERR);
    CHECK_EQ_INT(sdb_pg_sqlstate("57P01"), SDB_IOERR);
    CHECK_EQ_INT(sdb_pg_sqlstate("53100"), SDB_FULL);
    CHECK_EQ_INT(sdb_pg_sqlstate("28P01"), SDB_PERM);
    CHECK_EQ_INT(sdb_pg_sqlstate("XX001"), SDB_CORRUPT);
    CHECK_EQ_INT(sdb_pg_sqlstate("42P01"), SDB_ERROR);
    CHECK_EQ_INT(sdb_pg_sqlstate(NULL), SDB_ERROR);
    CHECK_EQ_INT(sdb_pg_sqlstate("235"), SDB_ERROR);
}

/* ---- against a server ------------------------------------------------------- */

static char pg_dir[256];

static void pg_stop(void)
{
    if (pg_dir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "scripts/pg-cluster stop '%s'", pg_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "pg-cluster stop failed\n");
        pg_dir[0] = 0;
    }
}

/* The URL of a server for this test (started here if need be). */
static void pg_url(char *url, size_t cap)
{
    const char *env = getenv("JOBD_TEST_PG_URL");
    if (env && *env) {
        snprintf(url, cap, "%s", env);
        return;
    }
    snprintf(pg_dir, sizeof pg_dir, "/tmp/th-pg-%d", (int)getpid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "scripts/pg-cluster start '%s'", pg_dir);
    FILE *p = popen(cmd, "r");
    CHECK(p);
    char line[256] = "";
    char *got = fgets(line, sizeof line, p);
    int st = pclose(p);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) {
        pg_dir[0] = 0;
        th_skip("PostgreSQL is not installed");
    }
    atexit(pg_stop);
    CHECK(got && st == 0);
    line[strcspn(line, "\n")] = 0;
    snprintf(url, cap, "%s", line);
}

static void exec_ok(struct sdb *db, const char *sql)
{
    int r = sdb_exec(db, sql);
    if (r != SDB_OK)
        th_fail(__FILE__, __LINE__, sql, "rc %d: %s", r, sdb_errmsg(db));
}

/* A "server" that completes TCP handshakes (the listen backlog) and never
 * says a word: without connect_timeout libpq would wait for its answer
 * forever. */
TEST(sdb_pg_open_gives_up_on_a_server_that_never_answers)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK_EQ_INT(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ_INT(listen(fd, 8), 0);
    CHECK_EQ_INT(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    char url[128], err[256];
    snprintf(url, sizeof url, "postgresql://jobd@127.0.0.1:%d/jobd", ntohs(a.sin_port));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct sdb *db = NULL;
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db, err, sizeof err), SDB_CANTOPEN);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(s >= 4.0 && s < 20.0);
    CHECK(strstr(err, "timeout") != NULL);
    close(fd);
}

TEST(sdb_pg_driver_round_trips_against_a_server)
{
    char url[256], err[512];
    pg_url(url, sizeof url);
    struct sdb *db = NULL;

    /* a wrong password fails at open with libpq's message */
    char bad[300];
    const char *at = strchr(url + strlen("postgresql://"), '@');
    CHECK(at);
    snprintf(bad, sizeof bad, "postgresql://jobd:wrong%s", at);
    if (!getenv("JOBD_TEST_PG_URL")) {
        CHECK_EQ_INT(sdb_pg_open(bad, 1000, 0, &db, err, sizeof err), SDB_CANTOPEN);
        CHECK(db == NULL);
        CHECK(strstr(err, "password authentication failed") != NULL);
    }
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db, err, sizeof err), SDB_OK);
    exec_ok(db, "DROP TABLE IF EXISTS sdbt; CREATE TABLE sdbt (id BIGINT PRIMARY KEY, "
                "name TEXT UNIQUE, blob BYTEA, score DOUBLE PRECISION, flag BOOLEAN)");

    struct sdb_stmt *ins = NULL, *sel = NULL;
    CHECK_EQ_INT(sdb_prepare(db, "INSERT INTO sdbt(id, name, blob, score, flag) VALUES (?1, ?2, ?3, ?4, ?5) "
                                 "ON CONFLICT (id) DO NOTHING RETURNING id",
                             &ins),
                 SDB_OK);
    CHECK_EQ_INT(sdb_bind_parameter_count(ins), 5);
    static const unsigned char bytes[] = {0, 1, 2, 0xff, 0, '\\', 'x'};
    const char counted[] = "alphaXXXX";
    CHECK_EQ_INT(sdb_bind_int64(ins, 1, 9000000000LL), SDB_OK);
    CHECK_EQ_INT(sdb_bind_text(ins, 2, counted, 5), SDB_OK);
    CHECK_EQ_INT(sdb_bind_blob(ins, 3, bytes, (int)sizeof bytes), SDB_OK);
    CHECK_EQ_INT(sdb_bind_double(ins, 4, 0.1), SDB_OK);
    CHECK_EQ_INT(sdb_bind_null(ins, 5), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(ins, 0), 9000000000LL);
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    CHECK_EQ_INT(sdb_changes(db), 1);
    /* reset keeps the bindings: the same row again is a no-op (ON CONFLICT) */
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    CHECK_EQ_INT(sdb_changes(db), 0);
    /* a second row; a unique violation on name maps to CONSTRAINT_UNIQUE */
    sdb_reset(ins);
    sdb_clear_bindings(ins);
    CHECK_EQ_INT(sdb_bind_int(ins, 1, 2), SDB_OK);
    CHECK_EQ_INT(sdb_bind_text(ins, 2, "beta", -1), SDB_OK);
    CHECK_EQ_INT(sdb_bind_int(ins, 5, 1), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_ERROR); /* int8 into BOOLEAN: a type error */
    CHECK(strlen(sdb_errmsg(db)) > 0);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_bind_null(ins, 5), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_ROW);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_bind_int(ins, 1, 3), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_CONSTRAINT_UNIQUE);
    sdb_reset(ins);

    /* reads: a NULL parameter whose first use has no type needs a cast (sdb_pg.c),
     * column types, bytea, booleans */
    CHECK_EQ_INT(sdb_prepare(db, "SELECT id, name, blob, score, flag, id > 5, count(*) OVER () FROM sdbt "
                                 "WHERE (?1::text IS NULL OR name = ?1) ORDER BY id",
                             &sel),
                 SDB_OK);
    int r = sdb_step(sel);
    if (r != SDB_ROW)
        th_fail(__FILE__, __LINE__, "step", "rc %d: %s", r, sdb_errmsg(db));
    CHECK_EQ_INT(sdb_column_int64(sel, 0), 2);
    CHECK_EQ_STR((const char *)sdb_column_text(sel, 1), "beta");
    CHECK_EQ_INT(sdb_column_type(sel, 2), SDB_NULL);
    CHECK(sdb_column_blob(sel, 2) == NULL);
    CHECK_EQ_INT(sdb_column_int(sel, 5), 0);
    CHECK_EQ_INT(sdb_column_int64(sel, 6), 2);
    CHECK_EQ_INT(sdb_step(sel), SDB_ROW);
    CHECK_EQ_INT(sdb_column_type(sel, 0), SDB_INTEGER);
    CHECK_EQ_STR((const char *)sdb_column_text(sel, 1), "alpha");
    CHECK_EQ_INT(sdb_column_bytes(sel, 1), 5);
    CHECK_EQ_INT(sdb_column_type(sel, 2), SDB_BLOB);
    CHECK_EQ_INT(sdb_column_bytes(sel, 2), sizeof bytes);
    CHECK(memcmp(sdb_column_blob(sel, 2), bytes, sizeof bytes) == 0);
    CHECK_EQ_INT(sdb_column_type(sel, 3), SDB_FLOAT);
    CHECK(sdb_column_double(sel, 3) == 0.1);
    CHECK_EQ_INT(sdb_column_int(sel, 5), 1);
    CHECK_EQ_INT(sdb_step(sel), SDB_DONE);
    sdb_reset(sel);
    CHECK_EQ_INT(sdb_bind_text(sel, 1, "alpha", -1), SDB_OK);
    CHECK_EQ_INT(sdb_step(sel), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(sel, 6), 1);
    CHECK_EQ_INT(sdb_step(sel), SDB_DONE);
    sdb_reset(sel);

    /* transactions: in_tx follows BEGIN / COMMIT; a failed statement inside
     * one is undone by a savepoint, the transaction goes on */
    CHECK_EQ_INT(sdb_in_tx(db), 0);
    exec_ok(db, "BEGIN");
    CHECK_EQ_INT(sdb_in_tx(db), 1);
    exec_ok(db, "SAVEPOINT w");
    CHECK_EQ_INT(sdb_step(ins), SDB_CONSTRAINT_UNIQUE);
    sdb_reset(ins);
    exec_ok(db, "ROLLBACK TO w");
    exec_ok(db, "RELEASE w");
    exec_ok(db, "UPDATE sdbt SET score = 2 WHERE id = 2");
    exec_ok(db, "COMMIT");
    CHECK_EQ_INT(sdb_in_tx(db), 0);
    CHECK_EQ_INT(sdb_exec(db, "SELECT * FROM no_such_table"), SDB_ERROR);
    CHECK(strstr(sdb_errmsg(db), "no_such_table") != NULL);

    sdb_finalize(ins);
    sdb_finalize(sel);
    exec_ok(db, "DROP TABLE sdbt");
    sdb_close(db);
}

/* sdb_pg_send: a statement in flight while the caller works; its rows come
 * back at its next step, also when another statement ran first (which
 * waits for it); a reset drops it; its error comes back at the step; the
 * bound text may be freed once it is sent; SQLite's statements refuse it. */
TEST(sdb_pg_send_runs_a_statement_while_the_caller_goes_on)
{
    char url[256], err[512];
    pg_url(url, sizeof url);
    struct sdb *db = NULL;
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db, err, sizeof err), SDB_OK);
    exec_ok(db, "DROP TABLE IF EXISTS sdbs; CREATE TABLE sdbs (id BIGINT PRIMARY KEY, name TEXT)");
    struct sdb_stmt *ins = NULL, *cnt = NULL;
    CHECK_EQ_INT(sdb_prepare(db, "INSERT INTO sdbs SELECT * FROM unnest(?1::bigint[], ?2::text[]) "
                                 "ON CONFLICT (id) DO NOTHING RETURNING id", &ins), SDB_OK);
    CHECK_EQ_INT(sdb_prepare(db, "SELECT count(*) FROM sdbs", &cnt), SDB_OK);

    /* sent, the bound strings freed, then stepped: every row, in order */
    char *ids = strdup("{1,2,3}"), *names = strdup("{a,b,c}");
    CHECK_EQ_INT(sdb_bind_text(ins, 1, ids, -1), SDB_OK);
    CHECK_EQ_INT(sdb_bind_text(ins, 2, names, -1), SDB_OK);
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_OK);
    memset(ids, 'x', 7), memset(names, 'x', 7);
    free(ids), free(names);
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_MISUSE); /* already started */
    for (int id = 1; id <= 3; id++) {
        CHECK_EQ_INT(sdb_step(ins), SDB_ROW);
        CHECK_EQ_INT(sdb_column_int64(ins, 0), id);
    }
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    sdb_clear_bindings(ins);
    sdb_reset(ins);

    /* another statement while one is in flight: it waits for it, sees its
     * rows, and the one in flight still answers its own step */
    CHECK_EQ_INT(sdb_bind_text(ins, 1, "{3,4}", -1), SDB_OK);
    CHECK_EQ_INT(sdb_bind_text(ins, 2, "{c,d}", -1), SDB_OK);
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_OK);
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 0), 4);
    sdb_reset(cnt);
    CHECK_EQ_INT(sdb_step(ins), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(ins, 0), 4); /* 3 was taken */
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    sdb_reset(ins);

    /* inside a transaction, a reset drops it (written, its answer unread);
     * an error comes back at the step and fails the transaction */
    exec_ok(db, "BEGIN");
    CHECK_EQ_INT(sdb_bind_text(ins, 1, "{5}", -1), SDB_OK);
    CHECK_EQ_INT(sdb_bind_text(ins, 2, "{e}", -1), SDB_OK);
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_OK);
    CHECK_EQ_INT(sdb_in_tx(db), 1);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 0), 5);
    sdb_reset(cnt);
    CHECK_EQ_INT(sdb_bind_text(ins, 1, "{6,x}", -1), SDB_OK); /* not a bigint */
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_ERROR);
    CHECK(strstr(sdb_errmsg(db), "bigint") != NULL);
    sdb_reset(ins);
    exec_ok(db, "ROLLBACK");
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 0), 4);
    sdb_reset(cnt);

    /* finalized while in flight: the connection is free for the next call */
    CHECK_EQ_INT(sdb_bind_text(ins, 1, "{7}", -1), SDB_OK);
    CHECK_EQ_INT(sdb_pg_send(ins), SDB_OK);
    sdb_finalize(ins);
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 0), 5);
    sdb_finalize(cnt);
    exec_ok(db, "DROP TABLE sdbs");
    sdb_close(db);

    struct sdb *lite = NULL;
    struct sdb_stmt *one = NULL;
    CHECK_EQ_INT(sdb_sqlite_open(":memory:", 1000, &lite), SDB_OK);
    CHECK_EQ_INT(sdb_prepare(lite, "SELECT 1", &one), SDB_OK);
    CHECK_EQ_INT(sdb_pg_send(one), SDB_MISUSE);
    sdb_finalize(one);
    sdb_close(lite);
}

static void pg_cluster(const char *what)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "scripts/pg-cluster %s '%s'", what, pg_dir);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(sdb_pg_outage_fails_busy_keeps_the_lost_transaction_failed_and_reconnects)
{
    if (getenv("JOBD_TEST_PG_URL"))
        th_skip("needs a cluster of its own to stop (runs without JOBD_TEST_PG_URL)");
    char url[256], err[512];
    pg_url(url, sizeof url);
    struct sdb *db = NULL;
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db, err, sizeof err), SDB_OK);
    exec_ok(db, "CREATE TABLE o (x BIGINT)");
    struct sdb_stmt *ins = NULL, *cnt = NULL;
    CHECK_EQ_INT(sdb_prepare(db, "INSERT INTO o VALUES (?1)", &ins), SDB_OK);
    CHECK_EQ_INT(sdb_prepare(db, "SELECT count(*), coalesce(sum(x), 0) FROM o", &cnt), SDB_OK);
    exec_ok(db, "BEGIN");
    CHECK_EQ_INT(sdb_bind_int64(ins, 1, 1), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    sdb_reset(ins);

    pg_cluster("halt"); /* the database goes away mid-transaction */
    CHECK_EQ_INT(sdb_step(ins), SDB_BUSY);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_in_tx(db), 1);
    CHECK_EQ_INT(sdb_step(cnt), SDB_BUSY); /* reconnect fails: backoff starts */
    sdb_reset(cnt);
    CHECK_EQ_INT(sdb_step(cnt), SDB_BUSY); /* within the backoff: no attempt */
    sdb_reset(cnt);

    pg_cluster("resume");
    usleep(300 * 1000); /* past the backoff */
    /* connected again, but the transaction was lost: nothing of it runs in
     * autocommit, every statement fails until the owner rolls back */
    CHECK_EQ_INT(sdb_bind_int64(ins, 1, 2), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_BUSY);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_exec(db, "COMMIT"), SDB_BUSY);
    CHECK_EQ_INT(sdb_in_tx(db), 1);
    exec_ok(db, "ROLLBACK");
    CHECK_EQ_INT(sdb_in_tx(db), 0);
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 0), 0); /* neither 1 nor 2 was committed */
    sdb_reset(cnt);
    CHECK_EQ_INT(sdb_bind_int64(ins, 1, 3), SDB_OK);
    CHECK_EQ_INT(sdb_step(ins), SDB_DONE);
    sdb_reset(ins);
    CHECK_EQ_INT(sdb_step(cnt), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(cnt, 1), 3);
    sdb_reset(cnt);
    sdb_finalize(ins);
    sdb_finalize(cnt);
    sdb_close(db);
}

/* statement_timeout: the server cancels a statement that runs longer
 * (SQLSTATE 57014, SDB_BUSY_TIMEOUT with the server's message), inside a
 * transaction too, and the session goes on: same backend, no reconnect;
 * a reconnected session gets the timeout again. 0 leaves the server's
 * default (none). */
TEST(sdb_pg_statement_timeout_cancels_a_long_statement_and_the_session_goes_on)
{
    char url[256], err[512];
    pg_url(url, sizeof url);
    struct sdb *db = NULL, *none = NULL;
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 200, &db, err, sizeof err), SDB_OK);
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &none, err, sizeof err), SDB_OK);
    struct sdb_stmt *show = NULL, *pid = NULL, *slow = NULL;
    CHECK_EQ_INT(sdb_prepare(db, "SELECT current_setting('statement_timeout')", &show), SDB_OK);
    CHECK_EQ_INT(sdb_step(show), SDB_ROW);
    CHECK_EQ_STR((const char *)sdb_column_text(show, 0), "200ms");
    sdb_reset(show);
    CHECK_EQ_INT(sdb_prepare(db, "SELECT pg_backend_pid()", &pid), SDB_OK);
    CHECK_EQ_INT(sdb_step(pid), SDB_ROW);
    int64_t backend = sdb_column_int64(pid, 0);
    sdb_reset(pid);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(sdb_prepare(db, "SELECT pg_sleep(5)", &slow), SDB_OK);
    CHECK_EQ_INT(sdb_step(slow), SDB_BUSY_TIMEOUT);
    sdb_reset(slow);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(s < 3.0); /* cancelled at 0.2 s, not slept to 5 */
    CHECK(strstr(sdb_errmsg(db), "statement timeout") != NULL);
    /* inside a transaction: the statement fails, the transaction is the owner's to roll back */
    exec_ok(db, "BEGIN");
    CHECK_EQ_INT(sdb_step(slow), SDB_BUSY_TIMEOUT);
    sdb_reset(slow);
    CHECK_EQ_INT(sdb_in_tx(db), 1);
    exec_ok(db, "ROLLBACK");
    CHECK_EQ_INT(sdb_step(pid), SDB_ROW);
    CHECK_EQ_INT(sdb_column_int64(pid, 0), backend); /* the same session */
    sdb_reset(pid);

    /* a new session (its backend terminated) gets the timeout again */
    char kill[96];
    snprintf(kill, sizeof kill, "SELECT pg_terminate_backend(%lld)", (long long)backend);
    exec_ok(none, kill);
    int r = SDB_BUSY;
    for (int i = 0; i < 100 && r == SDB_BUSY; i++) { /* the drop is seen, then the reconnect */
        r = sdb_step(show);
        if (r != SDB_ROW) {
            sdb_reset(show);
            usleep(50 * 1000);
        }
    }
    CHECK_EQ_INT(r, SDB_ROW);
    CHECK_EQ_STR((const char *)sdb_column_text(show, 0), "200ms");
    sdb_reset(show);
    CHECK_EQ_INT(sdb_step(slow), SDB_BUSY_TIMEOUT);
    sdb_reset(slow);

    /* 0: the server's default, no timeout */
    struct sdb_stmt *show0 = NULL;
    CHECK_EQ_INT(sdb_prepare(none, "SELECT current_setting('statement_timeout')", &show0), SDB_OK);
    CHECK_EQ_INT(sdb_step(show0), SDB_ROW);
    CHECK_EQ_STR((const char *)sdb_column_text(show0, 0), "0");
    sdb_finalize(show0);
    sdb_finalize(show);
    sdb_finalize(pid);
    sdb_finalize(slow);
    sdb_close(db);
    sdb_close(none);
}

/* Wait on db until it reports a notification or a re-LISTEN (1), at most
 * n_calls calls of 200 ms; the number of SDB_BUSY answers in *busy. */
static int wait_until_woken(struct sdb *db, int n_calls, int *busy)
{
    for (int i = 0; i < n_calls; i++) {
        int r = sdb_pg_wait(db, 200);
        if (r == 1)
            return 1;
        if (r == SDB_BUSY)
            (*busy)++;
        else if (r != 0)
            return r;
    }
    return 0;
}

static int64_t one_int(struct sdb *db, const char *sql)
{
    struct sdb_stmt *s = NULL;
    CHECK_EQ_INT(sdb_prepare(db, sql, &s), SDB_OK);
    int r;
    for (int i = 0; i < 100 && (r = sdb_step(s)) == SDB_BUSY; i++) { /* reconnecting, with its backoff */
        sdb_reset(s);
        usleep(50 * 1000);
    }
    CHECK_EQ_INT(r, SDB_ROW);
    int64_t v = sdb_column_int64(s, 0);
    sdb_finalize(s);
    return v;
}

TEST(sdb_pg_listen_comes_back_after_its_backend_is_killed_and_a_failed_listen_is_retried)
{
    char url[256], err[512], sql[128];
    pg_url(url, sizeof url);
    struct sdb *db = NULL, *db2 = NULL;
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db, err, sizeof err), SDB_OK);
    CHECK_EQ_INT(sdb_pg_open(url, 1000, 0, &db2, err, sizeof err), SDB_OK);
    CHECK_EQ_INT(sdb_pg_listen(db, "sdbt_work"), SDB_OK);
    int busy = 0;
    exec_ok(db2, "NOTIFY sdbt_work");
    CHECK_EQ_INT(wait_until_woken(db, 25, &busy), 1);

    /* the listener's backend is killed and its next two LISTENs fail: the
     * wait reports the outage (SDB_BUSY), reconnects, retries LISTEN after
     * its backoff until it holds, and says so (1) */
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%lld)", (long long)one_int(db, "SELECT pg_backend_pid()"));
    sdb_pg_fail_listens(db, 2);
    exec_ok(db2, sql);
    busy = 0;
    CHECK_EQ_INT(wait_until_woken(db, 50, &busy), 1);
    CHECK(busy >= 3); /* the drop, then the two failed LISTENs */
    CHECK_EQ_INT(one_int(db, "SELECT count(*) FROM pg_listening_channels()"), 1);
    exec_ok(db2, "NOTIFY sdbt_work"); /* wake-ups work again */
    CHECK_EQ_INT(wait_until_woken(db, 25, &busy), 1);

    /* killed again and reconnected by a statement on the same connection
     * (not by the wait): the wait still LISTENs again */
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%lld)", (long long)one_int(db, "SELECT pg_backend_pid()"));
    exec_ok(db2, sql);
    usleep(100 * 1000);
    CHECK_EQ_INT(one_int(db, "SELECT 1"), 1); /* fails once (the drop), then reconnects */
    CHECK_EQ_INT(wait_until_woken(db, 25, &busy), 1);
    CHECK_EQ_INT(one_int(db, "SELECT count(*) FROM pg_listening_channels()"), 1);
    exec_ok(db2, "NOTIFY sdbt_work");
    CHECK_EQ_INT(wait_until_woken(db, 25, &busy), 1);
    sdb_close(db2);
    sdb_close(db);
}
