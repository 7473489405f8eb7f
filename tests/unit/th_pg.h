/*
 * th_pg.h - run store tests on PostgreSQL.
 *
 * When JOBD_TEST_PG_URL names a PostgreSQL server (a URL whose user may
 * CREATE DATABASE; scripts/pg-cluster start prints one), th_pg_opts gives
 * the store options of a test's data directory a database of its own on
 * that server: "th_<hash of the directory>", dropped and created anew the
 * first time the process asks for that directory (each test is one process),
 * so a test that reopens its directory finds its data again and no test sees
 * another's (or an earlier run's) rows. Without the variable the options are left as they are (SQLite
 * in the directory). The unit binary runs the same store tests either way:
 *
 *     url=$(scripts/pg-cluster start /tmp/pg) &&
 *     JOBD_TEST_PG_URL=$url build/asan/tests/unit store_; scripts/pg-cluster stop /tmp/pg
 */
#ifndef TESTS_UNIT_TH_PG_H
#define TESTS_UNIT_TH_PG_H

#include <stdint.h>

#include "jobd/store/sdb.h"
#include "jobd/store/store.h"

/* *o = *base (or STORE_OPTS_DEFAULT when base is NULL), with .database set
 * as above. The URL lives until the process ends. Fails the test if the
 * database cannot be created. */
void th_pg_opts(const char *dir, const struct store_opts *base, struct store_opts *o);

/* Run sql (parameters $1..$n, text) on the database th_pg_opts gave dir and
 * copy column 0 of its first row into out (cap bytes; "" when NULL). 0, or
 * -1 when there is no row. Fails the test on an SQL error. */
int th_pg_query1(const char *dir, const char *sql, const char *const *params, int n, char *out, size_t cap);

/* store_open(dir, opts from th_pg_opts(dir, base), out): the store of dir
 * on whichever engine this run tests. */
int th_store_open(const char *dir, const struct store_opts *base, struct store **out);

/* A second connection to the database of dir, on this run's engine, through
 * the store's driver layer (jobd/store/sdb.h: SQLite's calls, spelled
 * sdb_*), for tests that read SQL directly. Placeholders are ?N. Fails the
 * test if it cannot connect. sdb_close it. */
struct sdb *th_db_open(const char *dir);

/* Column 0 of the first row of sql (no parameters) on th_db_open(dir), as
 * an integer; fails the test on an error or no row. */
int64_t th_db_int(const char *dir, const char *sql);

/* 1 when JOBD_TEST_PG_URL is set. */
int th_pg_on(void);

#endif
