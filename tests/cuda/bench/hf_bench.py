#!/usr/bin/env python3
"""hf_bench.py - the gpu_bench workload through HF transformers, for comparison.

A randomly initialised LlamaForCausalLM with the Llama-3-8B config (32
layers, hidden 4096, 32 heads, 8 KV heads, head dim 128, SwiGLU 14336,
vocab 128256) in bf16 on cuda: SYNTHETIC weights, the outputs mean nothing.

  decode: batch B of random 1,024-token prompts; greedy generate() of
          1 token (prefill) and of 1 + N tokens (min_new_tokens forces N);
          decode tok/s = B * N / (t(1 + N) - t(1)).
  prefill: one 2,048-token prompt, a forward pass (logits of the last
          position only), tok/s = 2048 / t.

Prints a table and, with --json FILE, the numbers as JSON. Needs torch and
transformers (present on the GPU machine; no install here).

  python3 tests/cuda/bench/hf_bench.py [--batches 1,16,64] [--ctx 1024]
                                       [--new 32] [--prompt 2048] [--json F]
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print(f"hf_bench: torch/transformers not available ({e}): skipped")
        return 0
    if not torch.cuda.is_available():
        print("hf_bench: no GPU: skipped")
        return 0
    cfg = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=8192, rope_theta=500000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    dev = torch.cuda.get_device_name(0)
    print(f"hf_bench: SYNTHETIC Llama-3-8B config, random bf16 weights, transformers "
          f"{transformers.__version__}, torch {torch.__version__}, {dev}, "
          f"set up in {time.time() - t0:.1f} s")

    def gen(ids, n):
        torch.cuda.synchronize()
        s = time.time()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                       min_new_tokens=n, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.time() - s

    res = {"synthetic": True, "device": dev, "ctx": a.ctx, "new_tokens": a.new,
           "transformers": transformers.__version__, "decode": []}
    with torch.inference_mode():
        for b in [int(x) for x in a.batches.split(",") if x]:
            ids = torch.randint(0, cfg.vocab_size, (b, a.ctx), device="cuda")
            try:
                gen(ids, 2)  # warm-up
                t1 = gen(ids, 1)
                tn = gen(ids, 1 + a.new)
            except torch.cuda.OutOfMemoryError:
                print(f"  decode b={b}: out of memory")
                torch.cuda.empty_cache()
                continue
            tok_s = b * a.new / max(tn - t1, 1e-9)
            res["decode"].append({"batch": b, "tok_s": tok_s})
            print(f"  decode b={b} ctx={a.ctx}: {tok_s:.0f} tok/s")
            del ids
            torch.cuda.empty_cache()
        ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")

        def prefill():
            try:
                model(ids, logits_to_keep=1)
            except TypeError:  # older transformers
                model(ids)

        prefill()
        torch.cuda.synchronize()
        s = time.time()
        prefill()
        torch.cuda.synchronize()
        pt = time.time() - s
        res["prefill"] = {"tokens": a.prompt, "tok_s": a.prompt / pt}
        print(f"  prefill {a.prompt}: {a.prompt / pt:.0f} tok/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
