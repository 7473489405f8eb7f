/*
 * chat.h - render a conversation (role, content messages) into prompt text
 * with the model's chat template (the OpenAI `messages` array is parsed by
 * worker/openai/chat_msgs.h).
 *
 * No Jinja engine: the GGUF's `tokenizer.chat_template` is classified by
 * marker substrings (like llama.cpp's llm_chat_detect_template) into one of
 * the built-in formats below, each written to produce byte-for-byte what HF
 * `apply_chat_template` (jinja2, trim_blocks + lstrip_blocks) produces with
 * that model family's published template, including its bos_token/eos_token
 * text. Verified against jinja2 renders in tests/fixtures/tok/chat.json.
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
 * MISTRAL* / GEMMA, or a system message for MISTRAL_LEGACY / GEMMA) we
 * return ERR_INVAL, except that GEMMA and MISTRAL_LEGACY fold a leading
 * system message into the first user turn ("{sys}\n\n{user}") as llama.cpp's
 * built-ins do, rather than refuse the request.
 *
 * Unknown template (or none): ChatML if the vocabulary has <|im_start|>,
 * else ERR_UNSUPPORTED. Llama-3.1+ templates (date header, tools) are
 * detected as LLAMA3 and rendered without the date header.
 *
 * Thread: any; a chat_tmpl is immutable after chat_tmpl_new.
 */
#ifndef WORKER_CHAT_H
#define WORKER_CHAT_H

#include <stddef.h>

#include "common/buf.h"
#include "worker/engine/tok.h"

enum chat_format {
    CHAT_CHATML = 1,
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_MISTRAL_LEGACY,
    CHAT_ZEPHYR,
    CHAT_GEMMA,
    CHAT_PHI3,
};

enum chat_role { CHAT_SYSTEM = 1, CHAT_USER, CHAT_ASSISTANT };

struct chat_msg {
    enum chat_role role;
    const char *content;   /* UTF-8, content_len bytes (may contain NUL) */
    size_t content_len;
};

#define CHAT_MAX_MESSAGES 4096
#define CHAT_MAX_PROMPT_BYTES TOK_MAX_INPUT_BYTES

struct chat_tmpl;

/* Classify template_src (tokenizer.chat_template; NULL = absent) for the
 * vocabulary t (gives bos/eos texts and the ChatML fallback). Returns 0 and
 * *out (free with chat_tmpl_free), ERR_UNSUPPORTED (unknown template and no
 * <|im_start|> token), ERR_NOMEM. */
int chat_tmpl_new(const char *template_src, const struct tok *t, struct chat_tmpl **out);
void chat_tmpl_free(struct chat_tmpl *ct);
enum chat_format chat_tmpl_format(const struct chat_tmpl *ct);
/* "chatml", "llama2", ... Can't fail. */
const char *chat_format_name(enum chat_format f);

/* Append the prompt for msgs[0..n) to out. add_generation_prompt as HF:
 * append the assistant-turn opener (formats without one ignore it, PHI3
 * appends eos instead when it is 0). Returns 0, ERR_INVAL (see file
 * comment), or buf_append's errors (ERR_TOOBIG when out's cap is hit). */
int chat_render(const struct chat_tmpl *ct, const struct chat_msg *msgs, size_t n,
                int add_generation_prompt, struct buf *out);

/* Tokenize a rendered prompt: special tokens parsed, BOS added per the
 * vocabulary's add_bos unless the text already starts with the BOS text (the
 * templates of Llama-2/3, Mistral, Gemma write it themselves). Same returns
 * as tok_encode. */
int chat_encode(const struct tok *t, const char *text, size_t len, int32_t *ids, size_t cap,
                size_t *n_out);

#endif
