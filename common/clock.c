/* clock.c - monotonic and wall clocks (see clock.h). */
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t clock_mono_ms(void)
{
    return clock_mono_ns() / 1000000ull;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_wall_s(void)
{
    return clock_wall_ms() / 1000;
}

char *clock_iso8601(int64_t wall_ms, char *out, size_t out_len)
{
    int64_t ms = wall_ms % 1000;
    time_t s = (time_t)(wall_ms / 1000);
    if (ms < 0) {
        ms += 1000;
        s -= 1;
    }
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, out_len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    return out;
}

void clock_sleep_ms(uint64_t ms)
{
    struct timespec req = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L}, rem;
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}
