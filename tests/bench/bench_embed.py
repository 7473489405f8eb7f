#!/usr/bin/env python3
"""Embeddings per second end to end through jobd vs llama.cpp, same GGUF,
same texts, same threads, same run.

Usage: tests/bench/bench_embed.py [MODEL.gguf] [N] [THREADS]
(default: the default model, N = 200 lines, 2 threads)

  ours       release jobd + jobworker --threads THREADS: a /v1/embeddings
             batch of N lines (one text each, the 50 texts of
             tests/fixtures/model/smollm2_embed_llamacpp.json cycled),
             timed from the batch's creation to `completed` (validation,
             leasing, the worker's forwards, result upload, finalization)
  llama.cpp  llama-cpp-python 0.3.36 Llama(embedding=True, pooling LAST,
             n_threads THREADS, n_seq_max 16, n_batch 512).embed(texts),
             in-process (no HTTP: a floor for llama-server --embeddings)
The two run alternately BENCH_EMBED_ROUNDS times (default 2), best of each
kept. llama-cpp-python: BENCH_LLAMACPP_PYTHON (an interpreter that has it;
for the sdist build see tests/oracle/make_smollm2_embed_llamacpp.py,
PYTHONPATH / LLAMA_CPP_LIB_PATH are passed through), else .venv-bench as
tests/bench/bench_engine.py makes it.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests/py"))
sys.path.insert(0, HERE)

from bench_engine import llamacpp_python  # noqa: E402

LLAMA_SNIPPET = r"""
import json, sys, time, llama_cpp
from llama_cpp import Llama
model, threads, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
texts = json.load(open(path))
llm = Llama(model_path=model, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST,
            n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads,
            n_seq_max=16, verbose=False)
t = time.monotonic(); out = llm.embed(texts, normalize=True); dt = time.monotonic() - t
assert len(out) == len(texts)
print(json.dumps({"seconds": dt}))
"""


def run_ours(model, texts, threads):
    from harness import Proc, binary  # noqa: E402
    from jobdlib import Jobd, create_key  # noqa: E402
    data = tempfile.mkdtemp(prefix="bench_embed_")
    key = create_key(data, "bench", asan=False)
    wt = "bench-wt"
    d = Jobd(data=data, key=key, asan=False, args=["--worker-token", wt, "--sweep-interval", "100ms"])
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", model,
              "--model-id", "bench", "--worker-token", wt, "--threads", str(threads)])
    try:
        time.sleep(1.0)  # let the worker load and register
        lines = [json.dumps({"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                             "body": {"model": "bench", "input": t}}) for i, t in enumerate(texts)]
        t0 = time.monotonic()
        b = d.submit(("\n".join(lines) + "\n").encode(), query="?endpoint=/v1/embeddings")
        while True:
            s = d.json("GET", f"/v1/batches/{b['id']}")
            if s["status"] in ("completed", "failed", "expired", "cancelled"):
                break
            time.sleep(0.05)
        dt = time.monotonic() - t0
        assert s["status"] == "completed" and s["request_counts"]["completed"] == len(texts), s
        return dt
    finally:
        w.stop()
        d.proc.stop()


def run_llama(model, texts, threads):
    py = llamacpp_python()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(texts, f)
    r = subprocess.run([py, "-c", LLAMA_SNIPPET, model, str(threads), f.name], capture_output=True,
                       text=True, timeout=3600)
    os.unlink(f.name)
    if r.returncode != 0:
        raise SystemExit("llama.cpp run failed: " + r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]


def main():
    model = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    with open(os.path.join(ROOT, "tests/fixtures/model/smollm2_embed_llamacpp.json")) as f:
        base = json.load(f)["texts"]
    texts = [base[i % len(base)] for i in range(n)]
    rounds = int(os.environ.get("BENCH_EMBED_ROUNDS", "2"))
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(run_ours(model, texts, threads))
        theirs.append(run_llama(model, texts, threads))
    o, t = n / min(ours), n / min(theirs)
    print(f"embeddings: {n} texts, {threads} threads, {os.path.basename(model)}")
    print(f"  ours (jobd end to end)     {o:8.1f} emb/s   (runs: {', '.join(f'{x:.2f}s' for x in ours)})")
    print(f"  llama.cpp (in-process)     {t:8.1f} emb/s   (runs: {', '.join(f'{x:.2f}s' for x in theirs)})")
    print(f"  ratio ours / llama.cpp     {o / t:8.2f}")


if __name__ == "__main__":
    main()
