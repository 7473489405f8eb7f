#!/usr/bin/env python3
"""tests/bench/bench_lease_http.py - work distribution through HTTP on the
release jobd, next to the library-level number of build/bench/bench_lease
measured in the same run.

An instant Python worker (one keep-alive connection) leases packs of 256,
answers each request with a ~300-byte chat.completion body, uploads each
pack as one JSONL chunk (zstd when the zstandard module is present, else
identity), until the batch is completed (the sweeper wrote the output
file). Timed from the first lease to status completed; the ingest before is
not counted. Then bench_lease runs on the same N and the ratio is printed.

usage: bench_lease_http.py [N]   (default 50000)
"""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_jobd import ROOT, Daemon, line  # noqa: E402

try:
    import zstandard
    ZC = zstandard.ZstdCompressor(level=1)
except ImportError:
    ZC = None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    tmp = tempfile.mkdtemp(prefix="bench-lease-http-")
    d = Daemon(tmp, ["--worker-token", "bench", "--sweep-interval", "200ms"])
    try:
        c = d.conn()
        body = "".join(line(i) for i in range(n)).encode()
        c.request("POST", "/v1/jobs", body)
        b = json.loads(c.getresponse().read())
        while True:
            c.request("GET", "/v1/batches/" + b["id"])
            b = json.loads(c.getresponse().read())
            if b["status"] == "in_progress":
                break
            time.sleep(0.01)
        auth = {"Authorization": "Bearer bench"}
        w = d.conn()

        def post(path, obj, extra=None, raw=None):
            h = dict(auth, **(extra or {}))
            w.request("POST", path, raw if raw is not None else json.dumps(obj).encode(), h)
            r = w.getresponse()
            data = r.read()
            assert r.status == 200, (r.status, data[:300])
            return json.loads(data)

        wid = post("/v1/worker/register", {"name": "bench", "models": [{"id": "smollm"}]})["worker_id"]
        t0 = time.monotonic()
        done = 0
        while done < n:
            lz = post("/v1/worker/lease", {"worker_id": wid, "model": "smollm", "max_requests": 256})
            if not lz["requests"]:
                continue
            out = []
            for q in lz["requests"]:
                out.append(json.dumps({"request_id": q["request_id"], "status": "success", "response": {
                    "status_code": 200, "body": {
                        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "smollm",
                        "choices": [{"index": 0, "message": {"role": "assistant",
                                                             "content": "Please check the tracking link."},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}},
                    "usage": {"prompt_tokens": 40, "completion_tokens": 8}}))
            data = ("\n".join(out) + "\n").encode()
            h = {"X-Worker-Id": wid, "X-Lease-Id": lz["lease_id"], "Content-Type": "application/x-ndjson"}
            if ZC:
                data = ZC.compress(data)
                h["Content-Encoding"] = "zstd"
            post("/v1/worker/results", None, h, data)
            done += len(lz["requests"])
        t_commit = time.monotonic() - t0
        while True:
            c.request("GET", "/v1/batches/" + b["id"])
            b = json.loads(c.getresponse().read())
            if b["status"] == "completed":
                break
            time.sleep(0.005)
        t_all = time.monotonic() - t0
        assert b["request_counts"]["completed"] == n, b
        print(f"lease-http: {n} requests, packs of 256, results {'zstd' if ZC else 'identity'}: "
              f"lease+commit {n / t_commit:.0f} requests/s, end to end (to completed) {n / t_all:.0f} requests/s")
    finally:
        d.p.terminate()
        d.p.wait()
    lib = subprocess.run([os.path.join(ROOT, "build", "bench", "bench_lease"), str(n)], capture_output=True,
                         text=True).stdout
    print(lib.strip())
    m = re.search(r"end to end \(lease -> results -> finalize\): (\d+)", lib)
    if m:
        print(f"lease-http: HTTP / library end to end = {n / t_all / int(m.group(1)):.2f}")


if __name__ == "__main__":
    main()
