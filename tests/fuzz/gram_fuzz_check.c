/* Shared by the grammar fuzz targets (fuzz-src of tests/fuzz/fuzz_gram_regex.c
 * and fuzz_gram_schema.c).
 *
 * gram_fuzz_check_mask: the token mask of a grammar's start state over a
 * small vocabulary must agree, token by token, with accepting the token on a
 * fresh matcher, and count what it allows.
 *
 * gram_fuzz_compiled: what both targets check after a compile: a refusal has
 * no grammar and (unless out of memory) a message; a grammar matches the
 * input bytes without crashing (either answer is fine) and passes the mask
 * check; it is released. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gram/gram.h"

static const char *const TOKS[] = {"a", "b", "ab", "0", "12", "-", ".", " ", "\"", "\\", "{", "}",
                                   "[", "]", ":", ",", "x", "yz", "\xc3\xa9", "\xc3", "\n", "aaa"};
#define N_TOKS (sizeof TOKS / sizeof TOKS[0])

#include "common/err.h"

void gram_fuzz_check_mask(struct gram *g);
void gram_fuzz_compiled(int rc, struct gram *g, const struct problem *e, const uint8_t *data, size_t size);

void gram_fuzz_compiled(int rc, struct gram *g, const struct problem *e, const uint8_t *data, size_t size)
{
    if (rc) {
        if (g || (rc != ERR_NOMEM && !e->message[0]))
            abort();
        return;
    }
    (void)gram_match(g, (const char *)data, size);
    gram_fuzz_check_mask(g);
    gram_unref(g);
}

void gram_fuzz_check_mask(struct gram *g)
{
    static struct gram_vocab *v;
    size_t lens[N_TOKS];
    for (size_t i = 0; i < N_TOKS; i++)
        lens[i] = strlen(TOKS[i]);
    if (!v && gram_vocab_new(N_TOKS, TOKS, lens, &v) != 0)
        abort();
    struct gram_matcher *m = NULL;
    if (gram_matcher_new(g, &m) != 0)
        return;
    uint32_t mask[1];
    size_t n_ok = 0;
    int rc = gram_matcher_mask(m, v, mask, &n_ok);
    if (rc == 0) {
        size_t cnt = 0;
        for (size_t t = 0; t < N_TOKS; t++) {
            struct gram_matcher *f = NULL;
            if (gram_matcher_new(g, &f) != 0)
                break;
            int ok = gram_matcher_accept(f, TOKS[t], lens[t]) == 0;
            gram_matcher_free(f);
            if (ok != (int)((mask[0] >> t) & 1))
                abort();
            cnt += (size_t)ok;
        }
        if (cnt != n_ok)
            abort();
    }
    gram_matcher_free(m);
}

