/*
 * tokens.h - exact prompt token counts in jobd: tokenizer-only loads of the
 * GGUF files the workers serve, for cost estimates before a batch runs
 * (POST /v1/batches/estimate).
 *
 * Design. jobd --tokenizer NAME=PATH.gguf[,NAME=PATH...] names, per model
 * name (as requests' body.model use it), a GGUF file with the same
 * tokenizer and chat template as the workers' model (usually the same
 * file). The first count for a name opens the file (mmap, read only: the
 * weights are never touched), builds its tokenizer and chat template with
 * the worker's own code (text/tok_gguf.h) and keeps them until
 * tokens_free; a body's prompt is then built and tokenized exactly as a
 * worker does (openai/prompt.h: chat template with the generation
 * prompt, BOS per the vocabulary, completions prompts with special tokens
 * parsed), so the count equals the prompt_tokens a worker reports. A file
 * that fails to load is remembered as failed (logged once), and counts for
 * its name answer ERR_UNSUPPORTED from then on.
 *
 * Threads: any; loads are serialised by a mutex, counts on a loaded
 * tokenizer run concurrently (the tokenizer is read-only).
 */
#ifndef JOBD_TOKENS_H
#define JOBD_TOKENS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAX_MODELS 32

struct tokens;

/* Parse spec ("NAME=PATH,NAME=PATH"; NULL or "" = none) into *out (nothing
 * is loaded yet). 0, or ERR_INVAL with a message in err (bad syntax, a name
 * twice, more than TOKENS_MAX_MODELS), ERR_NOMEM. */
int tokens_new(const char *spec, struct tokens **out, char *err, size_t err_len);
void tokens_free(struct tokens *t);

/* 1 if a tokenizer is configured for model (loaded or not), else 0. NULL t ok. */
int tokens_has(const struct tokens *t, const char *model);

/* The prompt tokens of a request body (a JSON object) for the endpoint
 * ("/v1/chat/completions", "/v1/responses": translated onto a chat body by
 * openai/responses.h first; any other: as "/v1/completions") with model's tokenizer:
 * the sum over its prompts. 0 with *n; ERR_NOTFOUND no tokenizer configured for model;
 * ERR_UNSUPPORTED its GGUF could not be loaded (err says why); ERR_INVAL
 * the body is not a request the worker would run (err: its message);
 * ERR_NOMEM. */
int tokens_count(struct tokens *t, const char *model, const char *endpoint, const json_t *body,
                 int64_t *n, char *err, size_t err_len);

#endif
