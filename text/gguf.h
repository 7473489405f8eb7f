/*
 * gguf.h - read-only GGUF (v2, v3) model files: metadata and tensor table.
 *
 * A GGUF file is a header (magic "GGUF", u32 version, u64 tensor count, u64
 * metadata count), the metadata key/value records, the tensor-info records,
 * zero padding up to general.alignment (default 32), then the tensor data;
 * each tensor lies at data_start + its offset. Everything is little-endian.
 *
 *   off 0   magic 'G''G''U''F'      off 4  u32 version (2 or 3)
 *   off 8   u64 tensor_count        off 16 u64 kv_count
 *   off 24  kv_count x { str key, u32 vtype, value }
 *           tensor_count x { str name, u32 n_dims, n_dims x u64 ne, u32 ggml_type, u64 offset }
 *           padding to alignment, data
 *   str   = u64 length + bytes (no NUL);  array value = u32 elem vtype, u64 count, elements
 *
 * Design: gguf_open maps the file read-only (MAP_PRIVATE) and validates the
 * whole structure once, up front: every length, count and offset is checked
 * against the bytes that remain, with overflow-safe arithmetic, and against
 * the caps below before anything is allocated; a file that opens is
 * consistent, so the getters afterwards only check types. A malformed file
 * gives an error code and a message naming the problem and where it is
 * (e.g. "truncated file (metadata key 12 at offset 4242)"); it never
 * crashes (tests/unit/text/test_gguf.c, tests/fuzz/fuzz_gguf.c). The parsed form
 * borrows from the mapping: strings and tensor data are pointers into it,
 * valid until gguf_free. Metadata keys and tensor names are copied
 * NUL-terminated; lookups by key or name go through hash tables.
 *
 * Stricter than the spec where ggml is: v1 and big-endian files are
 * rejected; keys are non-empty and unique; BOOL values are 0 or 1; arrays do
 * not nest; general.alignment, if present, is a UINT32 power of two; tensor
 * names are 1..63 bytes (GGML_MAX_NAME) and unique, n_dims <= 4, dims and
 * their product fit in int64, ne[0] is a multiple of the type's block size,
 * every tensor's data offset is a multiple of the alignment and its bytes
 * [offset, offset + size) lie inside the file and do not overlap another
 * tensor's. Tensor types other than F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q4_K, Q5_K, Q6_K are rejected at open ("unsupported tensor type Q3_K
 * in blk.3.ffn_down.weight"), since this engine could not use them.
 * Not checked (as ggml): that tensor offsets are contiguous, that padding is
 * zero, that strings are valid UTF-8 (callers that need UTF-8 check it).
 *
 * The mapped file must not be truncated while open (reads past its new end
 * would raise SIGBUS); model files are replaced, not rewritten in place.
 *
 * Thread use: open on one thread; after that a struct gguf is immutable and
 * may be read from any number of threads.
 */
#ifndef TEXT_GGUF_H
#define TEXT_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Caps, checked before allocating. Each is far above real models (272
 * tensors, 36 keys, 49k-256k vocab entries) and keeps a hostile header from
 * asking for absurd memory; counts are also bounded by the file size. */
#define GGUF_MAX_TENSORS (1u << 16)      /* tensor infos per file */
#define GGUF_MAX_KV (1u << 16)           /* metadata key/value pairs */
#define GGUF_MAX_KEY_LEN 65535u          /* bytes of a metadata key (the spec's limit) */
#define GGUF_MAX_STRING_LEN (1u << 26)   /* bytes of one string value (64 MiB) */
#define GGUF_MAX_ARRAY_LEN (1u << 24)    /* elements of one array value (16 Mi) */
#define GGUF_MAX_NAME 63u                /* bytes of a tensor name (ggml: 64 incl. NUL) */
#define GGUF_MAX_DIMS 4                  /* dimensions of a tensor */
#define GGUF_DEFAULT_ALIGNMENT 32u

/* Metadata value types (gguf_metadata_value_type). */
enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
};

/* A string inside the file: len bytes at ptr, NOT NUL-terminated. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

/* A view of an array value (gguf_get_arr); valid until gguf_free. */
struct gguf_arr {
    enum gguf_vtype elem_type;
    uint64_t n;                 /* element count */
    const void *data;           /* numeric/bool types: n packed LE elements, unaligned */
    const uint64_t *str_off_;   /* private: file offsets of string elements */
    const uint8_t *base_;       /* private: file start */
};

/* One tensor (gguf_tensor_at / gguf_tensor_find); valid until gguf_free. */
struct gguf_tensor {
    char name[GGUF_MAX_NAME + 1];  /* NUL-terminated */
    uint32_t type;                 /* ggml type id: one of enum ggml_type (kernels/kn.h) */
    uint32_t n_dims;               /* 0..4 as stored */
    int64_t ne[GGUF_MAX_DIMS];     /* ne[0] fastest-varying (a row); missing dims are 1 */
    int64_t n_elements;            /* product of ne */
    uint64_t offset;               /* absolute file offset of the data */
    uint64_t size_bytes;           /* ne[0]/block * block_bytes * ne[1] * ne[2] * ne[3] */
    const void *data;              /* size_bytes bytes in the mapping; aligned to the file's
                                    * alignment relative to the file start (gguf_open: the
                                    * mapping is page-aligned) */
};

struct gguf;

/* Map and validate the GGUF file at path. On success returns 0 and *out is a
 * new object for gguf_free. Errors (err gets a one-line message naming the
 * problem and its offset, if err_len > 0; *out untouched): ERR_IO (cannot
 * open/stat/map, not a regular file), ERR_PARSE (bad magic, truncated,
 * inconsistent), ERR_UNSUPPORTED (version, tensor type), ERR_TOOBIG (a cap
 * above), ERR_NOMEM. */
int gguf_open(const char *path, struct gguf **out, char *err, size_t err_len);

/* The same on size bytes at data, which are borrowed: they must stay valid
 * and unchanged until gguf_free. For tests and fuzzing. Same errors except
 * ERR_IO. */
int gguf_open_mem(const void *data, size_t size, struct gguf **out, char *err, size_t err_len);

/* Unmap and free. NULL ok. */
void gguf_free(struct gguf *g);

/* File facts. Can't fail. */
uint32_t gguf_version(const struct gguf *g);
uint32_t gguf_alignment(const struct gguf *g);   /* general.alignment or 32 */
uint64_t gguf_data_offset(const struct gguf *g); /* file offset of the tensor data */
uint64_t gguf_file_size(const struct gguf *g);

/* general.architecture ("llama", "qwen2"...) as a NUL-terminated string, or
 * NULL when absent, not a string, longer than 63 bytes or containing NUL. */
const char *gguf_architecture(const struct gguf *g);

/* ---- metadata ---- */

/* Number of key/value pairs; keys by index 0..n-1 in file order (key NULL
 * and type -1 for an index out of range). */
size_t gguf_kv_count(const struct gguf *g);
const char *gguf_kv_key(const struct gguf *g, size_t i);       /* NUL-terminated */
enum gguf_vtype gguf_kv_type(const struct gguf *g, size_t i);

/* Index of key, or -1 when absent. */
long gguf_kv_find(const struct gguf *g, const char *key);

/* "UINT32", "STRING", ... ("?" for an unknown value). Can't fail. */
const char *gguf_vtype_name(enum gguf_vtype t);

/* Typed getters by key. Each returns 0 and writes *out, ERR_NOTFOUND (no such
 * key), ERR_INVAL (the stored type cannot be read as this type) or
 * ERR_TOOBIG (an integer that does not fit). Integers widen and narrow by
 * value: any of the eight integer types is accepted wherever the stored
 * value fits the requested type (ggml's writer stores hparams as UINT32,
 * other writers use UINT64 or INT32; the value is what matters). get_f32
 * accepts FLOAT32 and FLOAT64 (rounded to float); get_bool only BOOL;
 * get_str only STRING (the string borrows the mapping). */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_i32(const struct gguf *g, const char *key, int32_t *out);
int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, int *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);

/* The array stored at key. 0, ERR_NOTFOUND, ERR_INVAL (not an array). */
int gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out);

/* Element i of an array. 0, ERR_NOTFOUND (i >= n), ERR_INVAL (wrong element
 * type), ERR_TOOBIG (integer does not fit). arr_str: STRING elements;
 * arr_i64: any integer type (by value, as the getters above); arr_f32:
 * FLOAT32/FLOAT64; arr_bool: BOOL. */
int gguf_arr_str(const struct gguf_arr *a, uint64_t i, struct gguf_str *out);
int gguf_arr_i64(const struct gguf_arr *a, uint64_t i, int64_t *out);
int gguf_arr_f32(const struct gguf_arr *a, uint64_t i, float *out);
int gguf_arr_bool(const struct gguf_arr *a, uint64_t i, int *out);

/* ---- tensors ---- */

/* Number of tensors; tensors by index 0..n-1 in file order (NULL if out of
 * range). */
size_t gguf_tensor_count(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i);

/* The tensor called name, or NULL. */
const struct gguf_tensor *gguf_tensor_find(const struct gguf *g, const char *name);

#endif
