/* Tests for file expiry (jobd/work/retention.c, store_files_expired /
 * store_file_purge) on a real SQLite file and data directory: expired files
 * lose bytes and row, others stay, the input of a validating batch waits
 * until the batch is past ingestion, and a batch cannot start on an
 * expired file. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "common/err.h"
#include "jobd/store/store.h"
#include "jobd/work/retention.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000

static void put_file(struct store *st, const char *dir, const char *tenant, const char *name, int64_t expires_at,
                     char id[ID_MAX])
{
    char path[800];
    snprintf(path, sizeof path, "%s/files/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs("{}\n", f);
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", tenant);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "%s", name);
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/%s", name);
    sf.created_at = NOW;
    sf.expires_at = expires_at;
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    snprintf(id, ID_MAX, "%s", sf.id);
}

static int exists(const char *dir, const char *name)
{
    char path[800];
    snprintf(path, sizeof path, "%s/files/%s", dir, name);
    return access(path, F_OK) == 0;
}

TEST(retention_deletes_expired_files_but_not_a_validating_batchs_input)
{
    const char *dir = th_tmpdir();
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.durability = STORE_DURABILITY_NORMAL;
    struct store *st;
    CHECK_EQ_INT(th_store_open(dir, &so, &st), 0);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    char files[700];
    snprintf(files, sizeof files, "%s/files", dir);
    mkdir(files, 0700);
    char keep[ID_MAX], gone[ID_MAX], input[ID_MAX];
    put_file(st, dir, t.id, "keep", 0, keep);
    put_file(st, dir, t.id, "gone", NOW + 10, gone);
    put_file(st, dir, t.id, "input", NOW + 10, input);
    /* a batch on "input" while it is live; it is still validating when the file expires */
    struct store_batch_new nb = {"/v1/chat/completions", input, 86400, NULL, 3600, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    CHECK_EQ_INT(b.output_expires_after_s, 3600);
    int64_t n = -1;
    CHECK_EQ_INT(retention_sweep(st, NOW + 9, 10, &n), 0); /* nothing due yet */
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(retention_sweep(st, NOW + 10, 10, &n), 0);
    CHECK_EQ_INT(n, 1);
    struct store_file f;
    CHECK_EQ_INT(store_file_get(st, t.id, gone, &f), ERR_NOTFOUND);
    CHECK(!exists(dir, "gone"));
    CHECK_EQ_INT(store_file_get(st, t.id, input, &f), 0);
    CHECK(exists(dir, "input"));
    CHECK_EQ_INT(store_file_get(st, t.id, keep, &f), 0);
    /* an expired file cannot start a batch (its bytes may go at any moment) */
    struct store_batch_new nb2 = {"/v1/chat/completions", input, 86400, NULL, 0, NULL};
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb2, NOW + 11, NULL), ERR_NOTFOUND);
    /* once the batch is past ingestion its input goes too */
    CHECK_EQ_INT(store_batch_transition(st, b.id, STORE_BATCH_VALIDATING, STORE_BATCH_FAILED, NOW + 12), 0);
    CHECK_EQ_INT(retention_sweep(st, NOW + 12, 10, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK(!exists(dir, "input"));
    CHECK_EQ_INT(store_file_get(st, t.id, input, &f), ERR_NOTFOUND);
    CHECK_EQ_INT(retention_sweep(st, NOW + 100000, 10, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK(exists(dir, "keep"));
    store_batch_release(&b);
    store_close(st);
}

static void write_at(const char *dir, const char *name, time_t mtime)
{
    char path[800];
    snprintf(path, sizeof path, "%s/files/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs("{}\n", f);
    fclose(f);
    struct utimbuf ut = {mtime, mtime};
    CHECK_EQ_INT(utime(path, &ut), 0);
}

TEST(retention_orphans_removes_old_bytes_without_a_row_only)
{
    const char *dir = th_tmpdir();
    struct store *st;
    CHECK_EQ_INT(th_store_open(dir, NULL, &st), 0);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    char files[700];
    snprintf(files, sizeof files, "%s/files", dir);
    mkdir(files, 0700);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.id, sizeof sf.id, "file-kept");
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/file-kept.jsonl.zst");
    sf.created_at = NOW;
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    write_at(dir, "file-kept.jsonl.zst", NOW - 7200);
    write_at(dir, "file-ghost.jsonl.zst", NOW - 7200);       /* old, no row: an orphan */
    write_at(dir, "file-young.jsonl.zst", NOW - 60);         /* no row yet: inside the grace */
    /* a batch's result files: one a row names, one whose row is gone (a
     * DELETE cut short by a crash between the row and the bytes) */
    snprintf(sf.id, sizeof sf.id, "file-out");
    snprintf(sf.purpose, sizeof sf.purpose, "batch_output");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/batch_y-output.jsonl.zst");
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    write_at(dir, "batch_y-output.jsonl.zst", NOW - 7200);
    write_at(dir, "batch_x-output.jsonl.zst", NOW - 7200);
    write_at(dir, "batch_z-errors.jsonl.zst", NOW - 60);     /* a finalization about to commit */
    int64_t n = -1;
    CHECK_EQ_INT(retention_orphans(st, NOW, RETENTION_ORPHAN_GRACE_S, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK(!exists(dir, "file-ghost.jsonl.zst"));
    CHECK(exists(dir, "file-kept.jsonl.zst"));
    CHECK(exists(dir, "file-young.jsonl.zst"));
    CHECK(!exists(dir, "batch_x-output.jsonl.zst"));
    CHECK(exists(dir, "batch_y-output.jsonl.zst"));
    CHECK(exists(dir, "batch_z-errors.jsonl.zst"));
    store_close(st);
}
