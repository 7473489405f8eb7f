/*
 * gguf.c - GGUF reader: one validating pass at open, then O(1) lookups.
 *
 * The parser walks the file with a cursor (struct rd) whose every read goes
 * through need(), the single bounds check: "n more bytes at off" is tested
 * as n <= size - off (off <= size always holds), which cannot overflow. Each
 * stage sets rd.what ("metadata key 12", "tensor info 3") so a truncation
 * names where it happened. Counts are capped (gguf.h) and compared with the
 * bytes that remain, at the minimum record size, before anything is sized
 * from them, so allocations stay proportional to the file. All multiplies
 * and adds on values from the file use the __builtin_*_overflow checks.
 *
 * Values are not copied: a kv record keeps the file offset of its value and
 * the getters decode it on demand (memcpy, so no alignment needed). String
 * arrays get an index of element offsets at open, so element i is O(1).
 */
#include "text/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/hash.h"
#include "text/ggml_type.h"

#define GGUF_MAGIC "GGUF"
#define MIN_KV_BYTES 14     /* u64 key len + 1 key byte + u32 type + 1 value byte */
#define MIN_TENSOR_BYTES 25 /* u64 name len + 1 name byte + u32 n_dims + u32 type + u64 offset */
#define MAX_ARCH 63

struct kv {
    size_t key_off;             /* into gguf.keys */
    size_t key_len;
    enum gguf_vtype type;
    uint64_t val_off;           /* file offset of the value; for STRING of its bytes; for
                                 * ARRAY of the first element */
    uint64_t str_len;           /* STRING: byte length */
    enum gguf_vtype elem_type;  /* ARRAY */
    uint64_t n;                 /* ARRAY: element count */
    uint64_t *str_off;          /* ARRAY of STRING: n offsets of the u64 length fields */
};

struct hash {
    uint32_t *slot;             /* index + 1, 0 = empty */
    size_t mask;                /* capacity - 1, capacity a power of two */
};

struct gguf {
    const uint8_t *base;
    uint64_t size;
    void *map;                  /* NULL for gguf_open_mem */
    size_t map_len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;
    struct kv *kv;
    size_t n_kv;
    char *keys;                 /* all keys, NUL-terminated, back to back */
    struct hash kv_hash;
    struct gguf_tensor *tensors;
    size_t n_tensors;
    struct hash t_hash;
    char arch[MAX_ARCH + 1];
    int has_arch;
};

/* ---- errors ------------------------------------------------------------------ */

struct rd {
    const uint8_t *base;
    uint64_t size;
    uint64_t off;
    char *err;
    size_t err_len;
    char what[128];             /* what is being read, for truncation messages */
};

static int fail(struct rd *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct rd *r, int code, const char *fmt, ...)
{
    if (r->err && r->err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Up to 64 bytes of s with anything but printable ASCII as '?', for messages
 * that quote names from the file. */
static const char *printable(const char *s, size_t n, char out[72])
{
    size_t k = n < 64 ? n : 64;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c >= 0x20 && c < 0x7F) ? (char)c : '?';
    }
    if (n > 64) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

/* ---- cursor -------------------------------------------------------------------- */

static int need(struct rd *r, uint64_t n)
{
    if (n > r->size - r->off)
        return fail(r, ERR_PARSE, "truncated file (%s at offset %llu)", r->what,
                    (unsigned long long)r->off);
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
    int rc = need(r, 4);
    if (rc)
        return rc;
    memcpy(v, r->base + r->off, 4);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
    int rc = need(r, 8);
    if (rc)
        return rc;
    memcpy(v, r->base + r->off, 8);
    r->off += 8;
    return 0;
}

/* A gguf string of at most max bytes: *off gets the file offset of its bytes. */
static int rd_str(struct rd *r, uint64_t max, uint64_t *off, uint64_t *len)
{
    uint64_t n;
    int rc = rd_u64(r, &n);
    if (rc)
        return rc;
    if (n > max)
        return fail(r, ERR_TOOBIG, "string of %llu bytes exceeds the limit of %llu (%s at offset %llu)",
                    (unsigned long long)n, (unsigned long long)max, r->what,
                    (unsigned long long)(r->off - 8));
    if ((rc = need(r, n)))
        return rc;
    *off = r->off;
    *len = n;
    r->off += n;
    return 0;
}

/* ---- value types -------------------------------------------------------------- */

static const char *const vtype_names[] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < sizeof vtype_names / sizeof vtype_names[0] ? vtype_names[t] : "?";
}

/* Byte size of a fixed-size value type; 0 for STRING, ARRAY, unknown. */
static uint32_t vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

static int vtype_is_int(enum gguf_vtype t)
{
    return t <= GGUF_VT_INT32 || t == GGUF_VT_UINT64 || t == GGUF_VT_INT64;
}

/* An integer from the file as sign + magnitude, so that every stored value
 * (INT64_MIN .. UINT64_MAX) can be range-checked against any target type. */
struct ival {
    int neg;
    uint64_t mag;
};

static struct ival int_at(const uint8_t *p, enum gguf_vtype t)
{
    struct ival v = {0, 0};
    int64_t s = 0;
    switch (t) {
    case GGUF_VT_UINT8: v.mag = p[0]; return v;
    case GGUF_VT_UINT16: { uint16_t x; memcpy(&x, p, 2); v.mag = x; return v; }
    case GGUF_VT_UINT32: { uint32_t x; memcpy(&x, p, 4); v.mag = x; return v; }
    case GGUF_VT_UINT64: memcpy(&v.mag, p, 8); return v;
    case GGUF_VT_INT8: { int8_t x; memcpy(&x, p, 1); s = x; break; }
    case GGUF_VT_INT16: { int16_t x; memcpy(&x, p, 2); s = x; break; }
    case GGUF_VT_INT32: { int32_t x; memcpy(&x, p, 4); s = x; break; }
    case GGUF_VT_INT64: memcpy(&s, p, 8); break;
    default: return v;
    }
    if (s < 0) {
        v.neg = 1;
        v.mag = (uint64_t)(-(s + 1)) + 1; /* no overflow for INT64_MIN */
    } else {
        v.mag = (uint64_t)s;
    }
    return v;
}

/* v as int64 within [lo, hi] (lo <= 0 <= hi), or ERR_TOOBIG. */
static int ival_to_i64(struct ival v, int64_t lo, int64_t hi, int64_t *out)
{
    if (v.neg) {
        uint64_t lim = (uint64_t)(-(lo + 1)) + 1;
        if (v.mag > lim)
            return ERR_TOOBIG;
        *out = v.mag == 0 ? 0 : -(int64_t)(v.mag - 1) - 1;
    } else {
        if (v.mag > (uint64_t)hi)
            return ERR_TOOBIG;
        *out = (int64_t)v.mag;
    }
    return 0;
}

static float float_at(const uint8_t *p, enum gguf_vtype t)
{
    if (t == GGUF_VT_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    double d;
    memcpy(&d, p, 8);
    return (float)d;
}

/* ---- hash tables (keys, tensor names) ----------------------------------------- */

static int hash_init(struct hash *h, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2; /* n <= 2^16: no overflow */
    h->slot = calloc(cap, sizeof *h->slot);
    if (!h->slot)
        return ERR_NOMEM;
    h->mask = cap - 1;
    return 0;
}

/* Find name; name_at(ctx, idx) gives the name of entry idx. Returns the slot
 * where name is or would go. */
typedef const char *(*name_fn)(const void *ctx, size_t idx, size_t *len);

static size_t hash_slot(const struct hash *h, const char *name, size_t len, name_fn name_at,
                        const void *ctx)
{
    size_t i = (size_t)hash_fnv(name, len) & h->mask;
    while (h->slot[i]) {
        size_t l;
        const char *s = name_at(ctx, h->slot[i] - 1, &l);
        if (l == len && memcmp(s, name, len) == 0)
            break;
        i = (i + 1) & h->mask;
    }
    return i;
}

static const char *kv_name_at(const void *ctx, size_t idx, size_t *len)
{
    const struct gguf *g = ctx;
    *len = g->kv[idx].key_len;
    return g->keys + g->kv[idx].key_off;
}

static const char *tensor_name_at(const void *ctx, size_t idx, size_t *len)
{
    const struct gguf *g = ctx;
    *len = strlen(g->tensors[idx].name);
    return g->tensors[idx].name;
}

/* ---- metadata parsing ------------------------------------------------------------ */

static int parse_array(struct rd *r, struct kv *kv, const char *key)
{
    uint32_t et;
    uint64_t n;
    int rc;
    if ((rc = rd_u32(r, &et)) || (rc = rd_u64(r, &n)))
        return rc;
    if (et == GGUF_VT_ARRAY)
        return fail(r, ERR_UNSUPPORTED, "nested array in metadata key '%s' is not supported", key);
    if (et != GGUF_VT_STRING && vtype_size(et) == 0)
        return fail(r, ERR_PARSE, "unknown array element type %u in metadata key '%s' at offset %llu",
                    et, key, (unsigned long long)(r->off - 12));
    if (n > GGUF_MAX_ARRAY_LEN)
        return fail(r, ERR_TOOBIG, "array of %llu elements in metadata key '%s' exceeds the limit of %u",
                    (unsigned long long)n, key, GGUF_MAX_ARRAY_LEN);
    kv->elem_type = (enum gguf_vtype)et;
    kv->n = n;
    kv->val_off = r->off;
    if (et != GGUF_VT_STRING) {
        uint64_t bytes = n * vtype_size(et); /* n <= 2^24: no overflow */
        if ((rc = need(r, bytes)))
            return rc;
        if (et == GGUF_VT_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (r->base[r->off + i] > 1)
                    return fail(r, ERR_PARSE, "invalid bool %u in element %llu of metadata key '%s'",
                                r->base[r->off + i], (unsigned long long)i, key);
        r->off += bytes;
        return 0;
    }
    /* each string takes at least its 8-byte length: bounds the index by the file */
    if (n > (r->size - r->off) / 8)
        return fail(r, ERR_PARSE, "truncated file (array of %llu strings in metadata key '%s' at offset %llu)",
                    (unsigned long long)n, key, (unsigned long long)r->off);
    if (n > 0) {
        kv->str_off = malloc(n * sizeof *kv->str_off);
        if (!kv->str_off)
            return fail(r, ERR_NOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off, len;
        kv->str_off[i] = r->off;
        if ((rc = rd_str(r, GGUF_MAX_STRING_LEN, &off, &len)))
            return rc;
    }
    return 0;
}

static int parse_kvs(struct rd *r, struct gguf *g, uint64_t n_kv)
{
    struct buf keys;
    int rc = 0;
    buf_init(&keys, (size_t)r->size + (size_t)n_kv);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    if (!g->kv || hash_init(&g->kv_hash, n_kv)) {
        rc = fail(r, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        struct kv *kv = &g->kv[i];
        uint64_t key_off, key_len;
        uint32_t t;
        char pk[72];
        snprintf(r->what, sizeof r->what, "metadata key %llu", (unsigned long long)i);
        if ((rc = rd_str(r, GGUF_MAX_KEY_LEN, &key_off, &key_len)))
            goto out;
        const char *key = (const char *)r->base + key_off;
        if (key_len == 0) {
            rc = fail(r, ERR_PARSE, "empty key (metadata key %llu at offset %llu)",
                      (unsigned long long)i, (unsigned long long)(key_off - 8));
            goto out;
        }
        if (memchr(key, 0, key_len)) {
            rc = fail(r, ERR_PARSE, "NUL byte in key '%s' (metadata key %llu)",
                      printable(key, key_len, pk), (unsigned long long)i);
            goto out;
        }
        kv->key_off = keys.len;
        kv->key_len = key_len;
        if ((rc = buf_append(&keys, key, key_len)) || (rc = buf_append_byte(&keys, '\0'))) {
            rc = fail(r, rc, "out of memory");
            goto out;
        }
        g->keys = keys.data; /* name_at reads through g->keys */
        g->n_kv = i + 1;
        size_t slot = hash_slot(&g->kv_hash, key, key_len, kv_name_at, g);
        if (g->kv_hash.slot[slot]) {
            rc = fail(r, ERR_PARSE, "duplicate metadata key '%s' (keys %u and %llu)",
                      printable(key, key_len, pk), g->kv_hash.slot[slot] - 1, (unsigned long long)i);
            goto out;
        }
        g->kv_hash.slot[slot] = (uint32_t)i + 1;
        printable(key, key_len, pk);
        snprintf(r->what, sizeof r->what, "value of metadata key '%s'", pk);
        if ((rc = rd_u32(r, &t)))
            goto out;
        if (t > GGUF_VT_FLOAT64) {
            rc = fail(r, ERR_PARSE, "unknown value type %u in metadata key '%s' at offset %llu", t, pk,
                      (unsigned long long)(r->off - 4));
            goto out;
        }
        kv->type = (enum gguf_vtype)t;
        if (t == GGUF_VT_ARRAY) {
            if ((rc = parse_array(r, kv, pk)))
                goto out;
        } else if (t == GGUF_VT_STRING) {
            if ((rc = rd_str(r, GGUF_MAX_STRING_LEN, &kv->val_off, &kv->str_len)))
                goto out;
        } else {
            kv->val_off = r->off;
            if ((rc = need(r, vtype_size(t))))
                goto out;
            if (t == GGUF_VT_BOOL && r->base[r->off] > 1) {
                rc = fail(r, ERR_PARSE, "invalid bool %u in metadata key '%s'", r->base[r->off], pk);
                goto out;
            }
            r->off += vtype_size(t);
        }
        if (strcmp(g->keys + kv->key_off, "general.alignment") == 0) {
            uint32_t a = 0;
            if (t != GGUF_VT_UINT32) {
                rc = fail(r, ERR_PARSE, "general.alignment has type %s, expected UINT32",
                          gguf_vtype_name(kv->type));
                goto out;
            }
            memcpy(&a, r->base + kv->val_off, 4);
            if (a == 0 || (a & (a - 1)) != 0) {
                rc = fail(r, ERR_PARSE, "general.alignment %u is not a power of two", a);
                goto out;
            }
            g->alignment = a;
        }
    }
    g->keys = buf_detach(&keys, NULL);
    if (!g->keys)
        rc = fail(r, ERR_NOMEM, "out of memory");
out:
    if (rc) {
        g->keys = NULL; /* still owned by the buffer */
        buf_release(&keys);
    }
    return rc;
}

/* ---- tensor parsing -------------------------------------------------------------- */

static int parse_tensor_info(struct rd *r, struct gguf *g, size_t i)
{
    struct gguf_tensor *t = &g->tensors[i];
    uint64_t name_off, name_len, dim;
    uint32_t n_dims, type;
    int rc;
    char pn[72];
    snprintf(r->what, sizeof r->what, "tensor info %zu", i);
    if ((rc = rd_u64(r, &name_len)))
        return rc;
    if (name_len == 0 || name_len > GGUF_MAX_NAME)
        return fail(r, ERR_PARSE, "tensor info %zu has a name of %llu bytes (must be 1..%u) at offset %llu",
                    i, (unsigned long long)name_len, GGUF_MAX_NAME, (unsigned long long)(r->off - 8));
    if ((rc = need(r, name_len)))
        return rc;
    name_off = r->off;
    r->off += name_len;
    const char *name = (const char *)r->base + name_off;
    printable(name, name_len, pn);
    if (memchr(name, 0, name_len))
        return fail(r, ERR_PARSE, "NUL byte in tensor name '%s' (tensor info %zu)", pn, i);
    memcpy(t->name, name, name_len);
    t->name[name_len] = '\0';
    snprintf(r->what, sizeof r->what, "tensor info %zu '%s'", i, pn);
    if ((rc = rd_u32(r, &n_dims)))
        return rc;
    if (n_dims > GGUF_MAX_DIMS)
        return fail(r, ERR_PARSE, "tensor %s has %u dimensions (max %d)", pn, n_dims, GGUF_MAX_DIMS);
    t->n_dims = n_dims;
    int64_t n_el = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= n_dims)
            continue;
        if ((rc = rd_u64(r, &dim)))
            return rc;
        if (dim > INT64_MAX)
            return fail(r, ERR_PARSE, "tensor %s: dimension %d is %llu (does not fit in int64)", pn, d,
                        (unsigned long long)dim);
        t->ne[d] = (int64_t)dim;
        if (__builtin_mul_overflow(n_el, t->ne[d], &n_el))
            return fail(r, ERR_PARSE, "tensor %s: element count overflows int64", pn);
    }
    t->n_elements = n_el;
    if ((rc = rd_u32(r, &type)) || (rc = rd_u64(r, &t->offset)))
        return rc;
    t->type = type;
    if (!ggml_type_name(type))
        return fail(r, ERR_UNSUPPORTED, "unknown tensor type id %u in %s", type, pn);
    if (!ggml_type_supported(type))
        return fail(r, ERR_UNSUPPORTED, "unsupported tensor type %s in %s", ggml_type_name(type), pn);
    uint32_t be = ggml_type_block_elems(type), bb = ggml_type_block_bytes(type);
    if (t->ne[0] % be != 0)
        return fail(r, ERR_PARSE, "tensor %s: ne[0] = %lld is not a multiple of the %s block size %u", pn,
                    (long long)t->ne[0], ggml_type_name(type), be);
    uint64_t size = (uint64_t)(t->ne[0] / be);
    if (__builtin_mul_overflow(size, (uint64_t)bb, &size))
        goto too_big;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(size, (uint64_t)t->ne[d], &size))
            goto too_big;
    t->size_bytes = size;
    return 0;
too_big:
    return fail(r, ERR_PARSE, "tensor %s: byte size overflows", pn);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Place each tensor's data in the file and check bounds, alignment, overlap. */
static int place_tensors(struct rd *r, struct gguf *g)
{
    int rc = 0;
    const struct gguf_tensor **order = NULL;
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        uint64_t rel = t->offset; /* as stored: relative to data_start */
        if (rel % g->alignment != 0)
            return fail(r, ERR_PARSE, "tensor %s data offset %llu is not a multiple of the alignment %u",
                        t->name, (unsigned long long)rel, g->alignment);
        uint64_t start, end;
        int wrap = __builtin_add_overflow(g->data_start, rel, &start);
        wrap |= __builtin_add_overflow(start, t->size_bytes, &end);
        if (wrap || end > g->size)
            return fail(r, ERR_PARSE, "tensor %s data [%llu, %llu) outside the file (%llu bytes)", t->name,
                        (unsigned long long)start, wrap ? (unsigned long long)UINT64_MAX : (unsigned long long)end,
                        (unsigned long long)g->size);
        t->offset = start;
        t->data = g->base + start;
    }
    if (g->n_tensors < 2)
        return 0;
    order = malloc(g->n_tensors * sizeof *order);
    if (!order)
        return fail(r, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    for (size_t i = 0; i + 1 < g->n_tensors; i++) {
        const struct gguf_tensor *a = order[i], *b = order[i + 1];
        if (a->offset + a->size_bytes > b->offset) { /* both within the file: no overflow */
            rc = fail(r, ERR_PARSE, "tensor %s data [%llu, %llu) overlaps tensor %s at %llu", a->name,
                      (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size_bytes),
                      b->name, (unsigned long long)b->offset);
            break;
        }
    }
    free(order);
    return rc;
}

static int parse_tensors(struct rd *r, struct gguf *g, uint64_t n_t)
{
    int rc;
    if (n_t > (r->size - r->off) / MIN_TENSOR_BYTES)
        return fail(r, ERR_PARSE, "truncated file (%llu tensor infos cannot fit in the %llu bytes left at offset %llu)",
                    (unsigned long long)n_t, (unsigned long long)(r->size - r->off), (unsigned long long)r->off);
    g->tensors = calloc(n_t ? n_t : 1, sizeof *g->tensors);
    if (!g->tensors || hash_init(&g->t_hash, n_t))
        return fail(r, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_t; i++) {
        if ((rc = parse_tensor_info(r, g, i)))
            return rc;
        g->n_tensors = i + 1;
        const char *name = g->tensors[i].name;
        size_t slot = hash_slot(&g->t_hash, name, strlen(name), tensor_name_at, g);
        if (g->t_hash.slot[slot])
            return fail(r, ERR_PARSE, "duplicate tensor name %s (tensor infos %u and %zu)", name,
                        g->t_hash.slot[slot] - 1, i);
        g->t_hash.slot[slot] = (uint32_t)i + 1;
    }
    if (n_t == 0) {
        g->data_start = r->off; /* ggml: no padding seek without tensors */
        return 0;
    }
    uint64_t pad = (g->alignment - r->off % g->alignment) % g->alignment;
    if (pad > r->size - r->off)
        return fail(r, ERR_PARSE, "truncated file (padding before the tensor data at offset %llu)",
                    (unsigned long long)r->off);
    g->data_start = r->off + pad;
    return place_tensors(r, g);
}

/* ---- open / free ------------------------------------------------------------------ */

static int parse(struct gguf *g, char *err, size_t err_len)
{
    struct rd r = {.base = g->base, .size = g->size, .off = 0, .err = err, .err_len = err_len};
    uint64_t n_t, n_kv;
    int rc;
    snprintf(r.what, sizeof r.what, "magic");
    if ((rc = need(&r, 4)))
        return rc;
    if (memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return fail(&r, ERR_PARSE, "bad magic %02x %02x %02x %02x (not a GGUF file)", g->base[0], g->base[1],
                    g->base[2], g->base[3]);
    r.off = 4;
    snprintf(r.what, sizeof r.what, "version");
    if ((rc = rd_u32(&r, &g->version)))
        return rc;
    if (g->version != 0 && (g->version & 0xFFFFu) == 0)
        return fail(&r, ERR_UNSUPPORTED, "unsupported GGUF version 0x%x (a big-endian file? only little-endian is supported)",
                    g->version);
    if (g->version != 2 && g->version != 3)
        return fail(&r, ERR_UNSUPPORTED, "unsupported GGUF version %u", g->version);
    snprintf(r.what, sizeof r.what, "header");
    if ((rc = rd_u64(&r, &n_t)) || (rc = rd_u64(&r, &n_kv)))
        return rc;
    if (n_t > GGUF_MAX_TENSORS)
        return fail(&r, ERR_TOOBIG, "tensor count %llu exceeds the limit of %u", (unsigned long long)n_t,
                    GGUF_MAX_TENSORS);
    if (n_kv > GGUF_MAX_KV)
        return fail(&r, ERR_TOOBIG, "metadata count %llu exceeds the limit of %u", (unsigned long long)n_kv,
                    GGUF_MAX_KV);
    if (n_kv > (r.size - r.off) / MIN_KV_BYTES)
        return fail(&r, ERR_PARSE, "truncated file (%llu metadata records cannot fit in the %llu bytes left at offset %llu)",
                    (unsigned long long)n_kv, (unsigned long long)(r.size - r.off), (unsigned long long)r.off);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((rc = parse_kvs(&r, g, n_kv)) || (rc = parse_tensors(&r, g, n_t)))
        return rc;
    long ai = gguf_kv_find(g, "general.architecture");
    if (ai >= 0) {
        const struct kv *kv = &g->kv[ai];
        if (kv->type == GGUF_VT_STRING && kv->str_len <= MAX_ARCH &&
            !memchr(g->base + kv->val_off, 0, kv->str_len)) {
            memcpy(g->arch, g->base + kv->val_off, kv->str_len);
            g->arch[kv->str_len] = '\0';
            g->has_arch = 1;
        }
    }
    return 0;
}

void gguf_free(struct gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (size_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_off);
    free(g->kv);
    free(g->keys);
    free(g->kv_hash.slot);
    free(g->tensors);
    free(g->t_hash.slot);
    if (g->map)
        munmap(g->map, g->map_len);
    free(g);
}

static int open_common(struct gguf *g, struct gguf **out, char *err, size_t err_len)
{
    int rc = parse(g, err, err_len);
    if (rc) {
        gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open_mem(const void *data, size_t size, struct gguf **out, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    struct gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (err && err_len)
            snprintf(err, err_len, "out of memory");
        return ERR_NOMEM;
    }
    static const uint8_t empty[1];
    g->base = size ? data : empty;
    g->size = size;
    return open_common(g, out, err, err_len);
}

int gguf_open(const char *path, struct gguf **out, char *err, size_t err_len)
{
    struct stat st;
    struct gguf *g = NULL;
    int fd, rc;
    if (err && err_len)
        err[0] = '\0';
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && err_len)
            snprintf(err, err_len, "cannot open '%s': %s", path, strerror(errno));
        return ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && err_len)
            snprintf(err, err_len, "'%s' is not a regular file", path);
        rc = ERR_IO;
        goto out;
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        if (err && err_len)
            snprintf(err, err_len, "out of memory");
        rc = ERR_NOMEM;
        goto out;
    }
    if (st.st_size == 0) {
        static const uint8_t empty[1];
        g->base = empty;
        g->size = 0;
    } else {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            if (err && err_len)
                snprintf(err, err_len, "cannot map '%s': %s", path, strerror(errno));
            free(g);
            rc = ERR_IO;
            goto out;
        }
        g->map = m;
        g->map_len = (size_t)st.st_size;
        g->base = m;
        g->size = (uint64_t)st.st_size;
    }
    rc = open_common(g, out, err, err_len);
out:
    close(fd);
    return rc;
}

/* ---- accessors -------------------------------------------------------------------- */

uint32_t gguf_version(const struct gguf *g) { return g->version; }
uint32_t gguf_alignment(const struct gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const struct gguf *g) { return g->data_start; }
uint64_t gguf_file_size(const struct gguf *g) { return g->size; }

const char *gguf_architecture(const struct gguf *g)
{
    return g->has_arch ? g->arch : NULL;
}

size_t gguf_kv_count(const struct gguf *g) { return g->n_kv; }

const char *gguf_kv_key(const struct gguf *g, size_t i)
{
    return i < g->n_kv ? g->keys + g->kv[i].key_off : NULL;
}

enum gguf_vtype gguf_kv_type(const struct gguf *g, size_t i)
{
    return i < g->n_kv ? g->kv[i].type : (enum gguf_vtype)-1;
}

long gguf_kv_find(const struct gguf *g, const char *key)
{
    if (!g->kv_hash.slot || !key)
        return -1;
    size_t slot = hash_slot(&g->kv_hash, key, strlen(key), kv_name_at, g);
    return (long)g->kv_hash.slot[slot] - 1;
}

static const struct kv *find(const struct gguf *g, const char *key)
{
    long i = gguf_kv_find(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

static int get_int(const struct gguf *g, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (!vtype_is_int(kv->type))
        return ERR_INVAL;
    return ival_to_i64(int_at(g->base + kv->val_off, kv->type), lo, hi, out);
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
    int64_t v;
    int rc = get_int(g, key, 0, UINT32_MAX, &v);
    if (!rc)
        *out = (uint32_t)v;
    return rc;
}

int gguf_get_i32(const struct gguf *g, const char *key, int32_t *out)
{
    int64_t v;
    int rc = get_int(g, key, INT32_MIN, INT32_MAX, &v);
    if (!rc)
        *out = (int32_t)v;
    return rc;
}

int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out)
{
    return get_int(g, key, INT64_MIN, INT64_MAX, out);
}

int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (!vtype_is_int(kv->type))
        return ERR_INVAL;
    struct ival v = int_at(g->base + kv->val_off, kv->type);
    if (v.neg && v.mag)
        return ERR_TOOBIG;
    *out = v.mag;
    return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (kv->type != GGUF_VT_FLOAT32 && kv->type != GGUF_VT_FLOAT64)
        return ERR_INVAL;
    *out = float_at(g->base + kv->val_off, kv->type);
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, int *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (kv->type != GGUF_VT_BOOL)
        return ERR_INVAL;
    *out = g->base[kv->val_off];
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (kv->type != GGUF_VT_STRING)
        return ERR_INVAL;
    out->ptr = (const char *)g->base + kv->val_off;
    out->len = kv->str_len;
    return 0;
}

int gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out)
{
    const struct kv *kv = find(g, key);
    if (!kv)
        return ERR_NOTFOUND;
    if (kv->type != GGUF_VT_ARRAY)
        return ERR_INVAL;
    out->elem_type = kv->elem_type;
    out->n = kv->n;
    out->data = g->base + kv->val_off;
    out->str_off_ = kv->str_off;
    out->base_ = g->base;
    return 0;
}

int gguf_arr_str(const struct gguf_arr *a, uint64_t i, struct gguf_str *out)
{
    if (i >= a->n)
        return ERR_NOTFOUND;
    if (a->elem_type != GGUF_VT_STRING)
        return ERR_INVAL;
    uint64_t len;
    memcpy(&len, a->base_ + a->str_off_[i], 8);
    out->ptr = (const char *)a->base_ + a->str_off_[i] + 8;
    out->len = len;
    return 0;
}

int gguf_arr_i64(const struct gguf_arr *a, uint64_t i, int64_t *out)
{
    if (i >= a->n)
        return ERR_NOTFOUND;
    if (!vtype_is_int(a->elem_type))
        return ERR_INVAL;
    const uint8_t *p = (const uint8_t *)a->data + i * vtype_size(a->elem_type);
    return ival_to_i64(int_at(p, a->elem_type), INT64_MIN, INT64_MAX, out);
}

int gguf_arr_f32(const struct gguf_arr *a, uint64_t i, float *out)
{
    if (i >= a->n)
        return ERR_NOTFOUND;
    if (a->elem_type != GGUF_VT_FLOAT32 && a->elem_type != GGUF_VT_FLOAT64)
        return ERR_INVAL;
    *out = float_at((const uint8_t *)a->data + i * vtype_size(a->elem_type), a->elem_type);
    return 0;
}

int gguf_arr_bool(const struct gguf_arr *a, uint64_t i, int *out)
{
    if (i >= a->n)
        return ERR_NOTFOUND;
    if (a->elem_type != GGUF_VT_BOOL)
        return ERR_INVAL;
    *out = ((const uint8_t *)a->data)[i];
    return 0;
}

size_t gguf_tensor_count(const struct gguf *g) { return g->n_tensors; }

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_find(const struct gguf *g, const char *name)
{
    if (!g->t_hash.slot || !name)
        return NULL;
    size_t slot = hash_slot(&g->t_hash, name, strlen(name), tensor_name_at, g);
    return g->t_hash.slot[slot] ? &g->tensors[g->t_hash.slot[slot] - 1] : NULL;
}
