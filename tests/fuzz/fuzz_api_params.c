/* libFuzzer target: the small parsers of outside input in jobd/api/api_json.c
 * added for the batch lifecycle routes - the results cursor (whatever parses
 * must be exactly what make gives for that seq), expiry policies
 * (expires_after / output_expires_after, JSON and form), Accept-Encoding
 * lists and completion windows. The first byte picks the parser.
 * fuzz-src: jobd/api/api_json.c jobd/work/reuse.c
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/js.h"
#include "jobd/api/api_json.h"

/* api_json.c's batch rendering needs the store's state names; it is not
 * fuzzed here, and linking the store would pull in SQLite. */
const char *store_batch_status_name(enum store_batch_status s)
{
    (void)s;
    return "?";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    size_t n = strlen(s);
    switch (data[0] % 5) {
    case 0: {
        int64_t seq = -1;
        if (api_results_cursor_parse("batch_01fuzz", s, &seq) == 0) {
            char again[API_CURSOR_LEN + 1];
            if (seq < 0)
                abort();
            api_results_cursor_make("batch_01fuzz", seq, again);
            if (strcmp(again, s) != 0)
                abort(); /* a cursor make never gave was accepted */
            if (api_results_cursor_parse("batch_02other", s, &seq) == 0)
                abort(); /* bound to its batch */
        }
        break;
    }
    case 1: {
        json_t *v = NULL;
        struct js_limits lim = JS_LIMITS_DEFAULT;
        if (js_parse(s, n, &lim, &v, NULL) == 0) {
            int64_t sec = -1;
            enum api_err e;
            char msg[256], param[64];
            if (api_expiry_parse_json(v, "output_expires_after", 3600, &sec, &e, msg, sizeof msg, param) == 0 &&
                (sec < 3600 || sec > API_EXPIRY_MAX_S))
                abort();
        }
        json_decref(v);
        break;
    }
    case 2: {
        char msg[256];
        const char *sep = strchr(s, ' ');
        long long sec = strtoll(sep ? sep + 1 : "0", NULL, 10);
        if (api_expiry_check(sep ? s : NULL, sec, 1, msg, sizeof msg) == 0 && (sec < 1 || sec > API_EXPIRY_MAX_S))
            abort();
        break;
    }
    case 3:
        (void)api_accepts_coding(s, "zstd");
        (void)api_accepts_coding(s, "gzip");
        break;
    default: {
        int64_t w = -1;
        if (api_window_parse(s, 1, &w) == 0 && (w < 1 || w > API_WINDOW_MAX_S))
            abort();
        break;
    }
    }
    free(s);
    return 0;
}
