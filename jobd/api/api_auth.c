/*
 * api_auth.c - tenant keys, service tokens, Idempotency-Key and the auth
 * mode (see api_auth.h). Loop thread.
 */
#include "jobd/api/api_auth.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/log.h"
#include "jobd/api/api_err.h"
#include "jobd/api/api_int.h"
#include "jobd/http/http.h"

/* ---- the listen address ------------------------------------------------------------- */

/* 1 if host (numeric or "localhost") is a loopback address. */
static int host_is_loopback(const char *host)
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

int api_auth_decide(struct api *api)
{
    struct store_key *keys = NULL;
    size_t n = 0;
    int rc = store_key_list(api->loop_st, NULL, &keys, &n);
    free(keys);
    if (rc)
        return rc;
    if (n > 0) {
        api->auth_required = 1;
        log_info("auth: API keys required (Authorization: Bearer ...)");
        return 0;
    }
    if (!host_is_loopback(api->cfg.host)) {
        log_error("refusing to listen on %s without API keys: create one with "
                  "'jobd keys create --tenant NAME --data %s', or listen on 127.0.0.1",
                  api->cfg.host, api->cfg.data_dir);
        return ERR_AUTH;
    }
    struct store_tenant t;
    rc = store_tenant_get_by_name(api->loop_st, "default", &t);
    if (rc == ERR_NOTFOUND)
        rc = store_tenant_create(api->loop_st, "default", clock_wall_s(), &t);
    if (rc == ERR_EXISTS) /* another jobd instance on the same database made it first */
        rc = store_tenant_get_by_name(api->loop_st, "default", &t);
    if (rc)
        return rc;
    snprintf(api->default_tenant, sizeof api->default_tenant, "%s", t.id);
    api->auth_required = 0;
    log_warn("auth: no API key exists and jobd listens only on loopback (%s): single-tenant "
             "no-auth mode, every request acts as tenant 'default'. Create a key with "
             "'jobd keys create' and restart to require keys.",
             api->cfg.host);
    return 0;
}

/* ---- tenant keys ----------------------------------------------------------------- */

static void rctx_free(void *data)
{
    struct api_rctx *rc = data;
    if (rc && rc->route_free)
        rc->route_free(rc->route_data);
    free(rc);
}

/* A refusal in the envelope of the request's contract. */
static void auth_refuse(struct http_req *req, const struct api_rctx *rc, enum api_err e, const char *msg)
{
    if (rc && rc->anthropic)
        api_respond_error_anthropic(req, e, "%s", msg);
    else
        api_respond_error(req, e, NULL, "%s", msg);
}

static struct api_rctx *auth_tenant(struct http_req *req, struct api *api, int anthropic)
{
    struct api_rctx *rc = calloc(1, sizeof *rc);
    if (!rc) {
        auth_refuse(req, NULL, API_ERR_INTERNAL, "Out of memory.");
        return NULL;
    }
    rc->api = api;
    rc->anthropic = anthropic;
    http_req_set_data(req, rc, rctx_free);
    if (anthropic && !http_req_header(req, "anthropic-version")) {
        auth_refuse(req, rc, API_ERR_MISSING_PARAMETER, "anthropic-version: header is required");
        return NULL;
    }
    if (!api->auth_required) {
        snprintf(rc->tenant, sizeof rc->tenant, "%s", api->default_tenant);
    } else {
        const char *key = anthropic ? http_req_header(req, "x-api-key") : NULL;
        if (!key) {
            const char *h = http_req_header(req, "Authorization");
            key = h && strncasecmp(h, "Bearer ", 7) == 0 ? h + 7 : NULL;
        }
        if (!key) {
            http_resp_header(req, "WWW-Authenticate", "Bearer");
            auth_refuse(req, rc, API_ERR_MISSING_API_KEY,
                        anthropic ? "x-api-key header is required"
                                  : "You didn't provide an API key. Send it in the Authorization header "
                                    "(Authorization: Bearer YOUR_KEY).");
            return NULL;
        }
        while (*key == ' ')
            key++;
        struct store_key k;
        int r = store_key_verify(api->loop_st, key, &k);
        if (r == ERR_AUTH) {
            http_resp_header(req, "WWW-Authenticate", "Bearer");
            auth_refuse(req, rc, API_ERR_INVALID_API_KEY, anthropic ? "invalid x-api-key" : "Incorrect API key provided.");
            return NULL;
        }
        if (r) {
            char msg[200];
            snprintf(msg, sizeof msg, "Could not check the API key: %s.", err_msg(r));
            http_resp_header(req, "Retry-After", "1");
            auth_refuse(req, rc, API_ERR_UNAVAILABLE, msg);
            return NULL;
        }
        snprintf(rc->tenant, sizeof rc->tenant, "%s", k.tenant_id);
    }
    const char *ik = http_req_header(req, "Idempotency-Key");
    if (ik && strcmp(http_req_method(req), "POST") == 0) {
        size_t n = strlen(ik);
        if (n == 0 || n > STORE_IDEM_KEY_MAX) {
            char msg[120];
            snprintf(msg, sizeof msg, "Idempotency-Key must be 1 to %d characters.", STORE_IDEM_KEY_MAX);
            auth_refuse(req, rc, API_ERR_INVALID_IDEMPOTENCY_KEY, msg);
            return NULL;
        }
        memcpy(rc->idem_key, ik, n + 1);
    }
    return rc;
}

struct api_rctx *api_auth_tenant(struct http_req *req, struct api *api)
{
    return auth_tenant(req, api, 0);
}

struct api_rctx *api_auth_tenant_anthropic(struct http_req *req, struct api *api)
{
    return auth_tenant(req, api, 1);
}

void api_head_tenant(struct http_req *req, void *arg)
{
    api_auth_tenant(req, arg);
}

/* ---- service tokens ---------------------------------------------------------------- */

/* Constant-time: compare SHA-256 digests of the presented and the expected token. */
static int token_eq(const char *presented, const char *expected)
{
    uint8_t a[SHA256_LEN], b[SHA256_LEN];
    sha256(presented, strlen(presented), a);
    sha256(expected, strlen(expected), b);
    unsigned diff = 0;
    for (size_t i = 0; i < SHA256_LEN; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

static const char *bearer(struct http_req *req)
{
    const char *h = http_req_header(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

/* 1 if the request carries `token` as its Bearer, or no token is configured
 * and jobd is in no-auth mode. */
static int token_ok(struct api *api, struct http_req *req, const char *token)
{
    const char *b = bearer(req);
    if (token && *token)
        return b && token_eq(b, token);
    return !api->auth_required;
}

void api_head_worker(struct http_req *req, void *arg)
{
    struct api *api = arg;
    if (!token_ok(api, req, api->cfg.worker_token)) {
        http_resp_header(req, "WWW-Authenticate", "Bearer");
        api_respond_error(req, API_ERR_INVALID_WORKER_TOKEN, NULL,
                          "Missing or wrong worker token (Authorization: Bearer <JOBD_WORKER_TOKEN>).");
    }
}

static char admin_mark; /* http_req_data of a request authenticated as admin */

void api_head_admin(struct http_req *req, void *arg)
{
    struct api *api = arg;
    if (!token_ok(api, req, api->cfg.admin_token)) {
        http_resp_header(req, "WWW-Authenticate", "Bearer");
        api_respond_error(req, API_ERR_INVALID_ADMIN_TOKEN, NULL,
                          "Missing or wrong admin token (Authorization: Bearer <JOBD_ADMIN_TOKEN>).");
        return;
    }
    http_req_set_data(req, &admin_mark, NULL);
}

void api_head_tenant_or_admin(struct http_req *req, void *arg)
{
    struct api *api = arg;
    const char *b = bearer(req);
    if (b && api->cfg.admin_token && *api->cfg.admin_token && token_eq(b, api->cfg.admin_token)) {
        http_req_set_data(req, &admin_mark, NULL);
        return;
    }
    api_auth_tenant(req, api);
}

void api_auth_tenant_of(struct http_req *req, char out[ID_MAX])
{
    void *d = http_req_data(req);
    if (d == &admin_mark || !d)
        out[0] = '\0';
    else
        snprintf(out, ID_MAX, "%s", ((struct api_rctx *)d)->tenant);
}
