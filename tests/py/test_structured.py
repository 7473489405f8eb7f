"""Structured outputs end to end on the default model (release builds):
a jobd batch of 112 lines over twelve JSON Schemas (nested objects, bounded
arrays, enums, patterns, formats, anyOf, nullable type arrays, $defs/$ref
recursion, numeric bounds; chat via response_format json_schema, completions
via vLLM's guided_json) plus guided_choice and guided_regex lines, half greedy
and half seeded sampling: every output parses and validates with Python's
jsonschema (Draft 2020-12, formats checked), every choice/regex line matches,
every finish_reason is "stop", message.refusal is null and usage is filled.
Also: a schema the compiler cannot enforce fails the batch at validation
with the line number, param and code; `jobworker --batch-file` and `--json`
honour the same fields.

Runtime: about a minute on a 2-core machine (the batch is ~4k output tokens).
"""
import json
import os
import re
import subprocess
import tempfile

import structlib
from harness import Skip, binary
from jobdlib import Jobd
from test_jobworker import MODEL, start_jobd, start_worker, wait_done
from test_jobworker import need as need_model

from workerlib import read_jsonl

try:
    import jsonschema  # scripts/requirements-test.txt
    V = jsonschema.Draft202012Validator
except ImportError:
    jsonschema = None

# the end-to-end batch generates ~112 constrained answers on the default
# model (about a minute on 2 idle cores); generous for a loaded machine
TIMEOUT = 900


def need():
    if jsonschema is None:
        raise Skip("jsonschema is not installed (scripts/requirements-test.txt)")
    need_model()


def check_output(i, body):
    """Assert that line i's response body satisfies its constraint."""
    _, _, kind, spec = structlib.body_for(i)
    text, finish = structlib.output_text(body)
    assert finish == "stop", (i, finish, text)
    if kind == "json":
        inst = json.loads(text)
        V(spec, format_checker=V.FORMAT_CHECKER).validate(inst)
    elif kind == "choice":
        assert text in spec, (i, text)
    else:
        assert re.fullmatch(spec, text), (i, text)
    ch = body["choices"][0]
    if "message" in ch:
        assert ch["message"]["refusal"] is None, ch
        assert body["object"] == "chat.completion"
    else:
        assert body["object"] == "text_completion"
    u = body["usage"]
    assert u["completion_tokens"] >= 1 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u


def test_structured_batch_every_output_validates():
    need()
    d = start_jobd()
    w = start_worker(d, optimised=True)
    n = 112
    # one batch per endpoint (an OpenAI batch has one): chat lines use
    # response_format / guided_choice, completions lines guided_json / guided_regex
    by_url = {}
    for line in structlib.lines(n):
        by_url.setdefault(json.loads(line)["url"], []).append(line)
    assert len(by_url["/v1/chat/completions"]) >= 80 and len(by_url["/v1/completions"]) >= 10
    bids = []
    for url, ls in sorted(by_url.items()):
        b = d.submit(("\n".join(ls) + "\n").encode(), query="?completion_window=1h&endpoint=" + url)
        bids.append((b["id"], len(ls)))
    out = []
    for bid, cnt in bids:
        b = wait_done(d, bid, timeout=900, worker=w)
        assert b["status"] == "completed", b
        assert b["request_counts"] == {"total": cnt, "completed": cnt, "failed": 0}, b
        out += read_jsonl(d, b["output_file_id"])
    assert len(out) == n
    kinds = set()
    for o in out:
        i = int(o["custom_id"][1:])
        assert o["error"] is None and o["response"]["status_code"] == 200, o
        check_output(i, o["response"]["body"])
        kinds.add(structlib.body_for(i)[2])
    assert kinds == {"json", "choice", "regex"}


def test_structured_unsupported_schema_fails_the_batch_at_validation():
    need()
    d = Jobd(asan=False)
    good = structlib.lines(2)
    bad_schema = {"model": "smollm", "messages": [{"role": "user", "content": "x"}],
                  "response_format": {"type": "json_schema", "json_schema": {
                      "name": "s", "strict": True,
                      "schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}}
    bad_regex = {"model": "smollm", "prompt": "x", "guided_regex": "(a|b"}
    lines = good + [json.dumps({"custom_id": "b1", "method": "POST", "url": "/v1/chat/completions",
                                "body": bad_schema})]
    b = d.submit(("\n".join(lines) + "\n").encode(), query="?completion_window=1h")
    b = d.wait_batch(b["id"], statuses=("failed", "in_progress"))
    assert b["status"] == "failed", b
    e = b["errors"]["data"][0]
    assert e["line"] == 3 and e["code"] == "unsupported_value", e
    assert e["param"] == "body.response_format.json_schema.schema", e
    assert "keyword 'not' is not supported" in e["message"] and "properties/a" in e["message"], e
    # a completions batch with a bad regex: line 1
    b = d.submit((json.dumps({"custom_id": "r", "method": "POST", "url": "/v1/completions",
                              "body": bad_regex}) + "\n").encode(),
                 query="?completion_window=1h&endpoint=/v1/completions")
    b = d.wait_batch(b["id"], statuses=("failed", "in_progress"))
    assert b["status"] == "failed", b
    e = b["errors"]["data"][0]
    assert e["line"] == 1 and e["param"] == "body.guided_regex" and "missing ')'" in e["message"], e


def test_structured_batch_file_and_json_cli():
    need()
    tmp = tempfile.mkdtemp()
    picks = [0, 3, 7, 12, 13, 45]      # sentiment, order, tree (recursion), choice, regex, completions
    path = os.path.join(tmp, "in.jsonl")
    with open(path, "w") as f:
        for i in picks:
            url, body, _, _ = structlib.body_for(i)
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": body}) + "\n")
    r = subprocess.run([binary("jobworker", asan=False, optimised=True), "--model", MODEL, "--threads", "2",
                        "--batch-file", path], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert sorted(o["custom_id"] for o in out) == sorted(f"r{i}" for i in picks)
    for o in out:
        check_output(int(o["custom_id"][1:]), o["response"]["body"])
    m = re.search(r'"masks":(\d+)', r.stderr)
    assert m and int(m.group(1)) > 0, r.stderr[-500:]
    # --json: one request body
    _, body, _, _ = structlib.body_for(2)
    jp = os.path.join(tmp, "one.json")
    with open(jp, "w") as f:
        json.dump(body, f)
    r = subprocess.run([binary("jobworker", asan=False, optimised=True), "--model", MODEL, "--threads", "2", "--json", jp],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    check_output(2, json.loads(r.stdout))
    # --json with an unsupported schema: an OpenAI-shaped 400 body, nonzero exit
    body["response_format"]["json_schema"]["schema"] = {"type": "string", "format": "ipv6"}
    with open(jp, "w") as f:
        json.dump(body, f)
    r = subprocess.run([binary("jobworker", asan=False, optimised=True), "--model", MODEL, "--threads", "2", "--json", jp],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    err = json.loads(r.stdout or r.stderr.strip().splitlines()[-1])["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "response_format.json_schema.schema", err
    assert "ipv6" in err["message"], err
