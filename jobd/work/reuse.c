/*
 * reuse.c - result reuse for deterministic requests: the key, the mark on a
 * reused body, and the lease-time lookup. See reuse.h.
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

/* ---- lease time ------------------------------------------------------------------- */

int reuse_apply(struct store *st, int reuse_default, int64_t retention_s, const char *worker_id,
                const char *model, struct store_lease *l, int64_t now, size_t *n_reused)
{
    *n_reused = 0;
    if (retention_s <= 0 || !l || l->n == 0)
        return 0;
    char sha[REUSE_KEY_HEX], device[129], backend[129];
    int rc = store_reuse_worker(st, worker_id, model, sha, device);
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    reuse_backend(device, backend, sizeof backend);
    struct store_result *res = calloc(l->n, sizeof *res);
    int64_t *saved = calloc(l->n, sizeof *saved);
    char **bodies = calloc(l->n, sizeof *bodies);
    size_t *idx = calloc(l->n, sizeof *idx);
    enum store_commit_outcome *outc = calloc(l->n, sizeof *outc);
    unsigned char *gone = calloc(l->n, 1);
    size_t nh = 0;
    if (!res || !saved || !bodies || !idx || !outc || !gone) {
        rc = ERR_NOMEM;
        goto out;
    }
    /* the keys and the reused commit: one transaction */
    if ((rc = store_tx_enter_lease(st)))
        goto out;
    /* a pack has few batches: one opt-in lookup per run of equal batch ids */
    const char *lastb = NULL;
    int wants = 0;
    for (size_t i = 0; !rc && i < l->n; i++) {
        struct store_leased *it = &l->items[i];
        if (!lastb || strcmp(lastb, it->batch_id) != 0) {
            struct store_batch b;
            wants = 0;
            if (store_batch_get(st, NULL, it->batch_id, &b) == 0) {
                wants = reuse_batch_wants(b.metadata, reuse_default);
                store_batch_release(&b);
            }
            lastb = it->batch_id;
        }
        if (!wants)
            continue;
        char key[REUSE_KEY_HEX];
        int krc = sha[0] ? reuse_key(it->tenant_id, it->endpoint, it->body, it->body_len, sha, backend, key)
                         : ERR_INVAL;
        if (krc == ERR_NOMEM) {
            rc = krc;
            break;
        }
        struct store_reuse_hit h;
        int hrc = krc ? ERR_NOTFOUND : store_reuse_get(st, it->tenant_id, key, now - retention_s, &h);
        if (hrc == 0) {
            int64_t tok = h.prompt_tokens + h.completion_tokens;
            char *mb = NULL;
            size_t mlen = 0;
            int mrc = reuse_mark_body(h.body, h.body_len, tok, &mb, &mlen);
            if (mrc == 0) {
                bodies[nh] = mb;
                res[nh] = (struct store_result){.request_id = it->id, .kind = STORE_RESULT_SUCCESS,
                                                .status_code = h.status_code, .body = mb,
                                                .body_len = mlen};
                saved[nh] = tok;
                idx[nh++] = i;
            }
            free(h.body);
            if (mrc == ERR_NOMEM)
                rc = mrc;
            if (mrc == 0) {
                /* a hit: no key, so that its answer is never recorded as a computed one */
                if (!rc)
                    rc = store_reuse_key_set(st, it->id, l->id, NULL);
                continue;
            }
        } else if (hrc != ERR_NOTFOUND) {
            rc = hrc;
            break;
        }
        /* a miss: remember the key (or clear an earlier lease's) so its success is recorded */
        if (!rc)
            rc = store_reuse_key_set(st, it->id, l->id, krc ? NULL : key);
    }
    if (!rc && nh)
        rc = store_reuse_commit(st, l->id, worker_id, res, saved, nh, now, outc);
    if ((rc = store_tx_leave(st, rc)) || nh == 0)
        goto out;
    for (size_t k = 0; k < nh; k++)
        if (outc[k] == STORE_COMMIT_OK) {
            gone[idx[k]] = 1;
            (*n_reused)++;
        }
    size_t w = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (gone[i]) {
            free(l->items[i].custom_id);
            free(l->items[i].body);
            continue;
        }
        l->items[w++] = l->items[i];
    }
    l->n = w;
out:
    for (size_t k = 0; bodies && k < nh; k++)
        free(bodies[k]);
    free(res);
    free(saved);
    free(bodies);
    free(idx);
    free(outc);
    free(gone);
    return rc;
}
