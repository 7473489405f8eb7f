/*
 * tokens.c - tokenizer-only GGUF loads and exact prompt counts (see tokens.h).
 */
#include "jobd/tokens/tokens.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "text/gguf.h"
#include "text/tok_gguf.h"
#include "openai/prompt.h"
#include "openai/responses.h"

struct tok_entry {
    char name[129];
    char path[1024];
    int state;              /* 0 not loaded, 1 loaded, -1 failed */
    char why[1300];         /* failed: the path and the loader's message */
    struct gguf *g;
    struct tok *tok;
    struct chat_tmpl *tmpl; /* NULL: the file has no usable chat template */
};

struct tokens {
    pthread_mutex_t mu;
    struct tok_entry e[TOKENS_MAX_MODELS];
    size_t n;
};

int tokens_new(const char *spec, struct tokens **out, char *err, size_t err_len)
{
    struct tokens *t = calloc(1, sizeof *t);
    if (!t)
        return ERR_NOMEM;
    pthread_mutex_init(&t->mu, NULL);
    const char *p = spec ? spec : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nl = eq ? (size_t)(eq - p) : 0, pl = eq ? len - nl - 1 : 0;
        if (!eq || nl == 0 || nl >= sizeof t->e[0].name || pl == 0 || pl >= sizeof t->e[0].path) {
            snprintf(err, err_len, "--tokenizer: '%.*s' is not NAME=PATH.gguf", (int)(len > 200 ? 200 : len), p);
            tokens_free(t);
            return ERR_INVAL;
        }
        if (t->n == TOKENS_MAX_MODELS) {
            snprintf(err, err_len, "--tokenizer: at most %d models", TOKENS_MAX_MODELS);
            tokens_free(t);
            return ERR_INVAL;
        }
        struct tok_entry *x = &t->e[t->n];
        snprintf(x->name, sizeof x->name, "%.*s", (int)nl, p);
        snprintf(x->path, sizeof x->path, "%.*s", (int)pl, eq + 1);
        for (size_t i = 0; i < t->n; i++)
            if (!strcmp(t->e[i].name, x->name)) {
                snprintf(err, err_len, "--tokenizer: model '%s' named twice", x->name);
                tokens_free(t);
                return ERR_INVAL;
            }
        t->n++;
        p = end ? end + 1 : p + len;
    }
    *out = t;
    return 0;
}

void tokens_free(struct tokens *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        chat_tmpl_free(t->e[i].tmpl);
        tok_free(t->e[i].tok);
        gguf_free(t->e[i].g);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static struct tok_entry *find(const struct tokens *t, const char *model)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (!strcmp(t->e[i].name, model))
            return (struct tok_entry *)&t->e[i];
    return NULL;
}

int tokens_has(const struct tokens *t, const char *model)
{
    return find(t, model) != NULL;
}

/* Load x once (under the mutex). 0 loaded, ERR_UNSUPPORTED failed. */
static int load(struct tokens *t, struct tok_entry *x)
{
    pthread_mutex_lock(&t->mu);
    if (x->state == 0) {
        char err[200] = "";
        int rc = gguf_open(x->path, &x->g, err, sizeof err);
        if (!rc)
            rc = tok_gguf_new(x->g, &x->tok, err, sizeof err);
        if (!rc && tok_gguf_chat_new(x->g, x->tok, &x->tmpl) != 0)
            x->tmpl = NULL; /* completions still count; chat bodies answer ERR_INVAL */
        if (rc) {
            snprintf(x->why, sizeof x->why, "%s: %s", x->path, err[0] ? err : err_msg(rc));
            log_error("tokenizer for model '%s' not loaded: %s", x->name, x->why);
            x->state = -1;
        } else {
            log_info("tokenizer for model '%s' loaded from %s", x->name, x->path);
            x->state = 1;
        }
    }
    int ok = x->state == 1;
    pthread_mutex_unlock(&t->mu);
    return ok ? 0 : ERR_UNSUPPORTED;
}

int tokens_count(struct tokens *t, const char *model, const char *endpoint, const json_t *body,
                 int64_t *n, char *err, size_t err_len)
{
    struct tok_entry *x = find(t, model);
    if (!x)
        return ERR_NOTFOUND;
    if (load(t, x)) {
        snprintf(err, err_len, "%s", x->why);
        return ERR_UNSUPPORTED;
    }
    int resp = strcmp(endpoint, "/v1/responses") == 0;
    enum gp_endpoint ep = resp || strcmp(endpoint, "/v1/chat/completions") == 0 ? GP_CHAT
                                                                                : GP_COMPLETIONS;
    struct gp_request gp;
    struct problem ge;
    memset(&ge, 0, sizeof ge);
    json_t *chat = NULL; /* a Responses body's chat body */
    int rc = resp ? oresp_to_chat(body, &chat, &ge) : 0;
    if (rc == 0 && chat)
        body = chat;
    if (rc == 0)
        rc = gp_parse(body, ep, tok_n_vocab(x->tok), &gp, &ge);
    if (rc) {
        if (chat)
            oresp_problem_from_chat(&ge);
        snprintf(err, err_len, "%s", ge.message[0] ? ge.message : err_msg(rc));
        json_decref(chat);
        return rc;
    }
    /* the context check is the worker's business: count whatever the length */
    struct prompt_model m = {x->tok, x->tmpl, (size_t)1 << 30};
    struct gen_prompt *pr = NULL;
    size_t n_pr = 0;
    rc = prompt_build(&m, ep, body, &gp, &pr, &n_pr, &ge);
    gp_release(&gp);
    if (rc && chat)
        oresp_problem_from_chat(&ge);
    json_decref(chat);
    if (rc) {
        snprintf(err, err_len, "%s", ge.message[0] ? ge.message : err_msg(rc));
        return rc;
    }
    int64_t sum = 0;
    for (size_t i = 0; i < n_pr; i++)
        sum += (int64_t)pr[i].n;
    gen_prompts_free(pr, n_pr);
    *n = sum;
    return 0;
}
