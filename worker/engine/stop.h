/*
 * stop.h - stop strings over the generated text stream, and finish reasons.
 *
 * Text arrives piece by piece (the UTF-8-safe output of tok_stream_push, one
 * token at a time) and a stop string may straddle any number of pieces. The
 * matcher keeps a small pending buffer: after each piece it looks for the
 * stop-string occurrence that is completed first (smallest end; on equal
 * ends the longer one), so the result is the same for every split of the
 * text into pieces - what a byte-by-byte stream would see; on a hit it
 * emits the text before it and reports the stop (the stop string and
 * anything after it are never emitted). Otherwise it emits everything except
 * the longest suffix that is a proper prefix of some stop string, which it
 * holds back until later text decides. Invariant: the emitted text never
 * contains a stop string nor any part of the text that later completes one.
 * Because the held-back suffix starts at the first byte of a (valid UTF-8)
 * stop string, emitted text is always cut at a character boundary.
 *
 * Cost per piece: O(pending * total stop bytes); pending is at most the
 * longest stop string minus one plus the new piece.
 *
 * Thread: one matcher per sequence, one thread at a time.
 */
#ifndef WORKER_STOP_H
#define WORKER_STOP_H

#include <stddef.h>

#include "common/buf.h"
#include "text/gen.h"

struct stop_match {
    const char *const *stops;   /* (n_stops) borrowed, lengths in lens */
    const size_t *lens;
    size_t n_stops;
    size_t max_len;             /* longest stop string */
    struct buf pend;            /* held-back text */
    int hit;                    /* a stop string was found; nothing more is emitted */
    size_t hit_index;           /* which one (index into stops), once hit */
};

/* Set up a matcher over stops[0..n) (borrowed; must outlive it). Empty
 * strings and n > STOP_MAX or a string over STOP_MAX_BYTES are ERR_INVAL.
 * n == 0 is allowed (then text passes straight through). */
int stop_init(struct stop_match *m, const char *const *stops, const size_t *lens, size_t n);
void stop_release(struct stop_match *m);

/* Feed len more bytes. Appends to emit what is now safe to emit. Returns 1
 * when a stop string completed (emit then ends right before it; further
 * feeds emit nothing), 0 when not, or ERR_NOMEM / ERR_TOOBIG from emit.
 * After a hit the call is a no-op returning 1. */
int stop_feed(struct stop_match *m, const char *text, size_t len, struct buf *emit);

/* End of generation without a stop string: emit the held-back text. Returns
 * 0 or buf errors. No-op after a hit. */
int stop_flush(struct stop_match *m, struct buf *emit);

#endif
