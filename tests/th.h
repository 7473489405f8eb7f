/*
 * th.h - the test harness: register tests, check, run each in its own process.
 *
 *   TEST(buf_grows) { struct buf b; buf_init(&b, 10); CHECK_EQ_INT(buf_append(&b,"x",1), 0); }
 *
 * A test binary built from any number of files that use TEST() gets main()
 * from th.c. It runs every registered test (or those whose name contains the
 * first argument) in a forked child with a timeout (TH_TIMEOUT seconds,
 * default 240: generous, since the machine is shared; it catches hangs), and prints one line per test:
 *
 *   ok buf_grows
 *   FAIL buf_caps tests/unit/test_buf.c:31: buf_append(&b, "x", 1) == ERR_TOOBIG (got 0 vs -997)
 *   FAIL slow_test: timed out after 60 s
 *   skip cuda_parity: no GPU
 *
 * and finally "# tally P F S" (passed, failed, skipped), which tests/run
 * sums into the one summary line of make test. Exit status: 0 if nothing
 * failed. A failed CHECK ends the test at once; a crash, a sanitizer report
 * or a leak (the child's non-zero exit) is a failure too.
 */
#ifndef TESTS_TH_H
#define TESTS_TH_H

#include <stdint.h>
#include <string.h>

typedef void (*th_fn)(void);
void th_register(const char *name, th_fn fn);

/* Report a failed check and end the test (never returns). */
__attribute__((noreturn)) void th_fail(const char *file, int line, const char *expr,
                                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* End the test as skipped (never returns). */
__attribute__((noreturn)) void th_skip(const char *reason);

#define TEST(name)                                                                   \
    static void name(void);                                                          \
    __attribute__((constructor)) static void th_reg_##name(void) { th_register(#name, name); } \
    static void name(void)

/* A test of the harness itself that misbehaves on purpose (fails, crashes,
 * hangs): registered only when TH_DEMO=1, so it never counts in a normal run
 * (tests/py/test_harness.py runs the th_demo_* tests that way). */
void th_register_demo(const char *name, th_fn fn);
#define TEST_DEMO(name)                                                              \
    static void name(void);                                                          \
    __attribute__((constructor)) static void th_reg_##name(void) { th_register_demo(#name, name); } \
    static void name(void)

#define CHECK(expr)                                                   \
    do {                                                              \
        if (!(expr))                                                  \
            th_fail(__FILE__, __LINE__, #expr, NULL);                 \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                \
    do {                                                                                  \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                        \
        if (th_a_ != th_b_)                                                               \
            th_fail(__FILE__, __LINE__, #a " == " #b, "got %lld vs %lld", th_a_, th_b_); \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                               \
    do {                                                                                 \
        const char *th_a_ = (a), *th_b_ = (b);                                           \
        if (!th_a_ || !th_b_ || strcmp(th_a_, th_b_) != 0)                               \
            th_fail(__FILE__, __LINE__, #a " == " #b, "got \"%.200s\" vs \"%.200s\"",    \
                    th_a_ ? th_a_ : "(null)", th_b_ ? th_b_ : "(null)");                 \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                            \
    do {                                                                                 \
        double th_a_ = (double)(a), th_b_ = (double)(b), th_t_ = (double)(tol);          \
        if (!(th_a_ - th_b_ <= th_t_ && th_b_ - th_a_ <= th_t_))                         \
            th_fail(__FILE__, __LINE__, #a " ~= " #b, "got %.9g vs %.9g (tol %.3g)", th_a_, \
                    th_b_, th_t_);                                                       \
    } while (0)

#define SKIP(reason) th_skip(reason)

/* ---- data helpers (tests/th.c) ---- */

/* A whole file in malloc'd memory with one NUL byte after its end; *len
 * (when not NULL) gets its size. NULL if it cannot be read. */
void *th_slurp(const char *path, size_t *len);

/* th_slurp, but a file that cannot be read fails the test (naming it). */
void *th_read_file(const char *path, size_t *len);

/* |got - want| / |want| over n floats, summed in double; INFINITY when
 * either holds a NaN or infinity (|want| = 0 counts as 1). */
double th_rel_l2(const float *got, const float *want, size_t n);

/* ---- helpers for integration tests (tests/th_proc.c) ---- */

/* A fresh temporary directory under $TMPDIR (or /tmp), removed recursively
 * when the test process exits. Returns a static-lifetime path. */
const char *th_tmpdir(void);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int th_free_port(void);

/* Path of a built binary ("jobd") in $TH_BIN_DIR (tests/run sets it to the
 * sanitised build, build/asan; default build/). */
const char *th_bin(const char *name);

struct th_proc {
    int pid;
    char log_path[700];   /* stdout+stderr of the child */
};

/* Start argv[0] with argv, extra environment entries "K=V" (NULL-terminated
 * list or NULL), output to a log file in th_tmpdir(). The child is killed
 * (SIGKILL) when the test process exits, if still running. 0 or -1. */
int th_proc_start(struct th_proc *p, char *const argv[], char *const env_extra[]);

/* Wait until GET http://127.0.0.1:port<path> answers 2xx, or timeout_ms.
 * 0 when ready, -1 on timeout or when the process died. */
int th_proc_wait_http(struct th_proc *p, int port, const char *path, int timeout_ms);

/* Send sig and wait up to timeout_ms for exit; then SIGKILL. Returns the exit
 * status as from waitpid (use WIFEXITED etc.), or -1. */
int th_proc_stop(struct th_proc *p, int sig, int timeout_ms);

/* Contents of the child's log (static buffer, last 64 KiB). */
const char *th_proc_log(const struct th_proc *p);

/* Run argv to completion, capturing stdout into out (cap out_len, NUL
 * terminated); returns the exit status (0-255) or -1 (signal/timeout). */
int th_run(char *const argv[], char *out, size_t out_len, int timeout_ms);

#endif
