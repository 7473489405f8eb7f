/*
 * ingest_line.c - the rules for one JSONL input line (see ingest.h and
 * spec/jsonl.md). Pure: no store, no I/O, so it is fuzzed on its own
 * (tests/fuzz/fuzz_ingest_line.c). Thread-safe.
 *
 * Three kinds of rule, checked in this order (the first failure is the
 * line's one error):
 *   1. The line (jobd's own: the batch file format). UTF-8, JSON syntax and
 *      depth (lim->max_json_depth) within lim->max_line_bytes, a top-level
 *      object with only custom_id, method, url and body, custom_id (1 to
 *      STORE_CUSTOM_ID_MAX bytes), method POST, url one of the endpoints
 *      and the batch's, body an object, body.model a string of 1..127 bytes.
 *   2. The request body (not jobd's: the worker's, called here, so that a
 *      line jobd accepts is a line the worker runs). Chat and completions:
 *      gp_parse with the vocabulary unknown (openai/params.h; it includes
 *      the completions prompt and response_format), then for chat
 *      chat_msgs_from_body (openai/chat_msgs.h). Responses: oresp_check
 *      (openai/responses.h: the translation onto a chat body, then those
 *      same chat rules, errors in Responses names). Embeddings:
 *      oembed_body_parse (openai/embed.h). Their param gets the prefix
 *      "body."; codes and messages are theirs. What needs the model (token
 *      ids < n_vocab, the context length, the chat template, dimensions up
 *      to the model's width) is the worker's: a per-line 400 result.
 *   3. Deployment limits (jobd's, configurable, not OpenAI body rules):
 *      max_tokens / max_completion_tokens (Responses: max_output_tokens) at
 *      most lim->max_output_tokens.
 *      The file-wide limits (lim->max_file_bytes, lim->max_requests,
 *      duplicate custom_ids) are ingest.c's.
 * tests/fixtures/contract/bodies.jsonl holds the body rules' cases; it is
 * run through this file (tests/py/test_contract.py) and through the
 * worker's parsers (tests/unit/openai/test_contract.c), which must agree.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "common/problem.h"
#include "jobd/intake/ingest.h"
#include "openai/chat_msgs.h"
#include "openai/embed.h"
#include "openai/params.h"
#include "openai/responses.h"

void ingest_limits_default(struct ingest_limits *lim)
{
    lim->max_file_bytes = 512ull << 20;
    lim->max_requests = 200000;
    lim->max_line_bytes = 4u << 20;
    lim->max_json_depth = 32;
    lim->max_output_tokens = 32768;
    lim->rows_per_tx = 10000;
    lim->max_errors = STORE_BATCH_MAX_ERRORS;
}

int ingest_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* fast path: 8 ASCII bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0; /* continuation byte, overlong lead 0xc0/0xc1, or > 0xf4 */
        }
        if (n - i <= need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        i += need + 1;
    }
    return 1;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* ---- the request body: the worker's rules (openai/) ------------------------------------ */

/* Bytes of prompt text in a prompt / input value already accepted by the
 * body rules: string lengths, 4 per token id. An estimate, not a rule. */
static int64_t value_bytes(const json_t *v)
{
    if (json_is_string(v))
        return (int64_t)json_string_length(v);
    if (json_is_integer(v))
        return 4;
    int64_t n = 0;
    size_t k;
    json_t *x;
    if (json_is_array(v))
        json_array_foreach(v, k, x) n += json_is_array(x) ? 4 * (int64_t)json_array_size(x)
                                                          : value_bytes(x);
    return n;
}

/* Bytes of message text, + 16 (~4 tokens of framing) per message. */
static int64_t messages_bytes(const json_t *msgs)
{
    int64_t n = 16 * (int64_t)json_array_size(msgs);
    size_t i, k;
    json_t *m, *part;
    json_array_foreach(msgs, i, m)
    {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c))
            n += (int64_t)json_string_length(c);
        else if (json_is_array(c))
            json_array_foreach(c, k, part) n += (int64_t)json_string_length(json_object_get(part, "text"));
    }
    return n;
}

/* The body rules for endpoint; *bytes gets the prompt text estimate and
 * *max_tokens the output cap asked for (-1: none). The error's param is
 * the body's, prefixed "body.". */
static int check_body(json_t *body, const char *endpoint, int64_t *bytes, int64_t *max_tokens,
                      struct problem *e)
{
    int rc;
    if (strcmp(endpoint, "/v1/embeddings") == 0) {
        struct oembed_body eb;
        if ((rc = oembed_body_parse(body, 0, 0, &eb, e)) == 0) {
            *bytes = value_bytes(json_object_get(body, "input"));
            *max_tokens = 0; /* no generation */
            oembed_body_release(&eb);
        }
    } else if (strcmp(endpoint, "/v1/responses") == 0) {
        json_t *chat = NULL;
        if ((rc = oresp_check(body, 0, &chat, e)) == 0) {
            json_t *cap = json_object_get(chat, "max_completion_tokens");
            *max_tokens = json_is_integer(cap) ? json_integer_value(cap) : -1;
            *bytes = messages_bytes(json_object_get(chat, "messages"));
            json_decref(chat);
        }
    } else {
        enum gp_endpoint ep = strcmp(endpoint, "/v1/chat/completions") == 0 ? GP_CHAT
                                                                             : GP_COMPLETIONS;
        struct gp_request gp;
        if ((rc = gp_parse(body, ep, 0, &gp, e)) != 0)
            goto out;
        *max_tokens = gp.gen.max_tokens;
        gp_release(&gp);
        if (ep == GP_CHAT && (rc = chat_msgs_from_body(body, NULL, e)) != 0)
            goto out;
        *bytes = ep == GP_CHAT ? messages_bytes(json_object_get(body, "messages"))
                               : value_bytes(json_object_get(body, "prompt"));
    }
out:
    if (rc == ERR_INVAL && e) {
        char param[sizeof e->param];
        snprintf(param, sizeof param, "%s%.*s", e->param[0] ? "body." : "body",
                 (int)sizeof param - 6, e->param);
        memcpy(e->param, param, sizeof param);
    }
    return rc;
}

/* ---- deployment limits -------------------------------------------------------------------- */

/* Each output cap the body gives (chat: max_tokens and max_completion_tokens;
 * completions: max_tokens; responses: max_output_tokens), already an
 * integer >= 1, is at most lim->max_output_tokens. */
static int check_output_cap(json_t *body, const char *endpoint, const struct ingest_limits *lim,
                            struct problem *e)
{
    static const char *const chat_caps[] = {"max_tokens", "max_completion_tokens", NULL};
    static const char *const completion_caps[] = {"max_tokens", NULL};
    static const char *const resp_caps[] = {"max_output_tokens", NULL};
    const char *const *caps = strcmp(endpoint, "/v1/responses") == 0          ? resp_caps
                              : strcmp(endpoint, "/v1/chat/completions") == 0 ? chat_caps
                                                                              : completion_caps;
    for (int k = 0; caps[k]; k++) {
        json_t *v = json_object_get(body, caps[k]);
        if (!json_is_integer(v) || json_integer_value(v) <= lim->max_output_tokens)
            continue;
        char param[64];
        snprintf(param, sizeof param, "body.%s", caps[k]);
        return problem_setf(e, "invalid_value", param,
                            "Invalid value for '%s': %lld is not in [1, %lld] (the model's output "
                            "limit).", caps[k], (long long)json_integer_value(v),
                            (long long)lim->max_output_tokens);
    }
    return 0;
}

/* ---- the line ----------------------------------------------------------------------------- */

void ingest_line_release(struct ingest_line *l)
{
    if (l && l->root) {
        json_decref(l->root);
        l->root = NULL;
    }
}

/* ---- the raw text of the body ---------------------------------------------------------
 * Stored as sent: re-serialising costs more than parsing, and would rewrite
 * numbers (0.2 -> 0.20000000000000001). Only ever run on a line jansson has
 * accepted, so the scanner can assume well-formed JSON. */

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static size_t skip_string(const char *s, size_t i, size_t n)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return n;
}

static size_t skip_value(const char *s, size_t i, size_t n)
{
    if (i < n && s[i] == '"')
        return skip_string(s, i, n);
    if (i < n && (s[i] == '{' || s[i] == '[')) {
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, i, n);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return n;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' &&
           s[i] != '\r' && s[i] != '\n')
        i++;
    return i;
}

/* Span of the top-level member `key` of the object text s. 0 or ERR_NOTFOUND. */
static int member_span(const char *s, size_t n, const char *key, size_t *off, size_t *len)
{
    size_t klen = strlen(key), i = skip_ws(s, 0, n);
    if (i >= n || s[i] != '{')
        return ERR_NOTFOUND;
    i++;
    for (;;) {
        i = skip_ws(s, i, n);
        if (i >= n || s[i] != '"')
            return ERR_NOTFOUND;
        size_t kstart = i + 1, kend = skip_string(s, i, n);
        if (kend >= n || kend - kstart < 1)
            return ERR_NOTFOUND;
        size_t kl = kend - 1 - kstart;
        if (memchr(s + kstart, '\\', kl))
            return ERR_NOTFOUND; /* escaped key: let the caller serialise */
        i = skip_ws(s, kend, n);
        if (i >= n || s[i] != ':')
            return ERR_NOTFOUND;
        i = skip_ws(s, i + 1, n);
        size_t vend = skip_value(s, i, n);
        if (kl == klen && memcmp(s + kstart, key, klen) == 0) {
            *off = i;
            *len = vend - i;
            return 0;
        }
        i = skip_ws(s, vend, n);
        if (i >= n || s[i] != ',')
            return ERR_NOTFOUND;
        i++;
    }
}

static const char *const endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                        "/v1/responses", NULL};

int ingest_line_check(const char *line, size_t len, const char *endpoint,
                      const struct ingest_limits *lim, struct ingest_line *out,
                      struct problem *e)
{
    if (!ingest_utf8_valid(line, len))
        return problem_setf(e, "invalid_utf8", NULL, "This line is not valid UTF-8.");
    struct js_limits jl = {lim->max_line_bytes, lim->max_json_depth, 1};
    struct js_error je;
    json_t *root = NULL;
    int rc = js_parse(line, len, &jl, &root, &je);
    if (rc == ERR_DEPTH)
        return problem_setf(e, "invalid_json_line", NULL,
                    "This line is not parseable as valid JSON: nested deeper than %d levels.",
                    lim->max_json_depth);
    if (rc)
        return problem_setf(e, "invalid_json_line", NULL,
                    "This line is not parseable as valid JSON: %s (column %d).", je.message, je.column);
    struct ingest_line l = {.root = root};
    if (!json_is_object(root)) {
        rc = problem_setf(e, "invalid_json_line", NULL, "This line is valid JSON but not an object.");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "custom_id") && strcmp(k, "method") && strcmp(k, "url") && strcmp(k, "body")) {
            rc = problem_setf(e, "unknown_parameter", NULL,
                      "Unrecognized field '%.60s': a line has only custom_id, method, url and body.", k);
            goto out;
        }
    }
    /* custom_id */
    json_t *cid = json_object_get(root, "custom_id");
    if (!cid || json_is_null(cid)) {
        rc = problem_setf(e, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.");
        goto out;
    }
    if (!json_is_string(cid)) {
        rc = problem_setf(e, "invalid_type", "custom_id",
                  "Invalid type for 'custom_id': expected a string, but got %s.", json_type_name(cid));
        goto out;
    }
    size_t clen = json_string_length(cid);
    if (clen < 1 || clen > STORE_CUSTOM_ID_MAX) {
        rc = problem_setf(e, "invalid_value", "custom_id", "'custom_id' must be 1 to %d bytes long.",
                  STORE_CUSTOM_ID_MAX);
        goto out;
    }
    l.custom_id = json_string_value(cid);
    /* method */
    json_t *method = json_object_get(root, "method");
    if (!method || json_is_null(method)) {
        rc = problem_setf(e, "missing_required_parameter", "method", "Missing required parameter: 'method'.");
        goto out;
    }
    if (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0) {
        rc = problem_setf(e, "invalid_method", "method", "Invalid value for 'method': only \"POST\" is supported.");
        goto out;
    }
    /* url */
    json_t *url = json_object_get(root, "url");
    if (!url || json_is_null(url)) {
        rc = problem_setf(e, "missing_required_parameter", "url", "Missing required parameter: 'url'.");
        goto out;
    }
    int known = 0;
    for (const char *const *p = endpoints; json_is_string(url) && *p && !known; p++)
        known = strcmp(json_string_value(url), *p) == 0;
    if (!known) {
        rc = problem_setf(e, "invalid_url", "url",
                  "Invalid value for 'url': supported endpoints are /v1/chat/completions, "
                  "/v1/completions, /v1/embeddings and /v1/responses.");
        goto out;
    }
    if (strcmp(json_string_value(url), endpoint) != 0) {
        rc = problem_setf(e, "mismatched_endpoint", "url",
                  "The url '%s' does not match the batch's endpoint '%s'.", json_string_value(url),
                  endpoint);
        goto out;
    }
    /* body */
    json_t *body = json_object_get(root, "body");
    if (!body || json_is_null(body)) {
        rc = problem_setf(e, "missing_required_parameter", "body", "Missing required parameter: 'body'.");
        goto out;
    }
    if (!json_is_object(body)) {
        rc = problem_setf(e, "invalid_type", "body", "Invalid type for 'body': expected an object, but got %s.",
                  json_type_name(body));
        goto out;
    }
    l.body = body;
    json_t *model = json_object_get(body, "model");
    if (!model || json_is_null(model)) {
        rc = problem_setf(e, "missing_required_parameter", "body.model", "Missing required parameter: 'model'.");
        goto out;
    }
    if (!json_is_string(model)) {
        rc = problem_setf(e, "invalid_type", "body.model",
                  "Invalid type for 'model': expected a string, but got %s.", json_type_name(model));
        goto out;
    }
    if (json_string_length(model) < 1 || json_string_length(model) > 127) {
        rc = problem_setf(e, "invalid_value", "body.model", "'model' must be 1 to 127 bytes long.");
        goto out;
    }
    l.model = json_string_value(model);
    int64_t bytes = 0, max_tokens = -1;
    if ((rc = check_body(body, endpoint, &bytes, &max_tokens, e)) ||
        (rc = check_output_cap(body, endpoint, lim, e)))
        goto out;
    l.max_tokens = max_tokens < 0 ? lim->max_output_tokens : max_tokens;
    l.prompt_tokens_est = (bytes + 3) / 4;
    size_t boff, blen;
    if (member_span(line, len, "body", &boff, &blen) == 0) {
        l.body_raw = line + boff;
        l.body_raw_len = blen;
    }
    *out = l;
    return 0;
out:
    json_decref(root);
    return rc;
}
