/* libFuzzer target: tok_encode / tok_decode / tok_stream on arbitrary bytes.
 *
 * A small built-in byte-level BPE vocabulary (the 256 byte-map characters, a
 * few merges, two special tokens) and a small SPM vocabulary (with byte
 * fallback), and a small WordPiece ("bert") vocabulary, cased and
 * uncased (lowercase + strip_accents: NFD through the Unicode tables). The
 * first input byte picks the tokenizer, pre-tokenizer and
 * flags; the rest is the text. Checks: encoding never fails on valid sizes,
 * every id is in range, decoding never fails, gpt2 round-trips
 * sanitized text exactly, and the streaming decoder's output is valid UTF-8.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tok *bpe[5], *spm, *wpm[2];

static void build(void)
{
    static char texts[300][8];
    static const char *toks[300];
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
        n++;
    }
    const char *extra[] = {"Ġt", "he", "Ġthe", "in", "ĠĠ", "<|s|>", "<|e|>", "12"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        toks[n++] = extra[i];
    static int32_t types[300];
    for (int i = 0; i < n; i++)
        types[i] = TOK_TYPE_NORMAL;
    types[n - 3] = TOK_TYPE_CONTROL;
    types[n - 2] = TOK_TYPE_USER_DEFINED;
    const char *merges[] = {"Ġ t", "h e", "Ġt he", "i n", "Ġ Ġ", "1 2"};
    const char *pres[] = {"smollm", "llama-bpe", "qwen2", "gpt-2", "default"};
    struct tok_vocab_desc d;
    for (int p = 0; p < 5; p++) {
        tok_vocab_desc_init(&d);
        d.model = "gpt2";
        d.pre = pres[p];
        d.n_tokens = (size_t)n;
        d.tokens = toks;
        d.token_types = types;
        d.n_merges = sizeof merges / sizeof merges[0];
        d.merges = merges;
        d.bos_id = n - 3;
        d.eos_id = n - 3;
        if (tok_new(&d, &bpe[p]) != 0)
            abort();
    }
    /* SPM: <unk> <s> </s>, 256 byte tokens, a few pieces */
    static char bt[256][8];
    static const char *st[300];
    static int32_t sty[300];
    static float sc[300];
    int m = 0;
    st[m] = "<unk>"; sty[m++] = TOK_TYPE_UNKNOWN;
    st[m] = "<s>"; sty[m++] = TOK_TYPE_CONTROL;
    st[m] = "</s>"; sty[m++] = TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        static const char hx[] = "0123456789ABCDEF";
        bt[b][0] = '<'; bt[b][1] = '0'; bt[b][2] = 'x';
        bt[b][3] = hx[b >> 4]; bt[b][4] = hx[b & 15]; bt[b][5] = '>';
        st[m] = bt[b]; sty[m++] = TOK_TYPE_BYTE;
    }
    const char *pieces[] = {"\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab", "c"};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        st[m] = pieces[i];
        sty[m] = TOK_TYPE_NORMAL;
        sc[m++] = -(float)i;
    }
    tok_vocab_desc_init(&d);
    d.model = "llama";
    d.n_tokens = (size_t)m;
    d.tokens = st;
    d.token_types = sty;
    d.scores = sc;
    if (tok_new(&d, &spm) != 0)
        abort();
    /* WordPiece as llama.cpp's converter writes it: "▁" word starts, bare
     * continuations, CONTROL specials */
    static const char *wt[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "\xE2\x96\x81" "a",
                               "\xE2\x96\x81" "ab", "b", "c", "ing", "\xE2\x96\x81" "the",
                               "\xE2\x96\x81" "\xE4\xB8\xAD", "\xE2\x96\x81" "e",
                               "\xE2\x96\x81" "\xC3\xA9", "\xE2\x96\x81" ",", "\xE2\x96\x81"};
    static int32_t wty[sizeof wt / sizeof wt[0]];
    for (size_t i = 0; i < sizeof wt / sizeof wt[0]; i++)
        wty[i] = i < 4 ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
    for (int k = 0; k < 2; k++) {
        tok_vocab_desc_init(&d);
        d.model = "bert";
        d.n_tokens = sizeof wt / sizeof wt[0];
        d.tokens = wt;
        d.token_types = wty;
        d.bos_id = 2;
        d.unk_id = 1;
        d.sep_id = 3;
        d.lowercase = k;
        if (tok_new(&d, &wpm[k]) != 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!spm)
        build();
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct tok *t = (sel & 7) < 5 ? bpe[sel & 7] : (sel & 7) == 5 ? spm : wpm[(sel & 7) - 6];
    int flags = (sel >> 3) & 3;
    size_t cap = TOK_ENCODE_BOUND(len), n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (tok_encode(t, text, len, flags, ids, cap, &n) != 0)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= tok_n_vocab(t))
            abort();
    struct buf out, clean, st;
    buf_init(&out, 1 << 24);
    buf_init(&clean, 1 << 24);
    buf_init(&st, 1 << 24);
    if (tok_decode(t, ids, n, TOK_RENDER_SPECIAL, &out) != 0)
        abort();
    if (t != spm && !(flags & 1)) {
        /* gpt2 without clean_spaces (smollm, qwen2): exact round trip of the sanitized text */
        if (tok_utf8_sanitize(text, len, &clean) != 0)
            abort();
        if (((sel & 7) == 0 || (sel & 7) == 2) &&
            (out.len != clean.len || memcmp(out.data ? out.data : "", clean.data ? clean.data : "", out.len)))
            abort();
    }
    struct tok_stream s;
    tok_stream_init(&s, t, (sel >> 5) & 1);
    for (size_t i = 0; i < n; i++)
        if (tok_stream_push(&s, ids[i], &st) != 0)
            abort();
    if (tok_stream_flush(&s, &st) != 0)
        abort();
    const unsigned char *p = (const unsigned char *)(st.data ? st.data : "");
    for (size_t i = 0; i < st.len;) {
        size_t l = tok_utf8_seq(p + i, st.len - i);
        if (!l)
            abort();
        i += l;
    }
    buf_release(&out);
    buf_release(&clean);
    buf_release(&st);
    free(ids);
    return 0;
}
