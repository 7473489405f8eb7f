"""Crash safety of ingestion: jobd is killed with SIGKILL at random moments
while it validates a large file, then restarted on the same data directory;
every batch must end in_progress with exactly the file's request count, and
the database must hold exactly that many rows for it (no half-ingested
batch, no duplicates). 20 rounds. Uses the optimised build (build/jobd):
the ASan build would make each round several times slower."""
import os
import random
import signal
import time

from harness import Skip, binary, db_connect, on_pg
from jobdlib import Jobd, jsonl

N_LINES = 60_000
ROUNDS = 20


def test_jobd_kill9_during_ingest_resumes_exactly():
    if not os.path.exists(binary("jobd", asan=False)):
        raise Skip("build/jobd not built")
    rnd = random.Random(int(os.environ.get("TH_SEED", "12345")))
    data = jsonl(N_LINES)
    d = Jobd(asan=False)
    batches = []
    killed_mid_ingest = 0
    for rnd_i in range(ROUNDS):
        b = d.submit(data)
        batches.append(b["id"])
        time.sleep(rnd.uniform(0.0, 0.6))
        cur = d.json("GET", f"/v1/batches/{b['id']}")
        killed_mid_ingest += cur["status"] == "validating"
        d.restart(sig=signal.SIGKILL)
        assert d.proc.p.poll() is None
    for bid in batches:
        b = d.wait_batch(bid, timeout=60)
        assert b["status"] == "in_progress", b
        assert b["request_counts"]["total"] == N_LINES, b
    d.proc.stop()
    db = db_connect(d.data)
    for bid in batches:
        n, distinct, lo, hi = db.execute(
            "SELECT count(*), count(DISTINCT custom_id), min(line), max(line) FROM requests WHERE batch_id = ?",
            (bid,)).fetchone()
        assert (n, distinct, lo, hi) == (N_LINES, N_LINES, 1, N_LINES), (bid, n, distinct, lo, hi)
    if not on_pg():
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # the random moments must actually have hit ingestion in progress
    assert killed_mid_ingest >= ROUNDS // 4, killed_mid_ingest
