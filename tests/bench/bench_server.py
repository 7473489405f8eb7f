#!/usr/bin/env python3
"""End to end against llama.cpp's own server: an offline chat workload through
jobd + jobworker and through `llama-server` (continuous batching over -np
slots), the same GGUF, the same thread count, in the same run.

Workloads (fixed seed; --workloads, default both): "chat", N chat requests
(/v1/chat/completions, one user message of random English words sized to
50..400 prompt tokens) with max_tokens drawn from 64..128; "long", N requests
of 1000..2000 prompt tokens and 64 output tokens. Every end-of-generation token of the model
given logit_bias -100 (read from the GGUF: eos/eot/eom ids and the usual
end-of-turn token texts), greedy. Both servers apply the model's own chat
template, so each reports the same prompt and completion token counts
(printed; a mismatch is reported, not hidden).

  ours       release jobd + `jobworker --jobd` (already registered and the
             model loaded when the clock starts); the workload is one batch:
             timed from the input upload to `completed` (output file written).
  llama.cpp  `llama-server -m M -t T -tb T -np P -c P*CTX` (its defaults
             otherwise: f16 KV cache, 2048/512 batch); all N requests sent at
             once on N connections, timed from the first send to the last
             answer. Each -np in --np (default 1,16,64) runs the full
             workload and the best one is the peer.
With --simd avx2 our engine runs with KN_SIMD=avx2 and the peer is the
AVX2-only build (scripts/build-llama-server --avx2).
Printed per model: output tok/s and total (prompt + output) tok/s of both,
the ratios ours / llama.cpp; then single-sequence prefill and decode tok/s of
both on the same prompt at each of --single-threads (default 1,2; ours:
`jobworker --bench`; llama.cpp: the timings of its /completion answer, prompt
cache off), best of --single-rounds. The run ends with a markdown table,
appended to --notes FILE (bench/NOTES.md) with the date, CPU and load.

The llama-server binary: scripts/build-llama-server builds it once from the
llama.cpp sources vendored in the llama-cpp-python sdist on PyPI (about 35
minutes on 2 cores) and caches it under .cache/llama-server. This script
never builds it: when it is missing, it says how to build it and runs only
our side.

usage: tests/bench/bench_server.py [--model PATH]... [--n 48] [--workloads chat,long]
         [--threads 2] [--np 1,16,64] [--simd native|avx2] [--server PATH]
         [--single-threads 1,2] [--no-single] [--no-peer] [--notes bench/NOTES.md]
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from harness import Proc, binary  # noqa: E402
from jobdlib import Jobd  # noqa: E402

SERVER_DEFAULT = os.path.join(ROOT, ".cache/llama-server/0.3.36-native/llama-server")
EOG_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>",
             "<|end|>", "<|eom_id|>", "</s>", "<eos>")
WORDS = ("time person year way day thing man world life hand part child eye woman place work week "
         "case point government company number group problem fact river mountain garden window "
         "letter music story answer question reason morning evening winter summer city country "
         "market teacher student doctor table paper energy system history future language science "
         "light water money power family friend animal forest ocean island bridge train station "
         "simple bright quiet early late strong gentle careful quick slow ancient modern golden "
         "explain describe consider remember follow carry build change travel discover imagine").split()
SINGLE_PROMPT = "The quick brown fox jumps over the lazy dog. "


# -- GGUF metadata (only what the EOG mask needs) ---------------------------------------------
def gguf_eog_ids(path):
    """Token ids that end generation: eos/eot/eom ids from the metadata plus any
    token whose text is a known end-of-turn marker."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize(fmt)
            return struct.unpack("<" + fmt, f.read(n))

        def rstr():
            (n,) = rd("Q")
            return f.read(n).decode("utf-8", "replace")
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def rval(t, keep=True):
            if t == 8:
                return rstr()
            if t == 9:
                at, n = rd("I") + rd("Q")
                if at == 8 or keep:
                    return [rval(at) for _ in range(n)]
                f.seek(n * struct.calcsize(scalar[at]), 1)
                return None
            return rd(scalar[t])[0]
        magic, ver, n_t, n_kv = rd("I") + rd("I") + rd("Q") + rd("Q")
        if magic != 0x46554747:
            raise SystemExit(f"{path}: not a GGUF file")
        kv = {}
        for _ in range(n_kv):
            k = rstr()
            (t,) = rd("I")
            want = k == "tokenizer.ggml.tokens" or not k.startswith("tokenizer.ggml.") or k.endswith("_id")
            v = rval(t, keep=want)
            if want:
                kv[k] = v
    ids = {kv[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                           "tokenizer.ggml.eom_token_id") if k in kv}
    toks = kv.get("tokenizer.ggml.tokens", [])
    ids |= {i for i, s in enumerate(toks) if s in EOG_TEXTS}
    return sorted(ids)


# -- workload -----------------------------------------------------------------------------------
WORKLOADS = {
    # name: (prompt tokens lo, hi), (output tokens lo, hi), llama-server context per slot
    "chat": ((50, 400), (64, 128), 1024),
    "long": ((1000, 2000), (64, 64), 2304),
}


def workload(n, kind="chat", seed=1234):
    """(content, max_tokens) pairs: prompts sized in tokens as WORKLOADS[kind]
    says (English words are ~1.25 tokens each with the chat template around
    them), output tokens likewise."""
    (plo, phi), (olo, ohi), _ = WORKLOADS[kind]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        target = rng.randint(plo, phi)
        words = [rng.choice(WORDS) for _ in range(max(1, int((target - 20) / 1.25)))]
        out.append((" ".join(words) + ".", rng.randint(olo, ohi)))
    return out


def body_of(content, max_tokens, eog):
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "logit_bias": {str(t): -100 for t in eog}}


# -- ours: jobd + jobworker ---------------------------------------------------------------------
def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_ours(model, work, eog, a):
    wt = "bench-worker-token"
    d = Jobd(asan=False, args=["--worker-token", wt, "--sweep-interval", "100ms"])
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", model,
              "--model-id", "m", "--worker-token", wt, "--threads", str(a.threads),
              "--max-batch-tokens", str(a.max_batch_tokens), "--max-seqs", str(a.max_seqs),
              "--kv-mem", a.kv_mem, "--pack-size", str(len(work))], env=simd_env(a))
    try:
        deadline = time.monotonic() + 120
        while "registered with jobd" not in w.log():
            if w.p.poll() is not None or time.monotonic() > deadline:
                sys.exit("jobworker did not register: " + w.log()[-2000:])
            time.sleep(0.05)
        lines = [json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                             "body": body_of(c, m, eog)}) for i, (c, m) in enumerate(work)]
        cpu0 = proc_cpu_s(w.p.pid)
        t0 = time.perf_counter()
        f = d.upload(("\n".join(lines) + "\n").encode())
        b = d.create_batch(f["id"], endpoint="/v1/chat/completions", completion_window="24h")
        while b["status"] not in ("completed", "failed", "expired", "cancelled"):
            time.sleep(0.05)
            b = d.json("GET", f"/v1/batches/{b['id']}")
        wall = time.perf_counter() - t0
        cpu = proc_cpu_s(w.p.pid) - cpu0
        if b["status"] != "completed" or b["request_counts"]["failed"]:
            sys.exit(f"batch ended {b['status']}: {b['request_counts']}")
        r = d.call("GET", f"/v1/files/{b['output_file_id']}/content", timeout=300)
        if r.status != 200:
            sys.exit(f"output file: HTTP {r.status}")
        pt = ot = short = 0
        for line in r.body.decode().splitlines():
            o = json.loads(line)
            u = o["response"]["body"]["usage"]
            pt += u["prompt_tokens"]
            ot += u["completion_tokens"]
            short += u["completion_tokens"] != work[int(o["custom_id"][1:])][1]
        if short:
            print(f"  WARNING: ours: {short} answer(s) shorter than max_tokens (an EOG id not masked?)")
        return {"wall_s": wall, "prompt_tokens": pt, "output_tokens": ot, "cpu_s": cpu}
    finally:
        w.stop()
        d.proc.stop()


def simd_env(a):
    """Our engine's SIMD level: KN_SIMD=avx2 for the AVX2 comparison (AVX-VNNI
    kept where the CPU has it, as llama.cpp's AVX2 build has none: say so)."""
    return {"KN_SIMD": a.simd} if a.simd != "native" else {}


def single_ours(model, a, threads):
    best = [0, 0.0, 0.0]
    for _ in range(a.single_rounds):
        r = subprocess.run([binary("jobworker", asan=False), "--model", model, "--bench", "--threads",
                            str(threads), "--bench-prompt", str(a.single_repeat),
                            "--bench-decode", str(a.single_decode)],
                           capture_output=True, text=True, timeout=900, env={**os.environ, **simd_env(a)})
        m = re.search(r"prefill (\d+) tok ([\d.]+) tok/s, decode \d+ tok ([\d.]+) tok/s", r.stdout)
        if r.returncode or not m:
            sys.exit("jobworker --bench failed: " + r.stdout + r.stderr[-2000:])
        best = [int(m.group(1)), max(best[1], float(m.group(2))), max(best[2], float(m.group(3)))]
    return best


# -- llama-server -------------------------------------------------------------------------------
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, exe, model, threads, np_, ctx_per_seq, poll, extra=()):
        self.port = free_port()
        self.log = open(os.devnull, "w")
        self.p = subprocess.Popen([exe, "-m", model, "-t", str(threads), "-tb", str(threads), "-np", str(np_),
                                   "-c", str(np_ * ctx_per_seq), "--host", "127.0.0.1", "--port",
                                   str(self.port), "--no-webui", "-ngl", "0", "--poll", str(poll), *extra],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if self.p.poll() is not None:
                sys.exit(f"llama-server exited with {self.p.returncode}")
            try:
                st, _ = self.call("GET", "/health")
                if st == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                sys.exit("llama-server did not become healthy in 300 s")
            time.sleep(0.2)

    def call(self, method, path, body=None, timeout=3600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def run_server(srv, work, eog):
    res = [None] * len(work)
    go = threading.Event()

    def one(i):
        c, m = work[i]
        b = body_of(c, m, eog)
        b["cache_prompt"] = False
        go.wait()
        st, data = srv.call("POST", "/v1/chat/completions", b)
        res[i] = (st, data)
    ths = [threading.Thread(target=one, args=(i,)) for i in range(len(work))]
    for t in ths:
        t.start()
    cpu0 = proc_cpu_s(srv.p.pid)
    t0 = time.perf_counter()
    go.set()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    cpu = proc_cpu_s(srv.p.pid) - cpu0
    pt = ot = short = 0
    for i, (st, data) in enumerate(res):
        if st != 200:
            sys.exit(f"llama-server answered {st}: {data[:500]!r}")
        u = json.loads(data)["usage"]
        pt += u["prompt_tokens"]
        ot += u["completion_tokens"]
        short += u["completion_tokens"] != work[i][1]
    if short:
        print(f"  WARNING: llama-server: {short} answer(s) shorter than max_tokens")
    return {"wall_s": wall, "prompt_tokens": pt, "output_tokens": ot, "cpu_s": cpu}


def single_server(srv, a):
    best = [0, 0.0, 0.0]
    for _ in range(a.single_rounds):
        st, data = srv.call("POST", "/completion", {
            "prompt": SINGLE_PROMPT * a.single_repeat, "n_predict": a.single_decode, "temperature": 0,
            "ignore_eos": True, "cache_prompt": False})
        if st != 200:
            sys.exit(f"llama-server /completion answered {st}: {data[:500]!r}")
        t = json.loads(data)["timings"]
        best = [t["prompt_n"], max(best[1], t["prompt_per_second"]), max(best[2], t["predicted_per_second"])]
    return best


def rates(r):
    return r["output_tokens"] / r["wall_s"], (r["output_tokens"] + r["prompt_tokens"]) / r["wall_s"]


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def e2e(model, kind, a, peer, rows):
    """One workload on one model: ours, then llama-server at each -np; one
    table row (the best -np is the peer)."""
    work = workload(a.n, kind)
    eog = gguf_eog_ids(model)
    (plo, phi), (olo, ohi), ctx = WORKLOADS[kind]
    print(f"== {os.path.basename(model)}, {kind}: {a.n} chat requests, prompts {plo}-{phi} tokens, "
          f"{olo}-{ohi} output tokens ({sum(m for _, m in work)} in all, EOG ids {eog} biased -100), "
          f"greedy, {a.threads} threads, SIMD {a.simd}; load average {loadavg()}", flush=True)
    ours = run_ours(model, work, eog, a)
    o_out, o_tot = rates(ours)
    print(f"  ours (jobd + jobworker, max-seqs {a.max_seqs}, max-batch-tokens {a.max_batch_tokens}): "
          f"{ours['wall_s']:.1f} s, prompt {ours['prompt_tokens']} + output {ours['output_tokens']} tokens, "
          f"output {o_out:.1f} tok/s, total {o_tot:.1f} tok/s (worker CPU {ours['cpu_s']:.1f} s)", flush=True)
    row = {"model": os.path.basename(model), "workload": kind, "ours_out": o_out, "ours_tot": o_tot,
           "peer": None}
    if not peer:
        rows.append(row)
        return
    best = None
    for np_ in [int(x) for x in a.np.split(",")]:
        srv = Server(a.server, model, a.threads, np_, ctx, a.poll)
        try:
            r = run_server(srv, work, eog)
        finally:
            srv.stop()
        l_out, l_tot = rates(r)
        print(f"  llama-server -np {np_}: {r['wall_s']:.1f} s, prompt {r['prompt_tokens']} + output "
              f"{r['output_tokens']} tokens, output {l_out:.1f} tok/s, total {l_tot:.1f} tok/s "
              f"(server CPU {r['cpu_s']:.1f} s; load average {loadavg()})", flush=True)
        if best is None or l_tot > rates(best[1])[1]:
            best = (np_, r)
    np_, r = best
    l_out, l_tot = rates(r)
    same = (r["prompt_tokens"], r["output_tokens"]) == (ours["prompt_tokens"], ours["output_tokens"])
    print(f"  RATIO ours / llama-server -np {np_}: output {o_out / l_out:.2f}x, total {o_tot / l_tot:.2f}x"
          + ("" if same else "  (token counts differ between the two: see above)"), flush=True)
    # on a shared machine the wall clock also measures the neighbours: tokens per
    # CPU-second of each server process is the steadier figure
    o_c = (ours["output_tokens"] + ours["prompt_tokens"]) / ours["cpu_s"]
    l_c = (r["output_tokens"] + r["prompt_tokens"]) / r["cpu_s"]
    print(f"  per CPU-second: ours {o_c:.1f} total tok, llama-server {l_c:.1f}: ratio {o_c / l_c:.2f}x",
          flush=True)
    row.update(peer=(np_, l_out, l_tot), ratio_out=o_out / l_out, ratio_cpu=o_c / l_c, same=same)
    rows.append(row)


def single(model, a, peer, rows):
    """Single-sequence prefill and decode at each of --single-threads."""
    for t in [int(x) for x in a.single_threads.split(",")]:
        s_l = None
        if peer:
            srv = Server(a.server, model, t, 1, a.ctx_per_seq, a.poll)
            try:
                s_l = single_server(srv, a)
            finally:
                srv.stop()
        s_o = single_ours(model, a, t)
        line = f"  single sequence, {t} thread(s), {s_o[0]}-token prompt, {a.single_decode} decoded: ours prefill " \
               f"{s_o[1]:.1f} tok/s, decode {s_o[2]:.1f} tok/s"
        row = {"model": os.path.basename(model), "threads": t, "ours": s_o, "peer": s_l}
        if s_l:
            line += (f"; llama-server ({s_l[0]}-token prompt) prefill {s_l[1]:.1f}, decode {s_l[2]:.1f}; "
                     f"ratio prefill {s_o[1] / s_l[1]:.2f}x, decode {s_o[2] / s_l[2]:.2f}x")
        print(line, flush=True)
        rows.append(row)


def table(e_rows, s_rows, a, started):
    """The run as a markdown section for bench/NOTES.md."""
    out = [f"## End to end vs llama-server, SIMD {a.simd} ({started} UTC, {cpu_name()}, "
           f"{os.cpu_count()} CPUs, {a.threads} threads, tests/bench/bench_server.py)", "",
           f"`{' '.join(sys.argv)}`; llama-server `{a.server}` at -np {a.np} (best kept); "
           f"load average at the end {loadavg()}.", "",
           "| model | workload | ours out tok/s | llama-server out tok/s (-np) | ratio out | ratio per CPU-s | tokens equal |",
           "|---|---|---|---|---|---|---|"]
    for r in e_rows:
        if r["peer"]:
            np_, l_out, _ = r["peer"]
            out.append(f"| {r['model']} | {r['workload']} | {r['ours_out']:.1f} | {l_out:.1f} ({np_}) | "
                       f"{r['ratio_out']:.2f}x | {r['ratio_cpu']:.2f}x | {'yes' if r['same'] else 'NO'} |")
        else:
            out.append(f"| {r['model']} | {r['workload']} | {r['ours_out']:.1f} | - | - | - | - |")
    if s_rows:
        out += ["", "| model | threads | ours prefill / decode tok/s | llama-server prefill / decode | ratio prefill | ratio decode |",
                "|---|---|---|---|---|---|"]
        for r in s_rows:
            o, p = r["ours"], r["peer"]
            if p:
                out.append(f"| {r['model']} | {r['threads']} | {o[1]:.1f} / {o[2]:.1f} | {p[1]:.1f} / {p[2]:.1f} | "
                           f"{o[1] / p[1]:.2f}x | {o[2] / p[2]:.2f}x |")
            else:
                out.append(f"| {r['model']} | {r['threads']} | {o[1]:.1f} / {o[2]:.1f} | - | - | - |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", help="GGUF (repeatable; default: the default model)")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--workloads", default="chat,long",
                    help="comma list of " + ", ".join(f"{k} (prompts {v[0][0]}-{v[0][1]} tokens)"
                                                      for k, v in WORKLOADS.items()))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--np", default="1,16,64", help="llama-server -np values to try (best is kept)")
    ap.add_argument("--ctx-per-seq", type=int, default=1024, help="llama-server context (single sequence)")
    ap.add_argument("--poll", type=int, default=50,
                    help="llama-server --poll (0: its threads sleep instead of spinning, for a shared machine)")
    ap.add_argument("--simd", default="native", choices=("native", "avx2"),
                    help="avx2: our engine with KN_SIMD=avx2 against the AVX2-only llama-server "
                         "(scripts/build-llama-server --avx2)")
    ap.add_argument("--server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("--max-batch-tokens", type=int, default=512)
    ap.add_argument("--max-seqs", type=int, default=64)
    ap.add_argument("--kv-mem", default="2G")
    ap.add_argument("--single-rounds", type=int, default=2)
    ap.add_argument("--single-threads", default="1,2", help="thread counts of the single-sequence runs")
    ap.add_argument("--single-repeat", type=int, default=24, help="single-sequence prompt: sentence x R")
    ap.add_argument("--single-decode", type=int, default=64)
    ap.add_argument("--no-single", action="store_true", help="skip the single-sequence comparison")
    ap.add_argument("--no-peer", action="store_true", help="only our side")
    ap.add_argument("--no-e2e", action="store_true", help="only the single-sequence comparison")
    ap.add_argument("--notes", help="append the run's table to this markdown file (bench/NOTES.md)")
    a = ap.parse_args()
    if not a.server:
        a.server = SERVER_DEFAULT.replace("-native/", f"-{a.simd}/")
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    models = a.model or [subprocess.run([os.path.join(ROOT, "scripts/fetch-model")], capture_output=True,
                                        text=True, check=True).stdout.strip()]
    peer = not a.no_peer
    if peer and not os.access(a.server, os.X_OK):
        print(f"llama-server not found at {a.server}: the peer is skipped. Build it once with "
              f"`JOBS=2 scripts/build-llama-server{' --avx2' if a.simd == 'avx2' else ''}` (llama.cpp from "
              "the llama-cpp-python sdist on PyPI; ~35 min on 2 cores), or name a binary with LLAMA_SERVER=PATH.",
              flush=True)
        peer = False
    e_rows, s_rows = [], []
    for model in models:
        if not a.no_e2e:
            for kind in a.workloads.split(","):
                e2e(model, kind, a, peer, e_rows)
        if not a.no_single:
            single(model, a, peer, s_rows)
    t = table(e_rows, s_rows, a, started)
    print(t, flush=True)
    if a.notes:
        with open(a.notes, "a") as f:
            f.write("\n" + t)


if __name__ == "__main__":
    main()
