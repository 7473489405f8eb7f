/* bench_lease - work distribution throughput: requests/s through
 * lease (packs of 256) -> results commit (an instant test worker answering
 * every request with a small chat.completion) -> finalize, on one batch of
 * N requests; then the finalize rate (result lines/s into the zstd output
 * file) and the latency of one lease on the full queue. Same store, same
 * disk, synchronous=FULL as jobd runs.
 *
 * usage: bench_lease [N] (default 200000; 1000000 works, ingest takes ~10 s) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "jobd/work/finalize.h"
#include "jobd/intake/ingest.h"
#include "jobd/work/lease.h"
#include "jobd/store/store.h"

#define NOW 1700000000
#define MODEL "smollm"

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_lease: %s failed (%d)\n", what, rc);
    exit(1);
}

static double secs(uint64_t t0)
{
    return (double)(clock_mono_ns() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
    if (n < 1 || n > 5000000)
        die("argument", -1);
    char dir[] = "/tmp/bench_lease.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", -1);
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
    if (!f)
        die("input", -1);
    for (long i = 0; i < n; i++)
        fprintf(f,
                "{\"custom_id\":\"r-%ld\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"system\",\"content\":\"You classify tickets.\"},"
                "{\"role\":\"user\",\"content\":\"Ticket %ld: the printer is on fire\"}],\"max_tokens\":8}}\n",
                i, i);
    fclose(f);
    struct store_file sf;
    memset(&sf, 0, sizeof sf);
    snprintf(sf.tenant_id, sizeof sf.tenant_id, "%s", t.id);
    snprintf(sf.purpose, sizeof sf.purpose, "batch");
    snprintf(sf.filename, sizeof sf.filename, "input.jsonl");
    snprintf(sf.storage_path, sizeof sf.storage_path, "input.jsonl");
    sf.created_at = NOW;
    if ((rc = store_file_create(st, &sf)))
        die("file", rc);
    struct store_batch_new nb = {"/v1/chat/completions", sf.id, 86400 * 30, NULL, 0, NULL};
    struct store_batch b;
    if ((rc = store_batch_create(st, t.id, &nb, NOW, &b)))
        die("batch", rc);
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.max_requests = n;
    struct ingest_report irep;
    uint64_t t0 = clock_mono_ns();
    if ((rc = ingest_batch(st, b.id, &lim, NULL, &irep)))
        die("ingest", rc);
    double t_ingest = secs(t0);
    struct store_model_name names[] = {{MODEL, MODEL, 0, NULL}};
    struct store_worker_new w = {"bench", "cpu", 0, 256, names, 1, 0, 0};
    char worker[ID_MAX];
    if ((rc = lease_worker_register(st, &w, NOW, worker)))
        die("register", rc);

    /* one lease on the full queue (and its commit), timed alone */
    struct store_lease_ask ask = {worker, MODEL, 256, 0, 0, 120};
    struct store_result *rs = calloc(256, sizeof *rs);
    enum store_commit_outcome *oc = calloc(256, sizeof *oc);
    char **bodies = calloc(256, sizeof *bodies);
    if (!rs || !oc || !bodies)
        die("alloc", -1);
    long done = 0, leases = 0;
    double first_lease_ms = 0;
    t0 = clock_mono_ns();
    for (;;) {
        struct store_lease l;
        uint64_t tl = clock_mono_ns();
        if ((rc = lease_acquire(st, NULL, &ask, NOW + 1, &l)))
            die("lease", rc);
        if (leases == 0)
            first_lease_ms = secs(tl) * 1e3;
        if (l.n == 0)
            break;
        for (size_t i = 0; i < l.n; i++) {
            if (asprintf(&bodies[i],
                         "{\"id\":\"chatcmpl-%zu\",\"object\":\"chat.completion\",\"model\":\"" MODEL
                         "\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"fire\"},"
                         "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":1,"
                         "\"total_tokens\":21}}",
                         i) < 0)
                die("asprintf", -1);
            rs[i] = (struct store_result){.request_id = l.items[i].id, .kind = STORE_RESULT_SUCCESS,
                                          .status_code = 200, .body = bodies[i], .body_len = strlen(bodies[i]),
                                          .prompt_tokens = 20, .completion_tokens = 1};
        }
        if ((rc = lease_results_commit(st, NULL, l.id, worker, rs, l.n, NOW + 1, oc)))
            die("commit", rc);
        for (size_t i = 0; i < l.n; i++)
            free(bodies[i]);
        done += (long)l.n;
        leases++;
        store_lease_clear(&l);
    }
    double t_run = secs(t0);
    t0 = clock_mono_ns();
    struct finalize_report rep;
    if ((rc = finalize_batch(st, b.id, NOW + 2, NULL, &rep)) || !rep.done)
        die("finalize", rc);
    double t_fin = secs(t0);
    struct store_batch fb;
    if ((rc = store_batch_get(st, NULL, b.id, &fb)))
        die("get", rc);
    struct store_file of;
    if ((rc = store_file_get(st, t.id, fb.output_file_id, &of)))
        die("output file", rc);
    snprintf(path, sizeof path, "%s/%s", dir, of.storage_path);
    struct stat sb;
    stat(path, &sb);
    printf("lease: %ld requests (ingest %.1f s = %.0f req/s)\n", n, t_ingest, (double)n / t_ingest);
    printf("lease: first lease of 256 on a %ld-request queue: %.2f ms\n", n, first_lease_ms);
    printf("lease: lease+commit %ld requests in %ld leases: %.2f s = %.0f requests/s\n", done, leases, t_run,
           (double)done / t_run);
    printf("lease: finalize %lld lines (%.1f MiB -> %.1f MiB zstd): %.2f s = %.0f lines/s\n",
           (long long)rep.n_output_lines, (double)of.bytes / (1 << 20), (double)sb.st_size / (1 << 20), t_fin,
           (double)rep.n_output_lines / t_fin);
    printf("lease: end to end (lease -> results -> finalize): %.0f requests/s\n", (double)done / (t_run + t_fin));
    store_batch_release(&fb);
    store_batch_release(&b);
    store_close(st);
    free(rs);
    free(oc);
    free(bodies);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_lease: could not remove %s\n", dir);
    return 0;
}
