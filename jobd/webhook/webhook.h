/*
 * webhook.h - webhook delivery (spec/webhooks.md): Standard Webhooks
 * signatures, the retry schedule, the SSRF guard, the sender and the
 * dispatcher threads.
 *
 * Design. The outbox and the delivery rows live in the store
 * (jobd/store/store_webhook.h). The dispatcher runs `concurrency` sender threads
 * off the event loop, each with its own store connection: thread 0 also
 * fans pending events out into deliveries; every thread claims one due
 * delivery at a time, POSTs it (libcurl, no redirects, no proxies, a hard
 * timeout, the response body ignored beyond 256 bytes), and records the
 * outcome. So at most `concurrency` POSTs are in flight, and a slow receiver
 * occupies one sender for at most timeout_ms; the API never waits on it.
 *
 * SSRF guard. Unless allow_private is set, the address libcurl is about to
 * connect to (after its own DNS resolution, for every address it tries) is
 * checked by CURLOPT_OPENSOCKETFUNCTION: loopback, private (RFC 1918, ULA),
 * link-local (incl. 169.254.169.254 metadata), CGNAT, unspecified,
 * multicast/broadcast/reserved, and IPv4-mapped / NAT64 forms of those are
 * refused before a socket exists. So a name that resolves to 127.0.0.1, or
 * DNS rebinding between registration and delivery, is caught at send time.
 * Registration also checks the resolved addresses (a quick answer to the
 * user), but the connect-time check is the one that holds.
 *
 * Threads: the pure helpers are thread-safe; the dispatcher owns its
 * threads; start/stop from one thread (the daemon's main thread).
 */
#ifndef JOBD_WEBHOOK_H
#define JOBD_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "jobd/store/store.h"
#include "jobd/store/store_webhook.h"

struct webhook_config {
    int allow_private;        /* 1: skip the SSRF guard (local setups, tests) */
    int64_t timeout_ms;       /* whole POST, connect included; default 10000 */
    int max_attempts;         /* attempts per delivery before it fails; default 10 */
    int64_t retry_base_ms;    /* first retry delay; default 5000 */
    int retry_factor;         /* growth per attempt; default 4 */
    int64_t retry_cap_ms;     /* longest delay; default 8 h */
    int64_t disable_after_s;  /* an endpoint failing this long is disabled; default 5 days */
    int concurrency;          /* sender threads = POSTs in flight; default 4 */
    int64_t poll_ms;          /* idle poll for new events / due deliveries; default 500 */
};
#define WEBHOOK_CONFIG_DEFAULT \
    ((struct webhook_config){0, 10000, 10, 5000, 4, 8 * 3600 * 1000LL, 5 * 86400, 4, 500})

#define WEBHOOK_SECRET_BYTES 32 /* random bytes behind a new "whsec_" secret */
#define WEBHOOK_SIG_MAX 64      /* "v1," + base64 of 32 bytes + NUL fits */

/* A new secret "whsec_" + base64 of WEBHOOK_SECRET_BYTES random bytes into
 * out. 0 or ERR_CRYPTO. */
int webhook_secret_new(char out[STORE_WH_SECRET_MAX]);

/* The HMAC key of a secret: base64-decode of what follows "whsec_" (a
 * secret without the prefix is used as raw bytes, like the reference
 * libraries). 0, ERR_PARSE (bad base64), ERR_TOOBIG (key > cap). */
int webhook_secret_key(const char *secret, uint8_t *key, size_t cap, size_t *key_len);

/* The webhook-signature value for one attempt: "v1," + base64(HMAC-SHA256(
 * key, msg_id "." timestamp "." body)). 0, ERR_PARSE (bad secret), ERR_CRYPTO. */
int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const void *body,
                 size_t body_len, char out[WEBHOOK_SIG_MAX]);

/* Delay in ms before the next attempt after `attempts` failed ones (>= 1):
 * d = min(cap, base * factor^(attempts-1)), jittered uniformly into
 * [0.8 d, 1.2 d] (rnd: a uniform 32-bit draw). */
int64_t webhook_backoff_ms(const struct webhook_config *cfg, int64_t attempts, uint32_t rnd);

/* 1 if the SSRF guard refuses a connection to this address (see above),
 * else 0. Unknown families are refused. */
int webhook_addr_forbidden(const struct sockaddr *sa);

/* Check an endpoint URL: http or https, a host, <= STORE_WH_URL_MAX bytes,
 * no user:password. With resolve, the host is resolved and every address
 * checked (unless allow_private). 0; ERR_INVAL (malformed; msg says why);
 * ERR_CONN (the name does not resolve); ERR_UNSUPPORTED (an address is
 * forbidden by the SSRF guard). msg (cap bytes) gets a sentence for the user. */
int webhook_url_check(const char *url, int allow_private, int resolve, char *msg, size_t cap);

/* 1 if s is an event type endpoints may subscribe to ("batch.completed",
 * "batch.failed", "batch.expired", "batch.cancelled"), else 0. */
int webhook_event_type_valid(const char *s);

struct webhook_send_result {
    int status;          /* HTTP status, 0 = no response */
    int64_t latency_ms;
    int blocked;         /* the SSRF guard refused every address */
    char error[STORE_WH_ERROR_MAX + 1]; /* "" on a 2xx */
};

/* POST one claimed delivery, signed with timestamp ts. Never fails as a
 * function: the outcome is in *r. */
void webhook_send(const struct webhook_config *cfg, const struct store_wh_job *job, int64_t ts,
                  struct webhook_send_result *r);

/* What an attempt's outcome leads to (before the endpoint-failing rule). */
enum store_wh_result webhook_classify(const struct webhook_config *cfg, const struct webhook_send_result *r,
                                      int64_t attempt);

/* ---- dispatcher ---------------------------------------------------------------------- */

struct webhook_dispatcher;

struct webhook_counters {
    uint64_t delivered, retried, failed, disabled, blocked; /* attempts by outcome */
    uint64_t latency_le[8];  /* attempts with latency <= 50,100,250,500,1000,2500,5000,10000 ms */
    uint64_t latency_count;
    uint64_t latency_sum_ms;
};
#define WEBHOOK_LATENCY_BOUNDS_MS {50, 100, 250, 500, 1000, 2500, 5000, 10000}

/* Start the sender threads on their own connections to data_dir. *out is
 * the caller's (webhook_dispatcher_free). 0, ERR_INVAL (bad cfg), store
 * errors, ERR_NOMEM. */
int webhook_dispatcher_start(const char *data_dir, const struct store_opts *so,
                             const struct webhook_config *cfg, struct webhook_dispatcher **out);

/* Ask the threads to stop (they finish the POST in flight). Non-blocking. NULL ok. */
void webhook_dispatcher_stop(struct webhook_dispatcher *d);

/* Stop, join and free. NULL ok. */
void webhook_dispatcher_free(struct webhook_dispatcher *d);

/* Counters since start (any thread). */
void webhook_dispatcher_counters(struct webhook_dispatcher *d, struct webhook_counters *out);

#endif
