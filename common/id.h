/*
 * id.h - random object ids with a type prefix ("batch_", "file-", "req_").
 *
 * Shape: prefix + 26 characters of Crockford base32 (lowercase): 48 bits of
 * wall-clock milliseconds followed by 80 random bits, like a ULID. Ids of one
 * prefix therefore sort by creation time as plain strings, which is what
 * cursor pagination (`after=<id>`) relies on, and two ids never collide in
 * practice. Thread-safe.
 */
#ifndef COMMON_ID_H
#define COMMON_ID_H

#include <stddef.h>
#include <stdint.h>

#define ID_BODY_LEN 26
#define ID_MAX 64 /* buffer size that fits any prefix we use plus the body */

/* Write prefix + body + NUL into out (capacity out_len). Returns 0,
 * ERR_TOOBIG (out too small) or ERR_CRYPTO (no randomness). */
int id_new(const char *prefix, char *out, size_t out_len);

/* Same, with a given timestamp (ms since the epoch) - for tests. */
int id_new_at(const char *prefix, int64_t wall_ms, char *out, size_t out_len);

/* 1 if s is prefix + a well-formed body, else 0. */
int id_valid(const char *prefix, const char *s);

#endif
