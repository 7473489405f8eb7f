"""Result reuse on a real jobd with real CPU workers (spec/usage.md "Result
reuse"): a tenant resubmits a batch of deterministic lines after changing
10% of them; exactly the unchanged lines are answered from the first run
(byte-identical bodies to a fresh run with reuse off, but for the marks),
the changed and the non-deterministic ones are computed, nothing is reused
for another tenant or for a worker whose model file has another hash, and
the ledger (cost 0, reused_tokens) and the fleet view agree.

Runs on PostgreSQL too (JOBD_TEST_DATABASE, tests/py/harness.py)."""
import copy
import json
import os
import shutil

from harness import ROOT, Proc, Skip, binary, db_connect, run, tmpdir
from jobdlib import Jobd, create_key

TIMEOUT = 300
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WT = "worker-token-r"
PRICES = "smollm=150000:600000"
ARGS = ["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s", "--prices", PRICES]
# the per-request fields of a reused body (spec/usage.md): everything else is the original's bytes
PER_REQUEST = ("id", "created", "system_fingerprint")
RAW = {}  # batch id -> custom_id -> the body's bytes in the output file


def need():
    for name in ("jobd", "jobworker"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    if not os.path.exists(MODEL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(MODEL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])


def start_worker(d, model, name):
    return Proc([binary("jobworker", asan=False, optimised=True), "--jobd", f"http://127.0.0.1:{d.port}", "--model", model,
                 "--model-id", "SmolLM2-135M-Instruct", "--alias", "smollm", "--worker-token", WT,
                 "--name", name, "--threads", "1", "--pack-size", "8"])


def bodies(n_det=20, n_random=2):
    """n_det deterministic bodies (temperature 0, or a seed with temperature
    0.9) and n_random that are not (temperature 0.9, no seed)."""
    out = []
    for i in range(n_det):
        b = {"model": "smollm", "messages": [{"role": "user", "content": f"Name a colour, number {i}."}],
             "max_tokens": 6}
        if i % 4 == 3:
            b.update(temperature=0.9, seed=1000 + i)
        else:
            b["temperature"] = 0
        out.append(b)
    for i in range(n_random):
        out.append({"model": "smollm", "messages": [{"role": "user", "content": f"Any word {i}."}],
                    "max_tokens": 6, "temperature": 0.9})
    return out


def jsonl(bs, url="/v1/chat/completions"):
    return "".join(json.dumps({"custom_id": f"r-{i}", "method": "POST", "url": url,
                               "body": b}) + "\n" for i, b in enumerate(bs)).encode()


def run_batch(d, bs, key, reuse, workers, url="/v1/chat/completions"):
    f = d.upload(jsonl(bs, url), key=key)
    md = {"reuse": reuse} if reuse else None
    b = d.create_batch(f["id"], endpoint=url, key=key, completion_window="24h", **({"metadata": md} if md else {}))
    for w in workers:
        assert w.p.poll() is None, w.log()[-3000:]
    b = d.wait_batch(b["id"], statuses=("completed", "failed", "expired", "cancelled"), timeout=240, key=key)
    assert b["status"] == "completed", b
    out = d.call("GET", f"/v1/files/{b['output_file_id']}/content", key=key)
    assert out.status == 200, out
    raw = [x for x in out.body.decode().splitlines() if x.strip()]
    lines = [json.loads(x) for x in raw]
    by_cid = {x["custom_id"]: x["response"]["body"] for x in lines}
    assert len(by_cid) == len(bs), (b, lines)
    # the body's bytes as the output file has them: {..., "response": {..., "body": BODY}, "error": null}
    RAW[b["id"]] = {x["custom_id"]: r[r.index('"body":') + 7:r.rindex('},"error"')] for x, r in zip(lines, raw)}
    return b, by_cid


def reused(by_cid):
    return sorted(c for c, body in by_cid.items() if "reused_tokens" in body["usage"])


def strip(body):
    x = copy.deepcopy(body)
    for k in PER_REQUEST:
        x.pop(k, None)
    x["usage"].pop("reused_tokens", None)
    return x


def test_reuse_unchanged_lines_only_same_tenant_same_model_file():
    need()
    tmp = tmpdir()
    data = os.path.join(tmp, "data")
    ka, kb = create_key(data, "alpha", asan=False), create_key(data, "beta", asan=False)
    # a second model file: the same weights, one metadata byte changed (so another hash)
    other = os.path.join(tmp, "other", os.path.basename(MODEL))
    os.makedirs(os.path.dirname(other))
    shutil.copyfile(MODEL, other)
    with open(other, "r+b") as fh:
        head = fh.read(1 << 20)
        at = head.index(b"general.name")
        # key, then its type (u32) and length (u64), then the value's first byte
        pos = at + len(b"general.name") + 4 + 8
        fh.seek(pos)
        c = fh.read(1)
        fh.seek(pos)
        fh.write(c.swapcase() if c.isalpha() else b"X")
    d = Jobd(data=data, key=ka, asan=False, args=ARGS)
    w1 = start_worker(d, MODEL, "reuse-1")
    w2 = None
    try:
        first = bodies()
        b1, out1 = run_batch(d, first, ka, "on", [w1])
        assert reused(out1) == [], "nothing to reuse yet"
        # change 10% of the deterministic lines (2 of 20)
        second = copy.deepcopy(first)
        changed = {"r-5", "r-11"}
        for c in changed:
            second[int(c[2:])]["messages"][0]["content"] += " Briefly."
        b2, out2 = run_batch(d, second, ka, "on", [w1])
        det = {f"r-{i}" for i in range(20)}
        assert reused(out2) == sorted(det - changed), reused(out2)
        # a fresh run with reuse off: the reused bodies are the computed bytes but for the marks
        b3, out3 = run_batch(d, second, ka, None, [w1])
        assert reused(out3) == []
        for c in det - changed:
            r, f = out2[c], out3[c]
            assert strip(r) == strip(f), (c, r, f)
            # byte for byte: the fresh body with the first run's id and created, and the two marks
            rb, fb = RAW[b2["id"]][c], RAW[b3["id"]][c]
            want = fb.replace(json.dumps(f["id"]), json.dumps(r["id"]), 1)
            want = want.replace('"created":%d' % f["created"], '"created":%d' % r["created"], 1)
            u2 = r["usage"]
            want = want.replace('"total_tokens":%d}' % u2["total_tokens"],
                                '"total_tokens":%d,"reused_tokens":%d}' % (u2["total_tokens"], u2["reused_tokens"]), 1)
            fpf = json.dumps(f["system_fingerprint"])
            want = want.replace('"system_fingerprint":' + fpf,
                                '"system_fingerprint":' + json.dumps(r["system_fingerprint"]), 1)
            assert rb == want, (c, rb, want)
            assert r["system_fingerprint"] == (f["system_fingerprint"] or "") + "+reused" or \
                (f["system_fingerprint"] is None and r["system_fingerprint"] == "reused"), (r, f)
            u = out1[c]["usage"]
            assert r["usage"]["reused_tokens"] == u["prompt_tokens"] + u["completion_tokens"], r
            assert r["id"] == out1[c]["id"], "the answer is the first run's"
        # another tenant, the same lines: nothing of alpha's is reused
        b4, out4 = run_batch(d, second, kb, "on", [w1])
        assert reused(out4) == []
        # a worker whose model file has another hash: nothing reused
        w1.stop()
        w2 = start_worker(d, other, "reuse-2")
        b5, out5 = run_batch(d, second, ka, "on", [w2])
        assert reused(out5) == []
        for c in det:  # same weights: the same text (the engine is deterministic), computed again
            assert strip(out5[c])["choices"] == strip(out3[c])["choices"], c
        usage = d.json("GET", f"/v1/usage?group_by=batch", key=ka)
        fleet = d.json("GET", f"/v1/usage?view=fleet&group_by=batch", key=ka)
    finally:
        w1.stop()
        if w2:
            w2.stop()
    # the ledger: reused lines cost 0 and carry the tokens they saved
    db = db_connect(data)
    rows = db.execute("SELECT q.custom_id, u.prompt_tokens, u.completion_tokens, u.cost_micros, u.reused_tokens "
                      "FROM usage_ledger u JOIN requests q ON q.id = u.request_id WHERE u.batch_id = ?",
                      (b2["id"],)).fetchall()
    db.close()
    assert len(rows) == len(second)
    saved = 0
    for cid, pt, ct, cost, rt in rows:
        if cid in det - changed:
            assert (pt, ct, cost) == (0, 0, 0) and rt > 0, (cid, pt, ct, cost, rt)
            saved += rt
        else:
            assert rt == 0 and pt > 0 and cost > 0, (cid, pt, ct, cost, rt)
    ub = {x["key"]: x for x in usage["data"]}
    fb = {x["key"]: x for x in fleet["data"]}
    assert ub[b2["id"]]["reused_tokens"] == saved == fb[b2["id"]]["reused_tokens"], (ub[b2["id"]], fb[b2["id"]])
    assert ub[b2["id"]]["num_reused_requests"] == len(det - changed)
    for bid in (b1["id"], b3["id"], b5["id"]):
        assert ub[bid]["reused_tokens"] == 0 == fb[bid]["reused_tokens"], bid
    # the ledger's tokens are the fleet view's computed ones, batch by batch
    for bid in (b1["id"], b2["id"], b3["id"], b5["id"]):
        assert ub[bid]["input_tokens"] == fb[bid]["input_tokens"], (ub[bid], fb[bid])
        assert ub[bid]["output_tokens"] == fb[bid]["output_tokens"], (ub[bid], fb[bid])
    # the batch's cost is its computed lines' only
    assert b2["cost"]["amount_micros"] == sum(r[3] for r in rows)
    assert b2["usage"]["output_tokens"] == sum(r[2] for r in rows)


def test_reuse_responses_lines_answered_from_the_first_run():
    """/v1/responses lines (spec/usage.md: the same two marks on the Response
    object): the deterministic lines of a resubmitted batch are answered from
    the first run - the first run's Response (its id and created_at too) plus
    system_fingerprint "reused" (a Response has none of its own) and
    usage.reused_tokens = its input + output tokens - and the line without
    temperature or seed is computed again; the ledger agrees."""
    need()
    data = os.path.join(tmpdir(), "data")
    ka = create_key(data, "alpha", asan=False)
    d = Jobd(data=data, key=ka, asan=False, args=ARGS)
    w = start_worker(d, MODEL, "reuse-r")
    bs = [{"model": "smollm", "input": f"Name a colour, number {i}.", "max_output_tokens": 16, "temperature": 0}
          for i in range(5)]
    bs[4] = {"model": "smollm", "input": "Name a colour, number 4.", "max_output_tokens": 16, "seed": 7}
    bs.append({"model": "smollm", "input": "Any word.", "max_output_tokens": 16})  # temperature 1: not reused
    try:
        b1, out1 = run_batch(d, bs, ka, "on", [w], url="/v1/responses")
        b2, out2 = run_batch(d, bs, ka, "on", [w], url="/v1/responses")
    finally:
        w.stop()
    assert reused(out1) == [], out1
    det = [f"r-{i}" for i in range(5)]
    assert reused(out2) == det, out2
    for c in det:
        first, again = out1[c], copy.deepcopy(out2[c])
        assert first["object"] == "response" and first["status"] in ("completed", "incomplete"), first
        assert "system_fingerprint" not in first, first
        assert again.pop("system_fingerprint") == "reused", again
        assert again["usage"].pop("reused_tokens") == first["usage"]["input_tokens"] + \
            first["usage"]["output_tokens"] > 0, (again, first)
        assert again == first, (c, again, first)  # the first run's Response, id and created included
    assert "reused_tokens" not in out2["r-5"]["usage"] and out2["r-5"]["id"] != out1["r-5"]["id"], out2["r-5"]
    usage = {x["key"]: x for x in d.json("GET", "/v1/usage?group_by=batch", key=ka)["data"]}
    assert usage[b2["id"]]["num_reused_requests"] == 5, usage[b2["id"]]
    assert usage[b2["id"]]["reused_tokens"] == sum(out2[c]["usage"]["reused_tokens"] for c in det), usage[b2["id"]]


def test_reuse_bad_metadata_value_is_400():
    need()
    d = Jobd(asan=False, args=ARGS)
    f = d.upload(jsonl(bodies(1, 0)))
    r = d.call("POST", "/v1/batches", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                 "completion_window": "24h", "metadata": {"reuse": "yes"}}).encode(),
               {"Content-Type": "application/json"})
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["param"] == "metadata" and "reuse" in err["message"], err


def test_reuse_retention_out_of_range_refused_at_start():
    jobd = binary("jobd", asan=False)
    if not os.path.exists(jobd):
        raise Skip("release build/jobd not built")
    for val in ("366d", "-1s", "abc"):
        r = run([jobd, "--listen", "127.0.0.1:0", "--data", "/nonexistent/x", "--reuse-retention", val])
        assert r.returncode == 2 and "--reuse-retention" in r.stderr, (val, r.returncode, r.stderr)
    r = run([jobd, "--help"])
    assert "--reuse-retention" in r.stdout and "--reuse " in r.stdout, r.stdout
