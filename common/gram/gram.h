/*
 * gram.h - constrained decoding: a byte-level grammar IR, compilers into it
 * (regex, choice list, JSON Schema, "any JSON object"), an incremental
 * matcher, and token masks over a vocabulary trie.
 *
 * Pure C with no JSON in this header, so the engine (token masks inside the
 * batched step) and jobd's intake (refusing bad schemas at upload) share one
 * compiler: a schema jobd accepts is exactly a schema the worker compiles.
 * Beside it, a validator (gram_json_valid, gram_valid.c) for JSON that was
 * not generated under a grammar.
 *
 * IR. A grammar is a set of rules; a rule is a list of alternatives; an
 * alternative is a sequence of elements, each a byte class (256-bit set)
 * or a reference to a rule. Rule 0 is the root. Repetition is right
 * recursion (R := X R | empty); left recursion, and loops that can go
 * round without consuming a byte (e.g. `(a*)*`), are refused when the
 * grammar is finished (gb_finish in gram_int.h), so expansion always
 * terminates; so is a grammar whose root derives no finite string.
 *
 * Matcher (llama.cpp GBNF style, over bytes, not code points). A state is a
 * set of stacks of positions in the flattened element array; the top of
 * each stack is a byte class to match next, the rest are return positions.
 * A tail reference (the last element of an alternative) replaces its frame
 * instead of pushing a return, so repetition does not grow the stacks. A
 * byte advances every stack whose top class holds it and re-expands; the
 * state is accepting when some stack is empty. Limits: GRAM_MAX_STACKS
 * stacks per state, GRAM_MAX_DEPTH frames per stack (deeper nesting, e.g.
 * of a recursive schema, is simply not allowed: outputs stay valid).
 *
 * Token masks. gram_vocab is a trie of the vocabulary's byte strings in
 * preorder (built once per tokenizer). gram_matcher_mask walks it depth
 * first from the matcher's state, one byte per trie edge, pruning a subtree
 * as soon as its state is empty: cost is proportional to the allowed
 * prefixes, not to 49k independent matches. Within a walk the states met
 * are interned and each (state, byte) transition is computed once (a dense
 * 256-entry row per state, at most 16384 states per walk), so a walk where
 * most bytes loop back to the same state (inside a JSON string) costs one
 * table lookup per trie node (~1 ms for 49k tokens).
 * Masks are cached per grammar, keyed by the exact state (stacks) and the
 * vocabulary: inside a string, a number or a repeated structure the state
 * recurs token after token, and sequences of one batch sharing a schema
 * share each other's masks. The mask never includes end-of-generation
 * tokens; the caller allows them exactly when gram_matcher_accepting.
 *
 * Recursive schemas ($ref cycles) are unrolled GRAM_MAX_REF_DEPTH levels:
 * deeper instances are not generated (an array of recursive items must be
 * empty at the last level), which also guarantees that a model that keeps
 * nesting reaches the end. A schema with no finite instance is refused.
 *
 * JSON output form (gram_compile_json_schema / gram_compile_json_object):
 * JSON text with object members in the schema's `properties` order and at
 * most one space after ':' and ',' (no other whitespace, so a model cannot
 * loop on spaces), strings as JSON strings of valid UTF-8 (escapes allowed),
 * numbers without leading zeros. What of JSON Schema is supported is in
 * spec/structured-outputs.md; anything else is refused with a message that
 * names the keyword and its JSON pointer.
 *
 * Threads: a finished struct gram is immutable (reference counted, atomic)
 * except its mask cache, which has its own mutex; a matcher belongs to one
 * thread at a time; a gram_vocab is immutable.
 */
#ifndef COMMON_GRAM_H
#define COMMON_GRAM_H

#include <stddef.h>
#include <stdint.h>

#include "common/problem.h"

#define GRAM_MAX_STACKS 64          /* stacks per matcher state */
#define GRAM_MAX_DEPTH 128          /* frames per stack */
#define GRAM_MAX_ELEMS (1u << 20)   /* elements of one grammar */
#define GRAM_MAX_REGEX_BYTES 4096   /* regex source (guided_regex, pattern) */
#define GRAM_MAX_REPEAT 1000        /* {n,m}, minLength/maxLength, minItems/maxItems */
#define GRAM_MAX_CHOICES 1024       /* guided_choice entries */
#define GRAM_MAX_SCHEMA_BYTES (256u << 10) /* schema text */
#define GRAM_MASK_CACHE 256         /* cached masks per grammar (cleared when full) */
#define GRAM_MAX_REF_DEPTH 6        /* $ref recursion unrolled this many levels */

struct gram;
struct gram_vocab;
struct gram_matcher;

/* A compile error is a struct problem (common/problem.h): the compilers
 * fill its message; openai/ gp_format_parse adds which request field, with
 * which OpenAI error code. */

/* ---- compilers (each returns 0 and a new grammar with one reference, or
 * ERR_INVAL / ERR_UNSUPPORTED / ERR_TOOBIG with err->message filled, or
 * ERR_NOMEM) ----------------------------------------------------------------- */

/* A regex (ECMAScript-like subset, whole-output match): literals, escapes
 * \d \w \s \D \W \S \n \r \t \f \v \xHH and escaped punctuation, `.` (any
 * character but \n, as UTF-8), classes [...] / [^...] over ASCII, groups
 * (...) (?:...), |, * + ? {n} {n,} {n,m} (lazy `?` accepted: same
 * language), ^ at the start and $ at the end. Refused: backreferences,
 * lookaround, named groups, \b, non-ASCII inside classes. */
int gram_compile_regex(const char *re, size_t len, struct gram **out, struct problem *err);

/* Exactly one of the strings ch[0..n) (lens[i] bytes each, 1..n <=
 * GRAM_MAX_CHOICES, duplicates allowed). */
int gram_compile_choice(const char *const *ch, const size_t *lens, size_t n, struct gram **out,
                        struct problem *err);

/* Any JSON object (response_format json_object). */
int gram_compile_json_object(struct gram **out, struct problem *err);

/* A JSON Schema given as JSON text (at most GRAM_MAX_SCHEMA_BYTES). */
int gram_compile_json_schema(const char *schema, size_t len, struct gram **out,
                             struct problem *err);

/* Framed JSON values (tool calls): min..max items (max -1 = unbounded, min
 * 0 = the empty output too), each `prefix` + a JSON value of `schema` (JSON
 * text, as gram_compile_json_schema) + `suffix`, items joined by `sep`.
 * E.g. Hermes calls: prefix "<tool_call>\n", suffix "\n</tool_call>",
 * sep "\n", schema anyOf {"name": const, "arguments": parameters}. */
struct gram_frame {
    const char *prefix, *suffix, *sep;   /* NUL-terminated literals */
    const char *schema;                  /* schema_len bytes */
    size_t schema_len;
    int min, max;
    /* keyed: schema is a JSON array of [key, schema] pairs (key a string,
     * each schema with its own '#' for $ref), and an item is `prefix` +
     * one key + `infix` + a JSON value of that key's schema + `suffix`.
     * E.g. Mistral's [TOOL_CALLS]name[ARGS]{...}: prefix "[TOOL_CALLS]",
     * infix "[ARGS]", pairs [name, parameters]. */
    int keyed;
    const char *infix;                   /* NUL-terminated; keyed only */
};
int gram_compile_framed(const struct gram_frame *f, struct gram **out, struct problem *err);

/* ---- the process-wide compile cache -------------------------------------- */

/* GRAM_FRAMED's source text: "min\0max\0prefix\0suffix\0sep\0schema" with
 * min and max in decimal; GRAM_FRAMED_KEYED's
 * "min\0max\0prefix\0infix\0suffix\0sep\0pairs". */
enum gram_kind { GRAM_REGEX = 1, GRAM_CHOICE = 2, GRAM_JSON_OBJECT = 3, GRAM_JSON_SCHEMA = 4,
                 GRAM_FRAMED = 5, GRAM_FRAMED_KEYED = 6 };

/* Compile, or take from the cache, the grammar of `kind` for the canonical
 * source text src[0..len) (regex text; choices joined by NUL bytes; schema
 * as compact JSON; ignored for GRAM_JSON_OBJECT). Keyed by a 64-bit hash and
 * the full text; holds the last GRAM_CACHE_ENTRIES distinct grammars (a
 * batch's lines sharing a schema compile it once). Failures are cached too
 * (same error for the same text). Grammars over GRAM_CACHE_MAX_ELEMS
 * elements are not kept, so the cache holds at most 64 x 512 KiB of
 * grammar (plus, in a worker, each grammar's mask cache: at most
 * GRAM_MASK_CACHE masks of n_vocab / 8 bytes). Returns a new reference in
 * *out, or the compiler's error. Thread-safe. */
#define GRAM_CACHE_ENTRIES 64
#define GRAM_CACHE_MAX_ELEMS (64u << 10)   /* larger grammars are not kept (8 B per element) */
int gram_cache_get(enum gram_kind kind, const char *src, size_t len, struct gram **out,
                   struct problem *err);

/* ---- grammars --------------------------------------------------------------- */

struct gram *gram_ref(struct gram *g);   /* +1 reference; returns g; NULL ok */
void gram_unref(struct gram *g);         /* -1; frees at 0; NULL ok */
size_t gram_n_elems(const struct gram *g);
size_t gram_n_rules(const struct gram *g);

/* Whether the whole of s[0..n) is in the grammar's language. Can't fail
 * (out of memory counts as no). */
int gram_match(struct gram *g, const char *s, size_t n);

/* Whether the JSON text value[0..value_len) is valid against the JSON
 * Schema text schema[0..schema_len) in JSON Schema's sense (any member
 * order and whitespace; gram_valid.c has the keywords). Returns 1 valid,
 * 0 invalid (also a schema or value that is not JSON, or nesting deeper
 * than 128), ERR_NOMEM. Thread-safe. */
int gram_json_valid(const char *schema, size_t schema_len, const char *value, size_t value_len);

/* ---- vocabulary --------------------------------------------------------------- */

/* A trie over tokens 0..n_vocab-1 whose bytes are bytes[i][0..lens[i]); a
 * token with lens[i] == 0 or bytes[i] == NULL (control tokens, EOS) is never
 * in a mask. Returns 0, ERR_INVAL (n_vocab 0 or > 2^24, a token longer than
 * 1024 bytes), ERR_NOMEM. */
int gram_vocab_new(size_t n_vocab, const char *const *bytes, const size_t *lens,
                   struct gram_vocab **out);
void gram_vocab_free(struct gram_vocab *v);
size_t gram_vocab_n(const struct gram_vocab *v);
/* Words of a mask: ceil(n_vocab / 32); bit (id & 31) of word id >> 5. */
size_t gram_mask_words(const struct gram_vocab *v);

/* ---- matcher ------------------------------------------------------------------ */

/* A matcher at the start of g (takes a reference). Returns 0, ERR_NOMEM. */
int gram_matcher_new(struct gram *g, struct gram_matcher **out);
void gram_matcher_free(struct gram_matcher *m);

/* Advance over s[0..n). Returns 0, or ERR_INVAL when some byte is not
 * allowed (the matcher is then unchanged), ERR_NOMEM. */
int gram_matcher_accept(struct gram_matcher *m, const char *s, size_t n);

/* 1 when s[0..n) (n > 0) could be accepted now; the matcher is unchanged.
 * Out of memory counts as no. */
int gram_matcher_allows(struct gram_matcher *m, const char *s, size_t n);

/* 1 when the bytes so far are a whole sentence of the grammar (end of
 * generation allowed), else 0. */
int gram_matcher_accepting(const struct gram_matcher *m);

/* 1 when at least one more byte can follow. */
int gram_matcher_can_continue(const struct gram_matcher *m);

/* Write the allowed-token mask (gram_mask_words(v) words; a set bit = the
 * token's bytes can be accepted now) and the number of allowed tokens to
 * *n_allowed (may be NULL). Uses and fills the grammar's mask cache. Returns
 * 0, ERR_NOMEM. Thread-safe for distinct matchers, including matchers of
 * one grammar. */
int gram_matcher_mask(struct gram_matcher *m, const struct gram_vocab *v, uint32_t *mask,
                      size_t *n_allowed);

/* The same mask computed by the trie walk, without the cache (bench, tests). */
int gram_matcher_mask_uncached(struct gram_matcher *m, const struct gram_vocab *v,
                               uint32_t *mask, size_t *n_allowed);

/* Mask cache counters of g (tests, bench). */
void gram_mask_stats(struct gram *g, uint64_t *hits, uint64_t *misses);

#endif
