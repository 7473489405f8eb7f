"""jobctl against a real jobd (started per test on loopback, with an API key).

What the daemon in this tree cannot do yet is skipped with the missing route
named: it never finishes a batch (the worker routes are not served), so the
results/errors download of a finished batch is not exercised here; batches
do reach `failed` (invalid input) and `cancelled` (cancelled while
validating), which covers the outcome exit codes of `wait`.
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

ID_RE = re.compile(r"^batch_[0-9a-z]+\n$")
COMMANDS = ["submit", "status", "wait", "list", "results", "errors", "cancel", "retry-dead",
            "usage", "workers", "models", "files"]


def start(tenant="alpha"):
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, tenant)
    d = Jobd(data=data, key=key)
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
        ["submit", f, "--endpoint", "/v1/embeddings"],
        ["retry-dead"],
        ["retry-dead", "req_x", "--batch", "batch_x"],
        ["files", "frobnicate", "file-x"],
        ["files", "get"],
        ["wait", "batch_x", "--interval", "soon"],
        ["--url", "ftp://x", "status", "batch_x"],
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
    if d.json("GET", f"/v1/batches/{bid}")["in_progress_at"] is not None:
        raise Skip("validation finished before the cancel arrived (a cancelled in_progress batch "
                   "needs the finalizer, not wired into jobd yet)")
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


def test_results_of_a_finished_batch():
    d, env = start()
    if route_missing(d, "POST", "/v1/worker/register"):
        raise Skip("jobd here does not serve POST /v1/worker/register, /v1/worker/lease or "
                   "/v1/worker/results, so no batch can finish; results/errors downloads of a "
                   "finished batch are untested")
    raise Skip("the worker routes exist: drive a real jobworker here (follow-up)")


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
    f = write(os.path.join(tmpdir(), "a.jsonl"), jsonl(1))
    bid = jobctl(["submit", f], env).stdout.strip()
    cases = [(["workers"], "GET", "/v1/workers"), (["models"], "GET", "/v1/models"),
             (["usage", "--since", "2026-11-01"], "GET", "/v1/usage"),
             (["retry-dead", "--batch", bid], "POST", f"/v1/batches/{bid}/dead_letters/retry"),
             (["retry-dead", "req_01jf8y2n6q3c5v7x9z1b3d5f7h"], "POST",
              "/v1/dead_letters/req_01jf8y2n6q3c5v7x9z1b3d5f7h/retry")]
    n_checked = 0
    for args, method, path in cases:
        r = jobctl(args, env)
        if route_missing(d, method, path):
            assert r.returncode == 23, (args, r.returncode, r.stderr)
            assert f"jobd has no route {method} {path}" in r.stderr, r.stderr
            assert r.stdout == ""
            n_checked += 1
        else:
            assert r.returncode in (0, 22), (args, r.returncode, r.stderr)
    if n_checked == 0:
        raise Skip("every route exists in this jobd")
    # --webhook: jobd takes no per-batch webhook, so nothing is submitted
    r = jobctl(["submit", f, "--webhook", "http://127.0.0.1:9/hook"], env)
    assert r.returncode == 1 and "--webhook" in r.stderr and r.stdout == ""


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
