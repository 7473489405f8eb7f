/* libFuzzer target: the worker protocol on hostile bytes, both sides - jobd's
 * parsers (jobd/work/lease_proto.c over common/wproto.h) and the worker's
 * readers of jobd's answers (common/wproto.h). Byte 0 picks the parser:
 * 0 results chunk (plain JSONL), 1 results chunk (zstd), 2 register,
 * 3 lease ask, 4 heartbeat, 5 release, 6 lease answer (worker),
 * 7 one results line, 8 heartbeat answer (worker).
 * Oracle: a parsed results chunk has 1..4096 items, each with a req_ id,
 * and every success / invalid_request body is a JSON object; a parsed lease
 * answer's items have ids under ID_MAX and object bodies; a parsed results
 * line reads back the same after wproto_result_json.
 * fuzz-src: jobd/work/lease_proto.c */
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "common/id.h"
#include "common/wproto.h"
#include "jobd/work/lease.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct problem e;
    switch (data[0] % 9) {
    case 0:
    case 1: {
        struct lease_results r;
        if (lease_results_parse(p, n, data[0] % 9 == 1, &r, &e) == 0) {
            if (r.n < 1 || r.n > LEASE_CHUNK_MAX_LINES)
                __builtin_trap();
            for (size_t i = 0; i < r.n; i++) {
                const struct store_result *it = &r.items[i];
                if (!id_valid("req_", it->request_id))
                    __builtin_trap();
                if (it->kind != STORE_RESULT_TRANSIENT) {
                    json_t *v = json_loadb(it->body, it->body_len, 0, NULL);
                    if (!json_is_object(v))
                        __builtin_trap();
                    json_decref(v);
                }
            }
            lease_results_release(&r);
        } else if (e.status < 400 || e.status > 599) {
            __builtin_trap();
        }
        break;
    }
    case 2: {
        struct lease_register r;
        if (lease_parse_register(p, n, &r, &e) == 0) {
            if (r.w.n_models < 1 || r.w.n_models > STORE_WORKER_MAX_MODELS)
                __builtin_trap();
            lease_register_release(&r);
        }
        break;
    }
    case 3: {
        struct lease_ask_msg m;
        if (lease_parse_ask(NULL, p, n, &m, &e) == 0) {
            if (m.ask.max_requests < 1 || m.ask.max_requests > STORE_LEASE_MAX_REQUESTS)
                __builtin_trap();
            lease_ask_release(&m);
        }
        break;
    }
    case 4: {
        struct lease_heartbeat_msg m;
        if (lease_parse_heartbeat(NULL, p, n, &m, &e) == 0)
            lease_heartbeat_release(&m);
        break;
    }
    case 5: {
        struct lease_release_msg m;
        if (lease_parse_release(p, n, &m, &e) == 0)
            lease_release_msg_release(&m);
        break;
    }
    case 6: {
        json_t *ans = json_loadb(p, n, 0, NULL);
        struct wproto_lease l;
        if (ans && wproto_lease_parse(ans, &l) == 0) {
            for (size_t i = 0; i < l.n; i++)
                if (strlen(l.reqs[i].request_id) >= ID_MAX || !json_is_object(l.reqs[i].body))
                    __builtin_trap();
            wproto_lease_release(&l);
        }
        json_decref(ans);
        break;
    }
    case 7: {
        struct wproto_result r, back;
        char err[200];
        if (wproto_result_parse(p, n, &r, err, sizeof err) == 0) {
            json_t *line = wproto_result_json(&r);
            char *t = line ? json_dumps(line, JSON_COMPACT) : NULL;
            if (t) {
                if (wproto_result_parse(t, strlen(t), &back, err, sizeof err) != 0 ||
                    back.kind != r.kind || strcmp(back.request_id, r.request_id) != 0)
                    __builtin_trap();
                wproto_result_release(&back);
            }
            free(t);
            json_decref(line);
            wproto_result_release(&r);
        }
        break;
    }
    default: {
        json_t *ans = json_loadb(p, n, 0, NULL);
        json_t *c = wproto_hb_answer_cancelled(ans);
        if (c && !json_is_array(c))
            __builtin_trap();
        json_decref(ans);
        break;
    }
    }
    return 0;
}
