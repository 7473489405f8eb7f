/*
 * api_auth.h - who a request is: tenant API keys, the worker and admin
 * service tokens, the Idempotency-Key header, and the auth mode decided at
 * start (see jobd/api/api.h).
 *
 * Each route's on_head hook is one of the api_head_* functions below (or
 * calls api_auth_tenant first). Tokens are compared in constant time
 * (SHA-256 digests of both sides), so neither their content nor their
 * length leaks through timing. Loop thread.
 */
#ifndef JOBD_API_AUTH_H
#define JOBD_API_AUTH_H

#include "common/id.h"
#include "jobd/store/store.h"

struct api;
struct http_req;

/* Per-request context of a tenant request (http_req_data), created by
 * api_auth_tenant and freed with the request. */
struct api_rctx {
    struct api *api;
    char tenant[ID_MAX];
    char idem_key[STORE_IDEM_KEY_MAX + 1]; /* "" = none */
    void *route_data;                      /* a route's streaming state (freed by route_free) */
    void (*route_free)(void *route_data);
    int anthropic;                         /* a /v1/messages route: Anthropic's headers and envelope */
};

/* Decide the auth mode at start (logged): keys exist -> required; else
 * loopback host -> no-auth mode with tenant "default" (created if needed);
 * else ERR_AUTH. 0 or ERR_AUTH / the store's error. */
int api_auth_decide(struct api *api);

/* Authenticate a tenant request (Bearer key, or the default tenant in
 * no-auth mode), check Idempotency-Key (POST), attach a new api_rctx.
 * Returns it, or NULL when the request was answered (401, 400, 500, 503). */
struct api_rctx *api_auth_tenant(struct http_req *req, struct api *api);

/* api_auth_tenant for Anthropic's contract (the /v1/messages routes): the
 * key from x-api-key (or a Bearer), the anthropic-version header required
 * (any value: jobd speaks 2023-06-01), every refusal in Anthropic's
 * envelope, and rctx->anthropic set so the route's jobs answer alike. */
struct api_rctx *api_auth_tenant_anthropic(struct http_req *req, struct api *api);

/* on_head hooks (arg is the api):
 * api_head_tenant - api_auth_tenant;
 * api_head_worker - the worker token, else 401 invalid_worker_token;
 * api_head_admin - the admin token, else 401 invalid_admin_token;
 * api_head_tenant_or_admin - the admin token (when one is configured) or
 *   else a tenant key (see api_auth_tenant_of). */
void api_head_tenant(struct http_req *req, void *arg);
void api_head_worker(struct http_req *req, void *arg);
void api_head_admin(struct http_req *req, void *arg);
void api_head_tenant_or_admin(struct http_req *req, void *arg);

/* The tenant of a request passed by api_head_tenant_or_admin into out; ""
 * when it came with the admin token (every tenant). Can't fail. */
void api_auth_tenant_of(struct http_req *req, char out[ID_MAX]);

#endif
