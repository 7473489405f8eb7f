"""PostgreSQL store faults. The database is stopped in the middle
of a batch and started again: jobd recovers without a restart, answers 503
with Retry-After while the database is away, and the batch completes with
every custom_id exactly once. The suite starts its own throwaway cluster
(scripts/pg-cluster) so that it can stop it; it skips where PostgreSQL is not
installed."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

from harness import ROOT, Proc, Skip, binary, run, tmpdir
from jobdlib import Jobd, jsonl, multipart
from workerlib import read_jsonl

WT = "worker-secret-1"
FAST = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--retry-backoff", "1s",
        "--window-min", "1s"]


def pg(cmd, d):
    return subprocess.run([os.path.join(ROOT, "scripts", "pg-cluster"), cmd, d], capture_output=True, text=True,
                          timeout=120)


def wait_done(d, batch_id, timeout):
    """The batch once terminal; 503s (the database coming back) are retried."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = d.call("GET", f"/v1/batches/{batch_id}")
        assert r.status in (200, 503), r
        if r.status == 200 and r.json()["status"] in ("completed", "failed", "expired", "cancelled"):
            return r.json()
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} not done after {timeout} s")


def wakeups(d):
    """jobd_lease_wakeups_total of d's /metrics."""
    r = d.call("GET", "/metrics")
    assert r.status == 200, r
    for ln in r.body.decode().splitlines():
        if ln.startswith("jobd_lease_wakeups_total "):
            return int(ln.split()[1])
    raise AssertionError("jobd_lease_wakeups_total missing")


def test_pg_outage_mid_batch_recovers_without_restart_nothing_lost_or_doubled():
    # outside tmpdir(): its 0700 parent would keep the postgres user out
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    r = pg("start", cluster)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    try:
        data = os.path.join(tmpdir(), "data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", url])
        assert k.returncode == 0, k.stderr
        d = Jobd(data=data, key=k.stdout.strip(), args=FAST + ["--database", url])
        n = 400
        b = d.submit(jsonl(n))
        d.wait_batch(b["id"], statuses=("in_progress",))
        w = Proc([sys.executable, os.path.join(ROOT, "tests", "py", "workerlib.py"), str(d.port), WT],
                 cwd=os.path.join(ROOT, "tests", "py"))
        deadline = time.monotonic() + 60
        while d.json("GET", f"/v1/batches/{b['id']}")["request_counts"]["completed"] < n // 8:
            assert time.monotonic() < deadline, "no progress before the outage"
            time.sleep(0.05)
        wakeups0 = wakeups(d)
        assert pg("halt", cluster).returncode == 0
        away = d.call("GET", f"/v1/batches/{b['id']}")
        assert away.status == 503 and away.headers.get("retry-after"), away
        # /readyz says why (a load balancer takes this instance out meanwhile)
        rz = d.call("GET", "/readyz")
        assert rz.status == 503 and rz.headers.get("retry-after"), rz
        assert "database is unreachable" in rz.json()["error"]["message"], rz
        time.sleep(2)
        assert pg("resume", cluster).returncode == 0
        deadline = time.monotonic() + 60
        while d.call("GET", "/readyz").status != 200:
            assert time.monotonic() < deadline, "not ready again after the database came back"
            time.sleep(0.1)
        assert d.json("GET", "/readyz") == {"status": "ready", "database": "ok"}
        # the LISTEN connection came back too: its reconnect counts as a
        # wake-up (notifications sent while it was down are lost), and only
        # a live LISTEN connection moves the counter
        while wakeups(d) <= wakeups0:
            assert time.monotonic() < deadline, "the LISTEN connection did not come back"
            time.sleep(0.1)
        done = wait_done(d, b["id"], 120)
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": n, "completed": n, "failed": 0}, done
        lines = read_jsonl(d, done["output_file_id"])
        ids = sorted(x["custom_id"] for x in lines)
        assert ids == sorted(f"t-{i}" for i in range(1, n + 1)), (len(ids), len(set(ids)))
        w.stop()
        assert d.proc.p.poll() is None, "jobd exited during the outage"
        d.proc.stop()
    finally:
        pg("stop", cluster)



def psql(url, sql):
    r = subprocess.run(["psql", url, "-X", "-At", "-c", sql], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def listeners(url):
    """pids of the sessions whose last statement was a LISTEN."""
    out = psql(url, "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()")
    return [int(p) for p in out.splitlines() if p]


class ListenBreaker:
    """A TCP proxy in front of PostgreSQL that, while `fail` > 0, rewrites
    the next `fail` simple-protocol LISTEN queries it sees into a statement
    that fails (SELECT 1/0): the server answers an error, the session stays
    up, and it is not listening."""

    def __init__(self, host, port):
        self.to = (host, port)
        self.fail = 0
        self.rewritten = 0
        self.lock = threading.Lock()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection(self.to)
            threading.Thread(target=self._down, args=(u, c), daemon=True).start()
            threading.Thread(target=self._up, args=(c, u), daemon=True).start()

    @staticmethod
    def _read(s, n):
        b = b""
        while len(b) < n:
            x = s.recv(n - len(b))
            if not x:
                raise EOFError
            b += x
        return b

    @staticmethod
    def _close(s):  # shutdown, not only close: the other thread is blocked in recv on it
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _down(self, u, c):  # server -> client, as is
        try:
            while True:
                x = u.recv(65536)
                if not x:
                    break
                c.sendall(x)
        except OSError:
            pass
        self._close(c)

    def _up(self, c, u):  # client -> server, message by message
        try:
            while True:  # untyped: an SSLRequest (answered by one byte) or the startup packet
                n = struct.unpack("!I", self._read(c, 4))[0]
                body = self._read(c, n - 4)
                u.sendall(struct.pack("!I", n) + body)
                if struct.unpack("!I", body[:4])[0] != 80877103:  # not an SSLRequest
                    break
            while True:
                t = self._read(c, 1)
                n = struct.unpack("!I", self._read(c, 4))[0]
                body = self._read(c, n - 4)
                if t == b"Q" and body.startswith(b"LISTEN "):
                    with self.lock:
                        if self.fail > 0:
                            self.fail -= 1
                            self.rewritten += 1
                            body = b"SELECT 1/0\0"
                u.sendall(t + struct.pack("!I", len(body) + 4) + body)
        except (OSError, EOFError):
            pass
        self._close(u)


def test_pg_relisten_that_fails_on_the_new_session_is_retried():
    """Regression: when the LISTEN connection was cut and the LISTEN on the
    new session failed (the server answered an error, the session stayed
    up), jobd never tried again: the connection was up but deaf, wake-ups
    stopped for good and long polls fell back to polling. jobd reaches
    PostgreSQL through a proxy that turns the next three LISTENs into a
    failing statement; the LISTEN session is terminated; jobd must LISTEN
    again on a fresh session (backing off between tries) and wake-ups must
    flow."""
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    r = pg("start", cluster)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    try:
        u = urllib.parse.urlsplit(url)
        proxy = ListenBreaker(u.hostname, u.port)
        via = url.replace(f"{u.hostname}:{u.port}", f"127.0.0.1:{proxy.port}") + "?sslmode=disable&gssencmode=disable"
        data = os.path.join(tmpdir(), "data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", via])
        assert k.returncode == 0, k.stderr
        d = Jobd(data=data, key=k.stdout.strip(), args=FAST + ["--database", via])
        deadline = time.monotonic() + 30
        while not listeners(url):
            assert time.monotonic() < deadline, "jobd never LISTENs"
            time.sleep(0.1)
        [pid] = listeners(url)
        with proxy.lock:
            proxy.fail = 3
        psql(url, f"SELECT pg_terminate_backend({pid})")
        deadline = time.monotonic() + 30
        while not listeners(url):
            assert time.monotonic() < deadline, \
                f"jobd did not LISTEN again ({proxy.rewritten} LISTENs failed): " + d.proc.log()[-1500:]
            time.sleep(0.1)
        assert proxy.rewritten == 3, proxy.rewritten
        assert "the LISTEN connection is down" in d.proc.log(), d.proc.log()[-1500:]
        # and a wake-up reaches it: new work NOTIFYs
        w0 = wakeups(d)
        d.submit(jsonl(3))
        deadline = time.monotonic() + 30
        while wakeups(d) <= w0:
            assert time.monotonic() < deadline, "no wake-up after the LISTEN came back"
            time.sleep(0.1)
        assert d.proc.p.poll() is None, "jobd exited"
        d.proc.stop()
    finally:
        pg("stop", cluster)


def test_pg_statement_timeout_cancels_a_slow_statement_503_and_the_connection_serves_again():
    """--db-statement-timeout reaches every session jobd opens: a statement
    the server runs longer than that is cancelled by the server (SQLSTATE
    57014), the call answers 503 with Retry-After and stores nothing, and
    the same connections serve the next calls. The slow statement is made
    so by the test: a trigger that sleeps 3 s on every INSERT into files,
    against a 300 ms timeout (a 10x margin either way)."""
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    r = pg("start", cluster)
    if r.returncode == 2:
        raise Skip("PostgreSQL is not installed")
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    try:
        data = os.path.join(tmpdir(), "data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", url])
        assert k.returncode == 0, k.stderr
        d = Jobd(data=data, key=k.stdout.strip(),
                 args=FAST + ["--database", url, "--db-statement-timeout", "300ms", "--db-threads", "1"])
        d.upload(jsonl(2))  # migrated, serving
        psql(url, "CREATE FUNCTION slow_files() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$; "
                  "CREATE TRIGGER slow_files BEFORE INSERT ON files FOR EACH ROW EXECUTE FUNCTION slow_files()")
        t0 = time.monotonic()
        r = d.upload(jsonl(3), expect=503)
        took = time.monotonic() - t0
        assert took < 2.5, took  # cancelled at 300 ms, not run to its 3 s
        assert r.get("error"), r
        ups = [f for f in d.json("GET", "/v1/files")["data"]]
        assert len(ups) == 1, ups  # nothing stored by the cancelled call
        assert "canceling statement due to statement timeout" in d.proc.log(), d.proc.log()[-2000:]
        psql(url, "DROP TRIGGER slow_files ON files")
        # the same single handler connection (--db-threads 1) serves again
        d.upload(jsonl(3))
        assert len(d.json("GET", "/v1/files")["data"]) == 2
        assert d.proc.p.poll() is None, "jobd exited"
        d.proc.stop()
    finally:
        pg("stop", cluster)


def test_pg_half_open_connection_found_within_the_keepalive_interval_then_serves_again():
    """A half-open connection: PostgreSQL's host drops off the network
    without a word (its cable pulled: tests/py/hostnet.py cut, packets
    dropped, no RST, no ICMP from it), so jobd's established connections get
    no answer and no error. Without keepalives and tcp_user_timeout a
    statement sent on one waits for the kernel's retransmission limit
    (about 15 minutes) and an idle one stays 'up' for 2 hours. jobd
    (sdb_pg.c: keepalives after 10 s idle every 5 s, 3 probes;
    tcp_user_timeout 30 s) must answer 503 within that bound, reconnect
    once the host is back, and serve again. jobd and the test's client
    share one namespace, PostgreSQL has its own; the bound is checked on
    the first 503 after the cut (the GET that is sent at once waits on a
    dead connection), with 15 s of slack for a loaded box."""
    from hostnet import Net
    cluster = os.path.join(tempfile.gettempdir(), f"jobd-pg-{uuid.uuid4().hex[:12]}")
    net = None
    started = False
    try:
        net = Net(["pg", "j1"])
        net.enter("j1")  # this thread, and what it starts, is host j1
        r = subprocess.run(net.cmd("pg", ["env", f"PG_LISTEN={net.addr('pg')}",
                                          os.path.join(ROOT, "scripts", "pg-cluster"), "start", cluster]),
                           capture_output=True, text=True, timeout=120)
        if r.returncode == 2:
            raise Skip("PostgreSQL is not installed")
        assert r.returncode == 0, r.stderr
        started = True
        url = r.stdout.strip()
        assert net.addr("pg") in url, url
        data = os.path.join(tmpdir(), "data")
        k = run([binary("jobd"), "keys", "create", "--tenant", "alpha", "--data", data, "--database", url])
        assert k.returncode == 0, k.stderr
        d = Jobd(data=data, key=k.stdout.strip(), args=FAST + ["--database", url])
        f = d.upload(jsonl(2))
        b = d.create_batch(f["id"])
        assert d.call("GET", "/readyz").status == 200
        net.cut("pg")
        t0 = time.monotonic()
        first = None
        while first is None:
            got = d.call("GET", f"/v1/batches/{b['id']}", timeout=120)
            assert got.status in (200, 503), got
            if got.status == 503:
                first = time.monotonic() - t0
                assert got.headers.get("retry-after"), got
            else:
                time.sleep(0.5)  # answered from a connection not yet used since the cut
            assert time.monotonic() - t0 < 45, "the dead connection was not noticed within 45 s"
        assert first < 45, first
        assert first >= 5, first  # silent: found by the timers, not by an error the cut sent back
        # down means down: /readyz says so (within connect_timeout, 5 s, per try)
        rz = d.call("GET", "/readyz", timeout=60)
        assert rz.status == 503 and rz.headers.get("retry-after"), rz
        net.mend("pg")
        t1 = time.monotonic()
        while d.call("GET", "/readyz", timeout=60).status != 200:
            assert time.monotonic() - t1 < 45, "not ready again after the host came back"
            time.sleep(0.2)
        back = time.monotonic() - t1
        # and serves: reads, and a write that commits. Each pooled
        # connection finds its own socket dead on its first call after the
        # outage (503, as a client retries it) and reconnects on the next.
        deadline = time.monotonic() + 45
        while True:
            g = d.call("GET", f"/v1/batches/{b['id']}")
            if g.status == 200:
                break
            assert g.status == 503 and time.monotonic() < deadline, g
            time.sleep(0.2)
        while True:
            ct, body = multipart({"purpose": "batch"}, {"file": ("input.jsonl", jsonl(4))})
            u = d.call("POST", "/v1/files", body, {"Content-Type": ct})
            if u.status == 200:
                f2 = u.json()
                break
            assert u.status == 503 and u.headers.get("retry-after") and time.monotonic() < deadline, u
            time.sleep(0.2)
        assert {x["id"] for x in d.json("GET", "/v1/files")["data"]} == {f["id"], f2["id"]}
        assert d.proc.p.poll() is None, "jobd exited"
        print(f"half-open: first 503 {first:.1f} s after the cut; ready {back:.1f} s after the host came back")
        d.proc.stop()
    finally:
        if started:
            subprocess.run(net.cmd("pg", ["env", f"PG_LISTEN={net.addr('pg')}",
                                          os.path.join(ROOT, "scripts", "pg-cluster"), "stop", cluster]),
                           capture_output=True, text=True, timeout=120)
        if net:
            net.close()
