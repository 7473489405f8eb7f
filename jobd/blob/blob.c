/*
 * blob.c - the file store's interface and its local half (see blob.h);
 * the s3 half is blob_s3.c.
 */
#include "jobd/blob/blob.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/blob/blob_int.h"

struct blob_store {
    struct s3 *s3;       /* NULL: local */
    char dir[1024];      /* local: the data directory */
    char desc[1400];
};

struct blob_reader {
    int fd;              /* local */
    struct s3_reader *s3;
    uint64_t size;
};

int blob_key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n >= BLOB_KEY_MAX || key[0] == '/')
        return 0;
    const char *seg = key;
    for (size_t i = 0; i <= n; i++) {
        char c = key[i];
        if (c == '/' || c == '\0') {
            size_t sl = (size_t)(key + i - seg);
            if (sl == 0 || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
                return 0;
            seg = key + i + 1;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int blob_store_open(const struct blob_config *cfg, struct blob_store **out)
{
    struct blob_store *bs = calloc(1, sizeof *bs);
    if (!bs)
        return ERR_NOMEM;
    int rc = 0;
    if (cfg->url && *cfg->url) {
        rc = s3_open(cfg, &bs->s3, bs->desc, sizeof bs->desc);
    } else if (!cfg->data_dir || !*cfg->data_dir ||
               (size_t)snprintf(bs->dir, sizeof bs->dir, "%s", cfg->data_dir) >= sizeof bs->dir) {
        rc = ERR_INVAL;
    } else {
        snprintf(bs->desc, sizeof bs->desc, "%s", bs->dir);
    }
    if (rc) {
        free(bs);
        return rc;
    }
    *out = bs;
    return 0;
}

void blob_store_free(struct blob_store *bs)
{
    if (!bs)
        return;
    s3_free(bs->s3);
    free(bs);
}

int blob_is_remote(const struct blob_store *bs)
{
    return bs->s3 != NULL;
}

const char *blob_describe(const struct blob_store *bs)
{
    return bs->desc;
}

static int local_path(const struct blob_store *bs, const char *key, char *out, size_t cap)
{
    if (!blob_key_ok(key))
        return ERR_INVAL;
    return (size_t)snprintf(out, cap, "%s/%s", bs->dir, key) < cap ? 0 : ERR_TOOBIG;
}

/* fsync the directory that holds path. 0, ERR_NOTFOUND (no such
 * directory), ERR_IO. */
static int sync_dir_of(const char *path)
{
    char dir[1400];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? ERR_NOTFOUND : ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r ? ERR_IO : 0;
}

static int local_put(struct blob_store *bs, const char *key, const char *path)
{
    char final[1400];
    int rc = local_path(bs, key, final, sizeof final);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int err = errno;
        log_error("blob: cannot sync '%s': %s", path, strerror(err));
        if (fd >= 0)
            close(fd);
        return err == ENOSPC || err == EDQUOT ? ERR_NOSPACE : ERR_IO;
    }
    close(fd);
    if (rename(path, final) != 0) {
        log_error("blob: cannot rename '%s' to '%s': %s", path, final, strerror(errno));
        return ERR_IO;
    }
    return sync_dir_of(final);
}

int blob_put_file(struct blob_store *bs, const char *key, const char *path)
{
    if (!bs->s3)
        return local_put(bs, key, path);
    if (!blob_key_ok(key))
        return ERR_INVAL;
    int rc = s3_put_file(bs->s3, key, path);
    if (!rc && unlink(path) != 0)
        log_warn("blob: uploaded '%s' but cannot remove it: %s", path, strerror(errno));
    return rc;
}

int blob_reader_open(struct blob_store *bs, const char *key, struct blob_reader **out)
{
    struct blob_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ERR_NOMEM;
    r->fd = -1;
    int rc;
    if (bs->s3) {
        rc = blob_key_ok(key) ? s3_reader_open(bs->s3, key, &r->s3, &r->size) : ERR_INVAL;
    } else {
        char path[1400];
        struct stat sb;
        if (!(rc = local_path(bs, key, path, sizeof path))) {
            r->fd = open(path, O_RDONLY | O_CLOEXEC);
            if (r->fd < 0)
                rc = errno == ENOENT ? ERR_NOTFOUND : ERR_IO;
            else if (fstat(r->fd, &sb) != 0)
                rc = ERR_IO;
            else
                r->size = (uint64_t)sb.st_size;
            if (rc && rc != ERR_NOTFOUND)
                log_error("blob: cannot open '%s': %s", path, strerror(errno));
        }
    }
    if (rc) {
        blob_reader_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

ssize_t blob_read(void *reader, void *buf, size_t cap)
{
    struct blob_reader *r = reader;
    if (r->s3)
        return s3_reader_read(r->s3, buf, cap);
    for (;;) {
        ssize_t n = read(r->fd, buf, cap);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return ERR_IO;
    }
}

uint64_t blob_reader_size(const struct blob_reader *r)
{
    return r->size;
}

int blob_reader_fd(const struct blob_reader *r)
{
    return r->fd;
}

int blob_reader_take_fd(struct blob_reader *r)
{
    int fd = r->fd;
    r->fd = -1;
    return fd;
}

void blob_reader_free(struct blob_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    s3_reader_free(r->s3);
    free(r);
}

int blob_delete(struct blob_store *bs, const char *key)
{
    if (bs->s3)
        return blob_key_ok(key) ? s3_delete(bs->s3, key) : ERR_INVAL;
    char path[1400];
    int rc = local_path(bs, key, path, sizeof path);
    if (rc)
        return rc;
    int absent = 0;
    if (unlink(path) != 0) {
        if (errno != ENOENT) {
            log_error("blob: cannot remove '%s': %s", path, strerror(errno));
            return ERR_IO;
        }
        absent = 1;
    }
    /* durable before the caller drops the row that named it. Gone already
     * (ENOENT) is no proof of that: an earlier try may have removed it and
     * then failed this fsync, so it is made again. */
    rc = sync_dir_of(path);
    if (rc == ERR_NOTFOUND && absent)
        return 0; /* no directory, nothing in it to make durable */
    if (rc)
        log_error("blob: removed '%s' but cannot sync its directory", path);
    return rc;
}

/* local: the entries of the prefix's directory whose names start with its last segment. */
static int local_list(struct blob_store *bs, const char *prefix, blob_list_fn fn, void *ctx)
{
    const char *slash = strrchr(prefix, '/');
    size_t dl = slash ? (size_t)(slash - prefix) : 0;
    const char *stem = slash ? slash + 1 : prefix;
    char dir[1400];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%.*s", bs->dir, (int)dl, prefix) >= sizeof dir)
        return ERR_TOOBIG;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : ERR_IO;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strncmp(e->d_name, stem, strlen(stem)) != 0 || e->d_name[0] == '.')
            continue;
        char key[BLOB_KEY_MAX], path[2900];
        struct stat sb;
        if ((size_t)snprintf(key, sizeof key, "%.*s%s%s", (int)dl, prefix, dl ? "/" : "", e->d_name) >=
                sizeof key ||
            !blob_key_ok(key))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        rc = fn(ctx, key, (uint64_t)sb.st_size, (int64_t)sb.st_mtime);
    }
    closedir(d);
    return rc;
}

int blob_list(struct blob_store *bs, const char *prefix, blob_list_fn fn, void *ctx)
{
    if (!prefix || strstr(prefix, "..") || prefix[0] == '/')
        return ERR_INVAL;
    return bs->s3 ? s3_list(bs->s3, prefix, fn, ctx) : local_list(bs, prefix, fn, ctx);
}
