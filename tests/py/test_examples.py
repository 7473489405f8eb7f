"""The user-facing pieces (jobctl, examples/) against a real jobd: `jobctl wait`'s
progress display in a pseudo-terminal and without one, the exit codes the
other suites do not reach (expired, cancelled), `examples/nightly.sh` end to
end with the real jobworker on the default model (twice: one batch),
`examples/webhook_receiver.py` verifying a real delivery from jobd (and
rejecting tampered ones), the systemd environment files driving real
processes (price table checked by hand), the example files themselves, and
`scripts/run-default` on another file.

Sizes stay CPU-friendly: the real-model tests use examples/hello.jsonl and
examples/completions.jsonl (a few requests, at most 48 tokens each).
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

from harness import ROOT, Proc, Skip, binary, free_port, run, tmpdir
from jobdlib import Jobd, create_key, jsonl
from test_jobctl import AT, WORKER_ARGS, WT, jobctl, start, worker, write
from test_webhooks import Receiver
from workerlib import read_jsonl, success

TIMEOUT = 600
EX = os.path.join(ROOT, "examples")
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def need_model():
    for name in ("jobd", "jobworker", "jobctl"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built (make)")
    if not os.path.exists(MODEL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(MODEL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])


def read_env_file(path):
    """VAR=value lines of a systemd EnvironmentFile (comments and blanks skipped)."""
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", k), line
            env[k] = v
    return env


# ---- jobctl wait: progress bar on a terminal, plain lines otherwise ------------------------

class PtyReader:
    """Collects what a child writes to the slave side of a pseudo-terminal."""

    def __init__(self, master):
        self.master = master
        self.data = b""
        self.lock = threading.Lock()
        self.th = threading.Thread(target=self._pump, daemon=True)
        self.th.start()

    def _pump(self):
        while True:
            try:
                r, _, _ = select.select([self.master], [], [], 0.2)
                if not r:
                    continue
                x = os.read(self.master, 65536)
            except OSError:       # EIO once the slave side is closed everywhere
                return
            if not x:
                return
            with self.lock:
                self.data += x

    def text(self):
        with self.lock:
            return self.data.decode("utf-8", "replace")

    def wait_closed(self, timeout=30):
        """Wait until everything written to the terminal has been read: the
        pump ends at EIO, once the slave side is closed everywhere and drained."""
        self.th.join(timeout)
        assert not self.th.is_alive(), "the pseudo-terminal was not closed"

    def wait_for(self, needle, timeout=60):
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert time.monotonic() < deadline, f"{needle!r} never drawn: {self.text()[-2000:]!r}"
            time.sleep(0.02)


def answer(w, n):
    """Lease up to n requests and answer them (usage 100 prompt + 20 completion tokens)."""
    r = w.lease(max_requests=n, lease_seconds=60, wait_ms=2000).json()
    lines = []
    for q in r["requests"]:
        x = success(q)
        x["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 0}
        x["response"]["body"]["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        lines.append(x)
    assert len(lines) == n, r
    w.results(r["lease_id"], lines)


def test_wait_draws_a_progress_bar_on_a_terminal():
    import pty
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    f = write(os.path.join(tmpdir(), "six.jsonl"), jsonl(6))
    bid = jobctl(["submit", f], env).stdout.strip()
    d.wait_batch(bid)
    master, slave = pty.openpty()
    p = subprocess.Popen([binary("jobctl"), "wait", bid, "--interval", "100ms"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave, env={**os.environ, **env})
    os.close(slave)
    tty = PtyReader(master)
    try:
        tty.wait_for("0/6")
        answer(w, 2)
        tty.wait_for(" 2/6 ")
        time.sleep(1.1)                      # the rate and the ETA need a second of history
        answer(w, 2)
        tty.wait_for(" 4/6 ")
        answer(w, 2)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (p.returncode, tty.text()[-2000:])
    assert out == b"", out                   # the display is on stderr; stdout stays clean
    # race fix: a fixed sleep gave the pump thread time to read jobctl's last
    # draws and summary; wait until it has read everything instead
    tty.wait_closed()
    text = tty.text()
    os.close(master)
    draws = text.split("\r")
    bars = [x for x in draws if x.startswith("[")]
    assert len(bars) >= 3, repr(text)        # redrawn in place, not one line per poll
    rows = []
    for b in bars:
        m = re.match(r"\[([#.]{30})\]\s+([\d.]+)% (\d+)/6 ok (\d+) failed (\d+)\s+(\S+) tok/s\s+eta (\S+)\s+(\w+)",
                     b)
        assert m, repr(b)
        assert "\033[K" in b, repr(b)        # each draw clears the rest of the line
        rows.append(m.groups())
    dones = [int(r[2]) for r in rows]
    assert dones == sorted(dones) and {2, 4, 6} <= set(dones), dones
    for bar, pct, done, ok, failed, rate, eta, status in rows:
        assert bar.count("#") == 30 * int(done) // 6, (bar, done)
        assert abs(float(pct) - 100 * int(done) / 6) < 0.06 and int(ok) == int(done) and failed == "0"
    at4 = [r for r in rows if r[2] == "4"]
    assert any(r[5] != "-" and float(r[5]) > 0 for r in at4), rows     # live tokens/s
    assert any(re.fullmatch(r"(\d+h)?(\d+m)?\d+s", r[6]) for r in at4), rows  # an ETA
    assert rows[-1][7] == "completed", rows
    assert f"\n{bid} completed: 6 requests, 6 completed, 0 failed" in text, repr(text[-300:])


def test_wait_without_a_terminal_prints_plain_lines():
    d, env = start(args=WORKER_ARGS)
    w = worker(d)
    f = write(os.path.join(tmpdir(), "four.jsonl"), jsonl(4))
    bid = jobctl(["submit", f], env).stdout.strip()
    d.wait_batch(bid)
    p = subprocess.Popen([binary("jobctl"), "wait", bid, "--interval", "100ms"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, **env})
    # Race fix: with a fixed sleep here, a jobctl slower to start than the two
    # answers saw the batch completed at its first poll and printed one line
    # only. Wait for its first line (the batch in progress) before answering.
    got = []

    def read_err():
        for line in iter(p.stderr.readline, b""):
            got.append(line)

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any(bid.encode() in l for l in got):
        assert p.poll() is None and time.monotonic() < deadline, got
        time.sleep(0.02)
    answer(w, 2)
    time.sleep(1.1)
    answer(w, 2)
    p.wait(timeout=60)
    reader.join(30)
    out, err = p.stdout.read(), b"".join(got)
    assert p.returncode == 0, (p.returncode, err)
    err = err.decode()
    assert "\r" not in err and "\033" not in err, repr(err)
    lines = [l for l in err.splitlines() if bid in l and "/4 (" in l]
    assert len(lines) >= 2, err
    for l in lines:
        assert re.match(rf"^\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z {bid} \w+ \d/4 \([\d.]+%\) completed \d "
                        r"failed \d tok/s \S+ eta \S+$", l), l
    assert lines[-1].split()[2] == "completed", lines
    assert err.rstrip().endswith(f"{bid} completed: 4 requests, 4 completed, 0 failed"), err


# ---- the exit codes no other suite reaches -----------------------------------------------

def test_wait_exit_codes_expired_and_cancelled():
    d, env = start(args=WORKER_ARGS + ["--window-min", "1s"])
    # expired: a 2-second window and no worker (jobctl's --window starts at 1m, so the API directly)
    b = d.submit(jsonl(3), query="?completion_window=2s")
    r = jobctl(["wait", b["id"], "--interval", "200ms", "--timeout", "60s"], env)
    assert r.returncode == 12, (r.returncode, r.stderr)
    assert f"{b['id']} expired" in r.stderr, r.stderr
    assert d.json("GET", f"/v1/batches/{b['id']}")["status"] == "expired"
    r = jobctl(["status", b["id"]], env)
    assert r.returncode == 0 and r.stdout.startswith(f"{b['id']}  expired\n"), r.stdout
    # cancelled: an in-progress batch, one request answered, then cancel
    w = worker(d)
    f = write(os.path.join(tmpdir(), "c.jsonl"), jsonl(4))
    bid = jobctl(["submit", f], env).stdout.strip()
    d.wait_batch(bid)
    answer(w, 1)
    # while it runs, status shows the tokens so far (from jobd's usage ledger)
    r = jobctl(["status", bid], env)
    assert r.returncode == 0 and "progress   1/4 (25.0%)" in r.stdout, r.stdout
    assert "tokens     in 100   out 20   total 120" in r.stdout, r.stdout
    assert "cost       $0.000000 so far (0 micro-dollars)" in r.stdout, r.stdout
    r = jobctl(["cancel", bid], env)
    assert r.returncode == 0 and r.stdout.split()[0] == bid, (r.returncode, r.stdout, r.stderr)
    r = jobctl(["wait", bid, "--interval", "200ms", "--timeout", "60s"], env)
    assert r.returncode == 13, (r.returncode, r.stderr)
    assert f"{bid} cancelled" in r.stderr, r.stderr
    # submit --wait reports the same outcome for the same (replayed) submission
    r = jobctl(["submit", f, "--wait", "--interval", "200ms"], env)
    assert r.returncode == 13 and r.stdout.strip() == bid, (r.returncode, r.stderr)
    # what finished before the cancel is still delivered
    r = jobctl(["results", bid], env)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1, r.stdout


def test_submit_takes_the_endpoint_from_the_first_line():
    d, env = start()
    path = os.path.join(EX, "completions.jsonl")
    r = jobctl(["submit", path], env)
    assert r.returncode == 0, r.stderr
    b = d.wait_batch(r.stdout.strip())
    assert b["status"] == "in_progress" and b["endpoint"] == "/v1/completions", b
    # an explicit --endpoint wins: these lines do not match it, so the batch fails (exit 11)
    r = jobctl(["submit", path, "--endpoint", "/v1/chat/completions", "--wait", "--interval", "100ms"], env)
    assert r.returncode == 11, (r.returncode, r.stderr)
    errs = [json.loads(x) for x in jobctl(["errors", r.stdout.strip()], env).stdout.splitlines()]
    assert errs and errs[0]["line"] == 1, errs
    # a chat file is submitted for chat, as before
    r = jobctl(["submit", os.path.join(EX, "hello.jsonl")], env)
    assert d.wait_batch(r.stdout.strip())["endpoint"] == "/v1/chat/completions"
    # and a Responses file for /v1/responses (jobd validates its lines at upload)
    r = jobctl(["submit", os.path.join(EX, "responses.jsonl")], env)
    b = d.wait_batch(r.stdout.strip())
    assert b["status"] == "in_progress" and b["endpoint"] == "/v1/responses", b


# ---- examples/nightly.sh with the real worker --------------------------------------------

def start_real_worker(d, token):
    """jobworker configured the way examples/systemd/jobworker.env does it."""
    env = read_env_file(os.path.join(EX, "systemd", "jobworker.env"))
    env.update({"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_WORKER_TOKEN": token,
                "JOBWORKER_MODEL": MODEL, "JOBWORKER_THREADS": "2", "JOBWORKER_NAME": "nightly-test"})
    return Proc([binary("jobworker", asan=False)], env=env)


def test_nightly_example_end_to_end_with_the_real_worker():
    need_model()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "nightly")
    d = Jobd(data=data, key=key, asan=False, args=["--worker-token", WT, "--sweep-interval", "200ms"])
    w = start_real_worker(d, WT)
    out = os.path.join(tmpdir(), "out")
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir(), "JOBCTL": binary("jobctl", asan=False), "NIGHTLY_INTERVAL": "300ms"}
    hello = os.path.join(EX, "hello.jsonl")
    r1 = run(["bash", os.path.join(EX, "nightly.sh"), hello, out], env=env, timeout=TIMEOUT)
    assert r1.returncode == 0, (r1.returncode, r1.stderr[-3000:], w.log()[-3000:])
    bid = open(os.path.join(out, "batch_id")).read().strip()
    results = open(os.path.join(out, "results.jsonl"), "rb").read()
    lines = [json.loads(x) for x in results.splitlines()]
    want = [json.loads(x)["custom_id"] for x in open(hello)]
    assert sorted(x["custom_id"] for x in lines) == sorted(want), lines
    for x in lines:
        c = x["response"]["body"]["choices"][0]
        assert x["response"]["status_code"] == 200 and c["message"]["content"].strip(), x
    assert os.path.getsize(os.path.join(out, "errors.jsonl")) == 0
    b = d.json("GET", f"/v1/batches/{bid}")
    assert b["status"] == "completed" and b["metadata"]["pipeline"] == "nightly", b
    # the file is jobd's output file, byte for byte
    assert results == d.call("GET", f"/v1/files/{b['output_file_id']}/content").body
    # the same night again: the same batch, nothing resubmitted, the same files
    r2 = run(["bash", os.path.join(EX, "nightly.sh"), hello, out], env=env, timeout=TIMEOUT)
    assert r2.returncode == 0, (r2.returncode, r2.stderr[-3000:])
    assert open(os.path.join(out, "batch_id")).read().strip() == bid
    assert open(os.path.join(out, "results.jsonl"), "rb").read() == results
    assert [x["id"] for x in d.json("GET", "/v1/batches?limit=100")["data"]] == [bid]
    # the worker registered under the env file's model id and name
    ws = d.json("GET", "/v1/models")["data"]
    assert "SmolLM2-135M-Instruct" in [m["id"] for m in ws], ws
    assert w.stop() == 0, w.log()[-2000:]


# ---- examples/webhook_receiver.py ---------------------------------------------------------

class ReceiverProc:
    """examples/webhook_receiver.py on a free port."""

    def __init__(self, secret, *extra):
        self.p = Proc([sys.executable, os.path.join(EX, "webhook_receiver.py"), "--port", "0",
                       "--secret", secret, *extra])
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.p.log())
            if m:
                self.port = int(m.group(1))
                break
            assert self.p.p.poll() is None and time.monotonic() < deadline, self.p.log()
            time.sleep(0.02)

    def events(self):
        return [json.loads(l) for l in self.p.log().splitlines() if l.startswith("{")]

    def wait_events(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        while len(self.events()) < n:
            assert time.monotonic() < deadline, self.p.log()
            time.sleep(0.05)
        return self.events()

    def post(self, headers, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("POST", "/replay", body=body, headers={**headers, "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()


def sign(secret, msg_id, ts, body):
    key = base64.b64decode(secret[len("whsec_"):])
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def test_webhook_receiver_verifies_a_real_delivery_and_rejects_tampering():
    d, env = start(args=WORKER_ARGS + ["--webhook-allow-private", "--webhook-poll", "20ms"])
    secret = d.json("GET", "/v1/webhook_secret")["secret"]
    assert secret.startswith("whsec_")
    rx = ReceiverProc(secret)
    w = worker(d)
    # a real delivery from jobd, to the example receiver
    f = write(os.path.join(tmpdir(), "hook.jsonl"), jsonl(2))
    r = jobctl(["submit", f, "--webhook", f"http://127.0.0.1:{rx.port}/jobd"], env)
    assert r.returncode == 0, r.stderr
    bid = r.stdout.strip()
    # race fix: answer()'s 2 s long poll raced the ingest of the batch; wait
    # until its requests are queued
    d.wait_batch(bid)
    for _ in range(2):
        answer(w, 1)
    ev, = rx.wait_events(1)
    assert ev["type"] == "batch.completed" and ev["batch"] == bid and ev["path"] == "/jobd", ev
    assert ev["event"]["data"]["id"] == bid and ev["webhook_id"] == ev["event"]["id"], ev
    assert ev["duplicate"] is False
    # jobd saw a 2xx: the delivery is logged as delivered
    eps = d.json("GET", "/v1/webhook_endpoints")["data"]
    ep, = [e for e in eps if e["url"].endswith(f":{rx.port}/jobd")]
    deadline = time.monotonic() + 30
    while True:
        dl = d.json("GET", f"/v1/webhook_endpoints/{ep['id']}/deliveries")["data"]
        if dl and dl[0]["status"] == "delivered":
            break
        assert time.monotonic() < deadline, dl
        time.sleep(0.05)
    assert dl[0]["last_status_code"] == 204, dl

    # capture a second real delivery byte for byte, then replay it to the receiver
    cap = Receiver()
    try:
        bid2 = jobctl(["submit", write(os.path.join(tmpdir(), "h2.jsonl"), jsonl(1, content="two")),
                       "--webhook", cap.url("/cap")], env).stdout.strip()
        d.wait_batch(bid2)  # race fix: as above
        answer(w, 1)
        (_, headers, body), = cap.wait("/cap", 1)
    finally:
        cap.srv.shutdown()
    h = {k: headers[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    assert json.loads(body)["data"]["id"] == bid2
    bad = [
        (h, body.replace(bid2.encode(), bid.encode())),                       # tampered body
        ({**h, "webhook-id": h["webhook-id"] + "x"}, body),                    # tampered id
        ({**h, "webhook-signature": sign("whsec_" + base64.b64encode(b"k" * 24).decode(),
                                         h["webhook-id"], h["webhook-timestamp"], body)}, body),  # other key
        ({k: v for k, v in h.items() if k != "webhook-signature"}, body),     # unsigned
    ]
    stale = str(int(time.time()) - 3600)                                       # validly signed, but old
    bad.append(({**h, "webhook-timestamp": stale, "webhook-signature": sign(secret, h["webhook-id"], stale, body)},
                body))
    for hh, bb in bad:
        status, _ = rx.post(hh, bb)
        assert status == 400, (hh, status)
    log = rx.p.log()
    assert log.count("rejected /replay") == len(bad), log
    assert "timestamp" in log and "no v1 signature matches" in log, log
    assert len(rx.events()) == 1                                               # none printed
    # the genuine delivery is accepted (also among several signatures, as during a key rotation)
    other = sign("whsec_" + base64.b64encode(b"old-key-0123456789").decode(), h["webhook-id"],
                 h["webhook-timestamp"], body)
    status, _ = rx.post({**h, "webhook-signature": other + " " + h["webhook-signature"]}, body)
    assert status == 204, status
    status, _ = rx.post(h, body)                                               # a retry of the same event
    assert status == 204
    evs = rx.events()
    assert [(e["batch"], e["duplicate"]) for e in evs] == [(bid, False), (bid2, False), (bid2, True)], evs


# ---- systemd environment files ------------------------------------------------------------

def test_jobd_env_file_configures_a_real_jobd():
    env = read_env_file(os.path.join(EX, "systemd", "jobd.env"))
    for k in env:   # every variable is one jobd documents
        assert f"[env: {k}]" in run([binary("jobd"), "--help"]).stdout, k
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-a")
    port = free_port()
    env.update({"JOBD_LISTEN": f"127.0.0.1:{port}", "JOBD_DATA": data, "JOBD_SWEEP_INTERVAL": "100ms"})
    p = Proc([binary("jobd")], env=env)
    p.wait_http(port, timeout=30)
    d = Jobd.__new__(Jobd)
    d.port, d.key, d.data = port, key, data
    # the worker and admin tokens of the file are in force
    from workerlib import TestWorker
    w = TestWorker(port, env["JOBD_WORKER_TOKEN"], model="SmolLM2-135M-Instruct")
    w.register()
    assert TestWorker(port, "wrong", model="x").register(expect=401).status == 401
    ctl = {"JOBD_URL": f"http://127.0.0.1:{port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    assert jobctl(["workers", "--admin-token", env["JOBD_ADMIN_TOKEN"]], ctl).returncode == 0
    # the price table: 3 requests of 1000 prompt (200 cached) + 500 completion tokens at
    # IN 20000, OUT 80000, CACHED 10000 (IN/2) micro-dollars per 1M tokens:
    # (800*20000 + 200*10000 + 500*80000) / 1e6 = 16 + 2 + 40 = 58 micro-dollars each
    f = write(os.path.join(tmpdir(), "p.jsonl"), jsonl(3, model="SmolLM2-135M-Instruct"))
    bid = jobctl(["submit", f], ctl).stdout.strip()
    d.wait_batch(bid)

    def priced(q):
        x = success(q)
        x["usage"] = {"prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 200}
        return x
    deadline = time.monotonic() + 60
    while d.json("GET", f"/v1/batches/{bid}")["status"] != "completed":
        assert time.monotonic() < deadline
        r = w.lease(max_requests=3, wait_ms=200).json()
        if r["requests"]:
            w.results(r["lease_id"], [priced(q) for q in r["requests"]])
    b = d.json("GET", f"/v1/batches/{bid}")
    assert b["cost"] == {"amount_micros": 174}, b.get("cost")
    r = jobctl(["status", bid], ctl)
    assert "cost       $0.000174 (174 micro-dollars)" in r.stdout, r.stdout
    # jobctl usage: the same sums per model and per batch, as a table
    r = jobctl(["usage"], ctl)
    assert r.returncode == 0, r.stderr
    rows = [x.split() for x in r.stdout.splitlines()]
    assert rows == [["MODEL", "REQUESTS", "INPUT", "CACHED", "OUTPUT", "TOTAL", "COST"],
                    ["SmolLM2-135M-Instruct", "3", "3000", "600", "1500", "4500", "$0.000174"],
                    ["total", "3", "3000", "600", "1500", "4500", "$0.000174"]], r.stdout
    r = jobctl(["usage", "--group-by", "batch", "--since", time.strftime("%Y-%m-%d", time.gmtime())], ctl)
    assert r.stdout.splitlines()[1].split() == [bid, "3", "3000", "600", "1500", "4500", "$0.000174"], r.stdout
    # JOBD_LOG_FORMAT=json: the log is JSON lines
    logged = [l for l in p.log().splitlines() if l.strip()]
    assert logged and all(l.startswith("{") for l in logged), logged[:5]
    json.loads(logged[0])
    p.stop()


def test_systemd_units_name_what_exists():
    units = {n: open(os.path.join(EX, "systemd", n)).read() for n in ("jobd.service", "jobworker@.service")}
    assert "EnvironmentFile=/etc/jobd/jobd.env" in units["jobd.service"]
    assert "ExecStart=/usr/local/bin/jobd\n" in units["jobd.service"]
    assert "EnvironmentFile=/etc/jobworker/%i.env" in units["jobworker@.service"]
    m = re.search(r"^ExecStart=/usr/local/bin/jobworker (.*)$", units["jobworker@.service"], re.M)
    help_text = run([binary("jobworker"), "--help"]).stdout
    for flag in re.findall(r"--[a-z-]+", m.group(1)):
        assert f"  {flag} " in help_text, flag
    for k in read_env_file(os.path.join(EX, "systemd", "jobworker.env")):
        assert f"[env: {k}]" in help_text, k
    for name, text in units.items():
        sections = re.findall(r"^\[(\w+)\]$", text, re.M)
        assert sections == ["Unit", "Service", "Install"], (name, sections)
        for line in text.splitlines():
            assert not line or line.startswith("#") or line.startswith("[") or "=" in line, (name, line)


# ---- the example files --------------------------------------------------------------------

def test_example_files():
    # classify.jsonl is what make-classify.py writes (deterministic), and shares its prefix
    r = run([sys.executable, os.path.join(EX, "make-classify.py")], timeout=60)
    assert r.returncode == 0, r.stderr
    committed = open(os.path.join(EX, "classify.jsonl")).read()
    assert r.stdout == committed, "examples/classify.jsonl is stale: rerun examples/make-classify.py"
    lines = [json.loads(x) for x in committed.splitlines()]
    assert len(lines) >= 200 and len({x["custom_id"] for x in lines}) == len(lines)
    prefix = lines[0]["body"]["messages"][:-1]
    assert len(prefix[0]["content"]) > 1000, "the shared system prompt should be long"
    for x in lines:
        assert x["url"] == "/v1/chat/completions" and x["body"]["messages"][:-1] == prefix, x["custom_id"]
        assert x["body"]["messages"][-1]["role"] == "user"
    assert len({x["body"]["messages"][-1]["content"] for x in lines}) > len(lines) // 2
    for name, url in (("hello.jsonl", "/v1/chat/completions"), ("completions.jsonl", "/v1/completions")):
        xs = [json.loads(l) for l in open(os.path.join(EX, name))]
        assert xs and all(x["url"] == url and x["method"] == "POST" for x in xs), name
        assert all(x["body"]["max_tokens"] <= 64 for x in xs), name      # quick on a CPU
        # the engine keeps OpenAI's defaults (temperature 1, top_p 1), at which
        # the 135M default model rambles: each example line sets its own
        assert all(x["body"].get("temperature", 1) <= 0.5 for x in xs), name
        assert all(x["body"].get("top_p", 1) < 1 for x in xs if x["body"]["temperature"] > 0), name
    assert all(isinstance(x["body"]["prompt"], str) for x in
               (json.loads(l) for l in open(os.path.join(EX, "completions.jsonl"))))
    # the receiver uses the standard library only
    src = open(os.path.join(EX, "webhook_receiver.py")).read()
    imported = set(re.findall(r"^(?:from|import) (\w+)", src, re.M))
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


# ---- make run on another file -------------------------------------------------------------

def test_run_default_on_the_tools_example():
    need_model()
    r = run([os.path.join(ROOT, "scripts/run-default")], env={"FILE": "examples/tools.jsonl"},
            timeout=TIMEOUT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    assert "batch completed: 6 completed, 0 failed of 6" in out, out
    # the forced single call and the replayed turn answer with calls
    assert re.search(r"\[tools-classify\] \(tool_calls, \d+\+\d+ tokens\) -> route_ticket\(\{", out), out
    assert re.search(r"\[tools-named\] \(stop, [^\n]*\n?\s*-> save_contact\(\{", out), out
    assert "[tools-none] (stop" in out and "-> " not in out.split("[tools-none]")[1].split("\n")[0], out


def test_run_default_on_the_completions_example():
    need_model()
    r = run([os.path.join(ROOT, "scripts/run-default")], env={"FILE": "examples/completions.jsonl"},
            timeout=TIMEOUT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    assert "submitted examples/completions.jsonl (4 requests)" in out, out
    assert "batch completed: 4 completed, 0 failed of 4" in out, out
    ids = [json.loads(l)["custom_id"] for l in open(os.path.join(EX, "completions.jsonl"))]
    pos = [out.index(f"[{c}] (") for c in ids]
    assert pos == sorted(pos), out                     # answers in input order
    assert "endpoint   /v1/completions" in out, out
    m = re.search(r"usage: (\d+) input tokens \((\d+) from the prefix cache\), (\d+) output tokens", out)
    assert m and int(m.group(1)) > 0 and int(m.group(3)) > 0, out
    # cost = the price table (20000 / 80000 micro-dollars per 1M) applied per request, rounded per request
    c = re.search(r"cost: \$(\d+\.\d{6}) \((\d+) micro-dollars", out)
    assert c and round(float(c.group(1)) * 1e6) == int(c.group(2)), out
    assert c and int(c.group(2)) <= (int(m.group(1)) * 20000 + int(m.group(3)) * 80000) / 1e6 + 4, out


def test_run_default_on_the_responses_example():
    """examples/responses.jsonl (/v1/responses lines: string input with
    instructions, an item conversation, a text.format json_schema) through
    `make run FILE=...`: jobctl submits it for /v1/responses, every line
    completes, and its answers print in input order."""
    need_model()
    r = run([os.path.join(ROOT, "scripts/run-default")], env={"FILE": "examples/responses.jsonl"},
            timeout=TIMEOUT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    lines = [json.loads(l) for l in open(os.path.join(EX, "responses.jsonl"))]
    assert all(x["url"] == "/v1/responses" for x in lines)
    assert f"batch completed: {len(lines)} completed, 0 failed of {len(lines)}" in out, out
    assert "endpoint   /v1/responses" in out, out
    pos = [out.index(f"[{x['custom_id']}] (completed, ") for x in lines]
    assert pos == sorted(pos), out
    schema_line = next(l for l in out.splitlines() if l.startswith("[resp-3] "))
    answer = json.loads(schema_line.split(" tokens) ", 1)[1])
    assert set(answer) == {"name", "country"}, answer
