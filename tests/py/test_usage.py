"""Cost accounting on a real jobd with a scripted worker (tests/py/workerlib.py):
every committed result's usage_ledger row is priced from --prices (checked by
hand calculation here), the ledger sums exactly to each batch's usage and to
GET /v1/usage for the same range, grouped by batch, model and day, per tenant."""
import os
import time

from harness import tmpdir, db_connect
from jobdlib import Jobd, create_key, jsonl
from workerlib import TestWorker, success

WT = "worker-secret-u"
PRICES = {"smollm": (150000, 600000, 75000), "other": (1000000, 2000000, 500000)}  # other: cached = IN/2
ADM = "admin-secret-u"
ARGS = ["--worker-token", WT, "--admin-token", ADM, "--sweep-interval", "100ms", "--prices",
        "smollm=150000:600000:75000,other=1000000:2000000"]


def hand_cost(model, prompt, cached, completion):
    p_in, p_out, p_cached = PRICES[model]
    num = (prompt - cached) * p_in + cached * p_cached + completion * p_out
    return (num + 500000) // 1000000  # round half up, once per request


def answer(q):
    i = int(q["custom_id"].split("-")[1])
    line = success(q)
    line["usage"] = {"prompt_tokens": 1000 * i + 7, "completion_tokens": 333 * i + 1, "cached_tokens": (i % 3) * 100}
    return line


def run_batch(d, w, model, n, key):
    b = d.submit(jsonl(n, model=model), key=key)
    d.wait_batch(b["id"], key=key)
    done = 0
    while done < n:
        lease = w.lease(max_requests=100, wait_ms=1000).json()
        if lease["requests"]:
            w.results(lease["lease_id"], [answer(q) for q in lease["requests"]])
            done += len(lease["requests"])
    return d.wait_batch(b["id"], statuses=("completed",), timeout=30, key=key)


def test_usage_ledger_cost_batch_usage_and_report_agree():
    data = os.path.join(tmpdir(), "data")
    ka, kb = create_key(data, "alpha"), create_key(data, "beta")
    d = Jobd(data=data, key=ka, args=ARGS)
    w1 = TestWorker(d.port, WT, model="smollm", name="w1")
    w2 = TestWorker(d.port, WT, model="other", name="w2")
    w1.register()
    w2.register()
    b1 = run_batch(d, w1, "smollm", 7, "default")
    b2 = run_batch(d, w2, "other", 5, "default")
    b3 = run_batch(d, w1, "smollm", 4, kb)  # another tenant: not in alpha's report
    db = db_connect(data)
    rows = db.execute("SELECT batch_id, model, prompt_tokens, completion_tokens, cached_tokens, cost_micros, "
                      "created_at FROM usage_ledger").fetchall()
    assert len(rows) == 16, rows
    for bid, model, p, c, ca, cost, _ in rows:
        assert cost == hand_cost(model, p, ca, c), (model, p, c, ca, cost)
    assert any(r[5] > 0 for r in rows)
    for b in (b1, b2, b3):
        mine = [r for r in rows if r[0] == b["id"]]
        u = b["usage"]
        assert u["input_tokens"] == sum(r[2] for r in mine) and u["output_tokens"] == sum(r[3] for r in mine), b
        assert u["input_tokens_details"]["cached_tokens"] == sum(r[4] for r in mine), b
        assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"], b
        assert b["cost"]["amount_micros"] == sum(r[5] for r in mine) > 0, b
    # a hand-computed spot check of one known request: t-1 of smollm
    assert hand_cost("smollm", 1007, 100, 334) == (907 * 150000 + 100 * 75000 + 334 * 600000 + 500000) // 1000000
    lo, hi = min(r[6] for r in rows), max(r[6] for r in rows) + 1
    alpha = [r for r in rows if r[0] in (b1["id"], b2["id"])]
    for group, keyf in (("batch", lambda r: r[0]), ("model", lambda r: r[1]), ("day", None)):
        rep = d.json("GET", f"/v1/usage?since={lo}&until={hi}&group_by={group}")
        assert rep["object"] == "list" and rep["group_by"] == group and rep["has_more"] is False, rep
        t = rep["totals"]
        assert t["num_model_requests"] == 12 and t["input_tokens"] == sum(r[2] for r in alpha), rep
        assert t["output_tokens"] == sum(r[3] for r in alpha) and t["input_cached_tokens"] == sum(r[4] for r in alpha)
        assert t["cost"]["amount_micros"] == sum(r[5] for r in alpha) == \
            b1["cost"]["amount_micros"] + b2["cost"]["amount_micros"], rep
        assert sum(x["cost"]["amount_micros"] for x in rep["data"]) == t["cost"]["amount_micros"]
        assert sum(x["num_model_requests"] for x in rep["data"]) == 12
        if keyf:
            want = {}
            for r in alpha:
                want.setdefault(keyf(r), [0, 0])
                want[keyf(r)][0] += r[5]
                want[keyf(r)][1] += 1
            got = {x["key"]: [x["cost"]["amount_micros"], x["num_model_requests"]] for x in rep["data"]}
            assert got == want, (got, want)
    # an empty range, and tenant beta sees only its batch
    assert d.json("GET", f"/v1/usage?since={hi}&until={hi + 10}")["totals"]["num_model_requests"] == 0
    rb = d.json("GET", "/v1/usage?group_by=batch", key=kb)
    assert [x["key"] for x in rb["data"]] == [b3["id"]], rb
    assert rb["totals"]["cost"]["amount_micros"] == b3["cost"]["amount_micros"]
    assert d.call("GET", "/v1/usage?group_by=week").status == 400
    assert d.call("GET", "/v1/usage?since=x").status == 400
    assert d.call("GET", "/v1/usage?since=2026-13-01").status == 400
    # dates (UTC): 2020-01-01 = 1577836800; a range starting at the first row's day covers alpha's rows
    assert d.json("GET", "/v1/usage?since=2020-01-01&until=2020-01-01T00:00:01Z")["since"] == 1577836800
    assert d.json("GET", "/v1/usage?until=2020-01-01T00:00:01Z")["until"] == 1577836801
    day = time.strftime("%Y-%m-%d", time.gmtime(lo))
    assert d.json("GET", f"/v1/usage?since={day}")["totals"]["num_model_requests"] == 12
    # the admin view across tenants: a tenant key is refused; by tenant the
    # buckets are each tenant's sums and the total is the whole ledger
    assert d.call("GET", "/v1/admin/usage").status == 401
    assert d.call("GET", "/v1/admin/usage", key="wrong").status == 401
    adm = d.json("GET", "/v1/admin/usage", key=ADM)
    assert adm["group_by"] == "tenant" and adm["tenant_id"] is None, adm
    tid = dict(db.execute("SELECT name, id FROM tenants").fetchall())
    got = {x["key"]: (x["cost"]["amount_micros"], x["num_model_requests"]) for x in adm["data"]}
    assert got == {tid["alpha"]: (sum(r[5] for r in alpha), 12),
                   tid["beta"]: (b3["cost"]["amount_micros"], 4)}, (got, tid)
    assert adm["totals"]["cost"]["amount_micros"] == sum(r[5] for r in rows)
    assert adm["totals"]["output_tokens"] == sum(r[3] for r in rows)
    for who in ("beta", tid["beta"]):
        one = d.json("GET", f"/v1/admin/usage?tenant={who}&group_by=batch", key=ADM)
        assert one["tenant_id"] == tid["beta"] and [x["key"] for x in one["data"]] == [b3["id"]], one
    bym = d.json("GET", "/v1/admin/usage?group_by=model", key=ADM)
    assert {x["key"]: x["num_model_requests"] for x in bym["data"]} == {"smollm": 11, "other": 5}, bym
    assert d.call("GET", "/v1/admin/usage?tenant=nobody", key=ADM).status == 404
    assert d.call("GET", "/v1/admin/usage?group_by=week", key=ADM).status == 400
    assert d.call("GET", "/v1/usage?group_by=tenant").status == 400
    assert d.proc.stop() == 0, d.proc.log()[-3000:]
