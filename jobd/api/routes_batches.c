/*
 * routes_batches.c - the Batch API: POST /v1/batches, GET /v1/batches,
 * GET /v1/batches/{id} (ETag / If-None-Match / Retry-After, and a long
 * poll: with If-None-Match and "Prefer: wait=N" (RFC 7240) a 304 is held,
 * the batch re-read every BATCH_WAIT_STEP_MS, until it changed (200), N
 * seconds passed (304) or jobd drains; "Preference-Applied: wait=N" says
 * it was honored),
 * POST /v1/batches/{id}/cancel, and the native one-call submission
 * POST /v1/jobs (the JSONL is the request body), and
 * POST /v1/batches/{id}/rerun (a new batch of an ended batch's failed,
 * not-run or all lines, rebuilt from the stored requests into a new input
 * file, then the same sequence as /v1/jobs).
 *
 * Both creation routes share one sequence (submit): the Idempotency-Key
 * (jobd/api/api_idem.h), for /v1/jobs the body's bytes moved into place,
 * admission under the tenant's budget (jobd/api/api_admit.h), then one
 * store transaction (store_batch_submit) that inserts the file row (/v1/jobs),
 * the batch in status validating, its budget reservation and the key's
 * answer. A refusal (429) or a failure rolls everything back (for /v1/jobs
 * also the body's bytes). Once answered, the batch is queued for the ingest
 * thread; if jobd dies before the queueing, the ingest thread's startup
 * scan picks it up.
 *
 * Threads: handlers on the loop, the *_run functions on the thread pool
 * (jobd/api/api_job.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "jobd/api/api_admit.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_fleet.h"
#include "jobd/api/api_idem.h"
#include "jobd/api/api_int.h"
#include "jobd/api/api_json.h"
#include "jobd/blob/blob.h"
#include "jobd/http/http.h"
#include "jobd/intake/ingest.h"
#include "jobd/intake/ingestq.h"
#include "jobd/intake/upload.h"
#include "jobd/tokens/tokens.h"
#include "jobd/work/lease.h"

struct batch_in {
    char endpoint[32];
    char input_file_id[ID_MAX];
    int64_t window_s;
    char *metadata; /* JSON object text or NULL */
    /* /v1/jobs (and a rerun: its lines are written here) */
    struct upload *up;
    char filename[256];
    /* POST /v1/batches/{id}/rerun */
    char rerun_of[ID_MAX];
    enum store_rerun_only only;
    int window_given, metadata_given; /* else the original batch's */
    int64_t out_expires_s; /* output_expires_after.seconds; 0 = jobd's --file-retention */
    const char *api;       /* the batch's contract: NULL = "openai" */
};

static void batch_in_free(void *p)
{
    struct batch_in *bi = p;
    if (!bi)
        return;
    upload_free(bi->up);
    free(bi->metadata);
    free(bi);
}

static int endpoint_ok(const char *e)
{
    return strcmp(e, "/v1/chat/completions") == 0 || strcmp(e, "/v1/completions") == 0 ||
           strcmp(e, "/v1/embeddings") == 0 || strcmp(e, "/v1/responses") == 0;
}

static int retry_hint(enum store_batch_status s)
{
    switch (s) {
    case STORE_BATCH_VALIDATING:
        return 1;
    case STORE_BATCH_IN_PROGRESS:
    case STORE_BATCH_FINALIZING:
    case STORE_BATCH_CANCELLING:
        return 5;
    default:
        return 0;
    }
}

/* ---- the create sequence of POST /v1/batches and POST /v1/jobs ------------------------------------ */

struct create_job {
    struct api_job job;
    struct batch_in *bi;  /* owned (POST /v1/batches) or the request's (POST /v1/jobs) */
    int owns_bi;
    char batch_id[ID_MAX]; /* created: queued for ingestion once answered */
    struct api_create_src src; /* api_create_job_new: the lines are written by src.lines */
};

static void create_free(struct api_job *job)
{
    struct create_job *cj = (struct create_job *)job;
    if (cj->owns_bi)
        batch_in_free(cj->bi);
    if (cj->src.arg_free)
        cj->src.arg_free(cj->src.arg);
    free(cj);
}

/* store_idem_answer's render: the batch is the answer (arg: the job). */
static int render_batch(void *arg, const void *obj)
{
    struct api_job *job = arg;
    buf_reset(&job->out);
    int rc = api_batch_json(&job->out, obj);
    if (rc) {
        api_job_internal(job, rc, "render batch");
        return rc;
    }
    job->status = 200;
    return 0;
}

/* The create sequence's render (arg: a create_job): the route's own, else render_batch. */
static int render_created(void *arg, const void *obj)
{
    struct create_job *cj = arg;
    struct api_job *job = &cj->job;
    if (!cj->src.render)
        return render_batch(job, obj);
    buf_reset(&job->out);
    int rc = cj->src.render(&job->out, obj, cj->src.arg);
    if (rc) {
        api_job_internal(job, rc, "render batch");
        return rc;
    }
    job->status = 200;
    return 0;
}

struct commit_call {
    struct upload *up;
    struct blob_store *bs;
    const char *key;
    int rc;
};

static void commit_call(void *ctx)
{
    struct commit_call *c = ctx;
    c->rc = upload_commit(c->up, c->bs, c->key);
}

/* Make the body of POST /v1/jobs durable in the file store as a new file
 * row's bytes (sf; its storage_path is the key), holding no connection
 * meanwhile (*stp may be another one afterwards). 0 or an error. */
static int store_body(struct create_job *cj, struct store **stp, struct store_file *sf)
{
    struct batch_in *bi = cj->bi;
    memset(sf, 0, sizeof *sf);
    int rc = id_new("file-", sf->id, sizeof sf->id);
    if (rc)
        return rc;
    snprintf(sf->tenant_id, sizeof sf->tenant_id, "%s", cj->job.tenant);
    snprintf(sf->purpose, sizeof sf->purpose, "batch");
    snprintf(sf->filename, sizeof sf->filename, "%s", bi->filename);
    sf->bytes = (int64_t)upload_bytes(bi->up);
    snprintf(sf->sha256, sizeof sf->sha256, "%s", upload_sha256_hex(bi->up));
    store_path_upload_rel(sf->id, sf->storage_path);
    snprintf(sf->encoding, sizeof sf->encoding, "zstd");
    sf->created_at = clock_wall_s();
    if (cj->job.api->cfg.file_retention_s)
        sf->expires_at = sf->created_at + cj->job.api->cfg.file_retention_s;
    struct commit_call cc = {bi->up, store_blobs(*stp), sf->storage_path, 0};
    *stp = api_job_unlocked(&cj->job, *stp, commit_call, &cc);
    return cc.rc;
}

/* The create sequence (see the file comment); the answer is set on every
 * path. POST /v1/jobs is the one whose batch_in carries an upload. */
static void submit(struct create_job *cj, struct store *st)
{
    struct api_job *job = &cj->job;
    struct batch_in *bi = cj->bi;
    int jobs = bi->up != NULL;
    const char *what = jobs ? "create job" : "create batch";
    if (api_idem_begin(job, st))
        return;
    struct store_file sf;
    struct blob_store *bs = store_blobs(st); /* st may change below; bs does not */
    int rc;
    if (jobs) {
        if ((rc = store_body(cj, &st, &sf))) {
            api_idem_release(job, st);
            api_job_internal(job, rc, "store upload");
            return;
        }
        snprintf(bi->input_file_id, sizeof bi->input_file_id, "%s", sf.id);
    }
    struct api_admit adm;
    int prepared = 0;
    rc = api_admit_prepare(job, &st, jobs ? sf.storage_path : NULL, bi->input_file_id, bi->endpoint, &adm);
    if (rc) {
        what = jobs ? what : "budget estimate";
    } else {
        prepared = 1;
        struct store_submit s = {
            .tenant_id = job->tenant,
            .file = jobs ? &sf : NULL,
            .batch = {bi->endpoint, bi->input_file_id, bi->window_s, bi->metadata,
                      bi->out_expires_s ? bi->out_expires_s : job->api->cfg.file_retention_s, bi->api},
            .now = clock_wall_s(),
            .admit = api_admit_check,
            .admit_arg = &adm,
            .idem = api_idem_answer(job, render_created, cj),
        };
        api_admit_reservation(&adm, &s);
        if (!(rc = store_batch_submit(st, &s, cj->batch_id)))
            return;
    }
    if (jobs && blob_delete(bs, sf.storage_path))
        log_warn("%s: the unused upload %s is left for the orphan sweep", what, sf.storage_path);
    cj->batch_id[0] = '\0';
    api_idem_release(job, st);
    if (job->status && job->status != 200)
        return; /* answered already: refused (429), or admission's / rendering's error */
    if (prepared && rc == ERR_NOTFOUND)
        api_job_error(job, API_ERR_NOT_FOUND, "input_file_id", "No such File object: '%s'.", bi->input_file_id);
    else if (prepared && rc == ERR_INVAL)
        api_job_error(job, API_ERR_INVALID_VALUE, "input_file_id",
                      "File '%s' cannot be a batch input: its purpose must be 'batch'.", bi->input_file_id);
    else
        api_job_internal(job, rc, what);
}

/* api_create_job_new's run: the lines into a new input file, then submit. */
static void create_src_run(struct create_job *cj, struct store *st)
{
    struct api_job *job = &cj->job;
    struct batch_in *bi = cj->bi;
    const struct api_config *cfg = &job->api->cfg;
    int rc = upload_new(job->api->tmp_dir, UPLOAD_IDENTITY, cfg->limits.max_file_bytes, cfg->zstd_level, &bi->up);
    if (rc) {
        api_job_internal(job, rc, "input file");
        return;
    }
    if (cj->src.lines(job, bi->up, cj->src.arg))
        return; /* answered */
    if ((rc = upload_finish(bi->up))) {
        api_job_internal(job, rc, "input file");
        return;
    }
    submit(cj, st);
}

static void create_run(struct api_job *job, struct store *st)
{
    struct create_job *cj = (struct create_job *)job;
    if (cj->src.lines)
        create_src_run(cj, st);
    else
        submit(cj, st);
}

/* The answer, then the new batch goes to the ingest thread. */
static int create_answer(struct http_req *req, struct api_job *job)
{
    struct create_job *cj = (struct create_job *)job;
    struct api *api = job->api;
    api_job_answer(req, job);
    if (cj->batch_id[0] && api->iq && ingestq_push(api->iq, cj->batch_id))
        log_warn("batch %s not queued for ingest (shutting down); it resumes on the next start", cj->batch_id);
    return 0;
}

/* A create job for req over bi (owned when owns_bi; else freed on failure by its owner). NULL on no memory. */
static struct create_job *create_new(struct http_req *req, struct batch_in *bi, int owns_bi)
{
    struct create_job *cj = calloc(1, sizeof *cj);
    if (!cj)
        return NULL;
    api_job_init_req(&cj->job, req, create_run, create_free);
    cj->job.answer = create_answer;
    cj->bi = bi;
    cj->owns_bi = owns_bi;
    return cj;
}

struct api_job *api_create_job_new(struct http_req *req, const struct api_create_src *src)
{
    struct batch_in *bi = calloc(1, sizeof *bi);
    struct create_job *cj = bi ? create_new(req, bi, 1) : NULL;
    if (!cj) {
        free(bi);
        if (src->arg_free)
            src->arg_free(src->arg);
        return NULL;
    }
    cj->src = *src;
    snprintf(bi->endpoint, sizeof bi->endpoint, "/v1/chat/completions");
    snprintf(bi->filename, sizeof bi->filename, "%s", src->filename);
    bi->window_s = src->window_s > 0 ? src->window_s : 86400;
    bi->api = src->api;
    return &cj->job;
}

/* ---- POST /v1/batches -------------------------------------------------------------------- */

/* Read options shared by both creation routes from a JSON object. Answers
 * 400 and returns -1 on a bad value. */
static int parse_metadata(struct http_req *req, json_t *md, struct batch_in *bi)
{
    if (!md || json_is_null(md))
        return 0;
    char msg[200];
    if (api_metadata_check(md, msg, sizeof msg)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "metadata", "%s", msg);
        return -1;
    }
    bi->metadata = json_dumps(md, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!bi->metadata) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return -1;
    }
    return 0;
}

static int parse_window(struct http_req *req, const char *w, struct batch_in *bi)
{
    if (!w) {
        bi->window_s = 86400;
        return 0;
    }
    struct api_rctx *rc = http_req_data(req);
    if (api_window_parse(w, rc->api->cfg.window_min_s, &bi->window_s)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "completion_window",
                           "Invalid completion_window '%s': use a duration from 1h to 7d, "
                           "e.g. \"24h\" (the default), \"1h\" or \"7d\".", w);
        return -1;
    }
    return 0;
}

/* output_expires_after (JSON; null or absent: jobd's default). Answers 400, returns -1 on a bad value. */
static int parse_out_expiry(struct http_req *req, json_t *v, struct batch_in *bi)
{
    if (!v || json_is_null(v))
        return 0;
    struct api_rctx *rc = http_req_data(req);
    enum api_err e;
    char msg[256], param[64];
    if (api_expiry_parse_json(v, "output_expires_after", rc->api->cfg.expiry_min_s, &bi->out_expires_s, &e, msg,
                              sizeof msg, param)) {
        api_respond_error(req, e, param, "%s", msg);
        return -1;
    }
    return 0;
}

/* The body of POST /v1/batches (and /v1/batches/estimate) into a new
 * batch_in; NULL when answered (400, 415, 500). */
static struct batch_in *parse_create_body(struct http_req *req)
{
    const char *ct = http_req_header(req, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16) != 0) {
        api_respond_error(req, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "Send the request body as application/json.");
        return NULL;
    }
    size_t len;
    const char *body = http_req_body(req, &len);
    json_t *root = NULL;
    struct js_error je;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    if (js_parse(body, len, &lim, &root, &je) || !json_is_object(root)) {
        json_decref(root);
        api_respond_error(req, API_ERR_INVALID_JSON, NULL,
                           "We could not parse the JSON body of your request (expected an object).");
        return NULL;
    }
    struct batch_in *bi = calloc(1, sizeof *bi);
    const char *fid = NULL, *ep = NULL, *win = NULL;
    int r;
    if (!bi) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        goto fail;
    }
    if ((r = js_get_str(root, "input_file_id", &fid)) || !*fid || strlen(fid) >= ID_MAX) {
        api_respond_error(req, r == ERR_NOTFOUND ? API_ERR_MISSING_PARAMETER : API_ERR_INVALID_VALUE,
                           "input_file_id", r == ERR_NOTFOUND ? "Missing required parameter: 'input_file_id'."
                                                              : "Invalid 'input_file_id': expected a file id.");
        goto fail;
    }
    if ((r = js_get_str(root, "endpoint", &ep)) || !endpoint_ok(ep)) {
        api_respond_error(req, r == ERR_NOTFOUND ? API_ERR_MISSING_PARAMETER : API_ERR_INVALID_VALUE,
                           "endpoint", r == ERR_NOTFOUND ? "Missing required parameter: 'endpoint'."
                                                         : "Invalid 'endpoint': jobd supports "
                                                           "'/v1/chat/completions', '/v1/completions', "
                                                           "'/v1/embeddings' and '/v1/responses'.");
        goto fail;
    }
    if ((r = js_get_str(root, "completion_window", &win)) && r != ERR_NOTFOUND) {
        api_respond_error(req, API_ERR_INVALID_TYPE, "completion_window",
                           "completion_window must be a string such as \"24h\".");
        goto fail;
    }
    if (parse_window(req, r ? NULL : win, bi) || parse_metadata(req, json_object_get(root, "metadata"), bi) ||
        parse_out_expiry(req, json_object_get(root, "output_expires_after"), bi))
        goto fail;
    snprintf(bi->endpoint, sizeof bi->endpoint, "%s", ep);
    snprintf(bi->input_file_id, sizeof bi->input_file_id, "%s", fid);
    json_decref(root);
    return bi;
fail:
    batch_in_free(bi);
    json_decref(root);
    return NULL;
}

static void batches_create(struct http_req *req, void *arg)
{
    struct batch_in *bi = parse_create_body(req);
    if (!bi)
        return;
    size_t len;
    const char *body = http_req_body(req, &len);
    struct create_job *cj = create_new(req, bi, 1);
    if (cj) {
        bi = NULL;
        store_idem_fingerprint("POST", "/v1/batches", body, len, cj->job.fp);
    }
    api_job_run(req, cj ? &cj->job : NULL);
    batch_in_free(bi);
}

/* The batch JSON with the "waiting_for_model" extension (served: the model
 * names live workers serve, looked up once per request; a failed lookup
 * just leaves the field out). */
struct served {
    int looked_up, ok;
    struct store_model_served *items;
    size_t n;
};

static int batch_json_served(struct api_job *job, struct store *st, struct buf *out,
                             const struct store_batch *b, struct served *sv)
{
    if (b->status == STORE_BATCH_IN_PROGRESS && !sv->looked_up) {
        sv->looked_up = 1;
        sv->ok = lease_models_served(st, &job->api->cfg.lease, lease_clock_s(), &sv->items, &sv->n) == 0;
    }
    if (b->status != STORE_BATCH_IN_PROGRESS || !sv->ok)
        return api_batch_json(out, b);
    return api_batch_json_ext(out, b, sv->items, sv->n);
}

/* ---- GET /v1/batches/{id}, POST /v1/batches/{id}/cancel ------------------------------------------- */

#define BATCH_WAIT_MAX_S 30    /* the longest Prefer: wait a GET is held (under clients' 30-60 s timeouts) */
#define BATCH_WAIT_STEP_MS 200 /* a held GET re-reads the batch this often */

struct batch_job {
    struct api_job job;
    char id[ID_MAX];
    int64_t eta;             /* GET: estimated completion (unix s), 0 = none */
    int wait_s;              /* GET: the Prefer: wait honored (1..BATCH_WAIT_MAX_S), 0 = none */
    uint64_t wait_until_ms;  /* GET: hold a 304 until then (clock_mono_ms) */
};

static void batch_job_free(struct api_job *job)
{
    free(job);
}

static void batch_not_found(struct batch_job *bj)
{
    api_job_error(&bj->job, API_ERR_NOT_FOUND, "batch_id", "No such Batch object: '%s'.", bj->id);
}

static void batches_get_run(struct api_job *job, struct store *st)
{
    struct batch_job *bj = (struct batch_job *)job;
    struct store_batch b;
    int rc = store_batch_get(st, job->tenant, bj->id, &b);
    if (rc == ERR_NOTFOUND) {
        batch_not_found(bj);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get batch");
        return;
    }
    struct served sv = {0};
    rc = batch_json_served(job, st, &job->out, &b, &sv);
    free(sv.items);
    /* the deadline extension: when it will end at the current throughput */
    if (!rc && lease_batch_eta(st, &job->api->cfg.lease, &b, lease_clock_s(), &bj->eta) == 0 && job->out.len &&
        job->out.data[job->out.len - 1] == '}') {
        job->out.data[--job->out.len] = '\0'; /* reopen the object */
        rc = buf_printf(&job->out, ",\"estimated_completion_at\":%lld,\"deadline_at_risk\":%s}",
                        (long long)bj->eta, bj->eta > b.expires_at ? "true" : "false");
    } else {
        bj->eta = 0;
    }
    /* its share of the fleet's worker time, next to its token cost */
    if (!rc && job->out.len && job->out.data[job->out.len - 1] == '}') {
        job->out.data[--job->out.len] = '\0';
        if (!(rc = api_fleet_batch(job->api, st, b.id, &job->out)))
            rc = buf_append_byte(&job->out, '}');
    }
    job->retry_after = retry_hint(b.status);
    store_batch_release(&b);
    if (rc) {
        api_job_internal(job, rc, "render batch");
        return;
    }
    job->status = 200; /* the runner adds the ETag (answer_sends_out) */
}

/* A job on the batch named by the {id} parameter; NULL when answered (404, 500). */
static struct batch_job *batch_job_new(struct http_req *req, api_job_fn run)
{
    const char *id = http_req_param(req, "id");
    struct batch_job *bj = calloc(1, sizeof *bj);
    if (bj && (!id || strlen(id) >= sizeof bj->id)) {
        free(bj);
        api_respond_error(req, API_ERR_NOT_FOUND, "batch_id", "No such Batch object.");
        return NULL;
    }
    if (!bj) {
        api_job_run(req, NULL);
        return NULL;
    }
    api_job_init_req(&bj->job, req, run, batch_job_free);
    snprintf(bj->id, sizeof bj->id, "%s", id);
    return bj;
}

/* The seconds of a "wait=N" preference in a Prefer header (RFC 7240:
 * comma-separated preferences, each maybe with ";" parameters), capped at
 * BATCH_WAIT_MAX_S; 0 when there is none or N is not a positive integer. */
static int prefer_wait_s(const char *v)
{
    while (v && *v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        if (!strncasecmp(v, "wait", 4)) {
            const char *p = v + 4;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == '=') {
                p++;
                while (*p == ' ' || *p == '\t')
                    p++;
                if (*p == '"')
                    p++;
                long n = 0;
                int digits = 0;
                for (; *p >= '0' && *p <= '9' && n <= BATCH_WAIT_MAX_S; p++, digits++)
                    n = n * 10 + (*p - '0');
                if (digits && n > 0)
                    return n > BATCH_WAIT_MAX_S ? BATCH_WAIT_MAX_S : (int)n;
                return 0;
            }
        }
        v = strchr(v, ',');
    }
    return 0;
}

/* The default answer plus X-Estimated-Completion while an estimate exists.
 * A long poll (wait_until_ms) holds a 304: the batch is read again in
 * BATCH_WAIT_STEP_MS (the ETag computed afresh) until it changed, the wait
 * passed or jobd drains. */
static int batches_get_answer(struct http_req *req, struct api_job *job)
{
    struct batch_job *bj = (struct batch_job *)job;
    if (job->status == 304 && bj->wait_until_ms && !job->api->draining) {
        uint64_t now = clock_mono_ms();
        if (now + 10 < bj->wait_until_ms) {
            uint64_t step = bj->wait_until_ms - now;
            if (step > BATCH_WAIT_STEP_MS)
                step = BATCH_WAIT_STEP_MS;
            job->etag[0] = '\0';
            if (api_job_again(req, job, step))
                return 1;
        }
    }
    if (bj->wait_s && !job->api->draining && (job->status == 200 || job->status == 304)) {
        char v[32];
        snprintf(v, sizeof v, "wait=%d", bj->wait_s);
        http_resp_header(req, "Preference-Applied", v);
    }
    if (bj->eta > 0 && (job->status == 200 || job->status == 304)) {
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)bj->eta);
        http_resp_header(req, "X-Estimated-Completion", v);
    }
    api_job_answer(req, job);
    return 0;
}

static void batches_get(struct http_req *req, void *arg)
{
    struct batch_job *bj = batch_job_new(req, batches_get_run);
    if (!bj)
        return;
    bj->job.answer = batches_get_answer;
    bj->job.answer_sends_out = 1;
    if (http_req_header(req, "If-None-Match") && (bj->wait_s = prefer_wait_s(http_req_header(req, "Prefer"))))
        bj->wait_until_ms = clock_mono_ms() + (uint64_t)bj->wait_s * 1000;
    api_job_run(req, &bj->job);
}

/* ---- GET /v1/batches ------------------------------------------------------------------------ */

struct list_job {
    struct api_job job;
    char after[ID_MAX]; /* "" = from the start */
    int limit;
    const char *status; /* NULL = any; else a static status name */
};

static void list_job_free(struct api_job *job)
{
    free(job);
}

static void batches_list_run(struct api_job *job, struct store *st)
{
    struct list_job *lj = (struct list_job *)job;
    struct store_batch *items = NULL;
    size_t n = 0;
    int has_more = 0;
    int rc = store_batch_list_status(st, job->tenant, lj->status, lj->after[0] ? lj->after : NULL, lj->limit,
                                     &items, &n, &has_more);
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_INVALID_VALUE, "after", "No batch '%s' to list after.", lj->after);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "list batches");
        return;
    }
    struct buf *b = &job->out;
    struct served sv = {0};
    buf_append_str(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n && !rc; i++) {
        if (i)
            buf_append_byte(b, ',');
        rc = batch_json_served(job, st, b, &items[i], &sv);
    }
    free(sv.items);
    if (!rc)
        rc = buf_printf(b, "],\"first_id\":%s%s%s,\"last_id\":%s%s%s,\"has_more\":%s}", n ? "\"" : "",
                        n ? items[0].id : "null", n ? "\"" : "", n ? "\"" : "",
                        n ? items[n - 1].id : "null", n ? "\"" : "", has_more ? "true" : "false");
    store_batch_list_free(items, n);
    if (rc)
        api_job_internal(job, rc, "list batches");
    else
        job->status = 200;
}

static void batches_list(struct http_req *req, void *arg)
{
    int64_t limit;
    if (api_query_int(req, "limit", 1, 100, 20, &limit)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "limit", "limit must be an integer from 1 to 100.");
        return;
    }
    const char *after = http_req_query(req, "after");
    if (after && strlen(after) >= ID_MAX) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "after", "Invalid 'after'.");
        return;
    }
    const char *status = http_req_query(req, "status"), *st_name = NULL; /* st_name: static */
    enum store_batch_status sv;
    if (status && store_batch_status_parse(status, &sv) == 0)
        st_name = store_batch_status_name(sv);
    if (status && !st_name) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "status",
                          "status must be one of validating, failed, in_progress, finalizing, completed, "
                          "expired, cancelling, cancelled.");
        return;
    }
    struct list_job *lj = calloc(1, sizeof *lj);
    if (lj) {
        api_job_init_req(&lj->job, req, batches_list_run, list_job_free);
        lj->limit = (int)limit;
        lj->status = st_name;
        if (after && *after)
            snprintf(lj->after, sizeof lj->after, "%s", after);
    }
    api_job_run(req, lj ? &lj->job : NULL);
}

/* ---- POST /v1/batches/{id}/cancel ----------------------------------------------------------- */

static void batches_cancel_run(struct api_job *job, struct store *st)
{
    struct batch_job *bj = (struct batch_job *)job;
    if (api_idem_begin(job, st))
        return;
    struct store_idem_answer ans = api_idem_answer(job, render_batch, job);
    int rc = store_batch_cancel_keyed(st, job->tenant, bj->id, clock_wall_s(), &ans);
    if (!rc) {
        job->wake_sweeper = 1; /* it ends queued requests and finishes the batch */
        return;
    }
    api_idem_release(job, st);
    if (rc == ERR_NOTFOUND) {
        batch_not_found(bj);
    } else if (rc == ERR_BADSTATE) {
        const char *s = "?";
        struct store_batch b;
        if (store_batch_get(st, job->tenant, bj->id, &b) == 0) {
            s = store_batch_status_name(b.status);
            store_batch_release(&b);
        }
        api_job_error(job, API_ERR_INVALID_STATE, NULL, "Cannot cancel a batch with status '%s'.", s);
    } else {
        api_job_internal(job, rc, "cancel batch");
    }
}

static void batches_cancel(struct http_req *req, void *arg)
{
    struct batch_job *bj = batch_job_new(req, batches_cancel_run);
    if (!bj)
        return;
    size_t len;
    const char *body = http_req_body(req, &len);
    store_idem_fingerprint("POST", http_req_path(req), body, len, bj->job.fp);
    api_job_run(req, &bj->job);
}

/* ---- POST /v1/batches/{id}/rerun ------------------------------------------------------------- */

static const char *const rerun_only_names[] = {"failed", "failed_and_expired", "all"};

static int is_terminal(enum store_batch_status s)
{
    return s == STORE_BATCH_COMPLETED || s == STORE_BATCH_FAILED || s == STORE_BATCH_EXPIRED ||
           s == STORE_BATCH_CANCELLED;
}

/* store_request_scan_rerun's callback: the original input line, rebuilt. */
static int rerun_line(void *ctx, const struct store_rerun_row *row)
{
    struct create_job *cj = ctx;
    struct buf b;
    buf_init(&b, (size_t)row->body_len + strlen(row->custom_id) * 6 + 128);
    int rc = buf_append_str(&b, "{\"custom_id\":");
    if (!rc)
        rc = js_escape(&b, row->custom_id, strlen(row->custom_id));
    if (!rc)
        rc = buf_printf(&b, ",\"method\":\"POST\",\"url\":\"%s\",\"body\":", cj->bi->endpoint);
    if (!rc)
        rc = buf_append(&b, row->body, row->body_len);
    if (!rc)
        rc = buf_append_str(&b, "}\n");
    if (!rc)
        rc = upload_write(cj->bi->up, b.data, b.len);
    buf_release(&b);
    return rc;
}

/* The new batch's metadata: the original's (or the request's), plus
 * rerun_of. 0, or -1 with the job answered (400 / 500). */
static int rerun_metadata(struct api_job *job, struct batch_in *bi, const char *orig)
{
    const char *base = bi->metadata_given ? bi->metadata : orig;
    json_t *md = base ? json_loads(base, 0, NULL) : json_object();
    if (!json_is_object(md)) {
        json_decref(md);
        api_job_internal(job, ERR_CORRUPT, "rerun metadata");
        return -1;
    }
    json_object_set_new(md, "rerun_of", json_string(bi->rerun_of));
    char msg[200];
    if (api_metadata_check(md, msg, sizeof msg)) {
        json_decref(md);
        api_job_error(job, API_ERR_INVALID_VALUE, "metadata",
                      "The rerun's metadata (the original batch's plus \"rerun_of\") is invalid: %s Pass "
                      "\"metadata\" in the request to replace the original's.", msg);
        return -1;
    }
    free(bi->metadata);
    bi->metadata = json_dumps(md, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(md);
    if (!bi->metadata) {
        api_job_internal(job, ERR_NOMEM, "rerun metadata");
        return -1;
    }
    return 0;
}

/* Check the original, write the selected lines into a new input file,
 * then the create sequence of POST /v1/jobs (submit) with that file. */
static void rerun_run(struct api_job *job, struct store *st)
{
    struct create_job *cj = (struct create_job *)job;
    struct batch_in *bi = cj->bi;
    struct store_batch b;
    int rc = store_batch_get(st, job->tenant, bi->rerun_of, &b);
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_NOT_FOUND, "batch_id", "No such Batch object: '%s'.", bi->rerun_of);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get batch");
        return;
    }
    if (!is_terminal(b.status)) {
        api_job_error(job, API_ERR_BATCH_NOT_FINISHED, "batch_id",
                      "Batch '%s' is still %s: a rerun takes the lines of a batch that has ended "
                      "(completed, failed, expired or cancelled). Wait for it (or cancel it), then rerun.",
                      b.id, store_batch_status_name(b.status));
        job->retry_after = retry_hint(b.status);
        store_batch_release(&b);
        return;
    }
    snprintf(bi->endpoint, sizeof bi->endpoint, "%s", b.endpoint);
    if (!bi->window_given)
        bi->window_s = b.completion_window_s;
    if (!bi->out_expires_s)
        bi->out_expires_s = b.output_expires_after_s;
    rc = rerun_metadata(job, bi, b.metadata);
    store_batch_release(&b);
    if (rc)
        return;
    const struct api_config *cfg = &job->api->cfg;
    if ((rc = upload_new(job->api->tmp_dir, UPLOAD_IDENTITY, cfg->limits.max_file_bytes, cfg->zstd_level, &bi->up))) {
        api_job_internal(job, rc, "rerun file");
        return;
    }
    int64_t n = 0;
    rc = store_request_scan_rerun(st, bi->rerun_of, bi->only, rerun_line, cj, &n);
    if (!rc && n == 0) {
        api_job_error(job, API_ERR_INVALID_VALUE, "only",
                      "Batch '%s' has no requests to rerun with only=\"%s\"%s.", bi->rerun_of,
                      rerun_only_names[bi->only],
                      bi->only == STORE_RERUN_FAILED ? " (none failed; \"failed_and_expired\" also takes "
                                                       "requests that expired or were cancelled)" : "");
        return;
    }
    if (!rc)
        rc = upload_finish(bi->up);
    if (rc) {
        api_job_internal(job, rc, "rerun file");
        return;
    }
    snprintf(bi->filename, sizeof bi->filename, "rerun-%s.jsonl", bi->rerun_of);
    submit(cj, st);
}

static void batches_rerun(struct http_req *req, void *arg)
{
    const char *id = http_req_param(req, "id");
    if (!id || strlen(id) >= ID_MAX) {
        api_respond_error(req, API_ERR_NOT_FOUND, "batch_id", "No such Batch object.");
        return;
    }
    size_t len;
    const char *body = http_req_body(req, &len);
    json_t *root = NULL;
    struct batch_in *bi = calloc(1, sizeof *bi);
    if (!bi) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    if (len) {
        const char *ct = http_req_header(req, "Content-Type");
        struct js_limits lim = JS_LIMITS_DEFAULT;
        if (ct && strncasecmp(ct, "application/json", 16) != 0) {
            api_respond_error(req, API_ERR_UNSUPPORTED_MEDIA_TYPE, NULL, "Send the request body as application/json.");
            goto out;
        }
        if (js_parse(body, len, &lim, &root, NULL) || !json_is_object(root)) {
            api_respond_error(req, API_ERR_INVALID_JSON, NULL,
                              "We could not parse the JSON body of your request (expected an object).");
            goto out;
        }
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "only") && strcmp(key, "completion_window") && strcmp(key, "metadata") &&
            strcmp(key, "output_expires_after")) {
            api_respond_error(req, API_ERR_UNKNOWN_PARAMETER, key,
                              "Unknown parameter '%.64s': a rerun takes 'only', 'completion_window', "
                              "'metadata' and 'output_expires_after'.", key);
            goto out;
        }
    }
    v = root ? json_object_get(root, "only") : NULL;
    bi->only = STORE_RERUN_FAILED;
    if (v) {
        const char *o = json_string_value(v);
        int found = 0;
        for (int i = 0; o && i < 3; i++)
            if (!strcmp(o, rerun_only_names[i])) {
                bi->only = (enum store_rerun_only)i;
                found = 1;
            }
        if (!found) {
            api_respond_error(req, API_ERR_INVALID_VALUE, "only",
                              "Invalid 'only': use \"failed\" (the default), \"failed_and_expired\" or \"all\".");
            goto out;
        }
    }
    v = root ? json_object_get(root, "completion_window") : NULL;
    if (v) {
        if (!json_is_string(v)) {
            api_respond_error(req, API_ERR_INVALID_TYPE, "completion_window",
                              "completion_window must be a string such as \"24h\".");
            goto out;
        }
        if (parse_window(req, json_string_value(v), bi))
            goto out;
        bi->window_given = 1;
    }
    v = root ? json_object_get(root, "metadata") : NULL;
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) {
            api_respond_error(req, API_ERR_INVALID_TYPE, "metadata", "metadata must be an object of strings.");
            goto out;
        }
        if (parse_metadata(req, v, bi))
            goto out;
        bi->metadata_given = 1;
    }
    if (parse_out_expiry(req, root ? json_object_get(root, "output_expires_after") : NULL, bi))
        goto out;
    snprintf(bi->rerun_of, sizeof bi->rerun_of, "%s", id);
    struct create_job *cj = calloc(1, sizeof *cj);
    if (cj) {
        api_job_init_req(&cj->job, req, rerun_run, create_free);
        cj->job.answer = create_answer;
        cj->bi = bi;
        cj->owns_bi = 1;
        bi = NULL;
        store_idem_fingerprint("POST", http_req_path(req), body, len, cj->job.fp);
    }
    api_job_run(req, cj ? &cj->job : NULL);
out:
    batch_in_free(bi);
    json_decref(root);
}

/* ---- POST /v1/batches/estimate ---------------------------------------------------------------- */

#define ESTIMATE_MAX_MODELS 64 /* per-model rows; further models are summed into the totals only */

struct est_model {
    char model[STORE_MODEL_MAX + 1];
    int64_t requests, input_tokens, max_output_tokens;
    int64_t exact;          /* requests counted with the model's tokenizer */
    int64_t refused;        /* requests the model's tokenizer/prompt code refused (estimated instead) */
    char refusal[200];      /* the first refusal's message */
};

struct estimate_job {
    struct api_job job;
    struct batch_in *bi;
    struct blob_store *bs;
    char key[STORE_REL_PATH_MAX]; /* the input file's storage_path */
    int scan_rc;
    int64_t n_lines;
    /* the scan's sums */
    struct est_model m[ESTIMATE_MAX_MODELS];
    size_t nm;
    int64_t requests, input_tokens, max_output_tokens, exact, other_models;
};

static void estimate_free(struct api_job *job)
{
    struct estimate_job *ej = (struct estimate_job *)job;
    batch_in_free(ej->bi);
    free(ej);
}

/* ingest_scan_file's callback: one valid line (the ones ingest would store). */
static void estimate_line(void *ctx, const struct ingest_line *l)
{
    struct estimate_job *ej = ctx;
    struct est_model *m = NULL;
    for (size_t i = 0; i < ej->nm && !m; i++)
        if (!strcmp(ej->m[i].model, l->model))
            m = &ej->m[i];
    if (!m && ej->nm < ESTIMATE_MAX_MODELS) {
        m = &ej->m[ej->nm++];
        snprintf(m->model, sizeof m->model, "%s", l->model);
    }
    int64_t in = l->prompt_tokens_est, n = 0;
    char err[200] = "";
    int rc = tokens_count(ej->job.api->cfg.tokens, l->model, ej->bi->endpoint, l->body, &n, err,
                          sizeof err);
    if (rc == 0) {
        in = n;
        ej->exact++;
    }
    ej->requests++;
    ej->input_tokens += in;
    ej->max_output_tokens += l->max_tokens;
    if (!m) {
        ej->other_models++;
        return;
    }
    m->requests++;
    m->input_tokens += in;
    m->max_output_tokens += l->max_tokens;
    if (rc == 0)
        m->exact++;
    else if (rc != ERR_NOTFOUND && !m->refused++)
        snprintf(m->refusal, sizeof m->refusal, "%s", err);
}

static void estimate_scan(void *ctx)
{
    struct estimate_job *ej = ctx;
    ej->scan_rc = ingest_scan_file(ej->bs, ej->key, ej->bi->endpoint, &ej->job.api->cfg.limits, estimate_line, ej,
                                   &ej->n_lines);
}

static int64_t price_of(const struct usage_prices *p, const char *model, int64_t in, int64_t out, int *priced)
{
    const struct usage_price *pr = p ? usage_price_find(p, model) : NULL;
    int64_t c = 0;
    *priced = pr != NULL;
    if (pr && usage_cost_micros(pr, in, 0, out, &c))
        c = INT64_MAX;
    return c;
}

#define ESTIMATE_FLEET_WINDOW_S (7 * 86400) /* the fleet's throughput and cost are measured over this */

/* (a * b + c - 1) / c in 128 bits, saturated. */
static int64_t mul_div_up(int64_t a, int64_t b, int64_t c)
{
    unsigned __int128 x = ((unsigned __int128)(a > 0 ? a : 0) * (unsigned __int128)(b > 0 ? b : 0) +
                           (unsigned __int128)c - 1) / (unsigned __int128)c;
    return x > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)x;
}

/* The fleet hint of one model: what its tokens cost and take at the fleet's
 * measured rate (cost per computed token, computed tokens per worker-second)
 * over the last week; fleet_null when never measured. *cmin / *cmax get the
 * cost range (-1 when not measured). */
static int estimate_fleet(struct buf *b, const struct fleet_report *fr, const char *canonical, int64_t in,
                          int64_t out, int64_t workers, int64_t *cmin, int64_t *cmax)
{
    const struct fleet_bucket *x = NULL;
    for (size_t i = 0; fr && i < fr->n && !x; i++)
        if (!strcmp(fr->buckets[i].key, canonical))
            x = &fr->buckets[i];
    int64_t comp = x ? x->prompt_tokens - x->cached_tokens + x->completion_tokens : 0;
    *cmin = *cmax = -1;
    if (!x || comp <= 0 || x->worker_ms <= 0)
        return buf_append_str(b, ",\"fleet\":null");
    /* cost: tokens x cost / computed, rounded half up (min: no prompt cached, no output) */
    *cmin = (int64_t)(((unsigned __int128)in * (unsigned __int128)x->cost_micros * 2 + (unsigned __int128)comp) /
                      ((unsigned __int128)comp * 2));
    *cmax = (int64_t)(((unsigned __int128)(in + out) * (unsigned __int128)x->cost_micros * 2 + (unsigned __int128)comp) /
                      ((unsigned __int128)comp * 2));
    int64_t in1m = 0, out1m = 0;
    fleet_effective(x, &in1m, &out1m);
    int rc = buf_printf(b,
                        ",\"fleet\":{\"measured_over_s\":%d,\"micros_per_1m_computed_tokens\":%lld,"
                        "\"tokens_per_worker_second\":%.3f,\"cost\":{\"min_micros\":%lld,\"max_micros\":%lld},",
                        ESTIMATE_FLEET_WINDOW_S, (long long)out1m, (double)comp * 1000.0 / (double)x->worker_ms,
                        (long long)*cmin, (long long)*cmax);
    if (!rc && workers > 0)
        /* seconds: tokens / (tokens per worker-second x live workers), rounded up */
        rc = buf_printf(b, "\"seconds\":{\"min\":%lld,\"max\":%lld}}",
                        (long long)mul_div_up(in, x->worker_ms, comp * 1000 * workers),
                        (long long)mul_div_up(in + out, x->worker_ms, comp * 1000 * workers));
    else if (!rc)
        rc = buf_append_str(b, "\"seconds\":null}");
    return rc;
}

static void estimate_run(struct api_job *job, struct store *st)
{
    struct estimate_job *ej = (struct estimate_job *)job;
    struct batch_in *bi = ej->bi;
    struct store_file f;
    int rc = store_file_get(st, job->tenant, bi->input_file_id, &f);
    if (!rc && f.expires_at && f.expires_at <= clock_wall_s())
        rc = ERR_NOTFOUND;
    if (rc == ERR_NOTFOUND) {
        api_job_error(job, API_ERR_NOT_FOUND, "input_file_id", "No such File object: '%s'.", bi->input_file_id);
        return;
    }
    if (rc) {
        api_job_internal(job, rc, "get file");
        return;
    }
    if (strcmp(f.purpose, "batch")) {
        api_job_error(job, API_ERR_INVALID_VALUE, "input_file_id",
                      "File '%s' cannot be a batch input: its purpose must be 'batch'.", bi->input_file_id);
        return;
    }
    ej->bs = store_blobs(st);
    snprintf(ej->key, sizeof ej->key, "%s", f.storage_path);
    struct store_model_served *served = NULL;
    size_t n_served = 0;
    if ((rc = lease_models_served(st, &job->api->cfg.lease, lease_clock_s(), &served, &n_served))) {
        api_job_internal(job, rc, "models served");
        return;
    }
    struct fleet_report fr;
    int have_fleet = api_fleet_by_model(job->api, st, ESTIMATE_FLEET_WINDOW_S, &fr) == 0;
    st = api_job_unlocked(job, st, estimate_scan, ej); /* a long file scan holds no connection */
    (void)st;
    if (ej->scan_rc) {
        free(served);
        if (have_fleet)
            fleet_report_release(&fr);
        api_job_internal(job, ej->scan_rc, "scan input file");
        return;
    }
    const struct usage_prices *prices = job->api->cfg.prices;
    struct buf *b = &job->out;
    char win[32];
    api_window_format(bi->window_s, win, sizeof win);
    int64_t min_total = 0, max_total = 0, fmin_total = 0, fmax_total = 0;
    int all_priced = 1, all_measured = !ej->other_models;
    rc = buf_printf(b, "{\"object\":\"batch.estimate\",\"input_file_id\":\"%s\",\"endpoint\":\"%s\","
                       "\"completion_window\":\"%s\",\"lines\":%lld,\"request_counts\":{\"total\":%lld},"
                       "\"input_tokens\":%lld,\"input_tokens_exact\":%s,\"max_output_tokens\":%lld,\"models\":[",
                    bi->input_file_id, bi->endpoint, win, (long long)ej->n_lines, (long long)ej->requests,
                    (long long)ej->input_tokens, ej->exact == ej->requests ? "true" : "false",
                    (long long)ej->max_output_tokens);
    struct buf unknown, warn;
    buf_init(&unknown, 1u << 16);
    buf_init(&warn, 1u << 16);
    for (size_t i = 0; !rc && i < ej->nm; i++) {
        struct est_model *m = &ej->m[i];
        int64_t workers = 0;
        const char *canonical = m->model;
        for (size_t k = 0; k < n_served; k++)
            if (!strcmp(served[k].name, m->model)) {
                workers += served[k].n_workers;
                canonical = served[k].canonical;
            }
        int priced = 0;
        int64_t cmin = price_of(prices, m->model, m->input_tokens, 0, &priced);
        int64_t cmax = price_of(prices, m->model, m->input_tokens, m->max_output_tokens, &priced);
        all_priced &= priced;
        min_total = cmin == INT64_MAX || min_total == INT64_MAX ? INT64_MAX : min_total + cmin;
        max_total = cmax == INT64_MAX || max_total == INT64_MAX ? INT64_MAX : max_total + cmax;
        int has_tok = tokens_has(job->api->cfg.tokens, m->model);
        rc = buf_printf(b, "%s{\"model\":", i ? "," : "");
        if (!rc)
            rc = js_escape(b, m->model, strlen(m->model));
        if (!rc)
            rc = buf_printf(b, ",\"requests\":%lld,\"input_tokens\":%lld,\"input_tokens_exact\":%s,"
                               "\"tokenizer\":\"%s\",\"max_output_tokens\":%lld,\"workers\":%lld,\"priced\":%s,"
                               "\"cost\":{\"min_micros\":%lld,\"max_micros\":%lld}}",
                            (long long)m->requests, (long long)m->input_tokens,
                            m->exact == m->requests ? "true" : "false", has_tok ? "gguf" : "bytes/4",
                            (long long)m->max_output_tokens, (long long)workers, priced ? "true" : "false",
                            (long long)cmin, (long long)cmax);
        if (!rc && b->len && b->data[b->len - 1] == '}') { /* its fleet hint inside the model object */
            int64_t fmin, fmax;
            b->data[--b->len] = '\0';
            rc = estimate_fleet(b, have_fleet ? &fr : NULL, canonical, m->input_tokens, m->max_output_tokens, workers,
                                &fmin, &fmax);
            if (!rc)
                rc = buf_append_byte(b, '}');
            all_measured &= fmin >= 0;
            fmin_total = fmin < 0 || fmin_total == INT64_MAX ? fmin_total : fmin_total + fmin;
            fmax_total = fmax < 0 || fmax_total == INT64_MAX ? fmax_total : fmax_total + fmax;
        }
        if (!rc && !workers && !has_tok) {
            rc = buf_append_str(&unknown, unknown.len ? "," : "");
            if (!rc)
                rc = js_escape(&unknown, m->model, strlen(m->model));
        }
        char msg[512];
        msg[0] = '\0';
        if (!workers)
            snprintf(msg, sizeof msg, "no live worker serves model '%.128s': its %lld requests would wait, and "
                     "expire with the window if none comes", m->model, (long long)m->requests);
        if (!rc && msg[0]) {
            rc = buf_append_str(&warn, warn.len ? "," : "");
            if (!rc)
                rc = js_escape(&warn, msg, strlen(msg));
        }
        if (!rc && m->refused) {
            snprintf(msg, sizeof msg, "%lld requests for model '%.128s' would be refused by its worker: %.200s",
                     (long long)m->refused, m->model, m->refusal);
            rc = buf_append_str(&warn, warn.len ? "," : "");
            if (!rc)
                rc = js_escape(&warn, msg, strlen(msg));
        }
    }
    free(served);
    if (have_fleet)
        fleet_report_release(&fr);
    if (!rc)
        rc = buf_printf(b, "],\"fleet_cost\":{\"min_micros\":%lld,\"max_micros\":%lld,\"measured\":%s}",
                        (long long)fmin_total, (long long)fmax_total, all_measured ? "true" : "false");
    if (!rc)
        rc = buf_printf(b, ",\"cost\":{\"min_micros\":%lld,\"max_micros\":%lld,\"priced\":%s},"
                           "\"unknown_models\":[%s],\"warnings\":[%s]}",
                        (long long)min_total, (long long)max_total, all_priced && !ej->other_models ? "true" : "false",
                        unknown.data ? unknown.data : "", warn.data ? warn.data : "");
    buf_release(&unknown);
    buf_release(&warn);
    if (rc) {
        api_job_internal(job, rc, "render estimate");
        return;
    }
    job->status = 200;
}

static void batches_estimate(struct http_req *req, void *arg)
{
    struct batch_in *bi = parse_create_body(req);
    if (!bi)
        return;
    struct estimate_job *ej = calloc(1, sizeof *ej);
    if (!ej) {
        batch_in_free(bi);
        api_job_run(req, NULL);
        return;
    }
    api_job_init_req(&ej->job, req, estimate_run, estimate_free);
    ej->job.writes = 0;     /* no side effects: reads only */
    ej->job.idem_key[0] = '\0'; /* nothing to keep */
    ej->bi = bi;
    api_job_run(req, &ej->job);
}

/* ---- POST /v1/jobs ------------------------------------------------------------------------------ */

static int jobs_body(struct http_req *req, const char *data, size_t len, void *arg)
{
    struct batch_in *bi = arg;
    int rc = upload_write(bi->up, data, len);
    if (!rc)
        return 0;
    if (rc == ERR_TOOBIG)
        api_respond_error(req, API_ERR_FILE_TOO_LARGE, NULL,
                           "The JSONL body is larger than the limit of %llu bytes (decoded).",
                           (unsigned long long)((struct api_rctx *)http_req_data(req))->api->cfg.limits.max_file_bytes);
    else if (rc == ERR_CORRUPT)
        api_respond_error(req, API_ERR_INVALID_ENCODING, NULL,
                           "The request body is not valid data for its Content-Encoding.");
    else
        api_respond_error(req, api_err_of_rc(rc), NULL, "Could not store the body: %s.", err_msg(rc));
    return rc;
}

/* An option from the query string (first) or a header. */
static const char *opt(struct http_req *req, const char *q1, const char *q2, const char *header)
{
    const char *v = http_req_query(req, q1);
    if (!v && q2)
        v = http_req_query(req, q2);
    if (!v && header)
        v = http_req_header(req, header);
    return v;
}

/* metadata: ?metadata={"k":"v"} or Jobd-Metadata: {...}, and/or ?metadata[k]=v */
static int jobs_metadata(struct http_req *req, struct batch_in *bi)
{
    const char *text = opt(req, "metadata", NULL, "Jobd-Metadata");
    json_t *md = NULL;
    if (text) {
        struct js_limits lim = {16384, 4, 0};
        if (js_parse(text, strlen(text), &lim, &md, NULL) || !json_is_object(md)) {
            json_decref(md);
            api_respond_error(req, API_ERR_INVALID_VALUE, "metadata",
                               "metadata must be a JSON object of string values.");
            return -1;
        }
    }
    size_t nq = http_req_query_count(req);
    for (size_t i = 0; i < nq; i++) {
        const char *name, *value;
        if (http_req_query_at(req, i, &name, &value))
            continue;
        size_t nl = strlen(name);
        if (nl > 10 && strncmp(name, "metadata[", 9) == 0 && name[nl - 1] == ']') {
            if (!md && !(md = json_object())) {
                api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
                return -1;
            }
            char key[STORE_METADATA_MAX_KEY + 2];
            size_t kl = nl - 10;
            if (kl > STORE_METADATA_MAX_KEY)
                kl = STORE_METADATA_MAX_KEY + 1; /* caught by the check */
            memcpy(key, name + 9, kl);
            key[kl] = '\0';
            json_object_set_new(md, key, json_string(value));
        }
    }
    int rc = parse_metadata(req, md, bi);
    json_decref(md);
    return rc;
}

/* ?output_expires_after[seconds]=N (and optionally [anchor]=created_at) or Jobd-Output-Expires-After: N */
static int jobs_out_expiry(struct http_req *req, struct batch_in *bi)
{
    const char *sec = opt(req, "output_expires_after[seconds]", NULL, "Jobd-Output-Expires-After");
    const char *anchor = http_req_query(req, "output_expires_after[anchor]");
    if (!sec && !anchor)
        return 0;
    struct api_rctx *rc = http_req_data(req);
    char msg[256], *end = NULL;
    long long v = sec ? strtoll(sec, &end, 10) : 0;
    if (!sec || !*sec || *end) {
        api_respond_error(req, sec ? API_ERR_INVALID_TYPE : API_ERR_MISSING_PARAMETER, "output_expires_after.seconds",
                          "output_expires_after[seconds] must be an integer number of seconds.");
        return -1;
    }
    if (api_expiry_check(anchor, v, rc->api->cfg.expiry_min_s, msg, sizeof msg)) {
        api_respond_error(req, API_ERR_INVALID_VALUE,
                          anchor && strcmp(anchor, "created_at") ? "output_expires_after.anchor"
                                                                 : "output_expires_after.seconds", "%s", msg);
        return -1;
    }
    bi->out_expires_s = v;
    return 0;
}

static void jobs_head(struct http_req *req, void *arg)
{
    struct api *api = arg;
    struct api_rctx *rc = api_auth_tenant(req, api);
    if (!rc)
        return;
    enum upload_encoding enc;
    if (upload_encoding_parse(http_req_header(req, "Content-Encoding"), &enc)) {
        api_respond_error(req, API_ERR_UNSUPPORTED_ENCODING, NULL,
                           "Unsupported Content-Encoding: use identity, zstd or gzip.");
        return;
    }
    struct batch_in *bi = calloc(1, sizeof *bi);
    if (!bi) {
        api_respond_error(req, API_ERR_INTERNAL, NULL, "Out of memory.");
        return;
    }
    rc->route_data = bi;
    rc->route_free = batch_in_free;
    const char *ep = opt(req, "endpoint", NULL, "Jobd-Endpoint");
    if (!ep)
        ep = "/v1/chat/completions";
    if (!endpoint_ok(ep)) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "endpoint",
                           "Invalid endpoint '%s': jobd supports '/v1/chat/completions', "
                           "'/v1/completions', '/v1/embeddings' and '/v1/responses'.", ep);
        return;
    }
    snprintf(bi->endpoint, sizeof bi->endpoint, "%s", ep);
    if (parse_window(req, opt(req, "completion_window", "window", "Jobd-Completion-Window"), bi) ||
        jobs_metadata(req, bi) || jobs_out_expiry(req, bi))
        return;
    const char *fn = opt(req, "filename", NULL, "Jobd-Filename");
    if (fn && (strlen(fn) >= sizeof bi->filename || !ingest_utf8_valid(fn, strlen(fn)))) {
        api_respond_error(req, API_ERR_INVALID_VALUE, "filename",
                           "The filename must be valid UTF-8 of at most %zu bytes.", sizeof bi->filename - 1);
        return;
    }
    snprintf(bi->filename, sizeof bi->filename, "%s", fn && *fn ? fn : "jobs.jsonl");
    int r = upload_new(api->tmp_dir, enc, api->cfg.limits.max_file_bytes, api->cfg.zstd_level, &bi->up);
    if (r) {
        api_respond_error(req, api_err_of_rc(r), NULL, "Could not store the body: %s.", err_msg(r));
        return;
    }
    http_req_body_stream(req, api->cfg.max_upload_bytes, jobs_body, bi);
}

static void jobs_create(struct http_req *req, void *arg)
{
    struct api_rctx *rc = http_req_data(req);
    struct batch_in *bi = rc->route_data;
    int r = upload_finish(bi->up);
    if (r == ERR_CORRUPT) {
        api_respond_error(req, API_ERR_INVALID_ENCODING, NULL,
                           "The request body ends in the middle of a compressed stream.");
        return;
    }
    if (r) {
        api_respond_error(req, api_err_of_rc(r), NULL, "Could not store the body: %s.", err_msg(r));
        return;
    }
    char win[32];
    api_window_format(bi->window_s, win, sizeof win);
    struct create_job *cj = create_new(req, bi, 0); /* bi is the request's, which outlives the job */
    if (cj) {
        struct buf fp;
        buf_init(&fp, 4096);
        buf_printf(&fp, "%s\n%s\n%s\n%s\n%s", bi->endpoint, win, bi->metadata ? bi->metadata : "",
                   bi->filename, upload_sha256_hex(bi->up));
        if (bi->out_expires_s) /* only then: keys stored before the option existed still match */
            buf_printf(&fp, "\n%lld", (long long)bi->out_expires_s);
        r = store_idem_fingerprint("POST", "/v1/jobs", fp.data, fp.len, cj->job.fp);
        buf_release(&fp);
        if (r) {
            api_job_free(&cj->job);
            cj = NULL;
        }
    }
    api_job_run(req, cj ? &cj->job : NULL);
}

int routes_batches_add(struct api *api)
{
    struct http_server *s = api->srv;
    int rc;
    if ((rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches", batches_create, api_head_tenant,
                                                        api->cfg.max_json_bytes, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches", batches_list, api_head_tenant, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"GET", "/v1/batches/{id}", batches_get, api_head_tenant, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches/{id}/cancel", batches_cancel,
                                                        api_head_tenant, 0, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches/estimate", batches_estimate,
                                                        api_head_tenant, api->cfg.max_json_bytes, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/batches/{id}/rerun", batches_rerun,
                                                        api_head_tenant, api->cfg.max_json_bytes, api})) ||
        (rc = http_server_route(s, &(struct http_route){"POST", "/v1/jobs", jobs_create, jobs_head, 0, api})))
        return rc;
    return 0;
}
