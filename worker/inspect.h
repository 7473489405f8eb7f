/*
 * inspect.h - a human-readable summary of a GGUF model (jobworker --inspect).
 *
 * Opens the file with the GGUF loader (text/gguf.h), so a file that
 * inspects cleanly is one the engine can load: architecture, the
 * architecture's hyperparameters ("<arch>.*" scalar keys), tokenizer facts,
 * the tensor count, a histogram of tensor types and the bytes of weights.
 * Runs on the caller's thread; no state.
 */
#ifndef WORKER_INSPECT_H
#define WORKER_INSPECT_H

#include <stddef.h>
#include <stdio.h>

/* Print the summary of the model at path to out. Returns 0, or the error of
 * gguf_open (err gets its message). */
int inspect_model(const char *path, FILE *out, char *err, size_t err_len);

#endif
