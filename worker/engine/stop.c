/*
 * stop.c - stop-string matching across token boundaries (see stop.h).
 */
#include "worker/engine/stop.h"

#include <string.h>

#include "common/err.h"

int stop_init(struct stop_match *m, const char *const *stops, const size_t *lens, size_t n)
{
    if (!m || n > STOP_MAX || (n && (!stops || !lens)))
        return ERR_INVAL;
    size_t max = 0;
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || lens[i] == 0 || lens[i] > STOP_MAX_BYTES)
            return ERR_INVAL;
        if (lens[i] > max)
            max = lens[i];
    }
    memset(m, 0, sizeof *m);
    m->stops = stops;
    m->lens = lens;
    m->n_stops = n;
    m->max_len = max;
    /* pending never holds more than max_len - 1 bytes plus one piece; a
     * piece is one token's text (TOK_MAX_TOKEN_BYTES-ish), so this is ample */
    buf_init(&m->pend, STOP_MAX_BYTES + (64u << 10));
    return 0;
}

void stop_release(struct stop_match *m)
{
    if (m)
        buf_release(&m->pend);
}

/* Start of the stop string occurrence in s[0..n) that ENDS first (ties: the
 * one starting first, i.e. the longest), or n if none. "Ends first" is what
 * a byte-by-byte stream would see first, so the result does not depend on
 * how the text was split into pieces. */
static size_t find_first(const struct stop_match *m, const char *s, size_t n, size_t *which)
{
    size_t best_start = n, best_end = (size_t)-1;
    for (size_t k = 0; k < m->n_stops; k++) {
        size_t l = m->lens[k];
        for (size_t i = 0; i + l <= n && i + l <= best_end; i++)
            if (s[i] == m->stops[k][0] && memcmp(s + i, m->stops[k], l) == 0) {
                if (i + l < best_end || i < best_start) {
                    best_end = i + l;
                    best_start = i;
                    *which = k;
                }
                break;
            }
    }
    return best_start;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a stop. */
static size_t held_suffix(const struct stop_match *m, const char *s, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; k < m->n_stops; k++) {
        size_t l = m->lens[k] - 1;  /* proper prefix */
        if (l > n)
            l = n;
        for (; l > best; l--)
            if (memcmp(s + n - l, m->stops[k], l) == 0) {
                best = l;
                break;
            }
    }
    return best;
}

int stop_feed(struct stop_match *m, const char *text, size_t len, struct buf *emit)
{
    int rc;
    if (m->hit)
        return 1;
    if (m->n_stops == 0)
        return len ? buf_append(emit, text, len) : 0;
    if (len && (rc = buf_append(&m->pend, text, len)) != 0)
        return rc;
    const char *s = m->pend.data;
    size_t n = m->pend.len;
    if (n == 0)
        return 0;
    size_t which = 0;
    size_t pos = find_first(m, s, n, &which);
    if (pos < n) {
        if (pos && (rc = buf_append(emit, s, pos)) != 0)
            return rc;
        m->hit = 1;
        m->hit_index = which;
        buf_reset(&m->pend);
        return 1;
    }
    size_t hold = held_suffix(m, s, n);
    if (n - hold) {
        if ((rc = buf_append(emit, s, n - hold)) != 0)
            return rc;
        buf_consume(&m->pend, n - hold);
    }
    return 0;
}

int stop_flush(struct stop_match *m, struct buf *emit)
{
    if (m->hit || m->pend.len == 0)
        return 0;
    int rc = buf_append(emit, m->pend.data, m->pend.len);
    if (rc == 0)
        buf_reset(&m->pend);
    return rc;
}
