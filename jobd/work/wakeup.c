/*
 * wakeup.c - the LISTEN thread (wakeup.h).
 */
#include "jobd/work/wakeup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/err.h"
#include "common/log.h"

struct wakeup {
    pthread_t th;
    struct store *st;
    void (*fn)(void *arg, enum wakeup_event ev);
    void *arg;
    atomic_int stop;
    atomic_uint_fast64_t n;
};

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *thread_main(void *p)
{
    struct wakeup *w = p;
    int up = 1;
    while (!atomic_load(&w->stop)) {
        int woke = 0;
        int rc = store_work_wait(w->st, WAKEUP_POLL_MS, &woke);
        if (rc) {
            if (up) {
                log_warn("wakeup: the LISTEN connection is down (%s); long polls poll until it is back",
                         err_msg(rc));
                w->fn(w->arg, WAKEUP_DOWN);
                up = 0;
            }
            nap_ms(50); /* the driver's backoff paces the reconnects */
            continue;
        }
        if (!up) {
            log_info("wakeup: listening again");
            w->fn(w->arg, WAKEUP_UP);
            up = 1;
        }
        if (woke) {
            atomic_fetch_add(&w->n, 1);
            w->fn(w->arg, WAKEUP_WORK);
        }
    }
    return NULL;
}

int wakeup_start(const char *data_dir, const struct store_opts *sopts,
                 void (*fn)(void *arg, enum wakeup_event ev), void *arg, struct wakeup **out)
{
    if (!data_dir || !fn)
        return ERR_INVAL;
    if (!sopts || !store_database_is_pg(sopts->database))
        return ERR_UNSUPPORTED;
    struct wakeup *w = calloc(1, sizeof *w);
    if (!w)
        return ERR_NOMEM;
    w->fn = fn;
    w->arg = arg;
    int rc = store_open(data_dir, sopts, &w->st);
    if (!rc)
        rc = store_work_listen(w->st);
    if (rc) {
        store_close(w->st);
        free(w);
        return rc;
    }
    fn(arg, WAKEUP_UP); /* before the thread can report a drop */
    if (pthread_create(&w->th, NULL, thread_main, w) != 0) {
        fn(arg, WAKEUP_DOWN);
        store_close(w->st);
        free(w);
        return ERR_INTERNAL;
    }
    *out = w;
    return 0;
}

uint64_t wakeup_count(struct wakeup *w)
{
    return w ? atomic_load(&w->n) : 0;
}

void wakeup_free(struct wakeup *w)
{
    if (!w)
        return;
    atomic_store(&w->stop, 1);
    pthread_join(w->th, NULL);
    store_close(w->st);
    free(w);
}
