/*
 * crypto.h - hashing, MACs, encodings and randomness (OpenSSL underneath).
 *
 * SHA-256 one-shot and streaming, HMAC-SHA256 (webhook signatures, API key
 * hashes), constant-time comparison, lowercase hex, RFC 4648 base64 (standard
 * alphabet with padding; the decoder is strict: rejects bad characters, bad
 * padding, and non-canonical trailing bits), and cryptographically secure
 * random bytes. Thread-safe.
 */
#ifndef COMMON_CRYPTO_H
#define COMMON_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

/* out gets the 32-byte digest. Returns 0 or ERR_CRYPTO. */
int sha256(const void *data, size_t n, uint8_t out[SHA256_LEN]);

/* Streaming SHA-256: new -> update* -> final (which frees). NULL on no memory. */
struct sha256_ctx;
struct sha256_ctx *sha256_new(void);
int sha256_update(struct sha256_ctx *c, const void *data, size_t n);
int sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN]); /* frees c */
void sha256_free(struct sha256_ctx *c); /* abandon without a digest; NULL ok */

/* HMAC-SHA256 of data under key. Returns 0 or ERR_CRYPTO. */
int hmac_sha256(const void *key, size_t key_len, const void *data, size_t n,
                uint8_t out[SHA256_LEN]);

/* 1 if the n bytes at a and b are equal, 0 otherwise; time independent of content. */
int crypto_equal(const void *a, const void *b, size_t n);

/* Lowercase hex of n bytes into out (2n+1 bytes incl. NUL). Returns out. */
char *hex_encode(const void *data, size_t n, char *out);

/* base64 (RFC 4648 4., padded). Output length for n input bytes, without NUL: */
#define BASE64_LEN(n) ((((n) + 2) / 3) * 4)
/* Encode n bytes into out (BASE64_LEN(n)+1 bytes incl. NUL). Returns the length. */
size_t base64_encode(const void *data, size_t n, char *out);
/* Decode len characters into out (capacity out_cap). Returns 0 and sets
 * *out_len, ERR_PARSE for malformed input, ERR_TOOBIG if out_cap is short. */
int base64_decode(const char *s, size_t len, uint8_t *out, size_t out_cap, size_t *out_len);

/* n cryptographically secure random bytes. Returns 0 or ERR_CRYPTO. */
int crypto_random(void *out, size_t n);

#endif
