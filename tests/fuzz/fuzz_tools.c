/* libFuzzer target: tool calling (openai/tools.c) from outside input: a
 * request's `tools` / `tool_choice` (any JSON) and a model's generated text
 * (the model is outside input too: any bytes may come back).
 *
 * Input: BODY_JSON '\0' FORMAT TEXT. BODY_JSON is a chat body's tool
 * fields; when it does not parse or is refused, two fixed tools are used.
 * FORMAT (one byte, mod 4) is the template's tool format.
 * Checks: gp_tools_parse returns only documented errors; tool_calls_parse
 * never fails but for ERR_NOMEM, every call names a callable declared
 * function with arguments that are a JSON object, content is a copy of at
 * most the input; and the differential check: a text the "required" call
 * grammar accepts always parses as at least one call.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "openai/tools.h"
#include "text/gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *fixed =
    "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8}},"
    "\"required\":[\"city\"],\"additionalProperties\":false}}},{\"type\":\"function\",\"function\":"
    "{\"name\":\"f\"}}],\"tool_choice\":\"required\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul || (size_t)(nul - data) + 1 >= size)
        return 0;
    size_t blen = (size_t)(nul - data);
    enum chat_tool_format fmt = (enum chat_tool_format)(nul[1] % 4);
    const char *text = (const char *)nul + 2;
    size_t tlen = size - blen - 2;

    struct gp_tools t;
    struct problem pe;
    json_t *body = json_loadb((const char *)data, blen, 0, NULL);
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
            tool_calls_release(&c);
        }
    }
    t.choice = was;
    gen_params_release(&g);
    gp_tools_release(&t);
    return 0;
}
