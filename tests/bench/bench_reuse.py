#!/usr/bin/env python3
"""Result reuse benchmark (release build, a real jobd and one CPU jobworker on
the default model): the nightly-eval case of spec/usage.md "Result reuse".

1. N deterministic chat lines (temperature 0) in a batch with reuse on:
   all computed (nothing stored yet).
2. The same lines with 10% changed, reuse on: the 90% unchanged are answered
   at lease time, the 10% computed.
3. The lines of 2 with reuse off: a fresh run of the same work.

Printed per run: wall seconds from create to completed, the worker time the
fleet view attributes to the batch, computed and reused tokens, and the
ledger cost at the test prices.

usage: tests/bench/bench_reuse.py [--n 200] [--max-tokens 32] [--threads 2]
"""
import argparse
import copy
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from harness import Proc, binary, tmpdir  # noqa: E402
from jobdlib import Jobd  # noqa: E402

MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WT = "bench-reuse"


def lines(bs):
    return "".join(json.dumps({"custom_id": f"r-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": b}) + "\n" for i, b in enumerate(bs)).encode()


def one(d, bs, reuse):
    f = d.upload(lines(bs))
    t0 = time.monotonic()
    b = d.create_batch(f["id"], completion_window="24h", metadata={"reuse": reuse})
    b = d.wait_batch(b["id"], statuses=("completed", "failed"), timeout=3600)
    wall = time.monotonic() - t0
    assert b["status"] == "completed", b
    u = d.json("GET", f"/v1/usage?group_by=batch&batch={b['id']}")["totals"]
    fc = d.json("GET", f"/v1/batches/{b['id']}")["fleet_cost"]
    return wall, fc, u


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    d = Jobd(asan=False, args=["--worker-token", WT, "--sweep-interval", "200ms", "--prices",
                               "smollm=150000:600000"])
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", MODEL,
              "--model-id", "SmolLM2-135M-Instruct", "--alias", "smollm", "--worker-token", WT,
              "--threads", str(a.threads), "--hourly-cost", "3.60"])
    try:
        first = [{"model": "smollm", "messages": [{"role": "user", "content": f"Classify item {i}: is it a fruit?"}],
                  "max_tokens": a.max_tokens, "temperature": 0} for i in range(a.n)]
        second = copy.deepcopy(first)
        for i in range(0, a.n, 10):
            second[i]["messages"][0]["content"] += " Answer yes or no."
        runs = [("1 first run, reuse on", first, "on"), ("2 10% changed, reuse on", second, "on"),
                ("3 same as 2, reuse off", second, "off")]
        print(f"n={a.n} max_tokens={a.max_tokens} threads={a.threads}")
        print(f"{'run':28} {'wall s':>8} {'worker s':>9} {'computed':>9} {'reused':>8} {'cost µ$':>8} {'fleet µ$':>8}")
        for name, bs, reuse in runs:
            wall, fc, u = one(d, bs, reuse)
            print(f"{name:28} {wall:8.2f} {fc['worker_ms'] / 1000:9.2f} {fc['computed_tokens']:9d} "
                  f"{u['reused_tokens']:8d} {u['cost']['amount_micros']:8d} {fc['amount_micros']:8d}")
    finally:
        w.stop()
        d.proc.stop()


if __name__ == "__main__":
    main()
