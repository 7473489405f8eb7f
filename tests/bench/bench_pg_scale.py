#!/usr/bin/env python3
"""tests/bench/bench_pg_scale.py - jobd's ingest and lease+commit rates,
polling latency and CPU per request on SQLite + local files (1 jobd) and on
PostgreSQL (1 jobd with local files, 1 jobd with its files in S3, 2 jobd
instances on one database and one shared --data), in one run on the same
machine.

Each setup: one batch of N requests is submitted (POST /v1/jobs) and
ingested, timed from the POST to `in_progress` (the ingest rate, with the
CPU that PostgreSQL and jobd used meanwhile per line); then W worker
processes (instant workers: lease packs of P, answer each request with a
~300-byte chat.completion, upload the pack as one zstd chunk) run until
every request is committed; with 2 instances the workers alternate between
them (worker i on instance i % 2). Meanwhile a client polls GET
/v1/batches/{id} every 20 ms (alternating instances too). Reported per
setup: lease+commit requests/s (first lease to last commit), the poll
latency p50 / p99 and the worker lease-call p99; and the CPU used
meanwhile: how busy the whole box was (/proc/stat), the CPU seconds of the
jobd process(es) and of PostgreSQL (its processes' /proc stat), and both
per committed request (us), so a run on a saturated box says so.

usage: bench_pg_scale.py [N] [W] [P] [--setups LIST] [--pgss]
  (default 20000 4 256, setups sqlite,pg,pg-s3,pg2; a setup may repeat, and
  a setup name ending in "@b" runs the jobd binary BENCH_JOBD_B instead of
  BENCH_JOBD or build/jobd: an A/B of two builds in one run, e.g.
  --setups=pg,pg@b,pg,pg@b)
  --no-poll  no client polling GET /v1/batches/{id} meanwhile (the CPU
           numbers are then the lease+commit path's alone)
  --cold-wal  leave the cluster's WAL cold: by default the bench makes
           the WAL segments the run will need before the first setup and
           takes a CHECKPOINT before each timed phase, so the phases reuse
           recycled segments as a server that has run a while does (a fresh
           cluster zero-fills each new 16 MiB segment on the first write
           into it, ~7% of PostgreSQL's CPU in the lease+commit phase)
  --pgss   preload pg_stat_statements and print, per PostgreSQL setup, the
           statements that took most server time in each phase, the top 8
           or $BENCH_PGSS_TOP (it costs some server CPU itself: compare CPU
           numbers between runs of the same kind only)
Needs the release build (build/jobd), PostgreSQL (scripts/pg-cluster) and,
for pg-s3, SeaweedFS (scripts/s3-server).
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

JOBD = os.environ.get("BENCH_JOBD") or os.path.join(ROOT, "build", "jobd")  # another build to compare with
JOBD_B = os.environ.get("BENCH_JOBD_B")  # the binary of the "@b" setups


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inst:
    def __init__(self, tmp, data, extra, env=None, jobd=None):
        self.port = free_port()
        self.log = open(os.path.join(tmp, "jobd-%d.log" % self.port), "wb")
        self.p = subprocess.Popen([jobd or JOBD, "--listen", "127.0.0.1:%d" % self.port, "--data", data,
                                   "--log-level", "warn", "--worker-token", "bench", "--sweep-interval", "200ms",
                                   *extra], stdout=self.log, stderr=subprocess.STDOUT, env=env)
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


PG_POSTMASTER = [0]  # the pid of this run's cluster (set in main)
PG_URL = [None]  # its URL (set in main)


WARM_WAL = "--cold-wal" not in sys.argv


def psql(sql):
    subprocess.run(["psql", "-qAt", PG_URL[0], "-c", sql], check=True, capture_output=True)


def warm_wal(n):
    """Segments enough for one setup (~2.1 KB of WAL per request leased and
    committed, ~0.5 KB per line ingested; a margin of 2x), made now and
    recycled by a checkpoint: min_wal_size (set below) keeps them all, and
    the checkpoint before each timed phase recycles those a phase used."""
    segs = int(n * 2.6e3 * 2 / (16 << 20)) + 4
    psql("CREATE TABLE IF NOT EXISTS bench_warm(x int)")
    for _ in range(segs):  # a write, then a switch to a new segment (made and zero-filled now)
        psql("INSERT INTO bench_warm VALUES (1); SELECT pg_switch_wal()")
    psql("DROP TABLE bench_warm; CHECKPOINT")
    return segs


def checkpoint():
    """Before a timed phase: the WAL written so far becomes recycled
    segments (nothing of the phase itself is flushed by it)."""
    if WARM_WAL and PG_URL[0]:
        psql("CHECKPOINT")


def wal_lsn():
    """The cluster's WAL position in bytes (its WAL written so far)."""
    r = subprocess.run(["psql", "-qAt", PG_URL[0], "-c", "SELECT pg_current_wal_lsn() - '0/0'"], check=True,
                       capture_output=True, text=True)
    return int(r.stdout.strip())


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def postgres_pids():
    """The bench cluster's postmaster and its children (backends, autovacuum,
    WAL writer...): other PostgreSQL servers on a shared box do not count."""
    pm = PG_POSTMASTER[0]
    return [pm] + [int(d) for d in os.listdir("/proc") if d.isdigit() and ppid_of(d) == pm]


def postgres_cpu():
    """CPU seconds of the bench cluster's live processes (a backend that
    exited meanwhile is not counted: the jobd pools keep theirs open)."""
    return sum(proc_cpu(p) for p in postgres_pids())


def box_busy():
    """(busy, total) jiffies of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


POLL = "--no-poll" not in sys.argv



def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def pgss_reset(url):
    if url:
        subprocess.run(["psql", "-qAt", url, "-c", "SELECT pg_stat_statements_reset()"], check=True,
                       capture_output=True)


def pgss_top(url, phase, n_req, k=int(os.environ.get("BENCH_PGSS_TOP", "8"))):
    """The k statements with the most server time since the last reset."""
    if not url:
        return
    q = ("SELECT round(total_exec_time::numeric, 1), calls, round((total_exec_time * 1000 / %d)::numeric, 1), "
         "regexp_replace(left(query, 110), '\\s+', ' ', 'g') FROM pg_stat_statements "
         "ORDER BY total_exec_time DESC LIMIT %d" % (n_req, k))
    r = subprocess.run(["psql", "-qAt", "-F", " | ", url, "-c", q], check=True, capture_output=True, text=True)
    tot = subprocess.run(["psql", "-qAt", url, "-c", "SELECT round(sum(total_exec_time)::numeric, 1), sum(calls) "
                          "FROM pg_stat_statements"], check=True, capture_output=True, text=True).stdout.split("|")
    print(f"{'':<22} pg_stat_statements, {phase}: {tot[0]} ms in {tot[1].strip()} calls "
          f"(ms | calls | us per request | statement):", flush=True)
    for ln in r.stdout.strip().splitlines():
        print(f"{'':<24}{ln}", flush=True)
    if os.environ.get("BENCH_PGSS_DUMP"):  # every statement, whole text, appended to this file
        q = ("SELECT round(total_exec_time::numeric, 1), calls, rows, shared_blks_hit, query "
             "FROM pg_stat_statements ORDER BY total_exec_time DESC")
        r = subprocess.run(["psql", "-qAt", "-F", " | ", url, "-c", q], check=True, capture_output=True, text=True)
        with open(os.environ["BENCH_PGSS_DUMP"], "a") as f:
            f.write(f"==== {phase} (ms | calls | rows | shared_blks_hit | query)\n{r.stdout}\n")


def postgres_cpu_by_kind():
    """CPU seconds of the bench cluster's processes by kind (their title:
    a client backend, autovacuum, walwriter...)."""
    out = {}
    for p in postgres_pids():
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                t = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        k = "backends" if "127.0.0.1(" in t or "[local]" in t else t.replace("postgres:", "").strip().split(" ")[0]
        out[k] = out.get(k, 0) + proc_cpu(p)
    return out


def cpu_now(insts):
    if os.environ.get("BENCH_PG_KINDS"):
        print(f"{'':<22} PostgreSQL CPU so far by process kind: " + ", ".join(
            f"{k} {v:.2f} s" for k, v in sorted(postgres_cpu_by_kind().items())), flush=True)
    return [proc_cpu(x.p.pid) for x in insts], postgres_cpu(), box_busy()


def cpu_line(cpu0, cpu1, n, secs, what):
    busy = (cpu1[2][0] - cpu0[2][0]) / max(1, cpu1[2][1] - cpu0[2][1])
    jd, pg = sum(cpu1[0]) - sum(cpu0[0]), cpu1[1] - cpu0[1]
    print(f"{'':<22} CPU while timed: box {busy * 100:3.0f}% busy ({os.cpu_count()} CPUs), "
          f"jobd {jd:5.2f} s, PostgreSQL {pg:5.2f} s over {secs:5.1f} s: "
          f"per {what} jobd {jd / n * 1e6:5.1f} us, PostgreSQL {pg / n * 1e6:5.1f} us", flush=True)
    return jd / n * 1e6, pg / n * 1e6


def run_setup(name, insts, n, w, pack, pgss=None):
    c = http.client.HTTPConnection("127.0.0.1", insts[0].port, timeout=600)
    body = "".join(line(i) for i in range(n)).encode()
    checkpoint()
    pgss_reset(pgss)
    cpu0 = cpu_now(insts)
    t0 = time.monotonic()
    c.request("POST", "/v1/jobs", body)
    r = c.getresponse()
    b = json.loads(r.read())
    assert r.status == 200, b
    while True:
        c.request("GET", "/v1/batches/" + b["id"])
        b = json.loads(c.getresponse().read())
        if b["status"] == "in_progress":
            break
        assert b["status"] == "validating", b
        time.sleep(0.01)
    t_ing = time.monotonic() - t0
    cpu1 = cpu_now(insts)
    print(f"{name:<22} ingest {n / t_ing:7.0f} lines/s ({t_ing:5.2f} s, {len(body) / 1e6:.1f} MB, "
          f"POST to in_progress)", flush=True)
    ing_cpu = cpu_line(cpu0, cpu1, n, t_ing, "line")
    pgss_top(pgss, "ingest", n)
    pgss_reset(pgss)
    counter = mp.Value("q", 0)
    lat_q, t0_q = mp.Queue(), mp.Queue()
    procs = [mp.Process(target=worker, args=(insts[i % len(insts)].port, n, pack, counter, lat_q, t0_q))
             for i in range(w)]
    polls = []
    stop = threading.Event()

    def poller():
        if not POLL:
            return
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
    checkpoint()
    wal0 = wal_lsn()
    cpu0 = cpu_now(insts)
    perf = None
    if os.environ.get("BENCH_PERF"):  # perf record of PostgreSQL's processes while timed, into this file
        pids = ",".join(str(p) for p in postgres_pids())
        perf = subprocess.Popen(["perf", "record", "-q", "-F", "499", *os.environ.get("BENCH_PERF_ARGS", "").split(), "-o", os.environ["BENCH_PERF"], "-p", pids],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for p in procs:
        p.start()
    lats, firsts = [], []
    for _ in procs:
        lats.extend(lat_q.get())
        firsts.append(t0_q.get())
    t_end = time.monotonic()
    cpu1 = cpu_now(insts)
    if perf:
        perf.send_signal(2)
        perf.wait()
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
          f"p99 {pct(polls, .99) * 1e3:6.1f} ms ({len(polls)} polls)   lease p99 {pct(lats, .99) * 1e3:6.1f} ms",
          flush=True)
    lc_cpu = cpu_line(cpu0, cpu1, n, t_end - min(firsts), "committed request")
    if name.startswith("PostgreSQL"):  # WAL of the whole phase (the cluster's other databases are idle)
        print(f"{'':<22} WAL written: {(wal_lsn() - wal0) / n:.0f} bytes per committed request", flush=True)
    pgss_top(pgss, "lease+commit", n)
    return {"ingest": n / t_ing, "rate": rate, "ingest_cpu": ing_cpu, "cpu": lc_cpu}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    setups = "sqlite,pg,pg-s3,pg2".split(",")
    pgss = "--pgss" in sys.argv
    for a in sys.argv[1:]:
        if a.startswith("--setups="):
            setups = a.split("=", 1)[1].split(",")
    n = int(args[0]) if len(args) > 0 else 20000
    w = int(args[1]) if len(args) > 1 else 4
    pack = int(args[2]) if len(args) > 2 else 256
    tmp = tempfile.mkdtemp(prefix="bench-pg-scale-")
    cluster = os.path.join(tempfile.gettempdir(), "bench-pg-%d" % os.getpid())
    s3dir = os.path.join(tempfile.gettempdir(), "bench-s3-%d" % os.getpid())
    env = dict(os.environ)
    if pgss:
        env["PG_CLUSTER_OPTS"] = "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=1000"
    if WARM_WAL:  # keep every segment warm_wal makes for reuse
        env["PG_CLUSTER_OPTS"] = env.get("PG_CLUSTER_OPTS", "") + " -c min_wal_size=4GB -c max_wal_size=8GB"
    if os.environ.get("BENCH_PG_OPTS"):  # more server options (e.g. auto_explain's)
        env["PG_CLUSTER_OPTS"] = env.get("PG_CLUSTER_OPTS", "") + " " + os.environ["BENCH_PG_OPTS"]
    r = subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), "start", cluster], capture_output=True,
                       text=True, env=env)
    if r.returncode:
        raise SystemExit("pg-cluster: " + r.stderr)
    url = r.stdout.strip()
    with open(os.path.join(cluster, "data", "postmaster.pid")) as f:
        PG_POSTMASTER[0] = int(f.readline())
    PG_URL[0] = url
    warm = warm_wal(n) if WARM_WAL else 0
    s3 = None
    print(f"bench_pg_scale: N={n}, {w} worker processes, packs of {pack}, release build; "
          f"PostgreSQL {url.rsplit('@', 1)[1]} (scripts/pg-cluster: fsync off; "
          f"{'%d WAL segments made and recycled first' % warm if warm else 'cold WAL'}); setups {','.join(setups)}"
          f"{'; pg_stat_statements on' if pgss else ''}", flush=True)
    res = {}
    labels = {"pg": (1, "PostgreSQL, 1 jobd"), "pg-s3": (1, "PostgreSQL+S3, 1 jobd"),
              "pg2": (2, "PostgreSQL, 2 jobd")}
    try:
        for run_i, name in enumerate(setups):
            k, b = (name[:-2], True) if name.endswith("@b") else (name, False)
            if b and not JOBD_B:
                raise SystemExit("setup %s: BENCH_JOBD_B is not set" % name)
            jobd = JOBD_B if b else None
            tag = " (B)" if b else ""
            if k == "sqlite":
                i = Inst(tmp, os.path.join(tmp, "sqlite%d" % run_i), [], jobd=jobd)
                try:
                    res[name] = run_setup("SQLite, 1 jobd" + tag, [i], n, w, pack)
                finally:
                    i.stop()
                continue
            n_inst, label = labels[k]
            label += tag
            db = "bench_%s_%d" % (k.replace("-", "_"), run_i)
            subprocess.run(["psql", "-q", url, "-c", f"CREATE DATABASE {db}"], check=True, capture_output=True)
            u = url.rsplit("/", 1)[0] + "/" + db
            if pgss:
                subprocess.run(["psql", "-q", u, "-c", "CREATE EXTENSION pg_stat_statements"], check=True,
                               capture_output=True)
            data = os.path.join(tmp, db)
            extra, ienv = ["--database", u], None
            if k == "pg-s3":
                if not s3:
                    r = subprocess.run([os.path.join(ROOT, "scripts", "s3-server"), "start", s3dir],
                                       capture_output=True, text=True)
                    if r.returncode:
                        raise SystemExit("s3-server: " + r.stderr)
                    s3 = r.stdout.strip()
                ienv = dict(os.environ, JOBD_FILES="s3://jobd/bench%d" % run_i, AWS_ENDPOINT_URL=s3,
                            AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="jobd-test",
                            AWS_SECRET_ACCESS_KEY="jobd-test-secret")
            insts = [Inst(tmp, data, extra, ienv, jobd) for _ in range(n_inst)]
            try:
                res[name] = run_setup(label, insts, n, w, pack, u if pgss else None)
            finally:
                for x in insts:
                    x.stop()
            # gone before the next setup: autovacuum of this setup's tables
            # would otherwise run (and count) in the next one's timed phases
            if not os.environ.get("BENCH_KEEP_PG"):
                subprocess.run(["psql", "-q", url, "-c", f"DROP DATABASE {db} WITH (FORCE)"], check=True,
                               capture_output=True)
        if JOBD_B:
            print(f"A: {JOBD}\nB: {JOBD_B}", flush=True)
        base = res.get("sqlite")
        if base:
            for k in res:
                if k in labels:
                    print(f"ratios: {labels[k][1]} / SQLite: lease+commit {res[k]['rate'] / base['rate']:.2f}, "
                          f"ingest {res[k]['ingest'] / base['ingest']:.2f}", flush=True)
        if "pg" in res and "pg2" in res:
            print(f"ratios: PostgreSQL 2 jobd / 1 jobd = {res['pg2']['rate'] / res['pg']['rate']:.2f}", flush=True)
    finally:
        if os.environ.get("BENCH_KEEP_PG"):  # left running for a look at its log and tables
            print(f"PostgreSQL kept: {cluster} ({url}); scripts/pg-cluster stop {cluster}", flush=True)
        else:
            subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), "stop", cluster], capture_output=True)
        if s3:
            subprocess.run([os.path.join(ROOT, "scripts", "s3-server"), "stop", s3dir], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
