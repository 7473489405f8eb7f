/* libFuzzer target: ingest_line_check (one JSONL input line, hostile bytes)
 * and the raw-body scanner behind it. Byte 0 picks the endpoint (bit 2:
 * /v1/responses, else bit 1: /v1/embeddings, else bit 0: /v1/completions
 * or /v1/chat/completions).
 * fuzz-src: jobd/intake/ingest_line.c */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "jobd/intake/ingest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *ep = data[0] & 4   ? "/v1/responses"
                     : data[0] & 2 ? "/v1/embeddings"
                     : data[0] & 1 ? "/v1/completions"
                                   : "/v1/chat/completions";
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.max_line_bytes = 1u << 16;
    struct ingest_line l;
    struct problem e;
    if (ingest_line_check((const char *)data + 1, size - 1, ep, &lim, &l, &e) == 0) {
        /* the raw body span lies inside the line and is itself valid JSON */
        if (l.body_raw) {
            if (l.body_raw < (const char *)data + 1 ||
                l.body_raw + l.body_raw_len > (const char *)data + size)
                __builtin_trap();
            json_t *v = json_loadb(l.body_raw, l.body_raw_len, 0, NULL);
            if (!json_is_object(v))
                __builtin_trap();
            json_decref(v);
        }
        ingest_line_release(&l);
    } else if (!memchr(e.code, '\0', sizeof e.code) || !e.code[0]) {
        __builtin_trap();
    }
    return 0;
}
