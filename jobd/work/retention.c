/*
 * retention.c - file expiry (see retention.h). Sweeper thread.
 */
#include "jobd/work/retention.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "jobd/blob/blob.h"

int retention_sweep(struct store *st, int64_t now, int max, int64_t *n_deleted)
{
    struct store_file_ref *items = NULL;
    size_t n = 0;
    int64_t deleted = 0;
    int rc = store_files_expired(st, now, max, &items, &n);
    if (rc)
        return rc;
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        if ((rc = blob_delete(store_blobs(st), items[i].storage_path))) {
            log_error("retention: file %s expired but '%s' cannot be removed: %s", items[i].id,
                      items[i].storage_path, err_msg(rc));
            first = first ? first : rc;
            continue;
        }
        int gone = 0;
        if ((rc = store_file_purge(st, items[i].id, now, &gone))) {
            first = first ? first : rc;
            continue;
        }
        if (gone) {
            deleted++;
            log_info("retention: file %s expired: deleted", items[i].id);
        }
    }
    free(items);
    if (n_deleted)
        *n_deleted = deleted;
    return first;
}

/* fsync files/, so the unlinks before it are durable. 0 or ERR_IO. */
static int sync_files_dir(struct store *st)
{
    char d[STORE_PATH_MAX];
    int rc = store_path_dir(store_data_dir(st), STORE_DIR_FILES, d, sizeof d);
    if (rc)
        return rc;
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        log_error("retention: cannot sync '%s': %s", d, strerror(errno));
        rc = ERR_IO;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

int retention_orphans_local(struct store *st, int64_t *n_removed)
{
    char d[STORE_PATH_MAX];
    int rc = store_path_dir(store_data_dir(st), STORE_DIR_FILES, d, sizeof d);
    if (rc)
        return rc;
    DIR *dir = opendir(d);
    if (!dir)
        return errno == ENOENT ? 0 : ERR_IO;
    int64_t removed = 0;
    struct dirent *e;
    while (!rc && (e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char rel[STORE_REL_PATH_MAX], path[STORE_PATH_MAX];
        int named = 1;
        if (store_path_files_rel(e->d_name, rel) ||
            store_path_abs(store_data_dir(st), rel, path, sizeof path))
            continue; /* not a name jobd makes */
        if ((rc = store_file_path_named(st, rel, &named)) || named)
            continue;
        if (unlink(path) != 0 && errno != ENOENT) {
            log_warn("retention: cannot remove orphaned '%s': %s", path, strerror(errno));
            continue;
        }
        log_info("retention: removed '%s', which no file row names (left by a crash)", path);
        removed++;
    }
    closedir(dir);
    if (!rc && removed > 0)
        rc = sync_files_dir(st);
    if (n_removed)
        *n_removed = removed;
    return rc;
}

struct orphans {
    struct store *st;
    int64_t before;   /* objects modified before this are old enough */
    int64_t n_deleted;
    int first;
};

static int on_stored(void *ctx, const char *key, uint64_t size_bytes, int64_t mtime_s)
{
    struct orphans *o = ctx;
    (void)size_bytes;
    char id[ID_MAX];
    int named = 1, rc;
    if (mtime_s >= o->before)
        return 0; /* recent: its row may be about to commit */
    if (store_path_upload_id(key, id) == 0)
        rc = store_file_exists(o->st, id, &named);
    else /* a batch's output or error file: its row names the key */
        rc = store_file_path_named(o->st, key, &named);
    if (rc)
        return rc; /* the database is out: stop, try next time */
    if (named)
        return 0;
    if ((rc = blob_delete(store_blobs(o->st), key))) {
        o->first = o->first ? o->first : rc;
        return 0;
    }
    o->n_deleted++;
    log_info("retention: removed %s: no file row names it (cut short by a crash, or a deleted file)", key);
    return 0;
}

int retention_orphans(struct store *st, int64_t now, int64_t grace_s, int64_t *n_deleted)
{
    struct orphans o = {st, now - grace_s, 0, 0};
    int rc = blob_list(store_blobs(st), "files/", on_stored, &o);
    if (n_deleted)
        *n_deleted = o.n_deleted;
    return rc ? rc : o.first;
}
