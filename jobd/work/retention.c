/*
 * retention.c - file expiry (see retention.h). Sweeper thread.
 */
#include "jobd/work/retention.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"

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
        char path[STORE_PATH_MAX];
        if ((rc = store_path_abs(store_data_dir(st), items[i].storage_path, path, sizeof path))) {
            log_error("retention: file %s: bad storage path '%s'", items[i].id, items[i].storage_path);
            first = first ? first : rc;
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            log_error("retention: file %s expired but '%s' cannot be removed: %s", items[i].id, path,
                      strerror(errno));
            first = first ? first : ERR_IO;
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
