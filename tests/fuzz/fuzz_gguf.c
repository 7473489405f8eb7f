/* libFuzzer target: GGUF parsing (text/gguf.c) and, for files that open,
 * every getter and the dequantization of each tensor's first row
 * (kernels/cpu/quant.c), so a wrong size computation shows up as an overread
 * of the input buffer. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kn.h"
#include "text/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf *g;
    char err[256];
    if (gguf_open_mem(data, size, &g, err, sizeof err))
        return 0;
    (void)gguf_architecture(g);
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f;
        int b;
        struct gguf_str s;
        struct gguf_arr a;
        (void)gguf_get_u32(g, key, &u32);
        (void)gguf_get_i32(g, key, &i32);
        (void)gguf_get_u64(g, key, &u64);
        (void)gguf_get_i64(g, key, &i64);
        (void)gguf_get_f32(g, key, &f);
        (void)gguf_get_bool(g, key, &b);
        if (gguf_get_str(g, key, &s) == 0 && s.len > 0)
            (void)*(volatile const char *)(s.ptr + s.len - 1);
        if (gguf_get_arr(g, key, &a) == 0) {
            for (uint64_t k = 0; k < a.n && k < 64; k++) {
                if (gguf_arr_str(&a, k, &s) == 0 && s.len > 0)
                    (void)*(volatile const char *)(s.ptr + s.len - 1);
                (void)gguf_arr_i64(&a, k, &i64);
                (void)gguf_arr_f32(&a, k, &f);
                (void)gguf_arr_bool(&a, k, &b);
            }
            if (a.n > 0 && gguf_arr_str(&a, a.n - 1, &s) == 0 && s.len > 0)
                (void)*(volatile const char *)(s.ptr + s.len - 1);
        }
    }
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_tensor_find(g, t->name) != t)
            abort();
        if (t->n_elements == 0 || t->ne[0] > (1 << 16))
            continue;
        float *row = malloc((size_t)t->ne[0] * sizeof *row);
        if (row) {
            if (kn_dequant_row(t->type, t->data, row, t->ne[0]) != 0)
                abort(); /* open accepted the type and ne[0] */
            free(row);
        }
    }
    gguf_free(g);
    return 0;
}
