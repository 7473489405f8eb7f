#!/usr/bin/env python3
"""Tiny random-weight Qwen3 / Gemma 2 / Gemma 3 / Phi-3 models, their logits
by HF transformers, and the same models converted to GGUF by llama.cpp's own
convert_hf_to_gguf.py (F32 and Q8_0): the fixtures of
tests/unit/worker/engine/test_model.c (model_logits_match_hf_<arch>*).

Models (hidden 64, 4 query heads / 2 KV heads (GQA), head dim 16, FFN 64,
vocab 300, the toy byte-level BPE of make_model_fixtures.py):
  qwen3_tied     Qwen3ForCausalLM, 2 layers: per-head q/k RMSNorm, NEOX rope
                 theta 1e6, tied embeddings
  gemma2_tied    Gemma2ForCausalLM, 2 layers: embedding * sqrt(64), (1 + w)
                 norms, post-attention/post-FFN norms, GeGLU (tanh GELU),
                 layer 0 sliding (window 4), layer 1 global; attention
                 soft-cap 2 and final soft-cap 5 (small on purpose: the
                 defaults 50 / 30 barely touch logits this small)
  gemma3_tied    Gemma3ForCausalLM (text only), 6 layers: q/k norms, layers
                 0-4 sliding (window 4, rope base 10000), layer 5 global
                 (rope base 1e6)
  mistral_swa    MistralForCausalLM, 2 layers, tied, sliding window 4 on every
                 layer; written as general.architecture "llama" (llama.cpp's
                 converter maps Mistral to llama and drops the window:
                 convert_tiny.py adds llama.attention.sliding_window, as a
                 GGUF that declares it would have)
  phi3_longrope  Phi3ForCausalLM, 2 layers, untied: fused qkv and gate_up,
                 LongRoPE (random short/long factors, original context 64,
                 max 256, so the attention factor is sqrt(1 + ln 4 / ln 64))

query_pre_attn_scalar = head_dim for the Gemmas: a GGUF has no key for it
(llama.cpp uses 1/sqrt(head_dim) except for the 27B models).

For each GGUF the fixture holds the logits of every position of three
prompts (lengths 6, 1, 17 - longer than the window of 4):
  F32 files:   the original HF model (float32, eager attention).
  Q8_0 files:  the HF model given the GGUF's weights, dequantized by
               gguf-py and mapped back to HF names here (Gemma norms - 1,
               phi3's fused tensors as they are).
phi3 has a second logits file, phi3_longrope.f32.long.logits: HF with the
long factors in place of the short ones (HF picks the long factors only
past the original context; our engine picks them for a context longer
than it, as llama.cpp does: the test runs that file with n_ctx 128).

Run once (the oracle venv of tests/fixtures/model/NOTES.md, plus the
llama-cpp-python 0.3.36 sdist unpacked somewhere):
    /work/venv-oracle/bin/python tests/oracle/make_arch_fixtures.py LLAMA_CPP_DIR [KIND...]
Writes tests/fixtures/model/{qwen3,gemma2,gemma3,phi3}_*.{gguf,logits} and
merges its entries into manifest.json (other entries kept).
"""
import copy
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
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_model_fixtures import CHATML, N_VOCAB, OUT, hf_logits, prompts, rel_l2, tiny_bpe  # noqa: E402


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf's LlamaModel.permute."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))

N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM, N_CTX = 64, 64, 4, 2, 16, 256


def common(n_layer):
    return dict(vocab_size=N_VOCAB, hidden_size=N_EMBD, intermediate_size=N_FF,
                num_hidden_layers=n_layer, num_attention_heads=N_HEAD,
                num_key_value_heads=N_HEAD_KV, max_position_embeddings=N_CTX,
                attn_implementation="eager")


def make_hf(kind, seed):
    torch.manual_seed(seed)
    if kind == "qwen3_tied":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=HEAD_DIM, rope_theta=1e6, rms_norm_eps=1e-6,
                                             tie_word_embeddings=True, **common(2)))
    elif kind == "gemma2_tied":
        model = Gemma2ForCausalLM(Gemma2Config(head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM,
                                               sliding_window=4, attn_logit_softcapping=2.0,
                                               final_logit_softcapping=5.0, rope_theta=10000.0,
                                               rms_norm_eps=1e-6, tie_word_embeddings=True,
                                               **common(2)))
    elif kind == "gemma3_tied":
        model = Gemma3ForCausalLM(Gemma3TextConfig(head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM,
                                                   sliding_window=4, rope_theta=1e6,
                                                   rope_local_base_freq=10000.0, rms_norm_eps=1e-6,
                                                   tie_word_embeddings=True, **common(6)))
    elif kind == "mistral_swa":
        model = MistralForCausalLM(MistralConfig(head_dim=HEAD_DIM, sliding_window=4, rope_theta=10000.0,
                                                 rms_norm_eps=1e-5, tie_word_embeddings=True,
                                                 **common(2)))
    elif kind == "phi3_longrope":
        g = torch.Generator().manual_seed(seed + 100)
        short = (1 + torch.rand(HEAD_DIM // 2, generator=g)).tolist()
        long = (1 + 8 * torch.rand(HEAD_DIM // 2, generator=g)).tolist()
        model = Phi3ForCausalLM(Phi3Config(rope_theta=10000.0, rms_norm_eps=1e-5,
                                           tie_word_embeddings=False, sliding_window=None,
                                           original_max_position_embeddings=64,
                                           rope_scaling={"type": "longrope", "short_factor": short,
                                                         "long_factor": long},
                                           pad_token_id=0, bos_token_id=N_VOCAB - 2,
                                           eos_token_id=N_VOCAB - 1, **common(2)))
    else:
        raise ValueError(kind)
    gemma = kind.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # gemma norms are (1 + w): zero-centred weights
                p.copy_((0 if gemma else 1) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    model.eval()
    return model


def convert(llama_dir, model, tok, path, outtype):
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        tokens, types, merges = tok
        with open(os.path.join(d, "tiny_vocab.json"), "w") as f:
            json.dump({"pre": "qwen2", "tokens": tokens, "types": types, "merges": merges,
                       "bos": N_VOCAB - 2, "eos": N_VOCAB - 1, "chat_template": CHATML}, f)
        # the Gemma 3 converter counts the vocabulary in tokenizer.json
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump({"model": {"vocab": {t: i for i, t in enumerate(tokens)}}, "added_tokens": []}, f)
        subprocess.run([sys.executable, os.path.join(HERE, "convert_tiny.py"), llama_dir, d, path,
                        outtype], check=True, stdout=subprocess.DEVNULL)


def hf_name_map(kind, n_layer):
    """GGUF tensor name -> HF parameter name (the converter's mapping, reversed)."""
    m = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
         "output.weight": "lm_head.weight"}
    gemma = kind.startswith("gemma")
    for l in range(n_layer):
        b, p = f"blk.{l}.", f"model.layers.{l}."
        m[b + "attn_norm.weight"] = p + "input_layernorm.weight"
        m[b + "attn_q.weight"] = p + "self_attn.q_proj.weight"
        m[b + "attn_k.weight"] = p + "self_attn.k_proj.weight"
        m[b + "attn_v.weight"] = p + "self_attn.v_proj.weight"
        m[b + "attn_qkv.weight"] = p + "self_attn.qkv_proj.weight"
        m[b + "attn_output.weight"] = p + "self_attn.o_proj.weight"
        m[b + "attn_q_norm.weight"] = p + "self_attn.q_norm.weight"
        m[b + "attn_k_norm.weight"] = p + "self_attn.k_norm.weight"
        if gemma:
            m[b + "post_attention_norm.weight"] = p + "post_attention_layernorm.weight"
            m[b + "ffn_norm.weight"] = p + "pre_feedforward_layernorm.weight"
            m[b + "post_ffw_norm.weight"] = p + "post_feedforward_layernorm.weight"
        else:
            m[b + "ffn_norm.weight"] = p + "post_attention_layernorm.weight"
        m[b + "ffn_gate.weight"] = p + "mlp.gate_proj.weight"
        m[b + "ffn_up.weight"] = p + ("mlp.gate_up_proj.weight" if kind.startswith("phi3")
                                      else "mlp.up_proj.weight")
        m[b + "ffn_down.weight"] = p + "mlp.down_proj.weight"
    return m


def gguf_into_hf(path, kind, model):
    """A copy of the HF model holding the GGUF's weights (dequantized by gguf-py)."""
    r = gguf.GGUFReader(path)
    names = hf_name_map(kind, model.config.num_hidden_layers)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    seen = set()
    for t in r.tensors:
        if t.name.startswith("rope_factors_"):
            continue
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        a = np.array(a, dtype=np.float32)
        if kind.startswith("gemma") and t.name.endswith("norm.weight"):
            a = a - 1.0  # the converter stored 1 + w
        if kind.startswith("mistral") and t.name.endswith(("attn_q.weight", "attn_k.weight")):
            nh = N_HEAD if t.name.endswith("attn_q.weight") else N_HEAD_KV
            a = unpermute(a, nh)  # llama.cpp permutes Q/K rows for the NORM rope
        hn = names[t.name]
        assert sd[hn].shape == a.shape, (t.name, sd[hn].shape, a.shape)
        sd[hn] = torch.tensor(a)
        seen.add(hn)
    if model.config.tie_word_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        seen.add("lm_head.weight")
    missing = [k for k in sd if k not in seen and not k.endswith("rotary_emb.inv_freq")]
    assert not missing, missing
    m = copy.deepcopy(model)
    m.load_state_dict(sd, strict=True)
    m.eval()
    return m


def long_factor_model(model):
    """The same weights with the long factors used as the short ones: HF's
    logits of the long-context rope at short positions."""
    cfg = copy.deepcopy(model.config)
    cfg.rope_scaling = dict(cfg.rope_scaling, short_factor=list(cfg.rope_scaling["long_factor"]))
    m = Phi3ForCausalLM(cfg)
    m.load_state_dict(model.state_dict(), strict=True)
    m.eval()
    return m


PLAN = [("qwen3_tied", 11), ("gemma2_tied", 12), ("gemma3_tied", 13), ("phi3_longrope", 14),
        ("mistral_swa", 15)]


def main():
    llama_dir = sys.argv[1]
    only = set(sys.argv[2:])  # kinds to (re)make; default all
    tok = tiny_bpe()
    man_path = os.path.join(OUT, "manifest.json")
    with open(man_path) as f:
        manifest = json.load(f)
    manifest["arch_generator"] = (f"tests/oracle/make_arch_fixtures.py (torch {torch.__version__}, "
                                  f"transformers {transformers.__version__}, llama.cpp "
                                  f"convert_hf_to_gguf.py of llama-cpp-python 0.3.36)")
    plan = [(k, s) for k, s in PLAN if not only or k in only]
    ours = {f"{k}.{t}.gguf{v}" for k, _ in plan for t in ("f32", "q8_0") for v in ("", "#long")}
    manifest["files"] = [e for e in manifest["files"] if e["gguf"] not in ours]
    for kind, seed in plan:
        model = make_hf(kind, seed)
        ps = prompts(seed)
        ref = hf_logits(model, ps)
        for outtype in ("f32", "q8_0"):
            name = f"{kind}.{outtype}"
            path = os.path.join(OUT, name + ".gguf")
            convert(llama_dir, model, tok, path, outtype)
            hf = gguf_into_hf(path, kind, model)
            got = hf_logits(hf, ps)
            if outtype == "f32":
                e = rel_l2(got, ref)
                assert e < 1e-6, (name, "GGUF weights mapped back differ from the model", e)
                want, how = ref, "original HF model"
            else:
                print(f"{name}: quantization moves logits by rel L2 {rel_l2(got, ref):.4f}")
                want, how = got, "HF model + gguf-py dequantized weights"
            want.astype("<f4").tofile(os.path.join(OUT, name + ".logits"))
            entry = {"gguf": name + ".gguf", "logits": name + ".logits",
                     "arch": "llama" if kind.startswith("mistral") else kind.split("_")[0], "type": outtype.upper(), "tied": bool(model.config.tie_word_embeddings),
                     "reference": how, "prompts": ps}
            manifest["files"].append(entry)
            if kind == "phi3_longrope" and outtype == "f32":
                lw = hf_logits(long_factor_model(model), ps)
                print(f"{name}: long vs short factors differ by rel L2 {rel_l2(lw, ref):.4f}")
                lw.astype("<f4").tofile(os.path.join(OUT, name + ".long.logits"))
                manifest["files"].append(dict(entry, gguf=name + ".gguf#long", logits=name + ".long.logits",
                                              n_ctx=128, reference="HF model with the long factors"))
    with open(man_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
