"""tests/py/faultworker.py - a worker process for the fault-injection suite
(tests/py/test_faults.py), so that a test can kill -9 it or SIGSTOP it while
it holds a lease.

usage: python faultworker.py PORT TOKEN MAX_REQUESTS LEASE_SECONDS HOLD_SECONDS

Registers, takes one lease and prints it as one JSON line
{"lease_id", "ids", "attempts"}; then heartbeats every 0.2 s for HOLD_SECONDS
(printing {"hb": status} per heartbeat), then uploads a success for every
request it holds and prints {"results": status, "body": answer}. Everything
is flushed at once so the test sees it while the process is stopped/killed.
"""
import json
import sys
import time

from workerlib import TestWorker, success


def main():
    port, token, max_req, lease_s, hold_s = (int(sys.argv[1]), sys.argv[2] or None, int(sys.argv[3]),
                                             int(sys.argv[4]), float(sys.argv[5]))
    w = TestWorker(port, token, name="fault-worker")
    w.register()
    while True:
        r = w.lease(max_requests=max_req, lease_seconds=lease_s, wait_ms=500).json()
        if r["requests"]:
            break
    reqs = r["requests"]
    print(json.dumps({"lease_id": r["lease_id"], "ids": [q["request_id"] for q in reqs],
                      "attempts": [q["attempt"] for q in reqs]}), flush=True)
    end = time.monotonic() + hold_s
    while time.monotonic() < end:
        hb = w.heartbeat(r["lease_id"], extend=lease_s, expect=None)
        print(json.dumps({"hb": hb.status}), flush=True)
        time.sleep(0.2)
    res = w.results(r["lease_id"], [success(q) for q in reqs], expect=None)
    print(json.dumps({"results": res.status, "body": res.json()}), flush=True)


if __name__ == "__main__":
    main()
