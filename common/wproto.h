/*
 * wproto.h - the worker-protocol messages both sides use (spec/worker-protocol.md):
 * jobd writes what the worker reads and reads what the worker writes, through
 * this one module, so the two cannot disagree on a field.
 *
 *   message                    written by                    read by
 *   lease answer               jobd  (wproto_lease_write_*)  worker (wproto_lease_parse)
 *   heartbeat                  worker (wproto_heartbeat_json) jobd (wproto_heartbeat_parse)
 *   heartbeat answer           jobd  (wproto_hb_answer_write) worker (wproto_hb_answer_parse)
 *   results line               worker (wproto_result_json)   jobd  (wproto_result_parse)
 *
 * plus the endpoint urls a lease item or a registration names, and the strict
 * field readers of jobd's message parsers (jobd/work/lease_proto.c).
 *
 * Design. What jobd reads is hostile: parsers take bytes, cap them, check
 * every field against the spec and answer ERR_* with a message naming the
 * field (err, err_len: as err_setf); they never assert on input, and they are
 * fuzzed (tests/fuzz/fuzz_wproto.c). What the worker reads comes from jobd
 * and is read leniently where the spec says so (a lease item that is
 * malformed is skipped and lapses with its lease). Parsed strings and JSON
 * values are borrowed from the parse's root, freed by the matching
 * *_release. Writers append compact JSON to a struct buf, or build a json_t
 * the caller owns.
 *
 * Thread-safe (no state).
 */
#ifndef COMMON_WPROTO_H
#define COMMON_WPROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/id.h"

#define WPROTO_MSG_MAX_BYTES (1u << 20)   /* a JSON message to jobd */
#define WPROTO_LINE_MAX_BYTES (16u << 20) /* one results line */
#define WPROTO_MESSAGE_MAX 4096           /* error.message of a results line, bytes */
#define WPROTO_CODE_MAX 64                /* error.code */
#define WPROTO_PARAM_MAX 256              /* error.param */

/* ---- endpoints ---- */

/* The urls of the protocol. WPROTO_EP_NONE: not one of them. */
enum wproto_endpoint {
    WPROTO_EP_NONE = 0,
    WPROTO_EP_CHAT,        /* /v1/chat/completions */
    WPROTO_EP_COMPLETIONS, /* /v1/completions */
    WPROTO_EP_EMBEDDINGS,  /* /v1/embeddings */
    WPROTO_EP_RESPONSES,   /* /v1/responses */
};
#define WPROTO_N_ENDPOINTS 4

/* Every endpoint but NONE, in the spec's order (chat, completions, embeddings, responses). */
extern const enum wproto_endpoint wproto_endpoints[WPROTO_N_ENDPOINTS];

/* "/v1/chat/completions" for WPROTO_EP_CHAT...; NULL for NONE. Can't fail. */
const char *wproto_endpoint_url(enum wproto_endpoint ep);
/* The endpoint of url; WPROTO_EP_NONE for NULL or any other string. */
enum wproto_endpoint wproto_endpoint_of(const char *url);

/* ---- strict readers (jobd's side) ---- */

/* Parse json[0..len) (at most WPROTO_MSG_MAX_BYTES, depth 16) as an object
 * into *root (the caller's, json_decref). ERR_TOOBIG, the parser's ERR_PARSE /
 * ERR_DEPTH / ERR_UTF8, or ERR_PARSE when it is not an object. */
int wproto_msg_parse(const char *json, size_t len, json_t **root, char *err, size_t err_len);
/* A string field of 1..max bytes into *out (borrowed); absent and not
 * required: *out NULL. ERR_INVAL otherwise. */
int wproto_get_str(const json_t *o, const char *key, size_t max, int required, const char **out,
                   char *err, size_t err_len);
/* An integer field in lo..hi into *out; absent: dflt. ERR_INVAL otherwise. */
int wproto_get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t dflt,
                   int64_t *out, char *err, size_t err_len);
/* A required id field with the given prefix ("wrk_", "lease_"). ERR_INVAL. */
int wproto_get_id(const json_t *o, const char *key, const char *prefix, const char **out, char *err,
                  size_t err_len);

/* ---- lease answer ---- */

/* One leased request as jobd writes it: body is the line's body, raw JSON. */
struct wproto_lease_item {
    const char *request_id;
    const char *custom_id; /* NULL: null */
    const char *url;       /* NULL or "": the field is left out */
    int64_t attempt;       /* 1-based */
    const char *body;
    size_t body_len;
};

/* An answer without work: {"lease_id":null,"requests":[],"retry_after_ms":N}. */
int wproto_lease_write_empty(struct buf *b, int retry_after_ms);
/* An answer with work: begin, item 0..n-1 (i is its index), end. */
int wproto_lease_write_begin(struct buf *b, const char *lease_id, int64_t expires_at);
int wproto_lease_write_item(struct buf *b, size_t i, const struct wproto_lease_item *it);
int wproto_lease_write_end(struct buf *b);

/* One leased request as the worker reads it (borrowed from the answer). */
struct wproto_lease_req {
    const char *request_id;    /* < ID_MAX bytes */
    enum wproto_endpoint ep;   /* its url; NONE: a url this protocol does not know. An
                                * item without a url (an older jobd): chat when the body
                                * has "messages" or no "prompt", else completions */
    json_t *body;              /* an object */
};

struct wproto_lease {
    const char *lease_id;      /* NULL: no work (then retry_after_ms) */
    int64_t retry_after_ms;    /* the empty answer's hint; 0 when absent */
    struct wproto_lease_req *reqs; /* heap; the well-formed items, in order */
    size_t n;
    size_t n_skipped;          /* items without a request_id string or an object body */
};

/* Read a lease answer (a decoded 200 body). lease_id not a string: an empty
 * answer. Returns 0 and *out (wproto_lease_release), ERR_PARSE (a lease_id of
 * ID_MAX bytes or more, or "requests" not an array), ERR_NOMEM. */
int wproto_lease_parse(const json_t *ans, struct wproto_lease *out);
void wproto_lease_release(struct wproto_lease *l);

/* ---- heartbeat ---- */

/* The worker's heartbeat (new reference, NULL on no memory); a negative
 * tokens_per_s is sent as 0. */
json_t *wproto_heartbeat_json(const char *worker_id, const char *lease_id, int64_t extend_seconds,
                              int64_t completed, double tokens_per_s);

struct wproto_heartbeat {
    json_t *root;
    const char *worker_id, *lease_id;
    int64_t extend_s;       /* 1..86400; absent: the default given */
    double tokens_per_s;    /* -1 when not reported */
    int64_t completed;      /* progress: requests finished so far (informational) */
};
/* Read a heartbeat strictly. 0 and *out (wproto_heartbeat_release), or the
 * errors of the readers above. */
int wproto_heartbeat_parse(const char *json, size_t len, int64_t extend_default,
                           struct wproto_heartbeat *out, char *err, size_t err_len);
void wproto_heartbeat_release(struct wproto_heartbeat *h);

/* jobd's answer: {"lease_id","expires_at","cancelled":[ids]}. */
int wproto_hb_answer_write(struct buf *b, const char *lease_id, int64_t expires_at,
                           const char (*cancelled)[ID_MAX], size_t n);
/* The worker's reading: the ids to stop (a borrowed array, NULL when absent;
 * iterate with json_array_foreach, skipping non-strings). Can't fail. */
json_t *wproto_hb_answer_cancelled(const json_t *ans);

/* ---- results line ---- */

enum wproto_result_kind {
    WPROTO_RESULT_SUCCESS = 1, /* "status":"success": response.status_code 2xx, response.body */
    WPROTO_RESULT_INVALID,     /* "status":"error", class invalid_request: never retried, 4xx */
    WPROTO_RESULT_TRANSIENT,   /* "status":"error", class transient: retried */
};

struct wproto_result {
    json_t *root;              /* parse: the line (owned); write: unused */
    const char *request_id;
    enum wproto_result_kind kind;
    int status_code;           /* SUCCESS: 2xx; INVALID: 4xx */
    const json_t *body;        /* SUCCESS: the response body, an object (borrowed) */
    const char *code, *param, *message; /* errors; code/param NULL when absent */
    int64_t prompt_tokens, completion_tokens, cached_tokens; /* cached <= prompt */
    int64_t queue_ms, prefill_ms, decode_ms, device_ms;
};

/* Read one results line strictly. 0 and *out (wproto_result_release), or
 * ERR_PARSE with the first problem in err (the line's caps: message, code
 * and param lengths above). */
int wproto_result_parse(const char *line, size_t len, struct wproto_result *out, char *err,
                        size_t err_len);
void wproto_result_release(struct wproto_result *r);

/* The line of r (new reference, NULL on no memory): SUCCESS with usage and
 * timings; an error with its class, status_code (INVALID), message and the
 * code/param when non-empty, each cut to its cap on a UTF-8 boundary, and
 * zero usage. */
json_t *wproto_result_json(const struct wproto_result *r);

#endif
