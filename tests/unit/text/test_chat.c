/*
 * test_chat.c - worker/chat renders against jinja2 renders of the real
 * templates (tests/fixtures/tok/chat.json, made by tests/oracle/tok_fixtures.py).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "text/chat.h"
#include "openai/chat_msgs.h"

static struct tok *mini_vocab(const char *bos, const char *eos, int with_im_start)
{
    const char *toks[] = {"a", bos, eos, "<|im_start|>"};
    int32_t types[] = {TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_tokens = with_im_start && strcmp(bos, "<|im_start|>") != 0 ? 4 : 3;
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 1;
    d.eos_id = 2;
    struct tok *t = NULL;
    return tok_new(&d, &t) == 0 ? t : NULL;
}

static const char *expected_format(const char *name)
{
    if (!strcmp(name, "smollm2")) return "chatml";
    if (!strcmp(name, "mistral_legacy")) return "mistral-legacy";
    return name;
}

/* The built-in formats (the fallback for templates we cannot parse). */
TEST(chat_builtin_renders_match_jinja2)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/tok/chat.json", 0, &e);
    CHECK(fx);
    json_t *templates = json_object_get(fx, "templates"), *specials = json_object_get(fx, "specials");
    json_t *convs = json_object_get(fx, "conversations"), *cases = json_object_get(fx, "cases");
    size_t checked = 0, folded = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *sp = json_object_get(specials, name);
        struct tok *t = mini_vocab(json_string_value(json_array_get(sp, 0)),
                                   json_string_value(json_array_get(sp, 1)), 0);
        CHECK(t);
        struct chat_tmpl *ct = NULL;
        CHECK_EQ_INT(chat_tmpl_new_builtin(json_string_value(json_object_get(templates, name)), t, &ct), 0);
        CHECK_EQ_STR(chat_format_name(chat_tmpl_format(ct)), expected_format(name));
        struct chat_msgs m;
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(json_object_get(c, "conv")));
        CHECK_EQ_INT(chat_msgs_parse(conv, &m), 0);
        struct buf out;
        buf_init(&out, 1 << 20);
        int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        int rc = chat_render(ct, m.v, m.n, gen, &out);
        json_t *exp = json_object_get(c, "expected");
        if (json_is_string(exp)) {
            if (rc != 0 || strcmp(out.data ? out.data : "", json_string_value(exp)) != 0)
                th_fail(__FILE__, __LINE__, name, "case %zu (rc %d)\n  ours:   \"%s\"\n  jinja2: \"%s\"", i,
                        rc, out.data ? out.data : "", json_string_value(exp));
            checked++;
        } else if (m.v[0].role == CHAT_SYSTEM &&
                   (!strcmp(name, "gemma") || !strcmp(name, "mistral_legacy"))) {
            CHECK_EQ_INT(rc, 0); /* we fold the system message where HF raises */
            folded++;
        } else {
            CHECK_EQ_INT(rc, ERR_INVAL);
        }
        buf_release(&out);
        chat_msgs_release(&m);
        chat_tmpl_free(ct);
        tok_free(t);
    }
    CHECK(checked >= 80);
    CHECK(folded > 0);
    json_decref(fx);
}

/* The same templates through the interpreter: identical bytes, and an error
 * carrying the template's own message where HF raises (the built-ins fold a
 * Gemma / Mistral-v0.1 system message instead). */
TEST(chat_interpreter_renders_match_jinja2)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/tok/chat.json", 0, &e);
    CHECK(fx);
    json_t *templates = json_object_get(fx, "templates"), *specials = json_object_get(fx, "specials");
    json_t *convs = json_object_get(fx, "conversations"), *cases = json_object_get(fx, "cases");
    size_t checked = 0, raised = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *sp = json_object_get(specials, name);
        struct tok *t = mini_vocab(json_string_value(json_array_get(sp, 0)),
                                   json_string_value(json_array_get(sp, 1)), 0);
        CHECK(t);
        struct chat_tmpl *ct = NULL;
        CHECK_EQ_INT(chat_tmpl_new(json_string_value(json_object_get(templates, name)), t, &ct), 0);
        CHECK_EQ_STR(chat_format_name(chat_tmpl_format(ct)), "jinja");
        struct chat_msgs m;
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(json_object_get(c, "conv")));
        CHECK_EQ_INT(chat_msgs_parse(conv, &m), 0);
        struct buf out;
        buf_init(&out, 1 << 20);
        char why[256];
        int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        int rc = chat_render_err(ct, m.v, m.n, gen, 0, &out, why, sizeof why);
        json_t *exp = json_object_get(c, "expected");
        if (json_is_string(exp)) {
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_STR(out.data ? out.data : "", json_string_value(exp));
            checked++;
        } else {
            CHECK_EQ_INT(rc, ERR_INVAL);
            CHECK_EQ_STR(why, json_string_value(json_object_get(c, "error")));
            raised++;
        }
        buf_release(&out);
        chat_msgs_release(&m);
        chat_tmpl_free(ct);
        tok_free(t);
    }
    CHECK(checked >= 80);
    CHECK(raised > 0);
    json_decref(fx);
}

TEST(chat_unknown_template_falls_back_or_fails)
{
    struct tok *t = mini_vocab("<s>", "</s>", 1);
    struct chat_tmpl *ct = NULL;
    CHECK_EQ_INT(chat_tmpl_new("{{ weird }}", t, &ct), 0); /* valid Jinja: rendered as written */
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_JINJA);
    chat_tmpl_free(ct);
    CHECK_EQ_INT(chat_tmpl_new("{% weird %}", t, &ct), 0); /* does not parse: ChatML by vocabulary */
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_CHATML);
    chat_tmpl_free(ct);
    CHECK_EQ_INT(chat_tmpl_new("{% if %}[INST]<<SYS>>", t, &ct), 0); /* does not parse: markers */
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_LLAMA2);
    CHECK_EQ_STR(chat_tmpl_why(ct), "line 1: unexpected end of tag");
    chat_tmpl_free(ct);
    CHECK_EQ_INT(chat_tmpl_new(NULL, t, &ct), 0);
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_CHATML);
    chat_tmpl_free(ct);
    tok_free(t);
    t = mini_vocab("<s>", "</s>", 0);
    CHECK_EQ_INT(chat_tmpl_new("{% weird %}", t, &ct), ERR_UNSUPPORTED);
    CHECK_EQ_INT(chat_tmpl_new(NULL, t, &ct), ERR_UNSUPPORTED);
    tok_free(t);
    /* no template: the vocabulary's specials pick the family */
    static const struct { const char *a, *b; enum chat_format f; } fam[] = {
        {"<|start_header_id|>", "<|eot_id|>", CHAT_LLAMA3},
        {"<start_of_turn>", "<end_of_turn>", CHAT_GEMMA},
        {"<|assistant|>", "<|end|>", CHAT_PHI3},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        const char *toks[] = {"a", "<s>", "</s>", fam[i].a, fam[i].b};
        int32_t types[] = {TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                           TOK_TYPE_CONTROL};
        struct tok_vocab_desc d;
        tok_vocab_desc_init(&d);
        d.model = "gpt2";
        d.pre = "gpt-2";
        d.n_tokens = 5;
        d.tokens = toks;
        d.token_types = types;
        d.bos_id = 1;
        d.eos_id = 2;
        CHECK_EQ_INT(tok_new(&d, &t), 0);
        CHECK_EQ_INT(chat_tmpl_new(NULL, t, &ct), 0);
        CHECK_EQ_INT(chat_tmpl_format(ct), fam[i].f);
        chat_tmpl_free(ct);
        tok_free(t);
    }
}

TEST(chat_msgs_parse_shapes)
{
    json_error_t e;
    json_t *j = json_loads("[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                           "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null}]",
                           0, &e);
    struct chat_msgs m;
    CHECK_EQ_INT(chat_msgs_parse(j, &m), 0);
    CHECK_EQ_INT(m.n, 2);
    CHECK_EQ_INT(m.v[0].role, CHAT_SYSTEM);
    CHECK_EQ_STR(m.v[0].content, "a\nb");
    CHECK_EQ_INT(m.v[1].content_len, 0);
    chat_msgs_release(&m);
    json_decref(j);
    const char *bad[] = {"[]", "{}", "[{\"role\":\"tool\",\"content\":\"x\"}]", "[{\"role\":\"user\"}]",
                         "[{\"role\":\"user\",\"content\":5}]",
                         "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", "[1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = json_loads(bad[i], 0, &e);
        CHECK(j);
        CHECK_EQ_INT(chat_msgs_parse(j, &m), ERR_INVAL);
        json_decref(j);
    }
}

/* The rendered prompt tokenizes with specials parsed and without a second
 * BOS when the template wrote it. */
TEST(chat_encode_no_double_bos)
{
    const char *toks[] = {"<s>", "</s>", "<|im_start|>", "a"};
    int32_t types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_NORMAL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "llama-bpe"; /* add_bos defaults to 1 */
    d.n_tokens = 4;
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 0;
    d.eos_id = 1;
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&d, &t), 0);
    int32_t ids[8];
    size_t n = 0;
    CHECK_EQ_INT(chat_encode(t, "<s>a</s>", 8, ids, 8, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 0);
    CHECK_EQ_INT(ids[2], 1);
    CHECK_EQ_INT(chat_encode(t, "<|im_start|>a", 13, ids, 8, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 0);
    CHECK_EQ_INT(ids[1], 2);
    tok_free(t);
}
