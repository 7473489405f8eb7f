/*
 * embed.h - files embedded into a binary at build time (scripts/embed-c
 * --table): a table of names and bytes, generated under build/gen/.
 *
 * The generated table is const data: no function, nothing to free, any
 * thread. Each entry's data is NUL-terminated (not counted in len).
 */
#ifndef COMMON_EMBED_H
#define COMMON_EMBED_H

#include <stddef.h>

struct embed_file {
    const char *name; /* the file's base name: "app.js" */
    const char *data; /* its bytes, NUL-terminated */
    size_t len;       /* bytes, without the NUL */
};

#endif
