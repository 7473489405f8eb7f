/* libFuzzer target: JSON Schema text -> gram_compile_json_schema (what
 * response_format json_schema and guided_json compile), then the matcher.
 *
 * Checks: no crash, leak or hang; a refusal has a message; on success the
 * token mask over a small vocabulary agrees with the matcher
 * (gram_fuzz_check_mask) and the matcher runs over the input bytes.
 *
 * fuzz-src: tests/fuzz/gram_fuzz_check.c */
#include <stdint.h>
#include <string.h>

#include "common/gram/gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void gram_fuzz_compiled(int rc, struct gram *g, const struct problem *e, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    struct gram *g = NULL;
    struct problem e;
    memset(&e, 0, sizeof e);
    int rc = gram_compile_json_schema((const char *)data, size, &g, &e); /* g is set here, before the call below */
    gram_fuzz_compiled(rc, g, &e, data, size);
    return 0;
}
