/*
 * admin.c - jobctl's read-mostly commands: usage, workers, models, and files
 * (list, get, delete, content).
 *
 * usage and workers print jobd's answer (indented JSON, or one line per
 * item); where this jobd does not serve the route yet the call ends in a
 * "no route" error (exit 23) naming it, from jc_check.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/jobctl/jobctl.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"

/* One line per item of answer.data: its scalar fields as key=value. */
static void print_items(const json_t *answer)
{
    json_t *data = NULL;
    if (js_get_arr(answer, "data", &data)) {
        jc_print_json(answer, stdout, 2);
        return;
    }
    for (size_t i = 0; i < json_array_size(data); i++) {
        const json_t *it = json_array_get(data, i);
        const char *k;
        json_t *v;
        int first = 1;
        json_object_foreach((json_t *)it, k, v) {
            if (json_is_object(v) || json_is_array(v))
                continue;
            char *s = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);
            printf("%s%s=%s", first ? "" : " ", k, json_is_string(v) ? json_string_value(v) : s ? s : "?");
            free(s);
            first = 0;
        }
        putchar('\n');
    }
}

static int simple_get(struct jc *jc, const char *usage, int argc, char **argv, const char *path,
                      int items)
{
    int json_out = 0;
    struct cfg_opt opts[] = {
        {"json", NULL, CFG_BOOL, &json_out, NULL, "print jobd's answer as JSON"},
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0, &n_pos)) >= 0)
        return rc;
    json_t *v = NULL;
    if ((rc = jc_get_json(jc, path, NULL, &v)))
        return rc;
    if (json_out || !items)
        jc_print_json(v, stdout, 2);
    else
        print_items(v);
    json_decref(v);
    return JC_EXIT_OK;
}

/* ---- usage ----------------------------------------------------------------------------------- */

static const char *usage_usage =
    "usage: jobctl usage [--since T] [--until T] [--group-by FIELD]\n"
    "\n"
    "Token usage and cost of your batches from jobd's ledger (GET /v1/usage),\n"
    "printed as JSON. T is a date (2026-11-01), an RFC 3339 time or unix\n"
    "seconds, passed to jobd as given; FIELD e.g. day, model, batch.\n"
    "\n"
    "example:\n"
    "  jobctl usage --since 2026-11-01 --group-by model\n";

int cmd_usage(struct jc *jc, int argc, char **argv)
{
    const char *since = NULL, *until = NULL, *group = NULL;
    struct cfg_opt opts[] = {
        {"since", NULL, CFG_STR, &since, "T", "from this time (inclusive)"},
        {"until", NULL, CFG_STR, &until, "T", "to this time (exclusive)"},
        {"group-by", NULL, CFG_STR, &group, "FIELD", "one row per value of FIELD"},
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, usage_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0,
                       &n_pos)) >= 0)
        return rc;
    struct buf p;
    buf_init(&p, 8192);
    char sep = '?';
    rc = buf_append_str(&p, "/v1/usage");
    const char *names[] = {"since", "until", "group_by"}, *vals[] = {since, until, group};
    for (int i = 0; i < 3 && !rc; i++) {
        if (!vals[i])
            continue;
        rc = buf_printf(&p, "%c%s=", sep, names[i]) || jc_url_escape(&p, vals[i]);
        sep = '&';
    }
    json_t *v = NULL;
    if (rc)
        rc = jc_usage_error(jc, "options too long");
    else if (!(rc = jc_get_json(jc, p.data, NULL, &v)))
        jc_print_json(v, stdout, 2);
    json_decref(v);
    buf_release(&p);
    return rc;
}

/* ---- workers / models ------------------------------------------------------------------------ */

static const char *workers_usage =
    "usage: jobctl workers [--json]\n"
    "\n"
    "The workers jobd knows (GET /v1/workers): one line per worker with its\n"
    "fields as key=value (name, models, last seen, leases...).\n"
    "\n"
    "example:\n"
    "  jobctl workers --json | jq '.data | length'\n";

int cmd_workers(struct jc *jc, int argc, char **argv)
{
    return simple_get(jc, workers_usage, argc, argv, "/v1/workers", 1);
}

static const char *models_usage =
    "usage: jobctl models [--json]\n"
    "\n"
    "The models live workers serve (GET /v1/models): one line per model\n"
    "(id, root, workers...). A batch for a model nobody serves waits.\n"
    "\n"
    "example:\n"
    "  jobctl models\n";

int cmd_models(struct jc *jc, int argc, char **argv)
{
    return simple_get(jc, models_usage, argc, argv, "/v1/models", 1);
}

/* ---- files ----------------------------------------------------------------------------------- */

static const char *files_usage =
    "usage: jobctl files list [--purpose P] [--limit N] [--json]\n"
    "       jobctl files get FILE_ID\n"
    "       jobctl files delete FILE_ID\n"
    "       jobctl files content FILE_ID [-o FILE] [--raw]\n"
    "\n"
    "The Files API: list (newest first, table), get (the file object as JSON),\n"
    "delete, content (the bytes, decompressed; --raw: jobd's zstd stream).\n"
    "\n"
    "examples:\n"
    "  jobctl files list --purpose batch_output\n"
    "  jobctl files content file-01jf8zq3v0m9x5k2c7n4t6r8wd -o input.jsonl\n";

int cmd_files(struct jc *jc, int argc, char **argv)
{
    const char *purpose = NULL, *output = NULL;
    int64_t limit = 100;
    int json_out = 0, raw = 0;
    struct cfg_opt opts[] = {
        {"purpose", NULL, CFG_STR, &purpose, "P", "list: batch or batch_output"},
        {"limit", NULL, CFG_INT, &limit, "N", "list: at most N files (default 100)"},
        {"json", NULL, CFG_BOOL, &json_out, NULL, "list: jobd's answer as JSON"},
        {"output", NULL, CFG_STR, &output, "FILE", "content: write to FILE (also -o)"},
        {"raw", NULL, CFG_BOOL, &raw, NULL, "content: the stored zstd bytes"},
        JC_COMMON_OPTS(jc),
    };
    char *pos[2];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, files_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 2, 1,
                       &n_pos)) >= 0)
        return rc;
    const char *sub = pos[0];
    if (!strcmp(sub, "list")) {
        if (n_pos != 1)
            return jc_usage_error(jc, "files list takes no id");
        if (limit < 1 || limit > 10000)
            return jc_usage_error(jc, "--limit: 1 .. 10000");
        struct buf p;
        buf_init(&p, 4096);
        rc = buf_printf(&p, "/v1/files?limit=%lld", (long long)limit);
        if (!rc && purpose)
            rc = buf_append_str(&p, "&purpose=") || jc_url_escape(&p, purpose);
        json_t *v = NULL, *data = NULL;
        if (rc)
            rc = jc_usage_error(jc, "options too long");
        else if (!(rc = jc_get_json(jc, p.data, NULL, &v))) {
            if (json_out || js_get_arr(v, "data", &data)) {
                jc_print_json(v, stdout, 2);
            } else {
                printf("%-34s %12s %-20s %-13s %s\n", "ID", "BYTES", "CREATED", "PURPOSE", "FILENAME");
                for (size_t i = 0; i < json_array_size(data); i++) {
                    const json_t *f = json_array_get(data, i);
                    const char *id = "?", *fn = "", *pu = "";
                    int64_t bytes = 0, created = 0;
                    js_get_str(f, "id", &id);
                    js_get_str(f, "filename", &fn);
                    js_get_str(f, "purpose", &pu);
                    js_get_int(f, "bytes", &bytes);
                    js_get_int(f, "created_at", &created);
                    char t[64];
                    jc_fmt_time(created, t, sizeof t);
                    printf("%-34s %12lld %-20s %-13s %s\n", id, (long long)bytes, t, pu, fn);
                }
            }
        }
        json_decref(v);
        buf_release(&p);
        return rc;
    }
    if (strcmp(sub, "get") && strcmp(sub, "delete") && strcmp(sub, "content"))
        return jc_usage_error(jc, "unknown files command '%s' (list, get, delete, content)", sub);
    if (n_pos != 2)
        return jc_usage_error(jc, "files %s needs a FILE_ID", sub);
    if ((rc = jc_check_id(jc, "file", pos[1])))
        return rc;
    if (!strcmp(sub, "content"))
        return jc_download(jc, pos[1], output, raw);
    char path[256], what[160];
    snprintf(path, sizeof path, "/v1/files/%s", pos[1]);
    snprintf(what, sizeof what, "file %s", pos[1]);
    if (!strcmp(sub, "get")) {
        json_t *v = NULL;
        if (!(rc = jc_get_json(jc, path, what, &v)))
            jc_print_json(v, stdout, 2);
        json_decref(v);
        return rc;
    }
    struct httpc_opts o;
    jc_opts_default(&o);
    struct httpc_response r;
    httpc_response_init(&r);
    rc = jc_call(jc, &o, "DELETE", path, NULL, NULL, 0, NULL, &r);
    if (!(rc = jc_check(jc, "DELETE", path, rc, &r, what, 0)))
        printf("%s deleted\n", pos[1]);
    httpc_response_release(&r);
    return rc;
}
