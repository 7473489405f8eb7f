/*
 * gen.c - defaults and release of the generation contract's types (gen.h).
 */
#include "text/gen.h"

#include <stdlib.h>
#include <string.h>

void smp_params_init(struct smp_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0;
    p->top_p = 1.0;
    p->repetition_penalty = 1.0;
    p->n_top_logprobs = -1;
}

const char *stop_finish_name(enum stop_finish f)
{
    switch (f) {
    case STOP_FINISH_STOP: return "stop";
    case STOP_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

void gen_params_release(struct gen_params *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < STOP_MAX; i++)
        free(p->stop[i]);
    free(p->bias);
    gram_unref(p->grammar);
    memset(p, 0, sizeof *p);
}

void gen_prompts_free(struct gen_prompt *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++)
        free(p[i].ids);
    free(p);
}
