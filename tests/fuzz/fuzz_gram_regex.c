/* libFuzzer target: regex text -> gram_compile_regex (guided_regex and JSON
 * Schema `pattern` go through the same parser), then the matcher.
 *
 * Checks: no crash, leak or hang; a refusal has a message; a grammar's
 * token mask over a small vocabulary agrees with accepting each token on a
 * fresh matcher (the trie walk and the matcher never disagree), and
 * gram_match of the input itself returns (either answer is fine).
 *
 * fuzz-src: tests/fuzz/gram_fuzz_check.c */
#include <stdint.h>
#include <string.h>

#include "common/gram/gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void gram_fuzz_compiled(int rc, struct gram *g, const struct problem *e, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 512)
        return 0;
    struct gram *g = NULL;
    struct problem e;
    memset(&e, 0, sizeof e);
    int rc = gram_compile_regex((const char *)data, size, &g, &e); /* g is set here, before the call below */
    gram_fuzz_compiled(rc, g, &e, data, size);
    return 0;
}
