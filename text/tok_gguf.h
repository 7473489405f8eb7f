/*
 * tok_gguf.h - build the tokenizer and chat template a GGUF file describes.
 *
 * Reads the `tokenizer.ggml.*` keys (the GGUF spec's tokenizer
 * section, ggml docs/gguf.md) into a struct
 * tok_vocab_desc - model, pre, tokens, scores, token_type, merges, special
 * ids, add_bos/add_eos/add_space_prefix - and calls tok_new; and hands
 * `tokenizer.chat_template` to chat_tmpl_new. Keys of the wrong type are
 * errors, not silently ignored (a file llama.cpp would reject is refused
 * too); absent optional keys take the tokenizer's defaults.
 *
 * Runs on the caller's thread; the gguf is only read.
 */
#ifndef TEXT_TOK_GGUF_H
#define TEXT_TOK_GGUF_H

#include <stddef.h>

#include "text/chat.h"
#include "text/gguf.h"
#include "text/tok.h"

/* Tokenizer of g. Returns 0 and *out (tok_free), ERR_CORRUPT (a key
 * missing or of the wrong type or length: "tokenizer.ggml.scores has 10
 * entries, expected 300"), tok_new's errors (ERR_UNSUPPORTED for an unknown
 * model or pre-tokenizer...), ERR_NOMEM. err gets a one-line message. */
int tok_gguf_new(const struct gguf *g, struct tok **out, char *err, size_t err_len);

/* Chat template of g for tokenizer t (tokenizer.chat_template, or none).
 * Returns 0 and *out (chat_tmpl_free), ERR_CORRUPT (key not a string),
 * ERR_UNSUPPORTED (no known template and no <|im_start|>), ERR_NOMEM. */
int tok_gguf_chat_new(const struct gguf *g, const struct tok *t, struct chat_tmpl **out);

#endif
