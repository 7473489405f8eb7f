/* Unit tests: the worker protocol client's results outbox (worker/client.h)
 * against a scripted loopback server - results stay until jobd answers for
 * them (transport failure, 5xx), leave on per-line statuses, 404 and 409,
 * are resent line by line after a 400; and the model id derivation of
 * worker/serve.h. The end-to-end behaviour against the real jobd is in
 * tests/py/test_jobworker.py. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"
#include "worker/client.h"
#include "worker/serve.h"
#include "worker/engine/model.h"
#include "tests/th.h"

struct step {
    int status;           /* 0: close the connection without answering */
    const char *body;
};

struct server {
    int fd, port;
    const struct step *steps;
    int n_steps, served;
    char req[8][4096];    /* head of each request (up to 8) */
    pthread_t thread;
};

static void *server_main(void *arg)
{
    struct server *s = arg;
    for (int i = 0; i < s->n_steps; i++) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            break;
        char buf[65536];
        size_t used = 0;
        for (;;) {
            ssize_t r = read(c, buf + used, sizeof buf - 1 - used);
            if (r <= 0)
                break;
            used += (size_t)r;
            buf[used] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (end) {
                const char *cl = strcasestr(buf, "content-length:");
                size_t want = cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
                if (used >= (size_t)(end + 4 - buf) + want) {
                    if (i < 8)
                        snprintf(s->req[i], sizeof s->req[i], "%.*s", (int)(end - buf), buf);
                    break;
                }
            }
        }
        const struct step *st = &s->steps[i];
        if (st->status) {
            char head[256];
            int n = snprintf(head, sizeof head,
                             "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                             st->status, strlen(st->body));
            if (write(c, head, (size_t)n) >= 0 && write(c, st->body, strlen(st->body)) < 0)
                n = 0;
        }
        s->served++;
        close(c);
    }
    return NULL;
}

static void server_start(struct server *s, const struct step *steps, int n)
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

static void server_stop(struct server *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

static struct wcl *client_for(int port)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct wcl_opts o = {url, "tok-1", 5000, 0};
    struct wcl *c = NULL;
    if (wcl_new(&o, &c))
        return NULL;
    return c;
}

struct acks {
    int n;
    char rid[8][64];
    char status[8][32];
};

static void on_ack(void *ctx, const char *lease_id, const char *request_id, const char *status)
{
    struct acks *a = ctx;
    (void)lease_id;
    if (a->n < 8) {
        snprintf(a->rid[a->n], sizeof a->rid[0], "%s", request_id);
        snprintf(a->status[a->n], sizeof a->status[0], "%s", status);
    }
    a->n++;
}

static const char *ack_of(const struct acks *a, const char *rid)
{
    for (int i = 0; i < a->n && i < 8; i++)
        if (strcmp(a->rid[i], rid) == 0)
            return a->status[i];
    return "";
}

static void add3(struct wcl_outbox *ob)
{
    static const char l1[] = "{\"request_id\":\"req_1\",\"status\":\"success\"}";
    static const char l2[] = "{\"request_id\":\"req_2\",\"status\":\"success\"}";
    static const char l3[] = "{\"request_id\":\"req_3\",\"status\":\"success\"}";
    wcl_outbox_add(ob, "lease_A", "req_1", l1, strlen(l1));
    wcl_outbox_add(ob, "lease_B", "req_2", l2, strlen(l2));
    wcl_outbox_add(ob, "lease_A", "req_3", l3, strlen(l3));
}

TEST(wcl_outbox_keeps_results_until_answered)
{
    static const struct step steps[] = {
        {503, "{\"error\":{\"code\":\"busy\"}}"},
        {0, ""},   /* connection dropped without an answer */
        {200, "{\"lease_id\":\"lease_A\",\"results\":[{\"request_id\":\"req_1\",\"status\":\"ok\"},"
              "{\"request_id\":\"req_3\",\"status\":\"duplicate\"}]}"},
        {409, "{\"lease_id\":\"lease_B\",\"results\":[{\"request_id\":\"req_2\",\"status\":\"stale\"}],"
              "\"error\":{\"code\":\"stale_lease\"}}"},
    };
    struct server s;
    server_start(&s, steps, 4);
    struct wcl *c = client_for(s.port);
    CHECK(c != NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), ERR_HTTP);  /* 503 */
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a) != 0);               /* no answer */
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), 0);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    CHECK_EQ_INT(a.n, 3);
    CHECK_EQ_STR(ack_of(&a, "req_1"), "ok");
    CHECK_EQ_STR(ack_of(&a, "req_3"), "duplicate");
    CHECK_EQ_STR(ack_of(&a, "req_2"), "stale");
    /* the chunks: one per lease, zstd, with the worker's headers and token */
    CHECK(strstr(s.req[2], "POST /v1/worker/results ") != NULL);
    CHECK(strcasestr(s.req[2], "X-Lease-Id: lease_A") != NULL);
    CHECK(strcasestr(s.req[2], "X-Worker-Id: wrk_1") != NULL);
    CHECK(strcasestr(s.req[2], "Content-Encoding: zstd") != NULL);
    CHECK(strcasestr(s.req[2], "Authorization: Bearer tok-1") != NULL);
    CHECK(strcasestr(s.req[3], "X-Lease-Id: lease_B") != NULL);
    wcl_outbox_free(ob);
    wcl_free(c);
    server_stop(&s);
}

TEST(wcl_outbox_unreachable_keeps_everything)
{
    struct wcl *c = client_for(1);
    CHECK(c != NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), ERR_CONN);
    CHECK_EQ_INT(wcl_outbox_count(ob), 3);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(wcl_outbox_drop_lease(ob, "lease_A"), 2);
    CHECK_EQ_INT(wcl_outbox_count(ob), 1);
    wcl_outbox_free(ob);
    wcl_free(c);
}

TEST(wcl_outbox_gone_lease_and_line_by_line_resend)
{
    static const struct step steps[] = {
        {400, "{\"error\":{\"code\":\"invalid_results\",\"line\":2}}"},   /* chunk A refused */
        {200, "{\"results\":[{\"request_id\":\"req_1\",\"status\":\"ok\"}]}"},
        {400, "{\"error\":{\"code\":\"invalid_results\",\"line\":1}}"},   /* req_3 alone */
        {200, "{\"results\":[{\"request_id\":\"req_3\",\"status\":\"retry\"}]}"}, /* as transient */
        {404, "{\"error\":{\"code\":\"not_found\"}}"},                     /* lease B gone */
    };
    struct server s;
    server_start(&s, steps, 5);
    struct wcl *c = client_for(s.port);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    add3(ob);
    struct acks a = {0};
    CHECK_EQ_INT(wcl_outbox_flush(ob, c, "wrk_1", on_ack, &a), 0);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    CHECK_EQ_INT(a.n, 3);
    CHECK_EQ_STR(ack_of(&a, "req_1"), "ok");
    CHECK_EQ_STR(ack_of(&a, "req_3"), "retry");
    CHECK_EQ_STR(ack_of(&a, "req_2"), "gone");
    CHECK_EQ_INT(s.served, 5);
    wcl_outbox_free(ob);
    wcl_free(c);
    server_stop(&s);
}

TEST(wcl_rejects_bad_input)
{
    struct wcl *c = NULL;
    struct wcl_opts o = {"ftp://x", NULL, 0, 0};
    CHECK_EQ_INT(wcl_new(&o, &c), ERR_INVAL);
    o.base_url = NULL;
    CHECK_EQ_INT(wcl_new(&o, &c), ERR_INVAL);
    CHECK(c == NULL);
    struct wcl_outbox *ob;
    CHECK_EQ_INT(wcl_outbox_new(&ob), 0);
    CHECK_EQ_INT(wcl_outbox_add(ob, "lease_A", "req_1", "{}\n{}", 5), ERR_INVAL);
    CHECK_EQ_INT(wcl_outbox_add(ob, "", "req_1", "{}", 2), ERR_INVAL);
    char long_id[200];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    CHECK_EQ_INT(wcl_outbox_add(ob, long_id, "req_1", "{}", 2), ERR_INVAL);
    CHECK_EQ_INT(wcl_outbox_count(ob), 0);
    wcl_outbox_free(ob);
}

TEST(serve_model_id_from_name_or_file)
{
    char id[160];
    CHECK_EQ_INT(serve_model_id(NULL, "/models/My-Model.Q4_1.gguf", id, sizeof id), 0);
    CHECK_EQ_STR(id, "My-Model.Q4_1");
    CHECK_EQ_INT(serve_model_id(NULL, "plain", id, sizeof id), 0);
    CHECK_EQ_STR(id, "plain");
    CHECK_EQ_INT(serve_model_id(NULL, "/x/.gguf", id, sizeof id), 0);
    CHECK_EQ_STR(id, ".gguf");
    CHECK_EQ_INT(serve_model_id(NULL, "/x/abc.gguf", id, 3), ERR_TOOBIG);
    struct model *m = NULL;
    char err[256];
    CHECK_EQ_INT(model_load("tests/fixtures/model/llama_tied.q8_0.gguf", &m, err, sizeof err), 0);
    struct gguf_str gs;
    int has_name = gguf_get_str(m->gguf, "general.name", &gs) == 0;
    CHECK_EQ_INT(serve_model_id(m, "tests/fixtures/model/llama_tied.q8_0.gguf", id, sizeof id), 0);
    if (has_name)
        CHECK(strlen(id) == gs.len && memcmp(id, gs.ptr, gs.len) == 0);
    else
        CHECK_EQ_STR(id, "llama_tied.q8_0");
    model_free(m);
}
