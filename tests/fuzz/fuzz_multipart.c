/* libFuzzer target: the streaming multipart/form-data parser on hostile
 * bytes. Oracle: split invariance - feeding the input whole, and in pieces
 * cut at fuzzer-chosen points, must give the same events (part names,
 * filenames, data bytes, ends) and the same result. Byte 0 picks the
 * boundary, byte 1 the piece size.
 * fuzz-src: jobd/http/multipart.c */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"
#include "jobd/http/multipart.h"

struct log {
    struct buf b;
};

static int on_begin(void *ctx, const char *name, const char *filename)
{
    struct log *l = ctx;
    buf_printf(&l->b, "B[%s][%s]", name, filename ? filename : "(none)");
    return 0;
}

static int on_data(void *ctx, const char *d, size_t n)
{
    struct log *l = ctx;
    if (n == 0)
        __builtin_trap(); /* the contract: n > 0 */
    buf_append(&l->b, d, n);
    return 0;
}

static int on_end(void *ctx)
{
    struct log *l = ctx;
    buf_append_str(&l->b, "E");
    return 0;
}

static const struct mp_callbacks cb = {on_begin, on_data, on_end};

static int run(const char *boundary, const uint8_t *d, size_t n, size_t piece, struct log *l)
{
    struct mp_parser p;
    if (mp_init(&p, boundary, &cb, l))
        __builtin_trap();
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += piece)
        rc = mp_feed(&p, (const char *)d + i, n - i < piece ? n - i : piece);
    if (!rc)
        rc = mp_finish(&p);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const char *const boundaries[] = {"b", "xyz", "----WebKitFormBoundary7MA4YWxkTrZu0gW", "a'()+_,-./:=?"};
    const char *boundary = boundaries[data[0] % 4];
    size_t piece = 1 + data[1] % 17;
    data += 2;
    size -= 2;
    struct log a, b;
    buf_init(&a.b, 1u << 24);
    buf_init(&b.b, 1u << 24);
    int ra = run(boundary, data, size, size ? size : 1, &a);
    int rb = run(boundary, data, size, piece, &b);
    if (ra != rb || a.b.len != b.b.len || (a.b.len && memcmp(a.b.data, b.b.data, a.b.len) != 0))
        __builtin_trap();
    buf_release(&a.b);
    buf_release(&b.b);
    char ct[200], out[MP_MAX_BOUNDARY + 1];
    size_t n = size < sizeof ct - 1 ? size : sizeof ct - 1;
    memcpy(ct, data, n);
    ct[n] = '\0';
    if (mp_boundary_from_content_type(ct, out, sizeof out) == 0 && strlen(out) > MP_MAX_BOUNDARY)
        __builtin_trap();
    return 0;
}
