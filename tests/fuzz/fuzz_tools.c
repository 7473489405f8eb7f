/* libFuzzer target: tool calling (openai/tools.c) from outside input: a
 * request's `tools` / `tool_choice` (any JSON) and a model's generated text
 * (the model is outside input too: any bytes may come back).
 *
 * Input: BODY_JSON '\0' FORMAT TEXT. BODY_JSON is a chat body's tool
 * fields; when it does not parse or is refused, two fixed tools are used.
 * FORMAT (one byte, mod CHAT_TOOL_FORMATS) is the template's tool format.
 * Checks: gp_tools_parse returns only documented errors; tool_calls_parse
 * never fails but for ERR_NOMEM, every call names a callable declared
 * function with arguments that are a JSON object, content is a copy of at
 * most the input; and the differential check: a text the "required" call
 * grammar accepts always parses as at least one call, whose arguments the
 * validator (gram_json_valid) finds valid against a schema that compiles. When BODY_JSON is a
 * chat body that gp_parse and chat_msgs_from_body accept, its prompt is also
 * rendered (openai/prompt.c: tools, tool turns, kwargs into the template)
 * with a Hermes-style template, a template without tool syntax (the
 * generic rewrite) and a Mistral Small 3.2-style one (null content as "",
 * 9-character call ids, [ARGS] calls): only documented errors.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "openai/chat_msgs.h"
#include "openai/params.h"
#include "openai/prompt.h"
#include "openai/tools.h"
#include "text/chat.h"
#include "text/gen.h"
#include "text/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *fixed =
    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8}},"
    "\"required\":[\"city\"],\"additionalProperties\":false}}},{\"type\":\"function\",\"function\":"
    "{\"name\":\"f\"}}],\"tool_choice\":\"required\"}";

static const char *hermes_tmpl =
    "{%- if tools %}<|im_start|>system\n# Tools\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}"
    "<|im_end|>\n{%- endif %}{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}"
    "<|im_start|>assistant{%- for c in m.tool_calls %}\n<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "<|im_end|>\n{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- if m.reasoning_content %}{{ m.reasoning_content }}{% endif %}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is defined "
    "and not enable_thinking %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}";
static const char *plain_tmpl =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";
/* Mistral Small 3.2's constraints: null content fails (|length of none),
 * call ids must be 9 characters, calls as [TOOL_CALLS]name[ARGS]{...} */
static const char *mistral_tmpl =
    "{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
    "{%- for m in messages %}{%- if m.tool_calls %}{%- for c in m.tool_calls %}"
    "{%- if c.id is not string or c.id|length != 9 %}{{ raise_exception('Tool call IDs should be "
    "alphanumeric strings with length 9!') }}{%- endif %}[TOOL_CALLS]{{ c.function.name }}[CALL_ID]"
    "{{ c.id }}[ARGS]{{ c.function.arguments | tojson }}{%- endfor %}</s>{%- elif m.role == 'tool' %}"
    "[TOOL_RESULTS]{{ m.tool_call_id }}[TOOL_CONTENT]{{ m.content }}[/TOOL_RESULTS]{%- else %}"
    "[INST]{{ m.content|length }}{{ m.content }}[/INST]{%- endif %}{%- endfor %}";
static struct tok *vocab;
static struct chat_tmpl *tmpls[3];

static void setup(void)
{
    const char *toks[] = {"a", "<|im_start|>", "<|im_end|>"};
    int32_t types[] = {TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_tokens = 3;
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 1;
    d.eos_id = 2;
    if (tok_new(&d, &vocab) != 0 || chat_tmpl_new(hermes_tmpl, vocab, &tmpls[0]) != 0 ||
        chat_tmpl_new(plain_tmpl, vocab, &tmpls[1]) != 0 ||
        chat_tmpl_new(mistral_tmpl, vocab, &tmpls[2]) != 0 ||
        chat_tmpl_tool_format(tmpls[0]) != CHAT_TOOLS_HERMES ||
        chat_tmpl_tool_format(tmpls[1]) != CHAT_TOOLS_GENERIC ||
        chat_tmpl_tool_format(tmpls[2]) != CHAT_TOOLS_MISTRAL_ARGS ||
        chat_tmpl_caps(tmpls[2]) != (CHAT_CAP_NON_NULL_CONTENT | CHAT_CAP_CALL_ID9 | CHAT_CAP_CALL_ARGS))
        abort();
}

/* Render body's prompt with both templates when the contract accepts it. */
static void render(const json_t *body)
{
    struct gp_request gp;
    struct problem pe;
    struct chat_msgs cm;
    if (gp_parse(body, GP_CHAT, 0, &gp, &pe) != 0)
        return;
    if (chat_msgs_from_body(body, &cm, &pe) == 0) {
        for (int k = 0; k < 3; k++) {
            struct buf out;
            buf_init(&out, 1 << 20);
            char why[256];
            int rc = prompt_chat_render(tmpls[k], &cm, &gp, 1, &out, why, sizeof why);
            if (rc != 0 && rc != ERR_INVAL && rc != ERR_TOOBIG && rc != ERR_NOMEM)
                abort();
            buf_release(&out);
        }
        chat_msgs_release(&cm);
    }
    gp_release(&gp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab)
        setup();
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul || (size_t)(nul - data) + 1 >= size)
        return 0;
    size_t blen = (size_t)(nul - data);
    enum chat_tool_format fmt = (enum chat_tool_format)(nul[1] % CHAT_TOOL_FORMATS);
    const char *text = (const char *)nul + 2;
    size_t tlen = size - blen - 2;

    struct gp_tools t;
    struct problem pe;
    json_t *body = json_loadb((const char *)data, blen, 0, NULL);
    if (json_is_object(body))
        render(body);
    int rc = body ? gp_tools_parse(body, &t, &pe) : ERR_INVAL;
    json_decref(body);
    if (rc != 0 && rc != ERR_INVAL && rc != ERR_NOMEM)
        abort();
    if (rc != 0 || !t.n) {
        if (rc == 0)
            gp_tools_release(&t);
        body = json_loads(fixed, 0, NULL);
        if (!body || gp_tools_parse(body, &t, &pe) != 0)
            abort();
        json_decref(body);
    }
    struct tool_calls c;
    if ((rc = tool_calls_parse(text, tlen, fmt, &t, &c)) != 0) {
        if (rc != ERR_NOMEM)
            abort();
        gp_tools_release(&t);
        return 0;
    }
    if (c.content_len > tlen || (c.content && strlen(c.content) > c.content_len))
        abort();
    for (size_t i = 0; i < c.n; i++) {
        int found = 0;
        for (size_t k = 0; k < t.n; k++) {
            const char *nm = json_string_value(json_object_get(
                json_object_get(json_array_get(t.tools, k), "function"), "name"));
            if (t.callable[k] && strcmp(nm, c.v[i].name) == 0)
                found = 1;
        }
        json_t *a = json_loads(c.v[i].arguments, 0, NULL);
        if (!found || !json_is_object(a))
            abort();
        json_decref(a);
    }
    tool_calls_release(&c);

    /* what the enforced grammar accepts, the parser reads as calls */
    enum gp_tool_choice was = t.choice;
    t.choice = GP_TOOL_REQUIRED;
    struct gen_params g;
    memset(&g, 0, sizeof g);
    if (gp_tools_arm(&t, fmt, 0, &g, &pe) == 0 && g.grammar && gram_match(g.grammar, text, tlen)) {
        if (tool_calls_parse(text, tlen, fmt, &t, &c) == 0) {
            if (c.n == 0)
                abort();
            /* and the validator agrees: the grammar's language is inside the schema's */
            for (size_t i = 0; i < c.n; i++)
                for (size_t k = 0; k < t.n; k++) {
                    const json_t *fn = json_object_get(json_array_get(t.tools, k), "function");
                    const json_t *params = json_object_get(fn, "parameters");
                    if (!params || strcmp(json_string_value(json_object_get(fn, "name")), c.v[i].name))
                        continue;
                    char *ps = json_dumps(params, JSON_COMPACT);
                    struct gram *pg = NULL;
                    if (ps && gram_compile_json_schema(ps, strlen(ps), &pg, &pe) == 0 &&
                        gram_json_valid(ps, strlen(ps), c.v[i].arguments, strlen(c.v[i].arguments)) == 0)
                        abort();
                    gram_unref(pg);
                    free(ps);
                }
            tool_calls_release(&c);
        }
    }
    t.choice = was;
    gen_params_release(&g);
    gp_tools_release(&t);
    return 0;
}
