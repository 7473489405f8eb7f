/* libFuzzer target: the S3 answers' XML reader (jobd/blob/s3xml.c) on
 * hostile bytes, through each of its three readers and the plain walk.
 * Oracles: no crash or sanitizer report; every path handed to the callback
 * is NUL-terminated within S3XML_PATH_MAX, every text within S3XML_TEXT_MAX
 * and its length is strlen's (no NUL inside: the walk refuses raw NULs and
 * &#0;); a listing's objects carry a non-empty key; a success of the error
 * reader gives NUL-terminated fields.
 * fuzz-src: jobd/blob/s3xml.c */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "jobd/blob/s3xml.h"

static int on_elem(void *ctx, const char *path, const char *text, size_t n)
{
    (void)ctx;
    if (strnlen(path, S3XML_PATH_MAX) >= S3XML_PATH_MAX || n >= S3XML_TEXT_MAX || strlen(text) != n)
        __builtin_trap();
    return 0;
}

static int on_obj(void *ctx, const struct s3xml_object *o)
{
    (void)ctx;
    if (!o->key[0] || strnlen(o->key, sizeof o->key) >= sizeof o->key)
        __builtin_trap();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *x = (const char *)data;
    s3xml_walk(x, size, on_elem, NULL);
    struct s3xml_error e;
    if (s3xml_error_parse(x, size, &e) == 0 &&
        (strnlen(e.code, sizeof e.code) >= sizeof e.code || strnlen(e.message, sizeof e.message) >= sizeof e.message))
        __builtin_trap();
    char id[64];
    if (s3xml_upload_id(x, size, id, sizeof id) == 0 && (!id[0] || strnlen(id, sizeof id) >= sizeof id))
        __builtin_trap();
    int trunc = 0;
    char tok[128];
    if (s3xml_list_parse(x, size, on_obj, NULL, &trunc, tok, sizeof tok) == 0 && trunc && !tok[0])
        __builtin_trap();
    return 0;
}
