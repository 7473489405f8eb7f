#!/usr/bin/env python3
"""tests/bench/bench_pg_scale.py - jobd's lease+commit rate and polling
latency on SQLite (1 jobd) and on PostgreSQL (1 and 2 jobd instances on one
database and one shared --data), in one run on the same machine.

Each setup: one batch of N requests is submitted and ingested (not timed),
then W worker processes (instant workers: lease packs of P, answer each
request with a ~300-byte chat.completion, upload the pack as one zstd
chunk) run until every request is committed; with 2 instances the workers
alternate between them (worker i on instance i % 2). Meanwhile a client
polls GET /v1/batches/{id} every 20 ms (alternating instances too).
Reported per setup: lease+commit requests/s (first lease to last commit)
and the poll latency p50 / p99, plus the worker lease-call p99; and the
CPU used meanwhile: how busy the whole box was (/proc/stat) and the CPU
seconds of the jobd process(es) and of PostgreSQL (its processes' /proc
stat), so a run on a saturated box says so.

usage: bench_pg_scale.py [N] [W] [P]   (default 20000 4 256)
Needs the release build (build/jobd) and PostgreSQL (scripts/pg-cluster).
"""
import http.client
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_jobd import ROOT, line  # noqa: E402

import zstandard  # noqa: E402

JOBD = os.path.join(ROOT, "build", "jobd")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inst:
    def __init__(self, tmp, data, extra):
        self.port = free_port()
        self.log = open(os.path.join(tmp, "jobd-%d.log" % self.port), "wb")
        self.p = subprocess.Popen([JOBD, "--listen", "127.0.0.1:%d" % self.port, "--data", data,
                                   "--log-level", "warn", "--worker-token", "bench", "--sweep-interval", "200ms",
                                   *extra], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(1000):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/readyz")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        self.p.kill()
        raise SystemExit("jobd did not start")

    def stop(self):
        self.p.terminate()
        self.p.wait(30)


def worker(port, n_target, pack, counter, lat_q, t0_q):
    zc = zstandard.ZstdCompressor(level=1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    auth = {"Authorization": "Bearer bench"}

    def post(path, body, extra=None):
        c.request("POST", path, body, dict(auth, **(extra or {})))
        r = c.getresponse()
        data = r.read()
        assert r.status == 200, (r.status, data[:300])
        return json.loads(data)

    wid = post("/v1/worker/register", json.dumps({"name": "bench", "models": [{"id": "smollm"}]}).encode())[
        "worker_id"]
    lats = []
    first = None
    while True:
        with counter.get_lock():
            if counter.value >= n_target:
                break
        t = time.monotonic()
        lz = post("/v1/worker/lease", json.dumps({"worker_id": wid, "model": "smollm", "max_requests": pack,
                                                  "wait_ms": 100}).encode())
        lats.append(time.monotonic() - t)
        if first is None:
            first = t
        if not lz["requests"]:
            continue
        out = [json.dumps({"request_id": q["request_id"], "status": "success", "response": {
            "status_code": 200, "body": {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "smollm",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Please check the tracking link."},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}},
            "usage": {"prompt_tokens": 40, "completion_tokens": 8}}) for q in lz["requests"]]
        data = zc.compress(("\n".join(out) + "\n").encode())
        post("/v1/worker/results", data, {"X-Worker-Id": wid, "X-Lease-Id": lz["lease_id"],
                                          "Content-Type": "application/x-ndjson", "Content-Encoding": "zstd"})
        with counter.get_lock():
            counter.value += len(lz["requests"])
    lat_q.put(lats)
    t0_q.put(first)


def proc_cpu(pid):
    """CPU seconds (user + system) a process used so far; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def postgres_cpu():
    """CPU seconds of every live PostgreSQL process (server and backends)."""
    t = 0.0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() != "postgres":
                        continue
            except OSError:
                continue
            t += proc_cpu(d)
    return t


def box_busy():
    """(busy, total) jiffies of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def run_setup(name, insts, n, w, pack):
    c = http.client.HTTPConnection("127.0.0.1", insts[0].port, timeout=600)
    c.request("POST", "/v1/jobs", "".join(line(i) for i in range(n)).encode())
    r = c.getresponse()
    b = json.loads(r.read())
    assert r.status == 200, b
    while True:
        c.request("GET", "/v1/batches/" + b["id"])
        b = json.loads(c.getresponse().read())
        if b["status"] == "in_progress":
            break
        time.sleep(0.02)
    counter = mp.Value("q", 0)
    lat_q, t0_q = mp.Queue(), mp.Queue()
    procs = [mp.Process(target=worker, args=(insts[i % len(insts)].port, n, pack, counter, lat_q, t0_q))
             for i in range(w)]
    polls = []
    stop = threading.Event()

    def poller():
        conns = [http.client.HTTPConnection("127.0.0.1", x.port, timeout=60) for x in insts]
        i = 0
        while not stop.is_set():
            cc = conns[i % len(conns)]
            t = time.monotonic()
            cc.request("GET", "/v1/batches/" + b["id"])
            cc.getresponse().read()
            polls.append(time.monotonic() - t)
            i += 1
            time.sleep(0.02)

    th = threading.Thread(target=poller, daemon=True)
    th.start()
    cpu0 = [proc_cpu(x.p.pid) for x in insts], postgres_cpu(), box_busy()
    for p in procs:
        p.start()
    lats, firsts = [], []
    for _ in procs:
        lats.extend(lat_q.get())
        firsts.append(t0_q.get())
    t_end = time.monotonic()
    cpu1 = [proc_cpu(x.p.pid) for x in insts], postgres_cpu(), box_busy()
    for p in procs:
        p.join()
    stop.set()
    th.join()
    rate = n / (t_end - min(firsts))
    while True:
        c = http.client.HTTPConnection("127.0.0.1", insts[0].port, timeout=600)  # the old one idled out
        c.request("GET", "/v1/batches/" + b["id"])
        b = json.loads(c.getresponse().read())
        if b["status"] == "completed":
            break
        time.sleep(0.02)
    assert b["request_counts"]["completed"] == n, b
    print(f"{name:<22} lease+commit {rate:7.0f} req/s   poll p50 {pct(polls, .5) * 1e3:6.1f} ms "
          f"p99 {pct(polls, .99) * 1e3:6.1f} ms   lease p99 {pct(lats, .99) * 1e3:6.1f} ms", flush=True)
    busy = (cpu1[2][0] - cpu0[2][0]) / max(1, cpu1[2][1] - cpu0[2][1])
    print(f"{'':<22} CPU while timed: box {busy * 100:3.0f}% busy ({os.cpu_count()} CPUs), "
          f"jobd {sum(cpu1[0]) - sum(cpu0[0]):5.1f} s, PostgreSQL {cpu1[1] - cpu0[1]:5.1f} s "
          f"over {t_end - min(firsts):5.1f} s", flush=True)
    return rate


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    w = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    pack = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    tmp = tempfile.mkdtemp(prefix="bench-pg-scale-")
    cluster = os.path.join(tempfile.gettempdir(), "bench-pg-%d" % os.getpid())
    r = subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), "start", cluster], capture_output=True,
                       text=True)
    if r.returncode:
        raise SystemExit("pg-cluster: " + r.stderr)
    url = r.stdout.strip()
    print(f"bench_pg_scale: N={n}, {w} worker processes, packs of {pack}, release build; "
          f"PostgreSQL {url.rsplit('@', 1)[1]} (scripts/pg-cluster: fsync off)", flush=True)
    res = {}
    try:
        i = Inst(tmp, os.path.join(tmp, "sqlite"), [])
        try:
            res["sqlite"] = run_setup("SQLite, 1 jobd", [i], n, w, pack)
        finally:
            i.stop()
        for k, label in ((1, "PostgreSQL, 1 jobd"), (2, "PostgreSQL, 2 jobd")):
            db = "bench%d" % k
            subprocess.run(["psql", "-q", url, "-c", f"CREATE DATABASE {db}"], check=True, capture_output=True)
            u = url.rsplit("/", 1)[0] + "/" + db
            data = os.path.join(tmp, db)
            insts = [Inst(tmp, data, ["--database", u]) for _ in range(k)]
            try:
                res[k] = run_setup(label, insts, n, w, pack)
            finally:
                for x in insts:
                    x.stop()
        print(f"ratios: PostgreSQL 1 jobd / SQLite = {res[1] / res['sqlite']:.2f}, "
              f"PostgreSQL 2 jobd / 1 jobd = {res[2] / res[1]:.2f}", flush=True)
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), "stop", cluster], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
