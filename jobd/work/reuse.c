/*
 * reuse.c - result reuse for deterministic requests: the key, the mark on a
 * reused body, the opt-in (pure functions over bytes, fuzzed by
 * tests/fuzz/fuzz_reuse.c). The lease-time lookup is reuse_apply.c. See
 * reuse.h.
 */
#include "jobd/work/reuse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/crypto.h"
#include "common/err.h"
#include "common/js.h"

/* the bodies reuse reads are those ingest accepted (1 MiB, depth 16 at most) */
static json_t *load_obj(const char *body, size_t len)
{
    json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

static int deterministic(const json_t *o)
{
    json_t *seed = json_object_get(o, "seed");
    if (seed && json_is_integer(seed))
        return 1;
    json_t *t = json_object_get(o, "temperature");
    return t && json_is_number(t) && json_number_value(t) == 0.0;
}

int reuse_deterministic(const char *body, size_t len)
{
    json_t *o = body ? load_obj(body, len) : NULL;
    int yes = o && deterministic(o);
    json_decref(o);
    return yes;
}

static int dump_cb(const char *chunk, size_t size, void *data)
{
    return sha256_update(data, chunk, size) ? -1 : 0;
}

int reuse_key(const char *tenant_id, const char *endpoint, const char *body, size_t len,
              const char *model_sha256, const char *backend, char out[REUSE_KEY_HEX])
{
    if (!tenant_id || !endpoint || !body || !model_sha256 || !*model_sha256 || !backend || !*backend)
        return ERR_INVAL;
    json_t *o = load_obj(body, len);
    if (!o || !deterministic(o)) {
        json_decref(o);
        return ERR_INVAL;
    }
    struct sha256_ctx *c = sha256_new();
    if (!c) {
        json_decref(o);
        return ERR_NOMEM;
    }
    const char *parts[] = {"jobd-reuse-v1", tenant_id, endpoint, model_sha256, backend};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof parts / sizeof parts[0]; i++)
        if ((rc = sha256_update(c, parts[i], strlen(parts[i]))) == 0)
            rc = sha256_update(c, "\n", 1);
    if (!rc && json_dump_callback(o, dump_cb, c, JSON_COMPACT | JSON_SORT_KEYS) != 0)
        rc = ERR_NOMEM;
    json_decref(o);
    if (rc) {
        sha256_free(c);
        return rc;
    }
    uint8_t d[SHA256_LEN];
    if ((rc = sha256_final(c, d)))
        return rc;
    hex_encode(d, SHA256_LEN, out);
    return 0;
}

void reuse_backend(const char *device, char *out, size_t cap)
{
    if (!cap)
        return;
    if (!device || !*device)
        device = "cpu";
    size_t k = strcspn(device, ": ");
    const char *rest = "";
    if (device[k] == ':') {
        const char *sp = strchr(device + k, ' ');
        rest = sp ? sp : "";
    } else if (device[k] == ' ')
        rest = device + k;
    snprintf(out, cap, "%.*s%s", (int)k, device, rest);
}

static const char *meta_reuse(const json_t *m)
{
    json_t *v = json_is_object(m) ? json_object_get(m, "reuse") : NULL;
    return v ? (json_is_string(v) ? json_string_value(v) : "") : NULL;
}

int reuse_batch_wants(const char *metadata, int dflt)
{
    if (!metadata)
        return dflt;
    json_t *m = json_loads(metadata, 0, NULL);
    const char *v = meta_reuse(m);
    int yes = !reuse_metadata_value_ok(v) ? dflt : strcmp(v, "on") == 0;
    json_decref(m);
    return yes;
}

int reuse_metadata_value_ok(const char *v)
{
    return v && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0);
}

int reuse_mark_body(const char *body, size_t len, int64_t reused_tokens, char **out, size_t *out_len)
{
    json_t *o = load_obj(body, len);
    if (!o)
        return ERR_INVAL;
    int rc = 0;
    json_t *fp = json_object_get(o, "system_fingerprint");
    struct buf b;
    buf_init(&b, SIZE_MAX);
    if (fp && json_is_string(fp))
        rc = buf_printf(&b, "%s%s", json_string_value(fp), REUSE_MARK);
    else
        rc = buf_append_str(&b, "reused");
    json_t *usage = json_object_get(o, "usage");
    if (!rc && (json_object_set_new(o, "system_fingerprint", json_stringn(b.data, b.len)) ||
                (json_is_object(usage) &&
                 json_object_set_new(usage, "reused_tokens", json_integer(reused_tokens)))))
        rc = ERR_NOMEM;
    b.len = 0;
    if (!rc)
        rc = js_dump(&b, o);
    json_decref(o);
    if (rc) {
        buf_release(&b);
        return rc;
    }
    *out = buf_detach(&b, out_len);
    return *out ? 0 : ERR_NOMEM;
}
