"""/v1/responses batches end to end: a real jobd (keys auth) and a real
CPU jobworker on the default model (SmolLM2-135M-Instruct), driven by the
official `openai` SDK's documented batch flow with endpoint
"/v1/responses" (tests/py/responses_flow.py describes the checks: every
output body validates as the SDK's Response type, output_text works,
settings are echoed, a json_schema answer validates with jsonschema, and a
file of bad lines fails with one error per line naming its parameter).
Run with the current SDK major (3.57.0, from .cache/pydeps) and the .venv
one (1.109.1), against one jobd and worker.

Also: jobctl submit picks the endpoint from the file's first line, and the
worker declares /v1/responses (GET /v1/models lists it).
"""
import json
import os
import sys

from harness import ROOT, Proc, Skip, binary, run, tmpdir
from jobdlib import Jobd, create_key

TIMEOUT = 900
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WT = "worker-token-responses"
HERE = os.path.dirname(os.path.abspath(__file__))


def need_worker():
    for name in ("jobd", "jobworker", "jobctl"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    if not os.path.exists(MODEL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(MODEL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])


def start(args=()):
    need_worker()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "resp", asan=False)
    d = Jobd(data=data, key=key, asan=False,
             args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s", *args])
    w = Proc([binary("jobworker", asan=False, optimised=True), "--jobd", f"http://127.0.0.1:{d.port}", "--model", MODEL,
              "--model-id", "SmolLM2-135M-Instruct", "--alias", "smollm", "--worker-token", WT,
              "--name", "resp-w", "--threads", "2"])
    return d, key, w


def flow(d, key, w, version):
    env = dict(os.environ)
    env["PYTHONNOUSERSITE"] = "1"
    if version != "1.109.1":
        t = os.path.join(ROOT, ".cache/pydeps", f"openai-{version}")
        if not os.path.isdir(os.path.join(t, "openai")):
            raise Skip(f"{t} missing (scripts/install-deps installs it)")
        env["PYTHONPATH"] = t
    r = run([sys.executable, os.path.join(HERE, "responses_flow.py"), f"http://127.0.0.1:{d.port}/v1", key,
             version], timeout=800, env=env)
    assert r.returncode == 0 and f"responses-flow ok {version}" in r.stdout, \
        (r.stdout[-2000:] + r.stderr[-4000:] + "\nworker: " + w.log()[-1500:])


def test_responses_batch_through_the_openai_sdk_on_a_real_worker():
    try:
        import openai  # noqa: F401  (the .venv SDK)
    except ImportError:
        raise Skip("openai is not installed in .venv (scripts/install-deps)")
    d, key, w = start()
    flow(d, key, w, "3.57.0")
    flow(d, key, w, "1.109.1")
    models = d.json("GET", "/v1/models")["data"]
    smollm = next(m for m in models if m["id"] == "smollm")
    assert "/v1/responses" in smollm["endpoints"], smollm
    assert w.p.poll() is None, w.log()[-2000:]


def test_responses_fixture_bodies_validate_with_every_sdk_major():
    """The Response objects the C translation builds from chat bodies with
    tool calls, reasoning, logprobs and a cut (tests/fixtures/responses/
    from_chat.jsonl, kept equal to the C output by
    tests/unit/openai/test_responses.c) validate with SDK 3.57.0, 2.54.0 and
    1.109.1: the shapes a real worker cannot produce yet on a model without
    tool syntax are checked against the SDK too."""
    path = os.path.join(ROOT, "tests/fixtures/responses/from_chat.jsonl")
    for version in ("3.57.0", "2.54.0", "1.109.1"):
        env = {"PYTHONNOUSERSITE": "1"}
        if version != "1.109.1":
            t = os.path.join(ROOT, ".cache/pydeps", f"openai-{version}")
            if not os.path.isdir(os.path.join(t, "openai")):
                raise Skip(f"{t} missing (scripts/install-deps installs it)")
            env["PYTHONPATH"] = t
        r = run([sys.executable, os.path.join(HERE, "responses_flow.py"), "--fixture", path, version],
                timeout=120, env=env)
        assert r.returncode == 0 and f"responses-fixture ok {version}" in r.stdout, r.stdout + r.stderr[-3000:]


def test_responses_jobctl_submit_picks_the_endpoint_from_the_file():
    """Also: jobd's estimate (--tokenizer: the worker's tokenizer and chat
    template on the translated body) counts the input tokens the worker
    then reports."""
    d, key, w = start(["--tokenizer", f"smollm={MODEL}"])
    path = os.path.join(tmpdir(), "resp.jsonl")
    with open(path, "w") as f:
        for i in range(2):
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses",
                                "body": {"model": "smollm", "input": f"Say {i}.", "max_output_tokens": 16,
                                         "instructions": "Be brief.", "temperature": 0}}) + "\n")
    up = d.upload(open(path, "rb").read())
    r = d.call("POST", "/v1/batches/estimate", json.dumps({"input_file_id": up["id"], "endpoint": "/v1/responses"}),
               {"Content-Type": "application/json"})
    assert r.status == 200, r
    est = {x["model"]: x for x in r.json()["models"]}["smollm"]
    assert est["input_tokens_exact"] is True and est["max_output_tokens"] == 32, est
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key}
    r = run([binary("jobctl", asan=False), "submit", path, "--wait", "--timeout", "5m"], timeout=400, env=env)
    assert r.returncode == 0, r.stdout + r.stderr + w.log()[-1500:]
    batch_id = r.stdout.split()[0]
    b = d.json("GET", f"/v1/batches/{batch_id}")
    assert b["endpoint"] == "/v1/responses" and b["status"] == "completed", b
    out = d.call("GET", f"/v1/files/{b['output_file_id']}/content").body.decode()
    bodies = [json.loads(x)["response"]["body"] for x in out.splitlines()]
    assert len(bodies) == 2 and all(x["object"] == "response" for x in bodies), bodies
    # usage is counted like chat: the ledger holds the tokens the Responses report
    u = b["usage"]
    assert u["input_tokens"] == sum(x["usage"]["input_tokens"] for x in bodies) > 0, (u, bodies)
    assert u["output_tokens"] == sum(x["usage"]["output_tokens"] for x in bodies) > 0, (u, bodies)
    assert est["input_tokens"] == u["input_tokens"], (est, u)
    rep = d.json("GET", "/v1/usage?group_by=batch")
    assert [x["num_model_requests"] for x in rep["data"] if x["key"] == batch_id] == [2], rep


def test_responses_reasoning_item_on_a_scripted_thinking_model():
    """A /v1/responses line on a thinking template gives a reasoning output
    item before the message (tests/py/thinkmodel.py's scripted model; the
    thinking_token_budget extension closes its thinking after 8 tokens):
    the body validates as the SDK's Response, output_text is the answer,
    usage.output_tokens_details.reasoning_tokens counts the thinking; with
    reasoning.effort minimal (thinking off, as none; the 1.x SDK types know
    no "none") there is no reasoning item and no reasoning tokens."""
    try:
        from openai.types.responses import Response
    except ImportError:
        raise Skip("openai is not installed in .venv (scripts/install-deps)")
    import thinkmodel
    for name in ("jobd", "jobworker"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "resp", asan=False)
    d = Jobd(data=data, key=key, asan=False,
             args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s"])
    w = thinkmodel.start_worker(d, worker_token=WT)
    base = {"model": "tiny-think", "input": "Why is the sky blue?", "max_output_tokens": 40, "temperature": 0}
    lines = {"think": dict(base, reasoning={"effort": "high"}, thinking_token_budget=8),
             "none": dict(base, reasoning={"effort": "minimal"}, thinking_token_budget=8)}
    b = d.submit("".join(json.dumps({"custom_id": c, "method": "POST", "url": "/v1/responses", "body": x}) + "\n"
                         for c, x in lines.items()).encode(), query="?completion_window=1h&endpoint=/v1/responses")
    b = d.wait_batch(b["id"], statuses=("completed", "failed", "cancelled", "expired"), timeout=300)
    assert b["status"] == "completed", (b, w.log()[-2000:])
    out = d.call("GET", f"/v1/files/{b['output_file_id']}/content").body.decode()
    bodies = {json.loads(x)["custom_id"]: json.loads(x)["response"]["body"] for x in out.splitlines()}
    said = thinkmodel.TEXT.strip()

    r = Response.model_validate(bodies["think"])
    assert [o.type for o in r.output] == ["reasoning", "message"], r.output
    assert [c.text for c in r.output[0].content] == [said], r.output[0]
    assert r.output_text.startswith(said) and "</think>" not in r.output_text, r.output_text
    assert r.usage.output_tokens_details.reasoning_tokens > 8 and r.usage.output_tokens == 40, r.usage
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
    assert r.reasoning.effort == "high", r.reasoning

    r = Response.model_validate(bodies["none"])
    assert [o.type for o in r.output] == ["message"], r.output
    assert r.usage.output_tokens_details.reasoning_tokens == 0, r.usage
    assert r.output_text.strip().startswith(said), r.output_text
