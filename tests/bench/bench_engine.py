#!/usr/bin/env python3
"""CPU engine vs llama.cpp on the same GGUF, the same prompt and thread count.

Usage: tests/bench/bench_engine.py [MODEL.gguf] [THREADS...]   (default: the
default model, threads 1 2)

Both engines prefill the same prompt ("The quick brown fox jumps over the
lazy dog. " x 6, 61 tokens with BOS) in one step and decode 128 greedy
tokens one step at a time, end-of-generation ignored:
  ours       build/jobworker --model M --bench --threads N
  llama.cpp  tests/bench/llamacpp_decode.py M N   (llama-cpp-python 0.3.36)
The machine is shared and noisy, so the two run alternately ROUNDS times
(BENCH_ENGINE_ROUNDS, default 3) and the best of each is kept; the ratios
ours / llama.cpp are printed. llama-cpp-python comes from .venv-bench, which
this script creates on first use (pip compiles llama.cpp: several minutes);
BENCH_LLAMACPP_PYTHON names another interpreter that has it.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMACPP_VERSION = "0.3.36"
LINE = re.compile(r"threads (\d+): prefill (\d+) tok ([\d.]+) tok/s, decode (?:\d+ tok )?([\d.]+) tok/s")


def llamacpp_python():
    py = os.environ.get("BENCH_LLAMACPP_PYTHON")
    if py:
        return py
    venv = os.path.join(ROOT, ".venv-bench")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '%s')" % LLAMACPP_VERSION],
        capture_output=True).returncode == 0
    if not ok:
        print(f"creating {venv} with llama-cpp-python=={LLAMACPP_VERSION} (compiles llama.cpp; "
              "several minutes the first time)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", f"llama-cpp-python=={LLAMACPP_VERSION}"],
                       check=True)
    return py


def parse(out, who):
    m = LINE.search(out)
    if not m:
        raise SystemExit(f"{who}: unexpected output: {out!r}")
    return int(m.group(2)), float(m.group(3)), float(m.group(4))


def main():
    args = sys.argv[1:]
    model = args.pop(0) if args and args[0].endswith(".gguf") else subprocess.run(
        [os.path.join(ROOT, "scripts/fetch-model")], capture_output=True, text=True,
        check=True).stdout.strip()
    threads = [int(a) for a in args] or [1, 2]
    rounds = int(os.environ.get("BENCH_ENGINE_ROUNDS", "3"))
    py = llamacpp_python()
    jw = os.path.join(ROOT, os.environ.get("BUILD", "build"), "jobworker")
    lc = os.path.join(ROOT, "tests/bench/llamacpp_decode.py")
    print(f"model {os.path.basename(model)}; best of {rounds} alternating rounds")
    print(f"{'threads':>7} {'engine':>10} {'prompt tok':>10} {'pp tok/s':>10} {'decode tok/s':>12}")
    for nt in threads:
        best = {"ours": [0, 0.0, 0.0], "llama.cpp": [0, 0.0, 0.0]}
        for _ in range(rounds):
            for who, argv in (("ours", [jw, "--model", model, "--bench", "--threads", str(nt)]),
                              ("llama.cpp", [py, lc, model, str(nt)])):
                r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise SystemExit(f"{who} failed: {r.stderr}")
                n, pp, dec = parse(r.stdout, who)
                b = best[who]
                b[0] = n
                b[1] = max(b[1], pp)
                b[2] = max(b[2], dec)
        for who in ("ours", "llama.cpp"):
            n, pp, dec = best[who]
            print(f"{nt:>7} {who:>10} {n:>10} {pp:>10.1f} {dec:>12.1f}")
        o, l = best["ours"], best["llama.cpp"]
        print(f"{nt:>7} {'ratio':>10} {'':>10} {o[1] / l[1]:>10.2f} {o[2] / l[2]:>12.2f}"
              "   (ours / llama.cpp)", flush=True)


if __name__ == "__main__":
    main()
