/* prompt.c - a request body's prompts, built and tokenized (see prompt.h). */
#include "openai/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/hash.h"
#include "openai/chat_msgs.h"
#include "openai/tools.h"
#include "text/jinja.h"

static int ctx_error(struct problem *err, enum gp_endpoint ep, size_t n_ctx, size_t n_prompt,
                     int64_t max_tokens, int overflow)
{
    const char *param = ep == GP_CHAT ? "messages" : "prompt";
    if (overflow)
        return problem_setf(err, "context_length_exceeded", param,
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in more than %zu tokens. Please reduce the length of the %s.",
                       n_ctx, param, n_ctx, param);
    if (max_tokens < 0)
        return problem_setf(err, "context_length_exceeded", param,
                       "This model's maximum context length is %zu tokens. However, your %s "
                       "resulted in %zu tokens, leaving no room for the completion. Please "
                       "reduce the length of the %s.", n_ctx, param, n_prompt, param);
    return problem_setf(err, "context_length_exceeded", param,
                   "This model's maximum context length is %zu tokens. However, you requested "
                   "%zu tokens (%zu in the %s, %lld in the completion). Please reduce the "
                   "length of the %s or completion.", n_ctx, n_prompt + (size_t)max_tokens,
                   n_prompt, param, (long long)max_tokens, param);
}

/* Tokenize text into a fresh array of at most n_ctx ids. */
static int encode_capped(const struct prompt_model *m, enum gp_endpoint ep, const char *text,
                         size_t len, struct gen_prompt *out, struct problem *err)
{
    size_t cap = m->n_ctx, n = 0;
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    if (!ids)
        return ERR_NOMEM;
    int rc = ep == GP_CHAT ? chat_encode(m->t, text, len, ids, cap, &n)
                           : tok_encode(m->t, text, len, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids,
                                        cap, &n);
    if (rc == ERR_TOOBIG) {
        free(ids);
        return ctx_error(err, ep, m->n_ctx, 0, -1, 1);
    }
    if (rc) {
        free(ids);
        return rc;
    }
    out->ids = ids;
    out->n = n;
    return 0;
}

/* ---- template inputs: JSON -> Jinja values ------------------------------------- */

static struct jv jv_json(struct jinja_env *e, const json_t *v)
{
    if (!v)
        return jinja_none();
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        struct jv d = jinja_dict(e);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            jinja_dict_set(e, d, k, jv_json(e, x));
        }
        return d;
    }
    case JSON_ARRAY: {
        struct jv l = jinja_list(e);
        for (size_t i = 0; i < json_array_size(v); i++)
            jinja_list_push(e, l, jv_json(e, json_array_get(v, i)));
        return l;
    }
    case JSON_STRING: return jinja_str(e, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return jinja_int(json_integer_value(v));
    case JSON_REAL: return jinja_float(json_real_value(v));
    case JSON_TRUE: return jinja_bool(1);
    case JSON_FALSE: return jinja_bool(0);
    default: return jinja_none();
    }
}

/* ---- call ids of 9 characters (CHAT_CAP_CALL_ID9) --------------------------------- */

/* Mistral's templates take only 9-character ids. Each distinct id of the
 * conversation, in order of first appearance, becomes: its last 9
 * characters when they are all letters and digits (vLLM's truncation, so
 * an OpenAI "call_" + 24 id keeps its tail), else 9 characters of
 * ID9_ALNUM from the FNV-1a hash of the id; an id whose candidate another
 * id already took is hashed again with "#k" appended (k = 1, 2, ...). So
 * the mapping is deterministic and one-to-one, and a call's id and the
 * tool message's tool_call_id that answers it stay equal.
 * tests/oracle/tool_template_fixtures.py does the same in Python. */
#define ID9_LEN 9
static const char ID9_ALNUM[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

struct id9 {
    size_t cap;                  /* slots of both tables, a power of two; 0: no mapping */
    const char **from;           /* (cap) an original id (borrowed from the JSON), NULL: empty */
    char (*to)[ID9_LEN + 1];     /* (cap) what from[i] becomes */
    char (*taken)[ID9_LEN + 1];  /* (cap) set of given ids, "": empty */
};

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static void id9_candidate(const char *id, unsigned k, char out[ID9_LEN + 1])
{
    size_t n = strlen(id);
    int tail = n >= ID9_LEN;
    for (size_t i = tail ? n - ID9_LEN : n; i < n; i++)
        tail &= is_alnum(id[i]);
    if (k == 0 && tail) {
        memcpy(out, id + n - ID9_LEN, ID9_LEN);
    } else {
        uint64_t h = hash_fnv(id, n);
        if (k) {
            char salt[16];
            int m = snprintf(salt, sizeof salt, "#%u", k);
            h = hash_fnv_add(h, salt, (size_t)m);
        }
        for (int i = 0; i < ID9_LEN; i++, h /= 62)
            out[i] = ID9_ALNUM[h % 62];
    }
    out[ID9_LEN] = '\0';
}

static void id9_release(struct id9 *m)
{
    free(m->from);
    free(m->to);
    free(m->taken);
    memset(m, 0, sizeof *m);
}

/* The slot of id in m->from (its own or the empty one where it goes). */
static size_t id9_slot(const struct id9 *m, const char *id)
{
    size_t i = (size_t)hash_fnv(id, strlen(id)) & (m->cap - 1);
    while (m->from[i] && strcmp(m->from[i], id) != 0)
        i = (i + 1) & (m->cap - 1);
    return i;
}

/* Whether c is taken; else, when take, take it. */
static int id9_taken(struct id9 *m, const char *c, int take)
{
    size_t i = (size_t)hash_fnv(c, ID9_LEN) & (m->cap - 1);
    while (m->taken[i][0] && strcmp(m->taken[i], c) != 0)
        i = (i + 1) & (m->cap - 1);
    if (m->taken[i][0])
        return 1;
    if (take)
        memcpy(m->taken[i], c, ID9_LEN + 1);
    return 0;
}

static void id9_add(struct id9 *m, const char *id)
{
    size_t i = id9_slot(m, id);
    if (m->from[i])
        return;
    unsigned k = 0;
    do
        id9_candidate(id, k++, m->to[i]);
    while (id9_taken(m, m->to[i], 1) && k < 1000000);
    m->from[i] = id;
}

/* What id becomes (id itself when m maps nothing). */
static const char *id9_get(const struct id9 *m, const char *id)
{
    if (!m || !m->cap || !id)
        return id;
    size_t i = id9_slot(m, id);
    return m->from[i] ? m->to[i] : id;
}

/* The mapping of every call id and tool_call_id of cm. Returns 0, ERR_NOMEM. */
static int id9_build(const struct chat_msgs *cm, struct id9 *m)
{
    size_t n = 0;
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < cm->n; i++) {
        const json_t *o = json_array_get(cm->src, i);
        n += json_array_size(json_object_get(o, "tool_calls")) + 1;
    }
    for (m->cap = 16; m->cap < 2 * n; m->cap *= 2)
        ;
    m->from = calloc(m->cap, sizeof *m->from);
    m->to = calloc(m->cap, sizeof *m->to);
    m->taken = calloc(m->cap, sizeof *m->taken);
    if (!m->from || !m->to || !m->taken) {
        id9_release(m);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < cm->n; i++) {
        const json_t *o = json_array_get(cm->src, i);
        const json_t *calls = cm->v[i].role == CHAT_ASSISTANT ? json_object_get(o, "tool_calls")
                                                             : NULL;
        for (size_t k = 0; k < json_array_size(calls); k++) {
            const char *id = json_string_value(json_object_get(json_array_get(calls, k), "id"));
            if (id)
                id9_add(m, id);
        }
        const char *tid = json_string_value(json_object_get(o, "tool_call_id"));
        if (tid && cm->v[i].role == CHAT_TOOL)
            id9_add(m, tid);
    }
    return 0;
}

/* A call as templates read it: arguments as an object when they parse
 * (HF's convention; vLLM and llama.cpp convert the same way); the id
 * through ids. */
static struct jv jv_call(struct jinja_env *e, const json_t *call, const struct id9 *ids)
{
    struct jv c = jinja_dict(e), f = jinja_dict(e);
    const json_t *fn = json_object_get(call, "function");
    const json_t *args = json_object_get(fn, "arguments");
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    const char *id = id9_get(ids, json_string_value(json_object_get(call, "id")));
    if (id)
        jinja_dict_set(e, c, "id", jinja_str(e, id, strlen(id)));
    jinja_dict_set(e, c, "type", jinja_str(e, "function", 8));
    jinja_dict_set(e, f, "name", jv_json(e, json_object_get(fn, "name")));
    jinja_dict_set(e, f, "arguments", json_is_object(parsed) ? jv_json(e, parsed) : jv_json(e, args));
    jinja_dict_set(e, c, "function", f);
    json_decref(parsed);
    return c;
}

struct fill {
    const struct chat_msgs *cm;   /* the messages as parsed (their JSON in cm->src), or
                                   * NULL when rewritten for the generic format */
    const struct gp_request *gp;
    int with_tools;
    int null_content;             /* content null or absent is given as None (else "":
                                   * the template has CHAT_CAP_NON_NULL_CONTENT) */
    const struct id9 *ids;        /* call ids mapped to 9 characters, or NULL */
};

static int fill_vars(void *arg, struct jinja_env *e, const struct jv *dicts, size_t n)
{
    const struct fill *f = arg;
    for (size_t i = 0; f->cm && i < n && i < f->cm->n; i++) {
        const json_t *o = json_array_get(f->cm->src, i);
        const json_t *content = json_object_get(o, "content");
        if ((!content || json_is_null(content)) && f->null_content)
            jinja_dict_set(e, dicts[i], "content", jinja_none());
        const json_t *calls = f->cm->v[i].role == CHAT_ASSISTANT ? json_object_get(o, "tool_calls")
                                                                : NULL;
        if (json_is_array(calls)) {
            struct jv l = jinja_list(e);
            for (size_t k = 0; k < json_array_size(calls); k++)
                jinja_list_push(e, l, jv_call(e, json_array_get(calls, k), f->ids));
            jinja_dict_set(e, dicts[i], "tool_calls", l);
        }
        static const char *const keys[] = {"tool_call_id", "name", "reasoning_content", NULL};
        for (int k = 0; keys[k]; k++) {
            const json_t *v = json_object_get(o, keys[k]);
            if (!json_is_string(v))
                continue;
            if (k == 0 && f->ids) {
                const char *id = id9_get(f->ids, json_string_value(v));
                jinja_dict_set(e, dicts[i], keys[k], jinja_str(e, id, strlen(id)));
            } else {
                jinja_dict_set(e, dicts[i], keys[k], jv_json(e, v));
            }
        }
        const json_t *r = json_object_get(o, "reasoning");
        if (json_is_string(r) && !json_object_get(o, "reasoning_content"))
            jinja_dict_set(e, dicts[i], "reasoning_content", jv_json(e, r));
    }
    if (f->with_tools)
        jinja_global(e, "tools", jv_json(e, f->gp->tools.tools));
    const char *k;
    json_t *v;
    json_object_foreach(f->gp->tmpl_kwargs, k, v) {
        jinja_global(e, k, jv_json(e, v));
    }
    if (f->gp->think_off)
        jinja_global(e, "enable_thinking", jinja_bool(0));
    return 0;
}

/* ---- the generic tool format: the conversation rewritten ------------------------- */

/* A call list as the generic envelope writes it. */
static int generic_calls(const json_t *calls, int parallel, struct buf *b)
{
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < json_array_size(calls); k++) {
        const json_t *fn = json_object_get(json_array_get(calls, k), "function");
        const json_t *args = json_object_get(fn, "arguments");
        json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
        json_t *c = json_pack("{s:O, s:o}", "name", json_object_get(fn, "name"), "arguments",
                              parsed ? parsed : json_incref((json_t *)args));
        if (!c || json_array_append_new(arr, c)) {
            json_decref(arr);
            return ERR_NOMEM;
        }
    }
    json_t *env = !arr ? NULL
                  : parallel || json_array_size(arr) != 1
                      ? json_pack("{s:o}", "tool_calls", arr)
                      : json_pack("{s:O}", "tool_call", json_array_get(arr, 0));
    if (env && !parallel && json_array_size(arr) == 1)
        json_decref(arr);
    char *s = env ? json_dumps(env, JSON_COMPACT) : NULL;
    json_decref(env);
    if (!s)
        return ERR_NOMEM;
    int rc = buf_append_str(b, s);
    free(s);
    return rc;
}

struct generic {
    struct chat_msg *v;
    size_t n;
    struct buf *texts;            /* (n) owned contents */
};

static void generic_release(struct generic *g)
{
    for (size_t i = 0; g->texts && i < g->n; i++)
        buf_release(&g->texts[i]);
    free(g->texts);
    free(g->v);
}

/* For a template without tool syntax: the tools described in a system
 * message, assistant calls written as the JSON envelope, tool results as
 * user messages ({"tool_response": ...} lines, consecutive ones joined). */
static int generic_rewrite(const struct chat_msgs *cm, const struct gp_request *gp,
                           struct generic *g)
{
    size_t cap = cm->n + 1;
    memset(g, 0, sizeof *g);
    g->v = calloc(cap, sizeof *g->v);
    g->texts = calloc(cap, sizeof *g->texts);
    if (!g->v || !g->texts)
        return ERR_NOMEM;
    int rc = 0;
    size_t i = 0;
    struct buf *b;
    if (gp->tools.choice != GP_TOOL_NONE && gp->tools.n) {
        b = &g->texts[g->n];
        buf_init(b, CHAT_MAX_PROMPT_BYTES);
        if (cm->n && cm->v[0].role == CHAT_SYSTEM) {
            rc = buf_append(b, cm->v[0].content, cm->v[0].content_len);
            if (rc == 0)
                rc = buf_append_str(b, "\n\n");
            i = 1;
        }
        if (rc == 0)
            rc = gp_tools_generic_prompt(&gp->tools, b);
        g->v[g->n++].role = CHAT_SYSTEM;
    }
    for (; rc == 0 && i < cm->n; i++) {
        const json_t *o = json_array_get(cm->src, i);
        const json_t *calls = cm->v[i].role == CHAT_ASSISTANT ? json_object_get(o, "tool_calls")
                                                             : NULL;
        int merge = cm->v[i].role == CHAT_TOOL && g->n && g->v[g->n - 1].role == CHAT_USER &&
                    i > 0 && cm->v[i - 1].role == CHAT_TOOL;
        b = merge ? &g->texts[g->n - 1] : &g->texts[g->n];
        if (!merge) {
            buf_init(b, CHAT_MAX_PROMPT_BYTES);
            g->v[g->n++].role = cm->v[i].role == CHAT_TOOL ? CHAT_USER : cm->v[i].role;
        } else {
            rc = buf_append_str(b, "\n");
        }
        if (rc == 0 && cm->v[i].role == CHAT_TOOL) {
            json_t *r = json_pack("{s:s%}", "content", cm->v[i].content, cm->v[i].content_len);
            const json_t *id = json_object_get(o, "tool_call_id"), *nm = json_object_get(o, "name");
            if (r && json_is_string(nm))
                json_object_set(r, "name", (json_t *)nm);
            if (r && json_is_string(id))
                json_object_set(r, "tool_call_id", (json_t *)id);
            json_t *env = r ? json_pack("{s:o}", "tool_response", r) : NULL;
            char *s = env ? json_dumps(env, JSON_COMPACT) : NULL;
            json_decref(env);
            rc = s ? buf_append_str(b, s) : ERR_NOMEM;
            free(s);
        } else if (rc == 0 && json_array_size(calls)) {
            rc = generic_calls(calls, gp->tools.parallel, b);
        } else if (rc == 0) {
            rc = buf_append(b, cm->v[i].content, cm->v[i].content_len);
        }
    }
    for (size_t k = 0; k < g->n; k++) {
        g->v[k].content = g->texts[k].data ? g->texts[k].data : "";
        g->v[k].content_len = g->texts[k].len;
    }
    return rc < 0 ? rc : 0;
}

/* Whether the conversation carries tool turns. */
static int has_tool_turns(const struct chat_msgs *cm)
{
    for (size_t i = 0; i < cm->n; i++)
        if (cm->v[i].role == CHAT_TOOL ||
            (cm->v[i].role == CHAT_ASSISTANT &&
             json_array_size(json_object_get(json_array_get(cm->src, i), "tool_calls"))))
            return 1;
    return 0;
}

int prompt_chat_render(const struct chat_tmpl *tmpl, const struct chat_msgs *cm,
                       const struct gp_request *gp, time_t now, struct buf *text, char *why,
                       size_t whycap)
{
    enum chat_tool_format tf = chat_tmpl_tool_format(tmpl);
    unsigned caps = chat_tmpl_caps(tmpl);
    int tools_on = gp->tools.choice != GP_TOOL_NONE && gp->tools.n;
    struct fill f = {cm, gp, tools_on, !(caps & CHAT_CAP_NON_NULL_CONTENT), NULL};
    struct chat_ext ext = {fill_vars, &f};
    int rc;
    if (tf != CHAT_TOOLS_GENERIC || !(tools_on || has_tool_turns(cm))) {
        struct id9 ids = {0};
        if ((caps & CHAT_CAP_CALL_ID9) && has_tool_turns(cm)) {
            if ((rc = id9_build(cm, &ids)) != 0)
                return rc;
            f.ids = &ids;
        }
        rc = chat_render_ext(tmpl, cm->v, cm->n, 1, now, &ext, text, why, whycap);
        id9_release(&ids);
        return rc;
    }
    struct generic g;
    rc = generic_rewrite(cm, gp, &g);
    f.cm = NULL;
    f.with_tools = 0;
    if (rc == 0)
        rc = chat_render_ext(tmpl, g.v, g.n, 1, now, &ext, text, why, whycap);
    generic_release(&g);
    return rc;
}

int prompt_arm(const struct prompt_model *m, struct gp_request *gp, struct problem *err)
{
    if (!m || !gp || gp->endpoint != GP_CHAT || !m->tmpl)
        return 0;
    int think = chat_tmpl_thinks(m->tmpl) && !gp->think_off;
    if (think) {
        snprintf(gp->gen.think_end, sizeof gp->gen.think_end, "%s", "</think>");
        if (gp->gen.grammar)   /* structured output: the answer after the thinking block */
            snprintf(gp->gen.gram_after, sizeof gp->gen.gram_after, "%s", "</think>\n\n");
        if (gp->gen.think_budget >= 0 && m->t) { /* the close the budget forces, as the template writes it */
            static const char close[] = GEN_THINK_CLOSE;
            size_t n = 0;
            int rc = tok_encode(m->t, close, sizeof close - 1, TOK_PARSE_SPECIAL, gp->gen.think_close,
                                GEN_CLOSE_MAX, &n);
            if (rc == ERR_NOMEM)
                return rc;
            gp->gen.n_think_close = rc == 0 && n <= GEN_CLOSE_MAX ? n : 0;
        }
    }
    if (gp->tools.choice == GP_TOOL_NONE || !gp->tools.n)
        return 0;
    if (gp->gen.grammar && gp->tools.choice == GP_TOOL_AUTO)
        return 0;   /* auto with a response format: the format governs the answer */
    return gp_tools_arm(&gp->tools, chat_tmpl_tool_format(m->tmpl), think, &gp->gen, err);
}

static int build_prompts(const struct prompt_model *m, enum gp_endpoint ep, const json_t *body,
                         const struct gp_request *gp, struct gen_prompt *pr, size_t n_pr,
                         struct problem *err)
{
    int rc;
    if (ep == GP_CHAT) {
        struct chat_msgs cm;
        struct buf text;
        const json_t *msgs = json_object_get(body, "messages");
        if (!m->tmpl && msgs && !json_is_null(msgs))
            return ERR_INVAL; /* no template: not a request error (err left empty) */
        if ((rc = chat_msgs_from_body(body, &cm, err)))
            return rc;
        buf_init(&text, CHAT_MAX_PROMPT_BYTES);
        char why[256];
        rc = prompt_chat_render(m->tmpl, &cm, gp, 0, &text, why, sizeof why);
        chat_msgs_release(&cm);
        if (rc == ERR_INVAL && why[0])
            rc = problem_setf(err, "invalid_value", "messages",
                         "Invalid 'messages': this model's chat template cannot render the "
                         "conversation: %s", why);
        else if (rc == ERR_INVAL)
            rc = problem_setf(err, "invalid_value", "messages",
                         "Invalid 'messages': this model's chat template cannot render the "
                         "conversation (roles must alternate user/assistant%s).",
                         "; some templates accept no system message");
        else if (rc == ERR_TOOBIG)
            rc = ctx_error(err, ep, m->n_ctx, 0, -1, 1);
        else if (rc == 0)
            rc = encode_capped(m, ep, text.data ? text.data : "", text.len, &pr[0], err);
        buf_release(&text);
        return rc;
    }
    for (size_t i = 0; i < n_pr; i++) {
        const struct gp_prompt *p = &gp->prompts[i];
        if (p->ids) {
            if (p->n_ids > m->n_ctx)
                return ctx_error(err, ep, m->n_ctx, 0, -1, 1);
            pr[i].ids = malloc(p->n_ids * sizeof *pr[i].ids);
            if (!pr[i].ids)
                return ERR_NOMEM;
            memcpy(pr[i].ids, p->ids, p->n_ids * sizeof *p->ids);
            pr[i].n = p->n_ids;
        } else if ((rc = encode_capped(m, ep, p->text, p->text_len, &pr[i], err)) != 0) {
            return rc;
        }
    }
    return 0;
}

int prompt_build(const struct prompt_model *m, enum gp_endpoint ep, const json_t *body,
                 const struct gp_request *gp, struct gen_prompt **out, size_t *n_out,
                 struct problem *err)
{
    if (!m || !m->t || !body || !gp || !out || !n_out || m->n_ctx == 0)
        return ERR_INVAL;
    size_t n_pr = ep == GP_CHAT ? 1 : gp->n_prompts;
    struct gen_prompt *pr = calloc(n_pr ? n_pr : 1, sizeof *pr);
    if (!pr)
        return ERR_NOMEM;
    int rc = build_prompts(m, ep, body, gp, pr, n_pr, err);
    for (size_t i = 0; rc == 0 && i < n_pr; i++) {
        if (pr[i].n == 0)
            rc = problem_setf(err, "invalid_value", ep == GP_CHAT ? "messages" : "prompt",
                         "Invalid '%s': the prompt is empty after tokenization.",
                         ep == GP_CHAT ? "messages" : "prompt");
        else if (pr[i].n >= m->n_ctx ||
                 (gp->gen.max_tokens >= 0 && (uint64_t)gp->gen.max_tokens > m->n_ctx - pr[i].n))
            rc = ctx_error(err, ep, m->n_ctx, pr[i].n, gp->gen.max_tokens, 0);
    }
    if (rc) {
        gen_prompts_free(pr, n_pr);
        return rc;
    }
    *out = pr;
    *n_out = n_pr;
    return 0;
}
