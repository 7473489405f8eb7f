#!/usr/bin/env python3
"""A tiny random-weight BERT sentence-embedding model, converted to GGUF by
llama.cpp's own converter (conversion/bert.py, WordPiece vocabulary and
all), and its pooled embeddings and token ids by HF transformers: the
fixtures of tests/unit/worker/engine/test_encoder.c.

The model: BertModel (2 layers, hidden 64, 4 heads, intermediate 128, GELU,
64 positions, 2 token types, LayerNorm eps 1e-12), weights N(0, 1/fan_in),
embeddings N(0, 1), LayerNorm weights 1 + N(0, 0.1), every bias N(0, 0.1).
The vocabulary: a small uncased WordPiece vocabulary written here (special
tokens, letters and digits with their ## forms, punctuation, some words and
suffixes, a few accented / Greek / CJK characters), saved as a
BertTokenizerFast (tokenizer.json with BertNormalizer lowercase = true, so
the converter writes tokenizer.ggml.normalizer.lowercase). Saved with a
sentence-transformers modules.json and 1_Pooling/config.json so that the
converter writes bert.pooling_type:
  bert_mean  pooling_mode_mean_tokens -> 1 (MEAN)
  bert_cls   pooling_mode_cls_token   -> 2 (CLS)
The converter's get_vocab_base_pre (a hash of a fixed text's tokens, which
no toy vocabulary matches) is patched to answer "default": it only names
the BPE pre-tokenizer and is not used for WordPiece.

Reference: HF BertModel, float32, eager attention, each input alone:
last_hidden_state pooled by the mean over the input or its first ([CLS])
row, NOT normalised. Inputs: TEXTS tokenized by the HF tokenizer (with
[CLS] ... [SEP]), so the test also checks our WordPiece ids. The tokenizer
corpus TOK_CORPUS (tricky text: case, accents, CJK, punctuation, symbols,
controls, odd spaces) with BertTokenizerFast's ids, and llama.cpp's ids
when LLAMA_CPP_LIB_PATH is set (llama-cpp-python 0.3.36, vocab_only).

Files (tests/fixtures/model/): bert_{mean,cls}.f32.gguf, .embd (float32
little-endian (n_inputs, 64) rows), manifest_bert.json (texts, ids,
pooling, tokenizer corpus and ids).

Run once (the oracle venv of tests/fixtures/model/NOTES.md and the
llama-cpp-python 0.3.36 sdist unpacked):
    /work/venv-oracle/bin/python tests/oracle/make_bert_fixtures.py LLAMA_CPP_DIR
then, for llama.cpp's token ids (optional; another venv with numpy):
    PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<dir of libllama.so> \\
        VENV/bin/python tests/oracle/make_bert_fixtures.py --llamacpp-ids
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "fixtures", "model")

N_EMBD, N_FF, N_HEAD, N_LAYER, N_POS = 64, 128, 4, 2, 64
POOLING = {"mean": ("pooling_mode_mean_tokens", 1), "cls": ("pooling_mode_cls_token", 2)}

WORDS = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "hello", "world", "cafe",
         "naive", "embed", "token", "batch", "model", "search", "index", "night", "is", "a", "of",
         "and", "to", "in", "un", "re", "play", "walk", "talk", "it", "this", "that"]
SUFFIXES = ["s", "ed", "ing", "ly", "er", "ding", "ings", "able"]
OTHER = ["α", "β", "中", "文", "日", "本", "語", "ñ", "é", "ü"]

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "Embedding tokens in batch: indexing & searching at night.",
    "naïve café",
    "a",
    "It's 2024; this is un-playable?!",
    "中文 and 日本語 text",
    "UNKNOWN zzzqqq words",
]

TOK_CORPUS = TEXTS + [
    "",
    "   ",
    "HELLO World",
    "Ünïcödé àccents: ÉÀÇ",
    "tabs\tand\nnewlines\r\nhere",
    "emoji 🙂 and symbols $ % ^ ~ ` | < > = +",
    "non\u00a0breaking\u2003spaces\u3000ideographic",
    "control\u0007chars\u200bzero\u00adwidth",
    "ＦＵＬＬＷＩＤＴＨ ｆｏｘ",
    "Ωμέγα αβγ ΑΒΓ",
    "played walking talks reading",
    "un-re-play-able",
    "x" * 150,
    "...!!!???",
    "[CLS] [SEP] [MASK] literal",
    "中日文本语",
    "dog's dogs' dogs",
    "Straße İstanbul ǅ",
]


def vocab():
    v = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    v += chars + ["##" + c for c in chars] + punct + WORDS + ["##" + s for s in SUFFIXES] + OTHER
    seen, out = set(), []
    for t in v:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def make_hf(seed):
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(seed)
    model = BertModel(BertConfig(
        vocab_size=len(vocab()), hidden_size=N_EMBD, num_hidden_layers=N_LAYER,
        num_attention_heads=N_HEAD, intermediate_size=N_FF, hidden_act="gelu",
        max_position_embeddings=N_POS, type_vocab_size=2, layer_norm_eps=1e-12,
        attn_implementation="eager"), add_pooling_layer=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embeddings" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    model.eval()
    return model


def save_tokenizer(d):
    from transformers import BertTokenizerFast
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab()) + "\n")
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(d)
    return tok


CONVERT = r'''
import os, sys
llama_dir, hf_dir, outfile = sys.argv[1:4]
sys.path.insert(0, llama_dir)
sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
import convert_hf_to_gguf as conv
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", outfile, "--outtype", "f32"]
conv.main()
'''


def convert(llama_dir, model, pool_key, path):
    import torch  # noqa: F401
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        save_tokenizer(d)
        with open(os.path.join(d, "modules.json"), "w") as f:
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling",
                        "type": "sentence_transformers.models.Pooling"}], f)
        os.makedirs(os.path.join(d, "1_Pooling"))
        with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": N_EMBD, pool_key: True}, f)
        subprocess.run([sys.executable, "-c", CONVERT, llama_dir, d, path], check=True,
                       stdout=subprocess.DEVNULL)


def main_hf(llama_dir):
    import gguf
    import numpy as np
    import torch
    import transformers
    model = make_hf(22)
    with tempfile.TemporaryDirectory() as d:
        tok = save_tokenizer(d)
    ids = [tok(t)["input_ids"] for t in TEXTS]
    hidden = []
    with torch.no_grad():
        for x in ids:
            hidden.append(model(torch.tensor([x])).last_hidden_state[0].float().numpy())
    entries = []
    for kind, (pool_key, pool_type) in POOLING.items():
        name = f"bert_{kind}.f32"
        path = os.path.join(OUT, name + ".gguf")
        convert(llama_dir, model, pool_key, path)
        r = gguf.GGUFReader(path)
        f = r.get_field("bert.pooling_type")
        assert f is not None and int(f.parts[f.data[0]][0]) == pool_type, (name, "pooling_type")
        rows = [h.mean(axis=0) if kind == "mean" else h[0] for h in hidden]
        np.stack(rows).astype("<f4").tofile(os.path.join(OUT, name + ".embd"))
        entries.append({"gguf": name + ".gguf", "embd": name + ".embd", "pooling": kind,
                        "pooling_type": pool_type, "n_embd": N_EMBD})
    corpus_ids = [tok(t)["input_ids"] for t in TOK_CORPUS]
    man = {"generator": f"tests/oracle/make_bert_fixtures.py (torch {torch.__version__}, transformers "
                        f"{transformers.__version__}, llama.cpp convert_hf_to_gguf.py of "
                        f"llama-cpp-python 0.3.36)",
           "reference": "HF BertModel last_hidden_state of each input alone, pooled, not normalised",
           "files": entries, "texts": TEXTS, "ids": ids,
           "tok_corpus": TOK_CORPUS, "tok_ids_hf": corpus_ids}
    write_manifest(man)


def write_manifest(man):
    with open(os.path.join(OUT, "manifest_bert.json"), "w", encoding="utf-8") as f:
        json.dump(man, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main_llamacpp():
    from llama_cpp import Llama, __version__ as v
    with open(os.path.join(OUT, "manifest_bert.json"), encoding="utf-8") as f:
        man = json.load(f)
    llm = Llama(os.path.join(OUT, "bert_mean.f32.gguf"), vocab_only=True, verbose=False)
    man["tok_ids_llamacpp"] = [llm.tokenize(t.encode(), add_bos=True, special=False)
                               for t in man["tok_corpus"]]
    man["llamacpp"] = f"llama-cpp-python {v}: Llama(vocab_only=True).tokenize(add_bos=True)"
    write_manifest(man)


if __name__ == "__main__":
    if sys.argv[1] == "--llamacpp-ids":
        main_llamacpp()
    else:
        main_hf(sys.argv[1])
