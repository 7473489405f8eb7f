/*
 * gram_valid.c - is a JSON value valid against a JSON Schema (gram.h
 * gram_json_valid): the check behind tool calls that were not generated
 * under a call grammar (openai/tools.c).
 *
 * JSON Schema's meaning, not the generated language's: members in any
 * order, any whitespace, numbers with exponents are all fine. The keywords
 * are those of spec/structured-outputs.md (what gram_json.c compiles) plus
 * a few cheap ones a non-strict schema may carry (oneOf, not, prefixItems,
 * uniqueItems, min/maxProperties, boolean schemas); any other keyword is an
 * annotation (ignored), as in Python's jsonschema. Two leaves are checked
 * through the compiler itself: a string with `pattern`, `format`,
 * `minLength` or `maxLength` is valid when its JSON text is a sentence of
 * the grammar of {"type":"string"} with those keywords (so `pattern`
 * matches anywhere, as JSON Schema says; a format the compiler does not
 * know is an annotation). That grammar's narrowness (no 29 February in
 * `date`, lowercase `uuid`) is the one place this check is stricter than
 * jsonschema.
 *
 * Cost: one walk of the value, with $ref targets resolved by JSON pointer
 * (nesting capped at VALID_MAX_DEPTH: deeper is invalid) and string leaves
 * compiled once through the grammar cache. Thread: any.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "common/js.h"

#define VALID_MAX_DEPTH 128   /* schema frames ($ref, anyOf, nesting) per path */

struct vc {
    const json_t *root;   /* '#' of $ref */
    int depth;
    int nomem;
};

static int valid(struct vc *c, const json_t *s, const json_t *v);

static double num(const json_t *v) { return json_number_value(v); }

/* JSON equality with numbers compared by value (1 == 1.0), as JSON Schema. */
static int same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return num(a) == num(b);
    }
    if (json_typeof(a) != json_typeof(b))
        return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *x;
        if (json_object_size(a) != json_object_size(b))
            return 0;
        json_object_foreach((json_t *)a, k, x) {
            const json_t *y = json_object_get(b, k);
            if (!y || !same(x, y))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

static int type_is(const char *t, const json_t *v)
{
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && isfinite(num(v)) && num(v) == floor(num(v)));
    return 1;   /* an unknown type name: not ours to refuse */
}

static const json_t *resolve(const json_t *root, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *n = root;
    const char *p = ref + 1;
    while (n && *p) {
        if (*p++ != '/')
            return NULL;
        char tok[128];
        size_t k = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1'))
                ch = *p++ == '0' ? '~' : '/';
            if (k + 1 >= sizeof tok)
                return NULL;
            tok[k++] = ch;
        }
        tok[k] = 0;
        n = json_is_object(n) ? json_object_get(n, tok)
            : json_is_array(n) ? json_array_get(n, (size_t)strtoul(tok, NULL, 10))
                               : NULL;
    }
    return n;
}

/* The string leaf: v's JSON text against the grammar of s's string keywords. */
static int string_leaf(struct vc *c, const json_t *s, const json_t *v)
{
    static const char *const keys[] = {"pattern", "format", "minLength", "maxLength", NULL};
    json_t *sub = json_pack("{s:s}", "type", "string");
    for (int i = 0; sub && keys[i]; i++) {
        json_t *x = json_object_get(s, keys[i]);
        if (x && json_object_set(sub, keys[i], x) != 0) {
            json_decref(sub);
            sub = NULL;
        }
    }
    char *st = sub ? json_dumps(sub, JSON_COMPACT) : NULL;
    char *vt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(sub);
    int ok = 1;
    struct gram *g = NULL;
    struct problem e;
    if (!st || !vt) {
        c->nomem = 1;
        ok = 0;
    } else {
        int rc = gram_cache_get(GRAM_JSON_SCHEMA, st, strlen(st), &g, &e);
        if (rc == ERR_NOMEM) {
            c->nomem = 1;
            ok = 0;
        } else if (rc == 0) {
            ok = gram_match(g, vt, strlen(vt));
        }   /* else a keyword the compiler does not know (a format): an annotation */
    }
    gram_unref(g);
    free(st);
    free(vt);
    return ok;
}

static int number_ok(const json_t *s, const json_t *v)
{
    const json_t *x;
    double d = num(v);
    if ((x = json_object_get(s, "minimum")) && json_is_number(x) && d < num(x))
        return 0;
    if ((x = json_object_get(s, "maximum")) && json_is_number(x) && d > num(x))
        return 0;
    if ((x = json_object_get(s, "exclusiveMinimum")) && json_is_number(x) && d <= num(x))
        return 0;
    if ((x = json_object_get(s, "exclusiveMaximum")) && json_is_number(x) && d >= num(x))
        return 0;
    if ((x = json_object_get(s, "multipleOf")) && json_is_number(x) && num(x) > 0) {
        if (json_is_integer(v) && json_is_integer(x))
            return json_integer_value(v) % json_integer_value(x) == 0;
        double q = d / num(x);
        return isfinite(q) && fabs(q - nearbyint(q)) < 1e-9;
    }
    return 1;
}

static int array_ok(struct vc *c, const json_t *s, const json_t *v)
{
    const json_t *x;
    size_t n = json_array_size(v), from = 0;
    if ((x = json_object_get(s, "minItems")) && json_is_integer(x) &&
        (json_int_t)n < json_integer_value(x))
        return 0;
    if ((x = json_object_get(s, "maxItems")) && json_is_integer(x) &&
        (json_int_t)n > json_integer_value(x))
        return 0;
    const json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (!pre && json_is_array(items)) {   /* draft 4 tuples */
        pre = items;
        items = json_object_get(s, "additionalItems");
    }
    for (; json_is_array(pre) && from < json_array_size(pre) && from < n; from++)
        if (!valid(c, json_array_get(pre, from), json_array_get(v, from)))
            return 0;
    if (json_is_array(pre))
        from = json_array_size(pre);
    for (size_t i = from; items && i < n; i++)
        if (!valid(c, items, json_array_get(v, i)))
            return 0;
    if (json_is_true(json_object_get(s, "uniqueItems")))
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (same(json_array_get(v, i), json_array_get(v, j)))
                    return 0;
    return 1;
}

static int object_ok(struct vc *c, const json_t *s, const json_t *v)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties"), *x;
    size_t n = json_object_size(v);
    if ((x = json_object_get(s, "minProperties")) && json_is_integer(x) &&
        (json_int_t)n < json_integer_value(x))
        return 0;
    if ((x = json_object_get(s, "maxProperties")) && json_is_integer(x) &&
        (json_int_t)n > json_integer_value(x))
        return 0;
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (k && !json_object_get(v, k))
            return 0;
    }
    const char *k;
    json_t *m;
    json_object_foreach((json_t *)v, k, m) {
        const json_t *ps = json_is_object(props) ? json_object_get(props, k) : NULL;
        if (ps) {
            if (!valid(c, ps, m))
                return 0;
        } else if (addl && !valid(c, addl, m)) {
            return 0;
        }
    }
    return 1;
}

static int valid_node(struct vc *c, const json_t *s, const json_t *v)
{
    if (json_is_boolean(s))
        return json_is_true(s);
    if (!json_is_object(s))
        return 1;
    const json_t *x;
    if ((x = json_object_get(s, "$ref")) && json_is_string(x)) {
        const json_t *t = resolve(c->root, json_string_value(x));
        if (t && !valid(c, t, v))
            return 0;
    }
    if ((x = json_object_get(s, "type"))) {
        int any = 0;
        if (json_is_string(x))
            any = type_is(json_string_value(x), v);
        for (size_t i = 0; json_is_array(x) && i < json_array_size(x) && !any; i++)
            any = !json_is_string(json_array_get(x, i)) ||
                  type_is(json_string_value(json_array_get(x, i)), v);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "const")) && !same(x, v))
        return 0;
    if ((x = json_object_get(s, "enum")) && json_is_array(x)) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(x) && !any; i++)
            any = same(json_array_get(x, i), v);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "allOf")) && json_is_array(x))
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!valid(c, json_array_get(x, i), v))
                return 0;
    if ((x = json_object_get(s, "anyOf")) && json_is_array(x)) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(x) && !any; i++)
            any = valid(c, json_array_get(x, i), v);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "oneOf")) && json_is_array(x)) {
        int n = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            n += valid(c, json_array_get(x, i), v);
        if (n != 1)
            return 0;
    }
    if ((x = json_object_get(s, "not")) && valid(c, x, v))
        return 0;
    if (json_is_string(v) &&
        (json_object_get(s, "pattern") || json_object_get(s, "format") ||
         json_object_get(s, "minLength") || json_object_get(s, "maxLength")))
        return string_leaf(c, s, v);
    if (json_is_number(v))
        return number_ok(s, v);
    if (json_is_array(v))
        return array_ok(c, s, v);
    if (json_is_object(v))
        return object_ok(c, s, v);
    return 1;
}

static int valid(struct vc *c, const json_t *s, const json_t *v)
{
    if (c->nomem || c->depth >= VALID_MAX_DEPTH)
        return 0;
    c->depth++;
    int ok = valid_node(c, s, v);
    c->depth--;
    return ok && !c->nomem;
}

int gram_json_valid(const char *schema, size_t schema_len, const char *value, size_t value_len)
{
    struct js_limits lim = {GRAM_MAX_SCHEMA_BYTES, VALID_MAX_DEPTH, 1};
    struct js_error je;
    json_t *s = NULL, *v = NULL;
    int rc = js_parse(schema, schema_len, &lim, &s, &je);
    if (rc == ERR_NOMEM)
        return rc;
    if (rc)
        return 0;
    rc = js_parse(value, value_len, &lim, &v, &je);
    if (rc) {
        json_decref(s);
        return rc == ERR_NOMEM ? rc : 0;
    }
    struct vc c = {s, 0, 0};
    int ok = valid(&c, s, v);
    json_decref(s);
    json_decref(v);
    return c.nomem ? ERR_NOMEM : ok;
}
