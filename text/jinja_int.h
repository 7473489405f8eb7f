/*
 * jinja_int.h - what the stages of the Jinja interpreter share (see jinja.h);
 * not for use outside text/jinja_*.c.
 *
 *   jinja_lex.c       source -> tokens (jinja2.lexer), and jl_set_fail
 *   jinja_parse.c     tokens -> struct node tree (jinja2.parser), jinja_parse
 *   jinja_value.c     the arena, the value model (struct jv): builders, Python
 *                     str()/repr(), ==, <, in, iteration, attribute and item
 *                     access, slices, arithmetic, tojson; the render-error
 *                     helpers; the public value API and jinja_env
 *   jinja_filters.c   the filter and test tables (jinja2's FILTERS and TESTS)
 *   jinja_methods.c   the str/dict/loop method table, the global functions
 *                     (raise_exception, strftime_now, namespace, range, dict)
 *                     and the string algorithms filters share with methods
 *   jinja_eval.c      the tree walk: scopes, expressions, statements, macro
 *                     calls, jinja_render
 *
 * Memory: the lexer and parser allocate in the template's arena; everything a
 * render makes lives in the env's arena (struct rs .a). Errors are values:
 * every function taking a struct rs returns -1 (or JV_UNDEF) with the first
 * error recorded in it (jr_fail, jr_oom), never a crash.
 */
#ifndef TEXT_JINJA_INT_H
#define TEXT_JINJA_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "text/jinja.h"

/* ---- arena (jinja_value.c) ------------------------------------------------- */

struct achunk {
    struct achunk *next;
    size_t used, cap;
    max_align_t data[];
};

struct arena {
    struct achunk *head;
    size_t total, cap;
    int oom;   /* 1: malloc failed, 2: cap reached */
};

/* n bytes, 16-aligned; NULL (and a->oom set) on malloc failure or cap. */
void *jar_alloc(struct arena *a, size_t n);
/* Frees every chunk; the arena may be used again. */
void jar_release(struct arena *a);
/* A NUL-terminated copy of s[0..n); NULL on failure. */
struct jstr *jar_str(struct arena *a, const char *s, size_t n);
/* Grows two parallel arrays of n used elements (keys and values) to twice
 * *cap (first: the first capacity) in the arena, copying what they hold.
 * On failure (arena limit or malloc) nothing changes and -1 is returned. */
int jar_grow_pair(struct arena *a, size_t n, size_t *cap, size_t first, void **x, size_t xsz,
                  void **y, size_t ysz);

/* ---- values ------------------------------------------------------------------ */

struct jlist {
    size_t n, cap;
    struct jv *v;
};

struct jdict {
    size_t n, cap;
    struct jv *k, *v;
};

struct jloop {
    int64_t index0, length;
    const struct jv *items;
};

struct node;
struct frame;

struct jmacro {
    const struct node *def;
    struct frame *scope;
};

struct jinja_env {
    struct arena a;
    struct jv globals;   /* JV_DICT */
    time_t now;
};

struct jinja_tmpl {
    struct arena a;
    struct node **body;
    size_t n_body;
};

static inline struct jv mk(uint8_t t)
{
    struct jv v;
    memset(&v, 0, sizeof v);
    v.t = t;
    return v;
}

static inline struct jv mk_int(int64_t i)
{
    struct jv v = mk(JV_INT);
    v.u.i = i;
    return v;
}

static inline struct jv mk_float(double f)
{
    struct jv v = mk(JV_FLOAT);
    v.u.f = f;
    return v;
}

static inline struct jv mk_strp(const struct jstr *s)
{
    struct jv v = mk(JV_STR);
    v.u.s = s;
    return v;
}

static inline int str_eq(const struct jstr *a, const char *s, size_t n)
{
    return a->n == n && memcmp(a->p, s, n) == 0;
}

static inline int is_num(struct jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline double num_f(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static inline int64_t num_i(struct jv v) { return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? v.u.b : 0; }

/* Containers in arena a; -1 / JV_UNDEF when it is full (a->oom says why). */
int jv_list_push(struct arena *a, struct jlist *l, struct jv v);
struct jv jv_new_list(struct arena *a, uint8_t t);   /* t: JV_LIST or JV_TUPLE */
struct jv jv_new_dict(struct arena *a, uint8_t t);   /* t: JV_DICT or JV_NS */
struct jv *jv_dict_find(const struct jdict *d, struct jv key);
struct jv *jv_dict_find_s(const struct jdict *d, const char *s, size_t n);
int jv_dict_set(struct arena *a, struct jdict *d, struct jv key, struct jv val);

/* ---- text helpers -------------------------------------------------------------- */

static inline int isname0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static inline int isdigit_(char c) { return c >= '0' && c <= '9'; }

/* Byte length of the UTF-8 sequence starting at s (1 for invalid bytes). */
static inline size_t u8len(const unsigned char *s, size_t left)
{
    size_t l = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
             : (s[0] & 0xF8) == 0xF0 ? 4 : 1;
    if (l > left)
        return 1;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return l;
}

static inline size_t u8count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += u8len((const unsigned char *)s + i, n - i))
        k++;
    return k;
}

/* Simple case mapping: ASCII, Latin-1, Greek and Cyrillic basic blocks. */
static inline uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
}

static inline uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    return c;
}

static inline int cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

/* ---- lexer (jinja_lex.c) ------------------------------------------------------ */

enum tk { TK_EOF, TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT,
          TK_FLOAT, TK_OP };

struct token {
    uint8_t k;
    char op[3];
    int line;
    const struct jstr *s;
    int64_t i;
    double f;
};

/* The first error of a lexer, parser or render wins: set *rc to code and
 * write "line N: <message>" into err (errcap bytes, may be 0). Returns -1,
 * the callers' failure value. */
int jl_set_fail(int *rc, int code, char *err, size_t errcap, int line, const char *fmt, va_list ap);

/* Tokens of src (len bytes, \r\n and \r read as \n, one final newline
 * dropped), ending with TK_EOF; their strings live in arena a. Returns 0 and
 * *out (heap, the caller frees it) with *n tokens, or ERR_PARSE ("line N:
 * why" in err) or ERR_NOMEM. */
int jl_lex(const char *src, size_t len, struct arena *a, struct token **out, size_t *n, char *err,
           size_t errcap);

/* ---- syntax tree (jinja_parse.c) ---------------------------------------------- */

enum nk {
    /* expressions */
    N_CONST = 1, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BIN, N_AND, N_OR,
    N_NOT, N_NEG, N_POS, N_CMP, N_COND, N_LIST, N_TUPLE, N_DICT,
    /* statements */
    S_DATA, S_OUT, S_IF, S_FOR, S_SET, S_SETNS, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_BODY,
    S_FILTERBLOCK,
};

enum binop { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT };
enum cmpop { C_EQ = 1, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

struct node {
    uint8_t k, op;              /* op: N_FILTER / N_TEST: the builtin id (0: unknown name) */
    int line;
    struct node *a, *b, *c;
    struct node **v;            /* args / items / body / slice parts */
    size_t n;
    struct node **v2;           /* kwarg values / else body / dict values / defaults */
    size_t n2;
    const struct jstr **names;  /* kwarg names / targets / params */
    size_t n_names;
    const struct jstr *s;       /* name, attribute */
    uint8_t *ops;               /* N_CMP: n - 1 operators */
    struct jv cv;               /* N_CONST, S_DATA */
};

/* ---- render state (jinja_value.c, jinja_eval.c) --------------------------------- */

struct frame {
    struct frame *parent;
    size_t n, cap;
    const struct jstr **names;
    struct jv *vals;
};

struct rs {
    struct jinja_env *e;
    struct arena *a;
    struct buf *out;
    char *err;
    size_t errcap;
    int rc;
    long steps;
    int calls;
    int ctl;          /* 1: break, 2: continue pending */
    int edepth;       /* eval() recursion depth */
    const struct jstr *loop_name;
};

/* A runtime error "line N: why" (ERR_INVAL); returns -1. */
int jr_fail(struct rs *R, int line, const char *fmt, ...);
/* An allocation failed: out of memory, or over JINJA_MAX_MEMORY. Returns -1. */
int jr_oom(struct rs *R, int line);
/* n bytes in the render's arena; NULL (error recorded) on failure. */
void *jr_alloc(struct rs *R, size_t n, int line);
/* s[0..n) appended to b; -1 with b's error (ERR_TOOBIG, ERR_NOMEM) recorded. */
int jr_put(struct rs *R, struct buf *b, const char *s, size_t n);
/* Counts one loop iteration or call (jinja_eval.c); -1 past JINJA_MAX_STEPS. */
int jr_step(struct rs *R, int line);

/* ---- value semantics (jinja_value.c) ------------------------------------------- */

/* Python str(v) appended to b. */
int jv_str_into(struct rs *R, struct buf *b, struct jv v, int depth);
/* str(v) as a string (strings are returned as they are). */
int jv_to_str(struct rs *R, struct jv v, const struct jstr **out, int line);
/* A string value copied into the arena; JV_UNDEF (error recorded) on failure. */
struct jv jv_new_str(struct rs *R, const char *s, size_t n, int line);
int jv_truthy(struct jv v);
/* Python ==; containers nested deeper than JINJA_MAX_DEPTH compare by identity. */
int jv_eq(struct jv a, struct jv b);
/* Python's <: -1 error, else 0/1 for a < b. */
int jv_lt(struct rs *R, struct jv a, struct jv b, int line);
/* `needle in hay`: -1 error, else 0/1. */
int jv_in(struct rs *R, struct jv needle, struct jv hay, int line);
const char *jv_type_name(struct jv v);
/* "'name' is undefined"; returns -1. */
int jv_undef_fail(struct rs *R, struct jv u, int line);
/* Items of an iterable as a list value (dict: keys; string: characters). */
int jv_iter(struct rs *R, struct jv v, struct jv *out, int line);
/* obj.name (jinja2's sandboxed getattr: attribute first, then item). */
int jv_getattr(struct rs *R, struct jv o, const char *name, size_t n, struct jv *out, int line);
/* obj[key] (jinja2's getitem: item first, then attribute for string keys). */
int jv_getitem(struct rs *R, struct jv o, struct jv k, struct jv *out, int line);
/* o[a:b:c]; has[i]: part i given (a None part counts as not given). */
int jv_slice(struct rs *R, struct jv o, struct jv *parts, int *has, struct jv *out, int line);
/* a op b (enum binop) with Python's semantics. */
int jv_arith(struct rs *R, uint8_t op, struct jv a, struct jv b, struct jv *out, int line);

/* HF's tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys). */
struct jsonopt {
    int ensure_ascii, sort_keys, has_indent;
    const struct jstr *indent;     /* the indent text (spaces or a string) */
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
};
int jv_json(struct rs *R, struct buf *b, struct jv v, const struct jsonopt *o, int level, int line);

/* ---- builtins (jinja_filters.c, jinja_methods.c) --------------------------------- */

/* Evaluated call arguments: n positional, nk keyword (names kn). */
struct args {
    struct jv *pos;
    size_t n;
    const struct jstr **kn;
    struct jv *kv;
    size_t nk;
};

/* Argument i (positional) or name (keyword); 1 if given. */
int jb_arg(const struct args *A, size_t i, const char *name, struct jv *out);
/* -1 with "what: expected a string" unless v is a string. */
int jb_need_str(struct rs *R, struct jv v, const char *what, int line);

/* Filter and test ids (1..) by name, 0 for none; what struct node .op holds. */
int jb_filter_find(const char *s, size_t n);
int jb_test_find(const char *s, size_t n);
/* v|filter(A) into *out; -1 on error. */
int jb_filter(struct rs *R, int id, struct jv v, const struct args *A, struct jv *out, int line);
/* v is test(A): -1 error, else 0/1. */
int jb_test(struct rs *R, int id, struct jv v, const struct args *A, int line);

/* Method ids (1..) of a value type (JV_STR, JV_DICT, JV_LOOP) by name, 0 for
 * none; what a JV_BOUND's aux holds. */
int jb_method_find(uint8_t type, const char *s, size_t n);
int jb_method(struct rs *R, struct jv self, int id, const struct args *A, struct jv *out, int line);
/* Global function ids (1..) by name, 0 for none; what a JV_FUNC's aux holds. */
int jb_global_find(const struct jstr *name);
int jb_global_call(struct rs *R, int id, const struct args *A, struct jv *out, int line);

/* The string algorithms filters and methods share. */
enum casing { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };
/* str.strip family: which 1 left 2 right 3 both; chars NULL = whitespace. */
struct jv jb_strip(struct rs *R, const struct jstr *s, const struct jstr *chars, int which, int line);
struct jv jb_case(struct rs *R, const struct jstr *s, int how, int line);
/* str.replace(old, new, count); count < 0: all. */
struct jv jb_replace(struct rs *R, const struct jstr *s, const struct jstr *old,
                     const struct jstr *new_, int64_t count, int line);
/* dict.items() as a list of (key, value) tuples. */
int jb_dict_items(struct rs *R, struct jv self, struct jv *out, int line);

#endif
