"""Fleet cost on a real jobd (spec/usage.md "Fleet cost"): two real CPU
jobworkers of stated hourly cost (one by --hourly-cost, one priced by jobd's
--worker-costs class over its own declaration) serve two batches; the sum
over batches plus the idle line equals the workers' registered time x price
within one second of worker time, each batch's fleet_cost on GET
/v1/batches/{id} equals its bucket of the fleet view, and the tokens agree
with the batch's usage. Also: a tenant sees only its own batches, bad prices
and classes are refused at start, and bad queries are 400.

The attribution rule itself is checked to the micro-dollar on a fixed clock
in tests/unit/jobd/account/test_fleet.c."""
import json
import os
import time

from harness import ROOT, Proc, Skip, binary, db_connect, run, tmpdir
from jobdlib import Jobd, create_key, jsonl
from workerlib import TestWorker, success

TIMEOUT = 900
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WT = "worker-token-f"
REF = "SmolLM2-135M-Instruct=150000:600000"
JOBD_ARGS = ["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s",
             "--worker-costs", "fleet-b*=7.20/h", "--reference-prices", REF]


def need():
    for name in ("jobd", "jobworker"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    if not os.path.exists(MODEL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(MODEL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])


def start_worker(d, name, *extra):
    return Proc([binary("jobworker", asan=False, optimised=True), "--jobd", f"http://127.0.0.1:{d.port}", "--model", MODEL,
                 "--model-id", "SmolLM2-135M-Instruct", "--alias", "smollm", "--worker-token", WT,
                 "--name", name, "--threads", "1", "--pack-size", "8", *extra])


def wait_done(d, bid, workers, timeout=600):
    deadline = time.monotonic() + timeout
    while True:
        b = d.json("GET", f"/v1/batches/{bid}")
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return b
        for w in workers:
            assert w.p.poll() is None, w.log()[-3000:]
        assert time.monotonic() < deadline, b
        time.sleep(0.2)


def jc_duration(s):
    """jobctl's duration format (cmd/jobctl/client.c jc_fmt_duration)."""
    for unit, sub, w in ((86400, 3600, "dh"), (3600, 60, "hm"), (60, 1, "ms")):
        if s >= unit:
            return "%d%s%02d%s" % (s // unit, w[0], s % unit // sub, w[1])
    return "%ds" % s


def lines(n, tag):
    out = []
    for i in range(n):
        body = {"model": "smollm", "messages": [{"role": "user", "content": f"Say {tag} number {i}."}],
                "max_tokens": 24, "temperature": 0}
        out.append(json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": body}))
    return ("\n".join(out) + "\n").encode()


def test_fleet_real_workers_batches_plus_idle_equal_registered_time():
    need()
    d = Jobd(asan=False, args=JOBD_ARGS)
    wa = start_worker(d, "fleet-a", "--hourly-cost", "3.60")
    wb = start_worker(d, "fleet-b1", "--hourly-cost", "1")  # jobd's class wins: 7.20
    try:
        time.sleep(1.1)  # some idle time first
        ids = []
        for tag in ("x", "y"):  # enough work to span whole seconds (times are unix seconds)
            ids.append(d.submit(lines(32, tag), query="?completion_window=1h")["id"])
        batches = [wait_done(d, bid, (wa, wb)) for bid in ids]
        assert all(b["status"] == "completed" for b in batches), batches
        t0 = time.time()
        rep = d.json("GET", "/v1/admin/usage?view=fleet&group_by=batch")
        t1 = time.time()
        # the capacity hint: a new file's tokens at the fleet's measured rate, on the 2 live workers
        f = d.upload(lines(10, "z"))
        est = d.json("POST", "/v1/batches/estimate", {"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                      "completion_window": "24h"})
        by_model = d.json("GET", "/v1/admin/usage?view=fleet&group_by=model&since=%d" % (int(t1) - 7 * 86400))
        # jobctl submit --dry-run on the same lines: the same estimate, printed
        path = os.path.join(tmpdir(), "z.jsonl")
        with open(path, "wb") as fh:
            fh.write(lines(10, "z"))
        dry = run([binary("jobctl"), "submit", "--dry-run", path],
                  env={"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBCTL_CONFIG": "", "HOME": tmpdir()})
        est2 = d.json("POST", "/v1/batches/estimate", {"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                       "completion_window": "24h"})
    finally:
        wa.stop()
        wb.stop()
    assert rep["view"] == "fleet" and rep["group_by"] == "batch" and rep["has_more"] is False, rep
    by_key = {x["key"]: x for x in rep["data"]}
    assert sorted(by_key) == sorted(ids), rep
    hourly = {w["name"]: w["hourly_cost_micros"] for w in rep["workers"]}
    assert hourly == {"fleet-a": 3600000, "fleet-b1": 7200000}, rep["workers"]
    # every batch's share + the idle line = the workers' registered time x price, exactly,
    fleet = rep["fleet"]
    attributed = sum(x["fleet_cost"]["amount_micros"] for x in rep["data"])
    assert attributed == fleet["fleet_cost"]["amount_micros"] == rep["totals"]["fleet_cost"]["amount_micros"]
    assert attributed + fleet["idle"]["amount_micros"] == fleet["cost"]["amount_micros"] == \
        sum(w["cost"]["amount_micros"] for w in rep["workers"]), rep
    assert fleet["busy_ms"] + fleet["idle_ms"] == fleet["registered_ms"] == \
        sum(w["registered_ms"] for w in rep["workers"]), fleet
    assert attributed > 0 and fleet["busy_ms"] > 0, rep
    # ... and within one second of worker time of registered_at (the database) to the report's time
    db = db_connect(d.data)
    regs = db.execute("SELECT name, registered_at, hourly_cost_micros FROM workers").fetchall()
    assert sorted(r[0] for r in regs) == ["fleet-a", "fleet-b1"], regs
    lo = sum((int(t0) - 1 - reg) * h / 3600 for _, reg, h in regs)
    hi = sum((int(t1) + 1 - reg) * h / 3600 for _, reg, h in regs)
    total = fleet["cost"]["amount_micros"]
    assert lo - 2 <= total <= hi + 2, (lo, total, hi)
    for w in rep["workers"]:
        assert 0 < w["registered_ms"] and 0 <= w["busy_ms"] <= w["registered_ms"], w
        assert w["state"] in ("busy", "idle"), w
        assert abs(w["utilization"] - w["busy_ms"] / w["registered_ms"]) < 1e-3, w
    # each batch: fleet_cost on the batch object = its bucket; tokens = its usage
    for bid in ids:
        b = d.json("GET", f"/v1/batches/{bid}")
        x = by_key[bid]
        fc = b["fleet_cost"]
        assert fc["amount_micros"] == x["fleet_cost"]["amount_micros"] > 0, (fc, x)
        assert fc["worker_ms"] == x["worker_ms"] and fc["lapsed_micros"] == 0, (fc, x)
        assert x["input_tokens"] == b["usage"]["input_tokens"], (x, b["usage"])
        assert x["output_tokens"] == b["usage"]["output_tokens"], (x, b["usage"])
        assert x["input_cached_tokens"] == b["usage"]["input_tokens_details"]["cached_tokens"]
        comp = x["input_tokens"] - x["input_cached_tokens"] + x["output_tokens"]
        assert x["computed_tokens"] == comp == fc["computed_tokens"], x
        out1m = (x["fleet_cost"]["amount_micros"] * 10**6 * 2 + comp) // (2 * comp)
        assert x["effective_micros_per_1m_output"] == out1m == fc["effective_micros_per_1m_output"], x
        # what the reference table would have charged, per (lease, batch) part
        assert x["reference_cost"]["amount_micros"] >= 0
        assert x["reference_difference_micros"] == x["reference_cost"]["amount_micros"] - \
            x["fleet_cost"]["amount_micros"], x
    # the estimate's fleet hint = the week's measured cost per computed token and tokens per worker-second
    [m] = est["models"]
    [x] = by_model["data"]
    assert m["model"] == "smollm" and x["key"] == "SmolLM2-135M-Instruct" and m["workers"] == 2, (m, x)
    comp, cost, ms = x["computed_tokens"], x["fleet_cost"]["amount_micros"], x["worker_ms"]
    fl = m["fleet"]
    lo, hi = m["input_tokens"], m["input_tokens"] + m["max_output_tokens"]
    assert fl["cost"] == {"min_micros": (lo * cost * 2 + comp) // (2 * comp),
                          "max_micros": (hi * cost * 2 + comp) // (2 * comp)}, (fl, x)
    assert fl["seconds"] == {"min": -(-lo * ms // (comp * 1000 * 2)), "max": -(-hi * ms // (comp * 1000 * 2))}, fl
    assert abs(fl["tokens_per_worker_second"] - comp * 1000 / ms) < 1e-3, fl
    assert fl["micros_per_1m_computed_tokens"] == x["effective_micros_per_1m_output"], (fl, x)
    assert est["fleet_cost"] == {"min_micros": fl["cost"]["min_micros"], "max_micros": fl["cost"]["max_micros"],
                                 "measured": True}, est
    # the CLI's fleet line carries the API's figures (asked between the two estimates, which agree)
    assert est2["models"][0]["fleet"] == fl, (est2, fl)
    assert dry.returncode == 0, dry.stderr
    import re
    [line] = [x for x in dry.stdout.splitlines() if x.startswith("fleet: ")]
    got = re.fullmatch(r"fleet: smollm: cost \$(\d+)\.(\d{6}) \.\. \$(\d+)\.(\d{6}) at ([\d.]+) tokens per "
                       r"worker-second, (\w+) \.\. (\w+) on the live workers", line)
    assert got, line
    g = got.groups()
    assert int(g[0]) * 10**6 + int(g[1]) == fl["cost"]["min_micros"], (line, fl)
    assert int(g[2]) * 10**6 + int(g[3]) == fl["cost"]["max_micros"], (line, fl)
    assert g[4] == "%.1f" % fl["tokens_per_worker_second"], (line, fl)
    assert (g[5], g[6]) == (jc_duration(fl["seconds"]["min"]), jc_duration(fl["seconds"]["max"])), (line, fl)
    # by model and by day: the same attributed total
    for g in ("model", "day", "tenant"):
        r2 = d.json("GET", f"/v1/admin/usage?view=fleet&group_by={g}")
        assert sum(x["fleet_cost"]["amount_micros"] for x in r2["data"]) >= attributed, r2
    day = d.json("GET", "/v1/admin/usage?view=fleet&group_by=day")
    assert sum(x["idle"]["amount_micros"] + x["fleet_cost"]["amount_micros"] for x in day["data"]) == \
        day["fleet"]["cost"]["amount_micros"], day


def test_fleet_tenant_sees_its_batches_and_a_worker_that_never_works_is_all_idle():
    data = os.path.join(tmpdir(), "data")
    ka, kb = create_key(data, "alpha"), create_key(data, "beta")
    d = Jobd(data=data, key=ka, args=["--worker-token", WT, "--admin-token", "adm", "--sweep-interval", "100ms",
                                      "--worker-costs", "idle-*=36"])
    w = TestWorker(d.port, WT, model="smollm", name="busy-1")
    r = w.post("/v1/worker/register", {"name": "busy-1", "models": [{"id": "smollm"}],
                                       "hourly_cost_micros": 3600000})
    assert r.status == 200, r
    w.worker_id = r.json()["worker_id"]
    idle = TestWorker(d.port, WT, model="smollm", name="idle-1")
    idle.register()
    # no class matches and no price declared: unpriced (priced 0, flagged, a warning); declared 0 is a price
    free = TestWorker(d.port, WT, model="smollm", name="free-1")
    free.register()
    zero = TestWorker(d.port, WT, model="smollm", name="zero-1")
    r = zero.post("/v1/worker/register", {"name": "zero-1", "models": [{"id": "smollm"}], "hourly_cost_micros": 0})
    assert r.status == 200, r
    ba = d.submit(jsonl(3), key=ka)
    bb = d.submit(jsonl(2), key=kb)
    for b, k in ((ba, ka), (bb, kb)):
        d.wait_batch(b["id"], key=k)
    # one lease held across whole seconds (times are unix seconds): busy-1 has busy time to compare
    lease = w.lease(max_requests=2).json()
    t = int(time.time())
    while int(time.time()) < t + 2:
        time.sleep(0.05)
    w.results(lease["lease_id"], [success(q) for q in lease["requests"]])
    w.run_until(lambda: all(d.json("GET", f"/v1/batches/{b['id']}", key=k)["status"] == "completed"
                            for b, k in ((ba, ka), (bb, kb))))
    time.sleep(2.1)  # the idle worker's registered time reaches a whole second or two
    rep = d.json("GET", "/v1/usage?view=fleet&group_by=batch", key=ka)
    assert [x["key"] for x in rep["data"]] == [ba["id"]], rep
    assert "workers" not in rep and rep["totals"]["fleet_cost"]["amount_micros"] == \
        rep["data"][0]["fleet_cost"]["amount_micros"], rep
    adm = d.json("GET", "/v1/admin/usage?view=fleet&group_by=batch", key="adm")
    assert sorted(x["key"] for x in adm["data"]) == sorted([ba["id"], bb["id"]]), adm
    ws = {x["name"]: x for x in adm["workers"]}
    assert {n: x["unpriced"] for n, x in ws.items()} == \
        {"busy-1": False, "idle-1": False, "free-1": True, "zero-1": False}, ws
    assert ws["free-1"]["hourly_cost_micros"] == 0 and ws["free-1"]["cost"]["amount_micros"] == 0, ws
    log = d.proc.log()
    assert "worker 'free-1' (%s) has no hourly cost" % ws["free-1"]["id"] in log, log[-3000:]
    assert "'zero-1'" not in log and "'idle-1'" not in log, log[-3000:]
    assert ws["idle-1"]["busy_ms"] == 0 and ws["idle-1"]["hourly_cost_micros"] == 36000000, ws
    assert ws["idle-1"]["idle"]["amount_micros"] == ws["idle-1"]["cost"]["amount_micros"] >= 10000, ws
    assert ws["idle-1"]["state"] == "idle" and ws["busy-1"]["state"] == "idle", ws
    assert ws["busy-1"]["hourly_cost_micros"] == 3600000, ws
    listed = {x["name"]: x["hourly_cost_micros"] for x in d.json("GET", "/v1/workers", key="adm")["data"]}
    assert listed == {"busy-1": 3600000, "idle-1": 36000000, "free-1": 0, "zero-1": 0}, listed
    one = d.json("GET", "/v1/admin/usage?view=fleet&group_by=model&tenant=beta", key="adm")
    assert one["tenant_id"] and all(x["key"] == "smollm" for x in one["data"]), one
    # bad queries
    empty = d.json("GET", "/v1/usage?view=fleet&since=2000000000&until=1000", key=ka)
    assert empty["data"] == [] and empty["totals"]["fleet_cost"]["amount_micros"] == 0, empty
    for q, param in (("view=bogus", "view"), ("view=fleet&batch=" + ba["id"], "batch"),
                     ("view=fleet&group_by=tenant", "group_by")):
        r = d.call("GET", "/v1/usage?" + q, key=ka)
        assert r.status == 400 and r.json()["error"]["param"] == param, r
    # jobctl: the tenant's table, the admin's with one line per worker, a batch's fleet cost
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": ka, "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    r = run([binary("jobctl"), "usage", "--fleet", "--group-by", "batch"], env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].split()[:3] == ["BATCH", "WORKER", "S"] and out[1].startswith(ba["id"]), r.stdout
    assert out[2].startswith("total") and out[3].startswith("idle (the fleet's own line)"), r.stdout
    assert out[4].startswith("fleet: 4 worker(s),") and len(out) == 5, r.stdout
    r = run([binary("jobctl"), "usage", "--fleet", "--all-tenants", "--admin-token", "adm"], env=env)
    assert r.returncode == 0 and "idle-1" in r.stdout and "busy-1" in r.stdout and "$36.000000" in r.stdout, r
    [free_line] = [x for x in r.stdout.splitlines() if x.startswith("free-1 ")]
    assert free_line.split()[1:3] == ["idle", "unpriced"], r.stdout
    r = run([binary("jobctl"), "usage", "--fleet", "--json"], env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["view"] == "fleet", r
    r = run([binary("jobctl"), "usage", "--fleet", "--batch", ba["id"]], env=env)
    assert r.returncode == 2 and "--fleet" in r.stderr, r
    path = os.path.join(tmpdir(), "in.jsonl")
    with open(path, "wb") as fh:
        fh.write(jsonl(2))
    r = run([binary("jobctl"), "submit", "--dry-run", path], env=env)
    assert r.returncode == 0 and "\nfleet: smollm: " in r.stdout, (r.stdout, r.stderr)
    r = run([binary("jobctl"), "status", ba["id"]], env=env)
    assert r.returncode == 0 and "  fleet cost $" in r.stdout, r.stdout
    # /metrics: the last hour's gauges; the workers' cost = the batches' share + idle
    import re
    m = d.call("GET", "/metrics").body.decode()
    assert re.search(r'^jobd_worker_hourly_cost_micros\{worker="wrk_\w+",name="idle-1"\} 36000000$', m, re.M), m
    assert re.search(r'^jobd_worker_utilization\{worker="wrk_\w+",name="idle-1"\} 0\.0000$', m, re.M), m
    wc = sum(int(x) for x in re.findall(r'^jobd_worker_cost_micros\{[^}]*\} (\d+)$', m, re.M))
    fc = sum(int(x) for x in re.findall(r'^jobd_fleet_cost_micros\{kind="(?:batches|idle)"\} (\d+)$', m, re.M))
    assert wc == fc >= 10000, (wc, fc)
    # the busy worker's gauges are the API's figures (its idle time grows while it stays live:
    # compare answers taken within one second, the scrape's before and after agreeing)
    busy_id = ws["busy-1"]["id"]

    def gauges():
        t = d.call("GET", "/metrics").body.decode()
        pat = r'^jobd_worker_%s\{worker="%s",name="busy-1"%s\} (\S+)$'
        return (re.search(pat % ("utilization", busy_id, ""), t, re.M).group(1),
                int(re.search(pat % ("cost_micros", busy_id, ',kind="busy"'), t, re.M).group(1)),
                int(re.search(pat % ("cost_micros", busy_id, ',kind="idle"'), t, re.M).group(1)))
    for _ in range(50):
        g1 = gauges()
        x = next(x for x in d.json("GET", "/v1/admin/usage?view=fleet", key="adm")["workers"] if x["id"] == busy_id)
        api = ("%.4f" % (x["busy_ms"] / x["registered_ms"]), x["busy"]["amount_micros"], x["idle"]["amount_micros"])
        if g1 == gauges() == api:
            break
    else:
        raise AssertionError(("metrics", g1, "api", api))
    assert x["busy_ms"] >= 1000 and x["busy"]["amount_micros"] >= 1000 and float(api[0]) > 0, x
    # a register with an absurd price
    r = w.post("/v1/worker/register", {"name": "x", "models": [{"id": "smollm"}], "hourly_cost_micros": -1})
    assert r.status == 400 and "hourly_cost_micros" in r.json()["error"]["message"], r


def test_fleet_bad_prices_and_classes_refused_at_start():
    jobd = binary("jobd")
    for flag, val, says in (("--worker-costs", "gpu-*=-1", "(got '-1')"), ("--worker-costs", "gpu-*=20000", "0 .. 10000"),
                            ("--worker-costs", "gpu-*", "expected NAME_GLOB=USD"),
                            ("--worker-costs", "a=1,a=2", "listed twice"),
                            # a class an earlier glob shadows could never apply
                            ("--worker-costs", "*=1,gpu-*=2",
                             "'gpu-*' can never apply: every name it matches matches '*' (entry 1) first"),
                            ("--worker-costs", "gpu-*=2,gpu-h100-*=3", "'gpu-h100-*' can never apply"),
                            ("--reference-prices", "m=-5:1", "bad price"),
                            # an absurd reference price: above the cap of 10^12 micro-dollars per 1M tokens
                            ("--reference-prices", "m=1000000000001:1", "at most 1000000000000"),
                            ("--reference-prices", "m=1:1:1000000000001", "at most 1000000000000")):
        r = run([jobd, "--listen", "127.0.0.1:0", "--data", "/nonexistent/x", flag, val])
        assert r.returncode == 2 and flag in r.stderr and says in r.stderr, (flag, val, r.returncode, r.stderr)
    # the narrower glob first is the way to say it
    r = run([jobd, "--listen", "127.0.0.1:0", "--data", "/nonexistent/x", "--worker-costs", "gpu-*=2,*=1",
             "--reference-prices", "m=1000000000000:1"])
    assert "--worker-costs" not in r.stderr and "--reference-prices" not in r.stderr, r.stderr
    jw = binary("jobworker")
    for val in ("-3", "abc", "10001", "1.0000001"):
        r = run([jw, "--jobd", "http://127.0.0.1:9", "--model", "/nonexistent.gguf", "--hourly-cost", val])
        assert r.returncode == 2 and "--hourly-cost" in r.stderr, (val, r.returncode, r.stderr)


def test_fleet_worker_killed_mid_lease_its_lapsed_lease_is_charged():
    """A real worker SIGKILLed while it holds a lease: its time until the
    lease lapses is charged to the batch and said so - lapsed_micros > 0 in
    GET /v1/batches/{id} fleet_cost (equal to the batch's bucket of the fleet
    view), jobctl status says "... of it while a lease lapsed". A second
    worker finishes the batch."""
    need()
    d = Jobd(asan=False, args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s",
                               "--lease-min", "1s"])
    # 36 $/h: 10000 micro-dollars a second; 3 s leases, heartbeats every second
    doomed = start_worker(d, "doomed", "--hourly-cost", "36", "--lease-seconds", "3")
    rescuer = None
    try:
        body = lambda i: {"model": "smollm", "max_tokens": 400, "temperature": 0,  # noqa: E731
                          "messages": [{"role": "user", "content": f"Count from 1 to 1000, number {i}."}]}
        data = "".join(json.dumps({"custom_id": f"k-{i}", "method": "POST", "url": "/v1/chat/completions",
                                   "body": body(i)}) + "\n" for i in range(8)).encode()
        bid = d.submit(data, query="?completion_window=1h")["id"]
        deadline = time.monotonic() + 120
        while True:  # the worker holds the batch's requests (a lease) ...
            ws = {w["name"]: w for w in d.json("GET", "/v1/workers")["data"]}
            if ws.get("doomed", {}).get("requests_held", 0) > 0:
                break
            assert doomed.p.poll() is None and time.monotonic() < deadline, doomed.log()[-3000:]
            time.sleep(0.05)
        time.sleep(1.2)  # ... mid-generation (400 tokens x 8 on one thread take far longer)
        assert d.json("GET", f"/v1/batches/{bid}")["status"] == "in_progress"
        doomed.p.kill()  # SIGKILL: no release, no goodbye
        doomed.p.wait()
        deadline = time.monotonic() + 60
        while True:  # the lease lapses (expires_at passes with no heartbeat)
            fc = d.json("GET", f"/v1/batches/{bid}")["fleet_cost"]
            if fc["lapsed_micros"] > 0:
                break
            assert time.monotonic() < deadline, fc
            time.sleep(0.2)
        rescuer = start_worker(d, "rescuer", "--hourly-cost", "36")
        b = wait_done(d, bid, (rescuer,))
    finally:
        if rescuer:
            rescuer.stop()
    assert b["status"] == "completed", b
    fc = b["fleet_cost"]
    # the lapsed lease ran at least its 3 s (the worker never released it), all of it charged and said so
    assert fc["lapsed_micros"] >= 20000 and fc["lapsed_worker_ms"] >= 2000, fc
    assert fc["amount_micros"] > fc["lapsed_micros"] and fc["worker_ms"] > fc["lapsed_worker_ms"], fc
    rep = d.json("GET", "/v1/admin/usage?view=fleet&group_by=batch")
    [x] = rep["data"]
    assert x["key"] == bid and x["lapsed"] == {"worker_ms": fc["lapsed_worker_ms"],
                                                "amount_micros": fc["lapsed_micros"]}, (x, fc)
    assert x["fleet_cost"]["amount_micros"] == fc["amount_micros"], (x, fc)
    assert rep["fleet"]["lapsed"]["amount_micros"] == fc["lapsed_micros"], rep["fleet"]
    ws = {w["name"]: w for w in rep["workers"]}
    # not busy: its lease lapsed ("idle" until the worker TTL, 120 s, has passed since it was last
    # seen, "gone" after; on a slow box the rescue alone can take that long)
    assert ws["doomed"]["state"] in ("idle", "gone") and ws["doomed"]["busy"]["amount_micros"] >= fc["lapsed_micros"], ws
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    r = run([binary("jobctl"), "status", bid], env=env)
    assert r.returncode == 0, r.stderr
    [line] = [x for x in r.stdout.splitlines() if x.startswith("  fleet cost ")]
    want = "  fleet cost $%d.%06d (%d micro-dollars, %.1f worker-seconds, %d of it while a lease lapsed)" % (
        fc["amount_micros"] // 10**6, fc["amount_micros"] % 10**6, fc["amount_micros"], fc["worker_ms"] / 1000,
        fc["lapsed_micros"])
    assert line == want, (line, want)
