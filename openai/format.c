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
    static const char *const fields[] = {"response_format", "guided_json", "guided_regex",
                                         "guided_choice", "guided_grammar", NULL};
    const char *given = NULL;
    for (int i = 0; fields[i]; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (!v || json_is_null(v))
            continue;
        if (i == 0) {
            json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
            if (json_is_string(t) && strcmp(json_string_value(t), "text") == 0)
                continue;
        }
        if (given)
            return problem_setf(err, "invalid_value", fields[i],
                         "Only one of 'response_format', 'guided_json', 'guided_regex' and "
                         "'guided_choice' may be given; got '%s' and '%s'.", given, fields[i]);
        given = fields[i];
    }
    if (!given)
        return 0;
    enum gram_kind kind = 0;
    struct buf src;
    buf_init(&src, GRAM_MAX_SCHEMA_BYTES + 1);
    char param[64];
    snprintf(param, sizeof param, "%s", given);
    const char *what = given;
    char label[224] = "";
    int rc = 0;
    json_t *v = json_object_get(body, given);
    if (strcmp(given, "guided_grammar") == 0) {
        rc = problem_setf(err, "unsupported_parameter", given,
                   "Unsupported parameter: 'guided_grammar' is not supported by this server "
                   "(use guided_json, guided_regex or guided_choice).");
        goto out;
    }
    if (strcmp(given, "response_format") == 0) {
        json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!json_is_string(t)) {
            rc = problem_setf(err, "invalid_value", "response_format",
                       "Invalid 'response_format': expected an object with a 'type' of 'text', "
                       "'json_object' or 'json_schema'.");
            goto out;
        }
        const char *ty = json_string_value(t);
        if (strcmp(ty, "json_object") == 0) {
            kind = GRAM_JSON_OBJECT;
        } else if (strcmp(ty, "json_schema") == 0) {
            json_t *js = json_object_get(v, "json_schema");
            snprintf(param, sizeof param, "response_format.json_schema");
            if (!json_is_object(js)) {
                rc = problem_setf(err, "missing_required_parameter", param,
                           "Missing required parameter: 'response_format.json_schema'.");
                goto out;
            }
            json_t *name = json_object_get(js, "name");
            if (!json_is_string(name) || json_string_length(name) == 0 ||
                json_string_length(name) > 64 ||
                strspn(json_string_value(name), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                "0123456789_-") != json_string_length(name)) {
                rc = problem_setf(err, "invalid_value", "response_format.json_schema.name",
                           "Invalid 'response_format.json_schema.name': expected a string of 1 to 64 "
                           "characters a-z, A-Z, 0-9, '_' or '-'.");
                goto out;
            }
            json_t *st = json_object_get(js, "strict");
            if (st && !json_is_boolean(st) && !json_is_null(st)) {
                rc = problem_setf(err, "invalid_type", "response_format.json_schema.strict",
                           "Invalid type for 'response_format.json_schema.strict': expected a boolean.");
                goto out;
            }
            json_t *sc = json_object_get(js, "schema");
            snprintf(param, sizeof param, "response_format.json_schema.schema");
            snprintf(label, sizeof label, "Invalid schema for response_format '%s' "
                     "('response_format.json_schema.schema'): ", json_string_value(name));
            kind = GRAM_JSON_SCHEMA;
            if (!sc || json_is_null(sc)) {
                kind = GRAM_JSON_SCHEMA;
                if (buf_append_str(&src, "{}") != 0) {
                    rc = ERR_NOMEM;
                    goto out;
                }
            } else if (!json_is_object(sc) && !json_is_boolean(sc)) {
                rc = problem_setf(err, "invalid_type", param,
                           "Invalid type for '%s': expected an object.", param);
                goto out;
            } else if ((rc = schema_text(sc, &src)) != 0) {
                rc = problem_setf(err, "invalid_value", param, "Invalid '%s': the schema is larger than %u bytes.",
                           param, GRAM_MAX_SCHEMA_BYTES);
                goto out;
            }
        } else {
            rc = problem_setf(err, "invalid_value", "response_format.type",
                       "Invalid value for 'response_format.type': '%.40s'. Supported values are: "
                       "'text', 'json_object' and 'json_schema'.", ty);
            goto out;
        }
    } else if (strcmp(given, "guided_json") == 0) {
        kind = GRAM_JSON_SCHEMA;
        snprintf(label, sizeof label, "Invalid schema in 'guided_json': ");
        if (json_is_string(v)) {
            if (buf_append(&src, json_string_value(v), json_string_length(v)) != 0) {
                rc = problem_setf(err, "invalid_value", given, "Invalid 'guided_json': the schema is larger "
                           "than %u bytes.", GRAM_MAX_SCHEMA_BYTES);
                goto out;
            }
        } else if (json_is_object(v) || json_is_boolean(v)) {
            if (schema_text(v, &src) != 0) {
                rc = problem_setf(err, "invalid_value", given, "Invalid 'guided_json': the schema is larger "
                           "than %u bytes.", GRAM_MAX_SCHEMA_BYTES);
                goto out;
            }
        } else {
            rc = problem_setf(err, "invalid_type", given,
                       "Invalid type for 'guided_json': expected an object or a string.");
            goto out;
        }
    } else if (strcmp(given, "guided_regex") == 0) {
        kind = GRAM_REGEX;
        snprintf(label, sizeof label, "Invalid 'guided_regex': ");
        if (!json_is_string(v)) {
            rc = problem_setf(err, "invalid_type", given,
                       "Invalid type for 'guided_regex': expected a string.");
            goto out;
        }
        if (buf_append(&src, json_string_value(v), json_string_length(v)) != 0) {
            rc = problem_setf(err, "invalid_value", given, "Invalid 'guided_regex': longer than %d bytes.",
                       GRAM_MAX_REGEX_BYTES);
            goto out;
        }
    } else {   /* guided_choice */
        kind = GRAM_CHOICE;
        snprintf(label, sizeof label, "Invalid 'guided_choice': ");
        if (!json_is_array(v) || json_array_size(v) == 0 ||
            json_array_size(v) > GRAM_MAX_CHOICES) {
            rc = problem_setf(err, "invalid_type", given,
                       "Invalid 'guided_choice': expected an array of 1 to %d non-empty strings.",
                       GRAM_MAX_CHOICES);
            goto out;
        }
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *s = json_array_get(v, i);
            if (!json_is_string(s) || json_string_length(s) == 0 ||
                memchr(json_string_value(s), 0, json_string_length(s))) {
                rc = problem_setf(err, "invalid_value", given,
                           "Invalid 'guided_choice[%zu]': expected a non-empty string.", i);
                goto out;
            }
            if ((i && buf_append_byte(&src, 0) != 0) ||
                buf_append(&src, json_string_value(s), json_string_length(s)) != 0) {
                rc = problem_setf(err, "invalid_value", given, "Invalid 'guided_choice': larger than %u bytes.",
                           GRAM_MAX_SCHEMA_BYTES);
                goto out;
            }
        }
    }
    (void)what;
    struct problem ce;
    memset(&ce, 0, sizeof ce);
    rc = gram_cache_get(kind, src.data ? src.data : "", src.len, out, &ce);
    if (rc && rc != ERR_NOMEM) {
        problem_setf(err, "invalid_value", param, "%s%s", label, ce.message);
        rc = rc == ERR_TOOBIG ? ERR_TOOBIG : ERR_INVAL;
        if (strstr(ce.message, "not supported"))
            snprintf(err->code, sizeof err->code, "%s", "unsupported_value");
    }
out:
    buf_release(&src);
    return rc;
}
