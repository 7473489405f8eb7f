/*
 * params_int.h - private to openai/: the field readers the request parsers
 * (params.c, tools.c, format.c) share, so every field error reads alike.
 */
#ifndef OPENAI_PARAMS_INT_H
#define OPENAI_PARAMS_INT_H

#include <jansson.h>

/* The member, or NULL when absent or JSON null. */
json_t *gp_member(const json_t *body, const char *key);
/* "an object", "a string", ... as OpenAI's messages name JSON types. */
const char *gp_type_name(const json_t *v);

#endif
