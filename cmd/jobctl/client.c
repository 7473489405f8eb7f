/* client.c - jobctl's settings, option parsing, calls to jobd and error mapping (see jobctl.h). */
#include "cmd/jobctl/jobctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/js.h"

#define JC_DEFAULT_URL "http://127.0.0.1:8080"
#define JC_CONFIG_MAX_BYTES (64u << 10)

void jc_init(struct jc *jc)
{
    memset(jc, 0, sizeof *jc);
    jc->url = JC_DEFAULT_URL;
    jc->lg.level = "warn";
    jc->cmd = "";
}

void jc_release(struct jc *jc)
{
    free(jc->file_url);
    free(jc->file_key);
    free(jc->file_admin);
    jc->file_url = jc->file_key = jc->file_admin = NULL;
}

static void jc_vmsg(const struct jc *jc, const char *hint, const char *fmt, va_list ap)
{
    fprintf(stderr, "jobctl%s%s: ", *jc->cmd ? " " : "", jc->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (hint)
        fprintf(stderr, "hint: %s\n", hint);
}

int jc_fail(const struct jc *jc, int code, const char *hint, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jc_vmsg(jc, hint, fmt, ap);
    va_end(ap);
    return code;
}

int jc_usage_error(const struct jc *jc, const char *fmt, ...)
{
    char hint[128];
    snprintf(hint, sizeof hint, "see jobctl %s --help", *jc->cmd ? jc->cmd : "");
    va_list ap;
    va_start(ap, fmt);
    jc_vmsg(jc, hint, fmt, ap);
    va_end(ap);
    return JC_EXIT_USAGE;
}

int jc_check_id(const struct jc *jc, const char *what, const char *id)
{
    size_t n = strlen(id);
    int ok = n > 0 && n < JC_ID_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = id[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
             c == '-' || c == '.';
    }
    if (!ok)
        return jc_usage_error(jc, "'%s' is not a valid %s id", id, what);
    return 0;
}

char *jc_batch_id(char *id)
{
    return strncmp(id, "msgbatch_", 9) == 0 && id[9] ? id + 3 : id;
}

/* ---- config file ----------------------------------------------------------------------------- */

static char *jc_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Read "key = value" lines: url, api_key (or api-key), admin_token. Blank lines and '#'
 * comments are skipped; a value may be quoted. missing_ok: a file that does
 * not exist is not an error (the default path). */
static int jc_load_config(struct jc *jc, const char *path, int missing_ok)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (missing_ok && errno == ENOENT)
            return 0;
        return jc_fail(jc, JC_EXIT_USAGE, "set --config / JOBCTL_CONFIG to a readable file",
                       "cannot read config file '%s': %s", path, strerror(errno));
    }
    char line[4096];
    int lineno = 0, rc = 0;
    size_t total = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        total += strlen(line);
        if (total > JC_CONFIG_MAX_BYTES || (strlen(line) == sizeof line - 1 && !strchr(line, '\n'))) {
            rc = jc_fail(jc, JC_EXIT_USAGE, NULL, "%s:%d: line or file too long", path, lineno);
            break;
        }
        char *s = jc_trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = jc_fail(jc, JC_EXIT_USAGE, "lines are 'key = value' (keys: url, api_key)",
                         "%s:%d: expected 'key = value'", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = jc_trim(s), *val = jc_trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && (val[0] == '"' || val[0] == '\'') && val[vl - 1] == val[0]) {
            val[vl - 1] = '\0';
            val++;
        }
        char **dst = NULL;
        if (!strcmp(key, "url"))
            dst = &jc->file_url;
        else if (!strcmp(key, "api_key") || !strcmp(key, "api-key"))
            dst = &jc->file_key;
        else if (!strcmp(key, "admin_token") || !strcmp(key, "admin-token"))
            dst = &jc->file_admin;
        else {
            rc = jc_fail(jc, JC_EXIT_USAGE, "known keys: url, api_key, admin_token", "%s:%d: unknown key '%s'", path,
                         lineno, key);
            break;
        }
        free(*dst);
        if (!(*dst = strdup(val)))
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "out of memory");
    }
    fclose(f);
    if (rc)
        return rc;
    if (jc->file_url)
        jc->url = jc->file_url;
    if (jc->file_key)
        jc->api_key = jc->file_key;
    if (jc->file_admin)
        jc->admin_token = jc->file_admin;
    return 0;
}

/* The config path: --config on the command line, else JOBCTL_CONFIG, else
 * ~/.config/jobctl/config (optional). */
static int jc_find_config(struct jc *jc, int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            path = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            path = argv[i] + 9;
    }
    if (!path) {
        const char *e = getenv("JOBCTL_CONFIG");
        if (e && *e)
            path = e;
    }
    if (path)
        return jc_load_config(jc, path, 0);
    const char *home = getenv("HOME");
    if (!home || !*home)
        return 0;
    char def[1024];
    if (snprintf(def, sizeof def, "%s/.config/jobctl/config", home) >= (int)sizeof def)
        return 0;
    return jc_load_config(jc, def, 1);
}

static int jc_set_base(struct jc *jc)
{
    size_t n = strlen(jc->url);
    if (n == 0 || n >= sizeof jc->base)
        return jc_usage_error(jc, "--url: '%s' is not a usable URL", jc->url);
    if (strncmp(jc->url, "http://", 7) != 0 && strncmp(jc->url, "https://", 8) != 0)
        return jc_usage_error(jc, "--url: '%s' must start with http:// or https://", jc->url);
    memcpy(jc->base, jc->url, n + 1);
    while (n && jc->base[n - 1] == '/')
        jc->base[--n] = '\0';
    if (n >= 3 && !strcmp(jc->base + n - 3, "/v1")) /* an OpenAI-style base_url */
        jc->base[n - 3] = '\0';
    return 0;
}

int jc_parse(struct jc *jc, const char *usage, struct cfg_opt *opts, size_t n_opts, int argc,
             char **argv, char **pos, int max_pos, int min_pos, int *n_pos)
{
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av)
        return jc_fail(jc, JC_EXIT_FAIL, NULL, "out of memory");
    for (int i = 0; i < argc; i++) {
        av[i] = argv[i];
        if (!strcmp(argv[i], "-o"))
            av[i] = "--output";
        else if (!strcmp(argv[i], "-h"))
            av[i] = "--help";
        else if (!strcmp(argv[i], "--"))
            break;
    }
    for (int i = 0; i < argc; i++)
        if (!av[i])
            av[i] = argv[i];
    int rc = jc_find_config(jc, argc, av);
    char err[256];
    if (!rc && cfg_parse(opts, n_opts, argc, av, pos, max_pos, n_pos, err, sizeof err))
        rc = jc_usage_error(jc, "%s", err);
    free(av);
    if (rc)
        return rc;
    if (jc->help) {
        fputs(usage, stdout);
        fputs("\noptions:\n", stdout);
        cfg_usage(opts, n_opts, stdout);
        return JC_EXIT_OK;
    }
    if (cli_log_apply("jobctl", &jc->lg))
        return JC_EXIT_USAGE;
    if (*n_pos < min_pos)
        return jc_usage_error(jc, "missing argument");
    if ((rc = jc_set_base(jc)))
        return rc;
    return -1;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

int jc_url_escape(struct buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;
    for (; *s && !rc; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '_' || c == '.' || c == '~')
            rc = buf_append_byte(b, (char)c);
        else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            rc = buf_append(b, e, 3);
        }
    }
    return rc;
}

void jc_opts_default(struct httpc_opts *o)
{
    *o = HTTPC_OPTS_DEFAULT;
    o->max_retries = 4;
}

int jc_call(struct jc *jc, const struct httpc_opts *o, const char *method, const char *path,
            const char *const *headers, const void *body, size_t len,
            const struct httpc_stream *st, struct httpc_response *resp)
{
    struct buf url, auth;
    buf_init(&url, 16384);
    buf_init(&auth, 4096);
    const char *hv[16];
    size_t nh = 0;
    int rc = buf_printf(&url, "%s%s", jc->base, path);
    int use_admin = jc->admin && jc->admin_token && *jc->admin_token;
    const char *bearer = use_admin ? jc->admin_token : jc->api_key;
    if (!rc && bearer && *bearer) {
        rc = buf_printf(&auth, "Authorization: Bearer %s", bearer);
        hv[nh++] = auth.data;
    }
    hv[nh++] = "User-Agent: jobctl/" PROJECT_VERSION;
    for (size_t i = 0; headers && headers[i] && nh < 15; i++)
        hv[nh++] = headers[i];
    hv[nh] = NULL;
    if (!rc)
        rc = st ? httpc_request_stream(o, method, url.data, hv, st, resp)
                : httpc_request(o, method, url.data, hv, body, len, resp);
    buf_release(&url);
    buf_release(&auth);
    return rc;
}

void jc_error_fields(const struct httpc_response *r, char *msg, size_t msg_len, char *code,
                            size_t code_len)
{
    msg[0] = code[0] = '\0';
    json_t *root = NULL, *e = NULL;
    struct js_limits lim = {1u << 20, 16, 0};
    if (r->body.len && !js_parse(r->body.data, r->body.len, &lim, &root, NULL) &&
        !js_get_obj(root, "error", &e)) {
        const char *s;
        if (!js_get_str(e, "message", &s))
            snprintf(msg, msg_len, "%s", s);
        if (!js_get_str(e, "code", &s))
            snprintf(code, code_len, "%s", s);
    }
    json_decref(root);
    if (!msg[0] && r->body.len && r->body.len < 200 && !root)
        snprintf(msg, msg_len, "%.*s", (int)r->body.len, r->body.data);
}

int jc_check(const struct jc *jc, const char *method, const char *path, int rc,
             const struct httpc_response *r, const char *what, int allow_304)
{
    char route[512];
    snprintf(route, sizeof route, "%s", path);
    char *q = strchr(route, '?');
    if (q)
        *q = '\0';
    if (rc == ERR_CONN || rc == ERR_TIMEOUT)
        return jc_fail(jc, JC_EXIT_UNREACHABLE, "is jobd running there? set --url or JOBD_URL",
                       "cannot reach jobd at %s: %s", jc->base,
                       rc == ERR_CONN ? "connection failed" : "no answer in time");
    if (rc == ERR_INVAL)
        return jc_fail(jc, JC_EXIT_USAGE, "set --url or JOBD_URL to http://HOST:PORT",
                       "bad jobd URL '%s'", jc->base);
    if (rc)
        return jc_fail(jc, JC_EXIT_FAIL, NULL, "%s %s: %s", method, route, err_msg(rc));
    if ((r->status >= 200 && r->status < 300) || (allow_304 && r->status == 304))
        return 0;
    char msg[512], code[64];
    jc_error_fields(r, msg, sizeof msg, code, sizeof code);
    int sent_admin = jc->admin && jc->admin_token && *jc->admin_token;
    const char *admin_hint = "set --admin-token or JOBD_ADMIN_TOKEN to jobd's --admin-token";
    if ((r->status == 401 || r->status == 403) && sent_admin)
        return jc_fail(jc, JC_EXIT_AUTH, admin_hint, "jobd refused the admin token (HTTP %ld): %s",
                       r->status, msg[0] ? msg : "unauthorized");
    if ((r->status == 401 || r->status == 403) && jc->admin == 2)
        return jc_fail(jc, JC_EXIT_AUTH, admin_hint, "%s %s needs jobd's admin token (HTTP %ld): %s",
                       method, route, r->status, msg[0] ? msg : "unauthorized");
    if (r->status == 401 || r->status == 403)
        return jc_fail(jc, JC_EXIT_AUTH,
                       "set --api-key or JOBD_API_KEY (create one with: jobd keys create --tenant NAME)",
                       "jobd refused the API key (HTTP %ld): %s", r->status, msg[0] ? msg : "unauthorized");
    if (r->status == 404 && (!code[0] || strncmp(msg, "Invalid URL", 11) == 0))
        return jc_fail(jc, JC_EXIT_NOROUTE,
                       "this jobd version does not serve that route yet; upgrade jobd",
                       "jobd has no route %s %s (HTTP 404)", method, route);
    if (r->status == 404)
        return jc_fail(jc, JC_EXIT_NOTFOUND, "ids belong to one API key; see 'jobctl list'",
                       "%s not found", what ? what : route);
    if (r->status == 405)
        return jc_fail(jc, JC_EXIT_NOROUTE, "this jobd version does not support it; upgrade jobd",
                       "jobd does not allow %s on %s (HTTP 405)", method, route);
    return jc_fail(jc, JC_EXIT_FAIL, NULL, "jobd answered HTTP %ld to %s %s: %s", r->status, method,
                   route, msg[0] ? msg : "(no message)");
}

int jc_parse_json(const struct jc *jc, const struct httpc_response *r, json_t **out)
{
    struct js_limits lim = {1u << 30, 64, 0};
    struct js_error e;
    json_t *v = NULL;
    if (js_parse(r->body.data ? r->body.data : "", r->body.len, &lim, &v, &e) || !json_is_object(v)) {
        json_decref(v);
        return jc_fail(jc, JC_EXIT_FAIL, "is --url pointing at jobd?",
                       "jobd's answer is not a JSON object");
    }
    *out = v;
    return 0;
}

int jc_get_json(struct jc *jc, const char *path, const char *what, json_t **out)
{
    struct httpc_opts o;
    jc_opts_default(&o);
    struct httpc_response r;
    httpc_response_init(&r);
    int rc = jc_call(jc, &o, "GET", path, NULL, NULL, 0, NULL, &r);
    rc = jc_check(jc, "GET", path, rc, &r, what, 0);
    if (!rc)
        rc = jc_parse_json(jc, &r, out);
    httpc_response_release(&r);
    return rc;
}

void jc_print_json(const json_t *v, FILE *out, int indent)
{
    char *s = json_dumps(v, (indent ? JSON_INDENT(indent) : JSON_COMPACT) | JSON_PRESERVE_ORDER);
    if (s) {
        fputs(s, out);
        fputc('\n', out);
        free(s);
    }
}

void jc_fmt_time(int64_t t, char *out, size_t out_len)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(out, out_len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, out_len, "-");
}

void jc_fmt_micros(int64_t micros, char *out, size_t out_len)
{
    if (micros < 0)
        snprintf(out, out_len, "-");
    else
        snprintf(out, out_len, "$%lld.%06lld", (long long)(micros / 1000000), (long long)(micros % 1000000));
}

void jc_fmt_duration(int64_t s, char *out, size_t out_len)
{
    if (s < 0)
        s = 0;
    if (s >= 86400)
        snprintf(out, out_len, "%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
    else if (s >= 3600)
        snprintf(out, out_len, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
    else if (s >= 60)
        snprintf(out, out_len, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    else
        snprintf(out, out_len, "%llds", (long long)s);
}

int jc_batch_outcome(const json_t *b)
{
    const char *st = NULL;
    if (js_get_str(b, "status", &st))
        return -1;
    if (!strcmp(st, "completed")) {
        json_t *rc = NULL;
        int64_t failed = 0;
        if (!js_get_obj(b, "request_counts", &rc))
            js_get_int(rc, "failed", &failed);
        return failed > 0 ? JC_EXIT_PARTIAL : JC_EXIT_OK;
    }
    if (!strcmp(st, "failed"))
        return JC_EXIT_FAILED;
    if (!strcmp(st, "expired"))
        return JC_EXIT_EXPIRED;
    if (!strcmp(st, "cancelled"))
        return JC_EXIT_CANCELLED;
    return -1;
}

/* ---- downloads ----------------------------------------------------------------------------- */

struct jc_dl {
    FILE *out;
    const struct httpc_response *resp;
    int raw, checked;
};

static int jc_dl_sink(void *ctx, const void *data, size_t n)
{
    struct jc_dl *d = ctx;
    if (!d->checked) {
        char ce[64];
        int zstd = httpc_response_header(d->resp, "Content-Encoding", ce, sizeof ce) == 0 &&
                   strstr(ce, "zstd") != NULL;
        if (zstd != d->raw)
            return ERR_UNSUPPORTED;
        d->checked = 1;
    }
    return fwrite(data, 1, n, d->out) == n ? 0 : ERR_IO;
}

int jc_download(struct jc *jc, const char *file_id, const char *output, int raw)
{
    int to_stdout = !output || !strcmp(output, "-");
    char tmp[4096];
    FILE *f = stdout;
    if (!to_stdout) {
        if (snprintf(tmp, sizeof tmp, "%s.tmp", output) >= (int)sizeof tmp)
            return jc_usage_error(jc, "--output: path too long");
        if (!(f = fopen(tmp, "wb")))
            return jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s': %s", tmp, strerror(errno));
    }
    struct buf path;
    buf_init(&path, 1024);
    buf_printf(&path, "/v1/files/%s/content", file_id);
    struct httpc_opts o;
    jc_opts_default(&o);
    o.timeout_ms = 0; /* any size: no cap on the whole exchange ... */
    o.stall_timeout_ms = 60000; /* ... but a stalled one is abandoned */
    struct httpc_response r;
    httpc_response_init(&r);
    struct jc_dl d = {f, &r, raw, 0};
    struct httpc_stream st = {NULL, NULL, NULL, 0, jc_dl_sink, &d};
    const char *hdr[] = {raw ? "Accept-Encoding: zstd" : "Accept-Encoding: identity", NULL};
    int rc = jc_call(jc, &o, "GET", path.data, hdr, NULL, 0, &st, &r);
    char what[160];
    snprintf(what, sizeof what, "file %s", file_id);
    if (rc == ERR_UNSUPPORTED)
        rc = jc_fail(jc, JC_EXIT_FAIL, raw ? "use it without --raw" : NULL,
                     raw ? "jobd did not send the zstd stream (no Content-Encoding: zstd)"
                         : "jobd sent compressed content that was not asked for");
    else if (rc == ERR_IO)
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write the content: %s", strerror(errno));
    else
        rc = jc_check(jc, "GET", path.data, rc, &r, what, 0);
    if (fflush(f) && !rc)
        rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write the content: %s", strerror(errno));
    if (!to_stdout) {
        if (fclose(f) && !rc)
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot write '%s': %s", tmp, strerror(errno));
        if (!rc && rename(tmp, output))
            rc = jc_fail(jc, JC_EXIT_FAIL, NULL, "cannot rename '%s' to '%s': %s", tmp, output,
                         strerror(errno));
        if (rc)
            unlink(tmp);
    }
    httpc_response_release(&r);
    buf_release(&path);
    return rc;
}
