/*
 * tool_parse.c - our tool-call parser alone (openai/tools.c), for
 * tests/bench/bench_tools.py to compare with llama.cpp's parse of the same
 * raw text. Input file: {"body": <chat body with tools>, "text": "...",
 * "format": "hermes" | "llama3" | "mistral" | "generic"}. Prints
 * {"content": ..., "tool_calls": [{"function": {"name", "arguments"}}]}.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai/tools.h"

int main(int argc, char **argv)
{
    json_error_t e;
    json_t *in = argc == 2 ? json_load_file(argv[1], 0, &e) : NULL;
    if (!in) {
        fprintf(stderr, "usage: tool_parse FILE.json\n");
        return 2;
    }
    struct gp_tools t;
    struct problem pe;
    if (gp_tools_parse(json_object_get(in, "body"), &t, &pe) != 0) {
        fprintf(stderr, "tools: %s\n", pe.message);
        return 1;
    }
    const char *f = json_string_value(json_object_get(in, "format"));
    enum chat_tool_format fmt = !f                          ? CHAT_TOOLS_HERMES
                                : strcmp(f, "llama3") == 0  ? CHAT_TOOLS_LLAMA3
                                : strcmp(f, "mistral") == 0 ? CHAT_TOOLS_MISTRAL
                                : strcmp(f, "mistral-args") == 0 ? CHAT_TOOLS_MISTRAL_ARGS
                                : strcmp(f, "generic") == 0 ? CHAT_TOOLS_GENERIC
                                                            : CHAT_TOOLS_HERMES;
    const json_t *text = json_object_get(in, "text");
    struct tool_calls c;
    if (tool_calls_parse(json_string_value(text), json_string_length(text), fmt, &t, &c) != 0)
        return 1;
    json_t *out = json_object(), *arr = json_array();
    json_object_set_new(out, "content", c.content ? json_stringn(c.content, c.content_len) : json_null());
    for (size_t i = 0; i < c.n; i++)
        json_array_append_new(arr, json_pack("{s:{s:s, s:s}}", "function", "name", c.v[i].name,
                                             "arguments", c.v[i].arguments));
    json_object_set_new(out, "tool_calls", arr);
    char *s = json_dumps(out, JSON_COMPACT);
    puts(s);
    free(s);
    json_decref(out);
    tool_calls_release(&c);
    gp_tools_release(&t);
    json_decref(in);
    return 0;
}
