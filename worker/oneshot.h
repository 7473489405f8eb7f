/*
 * oneshot.h - `jobworker --model M.gguf --prompt TEXT | --chat TEXT`: one
 * completion without jobd.
 *
 * Loads the model, tokenizes the prompt (--chat: renders one user message
 * with the model's chat template first), prefills it in one step, then
 * decodes greedily (argmax) one token per step until an end-of-generation
 * token, max_tokens, or the context is full. The completion is streamed to
 * out as valid UTF-8; a summary line with the prompt and decode speeds
 * goes to errout:
 *   prompt: 12 tokens, 0.21 s (57.1 tok/s); decode: 64 tokens, 3.10 s (20.6 tok/s)
 * Runs on the caller's thread.
 */
#ifndef WORKER_ONESHOT_H
#define WORKER_ONESHOT_H

#include <stddef.h>
#include <stdio.h>

struct oneshot_opts {
    const char *model_path;
    const char *text;
    int chat;              /* 1: text is a user message for the chat template */
    int max_tokens;        /* tokens to generate at most (> 0) */
    int print_ids;         /* 1: also print the prompt's and the completion's token ids on
                            * errout ("prompt ids: 1 2 3" / "completion ids: 4 5") */
};

/* Run it. Returns 0, or an error with a one-line message in err: the
 * model's load errors, ERR_TOOBIG (prompt longer than the context),
 * ERR_INVAL (empty prompt), ERR_UNSUPPORTED (--chat without a template),
 * ERR_IO (writing out failed), ERR_NOMEM. */
int oneshot_run(const struct oneshot_opts *o, FILE *out, FILE *errout, char *err, size_t err_len);

#endif
