/* libFuzzer target: result reuse's readers of outside bytes
 * (jobd/work/reuse.c): a request body (from an upload) through the
 * determinism test and the key, and a response body (from a worker)
 * through the reuse mark. Byte 0 picks: even the key, odd the mark.
 * Oracle: a key is 64 lowercase hex digits and exists exactly when the body
 * is deterministic; a marked body is a JSON object whose system_fingerprint
 * ends in "+reused" or is "reused", and whose usage (when an object)
 * carries reused_tokens.
 * fuzz-src: jobd/work/reuse.c */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "jobd/work/reuse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        char key[REUSE_KEY_HEX];
        int det = reuse_deterministic(p, n);
        int rc = reuse_key("ten_x", "/v1/chat/completions", p, n,
                           "0000000000000000000000000000000000000000000000000000000000000000", "cpu", key);
        if ((rc == 0) != det)
            __builtin_trap();
        if (rc == 0 && (strlen(key) != 64 || strspn(key, "0123456789abcdef") != 64))
            __builtin_trap();
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    if (reuse_mark_body(p, n, 7, &out, &len) == 0) {
        json_t *o = json_loadb(out, len, 0, NULL);
        if (!o || !json_is_object(o))
            __builtin_trap();
        const char *fp = json_string_value(json_object_get(o, "system_fingerprint"));
        size_t fl = fp ? strlen(fp) : 0;
        if (!fp || (strcmp(fp, "reused") != 0 && (fl < 7 || strcmp(fp + fl - 7, "+reused") != 0)))
            __builtin_trap();
        json_t *u = json_object_get(o, "usage");
        if (json_is_object(u) && json_integer_value(json_object_get(u, "reused_tokens")) != 7)
            __builtin_trap();
        json_decref(o);
        free(out);
    }
    return 0;
}
