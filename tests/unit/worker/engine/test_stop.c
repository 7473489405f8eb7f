/*
 * test_stop.c - stop strings across piece boundaries (worker/stop).
 *
 * The reference is the offline rule: the result is the text cut before the
 * stop string that is completed first (a byte-by-byte stream's view). Every split of the text
 * into pieces must give that result, and at no point may the emitted text
 * contain bytes the offline result does not (nothing of a stop string is
 * ever emitted, even temporarily).
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "worker/engine/stop.h"

/* Offline reference: scan end positions left to right; the first end at
 * which some stop string is complete decides; the cut is the start of the
 * longest stop string ending there. */
static size_t offline_cut(const char *text, size_t n, const char *const *stops, size_t ns,
                          int *hit)
{
    *hit = 0;
    for (size_t e = 1; e <= n; e++) {
        size_t best = n;
        for (size_t k = 0; k < ns; k++) {
            size_t l = strlen(stops[k]);
            if (l <= e && memcmp(text + e - l, stops[k], l) == 0 && e - l < best)
                best = e - l;
        }
        if (best < n) {
            *hit = 1;
            return best;
        }
    }
    return n;
}

/* Feed text split at the cut points given as a bitmask over byte gaps. */
static void feed_split(const char *text, const char *const *stops, size_t ns, unsigned mask)
{
    size_t n = strlen(text), lens[STOP_MAX];
    for (size_t k = 0; k < ns; k++)
        lens[k] = strlen(stops[k]);
    int hit_ref;
    size_t cut = offline_cut(text, n, stops, ns, &hit_ref);
    struct stop_match m;
    CHECK_EQ_INT(stop_init(&m, stops, lens, ns), 0);
    struct buf out;
    buf_init(&out, 1 << 16);
    size_t start = 0;
    int hit = 0;
    for (size_t i = 1; i <= n && !hit; i++) {
        if (i < n && !(mask & (1u << (i - 1))))
            continue;
        int rc = stop_feed(&m, text + start, i - start, &out);
        CHECK(rc == 0 || rc == 1);
        hit = rc;
        start = i;
        /* never more than the final result, and always a prefix of it */
        CHECK(out.len <= cut);
        CHECK(out.len == 0 || memcmp(out.data, text, out.len) == 0);
    }
    if (!hit)
        CHECK_EQ_INT(stop_flush(&m, &out), 0);
    CHECK_EQ_INT(hit, hit_ref);
    CHECK_EQ_INT(out.len, cut);
    CHECK(out.len == 0 || memcmp(out.data, text, cut) == 0);
    /* after a hit, more text emits nothing */
    if (hit) {
        CHECK_EQ_INT(stop_feed(&m, "more", 4, &out), 1);
        CHECK_EQ_INT(out.len, cut);
    }
    buf_release(&out);
    stop_release(&m);
}

static void all_splits(const char *text, const char *const *stops, size_t ns)
{
    size_t n = strlen(text);
    CHECK(n <= 13);
    for (unsigned mask = 0; mask < (1u << (n ? n - 1 : 0)); mask++)
        feed_split(text, stops, ns, mask);
}

TEST(stop_hash_across_tokens)
{
    /* "###" arriving as "#", "#", "#\n" */
    const char *stops[] = {"###"};
    size_t lens[] = {3};
    struct stop_match m;
    CHECK_EQ_INT(stop_init(&m, stops, lens, 1), 0);
    struct buf out;
    buf_init(&out, 1024);
    CHECK_EQ_INT(stop_feed(&m, "ab", 2, &out), 0);
    CHECK_EQ_INT(stop_feed(&m, "#", 1, &out), 0);
    CHECK_EQ_INT(stop_feed(&m, "#", 1, &out), 0);
    CHECK_EQ_INT(out.len, 2);  /* "##" held back */
    CHECK_EQ_INT(stop_feed(&m, "#\n", 2, &out), 1);
    CHECK_EQ_STR(out.data, "ab");
    buf_release(&out);
    stop_release(&m);
    all_splits("ab###\ncd", stops, 1);
    all_splits("a##b###", stops, 1);
    all_splits("a##b##", stops, 1);    /* no stop: everything at flush */
}

TEST(stop_overlapping_candidates)
{
    const char *s1[] = {"abcd", "bc"};
    all_splits("xabcdy", s1, 2);       /* "bc" starts later but ends first: "xa" */
    const char *s2[] = {"aab", "ab"};
    all_splits("aaab", s2, 2);
    all_splits("aaaa", s2, 2);
    const char *s3[] = {"abab", "bax", "c", "abc"};
    all_splits("ababa", s3, 4);
    all_splits("xxababax", s3, 4);
    all_splits("abababab", s3, 4);
    all_splits("zzabc", s3, 4);
    const char *s4[] = {"aa"};
    all_splits("baaaa", s4, 1);
}

TEST(stop_at_start_and_utf8)
{
    const char *stops[] = {"Stop", "\xc3\xa9t\xc3\xa9"};  /* "été" */
    all_splits("Stop now", stops, 2);   /* stop at the very start: empty result */
    all_splits("un \xc3\xa9t\xc3\xa9!", stops, 2);
    all_splits("\xc3\xa9t\xc3\xa0", stops, 2);  /* "été" vs "età": no stop */
    /* a multi-byte stop split mid-character across pieces */
    size_t lens[] = {4, 5};
    struct stop_match m;
    CHECK_EQ_INT(stop_init(&m, stops, lens, 2), 0);
    struct buf out;
    buf_init(&out, 1024);
    CHECK_EQ_INT(stop_feed(&m, "x\xc3", 2, &out), 0);
    CHECK_EQ_INT(out.len, 1);
    CHECK_EQ_INT(stop_feed(&m, "\xa9t\xc3", 3, &out), 0);
    CHECK_EQ_INT(out.len, 1);
    CHECK_EQ_INT(stop_feed(&m, "\xa9", 1, &out), 1);
    CHECK_EQ_STR(out.data, "x");
    buf_release(&out);
    stop_release(&m);
}

TEST(stop_none_and_bad_init)
{
    struct stop_match m;
    struct buf out;
    buf_init(&out, 64);
    CHECK_EQ_INT(stop_init(&m, NULL, NULL, 0), 0);
    CHECK_EQ_INT(stop_feed(&m, "abc", 3, &out), 0);
    CHECK_EQ_STR(out.data, "abc");
    CHECK_EQ_INT(stop_flush(&m, &out), 0);
    stop_release(&m);
    const char *e[] = {""};
    size_t el[] = {0};
    CHECK_EQ_INT(stop_init(&m, e, el, 1), ERR_INVAL);
    const char *five[] = {"a", "b", "c", "d", "e"};
    size_t fl[] = {1, 1, 1, 1, 1};
    CHECK_EQ_INT(stop_init(&m, five, fl, 5), ERR_INVAL);
    CHECK_EQ_STR(stop_finish_name(STOP_FINISH_STOP), "stop");
    CHECK_EQ_STR(stop_finish_name(STOP_FINISH_LENGTH), "length");
    CHECK(stop_finish_name(STOP_NONE) == NULL);
    buf_release(&out);
}

/* The matcher says which stop string ended the text: the one completed first. */
TEST(stop_reports_which_string_hit)
{
    const char *stops[] = {"abcd", "bc", "\n\n"};
    size_t lens[] = {4, 2, 2};
    const char *texts[] = {"xabcdy", "one\n\ntwo", "zzabcd"};
    size_t want[] = {1, 2, 1};
    for (size_t i = 0; i < 3; i++) {
        struct stop_match m;
        struct buf out;
        buf_init(&out, 1 << 10);
        CHECK_EQ_INT(stop_init(&m, stops, lens, 3), 0);
        CHECK_EQ_INT(stop_feed(&m, texts[i], strlen(texts[i]), &out), 1);
        CHECK_EQ_INT(m.hit_index, want[i]);
        buf_release(&out);
        stop_release(&m);
    }
}
