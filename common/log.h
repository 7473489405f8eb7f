/*
 * log.h - one line per event, to stderr (or any fd).
 *
 * Two formats: text ("2026-11-30T14:35:39.123Z info jobd [req_01..] message")
 * for people, and JSON ({"ts":..,"level":..,"prog":..,"req_id":..,"msg":..}) for
 * log pipelines (--log-format json). Each line is built in memory and written
 * with a single write(2), so lines from several threads never interleave.
 * Lines longer than LOG_LINE_MAX are truncated with a marker. Messages are
 * sanitised: control characters in text mode are escaped so a hostile string
 * cannot forge a log line.
 *
 * Thread-safe after log_init (which is not: call it once at start).
 */
#ifndef COMMON_LOG_H
#define COMMON_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_OFF };
enum log_format { LOG_TEXT = 0, LOG_JSON };

#define LOG_LINE_MAX 8192

/* Configure: program name (copied, up to 31 bytes), minimum level, format,
 * destination fd. Defaults before any call: "?", LOG_INFO, LOG_TEXT, fd 2. */
void log_init(const char *prog, enum log_level min_level, enum log_format fmt, int fd);

/* Parse "debug|info|warn|error|off" / "text|json". 0 or ERR_INVAL. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);

/* Is a message at this level going to be written? */
int log_enabled(enum log_level level);

/* Write one event; req_id may be NULL. */
void log_write(enum log_level level, const char *req_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(...) log_write(LOG_DEBUG, NULL, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, NULL, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, NULL, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, NULL, __VA_ARGS__)

#endif
