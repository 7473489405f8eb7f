#!/usr/bin/env python3
"""Decode tokens/s of llama.cpp (llama-cpp-python) on a GGUF model, CPU only.

The peer number for the CPU engine: run once by hand with the oracle venv,
e.g.  /work/wt/tok/.venv-oracle/bin/python tests/bench/llamacpp_decode.py \
          $(scripts/fetch-model) 1 2
Prints, per thread count, prompt-processing and decode tokens/s measured by
llama.cpp's own timers (greedy, fixed 128 new tokens, no EOS stop)."""
import sys
import time

from llama_cpp import Llama


def main():
    path = sys.argv[1]
    for nt in [int(a) for a in sys.argv[2:]] or [1]:
        llm = Llama(model_path=path, n_ctx=512, n_threads=nt, n_threads_batch=nt,
                    n_gpu_layers=0, verbose=False, seed=1)
        prompt = llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 6)
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        n_new = 128
        tok = llm.sample(temp=0.0)
        for _ in range(n_new):
            llm.eval([tok])
            tok = llm.sample(temp=0.0)
        t2 = time.perf_counter()
        print(f"threads {nt}: prefill {len(prompt)} tok {len(prompt) / (t1 - t0):.1f} tok/s, "
              f"decode {n_new / (t2 - t1):.1f} tok/s")
        del llm


if __name__ == "__main__":
    main()
