/* libFuzzer target: the Jinja interpreter (text/jinja_*.c) on
 * outside input: a chat template as a GGUF carries it.
 *
 * Input: TEMPLATE ['\0' CONTENT]. The template is parsed and, when it
 * parses, rendered twice for each of a few conversations (CONTENT, when
 * given, is the last user message) with add_generation_prompt on and off.
 * Checks: parse and render return only documented errors; a render is
 * deterministic; an error leaves the output buffer as it was; the output
 * never exceeds its cap.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int render(const struct jinja_tmpl *t, int conv, int gen, const char *content, size_t clen,
                  struct buf *out, char *err)
{
    struct jinja_env *e = jinja_env_new(1768469400);
    if (!e)
        return ERR_NOMEM;
    static const char *roles[] = {"system", "user", "assistant", "user"};
    static const char *texts[] = {"Be brief.", " Hi\n", "<think>x</think>\n\nHello", "again"};
    struct jv msgs = jinja_list(e);
    for (int i = conv; i < 4; i++) {
        struct jv m = jinja_dict(e);
        jinja_dict_set(e, m, "role", jinja_str(e, roles[i], strlen(roles[i])));
        if (i == 3 && content)
            jinja_dict_set(e, m, "content", jinja_str(e, content, clen));
        else
            jinja_dict_set(e, m, "content", jinja_str(e, texts[i], strlen(texts[i])));
        jinja_list_push(e, msgs, m);
    }
    jinja_global(e, "messages", msgs);
    jinja_global(e, "add_generation_prompt", jinja_bool(gen));
    jinja_global(e, "bos_token", jinja_str(e, "<s>", 3));
    jinja_global(e, "eos_token", jinja_str(e, "</s>", 4));
    jinja_global(e, "tools", jinja_none());
    int rc = jinja_render(t, e, out, err, JINJA_ERR_MAX);
    jinja_env_free(e);
    if (rc && rc != ERR_INVAL && rc != ERR_TOOBIG && rc != ERR_NOMEM)
        abort();
    if (out->len > out->max_bytes)
        abort();
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t tl = nul ? (size_t)(nul - data) : size;
    const char *content = nul ? (const char *)nul + 1 : NULL;
    size_t clen = nul ? size - tl - 1 : 0;
    struct jinja_tmpl *t = NULL;
    char err[JINJA_ERR_MAX];
    int rc = jinja_parse((const char *)data, tl, &t, err, sizeof err);
    if (rc) {
        if (rc != ERR_PARSE && rc != ERR_TOOBIG && rc != ERR_DEPTH && rc != ERR_NOMEM)
            abort();
        if (strlen(err) >= sizeof err)
            abort();
        return 0;
    }
    for (int conv = 0; conv < 4; conv += 3)
        for (int gen = 0; gen < 2; gen++) {
            struct buf a, b;
            buf_init(&a, 1 << 16);
            buf_init(&b, 1 << 16);
            buf_append(&a, "x", 1);
            buf_append(&b, "x", 1);
            int ra = render(t, conv, gen, content, clen, &a, err);
            int rb = render(t, conv, gen, content, clen, &b, err);
            if (ra != rb || a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
                abort();
            if (ra && a.len != 1)
                abort(); /* an error leaves the buffer as it was */
            buf_release(&a);
            buf_release(&b);
        }
    jinja_tmpl_free(t);
    return 0;
}
