#!/usr/bin/env python3
"""Greedy continuations of the default model by llama.cpp (llama-cpp-python),
the end-to-end oracle of tests/unit/worker/engine/test_model.c (model_smollm2_greedy_*).

For each prompt: the prompt ids as llama.cpp tokenizes it (chat prompts are
rendered with SmolLM2's ChatML template first, specials parsed), then 64
greedy tokens (argmax of llama.cpp's logits; generation does NOT stop at
<|im_end|>, so every prompt gives 64 comparable ids), and at each step the
margin between the best and second-best logit, so a divergence can be told
apart as a near-tie.

Run once with a venv holding llama-cpp-python==0.3.36 and numpy:
    VENV/bin/python tests/oracle/make_smollm2_greedy.py
writes tests/fixtures/model/smollm2_greedy.json.
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests/fixtures/model/smollm2_greedy.json")
N_GEN = 64
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

RAW = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at 100 degrees Celsius, which is",
    "1, 2, 3, 4, 5,",
    "In 1492, Christopher Columbus",
    "The quick brown fox",
    "import numpy as np\n\n",
    "Photosynthesis is the process by which",
]
CHAT = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a neural network is in one paragraph.",
    "List three fruits.",
    "How do I reverse a list in Python?",
    "What is 12 times 12?",
    "Tell me a short story about a robot.",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
    "Give me a tip for learning to cook.",
]


def chatml(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main():
    llm = Llama(model_path=MODEL, n_ctx=512, n_batch=512, logits_all=True, verbose=False,
                n_threads=2, seed=0)
    cases = []
    for kind, texts in (("raw", RAW), ("chat", CHAT)):
        for t in texts:
            text = chatml(t) if kind == "chat" else t
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
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (sha256 b179c952...)",
        "n_gen": N_GEN,
        "note": "expect = llama.cpp's 64 greedy ids after the prompt (not stopped at EOG); "
                "margin[i] = top1 - top2 logit at step i (small = near tie)",
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
