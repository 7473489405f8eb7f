#!/usr/bin/env python3
"""Tiny random-weight decoder-based embedding models (Qwen3-Embedding
style), converted to GGUF by llama.cpp's own converter, and their pooled
embeddings by HF transformers: the fixtures of
tests/unit/worker/engine/test_embed.c (embed_match_hf_*).

The model is a Qwen3ForCausalLM with tied embeddings - what
Qwen/Qwen3-Embedding-* ship (the safetensors hold model.* only) - saved
with a sentence-transformers modules.json and 1_Pooling/config.json, so
that the converter writes `qwen3.pooling_type` from the pooling mode as it
does for the real models (_try_set_pooling_type):
  qwen3emb_last  pooling_mode_lasttoken -> qwen3.pooling_type = 3 (LAST)
  qwen3emb_mean  pooling_mode_mean_tokens -> qwen3.pooling_type = 1 (MEAN)
Same weights for both (2 layers, hidden 64, 4 / 2 heads, head dim 16,
vocab 300, the toy BPE of make_model_fixtures.py).

Reference: HF transformers, the original model, float32, eager attention:
the final-norm hidden states of each input run alone (model.model(ids)
.last_hidden_state, i.e. after the last RMSNorm, as llama.cpp's
embeddings), pooled by the last token or by the mean over the input, NOT
normalised (the test normalises both sides for the normalised check).
Inputs: token id lists of lengths 6, 1, 17, 9.

The .embd file is the little-endian float32 (n_inputs, n_embd) rows; the
inputs and pooling are in manifest_embed.json.

Run once (the oracle venv of tests/fixtures/model/NOTES.md and the
llama-cpp-python 0.3.36 sdist unpacked):
    /work/venv-oracle/bin/python tests/oracle/make_embed_fixtures.py LLAMA_CPP_DIR
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np
import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_model_fixtures import CHATML, N_VOCAB, OUT, rel_l2, tiny_bpe  # noqa: E402

N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM, N_CTX = 64, 64, 4, 2, 16, 256
LENS = [6, 1, 17, 9]
POOLING = {"last": ("pooling_mode_lasttoken", 3), "mean": ("pooling_mode_mean_tokens", 1)}


def make_hf(seed):
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF, num_hidden_layers=2,
        num_attention_heads=N_HEAD, num_key_value_heads=N_HEAD_KV, max_position_embeddings=N_CTX,
        head_dim=HEAD_DIM, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attn_implementation="eager"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    model.eval()
    return model


def convert(llama_dir, model, tok, pool_key, path):
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        tokens, types, merges = tok
        with open(os.path.join(d, "tiny_vocab.json"), "w") as f:
            json.dump({"pre": "qwen2", "tokens": tokens, "types": types, "merges": merges,
                       "bos": N_VOCAB - 2, "eos": N_VOCAB - 1, "chat_template": CHATML}, f)
        with open(os.path.join(d, "modules.json"), "w") as f:
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling",
                        "type": "sentence_transformers.models.Pooling"},
                       {"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"}], f)
        os.makedirs(os.path.join(d, "1_Pooling"))
        with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": N_EMBD, pool_key: True}, f)
        subprocess.run([sys.executable, os.path.join(HERE, "convert_tiny.py"), llama_dir, d, path, "f32"],
                       check=True, stdout=subprocess.DEVNULL)


def main():
    llama_dir = sys.argv[1]
    tok = tiny_bpe()
    model = make_hf(21)
    rng = np.random.default_rng(21)
    inputs = [rng.integers(0, N_VOCAB, n).tolist() for n in LENS]
    hidden = []
    with torch.no_grad():
        for ids in inputs:
            hidden.append(model.model(torch.tensor([ids])).last_hidden_state[0].float().numpy())
    entries = []
    for kind, (pool_key, pool_type) in POOLING.items():
        name = f"qwen3emb_{kind}.f32"
        path = os.path.join(OUT, name + ".gguf")
        convert(llama_dir, model, tok, pool_key, path)
        r = gguf.GGUFReader(path)
        f = r.get_field("qwen3.pooling_type")
        assert f is not None and int(f.parts[f.data[0]][0]) == pool_type, (name, "pooling_type")
        rows = [h[-1] if kind == "last" else h.mean(axis=0) for h in hidden]
        want = np.stack(rows).astype("<f4")
        want.tofile(os.path.join(OUT, name + ".embd"))
        # the last-token row differs from the mean row: the two files test different code
        if kind == "mean":
            print("mean vs last rel L2", rel_l2(want, np.stack([h[-1] for h in hidden])))
        entries.append({"gguf": name + ".gguf", "embd": name + ".embd", "arch": "qwen3",
                        "pooling": kind, "pooling_type": pool_type, "n_embd": N_EMBD,
                        "reference": "HF Qwen3 final-norm hidden states, pooled, not normalised",
                        "inputs": inputs})
    man = {"generator": f"tests/oracle/make_embed_fixtures.py (torch {torch.__version__}, transformers "
                        f"{transformers.__version__}, llama.cpp convert_hf_to_gguf.py of llama-cpp-python 0.3.36)",
           "files": entries}
    with open(os.path.join(OUT, "manifest_embed.json"), "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
