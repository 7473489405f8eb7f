/*
 * api.c - the API's life cycle: its connections and auth mode, its route
 * tables, the threads it talks to (see api.h). Loop thread.
 */
#include "jobd/api/api.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/api/api_auth.h"
#include "jobd/api/api_int.h"

int api_new(const struct api_config *cfg, struct api **out)
{
    struct api *api = calloc(1, sizeof *api);
    if (!api)
        return ERR_NOMEM;
    api->cfg = *cfg;
    int rc = store_path_dir(cfg->data_dir, STORE_DIR_TMP, api->tmp_dir, sizeof api->tmp_dir);
    if (rc) {
        log_error("data directory %s: %s", cfg->data_dir, err_msg(rc));
        goto fail;
    }
    rc = store_open(cfg->data_dir, &cfg->store, &api->loop_st);
    if (rc) {
        log_error("cannot open the database in %s: %s", cfg->data_dir, err_msg(rc));
        goto fail;
    }
    if ((rc = api_auth_decide(api)))
        goto fail;
    if ((rc = api_pool_open(&api->pool, cfg->data_dir, &cfg->store, (size_t)cfg->db_threads)) ||
        (store_database_is_pg(cfg->store.database) &&
         (rc = api_pool_open(&api->rpool, cfg->data_dir, &cfg->store, API_READ_CONNS)))) {
        log_error("cannot open database connections: %s", err_msg(rc));
        goto fail;
    }
    *out = api;
    return 0;
fail:
    api_free(api);
    return rc;
}

int api_routes_add(struct api *api, struct http_server *srv)
{
    api->srv = srv;
    int rc;
    if ((rc = routes_ops_add(api)) || (rc = routes_files_add(api)) || (rc = routes_batches_add(api)) ||
        (rc = routes_results_add(api)) ||
        (rc = routes_worker_add(api)) || (rc = routes_usage_add(api)) || (rc = routes_budget_add(api)) ||
        (rc = routes_webhooks_add(api)) || (rc = routes_messages_add(api)))
        log_error("cannot add routes: %s", err_msg(rc));
    return rc;
}

atomic_int *api_writers(struct api *api)
{
    return &api->writers;
}

void api_attach(struct api *api, struct ingestq *iq, struct sweeper *sw, struct webhook_dispatcher *wh)
{
    api->iq = iq;
    api->sweeper = sw;
    api->wh = wh;
}

void api_drain(struct api *api)
{
    api->draining = 1;
}

void api_wake_pollers(struct api *api)
{
    if (api)
        atomic_fetch_add(&api->wake_gen, 1);
}

void api_set_listening(struct api *api, int on)
{
    if (api)
        atomic_store(&api->listening, on ? 1 : 0);
}

void api_free(struct api *api)
{
    if (!api)
        return;
    api_pool_close(&api->pool);
    api_pool_close(&api->rpool);
    store_close(api->loop_st);
    free(api);
}
