#!/usr/bin/env python3
"""Embeddings per second end to end through jobd vs llama.cpp, same GGUF,
same texts, same threads, same run.

Usage: tests/bench/bench_embed.py [MODEL.gguf] [N] [THREADS]
(default: all-MiniLM-L6-v2 when cached (scripts/fetch-model
all-minilm-l6-v2), else the default model; N = 200 lines, 2 threads)

  ours          release jobd + jobworker --threads THREADS: a /v1/embeddings
                batch of N lines (one text each, the fixture texts of the
                model's llama.cpp oracle cycled: tests/fixtures/model/
                minilm_embed_llamacpp.json for a bert GGUF, else
                smollm2_embed_llamacpp.json), timed from the batch's
                creation to `completed` (validation, leasing, the worker's
                forwards, result upload, finalization)
  llama-server  llama.cpp's server (BENCH_LLAMA_SERVER, else
                .cache/llama-server/*/llama-server as scripts/build-llama-server
                caches it) --embeddings -t THREADS -tb THREADS -c 8192 -b 2048
                -ub 2048 -np 4, the GGUF's own pooling (--pooling last for a
                decoder GGUF, as our engine's default); the same N texts as
                OpenAI /v1/embeddings requests of BENCH_EMBED_CHUNK (default
                32) inputs each, one after the other, timed from the first
                request to the last answer (model load excluded)
  llama.cpp     without a llama-server binary: llama-cpp-python 0.3.36
                Llama(embedding=True).embed(texts) in-process (no HTTP);
                BENCH_LLAMACPP_PYTHON or .venv-bench as bench_engine.py makes it
The two run alternately BENCH_EMBED_ROUNDS times (default 2), best of each
kept.
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


def llama_server_bin():
    p = os.environ.get("BENCH_LLAMA_SERVER")
    if p:
        return p
    import glob
    found = sorted(glob.glob(os.path.join(ROOT, ".cache/llama-server/*/llama-server")))
    return found[-1] if found else None


def run_server(srv, model, texts, threads, pooling=None):
    import socket
    import urllib.request
    chunk = int(os.environ.get("BENCH_EMBED_CHUNK", "32"))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([srv, "-m", model, "--embeddings", "-t", str(threads), "-tb", str(threads),
                          "--host", "127.0.0.1", "--port", str(port), "-c", "8192", "-b", "2048",
                          "-ub", "2048", "-np", "4"] + (["--pooling", pooling] if pooling else []),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit("llama-server did not start")
            time.sleep(0.1)
        t = time.monotonic()
        n = 0
        for i in range(0, len(texts), chunk):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings",
                                         data=json.dumps({"model": "bench", "input": texts[i:i + chunk]}).encode(),
                                         headers={"Content-Type": "application/json"})
            n += len(json.loads(urllib.request.urlopen(req, timeout=3600).read())["data"])
        dt = time.monotonic() - t
        assert n == len(texts), n
        return dt
    finally:
        p.terminate()
        p.wait()


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
    minilm = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2.f32.gguf")
    default = minilm if os.path.exists(minilm) else os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    model = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else default
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    with open(model, "rb") as f:  # general.architecture = "bert" (string key, GGUF v3)
        bert = b"general.architecture\x08\x00\x00\x00\x04" + b"\x00" * 7 + b"bert" in f.read(1 << 16)
    fx = "minilm_embed_llamacpp.json" if bert else "smollm2_embed_llamacpp.json"
    with open(os.path.join(ROOT, "tests/fixtures/model", fx), encoding="utf-8") as f:
        base = json.load(f)["texts"]
    texts = [base[i % len(base)] for i in range(n)]
    rounds = int(os.environ.get("BENCH_EMBED_ROUNDS", "2"))
    srv = llama_server_bin()
    if not bert and not srv:
        peer_name = "llama.cpp (in-process)"
    else:
        peer_name = "llama-server --embeddings"
    if bert and not srv:
        raise SystemExit("a bert GGUF needs llama-server (BENCH_LLAMA_SERVER)")
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(run_ours(model, texts, threads))
        # a decoder GGUF without pooling_type: last-token pooling, as our engine does
        theirs.append(run_server(srv, model, texts, threads, None if bert else "last") if srv
                      else run_llama(model, texts, threads))
    o, t = n / min(ours), n / min(theirs)
    print(f"embeddings: {n} texts, {threads} threads, {os.path.basename(model)}")
    print(f"  ours (jobd end to end)     {o:8.1f} emb/s   (runs: {', '.join(f'{x:.2f}s' for x in ours)})")
    print(f"  {peer_name:26s} {t:8.1f} emb/s   (runs: {', '.join(f'{x:.2f}s' for x in theirs)})")
    print(f"  ratio ours / peer          {o / t:8.2f}")


if __name__ == "__main__":
    main()
