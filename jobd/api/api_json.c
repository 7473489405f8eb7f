/*
 * api_json.c - JSON shapes of the API (OpenAI's File and Batch objects;
 * the error envelope is api_err.c's), built with buf_printf + js_escape so
 * field order matches OpenAI's documentation, and the request-parsing
 * rules they pair with (see api_json.h). Pure; any thread.
 */
#include "jobd/api/api_json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/cfg.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/js.h"
#include "jobd/api/api_err.h"
#include "jobd/http/http.h"
#include "jobd/work/reuse.h"

static int str_or_null(struct buf *b, const char *s)
{
    if (!s || !*s)
        return buf_append_str(b, "null");
    return js_escape(b, s, strlen(s));
}

static int int_or_null(struct buf *b, int64_t v)
{
    if (!v)
        return buf_append_str(b, "null");
    return buf_printf(b, "%lld", (long long)v);
}

int api_file_json(struct buf *out, const struct store_file *f)
{
    int rc;
    if ((rc = buf_printf(out, "{\"id\":")) || (rc = js_escape(out, f->id, strlen(f->id))) ||
        (rc = buf_printf(out, ",\"object\":\"file\",\"bytes\":%lld,\"created_at\":%lld,\"expires_at\":",
                         (long long)f->bytes, (long long)f->created_at)) ||
        (rc = int_or_null(out, f->expires_at)) || (rc = buf_append_str(out, ",\"filename\":")) ||
        (rc = js_escape(out, f->filename, strlen(f->filename))) ||
        (rc = buf_append_str(out, ",\"purpose\":")) ||
        (rc = js_escape(out, f->purpose, strlen(f->purpose))) ||
        (rc = buf_append_str(out, ",\"status\":")) ||
        (rc = js_escape(out, f->status, strlen(f->status))) ||
        (rc = buf_append_str(out, ",\"status_details\":null}")))
        return rc;
    return 0;
}

void api_window_format(int64_t s, char *out, size_t cap)
{
    if (s % 86400 == 0 && s != 86400)
        snprintf(out, cap, "%lldd", (long long)(s / 86400));
    else if (s % 3600 == 0)
        snprintf(out, cap, "%lldh", (long long)(s / 3600));
    else if (s % 60 == 0)
        snprintf(out, cap, "%lldm", (long long)(s / 60));
    else
        snprintf(out, cap, "%llds", (long long)s);
}

int api_window_parse(const char *s, int64_t min_s, int64_t *seconds)
{
    int64_t ms;
    if (!s || !*s || cfg_parse_duration_ms(s, &ms) || ms % 1000 != 0)
        return ERR_INVAL;
    int64_t v = ms / 1000;
    if (v < min_s || v < 1 || v > API_WINDOW_MAX_S)
        return ERR_INVAL;
    *seconds = v;
    return 0;
}

int api_metadata_check(const json_t *md, char *msg, size_t cap)
{
    if (!json_is_object(md)) {
        snprintf(msg, cap, "metadata must be an object of string values.");
        return ERR_INVAL;
    }
    if (json_object_size(md) > STORE_METADATA_MAX_PAIRS) {
        snprintf(msg, cap, "metadata may hold at most %d pairs.", STORE_METADATA_MAX_PAIRS);
        return ERR_INVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)md, k, v) {
        if (strlen(k) > STORE_METADATA_MAX_KEY) {
            snprintf(msg, cap, "metadata keys may be at most %d characters.", STORE_METADATA_MAX_KEY);
            return ERR_INVAL;
        }
        if (!json_is_string(v)) {
            snprintf(msg, cap, "metadata values must be strings.");
            return ERR_INVAL;
        }
        if (json_string_length(v) > STORE_METADATA_MAX_VALUE) {
            snprintf(msg, cap, "metadata values may be at most %d characters.",
                     STORE_METADATA_MAX_VALUE);
            return ERR_INVAL;
        }
        if (strcmp(k, "reuse") == 0 && !reuse_metadata_value_ok(json_string_value(v))) {
            snprintf(msg, cap, "metadata \"reuse\" must be \"on\" or \"off\".");
            return ERR_INVAL;
        }
    }
    return 0;
}

int api_batch_json(struct buf *out, const struct store_batch *b)
{
    char win[32];
    api_window_format(b->completion_window_s, win, sizeof win);
    const char *status = store_batch_status_name(b->status);
    int rc;
    if ((rc = buf_append_str(out, "{\"id\":")) || (rc = js_escape(out, b->id, strlen(b->id))) ||
        (rc = buf_append_str(out, ",\"object\":\"batch\",\"endpoint\":")) ||
        (rc = js_escape(out, b->endpoint, strlen(b->endpoint))) ||
        (rc = buf_append_str(out, ",\"model\":")) || (rc = str_or_null(out, b->model)) ||
        (rc = buf_append_str(out, ",\"errors\":")))
        return rc;
    if (b->errors && *b->errors)
        rc = buf_printf(out, "{\"object\":\"list\",\"data\":%s}", b->errors);
    else
        rc = buf_append_str(out, "null");
    if (rc || (rc = buf_append_str(out, ",\"input_file_id\":")) ||
        (rc = js_escape(out, b->input_file_id, strlen(b->input_file_id))) ||
        (rc = buf_printf(out, ",\"completion_window\":\"%s\",\"status\":\"%s\",\"output_file_id\":",
                         win, status)) ||
        (rc = str_or_null(out, b->output_file_id)) ||
        (rc = buf_append_str(out, ",\"error_file_id\":")) ||
        (rc = str_or_null(out, b->error_file_id)) ||
        (rc = buf_printf(out, ",\"created_at\":%lld,\"in_progress_at\":", (long long)b->created_at)) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_IN_PROGRESS])) ||
        (rc = buf_printf(out, ",\"expires_at\":%lld,\"finalizing_at\":", (long long)b->expires_at)) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_FINALIZING])) ||
        (rc = buf_append_str(out, ",\"completed_at\":")) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_COMPLETED])) ||
        (rc = buf_append_str(out, ",\"failed_at\":")) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_FAILED])) ||
        (rc = buf_append_str(out, ",\"expired_at\":")) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_EXPIRED])) ||
        (rc = buf_append_str(out, ",\"cancelling_at\":")) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_CANCELLING])) ||
        (rc = buf_append_str(out, ",\"cancelled_at\":")) ||
        (rc = int_or_null(out, b->at[STORE_BATCH_CANCELLED])) ||
        (rc = buf_printf(out, ",\"request_counts\":{\"total\":%lld,\"completed\":%lld,\"failed\":%lld}",
                         (long long)b->n_total, (long long)b->n_completed, (long long)b->n_failed)) ||
        (rc = buf_printf(out, ",\"usage\":{\"input_tokens\":%lld,\"input_tokens_details\":"
                              "{\"cached_tokens\":%lld},\"output_tokens\":%lld,\"output_tokens_details\":"
                              "{\"reasoning_tokens\":0},\"total_tokens\":%lld},\"cost\":{\"amount_micros\":%lld}",
                         (long long)b->usage_prompt_tokens, (long long)b->usage_cached_tokens,
                         (long long)b->usage_completion_tokens,
                         (long long)(b->usage_prompt_tokens + b->usage_completion_tokens),
                         (long long)b->usage_cost_micros)) ||
        (rc = buf_printf(out, ",\"api\":\"%s\"", strcmp(b->api, "anthropic") == 0 ? "anthropic" : "openai")) ||
        (rc = buf_append_str(out, ",\"metadata\":")) ||
        (rc = buf_append_str(out, b->metadata && *b->metadata ? b->metadata : "null")))
        return rc;
    return buf_append_str(out, "}");
}

int api_batch_json_ext(struct buf *out, const struct store_batch *b,
                       const struct store_model_served *served, size_t n_served)
{
    size_t start = out->len;
    int rc = api_batch_json(out, b);
    if (rc || b->status != STORE_BATCH_IN_PROGRESS || !b->model[0] || strcmp(b->model, STORE_MODEL_MIXED) == 0)
        return rc; /* (a mixed batch's waiting models are in GET /v1/models' waiting list) */
    /* served: a live worker answers to the model for this batch's endpoint */
    unsigned bit = strcmp(b->endpoint, "/v1/embeddings") == 0    ? STORE_EP_EMBEDDINGS
                   : strcmp(b->endpoint, "/v1/completions") == 0 ? STORE_EP_COMPLETIONS
                   : strcmp(b->endpoint, "/v1/responses") == 0   ? STORE_EP_RESPONSES
                                                                 : STORE_EP_CHAT;
    for (size_t i = 0; i < n_served; i++)
        if (strcmp(served[i].name, b->model) == 0 && (served[i].endpoints & bit))
            return 0;
    int64_t left = b->n_total - b->n_completed - b->n_failed;
    if (left <= 0 || out->len <= start)
        return 0;
    out->data[--out->len] = '\0'; /* reopen the object: drop its closing brace */
    if ((rc = buf_append_str(out, ",\"waiting_for_model\":{\"model\":")) ||
        (rc = js_escape(out, b->model, strlen(b->model))) ||
        (rc = buf_printf(out, ",\"requests\":%lld}}", (long long)left)))
        return rc;
    return 0;
}

int api_query_int(struct http_req *req, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
    const char *v = http_req_query(req, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return ERR_INVAL;
    *out = x;
    return 0;
}

int api_accepts_coding(const char *h, const char *coding)
{
    if (!h)
        return 0;
    size_t cl = strlen(coding);
    const char *p = h;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        size_t n = (size_t)(p - tok);
        const char *params = p;
        while (*p && *p != ',')
            p++;
        if (n == cl && strncasecmp(tok, coding, cl) == 0) {
            const char *q = strstr(params, "q=");
            if (q && q < p && strtod(q + 2, NULL) <= 0.0)
                return 0;
            return 1;
        }
    }
    return 0;
}

int api_expiry_check(const char *anchor, int64_t seconds, int64_t min_s, char *msg, size_t cap)
{
    if (anchor && strcmp(anchor, "created_at") != 0) {
        snprintf(msg, cap, "Invalid anchor '%.32s': the only anchor is \"created_at\".", anchor);
        return ERR_INVAL;
    }
    if (seconds < min_s || seconds > API_EXPIRY_MAX_S) {
        snprintf(msg, cap, "Invalid seconds %lld: use %lld (%s) to %d (30 days).", (long long)seconds,
                 (long long)min_s, min_s == API_EXPIRY_MIN_S ? "1 hour" : "--expiry-min", API_EXPIRY_MAX_S);
        return ERR_INVAL;
    }
    return 0;
}

int api_expiry_parse_json(const struct json_t *v, const char *field, int64_t min_s, int64_t *seconds,
                          enum api_err *e, char *msg, size_t cap, char *param)
{
    snprintf(param, 64, "%s", field);
    if (!json_is_object(v)) {
        snprintf(msg, cap, "%s must be an object {\"anchor\": \"created_at\", \"seconds\": N}.", field);
        *e = API_ERR_INVALID_TYPE;
        return -1;
    }
    json_t *a = json_object_get(v, "anchor"), *sec = json_object_get(v, "seconds");
    if (!a || !sec) {
        snprintf(param, 64, "%s.%s", field, a ? "seconds" : "anchor");
        snprintf(msg, cap, "Missing required parameter: '%s'.", param);
        *e = API_ERR_MISSING_PARAMETER;
        return -1;
    }
    if (!json_is_string(a) || !json_is_integer(sec)) {
        snprintf(param, 64, "%s.%s", field, json_is_string(a) ? "seconds" : "anchor");
        snprintf(msg, cap, "'%s' must be %s.", param, json_is_string(a) ? "an integer" : "a string");
        *e = API_ERR_INVALID_TYPE;
        return -1;
    }
    if (api_expiry_check(json_string_value(a), json_integer_value(sec), min_s, msg, cap)) {
        snprintf(param, 64, "%s.%s", field, strcmp(json_string_value(a), "created_at") ? "anchor" : "seconds");
        *e = API_ERR_INVALID_VALUE;
        return -1;
    }
    *seconds = json_integer_value(sec);
    return 0;
}

static void cursor_check(const char *batch_id, int64_t seq, char out[13])
{
    char msg[128];
    uint8_t d[SHA256_LEN];
    int n = snprintf(msg, sizeof msg, "jobd results cursor\n%s\n%lld", batch_id, (long long)seq);
    sha256(msg, (size_t)n, d);
    hex_encode(d, 6, out);
}

void api_results_cursor_make(const char *batch_id, int64_t seq, char out[API_CURSOR_LEN + 1])
{
    char chk[13];
    cursor_check(batch_id, seq, chk);
    snprintf(out, API_CURSOR_LEN + 1, "rc1%016llx%s", (unsigned long long)seq, chk);
}

int api_results_cursor_parse(const char *batch_id, const char *s, int64_t *seq)
{
    if (strlen(s) != API_CURSOR_LEN || strncmp(s, "rc1", 3) != 0)
        return ERR_INVAL;
    uint64_t v = 0;
    for (int i = 3; i < 19; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return ERR_INVAL;
        v = v << 4 | (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX)
        return ERR_INVAL;
    char chk[13];
    cursor_check(batch_id, (int64_t)v, chk);
    if (strcmp(chk, s + 19) != 0)
        return ERR_INVAL;
    *seq = (int64_t)v;
    return 0;
}
