/* Tests for jobd/store/store_txn.c: each keyed effect commits with its
 * answer, or rolls back entirely (no batch, no file row, key still in
 * flight) when admission, rendering or the insert fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "jobd/store/store.h"
#include "tests/th.h"
#include "tests/unit/th_pg.h"

#define NOW 1700000000

struct ans {
    struct buf out;
    int status;
    int fail;  /* render fails */
    int calls;
};

static int render(void *arg, const void *obj)
{
    struct ans *a = arg;
    const struct store_batch *b = obj;
    a->calls++;
    if (a->fail)
        return ERR_NOMEM;
    buf_reset(&a->out);
    buf_printf(&a->out, "{\"id\":\"%s\"}", b->id);
    a->status = 200;
    return 0;
}

static int refuse(void *arg, struct store *st)
{
    (void)st;
    *(int *)arg += 1;
    return ERR_BUSY;
}

static void file_row(const char *tenant, struct store_file *f)
{
    memset(f, 0, sizeof *f);
    CHECK_EQ_INT(id_new("file-", f->id, sizeof f->id), 0);
    snprintf(f->tenant_id, sizeof f->tenant_id, "%s", tenant);
    snprintf(f->purpose, sizeof f->purpose, "batch");
    snprintf(f->filename, sizeof f->filename, "in.jsonl");
    snprintf(f->storage_path, sizeof f->storage_path, "files/%s.jsonl.zst", f->id);
    snprintf(f->sha256, sizeof f->sha256, "%064d", 0);
    snprintf(f->encoding, sizeof f->encoding, "zstd");
    f->bytes = 10;
    f->created_at = NOW;
}

static size_t n_batches(struct store *st, const char *tenant)
{
    struct store_batch *items = NULL;
    size_t n = 0;
    int more = 0;
    CHECK_EQ_INT(store_batch_list(st, tenant, NULL, 100, &items, &n, &more), 0);
    store_batch_list_free(items, n);
    return n;
}

TEST(store_batch_submit_commits_with_its_answer_or_not_at_all)
{
    struct store *st = NULL;
    CHECK_EQ_INT(th_store_open(th_tmpdir(), NULL, &st), 0);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    uint8_t fp[SHA256_LEN] = {1};
    struct store_idem r;
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_NEW);

    struct ans a = {.status = 0};
    buf_init(&a.out, 1 << 16);
    struct store_file f;
    file_row(t.id, &f);
    int refusals = 0;
    struct store_submit s = {
        .tenant_id = t.id,
        .file = &f,
        .batch = {"/v1/chat/completions", f.id, 86400, NULL},
        .now = NOW,
        .admit = refuse,
        .admit_arg = &refusals,
        .idem = {t.id, "k1", render, &a, &a.status, &a.out, NOW},
    };
    char id[ID_MAX] = "x";
    /* refused by admission: nothing stored, the key still in flight */
    CHECK_EQ_INT(store_batch_submit(st, &s, id), ERR_BUSY);
    CHECK_EQ_INT(refusals, 1);
    CHECK_EQ_INT(a.calls, 0);
    struct store_file g;
    CHECK_EQ_INT(store_file_get(st, t.id, f.id, &g), ERR_NOTFOUND);
    CHECK_EQ_INT(n_batches(st, t.id), 0);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_IN_FLIGHT);
    /* the render fails: rolled back too */
    s.admit = NULL;
    a.fail = 1;
    CHECK_EQ_INT(store_batch_submit(st, &s, id), ERR_NOMEM);
    CHECK_EQ_INT(store_file_get(st, t.id, f.id, &g), ERR_NOTFOUND);
    CHECK_EQ_INT(n_batches(st, t.id), 0);
    /* committed: file row, batch, reservation and the kept answer */
    a.fail = 0;
    s.reserve = 1;
    s.reserve_tokens = 500;
    s.reserve_micros = 7;
    CHECK_EQ_INT(store_batch_submit(st, &s, id), 0);
    CHECK(strncmp(id, "batch_", 6) == 0);
    CHECK_EQ_INT(store_file_get(st, t.id, f.id, &g), 0);
    CHECK_EQ_INT(n_batches(st, t.id), 1);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "k1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_REPLAY);
    CHECK_EQ_INT(r.status_code, 200);
    CHECK_EQ_STR(r.body, a.out.data);
    free(r.body);
    /* an unknown input file (no file row this time): ERR_NOTFOUND, render not called */
    a.calls = 0;
    s.file = NULL;
    s.batch.input_file_id = "file-nope";
    s.idem.key = NULL;
    CHECK_EQ_INT(store_batch_submit(st, &s, id), ERR_NOTFOUND);
    CHECK_EQ_INT(a.calls, 0);
    CHECK_EQ_INT(n_batches(st, t.id), 1);
    buf_release(&a.out);
    store_close(st);
}

TEST(store_batch_cancel_keyed_keeps_the_answer)
{
    struct store *st = NULL;
    CHECK_EQ_INT(th_store_open(th_tmpdir(), NULL, &st), 0);
    struct store_tenant t;
    CHECK_EQ_INT(store_tenant_create(st, "acme", NOW, &t), 0);
    struct store_file f;
    file_row(t.id, &f);
    CHECK_EQ_INT(store_file_create(st, &f), 0);
    struct store_batch_new nb = {"/v1/chat/completions", f.id, 86400, NULL, 0, NULL};
    struct store_batch b;
    CHECK_EQ_INT(store_batch_create(st, t.id, &nb, NOW, &b), 0);
    uint8_t fp[SHA256_LEN] = {2};
    struct store_idem r;
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "c1", fp, NOW, &r), 0);
    struct ans a = {.status = 0};
    buf_init(&a.out, 1 << 16);
    struct store_idem_answer ans = {t.id, "c1", render, &a, &a.status, &a.out, NOW};
    CHECK_EQ_INT(store_batch_cancel_keyed(st, t.id, "batch_nope", NOW, &ans), ERR_NOTFOUND);
    CHECK_EQ_INT(store_batch_cancel_keyed(st, t.id, b.id, NOW, &ans), 0);
    struct store_batch c;
    CHECK_EQ_INT(store_batch_get(st, t.id, b.id, &c), 0);
    CHECK_EQ_INT(c.status, STORE_BATCH_CANCELLING);
    store_batch_release(&c);
    CHECK_EQ_INT(store_idem_reserve(st, t.id, "c1", fp, NOW, &r), 0);
    CHECK_EQ_INT(r.outcome, STORE_IDEM_REPLAY);
    free(r.body);
    store_batch_release(&b);
    buf_release(&a.out);
    store_close(st);
}
