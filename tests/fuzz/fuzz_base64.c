/* libFuzzer target: base64_decode; whatever decodes must re-encode to the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/crypto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t out[4096];
    size_t n;
    if (size > 4096 || base64_decode((const char *)data, size, out, sizeof out, &n) != 0)
        return 0;
    char *enc = malloc(BASE64_LEN(n) + 1);
    base64_encode(out, n, enc);
    if (strlen(enc) != size || memcmp(enc, data, size) != 0)
        abort(); /* the decoder accepted a non-canonical encoding */
    free(enc);
    return 0;
}
