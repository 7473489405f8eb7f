"""Power loss at every sync point of jobd's data path (tests/crashsim/).

One scenario drives a real jobd (build/jobd, under the LD_PRELOAD shim
build/crashsim.so) through the data path: a webhook endpoint registered (a
receiver in this process, --webhook-allow-private), a multipart upload, a
batch created from it with an Idempotency-Key, a /v1/jobs upload,
ingestion, leases, two results commits (one line a transient error:
dead-lettered at --max-attempts 1), finalization of the output and error
files, a cancel (its error file), an expiry (completion_window 1 s), a file
expiry (expires_after 1 s, until the sweeper's purge is seen in the live
database), and the webhook outbox delivering batch.completed, .cancelled
and .expired meanwhile. A first run counts the sync points (fsync/fdatasync
of a file or directory under --data); then, for each chosen point N, a
fresh run cuts the power just before sync N (the shim SIGKILLs jobd there),
crashlib rebuilds the directory as the power loss could have left it in
each variant (crashlib.VARIANTS), and these must hold:

  On the rebuilt directory, before jobd starts (durable_state, history()):
  the acknowledged history - each 2xx in the order it came, and each
  terminal transition as it was seen - against what survived.
  --durability full: all of it (the endpoint, the uploads, the batches, each
  result committed under the scenario's lease, the dead letter with its
  cause, b1 completed with the output file served, the cancel, b2
  cancelled, b3 expired, the upload and its purge). --durability normal: a
  prefix (a background transition needs only what caused it). Always: one
  outbox event per terminal batch, of its type.

  Then jobd restarts on it (finish_and_check), a worker finishes what is
  left: full: the upload byte for byte, the Idempotency-Key answers the
  same batch, every committed result in the final output exactly once with
  its answer, the dead letter in the error file, a served output file the
  same bytes, the cancel honoured, the expired upload stays gone; both: a
  result that survived is in the output once with its answer; every
  endpoint's deliveries settle (delivered, or sent and held by a claim: the
  receiver has that webhook-id); jobd exits cleanly; PRAGMA integrity_check
  ok; no files row names a missing or short file (each decompresses to its
  bytes and sha256); no file under files/ that no row names, nothing left in
  tmp/; no request both queued or leased and holding a result; every
  request in exactly one of its batch's output and error files; one event
  per terminal batch; every event reached the receiver, every POST of a
  webhook-id carried that event's payload (duplicates only under the same
  id: spec/webhooks.md's at-least-once), and under full no POST of an event
  the outbox does not hold.

The same scenario runs with one I/O error injected (fault_suite: the N-th
write failing with ENOSPC or EIO, the N-th fsync with EIO): each refused
call answers a clean 5xx and is made again, the scenario drives on to its
end, and the "lose" rebuild (a failed fsync's writes gone for good) passes
every check. Targeted tests: the real jobworker retrying a results upload
whose WAL write or fsync failed, an upload whose fsync fails leaking no
descriptor, an expiry whose files/ fsync failed, and the regressions the
suite found. Three planted durability bugs (tests/crashsim/planted/) must
each break an invariant at a sync point.

Sampling: `make test` runs SAMPLE sync points chosen with a fixed seed
(TH_SEED) in two variants and FAULT_SAMPLE failing calls of each kind;
CRASHSIM_ALL=1 runs every sync point in every variant and every call
(make crash). A failure names the sync point, the variant, and keeps the
logs and directories under CRASHSIM_KEEP when that is set.
"""
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import time

import crashlib
from harness import ROOT, Proc, Skip, free_port, tmpdir
from jobdlib import jsonl, multipart, zstd_compress, zstd_decompress

TIMEOUT = 1800
WT = "crash-worker-token"
FLAGS = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
         "--window-min", "1s", "--expiry-min", "1s", "--max-attempts", "1", "--log-level", "warn",
         "--webhook-allow-private", "--webhook-poll", "20ms", "--webhook-retry-base", "0s",
         "--webhook-timeout", "2s"]
SAMPLE = 16
JOBD = os.environ.get("CRASHSIM_JOBD") or os.path.join(ROOT, "build", "jobd")  # another build: a planted bug


class Cut(Exception):
    """jobd went away (the power was cut)."""


class Broken(AssertionError):
    """An invariant failed on a directory rebuilt after a power cut: where
    names the sync point and the rebuild variant ("full sync point 13/73
    (after b1), lose"), what the check."""

    def __init__(self, where, what, log=None):
        super().__init__(f"{where}: {what}" + (f"; jobd log: {log[-1200:]}" if log else ""))
        self.where, self.what = where, what


class Api:
    """HTTP to jobd; any transport error is the cut. With faulty set (an
    injected I/O error), a 5xx is recorded in refusals as (method, path,
    status, body) and the same call is made again, until it gets an answer
    under 500: the scenario drives on past a refusal, so what jobd
    acknowledges after a failed write or fsync is checked too."""

    def __init__(self, port, faulty=False, data=None, log=None):
        self.port = port
        self.faulty = faulty
        self.refusals = []
        self.data = data  # jobd's --data, for what only its database shows
        self.log = log    # the shim's log

    def alive_since_read(self):
        """Raise Cut if the power was cut before a read of jobd's database
        that just ended: once jobd is dead, the reader's connection rebuilds
        the wal-index from the WAL it finds (SQLite's recovery), written
        frames of a commit never synced included - what the page cache kept,
        not what jobd published. The shim logs the cut before the kill."""
        if self.log and any(r[0] == "X" for r in crashlib.parse(self.log)):
            raise Cut("the power was cut before the read")

    def call(self, method, path, body=None, headers=None, token=None):
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        for _ in range(100):
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                c.request(method, path, body=body, headers=h)
                r = c.getresponse()
                st, got = r.status, r.read()
            except (OSError, http.client.HTTPException) as e:
                raise Cut(str(e))
            finally:
                c.close()
            if not (self.faulty and st >= 500):
                return st, got
            self.refusals.append((method, path, st, got))
            time.sleep(0.05)
        raise AssertionError(f"{method} {path}: 100 refusals in a row, the last {st}: {got[:300]}")

    def json(self, method, path, obj=None, headers=None, token=None, expect=200):
        h = dict(headers or {})
        body = None
        if obj is not None:
            body = json.dumps(obj).encode()
            h["Content-Type"] = "application/json"
        st, b = self.call(method, path, body, h, token)
        assert st == expect, (method, path, st, b[:400])
        return json.loads(b) if b else None

    def worker(self, path, obj):
        return self.json("POST", path, obj, token=WT)

    def results(self, wid, lease_id, lines):
        data = zstd_compress(("\n".join(json.dumps(x) for x in lines) + "\n").encode())
        st, b = self.call("POST", "/v1/worker/results", data,
                          {"Content-Type": "application/x-ndjson", "Content-Encoding": "zstd",
                           "X-Worker-Id": wid, "X-Lease-Id": lease_id}, WT)
        assert st == 200, (st, b[:400])
        return json.loads(b)

    def wait(self, bid, statuses, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            b = self.json("GET", f"/v1/batches/{bid}")
            if b["status"] in statuses:
                return b
            assert time.monotonic() < deadline, b
            time.sleep(0.02)


def transient(q):
    return {"request_id": q["request_id"], "status": "error",
            "error": {"class": "transient", "code": "device_error", "message": "device lost"}}


def answer(q, tag):
    body = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": q["body"]["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"{tag} {q['custom_id']}"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    return {"request_id": q["request_id"], "status": "success", "response": {"status_code": 200, "body": body},
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0},
            "timings": {"queue_ms": 1, "prefill_ms": 1, "decode_ms": 1, "device_ms": 1}}


INPUT_A = jsonl(3, model="m1")
INPUT_B = jsonl(4, model="m2")
INPUT_C = jsonl(2, model="m3")
INPUT_X = jsonl(1, model="m4")

RX = None


def receiver():
    """The webhook receiver of this test process (test_webhooks.Receiver on
    127.0.0.1): one for the recorded run and every restart after it, so a
    delivery made before the cut counts."""
    global RX
    if RX is None:
        from test_webhooks import Receiver
        RX = Receiver()
    return RX


def scenario(api, acks):
    """The data path, step by step; acks records every 2xx as it arrives,
    and every terminal transition as it is seen (in that order: see
    history())."""
    acks["webhook"] = api.json("POST", "/v1/webhook_endpoints", {"url": receiver().url("/hook")})["id"]
    ct, body = multipart({"purpose": "batch"}, {"file": ("a.jsonl", INPUT_A)})
    st, b = api.call("POST", "/v1/files", body, {"Content-Type": ct})
    assert st == 200, b
    acks["file_a"] = json.loads(b)["id"]
    b1 = api.json("POST", "/v1/batches", {"input_file_id": acks["file_a"], "endpoint": "/v1/chat/completions",
                                          "completion_window": "24h"}, headers={"Idempotency-Key": "crash-b1"})
    acks["b1"] = b1["id"]
    st, b = api.call("POST", "/v1/jobs", INPUT_B)
    assert st == 200, b
    acks["b2"] = json.loads(b)["id"]
    st, b = api.call("POST", "/v1/jobs?completion_window=1s", INPUT_C)
    assert st == 200, b
    acks["b3"] = json.loads(b)["id"]
    for k in ("b1", "b2"):
        api.wait(acks[k], ("in_progress",))
    acks["ingested"] = True
    wid = api.worker("/v1/worker/register", {"name": "crash", "device": "cpu",
                                             "models": [{"id": "m1", "aliases": []}]})["worker_id"]
    lease = api.worker("/v1/worker/lease", {"worker_id": wid, "model": "m1", "max_requests": 64,
                                            "lease_seconds": 2, "wait_ms": 0})
    qs = sorted(lease["requests"], key=lambda q: q["custom_id"])
    assert len(qs) == 3, lease
    acks["committed"], acks["dead"], acks["lease_id"] = [], [], lease["lease_id"]
    for chunk in (qs[:1], qs[1:]):  # the last one fails transiently: at --max-attempts 1, dead-lettered
        lines = [answer(q, "first") if q is not qs[-1] else transient(q) for q in chunk]
        r = api.results(wid, lease["lease_id"], lines)
        for q, x in zip(chunk, r["results"]):
            if x["status"] in ("ok", "dead_lettered"):
                acks["dead" if x["status"] == "dead_lettered" else "committed"].append(q["custom_id"])
                acks[f"result {q['custom_id']}"] = x["status"]
    done = api.wait(acks["b1"], ("completed",))
    acks["b1_completed"] = True
    st, out = api.call("GET", f"/v1/files/{done['output_file_id']}/content")
    assert st == 200, out
    acks["output"] = (done["output_file_id"], out)
    api.json("POST", f"/v1/batches/{acks['b2']}/cancel")
    acks["cancelled"] = True
    api.wait(acks["b2"], ("cancelled",))
    acks["b2_cancelled"] = True
    api.wait(acks["b3"], ("expired",))
    acks["b3_expired"] = True
    ct, body = multipart({"purpose": "batch", "expires_after[anchor]": "created_at",
                          "expires_after[seconds]": "1"}, {"file": ("x.jsonl", INPUT_X)})
    st, b = api.call("POST", "/v1/files", body, {"Content-Type": ct})
    assert st == 200, b
    acks["file_x"] = json.loads(b)["id"]
    deadline = time.monotonic() + 30
    while api.call("GET", f"/v1/files/{acks['file_x']}")[0] != 404:
        assert time.monotonic() < deadline, "file_x never expired"
        time.sleep(0.05)
    acks["file_x_gone"] = True
    # the purge (bytes, then the row) is the sweeper's: seen when the row
    # is gone from the live database (while jobd lives, a reader sees only
    # what it published: under full, synced)
    while api.data and file_rows(api.data, acks["file_x"]):
        assert time.monotonic() < deadline, "file_x is never purged"
        time.sleep(0.05)
    if api.data:
        api.alive_since_read()
    acks["file_x_purged"] = True
    acks["end"] = True


def file_rows(data, fid):
    db = sqlite3.connect(f"file:{os.path.join(data, 'jobd.db')}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("SELECT count(*) FROM files WHERE id = ?", (fid,)).fetchone()[0]
    finally:
        db.close()


def start_jobd(data, durability, env=None):
    port = free_port()
    p = Proc([JOBD, "--listen", f"127.0.0.1:{port}", "--data", data, "--durability", durability, *FLAGS], env=env)
    return p, port


def recorded_run(work, cut, durability, steps=scenario, shim_env=None, fail=None):
    """One shimmed run of steps (the scenario), cut before sync `cut` (0:
    never; the power goes after the last step then), with the shim's
    CRASHSIM_FAIL = fail. Under fail, every 5xx is recorded in
    acks["refused"] and the call made again (Api). The webhook deliveries
    the receiver got by the cut are kept in acks["delivered"]. Returns
    (model, acks)."""
    data = os.path.join(work, "data")
    os.makedirs(data)
    base = crashlib.Baseline(data)
    log = os.path.join(work, "shim.log")
    rx = receiver()
    with rx.lock:
        rx.calls.clear()
    p, port = start_jobd(data, durability, {**crashlib.env(data, log, cut, fail), **(shim_env or {})})
    acks = {}
    api = Api(port, faulty=bool(fail), data=data, log=log)
    try:
        try:
            p.wait_http(port, timeout=30)
        except AssertionError:
            if not fail or p.p.poll() in (None, 0):
                raise
            acks["exited"] = p.log()  # an I/O error at startup: jobd refuses to start
            raise Cut("jobd did not start")
        steps(api, acks)
    except Cut:
        pass
    except AssertionError as e:
        # the scenario itself failed while jobd lived: that is a finding,
        # unless the power was cut meanwhile
        if p.p.poll() is None:
            raise AssertionError(f"scenario failed before the cut: {e}; log: {p.log()[-1500:]}")
    if api.refusals:
        acks["refused"] = api.refusals
    if p.p.poll() is None:
        p.p.send_signal(signal.SIGKILL)
    p.p.wait()
    with rx.lock:
        acks["delivered"] = list(rx.calls)
    return crashlib.replay(base, log), acks


# ---- what survived -----------------------------------------------------------------------

def durable_state(data):
    """The state a rebuilt directory holds, read before any jobd starts on
    it (on a copy: SQLite's recovery of the WAL must be jobd's own)."""
    scratch = os.path.join(tmpdir(), "peek")
    shutil.copytree(data, scratch)
    db = sqlite3.connect(os.path.join(scratch, "jobd.db"))
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'webhook_events'").fetchone():
            db.close()  # cut before the schema was made (whole, in one transaction)
            db = sqlite3.connect(":memory:")
            db.executescript("CREATE TABLE files (id, storage_path); CREATE TABLE batches (id, status, output_file_id);"
                             "CREATE TABLE results (request_id, lease_id, error_code, error_message);"
                             "CREATE TABLE requests (id, batch_id, custom_id); CREATE TABLE webhook_endpoints (id);"
                             "CREATE TABLE webhook_events (id, type, object_id, payload);")
        s = {"files": {r[0]: r[1] for r in db.execute("SELECT id, storage_path FROM files")},
             "batches": {r[0]: {"status": r[1], "output_file_id": r[2]}
                         for r in db.execute("SELECT id, status, output_file_id FROM batches")},
             "results": {(r[0], r[1]): {"lease_id": r[2], "error_code": r[3], "error_message": r[4]}
                         for r in db.execute("SELECT q.batch_id, q.custom_id, r.lease_id, r.error_code, "
                                             "r.error_message FROM results r JOIN requests q ON q.id = r.request_id")},
             "endpoints": {r[0] for r in db.execute("SELECT id FROM webhook_endpoints")},
             "events": db.execute("SELECT id, type, object_id, payload FROM webhook_events").fetchall()}
    finally:
        db.close()
    shutil.rmtree(scratch, ignore_errors=True)
    s["stored"] = set(os.listdir(os.path.join(data, "files"))) if os.path.isdir(os.path.join(data, "files")) else set()
    return s


def history(acks, s, full):
    """The acknowledged history of a run, in the order the 2xx (or the
    sighting of a terminal transition) came, against what survived:
    [(name, survived, needs)]; survived is None where the state cannot
    tell (purged()). needs: how many entries before it must have
    survived if it did - all of them for a client's call (its commit came
    after every earlier 2xx), fewer for a transition jobd made in the
    background (committed when its cause was, or any time after, before
    it was seen: b3 may expire before b2 is ingested)."""
    b = s["batches"]

    def status(k):
        return b.get(acks.get(k), {}).get("status")

    def result(cid, kind):
        r = s["results"].get((acks.get("b1"), cid))
        if not r or r["lease_id"] != acks.get("lease_id"):
            return False  # a commit under the scenario's lease, not a redo
        if kind == "ok":
            return r["error_code"] is None
        return r["error_code"] == "max_attempts_exceeded" and "device lost" in (r["error_message"] or "")

    def purged():
        """The expiry's commit survived: True, False, or None when that
        cannot be told. Its row and bytes gone: it did, under full (the
        upload's commit is durable). Under normal the upload's commit may
        be lost too, and the bytes were removed (durably, before the row
        goes) either way: a missing row tells nothing."""
        if acks["file_x"] in s["files"]:
            return False
        return f"{acks['file_x']}.jsonl.zst" not in s["stored"] if full else None

    alive = {
        "webhook": lambda: acks["webhook"] in s["endpoints"],
        "file_a": lambda: acks["file_a"] in s["files"],
        "b1": lambda: acks["b1"] in b, "b2": lambda: acks["b2"] in b, "b3": lambda: acks["b3"] in b,
        "ingested": lambda: status("b1") not in (None, "validating") and status("b2") not in (None, "validating"),
        "b1_completed": lambda: status("b1") == "completed" and b[acks["b1"]]["output_file_id"] == acks["output"][0]
        if "output" in acks else status("b1") == "completed",
        "cancelled": lambda: status("b2") in ("cancelling", "cancelled"),
        "b2_cancelled": lambda: status("b2") == "cancelled",
        "b3_expired": lambda: status("b3") == "expired",
        "file_x": lambda: True if acks["file_x"] in s["files"] else purged(),
        "file_x_purged": purged,
    }
    # a background transition needs what caused it: its batch's ingest or
    # results, the cancel, the upload
    cause = {"ingested": "b2", "b1_completed": None, "b2_cancelled": "cancelled", "b3_expired": "b3",
             "file_x_purged": "file_x"}
    out = []
    for k in acks:
        if k.startswith("result "):
            cid = k.split(" ", 1)[1]
            out.append((k, result(cid, acks[k] == "ok" and "ok" or "dead"), len(out)))
        elif k in alive:
            if k not in cause:
                need = len(out)
            elif k == "b1_completed":  # after its last result commit
                need = max((i + 1 for i, (n, _, _) in enumerate(out) if n.startswith("result ")), default=0)
            else:
                need = next(i + 1 for i, (n, _, _) in enumerate(out) if n == cause[k])
            out.append((k, alive[k](), need))
    return out


def check_history(acks, s, full, must):
    h = history(acks, s, full)
    if full:  # everything acknowledged is there
        lost = [k for k, ok, _ in h if ok is not True]
        must(not lost, f"acknowledged and lost: {lost}")
    else:  # normal: what survived is a prefix of what was acknowledged
        for i, (k, ok, need) in enumerate(h):
            if ok:
                gone = [n for n, o, _ in h[:need] if o is False]
                must(not gone, f"not a prefix of the acknowledged history: {k} survived, {gone} did not: "
                               f"{[(n, o) for n, o, _ in h]}")
    return len(h)


def check_events(s, must):
    """The outbox: one event per terminal batch, of its type, none for any
    other (spec/webhooks.md: the event commits with the transition)."""
    terminal = {bid: v["status"] for bid, v in s["batches"].items()
                if v["status"] in ("completed", "failed", "expired", "cancelled")}
    got = {}
    for eid, typ, oid, _ in s["events"]:
        must(oid not in got, f"batch {oid} has two events: {got.get(oid)}, {eid} {typ}")
        got[oid] = (eid, typ)
    want = {bid: f"batch.{st}" for bid, st in terminal.items()}
    must({k: v[1] for k, v in got.items()} == want, f"events {got} for terminal batches {terminal}")


def finish_and_check(data, acks, durability, where):
    """Restart jobd on a rebuilt directory, finish its work, check."""
    full = durability == "full"
    rx = receiver()
    with rx.lock:
        rx.calls[:] = list(acks.get("delivered", []))

    def must0(cond, what):
        if not cond:
            raise Broken(where, what)

    s = durable_state(data)
    check_history(acks, s, full, must0)
    check_events(s, must0)
    p, port = start_jobd(data, durability)
    try:
        p.wait_http(port, timeout=30)
    except AssertionError as e:
        raise Broken(where, f"jobd does not start on the rebuilt directory: {e}")
    api = Api(port)

    def must(cond, what):
        if not cond:
            raise Broken(where, what, p.log())

    try:
        files = {f["id"]: f for f in api.json("GET", "/v1/files?limit=10000")["data"]}
        batches = {b["id"]: b for b in api.json("GET", "/v1/batches?limit=100")["data"]}
        if full and "file_a" in acks:
            must(acks["file_a"] in files, "an acknowledged upload is gone")
            st, got = api.call("GET", f"/v1/files/{acks['file_a']}/content")
            must(st == 200 and got == INPUT_A, f"an acknowledged upload reads back {st}, {len(got)} bytes")
        if full:
            for k in ("b1", "b2", "b3"):
                if k in acks:
                    must(acks[k] in batches, f"acknowledged batch {k} is gone")
        if full and "b1" in acks:
            again = api.json("POST", "/v1/batches", {"input_file_id": acks["file_a"],
                                                     "endpoint": "/v1/chat/completions", "completion_window": "24h"},
                             headers={"Idempotency-Key": "crash-b1"})
            must(again["id"] == acks["b1"], "the Idempotency-Key made a second batch")
        # finish: a worker answers what is left of b1 ("after"), b2 is cancelled, b3 expires
        wid = api.worker("/v1/worker/register", {"name": "after", "device": "cpu",
                                                 "models": [{"id": "m1", "aliases": []}]})["worker_id"]
        for bid in batches:
            if batches[bid]["status"] in ("validating", "in_progress", "finalizing") and \
                    bid not in (acks.get("b1"), acks.get("b3")):
                api.json("POST", f"/v1/batches/{bid}/cancel", expect=200)
        deadline = time.monotonic() + 60
        while True:
            now = {b["id"]: b for b in api.json("GET", "/v1/batches?limit=100")["data"]}
            if all(b["status"] in ("completed", "failed", "expired", "cancelled") for b in now.values()):
                break
            must(time.monotonic() < deadline, f"batches never end: {[(b['id'], b['status']) for b in now.values()]}")
            lease = api.worker("/v1/worker/lease", {"worker_id": wid, "model": "m1", "max_requests": 64,
                                                    "lease_seconds": 2, "wait_ms": 100})
            if lease["requests"]:
                api.results(wid, lease["lease_id"], [answer(q, "after") for q in lease["requests"]])
        b1_out, b1_err = {}, {}
        for bid, b in now.items():
            seen = []
            for kind in ("output_file_id", "error_file_id"):
                if b.get(kind):
                    st, got = api.call("GET", f"/v1/files/{b[kind]}/content")
                    must(st == 200, f"batch {bid}'s {kind} reads {st}")
                    lines = [json.loads(x) for x in got.decode().splitlines() if x.strip()]
                    seen += [x["custom_id"] for x in lines]
                    if bid == acks.get("b1") and kind == "output_file_id":
                        b1_out = {x["custom_id"]: x["response"]["body"]["choices"][0]["message"]["content"]
                                  for x in lines}
                        if full and "output" in acks and acks["output"][0] == b[kind]:
                            must(got == acks["output"][1], "the output file changed after it was served")
                    if bid == acks.get("b1") and kind == "error_file_id":
                        b1_err = {x["custom_id"]: x["error"]["code"] for x in lines}
            must(len(seen) == len(set(seen)), f"batch {bid}: a request is in its files twice: {seen}")
            must(len(seen) == b["request_counts"]["total"],
                 f"batch {bid}: {len(seen)} lines in its files for {b['request_counts']['total']} requests")
        if "b1" in acks and acks["b1"] in now:
            # a result that survived is in the output exactly once with its answer (full: every committed one)
            for cid in acks.get("committed", []):
                if full or s["results"].get((acks["b1"], cid), {}).get("lease_id") == acks.get("lease_id"):
                    must(b1_out.get(cid) == f"first {cid}", f"committed result {cid} reads {b1_out.get(cid)!r}")
            for cid in acks.get("dead", []):
                if full or (acks["b1"], cid) in s["results"]:
                    got = b1_err.get(cid)
                    must(got == "max_attempts_exceeded", f"dead-lettered {cid} reads {got!r} in the error file")
        if full and "b1" in acks:
            b = now[acks["b1"]]
            must(b["status"] == "completed", f"b1 ended {b['status']}")
            if "output" in acks:
                must(b["output_file_id"] == acks["output"][0], "b1's output file changed id")
        if full and acks.get("cancelled"):
            must(now[acks["b2"]]["status"] == "cancelled", f"a cancel was lost: {now[acks['b2']]['status']}")
        if full and acks.get("file_x_gone"):
            st, _ = api.call("GET", f"/v1/files/{acks['file_x']}")
            must(st == 404, f"an expired upload came back ({st})")
        # expired uploads must be purged (bytes and row) before the on-disk check
        deadline = time.monotonic() + 30
        while any(f.get("expires_at") for f in api.json("GET", "/v1/files?limit=10000")["data"]):
            must(time.monotonic() < deadline, "an expired upload is never purged")
            time.sleep(0.05)
        wait_deliveries(api, rx, must)
    except Cut as e:
        raise Broken(where, f"jobd died after restart: {e}", p.log())
    except Broken:
        raise
    except AssertionError as e:  # a call of the finishing steps was refused
        raise Broken(where, f"the work cannot be finished: {e}", p.log())
    p.stop()
    must(p.p.returncode == 0, f"jobd exited {p.p.returncode}")
    check_disk(data, must)
    check_events(durable_state(data), must)
    check_webhooks(data, rx, full, must)


def wait_deliveries(api, rx, must):
    """Every endpoint's deliveries of every terminal batch's event settle:
    delivered, or sent and claimed when the power went (the receiver has
    that webhook-id; jobd sends it again after the claim's hold, 32 s:
    spec/webhooks.md's at-least-once). A claimed delivery the receiver never
    got is waited for."""
    n_terminal = sum(1 for b in api.json("GET", "/v1/batches?limit=100")["data"]
                     if b["status"] in ("completed", "failed", "expired", "cancelled"))
    deadline = time.monotonic() + 90
    for ep in api.json("GET", "/v1/webhook_endpoints")["data"]:
        while True:
            ds = api.json("GET", f"/v1/webhook_endpoints/{ep['id']}/deliveries?limit=100")["data"]
            with rx.lock:
                seen = {h.get("webhook-id") for _, h, _ in rx.calls}
            open_ = [d for d in ds if d["status"] != "delivered" and
                     not (d["status"] == "pending" and d["attempts"] >= 1 and d["event_id"] in seen)]
            if len(ds) == n_terminal and not open_:
                break
            must(time.monotonic() < deadline, f"endpoint {ep['id']}: {len(ds)} deliveries for {n_terminal} "
                                              f"terminal batches, not settled: {open_}")
            time.sleep(0.05)


def check_webhooks(data, rx, full, must):
    """Against the outbox after the restart: every event reached the
    receiver (when an endpoint exists), every POST of one webhook-id carried
    that event's payload, and no other event was sent (under normal, an
    event sent before the cut may have been rolled back with its batch's
    transition; its batch then ends again, under a new id)."""
    db = sqlite3.connect(f"file:{os.path.join(data, 'jobd.db')}?mode=ro", uri=True)
    try:
        events = {r[0]: r[1] for r in db.execute("SELECT id, payload FROM webhook_events")}
        n_endpoints = db.execute("SELECT count(*) FROM webhook_endpoints").fetchone()[0]
    finally:
        db.close()
    with rx.lock:
        calls = [(h, b) for path, h, b in rx.calls
                 if path == "/hook" and len(b) == int(h.get("content-length", -1))]  # whole POSTs
    got = {}
    for h, body in calls:
        eid = h.get("webhook-id")
        if eid not in events:
            must(not full, f"a webhook {eid} was delivered whose event is not in the outbox: {body[:200]}")
            continue
        must(body == events[eid].encode(), f"webhook {eid} sent with another body: {body[:200]}")
        got[eid] = got.get(eid, 0) + 1
    if n_endpoints:
        missing = sorted(set(events) - set(got))
        must(not missing, f"events never delivered: {missing}")


def check_disk(data, must):
    db = sqlite3.connect(f"file:{os.path.join(data, 'jobd.db')}?mode=ro", uri=True)
    try:
        must(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity_check fails")
        named = set()
        for fid, path, n, sha, enc in db.execute(
                "SELECT id, storage_path, bytes, sha256, encoding FROM files"):
            named.add(path)
            full = os.path.join(data, path)
            must(os.path.exists(full), f"file {fid} names a missing file {path}")
            raw = open(full, "rb").read()
            try:
                body = zstd_decompress(raw) if enc == "zstd" else raw
            except Exception as e:  # a torn or short zstd stream
                must(False, f"file {fid} ({path}) does not decompress: {e}")
            must(len(body) == n and hashlib.sha256(body).hexdigest() == sha,
                 f"file {fid} ({path}) holds {len(body)} bytes, not its {n} (or another sha256)")
        on_disk = {os.path.relpath(os.path.join(r, f), data) for r, _, fs in os.walk(os.path.join(data, "files"))
                   for f in fs}
        must(on_disk <= named, f"orphaned files no row names: {sorted(on_disk - named)}")
        left = os.listdir(os.path.join(data, "tmp")) if os.path.isdir(os.path.join(data, "tmp")) else []
        must(not left, f"left in tmp/: {left}")
        bad = db.execute("SELECT count(*) FROM requests q WHERE q.status IN ('queued', 'leased') AND "
                         "EXISTS (SELECT 1 FROM results r WHERE r.request_id = q.id)").fetchone()[0]
        must(bad == 0, f"{bad} requests both queued/leased and done")
    finally:
        db.close()


N_CHECKS = 33  # the must() calls of check_history .. check_webhooks (some once per file, batch or event)


def report(line):
    """A suite's count line: stdout as a note (tests/py/runner.py shows it
    under the ok line), and CRASHSIM_REPORT's file when set (make crash
    collects them for bench/NOTES.md)."""
    print("note: " + line, flush=True)
    if os.environ.get("CRASHSIM_REPORT"):
        with open(os.environ["CRASHSIM_REPORT"], "a") as f:
            f.write(line + "\n")


def last_ack(acks):
    """The last step acknowledged (or seen) before the cut."""
    steps = [k for k in acks if k not in ("delivered", "refused", "lease_id", "committed", "dead", "exited")]
    return steps[-1] if steps else "start"


def points(n_sync):
    """The sync points to cut at: 1..n_sync+1 (n_sync+1: after the end)."""
    every = list(range(1, n_sync + 2))
    if os.environ.get("CRASHSIM_ALL"):
        return every
    rnd = random.Random(int(os.environ.get("TH_SEED", "12345")))
    pick = sorted(rnd.sample(every, min(SAMPLE, len(every))))
    return pick


def crash_suite(durability):
    need_build()
    keep = os.environ.get("CRASHSIM_KEEP")
    variants = crashlib.VARIANTS if os.environ.get("CRASHSIM_ALL") else ("lose", "torn:1")
    work = tmpdir()
    model, acks = recorded_run(os.path.join(work, "count"), 0, durability)
    assert acks.get("end"), acks
    n_sync = model.n_sync
    assert n_sync > 10, n_sync
    n_checks = 0
    t0 = time.monotonic()
    for cut in points(n_sync):
        run_dir = os.path.join(work, f"cut{cut}")
        model, acks = recorded_run(run_dir, cut, durability)
        for v in variants:
            out = os.path.join(run_dir, "rebuilt-" + v.replace(":", "-"))
            model.rebuild(out, v)
            where = f"{durability} sync point {cut}/{n_sync} (after {last_ack(acks)}), {v}"
            try:
                finish_and_check(out, acks, durability, where)
            except AssertionError:
                if keep:
                    shutil.copytree(run_dir, os.path.join(keep, os.path.basename(run_dir)), dirs_exist_ok=True)
                raise
            n_checks += 1
        shutil.rmtree(run_dir, ignore_errors=True)
    report(f"crashsim {durability}: {n_sync} sync points, {len(points(n_sync))} cut, {len(variants)} variants, "
           f"{n_checks} restarts checked (each: {N_CHECKS} invariant checks), 0 failures, "
           f"{time.monotonic() - t0:.0f} s")


def need_build():
    if not os.path.exists(JOBD) or not os.path.exists(crashlib.shim_path(ROOT)):
        raise Skip("build/jobd or build/crashsim.so not built")


def test_crashsim_power_cut_at_sync_points_full_durability_loses_nothing_acknowledged():
    crash_suite("full")


def test_crashsim_power_cut_at_sync_points_normal_durability_never_corrupts():
    crash_suite("normal")


def one_batch(api, acks):
    """A batch of two lines, both answered: its error file is never used."""
    st, b = api.call("POST", "/v1/jobs", jsonl(2, model="m1"))
    assert st == 200, b
    bid = json.loads(b)["id"]
    api.wait(bid, ("in_progress",))
    wid = api.worker("/v1/worker/register", {"name": "w", "device": "cpu",
                                             "models": [{"id": "m1", "aliases": []}]})["worker_id"]
    lease = api.worker("/v1/worker/lease", {"worker_id": wid, "model": "m1", "max_requests": 8,
                                            "lease_seconds": 60, "wait_ms": 0})
    api.results(wid, lease["lease_id"], [answer(q, "first") for q in lease["requests"]])
    acks["done"] = api.wait(bid, ("completed",))


def test_crashsim_finalize_temp_file_removal_is_durable_before_the_batch_completes():
    """Regression: finalization removed the unused error file's temp file
    after the last fsync of files/, so a power cut after the batch's final
    commit brought "<batch>-errors.jsonl.zst.tmp" back, a file no row names.
    The cut here comes after the scenario (the batch completed, nothing else
    syncs files/ afterwards); in the "lose" rebuild, files/ must hold
    exactly the two durable files."""
    need_build()
    work = tmpdir()
    model, acks = recorded_run(os.path.join(work, "run"), 0, "full", steps=one_batch)
    assert acks.get("done", {}).get("output_file_id"), acks
    out = os.path.join(work, "lost")
    model.rebuild(out, "lose")
    names = sorted(os.listdir(os.path.join(out, "files")))
    assert not [n for n in names if n.endswith(".tmp")], names
    assert len(names) == 2, names  # the input and the output


def test_crashsim_upload_cut_between_rename_and_commit_leaves_no_orphan():
    """Regression: an upload renamed into files/ whose row never committed
    (the power went at that commit's WAL sync; the client got no answer)
    stayed under files/ forever with no row naming it. Cut at the first
    WAL sync after the rename (CRASHSIM_ARM / CRASHSIM_CUT_FILE, so the
    window is the same whatever other threads synced); in the "lose"
    rebuild the row is gone and the restarted jobd must remove the file (in
    "keep" the commit's frames survived: the row names it)."""
    need_build()
    work = tmpdir()

    def upload(api, acks):
        ct, body = multipart({"purpose": "batch"}, {"file": ("a.jsonl", INPUT_A)})
        st, b = api.call("POST", "/v1/files", body, {"Content-Type": ct})
        acks["answered"] = st

    model, acks = recorded_run(os.path.join(work, "run"), 1, "full", steps=upload,
                               shim_env={"CRASHSIM_ARM": "files/file-", "CRASHSIM_CUT_FILE": "-wal"})
    assert model.cut == 1 and "answered" not in acks, (model.cut, acks)
    for v in ("keep", "lose"):
        out = os.path.join(work, v)
        model.rebuild(out, v)
        stranded = os.listdir(os.path.join(out, "files"))
        assert len(stranded) == 1 and stranded[0].startswith("file-"), stranded
        finish_and_check(out, acks, "full", f"upload cut, {v}")  # every file named by a row
        if v == "lose":  # the commit's WAL frames are gone: so is the file
            assert os.listdir(os.path.join(out, "files")) == [], os.listdir(os.path.join(out, "files"))


def expire_one(api, acks):
    """An upload that expires after 1 s, until the sweeper has purged it."""
    ct, body = multipart({"purpose": "batch", "expires_after[anchor]": "created_at",
                          "expires_after[seconds]": "1"}, {"file": ("x.jsonl", INPUT_X)})
    st, b = api.call("POST", "/v1/files", body, {"Content-Type": ct})
    assert st == 200, b
    fid = json.loads(b)["id"]
    deadline = time.monotonic() + 30
    while file_rows(api.data, fid):
        assert time.monotonic() < deadline, "the expired upload is never purged"
        time.sleep(0.05)
    api.alive_since_read()
    acks["purged"] = fid


def stored_matches_rows(out):
    """files/ of a rebuilt directory against its rows, before any jobd
    starts on it: (on disk, named)."""
    db = sqlite3.connect(f"file:{os.path.join(out, 'jobd.db')}?mode=ro", uri=True)
    try:
        named = {r[0] for r in db.execute("SELECT storage_path FROM files")}
    finally:
        db.close()
    return {os.path.join("files", n) for n in os.listdir(os.path.join(out, "files"))}, named


def test_crashsim_expired_file_unlink_is_durable_before_its_row_goes():
    """Regression: file expiry removed an upload's bytes and then purged its
    row with no fsync of files/ between them, so a power cut after the
    purge's commit could bring the bytes back with no row naming them.
    jobd on SQLite collects such a file when it starts again, but an
    instance on PostgreSQL never would (another instance's upload may be in
    flight there). Checked on the rebuilt directory itself, before any jobd
    starts on it: in the "lose" rebuild (every unsynced change undone),
    files/ holds exactly what the rows name."""
    need_build()
    work = tmpdir()
    model, acks = recorded_run(os.path.join(work, "run"), 0, "full", steps=expire_one)
    assert acks.get("purged"), acks
    out = os.path.join(work, "lost")
    model.rebuild(out, "lose")
    on_disk, named = stored_matches_rows(out)
    assert on_disk == named, f"files/ holds {sorted(on_disk - named)} that no row names"


def test_crashsim_expiry_whose_directory_fsync_failed_syncs_it_again_before_the_row_goes():
    """Regression: when the fsync of files/ after an expired upload's unlink
    failed (EIO), the next sweep found the file gone (ENOENT), took that for
    done without syncing files/, and purged the row: the unlink was still
    not durable, and a power cut brought the bytes back with no row naming
    them (PostgreSQL's fsync lesson: a failed fsync is not retried by
    carrying on). The second fsync of files/ (the first is the upload's
    rename) fails here; in the "lose" rebuild files/ must hold exactly what
    the rows name."""
    need_build()
    work = tmpdir()
    model, acks = recorded_run(os.path.join(work, "run"), 0, "full", steps=expire_one, fail="sync:2:EIO:files$")
    assert acks.get("purged"), acks
    assert [r for r in crashlib.parse(os.path.join(work, "run", "shim.log")) if r[0] == "F"], "no fsync failed"
    out = os.path.join(work, "lost")
    model.rebuild(out, "lose")
    on_disk, named = stored_matches_rows(out)
    assert on_disk == named, f"files/ holds {sorted(on_disk - named)} that no row names"


# ---- I/O errors --------------------------------------------------------------------------

FAULTS = (("write", "ENOSPC"), ("write", "EIO"), ("sync", "EIO"))
FAULT_SAMPLE = 6


def fault_suite(kind, err):
    """The scenario with the N-th `kind` call under --data failing with err,
    for sampled N (every N with CRASHSIM_ALL): the call that hit it answers
    a clean 5xx (507 for a full disk) with an OpenAI error body, or jobd
    retries it in the background; jobd keeps serving: the scenario makes
    each refused call again and drives on to its end; and what it
    acknowledged, before and after the failure, is durable: the directory
    rebuilt after a power cut at the end ("lose": the writes a failed fsync
    should have synced are gone too, crashlib's limbo) passes every check of
    the crash suite."""
    need_build()
    work = tmpdir()
    model, acks = recorded_run(os.path.join(work, "count"), 0, "full")
    assert acks.get("end"), acks
    recs = crashlib.parse(os.path.join(work, "count", "shim.log"))
    n_calls = sum(1 for r in recs if r[0] == ("W" if kind == "write" else "S"))
    every = list(range(1, n_calls + 1))
    if os.environ.get("CRASHSIM_ALL"):
        pick = every
    else:
        pick = sorted(random.Random(int(os.environ.get("TH_SEED", "12345"))).sample(every, FAULT_SAMPLE))
    n_refused = n_exited = 0
    for n in pick:
        run_dir = os.path.join(work, f"{kind}{n}")
        where = f"{kind} call {n}/{n_calls} failing with {err}"
        model, acks = recorded_run(run_dir, 0, "full", fail=f"{kind}:{n}:{err}")
        if "exited" in acks:  # an I/O error at startup: jobd refuses to start, saying why
            n_exited += 1
            assert " error " in acks["exited"], (where, acks["exited"][-500:])
        else:
            assert acks.get("end"), (where, "the scenario did not reach its end", sorted(acks))
        for method, path, st, body in acks.get("refused", []):
            assert st in ((507,) if err == "ENOSPC" else (500, 503)), (where, method, path, st, body[:300])
            e = json.loads(body).get("error") or {}
            assert e.get("message") and e.get("type") == "server_error", (where, body[:300])
            assert (e.get("code") == "insufficient_storage") == (st == 507), (where, body[:300])
        n_refused += bool(acks.get("refused"))
        out = os.path.join(run_dir, "rebuilt")
        model.rebuild(out, "lose")
        finish_and_check(out, acks, "full", where)
        shutil.rmtree(run_dir, ignore_errors=True)
    report(f"crashsim faults {kind}:{err}: {n_calls} calls, {len(pick)} failed one at a time, "
           f"{n_refused} answered 5xx (then the call made again, the scenario to its end), "
           f"{n_exited} at startup (jobd refused to start), 0 failures")


def test_crashsim_write_enospc_answers_507_and_acknowledges_only_durable_data():
    fault_suite("write", "ENOSPC")


def test_crashsim_write_eio_answers_5xx_and_acknowledges_only_durable_data():
    fault_suite("write", "EIO")


def test_crashsim_fsync_eio_answers_5xx_and_acknowledges_only_durable_data():
    fault_suite("sync", "EIO")


def open_files(pid):
    """jobd's descriptors that are not sockets, pipes or anonymous inodes:
    {fd: target}."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if not t.startswith(("socket:", "pipe:", "anon_inode:")):
            out[int(fd)] = t
    return out


def test_crashsim_upload_whose_fsync_fails_leaks_no_descriptor():
    """Regression (4392c27): upload_commit kept its file open when the fsync
    failed, one descriptor per refused upload until jobd ran out. Three
    uploads whose file's fsync fails (EIO; the shim selects the upload's
    temp file, tmp/up-*) and one whose write fails (ENOSPC): each answered
    (500, 507), and afterwards jobd holds the same files open as before
    them, none of them an upload's temp file; the next upload succeeds."""
    need_build()
    work = tmpdir()
    data = os.path.join(work, "data")
    os.makedirs(data)
    fail = ",".join([f"sync:{i}:EIO:tmp/up-" for i in (2, 3, 4)] + ["write:5:ENOSPC:tmp/up-"])
    p, port = start_jobd(data, "full", crashlib.env(data, os.path.join(work, "shim.log"), 0, fail))
    p.wait_http(port, timeout=30)
    api = Api(port)

    def upload():
        ct, body = multipart({"purpose": "batch"}, {"file": ("a.jsonl", INPUT_A)})
        return api.call("POST", "/v1/files", body, {"Content-Type": ct})[0]

    assert upload() == 200  # the first: every file jobd keeps open is open now
    before = open_files(p.p.pid)
    got = [upload() for _ in range(4)]
    assert got == [500, 500, 500, 507], got
    # (a refused upload's file is closed when its request is retired, which
    # may come after the answer: wait for that, a leaked one never closes)
    deadline = time.monotonic() + 10
    while (after := open_files(p.p.pid)) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after == before, f"descriptors opened and kept: {sorted(set(after.items()) - set(before.items()))}"
    assert not [t for t in after.values() if "/tmp/up-" in t], after
    assert upload() == 200
    p.stop()


# ---- the worker's side of a refused commit ----------------------------------------------

TINY_MODEL = os.path.join(ROOT, "tests", "fixtures", "model", "llama_tied.f32.gguf")


def worker_retry(fail):
    """A real jobworker (the tiny random llama of tests/fixtures/model)
    serves a batch of 3 through jobd under the shim, whose CRASHSIM_FAIL
    makes the commit of the first result uploaded fail (fail: "write" or
    "sync" of the WAL, selected by the result's bytes, "chat.completion",
    which no other row holds). jobd answers that /v1/worker/results 500;
    the worker keeps the lines in its outbox and sends them again; the
    batch completes with each custom_id exactly once. Then the power is cut
    and the directory rebuilt ("lose": the writes of the failed fsync are
    gone with everything unsynced): the restarted jobd serves the same
    output. Returns how many results uploads were refused."""
    need_build()
    jw = os.path.join(ROOT, "build", "jobworker")
    if not os.path.exists(jw):
        raise Skip("build/jobworker not built")
    work = tmpdir()
    data = os.path.join(work, "data")
    os.makedirs(data)
    base = crashlib.Baseline(data)
    log = os.path.join(work, "shim.log")
    p, port = start_jobd(data, "full", crashlib.env(data, log, 0, f"{fail}:1:EIO:-wal:chat.completion"))
    p.wait_http(port, timeout=30)
    api = Api(port)
    w = Proc([jw, "--jobd", f"http://127.0.0.1:{port}", "--model", TINY_MODEL, "--model-id", "tiny",
              "--worker-token", WT, "--name", "retry", "--threads", "1"])
    body = b"".join(json.dumps({"custom_id": f"c-{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "tiny", "max_tokens": 4, "temperature": 0,
                                         "messages": [{"role": "user", "content": f"Count to {i}."}]}}).encode()
                    + b"\n" for i in range(3))
    st, b = api.call("POST", "/v1/jobs?completion_window=1h", body)
    assert st == 200, b
    bid = json.loads(b)["id"]
    deadline = time.monotonic() + 300
    while (done := api.json("GET", f"/v1/batches/{bid}"))["status"] != "completed":
        assert done["status"] in ("validating", "in_progress", "finalizing"), done
        assert w.p.poll() is None, w.log()[-2000:]
        assert time.monotonic() < deadline, (done, w.log()[-2000:], p.log()[-2000:])
        time.sleep(0.1)
    assert done["request_counts"] == {"total": 3, "completed": 3, "failed": 0}, done
    st, out = api.call("GET", f"/v1/files/{done['output_file_id']}/content")
    assert st == 200, out
    ids = sorted(json.loads(x)["custom_id"] for x in out.decode().splitlines())
    assert ids == ["c-0", "c-1", "c-2"], ids
    st, metrics = api.call("GET", "/metrics")
    refused = sum(int(float(m.split()[-1])) for m in metrics.decode().splitlines()
                  if m.startswith("jobd_http_requests_total{") and 'route="/v1/worker/results"' in m
                  and 'status="500"' in m)
    injected = [r for r in crashlib.parse(log) if r[0] == "F"]
    assert len(injected) == 1 and refused >= 1, (injected, refused, p.log()[-1500:])
    w.stop()
    p.p.send_signal(signal.SIGKILL)
    p.p.wait()
    out_dir = os.path.join(work, "lost")
    crashlib.replay(base, log).rebuild(out_dir, "lose")
    p, port = start_jobd(out_dir, "full")
    p.wait_http(port, timeout=30)
    st, again = Api(port).call("GET", f"/v1/files/{done['output_file_id']}/content")
    assert st == 200 and again == out, (st, again[:300])
    p.stop()
    return refused


def test_crashsim_worker_retries_a_results_upload_whose_wal_write_failed():
    refused = worker_retry("write")
    report(f"crashsim worker retry: the WAL write of the first result failed (EIO): {refused} results upload "
           f"answered 500, sent again by jobworker, each custom_id once")


def test_crashsim_worker_retries_a_results_upload_whose_wal_fsync_failed():
    refused = worker_retry("sync")
    report(f"crashsim worker retry: the WAL fsync of the first result's commit failed (EIO): {refused} results "
           f"upload answered 500, sent again by jobworker, each custom_id once, the output whole after a power cut")


# ---- planted bugs ------------------------------------------------------------------------

PLANTED = os.path.join(ROOT, "tests", "crashsim", "planted")


def planted_jobd(patch):
    """build/jobd of a copy of the tree with patch applied: the tracked
    files and this tree's build/obj and build/gen (mtimes kept, so only
    what the patch touches is rebuilt)."""
    dst = os.path.join(tmpdir(), "tree")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in names.decode().split("\0"):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.dirname(os.path.join(dst, name)) or dst, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(dst, name))
    for sub in ("obj", "gen"):
        shutil.copytree(os.path.join(ROOT, "build", sub), os.path.join(dst, "build", sub), symlinks=True)
    subprocess.run(["patch", "-p1", "-s", "-i", patch], cwd=dst, check=True)
    # (the copy is no git checkout: its revision differs, which rebuilds common/cli.c alone)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-j1", "build/jobd"], cwd=dst, capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return os.path.join(dst, "build", "jobd")


def test_crashsim_catches_each_planted_durability_bug():
    """Each patch under tests/crashsim/planted plants one durability bug:
    (1) the fsync of a finalized output file removed (jobd/blob's local
    put), (2) the fsync of files/ after an upload's rename removed, (3) the
    2xx sent before its commit is durable (synchronous=NORMAL under
    --durability full: the commit is in the WAL, unsynced, when the answer
    goes). The crash suite (the same sample as make test) must fail on each
    with a broken invariant after a power cut at a sync point (Broken, not
    any assertion: a scenario that fails before the cut, or a build that
    fails, is no catch); the sync point, the variant and the check are
    shown under the ok line and in make crash's report."""
    import re
    need_build()
    global JOBD
    caught = []
    for patch in sorted(os.listdir(PLANTED)):
        real, JOBD = JOBD, planted_jobd(os.path.join(PLANTED, patch))
        try:
            crash_suite("full")
        except Broken as e:
            assert re.fullmatch(r"full sync point \d+/\d+ \(after [^)]*\), (lose|keep|torn:\d+)", e.where), e.where
            caught.append(f"{patch}: caught at {e.where}: {e.what[:240]}")
        else:
            raise AssertionError(f"the crash suite passes with {patch} applied")
        finally:
            JOBD = real
    assert len(caught) == 3, caught
    for line in caught:
        report("crashsim planted " + line)
