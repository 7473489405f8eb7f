/* cfg.c - flags and environment variables (see cfg.h). */
#include "cfg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "err.h"

int cfg_parse_int(const char *s, int64_t *out)
{
    if (!*s)
        return ERR_INVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return ERR_INVAL;
    *out = v;
    return 0;
}

int cfg_parse_micros(const char *s, int64_t max, int64_t *out)
{
    int64_t v = 0;
    int digits = 0, frac = -1;
    for (; *s; s++) {
        if (*s == '.' && frac < 0 && digits > 0) {
            frac = 0;
            continue;
        }
        if (*s < '0' || *s > '9' || frac == 6)
            return ERR_INVAL;
        if (v > (max - (*s - '0')) / 10)
            return ERR_INVAL;
        v = v * 10 + (*s - '0');
        digits++;
        if (frac >= 0)
            frac++;
    }
    if (!digits || frac == 0)
        return ERR_INVAL;
    for (int k = frac < 0 ? 0 : frac; k < 6; k++) {
        if (v > max / 10)
            return ERR_INVAL;
        v *= 10;
    }
    if (v > max)
        return ERR_INVAL;
    *out = v;
    return 0;
}

/* Parse a non-negative whole number prefix; *rest gets the suffix. */
static int cfg_parse_prefix(const char *s, uint64_t *out, const char **rest)
{
    if (*s < '0' || *s > '9')
        return ERR_INVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return ERR_INVAL;
    *out = v;
    *rest = end;
    return 0;
}

static int cfg_mul(uint64_t v, uint64_t m, uint64_t *out)
{
    if (m && v > UINT64_MAX / m)
        return ERR_INVAL;
    *out = v * m;
    return 0;
}

int cfg_parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    const char *u;
    if (cfg_parse_prefix(s, &v, &u))
        return ERR_INVAL;
    static const struct { const char *unit; uint64_t mul; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"M", 1ull << 20},
        {"MiB", 1ull << 20}, {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"T", 1ull << 40},
        {"TiB", 1ull << 40},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(u, units[i].unit) == 0)
            return cfg_mul(v, units[i].mul, out);
    return ERR_INVAL;
}

int cfg_parse_duration_ms(const char *s, int64_t *out)
{
    uint64_t v, r;
    const char *u;
    if (cfg_parse_prefix(s, &v, &u))
        return ERR_INVAL;
    static const struct { const char *unit; uint64_t mul; } units[] = {
        {"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(u, units[i].unit) == 0) {
            if (cfg_mul(v, units[i].mul, &r) || r > (uint64_t)INT64_MAX)
                return ERR_INVAL;
            *out = (int64_t)r;
            return 0;
        }
    }
    return ERR_INVAL;
}

int cfg_parse_bool(const char *s, int *out)
{
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off"))
        *out = 0;
    else
        return ERR_INVAL;
    return 0;
}

void cfg_format_duration_ms(int64_t ms, char *out, size_t out_len)
{
    static const struct { const char *unit; int64_t mul; } units[] = {
        {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms == 0 || ms % units[i].mul == 0) {
            snprintf(out, out_len, "%lld%s", (long long)(ms / units[i].mul), ms ? units[i].unit : "s");
            return;
        }
    }
    snprintf(out, out_len, "%lldms", (long long)ms);
}

/* One bound of a range, in the option's unit ("1h", "512M", "64"). */
static void cfg_format_bound(enum cfg_type type, int64_t v, char *out, size_t out_len)
{
    static const char suffix[] = "KMGT";
    if (type == CFG_DURATION || type == CFG_DURATION_S) {
        cfg_format_duration_ms(v, out, out_len);
        return;
    }
    int k = 0;
    while (type == CFG_SIZE && v && k < 4 && v % 1024 == 0) {
        v /= 1024;
        k++;
    }
    snprintf(out, out_len, "%lld%.*s", (long long)v, k ? 1 : 0, k ? &suffix[k - 1] : "");
}

/* The accepted range of an integer option: its own, within what dst holds. */
static void cfg_range(const struct cfg_opt *o, int64_t *lo, int64_t *hi)
{
    int64_t wlo = o->dst_size == 4 ? INT32_MIN : INT64_MIN;
    int64_t whi = o->dst_size == 4 ? INT32_MAX : INT64_MAX;
    if (o->type != CFG_INT)
        wlo = 0;
    *lo = wlo;
    *hi = whi;
    if (o->min || o->max) {
        *lo = o->min > wlo ? o->min : wlo;
        *hi = o->max < whi ? o->max : whi;
    }
}

/* Check v against the option's range and store it (seconds for CFG_DURATION_S). */
static int cfg_store(const struct cfg_opt *o, int64_t v, int fits, const char *val,
                     const char *origin, char *err, size_t err_len)
{
    int64_t lo, hi;
    cfg_range(o, &lo, &hi);
    if (!fits || v < lo || v > hi) {
        char a[32] = "", b[32] = "";
        cfg_format_bound(o->type, lo, a, sizeof a);
        cfg_format_bound(o->type, hi, b, sizeof b);
        if (hi == INT64_MAX)
            snprintf(err, err_len, "%s %s is out of range (at least %s)", origin, val, a);
        else
            snprintf(err, err_len, "%s %s is out of range (%s..%s)", origin, val, a, b);
        return ERR_INVAL;
    }
    if (o->type == CFG_DURATION_S)
        v /= 1000;
    if (o->dst_size == 4) {
        int32_t x = (int32_t)v;
        memcpy(o->dst, &x, sizeof x);
    } else {
        memcpy(o->dst, &v, sizeof v);
    }
    return 0;
}

static int cfg_set(const struct cfg_opt *o, const char *val, const char *origin, char *err,
                   size_t err_len)
{
    int rc = 0;
    const char *what = "a value";
    int64_t v = 0;
    uint64_t u = 0;
    switch (o->type) {
    case CFG_STR: *(const char **)o->dst = val; return 0;
    case CFG_BOOL: rc = cfg_parse_bool(val, (int *)o->dst); what = "true or false"; break;
    case CFG_INT: rc = cfg_parse_int(val, &v); what = "an integer"; break;
    case CFG_SIZE: rc = cfg_parse_size(val, &u); what = "a size like 64M"; break;
    case CFG_DURATION:
    case CFG_DURATION_S:
        rc = cfg_parse_duration_ms(val, &v);
        what = "a duration like 30s or 24h";
        break;
    case CFG_STR_LIST: {
        struct cfg_str_list *l = o->dst;
        if (*l->n >= l->cap) {
            snprintf(err, err_len, "%s may be given at most %zu times", origin, l->cap);
            return ERR_INVAL;
        }
        l->items[(*l->n)++] = val;
        return 0;
    }
    }
    if (rc) {
        snprintf(err, err_len, "%s: '%s' is not %s", origin, val, what);
        return ERR_INVAL;
    }
    if (o->type == CFG_BOOL)
        return 0;
    if (o->type == CFG_SIZE)
        return cfg_store(o, (int64_t)u, u <= (uint64_t)INT64_MAX, val, origin, err, err_len);
    return cfg_store(o, v, 1, val, origin, err, err_len);
}

int cfg_parse(const struct cfg_opt *opts, size_t n_opts, int argc, char **argv,
              char **positionals, int max_pos, int *n_pos, char *err, size_t err_len)
{
    for (size_t i = 0; i < n_opts; i++) {
        const char *v = opts[i].env ? getenv(opts[i].env) : NULL;
        if (v && *v && cfg_set(&opts[i], v, opts[i].env, err, err_len))
            return ERR_INVAL;
    }
    int np = 0, only_pos = 0;
    for (int a = 0; a < argc; a++) {
        char *arg = argv[a];
        if (!only_pos && strcmp(arg, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (only_pos || arg[0] != '-' || arg[1] == '\0') { /* "-" alone means stdin */
            if (np >= max_pos) {
                snprintf(err, err_len, "unexpected argument '%s'", arg);
                return ERR_INVAL;
            }
            positionals[np++] = arg;
            continue;
        }
        if (arg[1] != '-') {
            snprintf(err, err_len, "unknown option '%s' (options are spelled --name)", arg);
            return ERR_INVAL;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct cfg_opt *o = NULL;
        for (size_t i = 0; i < n_opts; i++)
            if (strlen(opts[i].name) == nlen && strncmp(opts[i].name, name, nlen) == 0)
                o = &opts[i];
        if (!o) {
            snprintf(err, err_len, "unknown option '--%.*s'", (int)nlen, name);
            return ERR_INVAL;
        }
        const char *val;
        if (eq)
            val = eq + 1;
        else if (o->type == CFG_BOOL)
            val = "true";
        else if (a + 1 < argc)
            val = argv[++a];
        else {
            snprintf(err, err_len, "option '--%s' needs a value", o->name);
            return ERR_INVAL;
        }
        char origin[80];
        snprintf(origin, sizeof origin, "--%s", o->name);
        if (cfg_set(o, val, origin, err, err_len))
            return ERR_INVAL;
    }
    *n_pos = np;
    return 0;
}

void cfg_usage(const struct cfg_opt *opts, size_t n_opts, FILE *out)
{
    for (size_t i = 0; i < n_opts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(out, "  %-26s %s", left, opts[i].help);
        if (opts[i].env)
            fprintf(out, " [env: %s]", opts[i].env);
        fputc('\n', out);
    }
}
