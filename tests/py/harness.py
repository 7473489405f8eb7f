"""tests/py/harness.py - helpers for Python integration suites.

Mirrors tests/th_proc.c: a private temp dir, free loopback ports, starting
the project's binaries (or any command) with logs captured, waiting for an
HTTP endpoint, and stopping them with SIGTERM or SIGKILL. Everything a test
starts is killed and every temp dir removed when the test process ends
(runner.py calls cleanup()).
"""
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


def binary(name, asan=True):
    """Path of a built binary: the sanitised one by default."""
    sub = os.environ.get("TH_BIN_DIR") or ("build/asan" if asan else "build")
    return os.path.join(ROOT, sub, name)


class Proc:
    def __init__(self, argv, env=None, cwd=None):
        self.log_path = os.path.join(tmpdir(), "proc.log")
        self._log = open(self.log_path, "wb")
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
