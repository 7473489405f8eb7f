/* th_http.c - the scripted loopback HTTP server of th_http.h. */
#include "tests/th_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

/* Read the request head and a Content-Length body into s->last_request;
 * a body past its TH_HTTP_REQUEST_BYTES is read and dropped, so the client
 * always sends all of it before the answer. */
static void read_request(struct th_http *s, int c, int i)
{
    size_t used = 0, cap = sizeof s->last_request - 1;
    char *req = s->last_request;
    for (;;) {
        ssize_t r = read(c, req + used, cap - used);
        if (r <= 0)
            break;
        used += (size_t)r;
        req[used] = '\0';
        char *end = strstr(req, "\r\n\r\n");
        if (!end)
            continue;
        const char *cl = strcasestr(req, "content-length:");
        size_t want = (size_t)(end + 4 - req) + (cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0);
        if (used < want && used < cap)
            continue;
        if (i < TH_HTTP_HEADS)
            snprintf(s->head[i], sizeof s->head[i], "%.*s", (int)(end - req), req);
        static char drop[65536];
        if (strcasestr(req, "expect: 100-continue") && used < want && write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
            break;
        while (used < want && (r = read(c, drop, want - used < sizeof drop ? want - used : sizeof drop)) > 0)
            used += (size_t)r;
        break;
    }
}

static void *server_main(void *arg)
{
    struct th_http *s = arg;
    for (int i = 0; i < s->n_steps; i++) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            break;
        read_request(s, c, i);
        const struct th_http_step *st = &s->steps[i];
        if (st->delay_ms)
            clock_sleep_ms((uint64_t)st->delay_ms);
        if (st->status) {
            size_t reps = st->body_repeat ? st->body_repeat : 1, blen = strlen(st->body);
            char head[512];
            int n = snprintf(head, sizeof head,
                             "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                             st->status, blen * reps, st->headers ? st->headers : "");
            if (write(c, head, (size_t)n) < 0)
                reps = 0;
            for (size_t k = 0; k < reps; k++)
                if (write(c, st->body, blen) < 0)
                    break;
        }
        s->served++;
        close(c);
    }
    return NULL;
}

void th_http_start(struct th_http *s, const struct th_http_step *steps, int n)
{
    memset(s, 0, sizeof *s);
    signal(SIGPIPE, SIG_IGN);
    s->steps = steps;
    s->n_steps = n;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) || listen(s->fd, 16) ||
        getsockname(s->fd, (struct sockaddr *)&a, &len))
        abort();
    s->port = ntohs(a.sin_port);
    pthread_create(&s->thread, NULL, server_main, s);
}

void th_http_stop(struct th_http *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}
