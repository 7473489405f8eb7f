/* Unit tests: err, buf, clock, id. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/id.h"
#include "common/utf8.h"
#include "tests/th.h"

TEST(err_names_and_messages)
{
    CHECK_EQ_STR(err_name(ERR_TOOBIG), "ERR_TOOBIG");
    CHECK_EQ_STR(err_msg(ERR_TOOBIG), "size limit exceeded");
    CHECK_EQ_STR(err_name(0), "ERR_OK");
    CHECK_EQ_STR(err_name(12345), "ERR_UNKNOWN");
    CHECK_EQ_STR(err_msg(-1), "unknown error");
    /* every code is negative, distinct, and has a distinct name */
    for (int a = ERR__FIRST + 1; a < ERR__LAST; a++) {
        CHECK(a < 0);
        CHECK(strncmp(err_name(a), "ERR_", 4) == 0);
        CHECK(strcmp(err_msg(a), "unknown error") != 0);
        for (int b = a + 1; b < ERR__LAST; b++)
            CHECK(strcmp(err_name(a), err_name(b)) != 0);
    }
}

TEST(buf_append_and_terminate)
{
    struct buf b;
    buf_init(&b, 1000);
    CHECK_EQ_INT(buf_append_str(&b, "hello"), 0);
    CHECK_EQ_INT(buf_append_byte(&b, ' '), 0);
    CHECK_EQ_INT(buf_printf(&b, "%d-%s", 42, "x"), 0);
    CHECK_EQ_STR(b.data, "hello 42-x");
    CHECK_EQ_INT(b.len, 10);
    buf_consume(&b, 6);
    CHECK_EQ_STR(b.data, "42-x");
    buf_reset(&b);
    CHECK_EQ_INT(b.len, 0);
    CHECK_EQ_STR(b.data, "");
    buf_release(&b);
    buf_release(NULL);
}

TEST(buf_cap_is_hard_and_leaves_buffer_unchanged)
{
    struct buf b;
    buf_init(&b, 8);
    CHECK_EQ_INT(buf_append_str(&b, "12345678"), 0);
    CHECK_EQ_INT(buf_append_byte(&b, 'x'), ERR_TOOBIG);
    CHECK_EQ_STR(b.data, "12345678");
    CHECK_EQ_INT(buf_printf(&b, "%s", "y"), ERR_TOOBIG);
    CHECK_EQ_INT(b.len, 8);
    CHECK(b.alloc <= 9); /* never allocates past the cap */
    buf_release(&b);
    buf_init(&b, 4);
    CHECK_EQ_INT(buf_append(&b, "123456", 6), ERR_TOOBIG);
    CHECK_EQ_INT(b.len, 0);
    CHECK_EQ_INT(buf_reserve(&b, (size_t)-1), ERR_TOOBIG);
    buf_release(&b);
}

TEST(buf_grows_geometrically_and_detaches)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    for (int i = 0; i < 100000; i++)
        CHECK_EQ_INT(buf_append_byte(&b, (char)('a' + i % 26)), 0);
    CHECK_EQ_INT(b.len, 100000);
    CHECK(b.data[99999] == 'a' + 99999 % 26);
    size_t n;
    char *p = buf_detach(&b, &n);
    CHECK(p != NULL);
    CHECK_EQ_INT(n, 100000);
    CHECK(p[n] == '\0');
    CHECK(b.data == NULL && b.len == 0);
    free(p);
    p = buf_detach(&b, &n); /* empty buffer detaches to "" */
    CHECK_EQ_STR(p, "");
    free(p);
}

TEST(buf_grow_array_doubles_keeps_contents_and_refuses_overflow)
{
    int *a = NULL;
    size_t cap = 0;
    CHECK_EQ_INT(buf_grow_array((void **)&a, &cap, 1, sizeof *a), 0);
    CHECK_EQ_INT((int)cap, 16);
    for (int i = 0; i < 16; i++)
        a[i] = i;
    CHECK_EQ_INT(buf_grow_array((void **)&a, &cap, 16, sizeof *a), 0); /* enough */
    CHECK_EQ_INT((int)cap, 16);
    CHECK_EQ_INT(buf_grow_array((void **)&a, &cap, 100, sizeof *a), 0);
    CHECK_EQ_INT((int)cap, 128);
    for (int i = 0; i < 16; i++)
        CHECK_EQ_INT(a[i], i);
    int *before = a;
    CHECK_EQ_INT(buf_grow_array((void **)&a, &cap, SIZE_MAX / 2, sizeof *a), ERR_NOMEM);
    CHECK_EQ_INT(buf_grow_array((void **)&a, &cap, SIZE_MAX, 1), ERR_NOMEM);
    CHECK(a == before);
    CHECK_EQ_INT((int)cap, 128);
    free(a);
}

TEST(utf8_encode_decode_round_trip_at_every_length_boundary)
{
    static const uint32_t cps[] = {0, 0x41, 0x7F, 0x80, 0xE9, 0x7FF, 0x800, 0x20AC, 0xFFFF, 0x10000,
                                   0x1F600, 0x10FFFF};
    static const size_t lens[] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char b[4];
        size_t n = utf8_encode(cps[i], b);
        CHECK_EQ_INT((int)n, (int)lens[i]);
        CHECK_EQ_INT((int)utf8_decode((const unsigned char *)b, n), (int)cps[i]);
    }
    char e[4];
    CHECK_EQ_INT((int)utf8_encode(0x20AC, e), 3);
    CHECK(memcmp(e, "\xe2\x82\xac", 3) == 0);
}

TEST(clock_monotonic_and_iso8601)
{
    uint64_t a = clock_mono_ns();
    clock_sleep_ms(5);
    uint64_t b = clock_mono_ns();
    CHECK(b - a >= 5000000ull);
    char s[CLOCK_ISO_LEN];
    CHECK_EQ_STR(clock_iso8601(0, s, sizeof s), "1970-01-01T00:00:00.000Z");
    CHECK_EQ_STR(clock_iso8601(1796052939123LL, s, sizeof s), "2026-11-30T15:35:39.123Z");
    CHECK_EQ_STR(clock_iso8601(-1, s, sizeof s), "1969-12-31T23:59:59.999Z");
    CHECK(clock_wall_s() > 1700000000);
}

TEST(id_shape_and_sorting)
{
    char a[ID_MAX], b[ID_MAX], c[ID_MAX];
    CHECK_EQ_INT(id_new("batch_", a, sizeof a), 0);
    CHECK_EQ_INT(strlen(a), 6 + ID_BODY_LEN);
    CHECK(id_valid("batch_", a));
    CHECK(!id_valid("file-", a));
    CHECK(!id_valid("batch_", "batch_abc"));
    CHECK(!id_valid("batch_", "batch_UUUUUUUUUUUUUUUUUUUUUUUUUU")); /* not in the alphabet */
    /* ids sort by time, and differ within one millisecond */
    CHECK_EQ_INT(id_new_at("file-", 1000, a, sizeof a), 0);
    CHECK_EQ_INT(id_new_at("file-", 1000, b, sizeof b), 0);
    CHECK_EQ_INT(id_new_at("file-", 1001, c, sizeof c), 0);
    CHECK(strcmp(a, b) != 0);
    CHECK(strcmp(a, c) < 0 && strcmp(b, c) < 0);
    CHECK_EQ_INT(id_new_at("file-", 0xffffffffffffLL, c, sizeof c), 0);
    CHECK(strncmp(c, "file-7zzzzzzzzz", 15) == 0); /* 48 bits of time = 10 digits, top one <= 7 */
    CHECK_EQ_INT(id_new("batch_", a, 10), ERR_TOOBIG);
}
