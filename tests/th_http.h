/*
 * th_http.h - a scripted loopback HTTP server for client tests.
 *
 *   static const struct th_http_step steps[] = {{503, NULL, "busy", 0, 0}, {200, NULL, "ok", 0, 0}};
 *   struct th_http s;
 *   th_http_start(&s, steps, 2);
 *   ... a client talks to http://127.0.0.1:<s.port>/ ...
 *   th_http_stop(&s);
 *   CHECK(strstr(s.last_request, "\r\n\r\n{\"a\":1}") != NULL);
 *
 * A thread accepts one connection per step, reads the request head and its
 * Content-Length body, waits delay_ms, answers with the step's status,
 * Content-Length and "Connection: close" headers, the step's extra header
 * lines and its body (body_repeat times), and closes the connection. A
 * status of 0 closes without answering. The thread ends after the last
 * step or when th_http_stop closes the listening socket. Aborts when the
 * socket cannot be set up. SIGPIPE is ignored (a client may hang up first).
 */
#ifndef TESTS_TH_HTTP_H
#define TESTS_TH_HTTP_H

#include <pthread.h>
#include <stddef.h>

/* Extra header line of a JSON answer. */
#define TH_HTTP_JSON "Content-Type: application/json\r\n"

#define TH_HTTP_HEADS 8               /* request heads kept, one per step */
#define TH_HTTP_REQUEST_BYTES 65536   /* what is kept of the last request */

struct th_http_step {
    int status;          /* 0: close the connection without answering */
    const char *headers; /* extra header lines, each ending in \r\n, or NULL */
    const char *body;
    int delay_ms;        /* before answering */
    size_t body_repeat;  /* send body this many times (big responses); 0 = once */
};

struct th_http {
    int fd, port;
    const struct th_http_step *steps;
    int n_steps, served;
    char last_request[TH_HTTP_REQUEST_BYTES]; /* head and body of the last request */
    char head[TH_HTTP_HEADS][4096];           /* head of the first 8 requests, no blank line */
    pthread_t thread;
};

/* Listen on an ephemeral loopback port (s->port) and serve steps[0..n). */
void th_http_start(struct th_http *s, const struct th_http_step *steps, int n);

/* Stop listening and join the thread. */
void th_http_stop(struct th_http *s);

#endif
