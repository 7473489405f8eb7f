/*
 * gram_int.h - private to common/gram: the grammar builder the compilers
 * use, and the finished grammar's layout.
 *
 * Building: rules are created first (gb_rule, so they can be referenced
 * before they are defined: recursion), alternatives are assembled in a
 * struct gb_seq and moved into a rule with gb_rule_add. Errors are sticky
 * (gb->rc): a compiler checks once, at gb_finish, which also refuses left
 * recursion and empty loops and flattens everything into struct gram.
 */
#ifndef COMMON_GRAM_INT_H
#define COMMON_GRAM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gram/gram.h"

enum { GE_END = 0, GE_CHR = 1, GE_REF = 2 };

struct gelem {
    int32_t kind;   /* GE_* */
    int32_t arg;    /* GE_CHR: class index; GE_REF: rule index */
};

struct gcls {
    uint32_t w[8];  /* bit b of w[b >> 5]: byte b is in the class */
};

static inline int gcls_has(const struct gcls *c, unsigned b) { return (c->w[b >> 5] >> (b & 31)) & 1u; }
static inline void gcls_add(struct gcls *c, unsigned b) { c->w[b >> 5] |= 1u << (b & 31); }
void gcls_range(struct gcls *c, unsigned lo, unsigned hi);   /* lo..hi inclusive */

struct gb_seq {
    struct gelem *e;
    size_t n, cap;
};

struct gb_rule {
    struct gb_seq *alt;
    size_t n, cap;
};

struct gb {
    struct gb_rule *rule;
    size_t n_rule, cap_rule;
    struct gcls *cls;
    size_t n_cls, cap_cls;
    size_t n_elems;         /* elements added so far (capped at GRAM_MAX_ELEMS) */
    int rc;                 /* first error: ERR_NOMEM, ERR_TOOBIG */
};

void gb_init(struct gb *b);
void gb_release(struct gb *b);
int gb_rule(struct gb *b);                                   /* new empty rule, or -1 */
void gb_seq_chr(struct gb *b, struct gb_seq *s, const struct gcls *c);
void gb_seq_byte(struct gb *b, struct gb_seq *s, unsigned char c);
void gb_seq_lit(struct gb *b, struct gb_seq *s, const char *lit, size_t n);
void gb_seq_ref(struct gb *b, struct gb_seq *s, int rule);
void gb_seq_free(struct gb_seq *s);
/* Move s (reset to empty) into a new alternative of rule r. */
void gb_rule_add(struct gb *b, int r, struct gb_seq *s);
/* Add the empty alternative to rule r. */
void gb_rule_add_empty(struct gb *b, int r);
/* Helpers returning new rules (or -1 after an error): */
int gb_one(struct gb *b, struct gb_seq *s);                  /* R := s */
int gb_lit_rule(struct gb *b, const char *lit, size_t n);    /* R := "lit" */
int gb_repeat(struct gb *b, int r, int64_t min, int64_t max); /* r{min,max}; max -1 = unbounded */

/* Finish: root is rule 0. Refuses left recursion / empty loops
 * (ERR_INVAL with err), an empty rule set. Consumes b. */
int gb_finish(struct gb *b, struct gram **out, struct problem *err);

/* The UTF-8 "any character" pieces the compilers share: adds to rule r
 * alternatives for every multi-byte UTF-8 character (2, 3, 4 bytes, no
 * surrogates, no overlongs). */
void gb_add_utf8_multibyte(struct gb *b, int r);

/* The regex compiler over an existing builder: returns the rule of the
 * regex re, or -1 with err filled (or b->rc set). json_string: the
 * characters are produced inside a JSON string (the regex matches the
 * decoded value; `"`, `\` and control characters are produced escaped). */
int gram_regex_rule(struct gb *b, const char *re, size_t len, int json_string,
                    struct problem *err);

struct gram_cache_ent;

struct gram {
    int refs;                  /* atomic */
    struct gelem *el;          /* (n_el) alternatives, each ended by GE_END */
    size_t n_el;
    struct gcls *cls;          /* (n_cls) */
    size_t n_cls;
    uint32_t *alt_start;       /* (n_alts) element index of each alternative */
    uint32_t *rule_alt;        /* (n_rule + 1) alternatives of rule r: rule_alt[r]..rule_alt[r+1] */
    size_t n_rule;
    /* mask cache */
    pthread_mutex_t mu;
    struct gram_cache_ent *ent; /* (GRAM_MASK_CACHE * 2) open addressing */
    size_t n_ent;
    uint64_t hits, misses;
};

#endif
