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
