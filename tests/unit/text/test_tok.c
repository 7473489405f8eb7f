/*
 * test_tok.c - worker/tok against independent oracles.
 *
 * Fixtures (tests/fixtures/tok/, made once by tests/oracle/tok_fixtures.py):
 * the SmolLM2 GGUF's tokenizer arrays, llama.cpp's ids for a 400-string
 * corpus under five pre-tokenizers, and a small sentencepiece model with the
 * sentencepiece library's ids. Plus hand-made vocabularies for limits,
 * invalid UTF-8 and the streaming decoder.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "text/tok.h"

#define FIX "tests/fixtures/tok/"

struct vocab_fix {
    json_t *root;
    struct tok_vocab_desc d;
    const char **tokens;
    size_t *lens;
    float *scores;
    int32_t *types;
    const char **merges;
    size_t *mlens;
};

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &e);
    if (!j)
        th_fail(__FILE__, __LINE__, path, "cannot load: %s (line %d)", e.text, e.line);
    return j;
}

static int64_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static void vocab_load(struct vocab_fix *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->root = load_json(path);
    json_t *toks = json_object_get(f->root, "tokens"), *types = json_object_get(f->root, "types");
    json_t *scores = json_object_get(f->root, "scores"), *merges = json_object_get(f->root, "merges");
    size_t n = json_array_size(toks);
    CHECK(n > 0);
    f->tokens = calloc(n, sizeof *f->tokens);
    f->lens = calloc(n, sizeof *f->lens);
    f->types = calloc(n, sizeof *f->types);
    f->scores = calloc(n, sizeof *f->scores);
    for (size_t i = 0; i < n; i++) {
        f->tokens[i] = json_string_value(json_array_get(toks, i));
        f->lens[i] = json_string_length(json_array_get(toks, i));
        f->types[i] = (int32_t)json_integer_value(json_array_get(types, i));
        if (json_is_array(scores))
            f->scores[i] = (float)json_number_value(json_array_get(scores, i));
    }
    tok_vocab_desc_init(&f->d);
    f->d.model = json_string_value(json_object_get(f->root, "model"));
    f->d.pre = json_string_value(json_object_get(f->root, "pre"));
    f->d.n_tokens = n;
    f->d.tokens = f->tokens;
    f->d.token_lens = f->lens;
    f->d.token_types = f->types;
    f->d.scores = json_is_array(scores) ? f->scores : NULL;
    if (json_is_array(merges)) {
        size_t nm = json_array_size(merges);
        f->merges = calloc(nm, sizeof *f->merges);
        f->mlens = calloc(nm, sizeof *f->mlens);
        for (size_t i = 0; i < nm; i++) {
            f->merges[i] = json_string_value(json_array_get(merges, i));
            f->mlens[i] = json_string_length(json_array_get(merges, i));
        }
        f->d.n_merges = nm;
        f->d.merges = f->merges;
        f->d.merge_lens = f->mlens;
    }
    f->d.bos_id = jint(f->root, "bos");
    f->d.eos_id = jint(f->root, "eos");
    f->d.unk_id = jint(f->root, "unk");
    f->d.pad_id = jint(f->root, "pad");
    f->d.eot_id = jint(f->root, "eot");
    f->d.eom_id = jint(f->root, "eom");
    f->d.add_bos = (int)jint(f->root, "add_bos");
    f->d.add_eos = (int)jint(f->root, "add_eos");
    f->d.add_space_prefix = (int)jint(f->root, "add_space_prefix");
}

static void vocab_release(struct vocab_fix *f)
{
    free(f->tokens);
    free(f->lens);
    free(f->types);
    free(f->scores);
    free(f->merges);
    free(f->mlens);
    json_decref(f->root);
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Compare our ids for every corpus string with the oracle's list of lists. */
static void compare_corpus(const struct tok *t, json_t *corpus, json_t *expected, int flags,
                           const char *label)
{
    size_t n = json_array_size(corpus), bad = 0;
    CHECK_EQ_INT(json_array_size(expected), n);
    for (size_t i = 0; i < n; i++) {
        json_t *js = json_array_get(corpus, i);
        const char *s = json_string_value(js);
        size_t len = json_string_length(js), cap = TOK_ENCODE_BOUND(len), got = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        CHECK_EQ_INT(tok_encode(t, s, len, flags, ids, cap, &got), 0);
        json_t *exp = json_array_get(expected, i);
        int same = json_array_size(exp) == got;
        for (size_t k = 0; same && k < got; k++)
            same = json_integer_value(json_array_get(exp, k)) == ids[k];
        if (!same) {
            if (bad < 5) {
                fprintf(stderr, "%s mismatch on corpus[%zu] = \"%.80s\"\n", label, i, s);
                print_ids("ours  ", ids, got);
                fprintf(stderr, "  oracle:");
                for (size_t k = 0; k < json_array_size(exp); k++)
                    fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(exp, k)));
                fprintf(stderr, "\n");
            }
            bad++;
        }
        free(ids);
    }
    if (bad)
        th_fail(__FILE__, __LINE__, label, "%zu of %zu corpus strings differ from the oracle", bad, n);
}

static void bpe_variant(const char *pre, const char *key, int flags)
{
    struct vocab_fix f;
    vocab_load(&f, FIX "smollm2_vocab.json");
    json_t *corpus = load_json(FIX "corpus.json"), *ids = load_json(FIX "smollm2_ids.json");
    if (pre)
        f.d.pre = pre;
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&f.d, &t), 0);
    compare_corpus(t, corpus, json_object_get(ids, key), flags, key);
    tok_free(t);
    json_decref(corpus);
    json_decref(ids);
    vocab_release(&f);
}

TEST(tok_smollm_matches_llama_cpp) { bpe_variant(NULL, "smollm", 0); }
TEST(tok_smollm_parse_special_matches_llama_cpp) { bpe_variant(NULL, "smollm_special", TOK_PARSE_SPECIAL); }
TEST(tok_llama_bpe_pre_matches_llama_cpp) { bpe_variant("llama-bpe", "llama-bpe", 0); }
TEST(tok_qwen2_pre_matches_llama_cpp) { bpe_variant("qwen2", "qwen2", 0); }
TEST(tok_gpt2_pre_matches_llama_cpp) { bpe_variant("gpt-2", "gpt-2", 0); }
TEST(tok_default_pre_matches_llama_cpp) { bpe_variant("default", "default", 0); }

/* decode(encode(s)) == s, equal to llama.cpp's detokenization, and the
 * streaming decoder fed one token at a time gives the same text. */
TEST(tok_smollm_roundtrip_and_stream)
{
    struct vocab_fix f;
    vocab_load(&f, FIX "smollm2_vocab.json");
    json_t *corpus = load_json(FIX "corpus.json"), *oracle = load_json(FIX "smollm2_ids.json");
    json_t *detok = json_object_get(oracle, "smollm_detok");
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&f.d, &t), 0);
    for (size_t i = 0; i < json_array_size(corpus); i++) {
        json_t *js = json_array_get(corpus, i);
        const char *s = json_string_value(js);
        size_t len = json_string_length(js), cap = TOK_ENCODE_BOUND(len), n = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        CHECK_EQ_INT(tok_encode(t, s, len, 0, ids, cap, &n), 0);
        struct buf out, st;
        buf_init(&out, 1 << 20);
        buf_init(&st, 1 << 20);
        CHECK_EQ_INT(tok_decode(t, ids, n, 0, &out), 0);
        if (out.len != len || memcmp(out.data ? out.data : "", s, len) != 0)
            th_fail(__FILE__, __LINE__, "roundtrip", "corpus[%zu] \"%.60s\" -> \"%.60s\"", i, s,
                    out.data ? out.data : "");
        json_t *ldj = json_array_get(detok, i);
        CHECK(json_string_length(ldj) == out.len &&
              memcmp(json_string_value(ldj), out.data ? out.data : "", out.len) == 0);
        struct tok_stream ts;
        tok_stream_init(&ts, t, 0);
        for (size_t k = 0; k < n; k++)
            CHECK_EQ_INT(tok_stream_push(&ts, ids[k], &st), 0);
        CHECK_EQ_INT(tok_stream_flush(&ts, &st), 0);
        CHECK(st.len == len && memcmp(st.data ? st.data : "", s, len) == 0);
        buf_release(&out);
        buf_release(&st);
        free(ids);
    }
    tok_free(t);
    json_decref(corpus);
    json_decref(oracle);
    vocab_release(&f);
}

TEST(tok_smollm_specials_and_flags)
{
    struct vocab_fix f;
    vocab_load(&f, FIX "smollm2_vocab.json");
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&f.d, &t), 0);
    CHECK_EQ_INT(tok_bos(t), 1);
    CHECK_EQ_INT(tok_eos(t), 2);
    CHECK_EQ_INT(tok_add_bos(t), 0);
    CHECK(tok_is_eog(t, 2));  /* <|im_end|> */
    CHECK(tok_is_eog(t, 0));  /* <|endoftext|> */
    CHECK(!tok_is_eog(t, 1));
    CHECK_EQ_INT(tok_find(t, "<|im_start|>", 12), 1);
    int32_t ids[16];
    size_t n = 0;
    /* reference vectors (the HF tokenizer): smollm "Hello world" -> 19556 905, "333" -> 35 35 35 */
    CHECK_EQ_INT(tok_encode(t, "Hello world", 11, TOK_ADD_SPECIAL, ids, 16, &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 19556);
    CHECK_EQ_INT(ids[1], 905);
    CHECK_EQ_INT(tok_encode(t, "333", 3, 0, ids, 16, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[2], 35);
    /* output cap */
    CHECK_EQ_INT(tok_encode(t, "333", 3, 0, ids, 2, &n), ERR_TOOBIG);
    /* special rendering */
    struct buf b;
    buf_init(&b, 1024);
    int32_t seq[] = {1, 19556, 2};
    CHECK_EQ_INT(tok_decode(t, seq, 3, 0, &b), 0);
    CHECK_EQ_STR(b.data, "Hello");
    buf_reset(&b);
    CHECK_EQ_INT(tok_decode(t, seq, 3, TOK_RENDER_SPECIAL, &b), 0);
    CHECK_EQ_STR(b.data, "<|im_start|>Hello<|im_end|>");
    CHECK_EQ_INT(tok_piece(t, 49152, 0, &b), ERR_INVAL);
    CHECK_EQ_INT(tok_piece(t, -1, 0, &b), ERR_INVAL);
    buf_release(&b);
    tok_free(t);
    vocab_release(&f);
}

TEST(tok_spm_matches_sentencepiece)
{
    struct vocab_fix f;
    vocab_load(&f, FIX "spm_vocab.json");
    json_t *corpus = load_json(FIX "corpus.json"), *oracle = load_json(FIX "spm_ids.json");
    struct tok *t = NULL;
    CHECK_EQ_INT(tok_new(&f.d, &t), 0);
    CHECK_EQ_INT(tok_model_kind(t), TOK_MODEL_SPM);
    compare_corpus(t, corpus, json_object_get(oracle, "ids"), 0, "spm");
    /* decode equals sentencepiece's decode */
    json_t *dec = json_object_get(oracle, "decoded"), *ids = json_object_get(oracle, "ids");
    for (size_t i = 0; i < json_array_size(corpus); i++) {
        json_t *e = json_array_get(ids, i);
        size_t n = json_array_size(e);
        int32_t *v = malloc((n + 1) * sizeof *v);
        for (size_t k = 0; k < n; k++)
            v[k] = (int32_t)json_integer_value(json_array_get(e, k));
        struct buf b;
        buf_init(&b, 1 << 20);
        CHECK_EQ_INT(tok_decode(t, v, n, 0, &b), 0);
        json_t *dj = json_array_get(dec, i);
        if (b.len != json_string_length(dj) || memcmp(b.data ? b.data : "", json_string_value(dj), b.len))
            th_fail(__FILE__, __LINE__, "spm decode", "corpus[%zu]: \"%.60s\" vs \"%.60s\"", i,
                    b.data ? b.data : "", json_string_value(dj));
        buf_release(&b);
        free(v);
    }
    /* BOS per add_bos */
    int32_t out[8];
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, "", 0, TOK_ADD_SPECIAL, out, 8, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(out[0], 1);
    tok_free(t);
    json_decref(corpus);
    json_decref(oracle);
    vocab_release(&f);
}

/* ---- small hand-made vocabularies ------------------------------------------- */

/* A byte-level vocabulary: the 256 byte-map characters, "<|s|>" control,
 * and no merges. Every byte is one token. */
static struct tok *byte_vocab(void)
{
    static char texts[257][8];
    const char *toks[257];
    int32_t types[257];
    int n = 0;
    for (int b = 0, k = 0; b < 256; b++) {
        int cp;
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            cp = b;
        else
            cp = 0x100 + k++;
        if (cp < 0x80) {
            texts[n][0] = (char)cp;
            texts[n][1] = 0;
        } else {
            texts[n][0] = (char)(0xC0 | (cp >> 6));
            texts[n][1] = (char)(0x80 | (cp & 0x3F));
            texts[n][2] = 0;
        }
        toks[n] = texts[n];
        types[n++] = TOK_TYPE_NORMAL;
    }
    toks[n] = "<|s|>";
    types[n++] = TOK_TYPE_CONTROL;
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_tokens = (size_t)n;
    d.tokens = toks;
    d.token_types = types;
    struct tok *t = NULL;
    if (tok_new(&d, &t) != 0)
        return NULL;
    return t;
}

TEST(tok_invalid_utf8_is_replaced)
{
    struct tok *t = byte_vocab();
    CHECK(t);
    const char in[] = "a\xff" "b\xe2\x82" "c\xed\xa0\x80";
    int32_t ids[64];
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, in, sizeof in - 1, 0, ids, 64, &n), 0);
    struct buf b;
    buf_init(&b, 1024);
    CHECK_EQ_INT(tok_decode(t, ids, n, 0, &b), 0);
    CHECK_EQ_STR(b.data, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    buf_release(&b);
    /* embedded NUL is a byte like any other */
    CHECK_EQ_INT(tok_encode(t, "a\0b", 3, 0, ids, 64, &n), 0);
    CHECK_EQ_INT(n, 3);
    tok_free(t);
}

TEST(tok_limits)
{
    struct tok *t = byte_vocab();
    CHECK(t);
    size_t big = TOK_MAX_INPUT_BYTES + 1;
    char *s = malloc(big);
    memset(s, 'a', big);
    int32_t id;
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, s, big, 0, &id, 1, &n), ERR_TOOBIG);
    free(s);
    tok_free(t);
    /* bad descriptions */
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    struct tok *x = NULL;
    CHECK_EQ_INT(tok_new(&d, &x), ERR_INVAL);
    const char *toks[] = {"a", "b", "a"};
    d.model = "gpt2";
    d.pre = "no-such-pre";
    d.n_tokens = 2;
    d.tokens = toks;
    CHECK_EQ_INT(tok_new(&d, &x), ERR_UNSUPPORTED);
    d.pre = "smollm";
    d.n_tokens = 3;
    CHECK_EQ_INT(tok_new(&d, &x), ERR_CORRUPT); /* duplicate text */
    d.model = "bert"; /* WordPiece is known: the duplicate text is the error */
    CHECK_EQ_INT(tok_new(&d, &x), ERR_CORRUPT);
    d.model = "ugm";  /* an unknown tokenizer model */
    CHECK_EQ_INT(tok_new(&d, &x), ERR_INVAL);
    const char *merges[] = {"ab"};
    d.model = "gpt2";
    d.n_tokens = 2;
    d.n_merges = 1;
    d.merges = merges;
    CHECK_EQ_INT(tok_new(&d, &x), ERR_CORRUPT); /* merge without a space */
}

TEST(tok_special_only_when_asked)
{
    struct tok *t = byte_vocab();
    CHECK(t);
    int32_t ids[32];
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, "x<|s|>y", 7, TOK_PARSE_SPECIAL, ids, 32, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[1], 256);
    CHECK_EQ_INT(tok_encode(t, "x<|s|>y", 7, 0, ids, 32, &n), 0);
    CHECK_EQ_INT(n, 7);
    tok_free(t);
}

/* Streaming decoder: a 4-byte emoji split over byte tokens appears only once
 * complete; a stray continuation byte becomes U+FFFD; an incomplete tail at
 * the end becomes U+FFFD on flush. */
TEST(tok_stream_holds_partial_utf8)
{
    struct tok *t = byte_vocab();
    CHECK(t);
    const char emoji[] = "\xF0\x9F\xA6\x99"; /* U+1F999 */
    int32_t ids[8];
    size_t n = 0;
    CHECK_EQ_INT(tok_encode(t, emoji, 4, 0, ids, 8, &n), 0);
    CHECK_EQ_INT(n, 4);
    struct buf out;
    buf_init(&out, 1024);
    struct tok_stream s;
    tok_stream_init(&s, t, 0);
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(tok_stream_push(&s, ids[i], &out), 0);
        CHECK_EQ_INT(out.len, 0);
    }
    CHECK_EQ_INT(tok_stream_push(&s, ids[3], &out), 0);
    CHECK_EQ_STR(out.data, emoji);
    /* lead byte then an ASCII byte: replacement, then the ASCII */
    buf_reset(&out);
    CHECK_EQ_INT(tok_stream_push(&s, ids[0], &out), 0);
    int32_t a = tok_find(t, "a", 1);
    CHECK_EQ_INT(tok_stream_push(&s, a, &out), 0);
    CHECK_EQ_STR(out.data, "\xEF\xBF\xBD" "a");
    /* incomplete at the end */
    buf_reset(&out);
    CHECK_EQ_INT(tok_stream_push(&s, ids[0], &out), 0);
    CHECK_EQ_INT(tok_stream_push(&s, ids[1], &out), 0);
    CHECK_EQ_INT(out.len, 0);
    CHECK_EQ_INT(tok_stream_flush(&s, &out), 0);
    CHECK_EQ_STR(out.data, "\xEF\xBF\xBD");
    /* a lone continuation byte */
    buf_reset(&out);
    CHECK_EQ_INT(tok_stream_push(&s, ids[3], &out), 0);
    CHECK_EQ_STR(out.data, "\xEF\xBF\xBD");
    CHECK_EQ_INT(tok_stream_push(&s, -5, &out), ERR_INVAL);
    buf_release(&out);
    tok_free(t);
}

/* A bert GGUF without tokenizer.ggml.normalizer.lowercase (older llama.cpp
 * converters left it out; many published all-MiniLM-L6-v2 files lack it)
 * is lowercased, as llama.cpp's WordPiece tokenizer always does; an
 * explicit false keeps the case. */
TEST(tok_wpm_lowercases_when_the_key_is_absent)
{
    static char fill[106][24];
    const char *toks[106];
    int32_t types[106];
    for (int i = 0; i < 106; i++) {
        snprintf(fill[i], sizeof fill[i], "[unused%d]", i);
        toks[i] = fill[i];
        types[i] = TOK_TYPE_NORMAL;
    }
    toks[0] = "[PAD]";
    toks[100] = "[UNK]";
    toks[101] = "[CLS]";
    toks[102] = "[SEP]";
    for (int i = 100; i <= 102; i++)
        types[i] = TOK_TYPE_CONTROL;
    toks[103] = "\xE2\x96\x81new";
    toks[104] = "\xE2\x96\x81york";
    toks[105] = "\xE2\x96\x81New";
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "bert";
    d.n_tokens = 106;
    d.tokens = toks;
    d.token_types = types;
    const int want[3][2] = {{103, 104}, {105, 100}, {103, 104}}; /* absent, 0, 1 */
    for (int lc = -1; lc <= 1; lc++) {
        d.lowercase = lc;
        struct tok *t;
        CHECK_EQ_INT(tok_new(&d, &t), 0);
        int32_t ids[8];
        size_t n = 0;
        CHECK_EQ_INT(tok_encode(t, "New York", 8, 0, ids, 8, &n), 0);
        CHECK_EQ_INT(n, 2);
        CHECK_EQ_INT(ids[0], want[lc + 1][0]);
        CHECK_EQ_INT(ids[1], want[lc + 1][1]);
        tok_free(t);
    }
}
