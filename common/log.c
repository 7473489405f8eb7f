/* log.c - one line per event (see log.h). */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "err.h"
#include "js.h"

static struct {
    char prog[32];
    enum log_level min_level;
    enum log_format fmt;
    int fd;
} log_cfg = {"?", LOG_INFO, LOG_TEXT, 2};

static const char *const log_level_names[] = {"debug", "info", "warn", "error", "off"};

void log_init(const char *prog, enum log_level min_level, enum log_format fmt, int fd)
{
    snprintf(log_cfg.prog, sizeof log_cfg.prog, "%s", prog ? prog : "?");
    log_cfg.min_level = min_level;
    log_cfg.fmt = fmt;
    log_cfg.fd = fd;
}

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i <= LOG_OFF; i++) {
        if (strcmp(s, log_level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return ERR_INVAL;
}

int log_format_parse(const char *s, enum log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = LOG_JSON;
    else
        return ERR_INVAL;
    return 0;
}

int log_enabled(enum log_level level)
{
    return level >= log_cfg.min_level && level < LOG_OFF;
}

/* Append text with control characters shown as \xNN so one event is one line. */
static void log_append_sanitised(struct buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            buf_printf(b, "\\x%02x", c);
        else
            buf_append_byte(b, (char)c);
    }
}

void log_write(enum log_level level, const char *req_id, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    int saved_errno = errno;
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t msg_len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;

    char ts[CLOCK_ISO_LEN];
    clock_iso8601(clock_wall_ms(), ts, sizeof ts);

    /* 4x: worst-case growth of escaping, plus the fixed fields */
    struct buf b;
    buf_init(&b, 4 * LOG_LINE_MAX + 256);
    if (log_cfg.fmt == LOG_JSON) {
        buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"%s\",\"prog\":", ts, log_level_names[level]);
        js_escape(&b, log_cfg.prog, strlen(log_cfg.prog));
        if (req_id) {
            buf_append_str(&b, ",\"req_id\":");
            js_escape(&b, req_id, strlen(req_id));
        }
        buf_append_str(&b, ",\"msg\":");
        js_escape(&b, msg, msg_len);
        if ((size_t)n >= sizeof msg)
            buf_append_str(&b, ",\"truncated\":true");
        buf_append_str(&b, "}\n");
    } else {
        buf_printf(&b, "%s %s %s ", ts, log_level_names[level], log_cfg.prog);
        if (req_id) {
            buf_append_byte(&b, '[');
            log_append_sanitised(&b, req_id, strlen(req_id));
            buf_append_str(&b, "] ");
        }
        log_append_sanitised(&b, msg, msg_len);
        if ((size_t)n >= sizeof msg)
            buf_append_str(&b, " [truncated]");
        buf_append_byte(&b, '\n');
    }
    if (b.data) {
        ssize_t w = write(log_cfg.fd, b.data, b.len);
        (void)w; /* nowhere to report a failure to log */
    }
    buf_release(&b);
    errno = saved_errno;
}
