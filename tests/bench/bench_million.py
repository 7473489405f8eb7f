#!/usr/bin/env python3
"""tests/bench/bench_million.py - a 1,000,000-request batch end to end through
the release jobd, and the same at 100,000 to show that jobd's
memory does not grow with the batch size.

Per size N: a fresh jobd (--max-requests N); the OpenAI flow: POST /v1/files
(multipart, the JSONL of N small chat requests ~330 bytes each), POST
/v1/batches; an instant test worker over HTTP (one keep-alive connection,
packs of 1024, each answered with a ~300-byte chat.completion, uploaded as
one zstd JSONL chunk) until every request is committed; then the sweeper
writes the output file. Printed per stage, wall seconds:

  upload     POST /v1/files answered (body received, compressed, stored)
  validate   batch created -> in_progress (every line validated and inserted)
  lease+commit  first lease -> last results chunk acknowledged
  finalize   last results acknowledged -> status completed (output file written)

and jobd's memory high-water mark (VmHWM from /proc/PID/status, read just
before it is stopped) and the database size. The output file is downloaded
and its line count checked.

usage: bench_million.py [N ...]   (default 100000 1000000)
"""
import http.client
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_jobd import Daemon, line  # noqa: E402

try:
    import zstandard
    ZC = zstandard.ZstdCompressor(level=1)
    ZD = zstandard.ZstdDecompressor()
except ImportError:
    ZC = ZD = None

RESULT = ('{"request_id":"%s","status":"success","response":{"status_code":200,"body":{"id":"chatcmpl-1",'
          '"object":"chat.completion","created":1700000000,"model":"smollm","choices":[{"index":0,"message":'
          '{"role":"assistant","content":"Please check the tracking link."},"finish_reason":"stop"}],'
          '"usage":{"prompt_tokens":40,"completion_tokens":8,"total_tokens":48}}},'
          '"usage":{"prompt_tokens":40,"completion_tokens":8}}')


def vm(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith(field + ":"):
                return int(ln.split()[1]) // 1024  # MiB
    return -1


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM"


def one(n, tmp):
    d = Daemon(tmp, ["--worker-token", "bench", "--sweep-interval", "200ms", "--max-requests", str(n),
                     "--max-upload", "2G", "--max-file", "2G"])
    try:
        c = d.conn()
        data = "".join(line(i) for i in range(1, n + 1)).encode()
        b = "----bench" + uuid.uuid4().hex
        body = (f"--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
                f"Content-Type: application/jsonl\r\n\r\n").encode() + data + f"\r\n--{b}--\r\n".encode()
        t0 = time.monotonic()
        c.request("POST", "/v1/files", body, {"Content-Type": f"multipart/form-data; boundary={b}"})
        r = c.getresponse()
        f = json.loads(r.read())
        assert r.status == 200, f
        t_upload = time.monotonic() - t0
        del body, data
        t0 = time.monotonic()
        c.request("POST", "/v1/batches", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                    "completion_window": "24h"}).encode(),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        bt = json.loads(r.read())
        assert r.status == 200, bt
        while True:
            c.request("GET", "/v1/batches/" + bt["id"])
            bt = json.loads(c.getresponse().read())
            if bt["status"] != "validating":
                break
            time.sleep(0.05)
        assert bt["status"] == "in_progress" and bt["request_counts"]["total"] == n, bt
        t_validate = time.monotonic() - t0
        hwm_ingest = vm(d.p.pid, "VmHWM")

        w = d.conn()
        auth = {"Authorization": "Bearer bench"}

        def post(path, raw, extra=None):
            w.request("POST", path, raw, dict(auth, **(extra or {})))
            r = w.getresponse()
            out = r.read()
            assert r.status == 200, (r.status, out[:300])
            return json.loads(out)

        wid = post("/v1/worker/register", json.dumps({"name": "bench", "models": [{"id": "smollm"}]}).encode(),
                   {"Content-Type": "application/json"})["worker_id"]
        ask = json.dumps({"worker_id": wid, "model": "smollm", "max_requests": 1024, "lease_seconds": 600}).encode()
        t0 = time.monotonic()
        done = 0
        while done < n:
            lz = post("/v1/worker/lease", ask, {"Content-Type": "application/json"})
            if not lz["requests"]:
                continue
            chunk = ("\n".join(RESULT % q["request_id"] for q in lz["requests"]) + "\n").encode()
            h = {"X-Worker-Id": wid, "X-Lease-Id": lz["lease_id"], "Content-Type": "application/x-ndjson"}
            if ZC:
                chunk = ZC.compress(chunk)
                h["Content-Encoding"] = "zstd"
            post("/v1/worker/results", chunk, h)
            done += len(lz["requests"])
        t_commit = time.monotonic() - t0
        t0 = time.monotonic()
        c.close()
        c = d.conn()  # the first one sat idle past jobd's idle timeout
        while True:
            c.request("GET", "/v1/batches/" + bt["id"])
            bt = json.loads(c.getresponse().read())
            if bt["status"] in ("completed", "failed", "expired", "cancelled"):
                break
            time.sleep(0.02)
        t_final = time.monotonic() - t0
        assert bt["status"] == "completed" and bt["request_counts"]["completed"] == n, bt
        hwm = vm(d.p.pid, "VmHWM")
        c.request("GET", f"/v1/files/{bt['output_file_id']}/content")
        r = c.getresponse()
        out = r.read()
        assert r.status == 200
        if r.getheader("Content-Encoding") == "zstd" and ZD:
            out = ZD.decompressobj().decompress(out)
        lines = out.count(b"\n")
        assert lines == n, (lines, n)
        db_mb = sum(os.path.getsize(os.path.join(d.data, x)) for x in os.listdir(d.data)
                    if x.startswith("jobd.db")) / 2**20
        print(f"million: N={n}: upload {t_upload:.1f} s ({len(line(1)) * n / 2**20 / t_upload:.0f} MiB/s), "
              f"validate {t_validate:.1f} s ({n / t_validate:.0f} lines/s), "
              f"lease+commit {t_commit:.1f} s ({n / t_commit:.0f} requests/s), finalize {t_final:.1f} s; "
              f"jobd VmHWM {hwm_ingest} MiB after ingest, {hwm} MiB at the end; database {db_mb:.0f} MiB; "
              f"output file {lines} lines", flush=True)
        return hwm
    finally:
        d.p.terminate()
        d.p.wait()


def main():
    sizes = [int(x) for x in sys.argv[1:]] or [100000, 1000000]
    print(f"million: machine: {machine()}; results {'zstd' if ZC else 'identity'}")
    hwms = {}
    for n in sizes:
        tmp = tempfile.mkdtemp(prefix="bench-million-")
        try:
            hwms[n] = one(n, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if len(hwms) > 1:
        lo, hi = min(hwms), max(hwms)
        print(f"million: VmHWM N={hi} / N={lo} = {hwms[hi] / max(hwms[lo], 1):.2f} "
              f"(batch {hi / lo:.0f}x larger)")


if __name__ == "__main__":
    main()
