"""The official `openai` Python SDK against a real jobd (keys auth) and a real
CPU jobworker on the default model, once per SDK major: 1.109.1 (the last
1.x, in .venv from scripts/requirements-test.txt), 2.54.0 (the last 2.x) and
3.57.0 (the current major), the latter two from their own --target folders
made by scripts/install-deps (.cache/pydeps/openai-VERSION), put first on
sys.path of a subprocess running tests/py/sdk_flow.py (the flow and its
checks are described there).

Also the regression test for the one status-code misuse found: a disabled
webhook endpoint answered 409, which the SDKs retry; it is a permanent state
and now answers 400 endpoint_disabled, seen by the SDK after one request.
"""
import os
import sys
import time

from harness import ROOT, Skip, binary, run, tmpdir
from jobdlib import Jobd, create_key

TIMEOUT = 900
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WT = "worker-token-sdk"
HERE = os.path.dirname(os.path.abspath(__file__))


def need_worker():
    for name in ("jobd", "jobworker"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    if not os.path.exists(MODEL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(MODEL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])


def sdk_path(version):
    """PYTHONPATH entry for this SDK version ('' = the .venv one)."""
    if version == "1.109.1":
        try:
            import openai
        except ImportError:
            raise Skip("openai is not installed in .venv (scripts/install-deps)")
        assert openai.__version__ == version, openai.__version__
        return ""
    t = os.path.join(ROOT, ".cache/pydeps", f"openai-{version}")
    if not os.path.isdir(os.path.join(t, "openai")):
        raise Skip(f"{t} missing (scripts/install-deps installs it)")
    return t


def flow(version):
    path = sdk_path(version)
    need_worker()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "sdk", asan=False)
    d = Jobd(data=data, key=key, asan=False,
             args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s"])
    from harness import Proc
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", MODEL,
              "--model-id", "SmolLM2-135M-Instruct", "--alias", "smollm", "--worker-token", WT,
              "--name", "sdk-w", "--threads", "2"])
    env = dict(os.environ)
    env["PYTHONPATH"] = path
    env["PYTHONNOUSERSITE"] = "1"
    r = run([sys.executable, os.path.join(HERE, "sdk_flow.py"), f"http://127.0.0.1:{d.port}/v1", key, version],
            timeout=800, env=env)
    assert r.returncode == 0 and f"sdk-flow ok {version}" in r.stdout, \
        (r.stdout[-2000:] + r.stderr[-4000:] + "\nworker: " + w.log()[-1500:])
    assert w.p.poll() is None, w.log()[-2000:]


def test_openai_sdk_1_109_1_real_worker():
    flow("1.109.1")


def test_openai_sdk_2_54_0_real_worker():
    flow("2.54.0")


def test_openai_sdk_3_57_0_real_worker():
    flow("3.57.0")


def test_regression_webhook_disabled_endpoint_answered_409():
    """Bug: POST /v1/webhook_endpoints/{id}/test (and .../redeliver) on a
    disabled endpoint answered 409, which the SDK retries twice; a disabled
    endpoint stays disabled, so it is now 400 endpoint_disabled."""
    try:
        import openai
    except ImportError:
        raise Skip("openai is not installed in .venv (scripts/install-deps)")
    import test_webhooks as tw
    rx = tw.Receiver()
    rx.script["/gone"] = [410]
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "wh")
    d = Jobd(data=data, key=key, args=tw.FAST + ["--webhook-allow-private"])
    try:
        ep = d.json("POST", "/v1/webhook_endpoints", {"url": rx.url("/gone")})
        first = d.json("POST", f"/v1/webhook_endpoints/{ep['id']}/test")
        deadline = time.monotonic() + 30
        while d.json("GET", f"/v1/webhook_endpoints/{ep['id']}")["status"] != "disabled":
            assert time.monotonic() < deadline, "endpoint not disabled after a 410"
            time.sleep(0.05)
        for path in (f"/v1/webhook_endpoints/{ep['id']}/test",
                     f"/v1/webhook_endpoints/{ep['id']}/deliveries/{first['id']}/redeliver"):
            r = d.call("POST", path)
            assert r.status == 400 and r.json()["error"]["code"] == "endpoint_disabled", r
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{d.port}/v1", api_key=key, max_retries=2)
        seen = []
        try:
            client.post(f"/webhook_endpoints/{ep['id']}/test", cast_to=object)
            raise AssertionError("expected BadRequestError")
        except openai.BadRequestError as e:
            seen.append(e.code)
        # not retried (a retried 409 would sleep >= 0.5 s twice before giving up).
        # Race fix: this was also a wall-time bound (< 5 s), which a loaded machine
        # could exceed without any retry; the exact request count below is what
        # shows that the SDK tried once.
        assert seen == ["endpoint_disabled"], seen
        m = d.call("GET", "/metrics").body.decode()
        n = sum(int(float(l.rsplit(" ", 1)[1])) for l in m.splitlines()
                if l.startswith("jobd_http_requests_total{") and "/test" in l and 'status="400"' in l)
        assert n == 2, m  # the raw call above and the SDK's single try
    finally:
        rx.close()
