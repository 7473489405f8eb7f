/* tok_gguf.c - tokenizer.ggml.* keys -> struct tok; see tok_gguf.h. */
#include "text/tok_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* A NUL-terminated heap copy of a string key, NULL when absent; ERR_CORRUPT
 * when present but not a string (or containing NUL). */
static int get_cstr(const struct gguf *g, const char *key, char **out, char *err, size_t err_len)
{
    struct gguf_str s;
    int rc = gguf_get_str(g, key, &s);
    *out = NULL;
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a string", key);
    if (memchr(s.ptr, 0, s.len))
        return err_setf(err, err_len, ERR_CORRUPT, "%s contains a NUL byte", key);
    char *c = malloc(s.len + 1);
    if (!c)
        return ERR_NOMEM;
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    *out = c;
    return 0;
}

/* Optional token id key: -1 when absent. */
static int get_id(const struct gguf *g, const char *key, int64_t *out, char *err, size_t err_len)
{
    int64_t v;
    int rc = gguf_get_i64(g, key, &v);
    if (rc == ERR_NOTFOUND) {
        *out = -1;
        return 0;
    }
    if (rc || v < 0)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a token id", key);
    *out = v;
    return 0;
}

/* Optional bool key: -1 when absent. */
static int get_flag(const struct gguf *g, const char *key, int *out, char *err, size_t err_len)
{
    int v;
    int rc = gguf_get_bool(g, key, &v);
    if (rc == ERR_NOTFOUND) {
        *out = -1;
        return 0;
    }
    if (rc)
        return err_setf(err, err_len, ERR_CORRUPT, "%s is not a bool", key);
    *out = v;
    return 0;
}

/* Strings of an array key into ptrs/lens (n entries). */
static int get_strs(const struct gguf_arr *a, const char *key, const char **ptrs, size_t *lens,
                    char *err, size_t err_len)
{
    for (uint64_t i = 0; i < a->n; i++) {
        struct gguf_str s;
        if (gguf_arr_str(a, i, &s))
            return err_setf(err, err_len, ERR_CORRUPT, "%s[%llu] is not a string", key,
                        (unsigned long long)i);
        ptrs[i] = s.ptr;
        lens[i] = (size_t)s.len;
    }
    return 0;
}

int tok_gguf_new(const struct gguf *g, struct tok **out, char *err, size_t err_len)
{
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    char *model = NULL, *pre = NULL;
    const char **tokens = NULL, **merges = NULL;
    size_t *token_lens = NULL, *merge_lens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    struct gguf_arr a;
    int rc = get_cstr(g, "tokenizer.ggml.model", &model, err, err_len);
    if (rc)
        goto out;
    if (!model) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "no tokenizer.ggml.model key (no vocabulary)");
        goto out;
    }
    if ((rc = get_cstr(g, "tokenizer.ggml.pre", &pre, err, err_len)))
        goto out;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &a) || a.elem_type != GGUF_VT_STRING || a.n == 0) {
        rc = err_setf(err, err_len, ERR_CORRUPT, "tokenizer.ggml.tokens missing or not a string array");
        goto out;
    }
    if (a.n > TOK_MAX_VOCAB) {
        rc = err_setf(err, err_len, ERR_TOOBIG, "tokenizer.ggml.tokens has %llu entries (max %u)",
                  (unsigned long long)a.n, TOK_MAX_VOCAB);
        goto out;
    }
    size_t n = (size_t)a.n;
    tokens = malloc(n * sizeof *tokens);
    token_lens = malloc(n * sizeof *token_lens);
    if (!tokens || !token_lens) {
        rc = ERR_NOMEM;
        goto out;
    }
    if ((rc = get_strs(&a, "tokenizer.ggml.tokens", tokens, token_lens, err, err_len)))
        goto out;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &a) == 0) {
        if (a.n != n) {
            rc = err_setf(err, err_len, ERR_CORRUPT, "tokenizer.ggml.scores has %llu entries, expected %zu",
                      (unsigned long long)a.n, n);
            goto out;
        }
        if (!(scores = malloc(n * sizeof *scores))) {
            rc = ERR_NOMEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t iv;
            if (gguf_arr_f32(&a, i, &scores[i]) == 0)
                continue;
            if (gguf_arr_i64(&a, i, &iv) == 0) { /* llama.cpp accepts i32 scores */
                scores[i] = (float)iv;
                continue;
            }
            rc = err_setf(err, err_len, ERR_CORRUPT, "tokenizer.ggml.scores[%zu] is not a number", i);
            goto out;
        }
    }
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &a) == 0) {
        if (a.n != n) {
            rc = err_setf(err, err_len, ERR_CORRUPT,
                      "tokenizer.ggml.token_type has %llu entries, expected %zu",
                      (unsigned long long)a.n, n);
            goto out;
        }
        if (!(types = malloc(n * sizeof *types))) {
            rc = ERR_NOMEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t iv;
            if (gguf_arr_i64(&a, i, &iv) || iv < 0 || iv > 6) {
                rc = err_setf(err, err_len, ERR_CORRUPT, "tokenizer.ggml.token_type[%zu] is not 0..6", i);
                goto out;
            }
            types[i] = (int32_t)iv;
        }
    }
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &a) == 0) {
        if (a.elem_type != GGUF_VT_STRING || a.n > TOK_MAX_MERGES) {
            rc = err_setf(err, err_len, ERR_CORRUPT, "tokenizer.ggml.merges is not a string array");
            goto out;
        }
        d.n_merges = (size_t)a.n;
        merges = malloc((d.n_merges ? d.n_merges : 1) * sizeof *merges);
        merge_lens = malloc((d.n_merges ? d.n_merges : 1) * sizeof *merge_lens);
        if (!merges || !merge_lens) {
            rc = ERR_NOMEM;
            goto out;
        }
        if ((rc = get_strs(&a, "tokenizer.ggml.merges", merges, merge_lens, err, err_len)))
            goto out;
    }
    if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", &d.bos_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.eos_token_id", &d.eos_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.eot_token_id", &d.eot_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.eom_token_id", &d.eom_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.unknown_token_id", &d.unk_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.padding_token_id", &d.pad_id, err, err_len)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_bos_token", &d.add_bos, err, err_len)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &d.add_eos, err, err_len)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.seperator_token_id", &d.sep_id, err, err_len)) ||
        (rc = get_id(g, "tokenizer.ggml.cls_token_id", &d.cls_id, err, err_len)) ||
        (rc = get_flag(g, "tokenizer.ggml.normalizer.lowercase", &d.lowercase, err, err_len)) ||
        (rc = get_flag(g, "tokenizer.ggml.normalizer.strip_accents", &d.strip_accents, err,
                       err_len)))
        goto out;
    d.model = model;
    d.pre = pre;
    d.n_tokens = n;
    d.tokens = tokens;
    d.token_lens = token_lens;
    d.scores = scores;
    d.token_types = types;
    d.merges = merges;
    d.merge_lens = merge_lens;
    rc = tok_new(&d, out);
    if (rc == ERR_UNSUPPORTED)
        err_setf(err, err_len, rc, "unsupported tokenizer (model '%s', pre '%s')", model,
             pre ? pre : "default");
    else if (rc)
        err_setf(err, err_len, rc, "cannot build the tokenizer: %s", err_msg(rc));
out:
    free(model);
    free(pre);
    free(tokens);
    free(token_lens);
    free(merges);
    free(merge_lens);
    free(scores);
    free(types);
    return rc;
}

int tok_gguf_chat_new(const struct gguf *g, const struct tok *t, struct chat_tmpl **out)
{
    char *src = NULL;
    int rc = get_cstr(g, "tokenizer.chat_template", &src, NULL, 0);
    if (rc)
        return rc;
    rc = chat_tmpl_new(src, t, out);
    free(src);
    return rc;
}
