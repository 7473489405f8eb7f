"""PostgreSQL store faults. The database is stopped in the middle
of a batch and started again: jobd recovers without a restart, answers 503
with Retry-After while the database is away, and the batch completes with
every custom_id exactly once. The suite starts its own throwaway cluster
(scripts/pg-cluster) so that it can stop it; it skips where PostgreSQL is not
installed."""
import os
import subprocess
import sys
import tempfile
import time
import uuid

from harness import ROOT, Proc, Skip, binary, run, tmpdir
from jobdlib import Jobd, jsonl
from workerlib import read_jsonl

WT = "worker-secret-1"
FAST = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
        "--window-min", "1s"]


def pg(cmd, d):
    return subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), cmd, d], capture_output=True, text=True,
                          timeout=120)


def wait_done(d, batch_id, timeout):
    """The batch once terminal; 503s (the database coming back) are retried."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = d.call("GET", f"/v1/batches/{batch_id}")
        assert r.status in (200, 503), r
        if r.status == 200 and r.json()["status"] in ("completed", "failed", "expired", "cancelled"):
            return r.json()
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} not done after {timeout} s")


def wakeups(d):
    """jobd_lease_wakeups_total of d's /metrics."""
    r = d.call("GET", "/metrics")
    assert r.status == 200, r
    for ln in r.body.decode().splitlines():
        if ln.startswith("jobd_lease_wakeups_total "):
            return int(ln.split()[1])
    raise AssertionError("jobd_lease_wakeups_total missing")


def test_pg_outage_mid_batch_recovers_without_restart_nothing_lost_or_doubled():
    # outside tmpdir(): its 0700 parent would keep the postgres user out
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    r = pg("start", cluster)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    try:
        data = os.path.join(tmpdir(), "data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", url])
        assert k.returncode == 0, k.stderr
        d = Jobd(data=data, key=k.stdout.strip(), args=FAST + ["--database", url])
        n = 400
        b = d.submit(jsonl(n))
        d.wait_batch(b["id"], statuses=("in_progress",))
        w = Proc([sys.executable, os.path.join(ROOT, "tests", "py", "workerlib.py"), str(d.port), WT],
                 cwd=os.path.join(ROOT, "tests", "py"))
        deadline = time.monotonic() + 60
        while d.json("GET", f"/v1/batches/{b['id']}")["request_counts"]["completed"] < n // 8:
            assert time.monotonic() < deadline, "no progress before the outage"
            time.sleep(0.05)
        wakeups0 = wakeups(d)
        assert pg("halt", cluster).returncode == 0
        away = d.call("GET", f"/v1/batches/{b['id']}")
        assert away.status == 503 and away.headers.get("retry-after"), away
        # /readyz says why (a load balancer takes this instance out meanwhile)
        rz = d.call("GET", "/readyz")
        assert rz.status == 503 and rz.headers.get("retry-after"), rz
        assert "database is unreachable" in rz.json()["error"]["message"], rz
        time.sleep(2)
        assert pg("resume", cluster).returncode == 0
        deadline = time.monotonic() + 60
        while d.call("GET", "/readyz").status != 200:
            assert time.monotonic() < deadline, "not ready again after the database came back"
            time.sleep(0.1)
        assert d.json("GET", "/readyz") == {"status": "ready", "database": "ok"}
        # the LISTEN connection came back too: its reconnect counts as a
        # wake-up (notifications sent while it was down are lost), and only
        # a live LISTEN connection moves the counter
        while wakeups(d) <= wakeups0:
            assert time.monotonic() < deadline, "the LISTEN connection did not come back"
            time.sleep(0.1)
        done = wait_done(d, b["id"], 120)
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": n, "completed": n, "failed": 0}, done
        lines = read_jsonl(d, done["output_file_id"])
        ids = sorted(x["custom_id"] for x in lines)
        assert ids == sorted(f"t-{i}" for i in range(1, n + 1)), (len(ids), len(set(ids)))
        w.stop()
        assert d.proc.p.poll() is None, "jobd exited during the outage"
        d.proc.stop()
    finally:
        pg("stop", cluster)
