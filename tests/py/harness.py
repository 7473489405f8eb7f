"""tests/py/harness.py - helpers for Python integration suites.

Mirrors tests/th_proc.c: a private temp dir, free loopback ports, starting
the project's binaries (or any command) with logs captured, waiting for an
HTTP endpoint, and stopping them with SIGTERM or SIGKILL. Everything a test
starts is killed and every temp dir removed when the test process ends
(runner.py calls cleanup()).

PostgreSQL: with JOBD_TEST_DATABASE set to a server URL (scripts/pg-cluster
start prints one), every jobd started here with --data DIR gets
JOBD_DATABASE = a database of its own on that server ("py_<hash of DIR>",
made afresh the first time this process sees DIR), so the same suites run
on either store engine:

    url=$(scripts/pg-cluster start /tmp/pg) &&
    JOBD_TEST_DATABASE=$url .venv/bin/python tests/py/runner.py test_jobd_lease

S3: with JOBD_TEST_S3_ENDPOINT set to an S3 server (scripts/s3-server start
prints one; its bucket "jobd", credentials jobd-test / jobd-test-secret),
every such jobd also gets JOBD_FILES = s3://jobd/py-<hash of DIR> and the
AWS_* variables, so the suites run with the files in object storage:

    ep=$(scripts/s3-server start /tmp/s3) &&
    JOBD_TEST_S3_ENDPOINT=$ep .venv/bin/python tests/py/runner.py test_jobd_api
"""
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_procs = []
_dirs = []
_pg_dbs = {}  # database name -> URL, made by this process


class Skip(Exception):
    """Raise to mark a test as skipped, with the reason."""


def tmpdir():
    d = tempfile.mkdtemp(prefix="thpy-")
    _dirs.append(d)
    return d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(name, asan=True, optimised=False):
    """Path of a built binary: the sanitised one by default; asan=False the
    optimised one when run alone, but TH_BIN_DIR (make test: the sanitised
    build) wins, so that the same tests also run under ASan+UBSan.
    optimised=True: always the optimised build ($BUILD, default build/), for
    a real model generating many tokens (the guide's exception; the same
    code paths run sanitised on small inputs in other tests)."""
    if optimised:
        return os.path.join(ROOT, os.environ.get("BUILD") or "build", name)
    sub = os.environ.get("TH_BIN_DIR") or ("build/asan" if asan else "build")
    return os.path.join(ROOT, sub, name)


def pg_url_for(data_dir):
    """The JOBD_TEST_DATABASE database of a data directory (None without it)."""
    url = os.environ.get("JOBD_TEST_DATABASE")
    if not url:
        return None
    name = "py_" + hashlib.sha1(os.path.realpath(data_dir).encode()).hexdigest()[:16]
    if name not in _pg_dbs:
        head, _, tail = url.partition("://")
        auth, slash, rest = tail.partition("/")
        query = rest.partition("?")[2]
        for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
            r = subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        _pg_dbs[name] = f"{head}://{auth}/{name}" + (f"?{query}" if query else "")
    return _pg_dbs[name]


S3_KEY, S3_SECRET, S3_BUCKET = "jobd-test", "jobd-test-secret", "jobd"


def s3_env(endpoint, prefix):
    """The environment of a jobd keeping its files under s3://jobd/prefix."""
    return {"JOBD_FILES": f"s3://{S3_BUCKET}/{prefix}", "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}


def s3_prefix_for(data_dir):
    """The JOBD_TEST_S3_ENDPOINT prefix of a data directory's files (None without it)."""
    if not os.environ.get("JOBD_TEST_S3_ENDPOINT"):
        return None
    return "py-" + hashlib.sha1(os.path.realpath(data_dir).encode()).hexdigest()[:16]


def s3_keys(endpoint, prefix):
    """The object keys under prefix/ in the test bucket (a signed ListObjectsV2
    by curl, up to 1000)."""
    import re
    r = subprocess.run(["curl", "-s", "--fail-with-body", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u",
                        f"{S3_KEY}:{S3_SECRET}", "-H",
                        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                        f"{endpoint}/{S3_BUCKET}?list-type=2&prefix={prefix}%2F"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return re.findall(r"<Key>([^<]*)</Key>", r.stdout)


def _jobd_env(argv, env):
    """env plus JOBD_DATABASE when argv runs jobd on a --data DIR and
    JOBD_TEST_DATABASE is set; plus the S3 file store when
    JOBD_TEST_S3_ENDPOINT is."""
    if not argv or os.path.basename(argv[0]) != "jobd":
        return env
    s3 = os.environ.get("JOBD_TEST_S3_ENDPOINT")
    if s3 and not (env and "JOBD_FILES" in env) and "--data" in " ".join(argv):
        data = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--data"), None)
        data = data or next((a[7:] for a in argv if a.startswith("--data=")), None)
        if data:
            env = {**(env or {}), **s3_env(s3, s3_prefix_for(data))}
    if not os.environ.get("JOBD_TEST_DATABASE"):
        return env
    data = None
    for i, a in enumerate(argv):
        if a == "--data" and i + 1 < len(argv):
            data = argv[i + 1]
        elif a.startswith("--data="):
            data = a[len("--data="):]
    if data is None or (env and "JOBD_DATABASE" in env):
        return env
    out = dict(env or {})
    out["JOBD_DATABASE"] = pg_url_for(data)
    return out


class _PgCursor:
    def __init__(self, rows):
        self._rows = rows

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self):
        return list(self._rows)

    def __iter__(self):
        return iter(self._rows)


class _PgDb:
    """The little of sqlite3.Connection the suites use (execute with ?
    parameters, fetchone / fetchall, close), through psql."""

    def __init__(self, url):
        self.url = url

    @staticmethod
    def _literal(v):
        if v is None:
            return "NULL"
        if isinstance(v, bool) or isinstance(v, int):
            return str(int(v))
        return "'" + str(v).replace("'", "''") + "'"

    def execute(self, sql, params=()):
        parts = sql.split("?")
        assert len(parts) == len(params) + 1, (sql, params)
        text = parts[0] + "".join(self._literal(p) + rest for p, rest in zip(params, parts[1:]))
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-F", "\x1f", "-P", "null=\x1e",
                            "-v", "ON_ERROR_STOP=1", self.url, "-c", text],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rows = []
        for line in r.stdout.splitlines():
            row = []
            for v in line.split("\x1f"):
                if v == "\x1e":
                    row.append(None)
                elif v.lstrip("-").isdigit():
                    row.append(int(v))
                else:
                    row.append(v)
            rows.append(tuple(row))
        return _PgCursor(rows)

    def close(self):
        pass


def db_connect(data_dir):
    """A connection to the store of a data directory for direct reads: the
    SQLite file, or the JOBD_TEST_DATABASE database (execute / fetchone /
    fetchall / close either way; ? parameters)."""
    url = pg_url_for(data_dir)
    if url:
        return _PgDb(url)
    import sqlite3
    return sqlite3.connect(os.path.join(data_dir, "jobd.db"))


def on_pg():
    return bool(os.environ.get("JOBD_TEST_DATABASE"))


class Proc:
    def __init__(self, argv, env=None, cwd=None):
        self.log_path = os.path.join(tmpdir(), "proc.log")
        self._log = open(self.log_path, "wb")
        env = _jobd_env(argv, env)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.p = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                  env=full_env, cwd=cwd)
        _procs.append(self)

    def wait_http(self, port, path="/healthz", timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise AssertionError(f"process exited ({self.p.returncode}): {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                    if 200 <= r.status < 300:
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"no answer on port {port} within {timeout} s")

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode

    def log(self):
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def run(argv, timeout=60, env=None, input=None):
    """Run to completion; returns CompletedProcess with text stdout/stderr."""
    env = _jobd_env(argv, env)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env,
                          input=input)


def cleanup():
    for pr in _procs:
        if pr.p.poll() is None:
            pr.p.kill()
            pr.p.wait()
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)
    for name in list(_pg_dbs):
        subprocess.run(["psql", "-q", os.environ["JOBD_TEST_DATABASE"], "-c",
                        f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
                       capture_output=True, text=True, timeout=60)
        del _pg_dbs[name]
