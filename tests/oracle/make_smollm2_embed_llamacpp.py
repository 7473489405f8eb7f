#!/usr/bin/env python3
"""llama.cpp's embeddings of 50 varied texts on the real default GGUF
(SmolLM2-135M-Instruct Q4_1, scripts/fetch-model): the oracle of
tests/py/test_embeddings.py (test_embeddings_real_gguf_match_llamacpp).

llama-cpp-python's Llama(embedding=True, pooling_type=LAST).embed(texts,
normalize=True): the last token's final-norm hidden state, L2-normalised -
what our engine computes for a decoder GGUF without pooling_type (see
worker/engine/embed.h). SmolLM2 is a generative model, used here because it
is the real GGUF the tests already fetch; the numerics of the path (the
decoder forward, last-token pooling, normalisation, tokenization with the
vocabulary's special tokens) are the same for Qwen3-Embedding-style GGUFs.

Writes tests/fixtures/model/smollm2_embed_llamacpp.json: the texts, the
model's n_embd, and the vectors (float32 little-endian, base64, one per text).

Run once (as make_gemma3_llamacpp.py: the llama-cpp-python 0.3.36 sdist's
package and a libllama built from it):
    PYTHONPATH=<sdist>/ LLAMA_CPP_LIB_PATH=<dir with libllama.so, libggml*.so> \
        VENV/bin/python tests/oracle/make_smollm2_embed_llamacpp.py [MODEL.gguf]
"""
import base64
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama, __version__ as llama_cpp_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests/fixtures/model/smollm2_embed_llamacpp.json")

TEXTS = [
    "The capital of France is Paris.",
    "How do I reset my password?",
    "def add(a, b):\n    return a + b",
    "Photosynthesis converts light energy into chemical energy.",
    "I love this product, it works perfectly!",
    "The meeting has been moved to Thursday at 3pm.",
    "Quantum entanglement links the states of two particles.",
    "SELECT name, email FROM users WHERE active = 1;",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le chat est sur la table.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "東京は日本の首都です。",
    "Привет, как дела?",
    "🙂 emoji test 🚀🔥",
    "a",
    "   leading and trailing spaces   ",
    "Numbers: 3.14159, 2.71828, 1.41421, 42",
    "The mitochondria is the powerhouse of the cell.",
    "Refund request for order #12345 - item arrived damaged.",
    "Machine learning models require large datasets for training.",
    "To be, or not to be, that is the question.",
    "The stock market closed higher today after strong earnings reports.",
    "Please find attached the invoice for March.",
    "Water boils at 100 degrees Celsius at sea level.",
    "for i in range(10): print(i)",
    "<html><body><h1>Hello</h1></body></html>",
    "{\"key\": \"value\", \"list\": [1, 2, 3]}",
    "The patient presented with a fever and a persistent cough.",
    "Mount Everest is the highest mountain above sea level.",
    "Can you recommend a good book on history?",
    "The train departs from platform 9 at 10:45.",
    "Climate change is affecting global weather patterns.",
    "My laptop won't turn on after the latest update.",
    "The quick brown fox jumps over the lazy dog.",
    "Shakespeare wrote 37 plays and 154 sonnets.",
    "Tabs\tand\nnewlines\nin text",
    "UPPERCASE TEXT SHOULD ALSO WORK",
    "https://example.com/path?query=1&other=2",
    "The Great Wall of China is visible in satellite images.",
    "Add two cups of flour and a pinch of salt.",
    "Error: connection refused (errno 111)",
    "The defendant pleaded not guilty to all charges.",
    "Bananas are rich in potassium.",
    "git commit -m \"fix: handle empty input\"",
    "Jupiter is the largest planet in our solar system.",
    "Thank you for your quick response!",
    "The algorithm runs in O(n log n) time.",
    "A long input: " + "embeddings index a corpus of documents overnight. " * 12,
    "Dogs are loyal companions.",
    "The Eiffel Tower was completed in 1889.",
]
assert len(TEXTS) == 50


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else MODEL
    llm = Llama(model_path=path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST,
                n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2, verbose=False)
    vecs = []
    for t in TEXTS:  # one at a time: each its own sequence
        v = np.array(llm.embed(t, normalize=True), dtype="<f4")
        assert v.ndim == 1, v.shape
        vecs.append(base64.b64encode(v.tobytes()).decode())
    with open(OUT, "w") as f:
        json.dump({"generator": f"tests/oracle/make_smollm2_embed_llamacpp.py (llama-cpp-python "
                                f"{llama_cpp_version}, pooling LAST, normalize=True)",
                   "model": os.path.basename(path), "n_embd": int(len(np.frombuffer(
                       base64.b64decode(vecs[0]), dtype="<f4"))), "texts": TEXTS, "embeddings": vecs},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
