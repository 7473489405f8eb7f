/*
 * submit.c - jobctl submit: one JSONL file to one batch through POST /v1/jobs.
 *
 * The file is read twice, never held in memory: a first pass hashes it
 * (SHA-256) for the derived Idempotency-Key, a second streams it through a
 * zstd writer into the request body (Transfer-Encoding: chunked,
 * Content-Encoding: zstd). Memory is the zstd context plus one read buffer
 * and the compressed bytes of one read, whatever the file's size. stdin is
 * spooled to an unlinked temporary file first, so it can be hashed, and the
 * upload can be rewound and retried like a file (safe: the request carries
 * an Idempotency-Key, so a retry never creates a second batch).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/jobctl/jobctl.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/id.h"
#include "common/js.h"
#include "common/log.h"
#include "common/zst.h"

#define SUBMIT_READ_BYTES (256u << 10)
#define SUBMIT_MAX_METADATA 16      /* pairs jobd accepts, priority and webhook_url included */
#define SUBMIT_MAX_METADATA_VALUE 512 /* bytes of one value (jobd's limit) */
#define SUBMIT_ZSTD_LEVEL 3

static const char *submit_usage =
    "usage: jobctl submit FILE.jsonl|- [options]\n"
    "\n"
    "Submit a JSONL file of requests as one batch (POST /v1/jobs) and print the\n"
    "batch id on stdout and nothing else, so id=$(jobctl submit f.jsonl) works.\n"
    "The file streams from disk, zstd-compressed on the wire (chunked); '-' reads\n"
    "stdin (spooled to a temporary file first). The Idempotency-Key defaults to\n"
    "one derived from the content's SHA-256 and the options (endpoint, window,\n"
    "metadata, priority, webhook, file name), so submitting the same file twice -\n"
    "a cron job that runs twice - creates one batch: the second call prints the\n"
    "first batch's id (jobd keeps keys 24 h). With --wait it then waits like\n"
    "'jobctl wait' and exits with the batch's outcome code.\n"
    "\n"
    "  --metadata K=V       a metadata pair (repeatable; at most 16 pairs in all,\n"
    "                       --priority and --webhook included)\n"
    "\n"
    "--output-expires DUR: jobd deletes the batch's output and error files DUR\n"
    "after it writes them (OpenAI's output_expires_after; jobd's default is\n"
    "its --file-retention, or never).\n"
    "\n"
    "--dry-run submits nothing: the file is uploaded (expiring in an hour),\n"
    "POST /v1/batches/estimate answers the request count, the input tokens\n"
    "(counted with the model's tokenizer when jobd has one: jobd --tokenizer;\n"
    "else prompt bytes / 4), the maximum output tokens and the cost range from\n"
    "jobd's prices, and the upload is deleted. Warnings (a model no worker\n"
    "serves, lines its worker would refuse) go to stderr; exit 1 when a model is\n"
    "unknown to jobd.\n"
    "\n"
    "--webhook URL is sent as the batch's metadata webhook_url: when the batch\n"
    "ends jobd POSTs its batch.* event there, signed with the tenant's secret\n"
    "(GET /v1/webhook_secret; see spec/webhooks.md). jobd checks the address\n"
    "when it delivers, not now.\n"
    "\n"
    "--format anthropic (or a file whose first line has \"params\" and no \"url\"):\n"
    "the lines are Anthropic Message Batches requests {\"custom_id\", \"params\"},\n"
    "sent as one POST /v1/messages/batches (at most 256 MiB; spec/anthropic.md);\n"
    "it prints the msgbatch_ id, and --wait waits on the same batch. status, wait,\n"
    "cancel, results, errors and rerun take that id too (the batch_ twin's lines).\n"
    "\n"
    "Without --endpoint, a file whose first line has \"url\": \"/v1/completions\",\n"
    "\"/v1/embeddings\" or \"/v1/responses\" is submitted for that endpoint, any\n"
    "other for /v1/chat/completions.\n"
    "\n"
    "examples:\n"
    "  id=$(jobctl submit requests.jsonl --metadata owner=nightly) && jobctl wait \"$id\"\n"
    "  jobctl submit requests.jsonl --webhook https://hooks.example.com/jobd\n"
    "  ./make-requests | jobctl submit - --window 6h --priority 10 --wait\n"
    "  jobctl submit requests.jsonl --dry-run\n";

struct submit_src {
    int fd;
    struct zst_writer *zw;
    struct buf pending; /* compressed bytes not yet handed to curl */
    char *rbuf;
    int ended;
};

static int submit_sink(void *ctx, const void *data, size_t n)
{
    return buf_append(ctx, data, n);
}

static long submit_source(void *ctx, void *data, size_t cap)
{
    struct submit_src *s = ctx;
    while (s->pending.len == 0 && !s->ended) {
        ssize_t n = read(s->fd, s->rbuf, SUBMIT_READ_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ERR_IO;
        int rc = n > 0 ? zst_writer_write(s->zw, s->rbuf, (size_t)n) : zst_writer_end_frame(s->zw);
        if (rc)
            return rc;
        if (n == 0)
            s->ended = 1;
    }
    size_t k = s->pending.len < cap ? s->pending.len : cap;
    memcpy(data, s->pending.data, k);
    buf_consume(&s->pending, k);
    return (long)k;
}

static int submit_rewind(void *ctx)
{
    struct submit_src *s = ctx;
    if (lseek(s->fd, 0, SEEK_SET) != 0)
        return ERR_IO;
    zst_writer_free(s->zw);
    s->zw = NULL;
    buf_reset(&s->pending);
    s->ended = 0;
    return zst_writer_new(SUBMIT_ZSTD_LEVEL, submit_sink, &s->pending, &s->zw);
}

/* ---- --dry-run: upload (expiring), estimate, delete ---------------------------------------- */

/* A multipart body: head, the file's bytes, tail (Content-Length known). */
struct mp_src {
    int fd;
    struct buf head, tail;
    size_t head_at, tail_at;
    int file_done;
};

static long mp_source(void *ctx, void *data, size_t cap)
{
    struct mp_src *m = ctx;
    if (m->head_at < m->head.len) {
        size_t k = m->head.len - m->head_at < cap ? m->head.len - m->head_at : cap;
        memcpy(data, m->head.data + m->head_at, k);
        m->head_at += k;
        return (long)k;
    }
    while (!m->file_done) {
        ssize_t n = read(m->fd, data, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ERR_IO;
        if (n > 0)
            return (long)n;
        m->file_done = 1;
    }
    size_t k = m->tail.len - m->tail_at < cap ? m->tail.len - m->tail_at : cap;
    memcpy(data, m->tail.data + m->tail_at, k);
    m->tail_at += k;
    return (long)k;
}

static int mp_rewind(void *ctx)
{
    struct mp_src *m = ctx;
    m->head_at = m->tail_at = 0;
    m->file_done = 0;
    return lseek(m->fd, 0, SEEK_SET) == 0 ? 0 : ERR_IO;
}

/* Print an estimate object as a table (stdout) and its warnings (stderr). */
static void print_estimate(const json_t *e)
{
    int64_t reqs = 0, in = 0, out = 0, cmin = 0, cmax = 0;
    json_t *rc = NULL, *cost = NULL, *models = NULL, *warn = NULL;
    if (!js_get_obj(e, "request_counts", &rc))
        js_get_int(rc, "total", &reqs);
    js_get_int(e, "input_tokens", &in);
    js_get_int(e, "max_output_tokens", &out);
    if (!js_get_obj(e, "cost", &cost)) {
        js_get_int(cost, "min_micros", &cmin);
        js_get_int(cost, "max_micros", &cmax);
    }
    printf("%-32s %9s %12s %9s %14s %14s %8s\n", "model", "requests", "input_tok", "exact", "max_output_tok",
           "cost_max", "workers");
    js_get_arr(e, "models", &models);
    for (size_t i = 0; i < json_array_size(models); i++) {
        json_t *m = json_array_get(models, i), *mc = NULL;
        const char *name = "?";
        int64_t r = 0, mi = 0, mo = 0, mx = 0, w = 0;
        js_get_str(m, "model", &name);
        js_get_int(m, "requests", &r);
        js_get_int(m, "input_tokens", &mi);
        js_get_int(m, "max_output_tokens", &mo);
        js_get_int(m, "workers", &w);
        if (!js_get_obj(m, "cost", &mc))
            js_get_int(mc, "max_micros", &mx);
        char c[32];
        jc_fmt_micros(mx, c, sizeof c);
        printf("%-32s %9lld %12lld %9s %14lld %14s %8lld\n", name, (long long)r, (long long)mi,
               json_is_true(json_object_get(m, "input_tokens_exact")) ? "yes" : "bytes/4", (long long)mo, c,
               (long long)w);
    }
    char lo[32], hi[32];
    jc_fmt_micros(cmin, lo, sizeof lo);
    jc_fmt_micros(cmax, hi, sizeof hi);
    printf("total: %lld requests, %lld input tokens, at most %lld output tokens; cost %s .. %s%s\n",
           (long long)reqs, (long long)in, (long long)out, lo, hi,
           json_is_true(json_object_get(cost, "priced")) ? "" : " (some models have no price: counted as 0)");
    /* the fleet's hint: cost and time at its measured rate of the last week */
    for (size_t i = 0; i < json_array_size(models); i++) {
        json_t *m = json_array_get(models, i), *fl = json_object_get(m, "fleet"), *fc = NULL, *sec = NULL;
        const char *name = "?";
        int64_t fmin = 0, fmax = 0, smin = 0, smax = 0;
        js_get_str(m, "model", &name);
        if (!json_is_object(fl)) {
            printf("fleet: %s: not measured yet (no worker time of this model in the last week)\n", name);
            continue;
        }
        if (!js_get_obj(fl, "cost", &fc)) {
            js_get_int(fc, "min_micros", &fmin);
            js_get_int(fc, "max_micros", &fmax);
        }
        char a[32], z[32], d1[32], d2[32];
        jc_fmt_micros(fmin, a, sizeof a);
        jc_fmt_micros(fmax, z, sizeof z);
        json_t *tps = json_object_get(fl, "tokens_per_worker_second");
        printf("fleet: %s: cost %s .. %s at %.1f tokens per worker-second", name, a, z,
               json_is_number(tps) ? json_number_value(tps) : 0.0);
        if (!js_get_obj(fl, "seconds", &sec) && !js_get_int(sec, "min", &smin) && !js_get_int(sec, "max", &smax)) {
            jc_fmt_duration(smin, d1, sizeof d1);
            jc_fmt_duration(smax, d2, sizeof d2);
            printf(", %s .. %s on the live workers", d1, d2);
        }
        fputc('\n', stdout);
    }
    js_get_arr(e, "warnings", &warn);
    for (size_t i = 0; i < json_array_size(warn); i++)
        fprintf(stderr, "jobctl submit: warning: %s\n", json_string_value(json_array_get(warn, i)));
}

/* --dry-run: upload the file (expiring in an hour), ask POST
 * /v1/batches/estimate, delete the file again, print. Exit 0, or 1 when a
 * model is unknown to jobd (no worker, no tokenizer), or jc's codes. */
static int submit_dry_run(struct jc *jc, int fd, const char *filename, const char *endpoint, const char *window,
                          unsigned long long n_bytes, int json_out)
{
    struct mp_src m = {.fd = fd};
    const char *boundary = "jobctl-dry-run-9b1f0c3e";
    buf_init(&m.head, 4096);
    buf_init(&m.tail, 256);
    int rc = buf_printf(&m.head,
                        "--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                        "--%s\r\nContent-Disposition: form-data; name=\"expires_after[anchor]\"\r\n\r\ncreated_at\r\n"
                        "--%s\r\nContent-Disposition: form-data; name=\"expires_after[seconds]\"\r\n\r\n3600\r\n"
                        "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dry-run.jsonl\"\r\n"
                        "Content-Type: application/jsonl\r\n\r\n",
                        boundary, boundary, boundary, boundary);
    if (!rc)
        rc = buf_printf(&m.tail, "\r\n--%s--\r\n", boundary);
    (void)filename;
    char ct[128];
    snprintf(ct, sizeof ct, "Content-Type: multipart/form-data; boundary=%s", boundary);
    const char *hdrs[] = {ct, NULL};
    struct httpc_opts o;
    jc_opts_default(&o);
    o.timeout_ms = 0;
    o.stall_timeout_ms = 120000;
    struct httpc_stream st = {mp_source, mp_rewind, &m, (long long)(m.head.len + n_bytes + m.tail.len), NULL, NULL};
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *file = NULL, *est = NULL;
    char fid[128] = "";
    if (rc || lseek(fd, 0, SEEK_SET) != 0) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot prepare the upload");
        goto out;
    }
    int hrc = jc_call(jc, &o, "POST", "/v1/files", hdrs, NULL, 0, &st, &r);
    const char *id = NULL;
    if ((rc = jc_check(jc, "POST", "/v1/files", hrc, &r, NULL, 0)) || (rc = jc_parse_json(jc, &r, &file)))
        goto out;
    if (js_get_str(file, "id", &id) || jc_check_id(jc, "file", id)) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's answer has no file id");
        goto out;
    }
    snprintf(fid, sizeof fid, "%s", id);
    json_t *req = json_pack("{s:s,s:s,s:s}", "input_file_id", fid, "endpoint",
                            endpoint ? endpoint : "/v1/chat/completions", "completion_window", window);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "out of memory");
        goto out;
    }
    httpc_response_release(&r);
    httpc_response_init(&r);
    const char *jh[] = {"Content-Type: application/json", NULL};
    struct httpc_opts eo;
    jc_opts_default(&eo);
    eo.retry_unsafe = 1; /* no side effects */
    eo.timeout_ms = 600000;
    hrc = jc_call(jc, &eo, "POST", "/v1/batches/estimate", jh, body, strlen(body), NULL, &r);
    free(body);
    if ((rc = jc_check(jc, "POST", "/v1/batches/estimate", hrc, &r, NULL, 0)) || (rc = jc_parse_json(jc, &r, &est)))
        goto out;
    if (json_out)
        jc_print_json(est, stdout, 2);
    else
        print_estimate(est);
    json_t *unknown = NULL;
    if (!js_get_arr(est, "unknown_models", &unknown) && json_array_size(unknown) > 0)
        rc = jc_fail(jc, JC_EXIT_FAIL, "start a worker for it (jobworker --model-id/--alias) or fix the lines' model",
                     "%zu model(s) unknown to jobd (no worker serves them, no --tokenizer): %s",
                     json_array_size(unknown), json_string_value(json_array_get(unknown, 0)));
out:
    if (fid[0]) { /* the file was only for the estimate */
        char path[256];
        snprintf(path, sizeof path, "/v1/files/%s", fid);
        httpc_response_release(&r);
        httpc_response_init(&r);
        struct httpc_opts d;
        jc_opts_default(&d);
        if (jc_call(jc, &d, "DELETE", path, NULL, NULL, 0, NULL, &r) || r.status != 200)
            fprintf(stderr, "jobctl submit: note: could not delete the estimate's upload %s (it expires in an "
                            "hour)\n", fid);
    }
    json_decref(file);
    json_decref(est);
    httpc_response_release(&r);
    buf_release(&m.head);
    buf_release(&m.tail);
    return rc;
}

/* Copy stdin to an unlinked temporary file; returns its fd or -1. */
static int submit_spool_stdin(char *rbuf)
{
    FILE *t = tmpfile();
    if (!t)
        return -1;
    int fd = dup(fileno(t));
    fclose(t);
    if (fd < 0)
        return -1;
    for (;;) {
        ssize_t n = read(0, rbuf, SUBMIT_READ_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, rbuf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                close(fd);
                return -1;
            }
            off += w;
        }
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* SHA-256 of the whole file as hex; rewinds it. 0 or ERR_IO/ERR_NOMEM. */
/* The "url" of the first request line, when it is /v1/completions,
 * /v1/embeddings or /v1/responses: then that is the batch's endpoint unless --endpoint says otherwise (jobd's default
 * is /v1/chat/completions). Reads at most one buffer from the start of fd
 * (pread: the offset is not moved); anything unreadable gives NULL and
 * jobd's validation reports the real problem. */
static const char *submit_sniff_endpoint(int fd, char *rbuf)
{
    ssize_t n = pread(fd, rbuf, SUBMIT_READ_BYTES, 0);
    if (n <= 0)
        return NULL;
    const char *nl = memchr(rbuf, '\n', (size_t)n);
    size_t len = nl ? (size_t)(nl - rbuf) : (size_t)n;
    json_t *line = NULL;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    lim.max_bytes = SUBMIT_READ_BYTES;
    if (js_parse(rbuf, len, &lim, &line, NULL))
        return NULL;
    static const char *const eps[] = {"/v1/completions", "/v1/embeddings", "/v1/responses", NULL};
    const char *url = NULL, *ep = NULL;
    if (!js_get_str(line, "url", &url))
        for (int i = 0; eps[i] && !ep; i++)
            if (!strcmp(url, eps[i]))
                ep = eps[i];
    json_decref(line);
    return ep;
}

static int submit_hash(int fd, char *rbuf, char hex[2 * SHA256_LEN + 1], unsigned long long *bytes)
{
    struct sha256_ctx *c = sha256_new();
    if (!c)
        return ERR_NOMEM;
    unsigned long long total = 0;
    for (;;) {
        ssize_t n = read(fd, rbuf, SUBMIT_READ_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            sha256_free(c);
            return ERR_IO;
        }
        if (n == 0)
            break;
        total += (unsigned long long)n;
        if (sha256_update(c, rbuf, (size_t)n)) {
            sha256_free(c);
            return ERR_CRYPTO;
        }
    }
    uint8_t d[SHA256_LEN];
    if (sha256_final(c, d) || lseek(fd, 0, SEEK_SET) != 0)
        return ERR_IO;
    for (int i = 0; i < SHA256_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    *bytes = total;
    return 0;
}

#define SUBMIT_ANTHROPIC_MAX_BYTES (256ull << 20)

/* 1 when the first line of fd looks like an Anthropic request: "params" and no "url". */
static int submit_sniff_anthropic(int fd, char *rbuf)
{
    ssize_t n = pread(fd, rbuf, 65536, 0);
    if (n <= 0)
        return 0;
    char *nl = memchr(rbuf, '\n', (size_t)n);
    size_t len = nl ? (size_t)(nl - rbuf) : (size_t)n;
    return memmem(rbuf, len, "\"params\"", 8) && !memmem(rbuf, len, "\"url\"", 5);
}

/* --format anthropic: the JSONL lines of fd as the requests of one POST
 * /v1/messages/batches; prints the msgbatch id. Returns the exit code. */
static int submit_anthropic(struct jc *jc, int fd, const char *path, const char *idem, int wait,
                            int64_t interval_ms, int64_t timeout_ms)
{
    struct buf body;
    buf_init(&body, SUBMIT_ANTHROPIC_MAX_BYTES + 64);
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *batch = NULL;
    char line[1 << 16];
    int rc = buf_append_str(&body, "{\"requests\":[");
    FILE *f = NULL;
    int dfd = rc ? -1 : dup(fd);
    if (dfd < 0 || !(f = fdopen(dfd, "r")) || fseek(f, 0, SEEK_SET)) {
        if (dfd >= 0 && !f)
            close(dfd);
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    size_t n_req = 0;
    int at_start = 1, blank = 1;
    while (!rc && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        int ends = n && line[n - 1] == '\n';
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (at_start) {
            blank = strspn(line, " \t\r\n") == strlen(line);
            if (!blank)
                rc = n_req++ ? buf_append_byte(&body, ',') : 0;
        }
        if (!rc && !blank)
            rc = buf_append(&body, line, n);
        at_start = ends;
    }
    if (!rc)
        rc = buf_append_str(&body, "]}");
    if (rc || n_req == 0) {
        rc = rc ? jc_fail(jc, JC_EXIT_FAIL, NULL, "'%s' is larger than a message batch may be (256 MiB)", path)
                : jc_fail(jc, JC_EXIT_FAIL, "a batch needs at least one request line", "'%s' has no request", path);
        goto out;
    }
    char idem_hdr[300];
    if (idem) {
        snprintf(idem_hdr, sizeof idem_hdr, "Idempotency-Key: %s", idem);
    } else {
        uint8_t d[SHA256_LEN];
        sha256(body.data, body.len, d);
        int k = snprintf(idem_hdr, sizeof idem_hdr, "Idempotency-Key: jobctl-anthropic-");
        for (int i = 0; i < 20; i++)
            k += snprintf(idem_hdr + k, sizeof idem_hdr - (size_t)k, "%02x", d[i]);
    }
    struct httpc_opts ho;
    jc_opts_default(&ho);
    ho.retry_unsafe = 1; /* the Idempotency-Key makes a repeat harmless */
    ho.timeout_ms = 0;
    ho.stall_timeout_ms = 120000;
    const char *hdrs[] = {"Content-Type: application/json", "anthropic-version: 2023-06-01", idem_hdr, NULL};
    const char *route = "/v1/messages/batches";
    int hrc = jc_call(jc, &ho, "POST", route, hdrs, body.data, body.len, NULL, &r);
    if ((rc = jc_check(jc, "POST", route, hrc, &r, NULL, 0)) || (rc = jc_parse_json(jc, &r, &batch)))
        goto out;
    const char *id;
    if (js_get_str(batch, "id", &id) || strncmp(id, "msgbatch_", 9) || strlen(id) >= ID_MAX) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's answer has no message batch id");
        goto out;
    }
    printf("%s\n", id);
    fflush(stdout);
    char bid[ID_MAX];
    snprintf(bid, sizeof bid, "batch_%s", id + 9); /* the same batch on the OpenAI routes */
    rc = wait ? jc_wait(jc, bid, interval_ms, timeout_ms, 0) : JC_EXIT_OK;
out:
    if (f)
        fclose(f);
    json_decref(batch);
    httpc_response_release(&r);
    buf_release(&body);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Take every --metadata K=V out of argv (it may repeat, which cfg.h does not
 * do); the rest is compacted into argv, *argc updated. 0 or an exit code. */
static int submit_take_metadata(struct jc *jc, int *argc, char **argv, const char **md, int *n_md)
{
    int out = 0;
    *n_md = 0;
    for (int i = 0; i < *argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--")) {
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        if (!strcmp(argv[i], "--metadata")) {
            if (i + 1 >= *argc)
                return jc_usage_error(jc, "--metadata needs KEY=VALUE");
            v = argv[++i];
        } else if (!strncmp(argv[i], "--metadata=", 11)) {
            v = argv[i] + 11;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(v, '=');
        if (!eq || eq == v)
            return jc_usage_error(jc, "--metadata: '%s' is not KEY=VALUE", v);
        if (*n_md >= SUBMIT_MAX_METADATA)
            return jc_usage_error(jc, "--metadata: at most %d pairs", SUBMIT_MAX_METADATA);
        if (!strncmp(v, "priority=", 9))
            return jc_usage_error(jc, "--metadata: use --priority N to set the priority");
        if (!strncmp(v, "webhook_url=", 12))
            return jc_usage_error(jc, "--metadata: use --webhook URL to set the webhook_url");
        if (strlen(eq + 1) > SUBMIT_MAX_METADATA_VALUE)
            return jc_usage_error(jc, "--metadata: a value may be at most %d bytes",
                                  SUBMIT_MAX_METADATA_VALUE);
        md[(*n_md)++] = v;
    }
    *argc = out;
    return 0;
}

int cmd_submit(struct jc *jc, int argc, char **argv)
{
    const char *endpoint = NULL, *window = "24h", *webhook = NULL, *idem = NULL, *filename = NULL, *format = NULL;
    int64_t priority = INT64_MIN, interval_ms = 2000, timeout_ms = 0, out_expires_ms = 0;
    int wait = 0, dry_run = 0, json_out = 0;
    const char *md[SUBMIT_MAX_METADATA + 1];
    int n_md = 0;
    int rc = submit_take_metadata(jc, &argc, argv, md, &n_md);
    if (rc)
        return rc;
    struct cfg_opt opts[] = {
        CFG_OPT("endpoint", NULL, CFG_STR, &endpoint, "PATH",
                "/v1/chat/completions, /v1/completions, /v1/embeddings or /v1/responses (default: the first "
                "line's url when it is one of the last three, else /v1/chat/completions)"),
        CFG_OPT("window", NULL, CFG_STR, &window, "DUR", "completion window, 1h .. 7d (default 24h; the deadline leasing orders by)"),
        CFG_OPT("priority", NULL, CFG_INT, &priority, "N", "-1000 .. 1000: orders your own batches (default 0)"),
        CFG_OPT("webhook", NULL, CFG_STR, &webhook, "URL", "POST the batch's end event here (metadata webhook_url)"),
        CFG_OPT("idempotency-key", NULL, CFG_STR, &idem, "KEY", "override the derived Idempotency-Key"),
        CFG_OPT("filename", NULL, CFG_STR, &filename, "NAME", "name of the stored input file (default: the file's)"),
        CFG_OPT("output-expires", NULL, CFG_DURATION, &out_expires_ms, "DUR",
                "delete the output and error files DUR after they are written (output_expires_after; 1h .. 30d)"),
        CFG_OPT("format", NULL, CFG_STR, &format, "openai|anthropic",
                "the lines' contract (default: anthropic when the first line has \"params\" and no \"url\")"),
        CFG_OPT("wait", NULL, CFG_BOOL, &wait, NULL, "then wait for the batch and exit with its outcome code"),
        CFG_OPT("dry-run", NULL, CFG_BOOL, &dry_run, NULL,
                "submit nothing: print jobd's estimate (requests, input tokens, max output tokens, cost range)"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "with --dry-run: print jobd's estimate object"),
        CFG_OPT("interval", NULL, CFG_DURATION, &interval_ms, "DUR", "with --wait: polling interval (default 2s)"),
        CFG_OPT("timeout", NULL, CFG_DURATION, &timeout_ms, "DUR", "with --wait: give up after DUR (exit 14)"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0;
    if ((rc = jc_parse(jc, submit_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1,
                       &n_pos)) >= 0)
        return rc;

    int64_t win_ms;
    if (cfg_parse_duration_ms(window, &win_ms) || win_ms < 3600000 || win_ms > 7LL * 86400000)
        return jc_usage_error(jc, "--window: '%s' is not a duration from 1h to 7d", window);
    if (priority != INT64_MIN && (priority < -1000 || priority > 1000))
        return jc_usage_error(jc, "--priority: %lld is outside -1000 .. 1000", (long long)priority);
    if (out_expires_ms && (out_expires_ms % 1000 || out_expires_ms < 1000 || out_expires_ms > 30LL * 86400000))
        return jc_usage_error(jc, "--output-expires: a whole number of seconds up to 30d (jobd wants at least 1h)");
    if (endpoint && strcmp(endpoint, "/v1/chat/completions") && strcmp(endpoint, "/v1/completions") &&
        strcmp(endpoint, "/v1/embeddings") && strcmp(endpoint, "/v1/responses"))
        return jc_usage_error(jc, "--endpoint: use /v1/chat/completions, /v1/completions, /v1/embeddings or "
                                  "/v1/responses");
    if (format && strcmp(format, "openai") && strcmp(format, "anthropic"))
        return jc_usage_error(jc, "--format: use openai or anthropic");
    if (idem && (!*idem || strlen(idem) > 255))
        return jc_usage_error(jc, "--idempotency-key: 1 to 255 bytes");
    char wh_md[16 + SUBMIT_MAX_METADATA_VALUE];
    if (webhook) {
        size_t wl = strlen(webhook);
        int ok = wl <= SUBMIT_MAX_METADATA_VALUE &&
                 (!strncmp(webhook, "https://", 8) || !strncmp(webhook, "http://", 7));
        for (size_t i = 0; ok && i < wl; i++)
            ok = (unsigned char)webhook[i] > ' ' && webhook[i] != 0x7f;
        if (!ok)
            return jc_usage_error(jc, "--webhook: '%s' is not an http(s) URL of at most %d bytes", webhook,
                                  SUBMIT_MAX_METADATA_VALUE);
        snprintf(wh_md, sizeof wh_md, "webhook_url=%s", webhook);
        md[n_md++] = wh_md;
    }
    if (n_md + (priority != INT64_MIN) > SUBMIT_MAX_METADATA)
        return jc_usage_error(jc, "at most %d metadata pairs, --priority and --webhook included",
                              SUBMIT_MAX_METADATA);

    const char *path = pos[0];
    int is_stdin = !strcmp(path, "-");
    if (!filename) {
        const char *slash = strrchr(path, '/');
        filename = is_stdin ? "stdin.jsonl" : slash ? slash + 1 : path;
    }

    struct submit_src src = {-1, NULL, {0}, NULL, 0};
    buf_init(&src.pending, 8u << 20); /* the compressed bytes of one read: far less */
    struct buf q, mat;
    buf_init(&q, 64u << 10);
    buf_init(&mat, 64u << 10);
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *batch = NULL;
    char idem_hdr[300];
    if (!(src.rbuf = malloc(SUBMIT_READ_BYTES))) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "out of memory");
        goto out;
    }
    src.fd = is_stdin ? submit_spool_stdin(src.rbuf) : open(path, O_RDONLY | O_CLOEXEC);
    if (src.fd < 0) {
        rc = jc_fail(jc, JC_EXIT_FAIL, is_stdin ? "is TMPDIR writable?" : NULL, "cannot read '%s': %s",
                     is_stdin ? "stdin" : path, strerror(errno));
        goto out;
    }
    char hex[2 * SHA256_LEN + 1];
    unsigned long long n_bytes = 0;
    int hr = submit_hash(src.fd, src.rbuf, hex, &n_bytes);
    if (hr) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot read '%s': %s", path, err_msg(hr));
        goto out;
    }
    if (n_bytes == 0) {
        rc = jc_fail(jc, JC_EXIT_FAIL, "a batch needs at least one request line", "'%s' is empty", path);
        goto out;
    }
    if (format ? !strcmp(format, "anthropic") : submit_sniff_anthropic(src.fd, src.rbuf)) {
        rc = submit_anthropic(jc, src.fd, path, idem, wait, interval_ms, timeout_ms);
        goto out;
    }
    if (!endpoint)
        endpoint = submit_sniff_endpoint(src.fd, src.rbuf);
    if (dry_run) {
        rc = submit_dry_run(jc, src.fd, filename, endpoint, window, n_bytes, json_out);
        goto out;
    }

    /* the query: options and metadata; the material of the derived key */
    qsort(md, (size_t)n_md, sizeof md[0], cmp_str);
    char prio[32] = "";
    if (priority != INT64_MIN)
        snprintf(prio, sizeof prio, "%lld", (long long)priority);
    int e = buf_append_str(&q, "/v1/jobs?completion_window=") || jc_url_escape(&q, window) ||
            buf_append_str(&q, "&filename=") || jc_url_escape(&q, filename);
    if (endpoint)
        e = e || buf_append_str(&q, "&endpoint=") || jc_url_escape(&q, endpoint);
    e = e || buf_printf(&mat, "jobctl submit v1\n%s\n%s\n%s\n%s\n", endpoint ? endpoint : "",
                        window, filename, prio);
    for (int i = 0; i < n_md && !e; i++) {
        const char *eq = strchr(md[i], '=');
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - md[i]), md[i]);
        e = buf_append_str(&q, "&metadata%5B") || jc_url_escape(&q, key) || buf_append_str(&q, "%5D=") ||
            jc_url_escape(&q, eq + 1) || buf_printf(&mat, "%s\n", md[i]);
    }
    if (prio[0])
        e = e || buf_append_str(&q, "&metadata%5Bpriority%5D=") || buf_append_str(&q, prio);
    if (out_expires_ms) /* in the key's material only when set, so older derived keys stay the same */
        e = e || buf_printf(&q, "&output_expires_after%%5Bseconds%%5D=%lld", (long long)(out_expires_ms / 1000)) ||
            buf_printf(&mat, "output_expires_after=%lld\n", (long long)(out_expires_ms / 1000));
    e = e || buf_printf(&mat, "%s\n", hex);
    if (e) {
        rc = jc_fail(jc, JC_EXIT_USAGE, NULL, "options too long");
        goto out;
    }
    if (idem) {
        snprintf(idem_hdr, sizeof idem_hdr, "Idempotency-Key: %s", idem);
    } else {
        uint8_t d[SHA256_LEN];
        sha256(mat.data, mat.len, d);
        int n = snprintf(idem_hdr, sizeof idem_hdr, "Idempotency-Key: jobctl-");
        for (int i = 0; i < 20; i++)
            n += snprintf(idem_hdr + n, sizeof idem_hdr - (size_t)n, "%02x", d[i]);
    }
    log_debug("submit %s: %llu bytes, sha256 %s, %s", path, n_bytes, hex, idem_hdr);

    if (submit_rewind(&src)) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot start the zstd stream");
        goto out;
    }
    struct httpc_opts ho;
    jc_opts_default(&ho);
    ho.retry_unsafe = 1;         /* the Idempotency-Key makes a repeat harmless */
    ho.timeout_ms = 0;           /* any size ... */
    ho.stall_timeout_ms = 120000; /* ... but not a stalled transfer */
    const char *hdrs[] = {"Content-Type: application/x-ndjson", "Content-Encoding: zstd", idem_hdr, NULL};
    struct httpc_stream st = {submit_source, submit_rewind, &src, -1, NULL, NULL};
    int hrc = 0;
    for (int attempt = 0;; attempt++) {
        hrc = jc_call(jc, &ho, "POST", q.data, hdrs, NULL, 0, &st, &r);
        if (hrc || r.status != 409 || attempt >= 20) /* 409: the same key still in flight */
            break;
        char ra[16];
        long wait_s = 1;
        if (!httpc_response_header(&r, "Retry-After", ra, sizeof ra))
            wait_s = strtol(ra, NULL, 10);
        clock_sleep_ms((uint64_t)(wait_s > 0 && wait_s < 30 ? wait_s : 1) * 1000);
        httpc_response_release(&r);
        httpc_response_init(&r);
        if (submit_rewind(&src)) {
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot restart the upload");
            goto out;
        }
    }
    if (hrc == ERR_IO) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    if ((rc = jc_check(jc, "POST", q.data, hrc, &r, NULL, 0)))
        goto out;
    if ((rc = jc_parse_json(jc, &r, &batch)))
        goto out;
    const char *id;
    if (js_get_str(batch, "id", &id) || jc_check_id(jc, "batch", id)) {
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's answer has no batch id");
        goto out;
    }
    char replayed[16];
    if (!httpc_response_header(&r, "Idempotent-Replayed", replayed, sizeof replayed) &&
        !strcmp(replayed, "true"))
        fprintf(stderr, "jobctl submit: already submitted with the same content and options "
                        "(%s): the existing batch\n", idem_hdr);
    printf("%s\n", id);
    fflush(stdout);
    rc = wait ? jc_wait(jc, id, interval_ms, timeout_ms, 0) : JC_EXIT_OK;
out:
    json_decref(batch);
    httpc_response_release(&r);
    buf_release(&q);
    buf_release(&mat);
    buf_release(&src.pending);
    zst_writer_free(src.zw);
    free(src.rbuf);
    if (src.fd >= 0)
        close(src.fd);
    return rc;
}
