/*
 * problem.h - one user-facing error: the record every layer fills when it
 * refuses a request, a JSONL line or a worker message, and that the edges
 * turn into OpenAI's {"error": {"message", "type", "param", "code"}} or a
 * batch's errors.data[] entry.
 *
 * Fixed-size and JSON-free, so any module (common/gram, openai/, jobd's
 * intake and worker protocol) can fill one without allocating; the JSON
 * shape belongs to the edge that sends it (gp_error_json in openai/params.h,
 * ingest.c's error list, lease_write_error). Fields are truncated to their
 * arrays, never overflowed. Thread: any (caller's storage).
 */
#ifndef COMMON_PROBLEM_H
#define COMMON_PROBLEM_H

#include <stdint.h>

struct problem {
    int status;          /* HTTP status: 400, 404, 409, 413...; 0 = not set */
    char code[40];       /* "invalid_value", "stale_lease"...; "" = none (JSON null) */
    char param[64];      /* "temperature", "body.messages"...; "" = none (JSON null) */
    char message[320];   /* the human sentence */
    int64_t line;        /* 1-based line of a JSONL file or results chunk; 0 = none */
};

/* Fill p with status 400, code, param (NULL = none) and a printf message;
 * line is left as it is. Nothing happens when p is NULL. Returns ERR_INVAL,
 * so a validator can `return problem_setf(p, "invalid_type", "n", ...);`. */
int problem_setf(struct problem *p, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
