/*
 * params.c - request body -> struct gen_params (see params.h for the table
 * of fields). Error wording and codes follow OpenAI's ("Invalid 'top_p':
 * decimal above maximum value. Expected a value <= 1, but got 2 instead.",
 * code "decimal_above_max_value").
 */
#include "openai/params.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crypto.h"
#include "common/err.h"
#include "openai/params_int.h"

json_t *gp_error_json(const struct problem *err)
{
    json_t *e = json_object(), *o = json_object();
    if (!e || !o)
        goto fail;
    if (json_object_set_new(e, "message", json_string(err->message)) ||
        json_object_set_new(e, "type", json_string("invalid_request_error")) ||
        json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null()) ||
        json_object_set_new(e, "code", err->code[0] ? json_string(err->code) : json_null()))
        goto fail;
    if (json_object_set_new(o, "error", e)) {
        e = NULL;
        goto fail;
    }
    return o;
fail:
    json_decref(e);
    json_decref(o);
    return NULL;
}

const char *gp_type_name(const json_t *v)
{
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* The bound token ids are checked against: n_vocab, or 2^31 when unknown (0). */
static size_t id_bound(size_t n_vocab)
{
    return n_vocab ? n_vocab : (size_t)INT32_MAX + 1;
}

json_t *gp_member(const json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return json_is_null(v) ? NULL : v;
}

/* Number field in [lo, hi] (lo_open: lo excluded). *present 0 when absent. */
static int get_dec(const json_t *body, const char *key, double lo, int lo_open, double hi,
                   double *out, int *present, struct problem *err)
{
    json_t *v = gp_member(body, key);
    *present = 0;
    if (!v)
        return 0;
    if (!json_is_number(v))
        return problem_setf(err, "invalid_type", key,
                       "Invalid type for '%s': expected a decimal, but got %s instead.", key,
                       gp_type_name(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || (lo_open && d == lo))
        return problem_setf(err, "decimal_below_min_value", key,
                       "Invalid '%s': decimal below minimum value. Expected a value %s %g, but "
                       "got %g instead.", key, lo_open ? ">" : ">=", lo, d);
    if (d > hi)
        return problem_setf(err, "decimal_above_max_value", key,
                       "Invalid '%s': decimal above maximum value. Expected a value <= %g, but "
                       "got %g instead.", key, hi, d);
    *out = d;
    *present = 1;
    return 0;
}

static int get_int(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   int *present, struct problem *err)
{
    json_t *v = gp_member(body, key);
    *present = 0;
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return problem_setf(err, "invalid_type", key,
                       "Invalid type for '%s': expected an integer, but got %s instead.", key,
                       gp_type_name(v));
    int64_t x = json_integer_value(v);
    if (x < lo)
        return problem_setf(err, "integer_below_min_value", key,
                       "Invalid '%s': integer below minimum value. Expected a value >= %" PRId64
                       ", but got %" PRId64 " instead.", key, lo, x);
    if (x > hi)
        return problem_setf(err, "integer_above_max_value", key,
                       "Invalid '%s': integer above maximum value. Expected a value <= %" PRId64
                       ", but got %" PRId64 " instead.", key, hi, x);
    *out = x;
    *present = 1;
    return 0;
}

static int get_bool(const json_t *body, const char *key, int *out, int *present,
                    struct problem *err)
{
    json_t *v = gp_member(body, key);
    *present = 0;
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return problem_setf(err, "invalid_type", key,
                       "Invalid type for '%s': expected a boolean, but got %s instead.", key,
                       gp_type_name(v));
    *out = json_is_true(v);
    *present = 1;
    return 0;
}

static int parse_stop(const json_t *body, struct gen_params *p, struct problem *err)
{
    json_t *v = gp_member(body, "stop");
    if (!v)
        return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > STOP_MAX)
            return problem_setf(err, "array_above_max_length", "stop",
                           "Invalid 'stop': array too long. Expected an array with maximum "
                           "length %d, but got an array with length %zu instead.", STOP_MAX, n);
        items = NULL;
    } else if (!json_is_string(v)) {
        return problem_setf(err, "invalid_type", "stop",
                       "Invalid type for 'stop': expected a string or an array of strings, but "
                       "got %s instead.", gp_type_name(v));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return problem_setf(err, "invalid_type", "stop",
                           "Invalid type for 'stop[%zu]': expected a string, but got %s instead.",
                           i, gp_type_name(s));
        size_t len = json_string_length(s);
        if (len == 0)
            return problem_setf(err, "invalid_value", "stop",
                           "Invalid 'stop[%zu]': stop sequences must not be empty.", i);
        if (len > STOP_MAX_BYTES)
            return problem_setf(err, "string_above_max_length", "stop",
                           "Invalid 'stop[%zu]': string too long. Expected at most %u bytes, but "
                           "got %zu.", i, STOP_MAX_BYTES, len);
        if (memchr(json_string_value(s), 0, len))
            return problem_setf(err, "invalid_value", "stop",
                           "Invalid 'stop[%zu]': NUL characters are not allowed.", i);
        p->stop[i] = strdup(json_string_value(s));
        if (!p->stop[i])
            return ERR_NOMEM;
        p->stop_len[i] = len;
        p->n_stop = i + 1;
    }
    return 0;
}

static int parse_bias(const json_t *body, size_t n_vocab, struct gen_params *p,
                      struct problem *err)
{
    json_t *v = gp_member(body, "logit_bias");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return problem_setf(err, "invalid_type", "logit_bias",
                       "Invalid type for 'logit_bias': expected an object, but got %s instead.",
                       gp_type_name(v));
    size_t n = json_object_size(v);
    if (n > GP_MAX_LOGIT_BIAS)
        return problem_setf(err, "invalid_value", "logit_bias",
                       "Invalid 'logit_bias': at most %d tokens may be biased, got %zu.",
                       GP_MAX_LOGIT_BIAS, n);
    if (n == 0)
        return 0;
    p->bias = calloc(n, sizeof *p->bias);
    if (!p->bias)
        return ERR_NOMEM;
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)v, key, val) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || errno || key[0] == '-' || key[0] == '+' || key[0] == ' ' ||
            id < 0 || id > INT32_MAX || (n_vocab && (unsigned long long)id >= n_vocab))
            return problem_setf(err, "invalid_value", "logit_bias",
                           "Invalid 'logit_bias': key '%.40s' is not a token id in [0, %zu).",
                           key, id_bound(n_vocab));
        if (!json_is_number(val))
            return problem_setf(err, "invalid_type", "logit_bias",
                           "Invalid type for 'logit_bias.%.40s': expected a number, but got %s "
                           "instead.", key, gp_type_name(val));
        double b = json_number_value(val);
        if (!(b >= -100 && b <= 100))
            return problem_setf(err, "invalid_value", "logit_bias",
                           "Invalid 'logit_bias.%.40s': bias must be in [-100, 100], got %g.",
                           key, b);
        p->bias[i].id = (int32_t)id;
        p->bias[i].bias = (float)b;
        i++;
    }
    p->smp.bias = p->bias;
    p->smp.n_bias = i;
    return 0;
}

/* Token array -> owned ids. */
static int parse_ids(const json_t *arr, size_t n_vocab, size_t pi, struct gp_prompt *out,
                     struct problem *err)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return problem_setf(err, "invalid_value", "prompt", "Invalid 'prompt[%zu]': empty token list.",
                       pi);
    out->ids = malloc(n * sizeof *out->ids);
    if (!out->ids)
        return ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return problem_setf(err, "invalid_type", "prompt",
                           "Invalid type for 'prompt': token lists must hold integers, got %s.",
                           gp_type_name(t));
        int64_t id = json_integer_value(t);
        if (id < 0 || id > INT32_MAX || (n_vocab && (uint64_t)id >= n_vocab))
            return problem_setf(err, "invalid_value", "prompt",
                           "Invalid 'prompt': token id %" PRId64 " is out of range [0, %zu).", id,
                           id_bound(n_vocab));
        out->ids[i] = (int32_t)id;
    }
    out->n_ids = n;
    return 0;
}

static int parse_prompt(const json_t *body, size_t n_vocab, struct gp_request *p,
                        struct problem *err)
{
    json_t *v = gp_member(body, "prompt");
    if (!v)
        return problem_setf(err, "missing_required_parameter", "prompt",
                       "Missing required parameter: 'prompt'.");
    size_t n = 1;
    int kind; /* 0 one string, 1 strings, 2 one token list, 3 token lists */
    if (json_is_string(v)) {
        kind = 0;
    } else if (json_is_array(v)) {
        n = json_array_size(v);
        if (n == 0)
            return problem_setf(err, "invalid_value", "prompt", "Invalid 'prompt': empty array.");
        json_t *first = json_array_get(v, 0);
        kind = json_is_string(first) ? 1 : json_is_integer(first) ? 2 : json_is_array(first) ? 3 : -1;
        if (kind < 0)
            return problem_setf(err, "invalid_type", "prompt",
                           "Invalid type for 'prompt': expected a string, an array of strings, "
                           "an array of integers or an array of arrays of integers.");
        for (size_t i = 1; i < n; i++) {
            json_t *e = json_array_get(v, i);
            int k = json_is_string(e) ? 1 : json_is_integer(e) ? 2 : json_is_array(e) ? 3 : -1;
            if (k != kind)
                return problem_setf(err, "invalid_type", "prompt",
                               "Invalid type for 'prompt[%zu]': all elements must have the same "
                               "type.", i);
        }
        if (kind == 2)
            n = 1;
    } else {
        return problem_setf(err, "invalid_type", "prompt",
                       "Invalid type for 'prompt': expected a string or an array, but got %s "
                       "instead.", gp_type_name(v));
    }
    if (n > GP_MAX_PROMPTS)
        return problem_setf(err, "array_above_max_length", "prompt",
                       "Invalid 'prompt': at most %d prompts per request, got %zu.",
                       GP_MAX_PROMPTS, n);
    p->prompts = calloc(n, sizeof *p->prompts);
    if (!p->prompts)
        return ERR_NOMEM;
    p->n_prompts = n;
    for (size_t i = 0; i < n; i++) {
        struct gp_prompt *pr = &p->prompts[i];
        int rc;
        if (kind == 0 || kind == 1) {
            json_t *s = kind == 0 ? v : json_array_get(v, i);
            pr->text_len = json_string_length(s);
            pr->text = malloc(pr->text_len + 1);
            if (!pr->text)
                return ERR_NOMEM;
            memcpy(pr->text, json_string_value(s), pr->text_len + 1);
        } else if ((rc = parse_ids(kind == 2 ? v : json_array_get(v, i), n_vocab, i, pr, err)) !=
                   0) {
            return rc;
        }
    }
    return 0;
}

/* Fields we cannot honour: refuse rather than ignore. */
static int reject_unsupported(const json_t *body, enum gp_endpoint ep, struct problem *err)
{
    static const char *const never[] = {"audio", "prediction", NULL};
    for (int i = 0; never[i]; i++)
        if (gp_member(body, never[i]))
            return problem_setf(err, "unsupported_parameter", never[i],
                           "Unsupported parameter: '%s' is not supported by this server.",
                           never[i]);
    static const char *const lists[] = {"tools", "functions", NULL};
    for (int i = 0; ep == GP_COMPLETIONS && lists[i]; i++) {
        json_t *v = gp_member(body, lists[i]);
        if (v && !(json_is_array(v) && json_array_size(v) == 0))
            return problem_setf(err, "unsupported_parameter", lists[i],
                           "Unsupported parameter: '%s' is for /v1/chat/completions, not "
                           "/v1/completions.", lists[i]);
    }
    json_t *mod = gp_member(body, "modalities");
    if (mod && !(json_is_array(mod) && json_array_size(mod) == 1 &&
                 json_is_string(json_array_get(mod, 0)) &&
                 strcmp(json_string_value(json_array_get(mod, 0)), "text") == 0))
        return problem_setf(err, "unsupported_value", "modalities",
                       "Unsupported value: 'modalities' only supports [\"text\"] on this server.");
    int b = 0, present = 0, rc;
    if ((rc = get_bool(body, "stream", &b, &present, err)) != 0)
        return rc;
    if (b)
        return problem_setf(err, "unsupported_value", "stream",
                       "Unsupported value: 'stream' must be false in a batch request.");
    if (ep == GP_COMPLETIONS) {
        if ((rc = get_bool(body, "echo", &b, &present, err)) != 0)
            return rc;
        if (b)
            return problem_setf(err, "unsupported_value", "echo",
                           "Unsupported value: 'echo' is not supported by this server (it needs "
                           "prompt logprobs).");
        json_t *sfx = gp_member(body, "suffix");
        if (sfx && !json_is_string(sfx))
            return problem_setf(err, "invalid_type", "suffix",
                           "Invalid type for 'suffix': expected a string, but got %s instead.",
                           gp_type_name(sfx));
        if (sfx && json_string_length(sfx) > 0)
            return problem_setf(err, "unsupported_value", "suffix",
                           "Unsupported value: 'suffix' (insertion) is not supported by this "
                           "server.");
    }
    return 0;
}

/* reasoning_effort and chat_template_kwargs (chat). */
static int parse_reasoning(const json_t *body, struct gp_request *p, struct problem *err)
{
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh",
                                          "max", NULL};
    json_t *v = gp_member(body, "reasoning_effort");
    if (v) {
        const char *s = json_string_value(v);
        int k = 0;
        while (s && efforts[k] && strcmp(efforts[k], s) != 0)
            k++;
        if (!s || !efforts[k])
            return problem_setf(err, "invalid_value", "reasoning_effort",
                                "Invalid value for 'reasoning_effort': expected one of none, "
                                "minimal, low, medium, high, xhigh, max.");
        p->think_off = k <= 1;
    }
    int64_t iv;
    int present;
    int rc = get_int(body, "thinking_token_budget", 0, INT32_MAX, &iv, &present, err);
    if (rc)
        return rc;
    if (present)
        p->gen.think_budget = iv;
    v = gp_member(body, "chat_template_kwargs");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return problem_setf(err, "invalid_type", "chat_template_kwargs",
                            "Invalid type for 'chat_template_kwargs': expected an object, but "
                            "got %s instead.", gp_type_name(v));
    if (json_object_size(v) > GP_MAX_TEMPLATE_KWARGS)
        return problem_setf(err, "invalid_value", "chat_template_kwargs",
                            "Invalid 'chat_template_kwargs': at most %d keys.",
                            GP_MAX_TEMPLATE_KWARGS);
    static const char *const reserved[] = {"messages", "tools", "add_generation_prompt",
                                           "bos_token", "eos_token", "documents", NULL};
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        for (int i = 0; reserved[i]; i++)
            if (strcmp(key, reserved[i]) == 0)
                return problem_setf(err, "invalid_value", "chat_template_kwargs",
                                    "Invalid 'chat_template_kwargs': '%s' is set by the server.",
                                    key);
        if (strcmp(key, "enable_thinking") == 0 && json_is_false(val))
            p->think_off = 1;
    }
    p->tmpl_kwargs = json_incref(v);
    return 0;
}

int gp_parse(const json_t *body, enum gp_endpoint ep, size_t n_vocab, struct gp_request *out,
             struct problem *err)
{
    struct gp_request p;
    int rc, present;
    int64_t iv;
    double dv;

    memset(&p, 0, sizeof p);
    p.endpoint = ep;
    p.gen.max_tokens = -1;
    p.gen.think_budget = -1;
    p.gen.n = 1;
    smp_params_init(&p.gen.smp);
    if (!json_is_object(body)) {
        rc = problem_setf(err, "invalid_type", "", "The request body must be a JSON object.");
        goto out;
    }
    if (ep != GP_CHAT && ep != GP_COMPLETIONS) {
        rc = ERR_INVAL;
        goto out;
    }
    if ((rc = reject_unsupported(body, ep, err)) != 0)
        goto out;
    /* structured outputs: response_format / guided_* (common/gram) */
    {
        struct problem ge;
        rc = gp_format_parse(body, &p.gen.grammar, &ge);
        if (rc == ERR_NOMEM)
            goto out;
        if (rc) {
            rc = problem_setf(err, ge.code[0] ? ge.code : "invalid_value", ge.param, "%s", ge.message);
            goto out;
        }
    }

    /* max tokens: chat's max_completion_tokens wins over max_tokens */
    if ((rc = get_int(body, "max_tokens", 1, INT32_MAX, &iv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.max_tokens = iv;
    if (ep == GP_CHAT) {
        if ((rc = get_int(body, "max_completion_tokens", 1, INT32_MAX, &iv, &present, err)) != 0)
            goto out;
        if (present)
            p.gen.max_tokens = iv;
    }

    if ((rc = get_dec(body, "temperature", 0, 0, 2, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.temperature = dv;
    if ((rc = get_dec(body, "top_p", 0, 1, 1, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.top_p = dv;
    if ((rc = get_int(body, "top_k", -1, INT32_MAX, &iv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.top_k = iv < 0 ? 0 : iv;
    if ((rc = get_dec(body, "min_p", 0, 0, 1, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.min_p = dv;
    if ((rc = get_dec(body, "frequency_penalty", -2, 0, 2, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.frequency_penalty = dv;
    if ((rc = get_dec(body, "presence_penalty", -2, 0, 2, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.presence_penalty = dv;
    if ((rc = get_dec(body, "repetition_penalty", 0, 1, 100, &dv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.smp.repetition_penalty = dv;

    if ((rc = get_int(body, "seed", INT64_MIN, INT64_MAX, &iv, &present, err)) != 0)
        goto out;
    if (present) {
        p.gen.seed = (uint64_t)iv;
        p.gen.seed_given = 1;
    } else if (n_vocab && (rc = crypto_random(&p.gen.seed, sizeof p.gen.seed)) != 0) {
        goto out; /* validation only (n_vocab 0) draws no seed: nothing samples */
    }

    if ((rc = get_int(body, "n", 1, GP_MAX_N, &iv, &present, err)) != 0)
        goto out;
    if (present)
        p.gen.n = (int)iv;

    if ((rc = parse_stop(body, &p.gen, err)) != 0 || (rc = parse_bias(body, n_vocab, &p.gen, err)) != 0)
        goto out;

    if (ep == GP_CHAT && ((rc = gp_tools_parse(body, &p.tools, err)) != 0 ||
                          (rc = parse_reasoning(body, &p, err)) != 0))
        goto out;
    if (ep == GP_CHAT) {
        int lp = 0;
        if ((rc = get_bool(body, "logprobs", &lp, &present, err)) != 0)
            goto out;
        if ((rc = get_int(body, "top_logprobs", 0, SMP_MAX_TOP_LOGPROBS, &iv, &present, err)) != 0)
            goto out;
        if (present && !lp) {
            rc = problem_setf(err, "invalid_value", "top_logprobs",
                         "Invalid value: 'top_logprobs' requires 'logprobs' to be true.");
            goto out;
        }
        p.gen.logprobs = lp;
        p.gen.smp.n_top_logprobs = lp ? (present ? (int)iv : 0) : -1;
    } else {
        if ((rc = get_int(body, "logprobs", 0, GP_MAX_COMPLETION_LOGPROBS, &iv, &present, err)) !=
            0)
            goto out;
        p.gen.logprobs = present;
        p.gen.smp.n_top_logprobs = present ? (int)iv : -1;
        if ((rc = get_int(body, "best_of", 1, INT32_MAX, &iv, &present, err)) != 0)
            goto out;
        if (present && iv < p.gen.n) {
            rc = problem_setf(err, "invalid_value", "best_of",
                         "Invalid 'best_of': must be greater than or equal to 'n' (%d).", p.gen.n);
            goto out;
        }
        if (present && iv != p.gen.n) {
            rc = problem_setf(err, "unsupported_value", "best_of",
                         "Unsupported value: 'best_of' > 'n' (server-side ranking) is not "
                         "supported by this server.");
            goto out;
        }
        if ((rc = parse_prompt(body, n_vocab, &p, err)) != 0)
            goto out;
        if (p.n_prompts * (size_t)p.gen.n > GP_MAX_CHOICES) {
            rc = problem_setf(err, "invalid_value", "n",
                         "Invalid 'n': %zu prompts x n=%d exceeds %d choices per request.",
                         p.n_prompts, p.gen.n, GP_MAX_CHOICES);
            goto out;
        }
    }
    *out = p;
    return 0;
out:
    gp_release(&p);
    return rc;
}

void gp_release(struct gp_request *p)
{
    if (!p)
        return;
    gen_params_release(&p->gen);
    gp_tools_release(&p->tools);
    json_decref(p->tmpl_kwargs);
    for (size_t i = 0; i < p->n_prompts; i++) {
        free(p->prompts[i].text);
        free(p->prompts[i].ids);
    }
    free(p->prompts);
    memset(p, 0, sizeof *p);
}
