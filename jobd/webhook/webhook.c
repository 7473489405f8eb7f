/*
 * webhook.c - signatures, retry schedule, the SSRF guard and the sender
 * (see webhook.h). Thread-safe: the sender uses one curl handle per call.
 */
#include "jobd/webhook/webhook.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/log.h"

/* ---- secrets and signatures -------------------------------------------------------- */

int webhook_secret_new(char out[STORE_WH_SECRET_MAX])
{
    uint8_t raw[WEBHOOK_SECRET_BYTES];
    char b64[BASE64_LEN(WEBHOOK_SECRET_BYTES) + 1];
    int rc = crypto_random(raw, sizeof raw);
    if (rc)
        return rc;
    base64_encode(raw, sizeof raw, b64);
    snprintf(out, STORE_WH_SECRET_MAX, "whsec_%s", b64);
    return 0;
}

int webhook_secret_key(const char *secret, uint8_t *key, size_t cap, size_t *key_len)
{
    if (strncmp(secret, "whsec_", 6) != 0) {
        size_t n = strlen(secret);
        if (n > cap)
            return ERR_TOOBIG;
        memcpy(key, secret, n);
        *key_len = n;
        return 0;
    }
    return base64_decode(secret + 6, strlen(secret + 6), key, cap, key_len);
}

int webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const void *body,
                 size_t body_len, char out[WEBHOOK_SIG_MAX])
{
    uint8_t key[256], mac[SHA256_LEN];
    size_t key_len;
    int rc = webhook_secret_key(secret, key, sizeof key, &key_len);
    if (rc)
        return rc == ERR_TOOBIG ? ERR_PARSE : rc;
    char head[ID_MAX + 32];
    int hn = snprintf(head, sizeof head, "%s.%lld.", msg_id, (long long)timestamp);
    if (hn < 0 || (size_t)hn >= sizeof head)
        return ERR_INVAL;
    size_t n = (size_t)hn + body_len;
    uint8_t *msg = malloc(n ? n : 1);
    if (!msg)
        return ERR_NOMEM;
    memcpy(msg, head, (size_t)hn);
    if (body_len)
        memcpy(msg + hn, body, body_len);
    rc = hmac_sha256(key, key_len, msg, n, mac);
    free(msg);
    if (rc)
        return rc;
    memcpy(out, "v1,", 3);
    base64_encode(mac, sizeof mac, out + 3);
    return 0;
}

int64_t webhook_backoff_ms(const struct webhook_config *cfg, int64_t attempts, uint32_t rnd)
{
    int64_t d = cfg->retry_base_ms;
    for (int64_t i = 1; i < attempts && d < cfg->retry_cap_ms; i++)
        d *= cfg->retry_factor > 1 ? cfg->retry_factor : 1;
    if (d > cfg->retry_cap_ms)
        d = cfg->retry_cap_ms;
    if (d <= 0)
        return 0;
    /* uniform in [0.8 d, 1.2 d] */
    int64_t span = d * 2 / 5;
    return d - d / 5 + (span > 0 ? (int64_t)((uint64_t)rnd % (uint64_t)(span + 1)) : 0);
}

/* ---- SSRF guard --------------------------------------------------------------------- */

static int v4_forbidden(uint32_t a) /* host order */
{
    uint8_t b0 = (uint8_t)(a >> 24), b1 = (uint8_t)(a >> 16), b2 = (uint8_t)(a >> 8);
    if (b0 == 0 || b0 == 10 || b0 == 127)                 /* this net, RFC 1918, loopback */
        return 1;
    if (b0 == 100 && (b1 & 0xc0) == 64)                   /* 100.64/10 CGNAT */
        return 1;
    if (b0 == 169 && b1 == 254)                           /* link-local, cloud metadata */
        return 1;
    if (b0 == 172 && (b1 & 0xf0) == 16)                   /* 172.16/12 */
        return 1;
    if (b0 == 192 && b1 == 168)                           /* 192.168/16 */
        return 1;
    if (b0 == 192 && b1 == 0 && (b2 == 0 || b2 == 2))     /* IETF protocol assignments, TEST-NET-1 */
        return 1;
    if (b0 == 198 && (b1 & 0xfe) == 18)                   /* 198.18/15 benchmarking */
        return 1;
    if (b0 == 198 && b1 == 51 && b2 == 100)               /* TEST-NET-2 */
        return 1;
    if (b0 == 203 && b1 == 0 && b2 == 113)                /* TEST-NET-3 */
        return 1;
    if (b0 >= 224)                                        /* multicast, reserved, broadcast */
        return 1;
    return 0;
}

int webhook_addr_forbidden(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        return v4_forbidden(ntohl(s4->sin_addr.s_addr));
    }
    if (sa->sa_family != AF_INET6)
        return 1;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
    const uint8_t *b = s6->sin6_addr.s6_addr;
    static const uint8_t zero10[10] = {0};
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t tail = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
    if (memcmp(b, zero10, 10) == 0 && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)))
        /* ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible), :: and ::1 */
        return (b[10] == 0 && tail <= 1) ? 1 : v4_forbidden(tail);
    if (memcmp(b, nat64, 12) == 0)                        /* 64:ff9b::/96 */
        return v4_forbidden(tail);
    if ((b[0] & 0xfe) == 0xfc)                            /* fc00::/7 ULA (incl. fd00:ec2::254) */
        return 1;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)            /* fe80::/10 link-local */
        return 1;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)            /* fec0::/10 site-local (deprecated) */
        return 1;
    if (b[0] == 0xff)                                     /* multicast */
        return 1;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) /* 2001:db8::/32 documentation */
        return 1;
    if (b[0] == 0x20 && b[1] == 0x02) {                   /* 6to4: check the embedded v4 */
        uint32_t v4 = (uint32_t)b[2] << 24 | (uint32_t)b[3] << 16 | (uint32_t)b[4] << 8 | b[5];
        return v4_forbidden(v4);
    }
    return 0;
}

int webhook_event_type_valid(const char *s)
{
    static const char *const types[] = {"batch.completed", "batch.failed", "batch.expired",
                                        "batch.cancelled", NULL};
    for (const char *const *t = types; *t; t++)
        if (strcmp(s, *t) == 0)
            return 1;
    return 0;
}

static void msgf(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msgf(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

int webhook_url_check(const char *url, int allow_private, int resolve, char *msg, size_t cap)
{
    if (!url || !*url || strlen(url) > STORE_WH_URL_MAX) {
        msgf(msg, cap, "%s", "The url must be 1 to 2048 characters.");
        return ERR_INVAL;
    }
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) {
            msgf(msg, cap, "%s", "The url must not contain spaces or control or non-ASCII characters.");
            return ERR_INVAL;
        }
    CURLU *h = curl_url();
    if (!h)
        return ERR_NOMEM;
    char *scheme = NULL, *host = NULL, *user = NULL;
    int rc = 0;
    if (curl_url_set(h, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !*host) {
        msgf(msg, cap, "%s", "The url is not a valid absolute URL (expected https://host/path).");
        rc = ERR_INVAL;
        goto out;
    }
    if (strcasecmp(scheme, "https") != 0 && strcasecmp(scheme, "http") != 0) {
        msgf(msg, cap, "The url scheme '%s' is not supported: use https (or http).", scheme);
        rc = ERR_INVAL;
        goto out;
    }
    if (curl_url_get(h, CURLUPART_USER, &user, 0) == CURLUE_OK && user) {
        msgf(msg, cap, "%s", "The url must not contain credentials (user:password@).");
        rc = ERR_INVAL;
        goto out;
    }
    if (!resolve || allow_private)
        goto out;
    /* IPv6 literal hosts come back in brackets */
    char name[256];
    size_t hl = strlen(host);
    if (hl >= sizeof name) {
        msgf(msg, cap, "%s", "The url host is too long.");
        rc = ERR_INVAL;
        goto out;
    }
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        memcpy(name, host + 1, hl - 2);
        name[hl - 2] = '\0';
    } else {
        memcpy(name, host, hl + 1);
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(name, NULL, &hints, &res) != 0 || !res) {
        msgf(msg, cap, "The url host '%s' does not resolve.", name);
        rc = ERR_CONN;
        goto out;
    }
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (webhook_addr_forbidden(a->ai_addr)) {
            msgf(msg, cap,
                 "The url host '%s' resolves to a loopback, private, link-local or otherwise "
                 "non-public address; jobd refuses those (start jobd with --webhook-allow-private "
                 "for local setups).",
                 name);
            rc = ERR_UNSUPPORTED;
            break;
        }
    freeaddrinfo(res);
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_url_cleanup(h);
    return rc;
}

/* ---- the sender -------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct send_ctx {
    int allow_private;
    int blocked;   /* addresses refused */
    int allowed;   /* addresses allowed */
    char body[STORE_WH_ERROR_MAX + 1];
    size_t body_len;
};

static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct send_ctx *c = arg;
    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    if (!c->allow_private && webhook_addr_forbidden(&a->addr)) {
        c->blocked++;
        return CURL_SOCKET_BAD;
    }
    c->allowed++;
    return socket(a->family, a->socktype, a->protocol);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct send_ctx *c = arg;
    size_t len = size * n, room = sizeof c->body - 1 - c->body_len;
    size_t take = len < room ? len : room;
    memcpy(c->body + c->body_len, p, take);
    c->body_len += take;
    c->body[c->body_len] = '\0';
    return len; /* the rest is read and dropped */
}

void webhook_send(const struct webhook_config *cfg, const struct store_wh_job *job, int64_t ts,
                  struct webhook_send_result *r)
{
    memset(r, 0, sizeof *r);
    pthread_once(&curl_once, curl_init_once);
    char sig[WEBHOOK_SIG_MAX];
    if (webhook_sign(job->secret, job->event_id, ts, job->payload, job->payload_len, sig)) {
        snprintf(r->error, sizeof r->error, "cannot sign: bad signing secret");
        return;
    }
    char h_id[ID_MAX + 16], h_ts[48], h_sig[WEBHOOK_SIG_MAX + 24];
    snprintf(h_id, sizeof h_id, "webhook-id: %s", job->event_id);
    snprintf(h_ts, sizeof h_ts, "webhook-timestamp: %lld", (long long)ts);
    snprintf(h_sig, sizeof h_sig, "webhook-signature: %s", sig);
    struct curl_slist *hl = NULL, *t;
    const char *hs[] = {"Content-Type: application/json", "User-Agent: jobd-webhooks/1",
                        h_id, h_ts, h_sig, "Expect:"};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        if (!(t = curl_slist_append(hl, hs[i]))) {
            curl_slist_free_all(hl);
            snprintf(r->error, sizeof r->error, "out of memory");
            return;
        }
        hl = t;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        curl_slist_free_all(hl);
        snprintf(r->error, sizeof r->error, "out of memory");
        return;
    }
    struct send_ctx ctx = {.allow_private = cfg->allow_private};
    curl_easy_setopt(c, CURLOPT_URL, job->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* no proxy from the environment: the guard checks the peer */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)cfg->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, job->payload);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)job->payload_len);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &ctx);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ctx);
    uint64_t t0 = clock_mono_ms();
    CURLcode cc = curl_easy_perform(c);
    r->latency_ms = (int64_t)(clock_mono_ms() - t0);
    if (cc == CURLE_OK) {
        long st = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
        r->status = (int)st;
        if (st < 200 || st > 299)
            snprintf(r->error, sizeof r->error, "HTTP %ld: %.200s", st, ctx.body);
    } else if (ctx.blocked && !ctx.allowed) {
        r->blocked = 1;
        snprintf(r->error, sizeof r->error,
                 "refused by the SSRF guard: the url resolves to a non-public address");
    } else {
        snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(cc));
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
}

enum store_wh_result webhook_classify(const struct webhook_config *cfg, const struct webhook_send_result *r,
                                      int64_t attempt)
{
    if (r->status >= 200 && r->status <= 299)
        return STORE_WH_DELIVERED;
    if (r->blocked)
        return STORE_WH_BLOCKED;
    if (r->status == 410)
        return STORE_WH_GONE;
    return attempt >= cfg->max_attempts ? STORE_WH_EXHAUSTED : STORE_WH_RETRY;
}
