/*
 * test_prompt.c - chat prompts through prompt_build with a GGUF
 * template rendered by the interpreter: the prompt, BOS once, and a
 * template's raise_exception as the request's own 400 with its message.
 */
#include <jansson.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "text/chat.h"
#include "openai/prompt.h"

static struct tok *vocab(void)
{
    const char *toks[] = {"<s>", "</s>", "<|u|>", "h", "i", "!", "S", "\n"};
    int32_t types[] = {TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_NORMAL,
                       TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "llama-bpe"; /* add_bos */
    d.n_tokens = sizeof toks / sizeof toks[0];
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 0;
    d.eos_id = 1;
    struct tok *t = NULL;
    return tok_new(&d, &t) == 0 ? t : NULL;
}

static int build(const struct prompt_model *m, const char *body_json, struct gen_prompt **pr, size_t *n,
                 struct problem *err)
{
    json_error_t je;
    json_t *body = json_loads(body_json, 0, &je);
    struct gp_request gp;
    int rc = gp_parse(body, GP_CHAT, tok_n_vocab(m->t), &gp, err);
    if (rc == 0) {
        rc = prompt_build(m, GP_CHAT, body, &gp, pr, n, err);
        gp_release(&gp);
    }
    json_decref(body);
    return rc;
}

TEST(request_chat_template_renders_and_raises)
{
    struct tok *t = vocab();
    CHECK(t);
    const char *src = "{{ bos_token }}{% if messages[0].role == 'system' %}"
                      "{{ raise_exception('System role not supported') }}{% endif %}"
                      "{% for m in messages %}<|u|>{{ m.content | trim }}{% endfor %}";
    struct chat_tmpl *ct = NULL;
    CHECK_EQ_INT(chat_tmpl_new(src, t, &ct), 0);
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_JINJA);
    struct prompt_model m = {t, ct, 64};
    struct gen_prompt *pr = NULL;
    size_t n = 0;
    struct problem err;
    memset(&err, 0, sizeof err);
    CHECK_EQ_INT(build(&m, "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\" hi! \"}]}", &pr,
                       &n, &err), 0);
    CHECK_EQ_INT(n, 1);
    /* <s> <|u|> h i ! : the template wrote BOS, none added */
    CHECK_EQ_INT(pr[0].n, 5);
    CHECK_EQ_INT(pr[0].ids[0], 0);
    CHECK_EQ_INT(pr[0].ids[1], 2);
    CHECK_EQ_INT(pr[0].ids[1 + 1], 3);
    gen_prompts_free(pr, n);
    memset(&err, 0, sizeof err);
    CHECK_EQ_INT(build(&m, "{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                           "{\"role\":\"user\",\"content\":\"hi\"}]}", &pr, &n, &err), ERR_INVAL);
    CHECK_EQ_STR(err.param, "messages");
    CHECK_EQ_STR(err.code, "invalid_value");
    CHECK(strstr(err.message, "System role not supported") != NULL);
    chat_tmpl_free(ct);
    tok_free(t);
}
