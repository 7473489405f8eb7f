/*
 * utf8.h - encoding and decoding one UTF-8 character, for the code that
 * works on code points (the WordPiece normaliser, the Jinja interpreter).
 *
 * Neither function validates: the caller has already measured a complete,
 * well-formed sequence (text/tok.h tok_utf8_seq and the like) or
 * holds a code point <= 0x10FFFF. Pure, any thread.
 */
#ifndef COMMON_UTF8_H
#define COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Write code point c (<= 0x10FFFF) to out as 1-4 bytes; returns the count. */
size_t utf8_encode(uint32_t c, char out[4]);

/* The code point of the n-byte sequence at s (n 1..4, a lead byte followed
 * by n - 1 continuation bytes). */
uint32_t utf8_decode(const unsigned char *s, size_t n);

#endif
