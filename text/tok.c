/*
 * tok.c - the tokenizers (see tok.h for the contract).
 *
 * Layout of struct tok: every token text is copied into one arena and found
 * by an open-addressing hash table (FNV-1a) of ids. BPE merges are stored as
 * the concatenated string "leftright" plus the length of "left", hashed the
 * same way, so a candidate pair of adjacent symbols (always a contiguous span
 * of the mapped text) is looked up without building a key.
 *
 * Both merge loops follow llama.cpp: a doubly linked list of symbols and a
 * binary heap of candidate pairs; stale candidates (a side already merged)
 * are skipped when popped. BPE pops the lowest rank, SPM the highest score,
 * ties to the leftmost pair.
 *
 * Pre-tokenizer regexes are compiled once (PCRE2 UTF|UCP, JIT when
 * available); each encode call gets its own match data, so encoding is
 * thread-safe. Regexes apply in sequence: each one re-splits every piece of
 * the previous one, and both matches and the gaps between them become pieces.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tok.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gram/gram.h"
#include "common/hash.h"
#include "common/utf8.h"
#include "text/tok_unicode.h"

#define MAX_REGEX 4

struct htab {
    uint32_t *slots;   /* index+1, 0 = empty */
    size_t mask;
};

struct tok {
    enum tok_model model;
    size_t n_vocab;
    char *arena;            /* all token texts, then all merge strings */
    size_t *tok_off;        /* (n_vocab) */
    uint32_t *tok_len;      /* (n_vocab) */
    float *scores;          /* (n_vocab) */
    uint8_t *types;         /* (n_vocab) enum tok_type */
    uint8_t *eog;           /* (n_vocab) 1 = end of generation */
    struct htab tok_map;

    size_t n_merges;
    size_t *m_off;          /* (n_merges) "leftright" in arena */
    uint32_t *m_len, *m_split;
    struct htab merge_map;

    int32_t *specials;      /* CONTROL/USER_DEFINED/UNKNOWN ids, longest text first */
    size_t n_specials;

    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    int32_t sep;            /* bert: [SEP] appended with TOK_ADD_SPECIAL, -1 none */
    int lowercase, strip_accents; /* bert */
    size_t max_tok_len;     /* bytes of the longest token text (WordPiece matching) */

    pcre2_code *re[MAX_REGEX];
    int n_re;

    /* gpt2 byte map: byte -> UTF-8 of its code point; code point -> byte */
    unsigned char bmap[256][2];
    uint8_t bmap_len[256];
    int16_t cp_byte[0x180];

    /* token masks (tok_gram_vocab): built on first use, under gv_mu */
    pthread_mutex_t gv_mu;
    int gv_mu_ok;
    struct gram_vocab *gv;
    int32_t *eog_ids;
    size_t n_eog_ids;
};

/* ---- small utilities ------------------------------------------------------ */

static int htab_init(struct htab *h, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 1)
        cap <<= 1;
    h->slots = calloc(cap, sizeof *h->slots);
    if (!h->slots)
        return ERR_NOMEM;
    h->mask = cap - 1;
    return 0;
}

size_t tok_utf8_seq(const unsigned char *s, size_t len)
{
    if (len == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2; cp = c & 0x1F; min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3; cp = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4; cp = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* Could s[0..len) still become a valid sequence with more bytes? */
static int utf8_incomplete(const unsigned char *s, size_t len)
{
    if (len == 0 || len >= 4)
        return 0;
    unsigned c = s[0];
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else return 0;
    if (len >= need)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    /* second-byte range restrictions (overlong, surrogate, > U+10FFFF) */
    if (len >= 2) {
        unsigned d = s[1];
        if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) ||
            (c == 0xF4 && d > 0x8F))
            return 0;
    }
    return 1;
}

int tok_utf8_sanitize(const char *s, size_t len, struct buf *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    int rc;
    while (i < len) {
        size_t n = tok_utf8_seq(p + i, len - i);
        if (n) {
            i += n;
            continue;
        }
        if ((rc = buf_append(out, s + run, i - run)) < 0)
            return rc;
        if ((rc = buf_append(out, "\xEF\xBF\xBD", 3)) < 0)
            return rc;
        i++;
        run = i;
    }
    return buf_append(out, s + run, len - run);
}

/* ---- vocabulary ------------------------------------------------------------ */

static const char *tstr(const struct tok *t, int32_t id) { return t->arena + t->tok_off[id]; }

int32_t tok_find(const struct tok *t, const char *s, size_t len)
{
    uint64_t h = hash_fnv(s, len);
    for (size_t i = h & t->tok_map.mask;; i = (i + 1) & t->tok_map.mask) {
        uint32_t v = t->tok_map.slots[i];
        if (!v)
            return -1;
        int32_t id = (int32_t)(v - 1);
        if (t->tok_len[id] == len && memcmp(tstr(t, id), s, len) == 0)
            return id;
    }
}

static int merge_rank(const struct tok *t, const char *s, size_t len, size_t split)
{
    uint64_t h = hash_fnv(s, len) ^ (split * 0x9E3779B97F4A7C15ull);
    for (size_t i = h & t->merge_map.mask;; i = (i + 1) & t->merge_map.mask) {
        uint32_t v = t->merge_map.slots[i];
        if (!v)
            return -1;
        size_t m = v - 1;
        if (t->m_len[m] == len && t->m_split[m] == split &&
            memcmp(t->arena + t->m_off[m], s, len) == 0)
            return (int)m;
    }
}

/* Types that a merge may produce in SPM (sentencepiece's pieces_: normal,
 * user-defined, unused; control/byte/unknown live apart). */
static int spm_mergeable(const struct tok *t, int32_t id)
{
    uint8_t ty = t->types[id];
    return ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNUSED ||
           ty == TOK_TYPE_UNDEFINED;
}

struct pre_def {
    const char *names[12];
    const char *re[MAX_REGEX];
    int ignore_merges, add_bos, clean_spaces;
};

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3_HEAD                                                            \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const struct pre_def pre_defs[] = {
    {{"default", NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0, 1},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      NULL},
     {RE_LLAMA3_HEAD "\\p{N}{1,3}|" RE_LLAMA3_TAIL, NULL}, 1, 1, 1},
    {{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "stablelm2", "megrez", NULL},
     {RE_LLAMA3_HEAD "\\p{N}|" RE_LLAMA3_TAIL, NULL}, 0, 0, 0},
    {{"smollm", "starcoder", "refact", "codeshell", "exaone", "minerva", NULL},
     {"\\p{N}", RE_GPT2, NULL}, 0, 0, 0},
    {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", NULL}, {RE_GPT2, NULL}, 0, 0, 1},
};

static int hash_tokens(struct tok *t)
{
    int rc = htab_init(&t->tok_map, t->n_vocab);
    if (rc < 0)
        return rc;
    for (size_t id = 0; id < t->n_vocab; id++) {
        const char *s = tstr(t, (int32_t)id);
        size_t len = t->tok_len[id];
        uint64_t h = hash_fnv(s, len);
        size_t i = h & t->tok_map.mask;
        for (;; i = (i + 1) & t->tok_map.mask) {
            uint32_t v = t->tok_map.slots[i];
            if (!v)
                break;
            if (t->tok_len[v - 1] == len && memcmp(tstr(t, (int32_t)(v - 1)), s, len) == 0)
                return ERR_CORRUPT; /* duplicate token text */
        }
        t->tok_map.slots[i] = (uint32_t)id + 1;
    }
    return 0;
}

static int hash_merges(struct tok *t)
{
    int rc = htab_init(&t->merge_map, t->n_merges);
    if (rc < 0)
        return rc;
    for (size_t m = 0; m < t->n_merges; m++) {
        const char *s = t->arena + t->m_off[m];
        uint64_t h = hash_fnv(s, t->m_len[m]) ^ (t->m_split[m] * 0x9E3779B97F4A7C15ull);
        size_t i = h & t->merge_map.mask;
        int dup = 0;
        for (;; i = (i + 1) & t->merge_map.mask) {
            uint32_t v = t->merge_map.slots[i];
            if (!v)
                break;
            if (t->m_len[v - 1] == t->m_len[m] && t->m_split[v - 1] == t->m_split[m] &&
                memcmp(t->arena + t->m_off[v - 1], s, t->m_len[m]) == 0) {
                dup = 1; /* keep the first (lowest) rank, as std::unordered_map::emplace */
                break;
            }
        }
        if (!dup)
            t->merge_map.slots[i] = (uint32_t)m + 1;
    }
    return 0;
}

static void build_byte_map(struct tok *t)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp;
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            cp = b;
        else
            cp = 0x100 + n++;
        if (cp < 0x80) {
            t->bmap[b][0] = (unsigned char)cp;
            t->bmap_len[b] = 1;
        } else {
            t->bmap[b][0] = (unsigned char)(0xC0 | (cp >> 6));
            t->bmap[b][1] = (unsigned char)(0x80 | (cp & 0x3F));
            t->bmap_len[b] = 2;
        }
    }
    for (int i = 0; i < 0x180; i++)
        t->cp_byte[i] = -1;
    for (int b = 0, k = 0; b < 256; b++) {
        int cp;
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            cp = b;
        else
            cp = 0x100 + k++;
        t->cp_byte[cp] = (int16_t)b;
    }
}

static int cmp_special_len(const void *a, const void *b, void *ctx)
{
    const struct tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok_len[x] != t->tok_len[y])
        return t->tok_len[x] > t->tok_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int compile_regexes(struct tok *t, const struct pre_def *pd)
{
    for (int i = 0; i < MAX_REGEX && pd->re[i]; i++) {
        int errcode;
        PCRE2_SIZE erroff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pd->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &errcode,
                                       &erroff, NULL);
        if (!re)
            return ERR_INTERNAL;
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter if JIT is unavailable */
        t->re[t->n_re++] = re;
    }
    return 0;
}

void tok_vocab_desc_init(struct tok_vocab_desc *d)
{
    memset(d, 0, sizeof *d);
    d->bos_id = d->eos_id = d->eot_id = d->eom_id = d->unk_id = d->pad_id = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
    d->sep_id = d->cls_id = -1;
    d->lowercase = d->strip_accents = -1;
}

/* Tokens that end generation wherever they are in the vocabulary
 * (llama.cpp's list); may_be_eot: the first one found present becomes eot
 * when the GGUF names none (the others end a stream or a tool call, not a
 * turn). */
static const struct {
    const char *name;
    int may_be_eot;
} eog_names[] = {
    {"<|eot_id|>", 1},      {"<|im_end|>", 1}, {"<|end|>", 1},
    {"<end_of_turn>", 1},   {"<|endoftext|>", 1}, {"<|eom_id|>", 0},
    {"<|end_of_text|>", 0}, {"<EOT>", 1},      {"</s>", 0},
    {"<eos>", 0},           {"<|return|>", 0}, {"<|call|>", 0},
};

/* t->model from d->model, and for gpt2 the pre-tokenizer *pd. 0,
 * ERR_INVAL (unknown model, merges missing), ERR_UNSUPPORTED (unknown pre). */
static int tok_pick_model(struct tok *t, const struct tok_vocab_desc *d, const struct pre_def **pd)
{
    if (strcmp(d->model, "llama") == 0) {
        t->model = TOK_MODEL_SPM;
    } else if (strcmp(d->model, "bert") == 0) {
        t->model = TOK_MODEL_WPM;
    } else if (strcmp(d->model, "gpt2") == 0) {
        t->model = TOK_MODEL_BPE;
        if (!d->merges && d->n_merges)
            return ERR_INVAL;
        const char *pre = d->pre && d->pre[0] ? d->pre : "default";
        for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0] && !*pd; i++)
            for (int j = 0; pre_defs[i].names[j]; j++)
                if (strcmp(pre_defs[i].names[j], pre) == 0)
                    *pd = &pre_defs[i];
        if (!*pd)
            return ERR_UNSUPPORTED;
    } else {
        return ERR_INVAL;
    }
    return 0;
}

/* Allocate the per-token tables and the arena (sized for the token texts
 * and the n_merges merges, which tok_copy_merges adds after them), and
 * copy the texts, scores and types. *arena_used gets the bytes used.
 * 0, ERR_INVAL (a NULL text or merge), ERR_TOOBIG (one over
 * TOK_MAX_TOKEN_BYTES), ERR_NOMEM. */
static int tok_copy_texts(struct tok *t, const struct tok_vocab_desc *d, size_t n_merges,
                          size_t *arena_used)
{
    size_t total = 0;
    for (size_t i = 0; i < d->n_tokens; i++) {
        if (!d->tokens[i])
            return ERR_INVAL;
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        if (len > TOK_MAX_TOKEN_BYTES)
            return ERR_TOOBIG;
        total += len;
    }
    for (size_t i = 0; i < n_merges; i++) {
        if (!d->merges[i])
            return ERR_INVAL;
        size_t len = d->merge_lens ? d->merge_lens[i] : strlen(d->merges[i]);
        if (len > TOK_MAX_TOKEN_BYTES)
            return ERR_TOOBIG;
        total += len;
    }
    t->arena = malloc(total + 1);
    t->tok_off = malloc(t->n_vocab * sizeof *t->tok_off);
    t->tok_len = malloc(t->n_vocab * sizeof *t->tok_len);
    t->scores = calloc(t->n_vocab, sizeof *t->scores);
    t->types = malloc(t->n_vocab);
    t->eog = calloc(t->n_vocab, 1);
    t->specials = malloc(t->n_vocab * sizeof *t->specials);
    t->m_off = malloc((n_merges + 1) * sizeof *t->m_off);
    t->m_len = malloc((n_merges + 1) * sizeof *t->m_len);
    t->m_split = malloc((n_merges + 1) * sizeof *t->m_split);
    if (!t->arena || !t->tok_off || !t->tok_len || !t->scores || !t->types || !t->eog ||
        !t->specials || !t->m_off || !t->m_len || !t->m_split)
        return ERR_NOMEM;
    size_t pos = 0;
    for (size_t i = 0; i < d->n_tokens; i++) {
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        memcpy(t->arena + pos, d->tokens[i], len);
        t->tok_off[i] = pos;
        t->tok_len[i] = (uint32_t)len;
        pos += len;
        t->scores[i] = d->scores ? d->scores[i] : 0.0f;
        int32_t ty = d->token_types ? d->token_types[i] : TOK_TYPE_NORMAL;
        t->types[i] = (uint8_t)(ty >= 0 && ty <= TOK_TYPE_BYTE ? ty : TOK_TYPE_UNDEFINED);
    }
    *arena_used = pos;
    return 0;
}

/* The merges "left right" into the arena from pos, split at the first
 * space after position 0. 0 or ERR_CORRUPT (a merge without that space). */
static int tok_copy_merges(struct tok *t, const struct tok_vocab_desc *d, size_t n_merges,
                           size_t pos)
{
    size_t nm = 0;
    for (size_t i = 0; i < n_merges; i++) {
        const char *s = d->merges[i];
        size_t len = d->merge_lens ? d->merge_lens[i] : strlen(s);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            return ERR_CORRUPT;
        size_t l = (size_t)(sp - s);
        memcpy(t->arena + pos, s, l);
        memcpy(t->arena + pos + l, sp + 1, len - l - 1);
        t->m_off[nm] = pos;
        t->m_len[nm] = (uint32_t)(len - 1);
        t->m_split[nm] = (uint32_t)l;
        pos += len - 1;
        nm++;
    }
    t->n_merges = nm;
    return 0;
}

/* Special ids and flags: the model's defaults (pd for gpt2), then what d
 * gives; out-of-range ids keep the default. Can't fail. */
static void tok_set_specials(struct tok *t, const struct tok_vocab_desc *d,
                             const struct pre_def *pd)
{
    if (t->model == TOK_MODEL_SPM) {
        t->bos = 1; t->eos = 2; t->unk = 0;
        t->add_bos = 1; t->add_space_prefix = 1;
    } else if (t->model == TOK_MODEL_WPM) { /* llama.cpp's defaults for "bert" */
        t->bos = 101; t->eos = -1; t->unk = 100;
        t->add_bos = 1; t->add_space_prefix = 1; /* decode: drop the first "▁"'s space */
    } else {
        t->bos = t->eos = t->unk = -1;
        t->add_bos = pd->add_bos;
        t->ignore_merges = pd->ignore_merges;
        t->clean_spaces = pd->clean_spaces;
    }
    t->eot = t->eom = t->pad = t->sep = -1;
    if (t->model == TOK_MODEL_WPM) {
        t->sep = 102;
        t->pad = 0;
        if (d->bos_id < 0 && d->cls_id >= 0 && (uint64_t)d->cls_id < t->n_vocab)
            t->bos = (int32_t)d->cls_id;
        t->lowercase = d->lowercase != 0; /* absent: lowercase, as llama.cpp always does */
        t->strip_accents = d->strip_accents >= 0 ? d->strip_accents != 0 : t->lowercase;
    }
#define SET_ID(field, v) \
    if ((v) >= 0 && (uint64_t)(v) < t->n_vocab) t->field = (int32_t)(v)
    SET_ID(bos, d->bos_id);
    SET_ID(eos, d->eos_id);
    SET_ID(eot, d->eot_id);
    SET_ID(eom, d->eom_id);
    SET_ID(unk, d->unk_id);
    SET_ID(pad, d->pad_id);
    SET_ID(sep, d->sep_id);
#undef SET_ID
    if (t->sep >= (int32_t)t->n_vocab) t->sep = -1;
    if (t->bos >= (int32_t)t->n_vocab) t->bos = -1;
    if (t->eos >= (int32_t)t->n_vocab) t->eos = -1;
    if (t->unk >= (int32_t)t->n_vocab) t->unk = -1;
    if (d->add_bos >= 0) t->add_bos = d->add_bos != 0;
    if (d->add_eos >= 0) t->add_eos = d->add_eos != 0;
    if (d->add_space_prefix >= 0) t->add_space_prefix = d->add_space_prefix != 0;
}

/* The end-of-generation set: eog_names present in the vocabulary (forced
 * CONTROL, as llama.cpp), eos, eot and eom; the first may_be_eot name
 * present becomes eot when none was given. Can't fail. */
static void tok_mark_eog(struct tok *t)
{
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        const char *name = eog_names[i].name;
        int32_t id = tok_find(t, name, strlen(name));
        if (id < 0)
            continue;
        if (t->eot < 0 && eog_names[i].may_be_eot)
            t->eot = id;
        /* llama.cpp ORs the CONTROL attribute in, and CONTROL wins over
         * USER_DEFINED wherever both are tested (Gemma's "</s>" is
         * USER_DEFINED: not cut out of plain text) */
        if (t->types[id] != TOK_TYPE_CONTROL)
            t->types[id] = TOK_TYPE_CONTROL;
        t->eog[id] = 1;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
}

int tok_new(const struct tok_vocab_desc *d, struct tok **out)
{
    int rc = 0;
    struct tok *t = NULL;
    const struct pre_def *pd = NULL;

    if (!d || !d->model || !d->tokens || d->n_tokens == 0)
        return ERR_INVAL;
    if (d->n_tokens > TOK_MAX_VOCAB || d->n_merges > TOK_MAX_MERGES)
        return ERR_TOOBIG;
    t = calloc(1, sizeof *t);
    if (!t)
        return ERR_NOMEM;
    if (pthread_mutex_init(&t->gv_mu, NULL) != 0) {
        free(t);
        return ERR_NOMEM;
    }
    t->gv_mu_ok = 1;
    if ((rc = tok_pick_model(t, d, &pd)))
        goto out;
    t->n_vocab = d->n_tokens;
    size_t n_merges = t->model == TOK_MODEL_BPE ? d->n_merges : 0, used;
    if ((rc = tok_copy_texts(t, d, n_merges, &used)) || (rc = tok_copy_merges(t, d, n_merges, used)))
        goto out;
    if ((rc = hash_tokens(t)) < 0 || (rc = hash_merges(t)) < 0)
        goto out;
    for (size_t i = 0; i < t->n_vocab; i++)
        if (t->tok_len[i] > t->max_tok_len)
            t->max_tok_len = t->tok_len[i];
    tok_set_specials(t, d, pd);
    tok_mark_eog(t);

    /* the special tokens, longest first (cut out of text before the model runs) */
    for (size_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) &&
            t->tok_len[i] > 0)
            t->specials[t->n_specials++] = (int32_t)i;
    }
    qsort_r(t->specials, t->n_specials, sizeof *t->specials, cmp_special_len, t);

    if (t->model == TOK_MODEL_BPE) {
        build_byte_map(t);
        if ((rc = compile_regexes(t, pd)) < 0)
            goto out;
    }
    *out = t;
    t = NULL;
out:
    tok_free(t);
    return rc;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->arena);
    free(t->tok_off);
    free(t->tok_len);
    free(t->scores);
    free(t->types);
    free(t->eog);
    free(t->specials);
    free(t->m_off);
    free(t->m_len);
    free(t->m_split);
    free(t->tok_map.slots);
    free(t->merge_map.slots);
    gram_vocab_free(t->gv);
    free(t->eog_ids);
    if (t->gv_mu_ok)
        pthread_mutex_destroy(&t->gv_mu);
    free(t);
}

/* ---- output array ------------------------------------------------------------ */

struct ids_out {
    int32_t *ids;
    size_t n, cap;
};

static int push_id(struct ids_out *o, int32_t id)
{
    if (o->n >= o->cap)
        return ERR_TOOBIG;
    o->ids[o->n++] = id;
    return 0;
}

/* ---- shared merge machinery ------------------------------------------------ */

struct sym {
    int prev, next;
    size_t off, len;   /* span in the working text; len 0 = merged away */
};

struct cand {
    double key;        /* lower pops first (BPE: rank; SPM: -score) */
    int left, right;
    size_t len;        /* combined length when pushed (stale check) */
};

struct heap {
    struct cand *v;
    size_t n, cap;
};

static int cand_less(const struct cand *a, const struct cand *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->left < b->left;
}

static int heap_push(struct heap *h, struct cand c)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        struct cand *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv)
            return ERR_NOMEM;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    h->v[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&h->v[i], &h->v[p]))
            break;
        struct cand tmp = h->v[i]; h->v[i] = h->v[p]; h->v[p] = tmp;
        i = p;
    }
    return 0;
}

static struct cand heap_pop(struct heap *h)
{
    struct cand top = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && cand_less(&h->v[l], &h->v[m])) m = l;
        if (r < h->n && cand_less(&h->v[r], &h->v[m])) m = r;
        if (m == i)
            break;
        struct cand tmp = h->v[i]; h->v[i] = h->v[m]; h->v[m] = tmp;
        i = m;
    }
    return top;
}

/* Per-call scratch, reused across pieces. */
struct work {
    struct sym *syms;
    size_t syms_cap;
    struct heap heap;
    struct buf text;   /* mapped / escaped text of the current piece */
};

static void work_release(struct work *w)
{
    free(w->syms);
    free(w->heap.v);
    buf_release(&w->text);
}

static int work_syms(struct work *w, size_t n)
{
    if (n <= w->syms_cap)
        return 0;
    struct sym *ns = realloc(w->syms, n * sizeof *ns);
    if (!ns)
        return ERR_NOMEM;
    w->syms = ns;
    w->syms_cap = n;
    return 0;
}

/* The merge loop both BPE and SentencePiece run over w->syms[0..n) (a linked
 * list of pieces): seed the heap with every adjacent pair, then repeatedly
 * merge the best candidate still valid (both pieces alive, unchanged and
 * adjacent), offering the new piece's pairs with its neighbours. add_cand
 * scores a pair (BPE: merge rank, SPM: vocabulary score) and pushes it. */
typedef int (*add_cand_fn)(const struct tok *t, struct work *w, int left, int right);

static int merge_syms(const struct tok *t, struct work *w, size_t n, add_cand_fn add)
{
    int rc;
    w->heap.n = 0;
    for (size_t i = 1; i < n; i++)
        if ((rc = add(t, w, (int)i - 1, (int)i)) < 0)
            return rc;
    while (w->heap.n) {
        struct cand c = heap_pop(&w->heap);
        struct sym *a = &w->syms[c.left], *b = &w->syms[c.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != c.len || a->next != c.right)
            continue;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            w->syms[b->next].prev = c.left;
        if ((rc = add(t, w, a->prev, c.left)) < 0 || (rc = add(t, w, c.left, a->next)) < 0)
            return rc;
    }
    return 0;
}

/* ---- BPE ----------------------------------------------------------------- */

static int bpe_add_cand(const struct tok *t, struct work *w, int left, int right)
{
    if (left < 0 || right < 0)
        return 0;
    const struct sym *a = &w->syms[left], *b = &w->syms[right];
    int rank = merge_rank(t, w->text.data + a->off, a->len + b->len, a->len);
    if (rank < 0)
        return 0;
    struct cand c = {(double)rank, left, right, a->len + b->len};
    return heap_push(&w->heap, c);
}

/* Tokenize one pre-tokenized piece (raw bytes). */
static int bpe_piece(const struct tok *t, struct work *w, const char *s, size_t len,
                     struct ids_out *o)
{
    int rc;
    buf_reset(&w->text);
    for (size_t i = 0; i < len; i++)
        if ((rc = buf_append(&w->text, t->bmap[(unsigned char)s[i]],
                             t->bmap_len[(unsigned char)s[i]])) < 0)
            return rc;
    const char *m = w->text.data;
    if (t->ignore_merges) {
        int32_t id = tok_find(t, m, w->text.len);
        if (id >= 0)
            return push_id(o, id);
    }
    if ((rc = work_syms(w, len)) < 0)
        return rc;
    size_t off = 0;
    for (size_t i = 0; i < len; i++) {
        size_t l = t->bmap_len[(unsigned char)s[i]];
        w->syms[i] = (struct sym){(int)i - 1, i + 1 < len ? (int)i + 1 : -1, off, l};
        off += l;
    }
    if ((rc = merge_syms(t, w, len, bpe_add_cand)) < 0)
        return rc;
    for (int i = len ? 0 : -1; i >= 0; i = w->syms[i].next) {
        const struct sym *y = &w->syms[i];
        int32_t id = tok_find(t, m + y->off, y->len);
        if (id >= 0) {
            if ((rc = push_id(o, id)) < 0)
                return rc;
            continue;
        }
        /* not in the vocab: one token per byte of the mapped text, if any (llama.cpp) */
        for (size_t k = 0; k < y->len; k++) {
            int32_t bid = tok_find(t, m + y->off + k, 1);
            if (bid >= 0 && (rc = push_id(o, bid)) < 0)
                return rc;
        }
    }
    return 0;
}

struct span {
    size_t off, len;
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static int spans_push(struct spans *s, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        struct span *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv)
            return ERR_NOMEM;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = (struct span){off, len};
    return 0;
}

/* Pre-tokenize text[0..len) (valid UTF-8) and BPE each piece. */
static int bpe_fragment(const struct tok *t, struct work *w, const char *text, size_t len,
                        struct ids_out *o)
{
    int rc = 0;
    struct spans cur = {0}, nxt = {0};
    pcre2_match_data *md = NULL;
    if ((rc = spans_push(&cur, 0, len)) < 0)
        goto out;
    for (int r = 0; r < t->n_re; r++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(t->re[r], NULL);
        if (!md) {
            rc = ERR_NOMEM;
            goto out;
        }
        nxt.n = 0;
        for (size_t k = 0; k < cur.n; k++) {
            const char *subj = text + cur.v[k].off;
            size_t slen = cur.v[k].len, start = 0, gap = 0;
            while (start < slen) {
                int mr = pcre2_match(t->re[r], (PCRE2_SPTR)subj, slen, start, PCRE2_NO_UTF_CHECK,
                                     md, NULL);
                if (mr == PCRE2_ERROR_NOMATCH)
                    break;
                if (mr < 0) {
                    rc = mr == PCRE2_ERROR_NOMEMORY ? ERR_NOMEM : ERR_INTERNAL;
                    goto out;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me <= ms) { /* empty match (cannot happen with the built-ins): step a char */
                    size_t n = tok_utf8_seq((const unsigned char *)subj + start, slen - start);
                    start += n ? n : 1;
                    continue;
                }
                if ((rc = spans_push(&nxt, cur.v[k].off + gap, ms - gap)) < 0 ||
                    (rc = spans_push(&nxt, cur.v[k].off + ms, me - ms)) < 0)
                    goto out;
                gap = start = me;
            }
            if ((rc = spans_push(&nxt, cur.v[k].off + gap, slen - gap)) < 0)
                goto out;
        }
        struct spans tmp = cur; cur = nxt; nxt = tmp;
    }
    for (size_t k = 0; k < cur.n; k++)
        if ((rc = bpe_piece(t, w, text + cur.v[k].off, cur.v[k].len, o)) < 0)
            goto out;
out:
    pcre2_match_data_free(md);
    free(cur.v);
    free(nxt.v);
    return rc;
}

/* ---- SPM ----------------------------------------------------------------- */

/* Look up the SPM piece s[0..len) among mergeable tokens. */
static int32_t spm_find(const struct tok *t, const char *s, size_t len)
{
    int32_t id = tok_find(t, s, len);
    return id >= 0 && spm_mergeable(t, id) ? id : -1;
}

static int spm_add_cand(const struct tok *t, struct work *w, int left, int right)
{
    if (left < 0 || right < 0)
        return 0;
    const struct sym *a = &w->syms[left], *b = &w->syms[right];
    int32_t id = spm_find(t, w->text.data + a->off, a->len + b->len);
    if (id < 0)
        return 0;
    struct cand c = {-(double)t->scores[id], left, right, a->len + b->len};
    return heap_push(&w->heap, c);
}

static int spm_byte(const struct tok *t, unsigned char c, struct ids_out *o)
{
    char hex[8];
    static const char digits[] = "0123456789ABCDEF";
    hex[0] = '<'; hex[1] = '0'; hex[2] = 'x';
    hex[3] = digits[c >> 4]; hex[4] = digits[c & 15]; hex[5] = '>';
    int32_t id = tok_find(t, hex, 6);
    if (id < 0)
        id = tok_find(t, (const char *)&c, 1);
    if (id < 0)
        id = t->unk;
    return id >= 0 ? push_id(o, id) : 0;
}

/* Emit the symbol text s[0..len): a token, else split along the merge that
 * made it (re-derived: the pair with a token on both sides that the merge
 * loop would have produced), else byte fallback. Symbols that are merges are
 * always tokens (merges only produce tokens), so only initial single
 * characters reach the fallback. */
static int spm_emit(const struct tok *t, const char *s, size_t len, struct ids_out *o)
{
    int32_t id = spm_find(t, s, len);
    if (id >= 0)
        return push_id(o, id);
    for (size_t i = 0; i < len; i++) {
        int rc = spm_byte(t, (unsigned char)s[i], o);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int spm_fragment(const struct tok *t, struct work *w, const char *text, size_t len,
                        int prefix, struct ids_out *o)
{
    int rc;
    buf_reset(&w->text);
    if (prefix && (rc = buf_append(&w->text, "\xE2\x96\x81", 3)) < 0)
        return rc;
    for (size_t i = 0; i < len; i++) {
        rc = text[i] == ' ' ? buf_append(&w->text, "\xE2\x96\x81", 3)
                            : buf_append_byte(&w->text, text[i]);
        if (rc < 0)
            return rc;
    }
    const char *s = w->text.data;
    size_t n = w->text.len, nsym = 0;
    if (n == 0)
        return 0;
    if ((rc = work_syms(w, n)) < 0)
        return rc;
    for (size_t off = 0; off < n;) {
        size_t l = tok_utf8_seq((const unsigned char *)s + off, n - off);
        if (!l)
            l = 1; /* cannot happen after sanitizing; be safe */
        w->syms[nsym] = (struct sym){(int)nsym - 1, -1, off, l};
        if (nsym)
            w->syms[nsym - 1].next = (int)nsym;
        nsym++;
        off += l;
    }
    if ((rc = merge_syms(t, w, nsym, spm_add_cand)) < 0)
        return rc;
    for (int i = 0; i >= 0; i = w->syms[i].next)
        if ((rc = spm_emit(t, s + w->syms[i].off, w->syms[i].len, o)) < 0)
            return rc;
    return 0;
}

/* ---- WordPiece (bert) ------------------------------------------------------- */

/* CJK ideographs that BERT splits into one-character words (llama.cpp's
 * is_chinese_char, including its 0x2B920 lower bound). */
static int wpm_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-first match of one word w[0..n) ("▁" + the word's bytes),
 * as llama.cpp's llm_tokenizer_wpm_session::tokenize: from each position
 * the longest vocabulary entry; if some position matches nothing, the
 * word's tokens are taken back and it becomes one [UNK]. */
static int wpm_word(const struct tok *t, const char *w, size_t n, struct ids_out *o)
{
    size_t start = o->n;
    int rc;
    for (size_t i = 0; i < n;) {
        size_t j = n < i + t->max_tok_len ? n : i + t->max_tok_len;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tok_find(t, w + i, j - i)) >= 0)
                break;
        if (id < 0) {
            o->n = start;
            break;
        }
        if ((rc = push_id(o, id)) < 0)
            return rc;
        i = j;
    }
    if (o->n == start && t->unk >= 0 && (rc = push_id(o, t->unk)) < 0)
        return rc;
    return 0;
}

/* One raw-text fragment (valid UTF-8): normalise, split into words, match
 * each (see tok.h). The current word is built in w->text, "▁" first. */
static int wpm_fragment(const struct tok *t, struct work *w, const char *text, size_t len,
                        struct ids_out *o)
{
    static const char phantom[3] = {'\xE2', '\x96', '\x81'};
    struct buf *b = &w->text;
    int rc;
    buf_reset(b);
    if ((rc = buf_append(b, phantom, 3)) < 0)
        return rc;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = tok_utf8_seq(p + i, len - i);
        if (n < 1 || n > 4) { /* cannot happen: the text was sanitised */
            i++;
            continue;
        }
        uint32_t c0 = utf8_decode(p + i, n);
        i += n;
        uint32_t cps[4];
        int nc = t->strip_accents ? tok_uni_nfd(c0, cps) : (cps[0] = c0, 1);
        for (int k = 0; k < nc; k++) {
            uint32_t c = cps[k];
            unsigned f = tok_uni_flags(c);
            if (f & TOK_UNI_WS) {
                if (b->len > 3 && (rc = wpm_word(t, b->data, b->len, o)) < 0)
                    return rc;
                b->len = 3;
                continue;
            }
            if (c == 0 || c == 0xFFFD || (f & TOK_UNI_CTRL))
                continue;
            if (t->strip_accents && (f & TOK_UNI_MARK))
                continue;
            char u[4];
            size_t un = utf8_encode(t->lowercase ? tok_uni_lower(c) : c, u);
            if ((f & TOK_UNI_PUNCT) || (c < 0x7F && (f & TOK_UNI_SYMBOL)) || wpm_cjk(c)) {
                /* a word of its own */
                if (b->len > 3 && (rc = wpm_word(t, b->data, b->len, o)) < 0)
                    return rc;
                b->len = 3;
                if ((rc = buf_append(b, u, un)) < 0 || (rc = wpm_word(t, b->data, b->len, o)) < 0)
                    return rc;
                b->len = 3;
            } else if ((rc = buf_append(b, u, un)) < 0) {
                return rc;
            }
        }
    }
    if (b->len > 3 && (rc = wpm_word(t, b->data, b->len, o)) < 0)
        return rc;
    return 0;
}

/* ---- special-token partition and encode ------------------------------------ */

struct frag {
    int32_t id;        /* >= 0: a special token; -1: raw text */
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int frags_push(struct frags *f, struct frag x)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        struct frag *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv)
            return ERR_NOMEM;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = x;
    return 0;
}

static int partition(const struct tok *t, const char *text, size_t len, int parse_special,
                     struct frags *cur)
{
    int rc = 0;
    struct frags nxt = {0};
    cur->n = 0;
    if (len && (rc = frags_push(cur, (struct frag){-1, 0, len})) < 0)
        goto out;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        uint8_t ty = t->types[id];
        if (!parse_special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN))
            continue;
        const char *st = tstr(t, id);
        size_t sl = t->tok_len[id];
        int hit = 0;
        nxt.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            struct frag f = cur->v[i];
            if (f.id >= 0 || f.len < sl) {
                if ((rc = frags_push(&nxt, f)) < 0)
                    goto out;
                continue;
            }
            size_t p = f.off, end = f.off + f.len;
            while (p < end) {
                const char *m = memmem(text + p, end - p, st, sl);
                if (!m)
                    break;
                size_t mo = (size_t)(m - text);
                hit = 1;
                if (mo > p && (rc = frags_push(&nxt, (struct frag){-1, p, mo - p})) < 0)
                    goto out;
                if ((rc = frags_push(&nxt, (struct frag){id, mo, sl})) < 0)
                    goto out;
                p = mo + sl;
            }
            if (p < end && (rc = frags_push(&nxt, (struct frag){-1, p, end - p})) < 0)
                goto out;
        }
        if (hit) {
            struct frags tmp = *cur; *cur = nxt; nxt = tmp;
        }
    }
out:
    free(nxt.v);
    return rc;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t *ids,
               size_t cap, size_t *n_out)
{
    int rc = 0;
    struct buf clean;
    struct frags fr = {0};
    struct work w = {0};
    struct ids_out o = {ids, 0, cap};

    if (len > TOK_MAX_INPUT_BYTES)
        return ERR_TOOBIG;
    buf_init(&clean, 3 * (size_t)TOK_MAX_INPUT_BYTES + 16);
    buf_init(&w.text, 6 * (size_t)TOK_MAX_INPUT_BYTES + 16);
    if ((rc = tok_utf8_sanitize(text ? text : "", len, &clean)) < 0)
        goto out;
    const char *s = clean.data ? clean.data : "";
    if ((rc = partition(t, s, clean.len, (flags & TOK_PARSE_SPECIAL) != 0, &fr)) < 0)
        goto out;
    int add = (flags & TOK_ADD_SPECIAL) != 0;
    /* WordPiece: [CLS] ... [SEP] whatever the add_* flags say (llama.cpp) */
    int wpm = t->model == TOK_MODEL_WPM;
    if (add && (t->add_bos || wpm) && t->bos >= 0 && (rc = push_id(&o, t->bos)) < 0)
        goto out;
    int prev_special = 1;
    for (size_t i = 0; i < fr.n; i++) {
        const struct frag *f = &fr.v[i];
        if (f->id >= 0) {
            rc = push_id(&o, f->id);
            prev_special = 1;
        } else if (t->model == TOK_MODEL_BPE) {
            rc = bpe_fragment(t, &w, s + f->off, f->len, &o);
        } else if (t->model == TOK_MODEL_WPM) {
            rc = wpm_fragment(t, &w, s + f->off, f->len, &o);
        } else {
            rc = spm_fragment(t, &w, s + f->off, f->len, t->add_space_prefix && prev_special, &o);
            prev_special = 0;
        }
        if (rc < 0)
            goto out;
    }
    if (add && !wpm && t->add_eos && t->eos >= 0 && (rc = push_id(&o, t->eos)) < 0)
        goto out;
    if (add && wpm && t->sep >= 0 && (rc = push_id(&o, t->sep)) < 0)
        goto out;
    *n_out = o.n;
out:
    buf_release(&clean);
    work_release(&w);
    free(fr.v);
    return rc;
}

/* ---- decode ------------------------------------------------------------------ */

int tok_piece(const struct tok *t, int32_t id, int flags, struct buf *out)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return ERR_INVAL;
    uint8_t ty = t->types[id];
    const char *s = tstr(t, id);
    size_t len = t->tok_len[id];
    int rc = 0;
    if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN)
        return (flags & TOK_RENDER_SPECIAL) ? buf_append(out, s, len) : 0;
    if (ty == TOK_TYPE_USER_DEFINED)
        return buf_append(out, s, len);
    if (t->model == TOK_MODEL_BPE) {
        if (ty != TOK_TYPE_NORMAL)
            return 0;
        const unsigned char *p = (const unsigned char *)s;
        for (size_t i = 0; i < len;) {
            size_t n = tok_utf8_seq(p + i, len - i);
            if (!n) { /* invalid token text: copy the byte */
                if ((rc = buf_append(out, s + i, 1)) < 0)
                    return rc;
                i++;
                continue;
            }
            uint32_t cp = n == 1 ? p[i] : n == 2 ? ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu) : 0x10000;
            if (cp < 0x180 && t->cp_byte[cp] >= 0)
                rc = buf_append_byte(out, (char)t->cp_byte[cp]);
            else
                rc = buf_append(out, s + i, n); /* not a byte-map char: as is */
            if (rc < 0)
                return rc;
            i += n;
        }
        return 0;
    }
    /* SPM */
    if (ty == TOK_TYPE_BYTE) {
        if (len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
            hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0)
            return buf_append_byte(out, (char)(hex_digit(s[3]) * 16 + hex_digit(s[4])));
        return 0;
    }
    if (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_UNDEFINED)
        return 0;
    size_t run = 0;
    for (size_t i = 0; i + 3 <= len;) {
        if (memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            if ((rc = buf_append(out, s + run, i - run)) < 0 || (rc = buf_append_byte(out, ' ')) < 0)
                return rc;
            i += 3;
            run = i;
        } else {
            i++;
        }
    }
    return buf_append(out, s + run, len - run);
}

/* HF clean_up_tokenization_spaces, exactly as llama.cpp's detokenize does it
 * (three in-place passes over out[from..]). */
static void clean_spaces(struct buf *out, size_t from)
{
    size_t total = out->len - from;
    if (total == 0)
        return;
    char *text = out->data + from;
    /* " ?", " !", " .", " ," lose the space */
    size_t t1 = total;
    total = 1;
    for (size_t i = 1; i < t1; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            total--;
        text[total++] = x;
    }
    /* " ' " -> "'" */
    size_t t2 = total;
    total = 1;
    for (size_t i = 1; i < t2; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    /* " 's", " 'm", " 're", " 've" lose the space */
    size_t t3 = total;
    total = 1;
    for (size_t i = 1; i < t3; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm')
                total--;
            else if (i + 2 < t3 && ((x1 == 'r' && text[i + 2] == 'e') || (x1 == 'v' && text[i + 2] == 'e')))
                total--;
        }
        text[total++] = x;
    }
    out->len = from + total;
    out->data[out->len] = '\0';
}

int tok_decode(const struct tok *t, const int32_t *ids, size_t n, int flags, struct buf *out)
{
    int rc;
    size_t from = out->len;
    int strip = t->add_space_prefix;
    if ((flags & TOK_REMOVE_SPECIAL) && t->add_bos && n > 0 && ids[0] == t->bos) {
        strip = 0;
        ids++;
        n--;
    }
    if ((flags & TOK_REMOVE_SPECIAL) && t->add_eos && n > 0 && ids[n - 1] == t->eos)
        n--;
    for (size_t i = 0; i < n; i++) {
        size_t before = out->len;
        if ((rc = tok_piece(t, ids[i], flags & TOK_RENDER_SPECIAL, out)) < 0)
            return rc;
        if (strip && out->len > before && out->data[before] == ' ') {
            memmove(out->data + before, out->data + before + 1, out->len - before - 1);
            out->len--;
            out->data[out->len] = '\0';
        }
        strip = 0;
    }
    if (t->clean_spaces)
        clean_spaces(out, from);
    return 0;
}

/* ---- streaming decoder ------------------------------------------------------ */

void tok_stream_init(struct tok_stream *s, const struct tok *t, int flags)
{
    memset(s, 0, sizeof *s);
    s->t = t;
    s->flags = flags;
}

/* Append the valid part of p[0..n), holding an incomplete tail in s->pend. */
static int stream_bytes(struct tok_stream *s, const unsigned char *p, size_t n, struct buf *out)
{
    int rc;
    size_t i = 0;
    while (i < n) {
        if (s->n_pend) {
            /* complete the held-back character byte by byte */
            s->pend[s->n_pend++] = p[i++];
            size_t l = tok_utf8_seq(s->pend, s->n_pend);
            if (l) {
                if ((rc = buf_append(out, s->pend, l)) < 0)
                    return rc;
                s->n_pend = 0;
            } else if (!utf8_incomplete(s->pend, s->n_pend)) {
                /* cannot become valid: replace its first byte, re-scan the rest */
                unsigned char rest[4];
                size_t nr = s->n_pend - 1;
                memcpy(rest, s->pend + 1, nr);
                s->n_pend = 0;
                if ((rc = buf_append(out, "\xEF\xBF\xBD", 3)) < 0)
                    return rc;
                if ((rc = stream_bytes(s, rest, nr, out)) < 0)
                    return rc;
            }
            continue;
        }
        size_t l = tok_utf8_seq(p + i, n - i);
        if (l) {
            size_t j = i + l;
            while (j < n && (l = tok_utf8_seq(p + j, n - j)) != 0)
                j += l;
            if ((rc = buf_append(out, p + i, j - i)) < 0)
                return rc;
            i = j;
        } else if (utf8_incomplete(p + i, n - i)) {
            memcpy(s->pend, p + i, n - i);
            s->n_pend = n - i;
            i = n;
        } else {
            if ((rc = buf_append(out, "\xEF\xBF\xBD", 3)) < 0)
                return rc;
            i++;
        }
    }
    return 0;
}

int tok_stream_push(struct tok_stream *s, int32_t id, struct buf *out)
{
    struct buf piece;
    buf_init(&piece, TOK_MAX_TOKEN_BYTES + 16);
    int rc = tok_piece(s->t, id, s->flags, &piece);
    if (rc == 0)
        rc = stream_bytes(s, (const unsigned char *)piece.data, piece.len, out);
    buf_release(&piece);
    return rc;
}

int tok_stream_flush(struct tok_stream *s, struct buf *out)
{
    if (!s->n_pend)
        return 0;
    s->n_pend = 0;
    return buf_append(out, "\xEF\xBF\xBD", 3);
}

/* ---- queries ------------------------------------------------------------------ */

size_t tok_n_vocab(const struct tok *t) { return t->n_vocab; }
enum tok_model tok_model_kind(const struct tok *t) { return t->model; }
int32_t tok_bos(const struct tok *t) { return t->bos; }
int32_t tok_eos(const struct tok *t) { return t->eos; }
int32_t tok_eot(const struct tok *t) { return t->eot; }
int tok_add_bos(const struct tok *t) { return t->add_bos; }

int tok_is_eog(const struct tok *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->n_vocab && t->eog[id];
}

const char *tok_text(const struct tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return NULL;
    *len = t->tok_len[id];
    return tstr(t, id);
}

enum tok_type tok_token_type(const struct tok *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return TOK_TYPE_UNDEFINED;
    return (enum tok_type)t->types[id];
}

/* ---- token masks ------------------------------------------------------------- */

/* Build the trie of every NORMAL, BYTE and USER_DEFINED token's bytes
 * (control, unknown and unused tokens and end-of-generation tokens are
 * never in a grammar's mask) and the list of end-of-generation ids. */
static int build_gram_vocab(struct tok *t)
{
    int rc = ERR_NOMEM;
    size_t n = t->n_vocab, total = 0;
    struct buf b;
    buf_init(&b, (size_t)1 << 30);
    const char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens), *off = calloc(n, sizeof *off);
    int32_t *eog = malloc(n * sizeof *eog);
    size_t n_eog = 0;
    if (!bytes || !lens || !off || !eog)
        goto out;
    for (size_t i = 0; i < n; i++) {
        int32_t id = (int32_t)i;
        if (t->eog[i]) {
            eog[n_eog++] = id;
            continue;
        }
        enum tok_type ty = (enum tok_type)t->types[i];
        if (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_BYTE && ty != TOK_TYPE_USER_DEFINED)
            continue;
        size_t before = b.len;
        if ((rc = tok_piece(t, id, 0, &b)) != 0)
            goto out;
        off[i] = before;
        lens[i] = b.len - before;
        total += lens[i];
    }
    for (size_t i = 0; i < n; i++)
        if (lens[i])
            bytes[i] = b.data + off[i];
    if ((rc = gram_vocab_new(n, bytes, lens, &t->gv)) != 0)
        goto out;
    t->eog_ids = eog;
    t->n_eog_ids = n_eog;
    eog = NULL;
    (void)total;
out:
    buf_release(&b);
    free(bytes);
    free(lens);
    free(off);
    free(eog);
    return rc;
}

int tok_gram_vocab(const struct tok *tc, const struct gram_vocab **gv, const int32_t **eog_ids,
                   size_t *n_eog)
{
    struct tok *t = (struct tok *)tc;   /* the lazily built part only, under its lock */
    if (!t || !gv)
        return ERR_INVAL;
    int rc = 0;
    pthread_mutex_lock(&t->gv_mu);
    if (!t->gv)
        rc = build_gram_vocab(t);
    pthread_mutex_unlock(&t->gv_mu);
    if (rc)
        return rc;
    *gv = t->gv;
    if (eog_ids)
        *eog_ids = t->eog_ids;
    if (n_eog)
        *n_eog = t->n_eog_ids;
    return 0;
}
