#!/usr/bin/env python3
"""tests/bench/bench_poll.py - status polling under load: wrk with C
concurrent keep-alive connections (default 200) polling GET
/v1/batches/{id} on the release jobd (keys auth, as in production) while
that batch runs: a scripted worker (tests/py/workerlib.py, in a thread)
leases packs of 20, waits 0.1 s, commits them, so the batch is still moving
for the whole run. Two runs: back to back (each connection sends its next
poll as soon as the answer arrives: a saturation test, where latency is
mostly queueing, connections / throughput) and paced (a wrk Lua delay() of
BENCH_POLL_PACE_MS, default 20 ms, between a connection's polls: 200
connections then offer ~10,000 polls/s, still far above what real clients
honouring Retry-After send). BENCH_POLL_NICE=-10 runs jobd (only) at that
nice level: a diagnostic on a shared, oversubscribed box, to separate
jobd's own latency from waiting for a CPU. Prints requests/s, latency p50/p90/p99/max, errors
(non-2xx answers and socket errors), the batch's progress during the run,
and the machine description. Goal: zero errors, p99 < 20 ms.

usage: bench_poll.py [SECONDS] [CONNECTIONS]   (default 10 200)
Needs wrk (Debian package `wrk`; scripts/bench installs it when missing).
"""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACE_MS = int(os.environ.get("BENCH_POLL_PACE_MS", "20"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "py"))
from bench_jobd import JOBD, Daemon, line  # noqa: E402
from harness import free_port  # noqa: E402


class KeyedDaemon(Daemon):
    """bench_jobd.Daemon on a data directory that already holds a tenant key."""

    def __init__(self, tmp, data, extra=()):
        self.port = free_port()
        self.data = data
        self.log = open(os.path.join(tmp, "jobd.log"), "wb")
        prio = ["nice", "-n", os.environ["BENCH_POLL_NICE"]] if os.environ.get("BENCH_POLL_NICE") else []
        self.p = subprocess.Popen([*prio, JOBD, "--listen", "127.0.0.1:%d" % self.port, "--data", data,
                                   "--log-level", "warn", *extra], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.conn().request("GET", "/healthz")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("jobd did not start")
                time.sleep(0.02)
from workerlib import TestWorker, success  # noqa: E402


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    cpu = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.system()} {platform.release()}, "
            f"load average {load[0]:.1f} at start")


def ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(out):
    r = {"rps": None, "lat": {}, "non2xx": 0, "sock": {}, "requests": None}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in", out)
    r["requests"] = int(m.group(1)) if m else None
    for p in ("50", "75", "90", "99"):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s|m)\s*$" % p, out, re.M)
        if m:
            r["lat"][p] = ms(m.group(1), m.group(2))
    m = re.search(r"Latency\s+[\d.]+\w+\s+[\d.]+\w+\s+([\d.]+)(us|ms|s|m)", out)
    if m:
        r["lat"]["max"] = ms(m.group(1), m.group(2))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    r["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["sock"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
    return r


def main():
    secs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    conns = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    wrk = shutil.which("wrk")
    if not wrk:
        raise SystemExit("bench_poll: wrk not found (apt-get install wrk)")
    print("machine:", machine())
    tmp = tempfile.mkdtemp(prefix="bench-poll-")
    data = os.path.join(tmp, "data")
    key = subprocess.run([JOBD, "keys", "create", "--tenant", "bench", "--data", data],
                         capture_output=True, text=True, check=True).stdout.strip()
    d = KeyedDaemon(tmp, data, ["--worker-token", "wt", "--sweep-interval", "200ms"])
    try:
        c = d.conn()
        n = 20 * 10 * (2 * secs + 10)  # 200 requests/s for longer than both runs
        body = "".join(line(i) for i in range(n)).encode()
        c.request("POST", "/v1/jobs", body, {"Authorization": "Bearer " + key})
        b = json.loads(c.getresponse().read())
        while b["status"] == "validating":
            time.sleep(0.02)
            c.request("GET", "/v1/batches/" + b["id"], headers={"Authorization": "Bearer " + key})
            b = json.loads(c.getresponse().read())
        assert b["status"] == "in_progress", b
        stop = threading.Event()
        done = [0]

        def slow_worker():
            w = TestWorker(d.port, "wt", name="bench-slow")
            w.register()
            while not stop.is_set():
                r = w.lease(max_requests=20, wait_ms=200).json()
                if not r["requests"]:
                    continue
                time.sleep(0.1)
                w.results(r["lease_id"], [success(q) for q in r["requests"]], compress=False)
                done[0] += len(r["requests"])

        t = threading.Thread(target=slow_worker, daemon=True)
        t.start()
        time.sleep(0.5)
        url = f"http://127.0.0.1:{d.port}/v1/batches/{b['id']}"
        lua = os.path.join(tmp, "paced.lua")
        with open(lua, "w") as f:
            f.write("function delay()\n  return %d\nend\n" % PACE_MS)
        for name, extra in (("back to back", []), (f"paced, each connection every {PACE_MS} ms", ["-s", lua])):
            before = done[0]
            p = subprocess.run([wrk, "-t2", f"-c{conns}", f"-d{secs}s", "--latency", "--timeout", "5s",
                                "-H", "Authorization: Bearer " + key, *extra, url], capture_output=True, text=True)
            moved = done[0] - before
            if p.returncode != 0:
                raise SystemExit("wrk failed: " + p.stderr)
            c.request("GET", "/v1/batches/" + b["id"], headers={"Authorization": "Bearer " + key})
            after = json.loads(c.getresponse().read())
            r = parse_wrk(p.stdout)
            errors = r["non2xx"] + sum(r["sock"].values())
            lat = r["lat"]
            print(f"wrk -t2 -c{conns} -d{secs}s GET /v1/batches/{{id}}, {name} "
                  "(release jobd, keys auth, log level warn)")
            print(f"  requests: {r['requests']}, {r['rps']:.0f} req/s")
            print("  latency: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.1f ms"
                  % (lat.get("50", -1), lat.get("90", -1), lat.get("99", -1), lat.get("max", -1)))
            print(f"  errors: {errors} (non-2xx {r['non2xx']}, socket {r['sock'] or 'none'})")
            print(f"  meanwhile the slow worker committed {moved} requests; batch {after['status']}, "
                  f"{after['request_counts']['completed']}/{after['request_counts']['total']} done")
            ok = errors == 0 and lat.get("99", 1e9) < 20
            print("  goal (0 errors, p99 < 20 ms):", "met" if ok else "NOT met")
        stop.set()
        t.join(5)
        print("machine at the end: load average %.1f" % os.getloadavg()[0])
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
