"""Batch lifecycle features on a real jobd over loopback, with
workerlib's scripted worker committing results: partial results with a
cursor (GET /v1/batches/{id}/results, jobctl results --follow); rerun of
an ended batch's lines (POST /v1/batches/{id}/rerun, jobctl rerun); output
and upload expiry (output_expires_after, expires_after, --file-retention,
the sweeper deleting rows and bytes); deadlines and priorities in leasing
(a scripted-worker benchmark) and the completion estimate; several models in
one batch; the cost estimate (POST /v1/batches/estimate, jobctl submit
--dry-run) checked against the worker engine's own prompt count.

Each test starts its own jobd (ASan build) with fast sweeps; the scripted
worker answers in small leases so pages are read while commits go on."""
import gzip
import json
import os
import subprocess
import threading
import time

from harness import ROOT, Skip, binary, s3_keys, s3_prefix_for, tmpdir
from jobdlib import Jobd, chat_line, create_key, jsonl, multipart, zstd_decompress
from workerlib import TestWorker, invalid, read_jsonl, success

WT, AT = "life-worker-token", "life-admin-token"
FAST = ["--worker-token", WT, "--admin-token", AT, "--sweep-interval", "100ms", "--lease-min", "1s",
        "--retry-backoff", "1s", "--window-min", "1s"]


def keyed_jobd(tenants=("alpha",), args=FAST):
    data = os.path.join(tmpdir(), "data")
    keys = [create_key(data, t) for t in tenants]
    return Jobd(data=data, key=keys[0], args=args), keys


def running_batch(d, n, key="default"):
    b = d.submit(jsonl(n), key=key)
    return d.wait_batch(b["id"], key=key)


def page(d, bid, after=None, limit=None, enc=None, key="default"):
    q = []
    if after:
        q.append(f"after={after}")
    if limit:
        q.append(f"limit={limit}")
    path = f"/v1/batches/{bid}/results" + ("?" + "&".join(q) if q else "")
    r = d.call("GET", path, headers={"Accept-Encoding": enc} if enc else {}, key=key)
    assert r.status == 200, r
    body = r.body
    ce = r.headers.get("content-encoding")
    if ce == "zstd":
        body = zstd_decompress(body)
    elif ce == "gzip":
        body = gzip.decompress(body)
    else:
        assert ce is None, r.headers
    h = r.headers
    assert h["x-has-more"] in ("true", "false") and h["x-results-complete"] in ("true", "false"), h
    return body, h


def lines_of(body):
    return [x for x in body.decode().split("\n") if x]


def file_lines(d, fid):
    if not fid:
        return []
    r = d.call("GET", f"/v1/files/{fid}/content")
    assert r.status == 200, r
    return lines_of(r.body)


def test_results_pages_while_a_worker_commits_match_the_final_files():
    d, _ = keyed_jobd()
    b = running_batch(d, 23)
    bid = b["id"]
    body, h = page(d, bid)
    assert body == b"" and h["x-has-more"] == "false" and h["x-results-complete"] == "false", h
    assert h["x-batch-status"] == "in_progress", h
    cursor = h["x-next-cursor"]
    w = TestWorker(d.port, WT)
    w.register()
    seen, n_leases = [], 0
    encs = [None, "zstd", "gzip", "gzip, zstd;q=0", "identity"]
    while True:
        r = w.lease(max_requests=4).json()
        if not r["requests"]:
            break
        n_leases += 1
        answers = [invalid(q) if q["custom_id"].endswith("7") else success(q) for q in r["requests"]]
        w.results(r["lease_id"], answers)
        # page with limit 3, alternating encodings, until caught up
        while True:
            body, h = page(d, bid, after=cursor, limit=3, enc=encs[len(seen) % len(encs)])
            got = lines_of(body)
            assert len(got) <= 3
            seen += got
            assert h["x-next-cursor"] != cursor or not got, h
            cursor = h["x-next-cursor"]
            if h["x-has-more"] == "false":
                break
    assert n_leases >= 6 and len(seen) == 23, (n_leases, len(seen))
    b = d.wait_batch(bid, statuses=("completed",))
    body, h = page(d, bid, after=cursor)
    assert body == b"" and h["x-results-complete"] == "true" and h["x-batch-status"] == "completed", h
    assert h["x-next-cursor"] == cursor
    final = file_lines(d, b["output_file_id"]) + file_lines(d, b["error_file_id"])
    # every line of the final files exactly once across the pages, byte for byte
    assert sorted(seen) == sorted(final) and len(set(seen)) == 23, (seen, final)
    bad = [json.loads(x) for x in seen if json.loads(x)["response"]["status_code"] != 200]
    assert sorted(x["custom_id"] for x in bad) == ["t-17", "t-7"], bad
    assert len(final) == 23 and len(file_lines(d, b["error_file_id"])) == 2
    # the same cursor read again gives the same page (stable); from the start: everything in one page
    body, h = page(d, bid)
    assert lines_of(body) == seen and h["x-results-complete"] == "true", h


def test_results_bad_input():
    d, (ka, kb) = keyed_jobd(("alpha", "beta"))
    b1 = running_batch(d, 2)["id"]
    b2 = running_batch(d, 2)["id"]
    other = running_batch(d, 1, key=kb)["id"]
    _, h2 = page(d, b2)
    for bad in ("nope", "rc1" + "0" * 28, h2["x-next-cursor"], h2["x-next-cursor"][:-1] + "x"):
        r = d.call("GET", f"/v1/batches/{b1}/results?after={bad}")
        e = r.json()["error"]
        assert r.status == 400 and e["code"] == "invalid_cursor" and e["param"] == "after", r
        assert "Unknown cursor" in e["message"] and b1 in e["message"], e
    for lim in ("0", "10001", "x"):
        r = d.call("GET", f"/v1/batches/{b1}/results?limit={lim}")
        assert r.status == 400 and r.json()["error"]["param"] == "limit", r
    for bid in ("batch_nope", other):
        r = d.call("GET", f"/v1/batches/{bid}/results")
        assert r.status == 404 and r.json()["error"]["code"] == "not_found", r
    assert d.call("GET", f"/v1/batches/{b1}/results", key=None).status == 401
    # a failed batch (invalid input) is complete at once, with no lines
    f = d.submit(b"not json\n")
    f = d.wait_batch(f["id"], statuses=("failed",))
    body, h = page(d, f["id"])
    assert body == b"" and h["x-results-complete"] == "true" and h["x-batch-status"] == "failed", h


def test_jobctl_results_follow_prints_every_line_once():
    d, (key,) = keyed_jobd()
    b = running_batch(d, 12)
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    out = os.path.join(tmpdir(), "follow.jsonl")
    p = subprocess.Popen([binary("jobctl"), "results", b["id"], "--follow", "--interval", "50ms", "-o", out],
                         env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = TestWorker(d.port, WT)
    w.register()
    done = threading.Event()

    def work():
        while True:
            r = w.lease(max_requests=3).json()
            if not r["requests"]:
                break
            w.results(r["lease_id"], [success(q) for q in r["requests"]])
        done.set()

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert done.is_set()
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, (p.returncode, stderr)
    b = d.wait_batch(b["id"], statuses=("completed",))
    got = open(out).read().splitlines()
    final = file_lines(d, b["output_file_id"])
    assert sorted(got) == sorted(final) and len(got) == 12, (got, final)
    assert b"12 lines" in stderr, stderr
    # without --follow: what is there now (everything, the batch is over), to stdout
    r = subprocess.run([binary("jobctl"), "results", b["id"], "--partial"], env={**os.environ, **env},
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.decode().splitlines()) == sorted(final), r
    assert read_jsonl(d, b["output_file_id"])[0]["error"] is None


# ---- rerun ------------------------------------------------------------------------------------

def rerun(d, bid, body=None, key="default", headers=None):
    h = {"Content-Type": "application/json", **(headers or {})}
    return d.call("POST", f"/v1/batches/{bid}/rerun", json.dumps(body).encode() if body is not None else b"",
                  h, key)


def input_lines(d, b):
    return file_lines(d, b["input_file_id"])


def test_rerun_failed_lines_of_an_ended_batch():
    d, (ka, kb) = keyed_jobd(("alpha", "beta"))
    data = jsonl(5)
    b = d.submit(data, query="?metadata[owner]=nightly&completion_window=2h")
    b = d.wait_batch(b["id"])
    bid = b["id"]
    # still running: 409 with a clear message (and nothing created)
    r = rerun(d, bid, {"only": "failed"})
    e = r.json()["error"]
    assert r.status == 409 and e["code"] == "batch_not_finished", r
    assert "still in_progress" in e["message"] and bid in e["message"], e
    w = TestWorker(d.port, WT)
    w.register()
    w.run_until(lambda: d.json("GET", f"/v1/batches/{bid}")["status"] == "completed",
                policy=lambda q: invalid(q) if q["custom_id"] in ("t-2", "t-4") else success(q))
    # bad input
    for body, code, param in (({"only": "some"}, "invalid_value", "only"), ({"only": 1}, "invalid_value", "only"),
                              ({"mode": "failed"}, "unknown_parameter", "mode"),
                              ({"completion_window": "2x"}, "invalid_value", "completion_window")):
        r = rerun(d, bid, body)
        assert r.status == 400 and r.json()["error"]["code"] == code and r.json()["error"]["param"] == param, r
    assert rerun(d, bid, {}, key=kb).status == 404
    assert rerun(d, "batch_nope", {}).status == 404
    # the failed lines, byte for byte the original input lines, with an idempotency key
    r = rerun(d, bid, {"only": "failed"}, headers={"Idempotency-Key": "rr-1"})
    assert r.status == 200, r
    nb = r.json()
    assert nb["id"] != bid and nb["metadata"] == {"owner": "nightly", "rerun_of": bid}, nb
    assert nb["completion_window"] == "2h" and nb["endpoint"] == "/v1/chat/completions", nb
    orig = data.decode().splitlines()
    assert input_lines(d, nb) == [orig[1], orig[3]], input_lines(d, nb)
    r2 = rerun(d, bid, {"only": "failed"}, headers={"Idempotency-Key": "rr-1"})
    assert r2.status == 200 and r2.json()["id"] == nb["id"] and r2.headers.get("idempotent-replayed") == "true"
    nb = d.wait_batch(nb["id"])
    assert nb["request_counts"]["total"] == 2, nb
    # all lines, no body = only failed (default) -> a second batch without a key
    r = rerun(d, bid, {"only": "all", "completion_window": "1h"})
    assert r.status == 200 and r.json()["completion_window"] == "1h", r
    assert input_lines(d, r.json()) == orig
    # nothing failed in the rerun once it succeeds -> 400 naming the option
    w.run_until(lambda: d.json("GET", f"/v1/batches/{nb['id']}")["status"] == "completed")
    r = rerun(d, nb["id"])
    assert r.status == 400 and r.json()["error"]["param"] == "only" and "no requests" in r.json()["error"]["message"]


def test_rerun_failed_and_expired_takes_lines_that_never_ran():
    d, (key,) = keyed_jobd()
    b = d.submit(jsonl(3), query="?completion_window=1s")
    b = d.wait_batch(b["id"], statuses=("expired",), timeout=30)
    assert rerun(d, b["id"], {"only": "failed"}).status == 400  # none ran
    r = rerun(d, b["id"], {"only": "failed_and_expired", "completion_window": "24h"})
    assert r.status == 200 and r.json()["metadata"] == {"rerun_of": b["id"]}, r
    assert [json.loads(x)["custom_id"] for x in input_lines(d, r.json())] == ["t-1", "t-2", "t-3"]
    # jobctl rerun: prints the id; twice -> the same batch (derived key); still running -> exit 1
    env = {**os.environ, "JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    args = [binary("jobctl"), "rerun", b["id"], "--only", "all"]
    p1 = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    p2 = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert p1.returncode == 0 and p1.stdout.startswith("batch_") and p1.stdout == p2.stdout, (p1, p2)
    p3 = subprocess.run([binary("jobctl"), "rerun", p1.stdout.strip()], env=env, capture_output=True, text=True,
                        timeout=60)
    assert p3.returncode == 1 and "still" in p3.stderr, p3


# ---- output expiry --------------------------------------------------------------------------

def stored_paths(d, f):
    """The stored bytes of file object f (uploads are named by id, outputs by batch)."""
    needle = f["id"]
    if f["purpose"] == "batch_output":
        needle = f["filename"].replace("_output.jsonl", "-output").replace("_errors.jsonl", "-errors")
    prefix = s3_prefix_for(d.data)
    if prefix:  # the files are in the test's S3 bucket (harness.py)
        return [k for k in s3_keys(os.environ["JOBD_TEST_S3_ENDPOINT"], prefix) if needle in k]
    out = []
    for root, _, names in os.walk(d.data):
        out += [os.path.join(root, n) for n in names if needle in n]
    return out


def wait_gone(d, f, timeout=20):
    deadline = time.monotonic() + timeout
    while stored_paths(d, f) or f["id"] in [x["id"] for x in d.json("GET", "/v1/files?limit=10000")["data"]]:
        assert time.monotonic() < deadline, (f, stored_paths(d, f))
        time.sleep(0.1)


def test_output_and_upload_expiry_delete_rows_and_bytes():
    d, _ = keyed_jobd(args=FAST + ["--expiry-min", "1s"])
    up = d.upload(jsonl(3), headers=None)
    assert up["expires_at"] is None, up
    ct, body = multipart({"purpose": "batch", "expires_after[anchor]": "created_at",
                          "expires_after[seconds]": "3"}, {"file": ("in.jsonl", jsonl(3))})
    r = d.call("POST", "/v1/files", body, {"Content-Type": ct})
    assert r.status == 200 and r.json()["expires_at"] == r.json()["created_at"] + 3, r
    short = r.json()
    b = d.create_batch(up["id"], output_expires_after={"anchor": "created_at", "seconds": 2})
    bid = d.wait_batch(b["id"])["id"]
    w = TestWorker(d.port, WT)
    w.register()
    w.run_until(lambda: d.json("GET", f"/v1/batches/{bid}")["status"] == "completed",
                policy=lambda q: invalid(q) if q["custom_id"] == "t-1" else success(q))
    b = d.json("GET", f"/v1/batches/{bid}")
    files = [d.json("GET", f"/v1/files/{b[k]}") for k in ("output_file_id", "error_file_id")]
    for f in files:
        assert f["expires_at"] == f["created_at"] + 2, f
        assert len(stored_paths(d, f)) == 1, f
    assert d.json("GET", f"/v1/files/{up['id']}")["expires_at"] is None  # the input keeps its own policy
    # jobctl submit --output-expires
    env = {**os.environ, "JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": d.key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    src = os.path.join(tmpdir(), "in.jsonl")
    open(src, "wb").write(jsonl(2))
    p = subprocess.run([binary("jobctl"), "submit", src, "--output-expires", "1h"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p
    jid = p.stdout.strip()
    w.run_until(lambda: d.json("GET", f"/v1/batches/{jid}")["status"] == "completed")
    of = d.json("GET", f"/v1/files/{d.json('GET', f'/v1/batches/{jid}')['output_file_id']}")
    assert of["expires_at"] == of["created_at"] + 3600, of
    for f in files + [short]:
        wait_gone(d, f)
        for path in (f"/v1/files/{f['id']}", f"/v1/files/{f['id']}/content"):
            r = d.call("GET", path)
            assert r.status == 404 and r.json()["error"]["code"] == "not_found", r
    # the batch keeps the ids (as OpenAI does); a batch on an expired upload is refused
    assert d.json("GET", f"/v1/batches/{bid}")["output_file_id"] == files[0]["id"]
    r = d.call("POST", "/v1/batches", json.dumps({"input_file_id": short["id"], "endpoint": "/v1/chat/completions"}),
               {"Content-Type": "application/json"})
    assert r.status == 404, r
    assert d.json("GET", f"/v1/files/{up['id']}")["id"] == up["id"]  # never expired: still there


def test_expiry_bad_input_and_file_retention_default():
    d, _ = keyed_jobd(args=FAST + ["--file-retention", "30d"])
    f = d.upload(jsonl(1))
    assert f["expires_at"] == f["created_at"] + 30 * 86400, f  # the default
    cases = [({"anchor": "created_at", "seconds": 3599}, "invalid_value", "output_expires_after.seconds"),
             ({"anchor": "created_at", "seconds": 2592001}, "invalid_value", "output_expires_after.seconds"),
             ({"anchor": "last_active_at", "seconds": 3600}, "invalid_value", "output_expires_after.anchor"),
             ({"anchor": "created_at"}, "missing_required_parameter", "output_expires_after.seconds"),
             ({"anchor": "created_at", "seconds": "3600"}, "invalid_type", "output_expires_after.seconds"),
             (3600, "invalid_type", "output_expires_after")]
    for v, code, param in cases:
        r = d.call("POST", "/v1/batches", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                      "output_expires_after": v}), {"Content-Type": "application/json"})
        e = r.json()["error"]
        assert r.status == 400 and e["code"] == code and e["param"] == param, (v, r)
    assert "3600" in d.call("POST", "/v1/batches", json.dumps(
        {"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
         "output_expires_after": cases[0][0]}), {"Content-Type": "application/json"}).json()["error"]["message"]
    for fields, param in (({"expires_after[anchor]": "created_at", "expires_after[seconds]": "60"},
                           "expires_after.seconds"),
                          ({"expires_after[anchor]": "x", "expires_after[seconds]": "3600"}, "expires_after.anchor"),
                          ({"expires_after[seconds]": "3600"}, "expires_after.anchor"),
                          ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "1h"},
                           "expires_after.seconds")):
        ct, body = multipart({"purpose": "batch", **fields}, {"file": ("in.jsonl", jsonl(1))})
        r = d.call("POST", "/v1/files", body, {"Content-Type": ct})
        assert r.status == 400 and r.json()["error"]["param"] == param, (fields, r)
    # POST /v1/jobs: the query form
    r = d.call("POST", "/v1/jobs?output_expires_after[seconds]=10", jsonl(1))
    assert r.status == 400 and r.json()["error"]["param"] == "output_expires_after.seconds", r
    assert d.call("POST", "/v1/jobs?output_expires_after[seconds]=7200", jsonl(1)).status == 200
    # jobd refuses a retention under the floor
    from harness import run as hrun
    r = hrun([binary("jobd"), "--data", os.path.join(tmpdir(), "x"), "--file-retention", "10m"])
    assert r.returncode == 2 and "--file-retention 10m is out of range (1h..30d" in r.stderr, r


# ---- deadlines and priorities --------------------------------------------------------------

def named(prefix, n):
    return ("\n".join(chat_line(i, custom_id=f"{prefix}-{i}") for i in range(n)) + "\n").encode()


def test_deadline_1h_batch_behind_a_24h_backlog_finishes_first():
    """The scripted-worker benchmark of the lifecycle features: a tenant's 24h backlog of
    240 requests, then a 1h batch of 12. Leases of 8 serve the 1h batch
    first (earliest deadline first), so it completes after 2 leases while the
    backlog still has 236 to go; metadata.priority outranks the deadline."""
    d, _ = keyed_jobd()
    big = d.wait_batch(d.submit(named("big", 240))["id"])["id"]
    urgent = d.wait_batch(d.submit(named("urgent", 12), query="?completion_window=1h")["id"])["id"]
    w = TestWorker(d.port, WT)
    w.register()
    served, n_leases, urgent_done_at = [], 0, None
    while urgent_done_at is None:
        r = w.lease(max_requests=8).json()
        n_leases += 1
        served += [q["custom_id"].split("-")[0] for q in r["requests"]]
        w.results(r["lease_id"], [success(q) for q in r["requests"]])
        if d.json("GET", f"/v1/batches/{urgent}")["request_counts"]["completed"] == 12:
            urgent_done_at = n_leases
    big_left = 240 - d.json("GET", f"/v1/batches/{big}")["request_counts"]["completed"]
    print(f"bench: 1h batch (12 req) done after {urgent_done_at} leases of 8; the 24h backlog has {big_left}/240 left")
    # (a pack is reordered for the engine - shared prefixes together - so count, don't compare order)
    assert urgent_done_at == 2 and served.count("urgent") == 12 and big_left == 236, (urgent_done_at, served)
    assert served[:8] == ["urgent"] * 8, served
    # priority first: a 24h batch with priority 5 goes before a new 1h batch, both before the backlog
    d.wait_batch(d.submit(named("hi", 4), query="?metadata[priority]=5")["id"])
    d.wait_batch(d.submit(named("soon", 4), query="?completion_window=1h")["id"])
    order = []
    for _ in range(3):
        r = w.lease(max_requests=4).json()
        order.append({q["custom_id"].split("-")[0] for q in r["requests"]})
        w.results(r["lease_id"], [success(q) for q in r["requests"]])
    assert order == [{"hi"}, {"soon"}, {"big"}], order


def test_estimated_completion_and_deadline_warning():
    d, (key,) = keyed_jobd()
    w = TestWorker(d.port, WT)
    w.register()
    tight = d.wait_batch(d.submit(jsonl(50), query="?completion_window=60s")["id"])
    assert "estimated_completion_at" not in tight and d.call("GET", f"/v1/batches/{tight['id']}").headers.get(
        "x-estimated-completion") is None  # no throughput known yet
    r = w.lease(max_requests=1).json()
    w.heartbeat(r["lease_id"], tokens_per_s=2.0)
    # 50 requests x 16 max_tokens at 2 tokens/s: ~400 s, past the 60 s window
    g = d.call("GET", f"/v1/batches/{tight['id']}")
    b = g.json()
    eta = int(g.headers["x-estimated-completion"])
    assert b["estimated_completion_at"] == eta and eta % 60 == 0, (b, g.headers)
    assert eta >= b["created_at"] + 390 and b["deadline_at_risk"] is True, b
    env = {**os.environ, "JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    p = subprocess.run([binary("jobctl"), "status", tight["id"]], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "estimated" in p.stdout, p
    assert "warning" in p.stderr and "miss its deadline" in p.stderr, p.stderr
    # a 24h batch behind it is not at risk; its estimate counts the tighter batch ahead of it
    roomy = d.wait_batch(d.submit(jsonl(10))["id"])
    g2 = d.call("GET", f"/v1/batches/{roomy['id']}")
    assert g2.json()["deadline_at_risk"] is False and int(g2.headers["x-estimated-completion"]) >= eta, g2.json()
    p = subprocess.run([binary("jobctl"), "status", roomy["id"]], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "warning" not in p.stderr, p
    # out of range windows (1h .. 7d without --window-min)
    d2, _ = keyed_jobd(args=["--worker-token", WT])
    for win in ("59m", "8d", "never"):
        r = d2.call("POST", f"/v1/jobs?completion_window={win}", jsonl(1))
        e = r.json()["error"]
        assert r.status == 400 and e["param"] == "completion_window" and "1h to 7d" in e["message"], (win, r)
    assert d2.call("POST", "/v1/jobs?completion_window=7d", jsonl(1)).status == 200


# ---- several models in one batch --------------------------------------------------------------

def test_mixed_models_route_per_request_and_expire_only_the_unserved_model():
    d, (key,) = keyed_jobd()
    data = (named("s", 4).decode()
            + "".join(chat_line(i, model="qwen", custom_id=f"q-{i}") + "\n" for i in range(3))
            + "".join(chat_line(i, model="ghost", custom_id=f"g-{i}") + "\n" for i in range(2))).encode()
    b = d.wait_batch(d.submit(data, query="?completion_window=4s")["id"])
    assert b["model"] == "mixed" and b["request_counts"]["total"] == 9, b
    single = d.wait_batch(d.submit(named("one", 2))["id"])
    assert single["model"] == "smollm", single
    ws, wq = TestWorker(d.port, WT, model="smollm", name="ws"), TestWorker(d.port, WT, model="qwen", name="wq")
    ws.register()
    wq.register()
    got = {}
    for w in (ws, wq):
        r = w.lease(max_requests=64).json()
        got[w.model] = sorted(q["custom_id"] for q in r["requests"])
        w.results(r["lease_id"], [success(q) for q in r["requests"]])
    assert got["smollm"] == ["one-0", "one-1", "s-0", "s-1", "s-2", "s-3"], got
    assert got["qwen"] == ["q-0", "q-1", "q-2"], got
    assert ws.lease(max_requests=64).json()["requests"] == [] and wq.lease(max_requests=64).json()["requests"] == []
    # nobody serves "ghost": its lines alone expire with the window (no "waiting_for_model": mixed)
    assert "waiting_for_model" not in d.json("GET", f"/v1/batches/{b['id']}")
    b = d.wait_batch(b["id"], statuses=("expired",), timeout=30)
    assert b["request_counts"] == {"total": 9, "completed": 7, "failed": 2}, b
    errs = [json.loads(x) for x in file_lines(d, b["error_file_id"])]
    assert sorted(x["custom_id"] for x in errs) == ["g-0", "g-1"] and {x["error"]["code"] for x in errs} == {
        "batch_expired"}, errs
    assert len(file_lines(d, b["output_file_id"])) == 7
    # usage per model of this batch
    u = d.json("GET", f"/v1/usage?group_by=model&batch={b['id']}")
    assert {x["key"]: x["num_model_requests"] for x in u["data"]} == {"qwen": 3, "smollm": 4}, u
    assert u["totals"]["num_model_requests"] == 7, u
    r = d.call("GET", "/v1/usage?batch=")
    assert r.status == 400 and r.json()["error"]["param"] == "batch", r
    env = {**os.environ, "JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    p = subprocess.run([binary("jobctl"), "usage", "--batch", b["id"]], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "qwen" in p.stdout and "smollm" in p.stdout and "one" not in p.stdout, p


# ---- cost estimate ------------------------------------------------------------------------------

MODEL_GGUF = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def test_estimate_counts_with_the_workers_tokenizer_and_has_no_side_effects():
    if not os.path.exists(MODEL_GGUF):
        raise Skip("no default model (scripts/fetch-model)")
    d, (key,) = keyed_jobd(args=FAST + ["--tokenizer", f"smollm={MODEL_GGUF}",
                                        "--prices", "smollm=20000:80000,other=1000000:2000000"])
    lines = [json.dumps({"custom_id": f"e-{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "smollm", "max_tokens": 1 + i,
                                  "messages": [{"role": "system", "content": "You are terse."},
                                               {"role": "user", "content": f"Name {i + 2} colours, é ü 漢字."}]}})
             for i in range(5)]
    lines.append(chat_line(9, model="other", custom_id="o-1"))
    lines.append(chat_line(10, model="ghost", custom_id="g-1"))
    f = d.upload(("\n".join(lines) + "\n").encode())
    before = (d.json("GET", "/v1/files"), d.json("GET", "/v1/batches"))
    w = TestWorker(d.port, WT, model="other")
    w.register()
    r = d.call("POST", "/v1/batches/estimate", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}),
               {"Content-Type": "application/json", "Idempotency-Key": "est-1"})
    assert r.status == 200, r
    e = r.json()
    assert (d.json("GET", "/v1/files"), d.json("GET", "/v1/batches")) == before  # no side effects
    assert e["object"] == "batch.estimate" and e["request_counts"]["total"] == 7 and e["lines"] == 7, e
    m = {x["model"]: x for x in e["models"]}
    assert m["smollm"]["tokenizer"] == "gguf" and m["smollm"]["input_tokens_exact"] is True, m
    assert m["other"]["tokenizer"] == "bytes/4" and m["other"]["workers"] == 1 and m["smollm"]["workers"] == 0, m
    assert e["unknown_models"] == ["ghost"] and any("ghost" in x for x in e["warnings"]), e
    assert m["smollm"]["max_output_tokens"] == 1 + 2 + 3 + 4 + 5
    # the price range from --prices (micro-dollars per 1M tokens, rounded half up per model)
    smin = (m["smollm"]["input_tokens"] * 20000 + 500000) // 1000000
    assert m["smollm"]["cost"]["min_micros"] == smin, m
    assert e["cost"]["min_micros"] <= e["cost"]["max_micros"] and e["cost"]["priced"] is False, e
    # the same count as the worker engine's: jobworker --batch-file on the smollm lines
    src = os.path.join(tmpdir(), "e.jsonl")
    open(src, "w").write("\n".join(lines[:5]) + "\n")
    p = subprocess.run([binary("jobworker", asan=False), "--model", MODEL_GGUF, "--batch-file", src, "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    worker_in = sum(json.loads(x)["response"]["body"]["usage"]["prompt_tokens"] for x in p.stdout.splitlines() if x)
    assert m["smollm"]["input_tokens"] == worker_in, (m["smollm"], worker_in)
    # bad input: unknown file, bad window, bad endpoint
    for body, status in (({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions"}, 404),
                         ({"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "9d"}, 400),
                         ({"input_file_id": f["id"], "endpoint": "/v1/moderations"}, 400)):
        r = d.call("POST", "/v1/batches/estimate", json.dumps(body), {"Content-Type": "application/json"})
        assert r.status == status, (body, r)
    # jobctl submit --dry-run: prints the estimate, submits nothing, deletes its upload; ghost -> exit 1
    env = {**os.environ, "JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "",
           "HOME": tmpdir()}
    all_src = os.path.join(tmpdir(), "all.jsonl")
    open(all_src, "w").write("\n".join(lines) + "\n")
    p = subprocess.run([binary("jobctl"), "submit", all_src, "--dry-run"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1 and "smollm" in p.stdout and "total: 7 requests" in p.stdout, p
    assert "ghost" in p.stderr and "warning" in p.stderr, p.stderr
    assert (d.json("GET", "/v1/files"), d.json("GET", "/v1/batches")) == before
    p = subprocess.run([binary("jobctl"), "submit", src, "--dry-run", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["input_tokens"] == worker_in, p
