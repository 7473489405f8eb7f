/*
 * test_lease_clock.c - lease_clock_s (jobd/work/lease.h): it starts at the wall
 * clock and advances with the monotonic clock. The wall-clock-step
 * behaviour itself is tested end to end under libfaketime
 * (tests/py/test_faults.py test_fault_clock_jump_*).
 */
#include "common/clock.h"
#include "jobd/work/lease.h"
#include "tests/th.h"

TEST(lease_clock_starts_at_wall_clock_and_never_goes_back)
{
    int64_t w0 = clock_wall_s();
    uint64_t a0 = clock_mono_ms();
    int64_t l0 = lease_clock_s();
    uint64_t a1 = clock_mono_ms();
    int64_t w1 = clock_wall_s();
    CHECK(l0 >= w0 - 1 && l0 <= w1 + 1);
    int64_t prev = l0;
    uint64_t b0 = 0, b1 = 0;
    for (int i = 0; i < 12; i++) {
        clock_sleep_ms(100);
        b0 = clock_mono_ms();
        int64_t l = lease_clock_s();
        b1 = clock_mono_ms();
        CHECK(l >= prev);
        prev = l;
    }
    /* At least 1.2 s of monotonic time went by: the lease clock moved by at
     * least 1 s, and by at most the monotonic time measured around the two
     * reads, rounded up. Race fix: the bound was a fixed 3 s, which a loaded
     * machine could exceed by descheduling this thread during the sleeps. */
    CHECK(prev - l0 >= 1 && prev - l0 >= (int64_t)((b0 - a1) / 1000));
    CHECK(prev - l0 <= (int64_t)((b1 - a0) / 1000) + 1);
}
