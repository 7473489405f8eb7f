/*
 * utf8.h - encoding and decoding one UTF-8 character, for the code that
 * works on code points (the WordPiece normaliser, the Jinja interpreter).
 *
 * Neither encode nor decode validates: the caller has already measured a
 * complete, well-formed sequence (text/tok.h tok_utf8_seq and the like) or
 * holds a code point <= 0x10FFFF. Also here: the hex digit value every
 * escape decoder needs, and Python's str.isspace()/str.strip(), which chat
 * templates and Jinja must match byte for byte. Pure, any thread.
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

/* The value of hex digit c (0-9, a-f, A-F), or -1. */
int hex_digit(char c);

/* Python str.isspace() for the code point at s (len >= 1 bytes left): its
 * byte length if it is whitespace, else 0. */
size_t utf8_py_space(const unsigned char *s, size_t len);

/* Python's whitespace strip of the [*b, *b + *len) range, in place.
 * which: UTF8_STRIP_LEFT, UTF8_STRIP_RIGHT or both. */
enum { UTF8_STRIP_LEFT = 1, UTF8_STRIP_RIGHT = 2, UTF8_STRIP_BOTH = 3 };
void utf8_py_strip(const char **b, size_t *len, int which);

#endif
