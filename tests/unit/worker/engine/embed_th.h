/*
 * embed_th.h - what the embedding tests (test_embed.c: decoder models,
 * test_encoder.c: BERT) share: an embeddings context and the comparison
 * with a fixture's expected vectors.
 */
#ifndef TESTS_UNIT_WORKER_ENGINE_EMBED_TH_H
#define TESTS_UNIT_WORKER_ENGINE_EMBED_TH_H

#include "kernels/kn.h"
#include "worker/engine/model.h"

/* An embeddings context of n_ctx 64 (the test fails if it cannot be made). */
struct model_ctx *eth_ctx(const struct model *m, int n_seq, int n_batch, int exact,
                          struct kn_pool *pool);

/* The largest relative L2 distance of the n_in rows of got (n_in, d) from
 * want's, each want row L2-normalised first when normalized. */
double eth_max_err(const float *got, const float *want, int n_in, int d, int normalized);

#endif
