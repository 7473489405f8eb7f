/* js.c - JSON helpers over jansson (see js.h). */
#include "js.h"

#include <stdio.h>
#include <string.h>

#include "err.h"

int js_depth(const char *data, size_t len, int limit, size_t *stop_at)
{
    int depth = 0, max = 0, in_str = 0, esc = 0;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max) {
                max = depth;
                if (max > limit) {
                    if (stop_at)
                        *stop_at = i;
                    return -1;
                }
            }
        } else if (c == '}' || c == ']') {
            if (depth > 0)
                depth--;
        }
    }
    return max;
}

static void js_error_set(struct js_error *err, int line, int col, size_t pos, const char *msg)
{
    if (!err)
        return;
    err->line = line;
    err->column = col;
    err->position = pos;
    snprintf(err->message, sizeof err->message, "%s", msg);
}

int js_parse(const char *data, size_t len, const struct js_limits *lim, json_t **out,
             struct js_error *err)
{
    char msg[160];
    if (len > lim->max_bytes) {
        snprintf(msg, sizeof msg, "JSON document of %zu bytes exceeds the limit of %zu bytes", len,
                 lim->max_bytes);
        js_error_set(err, 0, 0, lim->max_bytes, msg);
        return ERR_TOOBIG;
    }
    size_t stop = 0;
    if (js_depth(data, len, lim->max_depth, &stop) < 0) {
        snprintf(msg, sizeof msg, "JSON nested deeper than %d levels", lim->max_depth);
        js_error_set(err, 0, 0, stop, msg);
        return ERR_DEPTH;
    }
    json_error_t je;
    size_t flags = JSON_REJECT_DUPLICATES | (lim->any_value ? JSON_DECODE_ANY : 0);
    json_t *v = json_loadb(data, len, flags, &je);
    if (!v) {
        js_error_set(err, je.line, je.column, je.position > 0 ? (size_t)je.position : 0, je.text);
        return ERR_PARSE;
    }
    *out = v;
    return 0;
}

static int js_get(const json_t *obj, const char *key, json_t **v)
{
    if (!json_is_object(obj))
        return ERR_INVAL;
    *v = json_object_get(obj, key);
    if (!*v || json_is_null(*v))
        return ERR_NOTFOUND;
    return 0;
}

int js_get_str(const json_t *obj, const char *key, const char **out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_string(v))
        return ERR_INVAL;
    *out = json_string_value(v);
    return 0;
}

int js_get_int(const json_t *obj, const char *key, int64_t *out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_integer(v))
        return ERR_INVAL;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

int js_get_num(const json_t *obj, const char *key, double *out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_number(v))
        return ERR_INVAL;
    *out = json_number_value(v);
    return 0;
}

int js_get_bool(const json_t *obj, const char *key, int *out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_boolean(v))
        return ERR_INVAL;
    *out = json_is_true(v);
    return 0;
}

int js_get_obj(const json_t *obj, const char *key, json_t **out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_object(v))
        return ERR_INVAL;
    *out = v;
    return 0;
}

int js_get_arr(const json_t *obj, const char *key, json_t **out)
{
    json_t *v;
    int rc = js_get(obj, key, &v);
    if (rc)
        return rc;
    if (!json_is_array(v))
        return ERR_INVAL;
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence starting at s[0] (n bytes left), or 0
 * if it is not one (bad lead or continuation byte, overlong form, surrogate,
 * above U+10FFFF, or cut short). */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < need; k++)
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    return need;
}

int js_escape(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    int rc = buf_append_byte(b, '"');
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) { /* copy a valid sequence; anything else becomes U+FFFD */
            size_t len = utf8_seq_len((const unsigned char *)s + i, n - i);
            if (len) {
                rc = buf_append(b, s + i, len);
                i += len - 1;
            } else {
                rc = buf_append(b, "\\ufffd", 6);
            }
            continue;
        }
        switch (c) {
        case '"': rc = buf_append(b, "\\\"", 2); break;
        case '\\': rc = buf_append(b, "\\\\", 2); break;
        case '\n': rc = buf_append(b, "\\n", 2); break;
        case '\r': rc = buf_append(b, "\\r", 2); break;
        case '\t': rc = buf_append(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                rc = buf_append(b, u, 6);
            } else {
                rc = buf_append_byte(b, (char)c);
            }
        }
    }
    return rc ? rc : buf_append_byte(b, '"');
}

struct js_dump_ctx {
    struct buf *b;
    int rc;
};

static int js_dump_cb(const char *chunk, size_t size, void *data)
{
    struct js_dump_ctx *ctx = data;
    ctx->rc = buf_append(ctx->b, chunk, size);
    return ctx->rc ? -1 : 0;
}

int js_dump(struct buf *b, const json_t *v)
{
    struct js_dump_ctx ctx = {b, 0};
    size_t before = b->len;
    if (json_dump_callback(v, js_dump_cb, &ctx, JSON_COMPACT | JSON_ENCODE_ANY) != 0) {
        b->len = before;
        if (b->data)
            b->data[b->len] = '\0';
        return ctx.rc ? ctx.rc : ERR_NOMEM;
    }
    return 0;
}
