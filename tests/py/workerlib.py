"""tests/py/workerlib.py - a scripted test worker speaking the worker protocol
(spec/worker-protocol.md) to a real jobd over loopback, and helpers to read a
finished batch's output and error files through the API.

TestWorker.register/lease/heartbeat/results/release are the raw calls (they
return jobdlib.Resp); answer() builds one results line; run_until() is an
"instant" worker loop: lease, answer every request through a policy
function, upload the results as one zstd JSONL chunk.
"""
import http.client
import json
import time

from jobdlib import zstd_compress, zstd_decompress


def chat_completion(req, content=None):
    """An OpenAI chat.completion body answering a leased request."""
    body = req["body"]
    return {"id": "chatcmpl-" + req["request_id"][4:], "object": "chat.completion", "created": 1700000000,
            "model": body.get("model", "?"),
            "choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": content or f"answer to {req['custom_id']}"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def success(req):
    return {"request_id": req["request_id"], "status": "success",
            "response": {"status_code": 200, "body": chat_completion(req)},
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0},
            "timings": {"queue_ms": 1, "prefill_ms": 1, "decode_ms": 1, "device_ms": 1}}


def transient(req, msg="device error"):
    return {"request_id": req["request_id"], "status": "error",
            "error": {"class": "transient", "code": "device_error", "message": msg}}


def invalid(req, msg="prompt too long"):
    return {"request_id": req["request_id"], "status": "error",
            "error": {"class": "invalid_request", "status_code": 400, "code": "context_length_exceeded",
                      "param": "messages", "message": msg}}


class Resp:
    def __init__(self, status, body):
        self.status = status
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class TestWorker:
    def __init__(self, port, token=None, model="smollm", aliases=(), name="test-worker"):
        self.port = port
        self.token = token
        self.model = model
        self.aliases = list(aliases)
        self.name = name
        self.worker_id = None
        self.conn = None

    def _call(self, method, path, body=None, headers=None, timeout=30):
        h = dict(headers or {})
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                return Resp(r.status, r.read())
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def post(self, path, obj):
        return self._call("POST", path, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def register(self, expect=200):
        r = self.post("/v1/worker/register", {"name": self.name, "device": "cpu",
                                              "models": [{"id": self.model, "aliases": self.aliases}]})
        assert r.status == expect, r
        if r.status == 200:
            self.worker_id = r.json()["worker_id"]
        return r

    def lease(self, max_requests=64, lease_seconds=120, wait_ms=0, expect=200):
        r = self.post("/v1/worker/lease", {"worker_id": self.worker_id, "model": self.model,
                                           "max_requests": max_requests, "lease_seconds": lease_seconds,
                                           "wait_ms": wait_ms})
        assert expect is None or r.status == expect, r
        return r

    def heartbeat(self, lease_id, extend=120, tokens_per_s=None, expect=200):
        m = {"worker_id": self.worker_id, "lease_id": lease_id, "extend_seconds": extend}
        if tokens_per_s is not None:
            m["progress"] = {"completed": 0, "tokens_per_s": tokens_per_s}
        r = self.post("/v1/worker/heartbeat", m)
        assert expect is None or r.status == expect, r
        return r

    def results(self, lease_id, lines, compress=True, expect=200):
        data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
        h = {"Content-Type": "application/x-ndjson", "X-Worker-Id": self.worker_id, "X-Lease-Id": lease_id}
        if compress:
            data = zstd_compress(data)
            h["Content-Encoding"] = "zstd"
        r = self._call("POST", "/v1/worker/results", data, h)
        assert expect is None or r.status == expect, r
        return r

    def release(self, lease_id, ids=None, expect=200):
        m = {"worker_id": self.worker_id, "lease_id": lease_id}
        if ids is not None:
            m["request_ids"] = ids
        r = self.post("/v1/worker/release", m)
        assert expect is None or r.status == expect, r
        return r

    def run_until(self, done, policy=success, max_requests=256, timeout=120, wait_ms=200):
        """Lease and answer until done() is true. Returns requests answered."""
        deadline = time.monotonic() + timeout
        n = 0
        while not done():
            assert time.monotonic() < deadline, "worker loop timed out"
            r = self.lease(max_requests=max_requests, wait_ms=wait_ms).json()
            if not r["requests"]:
                continue
            lines = [x for x in (policy(q) for q in r["requests"]) if x is not None]
            if lines:
                self.results(r["lease_id"], lines, expect=None)
            n += len(lines)
        return n


def read_jsonl(d, file_id, raw_zstd=False, key="default"):
    """Download a file through GET /v1/files/{id}/content; list of parsed lines."""
    if not file_id:
        return []
    h = {"Accept-Encoding": "zstd"} if raw_zstd else {}
    r = d.call("GET", f"/v1/files/{file_id}/content", headers=h, key=key)
    assert r.status == 200, r
    body = r.body
    if raw_zstd:
        assert r.headers.get("content-encoding") == "zstd", r.headers
        body = zstd_decompress(body)
    return [json.loads(x) for x in body.decode().splitlines() if x.strip()]


def wait_status(d, batch_id, statuses, timeout=60, key="default"):
    return d.wait_batch(batch_id, statuses=statuses, timeout=timeout, key=key)


def chaos_loop(port, token, max_requests=40, pause_s=0.03, lease_seconds=2):
    """A worker that survives jobd restarts on the same port: register,
    then lease -> answer -> upload forever, retrying on connection errors.
    Run as a subprocess (python workerlib.py PORT TOKEN) so a test can kill -9 it."""
    w = TestWorker(port, token or None)
    while True:
        try:
            if not w.worker_id:
                w.register()
            r = w.lease(max_requests=max_requests, lease_seconds=lease_seconds, wait_ms=300, expect=None)
            if r.status == 404:
                w.worker_id = None
                continue
            if r.status != 200:
                time.sleep(0.05)
                continue
            reqs = r.json()["requests"]
            if reqs:
                time.sleep(pause_s)
                w.results(r.json()["lease_id"], [success(q) for q in reqs], expect=None)
        except (OSError, http.client.HTTPException, AssertionError, ValueError):
            if w.conn:
                w.conn.close()
            w.conn = None
            time.sleep(0.05)


if __name__ == "__main__":
    import sys
    chaos_loop(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
