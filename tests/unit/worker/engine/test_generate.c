/*
 * test_generate.c - the sequential driver end to end (worker/engine/generate
 * under worker/run/request + openai/response) over the
 * real SmolLM2 tokenizer (tests/fixtures/tok/smollm2_vocab.json, the GGUF's
 * tokenizer arrays) and a scripted "model": the callback returns a logits
 * row that puts 10 on the next token of a script, 9 on a fixed runner-up and
 * -inf elsewhere, so greedy decoding follows the script and every logprob is
 * known in closed form: -log(1 + e^-1) and -1 - log(1 + e^-1).
 *
 * Checks: text, stop strings, finish reasons, usage counting, logprobs
 * (token, bytes, top_logprobs, text_offset), response shapes field by field,
 * and one byte-exact golden chat.completion body.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "common/id.h"
#include "tests/th.h"
#include "text/chat.h"
#include "worker/engine/generate.h"
#include "text/tok.h"
#include "worker/run/request.h"

/* ---- the real vocabulary (same loader as test_tok.c) ------------------------- */

struct gvocab {
    json_t *root;
    struct tok_vocab_desc d;
    const char **tokens, **merges;
    size_t *lens, *mlens;
    int32_t *types;
};

static int64_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static struct tok *load_smollm(struct gvocab *f)
{
    json_error_t e;
    memset(f, 0, sizeof *f);
    f->root = json_load_file("tests/fixtures/tok/smollm2_vocab.json", JSON_ALLOW_NUL, &e);
    if (!f->root)
        th_fail(__FILE__, __LINE__, "vocab", "cannot load: %s", e.text);
    json_t *toks = json_object_get(f->root, "tokens"), *types = json_object_get(f->root, "types");
    json_t *merges = json_object_get(f->root, "merges");
    size_t n = json_array_size(toks), nm = json_array_size(merges);
    f->tokens = calloc(n, sizeof *f->tokens);
    f->lens = calloc(n, sizeof *f->lens);
    f->types = calloc(n, sizeof *f->types);
    f->merges = calloc(nm, sizeof *f->merges);
    f->mlens = calloc(nm, sizeof *f->mlens);
    for (size_t i = 0; i < n; i++) {
        f->tokens[i] = json_string_value(json_array_get(toks, i));
        f->lens[i] = json_string_length(json_array_get(toks, i));
        f->types[i] = (int32_t)json_integer_value(json_array_get(types, i));
    }
    for (size_t i = 0; i < nm; i++) {
        f->merges[i] = json_string_value(json_array_get(merges, i));
        f->mlens[i] = json_string_length(json_array_get(merges, i));
    }
    tok_vocab_desc_init(&f->d);
    f->d.model = json_string_value(json_object_get(f->root, "model"));
    f->d.pre = json_string_value(json_object_get(f->root, "pre"));
    f->d.n_tokens = n;
    f->d.tokens = f->tokens;
    f->d.token_lens = f->lens;
    f->d.token_types = f->types;
    f->d.n_merges = nm;
    f->d.merges = f->merges;
    f->d.merge_lens = f->mlens;
    f->d.bos_id = jint(f->root, "bos");
    f->d.eos_id = jint(f->root, "eos");
    f->d.unk_id = jint(f->root, "unk");
    f->d.pad_id = jint(f->root, "pad");
    f->d.eot_id = jint(f->root, "eot");
    f->d.eom_id = jint(f->root, "eom");
    f->d.add_bos = (int)jint(f->root, "add_bos");
    f->d.add_eos = (int)jint(f->root, "add_eos");
    f->d.add_space_prefix = (int)jint(f->root, "add_space_prefix");
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&f->d, &t), 0);
    return t;
}

static void gvocab_release(struct gvocab *f, struct tok *t)
{
    tok_free(t);
    free(f->tokens);
    free(f->lens);
    free(f->types);
    free(f->merges);
    free(f->mlens);
    json_decref(f->root);
}

static int32_t id_of(const struct tok *t, const char *text)
{
    int32_t id = tok_find(t, text, strlen(text));
    if (id < 0)
        th_fail(__FILE__, __LINE__, text, "token not in vocabulary");
    return id;
}

/* ---- the scripted model ---------------------------------------------------- */

#define RUNNER_UP 81   /* "a": the fixed second choice */

struct script {
    const int32_t *ids;      /* tokens to produce, in order */
    size_t n;
    size_t n_prompt;         /* expected prompt length (0: don't check) */
    float *row;
    size_t n_vocab;
    int flat;                /* 1: all zeros except EOG gets -2 (random sampling) */
    size_t calls;
};

static int scripted(void *ctx, uint64_t choice, const int32_t *tokens, size_t n_tokens,
                    const float **logits)
{
    struct script *s = ctx;
    (void)choice;
    s->calls++;
    for (size_t i = 0; i < s->n_vocab; i++)
        s->row[i] = s->flat ? 0.0f : -INFINITY;
    if (s->flat) {
        s->row[2] = -2.0f;
        *logits = s->row;
        return 0;
    }
    if (s->n_prompt) {
        if (n_tokens < s->n_prompt)
            return ERR_INTERNAL;
        size_t step = n_tokens - s->n_prompt;
        /* the driver hands back exactly the script so far */
        for (size_t i = 0; i < step; i++)
            if (tokens[s->n_prompt + i] != s->ids[i])
                return ERR_INTERNAL;
        if (step < s->n)
            s->row[s->ids[step]] = 10.0f;
    } else {
        /* prompt length unknown: the step is the longest script prefix that
         * ends the sequence */
        size_t step = 0;
        for (size_t k = s->n < n_tokens ? s->n : n_tokens; k > 0 && !step; k--) {
            int ok = 1;
            for (size_t i = 0; i < k && ok; i++)
                ok = tokens[n_tokens - k + i] == s->ids[i];
            if (ok)
                step = k;
        }
        if (step < s->n)
            s->row[s->ids[step]] = 10.0f;
    }
    if (s->row[RUNNER_UP] < 9.0f)
        s->row[RUNNER_UP] = 9.0f;
    *logits = s->row;
    return 0;
}

/* Only two finite logits (10 and 9): the sum of exp(l - max) is exactly
 * 1 + e^-1 whatever the summation order, so these are bit-exact. */
static double lp_top(size_t V) { (void)V; return -log(1.0 + exp(-1.0)); }
static double lp_second(size_t V) { (void)V; return -1.0 - log(1.0 + exp(-1.0)); }

struct env {
    struct gvocab v;
    struct tok *t;
    struct chat_tmpl *ct;
    struct script sc;
    struct oreq_model m;
};

static void env_init(struct env *e, size_t n_ctx)
{
    memset(e, 0, sizeof *e);
    e->t = load_smollm(&e->v);
    CHECK_EQ_INT(chat_tmpl_new(NULL, e->t, &e->ct), 0);  /* ChatML (has <|im_start|>) */
    e->sc.n_vocab = tok_n_vocab(e->t);
    e->sc.row = calloc(e->sc.n_vocab, sizeof *e->sc.row);
    e->m.t = e->t;
    e->m.tmpl = e->ct;
    e->m.n_ctx = n_ctx;
    e->m.model_name = "smollm2-135m";
    e->m.system_fingerprint = "fp_test";
    e->m.next_logits = scripted;
    e->m.ctx = &e->sc;
}

static void env_release(struct env *e)
{
    free(e->sc.row);
    chat_tmpl_free(e->ct);
    gvocab_release(&e->v, e->t);
}

static json_t *J(const char *s)
{
    json_error_t er;
    json_t *j = json_loads(s, 0, &er);
    if (!j)
        th_fail(__FILE__, __LINE__, s, "bad JSON: %s", er.text);
    return j;
}

static json_t *run_ok(struct env *e, enum gp_endpoint ep, const char *body,
                      const struct oreq_opts *o)
{
    json_t *b = J(body), *resp = NULL;
    struct problem err;
    memset(&err, 0, sizeof err);
    int rc = oreq_run(&e->m, ep, b, o, &resp, &err);
    json_decref(b);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, body, "oreq_run: %d (%s: %s)", rc, err.param, err.message);
    return resp;
}

static const char *sget(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v))
        th_fail(__FILE__, __LINE__, k, "not a string");
    return json_string_value(v);
}

static json_int_t iget(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        th_fail(__FILE__, __LINE__, k, "not an integer");
    return json_integer_value(v);
}

/* The chat prompt the ChatML template must produce, tokenized on its own. */
static size_t chatml_prompt_len(const struct tok *t, const char *user)
{
    char text[256];
    snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
    int32_t ids[256];
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, text, strlen(text), TOK_PARSE_SPECIAL, ids, 256, &n), 0);
    return n;
}

/* ---- tests ----------------------------------------------------------------- */

TEST(gen_chat_golden_body)
{
    struct env e;
    env_init(&e, 2048);
    int32_t script[4] = {id_of(e.t, "Hello"), id_of(e.t, "\xc4\xa0there"), id_of(e.t, "!"), 2};
    e.sc.ids = script;
    e.sc.n = 4;
    e.sc.n_prompt = chatml_prompt_len(e.t, "Hi");
    struct oreq_opts o = {"chatcmpl-test123", 1700000000, NULL, NULL};
    json_t *resp = run_ok(&e, GP_CHAT,
                          "{\"model\":\"smollm2-135m\",\"messages\":[{\"role\":\"user\",\"content\":"
                          "\"Hi\"}],\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2}",
                          &o);
    size_t V = e.sc.n_vocab;
    char a[32], b[32];
    snprintf(a, sizeof a, "%.17g", lp_top(V));
    snprintf(b, sizeof b, "%.17g", lp_second(V));
    char golden[4096];
    snprintf(golden, sizeof golden,
             "{\"id\":\"chatcmpl-test123\",\"object\":\"chat.completion\",\"created\":1700000000,"
             "\"model\":\"smollm2-135m\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
             "\"assistant\",\"content\":\"Hello there!\",\"refusal\":null},\"logprobs\":{"
             "\"content\":["
             "{\"token\":\"Hello\",\"logprob\":%s,\"bytes\":[72,101,108,108,111],\"top_logprobs\":"
             "[{\"token\":\"Hello\",\"logprob\":%s,\"bytes\":[72,101,108,108,111]},"
             "{\"token\":\"a\",\"logprob\":%s,\"bytes\":[97]}]},"
             "{\"token\":\" there\",\"logprob\":%s,\"bytes\":[32,116,104,101,114,101],"
             "\"top_logprobs\":[{\"token\":\" there\",\"logprob\":%s,\"bytes\":[32,116,104,101,"
             "114,101]},{\"token\":\"a\",\"logprob\":%s,\"bytes\":[97]}]},"
             "{\"token\":\"!\",\"logprob\":%s,\"bytes\":[33],\"top_logprobs\":[{\"token\":\"!\","
             "\"logprob\":%s,\"bytes\":[33]},{\"token\":\"a\",\"logprob\":%s,\"bytes\":[97]}]}"
             "],\"refusal\":null},\"finish_reason\":\"stop\"}],"
             "\"usage\":{\"prompt_tokens\":%zu,\"completion_tokens\":4,\"total_tokens\":%zu},"
             "\"service_tier\":\"default\",\"system_fingerprint\":\"fp_test\"}",
             a, a, b, a, a, b, a, a, b, e.sc.n_prompt, e.sc.n_prompt + 4);
    json_t *g = J(golden);
    char *got = json_dumps(resp, JSON_COMPACT | JSON_REAL_PRECISION(17));
    char *want = json_dumps(g, JSON_COMPACT | JSON_REAL_PRECISION(17));
    CHECK_EQ_STR(got, want);   /* byte-exact, key order included */
    free(got);
    free(want);
    json_decref(g);
    json_decref(resp);
    env_release(&e);
}

TEST(gen_chat_fields_and_types)
{
    struct env e;
    env_init(&e, 2048);
    int32_t script[3] = {id_of(e.t, "Hello"), id_of(e.t, "!"), 0 /* <|endoftext|>: EOG */};
    e.sc.ids = script;
    e.sc.n = 3;
    e.m.system_fingerprint = NULL;
    json_t *r = run_ok(&e, GP_CHAT,
                       "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\","
                       "\"content\":\"Q\"}],\"temperature\":0}", NULL);
    CHECK_EQ_INT(json_object_size(r), 8);
    CHECK(id_valid("chatcmpl-", sget(r, "id")));
    CHECK_EQ_STR(sget(r, "service_tier"), "default");
    CHECK_EQ_STR(sget(r, "object"), "chat.completion");
    CHECK(iget(r, "created") > 1600000000);
    CHECK_EQ_STR(sget(r, "model"), "smollm2-135m");
    CHECK(json_is_null(json_object_get(r, "system_fingerprint")));
    json_t *ch = json_object_get(r, "choices");
    CHECK(json_is_array(ch) && json_array_size(ch) == 1);
    json_t *c0 = json_array_get(ch, 0);
    CHECK_EQ_INT(json_object_size(c0), 4);
    CHECK_EQ_INT(iget(c0, "index"), 0);
    CHECK(json_is_null(json_object_get(c0, "logprobs")));
    CHECK_EQ_STR(sget(c0, "finish_reason"), "stop");
    json_t *msg = json_object_get(c0, "message");
    CHECK_EQ_INT(json_object_size(msg), 3);
    CHECK_EQ_STR(sget(msg, "role"), "assistant");
    CHECK_EQ_STR(sget(msg, "content"), "Hello!");
    CHECK(json_is_null(json_object_get(msg, "refusal")));
    json_t *u = json_object_get(r, "usage");
    CHECK_EQ_INT(json_object_size(u), 3);
    CHECK_EQ_INT(iget(u, "completion_tokens"), 3);  /* EOG counted */
    CHECK_EQ_INT(iget(u, "total_tokens"), iget(u, "prompt_tokens") + 3);
    CHECK(iget(u, "prompt_tokens") > 8);
    json_decref(r);
    env_release(&e);
}

TEST(gen_completion_stop_string_and_logprobs)
{
    struct env e;
    env_init(&e, 2048);
    int32_t h = id_of(e.t, "#");
    int32_t script[6] = {id_of(e.t, "Hello"), id_of(e.t, "!"), h, h, h, id_of(e.t, "!")};
    e.sc.ids = script;
    e.sc.n = 6;
    e.sc.n_prompt = 1;   /* "x" is one token, add_bos 0 */
    json_t *r = run_ok(&e, GP_COMPLETIONS,
                       "{\"prompt\":\"x\",\"temperature\":0,\"stop\":[\"zz\",\"###\"],\"logprobs\":1,"
                       "\"max_tokens\":50}", NULL);
    CHECK(id_valid("cmpl-", sget(r, "id")));
    CHECK_EQ_STR(sget(r, "object"), "text_completion");
    json_t *c0 = json_array_get(json_object_get(r, "choices"), 0);
    CHECK_EQ_INT(json_object_size(c0), 5);
    CHECK_EQ_STR(sget(c0, "text"), "Hello!");
    CHECK_EQ_STR(sget(c0, "finish_reason"), "stop");
    CHECK_EQ_STR(sget(c0, "stop_reason"), "###"); /* which stop string ended it (vLLM's field) */
    CHECK_EQ_INT(iget(c0, "index"), 0);
    json_t *lp = json_object_get(c0, "logprobs");
    CHECK_EQ_INT(json_object_size(lp), 4);
    json_t *toks = json_object_get(lp, "tokens"), *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    /* "#" tokens start at the cut (offset 6): not part of the text */
    CHECK_EQ_INT(json_array_size(toks), 2);
    CHECK_EQ_STR(json_string_value(json_array_get(toks, 0)), "Hello");
    CHECK_EQ_STR(json_string_value(json_array_get(toks, 1)), "!");
    CHECK_NEAR(json_real_value(json_array_get(tlp, 1)), lp_top(e.sc.n_vocab), 1e-12);
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 0)), 0);
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 1)), 5);
    json_t *d1 = json_array_get(top, 1);
    CHECK(json_is_object(d1) && json_object_size(d1) == 1);
    CHECK_NEAR(json_real_value(json_object_get(d1, "!")), lp_top(e.sc.n_vocab), 1e-12);
    json_t *u = json_object_get(r, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 1);
    CHECK_EQ_INT(iget(u, "completion_tokens"), 5);  /* sampled up to the third "#" */
    CHECK_EQ_INT(e.sc.calls, 5);
    json_decref(r);
    env_release(&e);
}

TEST(gen_length_and_context_limits)
{
    struct env e;
    env_init(&e, 8);
    int32_t hello = id_of(e.t, "Hello");
    int32_t script[10];
    for (int i = 0; i < 10; i++)
        script[i] = hello;
    e.sc.ids = script;
    e.sc.n = 10;
    e.sc.n_prompt = 3;
    /* max_tokens */
    json_t *r = run_ok(&e, GP_COMPLETIONS, "{\"prompt\":[5,6,7],\"temperature\":0,\"max_tokens\":2}",
                       NULL);
    json_t *c0 = json_array_get(json_object_get(r, "choices"), 0);
    CHECK_EQ_STR(sget(c0, "text"), "HelloHello");
    CHECK_EQ_STR(sget(c0, "finish_reason"), "length");
    CHECK_EQ_INT(iget(json_object_get(r, "usage"), "completion_tokens"), 2);
    json_decref(r);
    /* context: 8 - 3 = 5 tokens at most */
    r = run_ok(&e, GP_COMPLETIONS, "{\"prompt\":[5,6,7],\"temperature\":0}", NULL);
    c0 = json_array_get(json_object_get(r, "choices"), 0);
    CHECK_EQ_STR(sget(c0, "finish_reason"), "length");
    CHECK_EQ_INT(iget(json_object_get(r, "usage"), "completion_tokens"), 5);
    json_decref(r);
    /* explicit max_tokens beyond the context, and a prompt filling it */
    const char *bad[] = {"{\"prompt\":[5,6,7],\"max_tokens\":6}",
                         "{\"prompt\":[1,2,3,4,5,6,7,8]}", "{\"prompt\":[1,2,3,4,5,6,7,8,9]}",
                         "{\"prompt\":\"a b c d e f g h i j k l\"}"};
    for (size_t i = 0; i < 4; i++) {
        json_t *b = J(bad[i]), *resp = NULL;
        struct problem err;
        CHECK_EQ_INT(oreq_run(&e.m, GP_COMPLETIONS, b, NULL, &resp, &err), ERR_INVAL);
        CHECK_EQ_STR(err.code, "context_length_exceeded");
        CHECK_EQ_STR(err.param, "prompt");
        CHECK(strstr(err.message, "maximum context length is 8 tokens") != NULL);
        CHECK(resp == NULL);
        json_decref(b);
    }
    /* parameter errors come back as request errors too */
    json_t *b = J("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}"), *resp = NULL;
    struct problem err;
    CHECK_EQ_INT(oreq_run(&e.m, GP_CHAT, b, NULL, &resp, &err), ERR_INVAL);
    CHECK_EQ_STR(err.param, "stream");
    json_decref(b);
    b = J("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}");
    CHECK_EQ_INT(oreq_run(&e.m, GP_CHAT, b, NULL, &resp, &err), ERR_INVAL);
    CHECK_EQ_STR(err.param, "messages");
    json_decref(b);
    env_release(&e);
}

TEST(gen_utf8_split_across_tokens)
{
    struct env e;
    env_init(&e, 2048);
    /* "é" = C3 A9 as two byte tokens ("Ã" = byte C3, "©" = byte A9 in the
     * GPT-2 byte map), then "#" "#" "#" against stop "é#" */
    int32_t script[5] = {id_of(e.t, "\xc3\x83"), id_of(e.t, "\xc2\xa9"), id_of(e.t, "!"),
                         id_of(e.t, "\xc3\x83"), 2};
    e.sc.ids = script;
    e.sc.n = 5;
    e.sc.n_prompt = 1;
    json_t *r = run_ok(&e, GP_COMPLETIONS,
                       "{\"prompt\":\"x\",\"temperature\":0,\"logprobs\":0}", NULL);
    json_t *c0 = json_array_get(json_object_get(r, "choices"), 0);
    /* the lone C3 before EOG becomes U+FFFD at the flush */
    CHECK_EQ_STR(sget(c0, "text"), "\xc3\xa9!\xef\xbf\xbd");
    json_t *lp = json_object_get(c0, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *off = json_object_get(lp, "text_offset");
    CHECK_EQ_INT(json_array_size(toks), 4);
    CHECK_EQ_STR(json_string_value(json_array_get(toks, 0)), "\xef\xbf\xbd");
    /* offsets in code points: 0, 0 (C3 held), 1 ("é" done), 2 */
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 0)), 0);
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 1)), 0);
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 2)), 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(off, 3)), 2);
    json_decref(r);

    /* chat: bytes arrays carry the raw bytes of partial characters */
    e.sc.n_prompt = chatml_prompt_len(e.t, "Hi");
    r = run_ok(&e, GP_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0,"
               "\"logprobs\":true,\"stop\":\"\xc3\xa9!\"}", NULL);
    c0 = json_array_get(json_object_get(r, "choices"), 0);
    CHECK_EQ_STR(sget(json_object_get(c0, "message"), "content"), "");
    CHECK_EQ_STR(sget(c0, "finish_reason"), "stop");
    /* stop at the very start: no token's text begins before the end */
    CHECK_EQ_INT(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "content")), 0);
    json_decref(r);
    r = run_ok(&e, GP_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0,"
               "\"logprobs\":true,\"stop\":\"!\"}", NULL);
    c0 = json_array_get(json_object_get(r, "choices"), 0);
    CHECK_EQ_STR(sget(json_object_get(c0, "message"), "content"), "\xc3\xa9");
    json_t *content = json_object_get(json_object_get(c0, "logprobs"), "content");
    CHECK_EQ_INT(json_array_size(content), 2);
    json_t *b0 = json_object_get(json_array_get(content, 0), "bytes");
    json_t *b1 = json_object_get(json_array_get(content, 1), "bytes");
    CHECK(json_array_size(b0) == 1 && json_integer_value(json_array_get(b0, 0)) == 0xC3);
    CHECK(json_array_size(b1) == 1 && json_integer_value(json_array_get(b1, 0)) == 0xA9);
    CHECK_EQ_INT(iget(json_object_get(r, "usage"), "completion_tokens"), 3);
    json_decref(r);
    env_release(&e);
}

TEST(gen_n_choices_seeded_and_multi_prompt)
{
    struct env e;
    env_init(&e, 64);
    e.sc.flat = 1;   /* near-uniform rows: random text, EOG slightly less likely */
    const char *body = "{\"prompt\":\"x\",\"n\":3,\"seed\":99,\"max_tokens\":12}";
    json_t *r1 = run_ok(&e, GP_COMPLETIONS, body, NULL);
    json_t *r2 = run_ok(&e, GP_COMPLETIONS, body, NULL);
    json_t *ch1 = json_object_get(r1, "choices"), *ch2 = json_object_get(r2, "choices");
    CHECK_EQ_INT(json_array_size(ch1), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *a = json_array_get(ch1, i), *b = json_array_get(ch2, i);
        CHECK_EQ_INT(iget(a, "index"), (json_int_t)i);
        CHECK_EQ_STR(sget(a, "text"), sget(b, "text"));   /* same seed: same text */
    }
    CHECK(strcmp(sget(json_array_get(ch1, 0), "text"), sget(json_array_get(ch1, 1), "text")) != 0);
    CHECK(strcmp(sget(json_array_get(ch1, 1), "text"), sget(json_array_get(ch1, 2), "text")) != 0);
    json_t *u = json_object_get(r1, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 1);  /* counted once for n choices */
    /* another seed: another text (12 near-uniform draws over 49k tokens) */
    json_t *r3 = run_ok(&e, GP_COMPLETIONS, "{\"prompt\":\"x\",\"n\":3,\"seed\":100,\"max_tokens\":12}", NULL);
    CHECK(strcmp(sget(json_array_get(json_object_get(r3, "choices"), 0), "text"),
                 sget(json_array_get(ch2, 0), "text")) != 0);
    json_decref(r3);
    json_decref(r1);
    json_decref(r2);

    /* two prompts x n=2: indices 0..3, prompt tokens summed */
    r1 = run_ok(&e, GP_COMPLETIONS,
                "{\"prompt\":[[5,6],[7]],\"n\":2,\"seed\":1,\"max_tokens\":3}", NULL);
    ch1 = json_object_get(r1, "choices");
    CHECK_EQ_INT(json_array_size(ch1), 4);
    for (size_t i = 0; i < 4; i++)
        CHECK_EQ_INT(iget(json_array_get(ch1, i), "index"), (json_int_t)i);
    u = json_object_get(r1, "usage");
    CHECK_EQ_INT(iget(u, "prompt_tokens"), 3);
    json_decref(r1);
    env_release(&e);
}

TEST(gen_seq_step_api)
{
    /* the per-step API as the batched scheduler uses it: two sequences of
     * different requests advanced alternately with one shared scratch give
     * the same text as each run alone */
    struct env e;
    env_init(&e, 256);
    json_t *b1 = J("{\"prompt\":\"x\",\"seed\":5,\"temperature\":1.2,\"top_p\":0.9,\"max_tokens\":20}");
    json_t *b2 = J("{\"prompt\":\"y\",\"seed\":6,\"top_k\":50,\"max_tokens\":15,\"stop\":\"e\"}");
    struct gp_request p1, p2;
    struct problem err;
    size_t V = tok_n_vocab(e.t);
    CHECK_EQ_INT(gp_parse(b1, GP_COMPLETIONS, V, &p1, &err), 0);
    CHECK_EQ_INT(gp_parse(b2, GP_COMPLETIONS, V, &p2, &err), 0);
    int32_t pr1[1] = {id_of(e.t, "x")}, pr2[1] = {id_of(e.t, "y")};
    float *row = calloc(V, sizeof *row);
    struct smp_scratch s;
    CHECK_EQ_INT(smp_scratch_init(&s, V), 0);
    char alone[2][512];
    for (int k = 0; k < 2; k++) {
        struct gen_seq q;
        CHECK_EQ_INT(gen_seq_init(&q, k ? &p2.gen : &p1.gen, e.t, k ? pr2 : pr1, 1, 256, 0), 0);
        int rc = 0;
        for (size_t step = 0; rc == 0; step++) {
            for (size_t i = 0; i < V; i++)
                row[i] = (float)((i * 2654435761u + step * 40503u + (unsigned)k) % 1000) / 250.0f;
            rc = gen_seq_step(&q, row, V, &s);
            CHECK(rc == 0 || rc == 1);
        }
        struct gen_choice c;
        CHECK_EQ_INT(gen_seq_choice(&q, &c), 0);
        snprintf(alone[k], sizeof alone[k], "%.*s|%s", (int)c.text_len, c.text,
                 stop_finish_name(c.finish));
        CHECK_EQ_INT(gen_seq_step(&q, row, V, &s), ERR_BADSTATE);
        gen_seq_release(&q);
    }
    struct gen_seq q[2];
    CHECK_EQ_INT(gen_seq_init(&q[0], &p1.gen, e.t, pr1, 1, 256, 0), 0);
    CHECK_EQ_INT(gen_seq_init(&q[1], &p2.gen, e.t, pr2, 1, 256, 0), 0);
    int done[2] = {0, 0};
    for (size_t step = 0; !done[0] || !done[1]; step++)
        for (int k = 1; k >= 0; k--) {
            if (done[k])
                continue;
            for (size_t i = 0; i < V; i++)
                row[i] = (float)((i * 2654435761u + step * 40503u + (unsigned)k) % 1000) / 250.0f;
            int rc = gen_seq_step(&q[k], row, V, &s);
            CHECK(rc == 0 || rc == 1);
            done[k] = rc;
        }
    for (int k = 0; k < 2; k++) {
        struct gen_choice c;
        char both[512];
        CHECK_EQ_INT(gen_seq_choice(&q[k], &c), 0);
        snprintf(both, sizeof both, "%.*s|%s", (int)c.text_len, c.text, stop_finish_name(c.finish));
        CHECK_EQ_STR(both, alone[k]);
        gen_seq_release(&q[k]);
    }
    free(row);
    smp_scratch_release(&s);
    gp_release(&p1);
    gp_release(&p2);
    json_decref(b1);
    json_decref(b2);
    env_release(&e);
}

/* ---- structured outputs: the grammar's mask inside the driver ---------------- */

/* Pseudo-random logits (a hash of the position and the token) with the
 * end-of-text token far ahead of everything: only the mask keeps the model
 * from stopping at once, and every other choice is arbitrary. */
struct noisy {
    float *row;
    size_t n_vocab;
    int32_t eos;
    uint64_t salt;
};

static int noisy_logits(void *ctx, uint64_t choice, const int32_t *tokens, size_t n_tokens,
                        const float **logits)
{
    struct noisy *nz = ctx;
    (void)choice;
    (void)tokens;
    for (size_t i = 0; i < nz->n_vocab; i++) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (n_tokens + nz->salt) * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        nz->row[i] = (float)((double)(h % 10000) / 1000.0 - 5.0);
    }
    nz->row[nz->eos] = 50.0f;
    *logits = nz->row;
    return 0;
}

static void constrained_run(double temperature, uint64_t seed, int64_t max_tokens, const char *schema,
                            int want_finish)
{
    struct gvocab v;
    struct tok *t = load_smollm(&v);
    struct noisy nz = {calloc(tok_n_vocab(t), sizeof(float)), tok_n_vocab(t), tok_eos(t), seed};
    CHECK(nz.eos >= 0);
    struct gen_params gp;
    memset(&gp, 0, sizeof gp);
    smp_params_init(&gp.smp);
    gp.smp.temperature = temperature;
    gp.max_tokens = max_tokens;
    gp.seed = seed;
    gp.seed_given = 1;
    gp.n = 2;
    struct problem ge;
    CHECK_EQ_INT(gram_compile_json_schema(schema, strlen(schema), &gp.grammar, &ge), 0);
    int32_t prompt[] = {id_of(t, "Hi")};
    struct gen_prompt pr = {prompt, 1};
    struct gen_model gm = {t, 512, noisy_logits, &nz};
    struct gen_seq seqs[2];
    CHECK_EQ_INT(gen_run(&gm, &gp, &pr, 1, NULL, NULL, seqs), 0);
    for (int k = 0; k < 2; k++) {
        struct gen_choice ch;
        CHECK_EQ_INT(gen_seq_choice(&seqs[k], &ch), 0);
        if ((int)ch.finish != want_finish)
            th_fail(__FILE__, __LINE__, "finish", "choice %d: finish %d, text '%.*s'", k, (int)ch.finish,
                    (int)ch.text_len, ch.text);
        if (want_finish == STOP_FINISH_STOP) {
            if (!gram_match(gp.grammar, ch.text, ch.text_len))
                th_fail(__FILE__, __LINE__, "match", "'%.*s'", (int)ch.text_len, ch.text);
            json_error_t je;
            json_t *j = json_loadb(ch.text, ch.text_len, 0, &je);
            CHECK(j != NULL);
            json_decref(j);
            /* finished by the grammar being complete: no EOG token sampled */
            CHECK(!tok_is_eog(t, seqs[k].gen[seqs[k].n_gen - 1]));
        } else {
            CHECK_EQ_INT(seqs[k].n_gen, max_tokens);
        }
        gen_seq_release(&seqs[k]);
    }
    gen_params_release(&gp);
    free(nz.row);
    gvocab_release(&v, t);
}

#define GEN_SCHEMA                                                                               \
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"      \
    "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":99},\"tags\":{\"type\":\"array\","   \
    "\"items\":{\"enum\":[\"red\",\"green\"]},\"maxItems\":3},\"when\":{\"type\":\"string\","    \
    "\"format\":\"date\"},\"ok\":{\"type\":[\"boolean\",\"null\"]}},\"required\":[\"name\",\"n\"," \
    "\"tags\",\"when\",\"ok\"],\"additionalProperties\":false}"

TEST(generate_constrained_greedy_stops_only_when_complete)
{
    constrained_run(0.0, 1, 200, GEN_SCHEMA, STOP_FINISH_STOP);
}

TEST(generate_constrained_seeded_sampling_honours_the_mask)
{
    constrained_run(1.0, 7, 200, GEN_SCHEMA, STOP_FINISH_STOP);
}

TEST(generate_constrained_cut_by_max_tokens_is_length)
{
    constrained_run(1.0, 3, 4, GEN_SCHEMA, STOP_FINISH_LENGTH);
}

/* ---- lazy grammars: armed by a marker in the output ---------------------------- */

/* Logits that spell a scripted text token by token, then end it. */
struct lscript {
    float *row;
    size_t n_vocab, n_prompt;
    int32_t ids[512];
    size_t n;
    int32_t eos;
};

static int lscript_logits(void *ctx, uint64_t choice, const int32_t *tokens, size_t n_tokens,
                         const float **logits)
{
    struct lscript *sc = ctx;
    (void)choice;
    (void)tokens;
    size_t pos = n_tokens - sc->n_prompt;
    for (size_t i = 0; i < sc->n_vocab; i++)
        sc->row[i] = (float)(i % 7) * 0.01f;
    sc->row[pos < sc->n ? sc->ids[pos] : sc->eos] = 40.0f;
    *logits = sc->row;
    return 0;
}

/* Run greedily over the scripted text with gp's grammar and markers;
 * return the choice's text in out (cap bytes) and its finish. */
static enum stop_finish lazy_run_enc(const struct tok *t, struct gen_params *gp, const char *text,
                                     int enc_flags, char *out, size_t cap, size_t *n_reason,
                                     size_t *n_gen)
{
    struct lscript sc = {calloc(tok_n_vocab(t), sizeof(float)), tok_n_vocab(t), 1, {0}, 0, tok_eos(t)};
    CHECK_EQ_INT(tok_encode(t, text, strlen(text), enc_flags, sc.ids, 512, &sc.n), 0);
    smp_params_init(&gp->smp);
    gp->smp.temperature = 0;
    gp->max_tokens = 300;
    gp->n = 1;
    gp->seed_given = 1;
    int32_t prompt[] = {id_of(t, "Hi")};
    struct gen_prompt pr = {prompt, 1};
    struct gen_model gm = {t, 1024, lscript_logits, &sc};
    struct gen_seq seq;
    CHECK_EQ_INT(gen_run(&gm, gp, &pr, 1, NULL, NULL, &seq), 0);
    struct gen_choice ch;
    CHECK_EQ_INT(gen_seq_choice(&seq, &ch), 0);
    snprintf(out, cap, "%.*s", (int)ch.text_len, ch.text);
    *n_reason = ch.n_reason;
    *n_gen = seq.n_gen;
    enum stop_finish f = ch.finish;
    gen_seq_release(&seq);
    free(sc.row);
    return f;
}

static enum stop_finish lazy_run(const struct tok *t, struct gen_params *gp, const char *text,
                                 char *out, size_t cap, size_t *n_reason, size_t *n_gen)
{
    return lazy_run_enc(t, gp, text, 0, out, cap, n_reason, n_gen);
}

/* A tool format's marker that the vocabulary makes a control token
 * (Mistral's [TOOL_CALLS]; here SmolLM2's <|im_start|>): kept in the text
 * when gen_params.keep_special names it, taken by a grammar whose frame
 * starts with its text, and a lazy trigger; dropped from the text
 * otherwise. A trigger at the start arms only an answer that begins with
 * it. */
TEST(generate_keeps_control_tokens_a_tool_format_names)
{
    struct gvocab v;
    struct tok *t = load_smollm(&v);
    struct problem pe;
    char out[2048];
    size_t nr, ng;
    int32_t id = tok_find(t, "<|im_start|>", 12);
    CHECK(id >= 0 && tok_token_type(t, id) == TOK_TYPE_CONTROL && !tok_is_eog(t, id));
    struct gram_frame fr = {"<|im_start|>", "", "", "{\"type\":\"object\",\"properties\":{\"a\":"
                            "{\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
                            0, 1, 1, 0, NULL};
    fr.schema_len = strlen(fr.schema);
    const char *text = "Sure. <|im_start|>{\"a\": 1} and more";
    struct gen_params gp;

    /* not kept: the control token gives no text */
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(lazy_run_enc(t, &gp, text, TOK_PARSE_SPECIAL, out, sizeof out, &nr, &ng),
                 STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "Sure. {\"a\": 1} and more");

    /* kept, and the lazy trigger: the grammar arms at the token, ends the call */
    snprintf(gp.keep_special[0], sizeof gp.keep_special[0], "<|im_start|>");
    CHECK_EQ_INT(gram_compile_framed(&fr, &gp.grammar, &pe), 0);
    snprintf(gp.gram_trigger, sizeof gp.gram_trigger, "<|im_start|>");
    CHECK_EQ_INT(lazy_run_enc(t, &gp, text, TOK_PARSE_SPECIAL, out, sizeof out, &nr, &ng),
                 STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "Sure. <|im_start|>{\"a\": 1}");

    /* the grammar from the first token: the kept token is in its mask */
    gp.gram_trigger[0] = '\0';
    CHECK_EQ_INT(lazy_run_enc(t, &gp, "<|im_start|>{\"a\": 22} tail", TOK_PARSE_SPECIAL, out,
                              sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "<|im_start|>{\"a\": 22}");
    CHECK_EQ_INT(ng, 8);   /* the marker is one token, not spelled out */
    gen_params_release(&gp);

    /* a trigger at the start: arms after leading whitespace, not later */
    struct gram_frame f2 = {"", "", "", fr.schema, fr.schema_len, 1, 1, 0, NULL};
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(gram_compile_framed(&f2, &gp.grammar, &pe), 0);
    snprintf(gp.gram_trigger, sizeof gp.gram_trigger, "{\"a\"");
    gp.gram_trigger_at_start = 1;
    CHECK_EQ_INT(lazy_run(t, &gp, "\n {\"a\": 5} tail", out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "\n {\"a\": 5}");
    CHECK_EQ_INT(lazy_run(t, &gp, "See {\"a\": 5} tail", out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "See {\"a\": 5} tail");
    gen_params_release(&gp);
    gvocab_release(&v, t);
}

TEST(generate_lazy_grammar_arms_at_its_trigger)
{
    struct gvocab v;
    struct tok *t = load_smollm(&v);
    struct problem pe;
    char out[2048];
    size_t nr, ng;
    const char *call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    struct gram_frame fr = {"<tool_call>\n", "\n</tool_call>", "\n",
                            "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"},"
                            "\"arguments\":{\"type\":\"object\"}},\"required\":[\"name\",\"arguments\"],"
                            "\"additionalProperties\":false}", 0, 1, 1, 0, NULL};
    fr.schema_len = strlen(fr.schema);

    /* free text, then a call: the grammar takes over at the tag and ends the
     * sequence as soon as the call is complete (no end-of-text token) */
    struct gen_params gp;
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(gram_compile_framed(&fr, &gp.grammar, &pe), 0);
    snprintf(gp.gram_trigger, sizeof gp.gram_trigger, "<tool_call>");
    char text[512];
    snprintf(text, sizeof text, "Sure, calling it. %s and then more text", call);
    CHECK_EQ_INT(lazy_run(t, &gp, text, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    char want[512];
    snprintf(want, sizeof want, "Sure, calling it. %s", call);
    CHECK_EQ_STR(out, want);
    CHECK_EQ_INT(nr, 0);

    /* no trigger at all: free text to the end-of-text token */
    CHECK_EQ_INT(lazy_run(t, &gp, "Plain answer.", out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "Plain answer.");
    gen_params_release(&gp);

    /* the token that completes the trigger goes on with bytes the grammar
     * refuses (" callback": "call" then "back", where "call(" is needed):
     * the grammar is dropped and the text stays free */
    struct gram_frame fr2 = {"call(", ")", ",", "{\"type\":\"object\"}", 0, 1, 1, 0, NULL};
    fr2.schema_len = strlen(fr2.schema);
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(gram_compile_framed(&fr2, &gp.grammar, &pe), 0);
    snprintf(gp.gram_trigger, sizeof gp.gram_trigger, "call");
    int32_t one[4];
    size_t n_one = 0;
    CHECK_EQ_INT(tok_encode(t, " callback", 9, 0, one, 4, &n_one), 0);
    CHECK_EQ_INT(n_one, 1);   /* one token holds the trigger and what follows */
    CHECK_EQ_INT(lazy_run(t, &gp, "A callback.", out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "A callback.");
    CHECK_EQ_INT(lazy_run(t, &gp, "Now call({\"x\": 2}) done", out, sizeof out, &nr, &ng),
                 STOP_FINISH_STOP);
    CHECK_EQ_STR(out, "Now call({\"x\": 2})");
    gen_params_release(&gp);

    /* a grammar waiting for the thinking block's end: the thinking text is
     * free (not JSON), the answer constrained; reasoning tokens counted up
     * to the marker */
    memset(&gp, 0, sizeof gp);
    CHECK_EQ_INT(gram_compile_json_object(&gp.grammar, &pe), 0);
    snprintf(gp.gram_after, sizeof gp.gram_after, "</think>\n\n");
    snprintf(gp.think_end, sizeof gp.think_end, "</think>");
    const char *think = "<think>\nNot {json here.\n</think>";
    snprintf(text, sizeof text, "%s\n\n{\"a\": 1} trailing", think);
    CHECK_EQ_INT(lazy_run(t, &gp, text, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    snprintf(want, sizeof want, "%s\n\n{\"a\": 1}", think);
    CHECK_EQ_STR(out, want);
    int32_t ids[256];
    size_t n_think = 0;
    CHECK_EQ_INT(tok_encode(t, think, strlen(think), 0, ids, 256, &n_think), 0);
    CHECK_EQ_INT(nr, n_think);
    CHECK(ng > nr);
    gen_params_release(&gp);
    gvocab_release(&v, t);
}

/* ---- the thinking budget: the close forced after think_budget tokens ------------ */

/* Run greedily over a scripted token sequence (ids[0..n), then the end of
 * text) with gp; out gets the text. */
static enum stop_finish script_run(const struct tok *t, struct gen_params *gp, const int32_t *ids, size_t n,
                                   char *out, size_t cap, size_t *n_reason, size_t *n_gen)
{
    struct lscript sc = {calloc(tok_n_vocab(t), sizeof(float)), tok_n_vocab(t), 1, {0}, n, tok_eos(t)};
    memcpy(sc.ids, ids, n * sizeof *ids);
    smp_params_init(&gp->smp);
    gp->smp.temperature = 0;
    gp->max_tokens = 300;
    gp->n = 1;
    gp->seed_given = 1;
    int32_t prompt[] = {id_of(t, "Hi")};
    struct gen_prompt pr = {prompt, 1};
    struct gen_model gm = {t, 1024, lscript_logits, &sc};
    struct gen_seq seq;
    CHECK_EQ_INT(gen_run(&gm, gp, &pr, 1, NULL, NULL, &seq), 0);
    struct gen_choice ch;
    CHECK_EQ_INT(gen_seq_choice(&seq, &ch), 0);
    snprintf(out, cap, "%.*s", (int)ch.text_len, ch.text);
    *n_reason = ch.n_reason;
    *n_gen = seq.n_gen;
    enum stop_finish f = ch.finish;
    gen_seq_release(&seq);
    free(sc.row);
    return f;
}

/* The budget's gen_params on tokenizer t: think_end, think_budget and the
 * close tokenized as the worker does (openai/prompt.c prompt_arm). */
static void budget_params(const struct tok *t, struct gen_params *gp, int64_t budget)
{
    memset(gp, 0, sizeof *gp);
    snprintf(gp->think_end, sizeof gp->think_end, "</think>");
    gp->think_budget = budget;
    CHECK_EQ_INT(tok_encode(t, GEN_THINK_CLOSE, strlen(GEN_THINK_CLOSE), TOK_PARSE_SPECIAL, gp->think_close,
                            GEN_CLOSE_MAX, &gp->n_think_close), 0);
    CHECK(gp->n_think_close > 0);
}

TEST(generate_thinking_budget_forces_the_close_then_the_answer_follows)
{
    struct gvocab v;
    struct tok *t = load_smollm(&v);
    char out[2048], want[2048];
    size_t nr, ng, n_think = 0, n_ans = 0;
    /* a model that thinks on and on: budget tokens of thinking, filler where
     * the close would go, then an answer; it never writes </think> itself */
    const char *think = "<think>\nLet me think about this at some length before I answer it", *ans = "{\"a\": 1}";
    int32_t script[512], ans_ids[64];
    CHECK_EQ_INT(tok_encode(t, think, strlen(think), 0, script, 256, &n_think), 0);
    CHECK_EQ_INT(tok_encode(t, ans, strlen(ans), 0, ans_ids, 64, &n_ans), 0);
    const size_t budget = 6;
    CHECK(n_think > budget + 4);
    struct gen_params gp;
    budget_params(t, &gp, (int64_t)budget);
    size_t n_close = gp.n_think_close;
    size_t n = budget;
    for (size_t i = 0; i < n_close; i++)
        script[n++] = id_of(t, "x");
    memcpy(script + n, ans_ids, n_ans * sizeof *ans_ids);
    n += n_ans;

    /* without the budget: all of it is one open thinking block */
    struct gen_params free_gp;
    memset(&free_gp, 0, sizeof free_gp);
    snprintf(free_gp.think_end, sizeof free_gp.think_end, "</think>");
    CHECK_EQ_INT(script_run(t, &free_gp, script, n, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK(strstr(out, "</think>") == NULL);
    CHECK_EQ_INT(nr, ng);

    /* with it: the first budget tokens, the close forced in place of the
     * filler, then the answer the model goes on with */
    CHECK_EQ_INT(script_run(t, &gp, script, n, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    struct buf head;
    buf_init(&head, 4096);
    CHECK_EQ_INT(tok_decode(t, script, budget, 0, &head), 0);
    snprintf(want, sizeof want, "%.*s" GEN_THINK_CLOSE "%s", (int)head.len, head.data, ans);
    buf_release(&head);
    CHECK_EQ_STR(out, want);
    int32_t close_ids[GEN_CLOSE_MAX];
    size_t n_upto = 0; /* the close's tokens up to the one completing </think> */
    CHECK_EQ_INT(tok_encode(t, "\n</think>", 9, TOK_PARSE_SPECIAL, close_ids, GEN_CLOSE_MAX, &n_upto), 0);
    CHECK(n_upto < n_close);
    CHECK_EQ_INT(nr, budget + n_upto); /* reasoning tokens: the budget and the close up to </think> */
    CHECK_EQ_INT(ng, n + 1);            /* and the end of text */

    /* a structured answer waits for the forced close like a natural one */
    CHECK_EQ_INT(gram_compile_json_object(&gp.grammar, &(struct problem){0}), 0);
    snprintf(gp.gram_after, sizeof gp.gram_after, "</think>\n\n");
    CHECK_EQ_INT(script_run(t, &gp, script, n, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, want);
    gen_params_release(&gp);

    /* a model that closes within the budget is left alone */
    budget_params(t, &gp, 200);
    const char *natural = "<think>\nShort.\n</think>\n\nDone.";
    CHECK_EQ_INT(tok_encode(t, natural, strlen(natural), 0, script, 256, &n), 0);
    CHECK_EQ_INT(script_run(t, &gp, script, n, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK_EQ_STR(out, natural);

    /* budget 0: the close comes first */
    budget_params(t, &gp, 0);
    CHECK_EQ_INT(script_run(t, &gp, ans_ids, n_ans, out, sizeof out, &nr, &ng), STOP_FINISH_STOP);
    CHECK(strncmp(out, GEN_THINK_CLOSE, strlen(GEN_THINK_CLOSE)) == 0);
    CHECK_EQ_INT(nr, n_upto);

    /* max_tokens inside the close cuts it like any other text */
    budget_params(t, &gp, 2);
    gp.max_tokens = 3;
    struct lscript sc = {calloc(tok_n_vocab(t), sizeof(float)), tok_n_vocab(t), 1, {0}, n_think, tok_eos(t)};
    CHECK_EQ_INT(tok_encode(t, think, strlen(think), 0, sc.ids, 256, &sc.n), 0);
    smp_params_init(&gp.smp);
    gp.smp.temperature = 0;
    gp.n = 1;
    int32_t prompt[] = {id_of(t, "Hi")};
    struct gen_seq seq;
    CHECK_EQ_INT(gen_seq_init(&seq, &gp, t, prompt, 1, 1024, 0), 0);
    struct smp_scratch scr;
    CHECK_EQ_INT(smp_scratch_init(&scr, tok_n_vocab(t)), 0);
    int32_t all[8] = {prompt[0]};
    int rc = 0;
    for (size_t k = 1; rc == 0; k++) {
        const float *row;
        lscript_logits(&sc, 0, all, k, &row);
        rc = gen_seq_step(&seq, row, tok_n_vocab(t), &scr);
        all[k] = seq.gen[seq.n_gen - 1];
    }
    CHECK_EQ_INT(rc, 1);
    CHECK_EQ_INT(seq.finish, STOP_FINISH_LENGTH);
    CHECK_EQ_INT(seq.gen[2], gp.think_close[0]);
    gen_seq_release(&seq);

    /* a token sampled elsewhere must be the forced one */
    CHECK_EQ_INT(gen_seq_init(&seq, &gp, t, prompt, 1, 1024, 0), 0);
    struct smp_result r = {0};
    for (size_t k = 0; k < 2; k++) {
        r.token = sc.ids[k];
        CHECK_EQ_INT(gen_seq_accept(&seq, &r), 0);
    }
    r.token = sc.ids[2];
    CHECK_EQ_INT(gen_seq_accept(&seq, &r), ERR_INVAL);
    r.token = gp.think_close[0];
    CHECK_EQ_INT(gen_seq_accept(&seq, &r), 1); /* taken, and the third of max_tokens 3 */
    gen_seq_release(&seq);
    smp_scratch_release(&scr);
    free(sc.row);
    gen_params_release(&gp);
    gvocab_release(&v, t);
}
