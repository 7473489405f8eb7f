/* libFuzzer target: model loading (worker/engine/model.c: hyperparameters, tensor
 * validation), the tokenizer built from the file (text/tok_gguf.c) and,
 * for small models that load, one forward step of two tokens - which reads
 * every weight row, so a wrong shape or stride check shows up as an
 * overread of the input buffer - in a context whose sliding-window layers
 * (if any) keep rings; an encoder (bert) embeds those two tokens through
 * embed_run (its pooling over the encoder's model_forward). */
#include <stdint.h>
#include <stdlib.h>

#include "text/chat.h"
#include "worker/engine/embed.h"
#include "text/gguf.h"
#include "worker/engine/model.h"
#include "text/tok.h"
#include "text/tok_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf *g;
    char err[256];
    if (gguf_open_mem(data, size, &g, err, sizeof err))
        return 0;
    struct tok *t;
    if (tok_gguf_new(g, &t, err, sizeof err) == 0) {
        struct chat_tmpl *ct;
        if (tok_gguf_chat_new(g, t, &ct) == 0)
            chat_tmpl_free(ct);
        tok_free(t);
    }
    struct model *m;
    if (model_load_gguf(g, &m, err, sizeof err)) {
        gguf_free(g);
        return 0;
    }
    const struct model_hparams *hp = &m->hp;
    double work = (double)hp->n_layer * hp->n_embd * (hp->n_ff + hp->n_head * hp->head_dim) +
                  (double)hp->n_vocab * hp->n_embd;
    struct model_ctx_params p;
    model_ctx_params_init(&p);
    /* 32 positions: a sliding window under 31 gets its per-slot ring (kv.h),
     * so the ring layout is built from the file's window and layer pattern */
    p.n_ctx = hp->n_ctx_train < 32 ? hp->n_ctx_train : 32;
    p.n_batch_max = 2;
    p.n_out_max = 2;
    p.max_bytes = 64u << 20;
    p.embeddings = hp->arch == MODEL_ARCH_BERT;
    struct model_ctx *c;
    if (work < 4e6 && model_ctx_new(m, &p, &c) == 0) {
        int32_t tok[2] = {0, hp->n_vocab - 1}, pos[2] = {0, 1}, seq[2] = {0, 0};
        uint8_t out[2] = {1, 1};
        struct model_batch b = {p.n_ctx >= 2 ? 2 : 1, tok, pos, seq, out};
        if (p.embeddings) {
            float *v = malloc((size_t)hp->n_embd * sizeof(float));
            const int32_t *ids = tok;
            int len = b.n_tokens;
            if (v)
                (void)embed_run(c, embed_default_pooling(m), 1, &ids, &len, 1, v);
            free(v);
        } else {
            const float *lg;
            int n_out;
            (void)model_forward(c, &b, &lg, &n_out);
        }
        model_ctx_free(c);
    }
    model_free(m);
    return 0;
}
