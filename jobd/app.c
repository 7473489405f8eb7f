/*
 * app.c - the daemon's wiring: configuration, the threads' start and stop
 * order, signals (see app.h). Loop thread.
 */
#include "jobd/app.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/api/api.h"
#include "jobd/blob/blob.h"
#include "jobd/http/http.h"
#include "jobd/intake/ingestq.h"
#include "jobd/store/store.h"
#include "jobd/ui/ui.h"
#include "jobd/work/retention.h"
#include "jobd/work/sweeper.h"
#include "jobd/work/wakeup.h"

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
    cfg->message_batch_window_s = API_MESSAGE_BATCH_WINDOW_S;
    cfg->expiry_min_s = API_EXPIRY_MIN_S;
    cfg->webhook = WEBHOOK_CONFIG_DEFAULT;
    cfg->ui = 1;
}

int app_config_set_database(struct app_config *cfg, const char *url)
{
    if (url && !*url)
        url = NULL;
    if (url && !store_database_is_pg(url))
        return ERR_INVAL;
    cfg->store.database = url;
    /* PostgreSQL inserts a row per round trip (~4x SQLite's ingest time on a
     * shared 2-core box): smaller ingest transactions keep each hold of the
     * write lock well under the 5 s lock timeout API writers wait (batched
     * inserts are the real fix) */
    if (url)
        cfg->limits.rows_per_tx = 2000;
    return 0;
}

int app_config_set_durability(struct app_config *cfg, const char *name)
{
    if (strcmp(name, "full") == 0)
        cfg->store.durability = STORE_DURABILITY_FULL;
    else if (strcmp(name, "normal") == 0)
        cfg->store.durability = STORE_DURABILITY_NORMAL;
    else
        return ERR_INVAL;
    return 0;
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

/* ---- startup and shutdown --------------------------------------------------------------- */

/* The daemon's state: the loop's handles and the threads, in start order. */
struct app {
    struct app_config cfg;
    char host[256];
    int port;
    uv_signal_t sig_term, sig_int;
    int draining;                  /* SIGTERM seen */
    struct api *api;               /* routes over the store pool (jobd/api/api.h) */
    struct http_server *srv;
    struct ingestq *iq;            /* ingest thread (jobd/intake/ingestq.h) */
    struct sweeper *sweeper;       /* lease expiry + finalization thread (jobd/work/sweeper.h) */
    struct webhook_dispatcher *wh; /* webhook sender threads (jobd/webhook/webhook.h) */
    struct wakeup *wakeup;         /* PostgreSQL: the LISTEN thread (jobd/work/wakeup.h); NULL on SQLite */
    struct blob_store *blobs;      /* the file store every connection hands out (cfg.store.blobs) */
};

static int mkdir_p(const char *path)
{
    if (mkdir(path, 0700) == 0 || errno == EEXIST)
        return 0;
    log_error("cannot create %s: %s", path, strerror(errno));
    return ERR_IO;
}

/* Remove leftovers of uploads and finalizations interrupted by a crash. */
static void clean_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "up-", 3) != 0 && strncmp(e->d_name, "fin-", 4) != 0)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* SQLite: remove the bytes under files/ that no row names (a crash between
 * an upload's rename and its commit, an unlink lost with the power), before
 * anything can be in flight (jobd/work/retention.h). */
static int collect_orphans(const struct app_config *cfg)
{
    if (store_database_is_pg(cfg->store.database) || (cfg->files.url && *cfg->files.url))
        return 0;
    struct store *st = NULL;
    int rc = store_open(cfg->data_dir, &cfg->store, &st); /* logs why it fails */
    if (rc)
        return rc;
    int64_t n = 0;
    rc = retention_orphans_local(st, &n);
    store_close(st);
    if (rc)
        log_error("cannot collect the orphaned files of %s: %s", cfg->data_dir, err_msg(rc));
    else if (n > 0)
        log_info("removed %lld orphaned files under %s/files", (long long)n, cfg->data_dir);
    return rc;
}

/* Stop the threads, last started first; each waits for its work in flight. */
static void stop_threads(struct app *app)
{
    wakeup_free(app->wakeup); /* first: it wakes the sweeper */
    app->wakeup = NULL;
    if (app->api) {
        api_set_listening(app->api, 0);
        api_attach(app->api, NULL, NULL, NULL);
    }
    ingestq_free(app->iq); /* it stops at a line boundary */
    app->iq = NULL;
    sweeper_free(app->sweeper); /* it stops between two transactions */
    app->sweeper = NULL;
    webhook_dispatcher_free(app->wh); /* senders finish the POST in flight */
    app->wh = NULL;
}

static void on_http_closed(void *arg)
{
    struct app *app = arg;
    log_info("http: all requests answered; stopping the ingest thread");
    stop_threads(app);
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
    api_drain(app->api);
    ingestq_stop(app->iq);
    webhook_dispatcher_stop(app->wh);
    http_server_shutdown(app->srv, on_http_closed, app);
}

/* The LISTEN thread's reports (its thread): wake the parked long polls and
 * the sweeper, or switch the long polls between wake-ups and polling. */
static void on_wakeup(void *arg, enum wakeup_event ev)
{
    struct app *app = arg;
    switch (ev) {
    case WAKEUP_WORK:
        api_wake_pollers(app->api);
        sweeper_wake(app->sweeper);
        break;
    case WAKEUP_UP: api_set_listening(app->api, 1); break;
    case WAKEUP_DOWN: api_set_listening(app->api, 0); break;
    }
}

static int start_threads(struct app *app)
{
    const struct app_config *cfg = &app->cfg;
    int rc;
    if ((rc = ingestq_start(cfg->data_dir, &cfg->store, &cfg->limits, api_writers(app->api), &app->iq)))
        return rc;
    if ((rc = sweeper_start(cfg->data_dir, &cfg->store, &cfg->lease, cfg->sweep_interval_ms, &app->sweeper))) {
        log_error("cannot start the sweeper: %s", err_msg(rc));
        return rc;
    }
    if ((rc = webhook_dispatcher_start(cfg->data_dir, &cfg->store, &cfg->webhook, &app->wh)))
        return rc;
    api_attach(app->api, app->iq, app->sweeper, app->wh);
    if (store_database_is_pg(cfg->store.database) &&
        (rc = wakeup_start(cfg->data_dir, &cfg->store, on_wakeup, app, &app->wakeup))) {
        log_error("cannot LISTEN for wake-ups on the database: %s", err_msg(rc));
        return rc;
    }
    return 0;
}

static void api_config_from(const struct app *app, struct api_config *ac)
{
    const struct app_config *cfg = &app->cfg;
    memset(ac, 0, sizeof *ac);
    ac->data_dir = cfg->data_dir;
    ac->host = app->host;
    ac->store = cfg->store;
    ac->prices = cfg->prices;
    ac->reference_prices = cfg->reference_prices;
    ac->worker_costs = cfg->worker_costs;
    ac->limits = cfg->limits;
    ac->max_upload_bytes = cfg->max_upload_bytes;
    ac->max_json_bytes = cfg->max_json_bytes;
    ac->db_threads = cfg->db_threads;
    ac->zstd_level = cfg->zstd_level;
    ac->worker_token = cfg->worker_token;
    ac->admin_token = cfg->admin_token;
    ac->lease = cfg->lease;
    ac->window_min_s = cfg->window_min_s;
    ac->message_batch_window_s = cfg->message_batch_window_s;
    ac->file_retention_s = cfg->file_retention_s;
    ac->expiry_min_s = cfg->expiry_min_s;
    ac->tokens = cfg->tokens;
    ac->webhook_allow_private = cfg->webhook.allow_private;
}

int app_run(const struct app_config *cfg)
{
    struct app *app = calloc(1, sizeof *app);
    if (!app)
        return ERR_NOMEM;
    app->cfg = *cfg;
    app->cfg.store.cost = usage_cost_hook; /* every store connection prices results the same */
    app->cfg.store.cost_ctx = cfg->prices;
    app->cfg.store.worker_ttl_s = cfg->lease.worker_ttl_s; /* worker gaps: the same liveness */
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
    snprintf(tp, sizeof tp, "%d",
             cfg->db_threads + 2 + (store_database_is_pg(cfg->store.database) ? API_READ_CONNS : 0));
    setenv("UV_THREADPOOL_SIZE", tp, 1);

    char files_dir[1024], tmp_dir[1024];
    if ((rc = store_path_dir(cfg->data_dir, STORE_DIR_FILES, files_dir, sizeof files_dir)) ||
        (rc = store_path_dir(cfg->data_dir, STORE_DIR_TMP, tmp_dir, sizeof tmp_dir)) ||
        (rc = mkdir_p(cfg->data_dir)) || (rc = mkdir_p(files_dir)) || (rc = mkdir_p(tmp_dir)))
        goto out;
    clean_tmp(tmp_dir);
    struct blob_config bc = cfg->files;
    bc.data_dir = cfg->data_dir;
    if ((rc = blob_store_open(&bc, &app->blobs))) {
        log_error("cannot open the file store %s: %s", bc.url && *bc.url ? bc.url : cfg->data_dir, err_msg(rc));
        rc = rc == ERR_AUTH ? ERR_INVAL : rc; /* bad credentials are bad config, not "no API keys" */
        goto out;
    }
    app->cfg.store.blobs = app->blobs;
    if ((rc = collect_orphans(&app->cfg)))
        goto out;
    struct api_config ac;
    api_config_from(app, &ac);
    if ((rc = api_new(&ac, &app->api)))
        goto out;
    if ((rc = uv_loop_init(&loop))) {
        rc = ERR_INTERNAL;
        goto out;
    }
    loop_ok = 1;
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
    if ((rc = api_routes_add(app->api, app->srv)))
        goto out_shutdown;
    if (cfg->ui && (rc = ui_routes_add(app->srv))) {
        log_error("cannot add the dashboard's routes: %s", err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = http_server_listen(app->srv))) {
        log_error("cannot listen on %s: %s", cfg->listen, err_msg(rc));
        goto out_shutdown;
    }
    if ((rc = start_threads(app)))
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
    log_info("jobd %s listening on %s:%d, data %s, files %s, durability %s", PROJECT_VERSION, app->host,
             http_server_port(app->srv), cfg->data_dir, blob_describe(app->blobs),
             cfg->store.durability == STORE_DURABILITY_FULL ? "full" : "normal");
    uv_run(&loop, UV_RUN_DEFAULT);
    log_info("jobd stopped cleanly");
    goto out;

out_shutdown:
    /* the server must be shut down before it is freed, even if it never listened */
    http_server_shutdown(app->srv, on_http_closed, app);
    uv_run(&loop, UV_RUN_DEFAULT);
out:
    stop_threads(app);
    if (loop_ok) {
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
    }
    api_free(app->api);
    blob_store_free(app->blobs);
    free(app);
    return rc;
}
