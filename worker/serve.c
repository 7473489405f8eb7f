/* serve.c - the jobworker process serving jobd (see serve.h). */
#include "worker/serve.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/id.h"
#include "common/js.h"
#include "common/log.h"
#include "common/wproto.h"
#include "kernels/kn.h"
#include "worker/client.h"
#include "worker/engine/engine.h"
#include "text/gguf.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"
#include "worker/engine/sched.h"
#include "worker/engine/embed.h"
#include "worker/run/embed_req.h"
#include "worker/run/request.h"
#include "text/tok.h"

#define WL_MAX_NAME 128
#define WL_LONG_POLL_MS 2000
#define WL_TICK_MS 100
#define WL_FINAL_UPLOAD_MS 15000 /* after the engine stopped: last uploads/releases */
#define WL_EMBED_SLOTS 16                /* sequence slots of the embeddings context */
#define WL_EMBED_BATCH 512               /* tokens per embeddings step */
#define WL_EMBED_PACK 256                /* embeddings requests embedded together at most */

enum item_state {
    IT_QUEUED,     /* leased, not yet given to the scheduler */
    IT_RUNNING,    /* in the scheduler */
    IT_DONE,       /* result in the outbox, waiting for jobd's answer */
    IT_RELEASE,    /* to be released (drain, cancel) */
};

struct lease {
    char id[ID_MAX];
    uint64_t t_start_ns;
    uint64_t next_hb_ms;           /* monotonic ms of the next heartbeat */
    int n_open;                    /* its items still in the table */
    int n_done, n_errors, n_released;
    int64_t prompt_tokens, completion_tokens;
};

struct item {
    char rid[ID_MAX];
    struct lease *ls;
    json_t *body;                  /* owned reference */
    enum wproto_endpoint ep;       /* its url; NONE: one this worker does not serve */
    enum item_state state;
    uint64_t t_leased_ns, t_added_ns;
};

struct wl {
    const struct serve_opts *o;
    const char *endpoints[4];      /* urls served, declared at registration (see serve.h) */
    size_t n_endpoints;
    int encoder;                   /* an encoder model: /v1/embeddings only, no scheduler */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct item **items;
    size_t n_items, cap_items;
    struct lease **leases;
    size_t n_leases, cap_leases;
    int draining;
    int engine_done;               /* the engine thread stopped stepping */
    int engine_failed;
    int comm_exit;                 /* the communication thread should stop now */
    size_t n_queued;               /* items in IT_QUEUED */
    size_t n_waiting;              /* sequences in the scheduler waiting for a slot (engine) */
    char (*stop_ids)[ID_MAX];      /* requests in the scheduler to drop (engine: sched_cancel) */
    struct sched_stats st;         /* the scheduler's counters, copied by the engine each pass */
    size_t n_stop, cap_stop;
    /* totals for heartbeat progress */
    int64_t total_completion, total_done;
    uint64_t t0_ns;
    /* set once at start */
    struct wcl *c;
    struct wcl_outbox *ob;
    char model_id[WL_MAX_NAME + 1];
    char model_sha256[2 * SHA256_LEN + 1]; /* of the model file's bytes; "" if unreadable */
    char name[WL_MAX_NAME + 1];
    char worker_id[ID_MAX];        /* communication thread only */
    int64_t kv_tokens;
    int pack_size, lease_seconds;
};

/* ---- table (caller holds mu) ---------------------------------------------- */

static struct item *item_find(struct wl *w, const char *rid, size_t *idx)
{
    for (size_t i = 0; i < w->n_items; i++)
        if (strcmp(w->items[i]->rid, rid) == 0) {
            if (idx)
                *idx = i;
            return w->items[i];
        }
    return NULL;
}

static void lease_finish(struct wl *w, struct lease *ls)
{
    double s = (double)(clock_mono_ns() - ls->t_start_ns) * 1e-9;
    if (s <= 0)
        s = 1e-9;
    log_info("pack %s: %d requests done (%d errors), %d released, %lld prompt + %lld completion "
             "tokens in %.2f s: %.1f tok/s (%.1f completion tok/s); KV cache %.0f%% used on "
             "average, %.0f%% peak; engine so far: %lld prompt positions computed, %lld from "
             "the prefix cache",
             ls->id, ls->n_done, ls->n_errors, ls->n_released, (long long)ls->prompt_tokens,
             (long long)ls->completion_tokens, s,
             (double)(ls->prompt_tokens + ls->completion_tokens) / s,
             (double)ls->completion_tokens / s, w->st.kv_util_avg * 100, w->st.kv_util_peak * 100,
             (long long)w->st.prefill_computed, (long long)w->st.prefix_reused);
    for (size_t i = 0; i < w->n_leases; i++)
        if (w->leases[i] == ls) {
            w->leases[i] = w->leases[--w->n_leases];
            break;
        }
    free(ls);
}

/* Remove item i from the table (its lease ends with its last item). */
static void item_remove(struct wl *w, size_t i)
{
    struct item *it = w->items[i];
    if (it->state == IT_QUEUED)
        w->n_queued--;
    w->items[i] = w->items[--w->n_items];
    struct lease *ls = it->ls;
    json_decref(it->body);
    free(it);
    if (--ls->n_open == 0)
        lease_finish(w, ls);
}

static void item_set(struct wl *w, struct item *it, enum item_state st)
{
    if (it->state == IT_QUEUED && st != IT_QUEUED)
        w->n_queued--;
    else if (it->state != IT_QUEUED && st == IT_QUEUED)
        w->n_queued++;
    it->state = st;
}

/* Ask the engine to drop request rid from the scheduler (it is cancelled,
 * released or its lease is gone while it runs), so it stops generating and
 * frees its KV blocks before the next step. Caller holds mu. Without memory
 * the request just runs to its end and its result is ignored. */
static void stop_in_engine(struct wl *w, const char *rid)
{
    if (w->n_stop == w->cap_stop) {
        size_t nc = w->cap_stop ? w->cap_stop * 2 : 64;
        char(*p)[ID_MAX] = realloc(w->stop_ids, nc * sizeof *p);
        if (!p)
            return;
        w->stop_ids = p;
        w->cap_stop = nc;
    }
    snprintf(w->stop_ids[w->n_stop++], ID_MAX, "%s", rid);
    pthread_cond_broadcast(&w->cv);
}

static struct lease *lease_find(struct wl *w, const char *id)
{
    for (size_t i = 0; i < w->n_leases; i++)
        if (strcmp(w->leases[i]->id, id) == 0)
            return w->leases[i];
    return NULL;
}

/* The lease is gone on jobd's side: forget everything it held. */
static void lease_gone(struct wl *w, const char *lease_id)
{
    size_t dropped = wcl_outbox_drop_lease(w->ob, lease_id);
    struct lease *ls = lease_find(w, lease_id);
    if (!ls)
        return;
    log_warn("lease %s is gone on jobd's side; dropping its %d request(s) (%zu result(s))",
             lease_id, ls->n_open, dropped);
    for (size_t i = w->n_items; i-- > 0;) {
        if (w->items[i]->ls != ls)
            continue;
        /* (a line of it being uploaded right now gets an ack that finds no item) */
        int last = ls->n_open == 1;
        if (w->items[i]->state == IT_RUNNING)
            stop_in_engine(w, w->items[i]->rid);
        item_remove(w, i);
        if (last)
            break;
    }
}

/* ---- results lines ----------------------------------------------------------- */

/* The results line of r (common/wproto.h), timings from the scheduler's and
 * the table's clocks. */
static json_t *result_line(const struct oreq_result *r, const struct item *it)
{
    double queue_ms = (double)(it->t_added_ns - it->t_leased_ns) * 1e-6 + r->queue_s * 1e3;
    struct wproto_result l;
    memset(&l, 0, sizeof l);
    l.request_id = it->rid;
    l.queue_ms = (int64_t)(queue_ms + 0.5);
    l.prefill_ms = (int64_t)(r->prefill_s * 1e3 + 0.5);
    l.decode_ms = (int64_t)(r->decode_s * 1e3 + 0.5);
    l.device_ms = (int64_t)(r->cpu_s * 1e3 + 0.5);
    if (r->status >= 200 && r->status < 300) {
        l.kind = WPROTO_RESULT_SUCCESS;
        l.status_code = r->status;
        l.body = r->body;
        l.prompt_tokens = r->prompt_tokens;
        l.completion_tokens = r->completion_tokens;
        l.cached_tokens = r->cached_tokens <= r->prompt_tokens ? r->cached_tokens : r->prompt_tokens;
        return wproto_result_json(&l);
    }
    json_t *e = json_object_get(r->body, "error");
    if (e) {
        js_get_str(e, "message", &l.message);
        js_get_str(e, "code", &l.code);
        js_get_str(e, "param", &l.param);
    }
    if (!l.message || !l.message[0])
        l.message = "invalid request";
    l.kind = WPROTO_RESULT_INVALID;
    l.status_code = r->status >= 400 && r->status < 500 ? r->status : 400;
    return wproto_result_json(&l);
}

static int outbox_put(struct wl *w, const struct item *it, json_t *line)
{
    char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    json_decref(line);
    if (!text)
        return ERR_NOMEM;
    int rc = wcl_outbox_add(w->ob, it->ls->id, it->rid, text, strlen(text));
    free(text);
    return rc;
}

/* Scheduler callback (engine thread). */
static void on_result(void *ctx, const struct oreq_result *r)
{
    struct wl *w = ctx;
    pthread_mutex_lock(&w->mu);
    struct item *it = item_find(w, r->id, NULL);
    if (!it || it->state != IT_RUNNING) { /* cancelled, released or its lease is gone */
        pthread_mutex_unlock(&w->mu);
        return;
    }
    int rc = outbox_put(w, it, result_line(r, it));
    if (rc) {
        /* no memory for the line: give the request back instead of losing it */
        log_error("%s: cannot keep the result (%s); releasing it", it->rid, err_msg(rc));
        item_set(w, it, IT_RELEASE);
    } else {
        item_set(w, it, IT_DONE);
        struct lease *ls = it->ls;
        ls->n_done++;
        if (r->status != 200)
            ls->n_errors++;
        ls->prompt_tokens += r->prompt_tokens;
        ls->completion_tokens += r->completion_tokens;
        w->total_completion += r->prompt_tokens + r->completion_tokens;
        w->total_done++;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Outbox acknowledgement (communication thread). */
static void on_ack(void *ctx, const char *lease_id, const char *request_id, const char *status)
{
    struct wl *w = ctx;
    (void)lease_id;
    if (strcmp(status, "ok") != 0 && strcmp(status, "duplicate") != 0)
        log_warn("%s: result answered '%s'", request_id, status);
    pthread_mutex_lock(&w->mu);
    size_t i;
    struct item *it = item_find(w, request_id, &i);
    if (it && it->state == IT_DONE)
        item_remove(w, i);
    pthread_mutex_unlock(&w->mu);
}

/* ---- communication thread -------------------------------------------------------- */

static int stopping(const struct wl *w)
{
    return *w->o->stop != 0;
}

/* Sleep up to ms, waking early on a signal of the condition variable. Holds mu. */
static void wait_ms_locked(struct wl *w, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* The SHA-256 of the file at path, as lowercase hex into out: what jobd's
 * result reuse keys on (the same bytes give the same bits). "" when the
 * file cannot be read (the worker then gets no reuse). */
static void file_sha256(const char *path, char out[2 * SHA256_LEN + 1])
{
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    struct sha256_ctx *c = f ? sha256_new() : NULL;
    if (!c) {
        if (f)
            fclose(f);
        return;
    }
    static char chunk[1 << 20];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = sha256_update(c, chunk, n);
    int bad = ferror(f);
    fclose(f);
    uint8_t d[SHA256_LEN];
    if (rc || bad) {
        sha256_free(c);
        return;
    }
    if (sha256_final(c, d) == 0)
        hex_encode(d, SHA256_LEN, out);
}

static int do_register(struct wl *w)
{
    const struct serve_opts *o = w->o;
    struct wcl_answer a = {0, NULL};
    int rc = wcl_register(w->c, w->name, o->device ? o->device : "cpu", w->model_id, o->aliases,
                          o->n_aliases, w->endpoints, w->n_endpoints, w->kv_tokens, w->pack_size,
                          o->hourly_cost_declared || o->hourly_cost_micros > 0 ? o->hourly_cost_micros : -1,
                          w->model_sha256, &a);
    if (rc) {
        wcl_answer_release(&a);
        return rc;
    }
    const char *id = NULL;
    if (a.status == 200 && a.body && js_get_str(a.body, "worker_id", &id) == 0 &&
        strlen(id) < sizeof w->worker_id) {
        memcpy(w->worker_id, id, strlen(id) + 1);
        log_info("registered with jobd as %s (%s), model '%s'", w->worker_id, w->name,
                 w->model_id);
        rc = 0;
    } else {
        log_error("register: jobd answered %ld %s", a.status, wcl_answer_code(&a));
        rc = a.status == 401 ? ERR_AUTH : ERR_HTTP;
    }
    wcl_answer_release(&a);
    return rc;
}

/* Add a lease answer's requests to the table. */
static void take_lease(struct wl *w, const struct wproto_lease *l)
{
    if (l->n == 0)
        return; /* nothing usable: it lapses with the lease */
    struct lease *ls = calloc(1, sizeof *ls);
    if (!ls)
        return; /* no memory: the lease lapses and jobd requeues it */
    memcpy(ls->id, l->lease_id, strlen(l->lease_id) + 1);
    ls->t_start_ns = clock_mono_ns();
    ls->next_hb_ms = clock_mono_ms() + (uint64_t)w->lease_seconds * 1000 / 3;
    size_t n = l->n;
    pthread_mutex_lock(&w->mu);
    int ok = 1;
    if (w->n_leases == w->cap_leases) {
        size_t nc = w->cap_leases ? w->cap_leases * 2 : 8;
        struct lease **p = realloc(w->leases, nc * sizeof *p);
        if (p) {
            w->leases = p;
            w->cap_leases = nc;
        } else
            ok = 0;
    }
    if (ok && w->n_items + n > w->cap_items) {
        size_t nc = w->cap_items ? w->cap_items : 256;
        while (nc < w->n_items + n)
            nc *= 2;
        struct item **p = realloc(w->items, nc * sizeof *p);
        if (p) {
            w->items = p;
            w->cap_items = nc;
        } else
            ok = 0;
    }
    if (!ok) {
        pthread_mutex_unlock(&w->mu);
        free(ls);
        return;
    }
    w->leases[w->n_leases++] = ls;
    uint64_t now = clock_mono_ns();
    for (size_t i = 0; i < n; i++) {
        const struct wproto_lease_req *q = &l->reqs[i];
        struct item *it = calloc(1, sizeof *it);
        if (!it)
            break;
        memcpy(it->rid, q->request_id, strlen(q->request_id) + 1);
        it->ls = ls;
        it->body = json_incref(q->body);
        it->ep = q->ep;
        it->state = w->draining ? IT_RELEASE : IT_QUEUED;
        if (it->state == IT_QUEUED)
            w->n_queued++;
        it->t_leased_ns = now;
        w->items[w->n_items++] = it;
        ls->n_open++;
    }
    if (ls->n_open == 0) { /* nothing usable: let it lapse */
        w->n_leases--;
        free(ls);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Ask for the next pack. Returns the delay before the next ask (ms). */
static long do_lease(struct wl *w, int idle)
{
    struct wcl_answer a = {0, NULL};
    long wait = idle ? WL_LONG_POLL_MS : 0;
    int rc = wcl_lease(w->c, w->worker_id, w->model_id, w->pack_size, 0, w->lease_seconds, wait,
                       &a);
    long next = 0;
    if (rc) {
        log_warn("lease: jobd unreachable (%s)", err_msg(rc));
        next = 1000;
    } else if (a.status == 200 && a.body) {
        struct wproto_lease l;
        memset(&l, 0, sizeof l);
        int prc = wproto_lease_parse(a.body, &l); /* a malformed answer: its lease lapses */
        if (prc == 0 && l.lease_id)
            take_lease(w, &l);
        else if (prc == 0) {
            int64_t ra = l.retry_after_ms;
            next = idle ? 0 : (long)(ra > 0 && ra < 60000 ? ra : 1000);
        }
        wproto_lease_release(&l);
    } else if (a.status == 404) {
        log_warn("lease: jobd does not know worker %s; registering again", w->worker_id);
        w->worker_id[0] = '\0';
    } else {
        log_warn("lease: jobd answered %ld %s", a.status, wcl_answer_code(&a));
        next = 1000;
    }
    wcl_answer_release(&a);
    return next;
}

/* Heartbeat every lease that is due. */
static void do_heartbeats(struct wl *w, int force)
{
    uint64_t now = clock_mono_ms();
    char due[64][ID_MAX];
    int64_t completed[64];
    size_t n = 0;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n_leases && n < 64; i++) {
        struct lease *ls = w->leases[i];
        if (force || ls->next_hb_ms <= now) {
            memcpy(due[n], ls->id, ID_MAX);
            completed[n++] = ls->n_done;
        }
    }
    double el = (double)(clock_mono_ns() - w->t0_ns) * 1e-9;
    double tps = el > 0 ? (double)w->total_completion / el : 0;
    pthread_mutex_unlock(&w->mu);
    for (size_t k = 0; k < n; k++) {
        struct wcl_answer a = {0, NULL};
        int rc = wcl_heartbeat(w->c, w->worker_id, due[k], w->lease_seconds, completed[k], tps, &a);
        pthread_mutex_lock(&w->mu);
        struct lease *ls = lease_find(w, due[k]);
        if (rc || a.status >= 500) {
            log_warn("heartbeat %s: %s", due[k], rc ? err_msg(rc) : "jobd answered 5xx");
            if (ls)
                ls->next_hb_ms = clock_mono_ms() + 1000;
        } else if (a.status == 200) {
            if (ls)
                ls->next_hb_ms = clock_mono_ms() + (uint64_t)w->lease_seconds * 1000 / 3;
            json_t *cancelled = wproto_hb_answer_cancelled(a.body);
            size_t i;
            json_t *v;
            json_array_foreach(cancelled, i, v) {
                const char *rid = json_string_value(v);
                struct item *it = rid ? item_find(w, rid, NULL) : NULL;
                if (it && (it->state == IT_QUEUED || it->state == IT_RUNNING)) {
                    log_info("%s: cancelled by jobd", rid);
                    if (it->state == IT_RUNNING)
                        stop_in_engine(w, it->rid);
                    item_set(w, it, IT_RELEASE);
                }
            }
        } else if (a.status == 404 || a.status == 409) {
            lease_gone(w, due[k]);
        } else {
            log_warn("heartbeat %s: jobd answered %ld %s", due[k], a.status,
                     wcl_answer_code(&a));
            if (ls)
                ls->next_hb_ms = clock_mono_ms() + 1000;
        }
        pthread_mutex_unlock(&w->mu);
        wcl_answer_release(&a);
    }
}

/* Release the items marked IT_RELEASE, one call per lease. Returns 0 or a
 * transport error (they stay marked). */
static int do_releases(struct wl *w)
{
    for (;;) {
        char lease_id[ID_MAX] = "";
        const char **ids = NULL;
        size_t n = 0;
        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < w->n_items; i++)
            if (w->items[i]->state == IT_RELEASE) {
                memcpy(lease_id, w->items[i]->ls->id, ID_MAX);
                break;
            }
        if (lease_id[0]) {
            ids = malloc(w->n_items * sizeof *ids);
            for (size_t i = 0; ids && i < w->n_items; i++)
                if (w->items[i]->state == IT_RELEASE && strcmp(w->items[i]->ls->id, lease_id) == 0)
                    ids[n++] = w->items[i]->rid; /* only the comm thread removes items */
        }
        pthread_mutex_unlock(&w->mu);
        if (!lease_id[0])
            return 0;
        if (!ids)
            return ERR_NOMEM;
        struct wcl_answer a = {0, NULL};
        int rc = wcl_release(w->c, w->worker_id, lease_id, ids, n, &a);
        free(ids);
        if (rc || a.status >= 500) {
            log_warn("release %s: %s", lease_id, rc ? err_msg(rc) : "jobd answered 5xx");
            wcl_answer_release(&a);
            return rc ? rc : ERR_HTTP;
        }
        if (a.status != 200)
            log_warn("release %s: jobd answered %ld %s", lease_id, a.status, wcl_answer_code(&a));
        else
            log_info("released %zu request(s) of %s", n, lease_id);
        wcl_answer_release(&a);
        pthread_mutex_lock(&w->mu);
        for (size_t i = w->n_items; i-- > 0;) {
            struct item *it = w->items[i];
            if (it->state == IT_RELEASE && strcmp(it->ls->id, lease_id) == 0) {
                int last = it->ls->n_open == 1;
                it->ls->n_released++;
                item_remove(w, i);
                if (last)
                    break;
            }
        }
        pthread_mutex_unlock(&w->mu);
    }
}

static void *comm_main(void *arg)
{
    struct wl *w = arg;
    long reg_backoff = 250;
    uint64_t next_lease = 0, next_flush = 0, final_deadline = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        if (stopping(w) && !w->draining)
            pthread_cond_broadcast(&w->cv); /* the engine starts the drain */
        int engine_done = w->engine_done, draining = w->draining || stopping(w);
        size_t n_items = w->n_items, n_queued = w->n_queued + w->n_waiting;
        int comm_exit = w->comm_exit;
        pthread_mutex_unlock(&w->mu);
        uint64_t now = clock_mono_ms();
        if (comm_exit)
            break;
        if (engine_done && !final_deadline)
            final_deadline = now + WL_FINAL_UPLOAD_MS;
        if (engine_done && ((n_items == 0 && wcl_outbox_count(w->ob) == 0) || now > final_deadline))
            break;
        if (!w->worker_id[0]) {
            if (draining && n_items == 0)
                break;
            int rc = do_register(w);
            if (rc) {
                if (rc != ERR_HTTP && rc != ERR_AUTH)
                    log_warn("register: jobd unreachable (%s); retrying in %ld ms", err_msg(rc),
                             reg_backoff);
                pthread_mutex_lock(&w->mu);
                wait_ms_locked(w, reg_backoff);
                pthread_mutex_unlock(&w->mu);
                reg_backoff = reg_backoff * 2 > 5000 ? 5000 : reg_backoff * 2;
                continue;
            }
            reg_backoff = 250;
        }
        int net_ok = 1;
        if (do_releases(w))
            net_ok = 0;
        if (net_ok && now >= next_flush && wcl_outbox_count(w->ob) > 0) {
            int rc = wcl_outbox_flush(w->ob, w->c, w->worker_id, on_ack, w);
            if (rc) {
                log_warn("results upload: %s; %zu result(s) kept for a retry", err_msg(rc),
                         wcl_outbox_count(w->ob));
                next_flush = clock_mono_ms() + 1000;
                net_ok = 0;
            }
        }
        do_heartbeats(w, 0);
        now = clock_mono_ms();
        if (net_ok && !draining && !engine_done && now >= next_lease &&
            n_queued < (size_t)(w->pack_size + 1) / 2) {
            int idle = n_items == 0 && wcl_outbox_count(w->ob) == 0;
            long d = do_lease(w, idle);
            next_lease = clock_mono_ms() + (uint64_t)d;
            if (!w->worker_id[0])
                continue;
            if (d == 0)
                continue; /* got work or long-polled: check again at once */
        }
        pthread_mutex_lock(&w->mu);
        wait_ms_locked(w, WL_TICK_MS);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_lock(&w->mu);
    w->comm_exit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- engine thread --------------------------------------------------------------- */

struct to_add {
    char rid[ID_MAX];
    enum wproto_endpoint ep;
    json_t *body;
};

/* Give an item back to jobd (an engine failure, not the request's fault). */
static void release_item(struct wl *w, const char *rid)
{
    pthread_mutex_lock(&w->mu);
    struct item *it = item_find(w, rid, NULL);
    if (it && it->state == IT_RUNNING)
        item_set(w, it, IT_RELEASE);
    pthread_mutex_unlock(&w->mu);
}

/* k /v1/embeddings requests, answered at once on the engine thread (no
 * generation): each is validated and tokenized alone (a bad one gets its
 * 400 and does not hold the others back), then the inputs of all of them
 * go through one embed_run - one pack of forwards, padding-free - on an
 * embeddings context made on first use (*ectx, freed by the caller). A
 * vector does not depend on its pack (embed.h), so the answers are those
 * of each request alone. */
static void run_embeds(struct wl *w, const struct engine *e, struct model_ctx **ectx,
                       const struct to_add *a, size_t k)
{
    int rc = 0;
    if (!*ectx) {
        struct model_ctx_params cp;
        engine_ctx_params(e, &cp);
        cp.device = KN_DEVICE_CPU; /* embeddings run on the CPU (model.h) */
        cp.embeddings = 1;
        cp.n_seq_max = WL_EMBED_SLOTS;
        cp.n_batch_max = WL_EMBED_BATCH;
        cp.n_out_max = WL_EMBED_BATCH;
        int n_ctx = cp.n_ctx ? cp.n_ctx
                             : (e->model->hp.n_ctx_train < 4096 ? e->model->hp.n_ctx_train : 4096);
        cp.n_ctx = n_ctx;
        cp.n_kv_blocks = (n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS * 2; /* see embed.c */
        rc = model_ctx_new(e->model, &cp, ectx);
        if (rc)
            log_error("cannot create the embeddings context: %s", err_msg(rc));
    }
    struct oembed_prep *pp = calloc(k, sizeof *pp);
    int *ok = calloc(k, sizeof *ok);
    const int32_t **ids = NULL;
    int *lens = NULL;
    float *vec = NULL;
    if (!rc && (!pp || !ok))
        rc = ERR_NOMEM;
    if (rc) {
        for (size_t i = 0; i < k; i++)
            release_item(w, a[i].rid);
        goto out;
    }
    uint64_t t0 = clock_mono_ns();
    size_t n_in = 0;
    int64_t n_tok = 0;
    for (size_t i = 0; i < k; i++) {
        struct problem gerr;
        memset(&gerr, 0, sizeof gerr);
        int prc = oembed_prepare(*ectx, e->tok, a[i].body, &pp[i], &gerr);
        if (prc == ERR_INVAL && gerr.message[0]) { /* the request's error: answered now */
            struct oreq_result r;
            memset(&r, 0, sizeof r);
            r.id = a[i].rid;
            r.status = 400;
            json_t *eb = gp_error_json(&gerr);
            r.body = eb;
            if (eb)
                on_result(w, &r);
            json_decref(eb);
        } else if (prc) {
            log_error("%s: embedding failed: %s; releasing it", a[i].rid, err_msg(prc));
            release_item(w, a[i].rid);
        } else {
            ok[i] = 1;
            n_in += pp[i].n;
            n_tok += pp[i].n_tokens;
        }
    }
    if (n_in == 0)
        goto out;
    int n_embd = e->model->hp.n_embd;
    ids = malloc(n_in * sizeof *ids);
    lens = malloc(n_in * sizeof *lens);
    vec = malloc(n_in * (size_t)n_embd * sizeof *vec);
    rc = ids && lens && vec ? 0 : ERR_NOMEM;
    size_t at = 0;
    for (size_t i = 0; !rc && i < k; i++)
        for (size_t j = 0; ok[i] && j < pp[i].n; j++, at++) {
            ids[at] = pp[i].ids[j];
            lens[at] = pp[i].lens[j];
        }
    if (!rc)
        rc = embed_run(*ectx, embed_default_pooling(e->model), 1, ids, lens, (int)n_in, vec);
    double dt = (double)(clock_mono_ns() - t0) / 1e9;
    at = 0;
    for (size_t i = 0; i < k; i++) {
        if (!ok[i])
            continue;
        json_t *resp = NULL;
        int arc = rc ? rc : oembed_answer(&pp[i], n_embd, w->model_id, vec + at * (size_t)n_embd, &resp);
        at += pp[i].n;
        if (arc) {
            log_error("%s: embedding failed: %s; releasing it", a[i].rid, err_msg(arc));
            release_item(w, a[i].rid);
            continue;
        }
        struct oreq_result r;
        memset(&r, 0, sizeof r);
        r.id = a[i].rid;
        r.status = 200;
        r.prompt_tokens = pp[i].n_tokens;
        /* the pack's time, shared by tokens */
        r.prefill_s = n_tok ? dt * (double)pp[i].n_tokens / (double)n_tok : 0;
        /* the body echoes the request's model, as the other endpoints do */
        json_t *mj = json_object_get(a[i].body, "model");
        if (json_is_string(mj))
            json_object_set(resp, "model", mj);
        r.body = resp;
        on_result(w, &r);
        json_decref(resp);
    }
out:
    if (pp)
        for (size_t i = 0; i < k; i++)
            oembed_prep_release(&pp[i]);
    free(pp);
    free(ok);
    free(ids);
    free(lens);
    free(vec);
}

static int engine_loop(struct wl *w, struct oreq_sched *os, const struct engine *e)
{
    struct model_ctx *ectx = NULL;
    struct sched *s = os ? oreq_sched_engine(os) : NULL; /* NULL: an encoder worker */
    const struct serve_opts *o = w->o;
    uint64_t deadline = 0;
    struct to_add *add = NULL;
    size_t cap_add = 0;
    int rc = 0;
    for (;;) {
        size_t n_add = 0;
        pthread_mutex_lock(&w->mu);
        if (os)
            oreq_sched_get_stats(os, &w->st);
        if (stopping(w) && !w->draining) {
            w->draining = 1;
            deadline = clock_mono_ms() + (uint64_t)o->drain_timeout_ms;
            size_t n_rel = 0;
            for (size_t i = 0; i < w->n_items; i++) {
                struct item *it = w->items[i];
                /* not started: leased only, or queued in the scheduler without
                 * ever being admitted (nothing computed, no callback) */
                if (it->state == IT_QUEUED ||
                    (it->state == IT_RUNNING && s && sched_withdraw(s, it->rid) == 0)) {
                    item_set(w, it, IT_RELEASE);
                    n_rel++;
                }
            }
            log_info("draining: %zu request(s) to release, %d in the engine get up to %lld ms",
                     n_rel, s ? sched_n_waiting(s) + sched_n_running(s) : 0,
                     (long long)o->drain_timeout_ms);
            pthread_cond_broadcast(&w->cv);
        }
        if (w->draining && clock_mono_ms() >= deadline) {
            pthread_mutex_unlock(&w->mu);
            log_warn("drain timeout: releasing what is still running");
            break;
        }
        if (w->comm_exit) { /* cannot happen before the engine is done; be safe */
            pthread_mutex_unlock(&w->mu);
            break;
        }
        /* requests cancelled while in the scheduler stop now and free their blocks
         * (before feeding: a request fed below is in the scheduler by the next pass) */
        while (w->n_stop > 0) {
            char rid[ID_MAX];
            memcpy(rid, w->stop_ids[--w->n_stop], ID_MAX);
            pthread_mutex_unlock(&w->mu);
            if (s && sched_cancel(s, rid) == 0)
                log_info("%s: stopped in the engine", rid);
            pthread_mutex_lock(&w->mu);
        }
        /* feed every leased request: the scheduler orders all it holds and admits
         * from them as slots and KV free up, as for --batch-file (a drain withdraws
         * the ones not started, a cancel drops them with sched_cancel) */
        if (!w->draining && w->n_queued > cap_add) {
            struct to_add *p = realloc(add, w->n_queued * sizeof *p);
            if (p) {
                add = p;
                cap_add = w->n_queued;
            }
        }
        for (size_t i = 0; i < w->n_items && n_add < cap_add && !w->draining; i++) {
            struct item *it = w->items[i];
            if (it->state != IT_QUEUED)
                continue;
            item_set(w, it, IT_RUNNING);
            it->t_added_ns = clock_mono_ns();
            memcpy(add[n_add].rid, it->rid, ID_MAX);
            add[n_add].ep = it->ep;
            add[n_add].body = json_incref(it->body);
            n_add++;
        }
        pthread_mutex_unlock(&w->mu);
        for (size_t i = 0; i < n_add; i++) {
            if (add[i].ep == WPROTO_EP_NONE || (!os && add[i].ep != WPROTO_EP_EMBEDDINGS)) {
                /* a request error, answered without the engine (an encoder worker is
                 * leased only embeddings by jobd: this is a safety net) */
                json_t *eb = json_pack(
                    "{s:{s:s, s:s, s:s, s:s}}", "error", "message",
                    os ? "This worker serves /v1/chat/completions, /v1/completions, "
                         "/v1/embeddings and (with a chat template) /v1/responses only."
                       : "This worker's model is an encoder: it serves /v1/embeddings only.",
                    "type", "invalid_request_error", "param", "url", "code", "invalid_url");
                struct oreq_result er;
                memset(&er, 0, sizeof er);
                er.id = add[i].rid;
                er.status = 400;
                er.body = eb;
                if (eb)
                    on_result(w, &er);
                json_decref(eb);
                json_decref(add[i].body);
                continue;
            }
            if (add[i].ep == WPROTO_EP_EMBEDDINGS) { /* this and the embeddings right after it: one pack */
                size_t k = 1;
                while (i + k < n_add && add[i + k].ep == WPROTO_EP_EMBEDDINGS && k < WL_EMBED_PACK)
                    k++;
                run_embeds(w, e, &ectx, &add[i], k);
                for (size_t j = 0; j < k; j++)
                    json_decref(add[i + j].body);
                i += k - 1;
                continue;
            }
            enum gp_endpoint gep = add[i].ep == WPROTO_EP_CHAT        ? GP_CHAT
                                   : add[i].ep == WPROTO_EP_RESPONSES ? GP_RESPONSES
                                                                      : GP_COMPLETIONS;
            int arc = oreq_sched_add(os, add[i].rid, gep, add[i].body);
            json_decref(add[i].body);
            if (arc) {
                log_error("%s: cannot queue the request: %s; releasing it", add[i].rid,
                          err_msg(arc));
                pthread_mutex_lock(&w->mu);
                struct item *it = item_find(w, add[i].rid, NULL);
                if (it && it->state == IT_RUNNING)
                    item_set(w, it, IT_RELEASE);
                pthread_mutex_unlock(&w->mu);
            }
        }
        pthread_mutex_lock(&w->mu);
        w->n_waiting = s ? (size_t)sched_n_waiting(s) : 0;
        pthread_mutex_unlock(&w->mu);
        if (s && sched_n_waiting(s) + sched_n_running(s) > 0) {
            int src = sched_step(s);
            if (src < 0) {
                rc = src;
                log_error("engine error: %s; giving the running requests back", err_msg(rc));
                break;
            }
            continue;
        }
        pthread_mutex_lock(&w->mu);
        if (w->draining) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        if (w->n_queued == 0)
            wait_ms_locked(w, WL_TICK_MS);
        pthread_mutex_unlock(&w->mu);
    }
    free(add);
    model_ctx_free(ectx);
    /* what the scheduler still holds goes back to jobd */
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n_items; i++)
        if (w->items[i]->state == IT_RUNNING || w->items[i]->state == IT_QUEUED)
            item_set(w, w->items[i], IT_RELEASE);
    w->engine_done = 1;
    w->engine_failed = rc != 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ---- setup ------------------------------------------------------------------------ */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > WL_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

int serve_model_id(const struct model *m, const char *path, char *out, size_t out_len)
{
    struct gguf_str gs;
    if (m && gguf_get_str(m->gguf, "general.name", &gs) == 0 && name_ok(gs.ptr, gs.len) &&
        gs.len < out_len) {
        memcpy(out, gs.ptr, gs.len);
        out[gs.len] = '\0';
        return 0;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    if (n > WL_MAX_NAME)
        n = WL_MAX_NAME;
    if (n == 0 || n >= out_len)
        return ERR_TOOBIG;
    memcpy(out, base, n);
    out[n] = '\0';
    return 0;
}

int serve_run(const struct serve_opts *o, char *err, size_t err_len)
{
    struct engine *e = NULL;
    struct oreq_sched *s = NULL;
    struct wl w;
    int rc, mu_ok = 0, cv_ok = 0, thread_ok = 0;
    pthread_t th;
    memset(&w, 0, sizeof w);
    w.o = o;
    if (!o || !o->jobd_url || !o->model_path || !o->stop || o->pack_size < 0 ||
        o->pack_size > 4096 || o->lease_seconds < 0 || o->lease_seconds > 86400 ||
        (o->model_id && !name_ok(o->model_id, strlen(o->model_id)))) {
        snprintf(err, err_len, "bad options (--model-id 1..128 bytes, --pack-size 0..4096)");
        return ERR_INVAL;
    }
    for (size_t i = 0; i < o->n_aliases; i++)
        if (!name_ok(o->aliases[i], strlen(o->aliases[i]))) {
            snprintf(err, err_len, "--alias '%s': 1..128 bytes, no control characters",
                     o->aliases[i]);
            return ERR_INVAL;
        }
    w.pack_size = o->pack_size ? o->pack_size : 64;
    w.lease_seconds = o->lease_seconds ? o->lease_seconds : 120;
    struct serve_opts oc = *o;
    if (oc.drain_timeout_ms < 0)
        oc.drain_timeout_ms = 30000;
    w.o = &oc;
    struct wcl_opts co = {o->jobd_url, o->token, 30000, 2};
    if ((rc = wcl_new(&co, &w.c)) != 0) {
        snprintf(err, err_len, "--jobd '%s': expected http://HOST:PORT", o->jobd_url);
        goto out;
    }
    if ((rc = wcl_outbox_new(&w.ob)) != 0)
        goto out;
    enum kn_device dev = KN_DEVICE_CPU;
    if (o->device && kn_device_parse(o->device, &dev)) {
        rc = ERR_INVAL;
        snprintf(err, err_len, "unknown device '%s'", o->device);
        goto out;
    }
    struct engine_opts eo = {
        .model_path = o->model_path, .device = (int)dev, .threads = o->threads,
        .n_ctx = o->n_ctx, .max_batch_tokens = o->max_batch_tokens, .max_seqs = o->max_seqs,
        .kv_mem_bytes = o->kv_mem_bytes, .no_prefix_cache = o->no_prefix_cache, .swa_full = o->swa_full,
        .spec_off = o->spec_off, .spec_max_seqs = o->spec_max_seqs,
        .kv_type = o->kv_type,
    };
    if ((rc = engine_open(&eo, &e, err, err_len)) != 0)
        goto out;
    file_sha256(o->model_path, w.model_sha256);
    if (o->model_id)
        snprintf(w.model_id, sizeof w.model_id, "%s", o->model_id);
    else if ((rc = serve_model_id(e->model, o->model_path, w.model_id, sizeof w.model_id)) != 0) {
        snprintf(err, err_len, "cannot derive a model id; give --model-id");
        goto out;
    }
    if (o->name)
        snprintf(w.name, sizeof w.name, "%s", o->name);
    else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(w.name, sizeof w.name, "%s/%ld/%s", host, (long)getpid(),
                 o->device ? o->device : "cpu");
    }
    struct sched_opts so;
    engine_sched_opts(e, &so);
    struct oreq_sched_opts oo = {w.model_id, on_result, &w};
    struct sched_stats st;
    memset(&st, 0, sizeof st);
    /* what this worker serves: an encoder model embeddings only (no generation
     * scheduler); embeddings run on the CPU, so a CUDA worker serves generation */
    w.encoder = e->model->hp.arch == MODEL_ARCH_BERT;
    if (w.encoder || dev == KN_DEVICE_CPU)
        w.endpoints[w.n_endpoints++] = "/v1/embeddings";
    if (!w.encoder) {
        w.endpoints[w.n_endpoints++] = "/v1/chat/completions";
        w.endpoints[w.n_endpoints++] = "/v1/completions";
        if (e->tmpl) /* /v1/responses runs on the chat path */
            w.endpoints[w.n_endpoints++] = "/v1/responses";
        if ((rc = oreq_sched_new(e->model, e->tok, e->tmpl, &so, &oo, &s)) != 0) {
            snprintf(err, err_len, "cannot create the scheduler (check --kv-mem, --max-seqs, "
                     "--max-batch-tokens): %s", err_msg(rc));
            goto out;
        }
        oreq_sched_get_stats(s, &st);
    } else {
        st.n_ctx = e->model->hp.n_ctx_train < 4096 ? e->model->hp.n_ctx_train : 4096;
    }
    w.kv_tokens = (int64_t)st.kv_blocks * KV_BLOCK_TOKENS;
    if (pthread_mutex_init(&w.mu, NULL) == 0)
        mu_ok = 1;
    if (mu_ok && pthread_cond_init(&w.cv, NULL) == 0)
        cv_ok = 1;
    if (!cv_ok) {
        rc = ERR_NOMEM;
        goto out;
    }
    w.t0_ns = clock_mono_ns();
    log_info("serving '%s' from %s for %s (%d threads, %d sequence slots, context %d, "
             "pack %d, lease %d s)", w.model_id, o->model_path, o->jobd_url,
             kn_pool_threads(e->pool), so.max_seqs, st.n_ctx, w.pack_size, w.lease_seconds);
    if (pthread_create(&th, NULL, comm_main, &w) != 0) {
        rc = ERR_NOMEM;
        goto out;
    }
    thread_ok = 1;
    rc = engine_loop(&w, s, e);
    pthread_join(th, NULL);
    thread_ok = 0;
    if (rc)
        snprintf(err, err_len, "engine error: %s", err_msg(rc));
    else
        log_info("drained: %lld request(s) done, %zu result(s) not acknowledged",
                 (long long)w.total_done, wcl_outbox_count(w.ob));
    if (s)
        oreq_sched_get_stats(s, &st);
    log_info("engine-stats: {\"requests\":%lld,\"request_errors\":%lld,\"cancelled\":%lld,"
             "\"steps\":%lld,\"prompt_tokens\":%lld,\"prefill_computed\":%lld,"
             "\"prefix_reused\":%lld,\"completion_tokens\":%lld,\"recomputed\":%lld,"
             "\"preemptions\":%lld,\"kv_blocks\":%d,\"kv_util_avg\":%.3f,"
             "\"kv_util_peak\":%.3f,\"wall_s\":%.3f,\"forward_s\":%.3f,\"mask_s\":%.3f,"
             "\"masks\":%lld}",
             (long long)st.n_requests, (long long)st.n_request_errors, (long long)st.n_cancelled,
             (long long)st.n_steps, (long long)(st.prefill_computed + st.prefix_reused),
             (long long)st.prefill_computed, (long long)st.prefix_reused,
             (long long)st.output_tokens, (long long)st.recomputed, (long long)st.n_preemptions,
             st.kv_blocks, st.kv_util_avg, st.kv_util_peak, st.wall_s, st.forward_s, st.mask_s,
             (long long)st.n_masks);
out:
    if (thread_ok) {
        pthread_mutex_lock(&w.mu);
        w.comm_exit = 1;
        pthread_cond_broadcast(&w.cv);
        pthread_mutex_unlock(&w.mu);
        pthread_join(th, NULL);
    }
    oreq_sched_free(s);
    for (size_t i = 0; i < w.n_items; i++) {
        json_decref(w.items[i]->body);
        free(w.items[i]);
    }
    free(w.items);
    free(w.stop_ids);
    for (size_t i = 0; i < w.n_leases; i++)
        free(w.leases[i]);
    free(w.leases);
    if (cv_ok)
        pthread_cond_destroy(&w.cv);
    if (mu_ok)
        pthread_mutex_destroy(&w.mu);
    wcl_outbox_free(w.ob);
    wcl_free(w.c);
    engine_close(e);
    return rc;
}
