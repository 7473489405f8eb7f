/*
 * http_router.c - method + path-pattern routing with {param} segments.
 *
 * A pattern is split into '/'-separated segments, each literal or {name}.
 * A request path is split the same way (raw, so an encoded "%2F" stays
 * inside its segment), and each segment is percent-decoded before it is
 * compared with a literal or bound to a param. A trailing slash is an empty
 * last segment: "/ui/" matches only a pattern that ends in "/" (never a
 * {param}), so "/v1/batches/" stays a 404. Among the routes whose shape
 * matches, the most specific shape names the resource: compare segment by
 * segment from the left, a literal beats a param, and only the routes of
 * that shape are considered (so POST /v1/batches/estimate is its own
 * resource: GET /v1/batches/estimate is a 405, not GET /v1/batches/{id}
 * with id "estimate"). If no route of that shape has the method, the answer
 * is 405 with the methods it has (a GET route also serves HEAD). Linear scan:
 * jobd has a few dozen routes.
 * Pure code (no uv); loop thread in practice.
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/http/http_int.h"

void http_router_init(struct http_router *rt)
{
    memset(rt, 0, sizeof *rt);
}

static void ent_free(struct http_route_ent *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n_segs; i++) {
        free(e->segs[i]);
        free(e->names[i]);
    }
    free(e->method);
    free(e->pattern);
    free(e->counts);
    free(e);
}

void http_router_release(struct http_router *rt)
{
    for (size_t i = 0; i < rt->n_routes; i++)
        ent_free(rt->routes[i]);
    free(rt->routes);
    memset(rt, 0, sizeof *rt);
}

static int valid_method(const char *m)
{
    if (!m || !*m || strlen(m) > 16)
        return 0;
    for (const char *p = m; *p; p++)
        if (*p < 'A' || *p > 'Z')
            return 0;
    return 1;
}

int http_router_add(struct http_router *rt, const struct http_route *route)
{
    if (!route || !route->handler || !valid_method(route->method) || !route->pattern ||
        route->pattern[0] != '/')
        return ERR_INVAL;
    struct http_route_ent *e = calloc(1, sizeof *e);
    if (!e)
        return ERR_NOMEM;
    int rc = ERR_NOMEM;
    e->r = *route;
    e->method = strdup(route->method);
    e->pattern = strdup(route->pattern);
    if (!e->method || !e->pattern)
        goto out;
    e->r.method = e->method;
    e->r.pattern = e->pattern;
    const char *p = route->pattern + 1;
    if (*p) {
        for (;;) {
            const char *slash = strchr(p, '/');
            size_t n = slash ? (size_t)(slash - p) : strlen(p);
            rc = ERR_INVAL;
            /* an empty segment only as a trailing slash ("/ui/"): a literal "" */
            if ((n == 0 && (slash || e->n_segs == 0)) || e->n_segs >= HTTP_MAX_SEGMENTS)
                goto out;
            const char *ob = memchr(p, '{', n), *cb = memchr(p, '}', n);
            if (ob || cb) {
                if (p[0] != '{' || p[n - 1] != '}' || n < 3 || memchr(p + 1, '{', n - 2) ||
                    memchr(p + 1, '}', n - 2))
                    goto out;
                rc = ERR_NOMEM;
                e->names[e->n_segs] = strndup(p + 1, n - 2);
                if (!e->names[e->n_segs])
                    goto out;
            } else {
                rc = ERR_NOMEM;
                e->segs[e->n_segs] = strndup(p, n);
                if (!e->segs[e->n_segs])
                    goto out;
            }
            e->n_segs++;
            if (!slash)
                break;
            p = slash + 1;
        }
    }
    size_t n_params = 0;
    for (size_t i = 0; i < e->n_segs; i++)
        n_params += e->segs[i] == NULL;
    rc = ERR_INVAL;
    if (n_params > HTTP_MAX_PARAMS)
        goto out;
    /* same method and shape (literals equal, params in the same places)? */
    for (size_t i = 0; i < rt->n_routes; i++) {
        const struct http_route_ent *o = rt->routes[i];
        if (strcmp(o->method, e->method) != 0 || o->n_segs != e->n_segs)
            continue;
        size_t k = 0;
        for (; k < e->n_segs; k++) {
            if ((o->segs[k] == NULL) != (e->segs[k] == NULL))
                break;
            if (o->segs[k] && strcmp(o->segs[k], e->segs[k]) != 0)
                break;
        }
        if (k == e->n_segs) {
            rc = ERR_EXISTS;
            goto out;
        }
    }
    rc = ERR_NOMEM;
    void *nr = realloc(rt->routes, (rt->n_routes + 1) * sizeof *rt->routes);
    if (!nr)
        goto out;
    rt->routes = nr;
    e->index = rt->n_routes + 1;
    rt->routes[rt->n_routes++] = e;
    return 0;
out:
    ent_free(e);
    return rc;
}

/* Does ent's shape match the decoded segments? Returns a specificity score
 * (bit per literal, leftmost highest) + 1, or 0 for no match. */
static uint32_t shape_score(const struct http_route_ent *e, char **seg, size_t n)
{
    if (e->n_segs != n)
        return 0;
    uint32_t score = 1;
    for (size_t i = 0; i < n; i++) {
        if (e->segs[i]) {
            if (strcmp(e->segs[i], seg[i]) != 0)
                return 0;
            score |= 1u << (HTTP_MAX_SEGMENTS - i);
        } else if (!seg[i][0]) {
            return 0; /* a {param} never matches the empty segment of a trailing slash */
        }
    }
    return score;
}

static int method_matches(const struct http_route_ent *e, const char *method)
{
    return strcmp(e->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(e->method, "GET") == 0);
}

int http_router_match(const struct http_router *rt, struct http_req *req, struct buf *allow)
{
    char *seg[HTTP_MAX_SEGMENTS + 1];
    size_t n = 0;
    struct buf dec;
    const char *path = req->path ? req->path : "/";
    const char *method = http_req_method(req);
    int rc;

    /* decode each segment into dec, NUL-separated; remember offsets */
    size_t off[HTTP_MAX_SEGMENTS + 1];
    buf_init(&dec, strlen(path) + 1);
    const char *p = path[0] == '/' ? path + 1 : path;
    if (*p) {
        for (;;) {
            const char *slash = strchr(p, '/');
            size_t len = slash ? (size_t)(slash - p) : strlen(p);
            if (n >= HTTP_MAX_SEGMENTS || (len == 0 && (slash || n == 0))) {
                buf_release(&dec);
                return HTTP_MATCH_NOPATH;
            }
            off[n] = dec.len;
            rc = http_pct_decode(p, len, 0, &dec);
            if (!rc)
                rc = buf_append_byte(&dec, '\0');
            if (rc) {
                buf_release(&dec);
                return rc == ERR_PARSE ? ERR_PARSE : HTTP_MATCH_NOPATH;
            }
            n++;
            if (!slash)
                break;
            p = slash + 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        seg[i] = dec.data + off[i];

    const struct http_route_ent *best = NULL;
    uint32_t best_score = 0, top = 0;
    int shape_seen = 0;
    for (size_t i = 0; i < rt->n_routes; i++) {
        uint32_t s = shape_score(rt->routes[i], seg, n);
        if (s > top)
            top = s;
    }
    for (size_t i = 0; i < rt->n_routes; i++) {
        const struct http_route_ent *e = rt->routes[i];
        uint32_t s = shape_score(e, seg, n);
        if (!s || s != top)
            continue;
        shape_seen = 1;
        if (!method_matches(e, method))
            continue;
        /* exact method beats GET-for-HEAD at equal score */
        if (s > best_score ||
            (s == best_score && best && strcmp(best->method, method) != 0 &&
             strcmp(e->method, method) == 0)) {
            best = e;
            best_score = s;
        }
    }
    if (!best) {
        rc = HTTP_MATCH_NOPATH;
        if (shape_seen) {
            rc = HTTP_MATCH_NOMETHOD;
            if (allow) {
                const char *all[64];
                size_t na = 0;
                for (size_t i = 0; i < rt->n_routes && na < 62; i++) {
                    const struct http_route_ent *e = rt->routes[i];
                    if (shape_score(e, seg, n) != top)
                        continue;
                    const char *ms[2] = {e->method, strcmp(e->method, "GET") == 0 ? "HEAD" : NULL};
                    for (int k = 0; k < 2; k++) {
                        if (!ms[k])
                            continue;
                        size_t j = 0;
                        while (j < na && strcmp(all[j], ms[k]) != 0)
                            j++;
                        if (j == na)
                            all[na++] = ms[k];
                    }
                }
                /* sorted for a stable header */
                for (size_t i = 1; i < na; i++)
                    for (size_t j = i; j > 0 && strcmp(all[j - 1], all[j]) > 0; j--) {
                        const char *t = all[j];
                        all[j] = all[j - 1];
                        all[j - 1] = t;
                    }
                buf_reset(allow);
                for (size_t i = 0; i < na; i++)
                    buf_printf(allow, "%s%s", i ? ", " : "", all[i]);
            }
        }
        buf_release(&dec);
        return rc;
    }

    /* bind params into req->pbuf */
    buf_release(&req->pbuf);
    buf_init(&req->pbuf, dec.len + 1);
    req->n_params = 0;
    size_t poff[HTTP_MAX_PARAMS];
    size_t pidx[HTTP_MAX_PARAMS];
    for (size_t i = 0; i < n; i++) {
        if (best->segs[i] || req->n_params >= HTTP_MAX_PARAMS)
            continue;
        poff[req->n_params] = req->pbuf.len;
        pidx[req->n_params] = i;
        if (buf_append(&req->pbuf, seg[i], strlen(seg[i]) + 1)) {
            buf_release(&dec);
            return HTTP_MATCH_NOPATH;
        }
        req->n_params++;
    }
    for (size_t i = 0; i < req->n_params; i++) {
        req->params[i].name = best->names[pidx[i]];
        req->params[i].value = req->pbuf.data + poff[i];
    }
    req->route = best;
    buf_release(&dec);
    return HTTP_MATCH_OK;
}

void http_route_count_add(struct http_route_ent *e, int status)
{
    for (size_t i = 0; i < e->n_counts; i++) {
        if (e->counts[i].status == status) {
            e->counts[i].n++;
            return;
        }
    }
    if (e->n_counts == e->cap_counts) {
        size_t nc = e->cap_counts ? e->cap_counts * 2 : 4;
        void *p = realloc(e->counts, nc * sizeof *e->counts);
        if (!p)
            return; /* counting is best effort */
        e->counts = p;
        e->cap_counts = nc;
    }
    e->counts[e->n_counts].status = status;
    e->counts[e->n_counts].n = 1;
    e->n_counts++;
}
