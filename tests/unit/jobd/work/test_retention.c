/* Tests for file expiry (jobd/work/retention.c, store_files_expired /
 * store_file_purge) on a real SQLite file and data directory: expired files
 * lose bytes and row, others stay, the input of a validating batch waits
 * until the batch is past ingestion, and a batch cannot start on an
 * expired file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "common/err.h"
#include "jobd/blob/blob.h"
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

/* ---- the orphan sweep on S3 (JOBD_TEST_S3_ENDPOINT: a SeaweedFS from scripts/s3-server) ---- */

static int s3_seen(void *ctx, const char *key, uint64_t size_bytes, int64_t mtime_s)
{
    (void)size_bytes;
    (void)mtime_s;
    char *names = ctx;
    const char *base = strrchr(key, '/');
    size_t l = strlen(names);
    snprintf(names + l, 1024 - l, "%s ", base ? base + 1 : key);
    return 0;
}

/* The keys under files/ in bs, "name name ... " in listing order. */
static void s3_names(struct blob_store *bs, char names[1024])
{
    names[0] = 0;
    CHECK_EQ_INT(blob_list(bs, "files/", s3_seen, names), 0);
}

static void s3_put(struct blob_store *bs, const char *dir, const char *name)
{
    char path[800], key[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs("{}\n", f);
    fclose(f);
    snprintf(key, sizeof key, "files/%s", name);
    CHECK_EQ_INT(blob_put_file(bs, key, path), 0);
}

/* What retention_orphans_removes_old_bytes_without_a_row_only checks on a
 * data directory, on a real S3 server: an object no file row names is
 * removed once it is older than the grace (by its Last-Modified, which
 * the server sets: the sweep is run at the real time, then as if two hours
 * had passed), an object a row names is kept however old - an upload's by
 * its file id, a batch's output file by its key. */
TEST(retention_s3_orphans_removes_old_objects_without_a_row_only)
{
    const char *ep = getenv("JOBD_TEST_S3_ENDPOINT");
    if (!ep || !*ep)
        SKIP("no JOBD_TEST_S3_ENDPOINT (url=$(scripts/s3-server start DIR))");
    const char *dir = th_tmpdir();
    char url[128];
    snprintf(url, sizeof url, "s3://jobd/orphans-%d", (int)getpid());
    struct blob_config c = {.url = url, .endpoint = ep, .region = "us-east-1", .access_key = "jobd-test",
                            .secret_key = "jobd-test-secret"};
    struct blob_store *bs = NULL;
    CHECK_EQ_INT(blob_store_open(&c, &bs), 0);
    struct store_opts so = STORE_OPTS_DEFAULT;
    so.blobs = bs;
    struct store *st;
    CHECK_EQ_INT(th_store_open(dir, &so, &st), 0);
    struct store_tenant t;
    int64_t now = (int64_t)time(NULL);
    CHECK_EQ_INT(store_tenant_create(st, "acme", now, &t), 0);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.id, sizeof sf.id, "file-kept");
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/file-kept.jsonl.zst");
    sf.created_at = now;
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    snprintf(sf.id, sizeof sf.id, "file-out");
    snprintf(sf.purpose, sizeof sf.purpose, "batch_output");
    snprintf(sf.storage_path, sizeof sf.storage_path, "files/batch_y-output.jsonl.zst");
    CHECK_EQ_INT(store_file_create(st, &sf), 0);
    s3_put(bs, dir, "file-kept.jsonl.zst");
    s3_put(bs, dir, "file-ghost.jsonl.zst");     /* no row: an orphan once old */
    s3_put(bs, dir, "batch_y-output.jsonl.zst");
    s3_put(bs, dir, "batch_x-output.jsonl.zst"); /* no row (a delete cut short) */
    char names[1024];
    s3_names(bs, names);
    CHECK_EQ_STR(names, "batch_x-output.jsonl.zst batch_y-output.jsonl.zst file-ghost.jsonl.zst "
                        "file-kept.jsonl.zst ");
    int64_t n = -1;
    /* now: every object is younger than the grace, so even the orphans stay */
    CHECK_EQ_INT(retention_orphans(st, now, RETENTION_ORPHAN_GRACE_S, &n), 0);
    CHECK_EQ_INT(n, 0);
    s3_names(bs, names);
    CHECK(strstr(names, "file-ghost") && strstr(names, "batch_x-output"));
    /* two hours on: the two without a row go, the two named stay */
    CHECK_EQ_INT(retention_orphans(st, now + 7200, RETENTION_ORPHAN_GRACE_S, &n), 0);
    CHECK_EQ_INT(n, 2);
    s3_names(bs, names);
    CHECK_EQ_STR(names, "batch_y-output.jsonl.zst file-kept.jsonl.zst ");
    CHECK_EQ_INT(blob_delete(bs, "files/file-kept.jsonl.zst"), 0);
    CHECK_EQ_INT(blob_delete(bs, "files/batch_y-output.jsonl.zst"), 0);
    store_close(st);
    blob_store_free(bs);
}
