#!/usr/bin/env python3
"""Greedy continuations of the default model by HF transformers, the exact
(float32) oracle for the end-to-end tests; adds them to
tests/fixtures/model/smollm2_greedy.json (run make_smollm2_greedy.py first:
it gives the prompts and llama.cpp's continuations).

transformers loads the GGUF with from_pretrained(gguf_file=...): gguf-py's
numpy dequantizer (Q4_1 / Q8_0 -> float32), its own reverse of the llama
Q/K permutation, float32 eager attention. For each case: 64 greedy ids
(argmax; not stopped at end-of-generation), the top1 - top2 margin at each
step, and stop = how many of them come before the first end-of-generation id
(0 <|endoftext|> or 2 <|im_end|>), i.e. what jobworker --prompt/--chat
prints. Also measures how far llama.cpp's logits are from transformers' at
the prompt positions of the first two cases (written to the fixture notes).

    .venv-oracle/bin/python tests/oracle/make_smollm2_hf.py
"""
import json
import os
import shutil
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
FIX = os.path.join(ROOT, "tests/fixtures/model/smollm2_greedy.json")
EOG = {0, 2}


def main():
    doc = json.load(open(FIX))
    tmp = tempfile.mkdtemp()
    try:
        os.symlink(os.path.realpath(MODEL), os.path.join(tmp, "m.gguf"))
        m = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="m.gguf", dtype=torch.float32,
                                                 attn_implementation="eager")
    finally:
        shutil.rmtree(tmp)
    m.eval()
    for c in doc["cases"]:
        ids = torch.tensor([c["prompt"]])
        gen, margins = [], []
        with torch.no_grad():
            out = m(ids, use_cache=True)
            for _ in range(doc["n_gen"]):
                logits = out.logits[0, -1].numpy()
                order = np.argsort(-logits, kind="stable")
                best = int(order[0])
                gen.append(best)
                margins.append(round(float(logits[order[0]] - logits[order[1]]), 6))
                out = m(torch.tensor([[best]]), past_key_values=out.past_key_values, use_cache=True)
        stop = next((i for i, t in enumerate(gen) if t in EOG), len(gen))
        c["hf_expect"], c["hf_margin"], c["hf_stop"] = gen, margins, stop
        same = next((i for i, (a, b) in enumerate(zip(gen, c["expect"])) if a != b), len(gen))
        print(f"{c['kind']:4} {c['text'][-40:]!r:44} hf==llama.cpp for {same}/64, "
              f"min hf margin {min(margins):.4f}, stop {stop}")
    doc["hf_oracle"] = (f"transformers {transformers.__version__} + torch {torch.__version__}, "
                        "from_pretrained(gguf_file) float32 eager, greedy")
    with open(FIX, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
