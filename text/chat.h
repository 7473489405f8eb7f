/*
 * chat.h - render a conversation (role, content messages) into prompt text
 * with the model's chat template (the OpenAI `messages` array is parsed by
 * openai/chat_msgs.h).
 *
 * The GGUF's own `tokenizer.chat_template` is rendered by the Jinja2-subset
 * interpreter (text/jinja.h) exactly as Hugging Face's
 * apply_chat_template renders it with jinja2 (trim_blocks, lstrip_blocks,
 * HF's tojson, raise_exception, strftime_now). The variables are those HF
 * passes: messages (a list of {role, content}), add_generation_prompt,
 * bos_token and eos_token (the vocabulary's BOS/EOS texts, "" when it has
 * none), tools = None and documents = None. Verified byte-for-byte against
 * jinja2 renders of real templates in tests/fixtures/chat/ (made by
 * tests/oracle/chat_template_fixtures.py).
 *
 * Fallback: the built-in formats below, for a GGUF whose template is absent
 * or does not parse with our subset. A template that does not parse is
 * classified by marker substrings (like llama.cpp's llm_chat_detect_template);
 * a GGUF without a template by the special tokens of its vocabulary. Each
 * format produces byte-for-byte what HF produces with that family's
 * published template (tests/fixtures/tok/chat.json):
 *
 *   CHATML         <|im_start|>{role}\n{c}<|im_end|>\n ... gen: <|im_start|>assistant\n
 *                  A default system prompt written literally in the template
 *                  ("<|im_start|>system\n...<|im_end|>", e.g. SmolLM2, Qwen2.5)
 *                  is inserted when the conversation has no system message.
 *   LLAMA2         Llama-2-chat: {bos}[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{u} [/INST] {a} {eos}...
 *                  (contents .strip()ed); no generation suffix.
 *   LLAMA3         Llama-3(.0)-Instruct: {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{trim c}<|eot_id|>
 *                  gen: <|start_header_id|>assistant<|end_header_id|>\n\n
 *   MISTRAL        Mistral-7B-Instruct-v0.2 (HF, with system): {bos} [INST] {sys}\n\n{u} [/INST] {a}{eos}
 *   MISTRAL_LEGACY Mistral-7B-Instruct-v0.1: {bos}[INST] {u} [/INST]{a}{eos}
 *   ZEPHYR         <|{role}|>\n{c}{eos}\n ... gen: <|assistant|>\n
 *   GEMMA          {bos}<start_of_turn>{user|model}\n{trim c}<end_of_turn>\n gen: <start_of_turn>model\n
 *   PHI3           Phi-3-mini: <|{role}|>\n{c}<|end|>\n ... gen <|assistant|>\n, else {eos}
 *
 * Where the HF template would raise (roles not alternating for LLAMA2 /
 * MISTRAL* / GEMMA, or a system message for MISTRAL_LEGACY / GEMMA) the
 * built-ins return ERR_INVAL, except that GEMMA and MISTRAL_LEGACY fold a
 * leading system message into the first user turn ("{sys}\n\n{user}") as
 * llama.cpp's built-ins do, rather than refuse the request. (A template
 * rendered by the interpreter raises exactly where HF raises.)
 *
 * Thread: any; a chat_tmpl is immutable after chat_tmpl_new.
 */
#ifndef TEXT_CHAT_H
#define TEXT_CHAT_H

#include <stddef.h>
#include <time.h>

#include "common/buf.h"
#include "text/jinja.h"
#include "text/tok.h"

enum chat_format {
    CHAT_CHATML = 1,
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_MISTRAL_LEGACY,
    CHAT_ZEPHYR,
    CHAT_GEMMA,
    CHAT_PHI3,
    CHAT_JINJA,    /* the GGUF's own template, rendered by the interpreter */
};

enum chat_role { CHAT_SYSTEM = 1, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

/* How a template's model writes tool calls (chat_tmpl_tool_format), chosen
 * from the template text, never from a model name:
 *   HERMES   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
 *            (Qwen2.5/Qwen3, Hermes 2 Pro): the template mentions <tool_call>.
 *   LLAMA3   {"name": ..., "parameters": {...}}, optionally after
 *            <|python_tag|>: a Llama 3.x header template that takes tools.
 *   MISTRAL  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *            (Mistral Nemo): the template mentions [TOOL_CALLS].
 *   MISTRAL_ARGS  [TOOL_CALLS]name[ARGS]{...} per call, optionally
 *            [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} (Small 3.2, Devstral,
 *            Ministral 3): a MISTRAL template whose calls render with
 *            [ARGS] (CHAT_CAP_CALL_ARGS).
 *   GENERIC  no tool syntax in the template (Gemma, Phi-3, SmolLM2, the
 *            built-in formats): the caller describes the tools in a system
 *            message and the model answers with a JSON envelope. */
enum chat_tool_format { CHAT_TOOLS_GENERIC = 0, CHAT_TOOLS_HERMES, CHAT_TOOLS_LLAMA3,
                        CHAT_TOOLS_MISTRAL, CHAT_TOOLS_MISTRAL_ARGS };
#define CHAT_TOOL_FORMATS 5

struct chat_msg {
    enum chat_role role;
    const char *content;   /* UTF-8, content_len bytes (may contain NUL) */
    size_t content_len;
};

#define CHAT_MAX_MESSAGES 4096
#define CHAT_MAX_PROMPT_BYTES TOK_MAX_INPUT_BYTES

struct chat_tmpl;

/* Prepare template_src (tokenizer.chat_template; NULL = absent) for the
 * vocabulary t (gives bos/eos texts): CHAT_JINJA when it parses, else a
 * built-in format (see the file comment). Returns 0 and *out (free with
 * chat_tmpl_free), ERR_UNSUPPORTED (no template that parses, no known
 * markers, and a vocabulary without <|im_start|>), ERR_NOMEM. */
int chat_tmpl_new(const char *template_src, const struct tok *t, struct chat_tmpl **out);
/* The fallback alone: a built-in format chosen as if template_src did not
 * parse (lets tests check the built-ins). Same returns as chat_tmpl_new. */
int chat_tmpl_new_builtin(const char *template_src, const struct tok *t, struct chat_tmpl **out);
void chat_tmpl_free(struct chat_tmpl *ct);
enum chat_format chat_tmpl_format(const struct chat_tmpl *ct);
/* For a built-in format chosen because the template did not parse: the
 * parse error ("line N: why"); otherwise "". Can't fail. */
const char *chat_tmpl_why(const struct chat_tmpl *ct);
/* The template's tool-call format (see enum chat_tool_format); GENERIC for
 * every built-in format. Can't fail. */
enum chat_tool_format chat_tmpl_tool_format(const struct chat_tmpl *ct);
/* "hermes", "llama3", "mistral", "mistral-args", "generic". Can't fail. */
const char *chat_tool_format_name(enum chat_tool_format f);
/* 1 when the template opens a thinking block (its text has "<think>", as
 * Qwen3 and DeepSeek-R1 templates do); the model's answer then follows
 * "</think>". Can't fail. */
int chat_tmpl_thinks(const struct chat_tmpl *ct);

/* What a CHAT_JINJA template needs of its inputs, found once by
 * chat_tmpl_new rendering small probe conversations (as llama.cpp's
 * template capability detection does), never from a model name; 0 for the
 * built-in formats. Can't fail.
 *   CHAT_CAP_NON_NULL_CONTENT  an assistant turn with content None fails to
 *                              render where "" renders (Qwen3, QwQ, Bielik,
 *                              Devstral, Ministral 3): give "" for null.
 *   CHAT_CAP_CALL_ID9          a call answered by a tool message renders
 *                              only with a 9-character id (Mistral Nemo,
 *                              Small 3.2: "Tool call IDs should be
 *                              alphanumeric strings with length 9!").
 *   CHAT_CAP_CALL_ARGS         calls render as [TOOL_CALLS]name[ARGS]{json}
 *                              (Small 3.2, Devstral, Ministral 3), not as
 *                              the [TOOL_CALLS][{...}] array (Nemo). */
#define CHAT_CAP_NON_NULL_CONTENT 1u
#define CHAT_CAP_CALL_ID9 2u
#define CHAT_CAP_CALL_ARGS 4u
unsigned chat_tmpl_caps(const struct chat_tmpl *ct);

/* "chatml", "llama2", ..., "jinja". Can't fail. */
const char *chat_format_name(enum chat_format f);

/* Append the prompt for msgs[0..n) to out. add_generation_prompt as HF:
 * append the assistant-turn opener (formats without one ignore it, PHI3
 * appends eos instead when it is 0). Returns 0, ERR_INVAL (the template
 * raised or failed, see the file comment), ERR_TOOBIG (out's cap is hit),
 * ERR_NOMEM. On error out is unchanged. */
int chat_render(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                int add_generation_prompt, struct buf *out);

/* chat_render that also says why on ERR_INVAL / ERR_TOOBIG: err (errcap
 * bytes) gets the template's raise_exception message verbatim, or "line N:
 * why" for another template error, or "" when a built-in format refused.
 * now: the instant strftime_now formats (UTC); 0 = the current time. */
int chat_render_err(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                    int add_generation_prompt, time_t now, struct buf *out, char *err,
                    size_t errcap);

/* Template inputs beyond role and content, for a CHAT_JINJA template (the
 * built-in formats ignore them): fill is called once per render after the
 * message dicts {role, content} and HF's globals are made; it may add keys
 * to msg_dicts[i] (tool_calls, tool_call_id, reasoning_content...) and
 * define or replace globals (tools, enable_thinking, other
 * chat_template_kwargs) with the jinja.h builders. It returns 0 or an
 * error code, which the render returns. */
struct chat_ext {
    int (*fill)(void *arg, struct jinja_env *e, const struct jv *msg_dicts, size_t n);
    void *arg;
};

/* chat_render_err with ext (NULL: none). */
int chat_render_ext(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                    int add_generation_prompt, time_t now, const struct chat_ext *ext,
                    struct buf *out, char *err, size_t errcap);

/* Tokenize a rendered prompt: special tokens parsed, BOS added per the
 * vocabulary's add_bos unless the text already starts with the BOS text (the
 * templates of Llama-2/3, Mistral, Gemma write it themselves). Same returns
 * as tok_encode. */
int chat_encode(const struct tok *t, const char *text, size_t len, int32_t *ids, size_t cap,
                size_t *n_out);

#endif
