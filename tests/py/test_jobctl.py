"""jobctl against a real jobd (started per test on loopback, with an API key).

Batches are finished by workerlib's scripted worker speaking the worker
protocol to the same jobd (started with a worker and an admin token), so
wait's outcome codes, results/errors downloads, retry-dead over the dead
letter routes, per-batch webhooks (a real receiver checks the signed
delivery), models and workers are exercised against the real daemon. The
one route jobd does not serve yet (GET /v1/usage) must end in exit 23
naming it.
"""
import hashlib
import json
import os
import re
import socket
import subprocess
import threading
import time

from harness import ROOT, Skip, binary, free_port, run, tmpdir
from jobdlib import Jobd, chat_line, create_key, jsonl, zstd_decompress
from test_webhooks import Receiver, hmac_verify
from workerlib import TestWorker, invalid, success, transient

ID_RE = re.compile(r"^batch_[0-9a-z]+\n$")
COMMANDS = ["submit", "status", "wait", "list", "results", "errors", "cancel", "rerun", "retry-dead",
            "usage", "workers", "models", "files"]


WT, AT = "ctl-worker-token", "ctl-admin-token"
WORKER_ARGS = ["--worker-token", WT, "--admin-token", AT, "--sweep-interval", "100ms",
               "--lease-min", "1s", "--retry-backoff", "1s"]


def start(tenant="alpha", args=()):
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, tenant)
    d = Jobd(data=data, key=key, args=list(args))
    return d, {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key,
               "JOBCTL_CONFIG": "", "HOME": tmpdir()}


def jobctl(args, env, asan=True, timeout=120, input=None):
    return run([binary("jobctl", asan), *args], env=env, timeout=timeout, input=input)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def metric(d, needle):
    text = d.call("GET", "/metrics", key=None).body.decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("jobd_http_requests_total{") and needle in line:
            total += int(line.rsplit(" ", 1)[1])
    return total


def route_missing(d, method, path):
    """True when jobd answers 404 for the route itself (not for an id)."""
    r = d.call(method, path)
    return r.status == 404 and (r.json()["error"]["code"] is None)


# ---- command line -------------------------------------------------------------------------

def test_help_of_every_command_has_an_example():
    for c in COMMANDS:
        r = run([binary("jobctl"), c, "--help"])
        assert r.returncode == 0, (c, r.stderr)
        assert "usage: jobctl " + c in r.stdout, (c, r.stdout)
        assert "example" in r.stdout, (c, r.stdout)
        assert "--api-key" in r.stdout, c
        r2 = run([binary("jobctl"), "help", c])
        assert r2.returncode == 0 and r2.stdout == r.stdout, c
    r = run([binary("jobctl"), "--help"])
    assert r.returncode == 0
    for code in ("10", "11", "12", "13", "20", "21", "22", "23"):
        assert re.search(rf"^\s+{code}\s+\w", r.stdout, re.M), code


def test_usage_errors_exit_2():
    env = {"JOBD_URL": "http://127.0.0.1:9", "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    f = write(os.path.join(tmpdir(), "a.jsonl"), jsonl(1))
    cases = [
        ["nosuch"],
        ["status"],                                   # missing id
        ["status", "a/../b"],                         # not an id
        ["status", "batch_x", "extra"],
        ["list", "--limit", "many"],
        ["list", "--page-size", "0"],
        ["submit", f, "--window", "10s"],
        ["submit", f, "--priority", "5000"],
        ["submit", f, "--metadata", "novalue"],
        ["submit", f, "--endpoint", "/v1/moderations"],
        ["retry-dead"],
        ["retry-dead", "req_x", "--batch", "batch_x"],
        ["retry-dead", "--batch", "batch_x", "--page-size", "0"],
        ["submit", f, "--webhook", "ftp://example.com/hook"],
        ["submit", f, "--webhook", "https://example.com/a b"],
        ["submit", f, "--metadata", "webhook_url=https://example.com/hook"],
        ["submit", f, "--priority", "1", "--webhook", "https://example.com/hook",
         *[x for i in range(15) for x in ("--metadata", f"k{i}=v")]],     # 17 pairs
        ["files", "frobnicate", "file-x"],
        ["files", "get"],
        ["wait", "batch_x", "--interval", "soon"],
        ["--url", "ftp://x", "status", "batch_x"],
        ["rerun", "batch_x", "--only", "some"],
        ["rerun"],
        ["results", "batch_x", "--follow", "--partial"],
        ["results", "batch_x", "--after", "rc1"],
        ["results", "batch_x", "--follow", "--raw"],
    ]
    for args in cases:
        r = jobctl(args, env)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert r.stdout == "", (args, r.stdout)
        first = r.stderr.splitlines()[0]
        assert first.startswith("jobctl"), (args, r.stderr)
        assert "hint:" in r.stderr, (args, r.stderr)


def test_config_file_and_precedence():
    d, env = start()
    cfg = write(os.path.join(tmpdir(), "config"),
                f"# jobctl config\nurl = http://127.0.0.1:{d.port}\napi_key = \"{d.key}\"\n".encode())
    base = {"JOBCTL_CONFIG": cfg, "HOME": tmpdir()}
    assert jobctl(["list"], base).returncode == 0
    # the environment wins over the file, the flag over the environment
    dead = f"http://127.0.0.1:{free_port()}"
    assert jobctl(["list"], {**base, "JOBD_URL": dead}).returncode == 20
    assert jobctl(["list", "--url", f"http://127.0.0.1:{d.port}"], {**base, "JOBD_URL": dead}).returncode == 0
    assert jobctl(["list"], {**base, "JOBD_API_KEY": "sk-wrong"}).returncode == 21
    # ~/.config/jobctl/config is the default location
    home = tmpdir()
    os.makedirs(os.path.join(home, ".config", "jobctl"))
    write(os.path.join(home, ".config", "jobctl", "config"), open(cfg, "rb").read())
    assert jobctl(["list"], {"HOME": home, "JOBCTL_CONFIG": ""}).returncode == 0
    # a broken file is a usage error naming file and line
    bad = write(os.path.join(tmpdir(), "bad"), b"url = http://x\ncolour = blue\n")
    r = jobctl(["list"], {"JOBCTL_CONFIG": bad})
    assert r.returncode == 2 and f"{bad}:2: unknown key 'colour'" in r.stderr, r.stderr


# ---- submit -------------------------------------------------------------------------------

def test_submit_prints_only_the_id_and_twice_is_one_batch():
    d, env = start()
    f = write(os.path.join(tmpdir(), "nightly.jsonl"), jsonl(3))
    r1 = jobctl(["submit", f, "--metadata", "owner=cron", "--priority", "7"], env)
    assert r1.returncode == 0, r1.stderr
    assert ID_RE.match(r1.stdout), repr(r1.stdout)
    bid = r1.stdout.strip()
    r2 = jobctl(["submit", f, "--metadata", "owner=cron", "--priority", "7"], env)
    assert r2.returncode == 0 and r2.stdout == r1.stdout, (r1.stdout, r2.stdout, r2.stderr)
    assert "already submitted" in r2.stderr
    listed = d.json("GET", "/v1/batches?limit=100")["data"]
    assert [b["id"] for b in listed] == [bid], listed
    b = d.json("GET", f"/v1/batches/{bid}")
    assert b["metadata"] == {"owner": "cron", "priority": "7"}, b["metadata"]
    # other options or other content: another batch
    r3 = jobctl(["submit", f, "--metadata", "owner=cron"], env)
    assert r3.returncode == 0 and r3.stdout != r1.stdout
    f2 = write(os.path.join(tmpdir(), "nightly.jsonl2"), jsonl(4))
    r4 = jobctl(["submit", f2, "--filename", "nightly.jsonl", "--metadata", "owner=cron", "--priority", "7"], env)
    assert r4.returncode == 0 and r4.stdout not in (r1.stdout, r3.stdout)
    # an explicit key is used as given
    r5 = jobctl(["submit", f, "--idempotency-key", "run-2026-11-30"], env)
    r6 = jobctl(["submit", f2, "--idempotency-key", "run-2026-11-30"], env)
    assert r5.returncode == 0, r5.stderr
    assert r6.returncode == 1 and "422" in r6.stderr, r6.stderr  # same key, other request
    assert len(d.json("GET", "/v1/batches?limit=100")["data"]) == 4


def test_submit_stdin_status_and_files():
    d, env = start()
    data = jsonl(5)
    r = jobctl(["submit", "-", "--window", "2h"], env, input=data.decode())
    assert r.returncode == 0 and ID_RE.match(r.stdout), r.stderr
    bid = r.stdout.strip()
    b = d.wait_batch(bid)
    assert b["status"] == "in_progress" and b["completion_window"] == "2h", b
    # the stored input is byte-identical to what went into stdin
    fid = b["input_file_id"]
    out = os.path.join(tmpdir(), "input.jsonl")
    r = jobctl(["files", "content", fid, "-o", out], env)
    assert r.returncode == 0, r.stderr
    assert open(out, "rb").read() == data
    r = subprocess.run([binary("jobctl"), "files", "content", fid, "--raw"], env={**os.environ, **env},
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout[:4] == b"\x28\xb5\x2f\xfd", r.stdout[:8]          # a zstd frame
    assert zstd_decompress(r.stdout) == data
    # status: human and --json
    r = jobctl(["status", bid, "--json"], env)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["id"] == bid and obj["request_counts"]["total"] == 5, obj
    r = jobctl(["status", bid], env)
    assert r.returncode == 0
    assert r.stdout.startswith(f"{bid}  in_progress\n"), r.stdout
    assert "progress   0/5 (0.0%)" in r.stdout, r.stdout
    # files list / get / delete
    r = jobctl(["files", "list"], env)
    assert r.returncode == 0 and fid in r.stdout and "stdin.jsonl" in r.stdout, r.stdout
    r = jobctl(["files", "get", fid], env)
    assert r.returncode == 0 and json.loads(r.stdout)["bytes"] == len(data)
    # results of a running batch: a clear error, nothing on stdout
    r = jobctl(["results", bid], env)
    assert r.returncode == 1 and r.stdout == "" and "is in_progress" in r.stderr, r.stderr
    assert jobctl(["files", "delete", fid], env).returncode == 0
    r = jobctl(["files", "get", fid], env)
    assert r.returncode == 22 and "not found" in r.stderr, r.stderr


class Recorder:
    """A loopback TCP relay to jobd that keeps the first bytes each client sends."""

    def __init__(self, port):
        self.port = port
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.heads = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.srv.getsockname()[1]}"

    def _accept(self):
        while True:
            c, _ = self.srv.accept()
            up = socket.create_connection(("127.0.0.1", self.port))
            rec = bytearray()
            self.heads.append(rec)
            threading.Thread(target=self._pump, args=(c, up, rec), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, c, None), daemon=True).start()

    @staticmethod
    def _pump(a, b, rec):
        try:
            while True:
                x = a.recv(65536)
                if not x:
                    break
                if rec is not None and len(rec) < 8192:
                    rec += x[:8192 - len(rec)]
                b.sendall(x)
        except OSError:
            pass
        finally:
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def release_jobctl():
    """The optimised jobctl (make builds it next to build/asan/)."""
    d = os.environ.get("TH_BIN_DIR") or "build/asan"
    d = os.path.dirname(d.rstrip("/")) if os.path.basename(d.rstrip("/")) == "asan" else "build"
    p = os.path.join(ROOT, d, "jobctl")
    if not os.path.exists(p):
        raise Skip(f"{p} is not built (make builds it)")
    return p


def peak_rss_kib(argv, env):
    """Run argv, polling /proc for its peak resident set (VmHWM), in KiB."""
    p = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    out, err = p.communicate()
    return p.returncode, out.decode(), err.decode(), peak


def test_big_file_streams_compressed_and_cancel_while_validating():
    d, env = start()
    pad = "x" * 900
    path = os.path.join(tmpdir(), "big.jsonl")
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(52000):
            line = (chat_line(i, content=f"{i} {pad}") + "\n").encode()
            h.update(line)
            f.write(line)
    size = os.path.getsize(path)
    assert size > 50_000_000
    rec = Recorder(d.port)
    # the release build, so the peak is jobctl's own and not ASan's shadow memory
    rc, out, err, peak = peak_rss_kib([release_jobctl(), "submit", path],
                                      {**env, "JOBD_URL": rec.url})
    assert rc == 0 and ID_RE.match(out), (rc, out, err)
    assert 0 < peak < 32 * 1024, f"jobctl peak RSS {peak} KiB for a {size >> 20} MiB file"
    head = bytes(rec.heads[0]).split(b"\r\n\r\n", 1)[0].decode().lower()
    assert head.startswith("post /v1/jobs?"), head
    assert "content-encoding: zstd" in head and "transfer-encoding: chunked" in head, head
    assert "content-length" not in head and "idempotency-key: jobctl-" in head, head
    # the 50 MB are still being validated: cancel now, and wait reports it
    bid = out.strip()
    r = jobctl(["cancel", bid], env)
    assert r.returncode == 0 and r.stdout.split()[0] == bid, r.stderr
    # Race fix: this skipped when validation won the race against the cancel.
    # Both interleavings end cancelled now (an in_progress batch goes through
    # cancelling, and the sweeper finalizes it), so check the same outcome in both.
    r = jobctl(["wait", bid, "--interval", "100ms", "--timeout", "100s"], env, timeout=120)
    assert r.returncode == 13, (r.returncode, r.stderr)
    assert f"{bid} cancelled" in r.stderr, r.stderr
    # what was uploaded is what jobd stored
    b = d.json("GET", f"/v1/batches/{bid}")
    got = hashlib.sha256(d.call("GET", f"/v1/files/{b['input_file_id']}/content").body).hexdigest()
    assert got == h.hexdigest()


# ---- outcomes -----------------------------------------------------------------------------

def test_wait_exit_code_for_a_failed_batch():
    d, env = start()
    bad = write(os.path.join(tmpdir(), "bad.jsonl"), jsonl(2) + b"{not json\n")
    r = jobctl(["submit", bad, "--wait", "--interval", "100ms"], env)
    assert r.returncode == 11, (r.returncode, r.stderr)
    assert ID_RE.match(r.stdout), repr(r.stdout)          # still only the id on stdout
    bid = r.stdout.strip()
    assert f"{bid} failed" in r.stderr
    # non-terminal output: one plain line per poll, no terminal escapes
    assert "\r" not in r.stderr and "\033" not in r.stderr
    r = jobctl(["wait", bid], env)
    assert r.returncode == 11
    r = jobctl(["wait", bid, "--json"], env)
    assert r.returncode == 11 and json.loads(r.stdout)["status"] == "failed"
    # errors: the validation errors as JSONL
    r = jobctl(["errors", bid], env)
    assert r.returncode == 0, r.stderr
    errs = [json.loads(l) for l in r.stdout.splitlines()]
    assert errs and errs[0]["line"] == 3 and errs[0]["code"], errs
    r = jobctl(["status", bid], env)
    assert "error      line 3:" in r.stdout, r.stdout


def test_wait_timeout_exit_code():
    d, env = start()
    f = write(os.path.join(tmpdir(), "a.jsonl"), jsonl(2))
    bid = jobctl(["submit", f], env).stdout.strip()
    d.wait_batch(bid)
    t0 = time.monotonic()
    r = jobctl(["wait", bid, "--interval", "100ms", "--timeout", "1500ms"], env)
    assert r.returncode == 14, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 30
    lines = [l for l in r.stderr.splitlines() if bid in l and "in_progress" in l]
    assert len(lines) >= 1, r.stderr
    # polls after the first use the ETag: jobd answered 304
    assert metric(d, 'route="/v1/batches/{id}",status="304"') >= 1


# ---- wait: jobd's long poll, the fallback without it, the rate of an ended batch ---------------

def get_batch(d, bid, headers=None, timeout=60):
    t0 = time.monotonic()
    r = d.call("GET", f"/v1/batches/{bid}", headers=headers, timeout=timeout)
    return r, time.monotonic() - t0


def test_get_batch_long_polls_until_it_changes():
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    bid = jobctl(["submit", write(os.path.join(tmpdir(), "four.jsonl"), jsonl(4))], env).stdout.strip()
    d.wait_batch(bid)
    r, _ = get_batch(d, bid)
    assert r.status == 200 and "preference-applied" not in r.headers, r.headers
    etag = r.headers["etag"]
    # no Prefer: the 304 comes at once, unmarked, with the Retry-After hint
    r, _ = get_batch(d, bid, {"If-None-Match": etag})
    assert r.status == 304 and "preference-applied" not in r.headers and r.headers["retry-after"] == "5"
    # Prefer without If-None-Match: nothing to compare, answered at once and unmarked
    r, _ = get_batch(d, bid, {"Prefer": "wait=5"})
    assert r.status == 200 and "preference-applied" not in r.headers, r.headers
    # nothing changes: held the whole wait (a lower bound), then a marked 304
    r, took = get_batch(d, bid, {"If-None-Match": etag, "Prefer": "respond-async, wait=1"})
    assert r.status == 304 and r.headers["preference-applied"] == "wait=1" and took >= 1.0, (r, took)
    # more than jobd holds: capped at 30 s (nothing waited here: the ETag differs, a 200 at once)
    r, _ = get_batch(d, bid, {"If-None-Match": '"other"', "Prefer": "wait=600"})
    assert r.status == 200 and r.headers["preference-applied"] == "wait=30", r.headers
    # a change during the hold answers it with the new batch, long before the wait ends
    got = {}
    t = threading.Thread(target=lambda: got.update(r=get_batch(d, bid, {"If-None-Match": etag,
                                                                        "Prefer": "wait=25"})))
    t.start()
    time.sleep(0.5)                          # let the GET park first (a late one only proves less)
    lease = w.lease(max_requests=2, lease_seconds=60, wait_ms=2000).json()
    w.results(lease["lease_id"], [success(q) for q in lease["requests"]])
    t.join(60)
    r, took = got["r"]
    assert r.status == 200 and r.headers["preference-applied"] == "wait=25", r
    assert r.json()["request_counts"]["completed"] == 2 and r.headers["etag"] != etag, r.json()
    assert took < 20, took


def test_wait_reports_a_short_batch_as_soon_as_it_is_done():
    """With a 60 s --interval a poller would see the end only at --timeout
    (50 s); the long poll reports it once the last result is in."""
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    bid = jobctl(["submit", write(os.path.join(tmpdir(), "three.jsonl"), jsonl(3))], env).stdout.strip()
    d.wait_batch(bid)
    rec = Recorder(d.port)
    p = subprocess.Popen([binary("jobctl"), "wait", bid, "--interval", "60s", "--timeout", "50s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env,
                                                                                "JOBD_URL": rec.url})
    got = []
    reader = threading.Thread(target=lambda: got.extend(iter(p.stderr.readline, b"")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any(bid.encode() in l for l in got):   # its first display: the batch in progress
        assert p.poll() is None and time.monotonic() < deadline, got
        time.sleep(0.02)
    lease = w.lease(max_requests=3, lease_seconds=60, wait_ms=2000).json()
    w.results(lease["lease_id"], [success(q) for q in lease["requests"]])
    t0 = time.monotonic()
    p.wait(timeout=60)
    took = time.monotonic() - t0
    reader.join(30)
    err = b"".join(got).decode()
    assert p.returncode == 0, (p.returncode, err)
    assert took < 20, (took, err)            # not at the 50 s --timeout
    assert err.rstrip().endswith(f"{bid} completed: 3 requests, 3 completed, 0 failed"), err
    # the request pattern: a plain GET, then conditional long polls
    sent = b"".join(rec.heads).decode("latin-1")
    polls = [x for x in sent.split("\r\n\r\n") if x.lstrip().startswith(f"GET /v1/batches/{bid} ")]
    assert len(polls) >= 2 and "Prefer:" not in polls[0], polls
    assert all("If-None-Match: " in x and re.search(r"\r\nPrefer: wait=2[0-5]\r\n", x + "\r\n")
               for x in polls[1:]), polls


class FakeJobd:
    """A stand-in for jobd's GET /v1/batches/{id}: answers[i] (status, batch or
    None, headers) for the i-th GET (the last one repeats); records when each
    came and its headers. Any other route is a 404 (jobctl's live token query)."""

    def __init__(self, answers):
        import http.server
        self.answers, self.gets = answers, []
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if not self.path.startswith("/v1/batches/"):
                    return self.reply(404, {"error": {"message": "no such route", "code": None}}, {})
                fake.gets.append((time.monotonic(), dict(self.headers)))
                status, body, hdrs = fake.answers[min(len(fake.gets), len(fake.answers)) - 1]
                self.reply(status, body, hdrs)

            def reply(self, status, body, hdrs):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                if status != 304:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if status != 304:
                    self.wfile.write(data)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.env = {"JOBD_URL": f"http://127.0.0.1:{self.srv.server_address[1]}", "JOBD_API_KEY": "k",
                    "JOBCTL_CONFIG": "", "HOME": tmpdir()}


def fake_batch(status, done, total=4, out_tokens=0, **stamps):
    b = {"id": "batch_fake", "object": "batch", "endpoint": "/v1/chat/completions", "model": "smollm",
         "status": status, "input_file_id": "file_in", "output_file_id": None, "error_file_id": None,
         "created_at": 1_000_000, "in_progress_at": None, "finalizing_at": None, "completed_at": None,
         "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
         "request_counts": {"total": total, "completed": done, "failed": 0},
         "usage": {"input_tokens": 10 * done, "output_tokens": out_tokens, "total_tokens": 10 * done + out_tokens}}
    b.update(stamps)
    return b


def test_wait_polls_every_interval_when_the_server_does_not_long_poll():
    running = fake_batch("in_progress", 1, in_progress_at=1_000_001)
    done = fake_batch("completed", 4, out_tokens=80, in_progress_at=1_000_001, finalizing_at=1_000_005,
                      completed_at=1_000_006)
    f = FakeJobd([(200, running, {"ETag": '"a"'}), (304, None, {"ETag": '"a"'}),
                  (304, None, {"ETag": '"a"'}), (200, done, {"ETag": '"b"'})])
    r = jobctl(["wait", "batch_fake", "--interval", "300ms", "--timeout", "60s"], f.env)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert len(f.gets) == 4, f.gets
    # the first ETag is tried at once (does the server hold a conditional GET?);
    # then --interval between the unmarked answers
    gaps = [b[0] - a[0] for a, b in zip(f.gets, f.gets[1:])]
    assert all(g >= 0.3 for g in gaps[1:]), gaps
    assert all(h.get("Prefer", "").startswith("wait=") and h.get("If-None-Match") == '"a"'
               for _, h in f.gets[1:]), f.gets       # asked, was not honored, fell back
    # the ended batch's rate: 80 output tokens over its 4 s in progress (not over "until now")
    assert re.search(r"batch_fake completed 4/4 \(100\.0%\) completed 4 failed 0 tok/s 20\.0 ", r.stderr), r.stderr


def test_wait_asks_again_at_once_when_the_server_held_the_poll():
    running = fake_batch("in_progress", 1, in_progress_at=1_000_001)
    done = fake_batch("completed", 4, out_tokens=80, in_progress_at=1_000_001, finalizing_at=1_000_001,
                      completed_at=1_000_002)
    held = {"ETag": '"a"', "Preference-Applied": "wait=25", "Retry-After": "5"}
    f = FakeJobd([(200, running, {"ETag": '"a"'}), (304, None, held), (304, None, held),
                  (200, done, {"ETag": '"b"', "Preference-Applied": "wait=25"})])
    t0 = time.monotonic()
    r = jobctl(["wait", "batch_fake", "--interval", "60s", "--timeout", "100s"], f.env)
    assert r.returncode == 0, (r.returncode, r.stderr)
    # marked answers: no --interval (60 s) nor Retry-After (5 s) sleep between them
    assert len(f.gets) == 4 and time.monotonic() - t0 < 20, (f.gets, r.stderr)
    # ended in the second it started: the whole-second stamps count one second
    assert re.search(r"batch_fake completed 4/4 \(100\.0%\) completed 4 failed 0 tok/s 80\.0 ", r.stderr), r.stderr


def test_status_rate_uses_the_batch_in_progress_time():
    done = fake_batch("completed", 4, out_tokens=400, in_progress_at=1_000_010, finalizing_at=1_000_014,
                      completed_at=1_000_020)
    f = FakeJobd([(200, done, {"ETag": '"b"'})])
    r = jobctl(["status", "batch_fake"], f.env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"tokens +in 40 +out 400 +total 440 +\(100\.0 tok/s\)", r.stdout), r.stdout
    cancelled = fake_batch("cancelled", 2, out_tokens=90, in_progress_at=1_000_010, cancelling_at=1_000_011,
                           cancelled_at=1_000_013)
    f = FakeJobd([(200, cancelled, {"ETag": '"c"'})])
    r = jobctl(["status", "batch_fake"], f.env)
    assert re.search(r"\(30\.0 tok/s\)", r.stdout), r.stdout     # until cancelled_at: the requests stopped


def worker(d, name="ctl-worker", model="smollm", aliases=()):
    w = TestWorker(d.port, WT, model=model, aliases=aliases, name=name)
    w.register()
    return w


def finish(d, w, bid, policy=success):
    """Answer every request of the batch with policy until jobd finalized it."""
    def done():
        return d.json("GET", f"/v1/batches/{bid}")["status"] not in ("validating", "in_progress", "finalizing")
    w.run_until(done, policy=policy, timeout=60)


def test_results_and_errors_of_a_finished_batch():
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    f = write(os.path.join(tmpdir(), "five.jsonl"), jsonl(5))
    bid = jobctl(["submit", f], env).stdout.strip()
    assert ID_RE.match(bid + "\n"), bid
    finish(d, w, bid)
    r = jobctl(["wait", bid, "--interval", "100ms"], env)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert f"{bid} completed: 5 requests, 5 completed, 0 failed" in r.stderr, r.stderr
    # results: each custom_id exactly once, as OpenAI batch output lines
    r = jobctl(["results", bid], env)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == [f"t-{i}" for i in range(1, 6)], lines
    for x in lines:
        assert set(x) == {"id", "custom_id", "response", "error"} and x["error"] is None, x
        assert x["id"].startswith("batch_req_") and x["response"]["status_code"] == 200, x
        body = x["response"]["body"]
        assert body["object"] == "chat.completion", x
        assert body["choices"][0]["message"]["content"] == f"answer to {x['custom_id']}", x
    # the bytes are jobd's output file, unchanged
    b = d.json("GET", f"/v1/batches/{bid}")
    assert r.stdout.encode() == d.call("GET", f"/v1/files/{b['output_file_id']}/content").body
    # -o FILE (no .tmp left behind) and --raw (the stored zstd stream)
    out = os.path.join(tmpdir(), "results.jsonl")
    r2 = jobctl(["results", bid, "-o", out], env)
    assert r2.returncode == 0 and r2.stdout == "", r2.stderr
    assert open(out).read() == r.stdout and not os.path.exists(out + ".tmp")
    raw = subprocess.run([binary("jobctl"), "results", bid, "--raw"], env={**os.environ, **env},
                         capture_output=True, timeout=60)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout[:4] == b"\x28\xb5\x2f\xfd" and zstd_decompress(raw.stdout) == r.stdout.encode()
    # no request failed: errors is empty, and says why
    r = jobctl(["errors", bid], env)
    assert r.returncode == 0 and r.stdout == "" and "no request failed" in r.stderr, r.stderr
    r = jobctl(["status", bid], env)
    assert r.stdout.startswith(f"{bid}  completed\n") and "progress   5/5 (100.0%)" in r.stdout, r.stdout

    # a batch with one invalid request: completed, exit 10, the error file has it
    f2 = write(os.path.join(tmpdir(), "four.jsonl"), jsonl(4, content="again"))
    bid2 = jobctl(["submit", f2], env).stdout.strip()
    finish(d, w, bid2, policy=lambda q: invalid(q) if q["custom_id"] == "t-2" else success(q))
    r = jobctl(["wait", bid2, "--interval", "100ms"], env)
    assert r.returncode == 10, (r.returncode, r.stderr)
    assert f"{bid2} completed: 4 requests, 3 completed, 1 failed" in r.stderr, r.stderr
    assert f"hint: the failed requests are in: jobctl errors {bid2}" in r.stderr, r.stderr
    r = jobctl(["submit", f2, "--wait", "--interval", "100ms"], env)   # the same submission: replayed
    assert r.returncode == 10 and r.stdout.strip() == bid2, (r.returncode, r.stderr)
    r = jobctl(["results", bid2], env)
    assert sorted(json.loads(x)["custom_id"] for x in r.stdout.splitlines()) == ["t-1", "t-3", "t-4"]
    r = jobctl(["errors", bid2], env)
    assert r.returncode == 0, r.stderr
    errs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [e["custom_id"] for e in errs] == ["t-2"], errs
    assert errs[0]["response"]["status_code"] == 400, errs
    assert errs[0]["response"]["body"]["error"]["code"] == "context_length_exceeded", errs
    eout = os.path.join(tmpdir(), "errors.jsonl")
    assert jobctl(["errors", bid2, "-o", eout], env).returncode == 0
    assert open(eout).read() == r.stdout


def wait_dead(d, bid, n, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        dl = d.json("GET", f"/v1/batches/{bid}/dead_letters")["data"]
        if len(dl) == n:
            return dl
        assert time.monotonic() < deadline, dl
        time.sleep(0.05)


def fail_until_dead(w, ids, timeout=30):
    """Answer the requests with these ids with transient errors each time they
    come back (retry backoff) until jobd dead-letters them (3 attempts)."""
    left, deadline = set(ids), time.monotonic() + timeout
    while left:
        assert time.monotonic() < deadline, f"{len(left)} requests not dead-lettered"
        r = w.lease(max_requests=len(left), lease_seconds=60, wait_ms=500).json()
        assert {q["request_id"] for q in r["requests"]} <= left, r
        if r["requests"]:
            res = w.results(r["lease_id"], [transient(q) for q in r["requests"]]).json()["results"]
            left -= {x["request_id"] for x in res if x["status"] == "dead_lettered"}


def test_retry_dead_requeues_and_reports_refusals():
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    f = write(os.path.join(tmpdir(), "dl.jsonl"), jsonl(4))
    bid = jobctl(["submit", f], env).stdout.strip()
    d.wait_batch(bid)
    l1 = w.lease(max_requests=3, lease_seconds=60).json()
    first = l1["requests"]
    assert [q["custom_id"] for q in first] == ["t-1", "t-2", "t-3"], first
    hold = w.lease(max_requests=1, lease_seconds=300).json()      # t-4 keeps the batch running
    assert [q["custom_id"] for q in hold["requests"]] == ["t-4"], hold
    ids = {q["custom_id"]: q["request_id"] for q in first}
    res = w.results(l1["lease_id"], [transient(q) for q in first]).json()["results"]
    assert [x["status"] for x in res] == ["retry"] * 3, res
    fail_until_dead(w, ids.values())
    dl = wait_dead(d, bid, 3)
    assert sorted(x["custom_id"] for x in dl) == ["t-1", "t-2", "t-3"], dl
    # one, by its id: requeued; again: no longer a dead letter (22)
    r = jobctl(["retry-dead", ids["t-1"]], env)
    assert r.returncode == 0 and r.stdout == f"{ids['t-1']} requeued\n", (r.returncode, r.stdout, r.stderr)
    r = jobctl(["retry-dead", ids["t-1"]], env)
    assert r.returncode == 22 and f"dead letter {ids['t-1']} not found" in r.stderr, r.stderr
    # the rest of the batch, one dead letter per page: both requeued
    r = jobctl(["retry-dead", "--batch", bid, "--page-size", "1"], env)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == [f"{ids['t-2']} t-2 requeued", f"{ids['t-3']} t-3 requeued",
                                     f"batch {bid}: 2 dead letters, 2 requeued, 0 refused"], r.stdout
    assert d.json("GET", f"/v1/batches/{bid}/dead_letters")["data"] == []
    # they come back with their attempts reset; t-3 dies again, the rest succeed
    back = []
    deadline = time.monotonic() + 30
    while len(back) < 3:
        assert time.monotonic() < deadline, back
        r = w.lease(max_requests=3, lease_seconds=60, wait_ms=500).json()
        assert all(q["attempt"] == 1 for q in r["requests"]), r
        ok = [q for q in r["requests"] if q["custom_id"] != "t-3"]
        if ok:
            w.results(r["lease_id"], [success(q) for q in ok])
        back += r["requests"]
        for q in r["requests"]:
            if q["custom_id"] == "t-3":
                w.results(r["lease_id"], [transient(q)])
    assert sorted(q["custom_id"] for q in back) == ["t-1", "t-2", "t-3"], back
    fail_until_dead(w, [ids["t-3"]])
    w.results(hold["lease_id"], [success(q) for q in hold["requests"]])
    r = jobctl(["wait", bid, "--interval", "100ms", "--timeout", "60s"], env)
    assert r.returncode == 10, (r.returncode, r.stderr)
    # the batch is final: jobd refuses the retry, jobctl says why and exits 1
    r = jobctl(["retry-dead", "--batch", bid], env)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines()[0].startswith(f"{ids['t-3']} t-3 refused: HTTP 400 invalid_state: "), r.stdout
    assert r.stdout.splitlines()[-1] == f"batch {bid}: 1 dead letters, 0 requeued, 1 refused", r.stdout
    assert "1 of 1 retries refused" in r.stderr and "hint:" in r.stderr, r.stderr
    r = jobctl(["retry-dead", ids["t-3"]], env)
    assert r.returncode == 1 and "retry refused: HTTP 400 invalid_state" in r.stderr, r.stderr
    errs = [json.loads(x) for x in jobctl(["errors", bid], env).stdout.splitlines()]
    assert [(e["custom_id"], e["error"]["code"]) for e in errs] == [("t-3", "max_attempts_exceeded")], errs
    # another tenant sees none of it; the admin token sees every tenant's
    key_b = d.create_key("beta")
    r = jobctl(["retry-dead", "--batch", bid], {**env, "JOBD_API_KEY": key_b})
    assert r.returncode == 22 and f"batch {bid} not found" in r.stderr, r.stderr
    r = jobctl(["retry-dead", "--batch", bid, "--admin-token", AT], {**env, "JOBD_API_KEY": key_b})
    assert r.returncode == 1 and "1 refused" in r.stdout, (r.returncode, r.stdout, r.stderr)
    r = jobctl(["retry-dead", "--batch", bid, "--admin-token", "wrong"], env)
    assert r.returncode == 21 and "refused the admin token" in r.stderr, r.stderr


def test_submit_webhook_is_batch_metadata_and_delivered():
    rx = Receiver()
    try:
        d, env = start(args=WORKER_ARGS + ["--webhook-allow-private", "--webhook-poll", "20ms"])
        w = worker(d)
        f = write(os.path.join(tmpdir(), "hook.jsonl"), jsonl(2))
        url = rx.url("/batch-done")
        r = jobctl(["submit", f, "--webhook", url, "--metadata", "owner=cron"], env)
        assert r.returncode == 0 and ID_RE.match(r.stdout), r.stderr
        bid = r.stdout.strip()
        b = d.json("GET", f"/v1/batches/{bid}")
        assert b["metadata"] == {"owner": "cron", "webhook_url": url}, b["metadata"]
        # the webhook is part of the derived idempotency key: without it, another batch
        r2 = jobctl(["submit", f, "--metadata", "owner=cron"], env)
        assert r2.returncode == 0 and r2.stdout.strip() != bid
        assert "webhook_url" not in d.json("GET", f"/v1/batches/{r2.stdout.strip()}")["metadata"]
        r3 = jobctl(["submit", f, "--webhook", url, "--metadata", "owner=cron"], env)
        assert r3.stdout.strip() == bid and "already submitted" in r3.stderr, r3.stderr
        # jobd delivers the batch's end there, signed with the tenant secret
        finish(d, w, bid)
        (path, headers, body), = rx.wait("/batch-done", 1)
        secret = d.json("GET", "/v1/webhook_secret")["secret"]
        assert hmac_verify(secret, headers, body), headers
        ev = json.loads(body)
        assert ev["type"] == "batch.completed" and ev["data"]["id"] == bid, ev
    finally:
        rx.close()


def test_models_and_workers_show_the_worker():
    d, env = start(args=WORKER_ARGS)
    r = jobctl(["models"], env)
    assert r.returncode == 0 and r.stdout.split() == ["ID", "ROOT", "WORKERS"], r.stdout
    w = worker(d, name="gpu-box-7", model="SmolLM2-135M", aliases=["smollm"])
    r = jobctl(["models"], env)
    assert r.returncode == 0, r.stderr
    rows = sorted(tuple(x.split()) for x in r.stdout.splitlines()[1:])
    assert rows == [("SmolLM2-135M", "SmolLM2-135M", "1"), ("smollm", "SmolLM2-135M", "1")], r.stdout
    r = jobctl(["models", "--json"], env)
    assert sorted(m["id"] for m in json.loads(r.stdout)["data"]) == ["SmolLM2-135M", "smollm"]
    # workers needs the admin token
    r = jobctl(["workers"], env)
    assert r.returncode == 21 and r.stdout == "", (r.returncode, r.stderr)
    assert "GET /v1/workers needs jobd's admin token" in r.stderr and "JOBD_ADMIN_TOKEN" in r.stderr, r.stderr
    r = jobctl(["workers", "--admin-token", "nope"], env)
    assert r.returncode == 21 and "refused the admin token" in r.stderr, r.stderr
    bid = jobctl(["submit", write(os.path.join(tmpdir(), "w.jsonl"), jsonl(3))], env).stdout.strip()
    d.wait_batch(bid)
    lease = w.lease(max_requests=2, lease_seconds=60).json()
    assert len(lease["requests"]) == 2
    w.heartbeat(lease["lease_id"], tokens_per_s=42.5)
    r = jobctl(["workers"], {**env, "JOBD_ADMIN_TOKEN": AT})
    assert r.returncode == 0, r.stderr
    head, *rows = r.stdout.splitlines()
    assert head.split() == ["ID", "NAME", "DEVICE", "LIVE", "LEASES", "REQUESTS", "TOK/S", "PER_HOUR", "LAST_SEEN",
                            "MODELS"]
    assert len(rows) == 1, r.stdout
    cols = rows[0].split()
    assert cols[0] == w.worker_id and cols[1:8] == ["gpu-box-7", "cpu", "yes", "1", "2", "42.5", "$0.000000"], cols
    assert cols[9] == "SmolLM2-135M", cols
    # the admin token from the config file works too
    cfg = write(os.path.join(tmpdir(), "config"), f"admin_token = {AT}\n".encode())
    r = jobctl(["workers", "--json"], {**env, "JOBCTL_CONFIG": cfg})
    assert r.returncode == 0 and json.loads(r.stdout)["data"][0]["name"] == "gpu-box-7", r.stderr
    # ... and is not sent by commands that take the API key
    assert jobctl(["list"], {**env, "JOBCTL_CONFIG": cfg}).returncode == 0


# ---- list ---------------------------------------------------------------------------------

def test_list_follows_pages_and_filters():
    d, env = start()
    ids = set()
    for i in range(9):
        ids.add(d.submit(jsonl(1, content=f"q{i}"))["id"])
    failed = set()
    for i in range(3):
        failed.add(d.submit(b"{nope " + str(i).encode() + b"\n")["id"])
    for b in ids | failed:
        d.wait_batch(b)
    before = metric(d, 'route="/v1/batches",status="200"')
    r = jobctl(["list", "--limit", "0", "--page-size", "4", "--json"], env)
    assert r.returncode == 0, r.stderr
    got = [json.loads(l)["id"] for l in r.stdout.splitlines()]
    assert sorted(got) == sorted(ids | failed) and len(got) == 12, got
    assert got == sorted(got, reverse=True)                 # newest first, no repeats
    assert metric(d, 'route="/v1/batches",status="200"') - before == 3   # 4 + 4 + 4
    r = jobctl(["list", "--status", "failed", "--page-size", "5"], env)
    assert r.returncode == 0
    rows = r.stdout.splitlines()
    assert rows[0].split()[:2] == ["ID", "STATUS"]
    assert {row.split()[0] for row in rows[1:]} == failed, r.stdout
    r = jobctl(["list", "--limit", "5", "--page-size", "2"], env)
    assert len(r.stdout.splitlines()) == 1 + 5, r.stdout


# ---- errors and exit codes ----------------------------------------------------------------

def test_unreachable_daemon():
    env = {"JOBD_URL": f"http://127.0.0.1:{free_port()}", "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    for args in (["status", "batch_x"], ["list"], ["submit", write(os.path.join(tmpdir(), "a.jsonl"), jsonl(1))]):
        r = jobctl(args, env)
        assert r.returncode == 20, (args, r.returncode, r.stderr)
        assert r.stdout == ""
        assert "cannot reach jobd at" in r.stderr and "hint:" in r.stderr, r.stderr


def test_bad_or_missing_key_and_not_found():
    d, env = start()
    for e in ({**env, "JOBD_API_KEY": "sk-not-a-key"}, {**env, "JOBD_API_KEY": ""}):
        r = jobctl(["list"], e)
        assert r.returncode == 21, (r.returncode, r.stderr)
        assert "API key" in r.stderr and "JOBD_API_KEY" in r.stderr
    r = jobctl(["status", "batch_01jf8zq3v0m9x5k2c7n4t6r8wd"], env)
    assert r.returncode == 22 and "batch batch_01jf8zq3v0m9x5k2c7n4t6r8wd not found" in r.stderr, r.stderr
    r = jobctl(["cancel", "batch_01jf8zq3v0m9x5k2c7n4t6r8wd"], env)
    assert r.returncode == 22


def test_routes_this_jobd_lacks_are_named():
    d, env = start()
    if route_missing(d, "GET", "/v1/usage"):
        r = jobctl(["usage", "--since", "2026-11-01"], env)
        assert r.returncode == 23, (r.returncode, r.stderr)
        assert "jobd has no route GET /v1/usage" in r.stderr and "hint:" in r.stderr, r.stderr
        assert r.stdout == ""
    else:  # jobd serves it: jobctl prints jobd's report as a table, or as JSON
        r = jobctl(["usage", "--since", "2026-11-01", "--group-by", "model", "--json"], env)
        assert r.returncode == 0, (r.returncode, r.stderr)
        report = json.loads(r.stdout)
        assert isinstance(report.get("data"), list), report
        r = jobctl(["usage", "--since", "2026-11-01"], env)
        assert r.returncode == 0, (r.returncode, r.stderr)
        rows = [x.split() for x in r.stdout.splitlines()]
        assert rows[0] == ["MODEL", "REQUESTS", "INPUT", "CACHED", "OUTPUT", "TOTAL", "COST"], rows
        assert rows[-1] == ["total", "0", "0", "0", "0", "0", "$0.000000"], rows
        r = jobctl(["usage", "--group-by", "tenant"], env)
        assert r.returncode == 2 and "--group-by" in r.stderr, r.stderr
    # the routes jobd does serve: an unknown id is "not found", no dead letters is not an error
    r = jobctl(["retry-dead", "req_01jf8y2n6q3c5v7x9z1b3d5f7h"], env)
    assert r.returncode == 22 and "dead letter req_01jf8y2n6q3c5v7x9z1b3d5f7h not found" in r.stderr, r.stderr
    f = write(os.path.join(tmpdir(), "a.jsonl"), jsonl(1))
    bid = jobctl(["submit", f], env).stdout.strip()
    r = jobctl(["retry-dead", "--batch", bid], env)
    assert r.returncode == 0 and r.stdout == f"batch {bid}: 0 dead letters, 0 requeued, 0 refused\n", r


def test_usage_all_tenants_needs_the_admin_token():
    d, env = start(args=["--admin-token", "adm-jc"])
    r = jobctl(["usage", "--tenant", "alpha"], env)
    assert r.returncode == 2 and "--all-tenants" in r.stderr, r.stderr
    r = jobctl(["usage", "--all-tenants"], env)  # the API key is not the admin token
    assert r.returncode == 21 and "admin token" in r.stderr, (r.returncode, r.stderr)
    e = {**env, "JOBD_ADMIN_TOKEN": "adm-jc"}
    r = jobctl(["usage", "--all-tenants"], e)
    assert r.returncode == 0, (r.returncode, r.stderr)
    rows = [x.split() for x in r.stdout.splitlines()]
    assert rows[0][0] == "TENANT" and rows[-1][0] == "total", rows
    r = jobctl(["usage", "--all-tenants", "--tenant", "alpha", "--group-by", "day", "--json"], e)
    assert r.returncode == 0 and json.loads(r.stdout)["tenant_id"].startswith("ten_"), (r.returncode, r.stderr)
    r = jobctl(["usage", "--all-tenants", "--tenant", "nobody"], e)
    assert r.returncode == 22, (r.returncode, r.stderr)


def test_nightly_example_is_safe_to_run_twice():
    d, env = start()
    bad = write(os.path.join(tmpdir(), "today.jsonl"), jsonl(2) + b"[not an object]\n")
    out = os.path.join(tmpdir(), "out")
    script = os.path.join(ROOT, "examples", "nightly.sh")
    e = {**env, "JOBCTL": binary("jobctl"), "NIGHTLY_INTERVAL": "100ms"}
    r1 = run(["bash", script, bad, out], env=e)
    assert r1.returncode == 11, (r1.returncode, r1.stderr)
    first = open(os.path.join(out, "batch_id")).read()
    errs = [json.loads(l) for l in open(os.path.join(out, "errors.jsonl"))]
    assert errs and errs[0]["line"] == 3, errs
    r2 = run(["bash", script, bad, out], env=e)
    assert r2.returncode == 11, r2.stderr
    assert open(os.path.join(out, "batch_id")).read() == first       # the same batch, not a second
    assert len(d.json("GET", "/v1/batches?limit=100")["data"]) == 1
    r = run(["bash", script, bad, out], env={**e, "JOBD_API_KEY": "sk-wrong"})
    assert r.returncode == 21, r.stderr
