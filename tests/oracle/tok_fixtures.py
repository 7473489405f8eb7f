#!/usr/bin/env python3
"""tests/oracle/tok_fixtures.py - make the tokenizer / chat-template fixtures ONCE.

Run (needs the heavy oracles, not needed by `make test`):
    python3 -m venv .venv-oracle
    .venv-oracle/bin/pip install llama-cpp-python==0.3.36 sentencepiece==0.2.3 \
        gguf==0.19.0 numpy==2.4.6 jinja2==3.1.6
    .venv-oracle/bin/python tests/oracle/tok_fixtures.py

Writes tests/fixtures/tok/:
  corpus.json          the test strings (>= 300), deterministic
  smollm2_vocab.json   tokenizer.* arrays of the default model GGUF, read with gguf-py
  smollm2_ids.json     llama.cpp's ids (llama-cpp-python, vocab_only) for every
                       corpus string: pre-tokenizer "smollm" (as in the file) and,
                       via kv_overrides of tokenizer.ggml.pre, "llama-bpe",
                       "qwen2", "gpt-2", "default"; plus parse_special=True ids
                       and llama.cpp's detokenization of the smollm ids
  spm_vocab.json       a small SentencePiece BPE model (byte_fallback, identity
                       normalization, no whitespace collapsing) as GGUF-style arrays
  spm_ids.json         the sentencepiece library's ids for every corpus string
  chat.json            jinja2 renders (HF settings: trim_blocks, lstrip_blocks)
                       of real chat templates over a few conversations

Oracles are independent of our C code: llama.cpp (C++), the sentencepiece
library (C++), jinja2 applying the models' own templates.
"""
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tok")
MODEL = os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def corpus():
    c = [
        "", " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", " \n", "\n ", "\r\n", "\r\n\r\n",
        "Hello world", " Hello world", "Hello World", " Hello World", " Hello World!", "Hello, world!",
        " Hello, world!", " this is 🦙.cpp", "w048 7tuijk dsdfhu", "ied 4 ½ months", "Äpfel", "Führer",
        "нещо на Български", "ជាប្រទេសដែលមានភាពសម្បូរបែប", "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
        "Hello", " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello", " (", "\n =", "' era",
        "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", "!!!!!!", "3", "33", "333", "3333", "33333",
        "333333", "3333333", "33333333", "333333333", "Cửa Việt", " discards",
        "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3  កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
        "don't", "DON'T", "I'm", "I'M", "we'll", "WE'LL", "you're", "YOU'RE", "they've", "THEY'VE", "he'd", "HE'D",
        "it's", "IT'S", "'s", "'t'", "''", "'", "rock'n'roll", "l'homme", "O'Neil's",
        "e\u0301", "Cafe\u0301", "cafe\u0301 au lait", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
        "\u0915\u094d\u0937", "नमस्ते दुनिया", "مرحبا بالعالم", "שלום עולם", "สวัสดีชาวโลก", "안녕하세요 세계",
        "こんにちは世界", "你好，世界！", "你好世界", "日本語のテキストです。", "Ελληνικά γράμματα", "Привет, мир!",
        "Ünïcödé ßtrïng", "ﬁﬂ ligatures", "Ⅻ Roman ⅻ", "①②③", "٣٤٥ arabic digits", "१२३ devanagari digits",
        "x²+y³=z⁴", "½ ¼ ¾", "∑∫∂√∞≈≠≤≥", "€100 £50 ¥1000 ₹500", "©®™", "→←↑↓", "…", "—–-", "«quoted»",
        "“smart quotes”", "‘single’", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇫🇷", "🏳️‍🌈", "❤️", "☺", "🦙🦙🦙", "😀😃😄😁",
        "\u00a0nbsp\u00a0", "ideographic\u3000space", "zero\u200bwidth", "\ufeffbom", "line\u2028sep", "para\u2029sep",
        "a\u0000b", "\x01\x02\x03", "\x7f", "tab\there", "\t\t\tindented", "trailing   ", "   leading", "mid   dle",
        " \t \t ", "\n\t\n\t", "a\r\nb\rc\nd", "\r", "\r\r\r",
        "def f(x):\n    return x * 2\n", "int main(void) { return 0; }", "for (i = 0; i < 10; i++) {\n\tprintf(\"%d\\n\", i);\n}",
        "if x == 1:\n        pass", "<div class=\"a\">b</div>", "SELECT * FROM t WHERE id = 42;", "$ ls -la | grep foo",
        "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "{\"key\": [1, 2.5, -3e10]}",
        "x += 1; y -= 2; z *= 3", "a<<=b>>=c", "===!==", "#include <stdio.h>", "// comment", "/* block */", "0x1F 0b1010 0o777",
        "3.14159265358979", "-42", "+7", "1,000,000", "1.000.000,00", "2024-01-15T10:30:00Z", "12:34:56", "v1.2.3-rc.4",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHello<|im_end|>\n", "<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|", "<|im_sta", "im_start|>", "<|im_start|><|im_end|>", "x<|im_end|>y", "<s>", "</s>", "<unk>", "<|endoftext|>hello<|endoftext|>",
        "<repo_name>foo<file_sep>bar", "<|im_start|>\n<|im_start|>", "[INST] hi [/INST]", "<start_of_turn>user", "<|eot_id|>",
        "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK bRoWn", "supercalifragilisticexpialidocious",
        "Pneumonoultramicroscopicsilicovolcanoconiosis", "antidisestablishmentarianism", "a", "b", "z", "A", "Z", "ab", "abc",
        ".", ",", "!", "?", "...", "?!", "!?", "''''", "\"\"", "``", "~~~", "^^^", "|||", "&&&", "***", "___", "---", "+++", "===",
        "@@@", "###", "$$$", "%%%", "(((", ")))", "[[[", "]]]", "{{{", "}}}", "<<<", ">>>", "///", "\\\\\\", ";;;", ":::",
        "Mr. Smith went to Washington.", "e.g. i.e. etc.", "U.S.A.", "It costs $5.99.", "50% off!", "A&B", "C++", "C#", "F#",
        "hello    world", "hello\tworld", "hello\nworld", "hello\n\nworld", "hello \n world", "hello\n \nworld", " \n \n ",
    ]
    for n in range(1, 21):
        c.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    for n in (1, 2, 3, 4, 5, 7, 10):
        c.append(" " + "9" * n)
        c.append("a" + "1" * n + "b")
    for ws in (" ", "\t", "\n", " \t", "\n ", "\t\n", "\r\n"):
        for n in (1, 2, 3, 5, 8):
            c.append("x" + ws * n + "y")
    c.append(" " * 64)
    c.append("\n" * 40)
    c.append("ab" * 200)
    c.append("🦙" * 50)
    c.append("word " * 100)
    rnd = random.Random(20240601)
    pool = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + " " * 10 + "\t\n\r'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`"
            + "äöüßéèêçñøåæœ" + "中文字日本語한국어" + "привет" + "αβγ" + "😀🦙🚀👍🏽" + "\u0301\u0308\u200d\u00a0\u3000" + "½²³" + "٣१")
    for _ in range(110):
        n = rnd.randint(1, 48)
        c.append("".join(rnd.choice(pool) for _ in range(n)))
    out, seen = [], set()
    for s in c:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def dump(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def export_vocab():
    from gguf import GGUFReader
    r = GGUFReader(MODEL)
    def get(k, default=None):
        f = r.fields.get(k)
        return f.contents() if f is not None else default
    v = {
        "source": "tokenizer.* keys of SmolLM2-135M-Instruct.Q4_1.gguf (gguf-py GGUFReader)",
        "model": get("tokenizer.ggml.model"), "pre": get("tokenizer.ggml.pre"),
        "tokens": get("tokenizer.ggml.tokens"), "types": get("tokenizer.ggml.token_type"),
        "scores": get("tokenizer.ggml.scores"), "merges": get("tokenizer.ggml.merges"),
        "bos": get("tokenizer.ggml.bos_token_id", -1), "eos": get("tokenizer.ggml.eos_token_id", -1),
        "unk": get("tokenizer.ggml.unknown_token_id", -1), "pad": get("tokenizer.ggml.padding_token_id", -1),
        "eot": get("tokenizer.ggml.eot_token_id", -1), "eom": get("tokenizer.ggml.eom_token_id", -1),
        "add_bos": int(get("tokenizer.ggml.add_bos_token", -1)), "add_eos": int(get("tokenizer.ggml.add_eos_token", -1)),
        "add_space_prefix": int(get("tokenizer.ggml.add_space_prefix", -1)),
        "chat_template": get("tokenizer.chat_template"),
    }
    dump("smollm2_vocab.json", v)
    return v


def detok(llm, ids):
    """llama.cpp's llama_detokenize with a large buffer (Llama.detokenize
    truncates pieces longer than 32 bytes)."""
    import ctypes
    import llama_cpp
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, 1 << 16, False, False)
    assert n >= 0
    return buf.raw[:n].decode("utf-8")


def llama_ids(texts):
    from llama_cpp import Llama
    res = {}
    for pre in ("smollm", "llama-bpe", "qwen2", "gpt-2", "default"):
        kv = None if pre == "smollm" else {"tokenizer.ggml.pre": pre}
        llm = Llama(model_path=MODEL, vocab_only=True, verbose=False, kv_overrides=kv)
        res[pre] = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in texts]
        if pre == "smollm":
            res["smollm_special"] = [llm.tokenize(t.encode(), add_bos=False, special=True) for t in texts]
            res["smollm_detok"] = [detok(llm, ids) for ids in res["smollm"]]
        del llm
    res["oracle"] = "llama-cpp-python Llama(vocab_only=True).tokenize(text.encode(), add_bos=False, special=...)"
    dump("smollm2_ids.json", res)


SPM_TRAIN = """\
The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces.
SentencePiece treats the input as a raw stream of Unicode characters, spaces included.
Byte fallback turns unknown characters into byte tokens like <0xE4>.
Numbers: 1 2 3 10 20 100 2024 3.14 42. Code: def f(x): return x + 1
Hello world! Hello, world! How are you? I'm fine, thanks. Don't worry; be happy.
Les élèves étudient à l'école. Der Bär läuft über die Straße. El niño está aquí.
"""


def spm(texts):
    import sentencepiece as sp
    import tempfile
    d = tempfile.mkdtemp()
    data = os.path.join(d, "train.txt")
    with open(data, "w", encoding="utf-8") as f:
        for i in range(30):
            f.write(SPM_TRAIN)
    prefix = os.path.join(d, "m")
    sp.SentencePieceTrainer.train(
        input=data, model_prefix=prefix, model_type="bpe", vocab_size=600, byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=False, character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        num_threads=1, minloglevel=2)
    m = sp.SentencePieceProcessor(model_file=prefix + ".model")
    pieces, scores, types = [], [], []
    for i in range(m.get_piece_size()):
        pieces.append(m.id_to_piece(i))
        scores.append(m.get_score(i))
        # gguf TokenType: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
        t = 1
        if m.is_unknown(i): t = 2
        elif m.is_control(i): t = 3
        elif m.is_unused(i): t = 5
        elif m.is_byte(i): t = 6
        types.append(t)
    dump("spm_vocab.json", {
        "source": "sentencepiece %s BPE, vocab 600, byte_fallback, identity normalization, "
                  "remove_extra_whitespaces=False, add_dummy_prefix=True" % sp.__version__,
        "model": "llama", "pre": None, "tokens": pieces, "scores": scores, "types": types, "merges": None,
        "bos": 1, "eos": 2, "unk": 0, "pad": -1, "eot": -1, "eom": -1, "add_bos": 1, "add_eos": 0,
        "add_space_prefix": 1})
    dump("spm_ids.json", {"oracle": "SentencePieceProcessor.encode(text) (no BOS)",
                          "ids": [m.encode(t) for t in texts],
                          "decoded": [m.decode(m.encode(t)) for t in texts]})


# Real template strings and where they come from.
TEMPLATES = {
    # the default model's own template (GGUF tokenizer.chat_template), filled in main()
    "smollm2": None,
    # guidance-ai/guidance guidance/chat.py, "chatml_template"
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    # guidance-ai/guidance guidance/chat.py: huggingface.co/meta-llama/Llama-2-7b-chat-hf tokenizer_config.json
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    # guidance-ai/guidance guidance/chat.py: huggingface.co/meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    # guidance-ai/guidance guidance/chat.py: huggingface.co/mistralai/Mistral-7B-Instruct-v0.2 tokenizer_config.json
    "mistral": "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n",
    # guidance-ai/guidance guidance/chat.py "mistral_7b_instruct_llamacpp_template" (Mistral-7B-Instruct-v0.1 style)
    "mistral_legacy": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    # HuggingFaceH4/zephyr-7b-alpha tokenizer_config.json (as quoted in several public repos, e.g. TinyLlama's GGUF)
    "zephyr": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    # guidance-ai/guidance guidance/chat.py: huggingface.co/google/gemma-2-9b-it tokenizer_config.json
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    # guidance-ai/guidance guidance/chat.py: huggingface.co/microsoft/Phi-3-mini-4k-instruct tokenizer_config.json
    "phi3": "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
}
SPECIALS = {  # bos_token, eos_token each model's tokenizer defines
    "smollm2": ("<|im_start|>", "<|im_end|>"), "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama2": ("<s>", "</s>"), "llama3": ("<|begin_of_text|>", "<|end_of_text|>"),
    "mistral": ("<s>", "</s>"), "mistral_legacy": ("<s>", "</s>"), "zephyr": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"), "phi3": ("<s>", "<|endoftext|>"),
}
CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  Hi there \n"}, {"role": "assistant", "content": " Hello! How can I help? "},
     {"role": "user", "content": "Tell me a joke.\n\nA short one."}],
    [{"role": "system", "content": "Be nice.\n"}, {"role": "user", "content": "héllo 🦙 <b>x</b>"},
     {"role": "assistant", "content": "Hi 😀"}, {"role": "user", "content": "Again?"}],
    [{"role": "user", "content": ""}],
]


def chat(smollm_template):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    TEMPLATES["smollm2"] = smollm_template
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    cases = []
    for name, src in TEMPLATES.items():
        tmpl = env.from_string(src)
        bos, eos = SPECIALS[name]
        for ci, conv in enumerate(CONVS):
            for gen in (True, False):
                try:
                    out = tmpl.render(messages=conv, add_generation_prompt=gen, bos_token=bos, eos_token=eos)
                    err = None
                except jinja2.exceptions.TemplateError as e:
                    out, err = None, str(e)
                cases.append({"template": name, "conv": ci, "add_generation_prompt": gen, "expected": out, "error": err})
    dump("chat.json", {"oracle": "jinja2 %s ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) as HF apply_chat_template" % jinja2.__version__,
                       "templates": TEMPLATES, "specials": SPECIALS, "conversations": CONVS, "cases": cases})


def main():
    os.makedirs(OUT, exist_ok=True)
    texts = corpus()
    assert len(texts) >= 300, len(texts)
    dump("corpus.json", texts)
    v = export_vocab()
    llama_ids(texts)
    spm(texts)
    chat(v["chat_template"])


if __name__ == "__main__":
    sys.exit(main())
