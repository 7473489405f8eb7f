/*
 * chat.c - chat templates (see chat.h): the GGUF's own template through the
 * Jinja interpreter, else a built-in format.
 *
 * The built-ins walk the messages and append the same bytes the family's
 * Jinja template produces; jinja's `trim` filter and Python's str.strip()
 * are implemented by utf8_py_strip (Python's notion of whitespace, not just ASCII).
 */
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/utf8.h"
#include "text/jinja.h"

struct chat_tmpl {
    enum chat_format fmt;
    char *bos, *eos;          /* token texts ("" when the vocab has none) */
    char *default_system;     /* CHATML: literal default system prompt, or NULL */
    struct jinja_tmpl *jt;    /* CHAT_JINJA: the parsed template */
    char why[JINJA_ERR_MAX];  /* a built-in format: why the template did not parse, or "" */
    enum chat_tool_format tools;
    int thinks;
    unsigned caps;            /* CHAT_CAP_* found by probe_caps */
};

const char *chat_format_name(enum chat_format f)
{
    switch (f) {
    case CHAT_CHATML: return "chatml";
    case CHAT_LLAMA2: return "llama2";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_MISTRAL: return "mistral";
    case CHAT_MISTRAL_LEGACY: return "mistral-legacy";
    case CHAT_ZEPHYR: return "zephyr";
    case CHAT_GEMMA: return "gemma";
    case CHAT_PHI3: return "phi3";
    case CHAT_JINJA: return "jinja";
    }
    return "unknown";
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static char *tok_text_dup(const struct tok *t, int32_t id)
{
    size_t len = 0;
    const char *s = id >= 0 ? tok_text(t, id, &len) : NULL;
    return s ? dup_n(s, len) : dup_n("", 0);
}

/* A ChatML default system prompt written literally in the template:
 * '<|im_start|>system\n<text without quotes><|im_end|>'. Returns a heap
 * copy with "\n" escapes resolved, NULL if none (or on NOMEM: harmless). */
static char *chatml_default_system(const char *src)
{
    static const char head[] = "<|im_start|>system";
    const char *p = src;
    while ((p = strstr(p, head)) != NULL) {
        p += sizeof head - 1;
        const char *q = p;
        if (*q == '\n')
            q++;
        else if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else
            continue;
        const char *end = strstr(q, "<|im_end|>");
        if (!end)
            return NULL;
        if (memchr(q, '\'', (size_t)(end - q)) || memchr(q, '"', (size_t)(end - q)) ||
            memchr(q, '{', (size_t)(end - q)))
            continue; /* not a plain literal (e.g. ... + messages[0]['content']) */
        char *out = malloc((size_t)(end - q) + 1);
        if (!out)
            return NULL;
        size_t k = 0;
        for (const char *r = q; r < end; r++) {
            if (r[0] == '\\' && r + 1 < end && r[1] == 'n') {
                out[k++] = '\n';
                r++;
            } else {
                out[k++] = *r;
            }
        }
        out[k] = '\0';
        return out;
    }
    return NULL;
}

static int probe_caps(struct chat_tmpl *ct);

static int tmpl_new(const char *src, const struct tok *t, int interp, struct chat_tmpl **out)
{
    int rc = 0;
    struct chat_tmpl *ct = calloc(1, sizeof *ct);
    if (!ct)
        return ERR_NOMEM;
    const char *s = src ? src : "";
#define HAS(x) (strstr(s, (x)) != NULL)
#define VOCAB_HAS(x) (tok_find(t, (x), strlen(x)) >= 0)
    if (interp && src && (rc = jinja_parse(src, strlen(src), &ct->jt, ct->why, sizeof ct->why)) == 0) {
        ct->fmt = CHAT_JINJA;
        if (HAS("tools")) {
            if (HAS("<tool_call>") && (HAS("\"name\"") || HAS("\\\"name\\\"")) &&
                !HAS("<function=") && !HAS("<arg_key>"))
                ct->tools = CHAT_TOOLS_HERMES;   /* JSON calls, not an XML variant */
            else if (HAS("[TOOL_CALLS]"))
                ct->tools = CHAT_TOOLS_MISTRAL;
            else if (HAS("<|start_header_id|>") && HAS("\"parameters\""))
                ct->tools = CHAT_TOOLS_LLAMA3;
        }
        ct->thinks = HAS("<think>");
    } else if (rc == ERR_NOMEM) {
        goto out;
    } else if (!src && VOCAB_HAS("<|start_header_id|>") && VOCAB_HAS("<|eot_id|>")) {
        ct->fmt = CHAT_LLAMA3;  /* no template: the vocabulary's specials say which family */
    } else if (!src && VOCAB_HAS("<start_of_turn>")) {
        ct->fmt = CHAT_GEMMA;
    } else if (!src && VOCAB_HAS("<|assistant|>") && VOCAB_HAS("<|end|>")) {
        ct->fmt = CHAT_PHI3;
    } else if (HAS("<|im_start|>")) {
        ct->fmt = CHAT_CHATML;
        ct->default_system = chatml_default_system(s);
    } else if (HAS("[INST]")) {
        if (HAS("<<SYS>>"))
            ct->fmt = CHAT_LLAMA2;
        else if (HAS("' [INST] '"))
            ct->fmt = CHAT_MISTRAL;
        else
            ct->fmt = CHAT_MISTRAL_LEGACY;
    } else if (HAS("<|assistant|>") && HAS("<|end|>")) {
        ct->fmt = CHAT_PHI3;
    } else if (HAS("<|user|>") && HAS("<|assistant|>")) {
        ct->fmt = CHAT_ZEPHYR;
    } else if (HAS("<start_of_turn>")) {
        ct->fmt = CHAT_GEMMA;
    } else if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) {
        ct->fmt = CHAT_LLAMA3;
    } else if (tok_find(t, "<|im_start|>", 12) >= 0) {
        ct->fmt = CHAT_CHATML;
    } else {
        rc = ERR_UNSUPPORTED;
        goto out;
    }
    rc = 0;
#undef HAS
#undef VOCAB_HAS
    ct->bos = tok_text_dup(t, tok_bos(t));
    ct->eos = tok_text_dup(t, tok_eos(t));
    if (!ct->bos || !ct->eos) {
        rc = ERR_NOMEM;
        goto out;
    }
    if (ct->fmt == CHAT_JINJA && (rc = probe_caps(ct)) != 0)
        goto out;
    if (ct->tools == CHAT_TOOLS_MISTRAL && (ct->caps & CHAT_CAP_CALL_ARGS))
        ct->tools = CHAT_TOOLS_MISTRAL_ARGS;
    *out = ct;
    ct = NULL;
out:
    chat_tmpl_free(ct);
    return rc;
}

int chat_tmpl_new(const char *src, const struct tok *t, struct chat_tmpl **out)
{
    return tmpl_new(src, t, 1, out);
}

int chat_tmpl_new_builtin(const char *src, const struct tok *t, struct chat_tmpl **out)
{
    return tmpl_new(src, t, 0, out);
}

void chat_tmpl_free(struct chat_tmpl *ct)
{
    if (!ct)
        return;
    free(ct->bos);
    free(ct->eos);
    free(ct->default_system);
    jinja_tmpl_free(ct->jt);
    free(ct);
}

enum chat_format chat_tmpl_format(const struct chat_tmpl *ct) { return ct->fmt; }

const char *chat_tmpl_why(const struct chat_tmpl *ct) { return ct->why; }

enum chat_tool_format chat_tmpl_tool_format(const struct chat_tmpl *ct) { return ct->tools; }

int chat_tmpl_thinks(const struct chat_tmpl *ct) { return ct->thinks; }

unsigned chat_tmpl_caps(const struct chat_tmpl *ct) { return ct->caps; }

const char *chat_tool_format_name(enum chat_tool_format f)
{
    switch (f) {
    case CHAT_TOOLS_HERMES: return "hermes";
    case CHAT_TOOLS_LLAMA3: return "llama3";
    case CHAT_TOOLS_MISTRAL: return "mistral";
    case CHAT_TOOLS_MISTRAL_ARGS: return "mistral-args";
    case CHAT_TOOLS_GENERIC: break;
    }
    return "generic";
}

/* ---- rendering ---------------------------------------------------------------- */

struct w {
    struct buf *out;
    int rc;
};

static void put(struct w *w, const char *s, size_t n)
{
    if (w->rc == 0)
        w->rc = buf_append(w->out, s, n);
}

static void puts_(struct w *w, const char *s) { put(w, s, strlen(s)); }

static void put_content(struct w *w, const struct chat_msg *m, int strip)
{
    const char *s = m->content ? m->content : "";
    size_t n = m->content ? m->content_len : 0;
    if (strip)
        utf8_py_strip(&s, &n, UTF8_STRIP_BOTH);
    put(w, s, n);
}

static const char *role_name(enum chat_role r)
{
    return r == CHAT_SYSTEM ? "system" : r == CHAT_USER ? "user" : r == CHAT_TOOL ? "tool" : "assistant";
}

/* roles after an optional leading system message must go user, assistant, ... */
static int alternates(const struct chat_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].role != (i % 2 == 0 ? CHAT_USER : CHAT_ASSISTANT))
            return 0;
    return 1;
}

/* The variables HF's apply_chat_template passes, then the interpreter. */
static int render_jinja(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n, int gen,
                        time_t now, const struct chat_ext *ext, struct buf *out, char *err,
                        size_t errcap)
{
    struct jinja_env *e = jinja_env_new(now ? now : time(NULL));
    if (!e)
        return ERR_NOMEM;
    struct jv *dicts = n ? calloc(n, sizeof *dicts) : NULL;
    if (n && !dicts) {
        jinja_env_free(e);
        return ERR_NOMEM;
    }
    struct jv list = jinja_list(e);
    for (size_t i = 0; i < n; i++) {
        struct jv m = jinja_dict(e);
        const char *role = role_name(msgs[i].role);
        jinja_dict_set(e, m, "role", jinja_str(e, role, strlen(role)));
        jinja_dict_set(e, m, "content", jinja_str(e, msgs[i].content ? msgs[i].content : "",
                                                  msgs[i].content ? msgs[i].content_len : 0));
        jinja_list_push(e, list, m);
        dicts[i] = m;
    }
    jinja_global(e, "messages", list);
    jinja_global(e, "add_generation_prompt", jinja_bool(gen));
    jinja_global(e, "bos_token", jinja_str(e, ct->bos, strlen(ct->bos)));
    jinja_global(e, "eos_token", jinja_str(e, ct->eos, strlen(ct->eos)));
    jinja_global(e, "tools", jinja_none());
    jinja_global(e, "documents", jinja_none());
    int rc = ext && ext->fill ? ext->fill(ext->arg, e, dicts, n) : 0;
    if (rc == 0)
        rc = jinja_render(ct->jt, e, out, err, errcap);
    free(dicts);
    jinja_env_free(e);
    return rc;
}

int chat_render(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                int gen, struct buf *out)
{
    return chat_render_ext(ct, msgs, n, gen, 0, NULL, out, NULL, 0);
}

int chat_render_err(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                    int gen, time_t now, struct buf *out, char *err, size_t errcap)
{
    return chat_render_ext(ct, msgs, n, gen, now, NULL, out, err, errcap);
}

int chat_render_ext(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                    int gen, time_t now, const struct chat_ext *ext, struct buf *out, char *err,
                    size_t errcap)
{
    if (err && errcap)
        err[0] = '\0';
    if (ct->fmt == CHAT_JINJA)
        return render_jinja(ct, msgs, n, gen, now, ext, out, err, errcap);
    struct w w = {out, 0};
    size_t start = out->len;
    const struct chat_msg *sys = NULL;
    const struct chat_msg *loop = msgs;
    size_t nl = n;
    if (n > 0 && msgs[0].role == CHAT_SYSTEM &&
        (ct->fmt == CHAT_LLAMA2 || ct->fmt == CHAT_MISTRAL || ct->fmt == CHAT_MISTRAL_LEGACY ||
         ct->fmt == CHAT_GEMMA)) {
        sys = &msgs[0];
        loop = msgs + 1;
        nl = n - 1;
    }
    switch (ct->fmt) {
    case CHAT_CHATML:
        if (ct->default_system && (n == 0 || msgs[0].role != CHAT_SYSTEM) && n > 0) {
            puts_(&w, "<|im_start|>system\n");
            puts_(&w, ct->default_system);
            puts_(&w, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n; i++) {
            puts_(&w, "<|im_start|>");
            puts_(&w, role_name(msgs[i].role));
            puts_(&w, "\n");
            put_content(&w, &msgs[i], 0);
            puts_(&w, "<|im_end|>\n");
        }
        if (gen)
            puts_(&w, "<|im_start|>assistant\n");
        break;
    case CHAT_JINJA:
        break;
    case CHAT_LLAMA2:
        if (!alternates(loop, nl))
            return ERR_INVAL;
        for (size_t i = 0; i < nl; i++) {
            if (loop[i].role == CHAT_USER) {
                struct buf c;
                buf_init(&c, CHAT_MAX_PROMPT_BYTES + 64);
                int rc = 0;
                if (i == 0 && sys) {
                    if ((rc = buf_append_str(&c, "<<SYS>>\n")) == 0 &&
                        (rc = buf_append(&c, sys->content, sys->content_len)) == 0)
                        rc = buf_append_str(&c, "\n<</SYS>>\n\n");
                }
                if (rc == 0)
                    rc = buf_append(&c, loop[i].content, loop[i].content_len);
                if (rc < 0) {
                    buf_release(&c);
                    return rc;
                }
                struct chat_msg cm = {CHAT_USER, c.data ? c.data : "", c.len};
                puts_(&w, ct->bos);
                puts_(&w, "[INST] ");
                put_content(&w, &cm, 1);
                puts_(&w, " [/INST]");
                buf_release(&c);
            } else {
                puts_(&w, " ");
                put_content(&w, &loop[i], 1);
                puts_(&w, " ");
                puts_(&w, ct->eos);
            }
        }
        break;
    case CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            if (i == 0)
                puts_(&w, ct->bos);
            puts_(&w, "<|start_header_id|>");
            puts_(&w, role_name(msgs[i].role));
            puts_(&w, "<|end_header_id|>\n\n");
            put_content(&w, &msgs[i], 1);
            puts_(&w, "<|eot_id|>");
        }
        if (gen)
            puts_(&w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_MISTRAL:
    case CHAT_MISTRAL_LEGACY:
        if (!alternates(loop, nl))
            return ERR_INVAL;
        puts_(&w, ct->bos);
        for (size_t i = 0; i < nl; i++) {
            int legacy = ct->fmt == CHAT_MISTRAL_LEGACY;
            if (loop[i].role == CHAT_USER) {
                puts_(&w, legacy ? "[INST] " : " [INST] ");
                if (i == 0 && sys) {
                    put_content(&w, sys, 0);
                    puts_(&w, "\n\n");
                }
                put_content(&w, &loop[i], 0);
                puts_(&w, " [/INST]");
            } else {
                if (!legacy)
                    puts_(&w, " ");
                put_content(&w, &loop[i], 0);
                puts_(&w, ct->eos);
            }
        }
        break;
    case CHAT_ZEPHYR:
        for (size_t i = 0; i < n; i++) {
            puts_(&w, "<|");
            puts_(&w, role_name(msgs[i].role));
            puts_(&w, "|>\n");
            put_content(&w, &msgs[i], 0);
            puts_(&w, ct->eos);
            puts_(&w, "\n");
        }
        if (gen && n > 0)
            puts_(&w, "<|assistant|>\n");
        break;
    case CHAT_GEMMA:
        if (!alternates(loop, nl))
            return ERR_INVAL;
        puts_(&w, ct->bos);
        for (size_t i = 0; i < nl; i++) {
            puts_(&w, "<start_of_turn>");
            puts_(&w, loop[i].role == CHAT_ASSISTANT ? "model" : "user");
            puts_(&w, "\n");
            if (i == 0 && sys) { /* llama.cpp's fold; the HF template raises */
                put_content(&w, sys, 1);
                puts_(&w, "\n\n");
            }
            put_content(&w, &loop[i], 1);
            puts_(&w, "<end_of_turn>\n");
        }
        if (gen)
            puts_(&w, "<start_of_turn>model\n");
        break;
    case CHAT_PHI3:
        for (size_t i = 0; i < n; i++) {
            puts_(&w, "<|");
            puts_(&w, role_name(msgs[i].role));
            puts_(&w, "|>\n");
            put_content(&w, &msgs[i], 0);
            puts_(&w, "<|end|>\n");
        }
        puts_(&w, gen ? "<|assistant|>\n" : ct->eos);
        break;
    }
    if (w.rc < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return w.rc;
}

int chat_encode(const struct tok *t, const char *text, size_t len, int32_t *ids, size_t cap,
                size_t *n_out)
{
    int flags = TOK_PARSE_SPECIAL;
    size_t bl = 0;
    const char *bt = tok_bos(t) >= 0 ? tok_text(t, tok_bos(t), &bl) : NULL;
    if (tok_add_bos(t) && !(bt && bl && len >= bl && memcmp(text, bt, bl) == 0))
        flags |= TOK_ADD_SPECIAL;
    return tok_encode(t, text, len, flags, ids, cap, n_out);
}

/* ---- capability probes ---------------------------------------------------------- */

/* What a template needs of its inputs, found by rendering small
 * conversations once (llama.cpp's chat template capability detection,
 * common/chat.cpp: requires_non_null_content), never by model name: a user
 * message holding a needle, then an assistant turn whose content is null or
 * "", with a call or without, answered by a tool message or not. */
#define PROBE_NEEDLE "<User Needle>"
#define PROBE_NOW ((time_t)1768469400)   /* any fixed instant: probes are deterministic */
#define PROBE_ID9 "a1b2c3d4e"            /* 9 letters and digits */
#define PROBE_ID_LONG "call_0123456789abc"

struct probe {
    int content_null;   /* the assistant's content is None (else "") */
    int call;           /* the assistant calls some_tool(arg="argument_needle") */
    const char *id;     /* the call's id */
    int answer;         /* a tool message answers the call */
};

static int probe_fill(void *arg, struct jinja_env *e, const struct jv *d, size_t n)
{
    const struct probe *p = arg;
    if (p->content_null)
        jinja_dict_set(e, d[1], "content", jinja_none());
    if (p->call) {
        struct jv c = jinja_dict(e), f = jinja_dict(e), a = jinja_dict(e), l = jinja_list(e);
        jinja_dict_set(e, a, "arg", jinja_str(e, "argument_needle", 15));
        jinja_dict_set(e, f, "name", jinja_str(e, "some_tool", 9));
        jinja_dict_set(e, f, "arguments", a);
        jinja_dict_set(e, c, "id", jinja_str(e, p->id, strlen(p->id)));
        jinja_dict_set(e, c, "type", jinja_str(e, "function", 8));
        jinja_dict_set(e, c, "function", f);
        jinja_list_push(e, l, c);
        jinja_dict_set(e, d[1], "tool_calls", l);
    }
    if (n > 2)
        jinja_dict_set(e, d[2], "tool_call_id", jinja_str(e, p->id, strlen(p->id)));
    return 0;
}

/* Render probe p into out. Returns 1 when it renders and the output holds
 * needle, 0 when not (the template raised, or left the needle out),
 * ERR_NOMEM. */
static int probe(const struct chat_tmpl *ct, struct probe p, const char *needle, struct buf *out)
{
    struct chat_msg m[3] = {{CHAT_USER, PROBE_NEEDLE, sizeof PROBE_NEEDLE - 1},
                            {CHAT_ASSISTANT, "", 0},
                            {CHAT_TOOL, "r", 1}};
    struct chat_ext ext = {probe_fill, &p};
    char err[128];
    buf_reset(out);
    int rc = render_jinja(ct, m, p.answer ? 3 : 2, 0, PROBE_NOW, &ext, out, err, sizeof err);
    if (rc == ERR_NOMEM)
        return rc;
    return rc == 0 && out->data && memmem(out->data, out->len, needle, strlen(needle)) != NULL;
}

/* CHAT_CAP_NON_NULL_CONTENT: the turn renders with content "" but not with
 * None (without a call, llama.cpp's probe, or with one: Ministral 3 fails
 * only there). CHAT_CAP_CALL_ID9: a call answered by a tool renders with a
 * 9-character id and not with a longer one (Mistral Nemo, Small 3.2).
 * CHAT_CAP_CALL_ARGS: a call renders with "[ARGS]" (Mistral's
 * [TOOL_CALLS]name[ARGS]{...} frame: Small 3.2, Devstral, Ministral 3).
 * And a Hermes-looking template whose rendered call has no <tool_call> tag
 * is taken as generic. */
static int probe_caps(struct chat_tmpl *ct)
{
    struct buf out;
    buf_init(&out, 1u << 20);
    int r[6];
    const struct probe p[6] = {
        {0, 0, PROBE_ID9, 0}, {1, 0, PROBE_ID9, 0}, {0, 1, PROBE_ID9, 0}, {1, 1, PROBE_ID9, 0},
        {0, 1, PROBE_ID9, 1}, {0, 1, PROBE_ID_LONG, 1},
    };
    for (int i = 0; i < 6; i++)
        if ((r[i] = probe(ct, p[i], PROBE_NEEDLE, &out)) < 0) {
            buf_release(&out);
            return r[i];
        }
    if ((r[0] && !r[1]) || (r[2] && !r[3]))
        ct->caps |= CHAT_CAP_NON_NULL_CONTENT;
    if (r[4] && !r[5])
        ct->caps |= CHAT_CAP_CALL_ID9;
    int a = probe(ct, p[2], "[ARGS]", &out);
    /* a template that mentions <tool_call> but renders its calls otherwise
     * (Apriel 1.5: <tool_calls>[...]</tool_calls>) does not speak Hermes */
    int named = a < 0 ? a : probe(ct, p[2], "some_tool", &out);
    int tagged = named <= 0 ? named : probe(ct, p[2], "<tool_call>", &out);
    buf_release(&out);
    if (a < 0 || tagged < 0)
        return a < 0 ? a : tagged;
    if (a)
        ct->caps |= CHAT_CAP_CALL_ARGS;
    if (ct->tools == CHAT_TOOLS_HERMES && named && !tagged)
        ct->tools = CHAT_TOOLS_GENERIC;
    return 0;
}
