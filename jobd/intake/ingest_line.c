/*
 * ingest_line.c - the rules for one JSONL input line (see ingest.h and
 * spec/jsonl.md). Pure: no store, no I/O, so it is fuzzed on its own
 * (tests/fuzz/fuzz_ingest_line.c). Thread-safe.
 *
 * Order of checks (the first failure is the line's one error): UTF-8, JSON
 * syntax / depth, top-level object and keys, custom_id, method, url, body,
 * body.model, the endpoint's required fields, then the optional sampling
 * parameters in a fixed order.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "common/js.h"
#include "jobd/intake/ingest.h"
#include "openai/params.h"

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

__attribute__((format(printf, 4, 5))) static int fail(struct ingest_error *e, const char *code,
                                                      const char *param, const char *fmt, ...)
{
    if (e) {
        snprintf(e->code, sizeof e->code, "%s", code);
        snprintf(e->param, sizeof e->param, "%s", param ? param : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
    }
    return ERR_PARSE;
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

/* ---- chat messages ---------------------------------------------------------------------- */

static int check_content(json_t *content, const char *role, json_t *msg, int i, int64_t *bytes,
                         struct ingest_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "body.messages[%d].content", i);
    if (!content || json_is_null(content)) {
        json_t *tc = json_object_get(msg, "tool_calls");
        if (strcmp(role, "assistant") == 0 && json_is_array(tc) && json_array_size(tc) > 0)
            return 0;
        return fail(e, "missing_required_parameter", param,
                    "Missing required parameter: 'messages[%d].content'.", i);
    }
    if (json_is_string(content)) {
        *bytes += (int64_t)json_string_length(content);
        return 0;
    }
    if (!json_is_array(content))
        return fail(e, "invalid_type", param,
                    "Invalid type for 'messages[%d].content': expected a string or an array of "
                    "text parts, but got %s.", i, json_type_name(content));
    if (json_array_size(content) == 0)
        return fail(e, "invalid_value", param, "'messages[%d].content' must not be an empty array.", i);
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part)
    {
        const char *type = NULL, *text = NULL;
        if (!json_is_object(part) || js_get_str(part, "type", &type) || strcmp(type, "text") != 0 ||
            js_get_str(part, "text", &text))
            return fail(e, "invalid_value", param,
                        "'messages[%d].content[%zu]' must be {\"type\": \"text\", \"text\": string}; "
                        "only text content is supported.", i, k);
        *bytes += (int64_t)json_string_length(json_object_get(part, "text"));
    }
    return 0;
}

static int check_messages(json_t *body, int64_t *bytes, struct ingest_error *e)
{
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool", NULL};
    json_t *msgs = json_object_get(body, "messages");
    if (!msgs || json_is_null(msgs))
        return fail(e, "missing_required_parameter", "body.messages",
                    "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs))
        return fail(e, "invalid_type", "body.messages",
                    "Invalid type for 'messages': expected an array, but got %s.", json_type_name(msgs));
    if (json_array_size(msgs) == 0)
        return fail(e, "invalid_value", "body.messages", "'messages' must contain at least one message.");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char param[64];
        snprintf(param, sizeof param, "body.messages[%zu]", i);
        if (!json_is_object(m))
            return fail(e, "invalid_type", param,
                        "Invalid type for 'messages[%zu]': expected an object, but got %s.", i,
                        json_type_name(m));
        snprintf(param, sizeof param, "body.messages[%zu].role", i);
        json_t *role = json_object_get(m, "role");
        if (!role || json_is_null(role))
            return fail(e, "missing_required_parameter", param,
                        "Missing required parameter: 'messages[%zu].role'.", i);
        if (!json_is_string(role))
            return fail(e, "invalid_type", param,
                        "Invalid type for 'messages[%zu].role': expected a string, but got %s.", i,
                        json_type_name(role));
        const char *r = json_string_value(role);
        int ok = 0;
        for (const char *const *p = roles; *p && !ok; p++)
            ok = strcmp(r, *p) == 0;
        if (!ok)
            return fail(e, "invalid_value", param,
                        "Invalid value for 'messages[%zu].role': '%.40s'. Supported values are: "
                        "'system', 'user', 'assistant', 'developer' and 'tool'.", i, r);
        int rc = check_content(json_object_get(m, "content"), r, m, (int)i, bytes, e);
        if (rc)
            return rc;
    }
    *bytes += 16 * (int64_t)json_array_size(msgs); /* ~4 tokens of framing per message */
    return 0;
}

/* ---- completions prompt --------------------------------------------------------------------- */

static int token_array_ok(json_t *a)
{
    size_t k;
    json_t *t;
    if (json_array_size(a) == 0)
        return 0;
    json_array_foreach(a, k, t)
    {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > 0x7fffffff)
            return 0;
    }
    return 1;
}

static int check_prompt(json_t *body, int64_t *bytes, struct ingest_error *e)
{
    json_t *p = json_object_get(body, "prompt");
    if (!p || json_is_null(p))
        return fail(e, "missing_required_parameter", "body.prompt", "Missing required parameter: 'prompt'.");
    if (json_is_string(p)) {
        *bytes += (int64_t)json_string_length(p);
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) > 0) {
        json_t *first = json_array_get(p, 0);
        size_t k;
        json_t *x;
        int ok = 1;
        if (json_is_string(first)) {
            json_array_foreach(p, k, x)
            {
                ok = ok && json_is_string(x);
                if (ok)
                    *bytes += (int64_t)json_string_length(x);
            }
        } else if (json_is_integer(first)) {
            ok = token_array_ok(p);
            *bytes += 4 * (int64_t)json_array_size(p);
        } else {
            json_array_foreach(p, k, x)
            {
                ok = ok && json_is_array(x) && token_array_ok(x);
                if (ok)
                    *bytes += 4 * (int64_t)json_array_size(x);
            }
        }
        if (ok)
            return 0;
    }
    return fail(e, "invalid_type", "body.prompt",
                "Invalid type for 'prompt': expected a string, an array of strings, an array of "
                "token ids or an array of token-id arrays (non-empty).");
}

/* An /v1/embeddings body: input (a non-empty string, an array of them, a
 * token array, or an array of token arrays - one kind, at most 2048
 * items), encoding_format float|base64, dimensions a positive integer
 * (its upper bound, the model's width, is the worker's check). What
 * depends on the model (token ids in range, the context length) is the
 * worker's: a per-line 400 result. */
static int check_embed(json_t *body, int64_t *bytes, struct ingest_error *e)
{
    json_t *p = json_object_get(body, "input");
    if (!p || json_is_null(p))
        return fail(e, "missing_required_parameter", "body.input", "Missing required parameter: 'input'.");
    if (json_is_string(p)) {
        if (json_string_length(p) == 0)
            return fail(e, "invalid_value", "body.input", "'input' must not be an empty string.");
        *bytes += (int64_t)json_string_length(p);
    } else if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        if (!token_array_ok(p))
            return fail(e, "invalid_type", "body.input",
                        "Invalid type for 'input': a token array must hold only token ids (0..2^31-1).");
        *bytes += 4 * (int64_t)json_array_size(p);
    } else if (json_is_array(p) && json_array_size(p) > 0) {
        if (json_array_size(p) > 2048)
            return fail(e, "invalid_value", "body.input", "'input' has %zu items; at most 2048 are allowed.",
                        json_array_size(p));
        int strings = json_is_string(json_array_get(p, 0));
        size_t k;
        json_t *x;
        json_array_foreach(p, k, x)
        {
            if (strings ? !json_is_string(x) : !(json_is_array(x) && token_array_ok(x)))
                return fail(e, "invalid_type", "body.input",
                            "Invalid type for 'input[%zu]': all items must be non-empty strings, or "
                            "all non-empty arrays of token ids (mixed types are not allowed).", k);
            if (strings && json_string_length(x) == 0)
                return fail(e, "invalid_value", "body.input", "'input[%zu]' is an empty string.", k);
            *bytes += strings ? (int64_t)json_string_length(x) : 4 * (int64_t)json_array_size(x);
        }
    } else {
        return fail(e, "invalid_type", "body.input",
                    "Invalid type for 'input': expected a non-empty string, an array of strings, an "
                    "array of token ids or an array of token-id arrays.");
    }
    json_t *f = json_object_get(body, "encoding_format");
    if (f && !json_is_null(f) &&
        (!json_is_string(f) || (strcmp(json_string_value(f), "float") && strcmp(json_string_value(f), "base64"))))
        return fail(e, "invalid_value", "body.encoding_format",
                    "Invalid value for 'encoding_format': expected 'float' or 'base64'.");
    json_t *d = json_object_get(body, "dimensions");
    if (d && !json_is_null(d) && (!json_is_integer(d) || json_integer_value(d) < 1))
        return fail(e, "invalid_value", "body.dimensions",
                    "Invalid value for 'dimensions': expected a positive integer.");
    return 0;
}

/* ---- optional parameters ------------------------------------------------------------------ */

enum num_kind { K_INT, K_NUM, K_BOOL };

struct num_rule {
    const char *name;
    enum num_kind kind;
    double min, max;
    int endpoints; /* 1 chat, 2 completions, 3 both */
};

static const struct num_rule num_rules[] = {
    {"n", K_INT, 1, 8, 3},
    {"temperature", K_NUM, 0, 2, 3},
    {"top_p", K_NUM, 0, 1, 3},
    {"presence_penalty", K_NUM, -2, 2, 3},
    {"frequency_penalty", K_NUM, -2, 2, 3},
    {"seed", K_INT, -9.2e18, 9.2e18, 3},
    {"logprobs", K_BOOL, 0, 0, 1},
    {"logprobs", K_INT, 0, 5, 2},
    {"top_logprobs", K_INT, 0, 20, 1},
    {"best_of", K_INT, 1, 20, 2},
    {"echo", K_BOOL, 0, 0, 2},
    {"stream", K_BOOL, 0, 0, 3},
};

static int check_params(json_t *body, int chat, const struct ingest_limits *lim, int64_t *max_tokens,
                        struct ingest_error *e)
{
    char param[64];
    for (size_t i = 0; i < sizeof num_rules / sizeof num_rules[0]; i++) {
        const struct num_rule *r = &num_rules[i];
        if (!(r->endpoints & (chat ? 1 : 2)))
            continue;
        json_t *v = json_object_get(body, r->name);
        if (!v || json_is_null(v))
            continue;
        snprintf(param, sizeof param, "body.%s", r->name);
        if (r->kind == K_BOOL) {
            if (!json_is_boolean(v))
                return fail(e, "invalid_type", param,
                            "Invalid type for '%s': expected a boolean, but got %s.", r->name,
                            json_type_name(v));
            continue;
        }
        if (r->kind == K_INT ? !json_is_integer(v) : !json_is_number(v))
            return fail(e, "invalid_type", param, "Invalid type for '%s': expected %s, but got %s.",
                        r->name, r->kind == K_INT ? "an integer" : "a number", json_type_name(v));
        double x = json_number_value(v);
        if (!(x >= r->min && x <= r->max))
            return fail(e, "invalid_value", param, "Invalid value for '%s': %g is not in [%g, %g].",
                        r->name, x, r->min, r->max);
    }
    if (json_is_true(json_object_get(body, "stream")))
        return fail(e, "unsupported_parameter", "body.stream",
                    "'stream' is not supported in batch requests.");
    json_t *best = json_object_get(body, "best_of"), *n = json_object_get(body, "n");
    if (!chat && json_is_integer(best) && json_is_integer(n) &&
        json_integer_value(best) < json_integer_value(n))
        return fail(e, "invalid_value", "body.best_of", "'best_of' must be greater than or equal to 'n'.");
    /* output token cap: max_completion_tokens wins over the legacy max_tokens */
    static const char *const caps[] = {"max_completion_tokens", "max_tokens"};
    *max_tokens = lim->max_output_tokens;
    for (int k = 1; k >= 0; k--) {
        if (k == 0 && !chat)
            continue; /* completions only has max_tokens */
        json_t *v = json_object_get(body, caps[k]);
        if (!v || json_is_null(v))
            continue;
        snprintf(param, sizeof param, "body.%s", caps[k]);
        if (!json_is_integer(v))
            return fail(e, "invalid_type", param, "Invalid type for '%s': expected an integer, but got %s.",
                        caps[k], json_type_name(v));
        json_int_t x = json_integer_value(v);
        if (x < 1 || x > lim->max_output_tokens)
            return fail(e, "invalid_value", param,
                        "Invalid value for '%s': %lld is not in [1, %lld] (the model's output limit).",
                        caps[k], (long long)x, (long long)lim->max_output_tokens);
        *max_tokens = (int64_t)x;
    }
    json_t *stop = json_object_get(body, "stop");
    if (stop && !json_is_null(stop)) {
        int ok = json_is_string(stop);
        if (json_is_array(stop) && json_array_size(stop) <= 4) {
            size_t k;
            json_t *x;
            ok = 1;
            json_array_foreach(stop, k, x) ok = ok && json_is_string(x);
        }
        if (!ok)
            return fail(e, "invalid_type", "body.stop",
                        "Invalid type for 'stop': expected a string or an array of up to 4 strings.");
    }
    /* structured outputs: the worker's compiler, so a schema accepted here is one
     * the worker runs (compiled once per distinct schema: gram_cache_get) */
    struct gram *g = NULL;
    struct gram_error ge;
    int rc = gp_format_parse(body, &g, &ge);
    gram_unref(g);
    if (rc == ERR_NOMEM)
        return rc;
    if (rc) {
        snprintf(param, sizeof param, "body.%.50s", ge.param);
        return fail(e, ge.code ? ge.code : "invalid_value", param, "%s", ge.message);
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
                                        NULL};

int ingest_line_check(const char *line, size_t len, const char *endpoint,
                      const struct ingest_limits *lim, struct ingest_line *out,
                      struct ingest_error *e)
{
    if (!ingest_utf8_valid(line, len))
        return fail(e, "invalid_utf8", NULL, "This line is not valid UTF-8.");
    struct js_limits jl = {lim->max_line_bytes, lim->max_json_depth, 1};
    struct js_error je;
    json_t *root = NULL;
    int rc = js_parse(line, len, &jl, &root, &je);
    if (rc == ERR_DEPTH)
        return fail(e, "invalid_json_line", NULL,
                    "This line is not parseable as valid JSON: nested deeper than %d levels.",
                    lim->max_json_depth);
    if (rc)
        return fail(e, "invalid_json_line", NULL,
                    "This line is not parseable as valid JSON: %s (column %d).", je.message, je.column);
    struct ingest_line l = {.root = root};
    if (!json_is_object(root)) {
        rc = fail(e, "invalid_json_line", NULL, "This line is valid JSON but not an object.");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "custom_id") && strcmp(k, "method") && strcmp(k, "url") && strcmp(k, "body")) {
            rc = fail(e, "unknown_parameter", NULL,
                      "Unrecognized field '%.60s': a line has only custom_id, method, url and body.", k);
            goto out;
        }
    }
    /* custom_id */
    json_t *cid = json_object_get(root, "custom_id");
    if (!cid || json_is_null(cid)) {
        rc = fail(e, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.");
        goto out;
    }
    if (!json_is_string(cid)) {
        rc = fail(e, "invalid_type", "custom_id",
                  "Invalid type for 'custom_id': expected a string, but got %s.", json_type_name(cid));
        goto out;
    }
    size_t clen = json_string_length(cid);
    if (clen < 1 || clen > STORE_CUSTOM_ID_MAX) {
        rc = fail(e, "invalid_value", "custom_id", "'custom_id' must be 1 to %d bytes long.",
                  STORE_CUSTOM_ID_MAX);
        goto out;
    }
    l.custom_id = json_string_value(cid);
    /* method */
    json_t *method = json_object_get(root, "method");
    if (!method || json_is_null(method)) {
        rc = fail(e, "missing_required_parameter", "method", "Missing required parameter: 'method'.");
        goto out;
    }
    if (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0) {
        rc = fail(e, "invalid_method", "method", "Invalid value for 'method': only \"POST\" is supported.");
        goto out;
    }
    /* url */
    json_t *url = json_object_get(root, "url");
    if (!url || json_is_null(url)) {
        rc = fail(e, "missing_required_parameter", "url", "Missing required parameter: 'url'.");
        goto out;
    }
    int known = 0;
    for (const char *const *p = endpoints; json_is_string(url) && *p && !known; p++)
        known = strcmp(json_string_value(url), *p) == 0;
    if (!known) {
        rc = fail(e, "invalid_url", "url",
                  "Invalid value for 'url': supported endpoints are /v1/chat/completions, "
                  "/v1/completions and /v1/embeddings.");
        goto out;
    }
    if (strcmp(json_string_value(url), endpoint) != 0) {
        rc = fail(e, "mismatched_endpoint", "url",
                  "The url '%s' does not match the batch's endpoint '%s'.", json_string_value(url),
                  endpoint);
        goto out;
    }
    /* body */
    json_t *body = json_object_get(root, "body");
    if (!body || json_is_null(body)) {
        rc = fail(e, "missing_required_parameter", "body", "Missing required parameter: 'body'.");
        goto out;
    }
    if (!json_is_object(body)) {
        rc = fail(e, "invalid_type", "body", "Invalid type for 'body': expected an object, but got %s.",
                  json_type_name(body));
        goto out;
    }
    l.body = body;
    json_t *model = json_object_get(body, "model");
    if (!model || json_is_null(model)) {
        rc = fail(e, "missing_required_parameter", "body.model", "Missing required parameter: 'model'.");
        goto out;
    }
    if (!json_is_string(model)) {
        rc = fail(e, "invalid_type", "body.model",
                  "Invalid type for 'model': expected a string, but got %s.", json_type_name(model));
        goto out;
    }
    if (json_string_length(model) < 1 || json_string_length(model) > 127) {
        rc = fail(e, "invalid_value", "body.model", "'model' must be 1 to 127 bytes long.");
        goto out;
    }
    l.model = json_string_value(model);
    int chat = strcmp(endpoint, "/v1/chat/completions") == 0;
    int embed = strcmp(endpoint, "/v1/embeddings") == 0;
    int64_t bytes = 0;
    if (embed) {
        if ((rc = check_embed(body, &bytes, e)))
            goto out;
        l.max_tokens = 0; /* no generation */
    } else {
        if ((rc = chat ? check_messages(body, &bytes, e) : check_prompt(body, &bytes, e)))
            goto out;
        if ((rc = check_params(body, chat, lim, &l.max_tokens, e)))
            goto out;
    }
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
