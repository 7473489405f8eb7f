"""Several jobd instances on one PostgreSQL database and one shared data
directory (README "Scaling out"). Two jobd (A, B) serve the same
database and --data; clients alternate between them; one worker is attached
to A and one to B; a chaos loop kills A or B with SIGKILL twelve times
during the batches (and once right after a submission, while that batch is
probably being ingested), restarting it each time. What must hold whatever
the timing: every batch completes with every custom_id exactly once in its
output file, the usage ledger sums exactly to what the workers reported
(each request counted once, although a commit cut by a kill is sent again),
one batch.completed event per batch (deliveries deduplicated by webhook-id,
as Standard Webhooks receivers do: a kill between a POST and its record may
repeat it with the same id), and one idempotency key sent to both
instances makes one batch; a worker long-polling B gets work submitted to A
while its poll is open, woken by A's NOTIFY (B's wake-up counter moves). The workers answer at most a quota of requests
per chaos round, so the kills land while the batches run. The suite starts
its own throwaway cluster (scripts/pg-cluster); it skips where PostgreSQL
is not installed."""
import http.client
import json
import os
import signal
import tempfile
import threading
import time
import uuid

import harness
from harness import Skip, binary, run, tmpdir
from jobdlib import Jobd, zstd_compress
from test_pg_faults import pg
from test_webhooks import Receiver
from workerlib import chat_completion, read_jsonl

WT = "worker-secret-mi"
ARGS = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
        "--window-min", "1s", "--webhook-allow-private", "--webhook-retry-base", "0s", "--webhook-poll", "20ms",
        "--webhook-timeout", "5s"]
KILLS = 12
SIZES = (400, 400, 12000)  # requests per batch; batch 2 is submitted just before the first kill


def call(inst, method, path, body=None, headers=None, timeout=30):
    """One HTTP call to an instance (its current port): (status, body), or
    None when it is down or the connection broke (the caller retries)."""
    h = dict(headers or {})
    try:
        c = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()
    except (OSError, http.client.HTTPException):
        return None


def metric(inst, name):
    """A counter of an instance's /metrics (retried while it restarts)."""
    for _ in range(100):
        r = call(inst, "GET", "/metrics")
        if r and r[0] == 200:
            for ln in r[1].decode().splitlines():
                if ln.startswith(name + " "):
                    return int(float(ln.split()[1]))
            raise AssertionError(name + " missing from /metrics")
        time.sleep(0.1)
    raise AssertionError("no /metrics answer")


def until_ok(insts, method, path, body=None, headers=None, start=0, timeout=60, ok=(200,)):
    """Call the instances in turn (from insts[start]) until one answers with a
    status in ok; 503s and refused connections (an instance restarting) are
    retried. Returns the parsed JSON body."""
    deadline = time.monotonic() + timeout
    i = start
    while True:
        r = call(insts[i % len(insts)], method, path, body, headers)
        if r and r[0] in ok:
            return json.loads(r[1])
        assert r is None or r[0] in (409, 503), (path, r)
        assert time.monotonic() < deadline, (path, r)
        i += 1
        time.sleep(0.05)


def usage_of(custom_id):
    i = int(custom_id.split("-")[-1])
    return 7 + i, 3 + i % 5


def line(b, i):
    return json.dumps({"custom_id": f"b{b}-{i}", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "smollm", "messages": [{"role": "user", "content": f"hi {i}"}],
                                "max_tokens": 8}}).encode() + b"\n"


class Chaos:
    def __init__(self, total):
        self.lock = threading.Lock()
        self.answered = 0
        self.kills = 0
        self.per_round = total // (KILLS + 1) + 1
        self.stop = False
        self.errors = []

    def quota(self):
        return self.per_round * (self.kills + 1) if self.kills < KILLS else 1 << 60


def worker(inst, ch, name):
    """Register, then lease and answer on one instance; a results chunk cut by
    a kill is sent again until the instance answers it."""
    auth = {"Authorization": f"Bearer {WT}", "Content-Type": "application/json"}
    try:
        reg = None
        while reg is None and not ch.stop:
            r = call(inst, "POST", "/v1/worker/register", json.dumps(
                {"name": name, "device": "cpu", "models": [{"id": "smollm", "aliases": []}]}).encode(), auth)
            if r and r[0] == 200:
                reg = json.loads(r[1])["worker_id"]
            else:
                time.sleep(0.05)
        while not ch.stop:
            with ch.lock:
                room = ch.quota() - ch.answered
            if room <= 0:
                time.sleep(0.02)
                continue
            r = call(inst, "POST", "/v1/worker/lease", json.dumps(
                {"worker_id": reg, "model": "smollm", "max_requests": min(32 if ch.kills < KILLS else 256, room), "lease_seconds": 5,
                 "wait_ms": 200}).encode(), auth)
            if not r or r[0] != 200:
                assert r is None or r[0] == 503, r
                time.sleep(0.05)
                continue
            lease = json.loads(r[1])
            if not lease["requests"]:
                continue
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
            while not ch.stop:
                c = call(inst, "POST", "/v1/worker/results", data, h)
                if c and c[0] != 503:
                    break
                time.sleep(0.05)
            # 200, or 409 when the lease lapsed while the instance was down
            # (its requests are leased again): either way nothing is lost
            assert c is None or c[0] in (200, 409), c
            if c and c[0] == 200:
                with ch.lock:
                    ch.answered += len(out)
    except BaseException as e:  # noqa: B902 - reported by the main thread
        ch.errors.append(f"{name}: {e!r}")


def test_two_jobd_one_database_kill9_chaos_exactly_once():
    # outside tmpdir(): its 0700 parent would keep the postgres user out
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-mi-{uuid.uuid4().hex[:12]}")
    r = pg("start", cluster)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    rx = Receiver()
    insts = []
    ch = Chaos(sum(SIZES))
    at_kill = "?"
    wake_s = -1.0
    threads = []
    try:
        data = os.path.join(tmpdir(), "shared-data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", url])
        assert k.returncode == 0, k.stderr
        key = k.stdout.strip()
        args = ARGS + ["--database", url]
        insts = [Jobd(data=data, key=key, args=args), Jobd(data=data, key=key, args=args)]
        auth = {"Authorization": f"Bearer {key}"}
        ep = until_ok(insts, "POST", "/v1/webhook_endpoints", json.dumps(
            {"url": rx.url("/hook"), "event_types": ["batch.completed"]}).encode(),
            {**auth, "Content-Type": "application/json"})
        # a worker long-polling B (wait_ms 5000) gets work submitted to A
        # while its poll is open, well before the poll would end
        wauth = {"Authorization": f"Bearer {WT}", "Content-Type": "application/json"}
        wid = until_ok(insts, "POST", "/v1/worker/register", json.dumps(
            {"name": "poller", "device": "cpu", "models": [{"id": "smollm", "aliases": []}]}).encode(), wauth,
            start=1)["worker_id"]
        got = {}

        def long_poll():
            r = call(insts[1], "POST", "/v1/worker/lease", json.dumps(
                {"worker_id": wid, "model": "smollm", "max_requests": 4, "lease_seconds": 30,
                 "wait_ms": 5000}).encode(), wauth)
            got["t"], got["r"] = time.monotonic(), r

        wakeups0 = metric(insts[1], "jobd_lease_wakeups_total")
        poll = threading.Thread(target=long_poll, daemon=True)
        poll.start()
        time.sleep(0.5)  # the poll is open (if not, it still finds the work at once)
        # batch 0 through A; the same idempotency key through B answers the same batch
        idem = {**auth, "Idempotency-Key": "mi-0"}
        body0 = b"".join(line(0, i) for i in range(SIZES[0]))
        t_sub = time.monotonic()
        b0 = until_ok(insts, "POST", "/v1/jobs", body0, idem, start=0)
        poll.join(10)
        assert got.get("r") and got["r"][0] == 200, got
        polled = json.loads(got["r"][1])
        assert len(polled["requests"]) == 4, polled
        wake_s = got["t"] - t_sub
        assert wake_s < 4.0, wake_s  # the 5 s poll did not run out
        # the event: B's LISTEN connection got A's NOTIFY (the batch reached
        # in_progress) and ran its parked poll again (without wake-ups B
        # re-reads only every 500 ms; the timing bound above stays generous)
        assert metric(insts[1], "jobd_lease_wakeups_total") > wakeups0
        until_ok(insts, "POST", "/v1/worker/release", json.dumps(
            {"worker_id": wid, "lease_id": polled["lease_id"]}).encode(), wauth, start=1)
        again = until_ok(insts, "POST", "/v1/jobs", body0, idem, start=1)
        assert again["id"] == b0["id"], (b0, again)
        b1 = until_ok(insts, "POST", "/v1/jobs", b"".join(line(1, i) for i in range(SIZES[1])), auth, start=1)
        ths = [threading.Thread(target=worker, args=(insts[i], ch, f"w{i}"), daemon=True) for i in (0, 1)]
        threads.extend(ths)
        for t in ths:
            t.start()
        b2 = until_ok(insts, "POST", "/v1/jobs", b"".join(line(2, i) for i in range(SIZES[2])), auth, start=0)
        batches = [b0["id"], b1["id"], b2["id"]]
        # chaos: kill A, B, A, ... each after the workers used up the round's quota
        t0 = time.monotonic()
        for n in range(KILLS):
            if n:  # the first kill lands right after batch 2's submission (its ingest)
                deadline = time.monotonic() + 60
                while True:
                    with ch.lock:
                        if ch.answered >= ch.quota():
                            break
                    assert not ch.errors, ch.errors
                    assert time.monotonic() < deadline, (n, ch.answered, ch.quota())
                    time.sleep(0.02)
            victim = insts[n % 2]
            # the workers follow .port, which restart() changes
            victim.restart(sig=signal.SIGKILL)
            if n == 0:  # informational: where batch 2's ingest was at the kill
                r = call(insts[1], "GET", f"/v1/batches/{b2['id']}", headers=auth)
                at_kill = json.loads(r[1])["status"] if r and r[0] == 200 else "?"
            with ch.lock:
                ch.kills += 1
        chaos_s = time.monotonic() - t0
        done = {}
        deadline = time.monotonic() + 120
        while len(done) < 3:
            assert not ch.errors, ch.errors
            assert time.monotonic() < deadline, (done.keys(), ch.answered)
            for i, bid in enumerate(batches):
                if bid in done:
                    continue
                r = call(insts[i % 2], "GET", f"/v1/batches/{bid}", headers=auth)
                if r and r[0] == 200 and json.loads(r[1])["status"] in ("completed", "failed", "expired",
                                                                       "cancelled"):
                    done[bid] = json.loads(r[1])
            time.sleep(0.05)
        ch.stop = True
        for t in threads:
            t.join(30)
        assert not ch.errors, ch.errors
        for i, bid in enumerate(batches):
            b = done[bid]
            n = SIZES[i]
            assert b["status"] == "completed", b
            assert b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b
            lines = read_jsonl(insts[(i + 1) % 2], b["output_file_id"])
            ids = sorted(x["custom_id"] for x in lines)
            assert ids == sorted(f"b{i}-{j}" for j in range(n)), (bid, len(ids), len(set(ids)))
            assert not b.get("error_file_id"), b
        # usage: each request counted once, whatever commits were repeated
        rep = until_ok(insts, "GET", "/v1/usage?group_by=batch", headers=auth)
        by = {x["key"]: x for x in rep["data"]}
        for i, bid in enumerate(batches):
            want_in = sum(7 + j for j in range(SIZES[i]))
            want_out = sum(3 + j % 5 for j in range(SIZES[i]))
            got = by[bid]
            assert (got["input_tokens"], got["output_tokens"], got["num_model_requests"]) == \
                (want_in, want_out, SIZES[i]), (bid, got)
        assert rep["totals"]["num_model_requests"] == sum(SIZES), rep["totals"]
        # webhooks: one event per batch, each delivered (by webhook-id: once)
        deadline = time.monotonic() + 60
        while True:
            dl = until_ok(insts, "GET", f"/v1/webhook_endpoints/{ep['id']}/deliveries", headers=auth)["data"]
            if len(dl) == 3 and all(x["status"] == "delivered" for x in dl):
                break
            assert time.monotonic() < deadline, dl
            time.sleep(0.1)
        time.sleep(0.5)
        calls = rx.on("/hook")
        events = {}
        for _, h, body in calls:
            p = json.loads(body)
            assert p["type"] == "batch.completed", p
            events.setdefault(h["webhook-id"], set()).add(p["data"]["id"])
        assert sorted(b for s in events.values() for b in s) == sorted(batches), events
        assert all(len(s) == 1 for s in events.values()) and len(events) == 3, events
        for inst in insts:
            assert inst.proc.p.poll() is None, inst.proc.log()[-3000:]
        logs = "".join(pr.log() for pr in harness._procs)
        if os.environ.get("MI_DEBUG"):
            print("\n".join(x for x in logs.splitlines() if "ingest" in x or "finaliz" in x))
        print(f"multi-instance: {KILLS} kills in {chaos_s:.1f} s, {sum(SIZES)} requests, "
              f"{len(calls)} webhook POSTs for 3 events; long poll on B woke {wake_s:.2f} s after the submit to A; batch 2 {at_kill} after the first kill; ingest resumed {logs.count('(resumed)')}x, "
              f"stopped at a fence {logs.count('moved on elsewhere')}x")
    finally:
        ch.stop = True
        for t in threads:
            t.join(10)
        for inst in insts:
            inst.proc.stop()
        rx.close()
        pg("stop", cluster)
