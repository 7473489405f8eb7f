/*
 * tools.h - tool calling in a /v1/chat/completions body: the request
 * fields (the rule jobd's upload validation and the worker share), the
 * grammar that enforces a call in the model's own format, and the parser
 * that reads calls back out of the generated text.
 *
 * Request fields (gp_tools_parse; absent or null = default):
 *   tools                at most GP_MAX_TOOLS {"type":"function","function":
 *                        {"name","description","parameters","strict"}}; name
 *                        1..64 of [A-Za-z0-9_-], unique; parameters a JSON
 *                        Schema object (default: any object); strict a
 *                        boolean. Other tool types (custom, built-ins) are
 *                        "unsupported_value". Under strict the parameters
 *                        must compile to a grammar (common/gram), else
 *                        "invalid_function_parameters".
 *   functions            legacy: [{"name","description","parameters"}], mapped
 *                        onto tools (not both); the answer then carries
 *                        message.function_call and finish_reason
 *                        "function_call", as OpenAI's legacy API.
 *   tool_choice          "none" | "auto" (default with tools) | "required" |
 *                        {"type":"function","function":{"name"}} (a declared
 *                        name) | {"type":"allowed_tools","allowed_tools":
 *                        {"mode":"auto"|"required","tools":[{"type":"function",
 *                        "function":{"name"}}...]}}. Anything but "none"
 *                        without tools is "invalid_value".
 *   function_call        legacy: "none" | "auto" | {"name"}.
 *   parallel_tool_calls  boolean, default true (OpenAI's default); false = at
 *                        most one call.
 *
 * Enforcement (gp_tools_arm, in the worker, which knows the template's
 * format): "required" and a named function constrain the whole answer to
 * calls (1..GP_MAX_CALLS, or exactly 1 without parallel calls; a small
 * model that repeats itself stops there) of the callable
 * functions, each call's arguments a sentence of that function's
 * parameters schema (any JSON object when a non-strict schema does not
 * compile). "auto" leaves the answer free and arms the same grammar lazily
 * at the format's start tag (Hermes "<tool_call>", Mistral "[TOOL_CALLS]"),
 * so a call that starts always completes and parses; the Llama 3 JSON
 * format has no tag: its grammar is armed by an answer that begins with
 * {"name". Mistral's markers are control tokens: the grammar keeps them in
 * the text (gen_params.keep_special). The generic format (a
 * template without tool syntax) describes the tools in a system message
 * and constrains the answer to a JSON envelope: {"tool_call": {"name",
 * "arguments"}} ({"tool_calls": [...]} with parallel calls) or, in "auto",
 * {"response": "<text>"}. With a thinking template the grammar waits for
 * the end of the thinking block. "none" sends no tools to the template.
 *
 * Parsing (tool_calls_parse): per format; a text that does not parse as
 * calls of declared functions is returned whole as content, never a half
 * call. Hermes also takes a whole answer that is one bare call object, in
 * a ```json block or not (small Qwen models drop the tags in "auto"; such
 * a free-text call's arguments are parsed, not checked against the
 * schema). spec/tools.md has the formats and examples.
 *
 * Thread: any.
 */
#ifndef OPENAI_TOOLS_H
#define OPENAI_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "common/problem.h"
#include "text/chat.h"
#include "text/gen.h"

#define GP_MAX_TOOLS 128
#define GP_TOOL_NAME_MAX 64
#define GP_MAX_CALLS 8             /* calls one answer may make under a call grammar */

enum gp_tool_choice { GP_TOOL_NONE = 0, GP_TOOL_AUTO, GP_TOOL_REQUIRED };

struct gp_tools {
    json_t *tools;             /* owned: chat's nested form [{"type":"function",
                                * "function":{...}}], legacy functions converted;
                                * NULL when the request has none */
    size_t n;
    enum gp_tool_choice choice;
    unsigned char *callable;   /* (n) 1: may be called (allowed_tools, a named function) */
    int named;                 /* one function named by tool_choice / function_call */
    int parallel;              /* parallel_tool_calls */
    int legacy;                /* given as functions / function_call */
};

/* Parse and check the tool fields of a chat body. Returns 0 and *out
 * (release with gp_tools_release; out->tools NULL when none), ERR_INVAL
 * with err filled (message, param, code), ERR_NOMEM. */
int gp_tools_parse(const json_t *body, struct gp_tools *out, struct problem *err);
void gp_tools_release(struct gp_tools *t);

/* Set gen's grammar (replacing any) and lazy markers for tools t in format
 * fmt; think: the template thinks, so the grammar waits for "</think>".
 * No-op for GP_TOOL_NONE. Returns 0, ERR_NOMEM, or a compile error with err
 * filled (a strict schema was checked by gp_tools_parse already). */
int gp_tools_arm(const struct gp_tools *t, enum chat_tool_format fmt, int think,
                 struct gen_params *gen, struct problem *err);

/* The system text that describes t to a model whose template has no tool
 * syntax (the generic format), appended to buf out. */
int gp_tools_generic_prompt(const struct gp_tools *t, struct buf *out);

/* One call read back from generated text. */
struct tool_call {
    char *name;                /* a declared function */
    char *arguments;           /* compact JSON object text */
};

struct tool_calls {
    struct tool_call *v;
    size_t n;
    char *content;             /* the text beside the calls (NULL: none), owned */
    size_t content_len;
};

/* Read the calls out of text[0..len) in format fmt. Returns 0 with out->n
 * calls (0 when the text holds none or does not parse: out->content is then
 * the whole text; for the generic format, a {"response": s} envelope gives
 * s as content), ERR_NOMEM. Release with tool_calls_release. */
int tool_calls_parse(const char *text, size_t len, enum chat_tool_format fmt,
                     const struct gp_tools *t, struct tool_calls *out);
void tool_calls_release(struct tool_calls *c);

#endif
