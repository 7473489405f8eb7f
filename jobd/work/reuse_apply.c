/*
 * reuse_apply.c - result reuse at lease time: the lookup of a committed
 * lease's requests against reuse_results and the commit of the hits. See
 * reuse.h. Runs on the thread that owns the store.
 */
#include "jobd/work/reuse.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

int reuse_apply(struct store *st, int reuse_default, int64_t retention_s, const char *worker_id,
                const char *model, struct store_lease *l, int64_t now, size_t *n_reused)
{
    *n_reused = 0;
    if (retention_s <= 0 || !l || l->n == 0)
        return 0;
    char sha[REUSE_KEY_HEX], device[129], backend[129];
    int rc = store_reuse_worker(st, worker_id, model, sha, device);
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    reuse_backend(device, backend, sizeof backend);
    struct store_result *res = calloc(l->n, sizeof *res);
    int64_t *saved = calloc(l->n, sizeof *saved);
    char **bodies = calloc(l->n, sizeof *bodies);
    size_t *idx = calloc(l->n, sizeof *idx);
    enum store_commit_outcome *outc = calloc(l->n, sizeof *outc);
    unsigned char *gone = calloc(l->n, 1);
    char (*keys)[REUSE_KEY_HEX] = calloc(l->n, sizeof *keys);
    size_t *miss = calloc(l->n, sizeof *miss);
    size_t nh = 0, nk = 0;
    if (!res || !saved || !bodies || !idx || !outc || !gone || !keys || !miss) {
        rc = ERR_NOMEM;
        goto out;
    }
    /* the keys and the reused commit: one transaction */
    if ((rc = store_tx_enter_lease(st)))
        goto out;
    /* a pack has few batches: one opt-in lookup per run of equal batch ids */
    const char *lastb = NULL;
    int wants = 0;
    for (size_t i = 0; !rc && i < l->n; i++) {
        struct store_leased *it = &l->items[i];
        if (!lastb || strcmp(lastb, it->batch_id) != 0) {
            struct store_batch b;
            wants = 0;
            if (store_batch_get(st, NULL, it->batch_id, &b) == 0) {
                wants = reuse_batch_wants(b.metadata, reuse_default);
                store_batch_release(&b);
            }
            lastb = it->batch_id;
        }
        if (!wants)
            continue;
        char key[REUSE_KEY_HEX];
        int krc = sha[0] ? reuse_key(it->tenant_id, it->endpoint, it->body, it->body_len, sha, backend, key)
                         : ERR_INVAL;
        if (krc == ERR_NOMEM) {
            rc = krc;
            break;
        }
        struct store_reuse_hit h;
        int hrc = krc ? ERR_NOTFOUND : store_reuse_get(st, it->tenant_id, key, now - retention_s, &h);
        if (hrc == 0) {
            int64_t tok = h.prompt_tokens + h.completion_tokens;
            char *mb = NULL;
            size_t mlen = 0;
            int mrc = reuse_mark_body(h.body, h.body_len, tok, &mb, &mlen);
            if (mrc == 0) {
                bodies[nh] = mb;
                res[nh] = (struct store_result){.request_id = it->id, .kind = STORE_RESULT_SUCCESS,
                                                .status_code = h.status_code, .body = mb,
                                                .body_len = mlen};
                saved[nh] = tok;
                idx[nh++] = i;
            }
            free(h.body);
            if (mrc == ERR_NOMEM)
                rc = mrc;
            if (mrc == 0)
                continue; /* a hit (its key stays NULL: never recorded as a computed answer) */
        } else if (hrc != ERR_NOTFOUND) {
            rc = hrc;
            break;
        }
        if (!krc) { /* a miss with a key: its success will be recorded */
            memcpy(keys[nk], key, sizeof key);
            miss[nk++] = i;
        }
    }
    /* the hits first: the commit locks the lease row, then the worker and the
     * batches (store.h's row lock order), then the misses' keys on the rows
     * the lease holds (the claim cleared any earlier lease's key) */
    if (!rc && nh)
        rc = store_reuse_commit(st, l->id, worker_id, res, saved, nh, now, outc);
    for (size_t k = 0; !rc && k < nk; k++)
        rc = store_reuse_key_set(st, l->items[miss[k]].id, l->id, keys[k]);
    if ((rc = store_tx_leave(st, rc)) || nh == 0)
        goto out;
    for (size_t k = 0; k < nh; k++)
        if (outc[k] == STORE_COMMIT_OK) {
            gone[idx[k]] = 1;
            (*n_reused)++;
        }
    size_t w = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (gone[i]) {
            free(l->items[i].custom_id);
            free(l->items[i].body);
            continue;
        }
        l->items[w++] = l->items[i];
    }
    l->n = w;
out:
    for (size_t k = 0; bodies && k < nh; k++)
        free(bodies[k]);
    free(res);
    free(saved);
    free(bodies);
    free(idx);
    free(outc);
    free(gone);
    free(keys);
    free(miss);
    return rc;
}
