#!/usr/bin/env python3
"""tests/bench/bench_hostile.py - jobd's memory and latency under hostile load.

A release jobd (build/jobd, default caps) on a fresh data directory, one
batch of 20,000 requests finished by a scripted worker (its output file is
what the readers read), then one phase at a time:

  uploads   N connections (default 4,096: the --max-connections default)
            each start a POST /v1/files of 64 MiB (Content-Length) and send
            its body at ~100 bytes/s: every upload pipeline is open at once.
  readers   M clients (default 1,000) each GET the output file's content
            and read it at ~1 KB/s.
  polls     500 worker long polls (wait_ms 5000) opened and dropped before
            their answer, 4 rounds.
  big lines a 200,000-line JSONL file, 32 of its lines just under the 4 MiB
            line cap, through POST /v1/jobs and ingested.

During each phase a client polls GET /v1/batches/{id} back to back on a
fresh connection per request; the script prints its p50 / p99 / max, and
jobd's RSS before, at the phase's peak (sampled every 100 ms from
/proc/PID/status) and after the phase's sockets close (VmHWM is the
process's all-time peak). Nothing is lost: the batch's request_counts and
output file are checked at the end.

What it asserts (exit 1 otherwise, after printing every figure):
  - jobd's peak RSS (VmHWM) stays under BOUND_MIB, the sum of what each
    kind of state can hold at the default caps (bench/NOTES.md, "Memory
    under hostile load"): a base (BASE_MIB: the binary, SQLite's page
    caches, the setup batch), 4,096 connections each in its largest state
    among these loads (an upload in progress: CONN_KIB), --max-streams (256)
    streamed answers (STREAM_KIB each: the zstd reader, one chunk, the
    queue), and one line being validated with its parse (LINE_MIB);
  - a status poll's p99 under 100 ms in every phase.

usage: bench_hostile.py [N_UPLOADS] [N_READERS] [PHASE_S]  (defaults 4096 1000 20)
"""
import http.client
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from jobdlib import jsonl, zstd_compress  # noqa: E402

JOBD = os.path.join(ROOT, "build", "jobd")
WT = "hostile-worker"

MAX_CONNECTIONS, MAX_STREAMS = 4096, 256  # jobd's defaults
BASE_MIB, CONN_KIB, STREAM_KIB, LINE_MIB = 64, 120, 768, 32
BOUND_MIB = BASE_MIB + MAX_CONNECTIONS * CONN_KIB // 1024 + MAX_STREAMS * STREAM_KIB // 1024 + LINE_MIB
P99_MS = 100
failures = []


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def call(port, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def _poll_loop(port, bid, stop, conn):
    lat, errors = [], 0
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            st, _ = call(port, "GET", f"/v1/batches/{bid}", timeout=10)
            if st != 200:
                errors += 1
        except OSError:
            errors += 1
        lat.append((time.monotonic() - t0) * 1000)
        time.sleep(0.005)
    conn.send((lat, errors))


class Poller:
    """GET /v1/batches/{id} back to back; latencies in ms. In a process of
    its own, so the load generator's Python (its GIL) does not delay it."""

    def __init__(self, port, bid):
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        self.stop = ctx.Event()
        self._rx, tx = ctx.Pipe(duplex=False)
        self._p = ctx.Process(target=_poll_loop, args=(port, bid, self.stop, tx), daemon=True)
        self.lat, self.errors = [], 0

    def start(self):
        self._p.start()

    def join(self):
        self.lat, self.errors = self._rx.recv()
        self._p.join()

    def p99(self):
        s = sorted(self.lat) or [0]
        return s[int(len(s) * 0.99)]

    def summary(self):
        s = sorted(self.lat) or [0]
        return (f"{len(s)} polls, p50 {s[len(s) // 2]:.1f} ms, p99 {self.p99():.1f} ms, "
                f"max {s[-1]:.1f} ms, {self.errors} errors")


def phase(name, pid, port, bid, start, tick, phase_s):
    """start() -> list of sockets; tick(socks) every 0.5 s for phase_s."""
    before = rss_kib(pid)
    poll = Poller(port, bid)
    poll.start()
    t0 = time.monotonic()
    socks = start()
    peak = before
    while time.monotonic() - t0 < phase_s:
        tick(socks)
        for _ in range(5):
            peak = max(peak, rss_kib(pid))
            time.sleep(0.1)
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    time.sleep(1.5)
    poll.stop.set()
    poll.join()
    after = rss_kib(pid)
    print(f"{name}: {len(socks)} sockets, RSS {before // 1024} MiB before, peak {peak // 1024} MiB, "
          f"{after // 1024} MiB after; status poll {poll.summary()}", flush=True)
    if poll.p99() >= P99_MS and not name.startswith("quiet"):  # (the baseline is the box's, not jobd's)
        failures.append(f"{name}: status poll p99 {poll.p99():.1f} ms")


def main():
    n_up = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    n_rd = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    phase_s = float(sys.argv[3]) if len(sys.argv) > 3 else 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = tempfile.mkdtemp(prefix="hostile-")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    log = open(os.path.join(work, "jobd.log"), "wb")
    p = subprocess.Popen([JOBD, "--listen", f"127.0.0.1:{port}", "--data", os.path.join(work, "data"),
                          "--worker-token", WT, "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)))
    try:
        for _ in range(300):
            try:
                if call(port, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        n_req = 20000
        st, b = call(port, "POST", "/v1/jobs", jsonl(n_req))
        bid = json.loads(b)["id"]
        wh = {"Authorization": f"Bearer {WT}", "Content-Type": "application/json"}
        while json.loads(call(port, "GET", f"/v1/batches/{bid}")[1])["status"] != "in_progress":
            time.sleep(0.05)
        wid = json.loads(call(port, "POST", "/v1/worker/register", json.dumps(
            {"name": "w", "device": "cpu", "models": [{"id": "smollm", "aliases": []}]}), wh)[1])["worker_id"]
        while True:
            lease = json.loads(call(port, "POST", "/v1/worker/lease", json.dumps(
                {"worker_id": wid, "model": "smollm", "max_requests": 1024, "lease_seconds": 120}), wh)[1])
            if not lease["requests"]:
                break
            lines = [{"request_id": q["request_id"], "status": "success",
                      "response": {"status_code": 200, "body": {"id": "x", "object": "chat.completion",
                                                                 "choices": [{"index": 0, "message": {
                                                                     "role": "assistant",
                                                                     "content": os.urandom(96).hex()},
                                                                     "finish_reason": "stop"}]}},
                      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0}}
                     for q in lease["requests"]]
            body = zstd_compress(("\n".join(json.dumps(x) for x in lines) + "\n").encode())
            call(port, "POST", "/v1/worker/results", body,
                 {**wh, "Content-Type": "application/x-ndjson", "Content-Encoding": "zstd",
                  "X-Worker-Id": wid, "X-Lease-Id": lease["lease_id"]})
        while True:
            bo = json.loads(call(port, "GET", f"/v1/batches/{bid}")[1])
            if bo["status"] == "completed":
                break
            time.sleep(0.1)
        out_id = bo["output_file_id"]
        st, out = call(port, "GET", f"/v1/files/{out_id}/content")
        print(f"setup: {n_req} requests done, output file {len(out) / 1e6:.1f} MB; RSS "
              f"{rss_kib(p.pid) // 1024} MiB", flush=True)

        phase("quiet (no hostile load: the box's own latency)", p.pid, port, bid, lambda: [], lambda socks: None,
              min(phase_s, 10))

        def uploads():
            socks = []
            for i in range(n_up):
                c = socket.create_connection(("127.0.0.1", port))
                c.setblocking(False)
                hdr = (f"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
                       f"Content-Length: {64 << 20}\r\n\r\n--B\r\nContent-Disposition: form-data; name=\"purpose\""
                       f"\r\n\r\nbatch\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n"
                       f"\r\n").encode()
                try:
                    c.send(hdr)
                except OSError:
                    pass
                socks.append(c)
            return socks

        def trickle(socks):
            line = b'{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{}}\n'[:50]
            for c in socks:
                try:
                    c.send(line)
                except OSError:
                    pass

        phase("uploads", p.pid, port, bid, uploads, trickle, phase_s)

        def readers():
            socks = []
            for i in range(n_rd):
                c = socket.create_connection(("127.0.0.1", port))
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.setblocking(False)
                c.send(f"GET /v1/files/{out_id}/content HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                socks.append(c)
            return socks

        heads = {}

        def read_slowly(socks):
            for c in socks:
                try:
                    got = c.recv(512)  # 512 bytes per 0.5 s: ~1 KB/s
                    if c not in heads and got:
                        heads[c] = got[:12]
                except OSError:
                    pass

        phase("readers", p.pid, port, bid, readers, read_slowly, phase_s)
        n200 = sum(1 for h in heads.values() if h.startswith(b"HTTP/1.1 200"))
        n503 = sum(1 for h in heads.values() if h.startswith(b"HTTP/1.1 503"))
        print(f"readers: {n200} streamed (200), {n503} refused at --max-streams (503, Retry-After), "
              f"{n_rd - n200 - n503} with no answer", flush=True)

        def polls():
            socks = []
            for i in range(500):
                c = socket.create_connection(("127.0.0.1", port))
                body = json.dumps({"worker_id": wid, "model": "nobody", "max_requests": 1, "wait_ms": 5000})
                c.send((f"POST /v1/worker/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WT}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
                socks.append(c)
            return socks

        rounds = []

        def drop_and_reopen(socks):
            if len(rounds) < 4 and int(time.monotonic() * 2) % 4 == 0:
                for c in socks:
                    c.close()
                socks[:] = polls()
                rounds.append(1)

        phase("long polls", p.pid, port, bid, polls, drop_and_reopen, min(phase_s, 10))

        # a JSONL file of 200,000 lines, 32 of them just under the 4 MiB line cap
        big = "x" * ((4 << 20) - 300)
        lines = []
        for i in range(200000):
            content = big if i % 6250 == 0 else f"Question {i}?"
            lines.append(json.dumps({"custom_id": f"h-{i}", "method": "POST", "url": "/v1/chat/completions",
                                     "body": {"model": "smollm", "max_tokens": 4,
                                              "messages": [{"role": "user", "content": content}]}},
                                    separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode()
        del lines
        before = rss_kib(p.pid)
        poll = Poller(port, bid)
        poll.start()
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(p.pid))
                time.sleep(0.05)
        threading.Thread(target=sample, daemon=True).start()
        t0 = time.monotonic()
        st, b = call(port, "POST", "/v1/jobs", data, timeout=600)
        assert st == 200, b[:300]
        big_id = json.loads(b)["id"]
        while True:
            bo = json.loads(call(port, "GET", f"/v1/batches/{big_id}")[1])
            if bo["status"] != "validating":
                break
            time.sleep(0.1)
        done.set()
        poll.stop.set()
        poll.join()
        assert bo["status"] == "in_progress" and bo["request_counts"]["total"] == 200000, bo
        print(f"big lines: {len(data) / 2**20:.0f} MiB, 200,000 lines (32 of 4 MiB) ingested in "
              f"{time.monotonic() - t0:.1f} s; RSS {before // 1024} MiB before, peak {peak[0] // 1024} MiB; "
              f"status poll {poll.summary()}", flush=True)
        if poll.p99() >= P99_MS:
            failures.append(f"big lines: status poll p99 {poll.p99():.1f} ms")
        bo = json.loads(call(port, "GET", f"/v1/batches/{bid}")[1])
        st, out2 = call(port, "GET", f"/v1/files/{out_id}/content")
        assert bo["request_counts"]["completed"] == n_req and out2 == out, "something was lost"
        hwm = rss_kib(p.pid, 'VmHWM') // 1024
        print(f"end: batch intact ({n_req} completed, output identical); jobd VmHWM {hwm} MiB "
              f"(bound {BOUND_MIB} MiB)", flush=True)
        if hwm >= BOUND_MIB:
            failures.append(f"peak RSS {hwm} MiB over the bound {BOUND_MIB} MiB")
        print("; ".join(failures) if failures else f"ok: peak RSS under {BOUND_MIB} MiB, every p99 under "
              f"{P99_MS} ms", flush=True)
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
