/*
 * batches.c - jobctl's batch commands: status, wait, list, cancel, results,
 * errors, retry-dead.
 *
 * wait long-polls GET /v1/batches/ID: If-None-Match with "Prefer: wait=N"
 * (RFC 7240), which jobd holds until the batch changed or N seconds passed
 * and marks with "Preference-Applied: wait=N"; then it asks again at once.
 * A server that does not mark its answer (an older jobd, one draining, a
 * proxy) answers at once: then wait sleeps --interval, at least the
 * Retry-After it suggests, between polls (304 while nothing changed). The
 * progress goes to stderr - a redrawn bar on a terminal, one plain line per
 * answer otherwise (cron logs) - so stdout stays clean for scripts; the exit
 * code is the batch's outcome (jobctl.h). jobd sets a batch's usage only at
 * finalization, so while it runs wait and status read the tokens (and cost)
 * so far from GET /v1/usage?group_by=batch, asked again only when the
 * request counts moved.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/jobctl/jobctl.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/js.h"
#include "common/zst.h"

/* The numbers of a batch object that the displays use. */
struct bsum {
    const char *id, *status, *endpoint, *model;
    int64_t total, completed, failed;
    int64_t created_at, started_at;  /* in_progress_at, or created_at */
    int64_t ended_at;                /* the first of finalizing_at and the end stamps; 0 while running */
    int have_tokens;
    int64_t in_tokens, out_tokens, total_tokens;
    const json_t *cost;
};

static void bsum_read(const json_t *b, struct bsum *s)
{
    memset(s, 0, sizeof *s);
    s->id = s->status = s->endpoint = "?";
    js_get_str(b, "id", &s->id);
    js_get_str(b, "status", &s->status);
    js_get_str(b, "endpoint", &s->endpoint);
    js_get_str(b, "model", &s->model);
    json_t *rc = NULL, *u = NULL;
    if (!js_get_obj(b, "request_counts", &rc)) {
        js_get_int(rc, "total", &s->total);
        js_get_int(rc, "completed", &s->completed);
        js_get_int(rc, "failed", &s->failed);
    }
    js_get_int(b, "created_at", &s->created_at);
    if (js_get_int(b, "in_progress_at", &s->started_at))
        s->started_at = s->created_at;
    /* the requests stopped running when finalization began (or the batch
     * ended without it: cancelled, expired, failed) */
    static const char *const stops[] = {"finalizing_at", "completed_at", "failed_at", "expired_at", "cancelled_at"};
    for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
        int64_t at;
        if (!js_get_int(b, stops[i], &at) && at > 0 && (!s->ended_at || at < s->ended_at))
            s->ended_at = at;
    }
    if (!js_get_obj(b, "usage", &u)) {
        s->have_tokens = 1;
        if (js_get_int(u, "input_tokens", &s->in_tokens))
            js_get_int(u, "prompt_tokens", &s->in_tokens);
        if (js_get_int(u, "output_tokens", &s->out_tokens))
            js_get_int(u, "completion_tokens", &s->out_tokens);
        if (js_get_int(u, "total_tokens", &s->total_tokens))
            s->total_tokens = s->in_tokens + s->out_tokens;
    }
    const json_t *c = json_object_get(b, "cost");
    s->cost = c && !json_is_null(c) ? c : NULL;
}

/* Seconds left at the rate so far, or -1 when unknown. */
static int64_t bsum_eta(const struct bsum *s, int64_t now)
{
    int64_t done = s->completed + s->failed, elapsed = now - s->started_at;
    if (strcmp(s->status, "in_progress") != 0 || done <= 0 || elapsed <= 0 || s->total <= done)
        return -1;
    return (int64_t)((double)(s->total - done) * (double)elapsed / (double)done);
}

/* Output tokens per second of the batch's own in-progress time as jobd
 * stamped it: in_progress_at to ended_at once the requests stopped, to now
 * while they run. The stamps are whole seconds, so the time counts at least
 * one second (the rate of a shorter batch is a lower bound). */
static double bsum_tok_rate(const struct bsum *s, int64_t now)
{
    int64_t elapsed = (s->ended_at ? s->ended_at : now) - s->started_at;
    if (elapsed < 1)
        elapsed = 1;
    return s->have_tokens ? (double)s->out_tokens / (double)elapsed : 0.0;
}

static void fmt_cost(const json_t *c, char *out, size_t n)
{
    int64_t micros;
    if (json_is_object(c) && !js_get_int(c, "amount_micros", &micros) && micros >= 0) {
        /* jobd's {"amount_micros": N}: integer micro-dollars, printed exactly */
        char d[32];
        jc_fmt_micros(micros, d, sizeof d);
        snprintf(out, n, "%s (%lld micro-dollars)", d, (long long)micros);
        return;
    }
    if (json_is_number(c)) {
        snprintf(out, n, "%.6g", json_number_value(c));
        return;
    }
    char *s = json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER);
    snprintf(out, n, "%s", s ? s : "?");
    free(s);
}

/* The batch's tokens so far while it runs. jobd fills the batch's usage only
 * at finalization, but writes a usage_ledger row per committed result, so
 * GET /v1/usage?group_by=batch&since=<created_at> has the live sums (its
 * bucket for this batch). Quiet: any failure (an older jobd without the
 * route, more than one page of buckets) returns nonzero and the display
 * shows "-". */
static int live_tokens(struct jc *jc, const struct bsum *s, int64_t *in, int64_t *out, int64_t *micros)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/usage?group_by=batch&since=%lld", (long long)s->created_at);
    struct httpc_opts o;
    jc_opts_default(&o);
    o.max_retries = 0;
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *rep = NULL, *data = NULL;
    struct js_limits lim = {64u << 20, 16, 0};
    int rc = -1;
    if (jc_call(jc, &o, "GET", path, NULL, NULL, 0, NULL, &r) || r.status != 200 ||
        js_parse(r.body.data, r.body.len, &lim, &rep, NULL) ||
        js_get_arr(rep, "data", &data))
        goto out;
    for (size_t i = 0; i < json_array_size(data); i++) {
        const json_t *bk = json_array_get(data, i);
        const char *key;
        int64_t a, b;
        if (!js_get_str(bk, "key", &key) && !strcmp(key, s->id) && !js_get_int(bk, "input_tokens", &a) &&
            !js_get_int(bk, "output_tokens", &b)) {
            json_t *cost = NULL;
            *in = a;
            *out = b;
            *micros = -1;
            if (!js_get_obj(bk, "cost", &cost))
                js_get_int(cost, "amount_micros", micros);
            rc = 0;
            break;
        }
    }
out:
    json_decref(rep);
    httpc_response_release(&r);
    return rc;
}

/* The human summary of batch b; live (may be NULL): tokens and cost so far
 * from live_tokens, shown while the batch's own usage is still empty. */
static void print_status(const json_t *b, const int64_t live[3], FILE *f)
{
    struct bsum s;
    bsum_read(b, &s);
    if (live && (!s.have_tokens || s.total_tokens == 0)) {
        s.have_tokens = 1;
        s.in_tokens = live[0];
        s.out_tokens = live[1];
        s.total_tokens = live[0] + live[1];
    }
    int64_t now = clock_wall_s(), done = s.completed + s.failed;
    char t[64], d[32];
    fprintf(f, "%s  %s\n", s.id, s.status);
    fprintf(f, "  endpoint   %s%s%s\n", s.endpoint, s.model ? "   model " : "", s.model ? s.model : "");
    fprintf(f, "  progress   %lld/%lld", (long long)done, (long long)s.total);
    if (s.total > 0)
        fprintf(f, " (%.1f%%)", 100.0 * (double)done / (double)s.total);
    fprintf(f, "   completed %lld   failed %lld\n", (long long)s.completed, (long long)s.failed);
    if (s.have_tokens) {
        fprintf(f, "  tokens     in %lld   out %lld   total %lld", (long long)s.in_tokens,
                (long long)s.out_tokens, (long long)s.total_tokens);
        if (bsum_tok_rate(&s, now) > 0)
            fprintf(f, "   (%.1f tok/s)", bsum_tok_rate(&s, now));
        fputc('\n', f);
    }
    if (live && live[2] >= 0 && s.total_tokens == live[0] + live[1]) {
        char m[32];
        jc_fmt_micros(live[2], m, sizeof m);
        fprintf(f, "  cost       %s so far (%lld micro-dollars)\n", m, (long long)live[2]);
    } else if (s.cost) {
        fmt_cost(s.cost, t, sizeof t);
        fprintf(f, "  cost       %s\n", t);
    }
    const json_t *fc = json_object_get(b, "fleet_cost");
    int64_t fm, fms = 0, lapsed = 0;
    if (json_is_object(fc) && !js_get_int(fc, "amount_micros", &fm)) {
        /* its share of the workers' hourly cost (jobd's fleet view) */
        char m[32];
        js_get_int(fc, "worker_ms", &fms);
        js_get_int(fc, "lapsed_micros", &lapsed);
        jc_fmt_micros(fm, m, sizeof m);
        fprintf(f, "  fleet cost %s (%lld micro-dollars, %.1f worker-seconds", m, (long long)fm, (double)fms / 1000.0);
        if (lapsed > 0)
            fprintf(f, ", %lld of it while a lease lapsed", (long long)lapsed);
        fputs(")\n", f);
    }
    jc_fmt_time(s.created_at, t, sizeof t);
    jc_fmt_duration(now - s.created_at, d, sizeof d);
    fprintf(f, "  created    %s (%s ago)\n", t, d);
    int64_t eta = bsum_eta(&s, now);
    if (eta >= 0) {
        jc_fmt_duration(eta, d, sizeof d);
        fprintf(f, "  eta        %s (at the rate so far)\n", d);
    }
    static const char *const ends[] = {"completed_at", "failed_at", "expired_at", "cancelled_at"};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        int64_t at;
        if (!js_get_int(b, ends[i], &at)) {
            jc_fmt_time(at, t, sizeof t);
            fprintf(f, "  %-10.*s %s\n", (int)(strlen(ends[i]) - 3), ends[i], t);
        }
    }
    const char *of = NULL, *ef = NULL;
    js_get_str(b, "output_file_id", &of);
    js_get_str(b, "error_file_id", &ef);
    if (of || ef)
        fprintf(f, "  files      output %s   errors %s\n", of ? of : "-", ef ? ef : "-");
    json_t *errs = NULL, *data = NULL;
    if (!js_get_obj(b, "errors", &errs) && !js_get_arr(errs, "data", &data)) {
        size_t n = json_array_size(data);
        for (size_t i = 0; i < n && i < 5; i++) {
            const json_t *e = json_array_get(data, i);
            const char *code = "?", *msg = "";
            int64_t line = 0;
            js_get_str(e, "code", &code);
            js_get_str(e, "message", &msg);
            js_get_int(e, "line", &line);
            if (line)
                fprintf(f, "  error      line %lld: %s: %s\n", (long long)line, code, msg);
            else
                fprintf(f, "  error      %s: %s\n", code, msg);
        }
        if (n > 5)
            fprintf(f, "  error      ... %zu more (jobctl errors %s)\n", n - 5, s.id);
    }
    json_t *md = NULL;
    if (!js_get_obj(b, "metadata", &md) && json_object_size(md)) {
        fprintf(f, "  metadata  ");
        const char *k;
        json_t *v;
        json_object_foreach(md, k, v) {
            fprintf(f, " %s=%s", k, json_is_string(v) ? json_string_value(v) : "?");
        }
        fputc('\n', f);
    }
}

static int get_batch(struct jc *jc, const char *id, json_t **out)
{
    char path[256], what[160];
    snprintf(path, sizeof path, "/v1/batches/%s", id);
    snprintf(what, sizeof what, "batch %s", id);
    return jc_get_json(jc, path, what, out);
}

/* ---- status ---------------------------------------------------------------------------------- */

static const char *status_usage =
    "usage: jobctl status BATCH_ID [--json]\n"
    "\n"
    "Show a batch: status, progress, request counts, tokens and cost when jobd\n"
    "reports them, and an ETA from the rate so far. --json prints jobd's object.\n"
    "A message batch's msgbatch_ id (jobctl submit --format anthropic) names the\n"
    "same batch as its batch_ id, here and in wait, cancel, results, errors, rerun.\n"
    "\n"
    "example:\n"
    "  jobctl status batch_01jf8zq3v0m9x5k2c7n4t6r8wd\n";

int cmd_status(struct jc *jc, int argc, char **argv)
{
    int json_out = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print the batch object as JSON"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, status_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1,
                       &n_pos)) >= 0)
        return rc;
    if ((rc = jc_check_id(jc, "batch", pos[0])))
        return rc;
    pos[0] = jc_batch_id(pos[0]);
    json_t *b = NULL;
    if ((rc = get_batch(jc, pos[0], &b)))
        return rc;
    if (json_out) {
        jc_print_json(b, stdout, 2);
    } else {
        struct bsum cur;
        int64_t live[3];
        bsum_read(b, &cur);
        int have = !strcmp(cur.status, "in_progress") && cur.completed + cur.failed > 0 &&
                   !live_tokens(jc, &cur, &live[0], &live[1], &live[2]);
        print_status(b, have ? live : NULL, stdout);
        /* jobd's deadline estimate (X-Estimated-Completion, also in the object) */
        int64_t eta = 0, exp = 0;
        json_t *risk = json_object_get(b, "deadline_at_risk");
        if (!js_get_int(b, "estimated_completion_at", &eta) && eta > 0) {
            char t[40], d[40];
            jc_fmt_time(eta, t, sizeof t);
            printf("estimated  %s (jobd, at the current throughput)\n", t);
            if (json_is_true(risk) && !js_get_int(b, "expires_at", &exp)) {
                jc_fmt_time(exp, d, sizeof d);
                fprintf(stderr, "jobctl status: warning: batch %s will miss its deadline: estimated to end %s, "
                                "expires %s\nhint: add workers, raise its metadata priority, or cancel and "
                                "resubmit with a longer --window\n", pos[0], t, d);
            }
        }
    }
    json_decref(b);
    return JC_EXIT_OK;
}

/* ---- wait ------------------------------------------------------------------------------------ */

/* One progress display of batch b; live (may be NULL) has the tokens so far
 * from live_tokens when the batch's own usage is still empty. */
static void progress(const json_t *b, const int64_t live[3], int tty, int64_t now)
{
    struct bsum s;
    bsum_read(b, &s);
    if (live && (!s.have_tokens || s.total_tokens == 0)) {
        s.have_tokens = 1;
        s.in_tokens = live[0];
        s.out_tokens = live[1];
        s.total_tokens = live[0] + live[1];
    }
    int64_t done = s.completed + s.failed, eta = bsum_eta(&s, now);
    double pct = s.total > 0 ? 100.0 * (double)done / (double)s.total : 0.0;
    char etas[32] = "-", rate[32] = "-";
    if (eta >= 0)
        jc_fmt_duration(eta, etas, sizeof etas);
    if (s.have_tokens)
        snprintf(rate, sizeof rate, "%.1f", bsum_tok_rate(&s, now));
    if (tty) {
        char bar[31];
        int fill = s.total > 0 ? (int)(30 * done / s.total) : 0;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\r[%s] %5.1f%% %lld/%lld ok %lld failed %lld  %s tok/s  eta %s  %-11s\033[K", bar,
                pct, (long long)done, (long long)s.total, (long long)s.completed, (long long)s.failed,
                rate, etas, s.status);
    } else {
        char t[64];
        clock_iso8601(clock_wall_ms(), t, sizeof t);
        fprintf(stderr, "%s %s %s %lld/%lld (%.1f%%) completed %lld failed %lld tok/s %s eta %s\n", t,
                s.id, s.status, (long long)done, (long long)s.total, pct, (long long)s.completed,
                (long long)s.failed, rate, etas);
    }
    fflush(stderr);
}

#define JC_WAIT_HOLD_S 25 /* the Prefer: wait asked for (jobd holds up to 30 s) */

/* Whether jobd held the answer as asked (Preference-Applied: wait=N). */
static int long_polled(const struct httpc_response *r)
{
    char v[64];
    return !httpc_response_header(r, "Preference-Applied", v, sizeof v) && strstr(v, "wait=") != NULL;
}

int jc_wait(struct jc *jc, const char *id, int64_t interval_ms, int64_t timeout_ms, int json_out)
{
    char path[256], what[160], etag[256] = "", inm[300], prefer[32];
    snprintf(path, sizeof path, "/v1/batches/%s", id);
    snprintf(what, sizeof what, "batch %s", id);
    int tty = isatty(2), rc = 0, drawn = 0, have_live = 0;
    int64_t live[3] = {0, 0, -1}, live_done = -1;
    uint64_t start = clock_mono_ms();
    json_t *last = NULL;
    struct httpc_opts o;
    jc_opts_default(&o);
    o.max_retries = 6; /* ride out a jobd restart (about a minute of backoff) */
    for (;;) {
        struct httpc_response r;
        httpc_response_init(&r);
        /* a long poll once there is an ETag to compare, for as long as the
         * --timeout leaves (whole seconds, JC_WAIT_HOLD_S at most) */
        int64_t hold_s = JC_WAIT_HOLD_S;
        if (timeout_ms > 0) {
            int64_t left = timeout_ms - (int64_t)(clock_mono_ms() - start);
            hold_s = left / 1000 < hold_s ? left / 1000 : hold_s;
        }
        const char *hdr[] = {inm, hold_s > 0 ? prefer : NULL, NULL};
        snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
        snprintf(prefer, sizeof prefer, "Prefer: wait=%lld", (long long)hold_s);
        o.timeout_ms = (long)(hold_s + 30) * 1000; /* the hold plus the usual 30 s */
        int conditional = etag[0] != '\0';
        int hrc = jc_call(jc, &o, "GET", path, etag[0] ? hdr : NULL, NULL, 0, NULL, &r);
        if (drawn && tty && (hrc || (r.status != 200 && r.status != 304)))
            fputc('\n', stderr);
        if ((rc = jc_check(jc, "GET", path, hrc, &r, what, last != NULL))) {
            httpc_response_release(&r);
            break;
        }
        if (r.status == 200) {
            json_t *b = NULL;
            if ((rc = jc_parse_json(jc, &r, &b))) {
                httpc_response_release(&r);
                break;
            }
            json_decref(last);
            last = b;
            if (httpc_response_header(&r, "ETag", etag, sizeof etag))
                etag[0] = '\0';
        }
        int64_t delay = interval_ms;
        char ra[32];
        if (long_polled(&r) || (!conditional && r.status == 200 && etag[0])) {
            /* jobd did the waiting, or this plain GET gave the first ETag:
             * the next (conditional) GET shows whether jobd holds it */
            delay = 0;
        } else if (!httpc_response_header(&r, "Retry-After", ra, sizeof ra)) {
            long s = strtol(ra, NULL, 10);
            if (s > 0 && s <= 600 && s * 1000 > delay)
                delay = s * 1000;
        }
        httpc_response_release(&r);
        struct bsum cur;
        bsum_read(last, &cur);
        if (!strcmp(cur.status, "in_progress") && cur.completed + cur.failed != live_done) {
            /* the tokens moved only if results came in: ask again only then */
            have_live = !live_tokens(jc, &cur, &live[0], &live[1], &live[2]);
            live_done = cur.completed + cur.failed;
        }
        progress(last, have_live ? live : NULL, tty, clock_wall_s());
        drawn = 1;
        int outcome = jc_batch_outcome(last);
        if (outcome >= 0) {
            rc = outcome;
            break;
        }
        uint64_t elapsed = clock_mono_ms() - start;
        if (timeout_ms > 0 && elapsed >= (uint64_t)timeout_ms) {
            if (tty)
                fputc('\n', stderr);
            json_decref(last);
            return jc_fail(jc, JC_EXIT_TIMEOUT, "wait again later; the batch keeps running",
                           "batch %s still running after --timeout", id);
        }
        if (timeout_ms > 0 && elapsed + (uint64_t)delay > (uint64_t)timeout_ms)
            delay = timeout_ms - (int64_t)elapsed;
        if (delay > 0)
            clock_sleep_ms((uint64_t)delay);
    }
    if (last && rc == jc_batch_outcome(last)) {
        if (tty)
            fputc('\n', stderr);
        struct bsum s;
        bsum_read(last, &s);
        fprintf(stderr, "%s %s: %lld requests, %lld completed, %lld failed\n", s.id, s.status,
                (long long)s.total, (long long)s.completed, (long long)s.failed);
        if (rc == JC_EXIT_FAILED)
            fprintf(stderr, "hint: the input was rejected; see jobctl status %s (or jobctl errors %s)\n",
                    s.id, s.id);
        else if (rc == JC_EXIT_PARTIAL)
            fprintf(stderr, "hint: the failed requests are in: jobctl errors %s\n", s.id);
        if (json_out)
            jc_print_json(last, stdout, 2);
    }
    json_decref(last);
    return rc;
}

static const char *wait_usage =
    "usage: jobctl wait BATCH_ID [--interval 2s] [--timeout DUR] [--json]\n"
    "\n"
    "Wait until the batch ends: a live progress bar (counts, tokens/s, ETA) on a\n"
    "terminal, one plain line per change (or 25 s) otherwise, both on stderr.\n"
    "Long-polls jobd (If-None-Match + Prefer: wait=25: answered as soon as the\n"
    "batch changes); a server that does not hold the request is polled every\n"
    "--interval, never faster than its Retry-After. Exits with the batch's\n"
    "outcome: 0 completed, 10 completed with failed requests, 11 failed,\n"
    "12 expired, 13 cancelled, 14 --timeout passed (see jobctl --help).\n"
    "\n"
    "example:\n"
    "  jobctl wait \"$id\" --timeout 24h || echo \"batch ended with code $?\"\n";

int cmd_wait(struct jc *jc, int argc, char **argv)
{
    int64_t interval_ms = 2000, timeout_ms = 0;
    int json_out = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("interval", NULL, CFG_DURATION, &interval_ms, "DUR",
                "time between polls when jobd does not long-poll (default 2s)"),
        CFG_OPT("timeout", NULL, CFG_DURATION, &timeout_ms, "DUR", "give up after DUR (exit 14); default never"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print the final batch object on stdout"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, wait_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1,
                       &n_pos)) >= 0)
        return rc;
    if ((rc = jc_check_id(jc, "batch", pos[0])))
        return rc;
    pos[0] = jc_batch_id(pos[0]);
    if (interval_ms < 10)
        interval_ms = 10;
    return jc_wait(jc, pos[0], interval_ms, timeout_ms, json_out);
}

/* ---- list ------------------------------------------------------------------------------------ */

static const char *list_usage =
    "usage: jobctl list [--status S[,S...]] [--limit N] [--json]\n"
    "\n"
    "List your batches, newest first, following jobd's pages (has_more / after)\n"
    "until --limit rows are shown (0: all). --status keeps only those statuses.\n"
    "\n"
    "examples:\n"
    "  jobctl list --status in_progress,validating\n"
    "  jobctl list --limit 0 --json | jq -r .id\n";

static int status_match(const char *filter, const char *st)
{
    if (!filter)
        return 1;
    size_t n = strlen(st);
    for (const char *p = filter; *p;) {
        const char *c = strchr(p, ',');
        size_t k = c ? (size_t)(c - p) : strlen(p);
        if (k == n && !strncmp(p, st, n))
            return 1;
        p += k + (c ? 1 : 0);
    }
    return 0;
}

int cmd_list(struct jc *jc, int argc, char **argv)
{
    const char *status = NULL;
    int64_t limit = 20, page_size = 100;
    int json_out = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("status", NULL, CFG_STR, &status, "S,...", "only batches in these statuses"),
        CFG_OPT("limit", NULL, CFG_INT, &limit, "N", "rows to show (default 20; 0 = all)"),
        CFG_OPT("page-size", NULL, CFG_INT, &page_size, "N", "batches per request, 1 .. 100 (default 100)"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "one batch object per line (JSONL)"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, list_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 0, 0,
                       &n_pos)) >= 0)
        return rc;
    if (limit < 0)
        return jc_usage_error(jc, "--limit: must be 0 or more");
    if (page_size < 1 || page_size > 100)
        return jc_usage_error(jc, "--page-size: 1 .. 100");
    char after[JC_ID_MAX] = "";
    int64_t shown = 0;
    for (int page_no = 0;; page_no++) {
        char path[256];
        int64_t want = limit ? limit - shown : page_size;
        if (status || want > page_size || want < 1)
            want = page_size;
        snprintf(path, sizeof path, "/v1/batches?limit=%lld%s%s", (long long)want, after[0] ? "&after=" : "",
                 after);
        json_t *page = NULL, *data = NULL;
        if ((rc = jc_get_json(jc, path, NULL, &page)))
            return rc;
        if (js_get_arr(page, "data", &data)) {
            json_decref(page);
            return jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's list has no data array");
        }
        size_t n = json_array_size(data);
        if (!json_out && page_no == 0) /* after the first answer: no header above an error */
            printf("%-34s %-11s %-20s %15s %8s  %s\n", "ID", "STATUS", "CREATED", "DONE/TOTAL", "FAILED",
                   "MODEL");
        for (size_t i = 0; i < n && (!limit || shown < limit); i++) {
            const json_t *b = json_array_get(data, i);
            struct bsum s;
            bsum_read(b, &s);
            if (!status_match(status, s.status))
                continue;
            shown++;
            if (json_out) {
                jc_print_json(b, stdout, 0);
                continue;
            }
            char t[64], prog[48];
            jc_fmt_time(s.created_at, t, sizeof t);
            snprintf(prog, sizeof prog, "%lld/%lld", (long long)(s.completed + s.failed), (long long)s.total);
            printf("%-34s %-11s %-20s %15s %8lld  %s\n", s.id, s.status, t, prog, (long long)s.failed,
                   s.model ? s.model : "-");
        }
        int has_more = 0;
        js_get_bool(page, "has_more", &has_more);
        const char *last_id = NULL;
        if (n)
            js_get_str(json_array_get(data, n - 1), "id", &last_id);
        int go_on = has_more && n && last_id && strlen(last_id) < sizeof after && (!limit || shown < limit);
        if (go_on)
            snprintf(after, sizeof after, "%s", last_id);
        json_decref(page);
        if (!go_on)
            break;
    }
    return JC_EXIT_OK;
}

/* ---- cancel ---------------------------------------------------------------------------------- */

static const char *cancel_usage =
    "usage: jobctl cancel BATCH_ID\n"
    "\n"
    "Cancel a batch (POST /v1/batches/ID/cancel); prints 'ID STATUS'. Queued\n"
    "requests end at once, running ones finish; finished results are kept.\n"
    "Repeating it is harmless.\n"
    "\n"
    "example:\n"
    "  jobctl cancel \"$id\" && jobctl wait \"$id\"   # exits 13 once cancelled\n";

int cmd_cancel(struct jc *jc, int argc, char **argv)
{
    struct cfg_opt opts[] = {JC_COMMON_OPTS(jc)};
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, cancel_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1,
                       &n_pos)) >= 0)
        return rc;
    if ((rc = jc_check_id(jc, "batch", pos[0])))
        return rc;
    pos[0] = jc_batch_id(pos[0]);
    char path[256], what[160];
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", pos[0]);
    snprintf(what, sizeof what, "batch %s", pos[0]);
    struct httpc_opts o;
    jc_opts_default(&o);
    o.retry_unsafe = 1; /* cancelling twice is harmless */
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *b = NULL;
    rc = jc_call(jc, &o, "POST", path, NULL, NULL, 0, NULL, &r);
    if (!(rc = jc_check(jc, "POST", path, rc, &r, what, 0)) && !(rc = jc_parse_json(jc, &r, &b))) {
        const char *st = "?";
        js_get_str(b, "status", &st);
        printf("%s %s\n", pos[0], st);
    }
    json_decref(b);
    httpc_response_release(&r);
    return rc;
}

/* ---- rerun ----------------------------------------------------------------------------------- */

static const char *rerun_usage =
    "usage: jobctl rerun BATCH_ID [--only failed|failed_and_expired|all] [--window DUR]\n"
    "                    [--idempotency-key KEY] [--json]\n"
    "\n"
    "Submit a new batch of an ended batch's requests (POST /v1/batches/ID/rerun)\n"
    "and print its id. --only failed (default): requests that ran and failed (a\n"
    "4xx answer, or dead-lettered); failed_and_expired: every request without\n"
    "a successful answer (also those that expired or were cancelled before they\n"
    "ran); all: every request. The new batch has the same endpoint, window\n"
    "(--window overrides it) and metadata, plus metadata rerun_of = BATCH_ID.\n"
    "jobd refuses (exit 1, 409) while the batch is still running. The\n"
    "Idempotency-Key defaults to jobctl-rerun-BATCH_ID-ONLY, so running the same\n"
    "rerun twice prints the first new batch's id.\n"
    "\n"
    "example:\n"
    "  new=$(jobctl rerun \"$id\" --only failed_and_expired) && jobctl wait \"$new\"\n";

int cmd_rerun(struct jc *jc, int argc, char **argv)
{
    const char *only = "failed", *idem = NULL, *window = NULL;
    int json_out = 0;
    struct cfg_opt opts[] = {
        CFG_OPT("only", NULL, CFG_STR, &only, "WHICH", "failed (default), failed_and_expired or all"),
        CFG_OPT("window", NULL, CFG_STR, &window, "DUR", "completion window of the new batch (default: the original's)"),
        CFG_OPT("idempotency-key", NULL, CFG_STR, &idem, "KEY", "override the derived Idempotency-Key"),
        CFG_OPT("json", NULL, CFG_BOOL, &json_out, NULL, "print the new batch object instead of its id"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, rerun_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1, &n_pos)) >= 0)
        return rc;
    if ((rc = jc_check_id(jc, "batch", pos[0])))
        return rc;
    pos[0] = jc_batch_id(pos[0]);
    if (strcmp(only, "failed") && strcmp(only, "failed_and_expired") && strcmp(only, "all"))
        return jc_usage_error(jc, "--only: failed, failed_and_expired or all (not '%s')", only);
    if (idem && (!*idem || strlen(idem) > 255))
        return jc_usage_error(jc, "--idempotency-key: 1 to 255 bytes");
    if (window && (!*window || strlen(window) > 32))
        return jc_usage_error(jc, "--window: a duration such as 24h");
    json_t *req = json_pack("{s:s}", "only", only);
    if (req && window)
        json_object_set_new(req, "completion_window", json_string(window));
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body)
        return jc_fail(jc, JC_EXIT_FAIL, NULL, "out of memory");
    char path[256], what[160], keyh[320];
    snprintf(path, sizeof path, "/v1/batches/%s/rerun", pos[0]);
    snprintf(what, sizeof what, "batch %s", pos[0]);
    if (idem)
        snprintf(keyh, sizeof keyh, "Idempotency-Key: %s", idem);
    else
        snprintf(keyh, sizeof keyh, "Idempotency-Key: jobctl-rerun-%s-%s%s%s", pos[0], only, window ? "-" : "",
                 window ? window : "");
    const char *hdr[] = {"Content-Type: application/json", keyh, NULL};
    struct httpc_opts o;
    jc_opts_default(&o);
    o.retry_unsafe = 1; /* safe: the Idempotency-Key makes a retry replay */
    struct httpc_response r;
    httpc_response_init(&r);
    json_t *b = NULL;
    rc = jc_call(jc, &o, "POST", path, hdr, body, strlen(body), NULL, &r);
    free(body);
    if (!(rc = jc_check(jc, "POST", path, rc, &r, what, 0)) && !(rc = jc_parse_json(jc, &r, &b))) {
        const char *id = "?";
        js_get_str(b, "id", &id);
        if (json_out)
            jc_print_json(b, stdout, 2);
        else
            printf("%s\n", id);
    }
    json_decref(b);
    httpc_response_release(&r);
    return rc;
}

/* ---- results / errors ------------------------------------------------------------------------ */

static const char *results_usage =
    "usage: jobctl results BATCH_ID [-o FILE] [--raw]\n"
    "       jobctl results BATCH_ID --follow|--partial [--after CURSOR] [--interval 2s] [-o FILE]\n"
    "\n"
    "Write the batch's output file (one JSONL line per successful request) to\n"
    "stdout or FILE (written to FILE.tmp, renamed when complete). --raw writes\n"
    "jobd's stored zstd stream instead (zstd -d to read it). Empty output when\n"
    "no request succeeded. Fails (exit 1) while the batch is still running.\n"
    "\n"
    "--partial: the result lines committed so far, in any state of the batch\n"
    "(GET /v1/batches/ID/results, page by page): success and failure lines\n"
    "together, in commit order, the same lines as the final files. --follow:\n"
    "the same, then keep polling every --interval and print new lines as they\n"
    "arrive until the batch has ended and every line is out (exit 0 then;\n"
    "the batch's outcome is jobctl wait's business). -o FILE is written as\n"
    "lines arrive. On stderr at the end: the line count and the cursor to\n"
    "resume from (--after CURSOR prints only lines committed after it).\n"
    "\n"
    "examples:\n"
    "  jobctl results \"$id\" -o results.jsonl && jq -c .response.body results.jsonl\n"
    "  jobctl results \"$id\" --follow | jq -c 'select(.error == null) | .custom_id'\n";

static const char *errors_usage =
    "usage: jobctl errors BATCH_ID [-o FILE] [--raw]\n"
    "\n"
    "Write the batch's error file (failed, dead-lettered, cancelled and expired\n"
    "requests, one JSONL line each). For a batch that failed validation, writes\n"
    "its validation errors (code, line, message) as JSONL. Empty output when no\n"
    "request failed.\n"
    "\n"
    "example:\n"
    "  jobctl errors \"$id\" | jq -r '.custom_id + \": \" + .error.code'\n";

/* results --partial / --follow: page through GET /v1/batches/ID/results
 * from cursor `after` (NULL: the start), asking for zstd. */
static int follow_results(struct jc *jc, const char *id, const char *after, const char *output, int follow,
                          int64_t interval_ms)
{
    char cursor[128] = "", path[512], what[160];
    if (after)
        snprintf(cursor, sizeof cursor, "%s", after);
    snprintf(what, sizeof what, "batch %s", id);
    FILE *f = stdout;
    if (output && strcmp(output, "-") && !(f = fopen(output, "w")))
        return jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output);
    struct httpc_opts o;
    jc_opts_default(&o);
    o.max_retries = 6; /* ride out a jobd restart, as wait does */
    const char *hdr[] = {"Accept-Encoding: zstd", NULL};
    struct buf plain;
    buf_init(&plain, 1u << 30);
    int64_t n_lines = 0;
    int rc = 0;
    for (;;) {
        snprintf(path, sizeof path, "/v1/batches/%s/results%s%s", id, cursor[0] ? "?after=" : "", cursor);
        struct httpc_response r;
        httpc_response_init(&r);
        int hrc = jc_call(jc, &o, "GET", path, hdr, NULL, 0, NULL, &r);
        if ((rc = jc_check(jc, "GET", path, hrc, &r, what, 0))) {
            httpc_response_release(&r);
            break;
        }
        char ce[32] = "", more[8] = "", complete[8] = "", next[128] = "";
        httpc_response_header(&r, "Content-Encoding", ce, sizeof ce);
        httpc_response_header(&r, "X-Has-More", more, sizeof more);
        httpc_response_header(&r, "X-Results-Complete", complete, sizeof complete);
        if (httpc_response_header(&r, "X-Next-Cursor", next, sizeof next)) {
            httpc_response_release(&r);
            rc = jc_fail(jc, JC_EXIT_FAIL, "is this jobd older than the results route?",
                         "GET %s: no X-Next-Cursor in the answer", path);
            break;
        }
        const char *data = r.body.data ? r.body.data : "";
        size_t len = r.body.len;
        buf_reset(&plain);
        if (!strcmp(ce, "zstd")) {
            if (zst_decompress_buf(data, len, &plain)) {
                httpc_response_release(&r);
                rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "GET %s: the zstd answer does not decode", path);
                break;
            }
            data = plain.data ? plain.data : "";
            len = plain.len;
        } else if (ce[0] && strcmp(ce, "identity")) {
            httpc_response_release(&r);
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "GET %s: unexpected Content-Encoding '%s'", path, ce);
            break;
        }
        for (size_t i = 0; i < len; i++)
            n_lines += data[i] == '\n';
        if (len && (fwrite(data, 1, len, f) != len || fflush(f))) {
            httpc_response_release(&r);
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output ? output : "stdout");
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", next);
        httpc_response_release(&r);
        if (!strcmp(more, "true"))
            continue;
        if (!follow || !strcmp(complete, "true"))
            break;
        clock_sleep_ms((uint64_t)interval_ms);
    }
    buf_release(&plain);
    if (f != stdout && fclose(f) && !rc)
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output);
    if (!rc)
        fprintf(stderr, "jobctl results: %s: %lld lines; resume with --after %s\n", id, (long long)n_lines,
                cursor);
    return rc;
}

static int batch_file(struct jc *jc, int argc, char **argv, int errors)
{
    const char *output = NULL, *after = NULL;
    int raw = 0, follow = 0, partial = 0;
    int64_t interval_ms = 2000;
    struct cfg_opt opts[] = {
        CFG_OPT("output", NULL, CFG_STR, &output, "FILE", "write to FILE instead of stdout (also -o)"),
        CFG_OPT("raw", NULL, CFG_BOOL, &raw, NULL, "the stored zstd bytes, not decompressed"),
        CFG_OPT("follow", NULL, CFG_BOOL, &follow, NULL, "results: print lines as they commit until the batch ends"),
        CFG_OPT("partial", NULL, CFG_BOOL, &partial, NULL, "results: the lines committed so far, then exit"),
        CFG_OPT("after", NULL, CFG_STR, &after, "CURSOR", "results --follow/--partial: start after this cursor"),
        CFG_OPT("interval", NULL, CFG_DURATION, &interval_ms, "DUR", "results --follow: time between polls (default 2s)"),
        JC_COMMON_OPTS(jc),
    };
    struct cfg_opt eopts[] = {
        CFG_OPT("output", NULL, CFG_STR, &output, "FILE", "write to FILE instead of stdout (also -o)"),
        CFG_OPT("raw", NULL, CFG_BOOL, &raw, NULL, "the stored zstd bytes, not decompressed"),
        JC_COMMON_OPTS(jc),
    };
    char *pos[1];
    int n_pos = 0, rc;
    if (errors)
        rc = jc_parse(jc, errors_usage, eopts, sizeof eopts / sizeof eopts[0], argc, argv, pos, 1, 1, &n_pos);
    else
        rc = jc_parse(jc, results_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 1, &n_pos);
    if (rc >= 0)
        return rc;
    if ((rc = jc_check_id(jc, "batch", pos[0])))
        return rc;
    pos[0] = jc_batch_id(pos[0]);
    if ((follow || partial || after) && raw)
        return jc_usage_error(jc, "--follow, --partial and --after are for results, without --raw");
    if (follow && partial)
        return jc_usage_error(jc, "--follow and --partial exclude each other");
    if (after && !follow && !partial)
        return jc_usage_error(jc, "--after goes with --follow or --partial");
    if (after && (strlen(after) >= 128 || strspn(after, "0123456789abcdefghijklmnopqrstuvwxyz") != strlen(after)))
        return jc_usage_error(jc, "--after: not a cursor (the X-Next-Cursor jobd gave)");
    if (follow || partial)
        return follow_results(jc, pos[0], after, output, follow, interval_ms < 10 ? 10 : interval_ms);
    json_t *b = NULL;
    if ((rc = get_batch(jc, pos[0], &b)))
        return rc;
    const char *fid = NULL, *st = "?";
    js_get_str(b, "status", &st);
    js_get_str(b, errors ? "error_file_id" : "output_file_id", &fid);
    json_t *verrs = NULL, *vdata = NULL;
    int outcome = jc_batch_outcome(b);
    if (fid) {
        if (!(rc = jc_check_id(jc, "file", fid)))
            rc = jc_download(jc, fid, output, raw);
    } else if (outcome < 0) {
        char hint[200];
        snprintf(hint, sizeof hint, "jobctl wait %s, then try again", pos[0]);
        rc = jc_fail(jc, JC_EXIT_FAIL, hint, "batch %s is %s: its %s file is written when it ends", pos[0],
                     st, errors ? "error" : "output");
    } else if (errors && !raw && !js_get_obj(b, "errors", &verrs) && !js_get_arr(verrs, "data", &vdata)) {
        /* a batch that failed validation: its errors live in the object */
        FILE *f = stdout;
        if (output && strcmp(output, "-") && !(f = fopen(output, "w")))
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output);
        for (size_t i = 0; !rc && i < json_array_size(vdata); i++)
            jc_print_json(json_array_get(vdata, i), f, 0);
        if (f != stdout && f && fclose(f) && !rc)
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output);
    } else {
        fprintf(stderr, "jobctl %s: batch %s (%s) has no %s file: %s\n", jc->cmd, pos[0], st,
                errors ? "error" : "output", errors ? "no request failed" : "no request succeeded");
        if (output && strcmp(output, "-")) { /* an empty file, so pipelines find one */
            FILE *f = fopen(output, "w");
            if (!f || fclose(f))
                rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s'", output);
        }
    }
    json_decref(b);
    return rc;
}

int cmd_results(struct jc *jc, int argc, char **argv)
{
    return batch_file(jc, argc, argv, 0);
}

int cmd_errors(struct jc *jc, int argc, char **argv)
{
    return batch_file(jc, argc, argv, 1);
}

/* ---- retry-dead ------------------------------------------------------------------------------ */

static const char *retry_usage =
    "usage: jobctl retry-dead DEAD_LETTER_ID | --batch BATCH_ID [--admin-token T]\n"
    "\n"
    "Requeue dead-lettered requests with their attempts reset. A dead letter's\n"
    "id is its request id (req_...; see GET /v1/batches/ID/dead_letters). One:\n"
    "POST /v1/dead_letters/ID/retry, prints 'ID requeued'. --batch: every dead\n"
    "letter of the batch, page by page, one POST each; prints one line per\n"
    "dead letter ('ID CUSTOM_ID requeued' or '... refused: reason') and a count\n"
    "line. jobd allows it while the batch is in progress and inside its window\n"
    "(after that: resubmit the dead letter's line in a new batch). Exits 1 when\n"
    "any retry was refused. With --admin-token it acts on any tenant's dead\n"
    "letters.\n"
    "\n"
    "examples:\n"
    "  jobctl retry-dead --batch \"$id\"\n"
    "  jobctl retry-dead req_01jf8y2n6q3c5v7x9z1b3d5f7h\n";

/* POST /v1/dead_letters/ID/retry. 0: requeued. With why filled and nothing
 * printed: JC_EXIT_FAIL, jobd refused it (400 invalid_state: the batch is no
 * longer in progress); JC_EXIT_NOTFOUND, no such dead letter for this key
 * (never dead-lettered, or already retried). Any other exit code: printed
 * by jc_check (unreachable, auth, no route...). */
static int retry_one(struct jc *jc, const char *id, char *why, size_t why_len)
{
    char path[256], what[160];
    snprintf(path, sizeof path, "/v1/dead_letters/%s/retry", id);
    snprintf(what, sizeof what, "dead letter %s", id);
    struct httpc_opts o;
    jc_opts_default(&o);
    o.retry_unsafe = 1; /* a repeat answers 404, which is reported, never doubles work */
    struct httpc_response r;
    httpc_response_init(&r);
    int rc = jc_call(jc, &o, "POST", path, NULL, NULL, 0, NULL, &r);
    char msg[512], code[64];
    jc_error_fields(&r, msg, sizeof msg, code, sizeof code);
    if (!rc && (r.status == 400 || r.status == 409 || (r.status == 404 && !strcmp(code, "not_found")))) {
        snprintf(why, why_len, "HTTP %ld %s: %s", r.status, code[0] ? code : "-",
                 msg[0] ? msg : "(no message)");
        rc = r.status == 404 ? JC_EXIT_NOTFOUND : JC_EXIT_FAIL;
    } else {
        rc = jc_check(jc, "POST", path, rc, &r, what, 0);
    }
    httpc_response_release(&r);
    return rc;
}

static int retry_batch(struct jc *jc, const char *batch, int64_t page_size)
{
    char after[JC_ID_MAX] = "", what[160];
    snprintf(what, sizeof what, "batch %s", batch);
    int64_t n_seen = 0, n_ok = 0, n_refused = 0;
    int rc = 0;
    for (;;) {
        char path[320];
        snprintf(path, sizeof path, "/v1/batches/%s/dead_letters?limit=%lld%s%s", batch,
                 (long long)page_size, after[0] ? "&after=" : "", after);
        json_t *page = NULL, *data = NULL;
        if ((rc = jc_get_json(jc, path, what, &page)))
            return rc;
        if (js_get_arr(page, "data", &data)) {
            json_decref(page);
            return jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's dead letter list has no data array");
        }
        size_t n = json_array_size(data);
        for (size_t i = 0; i < n && !rc; i++) {
            const json_t *dl = json_array_get(data, i);
            const char *id = NULL, *cid = "-";
            js_get_str(dl, "custom_id", &cid);
            if (js_get_str(dl, "id", &id) || jc_check_id(jc, "dead letter", id)) {
                rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd's dead letter list has an entry without an id");
                break;
            }
            n_seen++;
            char why[700];
            int r1 = retry_one(jc, id, why, sizeof why);
            if (r1 == 0) {
                n_ok++;
                printf("%s %s requeued\n", id, cid);
            } else if (r1 == JC_EXIT_FAIL || r1 == JC_EXIT_NOTFOUND) {
                n_refused++;
                printf("%s %s refused: %s\n", id, cid, why);
            } else {
                rc = r1;
            }
            fflush(stdout);
        }
        int has_more = 0;
        js_get_bool(page, "has_more", &has_more);
        const char *last_id = NULL;
        if (n)
            js_get_str(json_array_get(data, n - 1), "id", &last_id);
        /* the cursor is "ids after this one": requeued rows leaving the list do not move it */
        int go_on = !rc && has_more && n && last_id && strlen(last_id) < sizeof after;
        if (go_on)
            snprintf(after, sizeof after, "%s", last_id);
        json_decref(page);
        if (!go_on)
            break;
    }
    if (rc)
        return rc;
    printf("batch %s: %lld dead letters, %lld requeued, %lld refused\n", batch, (long long)n_seen,
           (long long)n_ok, (long long)n_refused);
    if (n_refused)
        return jc_fail(jc, JC_EXIT_FAIL,
                       "a batch that is no longer in progress cannot requeue: resubmit the dead "
                       "letters' lines (GET /v1/batches/ID/dead_letters) in a new batch",
                       "%lld of %lld retries refused", (long long)n_refused, (long long)n_seen);
    return JC_EXIT_OK;
}

int cmd_retry_dead(struct jc *jc, int argc, char **argv)
{
    const char *batch = NULL;
    int64_t page_size = 100;
    struct cfg_opt opts[] = {
        CFG_OPT("batch", NULL, CFG_STR, &batch, "BATCH_ID", "retry every dead letter of this batch"),
        CFG_OPT("page-size", NULL, CFG_INT, &page_size, "N", "--batch: dead letters per list request, 1 .. 1000 (default 100)"),
        JC_ADMIN_OPT(jc),
        JC_COMMON_OPTS(jc),
    };
    jc->admin = 1;
    char *pos[1];
    int n_pos = 0, rc;
    if ((rc = jc_parse(jc, retry_usage, opts, sizeof opts / sizeof opts[0], argc, argv, pos, 1, 0,
                       &n_pos)) >= 0)
        return rc;
    if ((batch != NULL) == (n_pos == 1))
        return jc_usage_error(jc, "give a DEAD_LETTER_ID or --batch BATCH_ID (one of them)");
    if (page_size < 1 || page_size > 1000)
        return jc_usage_error(jc, "--page-size: 1 .. 1000");
    const char *id = batch ? batch : pos[0];
    if ((rc = jc_check_id(jc, batch ? "batch" : "dead letter", id)))
        return rc;
    if (batch)
        return retry_batch(jc, batch, page_size);
    char why[700];
    rc = retry_one(jc, id, why, sizeof why);
    if (rc == JC_EXIT_NOTFOUND)
        return jc_fail(jc, rc, "ids belong to one API key; dead letters leave the list once retried",
                       "dead letter %s not found", id);
    if (rc == JC_EXIT_FAIL)
        return jc_fail(jc, rc, "resubmit the dead letter's line (GET /v1/batches/ID/dead_letters) in a new batch",
                       "dead letter %s: retry refused: %s", id, why);
    if (rc == 0)
        printf("%s requeued\n", id);
    return rc;
}
