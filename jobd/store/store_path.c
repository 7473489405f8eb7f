/*
 * store_path.c - the data directory's layout (see "data directory" in
 * store.h): the one place that spells where the database, a file's bytes, a
 * batch's output and error files and the upload scratch space live.
 *
 * Design. The files table keeps storage_path relative to the data
 * directory, so a data directory can be moved or mounted elsewhere; these
 * functions make the relative names and turn a stored one back into a path,
 * refusing one that is absolute or climbs out ("..": it came from the
 * database, which is outside bytes for this purpose). Pure string work, no
 * I/O: any thread, no connection needed.
 */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "jobd/store/store.h"

static int fit(int n, size_t cap)
{
    return n < 0 || (size_t)n >= cap ? ERR_TOOBIG : 0;
}

int store_path_dir(const char *data_dir, enum store_dir which, char *out, size_t cap)
{
    static const char *const names[] = {[STORE_DIR_FILES] = "files", [STORE_DIR_TMP] = "tmp"};
    if (!data_dir || (unsigned)which > STORE_DIR_TMP)
        return ERR_INVAL;
    return fit(snprintf(out, cap, "%s/%s", data_dir, names[which]), cap);
}

int store_path_upload_rel(const char *file_id, char rel[STORE_REL_PATH_MAX])
{
    return fit(snprintf(rel, STORE_REL_PATH_MAX, "files/%s.jsonl.zst", file_id), STORE_REL_PATH_MAX);
}

int store_path_upload_id(const char *rel, char id[ID_MAX])
{
    static const char pre[] = "files/file-", suf[] = ".jsonl.zst";
    size_t n = strlen(rel), p = sizeof pre - 1, q = sizeof suf - 1;
    if (n <= p + q || strncmp(rel, pre, p) != 0 || strcmp(rel + n - q, suf) != 0 || n - 6 - q >= ID_MAX)
        return ERR_INVAL;
    memcpy(id, rel + 6, n - 6 - q);
    id[n - 6 - q] = '\0';
    return strchr(id, '/') ? ERR_INVAL : 0;
}

int store_path_batch_rel(const char *batch_id, const char *kind, char rel[STORE_REL_PATH_MAX])
{
    return fit(snprintf(rel, STORE_REL_PATH_MAX, "files/%s-%s.jsonl.zst", batch_id, kind),
               STORE_REL_PATH_MAX);
}

int store_path_files_rel(const char *name, char rel[STORE_REL_PATH_MAX])
{
    if (!name || !*name || strchr(name, '/'))
        return ERR_INVAL;
    return fit(snprintf(rel, STORE_REL_PATH_MAX, "files/%s", name), STORE_REL_PATH_MAX);
}

int store_path_abs(const char *data_dir, const char *rel, char *out, size_t cap)
{
    if (!rel || rel[0] == '/' || strstr(rel, ".."))
        return ERR_CORRUPT;
    return fit(snprintf(out, cap, "%s/%s", data_dir, rel), cap);
}
