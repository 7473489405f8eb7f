/*
 * model.c - load a llama/qwen2/qwen3/gemma2/gemma3/phi3 GGUF: hyperparameters, tensor validation,
 * weight pointers into the mapping. See model.h for the design, the keys
 * read and the tensor names expected.
 */
#include "worker/engine/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/kn.h"
#include "text/chat.h"
#include "text/tok_gguf.h"

/* The architectures we run: general.architecture -> enum. */
static const struct {
    const char *name;
    enum model_arch arch;
} ARCHS[] = {
    {"llama", MODEL_ARCH_LLAMA}, {"qwen2", MODEL_ARCH_QWEN2},   {"qwen3", MODEL_ARCH_QWEN3},
    {"gemma2", MODEL_ARCH_GEMMA2}, {"gemma3", MODEL_ARCH_GEMMA3}, {"phi3", MODEL_ARCH_PHI3},
    {"bert", MODEL_ARCH_BERT},
};

const char *model_arch_name(enum model_arch a)
{
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (ARCHS[i].arch == a)
            return ARCHS[i].name;
    return "?";
}

static int is_gemma(enum model_arch a)
{
    return a == MODEL_ARCH_GEMMA2 || a == MODEL_ARCH_GEMMA3;
}

/* "<arch>.<suffix>" into key. */
static void arch_key(char *key, size_t cap, const char *arch, const char *suffix)
{
    snprintf(key, cap, "%s.%s", arch, suffix);
}

/* An integer hyperparameter in [min, max]. required = 0: absent gives
 * *out = dflt. Arrays (per-layer values) are refused. */
static int get_hp_int_min(const struct gguf *g, const char *arch, const char *suffix, int required,
                          int dflt, int min, int max, int *out, char *err, size_t err_len);

/* A positive integer hyperparameter in [1, max] (see get_hp_int_min). */
static int get_hp_int(const struct gguf *g, const char *arch, const char *suffix, int required,
                      int dflt, int max, int *out, char *err, size_t err_len)
{
    return get_hp_int_min(g, arch, suffix, required, dflt, 1, max, out, err, err_len);
}

static int get_hp_int_min(const struct gguf *g, const char *arch, const char *suffix, int required,
                          int dflt, int min, int max, int *out, char *err, size_t err_len)
{
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    long i = gguf_kv_find(g, key);
    if (i < 0) {
        if (required)
            return err_setf(err, err_len, ERR_CORRUPT, "missing hyperparameter %s", key);
        *out = dflt;
        return 0;
    }
    if (gguf_kv_type(g, (size_t)i) == GGUF_VT_ARRAY)
        return err_setf(err, err_len, ERR_UNSUPPORTED, "%s: per-layer values are not supported", key);
    int64_t v;
    if (gguf_get_i64(g, key, &v))
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not an integer", key);
    if (v < min || v > max)
        return err_setf(err, err_len, ERR_CORRUPT, "%s = %" PRId64 " is out of range (%d..%d)", key, v,
                    min, max);
    *out = (int)v;
    return 0;
}

static int get_hp_f32(const struct gguf *g, const char *arch, const char *suffix, int required,
                      float dflt, float *out, char *err, size_t err_len)
{
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    int rc = gguf_get_f32(g, key, out);
    if (rc == ERR_NOTFOUND && !required) {
        *out = dflt;
        return 0;
    }
    if (rc == ERR_NOTFOUND)
        return err_setf(err, err_len, ERR_CORRUPT, "missing hyperparameter %s", key);
    if (rc)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a float", key);
    if (!(*out == *out))
        return err_setf(err, err_len, ERR_CORRUPT, "%s is NaN", key);
    return 0;
}

/* The hyperparameters beyond llama's, with llama.cpp's defaults where the
 * GGUF may leave a key out (llama.cpp's src/models/<arch>.cpp):
 *   all: attention.sliding_window (0 / absent = none), and which layers
 *        use it: attention.sliding_window_pattern, a per-layer bool array
 *        or a number n (layer il slides when il % n < n - 1; n = 0: all);
 *        default n = 2 for gemma2, 6 for gemma3, every layer otherwise
 *        (Mistral-style, phi3: HF applies the window to all layers);
 *   gemma2/3: embedding times sqrt(n_embd), GeGLU; attention scale
 *        1/sqrt(head_dim) except the 27B models (46 / 62 layers):
 *        1/sqrt(n_embd / n_head), as llama.cpp (the GGUF has no key for
 *        HF's query_pre_attn_scalar);
 *   gemma2: attn_logit_softcapping (default 50), final_logit_softcapping
 *        (default 30), window default 4096, rope.freq_base_swa default
 *        rope.freq_base;
 *   gemma3: final_logit_softcapping when present, rope.freq_base_swa
 *        default 10000 with scale 1 on the sliding layers;
 *   phi3: rope.scaling.original_context_length and rope.scaling.attn_factor
 *        (LongRoPE; the factors are tensors). */
static int read_arch_hparams(const struct gguf *g, const char *arch, struct model_hparams *hp,
                             char *err, size_t err_len)
{
    int rc;
    int gemma = is_gemma(hp->arch);
    hp->ffn_act = gemma ? MODEL_FFN_GEGLU : MODEL_FFN_SWIGLU;
    hp->embd_scale = gemma ? (float)sqrt((double)hp->n_embd) : 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if ((hp->arch == MODEL_ARCH_GEMMA2 && hp->n_layer == 46) ||
        (hp->arch == MODEL_ARCH_GEMMA3 && hp->n_layer == 62))
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    if (hp->arch == MODEL_ARCH_GEMMA3) {
        hp->rope_freq_base_swa = 10000.0f;
        hp->rope_freq_scale_swa = 1.0f;
    }
    if ((rc = get_hp_f32(g, arch, "rope.freq_base_swa", 0, hp->rope_freq_base_swa,
                         &hp->rope_freq_base_swa, err, err_len)))
        return rc;
    if (!(hp->rope_freq_base_swa > 0))
        return err_setf(err, err_len, ERR_CORRUPT, "%s.rope.freq_base_swa out of range", arch);
    float cap_attn = hp->arch == MODEL_ARCH_GEMMA2 ? 50.0f : 0.0f;
    float cap_final = hp->arch == MODEL_ARCH_GEMMA2 ? 30.0f : 0.0f;
    if (gemma && ((rc = get_hp_f32(g, arch, "attn_logit_softcapping", 0, cap_attn,
                                   &hp->attn_softcap, err, err_len)) ||
                  (rc = get_hp_f32(g, arch, "final_logit_softcapping", 0, cap_final,
                                   &hp->final_softcap, err, err_len))))
        return rc;
    if (hp->arch == MODEL_ARCH_GEMMA3)
        hp->attn_softcap = 0.0f; /* removed in Gemma 3 (HF, llama.cpp) */
    if (!(hp->attn_softcap >= 0 && hp->attn_softcap < 1e30f) ||
        !(hp->final_softcap >= 0 && hp->final_softcap < 1e30f))
        return err_setf(err, err_len, ERR_CORRUPT, "%s: negative or infinite logit soft-capping", arch);
    if ((rc = get_hp_int_min(g, arch, "attention.sliding_window", 0,
                             hp->arch == MODEL_ARCH_GEMMA2 ? 4096 : 0, 0, MODEL_MAX_CTX, &hp->n_swa,
                             err, err_len)))
        return rc;
    int pool;
    if ((rc = get_hp_int_min(g, arch, "pooling_type", 0, MODEL_POOL_NONE, MODEL_POOL_NONE,
                             MODEL_POOL_RANK, &pool, err, err_len)))
        return rc;
    hp->pooling = (enum model_pooling)pool;
    hp->n_ctx_orig = 0;
    hp->rope_attn_factor = 1.0f;
    if (hp->arch == MODEL_ARCH_PHI3) {
        if ((rc = get_hp_int_min(g, arch, "rope.scaling.original_context_length", 0, 0, 0,
                                 MODEL_MAX_CTX, &hp->n_ctx_orig, err, err_len)) ||
            (rc = get_hp_f32(g, arch, "rope.scaling.attn_factor", 0, 1.0f, &hp->rope_attn_factor,
                             err, err_len)))
            return rc;
        if (!(hp->rope_attn_factor > 0 && hp->rope_attn_factor < 1e3f))
            return err_setf(err, err_len, ERR_CORRUPT, "%s.rope.scaling.attn_factor out of range",
                        arch);
    }
    return 0;
}

/* Which layers slide (model_layer.swa): see read_arch_hparams. */
static int read_swa_layers(const struct gguf *g, const char *arch, struct model *m, char *err,
                           size_t err_len)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->n_swa == 0)
        return 0;
    char key[128];
    arch_key(key, sizeof key, arch, "attention.sliding_window_pattern");
    long i = gguf_kv_find(g, key);
    int pattern = hp->arch == MODEL_ARCH_GEMMA2 ? 2 : hp->arch == MODEL_ARCH_GEMMA3 ? 6 : 0;
    if (i >= 0 && gguf_kv_type(g, (size_t)i) == GGUF_VT_ARRAY) {
        struct gguf_arr a;
        if (gguf_get_arr(g, key, &a) || a.n != (uint64_t)hp->n_layer)
            return err_setf(err, err_len, ERR_CORRUPT, "%s: expected %d per-layer values", key,
                        hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++) {
            int b;
            int64_t v;
            if (gguf_arr_bool(&a, (uint64_t)l, &b) == 0)
                v = b;
            else if (gguf_arr_i64(&a, (uint64_t)l, &v) || v < 0 || v > 1)
                return err_setf(err, err_len, ERR_CORRUPT, "%s[%d] is not a bool", key, l);
            m->layers[l].swa = (int)v;
        }
        return 0;
    }
    int rc = get_hp_int_min(g, arch, "attention.sliding_window_pattern", 0, pattern, 0,
                            MODEL_MAX_LAYERS, &pattern, err, err_len);
    if (rc)
        return rc;
    for (int l = 0; l < hp->n_layer; l++)
        m->layers[l].swa = pattern == 0 || l % pattern < pattern - 1;
    return 0;
}

/* The sizes every architecture declares: layers, width, FFN width, heads. */
static int read_dims(const struct gguf *g, const char *arch, struct model_hparams *hp, char *err,
                     size_t err_len)
{
    int rc;
    if ((rc = get_hp_int(g, arch, "block_count", 1, 0, MODEL_MAX_LAYERS, &hp->n_layer, err,
                         err_len)) ||
        (rc = get_hp_int(g, arch, "embedding_length", 1, 0, MODEL_MAX_EMBD, &hp->n_embd, err,
                         err_len)) ||
        (rc = get_hp_int(g, arch, "feed_forward_length", 1, 0, MODEL_MAX_FF, &hp->n_ff, err,
                         err_len)))
        return rc;
    return get_hp_int(g, arch, "attention.head_count", 1, 0, MODEL_MAX_HEADS, &hp->n_head, err,
                      err_len);
}

static int read_hparams(const struct gguf *g, const char *arch, struct model_hparams *hp, char *err,
                        size_t err_len)
{
    int rc;
    if ((rc = read_dims(g, arch, hp, err, err_len)) ||
        (rc = get_hp_int(g, arch, "attention.head_count_kv", 0, hp->n_head, MODEL_MAX_HEADS,
                         &hp->n_head_kv, err, err_len)) ||
        (rc = get_hp_int(g, arch, "context_length", 1, 0, MODEL_MAX_CTX, &hp->n_ctx_train, err,
                         err_len)))
        return rc;
    if (hp->n_embd % hp->n_head)
        return err_setf(err, err_len, ERR_CORRUPT, "embedding_length %d is not a multiple of head_count %d",
                    hp->n_embd, hp->n_head);
    if (hp->n_head % hp->n_head_kv)
        return err_setf(err, err_len, ERR_CORRUPT, "head_count %d is not a multiple of head_count_kv %d",
                    hp->n_head, hp->n_head_kv);
    int vlen;
    if ((rc = get_hp_int(g, arch, "attention.key_length", 0, hp->n_embd / hp->n_head, MODEL_MAX_EMBD,
                         &hp->head_dim, err, err_len)) ||
        (rc = get_hp_int(g, arch, "attention.value_length", 0, hp->head_dim, MODEL_MAX_EMBD, &vlen,
                         err, err_len)) ||
        (rc = get_hp_int(g, arch, "rope.dimension_count", 0, hp->head_dim, MODEL_MAX_EMBD,
                         &hp->n_rot, err, err_len)))
        return rc;
    if (vlen != hp->head_dim)
        return err_setf(err, err_len, ERR_UNSUPPORTED, "value_length %d differs from key_length %d", vlen,
                    hp->head_dim);
    if ((int64_t)hp->n_head * hp->head_dim > MODEL_MAX_EMBD)
        return err_setf(err, err_len, ERR_CORRUPT, "head_count x key_length is too large");
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim)
        return err_setf(err, err_len, ERR_CORRUPT, "rope.dimension_count %d must be even and <= %d",
                    hp->n_rot, hp->head_dim);
    if (hp->arch == MODEL_ARCH_LLAMA && hp->n_rot != hp->head_dim)
        return err_setf(err, err_len, ERR_CORRUPT, "llama: rope.dimension_count %d != head dim %d",
                    hp->n_rot, hp->head_dim);
    if ((rc = get_hp_f32(g, arch, "attention.layer_norm_rms_epsilon", 1, 0, &hp->rms_eps, err,
                         err_len)) ||
        (rc = get_hp_f32(g, arch, "rope.freq_base", 0, 10000.0f, &hp->rope_freq_base, err, err_len)))
        return rc;
    if (!(hp->rms_eps >= 0) || !(hp->rope_freq_base > 0))
        return err_setf(err, err_len, ERR_CORRUPT, "rms epsilon or rope.freq_base out of range");
    /* rope scaling: none / linear supported (llama3-style comes as rope_freqs.weight) */
    char key[128];
    arch_key(key, sizeof key, arch, "rope.scaling.type");
    struct gguf_str st = {"linear", 6};
    rc = gguf_get_str(g, key, &st);
    if (rc && rc != ERR_NOTFOUND)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a string", key);
    float factor;
    if ((rc = get_hp_f32(g, arch, "rope.scaling.factor", 0, 0.0f, &factor, err, err_len)))
        return rc;
    if (factor == 0.0f && (rc = get_hp_f32(g, arch, "rope.scale_linear", 0, 0.0f, &factor, err,
                                           err_len)))
        return rc;
    int is_none = st.len == 4 && memcmp(st.ptr, "none", 4) == 0;
    int is_linear = st.len == 6 && memcmp(st.ptr, "linear", 6) == 0;
    /* phi3 LongRoPE: the factors come as rope_factors_{short,long}.weight */
    int is_longrope = hp->arch == MODEL_ARCH_PHI3 && st.len == 8 && memcmp(st.ptr, "longrope", 8) == 0;
    if (is_longrope)
        is_none = 1;
    if (!is_none && !is_linear)
        return err_setf(err, err_len, ERR_UNSUPPORTED, "unsupported rope scaling type '%.*s'",
                    (int)(st.len > 32 ? 32 : st.len), st.ptr);
    if (factor < 0)
        return err_setf(err, err_len, ERR_CORRUPT, "negative rope.scaling.factor");
    hp->rope_freq_scale = (is_linear && factor > 0) ? 1.0f / factor : 1.0f;
    hp->rope_neox = hp->arch != MODEL_ARCH_LLAMA;
    return read_arch_hparams(g, arch, hp, err, err_len);
}

/* The tensor called name with ne = [ne0, ne1] (ne1 = 0: a 1-D tensor [ne0]).
 * f32_only: type must be F32. Missing and optional: *out = NULL, 0. */
static int get_tensor(const struct gguf *g, const char *name, int64_t ne0, int64_t ne1,
                      int f32_only, int optional, const struct gguf_tensor **out, char *err,
                      size_t err_len)
{
    const struct gguf_tensor *t = gguf_tensor_find(g, name);
    *out = NULL;
    if (!t) {
        if (optional)
            return 0;
        return err_setf(err, err_len, ERR_CORRUPT, "missing tensor %s", name);
    }
    int want_dims = ne1 ? 2 : 1;
    int ok = t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1) && t->ne[2] == 1 && t->ne[3] == 1 &&
             (int)t->n_dims <= want_dims;
    if (!ok) {
        if (ne1)
            return err_setf(err, err_len, ERR_CORRUPT,
                        "%s: shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                        "], expected [%" PRId64 ", %" PRId64 "]",
                        name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1);
        return err_setf(err, err_len, ERR_CORRUPT,
                    "%s: shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                    "], expected [%" PRId64 "]",
                    name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0);
    }
    if (f32_only && t->type != GGML_TYPE_F32) {
        const char *tn = ggml_type_name(t->type);
        return err_setf(err, err_len, ERR_CORRUPT, "%s: type %s, expected F32", name, tn ? tn : "?");
    }
    if (!ggml_type_supported(t->type)) {
        const char *tn = ggml_type_name(t->type);
        return err_setf(err, err_len, ERR_UNSUPPORTED, "%s: unsupported type %s", name, tn ? tn : "?");
    }
    if (((uintptr_t)t->data & 3) != 0)
        return err_setf(err, err_len, ERR_CORRUPT, "%s: data not 4-byte aligned", name);
    *out = t;
    return 0;
}

static int get_mat(const struct gguf *g, const char *name, int rows, int cols, int optional,
                   struct model_mat *m, char *err, size_t err_len)
{
    const struct gguf_tensor *t;
    int rc = get_tensor(g, name, cols, rows, 0, optional, &t, err, err_len);
    if (rc || !t)
        return rc;
    int64_t rb;
    if ((rc = ggml_type_row_bytes(t->type, cols, &rb)))
        return err_setf(err, err_len, ERR_CORRUPT, "%s: bad row length %d for its type", name, cols);
    m->data = t->data;
    m->type = t->type;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = (size_t)rb;
    return 0;
}

static int get_vec(const struct gguf *g, const char *name, int n, int optional, const float **out,
                   char *err, size_t err_len)
{
    const struct gguf_tensor *t;
    int rc = get_tensor(g, name, n, 0, 1, optional, &t, err, err_len);
    if (rc)
        return rc;
    *out = t ? t->data : NULL;
    return 0;
}

static int load_tensors(const struct gguf *g, struct model *m, char *err, size_t err_len)
{
    const struct model_hparams *hp = &m->hp;
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = get_mat(g, "token_embd.weight", hp->n_vocab, hp->n_embd, 0, &m->tok_embd, err,
                      err_len)) ||
        (rc = get_vec(g, "output_norm.weight", hp->n_embd, 0, &m->output_norm, err, err_len)))
        return rc;
    m->output.data = NULL;
    if ((rc = get_mat(g, "output.weight", hp->n_vocab, hp->n_embd, 1, &m->output, err, err_len)))
        return rc;
    m->tied = m->output.data == NULL;
    if (m->tied)
        m->output = m->tok_embd;
    if ((rc = get_vec(g, "rope_freqs.weight", hp->n_rot / 2, 1, &m->rope_freqs, err, err_len)))
        return rc;
    if (m->rope_freqs)
        for (int i = 0; i < hp->n_rot / 2; i++)
            if (!(m->rope_freqs[i] > 0))
                return err_setf(err, err_len, ERR_CORRUPT, "rope_freqs.weight[%d] is not positive", i);
    int qwen2 = hp->arch == MODEL_ARCH_QWEN2;
    int qk_norm = hp->arch == MODEL_ARCH_QWEN3 || hp->arch == MODEL_ARCH_GEMMA3;
    int post_norms = is_gemma(hp->arch);
    if (hp->arch == MODEL_ARCH_PHI3) {
        /* LongRoPE factors: both or neither */
        if ((rc = get_vec(g, "rope_factors_short.weight", hp->n_rot / 2, 1, &m->rope_factors_short,
                          err, err_len)) ||
            (rc = get_vec(g, "rope_factors_long.weight", hp->n_rot / 2, 1, &m->rope_factors_long,
                          err, err_len)))
            return rc;
        if (!m->rope_factors_short != !m->rope_factors_long)
            return err_setf(err, err_len, ERR_CORRUPT, "missing tensor %s",
                        m->rope_factors_short ? "rope_factors_long.weight"
                                              : "rope_factors_short.weight");
        for (int i = 0; m->rope_factors_short && i < hp->n_rot / 2; i++)
            if (!(m->rope_factors_short[i] > 0) || !(m->rope_factors_long[i] > 0))
                return err_setf(err, err_len, ERR_CORRUPT, "rope_factors_%s.weight[%d] is not positive",
                            m->rope_factors_short[i] > 0 ? "long" : "short", i);
        if (m->rope_factors_short && hp->n_ctx_orig == 0)
            return err_setf(err, err_len, ERR_CORRUPT,
                        "missing hyperparameter phi3.rope.scaling.original_context_length");
        if (m->rope_freqs)
            return err_setf(err, err_len, ERR_CORRUPT, "phi3: unexpected tensor rope_freqs.weight");
    }
    for (int l = 0; l < hp->n_layer; l++) {
        struct model_layer *L = &m->layers[l];
        char n[GGUF_MAX_NAME + 1];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        if ((rc = get_vec(g, NAME("attn_norm.weight"), hp->n_embd, 0, &L->attn_norm, err, err_len)))
            return rc;
        /* phi3 fuses Q|K|V into attn_qkv: the three are row ranges of it */
        struct model_mat qkv = {0};
        if (hp->arch == MODEL_ARCH_PHI3 &&
            (rc = get_mat(g, NAME("attn_qkv.weight"), q_dim + 2 * kv_dim, hp->n_embd, 1, &qkv, err,
                          err_len)))
            return rc;
        if (!qkv.data && hp->arch == MODEL_ARCH_PHI3 && !gguf_tensor_find(g, NAME("attn_q.weight")))
            return err_setf(err, err_len, ERR_CORRUPT, "missing tensor %s", NAME("attn_qkv.weight"));
        if (qkv.data) {
            const unsigned char *base = qkv.data;
            L->wq = L->wk = L->wv = qkv;
            L->wq.rows = q_dim;
            L->wk.rows = L->wv.rows = kv_dim;
            L->wk.data = base + (size_t)q_dim * qkv.row_bytes;
            L->wv.data = base + (size_t)(q_dim + kv_dim) * qkv.row_bytes;
        } else if ((rc = get_mat(g, NAME("attn_q.weight"), q_dim, hp->n_embd, 0, &L->wq, err,
                                 err_len)) ||
                   (rc = get_mat(g, NAME("attn_k.weight"), kv_dim, hp->n_embd, 0, &L->wk, err,
                                 err_len)) ||
                   (rc = get_mat(g, NAME("attn_v.weight"), kv_dim, hp->n_embd, 0, &L->wv, err,
                                 err_len))) {
            return rc;
        }
        if ((rc = get_mat(g, NAME("attn_output.weight"), hp->n_embd, q_dim, 0, &L->wo, err,
                          err_len)) ||
            (rc = get_vec(g, NAME("attn_q.bias"), q_dim, !qwen2, &L->bq, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_k.bias"), kv_dim, !qwen2, &L->bk, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_v.bias"), kv_dim, !qwen2, &L->bv, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_output.bias"), hp->n_embd, 1, &L->bo, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_q_norm.weight"), hp->head_dim, !qk_norm, &L->attn_q_norm,
                          err, err_len)) ||
            (rc = get_vec(g, NAME("attn_k_norm.weight"), hp->head_dim, !qk_norm, &L->attn_k_norm,
                          err, err_len)) ||
            (rc = get_vec(g, NAME("post_attention_norm.weight"), hp->n_embd, !post_norms,
                          &L->post_attn_norm, err, err_len)) ||
            (rc = get_vec(g, NAME("post_ffw_norm.weight"), hp->n_embd, !post_norms,
                          &L->post_ffn_norm, err, err_len)) ||
            (rc = get_vec(g, NAME("ffn_norm.weight"), hp->n_embd, 0, &L->ffn_norm, err, err_len)))
            return rc;
        if (!L->attn_q_norm != !L->attn_k_norm)
            return err_setf(err, err_len, ERR_CORRUPT, "missing tensor %s",
                        L->attn_q_norm ? NAME("attn_k_norm.weight") : NAME("attn_q_norm.weight"));
        if (!L->post_attn_norm != !L->post_ffn_norm)
            return err_setf(err, err_len, ERR_CORRUPT, "missing tensor %s",
                        L->post_attn_norm ? NAME("post_ffw_norm.weight")
                                          : NAME("post_attention_norm.weight"));
        /* phi3 fuses gate|up into ffn_up (2 n_ff rows, gate first) */
        struct model_mat gu = {0};
        if (hp->arch == MODEL_ARCH_PHI3 && !gguf_tensor_find(g, NAME("ffn_gate.weight")) &&
            (rc = get_mat(g, NAME("ffn_up.weight"), 2 * hp->n_ff, hp->n_embd, 0, &gu, err,
                          err_len)))
            return rc;
        if (gu.data) {
            L->w_gate = L->w_up = gu;
            L->w_gate.rows = L->w_up.rows = hp->n_ff;
            L->w_up.data = (const unsigned char *)gu.data + (size_t)hp->n_ff * gu.row_bytes;
        } else if ((rc = get_mat(g, NAME("ffn_gate.weight"), hp->n_ff, hp->n_embd, 0, &L->w_gate,
                                 err, err_len)) ||
                   (rc = get_mat(g, NAME("ffn_up.weight"), hp->n_ff, hp->n_embd, 0, &L->w_up, err,
                                 err_len))) {
            return rc;
        }
        if ((rc = get_mat(g, NAME("ffn_down.weight"), hp->n_embd, hp->n_ff, 0, &L->w_down, err,
                          err_len)))
            return rc;
#undef NAME
    }
    /* a layer beyond block_count, or MoE / other extras, means we misread the model */
    char extra[GGUF_MAX_NAME + 1];
    snprintf(extra, sizeof extra, "blk.%d.attn_norm.weight", hp->n_layer);
    if (gguf_tensor_find(g, extra))
        return err_setf(err, err_len, ERR_CORRUPT, "tensor %s beyond block_count %d", extra,
                    hp->n_layer);
    if (gguf_tensor_find(g, "blk.0.ffn_gate_inp.weight"))
        return err_setf(err, err_len, ERR_UNSUPPORTED, "mixture-of-experts models are not supported");
    return 0;
}

/* bert (llama.cpp's converter, conversion/bert.py and src/models/bert.cpp):
 * the hyperparameters every BERT GGUF has, no rope, no GQA. */
static int read_bert_hparams(const struct gguf *g, const char *arch, struct model_hparams *hp,
                             char *err, size_t err_len)
{
    int rc;
    if ((rc = read_dims(g, arch, hp, err, err_len)) ||
        (rc = get_hp_int(g, arch, "context_length", 1, 0, MODEL_MAX_CTX, &hp->n_ctx_train, err,
                         err_len)) ||
        (rc = get_hp_f32(g, arch, "attention.layer_norm_epsilon", 1, 0, &hp->norm_eps, err,
                         err_len)))
        return rc;
    if (hp->n_embd % hp->n_head)
        return err_setf(err, err_len, ERR_CORRUPT, "embedding_length %d is not a multiple of head_count %d",
                    hp->n_embd, hp->n_head);
    if (!(hp->norm_eps >= 0 && hp->norm_eps < 1))
        return err_setf(err, err_len, ERR_CORRUPT, "%s.attention.layer_norm_epsilon out of range", arch);
    char key[128];
    arch_key(key, sizeof key, arch, "attention.causal");
    int causal = 0;
    rc = gguf_get_bool(g, key, &causal);
    if (rc && rc != ERR_NOTFOUND)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a bool", key);
    if (causal)
        return err_setf(err, err_len, ERR_UNSUPPORTED, "%s: causal bert is not supported", arch);
    int pool;
    if ((rc = get_hp_int_min(g, arch, "pooling_type", 0, MODEL_POOL_NONE, MODEL_POOL_NONE,
                             MODEL_POOL_RANK, &pool, err, err_len)))
        return rc;
    hp->pooling = (enum model_pooling)pool;
    hp->n_head_kv = hp->n_head;
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = 0;
    hp->rms_eps = hp->norm_eps;
    hp->rope_freq_base = hp->rope_freq_base_swa = 10000.0f;
    hp->rope_freq_scale = hp->rope_freq_scale_swa = 1.0f;
    hp->rope_attn_factor = 1.0f;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

static int load_bert_tensors(const struct gguf *g, struct model *m, char *err, size_t err_len)
{
    const struct model_hparams *hp = &m->hp;
    int d = hp->n_embd, rc;
    const struct gguf_tensor *tt = gguf_tensor_find(g, "token_types.weight");
    int n_types = tt && tt->ne[1] >= 1 && tt->ne[1] <= 16 ? (int)tt->ne[1] : 1;
    if ((rc = get_mat(g, "token_embd.weight", hp->n_vocab, d, 0, &m->tok_embd, err, err_len)) ||
        (rc = get_mat(g, "position_embd.weight", hp->n_ctx_train, d, 0, &m->pos_embd, err,
                      err_len)) ||
        (rc = get_mat(g, "token_types.weight", n_types, d, 0, &m->tok_types, err, err_len)) ||
        (rc = get_vec(g, "token_embd_norm.weight", d, 0, &m->tok_norm, err, err_len)) ||
        (rc = get_vec(g, "token_embd_norm.bias", d, 0, &m->tok_norm_b, err, err_len)))
        return rc;
    for (int l = 0; l < hp->n_layer; l++) {
        struct model_layer *L = &m->layers[l];
        char n[GGUF_MAX_NAME + 1];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        if ((rc = get_mat(g, NAME("attn_q.weight"), d, d, 0, &L->wq, err, err_len)) ||
            (rc = get_mat(g, NAME("attn_k.weight"), d, d, 0, &L->wk, err, err_len)) ||
            (rc = get_mat(g, NAME("attn_v.weight"), d, d, 0, &L->wv, err, err_len)) ||
            (rc = get_mat(g, NAME("attn_output.weight"), d, d, 0, &L->wo, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_q.bias"), d, 0, &L->bq, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_k.bias"), d, 0, &L->bk, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_v.bias"), d, 0, &L->bv, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_output.bias"), d, 0, &L->bo, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_output_norm.weight"), d, 0, &L->attn_norm, err, err_len)) ||
            (rc = get_vec(g, NAME("attn_output_norm.bias"), d, 0, &L->attn_norm_b, err, err_len)) ||
            (rc = get_mat(g, NAME("ffn_up.weight"), hp->n_ff, d, 0, &L->w_up, err, err_len)) ||
            (rc = get_vec(g, NAME("ffn_up.bias"), hp->n_ff, 0, &L->b_up, err, err_len)) ||
            (rc = get_mat(g, NAME("ffn_down.weight"), d, hp->n_ff, 0, &L->w_down, err, err_len)) ||
            (rc = get_vec(g, NAME("ffn_down.bias"), d, 0, &L->b_down, err, err_len)) ||
            (rc = get_vec(g, NAME("layer_output_norm.weight"), d, 0, &L->ffn_norm, err, err_len)) ||
            (rc = get_vec(g, NAME("layer_output_norm.bias"), d, 0, &L->ffn_norm_b, err, err_len)))
            return rc;
        if (gguf_tensor_find(g, NAME("ffn_gate.weight")))
            return err_setf(err, err_len, ERR_UNSUPPORTED, "%s: gated bert FFN is not supported", n);
#undef NAME
    }
    char extra[GGUF_MAX_NAME + 1];
    snprintf(extra, sizeof extra, "blk.%d.attn_q.weight", hp->n_layer);
    if (gguf_tensor_find(g, extra))
        return err_setf(err, err_len, ERR_CORRUPT, "tensor %s beyond block_count %d", extra,
                    hp->n_layer);
    return 0;
}

int model_load_gguf(struct gguf *g, struct model **out, char *err, size_t err_len)
{
    const char *arch = gguf_architecture(g);
    if (!arch)
        return err_setf(err, err_len, ERR_CORRUPT, "no general.architecture");
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return ERR_NOMEM;
    int rc;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (strcmp(arch, ARCHS[i].name) == 0)
            m->hp.arch = ARCHS[i].arch;
    if (!m->hp.arch) {
        rc = err_setf(err, err_len, ERR_UNSUPPORTED, "unsupported architecture '%s'", arch);
        goto out;
    }
    int bert = m->hp.arch == MODEL_ARCH_BERT;
    if ((rc = bert ? read_bert_hparams(g, arch, &m->hp, err, err_len)
                   : read_hparams(g, arch, &m->hp, err, err_len)))
        goto out;
    const struct gguf_tensor *te = gguf_tensor_find(g, "token_embd.weight");
    if (!te) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "missing tensor token_embd.weight");
        goto out;
    }
    if (te->ne[1] < 1 || te->ne[1] > MODEL_MAX_VOCAB) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "token_embd.weight: %" PRId64 " rows (max %d)",
                  te->ne[1], MODEL_MAX_VOCAB);
        goto out;
    }
    m->hp.n_vocab = (int)te->ne[1];
    int vs;
    if ((rc = get_hp_int(g, arch, "vocab_size", 0, m->hp.n_vocab, MODEL_MAX_VOCAB, &vs, err,
                         err_len)))
        goto out;
    if (vs != m->hp.n_vocab) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "%s.vocab_size %d != token_embd rows %d", arch, vs,
                  m->hp.n_vocab);
        goto out;
    }
    struct gguf_arr toks;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == 0 && toks.n > (uint64_t)m->hp.n_vocab) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "%llu tokens in the vocabulary but %d embedding rows",
                  (unsigned long long)toks.n, m->hp.n_vocab);
        goto out;
    }
    if (!(m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers))) {
        rc = ERR_NOMEM;
        goto out;
    }
    if (bert)
        rc = load_bert_tensors(g, m, err, err_len);
    else if (!(rc = read_swa_layers(g, arch, m, err, err_len)))
        rc = load_tensors(g, m, err, err_len);
    if (rc)
        goto out;
    m->gguf = g;
    *out = m;
    m = NULL;
out:
    if (m)
        free(m->layers);
    free(m);
    return rc;
}

int model_load(const char *path, struct model **out, char *err, size_t err_len)
{
    struct gguf *g;
    int rc = gguf_open(path, &g, err, err_len);
    if (rc)
        return rc;
    rc = model_load_gguf(g, out, err, err_len);
    if (rc)
        gguf_free(g);
    return rc;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    gguf_free(m->gguf);
    free(m->layers);
    free(m);
}

int model_tokenizer(const struct model *m, struct tok **out, char *err, size_t err_len)
{
    return tok_gguf_new(m->gguf, out, err, err_len);
}

/* The default chat template of an architecture whose GGUF carries none
 * (tokenizer.chat_template absent): the family's published format as a
 * Jinja template, so that it renders the same through the known-format
 * classifier and a Jinja interpreter.
 *   gemma2, gemma3: Gemma 3's format (a system message becomes the prefix
 *     of the first user turn; Gemma 2's template raises on it instead);
 *     string contents only.
 *   phi3: Phi-3-mini-4k-instruct's template.
 * Others: NULL (qwen2/qwen3 fall back to ChatML through their <|im_start|>
 * token, see chat.h). */
static const char *default_chat_template(enum model_arch a)
{
    switch (a) {
    case MODEL_ARCH_GEMMA2:
    case MODEL_ARCH_GEMMA3:
        return "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
               "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}"
               "{% set loop_messages = messages[1:] %}"
               "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}"
               "{% endif %}{% for message in loop_messages %}"
               "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate "
               "user/assistant/user/assistant/...') }}{% endif %}"
               "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
               "{% else %}{% set role = message['role'] %}{% endif %}"
               "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + "
               "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";
    case MODEL_ARCH_PHI3:
        return "{% for message in messages %}{% if message['role'] == 'system' %}"
               "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
               "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + "
               "'<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + "
               "message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}"
               "{% endif %}";
    default:
        return NULL;
    }
}

int model_chat_tmpl(const struct model *m, const struct tok *t, struct chat_tmpl **out)
{
    const char *dflt = default_chat_template(m->hp.arch);
    if (dflt && gguf_kv_find(m->gguf, "tokenizer.chat_template") < 0)
        return chat_tmpl_new(dflt, t, out);
    return tok_gguf_chat_new(m->gguf, t, out);
}
