/*
 * hash.h - FNV-1a, 64 bits: the one non-cryptographic hash of the tree, for
 * open-addressing tables, cache validators and lease affinity keys. Not a
 * security boundary (common/crypto.h has SHA-256 and HMAC for those).
 *
 * Header-only and pure; any thread.
 */
#ifndef COMMON_HASH_H
#define COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV_BASIS 14695981039346656037ull /* the 64-bit offset basis */
#define HASH_FNV_PRIME 1099511628211ull

/* Continue an FNV-1a hash h over the n bytes at p. */
static inline uint64_t hash_fnv_add(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= HASH_FNV_PRIME;
    }
    return h;
}

/* FNV-1a of the n bytes at p. */
static inline uint64_t hash_fnv(const void *p, size_t n)
{
    return hash_fnv_add(HASH_FNV_BASIS, p, n);
}

#endif
