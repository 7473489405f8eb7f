/* Unit tests: logging (text and JSON lines) and configuration (flags, env). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cfg.h"
#include "common/err.h"
#include "common/js.h"
#include "common/log.h"
#include "tests/th.h"

/* Run fn with logging to a pipe; return what was written. */
static const char *capture(enum log_format fmt, void (*fn)(void))
{
    static char out[65536];
    int fds[2];
    if (pipe(fds))
        abort();
    log_init("testprog", LOG_INFO, fmt, fds[1]);
    fn();
    close(fds[1]);
    ssize_t n = read(fds[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    log_init("testprog", LOG_INFO, LOG_TEXT, 2);
    return out;
}

static void emit_three(void)
{
    log_debug("hidden below the level");
    log_info("hello %d", 42);
    log_write(LOG_WARN, "req_123", "forged\nline \"quoted\"");
}

TEST(log_text_one_line_per_event)
{
    const char *out = capture(LOG_TEXT, emit_three);
    CHECK(strstr(out, "hidden") == NULL);
    CHECK(strstr(out, " info testprog hello 42\n") != NULL);
    CHECK(strstr(out, " warn testprog [req_123] forged\\x0aline \"quoted\"\n") != NULL);
    int lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_INT(lines, 2);
}

TEST(log_json_lines_parse)
{
    const char *out = capture(LOG_JSON, emit_three);
    const char *nl = strchr(out, '\n');
    CHECK(nl != NULL);
    struct js_limits lim = JS_LIMITS_DEFAULT;
    json_t *a, *b;
    CHECK_EQ_INT(js_parse(out, (size_t)(nl - out), &lim, &a, NULL), 0);
    CHECK_EQ_INT(js_parse(nl + 1, strlen(nl + 1) - 1, &lim, &b, NULL), 0);
    const char *s;
    CHECK_EQ_INT(js_get_str(a, "msg", &s), 0);
    CHECK_EQ_STR(s, "hello 42");
    CHECK_EQ_INT(js_get_str(a, "level", &s), 0);
    CHECK_EQ_STR(s, "info");
    CHECK_EQ_INT(js_get_str(a, "prog", &s), 0);
    CHECK_EQ_STR(s, "testprog");
    CHECK_EQ_INT(js_get_str(a, "ts", &s), 0);
    CHECK(strlen(s) == 24 && s[23] == 'Z');
    CHECK_EQ_INT(js_get_str(b, "req_id", &s), 0);
    CHECK_EQ_STR(s, "req_123");
    CHECK_EQ_INT(js_get_str(b, "msg", &s), 0);
    CHECK_EQ_STR(s, "forged\nline \"quoted\"");
    json_decref(a);
    json_decref(b);
}

static void emit_huge(void)
{
    char *big = malloc(LOG_LINE_MAX * 2);
    memset(big, 'x', LOG_LINE_MAX * 2 - 1);
    big[LOG_LINE_MAX * 2 - 1] = '\0';
    log_info("%s", big);
    free(big);
}

TEST(log_truncates_long_lines)
{
    const char *out = capture(LOG_TEXT, emit_huge);
    CHECK(strstr(out, "[truncated]\n") != NULL);
    CHECK(strlen(out) < LOG_LINE_MAX + 200);
}

TEST(log_level_and_format_parse)
{
    enum log_level l;
    enum log_format f;
    CHECK_EQ_INT(log_level_parse("warn", &l), 0);
    CHECK_EQ_INT(l, LOG_WARN);
    CHECK_EQ_INT(log_level_parse("verbose", &l), ERR_INVAL);
    CHECK_EQ_INT(log_format_parse("json", &f), 0);
    CHECK_EQ_INT(f, LOG_JSON);
    CHECK_EQ_INT(log_format_parse("xml", &f), ERR_INVAL);
}

TEST(cfg_value_parsers)
{
    int64_t i, ms;
    uint64_t sz;
    int b;
    CHECK_EQ_INT(cfg_parse_int("-42", &i), 0);
    CHECK_EQ_INT(i, -42);
    CHECK_EQ_INT(cfg_parse_int("4x", &i), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_int("", &i), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_int("99999999999999999999", &i), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_size("64M", &sz), 0);
    CHECK_EQ_INT(sz, 64ull << 20);
    CHECK_EQ_INT(cfg_parse_size("2GiB", &sz), 0);
    CHECK_EQ_INT(sz, 2ull << 30);
    CHECK_EQ_INT(cfg_parse_size("512", &sz), 0);
    CHECK_EQ_INT(sz, 512);
    CHECK_EQ_INT(cfg_parse_size("-1M", &sz), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_size("10Q", &sz), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_size("99999999999T", &sz), ERR_INVAL); /* overflow */
    CHECK_EQ_INT(cfg_parse_duration_ms("24h", &ms), 0);
    CHECK_EQ_INT(ms, 86400000);
    CHECK_EQ_INT(cfg_parse_duration_ms("7d", &ms), 0);
    CHECK_EQ_INT(ms, 7 * 86400000LL);
    CHECK_EQ_INT(cfg_parse_duration_ms("250ms", &ms), 0);
    CHECK_EQ_INT(ms, 250);
    CHECK_EQ_INT(cfg_parse_duration_ms("30", &ms), 0);
    CHECK_EQ_INT(ms, 30000);
    CHECK_EQ_INT(cfg_parse_duration_ms("1w", &ms), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_duration_ms("h", &ms), ERR_INVAL);
    CHECK_EQ_INT(cfg_parse_bool("yes", &b), 0);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(cfg_parse_bool("maybe", &b), ERR_INVAL);
}

struct opts {
    const char *listen, *name;
    int64_t n, window;
    uint64_t mem;
    int flag;
};

static int run_cfg(struct opts *o, int argc, char **argv, char **pos, int *n_pos, char *err)
{
    struct cfg_opt table[] = {
        CFG_OPT("listen", "TEST_LISTEN", CFG_STR, &o->listen, "ADDR", "where"),
        CFG_OPT("name", NULL, CFG_STR, &o->name, "NAME", "who"),
        CFG_OPT("n", "TEST_N", CFG_INT, &o->n, "N", "how many"),
        CFG_OPT("window", NULL, CFG_DURATION, &o->window, "DUR", "how long"),
        CFG_OPT("mem", "TEST_MEM", CFG_SIZE, &o->mem, "SIZE", "how much"),
        CFG_OPT("flag", NULL, CFG_BOOL, &o->flag, NULL, "whether"),
    };
    return cfg_parse(table, 6, argc, argv, pos, 4, n_pos, err, 256);
}

TEST(cfg_flags_override_environment)
{
    setenv("TEST_LISTEN", "0.0.0.0:1", 1);
    setenv("TEST_N", "5", 1);
    setenv("TEST_MEM", "1K", 1);
    struct opts o = {0};
    char *argv[] = {"submit", "--listen", "127.0.0.1:9", "file.jsonl", "--n=7", "--flag",
                    "--window", "1h", "--", "--not-an-option"};
    char *pos[4], err[256];
    int n_pos;
    CHECK_EQ_INT(run_cfg(&o, 10, argv, pos, &n_pos, err), 0);
    CHECK_EQ_STR(o.listen, "127.0.0.1:9");
    CHECK_EQ_INT(o.n, 7);
    CHECK_EQ_INT(o.mem, 1024); /* from the environment */
    CHECK_EQ_INT(o.flag, 1);
    CHECK_EQ_INT(o.window, 3600000);
    CHECK_EQ_INT(n_pos, 3);
    CHECK_EQ_STR(pos[0], "submit");
    CHECK_EQ_STR(pos[1], "file.jsonl");
    CHECK_EQ_STR(pos[2], "--not-an-option");
}

TEST(cfg_errors_name_the_problem)
{
    struct opts o = {0};
    char *pos[4], err[256];
    int n_pos;
    char *a1[] = {"--nope"};
    CHECK_EQ_INT(run_cfg(&o, 1, a1, pos, &n_pos, err), ERR_INVAL);
    CHECK_EQ_STR(err, "unknown option '--nope'");
    char *a2[] = {"--n", "abc"};
    CHECK_EQ_INT(run_cfg(&o, 2, a2, pos, &n_pos, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--n: 'abc' is not an integer");
    char *a3[] = {"--listen"};
    CHECK_EQ_INT(run_cfg(&o, 1, a3, pos, &n_pos, err), ERR_INVAL);
    CHECK_EQ_STR(err, "option '--listen' needs a value");
    char *a4[] = {"-x"};
    CHECK_EQ_INT(run_cfg(&o, 1, a4, pos, &n_pos, err), ERR_INVAL);
    char *a5[] = {"a", "b", "c", "d", "e"};
    CHECK_EQ_INT(run_cfg(&o, 5, a5, pos, &n_pos, err), ERR_INVAL);
    CHECK_EQ_STR(err, "unexpected argument 'e'");
    setenv("TEST_N", "lots", 1);
    char *a6[] = {"x"};
    CHECK_EQ_INT(run_cfg(&o, 1, a6, pos, &n_pos, err), ERR_INVAL);
    CHECK_EQ_STR(err, "TEST_N: 'lots' is not an integer");
}

struct ranged {
    int threads;             /* a 4-byte destination */
    size_t conns;            /* an unsigned 8-byte one */
    int64_t retention_s;     /* CFG_DURATION_S */
    uint64_t body;
    const char *stops[2];
    size_t n_stops;
};

static int run_ranged(struct ranged *r, int argc, char **argv, char *err)
{
    struct cfg_str_list stops = {r->stops, 2, &r->n_stops};
    struct cfg_opt table[] = {
        CFG_OPT("threads", NULL, CFG_INT, &r->threads, "N", "threads", 1, 64),
        CFG_OPT("conns", "TEST_CONNS", CFG_INT, &r->conns, "N", "connections", 1, CFG_NO_MAX),
        CFG_OPT("retention", NULL, CFG_DURATION_S, &r->retention_s, "DUR", "how long", 1000, 30LL * 86400 * 1000),
        CFG_OPT("body", NULL, CFG_SIZE, &r->body, "SIZE", "body cap", 1, 512LL << 20),
        CFG_OPT("stop", NULL, CFG_STR_LIST, &stops, "STR", "stop string (repeatable)"),
    };
    int n_pos;
    return cfg_parse(table, 5, argc, argv, NULL, 0, &n_pos, err, 256);
}

TEST(cfg_values_in_range_reach_fields_of_any_width)
{
    struct ranged r = {0};
    char err[256];
    char *argv[] = {"--threads", "64", "--conns=1", "--retention", "90m", "--body", "512M"};
    CHECK_EQ_INT(run_ranged(&r, 7, argv, err), 0);
    CHECK_EQ_INT(r.threads, 64);
    CHECK_EQ_INT(r.conns, 1);
    CHECK_EQ_INT(r.retention_s, 5400); /* seconds */
    CHECK_EQ_INT(r.body, 512u << 20);
    char *trunc[] = {"--retention", "1999ms"};
    CHECK_EQ_INT(run_ranged(&r, 2, trunc, err), 0);
    CHECK_EQ_INT(r.retention_s, 1); /* whole seconds, truncated */
}

TEST(cfg_range_errors_name_the_flag_and_the_range)
{
    struct ranged r = {0};
    char err[256];
    char *a1[] = {"--threads", "0"};
    CHECK_EQ_INT(run_ranged(&r, 2, a1, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--threads 0 is out of range (1..64)");
    CHECK_EQ_INT(r.threads, 0); /* not written */
    char *a2[] = {"--threads=65"};
    CHECK_EQ_INT(run_ranged(&r, 1, a2, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--threads 65 is out of range (1..64)");
    char *a3[] = {"--conns", "-1"};
    CHECK_EQ_INT(run_ranged(&r, 2, a3, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--conns -1 is out of range (at least 1)");
    char *a4[] = {"--retention", "500ms"};
    CHECK_EQ_INT(run_ranged(&r, 2, a4, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--retention 500ms is out of range (1s..30d)");
    char *a5[] = {"--body", "0"};
    CHECK_EQ_INT(run_ranged(&r, 2, a5, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--body 0 is out of range (1..512M)");
    char *a6[] = {"--body", "1G"};
    CHECK_EQ_INT(run_ranged(&r, 2, a6, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--body 1G is out of range (1..512M)");
    setenv("TEST_CONNS", "0", 1);
    char *a7[] = {"--threads", "2"};
    CHECK_EQ_INT(run_ranged(&r, 2, a7, err), ERR_INVAL);
    CHECK_EQ_STR(err, "TEST_CONNS 0 is out of range (at least 1)");
    unsetenv("TEST_CONNS");
}

TEST(cfg_unranged_int_must_fit_its_destination)
{
    int small = 0;
    int64_t big = 0;
    struct cfg_opt table[] = {
        CFG_OPT("small", NULL, CFG_INT, &small, "N", "a 4-byte int"),
        CFG_OPT("big", NULL, CFG_INT, &big, "N", "an 8-byte int"),
    };
    char err[256];
    int n_pos;
    char *ok[] = {"--small", "-2147483648", "--big", "9223372036854775807"};
    CHECK_EQ_INT(cfg_parse(table, 2, 4, ok, NULL, 0, &n_pos, err, sizeof err), 0);
    CHECK_EQ_INT(small, INT32_MIN);
    CHECK(big == INT64_MAX);
    char *bad[] = {"--small", "2147483648"};
    CHECK_EQ_INT(cfg_parse(table, 2, 2, bad, NULL, 0, &n_pos, err, sizeof err), ERR_INVAL);
    CHECK_EQ_STR(err, "--small 2147483648 is out of range (-2147483648..2147483647)");
}

TEST(cfg_str_list_appends_each_occurrence_up_to_its_cap)
{
    struct ranged r = {0};
    char err[256];
    char *argv[] = {"--stop", "a", "--stop=b"};
    CHECK_EQ_INT(run_ranged(&r, 3, argv, err), 0);
    CHECK_EQ_INT(r.n_stops, 2);
    CHECK_EQ_STR(r.stops[0], "a");
    CHECK_EQ_STR(r.stops[1], "b");
    struct ranged r2 = {0};
    char *three[] = {"--stop", "a", "--stop", "b", "--stop", "c"};
    CHECK_EQ_INT(run_ranged(&r2, 6, three, err), ERR_INVAL);
    CHECK_EQ_STR(err, "--stop may be given at most 2 times");
    char *none[] = {"--stop"};
    CHECK_EQ_INT(run_ranged(&r2, 1, none, err), ERR_INVAL);
    CHECK_EQ_STR(err, "option '--stop' needs a value");
}

TEST(cfg_format_duration_picks_the_largest_exact_unit)
{
    char s[32];
    cfg_format_duration_ms(30LL * 86400 * 1000, s, sizeof s);
    CHECK_EQ_STR(s, "30d");
    cfg_format_duration_ms(90 * 60000, s, sizeof s);
    CHECK_EQ_STR(s, "90m");
    cfg_format_duration_ms(1500, s, sizeof s);
    CHECK_EQ_STR(s, "1500ms");
    cfg_format_duration_ms(0, s, sizeof s);
    CHECK_EQ_STR(s, "0s");
    int64_t back;
    cfg_format_duration_ms(7200000, s, sizeof s);
    CHECK_EQ_INT(cfg_parse_duration_ms(s, &back), 0);
    CHECK_EQ_INT(back, 7200000);
}
