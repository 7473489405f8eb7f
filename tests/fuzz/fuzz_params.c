/* libFuzzer target: request bodies -> gp_parse, and the stop matcher.
 *
 * The input is parsed as JSON with js_parse (as jobd does for every line);
 * an object goes through gp_parse for both endpoints. Checks: no crash or
 * leak, an error always names a message, a success has values in their
 * documented ranges. When the parse succeeds and stop strings are present,
 * the input bytes are also fed to a stop matcher in pieces, and the emitted
 * text must be a prefix of the input that contains no stop string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/js.h"
#include "openai/params.h"
#include "worker/engine/stop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_stop(const struct gen_params *p, const uint8_t *data, size_t size)
{
    struct stop_match m;
    if (stop_init(&m, (const char *const *)p->stop, p->stop_len, p->n_stop) != 0)
        abort();
    struct buf out;
    buf_init(&out, 1 << 20);
    size_t i = 0;
    int hit = 0;
    while (i < size && !hit) {
        size_t piece = 1 + data[i] % 7;
        if (piece > size - i)
            piece = size - i;
        hit = stop_feed(&m, (const char *)data + i, piece, &out);
        if (hit < 0)
            abort();
        i += piece;
    }
    if (!hit && stop_flush(&m, &out) != 0)
        abort();
    if (out.len > size || (out.len && memcmp(out.data, data, out.len) != 0))
        abort();
    for (size_t k = 0; k < p->n_stop; k++)
        if (out.len && memmem(out.data, out.len, p->stop[k], p->stop_len[k]))
            abort();
    buf_release(&out);
    stop_release(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = NULL;
    struct js_limits lim = JS_LIMITS_DEFAULT;
    if (js_parse((const char *)data, size, &lim, &j, NULL) != 0)
        return 0;
    for (int ep = GP_CHAT; ep <= GP_COMPLETIONS; ep++) {
        struct gp_request p;
        struct problem e;
        memset(&e, 0, sizeof e);
        int rc = gp_parse(j, (enum gp_endpoint)ep, 50000, &p, &e);
        if (rc == 0) {
            const struct gen_params *g = &p.gen;
            if (g->n < 1 || g->n > GP_MAX_N || g->smp.temperature < 0 || g->smp.temperature > 2 ||
                !(g->smp.top_p > 0 && g->smp.top_p <= 1) || g->n_stop > STOP_MAX)
                abort();
            check_stop(&p.gen, data, size);
            gp_release(&p);
        } else if (rc == ERR_INVAL && e.message[0] == 0) {
            abort();   /* a request error always explains itself */
        }
    }
    json_decref(j);
    return 0;
}
