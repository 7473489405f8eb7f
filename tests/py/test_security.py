"""Security checks against a real (sanitised) jobd over loopback.

Tenant isolation on EVERY tenant route of spec/openapi.yaml: tenant A owns a
file, a completed batch (output and error files), a batch with a dead letter,
a waiting batch, a webhook endpoint with a delivery, an Idempotency-Key and
a message batch (the Anthropic routes, by x-api-key and by Bearer);
tenant B probes each of them on every route (the route list is read from the
spec, so a new route without a probe fails the test): another tenant's ids
answer 404 not_found, lists and usage never show them, B's idempotency key
space is its own. A still sees all of it afterwards (so the 404s are not
just bad ids).

Hostile inputs, each answered with a clean error (the OpenAI envelope, a
4xx status), logged in the access log, and the daemon still healthy after:
a file name with ../ or NUL or invalid UTF-8 in a multipart upload, JSON
nested 100,000 deep (request bodies, metadata, a JSONL line, a worker
message), a 2 GB Content-Length with a tiny body (refused from the header,
or timed out when the limit allows it), header floods (1,000 headers, a
1 MB header, a header block that never ends).
"""
import json
import os
import socket
import time

from harness import ROOT, tmpdir
from jobdlib import Jobd, create_key, jsonl
from workerlib import TestWorker, invalid, success, transient

WT, AT = "sec-worker-token", "sec-admin-token"
ARGS = ["--worker-token", WT, "--admin-token", AT, "--max-attempts", "1", "--sweep-interval", "100ms",
        "--lease-min", "1s", "--window-min", "1s", "--webhook-allow-private"]


def raw(port, data, timeout=20):
    """Send raw bytes on a fresh connection; return (status, headers, body) of
    the first answer (status 0 if the connection closed without one)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        out = b""
        while True:
            try:
                c = s.recv(65536)
            except ConnectionResetError:
                break
            if not c:
                break
            out += c
            head, sep, body = out.partition(b"\r\n\r\n")
            if sep:
                lines = head.split(b"\r\n")
                hdrs = {k.strip().lower(): v.strip() for k, _, v in
                        (l.decode("latin-1").partition(":") for l in lines[1:])}
                if "content-length" in hdrs and len(body) >= int(hdrs["content-length"]):
                    break
    finally:
        s.close()
    if not out.startswith(b"HTTP/1.1 "):
        return 0, {}, out
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.decode("latin-1").partition(":") for l in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


def clean_error(status, body, want):
    assert status == want, (status, body[:300])
    e = json.loads(body.decode("utf-8"))["error"]  # strict UTF-8 JSON
    assert isinstance(e["message"], str) and e["type"], e
    return e


def healthy(d):
    r = d.call("GET", "/healthz", key=None)
    assert r.status == 200, r
    log = d.proc.log()
    assert "ERROR: AddressSanitizer" not in log and "runtime error:" not in log, log[-3000:]
    assert d.proc.p.poll() is None, log[-3000:]


def logged(d, status, n=1):
    """The access log holds at least n lines with this status."""
    deadline = time.monotonic() + 5
    while True:
        got = d.proc.log().count(f" status={status} ")
        if got >= n:
            return
        assert time.monotonic() < deadline, f"{got} access-log lines with status={status}, wanted {n}"
        time.sleep(0.05)


# ---------------------------------------------------------------- isolation

def tenant_routes():
    """(METHOD, path template) of every operation taking a tenant key."""
    import yaml
    spec = yaml.safe_load(open(os.path.join(ROOT, "spec", "openapi.yaml")))
    out = set()
    for path, item in spec["paths"].items():
        for m, op in item.items():
            if m not in ("get", "post", "delete", "put", "patch"):
                continue
            sec = op.get("security", spec.get("security"))
            if sec not in ([{"bearer": []}], [{"apiKey": []}, {"bearer": []}]):  # the latter: /v1/messages
                continue
            out.add((m.upper(), path))
    return out


ANTH = {"anthropic-version": "2023-06-01", "Content-Type": "application/json"}


def setup_a(d, key_a):
    """Tenant A's objects in several states."""
    w = TestWorker(d.port, WT)
    w.register()
    a = {}
    a["file"] = d.upload(jsonl(2, model="nobody"), key=key_a)["id"]
    done = d.submit(jsonl(2), query="?completion_window=1h", key=key_a)
    d.wait_batch(done["id"], key=key_a)
    lease = w.lease(max_requests=10).json()
    w.results(lease["lease_id"], [success(lease["requests"][0]), invalid(lease["requests"][1])])
    b = d.wait_batch(done["id"], statuses=("completed",), key=key_a)
    a["batch"], a["output"], a["errors"] = b["id"], b["output_file_id"], b["error_file_id"]
    assert a["output"] and a["errors"], b
    dead = d.submit(jsonl(1, model="poison"), key=key_a)
    d.wait_batch(dead["id"], key=key_a)
    w2 = TestWorker(d.port, WT, model="poison", name="poison-worker")
    w2.register()
    lease = w2.lease(max_requests=10).json()
    w2.results(lease["lease_id"], [transient(q) for q in lease["requests"]])
    deadline = time.monotonic() + 30
    while True:
        dl = d.json("GET", f"/v1/batches/{dead['id']}/dead_letters", key=key_a)["data"]
        if dl:
            break
        assert time.monotonic() < deadline, "no dead letter"
        time.sleep(0.05)
    a["dead_batch"], a["dead_letter"] = dead["id"], dl[0]["id"]
    a["waiting"] = d.create_batch(a["file"], key=key_a)["id"]  # model "nobody": stays queued
    ep = d.json("POST", "/v1/webhook_endpoints", {"url": "http://127.0.0.1:9/a-hook"}, key=key_a)
    a["endpoint"] = ep["id"]
    a["delivery"] = d.json("POST", f"/v1/webhook_endpoints/{ep['id']}/test", key=key_a)["id"]
    a["secret"] = d.json("GET", "/v1/webhook_secret", key=key_a)["secret"]
    r = d.call("POST", "/v1/messages/batches", json.dumps({"requests": [{"custom_id": "m", "params": {
        "model": "nobody", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}}]}).encode(),
        dict(ANTH, **{"x-api-key": key_a}), key=None)
    assert r.status == 200, r
    a["message_batch"] = r.json()["id"]  # model "nobody": stays in_progress
    return a


def test_security_tenant_isolation_on_every_tenant_route():
    data = os.path.join(tmpdir(), "data")
    key_a, key_b = create_key(data, "alpha"), create_key(data, "beta")
    d = Jobd(data=data, key=key_a, args=ARGS)
    a = setup_a(d, key_a)
    a_ids = {v for k, v in a.items() if k != "secret"}
    probed = set()
    B = key_b

    def not_found(method, template, path, body=None, headers=None):
        probed.add((method, template))
        h = dict(headers or {})
        if body is not None:
            h.setdefault("Content-Type", "application/json")
            body = json.dumps(body).encode()
        r = d.call(method, path, body, h, key=B)
        e = clean_error(r.status, r.body, 404)
        assert e["code"] == "not_found", (method, path, e)
        assert "alpha" not in r.body.decode(), r

    def b_list(template, path, field="data"):
        probed.add(("GET", template))
        r = d.json("GET", path, key=B)
        text = json.dumps(r)
        for i in a_ids:
            assert i not in text, (path, i, r)
        return r

    # files
    for fid in (a["file"], a["output"], a["errors"]):
        not_found("GET", "/v1/files/{file_id}", f"/v1/files/{fid}")
        not_found("GET", "/v1/files/{file_id}/content", f"/v1/files/{fid}/content")
        not_found("GET", "/v1/files/{file_id}/content", f"/v1/files/{fid}/content",
                  headers={"Accept-Encoding": "zstd"})
        not_found("DELETE", "/v1/files/{file_id}", f"/v1/files/{fid}")
    b_list("/v1/files", "/v1/files")
    b_list("/v1/files", "/v1/files?purpose=batch_output")
    mine = d.upload(b"{}\n", key=B)  # POST /v1/files: B's own file, invisible to A
    probed.add(("POST", "/v1/files"))
    assert mine["id"] not in json.dumps(d.json("GET", "/v1/files", key=key_a))
    # batches
    for bid in (a["batch"], a["dead_batch"], a["waiting"]):
        not_found("GET", "/v1/batches/{batch_id}", f"/v1/batches/{bid}")
        not_found("GET", "/v1/batches/{batch_id}", f"/v1/batches/{bid}", headers={"If-None-Match": "*"})
        not_found("POST", "/v1/batches/{batch_id}/cancel", f"/v1/batches/{bid}/cancel")
        not_found("GET", "/v1/batches/{batch_id}/dead_letters", f"/v1/batches/{bid}/dead_letters")
        not_found("GET", "/v1/batches/{batch_id}/results", f"/v1/batches/{bid}/results")
        not_found("POST", "/v1/batches/{batch_id}/rerun", f"/v1/batches/{bid}/rerun", {"only": "all"})
    not_found("POST", "/v1/batches", "/v1/batches",
              {"input_file_id": a["file"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    not_found("POST", "/v1/batches/estimate", "/v1/batches/estimate",
              {"input_file_id": a["file"], "endpoint": "/v1/chat/completions"})
    b_list("/v1/batches", "/v1/batches")
    u = d.json("GET", f"/v1/usage?batch={a['batch']}", key=B)  # A's batch id filters B's ledger: empty
    assert u["data"] == [] and u["totals"]["num_model_requests"] == 0, u
    r = d.call("GET", f"/v1/batches?after={a['batch']}", key=B)  # A's id is no cursor for B
    assert r.status == 400 and a["batch"] not in r.body.decode().replace(f"'{a['batch']}'", ""), r
    # POST /v1/jobs creates B's own batch; A's Idempotency-Key means nothing to B
    body = jsonl(1)
    ra = d.call("POST", "/v1/jobs", body, {"Idempotency-Key": "shared-key"}, key=key_a)
    rb = d.call("POST", "/v1/jobs", body, {"Idempotency-Key": "shared-key"}, key=B)
    probed.add(("POST", "/v1/jobs"))
    assert ra.status == 200 and rb.status == 200, (ra, rb)
    assert rb.json()["id"] != ra.json()["id"] and "idempotent-replayed" not in rb.headers, rb
    a_ids.add(ra.json()["id"])
    # dead letters
    b_list("/v1/dead_letters", "/v1/dead_letters")
    not_found("POST", "/v1/dead_letters/{dead_letter_id}/retry", f"/v1/dead_letters/{a['dead_letter']}/retry")
    # webhooks
    ep = a["endpoint"]
    not_found("GET", "/v1/webhook_endpoints/{endpoint_id}", f"/v1/webhook_endpoints/{ep}")
    not_found("GET", "/v1/webhook_endpoints/{endpoint_id}/deliveries", f"/v1/webhook_endpoints/{ep}/deliveries")
    not_found("POST", "/v1/webhook_endpoints/{endpoint_id}/test", f"/v1/webhook_endpoints/{ep}/test")
    not_found("POST", "/v1/webhook_endpoints/{endpoint_id}/deliveries/{delivery_id}/redeliver",
              f"/v1/webhook_endpoints/{ep}/deliveries/{a['delivery']}/redeliver")
    not_found("DELETE", "/v1/webhook_endpoints/{endpoint_id}", f"/v1/webhook_endpoints/{ep}")
    b_list("/v1/webhook_endpoints", "/v1/webhook_endpoints")
    b_ep = d.json("POST", "/v1/webhook_endpoints", {"url": "http://127.0.0.1:9/b-hook"}, key=B)
    probed.add(("POST", "/v1/webhook_endpoints"))
    assert b_ep["id"] not in json.dumps(d.json("GET", "/v1/webhook_endpoints", key=key_a))
    sb = b_list("/v1/webhook_secret", "/v1/webhook_secret")
    assert sb["secret"] != a["secret"], "tenants share a webhook signing secret"
    # usage and models
    u = b_list("/v1/usage", "/v1/usage?group_by=batch")
    assert u["data"] == [] or all(g.get("key") not in a_ids for g in u["data"]), u
    ua = d.json("GET", "/v1/usage?group_by=batch", key=key_a)
    assert a["batch"] in json.dumps(ua), ua  # positive control
    b_list("/v1/models", "/v1/models")  # served models are global, never tenant data

    # Anthropic's Message Batches (their envelope: error.type not_found_error, no code); x-api-key and Bearer
    mb = a["message_batch"]
    for auth in ({"x-api-key": B}, {"Authorization": f"Bearer {B}"}):
        for method, template, path in (
                ("GET", "/v1/messages/batches/{message_batch_id}", f"/v1/messages/batches/{mb}"),
                ("DELETE", "/v1/messages/batches/{message_batch_id}", f"/v1/messages/batches/{mb}"),
                ("POST", "/v1/messages/batches/{message_batch_id}/cancel", f"/v1/messages/batches/{mb}/cancel"),
                ("GET", "/v1/messages/batches/{message_batch_id}/results", f"/v1/messages/batches/{mb}/results")):
            probed.add((method, template))
            r = d.call(method, path, None, dict(ANTH, **auth), key=None)
            e = clean_error(r.status, r.body, 404)
            assert e["type"] == "not_found_error" and json.loads(r.body)["type"] == "error", (method, path, e)
            assert "alpha" not in r.body.decode(), r
        r = d.call("GET", "/v1/messages/batches", None, dict(ANTH, **auth), key=None)
        probed.add(("GET", "/v1/messages/batches"))
        assert r.status == 200 and mb not in r.body.decode(), r
        r = d.call("GET", f"/v1/messages/batches?after_id={mb}", None, dict(ANTH, **auth), key=None)
        assert clean_error(r.status, r.body, 400)["type"] == "invalid_request_error", r  # A's id is no cursor
    r = d.call("POST", "/v1/messages/batches", json.dumps({"requests": [{"custom_id": "m", "params": {
        "model": "nobody", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}}]}).encode(),
        dict(ANTH, **{"x-api-key": B}), key=None)
    probed.add(("POST", "/v1/messages/batches"))
    assert r.status == 200, r
    a_list = d.call("GET", "/v1/messages/batches", None, dict(ANTH, **{"x-api-key": key_a}), key=None)
    assert r.json()["id"] not in a_list.body.decode() and mb in a_list.body.decode(), a_list

    missing = tenant_routes() - probed
    assert not missing, f"tenant routes without an isolation probe: {sorted(missing)}"

    # A still sees every object (the 404s above were isolation, not bad ids)
    for fid in (a["file"], a["output"], a["errors"]):
        assert d.call("GET", f"/v1/files/{fid}/content", key=key_a).status == 200
    for bid in (a["batch"], a["dead_batch"], a["waiting"]):
        assert d.json("GET", f"/v1/batches/{bid}", key=key_a)["id"] == bid
    assert d.json("GET", f"/v1/webhook_endpoints/{ep}", key=key_a)["id"] == ep
    dl = d.json("GET", "/v1/dead_letters", key=key_a)["data"]
    assert [x["id"] for x in dl] == [a["dead_letter"]], dl
    assert d.json("GET", f"/v1/batches/{a['waiting']}", key=key_a)["status"] in ("validating", "in_progress")
    r = d.call("GET", f"/v1/messages/batches/{mb}", None, dict(ANTH, **{"x-api-key": key_a}), key=None)
    assert r.status == 200 and r.json()["processing_status"] == "in_progress", r  # B's cancel did nothing
    healthy(d)


# ---------------------------------------------------------------- file names

def upload_raw(d, key, filename_bytes, data=b"{}\n"):
    b = b"sec-boundary"
    body = (b"--" + b + b'\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            b"--" + b + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename_bytes +
            b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + data + b"\r\n--" + b + b"--\r\n")
    head = (f"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary=sec-boundary\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return raw(d.port, head + body)


def test_security_upload_file_names_with_traversal_nul_and_bad_utf8():
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS)
    parent = os.path.dirname(data)
    before = set(os.listdir(parent))
    # ../ is a name, never a path: stored verbatim as metadata, content intact
    for name in ("../../../../etc/passwd", "/abs/path.jsonl", "a/../../b.jsonl", "../" * 40 + "deep"):
        f = d.upload(b'{"a":1}\n', filename=name, key=key)
        assert f["filename"] == name, f
        assert d.call("GET", f"/v1/files/{f['id']}/content", key=key).body == b'{"a":1}\n'
    assert set(os.listdir(parent)) == before, "an upload wrote next to the data directory"
    for dirpath, _, files in os.walk(data):
        for fn in files:
            assert "passwd" not in fn and ".." not in fn, os.path.join(dirpath, fn)
    # NUL: refused
    st, _, body = upload_raw(d, key, b"a\x00b.jsonl")
    clean_error(st, body, 400)
    # control characters and quotes: escaped in valid JSON
    st, _, body = upload_raw(d, key, b'ctl\x01\x1f \\"q\\".jsonl')
    assert st == 200 and json.loads(body.decode())["filename"] == 'ctl\x01\x1f "q".jsonl', body
    # a name over 255 bytes: refused
    st, _, body = upload_raw(d, key, b"x" * 300)
    clean_error(st, body, 400)
    logged(d, 400, 2)
    healthy(d)
    assert not [x for x in d.json("GET", "/v1/files", key=key)["data"] if "\x00" in x["filename"]]


def test_regression_upload_filename_invalid_utf8_made_invalid_json():
    """Bug: a multipart file name in Latin-1 (b"\\xff\\xfe.jsonl"), or a /v1/jobs
    filename (query or Jobd-Filename) with invalid UTF-8, was stored and echoed
    as raw bytes, so the File/list answers were not valid JSON (the SDK fails
    to decode them). Now the upload is refused with 400 invalid_value, and
    js_escape writes any invalid byte as \\ufffd (tests/unit/common/test_js.c)."""
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS)
    st, _, body = upload_raw(d, key, b"\xff\xfe.jsonl")
    e = clean_error(st, body, 400)
    assert e["param"] == "file" and e["code"] == "invalid_value", e
    st, _, body = upload_raw(d, key, "caf\u00e9 \u20ac.jsonl".encode())  # valid UTF-8 is fine
    assert st == 200 and json.loads(body.decode("utf-8"))["filename"] == "caf\u00e9 \u20ac.jsonl", body
    r = d.call("POST", "/v1/jobs?filename=%FF%FE.jsonl", jsonl(1), key=key)
    assert clean_error(r.status, r.body, 400)["param"] == "filename", r
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: {len(jsonl(1))}\r\n"
            ).encode() + b"Jobd-Filename: \xc3(\r\n\r\n" + jsonl(1)
    st, _, body = raw(d.port, head)
    assert clean_error(st, body, 400)["param"] == "filename", body
    r = d.call("POST", "/v1/jobs?filename=" + "y" * 300, jsonl(1), key=key)
    clean_error(r.status, r.body, 400)
    # every answer that lists files is valid UTF-8 JSON
    json.loads(d.call("GET", "/v1/files", key=key).body.decode("utf-8"))
    # an error message echoing a long multi-byte input is cut, never into invalid UTF-8
    r = d.call("GET", "/v1/batches?after=" + "%C3%A9" * 700, key=key)
    clean_error(r.status, r.body, 400)
    healthy(d)


# ---------------------------------------------------------------- deep JSON

def test_security_json_nested_100000_deep():
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS)
    n = 100000
    arrays = b"[" * n + b"]" * n
    objects = b'{"a":' * n + b"1" + b"}" * n
    f = d.upload(jsonl(1), key=key)
    bodies = [
        ("/v1/batches", arrays, key),
        ("/v1/batches", objects, key),
        ("/v1/batches", b'{"input_file_id":"' + f["id"].encode() + b'","endpoint":"/v1/chat/completions",'
                        b'"metadata":' + objects + b"}", key),
        ("/v1/webhook_endpoints", b'{"url":' + arrays + b"}", key),
        ("/v1/worker/register", b'{"name":"w","models":' + arrays + b"}", WT),
        ("/v1/worker/lease", objects, WT),
    ]
    for path, body, k in bodies:
        r = d.call("POST", path, body, {"Content-Type": "application/json"}, key=k)
        # the 64 KiB routes refuse 200 KB of brackets by size first
        clean_error(r.status, r.body, 400 if path == "/v1/batches" or r.status != 413 else 413)
    # and as deep as fits in 64 KiB there: parsed and refused, 400
    for path, k in (("/v1/webhook_endpoints", key), ("/v1/worker/register", WT)):
        r = d.call("POST", path, b"[" * 30000 + b"]" * 30000, {"Content-Type": "application/json"}, key=k)
        clean_error(r.status, r.body, 400)
    # the same nesting as one JSONL line of a batch: the batch fails with a line error
    line = b'{"custom_id":"deep","method":"POST","url":"/v1/chat/completions","body":' + objects + b"}\n"
    b = d.submit(jsonl(1) + line, key=key)
    b = d.wait_batch(b["id"], statuses=("failed", "in_progress"), key=key)
    assert b["status"] == "failed" and b["errors"]["data"], b
    assert b["errors"]["data"][0]["line"] == 2, b["errors"]
    logged(d, 400, 5)
    healthy(d)


# ---------------------------------------------------------------- Content-Length

def test_security_2gb_content_length_tiny_body():
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS)
    big = 2 * 1024 ** 3
    for path, ct, tok in (("/v1/batches", "application/json", key),
                          ("/v1/files", "multipart/form-data; boundary=x", key),
                          ("/v1/jobs", "application/x-ndjson", key),
                          ("/v1/webhook_endpoints", "application/json", key),
                          ("/v1/worker/results", "application/x-ndjson", WT)):
        t0 = time.monotonic()
        st, h, body = raw(d.port, (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
                                   f"Content-Type: {ct}\r\nContent-Length: {big}\r\n\r\n{{}}").encode())
        e = clean_error(st, body, 413)
        assert time.monotonic() - t0 < 10, "the 413 waited for the body"
    # a Content-Length beyond 64 bits, and a chunked body announcing a 2 GB chunk
    st, _, body = raw(d.port, (f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                               f"Content-Length: 99999999999999999999999\r\n\r\n{{}}").encode())
    assert 400 <= st < 500, (st, body)
    logged(d, 413, 5)
    healthy(d)
    # where the limit allows 2 GB, the tiny body times out (408) instead of hanging
    d2 = Jobd(data=os.path.join(tmpdir(), "d2"), key=None,
              args=["--max-upload", "4G", "--max-file", "4G", "--body-timeout", "1s"])
    t0 = time.monotonic()
    st, _, body = raw(d2.port, (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {big}\r\n\r\n"
                                + jsonl(1).decode()).encode(), timeout=30)
    assert st == 408 or st == 0, (st, body)
    assert time.monotonic() - t0 < 25
    logged(d2, 408)
    healthy(d2)
    assert d2.json("GET", "/v1/batches", key=None)["data"] == []  # nothing half-created


# ---------------------------------------------------------------- header floods

def test_security_header_floods():
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS + ["--header-timeout", "1s"])
    auth = f"Authorization: Bearer {key}\r\n"
    many = "".join(f"X-Flood-{i}: v\r\n" for i in range(1000))
    st, _, body = raw(d.port, f"GET /v1/batches HTTP/1.1\r\nHost: x\r\n{auth}{many}\r\n".encode())
    clean_error(st, body, 431)
    st, _, body = raw(d.port, f"GET /v1/batches HTTP/1.1\r\nHost: x\r\n{auth}X-Big: {'a' * 1000000}\r\n\r\n".encode())
    clean_error(st, body, 431)
    st, _, body = raw(d.port, f"GET /v1/batches HTTP/1.1\r\nHost: x\r\n{auth}Cookie: {'c=1; ' * 5000}\r\n\r\n".encode())
    clean_error(st, body, 431)
    st, _, body = raw(d.port, f"GET /v1/{'a' * 20000} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    assert st in (414, 431), (st, body)
    clean_error(st, body, st)
    # a header block that never ends (slowloris): 408 after --header-timeout
    s = socket.create_connection(("127.0.0.1", d.port), timeout=20)
    s.sendall(f"GET /v1/batches HTTP/1.1\r\nHost: x\r\n{auth}X-Slow: 1\r\n".encode())
    t0 = time.monotonic()
    got = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        got += c
    s.close()
    assert time.monotonic() - t0 < 15, "the slow header block was not timed out"
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:200]
    logged(d, 408)
    # 50 connections each flooding at once: every one answered 431, then normal service
    socks = []
    for _ in range(50):
        c = socket.create_connection(("127.0.0.1", d.port), timeout=20)
        c.sendall(f"GET /v1/batches HTTP/1.1\r\nHost: x\r\n{auth}{many}\r\n".encode())
        socks.append(c)
    for c in socks:
        data_ = b""
        while b"\r\n\r\n" not in data_:
            chunk = c.recv(65536)
            if not chunk:
                break
            data_ += chunk
        assert data_.startswith(b"HTTP/1.1 431"), data_[:200]
        c.close()
    logged(d, 431, 53)
    assert d.json("GET", "/v1/batches", key=key)["data"] == []
    healthy(d)


def test_regression_chunked_2gb_chunk_waited_for_body_timeout():
    """Bug: a chunked body whose chunk header announced 2 GB on a route with a
    1 MiB limit was not refused until the body timeout (30 s, then 408); the
    chunk size is now checked against the limit when its header arrives."""
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "t")
    d = Jobd(data=data, key=key, args=ARGS)
    for path, ct, tok in (("/v1/batches", "application/json", key), ("/v1/jobs", "application/x-ndjson", key),
                          ("/v1/worker/results", "application/x-ndjson", WT)):
        t0 = time.monotonic()
        st, _, body = raw(d.port, (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
                                   f"Content-Type: {ct}\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   f"80000000\r\n{{}}").encode(), timeout=20)
        clean_error(st, body, 413)
        assert time.monotonic() - t0 < 10, "waited for the body"
    # a second chunk that crosses the limit is refused too; small chunked bodies still work
    st, _, body = raw(d.port, (f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                               f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                               f"1\r\n{{\r\nFFFFFF\r\n").encode(), timeout=20)
    clean_error(st, body, 413)
    f = d.upload(jsonl(1), key=key)
    js = json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}).encode()
    st, _, body = raw(d.port, (f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                               f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                               f"{len(js):x}\r\n").encode() + js + b"\r\n0\r\n\r\n", timeout=20)
    assert st == 200 and json.loads(body)["input_file_id"] == f["id"], (st, body)
    logged(d, 413, 4)
    healthy(d)


def test_regression_timeouts_408_not_logged():
    """Bug: a connection timed out in its header block or body was answered
    408 and closed with no log line (only a metric); it is now logged."""
    d = Jobd(data=os.path.join(tmpdir(), "d"), key=None, args=["--header-timeout", "1s", "--body-timeout", "1s"])
    st, _, _ = raw(d.port, b"GET /v1/batches HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n", timeout=20)
    assert st in (0, 408), st
    st, _, _ = raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", timeout=20)
    assert st in (0, 408), st
    logged(d, 408, 2)
    log = d.proc.log()
    assert "Request headers not received in time." in log and "Request body not received in time." in log, log
    healthy(d)


def test_regression_spec_idempotent_post_without_409_422():
    """Bug (schemathesis, status_code_conformance): POST /v1/webhook_endpoints
    takes an Idempotency-Key and answers 409/422 for it, but the spec did not
    list them. Every operation declaring the key must document both."""
    import yaml
    spec = yaml.safe_load(open(os.path.join(ROOT, "spec", "openapi.yaml")))
    n = 0
    for path, item in spec["paths"].items():
        for m, op in item.items():
            if not isinstance(op, dict) or m == "parameters":
                continue
            if {"$ref": "#/components/parameters/IdempotencyKey"} in op.get("parameters", []):
                n += 1
                assert {"409", "422"} <= set(map(str, op["responses"])), (m, path)
    assert n >= 5, n
