/*
 * inspect.c - jobworker --inspect: print what the GGUF loader sees.
 *
 * Output is "key: value" lines, one fact per line, so scripts can grep it:
 *
 *   file: M.gguf (98362432 bytes, GGUF v3, alignment 32)
 *   architecture: llama
 *   llama.block_count: 30
 *   ...
 *   tensors: 272 (96576768 bytes of weights)
 *   tensor types: F32 61, Q4_1 210, Q8_0 1
 */
#include "worker/inspect.h"

#include <inttypes.h>
#include <string.h>

#include "kernels/kn.h"
#include "text/gguf.h"

/* At most max bytes of s, control characters shown as '?' (strings come from
 * the file and must not drive the terminal). */
static void put_text(const char *s, uint64_t len, uint64_t max, FILE *out)
{
    for (uint64_t i = 0; i < len && i < max; i++)
        fputc((unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i], out);
    if (len > max)
        fputs("...", out);
}

/* One scalar or string value, or the shape of an array. */
static void print_value(const struct gguf *g, size_t i, FILE *out)
{
    const char *key = gguf_kv_key(g, i);
    enum gguf_vtype t = gguf_kv_type(g, i);
    uint64_t u;
    int64_t s;
    float f;
    int b;
    struct gguf_str str;
    struct gguf_arr a;
    if (gguf_get_u64(g, key, &u) == 0)
        fprintf(out, "%" PRIu64, u);
    else if (gguf_get_i64(g, key, &s) == 0)
        fprintf(out, "%" PRId64, s);
    else if (gguf_get_f32(g, key, &f) == 0)
        fprintf(out, "%g", (double)f);
    else if (gguf_get_bool(g, key, &b) == 0)
        fputs(b ? "true" : "false", out);
    else if (gguf_get_str(g, key, &str) == 0)
        put_text(str.ptr, str.len, 80, out);
    else if (gguf_get_arr(g, key, &a) == 0)
        fprintf(out, "[%" PRIu64 " x %s]", a.n, gguf_vtype_name(a.elem_type));
    else
        fprintf(out, "(%s)", gguf_vtype_name(t));
}

int inspect_model(const char *path, FILE *out, char *err, size_t err_len)
{
    struct gguf *g;
    int rc = gguf_open(path, &g, err, err_len);
    if (rc)
        return rc;
    const char *arch = gguf_architecture(g);
    fprintf(out, "file: %s (%" PRIu64 " bytes, GGUF v%u, alignment %u)\n", path, gguf_file_size(g),
            gguf_version(g), gguf_alignment(g));
    fprintf(out, "architecture: %s\n", arch ? arch : "(none)");
    struct gguf_str name;
    if (gguf_get_str(g, "general.name", &name) == 0) {
        fputs("name: ", out);
        put_text(name.ptr, name.len, 200, out);
        fputc('\n', out);
    }
    size_t alen = arch ? strlen(arch) : 0;
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        int hparam = arch && strncmp(key, arch, alen) == 0 && key[alen] == '.';
        int tok = strncmp(key, "tokenizer.ggml.", 15) == 0;
        if (!hparam && !tok)
            continue;
        put_text(key, strlen(key), 200, out);
        fputs(": ", out);
        print_value(g, i, out);
        fputc('\n', out);
    }
    uint64_t bytes = 0, hist[64] = {0};
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        bytes += t->size_bytes;
        if (t->type < 64)
            hist[t->type]++;
    }
    fprintf(out, "tensors: %zu (%" PRIu64 " bytes of weights)\n", gguf_tensor_count(g), bytes);
    fputs("tensor types:", out);
    const char *sep = " ";
    for (uint32_t t = 0; t < 64; t++) {
        if (!hist[t])
            continue;
        fprintf(out, "%s%s %" PRIu64, sep, ggml_type_name(t), hist[t]);
        sep = ", ";
    }
    fputc('\n', out);
    gguf_free(g);
    return 0;
}
