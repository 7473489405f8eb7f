#!/usr/bin/env python3
"""tests/bench/bench_jobd.py - benchmarks of the running daemon (build/jobd).

1. Ingest rate through the API: a 100,000-line file (the same line shape as
   bench_ingest) POSTed to /v1/jobs, timed from the start of the request to
   the batch reaching in_progress (polled every 2 ms), next to the bare
   SQLite INSERT loop of build/bench/bench_ingest measured in the same run;
   prints the ratio (goal >= 0.5).
2. Event-loop latency under load: GET /healthz over one keep-alive
   connection, back to back, while a ~200 MB file is being validated and
   ingested; prints p50 / p99 / max (goal p99 < 50 ms).

usage: bench_jobd.py [N_LINES] [BIG_MB]   (defaults 100000, 200)
"""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBD = os.path.join(ROOT, "build", "jobd")
BENCH_INGEST = os.path.join(ROOT, "build", "bench", "bench_ingest")


def line(i, pad=""):
    return ('{"custom_id":"t-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"smollm",'
            '"messages":[{"role":"system","content":"You classify support tickets.%s"},{"role":"user",'
            '"content":"Ticket %d: my order has not arrived, what should I do?"}],"max_tokens":64,'
            '"temperature":0.2}}\n' % (i, pad, i))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, tmp, extra=()):
        self.port = free_port()
        self.data = os.path.join(tmp, "data-%d" % self.port)
        self.log = open(os.path.join(tmp, "jobd-%d.log" % self.port), "wb")
        self.p = subprocess.Popen([JOBD, "--listen", "127.0.0.1:%d" % self.port, "--data", self.data,
                                   "--log-level", "warn", *extra], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.01)
        raise SystemExit("jobd did not start")

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)

    def stop(self):
        self.p.terminate()
        self.p.wait(30)


def submit(d, body):
    c = d.conn()
    c.request("POST", "/v1/jobs", body=body, headers={"Content-Type": "application/x-ndjson"})
    r = c.getresponse()
    out = json.loads(r.read())
    if r.status != 200:
        raise SystemExit("submit failed: %s" % out)
    return c, out["id"]


def status(c, bid):
    c.request("GET", "/v1/batches/" + bid)
    r = c.getresponse()
    return json.loads(r.read())


def bench_rate(tmp, n):
    body = "".join(line(i) for i in range(1, n + 1)).encode()
    d = Daemon(tmp)
    try:
        t0 = time.monotonic()
        c, bid = submit(d, body)
        while True:
            b = status(c, bid)
            if b["status"] != "validating":
                break
            time.sleep(0.002)
        dt = time.monotonic() - t0
        if b["status"] != "in_progress" or b["request_counts"]["total"] != n:
            raise SystemExit("unexpected batch: %s" % b)
    finally:
        d.stop()
    bare = None
    if os.path.exists(BENCH_INGEST):
        out = subprocess.run([BENCH_INGEST, str(n)], capture_output=True, text=True).stdout
        m = re.search(r"bare SQLite INSERT loop (\d+) req/s", out)
        bare = float(m.group(1)) if m else None
    ours = n / dt
    msg = "jobd POST /v1/jobs %d lines (%.1f MB) to in_progress: %.0f req/s (%.2f s)" % (
        n, len(body) / 1e6, ours, dt)
    if bare:
        msg += "; bare SQLite INSERT loop %.0f req/s; jobd/bare = %.2f (goal >= 0.5)" % (bare, ours / bare)
    print(msg, flush=True)


def bench_healthz(tmp, big_mb):
    pad = "x" * 800
    one = len(line(1, pad))
    n = big_mb * 1_000_000 // one
    path = os.path.join(tmp, "big.jsonl")
    with open(path, "w") as f:
        for i in range(1, n + 1):
            f.write(line(i, pad))
    size = os.path.getsize(path)
    d = Daemon(tmp, ["--max-requests", str(n + 10), "--max-file", "1G", "--max-upload", "1G"])
    try:
        with open(path, "rb") as f:
            c, bid = submit(d, f)
        hc = d.conn()
        lat = []
        t_start = time.monotonic()
        last_poll = 0.0
        done = False
        while not done:
            t0 = time.perf_counter()
            hc.request("GET", "/healthz")
            hc.getresponse().read()
            lat.append(time.perf_counter() - t0)
            if time.monotonic() - last_poll > 0.1:
                last_poll = time.monotonic()
                b = status(c, bid)
                done = b["status"] != "validating"
        ingest_s = time.monotonic() - t_start
        if b["status"] != "in_progress" or b["request_counts"]["total"] != n:
            raise SystemExit("unexpected batch: %s" % b)
    finally:
        d.stop()
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    print("GET /healthz during the ingest of a %.0f MB file (%d lines, %.1f s): %d requests, "
          "p50 %.2f ms, p99 %.2f ms, max %.2f ms (goal p99 < 50 ms)" % (
              size / 1e6, n, ingest_s, len(lat), q(0.5), q(0.99), lat[-1] * 1000), flush=True)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    big_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    tmp = tempfile.mkdtemp(prefix="bench_jobd_")
    try:
        bench_rate(tmp, n)
        bench_healthz(tmp, big_mb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
