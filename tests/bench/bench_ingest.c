/* bench_ingest - batch ingestion rate (requests/s) through jobd/intake/ingest.c vs.
 * the same rows inserted by a bare SQLite loop (one prepared INSERT, one
 * transaction), same schema, pragmas and disk, same run. Prints one line
 * with the ratio ours/bare (goal >= 0.5).
 *
 * The bare loop gets everything pre-computed (ids, custom ids, compact
 * bodies), so the ratio is the price of reading, validating and
 * re-serialising each line plus checkpointing.
 *
 * usage: bench_ingest [N] (default 100000) */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/id.h"
#include "jobd/intake/ingest.h"
#include "jobd/store/store.h"

#define NOW 1700000000

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_ingest: %s failed (%d)\n", what, rc);
    exit(1);
}

/* A data dir with a tenant, an input file of `in`, and a validating batch. */
static void setup(const char *dir, const struct buf *in, struct store **st_out, char *batch_id,
                  char *tenant_id)
{
    struct store *st;
    int rc = store_open(dir, NULL, &st);
    if (rc)
        die("store_open", rc);
    struct store_tenant t;
    if ((rc = store_tenant_create(st, "bench", NOW, &t)))
        die("tenant", rc);
    char path[600];
    snprintf(path, sizeof path, "%s/input.jsonl", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(in->data, 1, in->len, f) != in->len)
        die("write input", -1);
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "input.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "input.jsonl");
    sf.bytes = (int64_t)in->len;
    sf.created_at = NOW;
    if ((rc = store_file_create(st, &sf)))
        die("file", rc);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    if ((rc = store_batch_create(st, t.id, &nb, NOW, &b)))
        die("batch", rc);
    snprintf(batch_id, ID_MAX, "%s", b.id);
    snprintf(tenant_id, ID_MAX, "%s", t.id);
    store_batch_release(&b);
    *st_out = st;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    if (n < 1 || n > 10000000)
        return 2;
    char base[] = "/tmp/bench_ingest_XXXXXX";
    if (!mkdtemp(base))
        die("mkdtemp", -1);
    char dir_ours[600], dir_bare[600];
    snprintf(dir_ours, sizeof dir_ours, "%s/ours", base);
    snprintf(dir_bare, sizeof dir_bare, "%s/bare", base);

    /* input: chat requests of a typical shape (~300 bytes a line) */
    struct buf in, bodies;
    buf_init(&in, (size_t)n * 512);
    buf_init(&bodies, (size_t)n * 512);
    size_t *body_off = malloc((size_t)n * sizeof *body_off);
    for (long i = 1; i <= n; i++) {
        char body[400];
        snprintf(body, sizeof body,
                 "{\"model\":\"smollm\",\"messages\":[{\"role\":\"system\",\"content\":\"You classify "
                 "support tickets.\"},{\"role\":\"user\",\"content\":\"Ticket %ld: my order has not "
                 "arrived, what should I do?\"}],\"max_tokens\":64,\"temperature\":0.2}",
                 i);
        buf_printf(&in, "{\"custom_id\":\"t-%ld\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
                        "\"body\":%s}\n", i, body);
        body_off[i - 1] = bodies.len;
        buf_append(&bodies, body, strlen(body) + 1);
    }

    /* ours */
    struct store *st;
    char batch[ID_MAX], tenant[ID_MAX];
    setup(dir_ours, &in, &st, batch, tenant);
    struct ingest_report rep;
    uint64_t t0 = clock_mono_ns();
    int rc = ingest_batch(st, batch, NULL, NULL, &rep);
    double ours = (double)(clock_mono_ns() - t0) / 1e9;
    if (rc || rep.outcome != INGEST_VALID || rep.n_requests != n)
        die("ingest", rc);
    store_close(st);

    /* bare: same schema (created by the store), raw prepared INSERT loop */
    setup(dir_bare, &in, &st, batch, tenant);
    store_close(st);
    char (*ids)[ID_MAX] = malloc((size_t)n * sizeof *ids);
    char (*cids)[24] = malloc((size_t)n * sizeof *cids);
    for (long i = 0; i < n; i++) {
        id_new("req_", ids[i], ID_MAX);
        snprintf(cids[i], sizeof cids[i], "t-%ld", i + 1);
    }
    char dbpath[700];
    snprintf(dbpath, sizeof dbpath, "%s/jobd.db", dir_bare);
    sqlite3 *db;
    if (sqlite3_open(dbpath, &db) != SQLITE_OK)
        die("sqlite3_open", -1);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", NULL,
                 NULL, NULL);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO requests(id, batch_id, tenant_id, line, custom_id, model, body, "
                           "prompt_tokens_est, max_tokens, created_at, updated_at) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
                           -1, &s, NULL) != SQLITE_OK)
        die("prepare", -1);
    t0 = clock_mono_ns();
    sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    for (long i = 0; i < n; i++) {
        sqlite3_bind_text(s, 1, ids[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, batch, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, tenant, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 4, i + 1);
        sqlite3_bind_text(s, 5, cids[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, "smollm", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 7, bodies.data + body_off[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 8, 30);
        sqlite3_bind_int64(s, 9, 64);
        sqlite3_bind_int64(s, 10, NOW);
        if (sqlite3_step(s) != SQLITE_DONE)
            die("insert", -1);
        sqlite3_reset(s);
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        die("commit", -1);
    double bare = (double)(clock_mono_ns() - t0) / 1e9;
    sqlite3_finalize(s);
    sqlite3_close(db);

    printf("ingest %ld lines (%.1f MB): ours %.0f req/s (%.2f s); bare SQLite INSERT loop %.0f req/s "
           "(%.2f s); ours/bare = %.2f (goal >= 0.5)\n",
           n, (double)in.len / 1e6, (double)n / ours, ours, (double)n / bare, bare, bare / ours);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_ingest: could not remove %s\n", base);
    free(ids);
    free(cids);
    free(body_off);
    buf_release(&in);
    buf_release(&bodies);
    return 0;
}
