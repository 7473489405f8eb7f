"""tests/py/jobdlib.py - drive a real jobd over loopback from Python suites.

Jobd(...) starts the binary (the sanitised build/asan/jobd by default) on a
free port with a private data directory and waits for /healthz; .call()
makes one HTTP request with http.client (no content decoding, so the bytes
asserted are the bytes sent), .json() decodes a JSON answer. Helpers build
multipart uploads and JSONL inputs. Everything started is killed at the end
of the test by harness.cleanup().
"""
import http.client
import json
import os
import signal
import subprocess
import time
import uuid

from harness import Proc, binary, free_port, run, tmpdir


def create_key(data, tenant, asan=True):
    """jobd keys create on a data directory (the daemon need not run)."""
    r = run([binary("jobd", asan), "keys", "create", "--tenant", tenant, "--data", data])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def chat_line(i, model="smollm", content=None, custom_id=None):
    return json.dumps({
        "custom_id": custom_id or f"t-{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": content or f"Question {i}?"}],
                 "max_tokens": 16}}, separators=(",", ":"))


def jsonl(n, **kw):
    return ("\n".join(chat_line(i + 1, **kw) for i in range(n)) + "\n").encode()


def multipart(fields, files):
    """fields: {name: str}; files: {name: (filename, bytes)} -> (content_type, body)."""
    b = "----jobdtest" + uuid.uuid4().hex
    out = []
    for k, v in fields.items():
        out.append(f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode())
    for k, (fn, data) in files.items():
        out.append(f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{fn}\"\r\n"
                   f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    out.append(f"--{b}--\r\n".encode())
    return f"multipart/form-data; boundary={b}", b"".join(out)


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class Jobd:
    def __init__(self, data=None, args=(), asan=True, key=None, wait=True):
        self.data = data or os.path.join(tmpdir(), "data")
        self.port = free_port()
        self.key = key
        self.bin = binary("jobd", asan)
        self.argv = [self.bin, "--listen", f"127.0.0.1:{self.port}", "--data", self.data, *args]
        self.proc = Proc(self.argv)
        if wait:
            self.proc.wait_http(self.port, timeout=30)

    # -- admin
    def create_key(self, tenant):
        r = run([self.bin, "keys", "create", "--tenant", tenant, "--data", self.data])
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def restart(self, sig=signal.SIGTERM, args=None):
        self.proc.stop(sig)
        self.port = free_port()
        if args is not None:
            self.argv = [self.bin, "--listen", f"127.0.0.1:{self.port}", "--data", self.data, *args]
        else:
            self.argv[2] = f"127.0.0.1:{self.port}"
        self.proc = Proc(self.argv)
        self.proc.wait_http(self.port, timeout=30)

    # -- HTTP
    def call(self, method, path, body=None, headers=None, key="default", timeout=60):
        h = dict(headers or {})
        k = self.key if key == "default" else key
        if k:
            h["Authorization"] = f"Bearer {k}"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return Resp(r.status, r.getheaders(), r.read())
        finally:
            c.close()

    def json(self, method, path, obj=None, headers=None, key="default", expect=200):
        h = dict(headers or {})
        body = None
        if obj is not None:
            body = json.dumps(obj).encode()
            h["Content-Type"] = "application/json"
        r = self.call(method, path, body, h, key)
        assert r.status == expect, (method, path, r)
        return r.json() if r.body else None

    def upload(self, data, filename="input.jsonl", purpose="batch", key="default", headers=None, expect=200):
        ct, body = multipart({"purpose": purpose}, {"file": (filename, data)})
        h = {"Content-Type": ct, **(headers or {})}
        r = self.call("POST", "/v1/files", body, h, key)
        assert r.status == expect, r
        return r.json()

    def create_batch(self, file_id, endpoint="/v1/chat/completions", key="default", **kw):
        return self.json("POST", "/v1/batches", {"input_file_id": file_id, "endpoint": endpoint, **kw},
                         key=key)

    def submit(self, data, query="", headers=None, key="default", expect=200):
        r = self.call("POST", "/v1/jobs" + query, data, headers, key)
        assert r.status == expect, r
        return r.json()

    def wait_batch(self, batch_id, statuses=("in_progress", "failed", "cancelled"), timeout=60, key="default"):
        deadline = time.monotonic() + timeout
        while True:
            b = self.json("GET", f"/v1/batches/{batch_id}", key=key)
            if b["status"] in statuses:
                return b
            if time.monotonic() > deadline:
                raise AssertionError(f"batch {batch_id} still {b['status']} after {timeout} s")
            time.sleep(0.02)


def zstd_decompress(data):
    try:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except ImportError:
        return subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout


def zstd_compress(data):
    try:
        import zstandard
        return zstandard.ZstdCompressor(level=3).compress(data)
    except ImportError:
        return subprocess.run(["zstd", "-c"], input=data, capture_output=True, check=True).stdout
