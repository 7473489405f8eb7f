/*
 * ui.c - the dashboard's static files and their routes (see ui.h). The
 * table of files is generated at build time (build/gen/ui_assets.c); the
 * per-file content types and ETags are computed once, on first use.
 */
#include "jobd/ui/ui.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/embed.h"
#include "common/hash.h"
#include "jobd/http/http.h"

extern const struct embed_file ui_assets[]; /* build/gen/ui_assets.c */

#define UI_MAX_FILES 16

static struct ui_file files[UI_MAX_FILES];
static size_t n_files;
static pthread_once_t files_once = PTHREAD_ONCE_INIT;

static const char *content_type_of(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},       {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},         {".svg", "image/svg+xml"},
        {".png", "image/png"},                       {".txt", "text/plain; charset=utf-8"},
        {".json", "application/json"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static void files_init(void)
{
    for (const struct embed_file *e = ui_assets; e->name && n_files < UI_MAX_FILES; e++) {
        struct ui_file *f = &files[n_files++];
        f->name = e->name;
        f->content_type = content_type_of(e->name);
        f->data = e->data;
        f->len = e->len;
        snprintf(f->etag, sizeof f->etag, "\"%016llx\"", (unsigned long long)hash_fnv(e->data, e->len));
    }
}

const struct ui_file *ui_file_find(const char *name)
{
    pthread_once(&files_once, files_init);
    if (!name)
        return NULL;
    if (!*name)
        name = "index.html";
    if (name[0] == '.' || strchr(name, '/'))
        return NULL;
    for (size_t i = 0; i < n_files; i++)
        if (strcmp(files[i].name, name) == 0)
            return &files[i];
    return NULL;
}

size_t ui_total_bytes(void)
{
    pthread_once(&files_once, files_init);
    size_t n = 0;
    for (size_t i = 0; i < n_files; i++)
        n += files[i].len;
    return n;
}

static void security_headers(struct http_req *req)
{
    http_resp_header(req, "Content-Security-Policy", UI_CSP);
    http_resp_header(req, "X-Content-Type-Options", "nosniff");
    http_resp_header(req, "X-Frame-Options", "DENY");
    http_resp_header(req, "Referrer-Policy", "no-referrer");
    http_resp_header(req, "Cache-Control", "no-cache");
}

static void serve(struct http_req *req, const char *name)
{
    const struct ui_file *f = ui_file_find(name);
    security_headers(req);
    if (!f) {
        http_respond_error(req, 404, NULL, "not_found", NULL, "No such dashboard file.");
        return;
    }
    http_resp_header(req, "ETag", f->etag);
    if (http_etag_matches(http_req_header(req, "If-None-Match"), f->etag))
        http_respond(req, 304, NULL, NULL, 0);
    else
        http_respond(req, 200, f->content_type, f->data, f->len);
}

static void ui_redirect(struct http_req *req, void *arg)
{
    security_headers(req);
    http_resp_header(req, "Location", "/ui/");
    http_respond(req, 301, NULL, NULL, 0);
}

static void ui_index(struct http_req *req, void *arg)
{
    serve(req, "");
}

static void ui_named(struct http_req *req, void *arg)
{
    serve(req, http_req_param(req, "name"));
}

int ui_routes_add(struct http_server *srv)
{
    int rc;
    if ((rc = http_server_route(srv, &(struct http_route){"GET", "/ui", ui_redirect, NULL, 0, NULL})) ||
        (rc = http_server_route(srv, &(struct http_route){"GET", "/ui/", ui_index, NULL, 0, NULL})) ||
        (rc = http_server_route(srv, &(struct http_route){"GET", "/ui/{name}", ui_named, NULL, 0, NULL})))
        return rc;
    return 0;
}
