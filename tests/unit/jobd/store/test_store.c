/* Tests for jobd/store*.c on real SQLite files in th_tmpdir(). */
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "jobd/store/store.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000

static struct store *open_store(const char *dir)
{
    struct store *st = NULL;
    struct store_opts o;
    th_pg_opts(dir, NULL, &o);
    CHECK_EQ_INT(store_open(dir, &o, &st), 0);
    CHECK(st != NULL);
    return st;
}

/* A tenant with one batch input file row. */
static void make_tenant_file(struct store *st, const char *name, struct store_tenant *t,
                             struct store_file *f)
{
    CHECK_EQ_INT(store_tenant_create(st, name, NOW, t), 0);
    memset(f, 0, sizeof *f);
    snprintf(f->tenant_id, sizeof f->tenant_id, "%s", t->id);
    snprintf(f->purpose, sizeof f->purpose, "batch");
    snprintf(f->filename, sizeof f->filename, "in.jsonl");
    snprintf(f->storage_path, sizeof f->storage_path, "files/%s-in", name);
    snprintf(f->sha256, sizeof f->sha256, "%064d", 0);
    f->bytes = 10;
    f->created_at = NOW;
    CHECK_EQ_INT(store_file_create(st, f), 0);
}

static void make_batch(struct store *st, const char *tenant, const char *file, struct store_batch *b)
{
    struct store_batch_new nb = {"/v1/chat/completions", file, 86400, NULL, 0, NULL};
    CHECK_EQ_INT(store_batch_create(st, tenant, &nb, NOW, b), 0);
}

TEST(store_migrates_fresh_db_and_reopens_idempotently)
{
    const char *dir = th_tmpdir();
    char sub[400];
    snprintf(sub, sizeof sub, "%s/data", dir); /* created by store_open */
    CHECK(store_schema_latest() >= 1);
    struct store *st = open_store(sub);
    int v = -1;
    CHECK_EQ_INT(store_schema_version(st, &v), 0);
    CHECK_EQ_INT(v, th_pg_on() ? store_schema_pg_latest() : store_schema_latest());
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    store_close(st);
    for (int i = 0; i < 2; i++) { /* re-open: no migration runs again, data kept */
        st = open_store(sub);
        CHECK_EQ_INT(store_schema_version(st, &v), 0);
        CHECK_EQ_INT(v, th_pg_on() ? store_schema_pg_latest() : store_schema_latest());
        struct store_tenant t2;
        CHECK_EQ_INT(store_tenant_get_by_name(st, "acme", &t2), 0);
        CHECK_EQ_STR(t2.id, t.id);
        store_close(st);
    }
    const char *tables[] = {"tenants", "api_keys", "files", "batches", "requests", "idempotency_keys",
                            "dead_letters", "leases", "results", "webhook_endpoints",
                            "webhook_events", "webhook_deliveries", "usage_ledger"};
    if (th_pg_on()) { /* every table of the schema exists */
        for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
            char cnt[16];
            const char *p[] = {tables[i]};
            CHECK_EQ_INT(th_pg_query1(sub, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' "
                                           "AND tablename = $1", p, 1, cnt, sizeof cnt), 0);
            if (strcmp(cnt, "1") != 0)
                th_fail(__FILE__, __LINE__, "table exists", "missing table %s", tables[i]);
        }
        /* ids and the keys that point at them compare byte by byte, as on
         * SQLite (a new table's id column needs COLLATE "C" too) */
        char bad[512];
        CHECK_EQ_INT(th_pg_query1(sub, "SELECT coalesce(string_agg(table_name || '.' || column_name, ' '), '') "
                                       "FROM information_schema.columns WHERE table_schema = current_schema() "
                                       "AND data_type = 'text' AND coalesce(collation_name, '') <> 'C' "
                                       "AND (column_name IN ('id', 'custom_id', 'model', 'canonical', 'key', "
                                       "'reuse_key') OR column_name LIKE '%\\_id')",
                                  NULL, 0, bad, sizeof bad), 0);
        CHECK_EQ_STR(bad, "");
        return;
    }
    /* the pragmas took: WAL mode and foreign keys */
    char path[700];
    snprintf(path, sizeof path, "%s/jobd.db", sub);
    sqlite3 *db;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s;
    CHECK_EQ_INT(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_step(s), SQLITE_ROW);
    CHECK_EQ_STR((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    /* every table of the schema exists */
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name=?",
                                        -1, &s, NULL), SQLITE_OK);
        sqlite3_bind_text(s, 1, tables[i], -1, SQLITE_STATIC);
        CHECK_EQ_INT(sqlite3_step(s), SQLITE_ROW);
        if (sqlite3_column_int(s, 0) != 1)
            th_fail(__FILE__, __LINE__, "table exists", "missing table %s", tables[i]);
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
}

TEST(store_refuses_a_newer_schema_and_a_non_database)
{
    const char *dir = th_tmpdir();
    struct store *st = open_store(dir);
    store_close(st);
    if (th_pg_on()) { /* PostgreSQL: schema_version from the future, then a wrong password */
        char v[16];
        CHECK_EQ_INT(th_pg_query1(dir, "UPDATE schema_version SET version = 99 RETURNING version", NULL, 0, v,
                                  sizeof v), 0);
        struct store_opts o;
        th_pg_opts(dir, NULL, &o);
        CHECK_EQ_INT(store_open(dir, &o, &st), ERR_UNSUPPORTED);
        char badurl[1100];
        const char *at = strchr(o.database, '@');
        CHECK(at != NULL);
        snprintf(badurl, sizeof badurl, "postgresql://jobd:not-the-password%s", at);
        o.database = badurl;
        CHECK_EQ_INT(store_open(dir, &o, &st), ERR_IO);
        o.database = "postgresql://jobd@127.0.0.1:1/nothing-listens-here";
        CHECK_EQ_INT(store_open(dir, &o, &st), ERR_IO);
        return;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/jobd.db", dir);
    sqlite3 *db;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    CHECK_EQ_INT(store_open(dir, NULL, &st), ERR_UNSUPPORTED);

    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    mkdir(bad, 0700);
    snprintf(path, sizeof path, "%s/jobd.db", bad);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; i < 200; i++)
        fputs("this is not an SQLite database file at all. ", f);
    fclose(f);
    CHECK_EQ_INT(store_open(bad, NULL, &st), ERR_CORRUPT);
}

/* Walk a fresh batch to `target` through allowed edges. */
static void batch_to(struct store *st, const char *id, enum store_batch_status target)
{
    static const enum store_batch_status paths[STORE_BATCH__COUNT][3] = {
        [STORE_BATCH_VALIDATING] = {STORE_BATCH__COUNT},
        [STORE_BATCH_FAILED] = {STORE_BATCH_FAILED, STORE_BATCH__COUNT},
        [STORE_BATCH_IN_PROGRESS] = {STORE_BATCH_IN_PROGRESS, STORE_BATCH__COUNT},
        [STORE_BATCH_FINALIZING] = {STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, STORE_BATCH__COUNT},
        [STORE_BATCH_COMPLETED] = {STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, STORE_BATCH_COMPLETED},
        [STORE_BATCH_EXPIRED] = {STORE_BATCH_IN_PROGRESS, STORE_BATCH_EXPIRED, STORE_BATCH__COUNT},
        [STORE_BATCH_CANCELLING] = {STORE_BATCH_CANCELLING, STORE_BATCH__COUNT},
        [STORE_BATCH_CANCELLED] = {STORE_BATCH_CANCELLING, STORE_BATCH_CANCELLED, STORE_BATCH__COUNT},
    };
    enum store_batch_status cur = STORE_BATCH_VALIDATING;
    for (int i = 0; i < 3 && paths[target][i] != STORE_BATCH__COUNT && cur != target; i++) {
        CHECK_EQ_INT(store_batch_transition(st, id, cur, paths[target][i], NOW), 0);
        cur = paths[target][i];
    }
    CHECK_EQ_INT(cur, target);
}

TEST(store_batch_transitions_allow_exactly_the_state_machine)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    /* the documented table, written out independently of the code */
    static const char *const allowed[] = {
        "validating>in_progress", "validating>failed",   "validating>cancelling",
        "in_progress>finalizing", "in_progress>expired", "in_progress>cancelling",
        "finalizing>completed",   "finalizing>expired",  "finalizing>cancelling",
        "cancelling>cancelled",
    };
    int n_ok = 0;
    for (int from = 0; from < STORE_BATCH__COUNT; from++) {
        for (int to = 0; to < STORE_BATCH__COUNT; to++) {
            struct store_batch b;
            make_batch(st, t.id, f.id, &b);
            store_batch_release(&b);
            batch_to(st, b.id, (enum store_batch_status)from);
            char edge[64];
            snprintf(edge, sizeof edge, "%s>%s", store_batch_status_name(from), store_batch_status_name(to));
            int expect = 0;
            for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
                expect |= strcmp(edge, allowed[k]) == 0;
            struct store_batch before;
            CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &before), 0);
            store_batch_release(&before);
            int rc = store_batch_transition(st, b.id, from, to, NOW + 7);
            struct store_batch after;
            CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &after), 0);
            if (expect) {
                if (rc != 0)
                    th_fail(__FILE__, __LINE__, edge, "allowed edge refused: %s", err_name(rc));
                CHECK_EQ_INT(after.status, to);
                CHECK_EQ_INT(after.at[to], NOW + 7);
                n_ok++;
            } else {
                if (rc != ERR_BADSTATE)
                    th_fail(__FILE__, __LINE__, edge, "forbidden edge gave %s", err_name(rc));
                CHECK_EQ_INT(after.status, from); /* row unchanged */
                for (int k = 0; k < STORE_BATCH__COUNT; k++)
                    CHECK_EQ_INT(after.at[k], before.at[k]);
            }
            store_batch_release(&after);
        }
    }
    CHECK_EQ_INT(n_ok, 10);
    /* an allowed edge whose old state is stale: refused, row unchanged */
    struct store_batch b;
    make_batch(st, t.id, f.id, &b);
    CHECK_EQ_INT(store_batch_transition(st, b.id, STORE_BATCH_IN_PROGRESS, STORE_BATCH_FINALIZING, NOW),
                 ERR_BADSTATE);
    struct store_batch after;
    CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &after), 0);
    CHECK_EQ_INT(after.status, STORE_BATCH_VALIDATING);
    CHECK_EQ_INT(after.at[STORE_BATCH_FINALIZING], 0);
    store_batch_release(&after);
    store_batch_release(&b);
    CHECK_EQ_INT(store_batch_transition(st, "batch_nope", STORE_BATCH_VALIDATING, STORE_BATCH_FAILED, NOW),
                 ERR_NOTFOUND);
    store_close(st);
}

struct dups { /* what store_request_add's on_dup reported */
    int n;
    int64_t line[8], first[8];
    char cid[8][16];
};

static int dup_note(void *ctx, int64_t line, const char *custom_id, int64_t first_line)
{
    struct dups *d = ctx;
    if (d->n < 8) {
        d->line[d->n] = line;
        d->first[d->n] = first_line;
        snprintf(d->cid[d->n], sizeof d->cid[d->n], "%s", custom_id);
    }
    d->n++;
    return 0;
}

static void add_request(struct store *st, const struct store_batch *b, int line, char *id_out)
{
    char cid[32], body[64];
    snprintf(cid, sizeof cid, "c-%d", line);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"%d\"}", line);
    struct store_request_new q = {b->id, b->tenant_id, line, cid, "m", body, strlen(body), 3, 16, NOW};
    CHECK_EQ_INT(store_tx_begin(st), 0);
    CHECK_EQ_INT(store_request_add(st, &q, NULL, NULL), 0);
    CHECK_EQ_INT(store_tx_commit(st), 0);
    (void)id_out;
}

/* Request id by line, read directly (the store API has no lookup by line). */
static void request_id_of(const char *dir, const char *batch, int line, char *out)
{
    if (th_pg_on()) {
        char ls[16];
        snprintf(ls, sizeof ls, "%d", line);
        const char *p[] = {batch, ls};
        CHECK_EQ_INT(th_pg_query1(dir, "SELECT id FROM requests WHERE batch_id = $1 AND line = $2::bigint", p,
                                  2, out, ID_MAX),
                     0);
        return;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/jobd.db", dir);
    sqlite3 *db;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s;
    CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT id FROM requests WHERE batch_id=? AND line=?", -1, &s, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(s, 1, batch, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, line);
    CHECK_EQ_INT(sqlite3_step(s), SQLITE_ROW);
    snprintf(out, ID_MAX, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
}

TEST(store_request_transitions_with_lease_fencing_and_counts)
{
    const char *dir = th_tmpdir();
    struct store *st = open_store(dir);
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    struct store_batch b;
    make_batch(st, t.id, f.id, &b);
    add_request(st, &b, 1, NULL);
    add_request(st, &b, 2, NULL);
    /* store_request_add outside a transaction is refused */
    struct store_request_new q = {b.id, t.id, 3, "c-3", "m", "{}", 2, 0, 0, NOW};
    CHECK_EQ_INT(store_request_add(st, &q, NULL, NULL), ERR_BADSTATE);
    /* duplicate custom_id reports the first line (by the add on SQLite, by
     * the flush of the queue on PostgreSQL; without a callback: ERR_EXISTS) */
    struct dups dd = {0};
    struct store_request_new d = {b.id, t.id, 9, "c-1", "m", "{}", 2, 0, 0, NOW};
    CHECK_EQ_INT(store_tx_begin(st), 0);
    CHECK_EQ_INT(store_request_add(st, &d, dup_note, &dd), 0);
    CHECK_EQ_INT(store_request_flush(st, dup_note, &dd), 0);
    CHECK_EQ_INT(dd.n, 1);
    CHECK_EQ_INT(dd.line[0], 9);
    CHECK_EQ_INT(dd.first[0], 1);
    store_tx_rollback(st);
    CHECK_EQ_INT(store_tx_begin(st), 0);
    int rc = store_request_add(st, &d, NULL, NULL);
    if (rc == 0)
        rc = store_tx_commit(st);
    else
        store_tx_rollback(st);
    CHECK_EQ_INT(rc, ERR_EXISTS);
    CHECK_EQ_INT(store_tx_commit(st), ERR_BADSTATE); /* the failed commit ended the transaction */
    CHECK_EQ_INT(store_ingest_succeed(st, b.id, "m", NOW), 0); /* n_total = 2, -> in_progress */
    struct store_batch mid;
    CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &mid), 0);
    CHECK_EQ_INT(mid.status, STORE_BATCH_IN_PROGRESS);
    CHECK_EQ_INT(mid.n_total, 2);
    CHECK_EQ_STR(mid.model, "m");
    store_batch_release(&mid);

    char r1[ID_MAX], r2[ID_MAX];
    request_id_of(dir, b.id, 1, r1);
    request_id_of(dir, b.id, 2, r2);
    struct store_request rq;
    struct store_request_change lease_a = {.lease_id = "lease_a"}, lease_b = {.lease_id = "lease_b"};
    /* queued -> leased needs a lease id */
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_QUEUED, STORE_REQ_LEASED, NULL, NOW), ERR_INVAL);
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_QUEUED, STORE_REQ_LEASED, &lease_a, NOW), 0);
    CHECK_EQ_INT(store_request_get(st, r1, &rq), 0);
    CHECK_EQ_INT(rq.status, STORE_REQ_LEASED);
    CHECK_EQ_INT(rq.attempts, 1);
    CHECK_EQ_STR(rq.lease_id, "lease_a");
    /* leased -> queued (lease expired), backoff recorded, lease cleared */
    struct store_request_change back = {.lease_id = "lease_a", .next_attempt_at = NOW + 30, .error = "lease expired"};
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_LEASED, STORE_REQ_QUEUED, &back, NOW), 0);
    CHECK_EQ_INT(store_request_get(st, r1, &rq), 0);
    CHECK_EQ_INT(rq.status, STORE_REQ_QUEUED);
    CHECK_EQ_INT(rq.next_attempt_at, NOW + 30);
    CHECK_EQ_STR(rq.lease_id, "");
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_QUEUED, STORE_REQ_LEASED, &lease_b, NOW), 0);
    /* a stale lease cannot complete it: refused, row unchanged */
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_LEASED, STORE_REQ_SUCCEEDED, &lease_a, NOW),
                 ERR_BADSTATE);
    CHECK_EQ_INT(store_request_get(st, r1, &rq), 0);
    CHECK_EQ_INT(rq.status, STORE_REQ_LEASED);
    CHECK_EQ_INT(rq.attempts, 2);
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_LEASED, STORE_REQ_SUCCEEDED, &lease_b, NOW), 0);
    /* terminal: nothing leaves succeeded */
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_SUCCEEDED, STORE_REQ_QUEUED, NULL, NOW),
                 ERR_BADSTATE);
    /* wrong old state */
    CHECK_EQ_INT(store_request_transition(st, r1, STORE_REQ_LEASED, STORE_REQ_FAILED, NULL, NOW), ERR_BADSTATE);
    /* queued -> failed (client error), leased -> failed */
    CHECK_EQ_INT(store_request_transition(st, r2, STORE_REQ_QUEUED, STORE_REQ_FAILED, NULL, NOW), 0);
    CHECK_EQ_INT(store_request_transition(st, "req_nope", STORE_REQ_QUEUED, STORE_REQ_FAILED, NULL, NOW),
                 ERR_NOTFOUND);
    struct store_batch after;
    CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &after), 0);
    CHECK_EQ_INT(after.n_completed, 1);
    CHECK_EQ_INT(after.n_failed, 1);
    store_batch_release(&after);
    store_batch_release(&b);
    store_close(st);
}

/* Does the file at path contain needle? */
static int file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t nl = strlen(needle), cap = 1 << 20, len = 0;
    char *data = malloc(cap);
    size_t got;
    while ((got = fread(data + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            data = realloc(data, cap);
        }
    }
    fclose(f);
    int found = 0;
    for (size_t i = 0; i + nl <= len && !found; i++)
        found = memcmp(data + i, needle, nl) == 0;
    free(data);
    return found;
}

TEST(store_api_keys_are_stored_hashed_and_revocable)
{
    const char *dir = th_tmpdir();
    struct store *st = open_store(dir);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    char key[STORE_KEY_MAX], key2[STORE_KEY_MAX];
    struct store_key info;
    CHECK_EQ_INT(store_key_create(st, t.id, NOW, key, &info), 0);
    CHECK_EQ_INT(store_key_create(st, t.id, NOW + 1, key2, NULL), 0);
    CHECK(strncmp(key, "sk-jobd-", 8) == 0);
    CHECK_EQ_INT(strlen(key), 8 + STORE_KEY_ID_LEN + 1 + STORE_KEY_SECRET_LEN);
    CHECK(strncmp(key, info.prefix, strlen(info.prefix)) == 0);
    CHECK(strcmp(key, key2) != 0);
    struct store_key who;
    CHECK_EQ_INT(store_key_verify(st, key, &who), 0);
    CHECK_EQ_STR(who.tenant_id, t.id);
    CHECK_EQ_STR(who.tenant_name, "acme");
    /* one wrong character in the secret, a truncated key, junk: all ERR_AUTH */
    char bad[STORE_KEY_MAX];
    memcpy(bad, key, sizeof bad);
    bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == 'a' ? 'b' : 'a';
    CHECK_EQ_INT(store_key_verify(st, bad, &who), ERR_AUTH);
    bad[20] = '\0';
    CHECK_EQ_INT(store_key_verify(st, bad, &who), ERR_AUTH);
    CHECK_EQ_INT(store_key_verify(st, "Bearer nonsense", &who), ERR_AUTH);
    /* the secret part of a key appears nowhere on disk */
    const char *secret = strchr(key + 8, '_') + 1;
    const char *files[] = {"jobd.db", "jobd.db-wal"};
    if (th_pg_on()) { /* PostgreSQL: nowhere in the api_keys rows, the key id is */
        const char *q = "SELECT count(*) FROM api_keys k WHERE k::text LIKE '%' || $1 || '%'";
        char cnt[32];
        const char *p1[] = {secret}, *p2[] = {key}, *p3[] = {info.id};
        CHECK_EQ_INT(th_pg_query1(dir, q, p1, 1, cnt, sizeof cnt), 0);
        CHECK_EQ_STR(cnt, "0");
        CHECK_EQ_INT(th_pg_query1(dir, q, p2, 1, cnt, sizeof cnt), 0);
        CHECK_EQ_STR(cnt, "0");
        CHECK_EQ_INT(th_pg_query1(dir, q, p3, 1, cnt, sizeof cnt), 0);
        CHECK_EQ_STR(cnt, "1");
    }
    for (int i = 0; i < 2 && !th_pg_on(); i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK(!file_contains(path, secret));
        CHECK(!file_contains(path, key));
    }
    /* sanity of the search itself: the key id is on disk */
    char path[700];
    snprintf(path, sizeof path, "%s/jobd.db-wal", dir);
    char dbp[700];
    snprintf(dbp, sizeof dbp, "%s/jobd.db", dir);
    CHECK(th_pg_on() || file_contains(path, info.id) || file_contains(dbp, info.id));
    /* list, revoke, verify fails, list shows it revoked */
    struct store_key *keys;
    size_t n;
    CHECK_EQ_INT(store_key_list(st, NULL, &keys, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(keys[0].id, info.id);
    CHECK_EQ_INT(keys[0].revoked_at, 0);
    free(keys);
    CHECK_EQ_INT(store_key_revoke(st, info.id, NOW + 5), 0);
    CHECK_EQ_INT(store_key_revoke(st, info.id, NOW + 6), 0); /* idempotent */
    CHECK_EQ_INT(store_key_revoke(st, "zzzzzzzzzz", NOW), ERR_NOTFOUND);
    CHECK_EQ_INT(store_key_verify(st, key, &who), ERR_AUTH);
    CHECK_EQ_INT(store_key_verify(st, key2, &who), 0);
    CHECK_EQ_INT(store_key_list(st, t.id, &keys, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(keys[0].revoked_at, NOW + 5);
    free(keys);
    CHECK_EQ_INT(store_key_create(st, "ten_nope", NOW, key, NULL), ERR_NOTFOUND);
    store_close(st);
}

TEST(store_tenant_isolation_returns_not_found)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant a, b;
    struct store_file fa, fb;
    make_tenant_file(st, "alpha", &a, &fa);
    make_tenant_file(st, "beta", &b, &fb);
    struct store_tenant dup;
    CHECK_EQ_INT(store_tenant_create(st, "alpha", NOW, &dup), ERR_EXISTS);
    CHECK_EQ_INT(store_tenant_create(st, "bad name", NOW, &dup), ERR_INVAL);
    struct store_batch ba;
    make_batch(st, a.id, fa.id, &ba);
    struct store_file f;
    struct store_batch bb;
    CHECK_EQ_INT(store_file_get(st, a.id, fa.id, &f), 0);
    CHECK_EQ_INT(store_file_get(st, b.id, fa.id, &f), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_get(st, b.id, ba.id, &bb), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_cancel(st, b.id, ba.id, NOW, NULL), ERR_NOTFOUND);
    CHECK_EQ_INT(store_file_delete(st, b.id, fa.id, NULL), ERR_NOTFOUND);
    /* B cannot start a batch on A's file */
    struct store_batch_new nb = {"/v1/chat/completions", fa.id, 86400, NULL, 0, NULL};
    CHECK_EQ_INT(store_batch_create(st, b.id, &nb, NOW, NULL), ERR_NOTFOUND);
    struct store_batch *items;
    size_t n;
    int more;
    CHECK_EQ_INT(store_batch_list(st, b.id, NULL, 10, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 0);
    store_batch_list_free(items, n);
    /* A's cursor is not B's */
    CHECK_EQ_INT(store_batch_list(st, b.id, ba.id, 10, &items, &n, &more), ERR_NOTFOUND);
    struct store_file *files;
    CHECK_EQ_INT(store_file_list(st, b.id, NULL, 1, NULL, 100, &files, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_STR(files[0].id, fb.id);
    free(files);
    /* A still sees and can delete its own file; afterwards it is gone */
    char path[256];
    CHECK_EQ_INT(store_file_delete(st, a.id, fa.id, path), 0);
    CHECK_EQ_STR(path, "files/alpha-in");
    CHECK_EQ_INT(store_file_get(st, a.id, fa.id, &f), ERR_NOTFOUND);
    store_batch_release(&ba);
    store_close(st);
}

TEST(store_batch_create_checks_inputs_and_cancel_is_idempotent)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    struct store_batch_new nb = {"/v1/moderations", f.id, 86400, NULL, 0, NULL};
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, NULL), ERR_INVAL);
    nb.endpoint = "/v1/completions";
    nb.completion_window_s = 0;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, NULL), ERR_INVAL);
    nb.completion_window_s = 86400;
    char meta[4096] = "{";
    for (int i = 0; i < 17; i++)
        snprintf(meta + strlen(meta), sizeof meta - strlen(meta), "%s\"k%d\":\"v\"", i ? "," : "", i);
    strncat(meta, "}", sizeof meta - strlen(meta) - 1);
    nb.metadata = meta; /* 17 pairs */
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, NULL), ERR_INVAL);
    nb.metadata = "{\"k\":1}";
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, NULL), ERR_INVAL);
    nb.metadata = "{\"team\":\"ml\",\"run\":\"nightly\"}";
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    CHECK_EQ_INT(b.status, STORE_BATCH_VALIDATING);
    CHECK_EQ_INT(b.expires_at, NOW + 86400);
    CHECK_EQ_STR(b.metadata, "{\"team\":\"ml\",\"run\":\"nightly\"}");
    CHECK(b.errors == NULL);
    struct store_batch c;
    CHECK_EQ_INT(store_batch_cancel(st, t.id, b.id, NOW + 1, &c), 0);
    CHECK_EQ_INT(c.status, STORE_BATCH_CANCELLING);
    CHECK_EQ_INT(c.at[STORE_BATCH_CANCELLING], NOW + 1);
    store_batch_release(&c);
    CHECK_EQ_INT(store_batch_cancel(st, t.id, b.id, NOW + 2, &c), 0);
    CHECK_EQ_INT(c.at[STORE_BATCH_CANCELLING], NOW + 1);
    store_batch_release(&c);
    struct store_batch done;
    nb.metadata = NULL;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &done), 0);
    batch_to(st, done.id, STORE_BATCH_COMPLETED);
    CHECK_EQ_INT(store_batch_cancel(st, t.id, done.id, NOW, NULL), ERR_BADSTATE);
    store_batch_release(&done);
    store_batch_release(&b);
    store_close(st);
}

TEST(store_batch_list_paginates_250_batches)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    /* another tenant's batches interleaved must never show up */
    struct store_tenant o;
    struct store_file of;
    make_tenant_file(st, "other", &o, &of);
    for (int i = 0; i < 250; i++) {
        struct store_batch b;
        make_batch(st, t.id, f.id, &b);
        store_batch_release(&b);
        if (i % 10 == 0) {
            make_batch(st, o.id, of.id, &b);
            store_batch_release(&b);
        }
    }
    char seen[250][ID_MAX];
    size_t total = 0;
    const size_t expect_n[] = {100, 100, 50};
    const int expect_more[] = {1, 1, 0};
    char after[ID_MAX] = "";
    for (int page = 0; page < 3; page++) {
        struct store_batch *items;
        size_t n;
        int more;
        CHECK_EQ_INT(store_batch_list(st, t.id, *after ? after : NULL, 100, &items, &n, &more), 0);
        CHECK_EQ_INT(n, expect_n[page]);
        CHECK_EQ_INT(more, expect_more[page]);
        for (size_t i = 0; i < n; i++) {
            CHECK_EQ_STR(items[i].tenant_id, t.id);
            if (total > 0)
                CHECK(strcmp(seen[total - 1], items[i].id) > 0); /* newest first, strictly */
            snprintf(seen[total++], ID_MAX, "%s", items[i].id);
        }
        snprintf(after, sizeof after, "%s", items[n - 1].id);
        store_batch_list_free(items, n);
    }
    CHECK_EQ_INT(total, 250);
    struct store_batch *items;
    size_t n;
    int more;
    CHECK_EQ_INT(store_batch_list(st, t.id, after, 100, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(more, 0);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list(st, t.id, NULL, 0, &items, &n, &more), ERR_INVAL);
    CHECK_EQ_INT(store_batch_list(st, t.id, NULL, 101, &items, &n, &more), ERR_INVAL);
    store_close(st);
}

TEST(store_batch_list_status_filters_and_pages)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    char ids[6][ID_MAX];
    for (int i = 0; i < 6; i++) {
        struct store_batch b;
        usleep(2000); /* ids of one millisecond are in random order (common/id.h) */
        make_batch(st, t.id, f.id, &b);
        if (i % 2)
            batch_to(st, b.id, STORE_BATCH_COMPLETED);
        snprintf(ids[i], ID_MAX, "%s", b.id);
        store_batch_release(&b);
    }
    struct store_batch *items;
    size_t n;
    int more;
    /* Lists are newest first, i.e. ORDER BY id DESC; ids made within one
     * millisecond sort in random order (common/id.h), so the expected order
     * is the ids' own order, not the creation order. done: the completed
     * ids (1, 3, 5), descending. */
    const char *done[3] = {ids[1], ids[3], ids[5]};
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && strcmp(done[j - 1], done[j]) < 0; j--) {
            const char *tmp = done[j];
            done[j] = done[j - 1];
            done[j - 1] = tmp;
        }
    CHECK_EQ_INT(store_batch_list_status(st, t.id, "completed", NULL, 2, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_STR(items[0].id, done[0]);
    CHECK_EQ_STR(items[1].id, done[1]);
    store_batch_list_free(items, n);
    /* the cursor may be a batch of another status: each validating id as the
     * cursor gives the completed ids below it, two per page */
    for (int c = 0; c < 6; c += 2) {
        size_t below = 0;
        for (int i = 0; i < 3; i++)
            below += strcmp(done[i], ids[c]) < 0;
        CHECK_EQ_INT(store_batch_list_status(st, t.id, "completed", ids[c], 2, &items, &n, &more), 0);
        CHECK_EQ_INT(n, below < 2 ? below : 2);
        CHECK_EQ_INT(more, below > 2);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ_STR(items[i].id, done[3 - below + i]);
        store_batch_list_free(items, n);
    }
    CHECK_EQ_INT(store_batch_list_status(st, t.id, "validating", NULL, 100, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 3);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(items[i].status, STORE_BATCH_VALIDATING);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_status(st, t.id, "expired", NULL, 100, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 0);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_status(st, t.id, NULL, NULL, 100, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 6);
    store_batch_list_free(items, n);
    store_close(st);
}

TEST(store_batch_api_lists_both_ways_deletes_only_ended_anthropic_batches)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    const char *ids[5];
    char idv[5][ID_MAX], oai[ID_MAX];
    for (int i = 0; i < 5; i++) {
        struct store_batch b;
        usleep(2000); /* ids of one millisecond are in random order (common/id.h) */
        struct store_batch_new nb = {"/v1/chat/completions", f.id, 86400, NULL, 0, "anthropic"};
        CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
        CHECK_EQ_STR(b.api, "anthropic");
        snprintf(idv[i], ID_MAX, "%s", b.id);
        store_batch_release(&b);
        if (i == 2) { /* an OpenAI batch in the middle: never listed as an Anthropic one */
            make_batch(st, t.id, f.id, &b);
            CHECK_EQ_STR(b.api, "openai");
            snprintf(oai, sizeof oai, "%s", b.id);
            store_batch_release(&b);
        }
    }
    for (int i = 0; i < 5; i++) /* newest first: by id, descending */
        ids[i] = idv[i];
    for (int i = 1; i < 5; i++)
        for (int j = i; j > 0 && strcmp(ids[j - 1], ids[j]) < 0; j--) {
            const char *tmp = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = tmp;
        }
    struct store_batch_new bad = {"/v1/chat/completions", f.id, 86400, NULL, 0, "gemini"};
    CHECK_EQ_INT(store_batch_create(st, t.id, &bad, NOW, NULL), ERR_INVAL);
    struct store_batch *items;
    size_t n;
    int more;
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", NULL, NULL, 2, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_STR(items[0].id, ids[0]);
    CHECK_EQ_STR(items[1].id, ids[1]);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", NULL, ids[1], 10, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(more, 0);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_STR(items[i].id, ids[2 + i]);
    store_batch_list_free(items, n);
    /* before: the page just newer than the cursor, still newest first */
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", ids[4], NULL, 2, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_STR(items[0].id, ids[2]);
    CHECK_EQ_STR(items[1].id, ids[3]);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", ids[1], NULL, 5, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_STR(items[0].id, ids[0]);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "openai", NULL, NULL, 10, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_STR(items[0].id, oai);
    store_batch_list_free(items, n);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", ids[0], ids[1], 2, &items, &n, &more), ERR_INVAL);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", NULL, "batch_nope", 2, &items, &n, &more),
                 ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_list_api(st, t.id, "anthropic", NULL, NULL, 1001, &items, &n, &more), ERR_INVAL);
    /* delete: only ended, only this contract's, only this tenant's */
    CHECK_EQ_INT(store_batch_delete(st, t.id, "anthropic", ids[0]), ERR_BADSTATE);
    batch_to(st, ids[0], STORE_BATCH_CANCELLED);
    batch_to(st, oai, STORE_BATCH_CANCELLED);
    CHECK_EQ_INT(store_batch_delete(st, t.id, "anthropic", oai), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_delete(st, "ten_other", "anthropic", ids[0]), ERR_NOTFOUND);
    int64_t nc = -1, ne = -1;
    CHECK_EQ_INT(store_batch_stop_counts(st, ids[0], &nc, &ne), 0);
    CHECK_EQ_INT(nc, 0);
    CHECK_EQ_INT(ne, 0);
    CHECK_EQ_INT(store_batch_delete(st, t.id, "anthropic", ids[0]), 0);
    struct store_batch b;
    CHECK_EQ_INT(store_batch_get(st, t.id, ids[0], &b), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_delete(st, t.id, "anthropic", ids[0]), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_get(st, t.id, oai, &b), 0);
    store_batch_release(&b);
    store_close(st);
}

TEST(store_idempotency_new_replay_mismatch_inflight_expiry)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t, t2;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    CHECK_EQ_INT(store_tenant_create(st, "beta", NOW, &t2), 0);
    uint8_t fp[SHA256_LEN], fp2[SHA256_LEN];
    const char *body = "{\"input_file_id\":\"x\"}";
    CHECK_EQ_INT(store_idem_fingerprint("POST", "/v1/batches", body, strlen(body), fp), 0);
    CHECK_EQ_INT(store_idem_fingerprint("POST", "/v1/batches", "{}", 2, fp2), 0);
    CHECK(memcmp(fp, fp2, SHA256_LEN) != 0);
    struct store_idem r;
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_IN_FLIGHT);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp2, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_MISMATCH);
    /* per tenant: the same key is free for another tenant */
    CHECK_EQ_INT(store_idem_reserve(st, t2.id, "k1", fp2, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);
    /* effect + response in one transaction; a rolled-back one leaves no response */
    struct store_batch_new nb = {"/v1/chat/completions", f.id, 86400, NULL, 0, NULL};
    CHECK_EQ_INT(store_tx_begin(st), 0);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), ERR_BADSTATE); /* not inside a tx */
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    CHECK_EQ_INT(store_idem_complete(st, t.id, "k1", 200, "rolled back", 11, NOW), 0);
    store_tx_rollback(st);
    CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &b), ERR_NOTFOUND);
    store_batch_release(&b);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_IN_FLIGHT);
    CHECK_EQ_INT(store_tx_begin(st), 0);
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    char resp[128];
    snprintf(resp, sizeof resp, "{\"id\":\"%s\"}", b.id);
    CHECK_EQ_INT(store_idem_complete(st, t.id, "k1", 200, resp, strlen(resp), NOW), 0);
    CHECK_EQ_INT(store_tx_commit(st), 0);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW + 10, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_REPLAY);
    CHECK_EQ_INT(r.status_code, 200);
    CHECK_EQ_STR(r.body, resp);
    free(r.body);
    /* completing twice is refused */
    CHECK_EQ_INT(store_idem_complete(st, t.id, "k1", 500, "x", 1, NOW), ERR_BADSTATE);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp2, NOW + 10, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_MISMATCH);
    /* after the retention the key is new again */
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp2, NOW + 86400, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);
    /* release drops an in-flight reservation; an abandoned one is taken over */
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k2", fp, NOW, &r), 0);
    CHECK_EQ_INT(store_idem_release(st, t.id, "k2"), 0);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k2", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k2", fp, NOW + 301, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);
    /* expiry sweep */
    int64_t gone = 0;
    CHECK_EQ_INT(store_idem_expire(st, NOW + 86400 + 400, &gone), 0);
    CHECK_EQ_INT(gone, 2); /* beta's k1 (NOW) and k2 (NOW+301); acme's k1 was re-reserved at NOW+86400 */
    char longkey[300];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    CHECK_EQ_INT(store_idem_reserve(st, t.id, longkey, fp, NOW, &r), ERR_INVAL);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "", fp, NOW, &r), ERR_INVAL);
    store_batch_release(&b);
    store_close(st);
}

/* ---- 50 threads, 50 connections, one key ---- */

#define RACERS 50
struct racer {
    const char *dir, *tenant;
    pthread_barrier_t *bar;
    int outcome, rc;
};

static void *race_one(void *arg)
{
    struct racer *r = arg;
    struct store *st = NULL;
    struct store_opts o = STORE_OPTS_DEFAULT;
    o.busy_timeout_ms = 30000;
    th_pg_opts(r->dir, &o, &o);
    r->rc = store_open(r->dir, &o, &st);
    pthread_barrier_wait(r->bar);
    if (r->rc)
        return NULL;
    uint8_t fp[SHA256_LEN];
    store_idem_fingerprint("POST", "/v1/batches", "{}", 2, fp);
    struct store_idem res;
    r->rc = store_idem_reserve(st, r->tenant, "race-key", fp, NOW, &res);
    r->outcome = res.outcome;
    store_close(st);
    return NULL;
}

TEST(store_idempotency_50_thread_race_has_one_winner)
{
    const char *dir = th_tmpdir();
    struct store *st = open_store(dir);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    store_close(st);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, RACERS);
    pthread_t th[RACERS];
    struct racer rs[RACERS];
    for (int i = 0; i < RACERS; i++) {
        rs[i] = (struct racer){dir, t.id, &bar, -1, -1};
        CHECK_EQ_INT(pthread_create(&th[i], NULL, race_one, &rs[i]), 0);
    }
    int n_new = 0, n_inflight = 0;
    for (int i = 0; i < RACERS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(rs[i].rc, 0);
        n_new += rs[i].outcome == STORE_IDEM_NEW;
        n_inflight += rs[i].outcome == STORE_IDEM_IN_FLIGHT;
    }
    pthread_barrier_destroy(&bar);
    CHECK_EQ_INT(n_new, 1);
    CHECK_EQ_INT(n_inflight, RACERS - 1);
}

TEST(store_file_list_orders_and_filters)
{
    struct store *st = open_store(th_tmpdir());
    struct store_tenant t;
    struct store_file f;
    make_tenant_file(st, "acme", &t, &f);
    for (int i = 0; i < 5; i++) {
        struct store_file g = f;
        g.id[0] = '\0';
        snprintf(g.purpose, sizeof g.purpose, "%s", i % 2 ? "batch_output" : "batch");
        snprintf(g.encoding, sizeof g.encoding, "zstd");
        CHECK_EQ_INT(store_file_create(st, &g), 0);
    }
    struct store_file bad = f;
    bad.id[0] = '\0';
    snprintf(bad.purpose, sizeof bad.purpose, "fine-tune");
    CHECK_EQ_INT(store_file_create(st, &bad), ERR_INVAL);
    struct store_file *items;
    size_t n;
    int more;
    CHECK_EQ_INT(store_file_list(st, t.id, "batch", 0, NULL, 2, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(more, 1);
    /* ascending ids (ids made in the same millisecond order randomly, so no "f is first") */
    CHECK(strcmp(items[0].id, items[1].id) < 0);
    char after[ID_MAX];
    snprintf(after, sizeof after, "%s", items[1].id);
    free(items);
    CHECK_EQ_INT(store_file_list(st, t.id, "batch", 0, after, 2, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2); /* 4 batch files in all (f + 3) */
    CHECK_EQ_INT(more, 0);
    free(items);
    CHECK_EQ_INT(store_file_list(st, t.id, "batch_output", 1, NULL, 100, &items, &n, &more), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_STR(items[0].encoding, "zstd");
    CHECK(strcmp(items[0].id, items[1].id) > 0); /* newest first */
    free(items);
    store_close(st);
}

TEST(store_paths_spell_the_data_directory_layout)
{
    char rel[STORE_REL_PATH_MAX], p[STORE_PATH_MAX];
    CHECK_EQ_INT(store_path_upload_rel("file-abc", rel), 0);
    CHECK_EQ_STR(rel, "files/file-abc.jsonl.zst");
    CHECK_EQ_INT(store_path_abs("/d", rel, p, sizeof p), 0);
    CHECK_EQ_STR(p, "/d/files/file-abc.jsonl.zst");
    CHECK_EQ_INT(store_path_batch_rel("batch_x", "errors", rel), 0);
    CHECK_EQ_STR(rel, "files/batch_x-errors.jsonl.zst");
    CHECK_EQ_INT(store_path_dir("/d", STORE_DIR_TMP, p, sizeof p), 0);
    CHECK_EQ_STR(p, "/d/tmp");
    CHECK_EQ_INT(store_path_dir("/d", STORE_DIR_FILES, p, sizeof p), 0);
    CHECK_EQ_STR(p, "/d/files");
    /* a stored path that leaves the data directory is refused */
    CHECK_EQ_INT(store_path_abs("/d", "/etc/passwd", p, sizeof p), ERR_CORRUPT);
    CHECK_EQ_INT(store_path_abs("/d", "files/../../x", p, sizeof p), ERR_CORRUPT);
    char small[8];
    CHECK_EQ_INT(store_path_abs("/d", "files/long-name", small, sizeof small), ERR_TOOBIG);
}

/* LISTEN/NOTIFY: a batch reaching in_progress wakes a listener on
 * another connection once its transaction commits, and not when it rolls
 * back; SQLite has nothing to listen to. */
TEST(store_work_wakes_a_listener_on_another_connection)
{
    const char *dir = th_tmpdir();
    struct store *st = open_store(dir);
    struct store *ls = open_store(dir);
    int woke = -1;
    if (!th_pg_on()) {
        CHECK_EQ_INT(store_work_listen(ls), ERR_UNSUPPORTED);
        CHECK_EQ_INT(store_work_wait(ls, 0, &woke), ERR_UNSUPPORTED);
        store_close(ls);
        store_close(st);
        return;
    }
    CHECK_EQ_INT(store_work_listen(ls), 0);
    struct store_tenant t;
    struct store_file f;
    struct store_batch b, b2;
    make_tenant_file(st, "wake", &t, &f);
    make_batch(st, t.id, f.id, &b);
    CHECK_EQ_INT(store_work_wait(ls, 100, &woke), 0);
    CHECK_EQ_INT(woke, 0); /* creating a validating batch makes nothing leasable */
    /* rolled back: no notification */
    CHECK_EQ_INT(store_tx_begin(st), 0);
    make_batch(st, t.id, f.id, &b2);
    CHECK_EQ_INT(store_batch_transition(st, b2.id, STORE_BATCH_VALIDATING, STORE_BATCH_IN_PROGRESS, NOW), 0);
    store_tx_rollback(st);
    CHECK_EQ_INT(store_work_wait(ls, 200, &woke), 0);
    CHECK_EQ_INT(woke, 0);
    CHECK_EQ_INT(store_batch_transition(st, b.id, STORE_BATCH_VALIDATING, STORE_BATCH_IN_PROGRESS, NOW), 0);
    CHECK_EQ_INT(store_work_wait(ls, 10000, &woke), 0);
    CHECK_EQ_INT(woke, 1);
    CHECK_EQ_INT(store_work_wait(ls, 0, &woke), 0); /* consumed */
    CHECK_EQ_INT(woke, 0);
    store_batch_release(&b);
    store_batch_release(&b2);
    store_close(ls);
    store_close(st);
}
