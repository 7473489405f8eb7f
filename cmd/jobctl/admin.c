/*
 * admin.c - jobctl's read-mostly commands: usage, workers, models, and files
 * (list, get, delete, content).
 *
 * usage, workers and models print a table of jobd's answer (or the JSON
 * with --json); workers authenticates with the admin token. Where a jobd
 * does not serve a route (an older one without GET /v1/usage) the call ends
 * in a "no route" error (exit 23) naming it, from jc_check.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/jobctl/jobctl.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"

/* ---- usage ----------------------------------------------------------------------------------- */

static const char *usage_usage =
    "usage: jobctl usage [--since T] [--until T] [--group-by model|batch|day|tenant] [--batch ID] [--json]\n"
    "                    [--fleet] [--all-tenants [--tenant NAME]] [--admin-token T]\n"
    "\n"
    "Token usage and cost of your batches from jobd's ledger (GET /v1/usage): one\n"
    "row per model (default), batch or UTC day, then the total. T is a date\n"
    "(2026-11-01, UTC), an RFC 3339 time (2026-11-01T06:00:00Z) or unix seconds;\n"
    "--since is inclusive, --until exclusive (default: all time up to now).\n"
    "Costs come from jobd's price table (jobd --prices), exact in micro-dollars.\n"
    "--json prints jobd's report object instead. --batch ID counts only that\n"
    "batch's requests (with the default --group-by model: a batch that mixes\n"
    "models, per model).\n"
    "--all-tenants reports every tenant (GET /v1/admin/usage, jobd's admin token:\n"
    "--admin-token / JOBD_ADMIN_TOKEN), one row per tenant id by default;\n"
    "--tenant NAME (or ten_... id) restricts it to one tenant.\n"
    "--fleet reports what the workers cost instead (GET /v1/usage?view=fleet, spec/usage.md\n"
    "\"Fleet cost\"): worker time priced by each worker's hourly cost, attributed by tokens\n"
    "computed, the effective price per 1M tokens, tokens per worker-second, what jobd's\n"
    "--reference-prices would have charged, then the fleet's idle line and utilization\n"
    "(with --all-tenants also one line per worker).\n"
    "\n"
    "examples:\n"
    "  jobctl usage --since 2026-11-01 --group-by day\n"
    "  jobctl usage --batch \"$id\"\n"
    "  JOBD_ADMIN_TOKEN=... jobctl usage --all-tenants --since 2026-11-01\n"
    "  jobctl usage --fleet --group-by day\n";

/* "$1.234567" or "-" for a micros field (an object's amount_micros, or an integer). */
static void fleet_money(const json_t *o, const char *name, char *out, size_t cap)
{
    json_t *v = json_object_get(o, name);
    int64_t m;
    if (json_is_object(v))
        v = json_object_get(v, "amount_micros");
    if (!json_is_integer(v)) {
        snprintf(out, cap, "-");
        return;
    }
    m = (int64_t)json_integer_value(v);
    if (m < 0) {
        out[0] = '-';
        jc_fmt_micros(-m, out + 1, cap - 1);
    } else {
        jc_fmt_micros(m, out, cap);
    }
}

/* One row of the fleet table from a fleet bucket (or the totals). */
static void fleet_row(const char *key, const json_t *o, FILE *f)
{
    int64_t ms = 0, tin = 0, tout = 0;
    double tps = 0;
    js_get_int(o, "worker_ms", &ms);
    js_get_int(o, "input_tokens", &tin);
    js_get_int(o, "output_tokens", &tout);
    json_t *t = json_object_get(o, "tokens_per_worker_second");
    if (json_is_number(t))
        tps = json_number_value(t);
    char cost[32], in1m[32], out1m[32], ref[32], diff[32];
    fleet_money(o, "fleet_cost", cost, sizeof cost);
    fleet_money(o, "effective_micros_per_1m_input", in1m, sizeof in1m);
    fleet_money(o, "effective_micros_per_1m_output", out1m, sizeof out1m);
    fleet_money(o, "reference_cost", ref, sizeof ref);
    fleet_money(o, "reference_difference_micros", diff, sizeof diff);
    fprintf(f, "%-32s %10.1f %12lld %12lld %14s %14s %14s %9.1f %14s %14s\n", key, (double)ms / 1000.0,
            (long long)tin, (long long)tout, cost, in1m, out1m, tps, ref, diff);
}

/* The fleet lines after the table: idle, the whole fleet, and the workers. */
static void fleet_tail(const json_t *v, FILE *f)
{
    json_t *fl = NULL, *ws = NULL;
    if (js_get_obj(v, "fleet", &fl))
        return;
    int64_t reg = 0, busy = 0, idle = 0, n = 0;
    js_get_int(fl, "registered_ms", &reg);
    js_get_int(fl, "busy_ms", &busy);
    js_get_int(fl, "idle_ms", &idle);
    js_get_int(fl, "workers", &n);
    char im[32], cm[32];
    fleet_money(fl, "idle", im, sizeof im);
    fleet_money(fl, "cost", cm, sizeof cm);
    fprintf(f, "%-32s %10.1f %12s %12s %14s\n", "idle (the fleet's own line)", (double)idle / 1000.0, "", "", im);
    fprintf(f, "fleet: %lld worker(s), %.1f s registered, %.1f s busy (utilization %.1f%%), cost %s\n",
            (long long)n, (double)reg / 1000.0, (double)busy / 1000.0,
            reg ? 100.0 * (double)busy / (double)reg : 0.0, cm);
    if (js_get_arr(v, "workers", &ws) || json_array_size(ws) == 0)
        return;
    fprintf(f, "%-30s %-6s %12s %10s %10s %6s %14s %9s\n", "WORKER", "STATE", "PER HOUR", "REG S", "BUSY S", "UTIL",
            "COST", "TOK/S");
    for (size_t i = 0; i < json_array_size(ws); i++) {
        const json_t *w = json_array_get(ws, i);
        const char *name = "?", *state = "?";
        int64_t wr = 0, wb = 0;
        double tps = 0;
        js_get_str(w, "name", &name);
        js_get_str(w, "state", &state);
        js_get_int(w, "registered_ms", &wr);
        js_get_int(w, "busy_ms", &wb);
        json_t *t = json_object_get(w, "tokens_per_s");
        if (json_is_number(t))
            tps = json_number_value(t);
        char ph[32], wc[32];
        int unpriced = 0;
        fleet_money(w, "hourly_cost_micros", ph, sizeof ph);
        if (!js_get_bool(w, "unpriced", &unpriced) && unpriced)
            snprintf(ph, sizeof ph, "unpriced"); /* no class, no declaration: priced 0 */
        fleet_money(w, "cost", wc, sizeof wc);
        fprintf(f, "%-30s %-6s %12s %10.1f %10.1f %5.1f%% %14s %9.1f\n", name, state, ph, (double)wr / 1000.0,
                (double)wb / 1000.0, wr ? 100.0 * (double)wb / (double)wr : 0.0, wc, tps);
    }
}

/* One row of the usage table from a bucket (or the totals) object. */
static void usage_row(const char *key, const json_t *o, FILE *f)
{
    int64_t req = 0, in = 0, cached = 0, out = 0, total = 0, micros = -1;
    json_t *cost = NULL;
    js_get_int(o, "num_model_requests", &req);
    js_get_int(o, "input_tokens", &in);
    js_get_int(o, "input_cached_tokens", &cached);
    js_get_int(o, "output_tokens", &out);
    js_get_int(o, "total_tokens", &total);
    if (!js_get_obj(o, "cost", &cost))
        js_get_int(cost, "amount_micros", &micros);
    char c[32];
    jc_fmt_micros(micros, c, sizeof c);
    fprintf(f, "%-32s %9lld %12lld %12lld %12lld %12lld %14s\n", key, (long long)req, (long long)in,
            (long long)cached, (long long)out, (long long)total, c);
}

int cmd_usage(struct jc *jc, int argc, char **argv)
{
    const char *since = NULL, *until = NULL, *group = NULL, *tenant = NULL, *batch = NULL;
    int json_out = 0, all = 0, fleet = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("since", NULL, CFG_STR, &since, "T", "from this time (inclusive)"),
        CFG_OPT("until", NULL, CFG_STR, &until, "T", "to this time (exclusive)"),
        CFG_OPT("group-by", NULL, CFG_STR, &group, "FIELD",
                "model (default), batch or day: one row per value (tenant, default with --all-tenants)"),
        CFG_OPT("batch", NULL, CFG_STR, &batch, "ID", "only this batch's requests"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print jobd's report as JSON"),
        CFG_OPT("all-tenants", NULL, CFG_BOOL, &all, NULL, "every tenant's usage (admin token)"),
        CFG_OPT("fleet", NULL, CFG_BOOL, &fleet, NULL, "what the workers cost (view=fleet) instead of token prices"),
        CFG_OPT("tenant", NULL, CFG_STR, &tenant, "NAME", "with --all-tenants: only this tenant"),
        JC_ADMIN_OPT(jc),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, usage_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0,
                       &n_pos)) >= 0)
        return rc;
    if (group && strcmp(group, "model") && strcmp(group, "batch") && strcmp(group, "day") &&
        (!all || strcmp(group, "tenant")))
        return jc_usage_error(jc, all ? "--group-by: use tenant, model, batch or day" : "--group-by: use model, batch or day");
    if (tenant && !all)
        return jc_usage_error(jc, "--tenant needs --all-tenants");
    if (fleet && batch)
        return jc_usage_error(jc, "--fleet has no --batch: jobctl status ID shows a batch's fleet cost");
    if (batch && (rc = jc_check_id(jc, "batch", batch)))
        return rc;
    if (all)
        jc->admin = 2;
    struct buf p;
    buf_init(&p, 8192);
    char sep = '?';
    rc = buf_append_str(&p, all ? "/v1/admin/usage" : "/v1/usage");
    const char *names[] = {"since", "until", "group_by", "tenant", "batch", "view"},
               *vals[] = {since, until, group, tenant, batch, fleet ? "fleet" : NULL};
    for (int i = 0; i < 6 && !rc; i++) {
        if (!vals[i])
            continue;
        rc = buf_printf(&p, "%c%s=", sep, names[i]) || jc_url_escape(&p, vals[i]);
        sep = '&';
    }
    json_t *v = NULL, *data = NULL, *tot = NULL;
    if (rc) {
        rc = jc_usage_error(jc, "options too long");
    } else if (!(rc = jc_get_json(jc, p.data, NULL, &v))) {
        if (json_out) {
            jc_print_json(v, stdout, 2);
        } else {
            const char *g = group ? group : all ? "tenant" : "model";
            js_get_str(v, "group_by", &g);
            const char *col = g[0] == 'b' ? "BATCH" : g[0] == 'd' ? "DAY" : g[0] == 't' ? "TENANT" : "MODEL";
            void (*row)(const char *, const json_t *, FILE *) = fleet ? fleet_row : usage_row;
            if (fleet)
                fprintf(stdout, "%-32s %10s %12s %12s %14s %14s %14s %9s %14s %14s\n", col, "WORKER S", "INPUT",
                        "OUTPUT", "FLEET COST", "PER 1M IN", "PER 1M OUT", "TOK/S", "REFERENCE", "DIFFERENCE");
            else
                fprintf(stdout, "%-32s %9s %12s %12s %12s %12s %14s\n", col, "REQUESTS", "INPUT", "CACHED",
                        "OUTPUT", "TOTAL", "COST");
            if (!js_get_arr(v, "data", &data)) {
                for (size_t i = 0; i < json_array_size(data); i++) {
                    const json_t *bk = json_array_get(data, i);
                    const char *key = "?";
                    js_get_str(bk, "key", &key);
                    row(key, bk, stdout);
                }
            }
            if (!js_get_obj(v, "totals", &tot))
                row("total", tot, stdout);
            if (fleet)
                fleet_tail(v, stdout);
            int more = 0;
            if (!js_get_bool(v, "has_more", &more) && more)
                fprintf(stderr, "jobctl usage: only the first %zu groups are shown (the total counts all); "
                                "narrow --since/--until\n", json_array_size(data));
        }
    }
    json_decref(v);
    buf_release(&p);
    return rc;
}

/* ---- workers / models ------------------------------------------------------------------------ */

/* The models array of a worker as "a,b" (at most cap bytes, "..." when cut). */
static void join_strings(const json_t *arr, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const char *m = json_string_value(json_array_get(arr, i));
        if (!m)
            continue;
        int w = snprintf(out + n, cap - n, "%s%s", n ? "," : "", m);
        if (w < 0 || (size_t)w >= cap - n) {
            if (cap > 4)
                memcpy(out + cap - 4, "...", 4);
            return;
        }
        n += (size_t)w;
    }
    if (!n)
        snprintf(out, cap, "-");
}

static const char *workers_usage =
    "usage: jobctl workers [--all] [--json] [--admin-token T]\n"
    "\n"
    "The workers jobd knows (GET /v1/workers, newest registration first): one\n"
    "row per worker with its device, whether it is live (seen within 120 s),\n"
    "leases and requests held, last reported tokens/s, last call and models.\n"
    "--all includes workers not seen lately. The route needs jobd's admin\n"
    "token (--admin-token / JOBD_ADMIN_TOKEN, or admin_token in the config\n"
    "file), unless jobd runs in local no-auth mode without one.\n"
    "\n"
    "example:\n"
    "  JOBD_ADMIN_TOKEN=... jobctl workers --json | jq '.data | length'\n";

int cmd_workers(struct jc *jc, int argc, char **argv)
{
    int json_out = 0, all = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("all", NULL, CFG_BOOL, &all, NULL, "also workers not seen within the worker TTL"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print jobd's answer as JSON"),
        JC_ADMIN_OPT(jc),
        JC_COMMON_OPTS(jc),
    };
    jc->admin = 2;
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, workers_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0,
                       &n_pos)) >= 0)
        return rc;
    json_t *v = NULL, *data = NULL;
    if ((rc = jc_get_json(jc, all ? "/v1/workers?limit=1000&all=true" : "/v1/workers?limit=1000", NULL, &v)))
        return rc;
    if (json_out || js_get_arr(v, "data", &data)) {
        jc_print_json(v, stdout, 2);
        json_decref(v);
        return JC_EXIT_OK;
    }
    printf("%-30s %-16s %-6s %-4s %6s %8s %8s %12s %-20s %s\n", "ID", "NAME", "DEVICE", "LIVE", "LEASES",
           "REQUESTS", "TOK/S", "PER_HOUR", "LAST_SEEN", "MODELS");
    for (size_t i = 0; i < json_array_size(data); i++) {
        const json_t *w = json_array_get(data, i);
        const char *id = "?", *name = "?", *dev = "?";
        int64_t leases = 0, reqs = 0, seen = 0;
        int live = 0;
        json_t *models = NULL;
        js_get_str(w, "id", &id);
        js_get_str(w, "name", &name);
        js_get_str(w, "device", &dev);
        js_get_int(w, "leases_held", &leases);
        js_get_int(w, "requests_held", &reqs);
        js_get_int(w, "last_heartbeat_at", &seen);
        js_get_bool(w, "live", &live);
        js_get_arr(w, "models", &models);
        const json_t *tps = json_object_get(w, "tokens_per_s");
        char t[64], ms[256], ph[32];
        jc_fmt_time(seen, t, sizeof t);
        join_strings(models, ms, sizeof ms);
        fleet_money(w, "hourly_cost_micros", ph, sizeof ph);
        printf("%-30s %-16s %-6s %-4s %6lld %8lld %8.1f %12s %-20s %s\n", id, name, dev, live ? "yes" : "no",
               (long long)leases, (long long)reqs, json_is_number(tps) ? json_number_value(tps) : 0.0, ph, t, ms);
    }
    json_decref(v);
    return JC_EXIT_OK;
}

static const char *models_usage =
    "usage: jobctl models [--json]\n"
    "\n"
    "The models live workers serve (GET /v1/models): one row per name a request\n"
    "may use in body.model, with its canonical name (ROOT) and how many live\n"
    "workers serve it. A batch for a model nobody serves waits (jobctl status\n"
    "shows it).\n"
    "\n"
    "example:\n"
    "  jobctl models\n";

int cmd_models(struct jc *jc, int argc, char **argv)
{
    int json_out = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print jobd's answer as JSON"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, models_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0, &n_pos)) >= 0)
        return rc;
    json_t *v = NULL, *data = NULL;
    if ((rc = jc_get_json(jc, "/v1/models", NULL, &v)))
        return rc;
    if (json_out || js_get_arr(v, "data", &data)) {
        jc_print_json(v, stdout, 2);
        json_decref(v);
        return JC_EXIT_OK;
    }
    printf("%-40s %-40s %s\n", "ID", "ROOT", "WORKERS");
    for (size_t i = 0; i < json_array_size(data); i++) {
        const json_t *m = json_array_get(data, i);
        const char *id = "?", *root = NULL;
        int64_t n = 0;
        js_get_str(m, "id", &id);
        js_get_str(m, "root", &root);
        js_get_int(m, "workers", &n);
        printf("%-40s %-40s %lld\n", id, root ? root : id, (long long)n);
    }
    json_decref(v);
    return JC_EXIT_OK;
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
        CFG_OPT("purpose", NULL, CFG_STR, &purpose, "P", "list: batch or batch_output"),
        CFG_OPT("limit", NULL, CFG_INT, &limit, "N", "list: at most N files (default 100)"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "list: jobd's answer as JSON"),
        CFG_OPT("output", NULL, CFG_STR, &output, "FILE", "content: write to FILE (also -o)"),
        CFG_OPT("raw", NULL, CFG_BOOL, &raw, NULL, "content: the stored zstd bytes"),
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
