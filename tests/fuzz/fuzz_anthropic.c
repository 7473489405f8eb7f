/* libFuzzer target: the Messages request parser. The input goes three
 * ways: as a whole POST /v1/messages/batches body through anth_batch_lines
 * (every line it writes must pass ingest_line_check, the rule the ingest
 * thread applies to it later, and the count must match); as one params
 * object through anth_params_check (a refusal names a message, an answer
 * is a chat body with model and messages); and as a chat.completion through
 * anth_message_from_chat (a Message with a content array and one of the
 * four stop reasons).
 * fuzz-src: jobd/intake/anth_batch.c jobd/intake/ingest_line.c */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/js.h"
#include "jobd/intake/anth_batch.h"
#include "openai/anthropic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int collect(void *ctx, const void *p, size_t n)
{
    return buf_append(ctx, p, n);
}

static void check_lines(const struct buf *out, int64_t n, const struct ingest_limits *lim)
{
    int64_t seen = 0;
    const char *p = out->data, *end = out->data + out->len;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            __builtin_trap();
        struct ingest_line l;
        struct problem e;
        if (ingest_line_check(p, (size_t)(nl - p), "/v1/chat/completions", lim, &l, &e) != 0)
            __builtin_trap();
        ingest_line_release(&l);
        seen++;
        p = nl + 1;
    }
    if (seen != n)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ingest_limits lim;
    ingest_limits_default(&lim);
    lim.max_line_bytes = 1u << 16;
    lim.max_requests = 64;
    struct buf out;
    buf_init(&out, 1u << 22);
    struct problem e = {0};
    int64_t n = 0;
    int rc = anth_batch_lines((const char *)data, size, &lim, collect, &out, &n, &e);
    if (rc == 0)
        check_lines(&out, n, &lim);
    else if (rc == ERR_INVAL && (!e.message[0] || !memchr(e.param, '\0', sizeof e.param)))
        __builtin_trap();
    buf_release(&out);

    json_t *j = NULL;
    struct js_limits jl = JS_LIMITS_DEFAULT;
    if (js_parse((const char *)data, size, &jl, &j, NULL) != 0)
        return 0;
    json_t *chat = NULL;
    memset(&e, 0, sizeof e);
    rc = anth_params_check(j, &chat, &e);
    if (rc == 0) {
        if (!json_is_string(json_object_get(chat, "model")) || !json_is_array(json_object_get(chat, "messages")))
            __builtin_trap();
        json_decref(chat);
    } else if (rc == ERR_INVAL && !e.message[0]) {
        __builtin_trap();
    }
    json_t *m = NULL;
    if (anth_message_from_chat(j, &m) == 0) {
        const char *sr = json_string_value(json_object_get(m, "stop_reason"));
        if (!json_is_array(json_object_get(m, "content")) || !sr ||
            (strcmp(sr, "end_turn") && strcmp(sr, "max_tokens") && strcmp(sr, "tool_use") &&
             strcmp(sr, "stop_sequence")))
            __builtin_trap();
        json_decref(m);
    }
    json_decref(j);
    return 0;
}
