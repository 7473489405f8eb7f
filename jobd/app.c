/*
 * app.c - the daemon's wiring: configuration, auth, the connection pool,
 * ops on the thread pool, startup and graceful shutdown (see app.h).
 */
#include "jobd/app.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/api/app_int.h"

void app_config_default(struct app_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = "127.0.0.1:8080";
    cfg->data_dir = "./data";
    cfg->store = STORE_OPTS_DEFAULT;
    http_config_default(&cfg->http);
    ingest_limits_default(&cfg->limits);
    cfg->max_upload_bytes = 512ull << 20;
    cfg->max_json_bytes = 1u << 20;
    cfg->db_threads = 4;
    cfg->zstd_level = 1;
    lease_opts_default(&cfg->lease);
    cfg->sweep_interval_ms = 2000;
    cfg->window_min_s = API_WINDOW_MIN_S;
    cfg->webhook = WEBHOOK_CONFIG_DEFAULT;
}

int app_parse_listen(const char *s, char *host, size_t cap, int *port)
{
    if (!s || !*s)
        return ERR_INVAL;
    const char *colon;
    size_t hlen;
    const char *h = s;
    if (*s == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return ERR_INVAL;
        h = s + 1;
        hlen = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return ERR_INVAL;
        hlen = (size_t)(colon - s);
    }
    if (hlen + 1 > cap)
        return ERR_INVAL;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 0 || p > 65535)
        return ERR_INVAL;
    if (hlen == 0) {
        snprintf(host, cap, "127.0.0.1");
    } else {
        memcpy(host, h, hlen);
        host[hlen] = '\0';
    }
    *port = (int)p;
    return 0;
}

int app_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return 1;
        if (IN6_IS_ADDR_V4MAPPED(&a6))
            return a6.s6_addr[12] == 127;
    }
    return 0;
}

/* ---- connection pool --------------------------------------------------------------- */

static int dbpool_open(struct dbpool *p, const struct app_config *cfg, size_t n)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->all = calloc(n, sizeof *p->all);
    p->idle = calloc(n, sizeof *p->idle);
    if (!p->all || !p->idle)
        return ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = store_open(cfg->data_dir, &cfg->store, &p->all[i]);
        if (rc)
            return rc;
        p->n++;
        p->idle[p->n_idle++] = p->all[i];
    }
    return 0;
}

static void dbpool_close(struct dbpool *p)
{
    for (size_t i = 0; i < p->n; i++)
        store_close(p->all[i]);
    free(p->all);
    free(p->idle);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    memset(p, 0, sizeof *p);
}

struct store *dbpool_get(struct dbpool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->n_idle == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    struct store *st = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->mu);
    return st;
}

void dbpool_put(struct dbpool *p, struct store *st)
{
    pthread_mutex_lock(&p->mu);
    p->idle[p->n_idle++] = st;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- auth ----------------------------------------------------------------------------- */

static void rctx_free(void *data)
{
    struct rctx *rc = data;
    if (rc && rc->route_free)
        rc->route_free(rc->route_data);
    free(rc);
}

struct rctx *app_on_head_auth(struct http_req *req, struct app *app)
{
    struct rctx *rc = calloc(1, sizeof *rc);
    if (!rc) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return NULL;
    }
    rc->app = app;
    http_req_set_data(req, rc, rctx_free);
    if (!app->auth_required) {
        snprintf(rc->tenant, sizeof rc->tenant, "%s", app->default_tenant);
    } else {
        const char *h = http_req_header(req, "Authorization");
        if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
            http_resp_header(req, "WWW-Authenticate", "Bearer");
            http_respond_error(req, 401, "invalid_request_error", "missing_api_key", NULL,
                               "You didn't provide an API key. Send it in the Authorization header "
                               "(Authorization: Bearer YOUR_KEY).");
            return NULL;
        }
        const char *key = h + 7;
        while (*key == ' ')
            key++;
        struct store_key k;
        int r = store_key_verify(app->loop_st, key, &k);
        if (r == ERR_AUTH) {
            http_resp_header(req, "WWW-Authenticate", "Bearer");
            http_respond_error(req, 401, "invalid_request_error", "invalid_api_key", NULL,
                               "Incorrect API key provided.");
            return NULL;
        }
        if (r) {
            http_resp_header(req, "Retry-After", "1");
            http_respond_error(req, 503, NULL, NULL, NULL, "Could not check the API key: %s.",
                               err_msg(r));
            return NULL;
        }
        snprintf(rc->tenant, sizeof rc->tenant, "%s", k.tenant_id);
    }
    const char *ik = http_req_header(req, "Idempotency-Key");
    if (ik && strcmp(http_req_method(req), "POST") == 0) {
        size_t n = strlen(ik);
        if (n == 0 || n > STORE_IDEM_KEY_MAX) {
            http_respond_error(req, 400, NULL, "invalid_idempotency_key", NULL,
                               "Idempotency-Key must be 1 to %d characters.", STORE_IDEM_KEY_MAX);
            return NULL;
        }
        memcpy(rc->idem_key, ik, n + 1);
    }
    return rc;
}

void app_head_auth(struct http_req *req, void *arg)
{
    app_on_head_auth(req, arg);
}

int app_query_int(struct http_req *req, const char *name, int64_t lo, int64_t hi, int64_t def,
                  int64_t *out)
{
    const char *v = http_req_query(req, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return ERR_INVAL;
    *out = x;
    return 0;
}

/* ---- ops ---------------------------------------------------------------------------------- */

struct op *app_op_new_bare(struct app *app, op_fn fn, int writes, void *in, void (*in_free)(void *in),
                           size_t out_cap)
{
    struct op *op = calloc(1, sizeof *op);
    if (!op) {
        if (in_free)
            in_free(in);
        return NULL;
    }
    op->app = app;
    op->fn = fn;
    op->writes = writes;
    op->fd = -1;
    op->in = in;
    op->in_free = in_free;
    buf_init(&op->out, out_cap);
    return op;
}

struct op *app_op_new(struct http_req *req, op_fn fn)
{
    struct rctx *rc = http_req_data(req);
    int writes = strcmp(http_req_method(req), "GET") != 0 && strcmp(http_req_method(req), "HEAD") != 0;
    struct op *op = app_op_new_bare(rc->app, fn, writes, NULL, NULL, 64u << 20);
    if (!op)
        return NULL;
    snprintf(op->tenant, sizeof op->tenant, "%s", rc->tenant);
    snprintf(op->idem_key, sizeof op->idem_key, "%s", rc->idem_key);
    return op;
}

void app_op_free(struct op *op)
{
    if (!op)
        return;
    if (op->in_free)
        op->in_free(op->in);
    if (op->fd >= 0)
        close(op->fd);
    buf_release(&op->out);
    free(op);
}

void op_error(struct op *op, int status, const char *type, const char *code, const char *param,
              const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!type)
        type = status >= 500 ? "server_error" : "invalid_request_error";
    buf_reset(&op->out);
    op->status = api_error_json(&op->out, type, code, param, msg) ? 0 : status;
}

void op_internal(struct op *op, int rc, const char *what)
{
    log_error("%s: %s", what, err_msg(rc));
    if (rc == ERR_BUSY) {
        op->retry_after = 1;
        op_error(op, 503, NULL, NULL, NULL, "The database is busy (%s); retry shortly.", what);
    } else {
        op_error(op, 500, NULL, NULL, NULL, "Internal error (%s): %s.", what, err_msg(rc));
    }
}

int op_idem_begin(struct op *op, struct store *st)
{
    if (!op->idem_key[0])
        return 0;
    struct store_idem r;
    int rc = store_idem_reserve(st, op->tenant, op->idem_key, op->fp, clock_wall_s(), &r);
    if (rc) {
        op_internal(op, rc, "idempotency key");
        return 1;
    }
    switch (r.outcome) {
    case STORE_IDEM_NEW:
        return 0;
    case STORE_IDEM_REPLAY:
        buf_reset(&op->out);
        if (buf_append(&op->out, r.body, r.body_len))
            op_internal(op, ERR_NOMEM, "idempotent replay");
        else
            op->status = r.status_code;
        op->replayed = 1;
        free(r.body);
        return 1;
    case STORE_IDEM_IN_FLIGHT:
        op->retry_after = 1;
        op_error(op, 409, NULL, "idempotency_key_in_use", NULL,
                 "A request with this Idempotency-Key is still being processed; retry later.");
        return 1;
    case STORE_IDEM_MISMATCH:
    default:
        op_error(op, 422, NULL, "idempotency_key_reused", NULL,
                 "This Idempotency-Key was used with a different request (method, path or body).");
        return 1;
    }
}

int op_idem_complete(struct op *op, struct store *st)
{
    if (!op->idem_key[0])
        return 0;
    return store_idem_complete(st, op->tenant, op->idem_key, op->status, op->out.data, op->out.len,
                               clock_wall_s());
}

void op_idem_release(struct op *op, struct store *st)
{
    if (op->idem_key[0])
        store_idem_release(st, op->tenant, op->idem_key);
}

struct op_job {
    struct op *op;
};

static void op_work(void *arg)
{
    struct op *op = arg;
    if (op->writes)
        atomic_fetch_add(&op->app->writers, 1);
    struct store *st = dbpool_get(&op->app->pool);
    op->fn(op, st);
    dbpool_put(&op->app->pool, st);
    if (op->writes)
        atomic_fetch_sub(&op->app->writers, 1);
}

static void op_after(struct http_req *req, int status, void *arg)
{
    struct op *op = arg;
    struct app *app = op->app;
    if (status != 0 && !op->status)
        op_error(op, 500, NULL, NULL, NULL, "The operation was cancelled.");
    if (op->after) {
        op->after(req, op);
    } else if (!op->status) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Internal error.");
    } else {
        char v[32];
        if (op->replayed)
            http_resp_header(req, "Idempotent-Replayed", "true");
        if (op->etag[0])
            http_resp_header(req, "ETag", op->etag);
        if (op->retry_after) {
            snprintf(v, sizeof v, "%d", op->retry_after);
            http_resp_header(req, "Retry-After", v);
        }
        if (op->fd >= 0) {
            app_send_file(req, op);
        } else if (op->status == 304) {
            http_respond(req, 304, NULL, NULL, 0);
        } else {
            http_respond(req, op->status, op->content_type ? op->content_type : "application/json",
                         op->out.data ? op->out.data : "", op->out.len);
        }
    }
    if (op->push_batch[0] && app->iq && ingestq_push(app->iq, op->push_batch))
        log_warn("batch %s not queued for ingest (shutting down); it resumes on the next start",
                 op->push_batch);
    if (op->unlink_path[0] && unlink(op->unlink_path) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", op->unlink_path, strerror(errno));
    app_op_free(op);
}

void app_op_run(struct http_req *req, struct op *op)
{
    if (!op) {
        http_respond_error(req, 500, NULL, NULL, NULL, "Out of memory.");
        return;
    }
    if (http_req_queue_work(req, op_work, op_after, op) != 0) {
        app_op_free(op);
        http_respond_error(req, 500, NULL, NULL, NULL, "Could not schedule the request.");
    }
}

/* ---- startup and shutdown --------------------------------------------------------------- */

static int mkdir_p(const char *path)
{
    if (mkdir(path, 0700) == 0 || errno == EEXIST)
        return 0;
    log_error("cannot create %s: %s", path, strerror(errno));
    return ERR_IO;
}

/* Remove leftovers of uploads interrupted by a crash. */
static void clean_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "up-", 3) != 0)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static void on_http_closed(void *arg)
{
    struct app *app = arg;
    log_info("http: all requests answered; stopping the ingest thread");
    ingestq_free(app->iq); /* it stops at a line boundary */
    app->iq = NULL;
    app_sweeper_stop(app); /* it stops between two transactions */
    webhook_dispatcher_free(app->wh); /* senders finish the POST in flight */
    app->wh = NULL;
    http_server_free(app->srv);
    app->srv = NULL;
    uv_close((uv_handle_t *)&app->sig_term, NULL);
    uv_close((uv_handle_t *)&app->sig_int, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct app *app = h->data;
    if (app->draining)
        return;
    app->draining = 1;
    log_info("received %s: shutting down (no new connections; finishing in-flight requests)",
             signum == SIGTERM ? "SIGTERM" : "SIGINT");
    ingestq_stop(app->iq);
    webhook_dispatcher_stop(app->wh);
    http_server_shutdown(app->srv, on_http_closed, app);
}

static int decide_auth(struct app *app)
{
    struct store_key *keys = NULL;
    size_t n = 0;
    int rc = store_key_list(app->loop_st, NULL, &keys, &n);
    free(keys);
    if (rc)
        return rc;
    if (n > 0) {
        app->auth_required = 1;
        log_info("auth: API keys required (Authorization: Bearer ...)");
        return 0;
    }
    if (!app_host_is_loopback(app->host)) {
        log_error("refusing to listen on %s without API keys: create one with "
                  "'jobd keys create --tenant NAME --data %s', or listen on 127.0.0.1",
                  app->host, app->cfg.data_dir);
        return ERR_AUTH;
    }
    struct store_tenant t;
    rc = store_tenant_get_by_name(app->loop_st, "default", &t);
    if (rc == ERR_NOTFOUND)
        rc = store_tenant_create(app->loop_st, "default", clock_wall_s(), &t);
    if (rc)
        return rc;
    snprintf(app->default_tenant, sizeof app->default_tenant, "%s", t.id);
    app->auth_required = 0;
    log_warn("auth: no API key exists and jobd listens only on loopback (%s): single-tenant "
             "no-auth mode, every request acts as tenant 'default'. Create a key with "
             "'jobd keys create' and restart to require keys.",
             app->host);
    return 0;
}

int app_run(const struct app_config *cfg)
{
    struct app *app = calloc(1, sizeof *app);
    if (!app)
        return ERR_NOMEM;
    app->cfg = *cfg;
    int rc = 0;
    uv_loop_t loop;
    int loop_ok = 0;
    if (app_parse_listen(cfg->listen, app->host, sizeof app->host, &app->port)) {
        log_error("bad --listen '%s': expected HOST:PORT (e.g. 127.0.0.1:8080)", cfg->listen);
        rc = ERR_INVAL;
        goto out;
    }
    if (cfg->db_threads < 1 || cfg->db_threads > 64) {
        rc = ERR_INVAL;
        goto out;
    }
    /* the thread pool: pooled DB connections plus room for file I/O */
    char tp[16];
    snprintf(tp, sizeof tp, "%d", cfg->db_threads + 2);
    setenv("UV_THREADPOOL_SIZE", tp, 1);

    if ((rc = mkdir_p(cfg->data_dir)))
        goto out;
    if ((rc = store_path_dir(cfg->data_dir, STORE_DIR_FILES, app->files_dir, sizeof app->files_dir)) ||
        (rc = store_path_dir(cfg->data_dir, STORE_DIR_TMP, app->tmp_dir, sizeof app->tmp_dir)) ||
        (rc = mkdir_p(app->files_dir)) || (rc = mkdir_p(app->tmp_dir)))
        goto out;
    clean_tmp(app->tmp_dir);
    if ((rc = store_open(cfg->data_dir, &cfg->store, &app->loop_st))) {
        log_error("cannot open the database in %s: %s", cfg->data_dir, err_msg(rc));
        goto out;
    }
    if ((rc = decide_auth(app)))
        goto out;
    if ((rc = dbpool_open(&app->pool, cfg, (size_t)cfg->db_threads))) {
        log_error("cannot open database connections: %s", err_msg(rc));
        goto out;
    }
    if ((rc = uv_loop_init(&loop))) {
        rc = ERR_INTERNAL;
        goto out;
    }
    loop_ok = 1;
    app->loop = &loop;
    uv_signal_init(&loop, &app->sig_term); /* closed by on_http_closed */
    uv_signal_init(&loop, &app->sig_int);
    app->sig_term.data = app->sig_int.data = app;
    struct http_config hc = cfg->http;
    hc.host = app->host;
    hc.port = app->port;
    if ((rc = http_server_new(&loop, &hc, &app->srv))) {
        uv_close((uv_handle_t *)&app->sig_term, NULL);
        uv_close((uv_handle_t *)&app->sig_int, NULL);
        goto out;
    }
    if ((rc = routes_ops_add(app)) || (rc = routes_files_add(app)) || (rc = routes_batches_add(app)) ||
        (rc = routes_worker_add(app))) {
        log_error("cannot add routes: %s", err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = routes_usage_add(app))) {
        log_error("cannot add usage routes: %s", err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = routes_budget_add(app))) {
        log_error("cannot add budget routes: %s", err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = routes_webhooks_add(app))) {
        log_error("cannot add webhook routes: %s", err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = http_server_listen(app->srv))) {
        log_error("cannot listen on %s: %s", cfg->listen, err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = ingestq_start(cfg->data_dir, &cfg->store, &cfg->limits, &app->writers, &app->iq)))
        goto out_shutdown;
    if ((rc = app_sweeper_start(app)))
        goto out_shutdown;
    if ((rc = webhook_dispatcher_start(cfg->data_dir, &cfg->store, &cfg->webhook, &app->wh)))
        goto out_shutdown;
    uv_signal_start(&app->sig_term, on_signal, SIGTERM);
    uv_signal_start(&app->sig_int, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    if (cfg->port_file) {
        FILE *f = fopen(cfg->port_file, "w");
        if (f) {
            fprintf(f, "%d\n", http_server_port(app->srv));
            fclose(f);
        }
    }
    log_info("jobd %s listening on %s:%d, data %s, durability %s", PROJECT_VERSION, app->host,
             http_server_port(app->srv), cfg->data_dir,
             cfg->store.durability == STORE_DURABILITY_FULL ? "full" : "normal");
    uv_run(&loop, UV_RUN_DEFAULT);
    log_info("jobd stopped cleanly");
    goto out;

out_shutdown:
    /* the server must be shut down before it is freed, even if it never listened */
    http_server_shutdown(app->srv, on_http_closed, app);
    uv_run(&loop, UV_RUN_DEFAULT);
out:
    ingestq_free(app->iq);
    app_sweeper_stop(app);
    webhook_dispatcher_free(app->wh);
    app->wh = NULL;
    if (loop_ok) {
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
    }
    dbpool_close(&app->pool);
    store_close(app->loop_st);
    free(app);
    return rc;
}
