/*
 * response.c - OpenAI chat.completion / text_completion bodies (see
 * response.h). Built with jansson; keys are inserted in OpenAI's order and
 * jansson keeps insertion order when dumping.
 */
#include "openai/response.h"

#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/hash.h"
#include "common/id.h"
#include "common/crypto.h"

/* json_object_set_new that records the first failure in *ok. */
static void put(json_t *o, const char *k, json_t *v, int *ok)
{
    if (!v || json_object_set_new(o, k, v) != 0)
        *ok = 0;
}

static void push(json_t *a, json_t *v, int *ok)
{
    if (!v || json_array_append_new(a, v) != 0)
        *ok = 0;
}

/* Piece of token id: raw bytes into raw, display string (U+FFFD for invalid
 * UTF-8) into disp. */
static int piece(const struct tok *t, int32_t id, struct buf *raw, struct buf *disp)
{
    buf_reset(raw);
    buf_reset(disp);
    int rc = tok_piece(t, id, TOK_RENDER_SPECIAL, raw);
    if (rc == 0 && raw->len)
        rc = tok_utf8_sanitize(raw->data, raw->len, disp);
    return rc;
}

static json_t *bytes_array(const struct buf *raw, int *ok)
{
    json_t *a = json_array();
    if (!a) {
        *ok = 0;
        return NULL;
    }
    for (size_t i = 0; i < raw->len; i++)
        push(a, json_integer((unsigned char)raw->data[i]), ok);
    return a;
}

static json_t *str_n(const struct buf *b)
{
    return json_stringn(b->len ? b->data : "", b->len);
}

static json_t *usage_json(const struct resp_meta *m, int *ok)
{
    json_t *u = json_object();
    if (!u) {
        *ok = 0;
        return NULL;
    }
    put(u, "prompt_tokens", json_integer(m->prompt_tokens), ok);
    put(u, "completion_tokens", json_integer(m->completion_tokens), ok);
    put(u, "total_tokens", json_integer(m->prompt_tokens + m->completion_tokens), ok);
    if (m->think) {
        json_t *d = json_object();
        put(u, "completion_tokens_details", d, ok);
        if (d)
            put(d, "reasoning_tokens", json_integer(m->reasoning_tokens), ok);
    }
    return u;
}

static int head(const struct resp_meta *m, const char *prefix, const char *object, json_t **out)
{
    char id[ID_MAX];
    const char *idp = m->id;
    if (!idp) {
        int rc = id_new(prefix, id, sizeof id);
        if (rc)
            return rc;
        idp = id;
    }
    int ok = 1;
    json_t *o = json_object();
    if (!o)
        return ERR_NOMEM;
    put(o, "id", json_string(idp), &ok);
    put(o, "object", json_string(object), &ok);
    put(o, "created", json_integer(m->created ? m->created : clock_wall_s()), &ok);
    put(o, "model", json_string(m->model ? m->model : ""), &ok);
    if (!ok) {
        json_decref(o);
        return ERR_NOMEM;
    }
    *out = o;
    return 0;
}

static int tail(const struct resp_meta *m, json_t *o, json_t *choices)
{
    int ok = 1;
    put(o, "choices", choices, &ok);
    put(o, "usage", usage_json(m, &ok), &ok);
    /* chat answers name the tier that served them, as OpenAI's do: requests
     * of every tier run the same way here (responses.c says the same) */
    if (strcmp(json_string_value(json_object_get(o, "object")), "chat.completion") == 0)
        put(o, "service_tier", json_string("default"), &ok);
    put(o, "system_fingerprint",
        m->system_fingerprint ? json_string(m->system_fingerprint) : json_null(), &ok);
    return ok ? 0 : ERR_NOMEM;
}

static int check_choice(const struct gen_choice *c, int lp)
{
    if (c->finish != STOP_FINISH_STOP && c->finish != STOP_FINISH_LENGTH)
        return ERR_INVAL;
    if (c->text_len && !c->text)
        return ERR_INVAL;
    if (lp)
        for (size_t i = 0; i < c->n_lp; i++)
            if (c->lp[i].text_offset > c->text_len)
                return ERR_INVAL;
    return 0;
}

/* Each builder writes one choice object's members before "finish_reason"
 * (which build adds); raw and disp are scratch buffers for token pieces.
 * Returns 0 (with *ok cleared on a failed allocation) or an error code. */
typedef int (*choice_fn)(const struct resp_meta *m, const struct gen_choice *c, size_t i,
                         const struct tok *t, struct buf *raw, struct buf *disp, json_t *ch,
                         int *ok);

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Split a thinking block off text: reasoning = what precedes "</think>" (a
 * leading "<think>" dropped), answer = what follows it. Without "</think>"
 * a text that opened "<think>" is all reasoning (cut by the length limit),
 * any other text all answer. Pointers into text. */
static void split_think(const char *text, size_t len, const char **r, size_t *rn,
                        const char **a, size_t *an)
{
    static const char open[] = "<think>", close[] = "</think>";
    size_t at = 0;
    while (at < len && is_space(text[at]))
        at++;
    int opened = len - at >= sizeof open - 1 && memcmp(text + at, open, sizeof open - 1) == 0;
    if (opened)
        at += sizeof open - 1;
    const char *end = memmem(text + at, len - at, close, sizeof close - 1);
    *r = NULL;
    *rn = 0;
    *a = text;
    *an = len;
    if (!end && !opened)
        return;
    size_t e = end ? (size_t)(end - text) : len;
    while (at < e && is_space(text[at]))
        at++;
    size_t re = e;
    while (re > at && is_space(text[re - 1]))
        re--;
    *r = text + at;
    *rn = re - at;
    size_t b = end ? e + sizeof close - 1 : len;
    while (b < len && is_space(text[b]))
        b++;
    *a = text + b;
    *an = len - b;
}

/* "call_" + 24 letters and digits: from the response id when it is given
 * (a retried request gets the same ids), else random. */
static int call_id(const struct resp_meta *m, size_t choice, size_t k, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t h[3];
    if (m->id) {
        uint64_t x = hash_fnv(m->id, strlen(m->id));
        for (int j = 0; j < 3; j++) {
            uint64_t v[3] = {x, (uint64_t)choice, (uint64_t)k * 3 + (uint64_t)j};
            h[j] = hash_fnv(v, sizeof v);
        }
    } else if (crypto_random(h, sizeof h) != 0) {
        return ERR_CRYPTO;
    }
    memcpy(out, "call_", 5);
    for (int j = 0; j < 24; j++)
        out[5 + j] = al[(h[j / 8] >> ((j % 8) * 8)) % 62];
    out[29] = '\0';
    return 0;
}

/* message.tool_calls (or the legacy function_call) for calls. */
static int put_calls(const struct resp_meta *m, size_t i, const struct tool_calls *tc,
                     json_t *msg, int *ok)
{
    if (m->tools->legacy) {
        json_t *fc = json_object();
        put(msg, "function_call", fc, ok);
        if (fc) {
            put(fc, "name", json_string(tc->v[0].name), ok);
            put(fc, "arguments", json_string(tc->v[0].arguments), ok);
        }
        return 0;
    }
    json_t *arr = json_array();
    put(msg, "tool_calls", arr, ok);
    for (size_t k = 0; arr && k < tc->n && *ok; k++) {
        char id[32];
        int rc = call_id(m, i, k, id);
        if (rc)
            return rc;
        json_t *c = json_object(), *f = json_object();
        push(arr, c, ok);
        if (!c) {
            json_decref(f);
            break;
        }
        put(c, "id", json_string(id), ok);
        put(c, "type", json_string("function"), ok);
        put(c, "function", f, ok);
        if (f) {
            put(f, "name", json_string(tc->v[k].name), ok);
            put(f, "arguments", json_string(tc->v[k].arguments), ok);
        }
    }
    return 0;
}

static int chat_choice(const struct resp_meta *m, const struct gen_choice *c, size_t i,
                       const struct tok *t, struct buf *raw, struct buf *disp, json_t *ch, int *ok)
{
    int rc;
    json_t *msg = json_object();
    if (!msg) {
        *ok = 0;
        return 0;
    }
    const char *rs = NULL, *ans = c->text ? c->text : "";
    size_t rn = 0, an = c->text_len;
    if (m->think)
        split_think(ans, an, &rs, &rn, &ans, &an);
    struct tool_calls tc;
    memset(&tc, 0, sizeof tc);
    if (m->tools && m->tools->n && m->tools->choice != GP_TOOL_NONE &&
        (rc = tool_calls_parse(ans, an, m->tool_fmt, m->tools, &tc)) != 0) {
        json_decref(msg);
        return rc;
    }
    if (m->tools && m->tools->n && m->tools->choice != GP_TOOL_NONE) {
        ans = tc.content;
        an = tc.content_len;
    }
    put(ch, "index", json_integer((json_int_t)i), ok);
    put(msg, "role", json_string("assistant"), ok);
    put(msg, "content", ans && (an || !tc.n) ? json_stringn(ans, an)
                        : tc.n ? json_null() : json_string(""), ok);
    put(msg, "refusal", json_null(), ok);
    if (rs) {
        put(msg, "reasoning_content", json_stringn(rs, rn), ok);
        put(msg, "reasoning", json_stringn(rs, rn), ok);
    }
    rc = tc.n ? put_calls(m, i, &tc, msg, ok) : 0;
    put(ch, "message", msg, ok);
    if (tc.n && c->finish == STOP_FINISH_STOP)
        put(ch, "finish_reason", json_string(m->tools->legacy ? "function_call"
                                             : m->tools->named ? "stop" : "tool_calls"), ok);
    tool_calls_release(&tc);
    if (rc)
        return rc;
    if (!m->logprobs) {
        put(ch, "logprobs", json_null(), ok);
        return 0;
    }
    json_t *lpo = json_object(), *content = json_array();
    put(ch, "logprobs", lpo, ok);
    if (!lpo) {
        json_decref(content);
        return 0;
    }
    put(lpo, "content", content, ok);
    put(lpo, "refusal", json_null(), ok);
    for (size_t k = 0; k < c->n_lp && *ok; k++) {
        const struct smp_result *r = &c->lp[k].r;
        if ((rc = piece(t, r->token, raw, disp)) != 0)
            return rc;
        json_t *e = json_object(), *tops = json_array();
        push(content, e, ok);
        if (!e || !tops) {
            json_decref(tops);
            *ok = 0;
            return 0;
        }
        put(e, "token", str_n(disp), ok);
        put(e, "logprob", json_real(r->logprob), ok);
        put(e, "bytes", bytes_array(raw, ok), ok);
        put(e, "top_logprobs", tops, ok);
        for (int j = 0; j < r->n_top && *ok; j++) {
            if ((rc = piece(t, r->top_id[j], raw, disp)) != 0)
                return rc;
            json_t *a = json_object();
            push(tops, a, ok);
            if (!a)
                break;
            put(a, "token", str_n(disp), ok);
            put(a, "logprob", json_real(r->top_logprob[j]), ok);
            put(a, "bytes", bytes_array(raw, ok), ok);
        }
    }
    return 0;
}

/* Code points in s[0..n) (bytes that are not UTF-8 continuation bytes). */
static size_t code_points(const char *s, size_t n)
{
    size_t cp = 0;
    for (size_t i = 0; i < n; i++)
        cp += ((unsigned char)s[i] & 0xC0) != 0x80;
    return cp;
}

static int completion_choice(const struct resp_meta *m, const struct gen_choice *c, size_t i,
                             const struct tok *t, struct buf *raw, struct buf *disp, json_t *ch,
                             int *ok)
{
    int rc;
    put(ch, "text", json_stringn(c->text ? c->text : "", c->text_len), ok);
    put(ch, "index", json_integer((json_int_t)i), ok);
    if (!m->logprobs) {
        put(ch, "logprobs", json_null(), ok);
        return 0;
    }
    json_t *lpo = json_object(), *toks = json_array(), *tlp = json_array(), *tops = json_array(),
           *offs = json_array();
    put(ch, "logprobs", lpo, ok);
    if (!lpo || !toks || !tlp || !tops || !offs) {
        json_decref(toks);
        json_decref(tlp);
        json_decref(tops);
        json_decref(offs);
        *ok = 0;
        return 0;
    }
    put(lpo, "tokens", toks, ok);
    put(lpo, "token_logprobs", tlp, ok);
    put(lpo, "top_logprobs", tops, ok);
    put(lpo, "text_offset", offs, ok);
    for (size_t k = 0; k < c->n_lp && *ok; k++) {
        const struct gen_lp *e = &c->lp[k];
        if ((rc = piece(t, e->r.token, raw, disp)) != 0)
            return rc;
        push(toks, str_n(disp), ok);
        push(tlp, json_real(e->r.logprob), ok);
        push(offs, json_integer((json_int_t)code_points(c->text, e->text_offset)), ok);
        json_t *d = json_object();
        push(tops, d, ok);
        for (int j = 0; d && j < e->r.n_top && *ok; j++) {
            if ((rc = piece(t, e->r.top_id[j], raw, disp)) != 0)
                return rc;
            /* a piece may hold a NUL byte: length-aware key functions */
            const char *ks = disp->len ? disp->data : "";
            if (!json_object_getn(d, ks, disp->len)) {
                json_t *lv = json_real(e->r.top_logprob[j]);
                if (!lv || json_object_setn_new(d, ks, disp->len, lv) != 0)
                    *ok = 0;
            }
        }
    }
    return 0;
}

/* The envelope both response kinds share: check every choice, the head
 * (id prefix, object name), one object per choice by fn, finish_reason,
 * usage and fingerprint. */
static int build(const struct resp_meta *m, const struct gen_choice *choices, size_t n,
                 const struct tok *t, const char *prefix, const char *object, choice_fn fn,
                 json_t **out)
{
    json_t *o = NULL, *arr = NULL;
    struct buf raw, disp;
    int rc, ok = 1;

    buf_init(&raw, TOK_MAX_TOKEN_BYTES * 4);
    buf_init(&disp, TOK_MAX_TOKEN_BYTES * 4);
    for (size_t i = 0; i < n; i++)
        if ((rc = check_choice(&choices[i], m->logprobs)) != 0)
            goto out;
    if ((rc = head(m, prefix, object, &o)) != 0)
        goto out;
    arr = json_array();
    if (!arr) {
        rc = ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n && ok; i++) {
        const struct gen_choice *c = &choices[i];
        json_t *ch = json_object();
        push(arr, ch, &ok);
        if (!ch)
            break;
        if ((rc = fn(m, c, i, t, &raw, &disp, ch, &ok)) != 0)
            goto out;
        if (ok && !json_object_get(ch, "finish_reason"))
            put(ch, "finish_reason", json_string(stop_finish_name(c->finish)), &ok);
        if (ok && c->stop)
            put(ch, "stop_reason", json_stringn(c->stop, c->stop_len), &ok);
    }
    if (!ok) {
        rc = ERR_NOMEM;
        goto out;
    }
    rc = tail(m, o, arr);
    arr = NULL;
    if (rc == 0) {
        *out = o;
        o = NULL;
    }
out:
    json_decref(arr);
    json_decref(o);
    buf_release(&raw);
    buf_release(&disp);
    return rc;
}

int resp_chat_build(const struct resp_meta *m, const struct gen_choice *choices, size_t n,
                    const struct tok *t, json_t **out)
{
    struct resp_meta mm = *m;
    mm.reasoning_tokens = 0;
    for (size_t i = 0; m->think && i < n; i++) {
        const char *rs, *ans;
        size_t rn, an;
        split_think(choices[i].text ? choices[i].text : "", choices[i].text_len, &rs, &rn, &ans,
                    &an);
        if (rs)
            mm.reasoning_tokens += (int64_t)choices[i].n_reason;
    }
    return build(&mm, choices, n, t, "chatcmpl-", "chat.completion", chat_choice, out);
}

int resp_completion_build(const struct resp_meta *m, const struct gen_choice *choices, size_t n,
                          const struct tok *t, json_t **out)
{
    return build(m, choices, n, t, "cmpl-", "text_completion", completion_choice, out);
}
