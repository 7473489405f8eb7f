/*
 * embed.c - pooled sentence embeddings over the forward pass. See embed.h.
 *
 * The packing loop, per step:
 *
 *   for each busy slot (in slot order): its next tokens, as many as fit
 *   while tokens fit and inputs remain: take a free slot, start the next input
 *   model_forward(batch)                  marked rows = the pooled positions
 *   add / copy the marked rows into out[input]
 *   finished inputs: mean divide, normalise, kv_seq_clear(slot)
 *
 * An input enters a slot only when the cache's blocks can hold it whole
 * next to the inputs in flight (so a context needs only one n_ctx worth
 * of blocks, whatever its slot count). An encoder (bert) keeps nothing
 * between steps, so its steps hold whole inputs back to back instead
 * (embed_whole), all in slot 0. The step arrays (token, pos, seq, out
 * flags) and the slot table are allocated once per call (n_batch_max /
 * n_seq_max entries).
 */
#include "worker/engine/embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

enum model_pooling embed_default_pooling(const struct model *m)
{
    enum model_pooling p = m->hp.pooling;
    if (p == MODEL_POOL_MEAN || p == MODEL_POOL_CLS || p == MODEL_POOL_LAST)
        return p;
    return m->hp.arch == MODEL_ARCH_BERT ? MODEL_POOL_MEAN : MODEL_POOL_LAST;
}

void embed_normalize(float *v, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)v[i] * v[i];
    if (ss <= 0)
        return;
    double inv = 1.0 / sqrt(ss);
    for (int i = 0; i < n; i++)
        v[i] = (float)(v[i] * inv);
}

/* Is position p of an input of len tokens pooled? */
static int pooled(enum model_pooling pool, int p, int len)
{
    return pool == MODEL_POOL_MEAN || (pool == MODEL_POOL_CLS && p == 0) ||
           (pool == MODEL_POOL_LAST && p == len - 1);
}

/* Add the n_out marked rows of a step to their inputs' vectors: MEAN sums
 * in position order, CLS/LAST get their one row. */
static void add_rows(float *out, const float *rows, const int *row_in, int n_out, int n_embd)
{
    for (int r = 0; r < n_out; r++) {
        float *o = out + (size_t)row_in[r] * (size_t)n_embd;
        const float *h = rows + (size_t)r * (size_t)n_embd;
        for (int k = 0; k < n_embd; k++)
            o[k] += h[k];
    }
}

/* A finished input's vector: the mean, then normalised. */
static void finish(float *o, enum model_pooling pool, int len, int normalize, int n_embd)
{
    if (pool == MODEL_POOL_MEAN)
        for (int k = 0; k < n_embd; k++)
            o[k] /= (float)len;
    if (normalize)
        embed_normalize(o, n_embd);
}

/* The encoder's packing: whole inputs back to back while they fit in
 * n_batch_max tokens (at least n_ctx for an encoder, model.h). */
static int embed_whole(struct model_ctx *c, enum model_pooling pool, int normalize,
                       const int32_t *const *ids, const int *lens, int n_in, float *out,
                       int32_t *tok, int32_t *pos, int32_t *seq, uint8_t *mark, int *row_in)
{
    int n_embd = model_ctx_model(c)->hp.n_embd, nb = model_ctx_get_params(c)->n_batch_max;
    for (int next = 0; next < n_in;) {
        int first = next, n = 0, n_marked = 0;
        while (next < n_in && n + lens[next] <= nb) {
            for (int q = 0; q < lens[next]; q++, n++) {
                tok[n] = ids[next][q];
                pos[n] = q;
                seq[n] = 0;
                mark[n] = (uint8_t)pooled(pool, q, lens[next]);
                if (mark[n])
                    row_in[n_marked++] = next;
            }
            next++;
        }
        if (n == 0) /* an input over n_batch_max: not an encoder's context */
            return ERR_TOOBIG;
        struct model_batch b = {n, tok, pos, seq, mark};
        const float *rows;
        int n_out, rc;
        if ((rc = model_forward(c, &b, &rows, &n_out)))
            return rc;
        add_rows(out, rows, row_in, n_out, n_embd);
        for (int i = first; i < next; i++)
            finish(out + (size_t)i * (size_t)n_embd, pool, lens[i], normalize, n_embd);
    }
    return 0;
}

int embed_run(struct model_ctx *c, enum model_pooling pool, int normalize,
              const int32_t *const *ids, const int *lens, int n_in, float *out)
{
    const struct model *m = model_ctx_model(c);
    const struct model_ctx_params *p = model_ctx_get_params(c);
    struct kv_cache *kv = model_ctx_kv(c);
    int n_embd = m->hp.n_embd, nb = p->n_batch_max, ns = p->n_seq_max;
    if (!p->embeddings || p->n_out_max != nb || n_in < 0 || (n_in && (!ids || !lens || !out)) ||
        (pool != MODEL_POOL_MEAN && pool != MODEL_POOL_CLS && pool != MODEL_POOL_LAST))
        return ERR_INVAL;
    for (int i = 0; i < n_in; i++) {
        if (lens[i] < 1 || !ids[i])
            return ERR_INVAL;
        if (lens[i] > p->n_ctx)
            return ERR_TOOBIG;
        for (int j = 0; j < lens[i]; j++)
            if (ids[i][j] < 0 || ids[i][j] >= m->hp.n_vocab)
                return ERR_INVAL;
    }
    int rc = ERR_NOMEM;
    int32_t *tok = malloc((size_t)nb * sizeof *tok);   /* (nb) step token ids */
    int32_t *pos = malloc((size_t)nb * sizeof *pos);   /* (nb) positions */
    int32_t *seq = malloc((size_t)nb * sizeof *seq);   /* (nb) slots */
    uint8_t *mark = malloc((size_t)nb);                /* (nb) pooled rows */
    int *row_in = malloc((size_t)nb * sizeof *row_in); /* (nb) input of each marked row */
    int *slot_in = malloc((size_t)ns * sizeof *slot_in); /* (ns) input in the slot, -1 free */
    int *slot_pos = malloc((size_t)ns * sizeof *slot_pos); /* (ns) next position to feed */
    if (!tok || !pos || !seq || !mark || !row_in || !slot_in || !slot_pos)
        goto out;
    if (n_in)
        memset(out, 0, (size_t)n_in * (size_t)n_embd * sizeof(float));
    if (m->hp.arch == MODEL_ARCH_BERT) { /* bidirectional: whole inputs, no KV cache */
        rc = embed_whole(c, pool, normalize, ids, lens, n_in, out, tok, pos, seq, mark, row_in);
        goto out;
    }
    for (int s = 0; s < ns; s++) {
        slot_in[s] = -1;
        kv_seq_clear(kv, s);
    }
    /* an input is admitted only when the cache can hold all of it next to
     * the inputs in flight (blocks of their whole lengths): then a step
     * never runs out of blocks, and one input of n_ctx always fits when
     * the cache holds one slot's worth */
    int bt = kv->block_tokens, held = 0;
    for (int i = 0; i < n_in; i++)
        if ((lens[i] + bt - 1) / bt > kv->n_blocks) {
            rc = ERR_TOOBIG;
            goto out;
        }
    int next = 0, done = 0;
    while (done < n_in) {
        int n = 0;
        /* busy slots first, then new inputs into free slots */
        for (int s = 0; s < ns && n < nb; s++) {
            if (slot_in[s] < 0) {
                if (next == n_in || held + (lens[next] + bt - 1) / bt > kv->n_blocks)
                    continue;
                held += (lens[next] + bt - 1) / bt;
                slot_in[s] = next++;
                slot_pos[s] = 0;
            }
            int in = slot_in[s], len = lens[in];
            while (slot_pos[s] < len && n < nb) {
                int q = slot_pos[s]++;
                tok[n] = ids[in][q];
                pos[n] = q;
                seq[n] = s;
                mark[n] = (uint8_t)pooled(pool, q, len);
                n++;
            }
        }
        int n_marked = 0;
        for (int i = 0; i < n; i++)
            if (mark[i])
                row_in[n_marked++] = slot_in[seq[i]];
        struct model_batch b = {n, tok, pos, seq, mark};
        const float *rows;
        int n_out;
        if ((rc = model_forward(c, &b, &rows, &n_out)))
            goto out;
        add_rows(out, rows, row_in, n_out, n_embd);
        for (int s = 0; s < ns; s++) {
            int in = slot_in[s];
            if (in < 0 || slot_pos[s] < lens[in])
                continue;
            finish(out + (size_t)in * (size_t)n_embd, pool, lens[in], normalize, n_embd);
            kv_seq_clear(kv, s);
            held -= (lens[in] + bt - 1) / bt;
            slot_in[s] = -1;
            done++;
        }
    }
    rc = 0;
out:
    if (rc && slot_in)
        for (int s = 0; s < ns; s++)
            kv_seq_clear(kv, s);
    free(tok);
    free(pos);
    free(seq);
    free(mark);
    free(row_in);
    free(slot_in);
    free(slot_pos);
    return rc;
}
