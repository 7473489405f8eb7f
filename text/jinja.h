/*
 * jinja.h - a Jinja2-subset interpreter for chat templates (the GGUF's
 * `tokenizer.chat_template`), rendering byte-for-byte what Hugging Face's
 * apply_chat_template renders with Python's jinja2: an
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loopcontrols extension, HF's tojson, raise_exception and strftime_now.
 *
 * Design. jinja_parse lexes the template as jinja2's lexer does (whitespace
 * control `{%- -%}`/`{{- -}}`/`{%+`, trim_blocks, lstrip_blocks, the final
 * newline dropped, end tags only when brackets balance) and parses it by
 * recursive descent into an immutable tree, allocated in the template's own
 * arena. jinja_render walks the tree with values allocated in the caller's
 * jinja_env arena (freed all at once); a value is 16 bytes passed by value.
 *
 * Files, one per stage, sharing text/jinja_int.h (internal): jinja_lex.c
 * (the lexer), jinja_parse.c (the parser, jinja_parse), jinja_value.c (the
 * value model: Python str/repr, ==, <, arithmetic, tojson; jinja_env and
 * the value builders), jinja_filters.c (the filter and test tables),
 * jinja_methods.c (str/dict methods and the global functions),
 * jinja_eval.c (the tree walk, jinja_render).
 *
 * Supported (the subset real chat templates use; spec/chat-templates.md
 * has the list): {% for %} (tuple targets, `if` filter, else,
 * loop.index/index0/revindex/revindex0/first/last/length/previtem/
 * nextitem/cycle, break/continue), {% if/elif/else %}, {% set %} (names,
 * tuples, namespace attributes, block set), {% macro %} and calling
 * macros, {% filter %}, {% raw %}, {% generation %} (HF, renders its
 * body), comments; expressions with literals, lists, tuples, dicts,
 * attribute/item access, slices, calls, filters, tests, `in`/`not in`,
 * `~`, + - * / // % **, comparisons, and/or/not, inline if/else; the
 * filters, tests, string/dict methods and globals listed in the spec.
 * Undefined behaves as jinja2's default Undefined (prints as "", false,
 * empty; attribute access on it and arithmetic with it are errors).
 *
 * Limits (templates are outside input): source JINJA_MAX_SOURCE bytes,
 * expression/statement nesting JINJA_MAX_DEPTH (JINJA_MAX_EVAL_DEPTH for
 * long operator chains), macro call depth JINJA_MAX_CALL_DEPTH,
 * JINJA_MAX_STEPS loop iterations plus macro calls per render,
 * JINJA_MAX_MEMORY bytes of values per render, and the output buffer's own
 * cap. Each is an error naming the template line, never a crash.
 *
 * Thread: a parsed template is immutable and may be rendered from any number
 * of threads at once, each with its own jinja_env.
 */
#ifndef TEXT_JINJA_H
#define TEXT_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/buf.h"

#define JINJA_MAX_SOURCE (1u << 20)
#define JINJA_MAX_DEPTH 64
#define JINJA_MAX_CALL_DEPTH 32
#define JINJA_MAX_EVAL_DEPTH 512
#define JINJA_MAX_STEPS 1000000
#define JINJA_MAX_MEMORY (256u << 20)
#define JINJA_ERR_MAX 256

enum jv_type {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,      /* namespace(): a dict whose attributes {% set ns.x %} may change */
    JV_MACRO, JV_FUNC, JV_BOUND, JV_LOOP, JV_TUPLE,
};

struct jstr { size_t n; char p[]; };  /* UTF-8 bytes, p[n] == '\0' */
struct jlist;
struct jdict;

struct jv {
    uint8_t t;           /* enum jv_type */
    uint8_t aux;         /* JV_FUNC: builtin id; JV_BOUND: method id */
    union {
        int b;
        int64_t i;
        double f;
        const struct jstr *s;
        struct jlist *l;
        struct jdict *d;
        const void *p;
    } u;
    const void *x;       /* JV_UNDEF: the name (const struct jstr *) or NULL;
                            JV_BOUND: the bound object (struct jv *) */
};

struct jinja_tmpl;
struct jinja_env;

/* Parse src (len bytes; NUL bytes are data). Returns 0 and *out (free with
 * jinja_tmpl_free), ERR_PARSE with "line N: why" in err (errcap bytes, may
 * be NULL), ERR_TOOBIG (source over JINJA_MAX_SOURCE), ERR_DEPTH, ERR_NOMEM. */
int jinja_parse(const char *src, size_t len, struct jinja_tmpl **out, char *err, size_t errcap);
void jinja_tmpl_free(struct jinja_tmpl *t);

/* A render environment: the global variables and the arena every value of
 * one render lives in. now: what strftime_now formats (UTC). Returns NULL
 * on NOMEM. jinja_env_free accepts NULL and frees every value made in it. */
struct jinja_env *jinja_env_new(time_t now);
void jinja_env_free(struct jinja_env *e);

/* Value builders (the values live until jinja_env_free). On NOMEM they
 * return JV_UNDEF and the env remembers it: jinja_render then fails with
 * ERR_NOMEM, so callers may build a whole context and check once. */
struct jv jinja_str(struct jinja_env *e, const char *s, size_t n);
struct jv jinja_bool(int b);
struct jv jinja_none(void);
struct jv jinja_int(int64_t i);
struct jv jinja_float(double f);
struct jv jinja_list(struct jinja_env *e);
struct jv jinja_dict(struct jinja_env *e);
void jinja_list_push(struct jinja_env *e, struct jv list, struct jv v);
void jinja_dict_set(struct jinja_env *e, struct jv dict, const char *key, struct jv v);
/* Define a global variable (messages, bos_token, add_generation_prompt...). */
void jinja_global(struct jinja_env *e, const char *name, struct jv v);

/* Render t with e's globals, appending to out. Returns 0; ERR_INVAL with
 * the message in err: raise_exception(msg) gives exactly msg, any other
 * runtime error "line N: why" (undefined attribute, bad types, limits);
 * ERR_TOOBIG (out's cap hit); ERR_NOMEM. On any error out is restored to
 * its length at entry. */
int jinja_render(const struct jinja_tmpl *t, struct jinja_env *e, struct buf *out, char *err,
                 size_t errcap);

#endif
