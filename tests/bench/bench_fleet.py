#!/usr/bin/env python3
"""What the fleet view itself costs (spec/usage.md "Fleet cost"): the time of
GET /v1/usage?view=fleet, a /metrics scrape and GET /v1/batches/{id} on a
store holding many leases (release jobd, SQLite).

The store is filled directly (jobd stopped): W workers registered through
the API, then N leases spread over their timelines - each worker holds two
overlapping leases at a time, each lease LEASE_S long with one (lease,
batch) part, token sums as results would have left them - and the last
hour's share of them ends within /metrics' window. One real batch (created
through the API, so GET /v1/batches/{id} answers) owns every BATCH_EVERY-th
lease (another real batch owns none: the GET's cost without fleet work); the other parts name synthetic batch ids (lease_batches keeps plain
text: batches may be deleted). Each request is timed REPS times after one
warm-up; printed: rows, then per request min / median / max milliseconds
and the answer's size.

usage: tests/bench/bench_fleet.py [--leases 100000] [--workers 20] [--reps 5]
                                  [--batch-every 100]
"""
import argparse
import json
import os
import sqlite3
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from jobdlib import Jobd, jsonl  # noqa: E402
from workerlib import TestWorker  # noqa: E402

WT = "bench-fleet"
LEASE_S = 8   # each lease's length
STEP_S = 5    # a worker opens one every STEP_S seconds: two overlap at a time


def fill(data, workers, tenant, batch_id, n, batch_every):
    now = int(time.time())
    per = n // len(workers)
    start = now - per * STEP_S - LEASE_S  # every worker's timeline ends now (the last lease still open)
    db = sqlite3.connect(os.path.join(data, "jobd.db"))
    db.execute("PRAGMA synchronous = OFF")
    db.executemany("UPDATE workers SET registered_at = ?, last_seen = ?, hourly_cost_micros = 3600000 WHERE id = ?",
                   [(start - 60, now, w) for w in workers])
    leases, parts = [], []
    k = 0
    for wi, w in enumerate(workers):
        for i in range(per):
            lid = "lease_bench%02d%07d" % (wi, i)
            t = start + i * STEP_S
            open_ = i == per - 1
            leases.append((lid, w, "SmolLM2-135M-Instruct", 4, t, t + LEASE_S + 30,  # heartbeats ran ahead
                           None if open_ else t + LEASE_S))
            bid = batch_id if k % batch_every == 0 else "batch_bench%07d" % (k % 5000)
            parts.append((lid, bid, tenant, 4, 400 + k % 97, k % 50, 120 + k % 31, 0))
            k += 1
    db.executemany("INSERT INTO leases(id, worker_id, model, n_requests, created_at, expires_at, released_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", leases)
    db.executemany("INSERT INTO lease_batches(lease_id, batch_id, tenant_id, n_requests, prompt_tokens, "
                   "cached_tokens, completion_tokens, reused_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", parts)
    db.commit()
    db.execute("ANALYZE")
    db.close()
    return len(leases), len(parts), sum(1 for p in parts if p[1] == batch_id)


def timed(d, path, reps):
    d.call("GET", path)  # warm-up (page cache, statements)
    ms, size = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        r = d.call("GET", path, timeout=600)
        ms.append((time.perf_counter() - t0) * 1000)
        assert r.status == 200, (path, r)
        size = len(r.body)
    return min(ms), statistics.median(ms), max(ms), size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leases", type=int, default=100000)
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch-every", type=int, default=100)
    a = ap.parse_args()
    d = Jobd(asan=False, args=["--worker-token", WT, "--sweep-interval", "1s"])
    workers = []
    for i in range(a.workers):
        w = TestWorker(d.port, WT, model="smollm", name=f"bench-{i}")
        w.register()
        workers.append(w.worker_id)
    b = d.submit(jsonl(1))
    d.wait_batch(b["id"])
    b0 = d.submit(jsonl(1))  # a batch no lease served: the rest of GET /v1/batches/{id}
    d.wait_batch(b0["id"])
    db = sqlite3.connect(os.path.join(d.data, "jobd.db"))
    tenant = db.execute("SELECT tenant_id FROM batches WHERE id = ?", (b["id"],)).fetchone()[0]
    db.close()
    d.proc.stop()
    t0 = time.monotonic()
    n_leases, n_parts, n_batch = fill(d.data, workers, tenant, b["id"], a.leases, a.batch_every)
    print(f"filled {n_leases} leases, {n_parts} parts ({n_batch} of the timed batch), {a.workers} workers "
          f"in {time.monotonic() - t0:.1f} s", flush=True)
    d.restart()  # the workers were seen "now" by fill: live for the TTL (120 s), /metrics reads the last hour
    rows = [("GET /v1/usage?view=fleet (group_by batch, all time)", "/v1/usage?view=fleet&group_by=batch"),
            ("GET /v1/usage?view=fleet&group_by=day", "/v1/usage?view=fleet&group_by=day"),
            ("GET /v1/admin/usage?view=fleet (workers too)", "/v1/admin/usage?view=fleet&group_by=model"),
            ("GET /metrics (fleet gauges over the last hour)", "/metrics"),
            ("GET /v1/batches/{id} (fleet_cost)", f"/v1/batches/{b['id']}"),
            ("GET /v1/batches/{id} of a batch no lease served", f"/v1/batches/{b0['id']}")]
    print(f"| request | min ms | median ms | max ms | bytes |\n|---|---|---|---|---|")
    for name, path in rows:
        lo, med, hi, size = timed(d, path, a.reps)
        print(f"| {name} | {lo:.1f} | {med:.1f} | {hi:.1f} | {size} |", flush=True)
    fc = d.json("GET", f"/v1/batches/{b['id']}")["fleet_cost"]
    print("batch fleet_cost:", json.dumps(fc))
    d.proc.stop()


if __name__ == "__main__":
    main()
