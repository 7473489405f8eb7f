/*
 * test_jinja.c - the Jinja interpreter (text/jinja_*.c) through
 * chat_tmpl_new / chat_render_err against jinja2 renders of real chat
 * templates (tests/fixtures/chat/renders.json, made by
 * tests/oracle/chat_template_fixtures.py), plus its limits and errors.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "tests/th.h"
#include "text/chat.h"
#include "text/jinja.h"
#include "openai/chat_msgs.h"

static struct tok *vocab2(const char *bos, const char *eos)
{
    const char *toks[] = {"a", bos, eos};
    int32_t types[] = {TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL};
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.n_tokens = strcmp(bos, eos) ? 3 : 2;
    d.tokens = toks;
    d.token_types = types;
    d.bos_id = 1;
    d.eos_id = strcmp(bos, eos) ? 2 : 1;
    struct tok *t = NULL;
    return tok_new(&d, &t) == 0 ? t : NULL;
}

TEST(jinja_renders_match_jinja2_on_real_templates)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/chat/renders.json", 0, &e);
    CHECK(fx);
    json_t *templates = json_object_get(fx, "templates"), *convs = json_object_get(fx, "conversations");
    json_t *cases = json_object_get(fx, "cases");
    time_t now = (time_t)json_integer_value(json_object_get(fx, "now_epoch"));
    size_t ok = 0, errors = 0, n_tmpl = 0, fails = 0;
    char last_fail[256] = "";
    const char *name;
    json_t *spec;
    json_object_foreach(templates, name, spec) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/chat/templates/%s.jinja", name);
        char *src = th_slurp(path, NULL);
        CHECK(src);
        struct tok *t;
        t = vocab2(json_string_value(json_object_get(spec, "bos")),
                               json_string_value(json_object_get(spec, "eos")));
        CHECK(t);
        char perr[256];
        struct jinja_tmpl *jt = NULL;
        if (jinja_parse(src, strlen(src), &jt, perr, sizeof perr) != 0) {
            printf("  %s: does not parse: %s\n", name, perr);
            fails++;
            free(src);
            tok_free(t);
            continue;
        }
        jinja_tmpl_free(jt);
        struct chat_tmpl *ct = NULL;
        CHECK_EQ_INT(chat_tmpl_new(src, t, &ct), 0);
        CHECK_EQ_INT(chat_tmpl_format(ct), CHAT_JINJA);
        n_tmpl++;
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            if (strcmp(json_string_value(json_object_get(c, "template")), name) != 0)
                continue;
            struct chat_msgs m;
            json_t *conv = json_array_get(convs, (size_t)json_integer_value(json_object_get(c, "conv")));
            CHECK_EQ_INT(chat_msgs_parse(conv, &m), 0);
            struct buf out;
            buf_init(&out, 1 << 20);
            char why[256];
            int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
            int rc = chat_render_err(ct, m.v, m.n, gen, now, &out, why, sizeof why);
            json_t *exp = json_object_get(c, "expected");
            if (json_is_string(exp)) {
                if (rc != 0 || strcmp(out.data ? out.data : "", json_string_value(exp)) != 0) {
                    if (fails++ == 0 || strcmp(last_fail, name) != 0)
                        printf("  %s case %zu (rc %d: %s)\n    ours:   \"%s\"\n    jinja2: \"%s\"\n", name,
                               i, rc, why, out.data ? out.data : "", json_string_value(exp));
                    snprintf(last_fail, sizeof last_fail, "%s", name);
                } else {
                    ok++;
                }
            } else {
                const char *jerr = json_string_value(json_object_get(c, "error"));
                if (rc != ERR_INVAL || out.len != 0) {
                    if (fails++ == 0 || strcmp(last_fail, name) != 0)
                        printf("  %s case %zu: jinja2 failed (%s), we gave rc %d: \"%s\"\n", name, i, jerr,
                               rc, out.data ? out.data : "");
                    snprintf(last_fail, sizeof last_fail, "%s", name);
                } else if (json_is_true(json_object_get(c, "raised")) && strcmp(why, jerr) != 0) {
                    if (fails++ == 0 || strcmp(last_fail, name) != 0)
                        printf("  %s case %zu: raise_exception message \"%s\", jinja2 \"%s\"\n", name, i,
                               why, jerr);
                    snprintf(last_fail, sizeof last_fail, "%s", name);
                } else {
                    errors++;
                }
            }
            buf_release(&out);
            chat_msgs_release(&m);
        }
        chat_tmpl_free(ct);
        tok_free(t);
        free(src);
    }
    printf("  %zu templates: %zu renders and %zu errors identical, %zu differ\n", n_tmpl, ok, errors, fails);
    CHECK_EQ_INT(fails, 0);
    CHECK(n_tmpl >= 40);
    CHECK(ok >= 500);
    CHECK(errors > 0);
    json_decref(fx);
}

static struct jv from_json(struct jinja_env *e, json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jv d = jinja_dict(e);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) jinja_dict_set(e, d, k, from_json(e, v));
        return d;
    }
    case JSON_ARRAY: {
        struct jv l = jinja_list(e);
        for (size_t i = 0; i < json_array_size(j); i++)
            jinja_list_push(e, l, from_json(e, json_array_get(j, i)));
        return l;
    }
    case JSON_STRING: return jinja_str(e, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: {
        struct jv v = jinja_none();
        v.t = JV_INT;
        v.u.i = json_integer_value(j);
        return v;
    }
    case JSON_REAL: {
        struct jv v = jinja_none();
        v.t = JV_FLOAT;
        v.u.f = json_real_value(j);
        return v;
    }
    case JSON_TRUE: return jinja_bool(1);
    case JSON_FALSE: return jinja_bool(0);
    default: return jinja_none();
    }
}

/* One feature per snippet (whitespace control, Python str(), tojson, every
 * filter, test and method, loops, scoping, macros, errors) against jinja2. */
TEST(jinja_snippets_match_jinja2)
{
    json_error_t e;
    json_t *fx = json_load_file("tests/fixtures/chat/snippets.json", 0, &e);
    CHECK(fx);
    json_t *vars = json_object_get(fx, "vars"), *sn = json_object_get(fx, "snippets");
    time_t now = (time_t)json_integer_value(json_object_get(fx, "now_epoch"));
    size_t fails = 0, ok = 0;
    for (size_t i = 0; i < json_array_size(sn); i++) {
        json_t *c = json_array_get(sn, i);
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *exp = json_object_get(c, "expected");
        struct jinja_tmpl *t = NULL;
        char err[256];
        int rc = jinja_parse(src, strlen(src), &t, err, sizeof err);
        struct buf out;
        buf_init(&out, 1 << 20);
        if (rc == 0) {
            struct jinja_env *env = jinja_env_new(now);
            CHECK(env);
            const char *k;
            json_t *v;
            json_object_foreach(vars, k, v) jinja_global(env, k, from_json(env, v));
            jinja_global(env, "bos_token", jinja_str(env, "<s>", 3));
            jinja_global(env, "eos_token", jinja_str(env, "</s>", 4));
            rc = jinja_render(t, env, &out, err, sizeof err);
            jinja_env_free(env);
        }
        jinja_tmpl_free(t);
        if (json_is_string(exp)) {
            if (rc != 0 || strcmp(out.data ? out.data : "", json_string_value(exp)) != 0) {
                printf("  snippet %zu %s\n    rc %d: %s\n    ours:   \"%s\"\n    jinja2: \"%s\"\n", i, src, rc,
                       err, out.data ? out.data : "", json_string_value(exp));
                fails++;
            } else {
                ok++;
            }
        } else {
            const char *jerr = json_string_value(json_object_get(c, "error"));
            int raised = !strncmp(jerr, "TemplateError: ", 15);
            int syntax = !strncmp(jerr, "TemplateSyntaxError", 19) || !strncmp(jerr, "TemplateAssertionError", 22);
            if (syntax ? rc != ERR_PARSE
                       : (rc != ERR_INVAL || out.len != 0 || (raised && strcmp(err, jerr + 15) != 0))) {
                printf("  snippet %zu %s\n    jinja2 failed (%s); we: rc %d (%s) \"%s\"\n", i, src, jerr, rc, err,
                       out.data ? out.data : "");
                fails++;
            } else {
                ok++;
            }
        }
        buf_release(&out);
    }
    printf("  %zu snippets identical, %zu differ\n", ok, fails);
    CHECK_EQ_INT(fails, 0);
    json_decref(fx);
}

static int render_src(const char *src, size_t cap, struct buf *out, char *err, size_t errcap)
{
    struct jinja_tmpl *t = NULL;
    int rc = jinja_parse(src, strlen(src), &t, err, errcap);
    if (rc)
        return rc;
    struct jinja_env *e = jinja_env_new(0);
    if (!e) {
        jinja_tmpl_free(t);
        return ERR_NOMEM;
    }
    buf_init(out, cap);
    rc = jinja_render(t, e, out, err, errcap);
    jinja_env_free(e);
    jinja_tmpl_free(t);
    return rc;
}

static char *repeat3(const char *a, const char *mid, const char *b, int n)
{
    size_t la = strlen(a), lm = strlen(mid), lb = strlen(b);
    char *s = malloc(la * (size_t)n + lm + lb * (size_t)n + 1), *p = s;
    for (int i = 0; i < n; i++, p += la)
        memcpy(p, a, la);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < n; i++, p += lb)
        memcpy(p, b, lb);
    *p = 0;
    return s;
}

/* Templates are outside input: every limit is an error naming the line. */
TEST(jinja_limits_and_errors)
{
    char err[JINJA_ERR_MAX];
    struct buf out;
    struct jinja_tmpl *t = NULL;
    /* parse errors name the line */
    CHECK_EQ_INT(jinja_parse("a\n\n{% if x %}b", 13, &t, err, sizeof err), ERR_PARSE);
    CHECK_EQ_STR(err, "line 3: unexpected end of template, expected 'endif'");
    const char *bad[] = {"{% include 'x' %}", "{{ x.|y }}", "{{ 'abc }}", "{# open", "{{ x | nosuch }}",
                         "{% for %}{% endfor %}", "{% endif %}", "{{ (1, 2 }}", "{% raw %}x{% endraw",
                         "{{ 99999999999999999999 }}", "{{ '\\u12' }}", "{% set ns.a %}{% endset %}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = jinja_parse(bad[i], strlen(bad[i]), &t, err, sizeof err);
        if (rc != ERR_PARSE)
            th_fail(__FILE__, __LINE__, bad[i], "rc %d", rc);
        CHECK(!strncmp(err, "line 1: ", 8));
    }
    /* nesting: brackets, not-chains and blocks are capped */
    char *deep = repeat3("(", "1", ")", 200);
    char *src = malloc(strlen(deep) + 8);
    sprintf(src, "{{ %s }}", deep);
    CHECK_EQ_INT(jinja_parse(src, strlen(src), &t, err, sizeof err), ERR_PARSE);
    free(src);
    free(deep);
    deep = repeat3("not ", "x", "", 500);
    src = malloc(strlen(deep) + 8);
    sprintf(src, "{{ %s }}", deep);
    CHECK_EQ_INT(jinja_parse(src, strlen(src), &t, err, sizeof err), ERR_DEPTH);
    free(src);
    free(deep);
    deep = repeat3("{% if 1 %}", "x", "{% endif %}", 200);
    CHECK_EQ_INT(jinja_parse(deep, strlen(deep), &t, err, sizeof err), ERR_DEPTH);
    free(deep);
    /* long left-leaning chains parse flat but evaluate recursively: capped */
    deep = repeat3("", "{{ 1", " + 1", 100000);
    src = malloc(strlen(deep) + 4);
    sprintf(src, "%s }}", deep);
    CHECK_EQ_INT(render_src(src, 1 << 10, &out, err, sizeof err), ERR_INVAL);
    CHECK(strstr(err, "nested more than") != NULL);
    buf_release(&out);
    free(src);
    free(deep);
    CHECK_EQ_INT(render_src("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}"
                            "{% endfor %}{{ ns.l == ns.l }}{{ ns.l | tojson | length > 0 }}", 1 << 20, &out, err,
                            sizeof err), ERR_INVAL); /* tojson refuses the depth; == does not recurse forever */
    buf_release(&out);
    /* size */
    src = calloc(JINJA_MAX_SOURCE + 2, 1);
    memset(src, 'a', JINJA_MAX_SOURCE + 1);
    CHECK_EQ_INT(jinja_parse(src, JINJA_MAX_SOURCE + 1, &t, err, sizeof err), ERR_TOOBIG);
    free(src);
    /* runtime errors: the line, or raise_exception's message verbatim */
    CHECK_EQ_INT(render_src("a\n{{ u.x }}", 1 << 10, &out, err, sizeof err), ERR_INVAL);
    CHECK_EQ_STR(err, "line 2: 'u' is undefined");
    CHECK_EQ_INT(out.len, 0);
    buf_release(&out);
    CHECK_EQ_INT(render_src("ok{{ raise_exception('No system role, sorry') }}", 1 << 10, &out, err, sizeof err),
                 ERR_INVAL);
    CHECK_EQ_STR(err, "No system role, sorry");
    CHECK_EQ_INT(out.len, 0);
    buf_release(&out);
    /* loop iterations, macro recursion, output, memory */
    CHECK_EQ_INT(render_src("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                            1 << 10, &out, err, sizeof err), ERR_INVAL);
    CHECK(strstr(err, "loop iterations") != NULL);
    buf_release(&out);
    CHECK_EQ_INT(render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", 1 << 10, &out, err,
                            sizeof err), ERR_INVAL);
    CHECK(strstr(err, "nested more than") != NULL);
    buf_release(&out);
    CHECK_EQ_INT(render_src("{% for i in range(1000) %}xxxx{% endfor %}", 100, &out, err, sizeof err), ERR_TOOBIG);
    CHECK_EQ_INT(out.len, 0);
    buf_release(&out);
    CHECK_EQ_INT(render_src("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                            "{% endfor %}", 1 << 20, &out, err, sizeof err), ERR_INVAL);
    CHECK(strstr(err, "string too long") != NULL);
    buf_release(&out);
    CHECK_EQ_INT(render_src("{% set ns = namespace(l=[]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l + [1] %}"
                            "{% endfor %}", 1 << 20, &out, err, sizeof err), ERR_INVAL);
    CHECK(strstr(err, "bytes of memory") != NULL);
    buf_release(&out);
}
