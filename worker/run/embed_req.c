/*
 * embed_req.c - /v1/embeddings bodies: parse, tokenize, embed, answer.
 * See embed_req.h for the fields, the rules and the response shape.
 *
 *   parse input         -> n inputs, each a string or a json id array (borrowed)
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

enum in_kind { IN_NONE, IN_TEXT, IN_IDS };

/* The kind of one element of `input` (a string, or an array of integers). */
static enum in_kind kind_of(const json_t *v)
{
    if (json_is_string(v))
        return IN_TEXT;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_integer(json_array_get(v, i)))
                return IN_NONE;
        return IN_IDS;
    }
    return IN_NONE;
}

/* The inputs of body: *items (n borrowed json values, each a string or an
 * id array), or ERR_INVAL with err. */
static int parse_input(const json_t *body, const json_t ***items, size_t *n, struct gp_error *err)
{
    const json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in))
        return gp_fail(err, "input", "missing_required_parameter", "Missing required parameter: 'input'.");
    /* a string, or an array of integers: one input */
    if (json_is_string(in) || (json_is_array(in) && json_array_size(in) > 0 &&
                               json_is_integer(json_array_get(in, 0)))) {
        if (kind_of(in) == IN_NONE)
            return gp_fail(err, "input", "invalid_type",
                           "Invalid type for 'input': a token array must hold only integers.");
        *items = malloc(sizeof **items);
        if (!*items)
            return ERR_NOMEM;
        (*items)[0] = in;
        *n = 1;
        return 0;
    }
    if (!json_is_array(in))
        return gp_fail(err, "input", "invalid_type",
                       "Invalid type for 'input': expected a string, an array of strings, an array "
                       "of integers or an array of integer arrays.");
    size_t k = json_array_size(in);
    if (k == 0)
        return gp_fail(err, "input", "invalid_value", "'input' must not be an empty array.");
    if (k > OEMBED_MAX_INPUTS)
        return gp_fail(err, "input", "invalid_value", "'input' has %zu items; at most %d are allowed.",
                       k, OEMBED_MAX_INPUTS);
    enum in_kind first = kind_of(json_array_get(in, 0));
    for (size_t i = 0; i < k; i++) {
        enum in_kind ki = kind_of(json_array_get(in, i));
        if (ki == IN_NONE || ki != first)
            return gp_fail(err, "input", "invalid_type",
                           "Invalid type for 'input[%zu]': all items must be strings, or all arrays "
                           "of integer token ids (mixed types are not allowed).", i);
    }
    *items = malloc(k * sizeof **items);
    if (!*items)
        return ERR_NOMEM;
    for (size_t i = 0; i < k; i++)
        (*items)[i] = json_array_get(in, i);
    *n = k;
    return 0;
}

/* The token ids of one input into *ids (malloc'd) / *len. */
static int input_ids(const struct tok *t, const json_t *v, size_t idx, int n_ctx, size_t n_vocab,
                     int32_t **ids, int *len, struct gp_error *err)
{
    *ids = NULL;
    if (json_is_string(v)) {
        size_t sl = json_string_length(v);
        if (sl == 0)
            return gp_fail(err, "input", "invalid_value", "'input[%zu]' is an empty string.", idx);
        if (sl > TOK_MAX_INPUT_BYTES)
            return gp_fail(err, "input", "context_length_exceeded",
                           "'input[%zu]' is longer than %u bytes.", idx, TOK_MAX_INPUT_BYTES);
        size_t cap = TOK_ENCODE_BOUND(sl), n;
        int32_t *p = malloc(cap * sizeof *p);
        if (!p)
            return ERR_NOMEM;
        int rc = tok_encode(t, json_string_value(v), sl, TOK_ADD_SPECIAL, p, cap, &n);
        if (rc) {
            free(p);
            return rc;
        }
        if (n == 0) {
            free(p);
            return gp_fail(err, "input", "invalid_value", "'input[%zu]' gives no tokens.", idx);
        }
        if (n > (size_t)n_ctx) {
            free(p);
            return gp_fail(err, "input", "context_length_exceeded",
                           "'input[%zu]' is %zu tokens long; this model's maximum context length "
                           "is %d tokens.", idx, n, n_ctx);
        }
        *ids = p;
        *len = (int)n;
        return 0;
    }
    size_t n = json_array_size(v);
    if (n == 0)
        return gp_fail(err, "input", "invalid_value", "'input[%zu]' is an empty token array.", idx);
    if (n > (size_t)n_ctx)
        return gp_fail(err, "input", "context_length_exceeded",
                       "'input[%zu]' is %zu tokens long; this model's maximum context length is %d "
                       "tokens.", idx, n, n_ctx);
    int32_t *p = malloc(n * sizeof *p);
    if (!p)
        return ERR_NOMEM;
    for (size_t j = 0; j < n; j++) {
        json_int_t id = json_integer_value(json_array_get(v, j));
        if (id < 0 || (size_t)id >= n_vocab) {
            free(p);
            return gp_fail(err, "input", "invalid_value",
                           "'input[%zu][%zu]' = %lld is not a token id of this model (0..%zu).", idx,
                           j, (long long)id, n_vocab - 1);
        }
        p[j] = (int32_t)id;
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
                   struct oembed_prep *p, struct gp_error *err)
{
    const struct model *m = model_ctx_model(c);
    int n_embd = m->hp.n_embd, n_ctx = model_ctx_n_ctx(c);
    const json_t **items = NULL;
    size_t n = 0;
    int rc;

    memset(p, 0, sizeof *p);
    if (!json_is_object(body))
        return gp_fail(err, NULL, "invalid_type", "The body must be a JSON object.");
    const json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return gp_fail(err, "encoding_format", "invalid_value",
                           "Invalid value for 'encoding_format': expected 'float' or 'base64'.");
        p->b64 = strcmp(f, "base64") == 0;
    }
    p->dims = n_embd;
    const json_t *dj = json_object_get(body, "dimensions");
    if (dj && !json_is_null(dj)) {
        if (!json_is_integer(dj))
            return gp_fail(err, "dimensions", "invalid_type",
                           "Invalid type for 'dimensions': expected an integer.");
        json_int_t d = json_integer_value(dj);
        if (d < 1 || d > n_embd)
            return gp_fail(err, "dimensions", "invalid_value",
                           "Invalid value for 'dimensions': this model supports 1 to %d, got %lld.",
                           n_embd, (long long)d);
        p->dims = (int)d;
    }
    if ((rc = parse_input(body, &items, &n, err)))
        return rc;
    rc = ERR_NOMEM;
    p->n = n;
    p->ids = calloc(n, sizeof *p->ids);
    p->lens = calloc(n, sizeof *p->lens);
    if (!p->ids || !p->lens)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if ((rc = input_ids(t, items[i], i, n_ctx, (size_t)m->hp.n_vocab, &p->ids[i], &p->lens[i],
                            err)))
            goto out;
        p->n_tokens += p->lens[i];
    }
    rc = 0;
out:
    free(items);
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
               const json_t *body, json_t **resp, int64_t *n_tokens, struct gp_error *err)
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
