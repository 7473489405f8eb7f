/* tools.c - tool calling: request fields, grammar, parser (see tools.h). */
#include "openai/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/gram/gram.h"
#include "openai/params_int.h"

void gp_tools_release(struct gp_tools *t)
{
    if (!t)
        return;
    json_decref(t->tools);
    free(t->callable);
    memset(t, 0, sizeof *t);
}

/* ---- request fields --------------------------------------------------------- */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > GP_TOOL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Compile a parameters schema (compact JSON) through the cache. */
static int schema_compiles(const json_t *params, struct problem *ge)
{
    char *txt = json_dumps(params, JSON_COMPACT);
    if (!txt)
        return ERR_NOMEM;
    struct gram *g = NULL;
    int rc = gram_cache_get(GRAM_JSON_SCHEMA, txt, strlen(txt), &g, ge);
    gram_unref(g);
    free(txt);
    return rc;
}

/* One function definition fn (chat's tools[i].function or legacy
 * functions[i]) -> the nested tool, appended to arr. */
static int parse_function(const json_t *fn, const char *path, json_t *arr, struct problem *err)
{
    if (!json_is_object(fn))
        return problem_setf(err, "invalid_type", path,
                            "Invalid type for '%s': expected an object, but got %s instead.",
                            path, gp_type_name(fn));
    const json_t *name = gp_member(fn, "name");
    if (!name)
        return problem_setf(err, "missing_required_parameter", path,
                            "Missing required parameter: '%s.name'.", path);
    if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
        return problem_setf(err, "invalid_value", path,
                            "Invalid '%s.name': a function name is 1 to %d characters of a-z, "
                            "A-Z, 0-9, underscores and dashes.", path, GP_TOOL_NAME_MAX);
    const json_t *desc = gp_member(fn, "description"), *params = gp_member(fn, "parameters");
    const json_t *strict = gp_member(fn, "strict");
    if (desc && !json_is_string(desc))
        return problem_setf(err, "invalid_type", path,
                            "Invalid type for '%s.description': expected a string.", path);
    if (params && !json_is_object(params))
        return problem_setf(err, "invalid_type", path,
                            "Invalid type for '%s.parameters': expected a JSON Schema object, "
                            "but got %s instead.", path, gp_type_name(params));
    if (strict && !json_is_boolean(strict))
        return problem_setf(err, "invalid_type", path,
                            "Invalid type for '%s.strict': expected a boolean.", path);
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_object_get(json_array_get(arr, i), "function");
        if (json_equal(json_object_get(o, "name"), name))
            return problem_setf(err, "invalid_value", path,
                                "Invalid '%s.name': the function name '%s' is declared twice.",
                                path, json_string_value(name));
    }
    if (json_is_true(strict) && params) {
        struct problem ge;
        memset(&ge, 0, sizeof ge);
        int rc = schema_compiles(params, &ge);
        if (rc == ERR_NOMEM)
            return rc;
        if (rc)
            return problem_setf(err, "invalid_function_parameters", path,
                                "Invalid '%s.parameters': function '%s' is strict, but its "
                                "schema cannot be enforced: %s", path, json_string_value(name),
                                ge.message);
    }
    json_t *f = json_object(), *tool = json_object();
    if (!f || !tool || json_object_set(f, "name", (json_t *)name) ||
        (desc && json_object_set(f, "description", (json_t *)desc)) ||
        (params && json_object_set(f, "parameters", (json_t *)params)) ||
        (strict && json_object_set(f, "strict", (json_t *)strict)) ||
        json_object_set_new(tool, "type", json_string("function")) ||
        json_object_set_new(tool, "function", f) || json_array_append_new(arr, tool)) {
        json_decref(tool);
        return ERR_NOMEM;
    }
    return 0;
}

static int parse_list(const json_t *body, struct gp_tools *t, struct problem *err)
{
    const json_t *tools = gp_member(body, "tools"), *fns = gp_member(body, "functions");
    if (tools && fns && json_array_size(fns))
        return problem_setf(err, "invalid_value", "functions",
                            "Invalid value: give 'tools' or the legacy 'functions', not both.");
    const json_t *v = tools ? tools : fns;
    const char *key = tools ? "tools" : "functions";
    if (!v)
        return 0;
    if (!json_is_array(v))
        return problem_setf(err, "invalid_type", key,
                            "Invalid type for '%s': expected an array, but got %s instead.", key,
                            gp_type_name(v));
    size_t n = json_array_size(v);
    if (n == 0)
        return 0;
    if (n > GP_MAX_TOOLS)
        return problem_setf(err, "array_above_max_length", key,
                            "Invalid '%s': array too long. Expected an array with maximum length "
                            "%d, but got an array with length %zu instead.", key, GP_MAX_TOOLS, n);
    if (!(t->tools = json_array()))
        return ERR_NOMEM;
    t->legacy = !tools;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        char path[48];
        int rc;
        if (tools) {
            const char *ty = json_string_value(json_object_get(e, "type"));
            snprintf(path, sizeof path, "tools[%zu]", i);
            if (!json_is_object(e) || !ty)
                return problem_setf(err, "invalid_value", path,
                                    "Invalid '%s': expected {\"type\": \"function\", "
                                    "\"function\": {...}}.", path);
            if (strcmp(ty, "function") != 0)
                return problem_setf(err, "unsupported_value", path,
                                    "Unsupported value for '%s': tool type '%.40s' is not "
                                    "supported by this server (only 'function' tools).", path, ty);
            snprintf(path, sizeof path, "tools[%zu].function", i);
            rc = parse_function(json_object_get(e, "function"), path, t->tools, err);
        } else {
            snprintf(path, sizeof path, "functions[%zu]", i);
            rc = parse_function(e, path, t->tools, err);
        }
        if (rc)
            return rc;
    }
    t->n = n;
    return 0;
}

static int tool_index(const struct gp_tools *t, const char *name)
{
    for (size_t i = 0; name && i < t->n; i++) {
        const json_t *f = json_object_get(json_array_get(t->tools, i), "function");
        if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
            return (int)i;
    }
    return -1;
}

/* A {"type":"function","function":{"name"}} (or legacy {"name"}) choice. */
static int choose_named(struct gp_tools *t, const json_t *fn, const char *key, struct problem *err)
{
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name)
        return problem_setf(err, "invalid_value", key,
                            "Invalid '%s': a named choice needs the function's 'name'.", key);
    int k = tool_index(t, name);
    if (k < 0)
        return problem_setf(err, "invalid_value", key,
                            "Invalid '%s': function '%.64s' is not among the declared tools.",
                            key, name);
    memset(t->callable, 0, t->n);
    t->callable[k] = 1;
    t->choice = GP_TOOL_REQUIRED;
    t->named = 1;
    return 0;
}

static int choose_allowed(struct gp_tools *t, const json_t *c, struct problem *err)
{
    const json_t *a = json_object_get(c, "allowed_tools");
    const char *mode = json_string_value(json_object_get(a, "mode"));
    const json_t *list = json_object_get(a, "tools");
    if (!mode || (strcmp(mode, "auto") != 0 && strcmp(mode, "required") != 0) ||
        !json_is_array(list) || json_array_size(list) == 0)
        return problem_setf(err, "invalid_value", "tool_choice",
                            "Invalid 'tool_choice': allowed_tools needs 'mode' \"auto\" or "
                            "\"required\" and a non-empty 'tools' list.");
    memset(t->callable, 0, t->n);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *e = json_array_get(list, i);
        const json_t *fn = json_object_get(e, "function");
        const char *name = json_string_value(json_object_get(fn ? fn : e, "name"));
        int k = tool_index(t, name);
        if (k < 0)
            return problem_setf(err, "invalid_value", "tool_choice",
                                "Invalid 'tool_choice': allowed tool '%.64s' is not among the "
                                "declared tools.", name ? name : "");
        t->callable[k] = 1;
    }
    t->choice = strcmp(mode, "auto") == 0 ? GP_TOOL_AUTO : GP_TOOL_REQUIRED;
    return 0;
}

static int parse_choice(const json_t *body, struct gp_tools *t, struct problem *err)
{
    const json_t *c = gp_member(body, "tool_choice");
    const char *key = "tool_choice";
    if (!c && (c = gp_member(body, "function_call")) != NULL)
        key = "function_call";
    t->choice = t->n ? GP_TOOL_AUTO : GP_TOOL_NONE;
    if (!c)
        return 0;
    const char *s = json_string_value(c);
    if (s && strcmp(s, "none") == 0) {
        t->choice = GP_TOOL_NONE;
        return 0;
    }
    if (!t->n)
        return problem_setf(err, "invalid_value", key,
                            "Invalid value for '%s': '%s' is only allowed when '%s' are "
                            "specified.", key, key, strcmp(key, "tool_choice") ? "functions" : "tools");
    if (s && strcmp(s, "auto") == 0)
        return 0;
    if (s && strcmp(s, "required") == 0 && strcmp(key, "tool_choice") == 0) {
        t->choice = GP_TOOL_REQUIRED;
        return 0;
    }
    if (s || !json_is_object(c))
        return problem_setf(err, "invalid_value", key,
                            "Invalid value for '%s': expected \"none\", \"auto\"%s or an "
                            "object naming a function.", key,
                            strcmp(key, "tool_choice") ? "" : ", \"required\"");
    if (strcmp(key, "function_call") == 0)
        return choose_named(t, c, key, err);
    const char *ty = json_string_value(json_object_get(c, "type"));
    if (ty && strcmp(ty, "function") == 0)
        return choose_named(t, json_object_get(c, "function"), key, err);
    if (ty && strcmp(ty, "allowed_tools") == 0)
        return choose_allowed(t, c, err);
    return problem_setf(err, "invalid_value", key,
                        "Invalid value for 'tool_choice': type '%.40s' is not supported (use "
                        "\"function\" or \"allowed_tools\").", ty ? ty : "");
}

int gp_tools_parse(const json_t *body, struct gp_tools *out, struct problem *err)
{
    struct gp_tools t;
    memset(&t, 0, sizeof t);
    t.parallel = 1;
    int rc = parse_list(body, &t, err);
    if (rc == 0 && t.n && !(t.callable = malloc(t.n)))
        rc = ERR_NOMEM;
    if (rc == 0 && t.n)
        memset(t.callable, 1, t.n);
    if (rc == 0)
        rc = parse_choice(body, &t, err);
    if (rc == 0) {
        const json_t *p = gp_member(body, "parallel_tool_calls");
        if (p && !json_is_boolean(p))
            rc = problem_setf(err, "invalid_type", "parallel_tool_calls",
                              "Invalid type for 'parallel_tool_calls': expected a boolean, but "
                              "got %s instead.", gp_type_name(p));
        else if (p)
            t.parallel = json_is_true(p);
        if (t.legacy)
            t.parallel = 0;   /* function_call answers hold one call */
    }
    if (rc) {
        gp_tools_release(&t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- the call grammar ---------------------------------------------------------- */

/* Whether schema v holds a "$ref" anywhere. */
static int has_ref(const json_t *v)
{
    const char *k;
    json_t *x;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, x) {
            if (strcmp(k, "$ref") == 0 || has_ref(x))
                return 1;
        }
    }
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
        if (has_ref(json_array_get(v, i)))
            return 1;
    return 0;
}

/* A copy of schema v with every local "$ref" ("#...") rebased under the
 * pointer at: a $ref is resolved against the root of the schema being
 * compiled (common/gram), and the call grammar embeds a function's
 * parameters deep inside its own schema. NULL on NOMEM. */
static json_t *rebased(const json_t *v, const char *at)
{
    if (json_is_array(v)) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < json_array_size(v); i++)
            if (json_array_append_new(a, rebased(json_array_get(v, i), at))) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    if (!json_is_object(v))
        return json_deep_copy(v);
    json_t *o = json_object();
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        json_t *c;
        const char *r = json_string_value(x);
        if (strcmp(k, "$ref") == 0 && r && r[0] == '#') {
            size_t n = strlen(at) + strlen(r);
            char *s = malloc(n);
            c = NULL;
            if (s) {
                snprintf(s, n, "%s%s", at, r + 1);
                c = json_string(s);
                free(s);
            }
        } else {
            c = rebased(x, at);
        }
        if (!o || !c || json_object_set_new(o, k, c)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* {"name": const, argkey: parameters} for callable function i; parameters
 * that do not compile (non-strict) become any object. Parameters with
 * $refs go to defs (the call schema's root "$defs") as "f<i>", rebased
 * there, and are referenced. */
static json_t *call_schema(const json_t *fn, size_t i, const char *argkey, json_t *defs)
{
    const json_t *params = json_object_get(fn, "parameters");
    struct problem ge;
    memset(&ge, 0, sizeof ge);
    json_t *p;
    if (!params || schema_compiles(params, &ge) != 0) {
        p = json_pack("{s:s}", "type", "object");
    } else if (has_ref(params)) {
        char key[32], at[48];
        snprintf(key, sizeof key, "f%zu", i);
        snprintf(at, sizeof at, "#/$defs/%s", key);
        json_t *r = rebased(params, at);
        p = r && json_object_set_new(defs, key, r) == 0 ? json_pack("{s:s}", "$ref", at) : NULL;
    } else {
        p = json_incref((json_t *)params);
    }
    return p ? json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s,s], s:b}", "type", "object", "properties",
                         "name", "const", json_object_get(fn, "name"), argkey, p, "required",
                         "name", argkey, "additionalProperties", 0)
             : NULL;
}

static json_t *calls_anyof(const struct gp_tools *t, const char *argkey, json_t *defs)
{
    json_t *alts = json_array();
    for (size_t i = 0; alts && i < t->n; i++) {
        if (!t->callable[i])
            continue;
        json_t *c = call_schema(json_object_get(json_array_get(t->tools, i), "function"), i, argkey,
                                defs);
        if (!c || json_array_append_new(alts, c)) {
            json_decref(alts);
            return NULL;
        }
    }
    if (alts && json_array_size(alts) == 1) {
        json_t *one = json_incref(json_array_get(alts, 0));
        json_decref(alts);
        return one;
    }
    return alts ? json_pack("{s:o}", "anyOf", alts) : NULL;
}

static json_t *generic_schema(const struct gp_tools *t, json_t *defs)
{
    json_t *call = calls_anyof(t, "arguments", defs);
    json_t *env = !call ? NULL
                  : t->parallel
                      ? json_pack("{s:s, s:{s:{s:s, s:o, s:i, s:i}}, s:[s], s:b}", "type",
                                  "object", "properties", "tool_calls", "type", "array", "items",
                                  call, "minItems", 1, "maxItems", GP_MAX_CALLS, "required",
                                  "tool_calls",
                                  "additionalProperties", 0)
                      : json_pack("{s:s, s:{s:o}, s:[s], s:b}", "type", "object", "properties",
                                  "tool_call", call, "required", "tool_call",
                                  "additionalProperties", 0);
    if (!env || t->choice != GP_TOOL_AUTO)
        return env;
    return json_pack("{s:[o, {s:s, s:{s:{s:s}}, s:[s], s:b}]}", "anyOf", env, "type", "object",
                     "properties", "response", "type", "string", "required", "response",
                     "additionalProperties", 0);
}

/* Mistral's [TOOL_CALLS]name[ARGS]{...}: the pairs [name, parameters] of the
 * callable functions, for a keyed frame (gram_frame.keyed). */
static json_t *keyed_pairs(const struct gp_tools *t)
{
    json_t *pairs = json_array();
    for (size_t i = 0; pairs && i < t->n; i++) {
        if (!t->callable[i])
            continue;
        const json_t *fn = json_object_get(json_array_get(t->tools, i), "function");
        const json_t *params = json_object_get(fn, "parameters");
        struct problem ge;
        memset(&ge, 0, sizeof ge);
        json_t *p = params && schema_compiles(params, &ge) == 0 ? json_incref((json_t *)params)
                                                                : json_pack("{s:s}", "type", "object");
        json_t *pair = p ? json_pack("[O, o]", json_object_get(fn, "name"), p) : NULL;
        if (!pair || json_array_append_new(pairs, pair)) {
            json_decref(pairs);
            return NULL;
        }
    }
    return pairs;
}

int gp_tools_arm(const struct gp_tools *t, enum chat_tool_format fmt, int think,
                 struct gen_params *gen, struct problem *err)
{
    if (!t || !gen)
        return ERR_INVAL;
    if (t->choice == GP_TOOL_NONE || !t->n)
        return 0;
    const char *prefix = "", *suffix = "", *sep = "", *trigger = "", *infix = NULL;
    const char *keep[GEN_KEEP_MAX] = {NULL};
    int max = t->parallel ? GP_MAX_CALLS : 1, at_start = 0;
    json_t *schema = NULL, *defs = json_object();
    if (!defs)
        return ERR_NOMEM;
    switch (fmt) {
    case CHAT_TOOLS_HERMES:
        prefix = "<tool_call>\n";
        suffix = "\n</tool_call>";
        sep = "\n";
        trigger = "<tool_call>";
        schema = calls_anyof(t, "arguments", defs);
        break;
    case CHAT_TOOLS_LLAMA3:
        /* no start tag (<|python_tag|> is optional and a control token):
         * in auto the grammar is armed by an answer that begins {"name" */
        trigger = "{\"name\"";
        at_start = 1;
        max = 1;        /* Llama 3 writes one call per turn */
        schema = calls_anyof(t, "parameters", defs);
        break;
    case CHAT_TOOLS_MISTRAL:
        /* [TOOL_CALLS] is a control token: kept in the text (keep_special)
         * so the grammar can take it and auto can be armed on it */
        prefix = trigger = keep[0] = "[TOOL_CALLS]";
        schema = calls_anyof(t, "arguments", defs);
        if (schema)
            schema = json_pack("{s:s, s:o, s:i}", "type", "array", "items", schema, "minItems", 1);
        if (schema)
            json_object_set_new(schema, "maxItems", json_integer(t->parallel ? GP_MAX_CALLS : 1));
        max = 1;
        break;
    case CHAT_TOOLS_MISTRAL_ARGS:
        prefix = trigger = keep[0] = "[TOOL_CALLS]";
        infix = keep[1] = "[ARGS]";
        keep[2] = "[CALL_ID]";
        schema = keyed_pairs(t);
        break;
    case CHAT_TOOLS_GENERIC:
        schema = generic_schema(t, defs);
        max = 1;
        break;
    }
    if (schema && json_object_size(defs) && json_object_set(schema, "$defs", defs) != 0) {
        json_decref(schema);
        schema = NULL;
    }
    json_decref(defs);
    if (!schema)
        return ERR_NOMEM;
    char *txt = json_dumps(schema, JSON_COMPACT);
    json_decref(schema);
    if (!txt)
        return ERR_NOMEM;
    struct buf src;
    buf_init(&src, 2 * GRAM_MAX_SCHEMA_BYTES);
    char num[24];
    int rc = 0;
    snprintf(num, sizeof num, "%d", 1);
    rc = buf_append(&src, num, strlen(num) + 1);
    snprintf(num, sizeof num, "%d", max);
    if (rc == 0)
        rc = buf_append(&src, num, strlen(num) + 1);
    /* "min\0max\0prefix\0[infix\0]suffix\0sep\0schema" (gram.h) */
    const char *lits[4] = {prefix, infix ? infix : suffix, infix ? suffix : sep, infix ? sep : NULL};
    for (int i = 0; rc == 0 && i < 4 && lits[i]; i++)
        rc = buf_append(&src, lits[i], strlen(lits[i]) + 1);
    if (rc == 0)
        rc = buf_append(&src, txt, strlen(txt));
    free(txt);
    struct gram *g = NULL;
    if (rc == 0) {
        struct problem ge;
        memset(&ge, 0, sizeof ge);
        rc = gram_cache_get(infix ? GRAM_FRAMED_KEYED : GRAM_FRAMED, src.data, src.len, &g, &ge);
        if (rc && rc != ERR_NOMEM)
            rc = problem_setf(err, "invalid_function_parameters", "tools",
                              "Invalid 'tools': the calls cannot be enforced: %s", ge.message);
    }
    buf_release(&src);
    if (rc)
        return rc;
    gram_unref(gen->grammar);
    gen->grammar = g;
    gen->gram_trigger[0] = gen->gram_after[0] = '\0';
    gen->gram_trigger_at_start = 0;
    int lazy = t->choice == GP_TOOL_AUTO && trigger[0];
    if (lazy) {
        snprintf(gen->gram_trigger, sizeof gen->gram_trigger, "%s", trigger);
        gen->gram_trigger_at_start = at_start;
    }
    if (think)
        snprintf(gen->gram_after, sizeof gen->gram_after, "%s", lazy ? "</think>" : "</think>\n\n");
    memset(gen->keep_special, 0, sizeof gen->keep_special);
    for (int i = 0; i < GEN_KEEP_MAX && keep[i]; i++)
        snprintf(gen->keep_special[i], sizeof gen->keep_special[i], "%s", keep[i]);
    return 0;
}

int gp_tools_generic_prompt(const struct gp_tools *t, struct buf *out)
{
    int rc = buf_append_str(out, "You can call functions. The functions, each with a JSON "
                                 "Schema of its arguments:\n");
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        if (!t->callable[i])
            continue;
        const json_t *fn = json_object_get(json_array_get(t->tools, i), "function");
        char *s = json_dumps(fn, JSON_COMPACT);
        if (!s)
            return ERR_NOMEM;
        rc = buf_append_str(out, s);
        free(s);
        if (rc == 0)
            rc = buf_append_str(out, "\n");
    }
    if (rc == 0)
        rc = buf_append_str(out,
                            t->parallel
                                ? "To call functions, answer with only a JSON object: "
                                  "{\"tool_calls\": [{\"name\": <function name>, \"arguments\": "
                                  "<arguments object>}, ...]}"
                                : "To call a function, answer with only a JSON object: "
                                  "{\"tool_call\": {\"name\": <function name>, \"arguments\": "
                                  "<arguments object>}}");
    if (rc == 0 && t->choice == GP_TOOL_AUTO)
        rc = buf_append_str(out, ". To answer without a call, answer with {\"response\": "
                                 "<your answer as a string>}");
    if (rc == 0)
        rc = buf_append_str(out, ".");
    return rc;
}

/* ---- parsing calls back ---------------------------------------------------------- */

void tool_calls_release(struct tool_calls *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].arguments);
    }
    free(c->v);
    free(c->content);
    memset(c, 0, sizeof *c);
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Whether args (an object) is valid against function fn's parameters: the
 * schema the call grammar enforces, so none, or a non-strict schema the
 * grammar engine cannot compile, is any object. 1, 0, ERR_NOMEM. */
static int args_valid(const json_t *fn, const json_t *args)
{
    const json_t *params = json_object_get(fn, "parameters");
    struct problem ge;
    memset(&ge, 0, sizeof ge);
    int rc = params ? schema_compiles(params, &ge) : 1;
    if (rc == ERR_NOMEM)
        return rc;
    if (rc)
        return 1;
    char *s = json_dumps(params, JSON_COMPACT), *a = json_dumps(args, JSON_COMPACT);
    int ok = s && a ? gram_json_valid(s, strlen(s), a, strlen(a)) : ERR_NOMEM;
    free(s);
    free(a);
    return ok;
}

/* One call object {"name", argkey or "arguments"/"parameters"} of a declared
 * function -> c->v[c->n]. Its arguments must be valid against the
 * function's schema (gram_json_valid; the schema the grammar enforces, see
 * args_valid): a call under an armed grammar always is, and one written outside it (a bare or fenced call, a lazy grammar
 * that did not fire, a tag whose grammar was dropped) is a call only if it
 * is. Returns 1 added, 0 not a call, ERR_NOMEM. */
static int add_call(struct tool_calls *c, const struct gp_tools *t, const json_t *o)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, "arguments");
    if (!args)
        args = json_object_get(o, "parameters");
    json_t *parsed = NULL;
    if (json_is_string(args))   /* some models write the arguments as a JSON string */
        args = parsed = json_loads(json_string_value(args), 0, NULL);
    int k = tool_index(t, name);
    if (k < 0 || !t->callable[k] || !json_is_object(args)) {
        json_decref(parsed);
        return 0;
    }
    int ok = args_valid(json_object_get(json_array_get(t->tools, (size_t)k), "function"), args);
    if (ok != 1) {
        json_decref(parsed);
        return ok;
    }
    struct tool_call *v = realloc(c->v, (c->n + 1) * sizeof *v);
    if (!v) {
        json_decref(parsed);
        return ERR_NOMEM;
    }
    c->v = v;
    char *a = json_dumps(args, JSON_COMPACT);
    json_decref(parsed);
    char *nm = strdup(name);
    if (!a || !nm) {
        free(a);
        free(nm);
        return ERR_NOMEM;
    }
    v[c->n].name = nm;
    v[c->n].arguments = a;
    c->n++;
    return 1;
}

/* Parse one JSON value at text[*at..len), skipping whitespace before it;
 * advance *at past it. NULL when there is none. */
static json_t *json_at(const char *text, size_t len, size_t *at)
{
    while (*at < len && is_ws(text[*at]))
        (*at)++;
    if (*at >= len)
        return NULL;
    json_error_t je;
    json_t *v = json_loadb(text + *at, len - *at, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (v)
        *at += (size_t)je.position;
    return v;
}

static int only_ws(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ws(s[i]))
            return 0;
    return 1;
}

static int parse_json_calls(const char *text, size_t len, const struct gp_tools *t,
                            struct tool_calls *c, int array);

/* Hermes: <tool_call>{json}</tool_call>..., content before the first tag;
 * without any tag, a whole text that is one bare call object (small Qwen
 * models drop the tags; llama.cpp's parser takes it too). */
static int parse_hermes(const char *text, size_t len, const struct gp_tools *t,
                        struct tool_calls *c, size_t *content_end)
{
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    const char *first = memmem(text, len, open, sizeof open - 1);
    if (!first)
        return parse_json_calls(text, len, t, c, 0);
    *content_end = (size_t)(first - text);
    size_t at = *content_end;
    while (at < len) {
        while (at < len && is_ws(text[at]))
            at++;
        if (at == len)
            break;
        if (len - at < sizeof open - 1 || memcmp(text + at, open, sizeof open - 1) != 0)
            return -1;   /* text after the calls */
        at += sizeof open - 1;
        json_t *o = json_at(text, len, &at);
        int rc = json_is_object(o) ? add_call(c, t, o) : 0;
        json_decref(o);
        if (rc <= 0)
            return rc < 0 ? rc : -1;
        while (at < len && is_ws(text[at]))
            at++;
        if (at == len)
            break;   /* an unclosed last tag: the call itself is whole */
        if (len - at < sizeof close - 1 || memcmp(text + at, close, sizeof close - 1) != 0)
            return -1;
        at += sizeof close - 1;
    }
    return 1;
}

/* Llama 3 JSON calls ({"name","parameters"}; ';'-separated) or a Mistral
 * array, as the whole text. */
static int parse_json_calls(const char *text, size_t len, const struct gp_tools *t,
                            struct tool_calls *c, int array)
{
    size_t at = 0;
    static const char tag[] = "[TOOL_CALLS]", fence[] = "```";
    while (at < len && is_ws(text[at]))
        at++;
    /* a Markdown code block around the calls (```json ... ```) */
    if (len - at >= 3 && memcmp(text + at, fence, 3) == 0) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = len;
        while (end > at && is_ws(text[end - 1]))
            end--;
        if (!nl || end - at < 6 || memcmp(text + end - 3, fence, 3) != 0 ||
            (size_t)(nl - text) + 1 > end - 3)
            return -1;   /* no closing fence after the opening line ("``````\n") */
        at = (size_t)(nl - text) + 1;
        len = end - 3;
    }
    if (array && len - at >= sizeof tag - 1 && memcmp(text + at, tag, sizeof tag - 1) == 0)
        at += sizeof tag - 1;
    for (;;) {
        json_t *v = json_at(text, len, &at);
        if (!v)
            return -1;
        int rc = 0;
        if (array && json_is_array(v)) {
            for (size_t i = 0; i < json_array_size(v) && rc >= 0; i++)
                rc = add_call(c, t, json_array_get(v, i)) == 1 ? 1 : -1;
        } else if (!array && json_is_object(v)) {
            rc = add_call(c, t, v) == 1 ? 1 : -1;
        } else {
            rc = -1;
        }
        json_decref(v);
        if (rc < 0)
            return -1;
        while (at < len && is_ws(text[at]))
            at++;
        if (at == len)
            return c->n ? 1 : -1;
        if (array || text[at] != ';')
            return -1;
        at++;
    }
}

/* Mistral: content, then calls each opened by [TOOL_CALLS] (a control token
 * the worker keeps in the text): an array of call objects (Nemo), or
 * name, optionally [CALL_ID]id, then [ARGS] and the arguments object
 * (Small 3.2, Devstral, Ministral 3; [ARGS] may be missing, as vLLM reads
 * older tokenizers' calls). Without any tag, a whole text that is one array
 * of calls. */
static int parse_mistral(const char *text, size_t len, const struct gp_tools *t,
                         struct tool_calls *c, size_t *content_end)
{
    static const char tag[] = "[TOOL_CALLS]", args[] = "[ARGS]", cid[] = "[CALL_ID]";
    const char *first = memmem(text, len, tag, sizeof tag - 1);
    if (!first)
        return parse_json_calls(text, len, t, c, 1);
    *content_end = (size_t)(first - text);
    size_t at = *content_end;
    while (at < len) {
        while (at < len && is_ws(text[at]))
            at++;
        if (at == len)
            break;
        if (len - at < sizeof tag - 1 || memcmp(text + at, tag, sizeof tag - 1) != 0)
            return -1;   /* text after the calls */
        at += sizeof tag - 1;
        while (at < len && is_ws(text[at]))
            at++;
        json_t *o = NULL;
        if (at < len && text[at] == '[') {
            json_t *v = json_at(text, len, &at);
            int rc = json_is_array(v) && json_array_size(v) ? 1 : -1;
            for (size_t i = 0; rc == 1 && i < json_array_size(v); i++)
                rc = add_call(c, t, json_array_get(v, i)) == 1 ? 1 : -1;
            json_decref(v);
            if (rc != 1)
                return rc == ERR_NOMEM ? rc : -1;
            continue;
        }
        size_t name = at;
        while (at < len && at - name <= GP_TOOL_NAME_MAX && name_ok(text + at, 1))
            at++;
        size_t name_len = at - name;
        if (len - at >= sizeof cid - 1 && memcmp(text + at, cid, sizeof cid - 1) == 0) {
            at += sizeof cid - 1;
            while (at < len && text[at] != '[' && text[at] != '{')
                at++;   /* the call's id: ours are given afresh */
        }
        if (len - at >= sizeof args - 1 && memcmp(text + at, args, sizeof args - 1) == 0)
            at += sizeof args - 1;
        json_t *a = name_len ? json_at(text, len, &at) : NULL;
        if (json_is_object(a))
            o = json_pack("{s:s%, s:O}", "name", text + name, name_len, "arguments", a);
        json_decref(a);
        int rc = o ? add_call(c, t, o) : -1;
        json_decref(o);
        if (rc != 1)
            return rc == ERR_NOMEM ? rc : -1;
    }
    return c->n ? 1 : -1;
}

/* The generic envelope: {"tool_call": {...}}, {"tool_calls": [...]} or
 * {"response": "..."} (-> content). */
static int parse_generic(const char *text, size_t len, const struct gp_tools *t,
                         struct tool_calls *c)
{
    size_t at = 0;
    json_t *v = json_at(text, len, &at);
    if (!json_is_object(v) || !only_ws(text + at, len - at)) {
        json_decref(v);
        return -1;
    }
    const json_t *one = json_object_get(v, "tool_call"), *many = json_object_get(v, "tool_calls");
    const json_t *resp = json_object_get(v, "response");
    int rc = -1;
    if (one && json_object_size(v) == 1) {
        rc = add_call(c, t, one) == 1 ? 1 : -1;
    } else if (json_is_array(many) && json_object_size(v) == 1 && json_array_size(many)) {
        rc = 1;
        for (size_t i = 0; i < json_array_size(many) && rc == 1; i++)
            rc = add_call(c, t, json_array_get(many, i)) == 1 ? 1 : -1;
    } else if (json_is_string(resp) && json_object_size(v) == 1) {
        c->content = malloc(json_string_length(resp) + 1);
        rc = c->content ? 2 : ERR_NOMEM;
        if (c->content) {
            memcpy(c->content, json_string_value(resp), json_string_length(resp) + 1);
            c->content_len = json_string_length(resp);
        }
    }
    json_decref(v);
    return rc;
}

int tool_calls_parse(const char *text, size_t len, enum chat_tool_format fmt,
                     const struct gp_tools *t, struct tool_calls *out)
{
    struct tool_calls c;
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    size_t content_end = 0;
    int rc = 0;
    if (t && t->n && t->choice != GP_TOOL_NONE && text) {
        switch (fmt) {
        case CHAT_TOOLS_HERMES: rc = parse_hermes(text, len, t, &c, &content_end); break;
        case CHAT_TOOLS_LLAMA3: rc = parse_json_calls(text, len, t, &c, 0); break;
        case CHAT_TOOLS_MISTRAL:
        case CHAT_TOOLS_MISTRAL_ARGS: rc = parse_mistral(text, len, t, &c, &content_end); break;
        case CHAT_TOOLS_GENERIC: rc = parse_generic(text, len, t, &c); break;
        }
    }
    if (rc == ERR_NOMEM) {
        tool_calls_release(&c);
        return rc;
    }
    if (rc == 2) {   /* the generic envelope's text answer */
        *out = c;
        return 0;
    }
    if (rc != 1) {   /* no calls, or not calls after all: all of it is content */
        tool_calls_release(&c);
        content_end = len;
    }
    while (rc == 1 && content_end > 0 && is_ws(text[content_end - 1]))
        content_end--;
    if (content_end) {
        c.content = malloc(content_end + 1);
        if (!c.content) {
            tool_calls_release(&c);
            return ERR_NOMEM;
        }
        memcpy(c.content, text, content_end);
        c.content[content_end] = '\0';
        c.content_len = content_end;
    }
    *out = c;
    return 0;
}
