/*
 * tok.h - tokenizers of the inference engine: text <-> token ids.
 *
 * Two tokenizer families, as GGUF files describe them in `tokenizer.ggml.*`:
 *
 *   "gpt2"  byte-level BPE. The text is split by the pre-tokenizer regexes
 *           chosen by `tokenizer.ggml.pre` (PCRE2, UTF+UCP, JIT), each piece's
 *           bytes are mapped through GPT-2's bytes->unicode table and merged
 *           by merge rank (lowest first), like llama.cpp's llm_tokenizer_bpe.
 *   "llama" SentencePiece-style BPE: spaces become U+2581 "▁" (one is
 *           prepended per fragment when add_space_prefix), adjacent symbols
 *           are merged by token score (highest first), leftovers fall back to
 *           <0xXX> byte tokens, like llama.cpp's llm_tokenizer_spm and the
 *           sentencepiece library's BPE model.
 *   "bert"  WordPiece (BERT encoders), like llama.cpp's llm_tokenizer_wpm:
 *           the vocabulary as llama.cpp's converter writes it (a word-start
 *           piece is "▁" + text, a "##" continuation is its bare text,
 *           CONTROL tokens as they are). The text is normalised as HF's
 *           BertNormalizer - with strip_accents NFD and every mark dropped,
 *           with lowercase the simple lowercase mapping (on when the GGUF
 *           has no normalizer.lowercase key, as llama.cpp); NUL, U+FFFD and
 *           control characters dropped - and split at whitespace and
 *           around every punctuation character, ASCII symbol and CJK
 *           ideograph; each word is matched greedily longest-first ("▁" +
 *           word, then continuations); a word with an unmatched rest
 *           becomes one [UNK]. TOK_ADD_SPECIAL adds [CLS] (bos) before and
 *           [SEP] after, whatever add_bos / add_eos say (llama.cpp does the
 *           same). Unicode properties: tok_unicode.h.
 *
 * Special tokens (CONTROL, USER_DEFINED, UNKNOWN types) are cut out of the
 * text first, longest first, like llama.cpp's tokenizer_st_partition:
 * USER_DEFINED always, CONTROL/UNKNOWN only with TOK_PARSE_SPECIAL (use it
 * for chat-template text, never for user content on its own).
 *
 * A struct tok is built from plain data (struct tok_vocab_desc: exactly what
 * the GGUF keys hold), copies everything it needs, and is immutable after
 * tok_new: any number of threads may encode/decode with it at once. A
 * struct tok_stream (streaming decoder) belongs to one thread.
 *
 * Hostile input. Input text longer than TOK_MAX_INPUT_BYTES is refused
 * (ERR_TOOBIG). Invalid UTF-8 in the input is not refused: each byte that
 * does not start a valid, shortest-form sequence (no surrogates, <= U+10FFFF)
 * is replaced by U+FFFD before tokenizing (llama.cpp does the same for BPE).
 * The number of ids produced is capped by the caller's array (ERR_TOOBIG
 * when it would overflow); TOK_ENCODE_BOUND(len) is always enough.
 * Vocabulary limits (TOK_MAX_VOCAB, TOK_MAX_TOKEN_BYTES, TOK_MAX_MERGES)
 * are checked by tok_new.
 */
#ifndef TEXT_TOK_H
#define TEXT_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define TOK_MAX_INPUT_BYTES  (8u << 20)    /* tok_encode refuses longer text */
#define TOK_MAX_VOCAB        (1u << 21)    /* tokens in a vocabulary */
#define TOK_MAX_TOKEN_BYTES  4096u         /* bytes in one token or merge string */
#define TOK_MAX_MERGES       (1u << 22)    /* BPE merge rules */

/* Ids tok_encode can produce for len input bytes, at most: an invalid byte
 * becomes U+FFFD (3 bytes), each byte at most one token, plus BOS, EOS and
 * SEP. */
#define TOK_ENCODE_BOUND(len) (3 * (size_t)(len) + 3)

/* tokenizer.ggml.token_type values (gguf-py TokenType). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

enum tok_model { TOK_MODEL_SPM = 1, TOK_MODEL_BPE = 2, TOK_MODEL_WPM = 3 };

/* The vocabulary, as the GGUF `tokenizer.ggml.*` keys give it. Everything is
 * borrowed for the duration of tok_new only (tok copies what it keeps). */
struct tok_vocab_desc {
    const char *model;           /* tokenizer.ggml.model: "llama", "gpt2" or "bert" */
    const char *pre;             /* tokenizer.ggml.pre, NULL when absent (= "default") */
    size_t n_tokens;
    const char *const *tokens;   /* (n_tokens) token texts */
    const size_t *token_lens;    /* (n_tokens) byte lengths, or NULL: texts are NUL-terminated */
    const float *scores;         /* (n_tokens) or NULL (all 0) */
    const int32_t *token_types;  /* (n_tokens) enum tok_type, or NULL (all NORMAL) */
    size_t n_merges;
    const char *const *merges;   /* (n_merges) "left right"; rank = index; gpt2 only */
    const size_t *merge_lens;    /* (n_merges) or NULL: NUL-terminated */
    /* special token ids; -1 when the key is absent (then the model default
     * applies: llama bos 1 eos 2 unk 0; gpt2 none). Out-of-range ids are
     * ignored like llama.cpp does (default kept). bert: bos 101 ([CLS]),
     * unk 100, sep 102, no eos; a GGUF without bos_token_id but with
     * cls_token_id gets that as bos (HF's choice; llama.cpp keeps 101). */
    int64_t bos_id, eos_id, eot_id, eom_id, unk_id, pad_id, sep_id, cls_id;
    int add_bos;                 /* tokenizer.ggml.add_bos_token: 0/1, -1 absent (model default) */
    int add_eos;                 /* add_eos_token: 0/1, -1 absent (default 0) */
    int add_space_prefix;        /* add_space_prefix: 0/1, -1 absent (llama: 1, gpt2: 0) */
    int lowercase;               /* bert: normalizer.lowercase 0/1, -1 absent (default 1:
                                  * llama.cpp's WordPiece lowercases always, and older
                                  * converters left the key out of lowercasing models) */
    int strip_accents;           /* bert: normalizer.strip_accents 0/1, -1 absent (= lowercase) */
};

/* A desc with every optional field "absent" (ids -1, flags -1). */
void tok_vocab_desc_init(struct tok_vocab_desc *d);

struct tok;

/* Build a tokenizer from d. Returns 0 and *out (free with tok_free), or
 * ERR_INVAL (missing arrays, unknown model), ERR_UNSUPPORTED (unknown
 * pre-tokenizer name), ERR_CORRUPT (duplicate token text, merge without a
 * space), ERR_TOOBIG (a limit above), ERR_NOMEM, ERR_INTERNAL (PCRE2 failed
 * to compile a built-in pattern). */
int tok_new(const struct tok_vocab_desc *d, struct tok **out);
void tok_free(struct tok *t);

/* Flags of tok_encode. */
#define TOK_ADD_SPECIAL   1   /* prepend BOS / append EOS as add_bos / add_eos say */
#define TOK_PARSE_SPECIAL 2   /* match CONTROL tokens' texts in the input */

/* Tokenize text[0..len). Writes at most cap ids to ids[] and their count to
 * *n_out. Returns 0, ERR_TOOBIG (len > TOK_MAX_INPUT_BYTES, or more than cap
 * ids; *n_out untouched), ERR_NOMEM, ERR_INTERNAL (regex engine failure).
 * text may contain NULs and invalid UTF-8 (see the file comment). */
int tok_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t *ids,
               size_t cap, size_t *n_out);

/* Flags of tok_decode / tok_piece. */
#define TOK_RENDER_SPECIAL 1  /* CONTROL / UNKNOWN tokens give their text (else nothing) */
#define TOK_REMOVE_SPECIAL 2  /* tok_decode: drop a leading BOS / trailing EOS the
                               * tokenizer would have added */

/* Append the bytes of one token to out, like llama.cpp's token_to_piece:
 * NORMAL gpt2 tokens through the inverse byte map, spm "▁" -> " ", BYTE
 * tokens as their byte, USER_DEFINED as text, CONTROL/UNKNOWN only with
 * TOK_RENDER_SPECIAL. The bytes need not be valid UTF-8 (one token may hold
 * part of a character). Returns 0, ERR_INVAL (id out of range), or
 * buf_append's errors. */
int tok_piece(const struct tok *t, int32_t id, int flags, struct buf *out);

/* Append the text of ids[0..n) to out, like llama.cpp's detokenize: one
 * leading space is removed when add_space_prefix (spm), and for vocabularies
 * with clean_spaces (gpt2 "default"/"gpt2"/"llama-bpe") the HF
 * clean_up_tokenization_spaces rules are applied. Raw bytes: may be invalid
 * UTF-8 (use tok_stream for text sent to users). Same errors as tok_piece. */
int tok_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, struct buf *out);

/* Streaming decoder for generated tokens: appends only complete, valid UTF-8
 * characters; an incomplete sequence at the end of a token is held back until
 * the next token completes it; bytes that cannot become valid UTF-8 are
 * replaced by U+FFFD. So the concatenated output is always valid UTF-8. No
 * leading-space stripping, no space cleanup (each token as token_to_piece). */
struct tok_stream {
    const struct tok *t;
    int flags;                   /* TOK_RENDER_SPECIAL or 0 */
    unsigned char pend[4];       /* held-back prefix of a character */
    size_t n_pend;
};

void tok_stream_init(struct tok_stream *s, const struct tok *t, int flags);
/* Decode one more token. 0, ERR_INVAL (bad id), or buf_append's errors. */
int tok_stream_push(struct tok_stream *s, int32_t id, struct buf *out);
/* End of stream: held-back bytes (an incomplete character) become U+FFFD. */
int tok_stream_flush(struct tok_stream *s, struct buf *out);

/* ---- vocabulary queries (all can't fail) ---- */
size_t tok_n_vocab(const struct tok *t);
enum tok_model tok_model_kind(const struct tok *t);
int32_t tok_bos(const struct tok *t);            /* -1 when none */
int32_t tok_eos(const struct tok *t);            /* -1 when none */
int32_t tok_eot(const struct tok *t);            /* -1 when none (also found by text) */
int tok_add_bos(const struct tok *t);            /* 0/1 */
/* End of generation: eos, eot, eom, and tokens named like <|im_end|>,
 * <|eot_id|>, <|end|>, <end_of_turn>, <|endoftext|>, </s>, ... */
int tok_is_eog(const struct tok *t, int32_t id);
/* Id of the token whose text is s[0..len), or -1. */
int32_t tok_find(const struct tok *t, const char *s, size_t len);
/* Raw text of a token (not NUL-terminated) and its length; NULL if bad id. */
const char *tok_text(const struct tok *t, int32_t id, size_t *len);
enum tok_type tok_token_type(const struct tok *t, int32_t id);

/* Replace invalid UTF-8 as tok_encode does, appending the result to out.
 * 0 or buf_append's errors. */
int tok_utf8_sanitize(const char *s, size_t len, struct buf *out);
/* Length of the valid UTF-8 sequence at s[0..len) (1..4), or 0 if invalid or
 * truncated. Can't fail. */
size_t tok_utf8_seq(const unsigned char *s, size_t len);

/* The vocabulary trie for constrained decoding (common/gram/gram.h): every
 * NORMAL, BYTE and USER_DEFINED token's bytes (tok_piece), built on the
 * first call (thread-safe; a few ms for 49k tokens) and owned by t; and
 * the end-of-generation ids (never in a grammar mask: the caller allows
 * them when the grammar accepts). Returns 0, ERR_INVAL, ERR_NOMEM. */
struct gram_vocab;
int tok_gram_vocab(const struct tok *t, const struct gram_vocab **gv, const int32_t **eog_ids,
                   size_t *n_eog);

#endif
