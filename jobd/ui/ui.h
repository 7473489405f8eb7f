/*
 * ui.h - the web dashboard's static files, served by jobd under /ui/.
 *
 * Design. The dashboard is three files (jobd/ui/assets/: index.html,
 * app.css, app.js; no external library, no build step) embedded into the
 * binary at build time (scripts/embed-c --table -> build/gen/ui_assets.c).
 * The page is a client of the public API: its script calls the same /v1
 * routes as any client, with the key the user typed (kept in the
 * browser's sessionStorage), so this module holds no data and no secret
 * and needs no database (spec/ui.md lists each view's API calls).
 *
 * Routes: GET /ui answers 301 to /ui/; GET /ui/ is index.html; GET
 * /ui/{name} one of the files, else 404 (OpenAI's error envelope). Every
 * answer carries a strict Content-Security-Policy (default-src 'self': no
 * inline script or style, no other origin, no framing), nosniff,
 * Referrer-Policy no-referrer, Cache-Control: no-cache and an ETag (a hash
 * of the file): If-None-Match with it answers 304 with no body.
 *
 * Threads: ui_routes_add and the handlers run on the loop thread; the
 * lookups are pure (any thread).
 */
#ifndef JOBD_UI_H
#define JOBD_UI_H

#include <stddef.h>

struct http_server;

/* The Content-Security-Policy of every /ui answer. */
#define UI_CSP "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " \
               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "    \
               "frame-ancestors 'none'"

struct ui_file {
    const char *name;         /* "app.js" */
    const char *content_type; /* "text/javascript; charset=utf-8" */
    const char *data;         /* the bytes (embedded, static) */
    size_t len;
    char etag[24];            /* "\"<16 hex digits>\"" */
};

/* The file named name ("" is index.html), or NULL when there is none
 * (also for any name with a '/' or a leading '.'). Pure; any thread. */
const struct ui_file *ui_file_find(const char *name);

/* Total bytes of every embedded file (the page weight; spec/ui.md caps it
 * at 200 KB). Can't fail. */
size_t ui_total_bytes(void);

/* Register GET /ui, /ui/ and /ui/{name} on srv. 0 or http_server_route's
 * error. */
int ui_routes_add(struct http_server *srv);

#endif
