#!/usr/bin/env python3
"""llama.cpp's view of the real Gemma 3 270M GGUF (scripts/fetch-model
gemma3-270m): the oracle of tests/unit/worker/engine/test_model_real.c.

Writes tests/fixtures/model/gemma3_270m_llamacpp.json:
  tok_ids   llama.cpp's ids of every string of tests/fixtures/tok/corpus.json
            (426 strings; tokenize(add_bos=False, special=False)), and with
            special=True (chat-template text);
  cases     16 prompts (8 raw, 8 chat turns in Gemma's format with BOS as
            llama.cpp tokenizes them, specials parsed), each with 48 greedy
            ids (argmax of llama.cpp's logits, not stopped at <end_of_turn>)
            and at each step llama.cpp's top-1 minus top-2 logit (a small
            margin = a near-tie, where the two engines may legitimately part).

Run once with a venv holding llama-cpp-python==0.3.36 and numpy:
    VENV/bin/python tests/oracle/make_gemma3_llamacpp.py [MODEL.gguf]
(default .cache/models/gemma-3-270m-q4_k_m.gguf). The recorded fixture was
made with the sdist's own Python package and the libllama/libggml that its
build had produced before it went on to the parts Llama() does not use
(common, mtmd), too slow on a shared 2-core machine:
    PYTHONPATH=<sdist>/ LLAMA_CPP_LIB_PATH=<dir with libllama.so, libggml*.so> \
        VENV/bin/python tests/oracle/make_gemma3_llamacpp.py MODEL.gguf
(VENV with numpy, typing_extensions, diskcache, jinja2).
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, ".cache/models/gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(ROOT, "tests/fixtures/model/gemma3_270m_llamacpp.json")
N_GEN = 48

RAW = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at 100 degrees Celsius, which is",
    "1, 2, 3, 4, 5,",
    "In 1492, Christopher Columbus",
    "Photosynthesis is the process by which",
]
CHAT = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a neural network is in one paragraph.",
    "List three fruits.",
    "How do I reverse a list in Python?",
    "What is 12 times 12?",
    "Why is the sky blue?",
    "Translate 'good morning' into Spanish.",
]


def gemma_chat(user):
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else MODEL
    llm = Llama(model_path=model, n_ctx=256, n_batch=256, logits_all=True, verbose=False,
                n_threads=2, seed=0)
    with open(os.path.join(ROOT, "tests/fixtures/tok/corpus.json")) as f:
        corpus = json.load(f)
    tok_ids = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in corpus]
    tok_special = [llm.tokenize(t.encode(), add_bos=False, special=True) for t in corpus]
    cases = []
    for kind, texts in (("raw", RAW), ("chat", CHAT)):
        for t in texts:
            text = gemma_chat(t) if kind == "chat" else t
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
            llm.reset()
            llm.eval(ids)
            gen, margins = [], []
            for _ in range(N_GEN):
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                order = np.argsort(-logits, kind="stable")
                best = int(order[0])
                gen.append(best)
                margins.append(round(float(logits[order[0]] - logits[order[1]]), 5))
                llm.eval([best])
            cases.append({"kind": kind, "text": text, "prompt": [int(i) for i in ids],
                          "expect": gen, "margin": margins})
            print(kind, repr(t)[:40], len(ids), "min margin %.4f" % min(margins), file=sys.stderr)
    doc = {
        "oracle": f"llama-cpp-python {llama_cpp_version}, n_threads=2, greedy argmax (first max on ties)",
        "model": "gemma-3-270m-q4_k_m.gguf (sha256 a5fd3b62...; scripts/fetch-model gemma3-270m)",
        "n_gen": N_GEN,
        "tok_ids": tok_ids,
        "tok_ids_special": tok_special,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
