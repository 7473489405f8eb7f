/*
 * sched.c - static + continuous batching with chunked prefill, prefix
 * sharing, preemption and prompt-lookup speculation (see sched.h).
 */
#include "worker/engine/sched.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/hash.h"
#include "kernels/kn.h"
#include "worker/engine/generate.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"

enum { SEQ_WAIT = 0, SEQ_RUN, SEQ_DONE };

/* Speculation (sched.h "Speculation"). Drafts come from the newest earlier
 * occurrence of the sequence's last SPEC_NGRAM_MAX .. 1 tokens; each match
 * length n has its own acceptance estimate (a 3-token match is a far better
 * predictor than a 1-token one). SPEC_ROW_COST is the cost of one more
 * position in a small step relative to the step itself: on SmolLM2-135M
 * Q4_1, 2 threads, 300-500 positions of context, a step of 1 + k positions
 * took 17-20 ms of CPU plus 2.6-4.3 ms per extra position (bench/NOTES.md
 * "Speculation"), a ratio of 0.15-0.22. */
#define SPEC_NGRAM_MAX 3
#define SPEC_ROW_COST 0.2
#define SPEC_DECAY 0.9       /* weight of the past in the acceptance estimate, per step */
#define SPEC_PRIOR_WEIGHT 2.0 /* drafts' worth of the prior acceptance rate */
#define SPEC_PROBE_EVERY 16  /* with k = 0, draft one token after this many matches */

struct sreq;

struct sseq {
    struct sreq *r;
    const int32_t *prompt;       /* (n_prompt) borrowed from r->pr */
    int n_prompt;
    struct gen_seq g;
    int state;
    int slot;                    /* while running */
    int n_computed;              /* positions in the KV cache */
    int hwm;                     /* most positions ever computed (recompute accounting) */
    int take;                    /* tokens in the current step (with the drafts) */
    uint64_t serial;             /* order of creation (tie-break) */
    /* speculation: this step's drafts (positions n_computed + 1 ..), the match
     * length that found them, and per match length n (index n - 1) the decayed
     * counts of accepted and tested draft tokens and the matches since a draft */
    int32_t draft[SCHED_SPEC_K_MAX];
    int n_draft, draft_ngram;
    double acc_hit[SPEC_NGRAM_MAX], acc_tried[SPEC_NGRAM_MAX];
    int spec_wait[SPEC_NGRAM_MAX];
};

struct sreq {
    char *id;
    void *user;                        /* the caller's, freed with user_free */
    void (*user_free)(void *);
    struct gen_params gp;
    struct gen_prompt *pr;
    size_t n_pr;
    struct sseq *seqs;
    int n_seq, n_done;
    int64_t cached;
    double cpu_s;
    uint64_t t_add, t_admit, t_first;  /* mono ns; 0 = not yet */
    struct sreq *prev, *next;          /* live requests */
};

struct sched {
    const struct model *m;
    const struct tok *t;
    struct sched_opts o;
    struct model_ctx *ctx;
    struct kv_cache *kv;
    int n_ctx, n_vocab;
    int spec;                    /* 1: speculation on (opts, and a CPU context) */
    struct smp_scratch scratch;
    struct sseq **wait;          /* (cap_wait) queue; the last n_new are unsorted */
    int n_wait, cap_wait, n_new;
    struct sseq **run;           /* (max_seqs) in admission order */
    int n_run;
    int *slots;                  /* (max_seqs) free slot stack */
    int n_slots;
    int32_t *b_tok, *b_pos, *b_seq; /* (max_batch_tokens) the step's batch */
    uint8_t *b_out;
    struct sseq **step;          /* (max_seqs) sequences in the step, batch order */
    int n_step;
    struct sseq **maskq;         /* (max_seqs) constrained sequences sampling this step */
    int *mask_rc;                /* (max_seqs) their gen_seq_mask results */
    int n_maskq;
    uint64_t serial;
    struct sreq *live;
    struct sched_stats st;
    double util_sum;
};

void sched_opts_init(struct sched_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_batch_tokens = 512;
    o->max_seqs = 64;
    o->kv_mem_bytes = (size_t)256 << 20;
    o->spec = SCHED_SPEC_AUTO;
    o->spec_max_seqs = SCHED_SPEC_MAX_SEQS;
}

static double cpu_now_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

int sched_new(const struct model *m, const struct tok *t, const struct sched_opts *o,
              struct sched **out)
{
    if (!m || !t || !o || !out || !o->on_result || o->max_batch_tokens < 1 ||
        o->max_batch_tokens > (1 << 20) || o->max_seqs < 1 || o->max_seqs > (1 << 16) ||
        o->n_ctx < 0 || (o->spec != SCHED_SPEC_OFF && o->spec != SCHED_SPEC_AUTO) ||
        o->spec_max_seqs < 0 || o->spec_max_seqs > (1 << 16) || o->spec_k < 0 ||
        o->spec_k > SCHED_SPEC_K_MAX)
        return ERR_INVAL;
    int spec = o->spec == SCHED_SPEC_AUTO && o->device == KN_DEVICE_CPU && o->spec_max_seqs > 0;
    const struct model_hparams *hp = &m->hp;
    int n_ctx = o->n_ctx ? o->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (n_ctx > hp->n_ctx_train)
        return ERR_INVAL;
    /* the budget pays for the sliding-window rings first (kv.h; fixed per
     * slot), the rest buys pool blocks */
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = n_ctx;
    cp.n_batch_max = o->max_batch_tokens;
    cp.n_seq_max = o->max_seqs;
    /* logits rows: one per sequence, or a speculating sequence's 1 + k */
    int64_t n_out = o->max_seqs;
    if (spec && (int64_t)o->spec_max_seqs * (SCHED_SPEC_K_MAX + 1) > n_out)
        n_out = (int64_t)o->spec_max_seqs * (SCHED_SPEC_K_MAX + 1);
    cp.n_out_max = (int)(n_out < o->max_batch_tokens ? n_out : o->max_batch_tokens);
    cp.pool = o->pool;
    cp.exact_matmul = o->exact_matmul;
    cp.device = o->device;
    cp.swa_full = o->swa_full;
    cp.kv_type = o->kv_type;
    size_t per_block, ring_bytes, nb = 0;
    for (int pass = 0; pass < 3; pass++) {
        /* again when a lowered n_ctx turns the rings off (then nb settles) */
        cp.n_ctx = n_ctx;
        if (model_ctx_kv_bytes(m, &cp, &per_block, &ring_bytes))
            return ERR_INVAL;
        /* rings hold more tokens in flight than the same bytes of full blocks
         * exactly when the budget at full size covers every slot's ring
         * (max_seqs x ring positions x all layers <= kv_mem); else keep
         * every position */
        double full_rings = (double)o->max_seqs *
                            (double)kv_ring_blocks(hp->n_swa, o->max_batch_tokens, KV_BLOCK_TOKENS) *
                            (double)kv_cache_bytes(hp->n_layer, hp->n_head_kv * hp->head_dim,
                                                   KV_BLOCK_TOKENS, 1, model_ctx_kv_type(&cp));
        if (ring_bytes && full_rings > (double)o->kv_mem_bytes) {
            cp.swa_full = 1;
            if (model_ctx_kv_bytes(m, &cp, &per_block, &ring_bytes))
                return ERR_INVAL;
        }
        if (per_block == 0) /* every layer in rings: blocks only count positions */
            nb = (size_t)((n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS) * (size_t)o->max_seqs;
        else
            nb = (o->kv_mem_bytes - ring_bytes) / per_block;
        if (nb > (size_t)(INT32_MAX / 4))
            nb = (size_t)(INT32_MAX / 4);
        if (nb < 2)
            return ERR_INVAL;
        if ((size_t)n_ctx <= nb * KV_BLOCK_TOKENS)
            break;
        n_ctx = (int)(nb * KV_BLOCK_TOKENS); /* one sequence must always fit alone */
    }
    cp.n_ctx = n_ctx;
    cp.n_kv_blocks = (int)nb;

    int rc = ERR_NOMEM;
    struct sched *s = calloc(1, sizeof *s);
    if (!s)
        return ERR_NOMEM;
    s->m = m;
    s->t = t;
    s->o = *o;
    s->n_ctx = n_ctx;
    s->n_vocab = hp->n_vocab;
    s->spec = spec;
    if ((rc = model_ctx_new(m, &cp, &s->ctx)) != 0)
        goto out;
    s->kv = model_ctx_kv(s->ctx);
    /* the key of the empty prefix names the model (its shapes and weights' address
     * range are fixed for the context's lifetime; the cache never outlives it) */
    uint64_t seed = kv_block_key(0x736368656431ull,
                                 (const int32_t[]){hp->n_layer, hp->n_embd, hp->n_vocab,
                                                   hp->n_head_kv, hp->head_dim, (int32_t)hp->arch},
                                 6);
    kv_cache_set_seed(s->kv, seed);
    if ((rc = smp_scratch_init(&s->scratch, (size_t)s->n_vocab)) != 0)
        goto out;
    rc = ERR_NOMEM;
    size_t ns = (size_t)o->max_seqs, nbt = (size_t)o->max_batch_tokens;
    s->run = calloc(ns, sizeof *s->run);
    s->step = calloc(ns, sizeof *s->step);
    s->maskq = calloc(ns, sizeof *s->maskq);
    s->mask_rc = calloc(ns, sizeof *s->mask_rc);
    s->slots = malloc(ns * sizeof *s->slots);
    s->b_tok = malloc(nbt * sizeof *s->b_tok);
    s->b_pos = malloc(nbt * sizeof *s->b_pos);
    s->b_seq = malloc(nbt * sizeof *s->b_seq);
    s->b_out = malloc(nbt);
    if (!s->run || !s->step || !s->maskq || !s->mask_rc || !s->slots || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_out)
        goto out;
    for (int i = 0; i < o->max_seqs; i++)
        s->slots[i] = o->max_seqs - 1 - i;
    s->n_slots = o->max_seqs;
    s->st.kv_blocks = s->kv->n_blocks;
    s->st.n_ctx = n_ctx;
    *out = s;
    s = NULL;
    rc = 0;
out:
    sched_free(s);
    return rc;
}

static void req_free(struct sreq *r)
{
    if (!r)
        return;
    for (int i = 0; r->seqs && i < r->n_seq; i++)
        gen_seq_release(&r->seqs[i].g);
    free(r->seqs);
    gen_prompts_free(r->pr, r->n_pr);
    gen_params_release(&r->gp);
    if (r->user_free)
        r->user_free(r->user);
    free(r->id);
    free(r);
}

static void live_unlink(struct sched *s, struct sreq *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        s->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

void sched_free(struct sched *s)
{
    if (!s)
        return;
    while (s->live) {
        struct sreq *r = s->live;
        live_unlink(s, r);
        req_free(r);
    }
    model_ctx_free(s->ctx);
    smp_scratch_release(&s->scratch);
    free(s->wait);
    free(s->run);
    free(s->step);
    free(s->maskq);
    free(s->mask_rc);
    free(s->slots);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_out);
    free(s);
}

int sched_n_waiting(const struct sched *s) { return s->n_wait; }
int sched_n_running(const struct sched *s) { return s->n_run; }
int sched_n_ctx(const struct sched *s) { return s->n_ctx; }
struct model_ctx *sched_model_ctx(struct sched *s) { return s->ctx; }

void sched_get_stats(const struct sched *s, struct sched_stats *out)
{
    *out = s->st;
    out->kv_util_avg = s->st.n_steps ? s->util_sum / (double)s->st.n_steps : 0;
    out->blocks_evicted = (int64_t)s->kv->n_evicted;
}

/* ---- requests in and out ---------------------------------------------------- */

static int wait_push_back(struct sched *s, struct sseq *q)
{
    if (s->n_wait == s->cap_wait) {
        int nc = s->cap_wait ? s->cap_wait * 2 : 256;
        struct sseq **w = realloc(s->wait, (size_t)nc * sizeof *w);
        if (!w)
            return ERR_NOMEM;
        s->wait = w;
        s->cap_wait = nc;
    }
    s->wait[s->n_wait++] = q;
    return 0;
}

int sched_add(struct sched *s, const char *id, struct gen_params *gp, struct gen_prompt *pr,
              size_t n_pr, void *user, void (*user_free)(void *))
{
    int rc;
    struct sreq *r = calloc(1, sizeof *r);
    if (!r) {
        gen_params_release(gp);
        gen_prompts_free(pr, n_pr);
        if (user_free)
            user_free(user);
        return ERR_NOMEM;
    }
    r->t_add = clock_mono_ns();
    r->user = user;
    r->user_free = user_free;
    r->pr = pr;
    r->n_pr = n_pr;
    if (gp) {
        r->gp = *gp;
        memset(gp, 0, sizeof *gp);
    }
    if (!s || !id || !gp || !pr || n_pr == 0 || r->gp.n < 1) {
        rc = ERR_INVAL;
        goto fail;
    }
    if (!r->gp.seed_given)
        r->gp.seed = hash_fnv(id, strlen(id));
    r->id = dup_str(id);
    if (!r->id) {
        rc = ERR_NOMEM;
        goto fail;
    }
    r->n_seq = (int)r->n_pr * r->gp.n;
    r->seqs = calloc((size_t)r->n_seq, sizeof *r->seqs);
    if (!r->seqs) {
        rc = ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < r->n_seq; i++) {
        struct sseq *q = &r->seqs[i];
        const struct gen_prompt *p = &r->pr[i / r->gp.n];
        q->r = r;
        q->prompt = p->ids;
        q->n_prompt = (int)p->n;
        q->serial = s->serial++;
        rc = gen_seq_init(&q->g, &r->gp, s->t, p->ids, p->n, (size_t)s->n_ctx, (uint64_t)i);
        if (rc) {
            for (int j = 0; j < i; j++)
                gen_seq_release(&r->seqs[j].g);
            free(r->seqs);
            r->seqs = NULL;
            r->n_seq = 0;
            goto fail;
        }
    }
    for (int i = 0; i < r->n_seq; i++) {
        if ((rc = wait_push_back(s, &r->seqs[i])) != 0) {
            s->n_wait -= i; /* take back what was queued */
            goto fail;
        }
    }
    s->n_new += r->n_seq;
    r->next = s->live;
    if (s->live)
        s->live->prev = r;
    s->live = r;
    return 0;
fail:
    req_free(r);
    return rc;
}

/* Complete request r: describe its choices to the callback, free it. */
static int finish_request(struct sched *s, struct sreq *r)
{
    int rc;
    struct gen_choice *ch = calloc((size_t)r->n_seq, sizeof *ch);
    if (!ch)
        return ERR_NOMEM;
    struct sched_result res;
    memset(&res, 0, sizeof res);
    res.id = r->id;
    res.user = r->user;
    res.gp = &r->gp;
    res.choices = ch;
    res.n_choices = (size_t)r->n_seq;
    for (size_t i = 0; i < r->n_pr; i++)
        res.prompt_tokens += (int64_t)r->pr[i].n;
    for (int i = 0; i < r->n_seq; i++) {
        res.completion_tokens += (int64_t)r->seqs[i].g.n_gen;
        if ((rc = gen_seq_choice(&r->seqs[i].g, &ch[i])) != 0)
            goto out;
    }
    res.cached_tokens = r->cached;
    uint64_t now = clock_mono_ns();
    uint64_t ta = r->t_admit ? r->t_admit : now, tf = r->t_first ? r->t_first : now;
    res.queue_s = (double)(ta - r->t_add) * 1e-9;
    res.prefill_s = (double)(tf - ta) * 1e-9;
    res.decode_s = (double)(now - tf) * 1e-9;
    res.cpu_s = r->cpu_s;
    if ((rc = s->o.on_result(s->o.cb_ctx, &res)) != 0)
        goto out;
    s->st.n_requests++;
    live_unlink(s, r);
    req_free(r);
out:
    free(ch);
    return rc;
}

/* The live request id: 0 and *out, ERR_INVAL (NULL arguments), ERR_NOTFOUND. */
static int live_find(const struct sched *s, const char *id, struct sreq **out)
{
    if (!s || !id)
        return ERR_INVAL;
    struct sreq *r = s->live;
    while (r && strcmp(r->id, id) != 0)
        r = r->next;
    *out = r;
    return r ? 0 : ERR_NOTFOUND;
}

/* Take request r out of the run list and the queue and free it. */
static void req_drop(struct sched *s, struct sreq *r)
{
    /* running sequences: leave the run list (keeping admission order), free blocks */
    int k = 0;
    for (int i = 0; i < s->n_run; i++) {
        struct sseq *q = s->run[i];
        if (q->r != r) {
            s->run[k++] = q;
            continue;
        }
        kv_seq_clear(s->kv, q->slot);
        s->slots[s->n_slots++] = q->slot;
        q->slot = -1;
    }
    s->n_run = k;
    /* waiting ones: leave the queue; the unsorted tail (n_new) shrinks with them */
    k = 0;
    int tail = s->n_wait - s->n_new;
    for (int i = 0; i < s->n_wait; i++) {
        if (s->wait[i]->r != r) {
            s->wait[k++] = s->wait[i];
            continue;
        }
        if (i >= tail)
            s->n_new--;
    }
    s->n_wait = k;
    live_unlink(s, r);
    req_free(r);
}

int sched_cancel(struct sched *s, const char *id)
{
    struct sreq *r;
    int rc = live_find(s, id, &r);
    if (rc)
        return rc;
    req_drop(s, r);
    s->st.n_cancelled++;
    return 0;
}

int sched_withdraw(struct sched *s, const char *id)
{
    struct sreq *r;
    int rc = live_find(s, id, &r);
    if (rc)
        return rc;
    if (r->t_admit)
        return ERR_BUSY;
    req_drop(s, r);
    return 0;
}

/* ---- ordering ------------------------------------------------------------------ */

static int cmp_seq(const void *a, const void *b)
{
    const struct sseq *x = *(struct sseq *const *)a, *y = *(struct sseq *const *)b;
    int n = x->n_prompt < y->n_prompt ? x->n_prompt : y->n_prompt;
    for (int i = 0; i < n; i++)
        if (x->prompt[i] != y->prompt[i])
            return x->prompt[i] < y->prompt[i] ? -1 : 1;
    if (x->n_prompt != y->n_prompt)
        return x->n_prompt < y->n_prompt ? -1 : 1;
    return x->serial < y->serial ? -1 : x->serial > y->serial;
}

/* ---- one step ------------------------------------------------------------------ */

static int seq_known(const struct sseq *q)
{
    return q->n_prompt + (int)q->g.n_gen;
}

static int32_t seq_token(const struct sseq *q, int pos)
{
    return pos < q->n_prompt ? q->prompt[pos] : q->g.gen[pos - q->n_prompt];
}

/* Positions slot can cover with its blocks plus every free one. */
static int64_t slot_capacity(const struct sched *s, int slot)
{
    return ((int64_t)s->kv->seqs[slot].n_blocks + s->kv->n_free) * s->kv->block_tokens;
}

/* Preempt the most recently admitted running sequence: free its blocks and
 * put it at the front of the queue. */
static int preempt_newest(struct sched *s)
{
    struct sseq *v = s->run[--s->n_run];
    kv_seq_clear(s->kv, v->slot);
    s->slots[s->n_slots++] = v->slot;
    v->slot = -1;
    v->state = SEQ_WAIT;
    v->n_computed = 0;
    s->st.n_preemptions++;
    int rc = wait_push_back(s, v); /* grows the array; then move it to the front */
    if (rc)
        return rc;
    memmove(s->wait + 1, s->wait, (size_t)(s->n_wait - 1) * sizeof *s->wait);
    s->wait[0] = v;
    return 0;
}

/* Append q's next `take` tokens to the batch: known ones, then its drafts;
 * logits for the last known one and every draft. */
static void batch_add(struct sched *s, struct sseq *q, int take, int *nb)
{
    int known = seq_known(q);
    for (int i = 0; i < take; i++) {
        int p = q->n_computed + i;
        s->b_tok[*nb] = p < known ? seq_token(q, p) : q->draft[p - known];
        s->b_pos[*nb] = p;
        s->b_seq[*nb] = q->slot;
        s->b_out[*nb] = p >= known - 1;
        (*nb)++;
    }
    q->take = take;
    s->step[s->n_step++] = q;
}

/* ---- speculation ---------------------------------------------------------------- */

/* Prior acceptance rate per match length 1, 2, 3: on SmolLM2-135M-Instruct
 * (tests/bench/bench_spec.py, both workloads, greedy and sampled) 1-token
 * matches were confirmed 10-35% of the time, 2-token ones 20-55%, 3-token
 * ones 60-70%. */
static const double spec_prior[SPEC_NGRAM_MAX] = {0.2, 0.4, 0.6};

/* Prompt lookup: find the newest earlier occurrence of q's last n known
 * tokens (n = SPEC_NGRAM_MAX down to 1) and copy up to k_max tokens that
 * followed it into out; a copy that runs into the end of the known tokens
 * goes on from its own start (a repeating run continues: "a b c a b" after
 * "a b" drafts "c a b c ..."). Returns the tokens drafted (0: no match) and
 * the match length in *ngram. O(known * SPEC_NGRAM_MAX); allocates nothing. */
static int spec_lookup(const struct sseq *q, int32_t *out, int k_max, int *ngram)
{
    int L = seq_known(q);
    for (int n = SPEC_NGRAM_MAX; n >= 1; n--) {
        if (L < n + 1)
            continue;
        for (int j = L - n - 1; j >= 0; j--) {
            int m = 0;
            while (m < n && seq_token(q, j + m) == seq_token(q, L - n + m))
                m++;
            if (m < n)
                continue;
            for (int i = 0; i < k_max; i++) {
                int src = j + n + i;
                out[i] = src < L ? seq_token(q, src) : out[src - L];
            }
            *ngram = n;
            return k_max;
        }
    }
    return 0;
}

/* The draft length that maximises expected tokens per unit of step cost,
 * (1 + a + a^2 + ... + a^k) / (1 + SPEC_ROW_COST * k), for a per-token
 * acceptance rate a, among 0..k_cap. */
static int spec_k_for(double a, int k_cap)
{
    int best = 0;
    double best_t = 1.0, e = 1.0, pw = 1.0;
    for (int k = 1; k <= k_cap; k++) {
        pw *= a;
        e += pw;
        double t = e / (1.0 + SPEC_ROW_COST * (double)k);
        if (t > best_t) {
            best_t = t;
            best = k;
        }
    }
    return best;
}

/* Positions beyond q's known tokens that the KV pool can take for drafts
 * without touching the blocks other running sequences still need for their
 * known tokens, and from blank blocks only: a draft never evicts a cached
 * prefix block. */
static int64_t spec_kv_room(const struct sched *s, const struct sseq *q)
{
    int64_t spare = s->kv->n_free;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i] != q)
            spare -= kv_seq_blocks_needed(s->kv, s->run[i]->slot, seq_known(s->run[i]));
    if (spare > s->kv->n_blank)
        spare = s->kv->n_blank;
    int64_t cap = ((int64_t)s->kv->seqs[q->slot].n_blocks + (spare > 0 ? spare : 0)) *
                  s->kv->block_tokens;
    return cap - seq_known(q);
}

/* Drafts for q, which decodes one token this step (its last known token at
 * position n_computed): at most room tokens (what the step budget leaves).
 * Sets q->draft, q->n_draft and q->draft_ngram; returns n_draft. */
static int spec_plan(struct sched *s, struct sseq *q, int room)
{
    q->n_draft = 0;
    int known = seq_known(q);
    int64_t cap = room;
    int64_t left_gen = (int64_t)q->g.max_gen - (int64_t)q->g.n_gen - 1; /* the last one is free */
    int64_t left_ctx = (int64_t)s->n_ctx - known;   /* fed positions stay below n_ctx */
    int64_t left_kv = spec_kv_room(s, q);
    if (left_gen < cap)
        cap = left_gen;
    if (left_ctx < cap)
        cap = left_ctx;
    if (left_kv < cap)
        cap = left_kv;
    if (cap > SCHED_SPEC_K_MAX)
        cap = SCHED_SPEC_K_MAX;
    if (s->o.spec_k > 0 && s->o.spec_k < cap)
        cap = s->o.spec_k;
    if (cap <= 0)
        return 0;
    int n = 0;
    if (spec_lookup(q, q->draft, (int)cap, &n) == 0)
        return 0;
    /* a prior worth SPEC_PRIOR_WEIGHT drafts is mixed in: one or two misses
     * do not turn drafting off, nor one or two hits up to k = 8 */
    double a = (q->acc_hit[n - 1] + spec_prior[n - 1] * SPEC_PRIOR_WEIGHT) /
               (q->acc_tried[n - 1] + SPEC_PRIOR_WEIGHT);
    int k = s->o.spec_k > 0 ? (int)cap : spec_k_for(a, (int)cap);
    if (k == 0) {
        if (++q->spec_wait[n - 1] < SPEC_PROBE_EVERY)
            return 0;
        k = 1; /* probe: has the text become predictable? */
    }
    q->spec_wait[n - 1] = 0;
    q->n_draft = k;
    q->draft_ngram = n;
    return k;
}

/* Record that `hit` of q's n_draft drafts were accepted. */
static void spec_learn(struct sseq *q, int hit)
{
    int i = q->draft_ngram - 1;
    q->acc_hit[i] = q->acc_hit[i] * SPEC_DECAY + hit;
    q->acc_tried[i] = q->acc_tried[i] * SPEC_DECAY + hit + (hit < q->n_draft);
}

/* 1 when candidate c shares full prompt blocks with a running sequence that
 * has not computed (published) them yet: wait for it instead of computing
 * them twice. */
static int should_defer(const struct sched *s, const struct sseq *c)
{
    int bt = s->kv->block_tokens;
    int lim = seq_known(c) - 1 < c->n_prompt ? seq_known(c) - 1 : c->n_prompt;
    if (lim < bt)
        return 0;
    for (int i = 0; i < s->n_run; i++) {
        const struct sseq *q = s->run[i];
        int published = s->kv->seqs[q->slot].n_hashed;
        if (q->n_computed >= q->n_prompt || published * bt >= lim)
            continue;
        int n = lim < q->n_prompt ? lim : q->n_prompt, L = 0;
        while (L < n && c->prompt[L] == q->prompt[L])
            L++;
        /* blocks of q that c could take: whole shared ones, and the one the
         * shared run ends in (copied in part), if q will publish it (a full
         * prompt block) */
        int want = (L + bt - 1) / bt, full = q->n_prompt / bt;
        if (want > full)
            want = full;
        if (want > published)
            return 1;
    }
    return 0;
}

static int step_masks(struct sched *s);

static int run_step(struct sched *s)
{
    struct kv_cache *kv = s->kv;
    int budget = s->o.max_batch_tokens, nb = 0, rc, preempted = 0;
    s->n_step = 0;
    int spec = s->spec && s->n_run <= s->o.spec_max_seqs;

    if (s->n_new > 0) {
        qsort(s->wait + (s->n_wait - s->n_new), (size_t)s->n_new, sizeof *s->wait, cmp_seq);
        s->n_new = 0;
    }

    /* 1. running sequences, oldest first: decode tokens and prefill chunks */
    for (int i = 0; i < s->n_run && budget > 0; i++) {
        struct sseq *q = s->run[i];
        int pending = seq_known(q) - q->n_computed;
        int take = pending < budget ? pending : budget;
        int self = 0;
        for (;;) {
            int64_t cap = slot_capacity(s, q->slot) - q->n_computed;
            if (cap >= take)
                break;
            if (pending > 1 && cap > 0) { /* a shorter prefill chunk */
                take = (int)cap;
                break;
            }
            self = s->run[s->n_run - 1] == q;
            if ((rc = preempt_newest(s)) != 0)
                return rc;
            preempted = 1;
            if (self)
                break;
        }
        if (self)
            break;
        q->n_draft = 0;
        if (spec && pending == 1 && take == 1)
            take += spec_plan(s, q, budget - 1);
        if (kv_seq_reserve(kv, q->slot, q->n_computed + take) != 0)
            return ERR_INTERNAL;
        batch_add(s, q, take, &nb);
        budget -= take;
    }

    /* 2. admit waiting sequences in order while slots, budget and blocks allow */
    int64_t promised = 0;
    for (int i = 0; i < s->n_run; i++)
        promised += kv_seq_blocks_needed(kv, s->run[i]->slot, seq_known(s->run[i]));
    int64_t watermark = kv->n_blocks / 100;
    for (int w = 0; !preempted && w < s->n_wait && budget > 0 && s->n_slots > 0;) {
        struct sseq *c = s->wait[w];
        if (!s->o.no_prefix_cache && should_defer(s, c)) {
            w++;
            continue;
        }
        int slot = s->slots[s->n_slots - 1];
        int known = seq_known(c), hits = 0;
        if (!s->o.no_prefix_cache) {
            int lim = known - 1 < c->n_prompt ? known - 1 : c->n_prompt;
            hits = kv_seq_share_prefix(kv, slot, c->prompt, lim);
            if (hits < 0)
                return ERR_INTERNAL;
            int part = kv_seq_share_partial(kv, slot, c->prompt, lim);
            if (part < 0)
                return ERR_INTERNAL;
            hits += part;
        }
        int64_t need = kv_seq_blocks_needed(kv, slot, known + 1 <= s->n_ctx ? known + 1 : known);
        if (s->n_run > 0 && need + promised + watermark > kv->n_free) {
            kv_seq_clear(kv, slot);
            break;
        }
        s->n_slots--;
        memmove(s->wait + w, s->wait + w + 1, (size_t)(s->n_wait - w - 1) * sizeof *s->wait);
        s->n_wait--;
        c->state = SEQ_RUN;
        c->slot = slot;
        c->n_computed = hits;
        c->n_draft = 0;
        s->run[s->n_run++] = c;
        s->st.prefix_reused += hits;
        s->st.prompt_tokens += c->n_prompt;
        c->r->cached += hits;
        if (!c->r->t_admit)
            c->r->t_admit = clock_mono_ns();
        int pending = known - hits;
        int take = pending < budget ? pending : budget;
        if (kv_seq_reserve(kv, slot, hits + take) != 0)
            return ERR_INTERNAL;
        batch_add(s, c, take, &nb);
        budget -= take;
        promised += kv_seq_blocks_needed(kv, slot, known);
    }
    if (nb == 0)
        return s->n_run || s->n_wait ? ERR_INTERNAL : 0;

    double util = (double)kv_cache_n_used(kv) / (double)kv->n_blocks;
    s->util_sum += util;
    if (util > s->st.kv_util_peak)
        s->st.kv_util_peak = util;

    /* 3. the forward pass */
    struct model_batch b = {nb, s->b_tok, s->b_pos, s->b_seq, s->b_out};
    const float *logits = NULL;
    int n_out = 0;
    uint64_t t0 = clock_mono_ns();
    double c0 = cpu_now_s();
    if ((rc = model_forward(s->ctx, &b, &logits, &n_out)) != 0)
        return rc == ERR_BUSY ? ERR_INTERNAL : rc;
    s->st.forward_s += (double)(clock_mono_ns() - t0) * 1e-9;
    double cpu_tok = (cpu_now_s() - c0) / (double)nb;
    s->st.n_steps++;

    /* 4. masks of the constrained sequences that sample now, on the pool */
    if ((rc = step_masks(s)) != 0)
        return rc;

    /* 5. account, publish, sample (verifying drafts), finish */
    int oi = 0;
    for (int i = 0; i < s->n_step; i++) {
        struct sseq *q = s->step[i];
        int known = seq_known(q);
        int from = q->n_computed, to = from + q->take - q->n_draft; /* known positions */
        for (int p = from; p < to; p++) {
            if (p < q->n_prompt)
                s->st.prefill_computed++;
            else if (p < q->hwm)
                s->st.recomputed++;
            else
                s->st.decode_tokens++;
        }
        q->n_computed = to;
        if (to > q->hwm)
            q->hwm = to;
        q->r->cpu_s += cpu_tok * q->take;
        if (!s->o.no_prefix_cache && kv_seq_publish(kv, q->slot, q->prompt, q->n_prompt) < 0)
            return ERR_INTERNAL;
        if (to != known)
            continue;
        /* row j holds the logits after the last known token (j = 0) or after
         * draft j - 1: sample in order while the drafts are confirmed */
        if (oi + q->n_draft >= n_out)
            return ERR_INTERNAL;
        int hit = 0;
        for (int j = 0; j <= q->n_draft; j++) {
            const float *row = logits + (size_t)(oi + j) * (size_t)s->n_vocab;
            rc = gen_seq_step(&q->g, row, (size_t)s->n_vocab, &s->scratch);
            if (rc < 0)
                return rc;
            s->st.output_tokens++;
            if (!q->r->t_first)
                q->r->t_first = clock_mono_ns();
            if (rc == 1) {
                q->state = SEQ_DONE;
                break;
            }
            if (j == q->n_draft || q->g.gen[q->g.n_gen - 1] != q->draft[j])
                break;
            hit++;
        }
        oi += q->n_draft + 1;
        if (q->n_draft > 0) {
            /* the confirmed drafts' K/V stays (they are generated tokens now,
             * fed once); the rest is cut off */
            s->st.spec_steps++;
            s->st.spec_drafted += q->n_draft;
            s->st.spec_accepted += hit;
            s->st.decode_tokens += hit;
            spec_learn(q, hit);
            q->n_computed += hit;
            if (q->n_computed > q->hwm)
                q->hwm = q->n_computed;
            if (q->state != SEQ_DONE && kv_seq_truncate(kv, q->slot, q->n_computed) != 0)
                return ERR_INTERNAL;
            q->n_draft = 0;
        }
    }
    /* finished sequences leave (keeping admission order) and free their blocks */
    int k = 0;
    for (int i = 0; i < s->n_run; i++) {
        struct sseq *q = s->run[i];
        if (q->state != SEQ_DONE) {
            s->run[k++] = q;
            continue;
        }
        kv_seq_clear(kv, q->slot);
        s->slots[s->n_slots++] = q->slot;
        q->slot = -1;
        if (++q->r->n_done == q->r->n_seq && (rc = finish_request(s, q->r)) != 0)
            return rc;
    }
    s->n_run = k;
    return 1;
}

static void mask_job(void *ctx, int ith, int nth)
{
    struct sched *s = ctx;
    for (int i = ith; i < s->n_maskq; i += nth)
        s->mask_rc[i] = gen_seq_mask(&s->maskq[i]->g);
}

/* Token masks for every constrained sequence of the step that samples a
 * token (its last known token is in this step): computed together, split
 * over the pool's threads, while nothing else runs. */
static int step_masks(struct sched *s)
{
    s->n_maskq = 0;
    for (int i = 0; i < s->n_step; i++) {
        struct sseq *q = s->step[i];
        if (q->n_computed + q->take - q->n_draft == seq_known(q) && gen_seq_constrained(&q->g))
            s->maskq[s->n_maskq++] = q;
    }
    if (s->n_maskq == 0)
        return 0;
    uint64_t t0 = clock_mono_ns();
    if (s->o.pool && s->n_maskq > 1)
        kn_pool_run(s->o.pool, mask_job, s);
    else
        mask_job(s, 0, 1);
    s->st.mask_s += (double)(clock_mono_ns() - t0) * 1e-9;
    s->st.n_masks += s->n_maskq;
    for (int i = 0; i < s->n_maskq; i++)
        if (s->mask_rc[i])
            return s->mask_rc[i];
    return 0;
}

int sched_step(struct sched *s)
{
    if (!s)
        return ERR_INVAL;
    if (s->n_wait == 0 && s->n_run == 0)
        return 0;
    uint64_t t0 = clock_mono_ns();
    double c0 = cpu_now_s();
    int rc = run_step(s);
    s->st.wall_s += (double)(clock_mono_ns() - t0) * 1e-9;
    s->st.cpu_s += cpu_now_s() - c0;
    return rc;
}

int sched_run(struct sched *s)
{
    int rc;
    while ((rc = sched_step(s)) > 0)
        ;
    return rc;
}
