/* libFuzzer target: js_parse (strict JSON with size and depth limits). */
#include <stddef.h>
#include <stdint.h>

#include "common/js.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct js_limits lim = {1u << 16, 16, (int)(size & 1)};
    json_t *v = NULL;
    struct js_error e;
    if (js_parse((const char *)data, size, &lim, &v, &e) == 0) {
        struct buf b;
        buf_init(&b, 1u << 20);
        js_dump(&b, v);
        buf_release(&b);
        json_decref(v);
    }
    return 0;
}
