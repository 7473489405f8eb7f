#!/usr/bin/env python3
"""Structured outputs: cost of the token masks, and a constrained batch's
throughput against the same batch unconstrained, in the same run.

1. build/bench/bench_gram: microseconds per mask (per token per sequence)
   on the model's 49,152-token vocabulary, cold trie walk and through the
   per-grammar mask cache, over the schema corpus.
2. `jobworker --batch-file` on N lines of tests/py/structlib.py (12 JSON
   Schemas, choice and regex lines; half greedy, half seeded), then the same
   lines without their constraint, each with max_tokens = the tokens that
   line produced constrained and its end-of-generation ids at logit_bias
   -100: the same prompts and exactly the same number of output tokens per
   line, so the scheduler runs the same shape of batch. Reported: output
   tok/s of both, the ratio, and the engine's own mask time (sched-stats
   mask_s, masks). Rounds alternate C, U, C, U... (--rounds).

usage: python3 tests/bench/bench_structured.py [--n 112] [--threads 2] [--rounds 1] [--model PATH]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import structlib  # noqa: E402

EOG = [0, 1, 2]   # SmolLM2: <|endoftext|>, <|im_start|>, <|im_end|>


def run(model, threads, path):
    r = subprocess.run([os.path.join(ROOT, "build/jobworker"), "--model", model, "--threads", str(threads),
                        "--batch-file", path], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    m = re.search(r"sched-stats: (\{.*\})", r.stderr)
    return [json.loads(x) for x in r.stdout.splitlines()], json.loads(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=112)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    print("== mask cost per token per sequence (build/bench/bench_gram, 1 thread)", flush=True)
    subprocess.run([os.path.join(ROOT, "build/bench/bench_gram"), a.model,
                    os.path.join(ROOT, "tests/fixtures/gram/corpus.json")], check=True)
    tmp = tempfile.mkdtemp()
    cpath, upath = os.path.join(tmp, "c.jsonl"), os.path.join(tmp, "u.jsonl")
    with open(cpath, "w") as f:
        f.write("\n".join(structlib.lines(a.n)) + "\n")
    print(f"== {a.n} lines, constrained vs the same lines unconstrained with the same output token counts, "
          f"{a.threads} threads", flush=True)
    res = {"C": [], "U": []}
    counts = None
    for rnd in range(a.rounds):
        out, st = run(a.model, a.threads, cpath)
        res["C"].append(st)
        if counts is None:
            counts = {o["custom_id"]: o["response"]["body"]["usage"]["completion_tokens"] for o in out}
            with open(upath, "w") as f:
                for i in range(a.n):
                    url, body, _, _ = structlib.body_for(i, constrained=False)
                    body["max_tokens"] = counts[f"r{i}"]
                    body["logit_bias"] = {str(t): -100 for t in EOG}
                    f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": body}) + "\n")
        print(f"  round {rnd + 1} constrained:   {st['completion_tokens']} tokens, wall {st['wall_s']:.2f} s, "
              f"forward {st['forward_s']:.2f} s, masks {st['masks']} in {st['mask_s']:.3f} s "
              f"({1e6 * st['mask_s'] / max(st['masks'], 1):.1f} us wall per mask), "
              f"{st['output_tok_s']:.2f} output tok/s", flush=True)
        _, su = run(a.model, a.threads, upath)
        res["U"].append(su)
        print(f"  round {rnd + 1} unconstrained: {su['completion_tokens']} tokens, wall {su['wall_s']:.2f} s, "
              f"forward {su['forward_s']:.2f} s, {su['output_tok_s']:.2f} output tok/s", flush=True)
    c = sum(s["completion_tokens"] for s in res["C"]) / sum(s["wall_s"] for s in res["C"])
    u = sum(s["completion_tokens"] for s in res["U"]) / sum(s["wall_s"] for s in res["U"])
    ms = sum(s["mask_s"] for s in res["C"]) / sum(s["wall_s"] for s in res["C"])
    print(f"RESULT constrained {c:.2f} output tok/s, unconstrained {u:.2f}: ratio {c / u:.3f} "
          f"({100 * (1 - c / u):+.1f}% slower); mask time {100 * ms:.1f}% of the constrained wall time")


if __name__ == "__main__":
    main()
