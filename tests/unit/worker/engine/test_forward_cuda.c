/* The CPU-side hooks of the CUDA forward path (worker/engine/forward_cuda.h):
 * device selection in model_ctx_new without a CUDA build, and the KV
 * cache's copy hook that keeps device-resident K/V in step with
 * kv_seq_truncate's private copy of a shared block. (The CUDA path itself
 * is tested on a GPU: tests/cuda.) */
#include <stdlib.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"

TEST(forward_cuda_device_selection_without_cuda_build)
{
    struct model *m = NULL;
    char err[256];
    CHECK_EQ_INT(model_load("tests/fixtures/model/llama_tied.q8_0.gguf", &m, err, sizeof err), 0);
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    p.n_ctx = 32;
    struct model_ctx *c = NULL;
    p.device = 7; /* no such device */
    CHECK_EQ_INT(model_ctx_new(m, &p, &c), ERR_INVAL);
    p.device = KN_DEVICE_CUDA;
    if (!kn_cuda_built()) /* the sanitised test build never has CUDA */
        CHECK_EQ_INT(model_ctx_new(m, &p, &c), ERR_UNSUPPORTED);
    CHECK(c == NULL);
    p.device = KN_DEVICE_CPU;
    CHECK_EQ_INT(model_ctx_new(m, &p, &c), 0);
    model_ctx_free(c);
    model_free(m);
}

struct copy_log {
    int n;
    int32_t dst, src;
    int n_pos;
};

static void record_copy(void *ud, int32_t dst, int32_t src, int n_pos)
{
    struct copy_log *l = ud;
    l->n++;
    l->dst = dst, l->src = src, l->n_pos = n_pos;
}

/* Truncating into a shared block makes a private copy: with a hook set, the
 * hook gets (new block, old block, positions kept) and the host arrays are
 * not touched (they may be NULL, as with --device cuda). */
TEST(forward_cuda_kv_copy_hook_replaces_host_copy)
{
    struct kv_cache *kv = NULL;
    CHECK_EQ_INT(kv_cache_new(2, 8, KV_BLOCK_TOKENS, 8, 2, 64, 0, 0, &kv), 0);
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = 100 + i;
    CHECK_EQ_INT(kv_seq_reserve(kv, 0, 40), 0);
    kv->seqs[0].n_pos = 40;
    CHECK_EQ_INT(kv_seq_publish(kv, 0, toks, 40), 2);
    CHECK_EQ_INT(kv_seq_share_prefix(kv, 1, toks, 40), 32);
    free(kv->k), free(kv->v);
    kv->k = kv->v = NULL;
    struct copy_log log = {0, -1, -1, 0};
    kv->copy_hook = record_copy;
    kv->copy_ud = &log;
    int32_t shared = kv->seqs[1].blocks[1];
    CHECK_EQ_INT(kv_seq_truncate(kv, 1, 20), 0); /* cut inside the second shared block */
    CHECK_EQ_INT(log.n, 1);
    CHECK_EQ_INT(log.src, shared);
    CHECK_EQ_INT(log.dst, kv->seqs[1].blocks[1]);
    CHECK(log.dst != shared);
    CHECK_EQ_INT(log.n_pos, 4);
    kv_cache_free(kv);
}
