#!/usr/bin/env python3
"""Throughput of a newer architecture against the llama path, per parameter
on the same quant types: the same GGUF run as itself and as a "llama twin".

Usage: tests/bench/bench_arch.py MODEL.gguf [THREADS] [AS_ARCH]   (default 1 thread)
e.g.   tests/bench/bench_arch.py "$(scripts/fetch-model gemma3-270m)"
       tests/bench/bench_arch.py "$(scripts/fetch-model gemma3-270m)" 1 qwen3

AS_ARCH runs the model's tensors as another architecture too (relabelled
the same way; it must find the tensors it needs: Gemma 3's file has q/k
norms and post-norms, so it runs as qwen3, gemma2 or phi3 - numerically
meaningless, but the same shapes and quant types on that architecture's
code path): the way to time architectures no small real GGUF exists for.

The twin is the very same file with general.architecture set to "llama"
and the "<arch>." keys renamed "llama." (sliding_window dropped): the same
tensors, quant types and shapes, so the llama forward pass does the same
matmuls and attention, without what the architecture adds (gemma: q/k
norms, post-norms, GeGLU instead of SwiGLU, the embedding scale, the second
rope table; phi3/qwen3 likewise). Both run `jobworker --bench` (61-token
prompt in one step, 128 greedy decode steps) alternately ROUNDS times
(BENCH_ARCH_ROUNDS, default 3), best of each kept; the ratios arch / llama
are printed (goal: >= 0.9). The machine is shared: compare ratios only.
The twin's outputs are meaningless (its numerics are not the model's).
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = re.compile(r"threads (\d+): prefill (\d+) tok ([\d.]+) tok/s, decode (?:\d+ tok )?([\d.]+) tok/s")
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_str(b, o):
    n = struct.unpack_from("<Q", b, o)[0]
    return b[o + 8:o + 8 + n], o + 8 + n


def skip_value(b, o, t):
    if t in SCALAR:
        return o + struct.calcsize("<" + SCALAR[t])
    if t == 8:
        return read_str(b, o)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n):
            o = skip_value(b, o, et)
        return o
    raise ValueError(f"unknown GGUF value type {t}")


def pack_str(s):
    return struct.pack("<Q", len(s)) + s


def llama_twin(src, dst, new_arch=b"llama"):
    """Rewrite src's metadata as a new_arch model; the tensor section unchanged."""
    with open(src, "rb") as f:
        b = f.read()
    magic, version, n_t, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF" and version in (2, 3), "not a GGUF v2/v3 file"
    o = 24
    arch, kvs, align = None, [], 32
    for _ in range(n_kv):
        k, o = read_str(b, o)
        t = struct.unpack_from("<I", b, o)[0]
        v0 = o + 4
        o = skip_value(b, v0, t)
        if k == b"general.architecture":
            arch = read_str(b, v0)[0]
        if k == b"general.alignment":
            align = struct.unpack_from("<I", b, v0)[0]
        kvs.append((k, t, b[v0:o]))
    infos_start = o
    for _ in range(n_t):
        _, o = read_str(b, o)
        nd = struct.unpack_from("<I", b, o)[0]
        o += 4 + 8 * nd + 4 + 8
    infos = b[infos_start:o]
    data_start = (o + align - 1) // align * align
    out = [struct.pack("<4sIQQ", b"GGUF", version, n_t, 0)]
    n = 0
    for k, t, v in kvs:
        if new_arch == b"llama" and k.startswith(arch + b".attention.sliding_window"):
            continue
        if k == b"general.architecture":
            v = pack_str(new_arch)
        elif k.startswith(arch + b"."):
            k = new_arch + b"." + k[len(arch) + 1:]
        out.append(pack_str(k) + struct.pack("<I", t) + v)
        n += 1
    out[0] = struct.pack("<4sIQQ", b"GGUF", version, n_t, n)
    head = b"".join(out) + infos
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(b[data_start:])
    return arch.decode()


def bench(model, threads):
    r = subprocess.run([os.path.join(ROOT, "build/jobworker"), "--model", model, "--bench",
                        "--threads", str(threads)], capture_output=True, text=True, timeout=900)
    m = LINE.search(r.stdout + r.stderr)
    if not m:
        raise SystemExit(f"unexpected output: {(r.stdout + r.stderr)[-2000:]!r}")
    return float(m.group(3)), float(m.group(4))


def main():
    model = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    rounds = int(os.environ.get("BENCH_ARCH_ROUNDS", "3"))
    with tempfile.TemporaryDirectory() as d:
        twin = os.path.join(d, "llama-twin.gguf")
        arch = llama_twin(model, twin)
        if len(sys.argv) > 3:
            arch = sys.argv[3]
            model = os.path.join(d, arch + "-twin.gguf")
            llama_twin(sys.argv[1], model, arch.encode())
        best = {arch: [0.0, 0.0], "llama": [0.0, 0.0]}
        for _ in range(rounds):
            for who, path in ((arch, model), ("llama", twin)):
                p, dec = bench(path, threads)
                best[who] = [max(best[who][0], p), max(best[who][1], dec)]
    a, l = best[arch], best["llama"]
    print(f"{os.path.basename(sys.argv[1])} as {arch} vs as llama, {threads} thread(s), best of {rounds}:")
    print(f"  prefill {a[0]:.1f} vs {l[0]:.1f} tok/s, ratio {a[0] / l[0]:.3f}")
    print(f"  decode  {a[1]:.1f} vs {l[1]:.1f} tok/s, ratio {a[1] / l[1]:.3f}")


if __name__ == "__main__":
    main()
