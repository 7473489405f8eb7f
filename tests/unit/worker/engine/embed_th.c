/* embed_th.c - shared helpers of the embedding tests (see embed_th.h). */
#include "tests/unit/worker/engine/embed_th.h"

#include <string.h>

#include "tests/th.h"
#include "worker/engine/embed.h"

struct model_ctx *eth_ctx(const struct model *m, int n_seq, int n_batch, int exact,
                          struct kn_pool *pool)
{
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 64;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = n_batch;
    cp.n_out_max = n_batch;
    cp.exact_matmul = exact;
    cp.embeddings = 1;
    cp.pool = pool;
    struct model_ctx *c;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), 0);
    return c;
}

double eth_max_err(const float *got, const float *want, int n_in, int d, int normalized)
{
    double worst = 0;
    float row[256];
    CHECK(d <= 256);
    for (int i = 0; i < n_in; i++) {
        memcpy(row, want + (size_t)i * (size_t)d, (size_t)d * sizeof(float));
        if (normalized)
            embed_normalize(row, d);
        double e = th_rel_l2(got + (size_t)i * (size_t)d, row, (size_t)d);
        if (!(e <= worst))
            worst = e;
    }
    return worst;
}
