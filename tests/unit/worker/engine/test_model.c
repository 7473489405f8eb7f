/*
 * Unit tests of the model (worker/engine/model.c, worker/engine/forward*.c, worker/engine/kv.c;
 * the ops themselves are tested in tests/unit/kernels/):
 *
 * - logits of tiny random Llama / Qwen2 models (tests/fixtures/model,
 *   written by tests/oracle/make_model_fixtures.py) against HF
 *   transformers: F32 files within MODEL_TOL_F32 relative L2 per position of
 *   the original HF model; quantized files within MODEL_TOL_QUANT of HF
 *   transformers running the same GGUF weights (dequantized by gguf-py);
 * - the fixtures are sensitive: dropping llama3 rope factors or using the
 *   wrong RoPE layout breaks the match;
 * - batching: a sequence's logits are bit-identical alone, in a batch with
 *   other sequences at other positions, and prefilled in chunks;
 * - the batch/KV contract (positions in order, slots, ids, KV exhaustion)
 *   and load-time validation (architecture, shapes, missing tensors).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "kernels/kn.h"
#include "tests/th.h"
#include "text/chat.h"
#include "worker/engine/model.h"
#include "text/tok.h"

#define FIX "tests/fixtures/model/"
#define MODEL_TOL_F32 1e-5   /* rel L2 per position vs the original HF model (seen: <= 5.3e-7) */
#define MODEL_TOL_QUANT 1e-5 /* rel L2 per position vs HF on the GGUF's dequantized weights (seen: <= 6.3e-7) */
/* The default (fast) path quantizes activations to 8 bits per block of 32
 * (kernels/cpu/matq.c): each matmul input moves by up to max|x|/254 per
 * block. Through 2 layers and the LM head that is a few percent of the
 * logits on these tiny random models (seen: 1.3-1.8% max rel L2). */
#define MODEL_TOL_FAST 3e-2
/* The default path's KV cache is binary16 (kv.h): each K/V value rounded to
 * 11 significant bits (relative 2^-12), so F32/F16-weight models on that
 * path move by a few 1e-4 (seen: <= 3e-4); the exact path keeps float32 K/V. */
#define MODEL_TOL_F16KV 1e-3

static struct model *load(const char *file)
{
    char path[256], err[256];
    snprintf(path, sizeof path, FIX "%s", file);
    struct model *m;
    int rc = model_load(path, &m, err, sizeof err);
    if (rc)
        th_fail(__FILE__, __LINE__, path, "model_load: %s", err);
    return m;
}

/* The three prompts of a fixture entry, and the context size to run them
 * in (manifest "n_ctx", default 64: phi3 picks its LongRoPE factors by it). */
struct prompts {
    int n;
    int len[4];
    int32_t ids[4][64];
    int total;
    int n_ctx;
};

static void get_prompts(json_t *entry, struct prompts *p)
{
    json_t *ps = json_object_get(entry, "prompts");
    p->n = (int)json_array_size(ps);
    p->total = 0;
    json_t *nc = json_object_get(entry, "n_ctx");
    p->n_ctx = nc ? (int)json_integer_value(nc) : 64;
    CHECK(p->n >= 1 && p->n <= 4);
    for (int i = 0; i < p->n; i++) {
        json_t *a = json_array_get(ps, (size_t)i);
        p->len[i] = (int)json_array_size(a);
        CHECK(p->len[i] >= 1 && p->len[i] <= 64);
        for (int j = 0; j < p->len[i]; j++)
            p->ids[i][j] = (int32_t)json_integer_value(json_array_get(a, (size_t)j));
        p->total += p->len[i];
    }
}

/* Run all prompts in one batch (slot i = prompt i), logits for every
 * position, in prompt-major order into out (total, n_vocab). */
static void run_all(const struct model *m, const struct prompts *p, float *out, int exact)
{
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.exact_matmul = exact;
    cp.n_ctx = p->n_ctx;
    cp.n_seq_max = p->n;
    cp.n_batch_max = p->total;
    cp.n_out_max = p->total;
    struct model_ctx *c;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), 0);
    int32_t tok[256], pos[256], seq[256];
    uint8_t mark[256];
    int k = 0;
    for (int i = 0; i < p->n; i++)
        for (int j = 0; j < p->len[i]; j++, k++) {
            tok[k] = p->ids[i][j];
            pos[k] = j;
            seq[k] = i;
            mark[k] = 1;
        }
    struct model_batch b = {k, tok, pos, seq, mark};
    const float *lg;
    int n_out;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
    CHECK_EQ_INT(n_out, p->total);
    memcpy(out, lg, (size_t)n_out * (size_t)m->hp.n_vocab * sizeof(float));
    model_ctx_free(c);
}

/* Max over positions of the relative L2 error of file's logits. file is a
 * manifest "gguf" entry: a file name, optionally followed by "#variant" (a
 * second reference for the same file). */
static double fixture_error(const char *file, struct model *m_override, int exact)
{
    size_t len;
    char *txt = th_read_file(FIX "manifest.json", &len);
    json_error_t jerr;
    json_t *man = json_loadb(txt, len, 0, &jerr);
    free(txt);
    CHECK(man != NULL);
    json_t *files = json_object_get(man, "files"), *entry = NULL;
    for (size_t i = 0; i < json_array_size(files); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(files, i), "gguf")), file) == 0)
            entry = json_array_get(files, i);
    CHECK(entry != NULL);
    struct prompts p;
    get_prompts(entry, &p);
    char lpath[256];
    snprintf(lpath, sizeof lpath, FIX "%s", json_string_value(json_object_get(entry, "logits")));
    json_decref(man);
    size_t want_len;
    float *want = th_read_file(lpath, &want_len);
    char gfile[128];
    snprintf(gfile, sizeof gfile, "%s", file);
    gfile[strcspn(gfile, "#")] = 0;
    struct model *m = m_override ? m_override : load(gfile);
    int nv = m->hp.n_vocab;
    CHECK_EQ_INT(want_len, (size_t)p.total * (size_t)nv * sizeof(float));
    float *got = malloc(want_len);
    CHECK(got != NULL);
    run_all(m, &p, got, exact);
    double worst = 0;
    for (int r = 0; r < p.total; r++) {
        double e = th_rel_l2(got + (size_t)r * (size_t)nv, want + (size_t)r * (size_t)nv, nv);
        if (!(e <= worst))
            worst = e;
    }
    free(got);
    free(want);
    if (!m_override)
        model_free(m);
    return worst;
}

static void check_fixture(const char *file, double tol, int exact)
{
    double e = fixture_error(file, NULL, exact);
    printf("# %s (%s): max rel L2 %.3g (tol %.0e)\n", file, exact ? "exact" : "fast", e, tol);
    if (!(e <= tol))
        th_fail(__FILE__, __LINE__, file, "max rel L2 %.3g > %.0e", e, tol);
}

TEST(model_logits_match_hf_llama_f32)
{
    check_fixture("llama_tied.f32.gguf", MODEL_TOL_F32, 1);
}

TEST(model_logits_match_hf_llama3_untied_f32)
{
    check_fixture("llama3_untied.f32.gguf", MODEL_TOL_F32, 1);
}

TEST(model_logits_match_hf_qwen2_f32)
{
    check_fixture("qwen2_tied.f32.gguf", MODEL_TOL_F32, 1);
}

TEST(model_logits_match_hf_quantized)
{
    const char *files[] = {"llama_tied.q8_0.gguf", "llama_tied.q4_0.gguf", "llama_tied.q4_1.gguf",
                           "llama_tied.q5_0.gguf", "llama_tied.q5_1.gguf",
                           "llama3_untied.q8_0.gguf", "qwen2_tied.f16.gguf", "qwen2_tied.q8_0.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        check_fixture(files[i], MODEL_TOL_QUANT, 1);
}

/* The newer architectures, converted by llama.cpp's convert_hf_to_gguf.py
 * (tests/oracle/make_arch_fixtures.py). */
TEST(model_logits_match_hf_qwen3)
{
    check_fixture("qwen3_tied.f32.gguf", MODEL_TOL_F32, 1);
    check_fixture("qwen3_tied.q8_0.gguf", MODEL_TOL_QUANT, 1);
}

TEST(model_logits_match_hf_gemma2)
{
    check_fixture("gemma2_tied.f32.gguf", MODEL_TOL_F32, 1);
    check_fixture("gemma2_tied.q8_0.gguf", MODEL_TOL_QUANT, 1);
}

TEST(model_logits_match_hf_gemma3)
{
    check_fixture("gemma3_tied.f32.gguf", MODEL_TOL_F32, 1);
    check_fixture("gemma3_tied.q8_0.gguf", MODEL_TOL_QUANT, 1);
}

/* A Mistral-style llama GGUF declaring llama.attention.sliding_window (4):
 * every layer attends to the last 4 positions, as HF's Mistral. */
TEST(model_logits_match_hf_mistral_sliding_window)
{
    check_fixture("mistral_swa.f32.gguf", MODEL_TOL_F32, 1);
    check_fixture("mistral_swa.q8_0.gguf", MODEL_TOL_QUANT, 1);
    struct model *m = load("mistral_swa.f32.gguf");
    CHECK(m->hp.arch == MODEL_ARCH_LLAMA && m->hp.n_swa == 4 && m->layers[0].swa &&
          m->layers[1].swa);
    m->hp.n_swa = 0; /* no window: far off */
    CHECK(fixture_error("mistral_swa.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    model_free(m);
}

TEST(model_logits_match_hf_phi3)
{
    check_fixture("phi3_longrope.f32.gguf", MODEL_TOL_F32, 1);      /* short factors (n_ctx 64) */
    check_fixture("phi3_longrope.f32.gguf#long", MODEL_TOL_F32, 1); /* long factors (n_ctx 128) */
    check_fixture("phi3_longrope.q8_0.gguf", MODEL_TOL_QUANT, 1);
}

/* The default path on every fixture: F32/F16 weights are dotted with the
 * unquantized activations, K/V are binary16 (MODEL_TOL_F16KV); the
 * quantized types see 8-bit activations (seen: 1.3-1.8%, tolerance
 * MODEL_TOL_FAST). */
TEST(model_logits_fast_path_near_hf)
{
    const char *files[] = {"llama_tied.f32.gguf", "llama3_untied.f32.gguf", "qwen2_tied.f32.gguf",
                           "llama_tied.q8_0.gguf", "llama_tied.q4_0.gguf", "llama_tied.q4_1.gguf",
                           "llama_tied.q5_0.gguf", "llama_tied.q5_1.gguf",
                           "llama3_untied.q8_0.gguf", "qwen2_tied.f16.gguf", "qwen2_tied.q8_0.gguf",
                           "qwen3_tied.f32.gguf", "qwen3_tied.q8_0.gguf", "gemma2_tied.f32.gguf",
                           "gemma2_tied.q8_0.gguf", "gemma3_tied.f32.gguf", "gemma3_tied.q8_0.gguf",
                           "phi3_longrope.f32.gguf", "phi3_longrope.q8_0.gguf",
                           "mistral_swa.q8_0.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        check_fixture(files[i], strstr(files[i], ".f32.") || strstr(files[i], ".f16.")
                                    ? MODEL_TOL_F16KV : MODEL_TOL_FAST, 0);
}

/* The fixtures can fail: each deliberate mistake moves the logits far
 * beyond the tolerance. */
TEST(model_fixtures_detect_rope_mistakes)
{
    struct model *m = load("llama3_untied.f32.gguf");
    CHECK(m->rope_freqs != NULL && !m->tied && m->hp.rope_neox == 0);
    m->rope_freqs = NULL; /* forget llama3 scaling */
    double e = fixture_error("llama3_untied.f32.gguf", m, 1);
    CHECK(e > 100 * MODEL_TOL_F32);
    model_free(m);

    m = load("llama_tied.f32.gguf");
    CHECK(m->tied && m->hp.rope_neox == 0);
    m->hp.rope_neox = 1; /* rotate-half on permuted rows */
    e = fixture_error("llama_tied.f32.gguf", m, 1);
    CHECK(e > 100 * MODEL_TOL_F32);
    model_free(m);

    m = load("qwen2_tied.f32.gguf");
    CHECK(m->hp.rope_neox == 1 && m->layers[0].bq && m->layers[1].bv);
    m->hp.rope_neox = 0;
    e = fixture_error("qwen2_tied.f32.gguf", m, 1);
    CHECK(e > 100 * MODEL_TOL_F32);
    m->hp.rope_neox = 1;
    m->layers[1].bk = NULL; /* drop a bias */
    e = fixture_error("qwen2_tied.f32.gguf", m, 1);
    CHECK(e > 100 * MODEL_TOL_F32);
    model_free(m);
}

/* Each feature of the newer architectures matters on its fixture: leaving
 * it out moves the logits far beyond the tolerance. */
TEST(model_fixtures_detect_arch_mistakes)
{
    struct model *m = load("qwen3_tied.f32.gguf");
    CHECK(m->hp.arch == MODEL_ARCH_QWEN3 && m->layers[1].attn_k_norm && m->hp.rope_neox);
    m->layers[1].attn_q_norm = NULL; /* skip the q/k norms of layer 1 */
    CHECK(fixture_error("qwen3_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    model_free(m);

    m = load("gemma2_tied.f32.gguf");
    struct model_hparams hp = m->hp;
    CHECK(hp.attn_softcap == 2.0f && hp.final_softcap == 5.0f && hp.n_swa == 4 &&
          m->layers[0].swa && !m->layers[1].swa && hp.ffn_act == MODEL_FFN_GEGLU &&
          hp.embd_scale == 8.0f && m->tied);
    m->hp.attn_softcap = 0;
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->hp.final_softcap = 0;
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->layers[0].swa = 0; /* no window */
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->layers[0].swa = 1;
    m->hp.ffn_act = MODEL_FFN_SWIGLU;
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->hp.embd_scale = 1.0f;
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->layers[1].post_ffn_norm = NULL;
    CHECK(fixture_error("gemma2_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    model_free(m);

    m = load("gemma3_tied.f32.gguf");
    hp = m->hp;
    CHECK(hp.rope_freq_base == 1e6f && hp.rope_freq_base_swa == 1e4f && m->layers[4].swa &&
          !m->layers[5].swa && hp.final_softcap == 0 && hp.attn_softcap == 0);
    m->hp.rope_freq_base_swa = hp.rope_freq_base; /* one rope base for all layers */
    CHECK(fixture_error("gemma3_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->layers[5].swa = 1; /* the global layer windowed */
    CHECK(fixture_error("gemma3_tied.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    model_free(m);

    m = load("phi3_longrope.f32.gguf");
    hp = m->hp;
    CHECK(m->rope_factors_short && m->rope_factors_long && hp.n_ctx_orig == 64 &&
          hp.rope_attn_factor > 1.15f && hp.rope_attn_factor < 1.16f && !m->tied);
    m->hp.rope_attn_factor = 1.0f;
    CHECK(fixture_error("phi3_longrope.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    m->hp = hp;
    m->rope_factors_short = m->rope_factors_long; /* the wrong factors for a short context */
    CHECK(fixture_error("phi3_longrope.f32.gguf", m, 1) > 100 * MODEL_TOL_F32);
    model_free(m);
}

/* The CUDA forward implements llama and qwen2 without sliding windows
 * only: the others (and a Mistral-style llama with a window, which it
 * would run without one) are refused at context creation, in CUDA builds too. */
TEST(model_cuda_refuses_new_archs)
{
    const char *files[] = {"qwen3_tied.q8_0.gguf", "gemma2_tied.q8_0.gguf", "gemma3_tied.q8_0.gguf",
                           "phi3_longrope.q8_0.gguf", "mistral_swa.q8_0.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct model *m = load(files[i]);
        struct model_ctx_params cp;
        model_ctx_params_init(&cp);
        cp.n_ctx = 64;
        cp.device = KN_DEVICE_CUDA;
        struct model_ctx *c = NULL;
        CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_UNSUPPORTED);
        CHECK(c == NULL);
        model_free(m);
    }
}

TEST(model_hparams_from_gguf)
{
    struct model *m = load("qwen2_tied.q8_0.gguf");
    const struct model_hparams *hp = &m->hp;
    CHECK_EQ_INT(hp->arch, MODEL_ARCH_QWEN2);
    CHECK_EQ_INT(hp->n_layer, 2);
    CHECK_EQ_INT(hp->n_embd, 64);
    CHECK_EQ_INT(hp->n_head, 4);
    CHECK_EQ_INT(hp->n_head_kv, 2);
    CHECK_EQ_INT(hp->head_dim, 16);
    CHECK_EQ_INT(hp->n_rot, 16);
    CHECK_EQ_INT(hp->n_ff, 64);
    CHECK_EQ_INT(hp->n_vocab, 300);
    CHECK_EQ_INT(hp->n_ctx_train, 256);
    CHECK_NEAR(hp->rms_eps, 1e-6, 1e-12);
    CHECK_NEAR(hp->rope_freq_base, 1e6, 0.5);
    CHECK(m->tied && m->output.data == m->tok_embd.data);
    CHECK_EQ_INT(m->tok_embd.type, 8); /* Q8_0, kept quantized */
    CHECK_EQ_INT(m->layers[0].wq.rows, 64);
    CHECK_EQ_INT(m->layers[0].wk.rows, 32);
    CHECK_EQ_INT(m->layers[0].w_down.cols, 64);
    CHECK_EQ_STR(model_arch_name(hp->arch), "qwen2");
    model_free(m);
    m = load("llama3_untied.q8_0.gguf");
    CHECK(!m->tied && m->output.data != m->tok_embd.data && m->rope_freqs);
    CHECK_NEAR(m->hp.rope_freq_scale, 1.0, 0);
    model_free(m);
}

TEST(model_tokenizer_and_chat_from_gguf)
{
    struct model *m = load("llama_tied.q4_0.gguf");
    struct tok *t;
    char err[256];
    CHECK_EQ_INT(model_tokenizer(m, &t, err, sizeof err), 0);
    CHECK_EQ_INT(tok_n_vocab(t), 300);
    CHECK_EQ_INT(tok_bos(t), 298);
    CHECK_EQ_INT(tok_eos(t), 299);
    CHECK(tok_is_eog(t, 299));
    int32_t ids[64];
    size_t n;
    const char *s = "the cat sat on the mat";
    CHECK_EQ_INT(tok_encode(t, s, strlen(s), TOK_ADD_SPECIAL, ids, 64, &n), 0);
    CHECK(n >= 1 && n < strlen(s)); /* merges were applied */
    struct buf b;
    buf_init(&b, 1024);
    CHECK_EQ_INT(tok_decode(t, ids, n, 0, &b), 0);
    CHECK_EQ_STR(b.data, s);
    buf_release(&b);
    struct chat_tmpl *ct;
    CHECK_EQ_INT(model_chat_tmpl(m, t, &ct), 0);
    CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_JINJA); /* the GGUF's own template */
    chat_tmpl_free(ct);
    tok_free(t);
    model_free(m);
}

static void patch(unsigned char *buf, size_t len, const void *from, const void *to, size_t n);

/* A GGUF without tokenizer.chat_template gets its architecture's default
 * (model.c default_chat_template): Gemma's turns with the system message
 * folded into the first user turn, Phi-3's tags; qwen3 the ChatML fallback. */
TEST(model_default_chat_template_per_arch)
{
    struct {
        const char *file, *want;
    } cases[] = {
        {"gemma3_tied.q8_0.gguf",
         "<|im_start|><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"},
        {"gemma2_tied.q8_0.gguf",
         "<|im_start|><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"},
        {"phi3_longrope.q8_0.gguf", "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"},
        {"qwen3_tied.q8_0.gguf",
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    };
    struct chat_msg msgs[2] = {{CHAT_SYSTEM, "Be brief.", 9}, {CHAT_USER, "Hi", 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], err[256];
        size_t len;
        snprintf(path, sizeof path, FIX "%s", cases[i].file);
        unsigned char *buf = th_read_file(path, &len);
        patch(buf, len, "tokenizer.chat_template", "tokenizer.chat_templatx", 23);
        struct gguf *g;
        struct model *m;
        struct tok *t;
        struct chat_tmpl *ct;
        CHECK_EQ_INT(gguf_open_mem(buf, len, &g, err, sizeof err), 0);
        CHECK_EQ_INT(model_load_gguf(g, &m, err, sizeof err), 0);
        CHECK_EQ_INT(model_tokenizer(m, &t, err, sizeof err), 0);
        CHECK_EQ_INT(model_chat_tmpl(m, t, &ct), 0);
        struct buf out;
        buf_init(&out, 1 << 16);
        CHECK_EQ_INT(chat_render(ct, msgs, 2, 1, &out), 0);
        CHECK_EQ_STR(out.data, cases[i].want);
        buf_release(&out);
        chat_tmpl_free(ct);
        tok_free(t);
        model_free(m);
        free(buf);
    }
}

/* ---- batching ---- */

/* Matmul path, pool and K/V type of the contexts new_ctx makes. */
static int g_exact;
static struct kn_pool *g_pool;
static int g_kv_type; /* enum model_kv_type */

static struct model_ctx *new_ctx(const struct model *m, int n_seq, int n_batch, int n_out,
                                 int n_blocks)
{
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 64;
    cp.n_seq_max = n_seq;
    cp.n_batch_max = n_batch;
    cp.n_out_max = n_out;
    cp.n_kv_blocks = n_blocks;
    cp.exact_matmul = g_exact;
    cp.pool = g_pool;
    cp.kv_type = g_kv_type;
    struct model_ctx *c;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), 0);
    return c;
}

/* Logits of every position of seq (len tokens), alone, in chunks of chunk. */
static void run_alone(const struct model *m, const int32_t *ids, int len, int chunk, float *out)
{
    struct model_ctx *c = new_ctx(m, 1, chunk, chunk, 0);
    int nv = m->hp.n_vocab;
    for (int at = 0; at < len; at += chunk) {
        int n = len - at < chunk ? len - at : chunk;
        int32_t pos[64], seq[64] = {0};
        uint8_t mark[64];
        for (int i = 0; i < n; i++) {
            pos[i] = at + i;
            mark[i] = 1;
        }
        struct model_batch b = {n, ids + at, pos, seq, mark};
        const float *lg;
        int n_out;
        CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
        CHECK_EQ_INT(n_out, n);
        memcpy(out + (size_t)at * (size_t)nv, lg, (size_t)n * (size_t)nv * sizeof(float));
    }
    CHECK_EQ_INT(model_ctx_kv(c)->seqs[0].n_pos, len);
    model_ctx_free(c);
}

/* Batch and chunk invariance of file's logits on the path g_exact / g_pool.
 * expect (may be NULL): logits of the whole sequence alone that the run
 * must reproduce bit for bit (another thread count); the run's own go to
 * ref_out when not NULL. */
enum { INV_LEN = 37 };
static void check_batch_invariance(const char *file, const float *expect, float *ref_out)
{
    struct model *m = load(file);
    int nv = m->hp.n_vocab;
    enum { LEN = INV_LEN };
    int32_t ids[LEN];
    for (int i = 0; i < LEN; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % nv);
    static float ref[LEN * 512], got[LEN * 512];
    CHECK(nv <= 512);
    run_alone(m, ids, LEN, LEN, ref);
    if (expect)
        CHECK(memcmp(ref, expect, sizeof(float) * LEN * (size_t)nv) == 0);
    if (ref_out)
        memcpy(ref_out, ref, sizeof(float) * LEN * (size_t)nv);
    /* chunked prefill: 1 token, 5 tokens, 16 (crosses KV blocks) ... */
    int chunks[] = {1, 5, 16, 7};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        run_alone(m, ids, LEN, chunks[ci], got);
        CHECK(memcmp(ref, got, sizeof(float) * LEN * (size_t)nv) == 0);
    }
    /* in a batch: slot 2 runs our sequence in uneven chunks, while slots 0,
     * 1 and 3 advance other sequences at other positions; the batch order
     * interleaves slots */
    struct model_ctx *c = new_ctx(m, 4, 64, 64, 0);
    int at = 0, other = 0, step = 0;
    while (at < LEN) {
        int32_t tok[64], pos[64], seq[64];
        uint8_t mark[64];
        int n = 0, take = step % 3 == 0 ? 1 : (step % 3 == 1 ? 9 : 4);
        if (take > LEN - at)
            take = LEN - at;
        for (int s = 0; s < 4; s++) {
            if (s == 2) {
                for (int i = 0; i < take; i++, n++) {
                    tok[n] = ids[at + i];
                    pos[n] = at + i;
                    seq[n] = 2;
                    mark[n] = 1;
                }
            } else {
                int k = s == 0 ? 3 : 1; /* slot 0 grows faster */
                for (int i = 0; i < k && other * 3 + i < 60; i++, n++) {
                    int p = model_ctx_kv(c)->seqs[s].n_pos + i;
                    if (p >= 60)
                        break;
                    tok[n] = (int32_t)((p * 31 + s) % nv);
                    pos[n] = p;
                    seq[n] = s;
                    mark[n] = (uint8_t)(i == 0);
                }
            }
        }
        struct model_batch b = {n, tok, pos, seq, mark};
        const float *lg;
        int n_out;
        CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
        int o = 0;
        for (int i = 0; i < n; i++) {
            if (!mark[i])
                continue;
            if (seq[i] == 2)
                CHECK(memcmp(lg + (size_t)o * (size_t)nv, ref + (size_t)pos[i] * (size_t)nv,
                             sizeof(float) * (size_t)nv) == 0);
            o++;
        }
        CHECK_EQ_INT(o, n_out);
        at += take;
        other++;
        step++;
    }
    model_ctx_free(c);
    model_free(m);
}

TEST(model_batched_equals_single_llama_q4_1)
{
    g_exact = 1;
    check_batch_invariance("llama_tied.q4_1.gguf", NULL, NULL);
    g_exact = 0;
    check_batch_invariance("llama_tied.q4_1.gguf", NULL, NULL);
}

TEST(model_batched_equals_single_qwen2_f16)
{
    g_exact = 1;
    check_batch_invariance("qwen2_tied.f16.gguf", NULL, NULL);
    g_exact = 0;
    check_batch_invariance("qwen2_tied.f16.gguf", NULL, NULL);
}

/* Sliding windows (gemma3: 5 of 6 layers, window 4, own rope base),
 * soft-capping (gemma2), q/k norms and LongRoPE keep the invariance. */
TEST(model_batched_equals_single_new_archs)
{
    const char *files[] = {"gemma3_tied.q8_0.gguf", "gemma2_tied.f32.gguf", "qwen3_tied.q8_0.gguf",
                           "phi3_longrope.q8_0.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        g_exact = 1;
        check_batch_invariance(files[f], NULL, NULL);
        g_exact = 0;
        check_batch_invariance(files[f], NULL, NULL);
    }
}

/* A context for ring tests: 3 slots, steps of up to 14 tokens, n_ctx 64;
 * swa_full selects rings (0) or every position kept (1). */
static struct model_ctx *ring_ctx(const struct model *m, int swa_full)
{
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 64;
    cp.n_seq_max = 3;
    cp.n_batch_max = 14;
    cp.n_out_max = 14;
    cp.exact_matmul = g_exact;
    cp.swa_full = swa_full;
    struct model_ctx *c;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), 0);
    return c;
}

/* Sliding-window layers keep only a ring of window + 14 - 1 positions per
 * slot, rounded up to blocks (kv.h; window 4 here: 2 blocks = 32 positions
 * for n_ctx 64; 17 is the least that works: steps of 14 tokens make 1
 * block fail): less K/V memory, and the logits of 3 sequences of 60 tokens
 * (past the window and around the ring), advanced in uneven interleaved
 * steps, are
 * bit-identical to those with every position kept. gemma3: 5 of 6 layers
 * slide; gemma2: alternate; mistral_swa: every layer (the pool then holds
 * no K/V at all). A rewind inside the window recomputes the same bits; one
 * below what the ring still holds is refused. */
TEST(model_sliding_window_rings_same_bits_less_memory)
{
    const char *files[] = {"gemma3_tied.q8_0.gguf", "gemma2_tied.f32.gguf", "mistral_swa.q8_0.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct model *m = load(files[f]);
        int nv = m->hp.n_vocab, n_swa_layers = 0;
        for (int l = 0; l < m->hp.n_layer; l++)
            n_swa_layers += m->layers[l].swa;
        CHECK(m->hp.n_swa == 4 && n_swa_layers > 0 && nv <= 512);
        g_exact = (int)(f % 2);
        struct model_ctx *full = ring_ctx(m, 1), *ring = ring_ctx(m, 0);
        struct kv_cache *kf = model_ctx_kv(full), *kr = model_ctx_kv(ring);
        CHECK_EQ_INT(kf->n_layer_ring, 0);
        CHECK_EQ_INT(kr->n_layer_ring, n_swa_layers);
        CHECK_EQ_INT(kr->ring_blocks, 2);
        /* memory: the pool keeps the global layers only, plus 3 x 2 ring blocks */
        struct model_ctx_params cp;
        model_ctx_params_init(&cp);
        cp.n_ctx = 64;
        cp.n_seq_max = 3;
        cp.n_batch_max = 14;
        cp.n_out_max = 14;
        size_t bb_r, rb_r, bb_f, rb_f;
        CHECK_EQ_INT(model_ctx_kv_bytes(m, &cp, &bb_r, &rb_r), 0);
        cp.swa_full = 1;
        CHECK_EQ_INT(model_ctx_kv_bytes(m, &cp, &bb_f, &rb_f), 0);
        size_t per_layer_block = bb_f / (size_t)m->hp.n_layer;
        CHECK(rb_f == 0 && rb_r == (size_t)n_swa_layers * 6 * per_layer_block);
        CHECK(bb_r == (size_t)(m->hp.n_layer - n_swa_layers) * per_layer_block);
        CHECK(bb_r * 12 + rb_r < bb_f * 12); /* 12 blocks: 3 slots x 64 positions */
        printf("# %s: K/V %zu bytes with rings, %zu with every position\n", files[f],
                bb_r * 12 + rb_r, bb_f * 12);

        enum { LEN = 60 };
        int at[3] = {0, 0, 0}, step = 0;
        static float lf[14 * 512], lr[14 * 512];
        while (at[0] < LEN || at[1] < LEN || at[2] < LEN) {
            int32_t tok[14], pos[14], seq[14];
            uint8_t mark[14];
            int n = 0;
            for (int s = 0; s < 3 && n < 14; s++) {
                /* uneven: 1..8, and whole steps of 14 for slot 0 every other step */
                int take = s == 0 && step % 2 ? 14 : (step * 5 + s * 3) % 8 + 1;
                if (take > 14 - n)
                    take = 14 - n;
                if (take > LEN - at[s])
                    take = LEN - at[s];
                for (int i = 0; i < take; i++, n++) {
                    pos[n] = at[s] + i;
                    tok[n] = (int32_t)((pos[n] * 7919 + 13 + s * 101) % nv);
                    seq[n] = s;
                    mark[n] = 1;
                }
                at[s] += take;
            }
            struct model_batch b = {n, tok, pos, seq, mark};
            const float *lg;
            int no_f, no_r;
            CHECK_EQ_INT(model_forward(full, &b, &lg, &no_f), 0);
            memcpy(lf, lg, (size_t)no_f * (size_t)nv * sizeof(float));
            CHECK_EQ_INT(model_forward(ring, &b, &lg, &no_r), 0);
            memcpy(lr, lg, (size_t)no_r * (size_t)nv * sizeof(float));
            CHECK_EQ_INT(no_f, n);
            CHECK_EQ_INT(no_r, n);
            CHECK(memcmp(lf, lr, (size_t)n * (size_t)nv * sizeof(float)) == 0);
            step++;
        }
        CHECK(kr->seqs[0].ring_lo > 0); /* the ring did wrap */
        /* rewind slot 1 by 2 positions and recompute them: same bits as kept */
        CHECK_EQ_INT(kv_seq_truncate(kr, 1, LEN - 2), 0);
        CHECK_EQ_INT(kv_seq_truncate(kf, 1, LEN - 2), 0);
        int32_t tok[2] = {5, 9}, pos[2] = {LEN - 2, LEN - 1}, seq[2] = {1, 1};
        uint8_t mark[2] = {1, 1};
        struct model_batch b = {2, tok, pos, seq, mark};
        const float *lg;
        int no;
        CHECK_EQ_INT(model_forward(full, &b, &lg, &no), 0);
        memcpy(lf, lg, 2 * (size_t)nv * sizeof(float));
        CHECK_EQ_INT(model_forward(ring, &b, &lg, &no), 0);
        CHECK(memcmp(lf, lg, 2 * (size_t)nv * sizeof(float)) == 0);
        /* a rewind far back: the ring no longer holds that window */
        CHECK_EQ_INT(kv_seq_truncate(kr, 1, 10), ERR_BADSTATE);
        CHECK_EQ_INT(kr->seqs[1].n_pos, LEN);
        CHECK_EQ_INT(kv_seq_truncate(kf, 1, 10), 0);
        model_ctx_free(full);
        model_ctx_free(ring);
        model_free(m);
    }
    g_exact = 0;
}

/* The default path on 1, 2 and 3 threads: the same bits (matmul tiles and
 * attention heads are split differently, each output computed alike), and
 * still batch- and chunk-invariant. Both SIMD levels too, when AVX2 exists. */
TEST(model_fast_path_same_on_any_thread_count)
{
    const char *files[] = {"llama_tied.q4_1.gguf", "llama3_untied.q8_0.gguf", "qwen2_tied.q8_0.gguf",
                           "gemma3_tied.q8_0.gguf"};
    static float ref[INV_LEN * 512];
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        g_exact = 0;
        g_pool = NULL;
        check_batch_invariance(files[f], NULL, ref);
        for (int nt = 2; nt <= 3; nt++) {
            CHECK_EQ_INT(kn_pool_new(nt, &g_pool), 0);
            check_batch_invariance(files[f], ref, NULL);
            kn_pool_free(g_pool);
            g_pool = NULL;
        }
        /* every SIMD level gives the same bits as the best one */
        for (int lv = KN_SIMD_SCALAR; lv < kn_simd_best(); lv++) {
            CHECK_EQ_INT(kn_simd_set(lv), 0);
            check_batch_invariance(files[f], ref, NULL);
        }
        CHECK_EQ_INT(kn_simd_set(kn_simd_best()), 0);
    }
}

/* The int8 K/V cache (--kv-type q8) keeps the contract of the binary16
 * one: batch- and chunk-invariant, the same bits on 1, 2 and 3 threads and
 * at every SIMD level (the rings of gemma3 too), on both matmul paths; and
 * its logits stay near the binary16 cache's (relative L2 per position).
 * Likewise binary16 keys with int8 values (q8v). */
TEST(model_kv_q8_invariant_and_near_f16)
{
    const char *files[] = {"llama_tied.q4_1.gguf", "qwen2_tied.q8_0.gguf", "gemma3_tied.q8_0.gguf",
                           "gemma2_tied.f32.gguf"};
    static float ref[INV_LEN * 512], f16[INV_LEN * 512];
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        g_exact = f == 3; /* gemma2: the exact path (float32 weights) */
        g_pool = NULL;
        g_kv_type = MODEL_KV_Q8;
        check_batch_invariance(files[f], NULL, ref);
        CHECK_EQ_INT(kn_pool_new(2 + (int)(f % 2), &g_pool), 0);
        check_batch_invariance(files[f], ref, NULL);
        kn_pool_free(g_pool);
        g_pool = NULL;
        for (int lv = KN_SIMD_SCALAR; lv < kn_simd_best(); lv++) {
            CHECK_EQ_INT(kn_simd_set(lv), 0);
            check_batch_invariance(files[f], ref, NULL);
        }
        CHECK_EQ_INT(kn_simd_set(kn_simd_best()), 0);
        g_kv_type = MODEL_KV_F16;
        check_batch_invariance(files[f], NULL, f16);
        g_kv_type = MODEL_KV_DEFAULT;
        struct model *m = load(files[f]);
        int nv = m->hp.n_vocab;
        model_free(m);
        double worst = 0;
        for (int t = 0; t < INV_LEN; t++) {
            double d = 0, n = 0;
            for (int i = 0; i < nv; i++) {
                double a = ref[t * nv + i], b = f16[t * nv + i];
                d += (a - b) * (a - b);
                n += b * b;
            }
            worst = fmax(worst, sqrt(d / n));
        }
        fprintf(stderr, "# %s: int8 vs binary16 K/V logits, max rel L2 %.4f\n", files[f], worst);
        CHECK(worst < 0.05);
        if (f < 2) { /* binary16 keys, int8 values: the same contract */
            g_kv_type = MODEL_KV_Q8V;
            check_batch_invariance(files[f], NULL, ref);
            CHECK_EQ_INT(kn_pool_new(2, &g_pool), 0);
            check_batch_invariance(files[f], ref, NULL);
            kn_pool_free(g_pool);
            g_pool = NULL;
            CHECK_EQ_INT(kn_simd_set(KN_SIMD_SCALAR), 0);
            check_batch_invariance(files[f], ref, NULL);
            CHECK_EQ_INT(kn_simd_set(kn_simd_best()), 0);
            g_kv_type = MODEL_KV_DEFAULT;
        }
    }
    g_exact = 0;
    /* refused: an unknown type; int8 off the CPU */
    struct model *m = load("llama_tied.q4_1.gguf");
    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    struct model_ctx *c = NULL;
    cp.kv_type = MODEL_KV_Q8V + 1;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_INVAL);
    cp.kv_type = MODEL_KV_Q8;
    cp.device = KN_DEVICE_CUDA;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_INVAL);
    int t;
    CHECK(model_kv_type_parse("q8", &t) == 0 && t == MODEL_KV_Q8);
    CHECK(model_kv_type_parse("f16", &t) == 0 && t == MODEL_KV_F16);
    CHECK(model_kv_type_parse("q8v", &t) == 0 && t == MODEL_KV_Q8V);
    CHECK_EQ_INT(model_kv_type_parse("q4", &t), ERR_INVAL);
    model_free(m);
}

TEST(model_batch_contract)
{
    struct model *m = load("llama_tied.q8_0.gguf");
    /* 5 blocks of 16 positions in all, 2 slots */
    struct model_ctx *c = new_ctx(m, 2, 64, 4, 5);
    struct kv_cache *kv = model_ctx_kv(c);
    const float *lg;
    int n_out;
    int32_t tok[40], pos[40], seq[40];
    uint8_t mark[40] = {0};
    for (int i = 0; i < 40; i++) {
        tok[i] = i;
        pos[i] = i;
        seq[i] = 0;
    }
    struct model_batch b = {3, tok, pos, seq, NULL};
    pos[0] = 1; /* must start at the slot's length 0 */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    pos[0] = 0;
    pos[2] = 1; /* out of order */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    pos[2] = 2;
    seq[1] = 2; /* no such slot */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    seq[1] = 0;
    tok[1] = 300; /* no such token */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    tok[1] = -1;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    tok[1] = 1;
    b.n_tokens = 0;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    b.n_tokens = 65; /* over n_batch_max */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    b.n_tokens = 5;
    b.out = mark;
    memset(mark, 1, 5); /* 5 marked > n_out_max 4 */
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_INVAL);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 0);
    CHECK_EQ_INT(kv->n_free, 5);
    /* 40 positions need 3 blocks; a second slot then gets the other 2 */
    memset(mark, 0, sizeof mark);
    mark[39] = 1;
    b.n_tokens = 40;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
    CHECK_EQ_INT(n_out, 1);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 40);
    CHECK_EQ_INT(kv->seqs[0].n_blocks, 3);
    CHECK_EQ_INT(kv->n_free, 2);
    int best = kn_argmax_f32(lg, m->hp.n_vocab);
    for (int i = 0; i < 33; i++)
        seq[i] = 1;
    b.n_tokens = 33; /* 33 positions need 3 blocks: only 2 free */
    b.out = NULL;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), ERR_BUSY);
    CHECK_EQ_INT(kv->seqs[1].n_pos, 0);
    CHECK_EQ_INT(kv->n_free, 2);
    b.n_tokens = 32;
    CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
    CHECK_EQ_INT(n_out, 0);
    CHECK_EQ_INT(kv->n_free, 0);
    /* finishing slot 1 returns its blocks; rewinding slot 0 recomputes the
     * same logits for position 39 */
    kv_seq_clear(kv, 1);
    CHECK_EQ_INT(kv->n_free, 2);
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 39), 0);
    CHECK_EQ_INT(kv->seqs[0].n_pos, 39);
    int32_t t39 = 39, p39 = 39, s0 = 0;
    uint8_t one = 1;
    struct model_batch d = {1, &t39, &p39, &s0, &one};
    CHECK_EQ_INT(model_forward(c, &d, &lg, &n_out), 0);
    CHECK_EQ_INT(kn_argmax_f32(lg, m->hp.n_vocab), best);
    CHECK_EQ_INT(kv_seq_truncate(kv, 0, 16), 0);
    CHECK_EQ_INT(kv->seqs[0].n_blocks, 1);
    CHECK_EQ_INT(kv->n_free, 4);
    CHECK_EQ_INT(kv_seq_truncate(kv, 5, 0), ERR_INVAL);
    model_ctx_free(c);

    struct model_ctx_params cp;
    model_ctx_params_init(&cp);
    cp.n_ctx = 257; /* above context_length 256 */
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_INVAL);
    cp.n_ctx = 0;
    cp.max_bytes = 1000;
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_TOOBIG);
    cp.max_bytes = 0;
    cp.n_out_max = 1000; /* more than n_batch_max */
    CHECK_EQ_INT(model_ctx_new(m, &cp, &c), ERR_INVAL);
    model_free(m);
}

/* ---- load-time validation on patched copies of a fixture ---- */

/* Replace the first occurrence of from (n bytes) after the tensor-free
 * header area with to (same length). */
static void patch(unsigned char *buf, size_t len, const void *from, const void *to, size_t n)
{
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return;
        }
    th_fail(__FILE__, __LINE__, "patch", "pattern not found");
}

/* Patch a u32 value stored right after key (its type word, then the value). */
static void patch_u32(unsigned char *buf, size_t len, const char *key, uint32_t v)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 8 <= len; i++)
        if (memcmp(buf + i, key, kl) == 0) {
            uint32_t type;
            memcpy(&type, buf + i + kl, 4);
            CHECK_EQ_INT(type, 4);
            memcpy(buf + i + kl + 4, &v, 4);
            return;
        }
    th_fail(__FILE__, __LINE__, key, "key not found");
}

static void expect_load_error(const unsigned char *buf, size_t len, int rc_want, const char *msg)
{
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(buf, len, &g, err, sizeof err), 0);
    struct model *m = NULL;
    int rc = model_load_gguf(g, &m, err, sizeof err);
    if (rc != rc_want || strstr(err, msg) == NULL)
        th_fail(__FILE__, __LINE__, msg, "got %s \"%s\"", err_name(rc), rc ? err : "");
    CHECK(m == NULL);
    gguf_free(g);
}

TEST(model_load_validation)
{
    size_t len;
    unsigned char *orig = th_read_file(FIX "llama_tied.q8_0.gguf", &len);
    unsigned char *buf = malloc(len);
    CHECK(buf != NULL);

    /* the unpatched copy loads from memory */
    struct gguf *g;
    char err[256];
    struct model *m;
    memcpy(buf, orig, len);
    CHECK_EQ_INT(gguf_open_mem(buf, len, &g, err, sizeof err), 0);
    CHECK_EQ_INT(model_load_gguf(g, &m, err, sizeof err), 0);
    model_free(m);

    memcpy(buf, orig, len);
    patch(buf, len, "\x05\0\0\0\0\0\0\0llama", "\x05\0\0\0\0\0\0\0mamba", 13);
    expect_load_error(buf, len, ERR_UNSUPPORTED, "unsupported architecture 'mamba'");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.attention.head_count_kv", 4);
    expect_load_error(buf, len, ERR_CORRUPT,
                      "blk.0.attn_k.weight: shape [64, 32, 1, 1], expected [64, 64]");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.attention.head_count_kv", 3);
    expect_load_error(buf, len, ERR_CORRUPT, "head_count 4 is not a multiple of head_count_kv 3");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.feed_forward_length", 96);
    expect_load_error(buf, len, ERR_CORRUPT, "blk.0.ffn_gate.weight: shape [64, 64, 1, 1], expected [64, 96]");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.block_count", 3);
    expect_load_error(buf, len, ERR_CORRUPT, "missing tensor blk.2.attn_norm.weight");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.block_count", 1);
    expect_load_error(buf, len, ERR_CORRUPT, "tensor blk.1.attn_norm.weight beyond block_count 1");

    memcpy(buf, orig, len);
    patch_u32(buf, len, "llama.vocab_size", 299);
    expect_load_error(buf, len, ERR_CORRUPT, "llama.vocab_size 299 != token_embd rows 300");

    memcpy(buf, orig, len);
    patch(buf, len, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 19);
    expect_load_error(buf, len, ERR_CORRUPT, "missing tensor blk.1.ffn_up.weight");

    memcpy(buf, orig, len);
    patch(buf, len, "llama.attention.layer_norm_rms_epsilon", "llama.attention.layer_norm_rms_epsilom", 38);
    expect_load_error(buf, len, ERR_CORRUPT, "missing hyperparameter llama.attention.layer_norm_rms_epsilon");

    memcpy(buf, orig, len);
    patch(buf, len, "output_norm.weight", "output_norx.weight", 18);
    expect_load_error(buf, len, ERR_CORRUPT, "missing tensor output_norm.weight");
    free(buf);
    free(orig);

    /* the newer architectures: every tensor and key they need, named */
    struct {
        const char *file, *from, *to, *msg;
        int rc;
    } cases[] = {
        {"gemma3_tied.q8_0.gguf", "\x06\0\0\0\0\0\0\0gemma3", "\x06\0\0\0\0\0\0\0gemma4",
         "unsupported architecture 'gemma4'", ERR_UNSUPPORTED},
        {"gemma3_tied.q8_0.gguf", "blk.3.attn_q_norm.weight", "blk.3.attn_q_norx.weight",
         "missing tensor blk.3.attn_q_norm.weight", ERR_CORRUPT},
        {"gemma3_tied.q8_0.gguf", "blk.2.post_attention_norm.weight",
         "blk.2.post_attention_norx.weight", "missing tensor blk.2.post_attention_norm.weight",
         ERR_CORRUPT},
        {"gemma3_tied.q8_0.gguf", "gemma3.attention.layer_norm_rms_epsilon",
         "gemma3.attention.layer_norm_rms_epsilom",
         "missing hyperparameter gemma3.attention.layer_norm_rms_epsilon", ERR_CORRUPT},
        {"gemma2_tied.q8_0.gguf", "blk.1.post_ffw_norm.weight", "blk.1.post_ffw_norx.weight",
         "missing tensor blk.1.post_ffw_norm.weight", ERR_CORRUPT},
        {"qwen3_tied.q8_0.gguf", "blk.1.attn_k_norm.weight", "blk.1.attn_k_norx.weight",
         "missing tensor blk.1.attn_k_norm.weight", ERR_CORRUPT},
        {"phi3_longrope.q8_0.gguf", "rope_factors_long.weight", "rope_factors_lonx.weight",
         "missing tensor rope_factors_long.weight", ERR_CORRUPT},
        {"phi3_longrope.q8_0.gguf", "blk.1.attn_qkv.weight", "blk.1.attn_qkx.weight",
         "missing tensor blk.1.attn_qkv.weight", ERR_CORRUPT},
        {"phi3_longrope.q8_0.gguf", "phi3.rope.scaling.original_context_length",
         "phi3.rope.scaling.original_context_lengtx",
         "missing hyperparameter phi3.rope.scaling.original_context_length", ERR_CORRUPT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", cases[i].file);
        orig = th_read_file(path, &len);
        /* the architecture string comes with its 8-byte length */
        size_t n = cases[i].to[0] == 6 ? 14 : strlen(cases[i].to);
        patch(orig, len, cases[i].from, cases[i].to, n);
        expect_load_error(orig, len, cases[i].rc, cases[i].msg);
        free(orig);
    }
    /* shapes and values checked against the hyperparameters */
    orig = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    patch_u32(orig, len, "phi3.feed_forward_length", 32);
    expect_load_error(orig, len, ERR_CORRUPT, "blk.0.ffn_up.weight: shape [64, 128, 1, 1], expected [64, 64]");
    free(orig);
    orig = th_read_file(FIX "qwen3_tied.q8_0.gguf", &len);
    patch_u32(orig, len, "qwen3.attention.key_length", 32);
    patch_u32(orig, len, "qwen3.attention.value_length", 32);
    expect_load_error(orig, len, ERR_CORRUPT,
                      "blk.0.attn_q.weight: shape [64, 64, 1, 1], expected [64, 128]");
    free(orig);
    orig = th_read_file(FIX "gemma2_tied.q8_0.gguf", &len);
    {
        float neg = -2.0f, two = 2.0f;
        size_t kl = strlen("gemma2.attn_logit_softcapping");
        unsigned char *at = memmem(orig, len, "gemma2.attn_logit_softcapping", kl);
        CHECK(at != NULL && memcmp(at + kl + 4, &two, 4) == 0);
        memcpy(at + kl + 4, &neg, 4);
    }
    expect_load_error(orig, len, ERR_CORRUPT, "negative or infinite logit soft-capping");
    free(orig);

    /* qwen2 needs its q/k/v biases */
    orig = th_read_file(FIX "qwen2_tied.q8_0.gguf", &len);
    patch(orig, len, "blk.0.attn_v.bias", "blk.0.attn_v.bia_", 17);
    expect_load_error(orig, len, ERR_CORRUPT, "missing tensor blk.0.attn_v.bias");
    free(orig);
}

/* Patch the f32 value stored right after key (its type word 6, then the value). */
static void patch_f32(unsigned char *buf, size_t len, const char *key, float v)
{
    size_t kl = strlen(key);
    unsigned char *at = memmem(buf, len, key, kl);
    if (!at)
        th_fail(__FILE__, __LINE__, key, "key not found");
    uint32_t type;
    memcpy(&type, at + kl, 4);
    CHECK_EQ_INT(type, 6);
    memcpy(at + kl + 4, &v, 4);
}

/* Patch ne[0] of tensor name in the tensor infos (name, n_dims u32, ne u64...). */
static void patch_ne0(unsigned char *buf, size_t len, const char *name, uint64_t ne0)
{
    size_t nl = strlen(name);
    unsigned char *at = memmem(buf, len, name, nl);
    if (!at)
        th_fail(__FILE__, __LINE__, name, "tensor not found");
    uint64_t stored_len;
    memcpy(&stored_len, at - 8, 8);
    CHECK(stored_len == nl);
    memcpy(at + nl + 4, &ne0, 8);
}

/* Set element i of F32 tensor name to v. */
static void patch_tensor_f32(unsigned char *buf, size_t len, const char *name, int i, float v)
{
    struct gguf *g;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(buf, len, &g, err, sizeof err), 0);
    const struct gguf_tensor *t = gguf_tensor_find(g, name);
    CHECK(t != NULL && t->type == GGML_TYPE_F32 && i < t->n_elements);
    size_t off = (size_t)t->offset + (size_t)i * 4;
    gguf_free(g);
    CHECK(off + 4 <= len);
    memcpy(buf + off, &v, 4);
}

/* Values and shapes of the newer architectures' keys and tensors that are
 * present but wrong: refused at load, each named. */
TEST(model_load_validation_new_arch_values)
{
    size_t len;
    unsigned char *b;
    /* llama 3.x rope scaling: rope_freqs of n_rot / 2 positive factors */
    b = th_read_file(FIX "llama3_untied.q8_0.gguf", &len);
    patch_tensor_f32(b, len, "rope_freqs.weight", 3, 0.0f);
    expect_load_error(b, len, ERR_CORRUPT, "rope_freqs.weight[3] is not positive");
    free(b);
    b = th_read_file(FIX "llama3_untied.q8_0.gguf", &len);
    patch_ne0(b, len, "rope_freqs.weight", 4);
    expect_load_error(b, len, ERR_CORRUPT, "rope_freqs.weight: shape [4, 1, 1, 1], expected [8]");
    free(b);
    /* Mistral-style window beyond any context */
    b = th_read_file(FIX "mistral_swa.q8_0.gguf", &len);
    patch_u32(b, len, "llama.attention.sliding_window", 0x7fffffff);
    expect_load_error(b, len, ERR_CORRUPT,
                      "llama.attention.sliding_window = 2147483647 is out of range");
    free(b);
    /* gemma3: the sliding layers' rope base */
    b = th_read_file(FIX "gemma3_tied.q8_0.gguf", &len);
    patch_f32(b, len, "gemma3.rope.freq_base_swa", -1.0f);
    expect_load_error(b, len, ERR_CORRUPT, "gemma3.rope.freq_base_swa out of range");
    free(b);
    /* gemma2: post-FFN norm of the wrong width */
    b = th_read_file(FIX "gemma2_tied.q8_0.gguf", &len);
    patch_ne0(b, len, "blk.1.post_ffw_norm.weight", 32);
    expect_load_error(b, len, ERR_CORRUPT,
                      "blk.1.post_ffw_norm.weight: shape [32, 1, 1, 1], expected [64]");
    free(b);
    /* qwen3: per-head k norm of the wrong head size */
    b = th_read_file(FIX "qwen3_tied.q8_0.gguf", &len);
    patch_ne0(b, len, "blk.0.attn_k_norm.weight", 8);
    expect_load_error(b, len, ERR_CORRUPT,
                      "blk.0.attn_k_norm.weight: shape [8, 1, 1, 1], expected [16]");
    free(b);
    /* phi3 LongRoPE: attn_factor, both factor tensors, positive factors */
    b = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    patch_f32(b, len, "phi3.rope.scaling.attn_factor", 0.0f);
    expect_load_error(b, len, ERR_CORRUPT, "phi3.rope.scaling.attn_factor out of range");
    free(b);
    b = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    patch(b, len, "rope_factors_short.weight", "rope_factors_shorx.weight", 25);
    expect_load_error(b, len, ERR_CORRUPT, "missing tensor rope_factors_short.weight");
    free(b);
    b = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    patch_tensor_f32(b, len, "rope_factors_long.weight", 0, -1.0f);
    expect_load_error(b, len, ERR_CORRUPT, "rope_factors_long.weight[0] is not positive");
    free(b);
    b = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    patch_u32(b, len, "phi3.rope.scaling.original_context_length", 0);
    expect_load_error(b, len, ERR_CORRUPT,
                      "missing hyperparameter phi3.rope.scaling.original_context_length");
    free(b);
    /* phi3: a fused qkv of the wrong height */
    b = th_read_file(FIX "phi3_longrope.q8_0.gguf", &len);
    {
        const char *name = "blk.0.attn_qkv.weight";
        size_t nl = strlen(name);
        unsigned char *at = memmem(b, len, name, nl);
        CHECK(at != NULL);
        uint64_t ne1 = 96; /* q 64 + k 32 + v 32 = 128 */
        memcpy(at + nl + 4 + 8, &ne1, 8);
    }
    expect_load_error(b, len, ERR_CORRUPT,
                      "blk.0.attn_qkv.weight: shape [64, 96, 1, 1], expected [64, 128]");
    free(b);
}

/* A copy of the GGUF at path with kv (a serialized key/value pair) inserted
 * before its first key, padded with a filler string key so that the
 * inserted bytes are a multiple of 32 and the tensor data stays aligned. */
static unsigned char *with_kv(const char *path, const unsigned char *kv, size_t kv_len,
                              size_t *len_out)
{
    size_t len;
    unsigned char *orig = th_read_file(path, &len);
    unsigned char pad[128];
    size_t n_fill = (32 - (kv_len + 28) % 32) % 32; /* filler: 8 + 8 key, 4 type, 8 + n */
    size_t pl = 0;
    uint64_t kl = 8, sl = n_fill;
    uint32_t ty = 8;
    memcpy(pad + pl, &kl, 8), pl += 8;
    memcpy(pad + pl, "test.pad", 8), pl += 8;
    memcpy(pad + pl, &ty, 4), pl += 4;
    memcpy(pad + pl, &sl, 8), pl += 8;
    memset(pad + pl, 'x', n_fill), pl += n_fill;
    CHECK((kv_len + pl) % 32 == 0);
    unsigned char *b = malloc(len + kv_len + pl);
    CHECK(b != NULL);
    memcpy(b, orig, 24);
    memcpy(b + 24, kv, kv_len);
    memcpy(b + 24 + kv_len, pad, pl);
    memcpy(b + 24 + kv_len + pl, orig + 24, len - 24);
    uint64_t n_kv;
    memcpy(&n_kv, b + 16, 8);
    n_kv += 2;
    memcpy(b + 16, &n_kv, 8);
    free(orig);
    *len_out = len + kv_len + pl;
    return b;
}

/* attention.sliding_window_pattern: a per-layer bool array, or a number. */
TEST(model_sliding_window_pattern_key)
{
    const char *key = "gemma3.attention.sliding_window_pattern";
    unsigned char kv[128];
    size_t kl = strlen(key), n = 0;
    uint64_t k64 = kl;
    memcpy(kv, &k64, 8), n = 8;
    memcpy(kv + n, key, kl), n += kl;
    uint32_t t_arr = 9, t_bool = 7, t_u32 = 4;
    uint64_t n_el = 6;
    memcpy(kv + n, &t_arr, 4), n += 4;
    memcpy(kv + n, &t_bool, 4), n += 4;
    memcpy(kv + n, &n_el, 8), n += 8;
    const unsigned char pat[6] = {1, 0, 1, 0, 1, 1};
    memcpy(kv + n, pat, 6), n += 6;
    size_t len;
    unsigned char *b = with_kv(FIX "gemma3_tied.q8_0.gguf", kv, n, &len);
    struct gguf *g;
    struct model *m;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(b, len, &g, err, sizeof err), 0);
    CHECK_EQ_INT(model_load_gguf(g, &m, err, sizeof err), 0);
    for (int l = 0; l < 6; l++)
        CHECK_EQ_INT(m->layers[l].swa, pat[l]);
    model_free(m);
    free(b);

    /* wrong length: named */
    n_el = 5;
    memcpy(kv + 8 + kl + 8, &n_el, 8);
    b = with_kv(FIX "gemma3_tied.q8_0.gguf", kv, n - 1, &len);
    expect_load_error(b, len, ERR_CORRUPT, "gemma3.attention.sliding_window_pattern: expected 6 per-layer values");
    free(b);

    /* a number n: layer l slides when l % n < n - 1 */
    n = 8 + kl;
    uint32_t three = 3;
    memcpy(kv + n, &t_u32, 4), n += 4;
    memcpy(kv + n, &three, 4), n += 4;
    b = with_kv(FIX "gemma3_tied.q8_0.gguf", kv, n, &len);
    CHECK_EQ_INT(gguf_open_mem(b, len, &g, err, sizeof err), 0);
    CHECK_EQ_INT(model_load_gguf(g, &m, err, sizeof err), 0);
    for (int l = 0; l < 6; l++)
        CHECK_EQ_INT(m->layers[l].swa, l % 3 < 2);
    model_free(m);
    free(b);
}

/* ---- no allocation per step ---- */

#if defined(__SANITIZE_ADDRESS__)
/* ASan's allocator calls these on every malloc/calloc/realloc/free of any
 * thread (compiler-rt sanitizer/allocator_interface.h). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
void __sanitizer_print_stack_trace(void);
static _Atomic int g_armed, g_n_alloc;
static void count_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    if (g_armed) {
        g_n_alloc++;
        if (getenv("TRACE_ALLOC"))
            __sanitizer_print_stack_trace();
    }
}
static void count_free(const volatile void *p)
{
    (void)p;
}
static void pool_noop(void *ctx, int ith, int nth)
{
    (void)ctx;
    (void)ith;
    (void)nth;
}
#endif

/* model_forward allocates nothing, on either matmul path, with a pool:
 * a prefill in chunks, then decode steps of 2 sequences. */
TEST(model_forward_allocates_nothing)
{
#if !defined(__SANITIZE_ADDRESS__)
    SKIP("needs the ASan allocator hooks");
#else
    __sanitizer_install_malloc_and_free_hooks(count_malloc, count_free);
    struct model *m = load("qwen2_tied.q8_0.gguf");
    CHECK_EQ_INT(kn_pool_new(3, &g_pool), 0);
    /* every worker has started (ASan's thread start-up allocates) */
    kn_pool_run(g_pool, pool_noop, NULL);
    for (int exact = 0; exact <= 2; exact++) {
        g_exact = exact == 1;
        g_kv_type = exact == 2 ? MODEL_KV_Q8 : MODEL_KV_DEFAULT; /* the int8 cache too */
        struct model_ctx *c = new_ctx(m, 2, 16, 2, 0);
        int32_t tok[16], pos[16], seq[16];
        uint8_t mark[16];
        const float *lg;
        int n_out;
        g_armed = 1;
        for (int step = 0; step < 12; step++) {
            int n = 0;
            for (int s = 0; s < 2; s++) {
                int k = step < 2 ? 7 : 1; /* two prefill chunks, then decode */
                for (int i = 0; i < k; i++, n++) {
                    pos[n] = model_ctx_kv(c)->seqs[s].n_pos + i;
                    tok[n] = (pos[n] * 13 + s) % m->hp.n_vocab;
                    seq[n] = s;
                    mark[n] = i == k - 1;
                }
            }
            struct model_batch b = {n, tok, pos, seq, mark};
            CHECK_EQ_INT(model_forward(c, &b, &lg, &n_out), 0);
            CHECK_EQ_INT(n_out, 2);
        }
        g_armed = 0;
        CHECK_EQ_INT(g_n_alloc, 0);
        /* the hook works: the context's own creation allocates */
        g_armed = 1;
        struct model_ctx *c2 = new_ctx(m, 1, 4, 1, 0);
        g_armed = 0;
        CHECK(g_n_alloc > 0);
        g_n_alloc = 0;
        model_ctx_free(c2);
        model_ctx_free(c);
    }
    g_exact = 0;
    g_kv_type = MODEL_KV_DEFAULT;
    kn_pool_free(g_pool);
    g_pool = NULL;
    model_free(m);
#endif
}
