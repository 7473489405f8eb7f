#!/usr/bin/env python3
"""Tiny random-weight Llama/Qwen2 models, their logits by HF transformers,
and the same models written as GGUF (F32 and quantized): the fixtures of
tests/unit/worker/engine/test_model.c (model_logits_match_hf_*).

Models (all: 2 layers, hidden 64, 4 query heads / 2 KV heads (GQA), head
dim 16, SwiGLU 64, vocab 300 with a byte-level BPE tokenizer):
  llama_tied    LlamaForCausalLM, tied embeddings
  llama3_untied LlamaForCausalLM, separate lm_head, rope_scaling llama3
                (factor 8, original_max_position_embeddings 32, so most
                frequencies are scaled at the fixture's positions)
  qwen2_tied    Qwen2ForCausalLM (q/k/v biases, NEOX rope), tied

For each GGUF file the fixture holds the logits of every position of three
prompts (lengths 6, 1, 17):
  F32 files:     logits of the original HF model (float32, eager attention).
  other types:   logits of HF transformers loading that GGUF file
                 (from_pretrained(dir, gguf_file=...): gguf-py's numpy
                 dequantizer + transformers' own reverse Q/K permutation), so
                 the quantized weights are the same on both sides. For
                 llama3_untied, whose rope_freqs tensor transformers' GGUF
                 loader ignores, the HF model is built from the original
                 config (with rope_scaling) and given the GGUF's weights
                 dequantized by gguf-py and un-permuted here.
The GGUFs are written as llama.cpp's convert_hf_to_gguf.py writes them:
llama Q/K rows permuted (LlamaModel.permute), rope_freqs.weight for llama3
scaling, norms and biases F32, every 2-D weight in the file's type.

Run once (needs torch, transformers, gguf, numpy; see
tests/fixtures/model/NOTES.md for the pinned versions):
    .venv-oracle/bin/python tests/oracle/make_model_fixtures.py
Writes tests/fixtures/model/{*.gguf, *.logits, manifest.json}.
"""
import json
import math
import os
import shutil
import tempfile

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as QT
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/fixtures/model")

N_VOCAB, N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV, N_CTX = 300, 64, 64, 2, 4, 2, 256
HEAD_DIM = N_EMBD // N_HEAD
PROMPT_LENS = [6, 1, 17]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tiny_bpe():
    """256 byte tokens + merges learned greedily on a small text + specials = N_VOCAB."""
    b2u = bytes_to_unicode()
    text = ("the cat sat on the mat. the dog ate the cat's hat. then the rain came in "
            "and the cat ran to the house. there is a theory that the other one is better. ") * 3
    words = [[b2u[b] for b in (" " + w if i else w).encode()] for i, w in enumerate(text.split(" "))]
    vocab = [b2u[b] for b in range(256)]
    merges = []
    n_merges = N_VOCAB - 256 - len(SPECIALS)
    while len(merges) < n_merges:
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab.append(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                else:
                    i += 1
    tokens = vocab + SPECIALS
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    types = [1] * (N_VOCAB - len(SPECIALS)) + [3] * len(SPECIALS)
    return tokens, types, merges


def make_hf(kind, seed):
    torch.manual_seed(seed)
    common = dict(vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF,
                  num_hidden_layers=N_LAYER, num_attention_heads=N_HEAD,
                  num_key_value_heads=N_HEAD_KV, max_position_embeddings=N_CTX,
                  rms_norm_eps=1e-5, attn_implementation="eager")
    if kind == "llama_tied":
        model = LlamaForCausalLM(LlamaConfig(rope_theta=10000.0, tie_word_embeddings=True, **common))
    elif kind == "llama3_untied":
        cfg = LlamaConfig(rope_theta=10000.0, tie_word_embeddings=False,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 32}, **common)
        model = LlamaForCausalLM(cfg)
    else:
        model = Qwen2ForCausalLM(Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=True,
                                             use_sliding_window=False, rms_norm_eps=1e-6,
                                             **{k: v for k, v in common.items() if k != "rms_norm_eps"}))
    # weights large enough that logits are far from uniform: linear ~ N(0, 1/in),
    # embeddings N(0, 1), norms 1 + N(0, 0.1), biases N(0, 0.1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    model.eval()
    return model


def prompts(seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, N_VOCAB, n).tolist() for n in PROMPT_LENS]


def hf_logits(model, ps):
    rows = []
    with torch.no_grad():
        for p in ps:
            out = model(torch.tensor([p])).logits[0].float().numpy()
            rows.append(out)
    return np.concatenate(rows).astype(np.float32)


def permute(w, n_head, n_head_kv):
    """llama.cpp convert_hf_to_gguf LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(cfg):
    rs = cfg.rope_scaling
    base, dim = cfg.rope_theta, HEAD_DIM
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, kind, model, qtype, tok):
    arch = "qwen2" if kind.startswith("qwen2") else "llama"
    cfg = model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{kind}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_vocab_size(N_VOCAB)
    w.add_file_type({QT.F32: 0, QT.F16: 1, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 7, QT.Q5_0: 8,
                     QT.Q5_1: 9}[qtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges = tok
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(N_VOCAB - 2)
    w.add_eos_token_id(N_VOCAB - 1)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}

    def mat(name, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if qtype == QT.F32:
            w.add_tensor(name, a)
        elif qtype == QT.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    def vec(name, a):
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    mat("token_embd.weight", sd["model.embed_tokens.weight"])
    vec("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        mat("output.weight", sd["lm_head.weight"])
    if kind == "llama3_untied":
        vec("rope_freqs.weight", llama3_rope_factors(cfg))
    for l in range(N_LAYER):
        p = f"model.layers.{l}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = permute(q, N_HEAD, N_HEAD), permute(k, N_HEAD, N_HEAD_KV)
        vec(f"blk.{l}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        mat(f"blk.{l}.attn_q.weight", q)
        mat(f"blk.{l}.attn_k.weight", k)
        mat(f"blk.{l}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        if arch == "qwen2":
            vec(f"blk.{l}.attn_q.bias", sd[p + "self_attn.q_proj.bias"])
            vec(f"blk.{l}.attn_k.bias", sd[p + "self_attn.k_proj.bias"])
            vec(f"blk.{l}.attn_v.bias", sd[p + "self_attn.v_proj.bias"])
        mat(f"blk.{l}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        vec(f"blk.{l}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        mat(f"blk.{l}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        mat(f"blk.{l}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        mat(f"blk.{l}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_into_hf(path, model):
    """Load the GGUF's weights (dequantized by gguf-py, Q/K un-permuted) into a
    copy of the original HF model."""
    r = gguf.GGUFReader(path)
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).reshape(
        [int(d) for d in reversed(x.shape)]) for x in r.tensors}
    m = type(model)(model.config)
    sd = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
          "lm_head.weight": t.get("output.weight", t["token_embd.weight"])}
    for l in range(N_LAYER):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        sd[p + "input_layernorm.weight"] = t[b + "attn_norm.weight"]
        sd[p + "self_attn.q_proj.weight"] = unpermute(t[b + "attn_q.weight"], N_HEAD, N_HEAD)
        sd[p + "self_attn.k_proj.weight"] = unpermute(t[b + "attn_k.weight"], N_HEAD, N_HEAD_KV)
        sd[p + "self_attn.v_proj.weight"] = t[b + "attn_v.weight"]
        sd[p + "self_attn.o_proj.weight"] = t[b + "attn_output.weight"]
        sd[p + "post_attention_layernorm.weight"] = t[b + "ffn_norm.weight"]
        sd[p + "mlp.gate_proj.weight"] = t[b + "ffn_gate.weight"]
        sd[p + "mlp.up_proj.weight"] = t[b + "ffn_up.weight"]
        sd[p + "mlp.down_proj.weight"] = t[b + "ffn_down.weight"]
    m.load_state_dict({k: torch.tensor(np.array(v, dtype=np.float32)) for k, v in sd.items()}, strict=True)
    m.eval()
    return m


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


PLAN = [
    ("llama_tied", 1, [QT.F32, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1]),
    ("llama3_untied", 2, [QT.F32, QT.Q8_0]),
    ("qwen2_tied", 3, [QT.F32, QT.F16, QT.Q8_0]),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = tiny_bpe()
    manifest = {"generator": f"tests/oracle/make_model_fixtures.py (torch {torch.__version__}, "
                             f"transformers {transformers.__version__}, gguf-py {gguf.__version__ if hasattr(gguf, '__version__') else '?'})",
                "n_vocab": N_VOCAB, "prompt_lens": PROMPT_LENS, "files": []}
    tmp = tempfile.mkdtemp()
    try:
        for kind, seed, types in PLAN:
            model = make_hf(kind, seed)
            ps = prompts(seed)
            ref = hf_logits(model, ps)
            for qt in types:
                name = f"{kind}.{qt.name.lower()}"
                path = os.path.join(OUT, name + ".gguf")
                write_gguf(path, kind, model, qt, tok)
                if qt == QT.F32:
                    want, how = ref, "original HF model"
                elif kind == "llama3_untied":
                    want, how = hf_logits(gguf_into_hf(path, model), ps), "HF model + gguf-py dequantized weights"
                else:
                    d = os.path.join(tmp, name)
                    os.makedirs(d)
                    shutil.copy(path, d)
                    hf = AutoModelForCausalLM.from_pretrained(d, gguf_file=name + ".gguf",
                                                              dtype=torch.float32,
                                                              attn_implementation="eager")
                    hf.eval()
                    want, how = hf_logits(hf, ps), "transformers from_pretrained(gguf_file)"
                # sanity: transformers' own GGUF loading of the F32 file reproduces the original
                if qt == QT.F32 and kind != "llama3_untied":
                    d = os.path.join(tmp, name)
                    os.makedirs(d)
                    shutil.copy(path, d)
                    hf = AutoModelForCausalLM.from_pretrained(d, gguf_file=name + ".gguf",
                                                              dtype=torch.float32,
                                                              attn_implementation="eager")
                    e = rel_l2(hf_logits(hf, ps), ref)
                    assert e < 1e-5, (name, e)
                if qt != QT.F32:
                    print(f"{name}: quantization moves logits by rel L2 {rel_l2(want, ref):.4f}")
                want.astype("<f4").tofile(os.path.join(OUT, name + ".logits"))
                manifest["files"].append({"gguf": name + ".gguf", "logits": name + ".logits",
                                          "arch": "qwen2" if kind.startswith("qwen2") else "llama",
                                          "type": qt.name, "tied": kind.endswith("_tied"),
                                          "reference": how, "prompts": ps})
    finally:
        shutil.rmtree(tmp)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
