/* th_proc.c - integration-test helpers: temp dirs, ports, child processes (see th.h). */
#include "th.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

const char *th_tmpdir(void)
{
    static char path[600];
    if (path[0])
        return path;
    const char *t = getenv("TH_TMP");
    if (t) {
        /* the runner removes it after the test; create parents as needed */
        char parent[600];
        snprintf(parent, sizeof parent, "%s", t);
        char *slash = strrchr(parent, '/');
        if (slash) {
            *slash = '\0';
            mkdir(parent, 0700);
        }
        if (mkdir(t, 0700) == 0 || errno == EEXIST) {
            snprintf(path, sizeof path, "%s", t);
            return path;
        }
    }
    snprintf(path, sizeof path, "/tmp/th-XXXXXX");
    if (!mkdtemp(path)) {
        perror("th_tmpdir: mkdtemp");
        abort();
    }
    return path;
}

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) {
        perror("th_free_port");
        abort();
    }
    close(fd);
    return ntohs(a.sin_port);
}

const char *th_bin(const char *name)
{
    static char path[4][512];
    static int slot;
    const char *dir = getenv("TH_BIN_DIR") ? getenv("TH_BIN_DIR") : "build";
    char *p = path[slot++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

#define TH_MAX_PROCS 32
static pid_t th_procs[TH_MAX_PROCS];
static int th_n_procs;

static void th_kill_all(void)
{
    for (int i = 0; i < th_n_procs; i++)
        if (th_procs[i] > 0 && kill(th_procs[i], SIGKILL) == 0)
            waitpid(th_procs[i], NULL, 0);
}

int th_proc_start(struct th_proc *p, char *const argv[], char *const env_extra[])
{
    static int registered, seq;
    if (!registered) {
        atexit(th_kill_all);
        registered = 1;
    }
    if (th_n_procs == TH_MAX_PROCS)
        return -1;
    snprintf(p->log_path, sizeof p->log_path, "%s/proc%d.log", th_tmpdir(), seq++);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        for (int i = 0; env_extra && env_extra[i]; i++)
            putenv(env_extra[i]);
        int fd = open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    th_procs[th_n_procs++] = pid;
    return 0;
}

/* One GET; returns the HTTP status or -1. */
static int th_http_get_status(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int status = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        char req[600], resp[64] = {0};
        int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
        struct pollfd pfd = {fd, POLLIN, 0};
        if (write(fd, req, (size_t)n) == n && poll(&pfd, 1, 2000) == 1) {
            ssize_t r = read(fd, resp, sizeof resp - 1);
            if (r > 12 && strncmp(resp, "HTTP/1.", 7) == 0)
                status = atoi(resp + 9);
        }
    }
    close(fd);
    return status;
}

int th_proc_wait_http(struct th_proc *p, int port, const char *path, int timeout_ms)
{
    long deadline = th_now_ms() + timeout_ms;
    while (th_now_ms() < deadline) {
        int st = th_http_get_status(port, path);
        if (st >= 200 && st < 300)
            return 0;
        if (p && waitpid(p->pid, NULL, WNOHANG) == p->pid) {
            p->pid = -1;
            return -1;
        }
        usleep(20000);
    }
    return -1;
}

int th_proc_stop(struct th_proc *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    int status;
    kill(p->pid, sig);
    long deadline = th_now_ms() + timeout_ms;
    for (;;) {
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w == p->pid)
            break;
        if (th_now_ms() >= deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            break;
        }
        usleep(5000);
    }
    for (int i = 0; i < th_n_procs; i++)
        if (th_procs[i] == p->pid)
            th_procs[i] = -1;
    p->pid = -1;
    return status;
}

const char *th_proc_log(const struct th_proc *p)
{
    static char text[65536];
    text[0] = '\0';
    FILE *f = fopen(p->log_path, "r");
    if (!f)
        return text;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (size > (long)sizeof text - 1)
        fseek(f, size - (long)sizeof text + 1, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

int th_run(char *const argv[], char *out, size_t out_len, int timeout_ms)
{
    int pfd[2];
    if (pipe(pfd))
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    size_t used = 0;
    long deadline = th_now_ms() + timeout_ms;
    for (;;) {
        long left = deadline - th_now_ms();
        struct pollfd pl = {pfd[0], POLLIN, 0};
        if (left <= 0 || poll(&pl, 1, (int)left) <= 0) {
            kill(pid, SIGKILL);
            break;
        }
        char tmp[4096];
        ssize_t r = read(pfd[0], tmp, sizeof tmp);
        if (r <= 0)
            break;
        size_t n = (size_t)r;
        if (out && used + 1 < out_len) {
            size_t room = out_len - 1 - used;
            memcpy(out + used, tmp, n < room ? n : room);
            used += n < room ? n : room;
        }
    }
    if (out && out_len)
        out[used] = '\0';
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
