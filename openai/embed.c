/* embed.c - the shape of a /v1/embeddings body (see embed.h). */
#include "openai/embed.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "text/tok.h"

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
static int parse_input(const json_t *body, const json_t ***items, size_t *n, struct problem *err)
{
    const json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in))
        return problem_setf(err, "missing_required_parameter", "input",
                            "Missing required parameter: 'input'.");
    /* a string, or an array of integers: one input */
    if (json_is_string(in) || (json_is_array(in) && json_array_size(in) > 0 &&
                               json_is_integer(json_array_get(in, 0)))) {
        if (kind_of(in) == IN_NONE)
            return problem_setf(err, "invalid_type", "input",
                                "Invalid type for 'input': a token array must hold only integers.");
        *items = malloc(sizeof **items);
        if (!*items)
            return ERR_NOMEM;
        (*items)[0] = in;
        *n = 1;
        return 0;
    }
    if (!json_is_array(in))
        return problem_setf(err, "invalid_type", "input",
                            "Invalid type for 'input': expected a string, an array of strings, an "
                            "array of integers or an array of integer arrays.");
    size_t k = json_array_size(in);
    if (k == 0)
        return problem_setf(err, "invalid_value", "input", "'input' must not be an empty array.");
    if (k > OEMBED_MAX_INPUTS)
        return problem_setf(err, "invalid_value", "input",
                            "'input' has %zu items; at most %d are allowed.", k, OEMBED_MAX_INPUTS);
    enum in_kind first = kind_of(json_array_get(in, 0));
    for (size_t i = 0; i < k; i++) {
        enum in_kind ki = kind_of(json_array_get(in, i));
        if (ki == IN_NONE || ki != first)
            return problem_setf(err, "invalid_type", "input",
                                "Invalid type for 'input[%zu]': all items must be strings, or all "
                                "arrays of integer token ids (mixed types are not allowed).", i);
    }
    *items = malloc(k * sizeof **items);
    if (!*items)
        return ERR_NOMEM;
    for (size_t i = 0; i < k; i++)
        (*items)[i] = json_array_get(in, i);
    *n = k;
    return 0;
}

/* The model-free rules of input idx. */
static int check_item(const json_t *v, size_t idx, size_t n_vocab, struct problem *err)
{
    if (json_is_string(v)) {
        size_t sl = json_string_length(v);
        if (sl == 0)
            return problem_setf(err, "invalid_value", "input", "'input[%zu]' is an empty string.",
                                idx);
        if (sl > TOK_MAX_INPUT_BYTES)
            return problem_setf(err, "context_length_exceeded", "input",
                                "'input[%zu]' is longer than %u bytes.", idx, TOK_MAX_INPUT_BYTES);
        return 0;
    }
    size_t n = json_array_size(v);
    if (n == 0)
        return problem_setf(err, "invalid_value", "input", "'input[%zu]' is an empty token array.",
                            idx);
    for (size_t j = 0; j < n; j++) {
        json_int_t id = json_integer_value(json_array_get(v, j));
        if (n_vocab && (id < 0 || (size_t)id >= n_vocab))
            return problem_setf(err, "invalid_value", "input",
                                "'input[%zu][%zu]' = %lld is not a token id of this model (0..%zu).",
                                idx, j, (long long)id, n_vocab - 1);
        if (!n_vocab && (id < 0 || id > INT32_MAX))
            return problem_setf(err, "invalid_value", "input",
                                "'input[%zu][%zu]' = %lld is not a token id (0..%d).", idx, j,
                                (long long)id, INT32_MAX);
    }
    return 0;
}

void oembed_body_release(struct oembed_body *b)
{
    if (!b)
        return;
    free(b->items);
    memset(b, 0, sizeof *b);
}

int oembed_body_parse(const json_t *body, size_t n_vocab, int n_embd, struct oembed_body *out,
                      struct problem *err)
{
    struct oembed_body b = {0};
    int rc;

    if (!json_is_object(body))
        return problem_setf(err, "invalid_type", NULL, "The body must be a JSON object.");
    const json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return problem_setf(err, "invalid_value", "encoding_format",
                                "Invalid value for 'encoding_format': expected 'float' or 'base64'.");
        b.b64 = strcmp(f, "base64") == 0;
    }
    const json_t *dj = json_object_get(body, "dimensions");
    if (dj && !json_is_null(dj)) {
        if (!json_is_integer(dj))
            return problem_setf(err, "invalid_type", "dimensions",
                                "Invalid type for 'dimensions': expected an integer.");
        json_int_t d = json_integer_value(dj);
        if (n_embd > 0 && (d < 1 || d > n_embd))
            return problem_setf(err, "invalid_value", "dimensions",
                                "Invalid value for 'dimensions': this model supports 1 to %d, got "
                                "%lld.", n_embd, (long long)d);
        if (d < 1 || d > INT32_MAX)
            return problem_setf(err, "invalid_value", "dimensions",
                                "Invalid value for 'dimensions': expected a positive integer, got "
                                "%lld.", (long long)d);
        b.dims = (int)d;
    }
    if ((rc = parse_input(body, &b.items, &b.n, err)))
        return rc;
    b.ids = !json_is_string(b.items[0]);
    for (size_t i = 0; i < b.n; i++)
        if ((rc = check_item(b.items[i], i, n_vocab, err))) {
            oembed_body_release(&b);
            return rc;
        }
    *out = b;
    return 0;
}
