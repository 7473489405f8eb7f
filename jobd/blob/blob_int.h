/*
 * blob_int.h - inside jobd/blob: the s3 store's functions, which blob.c
 * dispatches to (blob_s3.c). Same contracts as their blob.h namesakes.
 */
#ifndef JOBD_BLOB_INT_H
#define JOBD_BLOB_INT_H

#include "jobd/blob/blob.h"

struct s3;

int s3_open(const struct blob_config *cfg, struct s3 **out, char *desc, size_t desc_cap);
void s3_free(struct s3 *s);
int s3_put_file(struct s3 *s, const char *key, const char *path);
int s3_delete(struct s3 *s, const char *key);
int s3_list(struct s3 *s, const char *prefix, blob_list_fn fn, void *ctx);

/* A reader's s3 half: open finds the size (HEAD); read fills buf. */
struct s3_reader;
int s3_reader_open(struct s3 *s, const char *key, struct s3_reader **out, uint64_t *size);
ssize_t s3_reader_read(struct s3_reader *r, void *buf, size_t cap);
void s3_reader_free(struct s3_reader *r);

#endif
