/* th.c - test runner: one forked process per test, with a timeout (see th.h). */
#include "th.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX_TESTS 1024
#define TH_EXIT_CHECK 99 /* a CHECK failed and printed its FAIL line */
#define TH_EXIT_SKIP 77

static struct { const char *name; th_fn fn; } th_tests[TH_MAX_TESTS];
static int th_n_tests;
static const char *th_current = "?";

void th_register(const char *name, th_fn fn)
{
    if (th_n_tests == TH_MAX_TESTS) {
        fprintf(stderr, "th: more than %d tests in one binary\n", TH_MAX_TESTS);
        abort();
    }
    th_tests[th_n_tests].name = name;
    th_tests[th_n_tests].fn = fn;
    th_n_tests++;
}

void th_register_demo(const char *name, th_fn fn)
{
    const char *d = getenv("TH_DEMO");
    if (d && strcmp(d, "1") == 0)
        th_register(name, fn);
}

void th_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    printf("FAIL %s %s:%d: %s", th_current, file, line, expr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        printf(" (");
        vprintf(fmt, ap);
        printf(")");
        va_end(ap);
    }
    printf("\n");
    fflush(stdout);
    exit(TH_EXIT_CHECK);
}

void th_skip(const char *reason)
{
    printf("skip %s: %s\n", th_current, reason);
    fflush(stdout);
    exit(TH_EXIT_SKIP);
}

static int th_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Run one test in a child; returns 0 pass, 1 fail, 2 skip. */
static int th_run_one(int i, int timeout_s, const char *tmp_root)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/%d", tmp_root, i);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL %s: fork: %s\n", th_tests[i].name, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* so the parent can kill everything the test started */
        setenv("TH_TMP", tmp, 1);
        th_current = th_tests[i].name;
        th_tests[i].fn();
        fflush(stdout);
        exit(0);
    }
    setpgid(pid, pid);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = 0, timed_out = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= timeout_s) {
            timed_out = 1;
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(2000);
    }
    kill(-pid, SIGKILL); /* anything the test left running */
    nftw(tmp, th_rm_entry, 16, FTW_DEPTH | FTW_PHYS);

    const char *name = th_tests[i].name;
    if (timed_out) {
        printf("FAIL %s: timed out after %d s\n", name, timeout_s);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        printf("FAIL %s: killed by signal %d (%s)\n", name, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
        return 1;
    }
    int code = WEXITSTATUS(status);
    if (code == 0) {
        printf("ok %s\n", name);
        return 0;
    }
    if (code == TH_EXIT_SKIP)
        return 2;
    if (code != TH_EXIT_CHECK)
        printf("FAIL %s: exit status %d (sanitizer or leak report above?)\n", name, code);
    return 1;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int timeout_s = getenv("TH_TIMEOUT") ? atoi(getenv("TH_TIMEOUT")) : 240;
    if (timeout_s <= 0)
        timeout_s = 240;
    setvbuf(stdout, NULL, _IOLBF, 0);
    char tmp_root[512];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp_root, sizeof tmp_root, "%s/th.%d", base, (int)getpid());
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < th_n_tests; i++) {
        if (filter && !strstr(th_tests[i].name, filter))
            continue;
        int r = th_run_one(i, timeout_s, tmp_root);
        passed += r == 0;
        failed += r == 1;
        skipped += r == 2;
    }
    nftw(tmp_root, th_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("# tally %d %d %d\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

void *th_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (p = malloc((size_t)n + 1)) && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (!p)
        return NULL;
    p[n] = '\0';
    if (len)
        *len = (size_t)n;
    return p;
}

void *th_read_file(const char *path, size_t *len)
{
    void *p = th_slurp(path, len);
    if (!p)
        th_fail(__FILE__, __LINE__, path, "cannot read");
    return p;
}

double th_rel_l2(const float *got, const float *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(want[i]))
            return INFINITY;
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
