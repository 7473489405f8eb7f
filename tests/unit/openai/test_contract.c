/* test_contract.c - the request-body contract, worker side: every case of
 * tests/fixtures/contract/bodies.jsonl through the parsers the worker runs
 * (gp_parse and chat_msgs_from_body, as oreq_sched_add and prompt_build
 * call them; oembed_body_parse, as oembed_prepare does; oresp_check for
 * /v1/responses, the translation oreq_sched_add runs first), with a model's
 * vocabulary and width known. tests/py/test_contract.py runs the same file
 * through jobd's upload validation; both must give each case's verdict,
 * code and param, so the two sides cannot drift. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/problem.h"
#include "openai/chat_msgs.h"
#include "openai/embed.h"
#include "openai/params.h"
#include "openai/responses.h"
#include "tests/th.h"

#define CORPUS "tests/fixtures/contract/bodies.jsonl"
#define N_VOCAB 32000 /* a model's: the corpus's valid token ids are below it */
#define N_EMBD 1024

/* The worker's verdict on body: 0, or ERR_INVAL with *e. */
static int worker_verdict(const char *endpoint, const json_t *body, struct problem *e)
{
    if (strcmp(endpoint, "/v1/embeddings") == 0) {
        struct oembed_body eb;
        int rc = oembed_body_parse(body, N_VOCAB, N_EMBD, &eb, e);
        if (rc == 0)
            oembed_body_release(&eb);
        return rc;
    }
    if (strcmp(endpoint, "/v1/responses") == 0) /* the translation, then the chat rules */
        return oresp_check(body, N_VOCAB, NULL, e);
    enum gp_endpoint ep = strcmp(endpoint, "/v1/chat/completions") == 0 ? GP_CHAT : GP_COMPLETIONS;
    struct gp_request gp;
    int rc = gp_parse(body, ep, N_VOCAB, &gp, e);
    if (rc)
        return rc;
    gp_release(&gp);
    return ep == GP_CHAT ? chat_msgs_from_body(body, NULL, e) : 0;
}

TEST(contract_corpus_worker_verdicts_match)
{
    FILE *f = fopen(CORPUS, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, n_ok = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, 0, &je);
        if (!c)
            th_fail(__FILE__, __LINE__, line, "corpus line %d is not JSON: %s", n + 1, je.text);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *ep = json_string_value(json_object_get(c, "endpoint"));
        json_t *body = json_object_get(c, "body"), *x = json_object_get(c, "expect");
        CHECK(name && ep && json_is_object(body) && json_is_object(x));
        struct problem e;
        memset(&e, 0, sizeof e);
        int rc = worker_verdict(ep, body, &e);
        if (json_is_true(json_object_get(x, "ok"))) {
            if (rc)
                th_fail(__FILE__, __LINE__, name, "case '%s': want ok, got %d %s (%s): %s", name, rc,
                        e.code, e.param, e.message);
            n_ok++;
        } else {
            const char *code = json_string_value(json_object_get(x, "code"));
            const char *param = json_string_value(json_object_get(x, "param"));
            CHECK(code && param);
            if (rc != ERR_INVAL || strcmp(e.code, code) || strcmp(e.param, param))
                th_fail(__FILE__, __LINE__, name, "case '%s': want %s (%s), got %d %s (%s): %s", name,
                        code, param, rc, e.code, e.param, e.message);
            CHECK(e.message[0] != '\0');
        }
        json_decref(c);
        n++;
    }
    free(line);
    fclose(f);
    CHECK(n >= 60);
    CHECK(n_ok >= 10 && n - n_ok >= 40);
}
