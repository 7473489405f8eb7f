/* buf.c - growable byte buffers with a hard cap (see buf.h). */
#include "buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

void buf_init(struct buf *b, size_t max_bytes)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->max_bytes = max_bytes;
}

void buf_release(struct buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

int buf_grow_array(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return ERR_NOMEM;
        nc *= 2;
    }
    if (elem && nc > SIZE_MAX / elem)
        return ERR_NOMEM;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return ERR_NOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

int buf_reserve(struct buf *b, size_t n)
{
    if (n > b->max_bytes || b->len > b->max_bytes - n)
        return ERR_TOOBIG;
    size_t need = b->len + n + 1; /* +1 for the terminator */
    if (need <= b->alloc)
        return 0;
    size_t alloc = b->alloc ? b->alloc : 64;
    while (alloc < need)
        alloc = alloc > ((size_t)-1) / 2 ? need : alloc * 2;
    /* never allocate far beyond what the cap allows */
    if (b->max_bytes < SIZE_MAX && alloc > b->max_bytes + 1)
        alloc = b->max_bytes + 1;
    char *p = realloc(b->data, alloc);
    if (!p)
        return ERR_NOMEM;
    if (!b->data)
        p[0] = '\0';
    b->data = p;
    b->alloc = alloc;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_append_byte(struct buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return ERR_INVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *buf_detach(struct buf *b, size_t *len_out)
{
    if (!b->data && buf_reserve(b, 0))
        return NULL;
    char *p = b->data;
    if (len_out)
        *len_out = b->len;
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    return p;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}
