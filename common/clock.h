/*
 * clock.h - monotonic and wall clocks.
 *
 * Durations, deadlines and timeouts use the monotonic clock (never jumps);
 * timestamps stored or shown to users use the wall clock. Both can't fail on
 * Linux; all functions are thread-safe.
 */
#ifndef COMMON_CLOCK_H
#define COMMON_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic time in nanoseconds / milliseconds since an arbitrary origin. */
uint64_t clock_mono_ns(void);
uint64_t clock_mono_ms(void);

/* Wall-clock time: milliseconds / seconds since the Unix epoch (UTC). */
int64_t clock_wall_ms(void);
int64_t clock_wall_s(void);

/* Format a wall time (ms since the epoch) as RFC 3339 UTC with milliseconds,
 * "2026-11-30T14:35:39.123Z", into out (at least CLOCK_ISO_LEN bytes).
 * Returns out. */
#define CLOCK_ISO_LEN 32
char *clock_iso8601(int64_t wall_ms, char *out, size_t out_len);

/* Sleep for ms milliseconds (restarts on EINTR). */
void clock_sleep_ms(uint64_t ms);

#endif
