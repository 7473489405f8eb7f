"""Budgets and admission on a real jobd (spec/usage.md "Budgets"): per-tenant
limits set by the admin route; a submission over a limit is refused with 429
insufficient_quota naming the limit, and the SQLite file (read here with
python's sqlite3) shows nothing of it; reservations shrink per finished
request, are released by cancellation, and a next submission fits once a
batch completed; a daily spend limit is hit by actual spend (the ledger);
/metrics shows the rejections and the tokens/cost by tenant and model.

Expected estimates are computed here from the documented rule, not read from
jobd: prompt tokens = ceil((content bytes + 16 per message) / 4), plus
max_tokens; cost = prompt * IN + max_tokens * OUT per 1M tokens, rounded half
up per request."""
import json
import os
import re

from jobdlib import Jobd, create_key
from workerlib import TestWorker, success
from harness import db_connect  # noqa: E402

WT = "worker-secret-b"
AT = "admin-secret-b"
IN, OUT = 1000000, 2000000  # micro-dollars per 1M tokens: 1 and 2 micro-dollars per token
ARGS = ["--worker-token", WT, "--admin-token", AT, "--sweep-interval", "100ms",
        "--prices", f"smollm={IN}:{OUT}"]


def line(i, content=None, max_tokens=16):
    content = content or f"Question {i}?"
    return json.dumps({"custom_id": f"r-{i}", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "smollm", "messages": [{"role": "user", "content": content}],
                                "max_tokens": max_tokens}})


def body(lines):
    return ("\n".join(lines) + "\n").encode()


def est_tokens(content, max_tokens=16):
    return (len(content.encode()) + 16 + 3) // 4 + max_tokens


def est_cost(content, max_tokens=16):
    p = (len(content.encode()) + 16 + 3) // 4
    return (p * IN + max_tokens * OUT + 500000) // 1000000


def counts(data):
    db = db_connect(data)
    try:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("batches", "requests", "files")}
    finally:
        db.close()


def reserved(data, batch_id):
    db = db_connect(data)
    try:
        return db.execute("SELECT reserved_tokens, reserved_micros FROM batches WHERE id = ?", (batch_id,)).fetchone()
    finally:
        db.close()


def limits(d, tenant, obj=None, expect=200):
    if obj is None:
        return d.json("GET", f"/v1/admin/tenants/{tenant}/limits", key=AT, expect=expect)
    return d.json("PUT", f"/v1/admin/tenants/{tenant}/limits", obj, key=AT, expect=expect)


def metric(d, name_labels):
    m = d.call("GET", "/metrics").body.decode()
    found = re.search(r"^" + re.escape(name_labels) + r" (\d+)$", m, re.M)
    return int(found.group(1)) if found else None


def refused(r, code):
    assert r.status == 429, r
    e = r.json()["error"]
    assert e["type"] == "insufficient_quota" and e["code"] == code, e
    return e["message"]


def finish(d, w, batch_id, key, answer=success):
    d.wait_batch(batch_id, key=key)
    w.run_until(lambda: d.json("GET", f"/v1/batches/{batch_id}", key=key)["status"] == "completed",
                policy=answer, timeout=60, wait_ms=100)
    return d.json("GET", f"/v1/batches/{batch_id}", key=key)


def test_budget_queued_tokens_refused_nothing_persisted_then_reconciled():
    data = os.path.join(__import__("harness").tmpdir(), "data")
    ka, kb = create_key(data, "alpha"), create_key(data, "beta")
    d = Jobd(data=data, key=ka, args=ARGS)
    w = TestWorker(d.port, WT)
    w.register()
    contents = [f"Question {i}?" for i in range(1, 4)]
    a_tokens = sum(est_tokens(c) for c in contents)  # 3 x 23 = 69
    assert a_tokens == 69
    cap = a_tokens + 30
    got = limits(d, "alpha", {"max_queued_tokens": cap})
    assert got["max_queued_tokens"] == cap and got["max_daily_spend_micros"] is None, got
    assert got["usage"]["queued_tokens"] == 0, got

    a = d.submit(body(line(i) for i in range(1, 4)), key=ka)
    d.wait_batch(a["id"], key=ka)  # its rows are in: the counts below only move with new submissions
    assert limits(d, "alpha")["usage"]["queued_tokens"] == a_tokens
    assert reserved(data, a["id"]) == (a_tokens, sum(est_cost(c) for c in contents))

    # 2 more requests (46 tokens) would bring 69 to 115 > 99: refused, nothing stored
    before = counts(data)
    nfiles = len(os.listdir(os.path.join(data, "files")))
    msg = refused(d.call("POST", "/v1/jobs", body(line(i) for i in range(4, 6)), key=ka),
                  "queued_tokens_limit_exceeded")
    assert f"limit is {cap} tokens" in msg and f"{a_tokens} are queued" in msg and "46 tokens" in msg, msg
    assert f"{a_tokens + 46 - cap} over the limit" in msg, msg
    assert counts(data) == before
    assert len(os.listdir(os.path.join(data, "files"))) == nfiles
    # same through /v1/files + /v1/batches: the uploaded file stays, no batch or request rows
    f = d.upload(body(line(i) for i in range(4, 6)), key=ka)
    before = counts(data)
    r = d.call("POST", "/v1/batches", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                  "completion_window": "24h"}).encode(),
               {"Content-Type": "application/json", "Idempotency-Key": "k1"}, key=ka)
    refused(r, "queued_tokens_limit_exceeded")
    assert counts(data) == before
    # another tenant is not limited by alpha's limits
    d.submit(body(line(i) for i in range(1, 6)), key=kb)
    assert metric(d, 'jobd_budget_rejections_total{limit="queued_tokens"}') == 2

    # one request finishes: its 23 tokens are released in the result's transaction
    d.wait_batch(a["id"], key=ka)
    lease = w.lease(max_requests=1).json()
    (q,) = lease["requests"]
    assert q["custom_id"].startswith("r-"), q
    w.results(lease["lease_id"], [success(q)])
    u = limits(d, "alpha")["usage"]
    assert u["queued_tokens"] == a_tokens - 23, u
    assert est_cost(contents[0]) == est_cost(contents[1]) == est_cost(contents[2])  # q's share is any one's
    assert u["reserved_micros"] == 2 * est_cost(contents[0]), u
    # the rest complete: everything reconciled, the refused submission now fits (same idempotency key: a
    # refusal is not stored, the retry is a new attempt)
    finish(d, w, a["id"], ka)
    assert reserved(data, a["id"]) == (0, 0)
    u = limits(d, "alpha")["usage"]
    assert u["queued_tokens"] == 0 and u["reserved_micros"] == 0, u
    assert u["spent_today_micros"] == 3 * ((5 * IN + 3 * OUT + 500000) // 1000000), u  # success(): 5 in, 3 out
    r = d.call("POST", "/v1/batches", json.dumps({"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                  "completion_window": "24h"}).encode(),
               {"Content-Type": "application/json", "Idempotency-Key": "k1"}, key=ka)
    assert r.status == 200, r
    assert limits(d, "alpha")["usage"]["queued_tokens"] == 46


def test_budget_daily_spend_hit_by_actual_spend_and_monthly_limit():
    data = os.path.join(__import__("harness").tmpdir(), "data")
    ka = create_key(data, "alpha")
    d = Jobd(data=data, key=ka, args=ARGS)
    w = TestWorker(d.port, WT)
    w.register()
    limits(d, "alpha", {"max_daily_spend_micros": 500})
    a = d.submit(body(line(i) for i in (1, 2)), key=ka)
    d.wait_batch(a["id"], key=ka)
    est = est_cost("Question 1?") + est_cost("Question 2?")  # 2 x (7 + 32)
    assert est == 78
    assert limits(d, "alpha")["usage"]["reserved_micros"] == est

    def pricey(q):  # actual usage far above the estimate: 100 in, 200 out = 500 micro-dollars each
        x = success(q)
        x["usage"] = {"prompt_tokens": 100, "completion_tokens": 200, "cached_tokens": 0}
        return x

    b = finish(d, w, a["id"], ka, answer=pricey)
    assert b["cost"]["amount_micros"] == 1000, b
    u = limits(d, "alpha")["usage"]
    assert u == {"queued_tokens": 0, "reserved_micros": 0, "spent_today_micros": 1000,
                 "spent_this_month_micros": 1000}, u
    before = counts(data)
    msg = refused(d.call("POST", "/v1/jobs", body([line(3)]), key=ka), "daily_spend_limit_exceeded")
    assert "limit is 500 micro-dollars" in msg and "current use is 1000" in msg, msg
    assert f"estimate is {est_cost('Question 3?')}" in msg and f"{1000 + 39 - 500} over the limit" in msg, msg
    assert counts(data) == before
    # a higher daily limit, but a monthly one it exceeds by 19
    limits(d, "alpha", {"max_daily_spend_micros": 2000, "max_monthly_spend_micros": 1020})
    msg = refused(d.call("POST", "/v1/jobs", body([line(3)]), key=ka), "monthly_spend_limit_exceeded")
    assert "limit is 1020 micro-dollars" in msg and "19 over the limit" in msg, msg
    assert counts(data) == before
    got = limits(d, "alpha", {"max_daily_spend_micros": 2000})
    assert got["max_monthly_spend_micros"] is None and got["max_daily_spend_micros"] == 2000, got
    c = d.submit(body([line(3)]), key=ka)
    assert limits(d, "alpha")["usage"]["reserved_micros"] == 39
    # cancelling releases the reservation
    d.wait_batch(c["id"], key=ka)
    d.json("POST", f"/v1/batches/{c['id']}/cancel", key=ka)
    d.wait_batch(c["id"], statuses=("cancelled",), key=ka)
    assert limits(d, "alpha")["usage"]["reserved_micros"] == 0
    assert reserved(data, c["id"]) == (0, 0)
    # a file that fails validation releases at once too
    bad = d.submit(body([line(4), '{"custom_id": "x"'] ), key=ka)
    d.wait_batch(bad["id"], statuses=("failed",), key=ka)
    assert limits(d, "alpha")["usage"] == {"queued_tokens": 0, "reserved_micros": 0, "spent_today_micros": 1000,
                                           "spent_this_month_micros": 1000}
    assert metric(d, 'jobd_budget_rejections_total{limit="daily_spend"}') == 1
    assert metric(d, 'jobd_budget_rejections_total{limit="monthly_spend"}') == 1
    assert metric(d, 'jobd_tokens_total{tenant="alpha",model="smollm",kind="input"}') == 200
    assert metric(d, 'jobd_tokens_total{tenant="alpha",model="smollm",kind="output"}') == 400
    assert metric(d, 'jobd_tokens_total{tenant="alpha",model="smollm",kind="cached"}') == 0
    assert metric(d, 'jobd_cost_micros_total{tenant="alpha",model="smollm"}') == 1000


def test_budget_metrics_move_with_results():
    d = Jobd(args=ARGS)
    w = TestWorker(d.port, WT)
    w.register()
    assert metric(d, 'jobd_cost_micros_total{tenant="default",model="smollm"}') is None
    b = d.submit(body(line(i) for i in (1, 2, 3)))
    finish(d, w, b["id"], "default")
    assert metric(d, 'jobd_tokens_total{tenant="default",model="smollm",kind="input"}') == 15
    assert metric(d, 'jobd_cost_micros_total{tenant="default",model="smollm"}') == 3 * 11
    b = d.submit(body([line(9)]))
    finish(d, w, b["id"], "default")
    assert metric(d, 'jobd_tokens_total{tenant="default",model="smollm",kind="output"}') == 12
    assert metric(d, 'jobd_cost_micros_total{tenant="default",model="smollm"}') == 4 * 11


def test_budget_admin_route_auth_and_validation():
    data = os.path.join(__import__("harness").tmpdir(), "data")
    ka = create_key(data, "alpha")
    d = Jobd(data=data, key=ka, args=ARGS)
    assert d.call("GET", "/v1/admin/tenants/alpha/limits", key=ka).status == 401
    assert d.call("GET", "/v1/admin/tenants/alpha/limits", key=None).status == 401
    limits(d, "nobody", expect=404)
    limits(d, "alpha", {"max_queued_tokens": -1}, expect=400)
    limits(d, "alpha", {"max_queued_tokens": "7"}, expect=400)
    limits(d, "alpha", {"max_tokens": 7}, expect=400)
    got = limits(d, "alpha")
    assert got["tenant"] == "alpha" and got["updated_at"] is None and got["max_queued_tokens"] is None, got
    got = limits(d, got["tenant_id"], {"max_queued_tokens": 0})
    assert got["max_queued_tokens"] == 0 and got["updated_at"] > 0, got
    refused(d.call("POST", "/v1/jobs", body([line(1)]), key=ka), "queued_tokens_limit_exceeded")
