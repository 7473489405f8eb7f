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

No network: the config is built here (no hub download, no remote code).
Each measurement runs under its own --step-timeout (SIGALRM): one that
overruns is reported and skipped, and the JSON is rewritten after every
measurement, so a run cut short still leaves the numbers it got.

  python3 tests/cuda/bench/hf_bench.py [--batches 1,16,64] [--ctx 1024]
                                       [--new 32] [--prompt 2048] [--json F]
                                       [--step-timeout 90]
"""
import argparse
import json
import os
import signal
import sys
import time


class StepTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise StepTimeout()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--json")
    ap.add_argument("--step-timeout", type=int, default=90)
    a = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
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
    kw = dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=8192,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    # transformers 5 takes the RoPE base in rope_parameters, 4.x as rope_theta
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    else:
        kw["rope_theta"] = 500000.0
    cfg = LlamaConfig(**kw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    t0 = time.time()
    # built directly in bf16 on the GPU (no 32 GB fp32 copy first)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    model = model.to(torch.bfloat16)
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

    def save():  # atomic: a kill mid-write leaves the previous file
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(res, f)
            os.replace(a.json + ".tmp", a.json)

    def timed(what, fn):
        """fn() under the step timeout; None (and a line saying why) if it fails."""
        signal.alarm(a.step_timeout)
        try:
            return fn()
        except StepTimeout:
            print(f"  {what}: over the {a.step_timeout} s step timeout, skipped")
        except torch.cuda.OutOfMemoryError:
            print(f"  {what}: out of memory, skipped")
        except Exception as e:  # noqa: BLE001 - report and go on to the next workload
            print(f"  {what}: {type(e).__name__}: {e}")
        finally:
            signal.alarm(0)
        torch.cuda.empty_cache()
        return None

    save()
    with torch.inference_mode():
        for b in [int(x) for x in a.batches.split(",") if x]:
            ids = torch.randint(0, cfg.vocab_size, (b, a.ctx), device="cuda")

            def decode():
                gen(ids, 2)  # warm-up
                return gen(ids, 1), gen(ids, 1 + a.new)

            r = timed(f"decode b={b}", decode)
            del ids
            torch.cuda.empty_cache()
            if r is None:
                continue
            t1, tn = r
            tok_s = b * a.new / max(tn - t1, 1e-9)
            res["decode"].append({"batch": b, "tok_s": tok_s})
            print(f"  decode b={b} ctx={a.ctx}: {tok_s:.0f} tok/s")
            save()
        ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")

        def prefill():
            try:
                model(ids, logits_to_keep=1)
            except TypeError:  # older transformers
                model(ids)

        def prefill_timed():
            prefill()  # warm-up
            torch.cuda.synchronize()
            s = time.time()
            prefill()
            torch.cuda.synchronize()
            return time.time() - s

        pt = timed(f"prefill {a.prompt}", prefill_timed)
        if pt is not None:
            res["prefill"] = {"tokens": a.prompt, "tok_s": a.prompt / pt}
            print(f"  prefill {a.prompt}: {a.prompt / pt:.0f} tok/s")
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
