/*
 * embed_req.c - /v1/embeddings bodies: parse, tokenize, embed, answer.
 * See embed_req.h for the fields, the rules and the response shape.
 *
 *   oembed_body_parse   -> n inputs, each a string or a json id array (borrowed),
 *                          the rules that need no model (openai/embed.h)
 *   tokenize / copy ids -> ids[i] (owned), lens[i]; refuse empty / too long
 *   embed_run           -> (n, n_embd) unit vectors
 *   cut to dimensions, normalise again, build the list body
 */
#include "worker/run/embed_req.h"

#include <stdlib.h>
#include <string.h>

#include "common/crypto.h"
#include "common/err.h"
#include "worker/engine/embed.h"

/* The token ids of one input (already checked by oembed_body_parse) into
 * *ids (malloc'd) / *len: tokenized, and refused when longer than n_ctx. */
static int input_ids(const struct tok *t, const json_t *v, size_t idx, int n_ctx, int32_t **ids,
                     int *len, struct problem *err)
{
    *ids = NULL;
    size_t n;
    int32_t *p;
    if (json_is_string(v)) {
        size_t sl = json_string_length(v), cap = TOK_ENCODE_BOUND(sl);
        if (!(p = malloc(cap * sizeof *p)))
            return ERR_NOMEM;
        int rc = tok_encode(t, json_string_value(v), sl, TOK_ADD_SPECIAL, p, cap, &n);
        if (rc || n == 0) {
            free(p);
            return rc ? rc : problem_setf(err, "invalid_value", "input", "'input[%zu]' gives no tokens.", idx);
        }
    } else {
        n = json_array_size(v);
        if (!(p = malloc((n ? n : 1) * sizeof *p)))
            return ERR_NOMEM;
        for (size_t j = 0; j < n; j++)
            p[j] = (int32_t)json_integer_value(json_array_get(v, j));
    }
    if (n > (size_t)n_ctx) {
        free(p);
        return problem_setf(err, "context_length_exceeded", "input",
                            "'input[%zu]' is %zu tokens long; this model's maximum context length "
                            "is %d tokens.", idx, n, n_ctx);
    }
    *ids = p;
    *len = (int)n;
    return 0;
}

/* One data item: the first dims values of v, as floats or base64. */
static json_t *item_json(size_t index, const float *v, int dims, int b64)
{
    json_t *o = json_object(), *e = NULL;
    if (!o)
        return NULL;
    if (b64) {
        size_t nb = (size_t)dims * sizeof(float);
        unsigned char *raw = malloc(nb);
        char *s = malloc(BASE64_LEN(nb) + 1);
        if (raw && s) {
            for (int k = 0; k < dims; k++) { /* little-endian float32 */
                uint32_t u;
                memcpy(&u, &v[k], 4);
                for (int b = 0; b < 4; b++)
                    raw[(size_t)k * 4 + (size_t)b] = (unsigned char)(u >> (8 * b));
            }
            base64_encode(raw, nb, s);
            e = json_string(s);
        }
        free(raw);
        free(s);
    } else if ((e = json_array())) {
        for (int k = 0; k < dims; k++)
            if (json_array_append_new(e, json_real((double)v[k]))) {
                json_decref(e);
                e = NULL;
                break;
            }
    }
    if (!e || json_object_set_new(o, "object", json_string("embedding")) ||
        json_object_set_new(o, "index", json_integer((json_int_t)index)) ||
        json_object_set_new(o, "embedding", e)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void oembed_prep_release(struct oembed_prep *p)
{
    if (!p)
        return;
    if (p->ids)
        for (size_t i = 0; i < p->n; i++)
            free(p->ids[i]);
    free(p->ids);
    free(p->lens);
    memset(p, 0, sizeof *p);
}

int oembed_prepare(struct model_ctx *c, const struct tok *t, const json_t *body,
                   struct oembed_prep *p, struct problem *err)
{
    const struct model *m = model_ctx_model(c);
    int n_embd = m->hp.n_embd, n_ctx = model_ctx_n_ctx(c);
    struct oembed_body eb;
    int rc;

    memset(p, 0, sizeof *p);
    if ((rc = oembed_body_parse(body, (size_t)m->hp.n_vocab, n_embd, &eb, err)))
        return rc;
    p->b64 = eb.b64;
    p->dims = eb.dims ? eb.dims : n_embd;
    rc = ERR_NOMEM;
    p->n = eb.n;
    p->ids = calloc(eb.n, sizeof *p->ids);
    p->lens = calloc(eb.n, sizeof *p->lens);
    if (!p->ids || !p->lens)
        goto out;
    for (size_t i = 0; i < eb.n; i++) {
        if ((rc = input_ids(t, eb.items[i], i, n_ctx, &p->ids[i], &p->lens[i], err)))
            goto out;
        p->n_tokens += p->lens[i];
    }
    rc = 0;
out:
    oembed_body_release(&eb);
    if (rc)
        oembed_prep_release(p);
    return rc;
}

int oembed_answer(const struct oembed_prep *p, int n_embd, const char *model_name, float *vec,
                  json_t **resp)
{
    json_t *data = json_array(), *usage = json_object(), *out = json_object();
    if (!data || !usage || !out)
        goto fail;
    for (size_t i = 0; i < p->n; i++) {
        float *v = vec + i * (size_t)n_embd;
        if (p->dims < n_embd)
            embed_normalize(v, p->dims);
        if (json_array_append_new(data, item_json(i, v, p->dims, p->b64)))
            goto fail;
    }
    if (json_object_set_new(out, "object", json_string("list")) ||
        json_object_set(out, "data", data) ||
        json_object_set_new(out, "model", json_string(model_name ? model_name : "")) ||
        json_object_set_new(usage, "prompt_tokens", json_integer(p->n_tokens)) ||
        json_object_set_new(usage, "total_tokens", json_integer(p->n_tokens)) ||
        json_object_set(out, "usage", usage))
        goto fail;
    json_decref(data);
    json_decref(usage);
    *resp = out;
    return 0;
fail:
    json_decref(data);
    json_decref(usage);
    json_decref(out);
    return ERR_NOMEM;
}

int oembed_run(struct model_ctx *c, const struct tok *t, const char *model_name,
               const json_t *body, json_t **resp, int64_t *n_tokens, struct problem *err)
{
    const struct model *m = model_ctx_model(c);
    struct oembed_prep p;
    int rc = oembed_prepare(c, t, body, &p, err);
    if (rc)
        return rc;
    float *vec = malloc(p.n * (size_t)m->hp.n_embd * sizeof *vec);
    rc = ERR_NOMEM;
    if (vec && !(rc = embed_run(c, embed_default_pooling(m), 1, (const int32_t *const *)p.ids,
                                p.lens, (int)p.n, vec)) &&
        !(rc = oembed_answer(&p, m->hp.n_embd, model_name, vec, resp)))
        *n_tokens = p.n_tokens;
    free(vec);
    oembed_prep_release(&p);
    return rc;
}
