/* Unit tests of the harness itself: process helpers, and failure reporting.
 *
 * The th_demo_* tests misbehave on purpose and exist only when TH_DEMO=1
 * (TEST_DEMO); tests/py/test_harness.py runs them that way to prove that
 * failures, crashes and timeouts are reported and make the suite exit
 * non-zero. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/th.h"

TEST_DEMO(th_demo_check_fails)
{
    CHECK_EQ_INT(1 + 1, 3);
}

TEST_DEMO(th_demo_crash)
{
    raise(SIGSEGV);
}

TEST_DEMO(th_demo_timeout)
{
    sleep(30);
}

static void *volatile th_demo_leaked;

TEST_DEMO(th_demo_leak)
{
    th_demo_leaked = malloc(1000);
    memset(th_demo_leaked, 1, 1000);
    th_demo_leaked = NULL; /* lost: LeakSanitizer must report it */
}

TEST_DEMO(th_demo_skip)
{
    SKIP("demonstrating a skip");
}

TEST(th_tmpdir_is_private_and_writable)
{
    const char *d = th_tmpdir();
    char path[700];
    snprintf(path, sizeof path, "%s/x", d);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("x", f);
    fclose(f);
    CHECK_EQ_STR(th_tmpdir(), d);
}

TEST(th_free_port_is_bindable)
{
    int p = th_free_port();
    CHECK(p > 1024 && p < 65536);
}

TEST(th_run_captures_stdout_and_status)
{
    char out[64];
    char *ok[] = {"/bin/sh", "-c", "echo hello; exit 3", NULL};
    CHECK_EQ_INT(th_run(ok, out, sizeof out, 5000), 3);
    CHECK_EQ_STR(out, "hello\n");
    char *slow[] = {"/bin/sleep", "10", NULL};
    CHECK_EQ_INT(th_run(slow, out, sizeof out, 200), -1);
}

TEST(th_proc_serves_then_stops)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        SKIP("/usr/bin/python3 not installed");
    int port = th_free_port();
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    char *argv[] = {"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", port_s,
                    "--directory", (char *)th_tmpdir(), NULL};
    struct th_proc p;
    CHECK_EQ_INT(th_proc_start(&p, argv, NULL), 0);
    CHECK_EQ_INT(th_proc_wait_http(&p, port, "/", 10000), 0);
    int st = th_proc_stop(&p, SIGTERM, 5000);
    CHECK(WIFSIGNALED(st) || WIFEXITED(st));
    CHECK(strstr(th_proc_log(&p), "GET / HTTP/1.1") != NULL);
    /* a stopped server is no longer ready */
    CHECK_EQ_INT(th_proc_wait_http(NULL, port, "/", 300), -1);
}

TEST(th_proc_start_reports_dead_child)
{
    char *argv[] = {"/bin/false", NULL};
    struct th_proc p;
    CHECK_EQ_INT(th_proc_start(&p, argv, NULL), 0);
    CHECK_EQ_INT(th_proc_wait_http(&p, th_free_port(), "/", 5000), -1);
}
