/*
 * format.c - the output constraint a request body asks for: response_format
 * or vLLM's guided_* fields, compiled by common/gram (see params.h,
 * gp_format_parse).
 */
#include "openai/params.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/gram/gram.h"
#include "common/js.h"

static int schema_text(const json_t *schema, struct buf *out)
{
    return js_dump(out, schema);
}

/* What one request field compiles to: the grammar kind, its source text,
 * the param a compile error names and the prefix of its message. */
struct fmt {
    enum gram_kind kind;
    struct buf src;
    char param[64];
    char label[224];
};

/* The one constraint field given (NULL: none; response_format of type
 * "text" counts as none), or ERR_INVAL when two are. */
static int format_field(const json_t *body, const char **given, struct problem *err)
{
    static const char *const fields[] = {"response_format", "guided_json", "guided_regex",
                                         "guided_choice", "guided_grammar", NULL};
    *given = NULL;
    for (int i = 0; fields[i]; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (!v || json_is_null(v))
            continue;
        if (i == 0) {
            json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
            if (json_is_string(t) && strcmp(json_string_value(t), "text") == 0)
                continue;
        }
        if (*given)
            return problem_setf(err, "invalid_value", fields[i],
                         "Only one of 'response_format', 'guided_json', 'guided_regex' and "
                         "'guided_choice' may be given; got '%s' and '%s'.", *given, fields[i]);
        *given = fields[i];
    }
    return 0;
}

/* response_format.json_schema: name, strict, schema (absent: {}). */
static int fmt_json_schema(json_t *js, struct fmt *f, struct problem *err)
{
    snprintf(f->param, sizeof f->param, "response_format.json_schema");
    if (!json_is_object(js))
        return problem_setf(err, "missing_required_parameter", f->param,
                   "Missing required parameter: 'response_format.json_schema'.");
    json_t *name = json_object_get(js, "name");
    if (!json_is_string(name) || json_string_length(name) == 0 ||
        json_string_length(name) > 64 ||
        strspn(json_string_value(name), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-") != json_string_length(name))
        return problem_setf(err, "invalid_value", "response_format.json_schema.name",
                   "Invalid 'response_format.json_schema.name': expected a string of 1 to 64 "
                   "characters a-z, A-Z, 0-9, '_' or '-'.");
    json_t *st = json_object_get(js, "strict");
    if (st && !json_is_boolean(st) && !json_is_null(st))
        return problem_setf(err, "invalid_type", "response_format.json_schema.strict",
                   "Invalid type for 'response_format.json_schema.strict': expected a boolean.");
    json_t *sc = json_object_get(js, "schema");
    snprintf(f->param, sizeof f->param, "response_format.json_schema.schema");
    snprintf(f->label, sizeof f->label, "Invalid schema for response_format '%s' "
             "('response_format.json_schema.schema'): ", json_string_value(name));
    f->kind = GRAM_JSON_SCHEMA;
    if (!sc || json_is_null(sc))
        return buf_append_str(&f->src, "{}") != 0 ? ERR_NOMEM : 0;
    if (!json_is_object(sc) && !json_is_boolean(sc))
        return problem_setf(err, "invalid_type", f->param,
                   "Invalid type for '%s': expected an object.", f->param);
    if (schema_text(sc, &f->src) != 0)
        return problem_setf(err, "invalid_value", f->param, "Invalid '%s': the schema is larger than %u bytes.",
                   f->param, GRAM_MAX_SCHEMA_BYTES);
    return 0;
}

static int fmt_response_format(json_t *v, struct fmt *f, struct problem *err)
{
    json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t))
        return problem_setf(err, "invalid_value", "response_format",
                   "Invalid 'response_format': expected an object with a 'type' of 'text', "
                   "'json_object' or 'json_schema'.");
    const char *ty = json_string_value(t);
    if (strcmp(ty, "json_object") == 0) {
        f->kind = GRAM_JSON_OBJECT;
        return 0;
    }
    if (strcmp(ty, "json_schema") == 0)
        return fmt_json_schema(json_object_get(v, "json_schema"), f, err);
    return problem_setf(err, "invalid_value", "response_format.type",
               "Invalid value for 'response_format.type': '%.40s'. Supported values are: "
               "'text', 'json_object' and 'json_schema'.", ty);
}

static int fmt_guided_json(json_t *v, struct fmt *f, struct problem *err)
{
    f->kind = GRAM_JSON_SCHEMA;
    snprintf(f->label, sizeof f->label, "Invalid schema in 'guided_json': ");
    int too_big;
    if (json_is_string(v))
        too_big = buf_append(&f->src, json_string_value(v), json_string_length(v)) != 0;
    else if (json_is_object(v) || json_is_boolean(v))
        too_big = schema_text(v, &f->src) != 0;
    else
        return problem_setf(err, "invalid_type", "guided_json",
                   "Invalid type for 'guided_json': expected an object or a string.");
    if (too_big)
        return problem_setf(err, "invalid_value", "guided_json", "Invalid 'guided_json': the schema is larger "
                   "than %u bytes.", GRAM_MAX_SCHEMA_BYTES);
    return 0;
}

static int fmt_guided_regex(json_t *v, struct fmt *f, struct problem *err)
{
    f->kind = GRAM_REGEX;
    snprintf(f->label, sizeof f->label, "Invalid 'guided_regex': ");
    if (!json_is_string(v))
        return problem_setf(err, "invalid_type", "guided_regex",
                   "Invalid type for 'guided_regex': expected a string.");
    if (buf_append(&f->src, json_string_value(v), json_string_length(v)) != 0)
        return problem_setf(err, "invalid_value", "guided_regex", "Invalid 'guided_regex': longer than %d bytes.",
                   GRAM_MAX_REGEX_BYTES);
    return 0;
}

/* guided_choice: the strings, NUL-separated. */
static int fmt_guided_choice(json_t *v, struct fmt *f, struct problem *err)
{
    f->kind = GRAM_CHOICE;
    snprintf(f->label, sizeof f->label, "Invalid 'guided_choice': ");
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > GRAM_MAX_CHOICES)
        return problem_setf(err, "invalid_type", "guided_choice",
                   "Invalid 'guided_choice': expected an array of 1 to %d non-empty strings.",
                   GRAM_MAX_CHOICES);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            memchr(json_string_value(s), 0, json_string_length(s)))
            return problem_setf(err, "invalid_value", "guided_choice",
                       "Invalid 'guided_choice[%zu]': expected a non-empty string.", i);
        if ((i && buf_append_byte(&f->src, 0) != 0) ||
            buf_append(&f->src, json_string_value(s), json_string_length(s)) != 0)
            return problem_setf(err, "invalid_value", "guided_choice", "Invalid 'guided_choice': larger than %u bytes.",
                       GRAM_MAX_SCHEMA_BYTES);
    }
    return 0;
}

int gp_format_parse(const json_t *body, struct gram **out, struct problem *err)
{
    struct problem e0;
    if (!err)
        err = &e0;
    memset(err, 0, sizeof *err);
    if (!out)
        return ERR_INVAL;
    *out = NULL;
    if (!json_is_object(body))
        return 0;
    const char *given;
    int rc = format_field(body, &given, err);
    if (rc || !given)
        return rc;
    if (strcmp(given, "guided_grammar") == 0)
        return problem_setf(err, "unsupported_parameter", given,
                   "Unsupported parameter: 'guided_grammar' is not supported by this server "
                   "(use guided_json, guided_regex or guided_choice).");
    struct fmt f = {0};
    buf_init(&f.src, GRAM_MAX_SCHEMA_BYTES + 1);
    snprintf(f.param, sizeof f.param, "%s", given);
    json_t *v = json_object_get(body, given);
    if (strcmp(given, "response_format") == 0)
        rc = fmt_response_format(v, &f, err);
    else if (strcmp(given, "guided_json") == 0)
        rc = fmt_guided_json(v, &f, err);
    else if (strcmp(given, "guided_regex") == 0)
        rc = fmt_guided_regex(v, &f, err);
    else
        rc = fmt_guided_choice(v, &f, err);
    if (rc == 0) {
        struct problem ce;
        memset(&ce, 0, sizeof ce);
        rc = gram_cache_get(f.kind, f.src.data ? f.src.data : "", f.src.len, out, &ce);
        if (rc && rc != ERR_NOMEM) {
            problem_setf(err, "invalid_value", f.param, "%s%s", f.label, ce.message);
            rc = rc == ERR_TOOBIG ? ERR_TOOBIG : ERR_INVAL;
            if (strstr(ce.message, "not supported"))
                snprintf(err->code, sizeof err->code, "%s", "unsupported_value");
        }
    }
    buf_release(&f.src);
    return rc;
}
