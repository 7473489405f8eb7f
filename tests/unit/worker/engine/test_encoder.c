/*
 * Unit tests of the BERT encoder (worker/engine/encoder.c, the backend of
 * model_forward, through embed_run) and the WordPiece tokenizer
 * (text/tok.c "bert"):
 *
 * - a tiny random-weight BERT (tests/fixtures/model/bert_{mean,cls}.f32,
 *   written by tests/oracle/make_bert_fixtures.py through llama.cpp's
 *   converter) against HF transformers' BertModel: texts tokenized by our
 *   WordPiece tokenizer give HF's ids, and their mean / CLS pooled
 *   embeddings are within ENC_TOL relative L2 (exact matmul), raw and
 *   L2-normalised; the default matmul within ENC_FAST_TOL;
 * - padding-free packing: inputs packed several per step give the same
 *   bits as each input alone, on 1 or 2 pool threads;
 * - the fixtures can fail: the other pooling is far off;
 * - the tokenizer on a corpus of tricky text gives llama.cpp's ids
 *   everywhere, and HF's except the two documented differences (a word
 *   over 100 characters, special-token text in user input);
 * - model_forward on an encoder: whole inputs per step, the marked rows
 *   are embed_run's CLS / LAST vectors; n_batch_max raised to n_ctx;
 * - errors: an input longer than the context, a bert context without
 *   embeddings, an encoder batch that is not whole inputs.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "tests/unit/worker/engine/embed_th.h"
#include "worker/engine/embed.h"
#include "worker/engine/model.h"
#include "text/tok.h"

#define FIX "tests/fixtures/model/"
#define ENC_TOL 1e-5      /* rel L2 vs HF, exact matmul (the issue asks 1e-4) */
#define ENC_FAST_TOL 3e-2 /* the default 8-bit-activation matmul */
#define MAX_TXT 16
#define MAX_IDS 64

struct bfix {
    json_t *man;
    struct model *m;
    struct tok *tok;
    int n_in;
    int lens[MAX_TXT];
    int32_t ids[MAX_TXT][MAX_IDS];
    const int32_t *ptr[MAX_TXT];
    float *want; /* (n_in, n_embd) HF pooled, not normalised */
};

static json_t *manifest(void)
{
    size_t len;
    char *txt = th_read_file(FIX "manifest_bert.json", &len);
    json_error_t jerr;
    json_t *man = json_loadb(txt, len, 0, &jerr);
    free(txt);
    CHECK(man != NULL);
    return man;
}

/* Load the model and tokenizer of kind ("mean" / "cls"), tokenize the
 * manifest's texts with our tokenizer and check them against HF's ids. */
static void bfix_load(const char *kind, struct bfix *fx)
{
    memset(fx, 0, sizeof *fx);
    fx->man = manifest();
    char path[256], err[256];
    snprintf(path, sizeof path, FIX "bert_%s.f32.gguf", kind);
    if (model_load(path, &fx->m, err, sizeof err))
        th_fail(__FILE__, __LINE__, path, "model_load: %s", err);
    CHECK_EQ_INT(fx->m->hp.arch, MODEL_ARCH_BERT);
    if (model_tokenizer(fx->m, &fx->tok, err, sizeof err))
        th_fail(__FILE__, __LINE__, path, "model_tokenizer: %s", err);
    json_t *texts = json_object_get(fx->man, "texts"), *hf = json_object_get(fx->man, "ids");
    fx->n_in = (int)json_array_size(texts);
    CHECK(fx->n_in > 0 && fx->n_in <= MAX_TXT);
    for (int i = 0; i < fx->n_in; i++) {
        json_t *t = json_array_get(texts, (size_t)i), *want = json_array_get(hf, (size_t)i);
        size_t n = 0;
        CHECK_EQ_INT(tok_encode(fx->tok, json_string_value(t), json_string_length(t),
                                TOK_ADD_SPECIAL, fx->ids[i], MAX_IDS, &n),
                     0);
        CHECK_EQ_INT(n, json_array_size(want));
        for (size_t j = 0; j < n; j++)
            CHECK_EQ_INT(fx->ids[i][j], json_integer_value(json_array_get(want, j)));
        fx->lens[i] = (int)n;
        fx->ptr[i] = fx->ids[i];
    }
    snprintf(path, sizeof path, FIX "bert_%s.f32.embd", kind);
    size_t wl;
    fx->want = th_read_file(path, &wl);
    CHECK_EQ_INT(wl, (size_t)fx->n_in * (size_t)fx->m->hp.n_embd * sizeof(float));
}

static void bfix_free(struct bfix *fx)
{
    tok_free(fx->tok);
    model_free(fx->m);
    free(fx->want);
    json_decref(fx->man);
}

static void check_bert(const char *kind, enum model_pooling want_pool)
{
    struct bfix fx;
    bfix_load(kind, &fx);
    CHECK_EQ_INT(fx.m->hp.pooling, want_pool);
    CHECK_EQ_INT(embed_default_pooling(fx.m), want_pool);
    int d = fx.m->hp.n_embd;
    size_t bytes = (size_t)fx.n_in * (size_t)d * sizeof(float);
    float *got = malloc(bytes), *packed = malloc(bytes);
    CHECK(got && packed);

    /* each input alone */
    struct model_ctx *c = eth_ctx(fx.m, 1, 64, 1, NULL);
    for (int i = 0; i < fx.n_in; i++)
        CHECK_EQ_INT(embed_run(c, want_pool, 0, &fx.ptr[i], &fx.lens[i], 1,
                               got + (size_t)i * (size_t)d),
                     0);
    model_ctx_free(c);
    double e = eth_max_err(got, fx.want, fx.n_in, fx.m->hp.n_embd, 0);
    printf("# bert_%s: max rel L2 %.3g vs HF (tol %.0e)\n", kind, e, ENC_TOL);
    if (!(e <= ENC_TOL))
        th_fail(__FILE__, __LINE__, kind, "max rel L2 %.3g > %.0e", e, ENC_TOL);

    /* packed: n_batch_max 16, raised to n_ctx 64 for an encoder (model.h),
     * several inputs per step, 2 pool threads: the same bits */
    struct kn_pool *pool;
    CHECK_EQ_INT(kn_pool_new(2, &pool), 0);
    c = eth_ctx(fx.m, 1, 16, 1, pool);
    CHECK_EQ_INT(embed_run(c, want_pool, 0, fx.ptr, fx.lens, fx.n_in, packed), 0);
    CHECK(memcmp(packed, got, bytes) == 0);

    /* normalised: unit length, and the normalised reference */
    CHECK_EQ_INT(embed_run(c, want_pool, 1, fx.ptr, fx.lens, fx.n_in, packed), 0);
    for (int i = 0; i < fx.n_in; i++) {
        double ss = 0;
        for (int k = 0; k < d; k++)
            ss += (double)packed[(size_t)i * (size_t)d + (size_t)k] *
                  packed[(size_t)i * (size_t)d + (size_t)k];
        CHECK_NEAR(ss, 1.0, 1e-6);
    }
    e = eth_max_err(packed, fx.want, fx.n_in, fx.m->hp.n_embd, 1);
    if (!(e <= ENC_TOL))
        th_fail(__FILE__, __LINE__, kind, "normalised: max rel L2 %.3g > %.0e", e, ENC_TOL);

    /* the fixture can fail: another pooling is far off */
    enum model_pooling other = want_pool == MODEL_POOL_MEAN ? MODEL_POOL_CLS : MODEL_POOL_MEAN;
    CHECK_EQ_INT(embed_run(c, other, 0, fx.ptr, fx.lens, fx.n_in, packed), 0);
    CHECK(eth_max_err(packed, fx.want, fx.n_in, fx.m->hp.n_embd, 0) > 1e-2);
    model_ctx_free(c);

    /* the default matmul (8-bit activations), all packed in one step */
    c = eth_ctx(fx.m, 1, 64, 0, pool);
    CHECK_EQ_INT(embed_run(c, want_pool, 0, fx.ptr, fx.lens, fx.n_in, packed), 0);
    e = eth_max_err(packed, fx.want, fx.n_in, fx.m->hp.n_embd, 0);
    printf("# bert_%s: default matmul max rel L2 %.3g (tol %.0e)\n", kind, e, ENC_FAST_TOL);
    if (!(e <= ENC_FAST_TOL))
        th_fail(__FILE__, __LINE__, kind, "default matmul: max rel L2 %.3g", e);
    model_ctx_free(c);
    kn_pool_free(pool);
    free(got);
    free(packed);
    bfix_free(&fx);
}

TEST(encoder_bert_mean_match_hf)
{
    check_bert("mean", MODEL_POOL_MEAN);
}

TEST(encoder_bert_cls_match_hf)
{
    check_bert("cls", MODEL_POOL_CLS);
}

/* WordPiece ids of the tricky corpus: llama.cpp's everywhere; HF's except
 * where they are documented to differ (tok.h). */
TEST(tok_wpm_corpus_matches_llamacpp_and_hf)
{
    json_t *man = manifest();
    struct model *m;
    struct tok *t;
    char err[256];
    CHECK_EQ_INT(model_load(FIX "bert_mean.f32.gguf", &m, err, sizeof err), 0);
    CHECK_EQ_INT(model_tokenizer(m, &t, err, sizeof err), 0);
    CHECK_EQ_INT(tok_model_kind(t), TOK_MODEL_WPM);
    json_t *corpus = json_object_get(man, "tok_corpus");
    json_t *lc = json_object_get(man, "tok_ids_llamacpp"), *hf = json_object_get(man, "tok_ids_hf");
    CHECK(json_array_size(corpus) >= 20 && json_array_size(lc) == json_array_size(corpus));
    int n_hf_same = 0, n_hf_diff = 0;
    for (size_t i = 0; i < json_array_size(corpus); i++) {
        json_t *s = json_array_get(corpus, i);
        size_t len = json_string_length(s), cap = TOK_ENCODE_BOUND(len), n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        CHECK(ids != NULL);
        CHECK_EQ_INT(tok_encode(t, json_string_value(s), len, TOK_ADD_SPECIAL, ids, cap, &n), 0);
        json_t *want = json_array_get(lc, i);
        int same = n == json_array_size(want);
        for (size_t j = 0; same && j < n; j++)
            same = ids[j] == json_integer_value(json_array_get(want, j));
        if (!same)
            th_fail(__FILE__, __LINE__, json_string_value(s), "ids differ from llama.cpp's");
        json_t *h = json_array_get(hf, i);
        int hs = n == json_array_size(h);
        for (size_t j = 0; hs && j < n; j++)
            hs = ids[j] == json_integer_value(json_array_get(h, j));
        if (hs) {
            n_hf_same++;
        } else {
            /* the documented differences only */
            const char *txt = json_string_value(s);
            CHECK(strstr(txt, "[CLS]") != NULL || len > 100);
            n_hf_diff++;
        }
        free(ids);
    }
    CHECK_EQ_INT(n_hf_diff, 2);
    CHECK(n_hf_same >= 20);
    tok_free(t);
    model_free(m);
    json_decref(man);
}

/* model_forward on an encoder: two inputs in one step, the marked rows
 * (first of one, last of the other) are embed_run's CLS and LAST vectors
 * bit for bit; the context's n_batch_max 16 was raised to n_ctx 64. */
TEST(encoder_model_forward_returns_marked_hidden_rows)
{
    struct bfix fx;
    bfix_load("mean", &fx);
    int d = fx.m->hp.n_embd;
    struct model_ctx *c = eth_ctx(fx.m, 1, 16, 1, NULL);
    CHECK_EQ_INT(model_ctx_get_params(c)->n_batch_max, 64);
    CHECK_EQ_INT(model_ctx_get_params(c)->n_out_max, 64);
    int la = fx.lens[0], lb = fx.lens[1], n = la + lb;
    CHECK(n <= 64);
    int32_t tok[64], pos[64], seq[64];
    uint8_t mark[64] = {0};
    for (int i = 0; i < n; i++) {
        tok[i] = i < la ? fx.ids[0][i] : fx.ids[1][i - la];
        pos[i] = i < la ? i : i - la;
        seq[i] = 0;
    }
    mark[0] = mark[n - 1] = 1;
    struct model_batch b = {n, tok, pos, seq, mark};
    const float *rows;
    int n_out;
    CHECK_EQ_INT(model_forward(c, &b, &rows, &n_out), 0);
    CHECK_EQ_INT(n_out, 2);
    float *cls = malloc((size_t)d * sizeof(float)), *last = malloc((size_t)d * sizeof(float));
    float *got = malloc(2 * (size_t)d * sizeof(float));
    CHECK(cls && last && got);
    memcpy(got, rows, 2 * (size_t)d * sizeof(float));
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_CLS, 0, &fx.ptr[0], &fx.lens[0], 1, cls), 0);
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_LAST, 0, &fx.ptr[1], &fx.lens[1], 1, last), 0);
    CHECK(memcmp(got, cls, (size_t)d * sizeof(float)) == 0);
    CHECK(memcmp(got + d, last, (size_t)d * sizeof(float)) == 0);
    free(cls);
    free(last);
    free(got);
    model_ctx_free(c);
    bfix_free(&fx);
}

TEST(encoder_errors)
{
    struct model *m;
    char err[256];
    CHECK_EQ_INT(model_load(FIX "bert_mean.f32.gguf", &m, err, sizeof err), 0);
    int d = m->hp.n_embd;
    float *out = malloc(2 * (size_t)d * sizeof(float));
    CHECK(out != NULL);
    struct model_ctx *c = eth_ctx(m, 1, 16, 1, NULL);
    int32_t ids[65] = {0};
    const int32_t *ptr[2] = {ids, ids};
    int lens[2] = {3, 65};
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_MEAN, 1, ptr, lens, 2, out), ERR_TOOBIG); /* > n_ctx */
    lens[1] = 0;
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_MEAN, 1, ptr, lens, 2, out), ERR_INVAL); /* empty */
    lens[1] = 64; /* exactly the context: n_batch_max 16 was raised to it */
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_MEAN, 1, ptr, lens, 2, out), 0);
    ids[2] = m->hp.n_vocab;
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_MEAN, 1, ptr, lens, 2, out), ERR_INVAL); /* bad id */
    ids[2] = 0;
    CHECK_EQ_INT(embed_run(c, MODEL_POOL_RANK, 1, ptr, lens, 2, out), ERR_INVAL);
    /* an encoder batch is whole inputs: a run must start at position 0
     * and go on in its slot at the next position */
    int32_t pos[3] = {1, 2, 3}, seq[3] = {0, 0, 0};
    struct model_batch b = {3, ids, pos, seq, NULL};
    const float *rows;
    int n_out;
    CHECK_EQ_INT(model_forward(c, &b, &rows, &n_out), ERR_INVAL);
    pos[0] = 0;
    pos[1] = 1;
    pos[2] = 3;
    CHECK_EQ_INT(model_forward(c, &b, &rows, &n_out), ERR_INVAL);
    pos[2] = 2;
    seq[2] = 1; /* slot 1 of a context of one */
    CHECK_EQ_INT(model_forward(c, &b, &rows, &n_out), ERR_INVAL);
    pos[2] = 0; /* a second input */
    seq[2] = 0;
    CHECK_EQ_INT(model_forward(c, &b, &rows, &n_out), 0);
    CHECK_EQ_INT(n_out, 0);
    model_ctx_free(c);
    /* a bert context without embeddings (generation) is refused */
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 64;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_UNSUPPORTED);
    free(out);
    model_free(m);
}
