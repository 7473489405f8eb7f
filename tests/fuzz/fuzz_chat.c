/* libFuzzer target: chat-template rendering (text/chat.c) from outside
 * input: the template source (a GGUF's tokenizer.chat_template, attacker
 * controlled when a model file is) and the `messages` array of a request.
 *
 * Input: TEMPLATE '\0' FLAGS MESSAGES_JSON. Without a NUL the template is
 * absent (the ChatML fallback). FLAGS bit 0 = add_generation_prompt. The
 * vocabulary is a small byte-level BPE with the special tokens every built-in
 * format writes (ChatML, Llama-2/3, Mistral, Zephyr, Gemma, Phi-3).
 * Checks: classification never fails except ERR_UNSUPPORTED / ERR_NOMEM;
 * parse and render return only documented errors; rendering is
 * deterministic; the rendered prompt tokenizes within TOK_ENCODE_BOUND and
 * every id is in the vocabulary.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/chat.h"
#include "openai/chat_msgs.h"
#include "text/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tok *vocab;
static int n_vocab;

static void build(void)
{
    static char texts[256][4];
    static const char *toks[320];
    static int32_t types[320];
    int n = 0;
    for (int b = 0, k = 0; b < 256; b++) {
        int cp = ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
                     ? b : 0x100 + k++;
        if (cp < 0x80) {
            texts[n][0] = (char)cp;
        } else {
            texts[n][0] = (char)(0xC0 | (cp >> 6));
            texts[n][1] = (char)(0x80 | (cp & 0x3F));
        }
        toks[n] = texts[n];
        types[n++] = TOK_TYPE_NORMAL;
    }
    static const char *specials[] = {
        "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>",
        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<bos>", "<eos>",
        "<start_of_turn>", "<end_of_turn>", "<|endoftext|>", "<|end|>", "<|user|>",
        "<|assistant|>", "<|system|>", "[INST]", "[/INST]",
    };
    int first_special = n;
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        toks[n] = specials[i];
        types[n++] = TOK_TYPE_CONTROL;
    }
    const char *merges[] = {"Ġ t", "h e", "Ġt he", "i n"};
    static const char *extra[] = {"Ġt", "he", "Ġthe", "in"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        toks[n] = extra[i];
        types[n++] = TOK_TYPE_NORMAL;
    }
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "smollm";
    d.n_tokens = (size_t)n;
    d.tokens = toks;
    d.token_types = types;
    d.n_merges = sizeof merges / sizeof merges[0];
    d.merges = merges;
    d.bos_id = first_special;     /* <s> */
    d.eos_id = first_special + 1; /* </s> */
    if (tok_new(&d, &vocab) != 0)
        abort();
    n_vocab = n;
}

static int render(const struct chat_tmpl *ct, const struct chat_msgs *m, int gen, struct buf *out)
{
    int rc = chat_render(ct, m->v, m->n, gen, out);
    if (rc && rc != ERR_INVAL && rc != ERR_TOOBIG && rc != ERR_NOMEM)
        abort();
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab)
        build();
    const uint8_t *nul = memchr(data, 0, size);
    char *tmpl = NULL;
    const uint8_t *rest = data;
    size_t rest_len = size;
    if (nul) {
        size_t tl = (size_t)(nul - data);
        tmpl = malloc(tl + 1);
        if (!tmpl)
            return 0;
        memcpy(tmpl, data, tl);
        tmpl[tl] = 0;
        rest = nul + 1;
        rest_len = size - tl - 1;
    }
    int gen = rest_len > 0 ? rest[0] & 1 : 1;
    if (rest_len > 0) {
        rest++;
        rest_len--;
    }
    struct chat_tmpl *ct = NULL;
    int rc = chat_tmpl_new(tmpl, vocab, &ct);
    if (rc) {
        /* the vocabulary has <|im_start|>: an unknown template falls back to ChatML */
        if (rc != ERR_NOMEM)
            abort();
        free(tmpl);
        return 0;
    }
    if (chat_tmpl_format(ct) < CHAT_CHATML || chat_tmpl_format(ct) > CHAT_JINJA)
        abort();
    json_error_t jerr;
    json_t *msgs = json_loadb((const char *)rest, rest_len, JSON_REJECT_DUPLICATES, &jerr);
    if (msgs) {
        struct chat_msgs m;
        rc = chat_msgs_parse(msgs, &m);
        if (rc == 0) {
            struct buf a, b;
            buf_init(&a, 1u << 20);
            buf_init(&b, 1u << 20);
            int ra = render(ct, &m, gen, &a), rb = render(ct, &m, gen, &b);
            if (ra != rb || (ra == 0 && (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len)))))
                abort();
            if (ra == 0 && a.len) {
                size_t cap = TOK_ENCODE_BOUND(a.len), n_ids = 0;
                int32_t *ids = malloc(cap * sizeof *ids);
                if (ids && chat_encode(vocab, a.data, a.len, ids, cap, &n_ids) == 0) {
                    if (n_ids > cap)
                        abort();
                    for (size_t i = 0; i < n_ids; i++)
                        if (ids[i] < 0 || ids[i] >= n_vocab)
                            abort();
                }
                free(ids);
            }
            buf_release(&a);
            buf_release(&b);
            chat_msgs_release(&m);
        } else if (rc != ERR_INVAL && rc != ERR_TOOBIG && rc != ERR_NOMEM) {
            abort();
        }
        json_decref(msgs);
    }
    chat_tmpl_free(ct);
    free(tmpl);
    return 0;
}
