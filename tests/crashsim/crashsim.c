/*
 * crashsim.c - an LD_PRELOAD interposer that records what a process does to
 * one directory tree, so that a test can rebuild that tree as a power loss
 * could have left it (tests/py/crashlib.py), and that cuts the power or
 * fails a call at a chosen moment. Test-only; never linked into a product
 * binary.
 *
 * Why an interposer. kill -9 keeps the kernel's page cache: every write a
 * process made survives it, synced or not, so it cannot show a missing
 * fsync. What a power loss keeps is decided by the sync calls, and those are
 * system calls, made by jobd's own code, by libuv's thread pool and by
 * SQLite's unix VFS alike. Interposing the libc symbols catches all three
 * without a line of product code changing (a SQLite VFS would see only
 * SQLite's files). The calls interposed: open/open64/openat/openat64/creat,
 * close, write/pwrite/pwrite64/writev, ftruncate/ftruncate64,
 * fsync/fdatasync, rename/renameat/renameat2, unlink/unlinkat,
 * mkdir/mkdirat, rmdir, mkstemp/mkostemp. Calls glibc makes internally
 * (fopen, opendir) are not seen; jobd writes nothing under its data
 * directory that way.
 *
 * Environment:
 *   CRASHSIM_DIR   absolute path of the tree to record (jobd's --data); paths
 *                  are compared as given (absolute, or relative to the cwd),
 *                  not through symlinks. Unset: the shim passes everything
 *                  through.
 *   CRASHSIM_LOG   the log file (appended).
 *   CRASHSIM_CUT   N > 0: at the N-th sync call (fsync or fdatasync of a
 *                  recorded file or directory; see ARM and CUT_FILE), before
 *                  it runs, log "X N" and SIGKILL the process: the power is
 *                  cut with that sync not done.
 *   CRASHSIM_ARM   text: syncs count toward CRASHSIM_CUT only after the first
 *                  log line holding it ("files/file-": once an upload is
 *                  renamed into place), so a test can cut inside one window
 *                  whatever other threads synced before it.
 *   CRASHSIM_CUT_FILE suffix: only syncs of files whose path ends with it
 *                  count toward CRASHSIM_CUT ("-wal": SQLite's commits).
 *   CRASHSIM_FAIL  KIND:N:ERRNO[:PATH[:DATA]][,...]: the N-th call of KIND on
 *                  a recorded file fails with ERRNO (a number or EIO, ENOSPC)
 *                  without running. KIND is "sync" (fsync, fdatasync) or
 *                  "write" (write, pwrite, writev). With PATH, only calls on
 *                  files whose path (relative, as opened) holds PATH count
 *                  ("tmp/up-"; a trailing '$' anchors it at the end:
 *                  "files$" is the directory alone). With DATA, only writes
 *                  whose bytes hold DATA count, and only the first sync of a
 *                  file after such a write ("sync:1:EIO:-wal:chat.completion":
 *                  the commit of the first result a worker uploads). Each
 *                  entry counts on its own. Logged as "F ino KIND N ERRNO".
 *
 * Log: one text line per call that changed the tree, in the order the calls
 * ran (a single mutex is held across each recorded call and its log line,
 * so the order is the real one whatever the threads); inode numbers name the
 * files, paths are relative to CRASHSIM_DIR:
 *   C ino path        a file created by open(O_CREAT)
 *   M ino path        mkdir
 *   W ino off len     a write of len bytes at off, followed by those bytes
 *   T ino len         ftruncate, or open(O_TRUNC) of an existing file (len 0)
 *   S ino             fsync / fdatasync (file or directory)
 *   R ino src dst     rename (ino: the file renamed)
 *   U ino path        unlink
 *   D ino path        rmdir
 *   X n               power cut before the n-th sync
 *   F ino kind n err  an injected failure of the n-th call of kind on ino
 * SQLite's -shm file (shared memory, rebuilt by SQLite after a crash) is not
 * recorded.
 *
 * Sanitizers: the ASan runtime must come first in a process's libraries and
 * interposes many of these calls itself, so the crash suite runs the
 * optimised build/jobd under this shim (as test_jobd_crash.py does for
 * speed); the shim itself is built without sanitizers, -Werror.
 *
 * Threads: any; every recorded call takes one process-wide mutex.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define CS_MAX_FD 65536
#define CS_MAX_FAIL 8
#define CS_PATH_TAIL 96

struct cs_fd {
    unsigned char tracked;
    unsigned char cut_file; /* its path ends with CRASHSIM_CUT_FILE */
    unsigned char hit;      /* bit i: a write matched fail entry i's DATA since the last sync */
    dev_t dev;
    ino_t ino;
    char path[CS_PATH_TAIL]; /* the last bytes of its relative path */
};

struct cs_fail {
    char kind[8];
    long n, seen; /* fail the n-th matching call; seen: matching calls so far */
    int err;
    char path[CS_PATH_TAIL]; /* "" = any file; a trailing '$' anchors at the end */
    char data[64];           /* "" = any bytes */
};

static struct {
    int on;
    char dir[PATH_MAX];
    size_t dir_len;
    int log_fd;
    long cut_at, n_cut;
    char arm[256];     /* CRASHSIM_ARM: syncs count toward the cut after a record holding this */
    char cut_file[64]; /* CRASHSIM_CUT_FILE: only syncs of such files count */
    int armed;
    struct cs_fail fail[CS_MAX_FAIL];
    int n_fail;
    struct cs_fd fds[CS_MAX_FD];
    pthread_mutex_t mu;
} cs = {.log_fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

/* the real calls */
static int (*r_open)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static int (*r_close)(int);
static int (*r_mkostemp)(char *, int);
static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static int (*r_ftruncate)(int, off_t);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static int (*r_rename)(const char *, const char *);
static int (*r_renameat)(int, const char *, int, const char *);
static int (*r_renameat2)(int, const char *, int, const char *, unsigned);
static int (*r_unlink)(const char *);
static int (*r_unlinkat)(int, const char *, int);
static int (*r_mkdir)(const char *, mode_t);
static int (*r_mkdirat)(int, const char *, mode_t);
static int (*r_rmdir)(const char *);

#define RESOLVE(name) (r_##name = dlsym(RTLD_NEXT, #name))

static void cs_resolve(void)
{
    if (r_open)
        return;
    RESOLVE(openat);
    RESOLVE(close);
    RESOLVE(mkostemp);
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(writev);
    RESOLVE(ftruncate);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(rename);
    RESOLVE(renameat);
    RESOLVE(renameat2);
    RESOLVE(unlink);
    RESOLVE(unlinkat);
    RESOLVE(mkdir);
    RESOLVE(mkdirat);
    RESOLVE(rmdir);
    RESOLVE(open);
}

static int cs_errno_parse(const char *s)
{
    if (strcmp(s, "EIO") == 0)
        return EIO;
    if (strcmp(s, "ENOSPC") == 0)
        return ENOSPC;
    if (strcmp(s, "EDQUOT") == 0)
        return EDQUOT;
    return atoi(s);
}

static void cs_fail_parse(const char *spec)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && cs.n_fail < CS_MAX_FAIL; t = strtok_r(NULL, ",", &save)) {
        char *a = strchr(t, ':');
        char *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *a = *b = '\0';
        char *c = strchr(b + 1, ':'), *d = c ? strchr(c + 1, ':') : NULL;
        if (c)
            *c = '\0';
        if (d)
            *d = '\0';
        struct cs_fail *f = &cs.fail[cs.n_fail++];
        snprintf(f->kind, sizeof f->kind, "%s", t);
        f->n = atol(a + 1);
        f->err = cs_errno_parse(b + 1);
        snprintf(f->path, sizeof f->path, "%s", c ? c + 1 : "");
        snprintf(f->data, sizeof f->data, "%s", d ? d + 1 : "");
    }
}

__attribute__((constructor)) static void cs_init(void)
{
    cs_resolve();
    const char *dir = getenv("CRASHSIM_DIR"), *log = getenv("CRASHSIM_LOG");
    if (!dir || !*dir || !log || !*log)
        return;
    snprintf(cs.dir, sizeof cs.dir, "%s", dir);
    cs.dir_len = strlen(cs.dir);
    while (cs.dir_len > 1 && cs.dir[cs.dir_len - 1] == '/')
        cs.dir[--cs.dir_len] = '\0';
    cs.log_fd = r_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (cs.log_fd < 0)
        return;
    const char *cut = getenv("CRASHSIM_CUT");
    cs.cut_at = cut ? atol(cut) : 0;
    const char *arm = getenv("CRASHSIM_ARM"), *cut_file = getenv("CRASHSIM_CUT_FILE");
    snprintf(cs.arm, sizeof cs.arm, "%s", arm ? arm : "");
    snprintf(cs.cut_file, sizeof cs.cut_file, "%s", cut_file ? cut_file : "");
    cs.armed = !cs.arm[0];
    const char *fail = getenv("CRASHSIM_FAIL");
    if (fail)
        cs_fail_parse(fail);
    cs.on = 1;
}

/* The path relative to the recorded tree ("" for its root), or NULL when
 * it lies outside (or is SQLite's -shm file). */
static const char *cs_rel(const char *path, char *abs, size_t cap)
{
    if (!cs.on || !path)
        return NULL;
    if (path[0] == '/') {
        if ((size_t)snprintf(abs, cap, "%s", path) >= cap)
            return NULL;
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return NULL;
        if ((size_t)snprintf(abs, cap, "%.*s/%s", PATH_MAX / 2, cwd, path) >= cap)
            return NULL;
    }
    size_t n = strlen(abs);
    while (n > 1 && abs[n - 1] == '/')
        abs[--n] = '\0';
    if (strncmp(abs, cs.dir, cs.dir_len) != 0 || (abs[cs.dir_len] != '\0' && abs[cs.dir_len] != '/'))
        return NULL;
    if (n > 4 && strcmp(abs + n - 4, "-shm") == 0)
        return NULL;
    return abs[cs.dir_len] == '/' ? abs + cs.dir_len + 1 : abs + cs.dir_len;
}

static void cs_log_raw(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = r_write(cs.log_fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            abort(); /* a lost record would make the rebuild lie */
        c += w;
        n -= (size_t)w;
    }
}

__attribute__((format(printf, 1, 2))) static void cs_log(const char *fmt, ...)
{
    char line[3 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        abort();
    cs_log_raw(line, (size_t)n);
    if (!cs.armed && strstr(line, cs.arm))
        cs.armed = 1;
}

static int cs_tracked(int fd)
{
    return cs.on && fd >= 0 && fd < CS_MAX_FD && cs.fds[fd].tracked;
}

/* Under the mutex: is fd still the file it was opened as? A close the shim
 * did not see (a raw syscall) leaves a stale entry that a later socket or
 * file could reuse; such an entry is dropped here. */
static int cs_still(int fd)
{
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_dev == cs.fds[fd].dev && s.st_ino == cs.fds[fd].ino)
        return 1;
    cs.fds[fd].tracked = 0;
    return 0;
}

/* Does fd's path match a fail entry's PATH? */
static int cs_path_match(int fd, const char *pat)
{
    size_t k = strlen(pat);
    if (!k)
        return 1;
    const char *p = cs.fds[fd].path;
    if (pat[k - 1] != '$')
        return strstr(p, pat) != NULL;
    size_t n = strlen(p);
    return n >= k - 1 && memcmp(p + n - (k - 1), pat, k - 1) == 0;
}

static int cs_data_match(const void *data, size_t n, const char *pat)
{
    return memmem(data, n, pat, strlen(pat)) != NULL;
}

/* An injected failure for this call of kind on fd ("write": its bytes are
 * data[0..n); "sync": data is NULL): 0 or the errno to fail with. Every
 * entry of that kind whose filters the call passes counts it. Under the
 * mutex. */
static int cs_injected(int fd, const char *kind, const void *data, size_t n)
{
    int err = 0;
    for (int i = 0; i < cs.n_fail; i++) {
        struct cs_fail *f = &cs.fail[i];
        if (strcmp(f->kind, kind) != 0 || !cs_path_match(fd, f->path))
            continue;
        if (f->data[0] && data && !cs_data_match(data, n, f->data))
            continue;
        if (f->data[0] && !data) { /* a sync: only after a matching write */
            if (!(cs.fds[fd].hit & (1u << i)))
                continue;
            cs.fds[fd].hit &= (unsigned char)~(1u << i);
        }
        if (++f->seen == f->n && !err) {
            cs_log("F %lu %s %ld %d\n", (unsigned long)cs.fds[fd].ino, kind, f->seen, f->err);
            err = f->err;
        }
    }
    return err;
}

/* After a write that ran: mark the sync entries whose DATA it holds. */
static void cs_hit(int fd, const void *data, size_t n)
{
    for (int i = 0; i < cs.n_fail; i++)
        if (cs.fail[i].data[0] && strcmp(cs.fail[i].kind, "sync") == 0 &&
            cs_path_match(fd, cs.fail[i].path) && cs_data_match(data, n, cs.fail[i].data))
            cs.fds[fd].hit |= (unsigned char)(1u << i);
}

/* Mark a new entry: does its path count for CRASHSIM_CUT_FILE? Keep its
 * path's tail for CRASHSIM_FAIL's PATH. */
static void cs_mark(int fd, const char *rel)
{
    size_t n = strlen(rel), k = strlen(cs.cut_file);
    cs.fds[fd].cut_file = !k || (n >= k && strcmp(rel + n - k, cs.cut_file) == 0);
    cs.fds[fd].hit = 0;
    snprintf(cs.fds[fd].path, sizeof cs.fds[fd].path, "%s", n >= CS_PATH_TAIL ? rel + n - (CS_PATH_TAIL - 1) : rel);
}

static ino_t cs_ino_of_path(const char *abs)
{
    struct stat s;
    return lstat(abs, &s) == 0 ? s.st_ino : 0;
}

/* ---- open ------------------------------------------------------------------ */

static int cs_open_common(int dirfd, const char *path, int flags, mode_t mode)
{
    char abs[PATH_MAX];
    const char *rel = (dirfd == AT_FDCWD || (path && path[0] == '/')) ? cs_rel(path, abs, sizeof abs) : NULL;
    if (!rel)
        return r_openat(dirfd, path, flags, mode);
    pthread_mutex_lock(&cs.mu);
    struct stat before;
    int existed = lstat(abs, &before) == 0;
    int fd = r_openat(dirfd, path, flags, mode);
    int saved = errno;
    if (fd >= 0 && fd < CS_MAX_FD) {
        struct stat s;
        if (fstat(fd, &s) == 0) {
            cs.fds[fd].tracked = 1;
            cs.fds[fd].dev = s.st_dev;
            cs.fds[fd].ino = s.st_ino;
            cs_mark(fd, rel);
            if (!existed && (flags & O_CREAT))
                cs_log("C %lu %s\n", (unsigned long)s.st_ino, rel);
            else if (existed && (flags & O_TRUNC) && S_ISREG(s.st_mode) && before.st_size > 0)
                cs_log("T %lu 0\n", (unsigned long)s.st_ino);
        }
    }
    pthread_mutex_unlock(&cs.mu);
    errno = saved;
    return fd;
}

static mode_t cs_mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = cs_mode_arg(flags, ap);
    va_end(ap);
    cs_resolve();
    return cs_open_common(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = cs_mode_arg(flags, ap);
    va_end(ap);
    cs_resolve();
    return cs_open_common(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = cs_mode_arg(flags, ap);
    va_end(ap);
    cs_resolve();
    return cs_open_common(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = cs_mode_arg(flags, ap);
    va_end(ap);
    cs_resolve();
    return cs_open_common(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode)
{
    cs_resolve();
    return cs_open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode)
{
    return creat(path, mode);
}

/* mkstemp and friends open through glibc's internal open: wrapped here. */
static int cs_track_new(const char *path, int fd)
{
    char abs[PATH_MAX];
    const char *rel = fd >= 0 && fd < CS_MAX_FD ? cs_rel(path, abs, sizeof abs) : NULL;
    struct stat s;
    if (rel && fstat(fd, &s) == 0) {
        cs.fds[fd].tracked = 1;
        cs.fds[fd].dev = s.st_dev;
        cs.fds[fd].ino = s.st_ino;
        cs_mark(fd, rel);
        cs_log("C %lu %s\n", (unsigned long)s.st_ino, rel);
    }
    return fd;
}

int mkostemp(char *tmpl, int flags)
{
    cs_resolve();
    pthread_mutex_lock(&cs.mu);
    int fd = r_mkostemp(tmpl, flags);
    int err = errno;
    cs_track_new(tmpl, fd);
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return fd;
}

int mkstemp(char *tmpl)
{
    return mkostemp(tmpl, 0);
}

int close(int fd)
{
    cs_resolve();
    if (cs_tracked(fd)) {
        pthread_mutex_lock(&cs.mu);
        cs.fds[fd].tracked = 0;
        int r = r_close(fd);
        int saved = errno;
        pthread_mutex_unlock(&cs.mu);
        errno = saved;
        return r;
    }
    return r_close(fd);
}

/* ---- data -------------------------------------------------------------------- */

/* Log a write of n bytes at off (already done). Under the mutex. */
static void cs_log_write(int fd, off_t off, const void *data, size_t n)
{
    cs_log("W %lu %lld %zu\n", (unsigned long)cs.fds[fd].ino, (long long)off, n);
    cs_log_raw(data, n);
}

static off_t cs_cur_off(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND)) {
        struct stat s;
        return fstat(fd, &s) == 0 ? s.st_size : 0;
    }
    return lseek(fd, 0, SEEK_CUR);
}

ssize_t write(int fd, const void *p, size_t n)
{
    cs_resolve();
    if (!cs_tracked(fd))
        return r_write(fd, p, n);
    pthread_mutex_lock(&cs.mu);
    if (!cs_still(fd)) {
        pthread_mutex_unlock(&cs.mu);
        return r_write(fd, p, n);
    }
    ssize_t r = -1;
    int err = cs_injected(fd, "write", p, n);
    if (!err) {
        off_t off = cs_cur_off(fd);
        r = r_write(fd, p, n);
        err = errno;
        if (r > 0) {
            cs_log_write(fd, off, p, (size_t)r);
            cs_hit(fd, p, (size_t)r);
        }
    }
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

ssize_t pwrite(int fd, const void *p, size_t n, off_t off)
{
    cs_resolve();
    if (!cs_tracked(fd))
        return r_pwrite(fd, p, n, off);
    pthread_mutex_lock(&cs.mu);
    if (!cs_still(fd)) {
        pthread_mutex_unlock(&cs.mu);
        return r_pwrite(fd, p, n, off);
    }
    ssize_t r = -1;
    int err = cs_injected(fd, "write", p, n);
    if (!err) {
        r = r_pwrite(fd, p, n, off);
        err = errno;
        if (r > 0) {
            cs_log_write(fd, off, p, (size_t)r);
            cs_hit(fd, p, (size_t)r);
        }
    }
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

ssize_t pwrite64(int fd, const void *p, size_t n, off_t off)
{
    return pwrite(fd, p, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    cs_resolve();
    if (!cs_tracked(fd))
        return r_writev(fd, iov, cnt);
    pthread_mutex_lock(&cs.mu);
    if (!cs_still(fd)) {
        pthread_mutex_unlock(&cs.mu);
        return r_writev(fd, iov, cnt);
    }
    ssize_t r = -1;
    /* (DATA filters see the first buffer alone: jobd's writev calls are sockets') */
    int err = cs_injected(fd, "write", cnt > 0 ? iov[0].iov_base : "", cnt > 0 ? iov[0].iov_len : 0);
    if (!err) {
        off_t off = cs_cur_off(fd);
        r = r_writev(fd, iov, cnt);
        err = errno;
        size_t left = r > 0 ? (size_t)r : 0;
        for (int i = 0; i < cnt && left > 0; i++) {
            size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
            cs_log_write(fd, off, iov[i].iov_base, k);
            cs_hit(fd, iov[i].iov_base, k);
            off += (off_t)k;
            left -= k;
        }
    }
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int ftruncate(int fd, off_t len)
{
    cs_resolve();
    if (!cs_tracked(fd))
        return r_ftruncate(fd, len);
    pthread_mutex_lock(&cs.mu);
    if (!cs_still(fd)) {
        pthread_mutex_unlock(&cs.mu);
        return r_ftruncate(fd, len);
    }
    int r = r_ftruncate(fd, len);
    int err = errno;
    if (r == 0)
        cs_log("T %lu %lld\n", (unsigned long)cs.fds[fd].ino, (long long)len);
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int ftruncate64(int fd, off_t len)
{
    return ftruncate(fd, len);
}

/* fsync and fdatasync: the sync points. */
static int cs_sync(int fd, int (*real)(int))
{
    if (!cs_tracked(fd))
        return real(fd);
    pthread_mutex_lock(&cs.mu);
    if (!cs_still(fd)) {
        pthread_mutex_unlock(&cs.mu);
        return real(fd);
    }
    int r = -1;
    int err = cs_injected(fd, "sync", NULL, 0);
    if (!err && cs.armed && cs.fds[fd].cut_file && cs.cut_at > 0 && ++cs.n_cut == cs.cut_at) {
        cs_log("X %ld\n", cs.n_cut);
        kill(getpid(), SIGKILL);
        for (;;)
            pause();
    }
    if (!err) {
        r = real(fd);
        err = errno;
        if (r == 0)
            cs_log("S %lu\n", (unsigned long)cs.fds[fd].ino);
    }
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int fsync(int fd)
{
    cs_resolve();
    return cs_sync(fd, r_fsync);
}

int fdatasync(int fd)
{
    cs_resolve();
    return cs_sync(fd, r_fdatasync);
}

/* ---- names --------------------------------------------------------------------- */

static int cs_rename_common(int ofd, const char *from, int nfd, const char *to, unsigned flags, int how)
{
    char a1[PATH_MAX], a2[PATH_MAX];
    const char *r1 = (ofd == AT_FDCWD || from[0] == '/') ? cs_rel(from, a1, sizeof a1) : NULL;
    const char *r2 = (nfd == AT_FDCWD || to[0] == '/') ? cs_rel(to, a2, sizeof a2) : NULL;
    if (!r1 && !r2)
        return how == 0 ? r_rename(from, to) : how == 1 ? r_renameat(ofd, from, nfd, to)
                                                        : r_renameat2(ofd, from, nfd, to, flags);
    pthread_mutex_lock(&cs.mu);
    ino_t ino = r1 ? cs_ino_of_path(a1) : 0;
    int r = how == 0 ? r_rename(from, to) : how == 1 ? r_renameat(ofd, from, nfd, to)
                                                     : r_renameat2(ofd, from, nfd, to, flags);
    int err = errno;
    if (r == 0) {
        if (!r1) /* moved in from outside: a new file with its bytes synced by assumption */
            cs_log("C %lu %s\n", (unsigned long)cs_ino_of_path(a2), r2);
        else if (!r2)
            cs_log("U %lu %s\n", (unsigned long)ino, r1);
        else
            cs_log("R %lu %s %s\n", (unsigned long)ino, r1, r2);
    }
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int rename(const char *from, const char *to)
{
    cs_resolve();
    return cs_rename_common(AT_FDCWD, from, AT_FDCWD, to, 0, 0);
}

int renameat(int ofd, const char *from, int nfd, const char *to)
{
    cs_resolve();
    return cs_rename_common(ofd, from, nfd, to, 0, 1);
}

int renameat2(int ofd, const char *from, int nfd, const char *to, unsigned flags)
{
    cs_resolve();
    return cs_rename_common(ofd, from, nfd, to, flags, 2);
}

static int cs_unlink_common(int dirfd, const char *path, int flags)
{
    char abs[PATH_MAX];
    const char *rel = (dirfd == AT_FDCWD || path[0] == '/') ? cs_rel(path, abs, sizeof abs) : NULL;
    if (!rel)
        return dirfd == AT_FDCWD && flags == 0 ? r_unlink(path) : r_unlinkat(dirfd, path, flags);
    pthread_mutex_lock(&cs.mu);
    ino_t ino = cs_ino_of_path(abs);
    int r = dirfd == AT_FDCWD && flags == 0 ? r_unlink(path) : r_unlinkat(dirfd, path, flags);
    int err = errno;
    if (r == 0)
        cs_log("%c %lu %s\n", (flags & AT_REMOVEDIR) ? 'D' : 'U', (unsigned long)ino, rel);
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int unlink(const char *path)
{
    cs_resolve();
    return cs_unlink_common(AT_FDCWD, path, 0);
}

int unlinkat(int dirfd, const char *path, int flags)
{
    cs_resolve();
    return cs_unlink_common(dirfd, path, flags);
}

int rmdir(const char *path)
{
    cs_resolve();
    char abs[PATH_MAX];
    if (!cs_rel(path, abs, sizeof abs))
        return r_rmdir(path);
    return cs_unlink_common(AT_FDCWD, path, AT_REMOVEDIR);
}

static int cs_mkdir_common(int dirfd, const char *path, mode_t mode)
{
    char abs[PATH_MAX];
    const char *rel = (dirfd == AT_FDCWD || path[0] == '/') ? cs_rel(path, abs, sizeof abs) : NULL;
    if (!rel)
        return dirfd == AT_FDCWD ? r_mkdir(path, mode) : r_mkdirat(dirfd, path, mode);
    pthread_mutex_lock(&cs.mu);
    int r = dirfd == AT_FDCWD ? r_mkdir(path, mode) : r_mkdirat(dirfd, path, mode);
    int err = errno;
    if (r == 0)
        cs_log("M %lu %s\n", (unsigned long)cs_ino_of_path(abs), rel);
    pthread_mutex_unlock(&cs.mu);
    errno = err;
    return r;
}

int mkdir(const char *path, mode_t mode)
{
    cs_resolve();
    return cs_mkdir_common(AT_FDCWD, path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
    cs_resolve();
    return cs_mkdir_common(dirfd, path, mode);
}
