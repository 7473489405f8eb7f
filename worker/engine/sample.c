/*
 * sample.c - per-request token sampling (see sample.h for the order of the
 * steps and the logprob definition).
 *
 * The candidate set lives in scratch->idx[0..nc) and each candidate's
 * unnormalised probability in scratch->val[id]. Orders are total: (p desc,
 * id asc), so top_k / top_p are unique whatever the selection algorithm.
 * top_k is an in-place quickselect and top_p a weighted quickselect (the
 * prefix reaching the mass, found without sorting); the survivors are put
 * back in id order by a scan over a byte mask. No allocation, no recursion,
 * no library qsort (which may allocate).
 */
#include "worker/engine/sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- random stream -------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void smp_rng_init(struct smp_rng *r, uint64_t seed, uint64_t choice)
{
    /* Two SplitMix64 rounds give independent-looking 64-bit keys for seed and
     * choice; the state is the SplitMix64 sequence started from their mix. */
    uint64_t a = seed, b = choice ^ 0x6a09e667f3bcc908ull;
    uint64_t x = splitmix64(&a) ^ rotl(splitmix64(&b), 17);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1;
}

uint64_t smp_rng_next(struct smp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

double smp_rng_uniform(struct smp_rng *r) { return (double)(smp_rng_next(r) >> 11) * 0x1.0p-53; }

/* ---- parameters and scratch ----------------------------------------------- */

int smp_scratch_init(struct smp_scratch *s, size_t n_vocab)
{
    memset(s, 0, sizeof *s);
    if (n_vocab == 0 || n_vocab > (1u << 24))
        return ERR_INVAL;
    s->val = malloc(n_vocab * sizeof *s->val);
    s->idx = malloc(n_vocab * sizeof *s->idx);
    s->count = calloc(n_vocab, sizeof *s->count);
    s->mark = calloc(n_vocab, sizeof *s->mark);
    if (!s->val || !s->idx || !s->count || !s->mark) {
        smp_scratch_release(s);
        return ERR_NOMEM;
    }
    s->n_vocab = n_vocab;
    return 0;
}

void smp_scratch_release(struct smp_scratch *s)
{
    if (!s)
        return;
    free(s->val);
    free(s->idx);
    free(s->count);
    free(s->mark);
    memset(s, 0, sizeof *s);
}

/* ---- ordering helpers ----------------------------------------------------- */

static double sane(float x)
{
    if (isnan(x))
        return -INFINITY;
    if (isinf(x))
        return x > 0 ? (double)FLT_MAX : -INFINITY;
    return (double)x;
}

/* a comes before b in the order (v desc, id asc). */
static int before(const double *v, int32_t a, int32_t b)
{
    double va = v[a], vb = v[b];
    if (va != vb)
        return va > vb;
    return a < b;
}

static void swap32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange x[0..n) so that its first k elements (0 < k < n) are the k that
 * come first in the order (v desc, id asc). Iterative quickselect with a
 * median-of-three pivot; the order is total so ties cannot degrade it. */
static void select_top(int32_t *x, size_t n, size_t k, const double *v)
{
    size_t lo = 0, hi = n - 1;  /* the k-th element (index k-1) lies in [lo, hi] */
    size_t target = k - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (before(v, x[mid], x[lo]))
            swap32(&x[mid], &x[lo]);
        if (before(v, x[hi], x[lo]))
            swap32(&x[hi], &x[lo]);
        if (before(v, x[hi], x[mid]))
            swap32(&x[hi], &x[mid]);
        int32_t pivot = x[mid];
        swap32(&x[mid], &x[hi]);
        size_t store = lo;
        for (size_t i = lo; i < hi; i++)
            if (before(v, x[i], pivot))
                swap32(&x[i], &x[store++]);
        swap32(&x[store], &x[hi]);
        if (store == target)
            return;
        if (store < target)
            lo = store + 1;
        else
            hi = store - 1;
    }
}

/* Smallest prefix, in the order (v desc, id asc), of x[0..n) whose mass
 * (sum of v) reaches want: rearranges x so that prefix comes first and
 * returns its length (>= 1; n if rounding keeps the total just under want).
 * Weighted quickselect, O(n) expected, no sort: each round partitions the
 * open range around a median-of-three pivot into "before pivot" and "after",
 * and continues on the side where the boundary lies. */
static size_t select_mass(int32_t *x, size_t n, double want, const double *v)
{
    size_t lo = 0, hi = n;   /* the boundary element lies in x[lo..hi) */
    double acc = 0;          /* mass of x[0..lo), all before x[lo..hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (before(v, x[mid], x[lo]))
            swap32(&x[mid], &x[lo]);
        if (before(v, x[last], x[lo]))
            swap32(&x[last], &x[lo]);
        if (before(v, x[last], x[mid]))
            swap32(&x[last], &x[mid]);
        int32_t pivot = x[mid];
        swap32(&x[mid], &x[last]);
        size_t store = lo;
        double mb = 0;
        for (size_t i = lo; i < last; i++)
            if (before(v, x[i], pivot)) {
                mb += v[x[i]];
                swap32(&x[i], &x[store++]);
            }
        swap32(&x[store], &x[last]);   /* pivot at store */
        if (store > lo && acc + mb >= want) {
            hi = store;                 /* boundary among the elements before the pivot */
        } else if (acc + mb + v[pivot] >= want) {
            return store + 1;           /* the pivot is the last one kept */
        } else {
            acc += mb + v[pivot];
            lo = store + 1;
        }
    }
    if (lo >= n)
        return n;
    return lo + 1;
}

/* ---- the pipeline --------------------------------------------------------- */

static int check_ids(const int32_t *ids, size_t n, size_t n_vocab)
{
    if (n && !ids)
        return ERR_INVAL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= n_vocab)
            return ERR_INVAL;
    return 0;
}

/* Steps 0-2: sanitise, bias, penalties into s->val. */
static int process(const struct smp_params *p, const float *logits, const uint32_t *allow,
                   size_t n_vocab, const int32_t *gen, size_t n_gen, const int32_t *prompt, size_t n_prompt,
                   struct smp_scratch *s)
{
    if (!p || !logits || !s || n_vocab != s->n_vocab)
        return ERR_INVAL;
    if (p->n_bias && !p->bias)
        return ERR_INVAL;
    for (size_t i = 0; i < p->n_bias; i++)
        if (p->bias[i].id < 0 || (size_t)p->bias[i].id >= n_vocab)
            return ERR_INVAL;
    if (check_ids(gen, n_gen, n_vocab) || check_ids(prompt, n_prompt, n_vocab))
        return ERR_INVAL;

    double *v = s->val;
    for (size_t i = 0; i < n_vocab; i++)
        v[i] = sane(logits[i]);
    if (allow)   /* the constraint's mask: excluded tokens are never sampled */
        for (size_t i = 0; i < n_vocab; i++)
            if (!((allow[i >> 5] >> (i & 31)) & 1u))
                v[i] = -INFINITY;
    for (size_t i = 0; i < p->n_bias; i++)
        if (isfinite(p->bias[i].bias))
            v[p->bias[i].id] += (double)p->bias[i].bias;  /* -inf stays -inf */

    double r = p->repetition_penalty;
    if (r > 0 && r != 1.0) {
        size_t nm = 0;
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *h = pass ? gen : prompt;
            size_t nh = pass ? n_gen : n_prompt;
            for (size_t i = 0; i < nh; i++)
                if (!s->mark[h[i]]) {
                    s->mark[h[i]] = 1;
                    s->idx[nm++] = h[i];
                }
        }
        for (size_t i = 0; i < nm; i++) {
            int32_t id = s->idx[i];
            if (v[id] > 0)
                v[id] /= r;
            else
                v[id] *= r;
            s->mark[id] = 0;
        }
    }

    if (p->frequency_penalty != 0 || p->presence_penalty != 0) {
        size_t nd = 0;
        for (size_t i = 0; i < n_gen; i++)
            if (s->count[gen[i]]++ == 0)
                s->idx[nd++] = gen[i];
        for (size_t i = 0; i < nd; i++) {
            int32_t id = s->idx[i];
            v[id] -= (double)s->count[id] * p->frequency_penalty + p->presence_penalty;
            s->count[id] = 0;
        }
    }
    return 0;
}

/* Steps 3-7 on s->val: survivors in s->idx[0..*nc), their unnormalised
 * probabilities in s->val[id]. */
static int filter(const struct smp_params *p, struct smp_scratch *s, size_t *nc_out)
{
    double *v = s->val;
    int32_t *idx = s->idx;
    size_t n = s->n_vocab, nc = 0;

    if (!(p->temperature >= SMP_GREEDY_EPS)) {
        int32_t best = -1;
        for (size_t i = 0; i < n; i++)
            if (v[i] > -INFINITY && (best < 0 || v[i] > v[best]))
                best = (int32_t)i;
        if (best < 0)
            return ERR_CORRUPT;
        v[best] = 1.0;
        idx[0] = best;
        *nc_out = 1;
        return 0;
    }

    double m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (v[i] > -INFINITY) {
            v[i] /= p->temperature;
            if (v[i] > m)
                m = v[i];
        }
    if (!(m > -INFINITY))
        return ERR_CORRUPT;
    for (size_t i = 0; i < n; i++) {
        double e = v[i] > -INFINITY ? exp(v[i] - m) : 0.0;
        v[i] = e;
        if (e > 0)
            idx[nc++] = (int32_t)i;
    }
    /* the max token has e == 1, so nc >= 1 */

    int reordered = 0;  /* idx is in ascending id order until a filter permutes it */
    if (p->top_k > 0 && (uint64_t)p->top_k < nc) {
        select_top(idx, nc, (size_t)p->top_k, v);
        nc = (size_t)p->top_k;
        reordered = 1;
    }

    if (p->top_p < 1.0) {
        double z = 0;
        for (size_t i = 0; i < nc; i++)
            z += v[idx[i]];
        nc = select_mass(idx, nc, p->top_p * z, v);
        reordered = 1;
    }

    if (p->min_p > 0) {
        double pmax = 0;
        for (size_t i = 0; i < nc; i++)
            if (v[idx[i]] > pmax)
                pmax = v[idx[i]];
        double thr = p->min_p * pmax;
        size_t nk = 0;
        for (size_t i = 0; i < nc; i++)
            if (v[idx[i]] >= thr)
                idx[nk++] = idx[i];
        nc = nk;
    }
    if (reordered && nc > 1) {
        /* back to ascending ids: O(n_vocab) byte scan instead of a sort */
        for (size_t i = 0; i < nc; i++)
            s->mark[idx[i]] = 1;
        size_t k = 0;
        for (size_t i = 0; i < n && k < nc; i++)
            if (s->mark[i]) {
                s->mark[i] = 0;
                idx[k++] = (int32_t)i;
            }
    }
    *nc_out = nc;
    return 0;
}

int smp_filter(const struct smp_params *p, const float *logits, size_t n_vocab,
               const int32_t *gen, size_t n_gen, const int32_t *prompt, size_t n_prompt,
               struct smp_scratch *scratch, int32_t *ids, double *prob, size_t *n_out)
{
    size_t nc = 0;
    int rc = process(p, logits, NULL, n_vocab, gen, n_gen, prompt, n_prompt, scratch);
    if (rc == 0)
        rc = filter(p, scratch, &nc);
    if (rc)
        return rc;
    double z = 0;
    for (size_t i = 0; i < nc; i++)
        z += scratch->val[scratch->idx[i]];
    for (size_t i = 0; i < nc; i++) {
        ids[i] = scratch->idx[i];
        prob[i] = scratch->val[scratch->idx[i]] / z;
    }
    *n_out = nc;
    return 0;
}

int smp_logprobs(const float *logits, size_t n_vocab, int32_t token, int n_top,
                 struct smp_result *out)
{
    if (!logits || !out || n_vocab == 0 || token < 0 || (size_t)token >= n_vocab || n_top < 0 ||
        n_top > SMP_MAX_TOP_LOGPROBS)
        return ERR_INVAL;
    double m = -INFINITY;
    for (size_t i = 0; i < n_vocab; i++) {
        double x = sane(logits[i]);
        if (x > m)
            m = x;
    }
    if (!(m > -INFINITY))
        return ERR_CORRUPT;
    double sum = 0;
    for (size_t i = 0; i < n_vocab; i++) {
        double x = sane(logits[i]);
        if (x > -INFINITY)
            sum += exp(x - m);
    }
    if (!(sum >= 1.0))  /* the max term is exp(0) = 1 */
        return ERR_CORRUPT;
    double lsum = log(sum);  /* sum >= 1; logprob = (x - m) - lsum, which keeps
                              * precision when m is huge (FLT_MAX from +inf) */

    /* top n_top by (logprob desc, id asc), ordering on x - m as computed in
     * double (so tokens whose logprobs round equal tie by id): insertion into
     * a small sorted list */
    int k = 0;
    int32_t *tid = out->top_id;
    double *tv = out->top_logprob;
    for (size_t i = 0; i < n_vocab && n_top > 0; i++) {
        double x = sane(logits[i]) - m;
        if (!(x > -INFINITY))
            continue;
        if (k == n_top && !(x > tv[k - 1]))
            continue;  /* not better than the last (ids ascend, so ties lose) */
        int j = k < n_top ? k++ : k - 1;
        while (j > 0 && x > tv[j - 1]) {
            tv[j] = tv[j - 1];
            tid[j] = tid[j - 1];
            j--;
        }
        tv[j] = x;
        tid[j] = (int32_t)i;
    }
    for (int j = 0; j < k; j++) {
        double lp = tv[j] - lsum;
        tv[j] = lp > SMP_LOGPROB_FLOOR ? lp : SMP_LOGPROB_FLOOR;
    }
    out->n_top = k;
    double lp = (sane(logits[token]) - m) - lsum;
    out->logprob = lp > SMP_LOGPROB_FLOOR ? lp : SMP_LOGPROB_FLOOR;
    return 0;
}

int smp_sample(const struct smp_params *p, const float *logits, size_t n_vocab,
               const int32_t *gen, size_t n_gen, const int32_t *prompt, size_t n_prompt,
               struct smp_rng *rng, struct smp_scratch *scratch, struct smp_result *out)
{
    return smp_sample_masked(p, logits, NULL, n_vocab, gen, n_gen, prompt, n_prompt, rng, scratch,
                             out);
}

int smp_sample_masked(const struct smp_params *p, const float *logits, const uint32_t *allow,
                      size_t n_vocab, const int32_t *gen, size_t n_gen, const int32_t *prompt,
                      size_t n_prompt, struct smp_rng *rng, struct smp_scratch *scratch,
                      struct smp_result *out)
{
    size_t nc = 0;
    if (!rng || !out)
        return ERR_INVAL;
    int rc = process(p, logits, allow, n_vocab, gen, n_gen, prompt, n_prompt, scratch);
    if (rc == 0)
        rc = filter(p, scratch, &nc);
    if (rc)
        return rc;
    const double *v = scratch->val;
    const int32_t *idx = scratch->idx;
    int32_t tok = idx[0];
    if (p->temperature >= SMP_GREEDY_EPS && nc > 1) {
        double z = 0;
        for (size_t i = 0; i < nc; i++)
            z += v[idx[i]];
        double target = smp_rng_uniform(rng) * z, cum = 0;
        tok = -1;
        for (size_t i = 0; i < nc; i++) {
            cum += v[idx[i]];
            if (cum > target) {
                tok = idx[i];
                break;
            }
        }
        if (tok < 0)  /* rounding: u * z at the very top, take the last one */
            tok = idx[nc - 1];
    } else if (p->temperature >= SMP_GREEDY_EPS) {
        (void)smp_rng_uniform(rng);  /* one draw per non-greedy step, always */
    }
    struct smp_result r;
    memset(&r, 0, sizeof r);
    r.token = tok;
    if (p->n_top_logprobs >= 0) {
        rc = smp_logprobs(logits, n_vocab, tok, p->n_top_logprobs, &r);
        if (rc)
            return rc;
    }
    *out = r;
    return 0;
}
