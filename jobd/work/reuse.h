/*
 * reuse.h - result reuse for deterministic requests (spec/usage.md
 * "Result reuse"): a request of a batch that opted in is answered from a
 * result already committed for the same tenant when a fresh computation
 * would give the same bits.
 *
 * Design. The engine is batch-invariant: the same model file, request and
 * seed give the same bits whatever shared the batch, on one backend (CPU and
 * CUDA differ). So the reuse key is
 *
 *   sha256("jobd-reuse-v1\n" tenant_id "\n" endpoint "\n" model_sha256 "\n"
 *          backend "\n" canonical(body))
 *
 * where canonical(body) is the whole body re-serialised with sorted keys and
 * no whitespace (jansson JSON_SORT_KEYS | JSON_COMPACT): nothing is dropped
 * from it, so every field (seed, sampling parameters, n, max_tokens, the
 * model name) is part of the key and only bodies that differ in spacing or
 * key order share one. Only deterministic bodies get a key: "temperature"
 * present and 0, or an integer "seed" present (a request without a seed is
 * otherwise seeded from its request id, so two requests never share bits).
 * The model hash is the SHA-256 of the model file the leasing worker
 * registered (register's models[].sha256); a worker that sends none gets no
 * reuse at all. The backend is the device the worker registered, with the
 * device index dropped ("cuda:1 NVIDIA H200" -> "cuda NVIDIA H200").
 *
 * Where: at lease time (reuse_apply, after lease_acquire committed the
 * pack), against the leasing worker's model hash and backend. Hits are
 * committed at once as that lease's results (tokens and cost 0,
 * reused_tokens = the original's prompt + completion tokens) and leave the
 * pack; misses get their key stored on the request (the claim cleared any
 * earlier lease's), so their success is recorded for later batches in the
 * transaction that commits it (store_reuse_record); a hit has no key, so a
 * reused answer is never recorded as a computed one. A crash between the
 * two transactions only loses the reuse: the requests stay leased and the
 * worker computes them.
 *
 * Runs on the thread that owns the store.
 */
#ifndef JOBD_WORK_REUSE_H
#define JOBD_WORK_REUSE_H

#include <stddef.h>
#include <stdint.h>

#include "jobd/store/store.h"

#define REUSE_KEY_HEX 65 /* 64 hex digits and a NUL */
#define REUSE_MARK "+reused" /* appended to system_fingerprint of a reused body */

/* 1 when body (len bytes of JSON) is deterministic as above, else 0 (also
 * for text that is not a JSON object). Can't fail. */
int reuse_deterministic(const char *body, size_t len);

/* The reuse key of a request into out (lowercase hex). 0; ERR_INVAL when
 * the body is not a deterministic JSON object or model_sha256 / backend is
 * empty (no key: never reused); ERR_NOMEM. */
int reuse_key(const char *tenant_id, const char *endpoint, const char *body, size_t len,
              const char *model_sha256, const char *backend, char out[REUSE_KEY_HEX]);

/* The backend part of the key from a worker's device string: the text up to
 * the first ':' or space, then, when a space follows the index, the rest
 * ("cuda:0 NVIDIA H200" -> "cuda NVIDIA H200", "cpu" -> "cpu", "" -> "cpu").
 * Truncated to cap. Can't fail. */
void reuse_backend(const char *device, char *out, size_t cap);

/* Whether a batch reuses results: metadata "reuse" "on" / "off" (another
 * value, or none, follows dflt). metadata: the batch's JSON object text or
 * NULL. */
int reuse_batch_wants(const char *metadata, int dflt);

/* 1 when v is a valid metadata "reuse" value ("on" or "off"), else 0: the
 * batch create answers 400 for another (jobd/api/api_json.c). */
int reuse_metadata_value_ok(const char *v);

/* The reused answer: body with system_fingerprint suffixed by REUSE_MARK
 * (null becomes "reused") and usage.reused_tokens = reused_tokens added,
 * every other byte of the compact serialisation as it was. *out heap
 * (free()). 0, ERR_INVAL (not a JSON object), ERR_NOMEM. */
int reuse_mark_body(const char *body, size_t len, int64_t reused_tokens, char **out, size_t *out_len);

/* Answer the reusable requests of lease l (just committed for worker_id,
 * model) from reuse_results and remove them from l->items; set the reuse
 * key of the others of opted-in batches. reuse_default: the jobd default;
 * retention_s: results older than this are not reused (0: reuse off, the
 * call does nothing). *n_reused gets the number answered. A failure leaves
 * l as it was (the worker computes everything) and returns the error. */
int reuse_apply(struct store *st, int reuse_default, int64_t retention_s, const char *worker_id,
                const char *model, struct store_lease *l, int64_t now, size_t *n_reused);

#endif
