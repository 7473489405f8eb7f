"""jobd auth modes, tenant isolation and idempotency on a real daemon:
Bearer keys (401 without or with a bad key), refusal to serve a
non-loopback address without keys, other tenants' ids are 404, the
database holds no plaintext key, Idempotency-Key replay / 422 mismatch /
50 concurrent requests creating exactly one batch."""
import os
import threading

from harness import Proc, free_port, tmpdir, db_connect
from jobdlib import Jobd, create_key, jsonl


def test_jobd_refuses_public_address_without_keys():
    data = os.path.join(tmpdir(), "data")
    from harness import binary
    p = Proc([binary("jobd"), "--listen", f"0.0.0.0:{free_port()}", "--data", data])
    rc = p.p.wait(30)
    assert rc == 1 and "without API keys" in p.log(), (rc, p.log())


def test_jobd_no_auth_mode_is_logged():
    d = Jobd()
    assert "no-auth mode" in d.proc.log()
    assert d.call("GET", "/v1/batches").status == 200


def test_jobd_keys_and_tenant_isolation():
    data = os.path.join(tmpdir(), "data")
    ka = create_key(data, "alpha")
    kb = create_key(data, "beta")
    d = Jobd(data=data, key=ka)
    assert "API keys required" in d.proc.log()
    r = d.call("GET", "/v1/batches", key=None)
    assert r.status == 401 and r.json()["error"]["code"] == "missing_api_key", r
    r = d.call("GET", "/v1/batches", key=ka[:-1] + ("x" if ka[-1] != "x" else "y"))
    assert r.status == 401 and r.json()["error"]["code"] == "invalid_api_key", r
    assert d.call("GET", "/healthz", key=None).status == 200
    f = d.upload(jsonl(2))
    b = d.wait_batch(d.create_batch(f["id"])["id"])
    for method, path in [("GET", f"/v1/files/{f['id']}"), ("GET", f"/v1/files/{f['id']}/content"),
                         ("DELETE", f"/v1/files/{f['id']}"), ("GET", f"/v1/batches/{b['id']}"),
                         ("POST", f"/v1/batches/{b['id']}/cancel")]:
        r = d.call(method, path, key=kb)
        assert r.status == 404, (method, path, r)
    assert d.json("GET", "/v1/batches", key=kb)["data"] == []
    assert d.json("GET", "/v1/files", key=kb)["data"] == []
    # beta cannot build a batch on alpha's file either
    r = d.call("POST", "/v1/batches", b'{"input_file_id":"%s","endpoint":"/v1/chat/completions"}' % f["id"].encode(),
               {"Content-Type": "application/json"}, key=kb)
    assert r.status == 404, r
    # alpha still sees everything, unchanged
    assert d.json("GET", f"/v1/batches/{b['id']}")["status"] == "in_progress"
    # a revoked key stops working at once
    from harness import run
    kid = kb[len("sk-jobd-"):].split("_")[0]
    assert run([d.bin, "keys", "revoke", kid, "--data", data]).returncode == 0
    assert d.call("GET", "/v1/batches", key=kb).status == 401
    d.proc.stop()
    for name in os.listdir(data):
        p = os.path.join(data, name)
        if os.path.isfile(p):
            with open(p, "rb") as fh:
                blob = fh.read()
            for k in (ka, kb):
                assert k.encode() not in blob and k.split("_")[1].encode() not in blob, name


def test_jobd_idempotency_replay_mismatch_and_scope():
    d = Jobd()
    f = d.upload(jsonl(2))
    body = {"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}
    import json
    raw = json.dumps(body).encode()
    h = {"Content-Type": "application/json", "Idempotency-Key": "key-1"}
    r1 = d.call("POST", "/v1/batches", raw, h)
    r2 = d.call("POST", "/v1/batches", raw, h)
    assert r1.status == r2.status == 200 and r1.body == r2.body
    assert "idempotent-replayed" not in r1.headers and r2.headers.get("idempotent-replayed") == "true"
    r3 = d.call("POST", "/v1/batches", raw.replace(b"chat/completions", b"completions"), h)
    assert r3.status == 422 and r3.json()["error"]["code"] == "idempotency_key_reused", r3
    r4 = d.call("POST", "/v1/batches/" + r1.json()["id"] + "/cancel", None, {"Idempotency-Key": "key-1"})
    assert r4.status == 422, r4  # same key, other path
    assert len(d.json("GET", "/v1/batches")["data"]) == 1
    # uploads and jobs: the same content and options replay
    ct_hdr = {"Idempotency-Key": "up-1"}
    u1 = d.upload(jsonl(3), headers=ct_hdr)
    u2 = d.upload(jsonl(3), headers=ct_hdr)  # a fresh multipart boundary, same file
    assert u1 == u2 and len(d.json("GET", "/v1/files")["data"]) == 2
    j1 = d.call("POST", "/v1/jobs", jsonl(4), {"Idempotency-Key": "job-1"})
    j2 = d.call("POST", "/v1/jobs", jsonl(4), {"Idempotency-Key": "job-1"})
    assert j1.body == j2.body and j2.headers.get("idempotent-replayed") == "true"
    j3 = d.call("POST", "/v1/jobs", jsonl(5), {"Idempotency-Key": "job-1"})
    assert j3.status == 422
    # a failed request (404 file) leaves the key free for a corrected retry
    bad = json.dumps({"input_file_id": "file-missing", "endpoint": "/v1/chat/completions"}).encode()
    assert d.call("POST", "/v1/batches", bad, {**h, "Idempotency-Key": "k2"}).status == 404
    assert d.call("POST", "/v1/batches", raw, {**h, "Idempotency-Key": "k2"}).status == 200
    assert d.call("POST", "/v1/batches", raw, {**h, "Idempotency-Key": "x" * 256}).status == 400


def test_jobd_idempotency_50_concurrent_requests_one_batch():
    d = Jobd()
    f = d.upload(jsonl(2))
    import json
    raw = json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}).encode()
    h = {"Content-Type": "application/json", "Idempotency-Key": "race"}
    results = []
    barrier = threading.Barrier(50)

    def go():
        barrier.wait()
        results.append(d.call("POST", "/v1/batches", raw, h))

    ts = [threading.Thread(target=go) for _ in range(50)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok = [r for r in results if r.status == 200]
    busy = [r for r in results if r.status == 409]
    assert len(ok) + len(busy) == 50, [r.status for r in results]
    assert len({r.json()["id"] for r in ok}) == 1 and ok
    assert all(r.headers.get("retry-after") for r in busy)
    assert len(d.json("GET", "/v1/batches")["data"]) == 1
    db = db_connect(d.data)
    assert db.execute("SELECT count(*) FROM batches").fetchone()[0] == 1
