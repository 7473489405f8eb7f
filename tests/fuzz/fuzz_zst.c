/* libFuzzer target: zstd stream decoding with an output cap. */
#include <stdint.h>

#include "common/zst.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf out;
    buf_init(&out, 1u << 20);
    zst_decompress_buf(data, size, &out);
    buf_release(&out);
    return 0;
}
