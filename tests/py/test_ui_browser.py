"""The web dashboard (GET /ui/) in a real headless browser: Debian's chromium
driven through chromedriver by Selenium, against a real jobd on loopback and
a scripted worker (tests/py/workerlib.py) that the test drives step by step,
so every change the page must show is caused by the test and then waited
for as a DOM condition (never a sleep that could race).

test_dashboard_keyed: sign in (a wrong key first), watch a batch's progress
bar advance 25% at a time to 100%, open its detail (timeline, usage, files,
webhook delivery + redeliver), download a running batch's results so far,
retry a dead letter, see a worker's live
tokens/s, cancel a batch, check the usage chart has one bar per day, the
models view and the status filter. test_dashboard_escapes_and_api_down:
no-auth mode, a batch whose metadata and custom_ids are HTML/JS stay text,
its deadline-at-risk warning, one usage row per model of a mixed batch, and the page says so when jobd goes away and recovers when it is back.
Screenshots of each page go to $UI_SCREENSHOTS, else the test's temp dir.
"""
import json
import math
import os
import shutil

from harness import Proc, Skip, free_port, tmpdir
from jobdlib import Jobd, chat_line, create_key
from workerlib import TestWorker, success, transient

TIMEOUT = 180
WT, AT = "worker-secret-ui", "admin-secret-ui"
ARGS = ["--worker-token", WT, "--sweep-interval", "100ms", "--lease-min", "1s", "--window-min", "1s",
        "--max-attempts", "1", "--webhook-allow-private", "--webhook-retry-base", "60s",
        "--prices", "smollm=100000000:200000000,qwen=300000000:400000000"]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browser(shots):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise Skip("selenium is not installed (scripts/install-deps)")
    for p in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(p):
            raise Skip(f"{p} is missing (scripts/install-deps installs chromium and chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1000", "--no-first-run", "--no-default-browser-check",
              "--disable-extensions", "--disable-background-networking", "--disable-sync",
              "--password-store=basic", f"--user-data-dir={tmpdir()}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    opts.add_experimental_option("prefs", {"download.default_directory": os.path.join(shots, "downloads"),
                                           "download.prompt_for_download": False})
    svc = Service(executable_path=CHROMEDRIVER, log_output=os.path.join(shots, "chromedriver.log"))
    drv = webdriver.Chrome(options=opts, service=svc)
    drv.set_page_load_timeout(30)
    return drv


def shots_dir():
    d = os.environ.get("UI_SCREENSHOTS") or os.path.join(tmpdir(), "screenshots")
    os.makedirs(d, exist_ok=True)
    return d


def wait(drv, cond, what, timeout=30):
    """Wait until cond(drv) is truthy; DOM nodes replaced by a redraw are retried."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(drv, timeout, poll_frequency=0.05,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
                         ).until(lambda d: cond(d), message=what)


def css(drv, sel):
    from selenium.webdriver.common.by import By
    return drv.find_element(By.CSS_SELECTOR, sel)


def csss(drv, sel):
    from selenium.webdriver.common.by import By
    return drv.find_elements(By.CSS_SELECTOR, sel)


def click(drv, sel, what):
    """Click sel once it exists (a redraw between finding and clicking is retried)."""
    from selenium.common.exceptions import StaleElementReferenceException
    def go(d):
        try:
            css(d, sel).click()
            return True
        except StaleElementReferenceException:
            return False
    wait(drv, go, what)


def text_of(drv, sel):
    return css(drv, sel).text


def batch_with(d, lines, **kw):
    f = d.upload(("\n".join(lines) + "\n").encode())
    b = d.create_batch(f["id"], **kw)
    return d.wait_batch(b["id"])


def no_page_errors(drv):
    errs = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"
            and "favicon" not in e.get("message", "") and "401" not in e.get("message", "")
            and "Failed to load resource" not in e.get("message", "")]
    assert not errs, errs


def api_down_proxy(d):
    """A server on a free port with jobd's /ui/ files and headers, 502 for anything else."""
    import http.server
    import threading
    files = {p: d.call("GET", p) for p in ("/ui/", "/ui/app.js", "/ui/app.css")}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            r = files.get(self.path.split("#")[0])
            if r is None:
                body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
                self.send_response(502)
                self.send_header("Content-Type", "text/html")
            else:
                body = r.body
                self.send_response(200)
                for k in ("content-type", "content-security-policy", "x-content-type-options"):
                    self.send_header(k, r.headers[k])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_dashboard_keyed():
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "alpha")
    d = Jobd(data=data, key=key, args=ARGS + ["--admin-token", AT])
    shots = shots_dir()
    w = TestWorker(d.port, WT, model="smollm")
    w.register()
    # a webhook endpoint nobody listens on: batch A's event becomes a failing delivery
    ep = d.json("POST", "/v1/webhook_endpoints", {"url": f"http://127.0.0.1:{free_port()}/hook"})
    a = batch_with(d, [chat_line(i) for i in range(1, 5)], metadata={"project": "nightly"})
    drv = browser(shots)
    try:
        drv.get(f"http://127.0.0.1:{d.port}/ui/")
        wait(drv, lambda x: css(x, "#login").is_displayed(), "the sign-in form")
        css(drv, "#key").send_keys("sk-wrong")
        css(drv, "#signin").click()
        wait(drv, lambda x: "refused" in text_of(x, "#login-msg"), "a wrong key is refused")
        css(drv, "#key").send_keys(key)
        css(drv, "#admin").send_keys(AT)
        css(drv, "#signin").click()
        row = f'tr[data-id="{a["id"]}"]'
        wait(drv, lambda x: css(x, row).is_displayed(), "batch A listed")
        assert not css(drv, "#login").is_displayed()
        assert drv.execute_script("return sessionStorage.getItem('jobd.key')") == key
        assert key not in drv.current_url

        # the progress bar advances as the worker commits one result at a time
        bar = row + " [role=progressbar]"
        assert css(drv, bar).get_attribute("aria-valuenow") == "0"
        lease = w.lease(max_requests=4).json()
        assert len(lease["requests"]) == 4
        for i, req in enumerate(lease["requests"]):
            w.results(lease["lease_id"], [success(req)])
            want = str(25 * (i + 1))
            wait(drv, lambda x: css(x, bar).get_attribute("aria-valuenow") == want, f"progress {want}%")
        wait(drv, lambda x: css(x, row + " .badge").text == "completed", "batch A completed")
        assert css(drv, row + " .counts").text == "4 / 0 / 4"
        assert css(drv, row + " .tokens").text == "32"  # 4 x (5 + 3)
        assert css(drv, row + " .cost").text == "$0.0044"  # 4 x (5 x 100 + 3 x 200) micros
        drv.save_screenshot(os.path.join(shots, "batches.png"))

        # its detail: timeline, usage, files, the webhook delivery and redeliver
        click(drv, row + " a.batch-link", "open batch A")
        wait(drv, lambda x: css(x, "#view-batch").get_attribute("data-id") == a["id"], "batch A detail")
        states = [li.get_attribute("data-state") for li in csss(drv, "ol.timeline li")]
        assert states[:4] == ["created", "in_progress", "finalizing", "completed"], states
        assert css(drv, ".card.completed .card-body").text == "4"
        assert css(drv, "table.metadata td").text == "nightly"
        cells = [c.text for c in csss(drv, "table.usage-models td")]
        assert cells == ["smollm", "4", "20", "12", "32", "$0.0044"], cells
        assert css(drv, "#dl-output").is_displayed()
        assert "UTC" in text_of(drv, "tr.output-expiry td") or text_of(drv, "tr.output-expiry td") == "never"
        wait(drv, lambda x: css(x, "table.deliveries tbody tr"), "the webhook delivery of batch A")
        dv = d.json("GET", f"/v1/webhook_endpoints/{ep['id']}/deliveries")["data"]
        assert [x["object_id"] for x in dv] == [a["id"]], dv
        assert css(drv, "table.deliveries tbody tr").get_attribute("data-id") == dv[0]["id"]
        drv.save_screenshot(os.path.join(shots, "batch.png"))
        click(drv, "table.deliveries button.redeliver", "redeliver")
        wait(drv, lambda x: "Redelivery" in text_of(x, ".flash.ok"), "redelivery queued")
        # the output file, fetched with the key and saved by the browser
        click(drv, "#dl-output", "download the output file")
        wait(drv, lambda x: "Downloaded the output file" in text_of(x, ".flash.ok"), "downloaded")
        out = os.path.join(shots, "downloads", a["id"] + "-output.jsonl")
        wait(drv, lambda x: os.path.exists(out), "the saved output file")
        with open(out) as f:
            got_ids = sorted(json.loads(line)["custom_id"] for line in f)
        assert got_ids == ["t-1", "t-2", "t-3", "t-4"], got_ids

        # batch B: one dead letter (a transient error at --max-attempts 1), one request held
        b = batch_with(d, [chat_line(1, custom_id="b-ok"), chat_line(2, custom_id="b-dead"),
                           chat_line(3, custom_id="b-held")])
        lease = w.lease(max_requests=3).json()
        by_cid = {r["custom_id"]: r for r in lease["requests"]}
        w.results(lease["lease_id"], [success(by_cid["b-ok"]), transient(by_cid["b-dead"])])
        w.heartbeat(lease["lease_id"], tokens_per_s=123.5)
        est = d.json("GET", f"/v1/batches/{b['id']}")
        assert est.get("estimated_completion_at") and est.get("deadline_at_risk") is False, est
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batch/{b['id']}")
        wait(drv, lambda x: css(x, "table.dead-letters td.custom-id").text == "b-dead", "the dead letter")
        assert "UTC" in text_of(drv, ".card.estimate .card-body"), "jobd's estimate is shown"
        assert "UTC" in text_of(drv, ".card.deadline .card-body") and not csss(drv, "#deadline-risk")
        drv.save_screenshot(os.path.join(shots, "batch-dead-letter.png"))
        # the results committed so far while B runs (GET /v1/batches/ID/results, with the key):
        # b-ok's output line and b-dead's error line, byte for byte the API's stream
        assert d.json("GET", f"/v1/batches/{b['id']}")["status"] == "in_progress"
        click(drv, "#dl-partial", "download the results so far")
        wait(drv, lambda x: "so far" in text_of(x, ".flash.ok"), "partial results downloaded")
        assert "Downloaded 2 result lines" in text_of(drv, ".flash.ok")
        part = os.path.join(shots, "downloads", b["id"] + "-partial.jsonl")
        wait(drv, lambda x: os.path.exists(part), "the saved partial results")
        with open(part, "rb") as f:
            got = f.read()
        assert got == d.call("GET", f"/v1/batches/{b['id']}/results").body, got
        assert sorted(json.loads(x)["custom_id"] for x in got.splitlines()) == ["b-dead", "b-ok"], got
        click(drv, "table.dead-letters button.retry", "retry the dead letter")
        wait(drv, lambda x: "Requeued b-dead" in text_of(x, ".flash.ok"), "requeued")
        wait(drv, lambda x: csss(x, "p.dead-letters-empty"), "the dead letter is gone")
        assert d.json("GET", f"/v1/batches/{b['id']}/dead_letters")["data"] == []

        # workers: the live tokens/s of the heartbeat
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/workers")
        wrow = f'tr[data-id="{w.worker_id}"]'
        wait(drv, lambda x: css(x, wrow + " .tps").text == "123.5", "worker tokens/s")
        assert int(css(drv, wrow + " .packs").text) >= 1
        drv.save_screenshot(os.path.join(shots, "workers.png"))

        # cancel B from its page (two steps)
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batch/{b['id']}")
        click(drv, "#cancel", "cancel")
        click(drv, "#cancel-confirm", "confirm cancel")
        wait(drv, lambda x: css(x, "#view-batch").get_attribute("data-status") in ("cancelling", "cancelled"),
             "batch B cancelling")
        assert d.json("GET", f"/v1/batches/{b['id']}")["status"] in ("cancelling", "cancelled")

        # usage: one bar per day of the range, each bar the API's figure for that day
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/usage")
        wait(drv, lambda x: len(csss(x, "#chart-cost rect.col")) == 14, "14 daily bars")
        rep = d.json("GET", "/v1/usage?group_by=day&since=0")
        want = {x["key"]: x["cost"]["amount_micros"] for x in rep["data"]}
        assert sum(want.values()) == 5 * 1100, want  # A's 4 requests and B's b-ok
        def bars(x):
            return {r.get_attribute("data-day"): int(r.get_attribute("data-value"))
                    for r in csss(x, "#chart-cost rect.col")}
        wait(drv, lambda x: all(v == want.get(k, 0) for k, v in bars(x).items())
             and sum(bars(x).values()) == sum(want.values()), "the bars are the API's daily costs")
        sizes = {r.get_attribute("data-day"): (int(r.get_attribute("data-value")), r.size["height"])
                 for r in csss(drv, "#chart-cost rect.col")}
        assert all((h > 0) == (v > 0) for v, h in sizes.values()), sizes  # empty days are flat
        assert max(h for v, h in sizes.values()) > 100, sizes  # the largest bar spans the plot
        assert len(csss(drv, "#chart-tokens rect.col")) == 14
        assert csss(drv, '#chart-models g[data-model="smollm"]')
        drv.save_screenshot(os.path.join(shots, "usage.png"))
        # every tenant's usage with the admin token
        click(drv, "#usage-scope", "all tenants")
        tenants = d.json("GET", "/v1/admin/usage?group_by=tenant&since=0", headers={"Authorization": f"Bearer {AT}"},
                         key=None)["data"]
        wait(drv, lambda x: [r.get_attribute("data-tenant") for r in csss(x, "table.tenants-usage tbody tr")]
             == [t["key"] for t in tenants] and len(tenants) == 1, "the tenant table")

        drv.get(f"http://127.0.0.1:{d.port}/ui/#/models")
        wait(drv, lambda x: css(x, 'table.models tr[data-id="smollm"]'), "smollm served")
        drv.save_screenshot(os.path.join(shots, "models.png"))

        # paging (one batch a page) and the status filter (the API filters)
        def listed(x):
            return [r.get_attribute("data-id") for r in csss(x, "table.batches tbody tr")]
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batches?limit=1")
        wait(drv, lambda x: listed(x) == [b["id"]], "page 1: batch B")
        click(drv, "#page-older", "older")
        wait(drv, lambda x: listed(x) == [a["id"]], "page 2: batch A")
        assert not csss(drv, "#page-older")
        click(drv, "#page-first", "newest")
        wait(drv, lambda x: listed(x) == [b["id"]], "page 1 again")
        from selenium.webdriver.support.ui import Select
        Select(css(drv, "#status-filter")).select_by_value("completed")
        wait(drv, lambda x: "status=completed" in x.current_url and listed(x) == [a["id"]], "only the completed batch")
        assert not csss(drv, "#page-older")
        no_page_errors(drv)

        # signed out, then in with the key only: the Workers view asks for the admin token
        click(drv, "#signout", "sign out")
        wait(drv, lambda x: css(x, "#login").is_displayed() and "Signed out" in text_of(x, "#login-msg"), "signed out")
        assert drv.execute_script("return sessionStorage.length") == 0
        css(drv, "#key").send_keys(key)
        css(drv, "#signin").click()
        wait(drv, lambda x: css(x, "#view-batches"), "signed in again")
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/workers")
        wait(drv, lambda x: "admin token" in text_of(x, "#workers-auth"), "the admin-token message")
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/usage?scope=all")
        wait(drv, lambda x: "admin token" in text_of(x, "#usage-auth"), "the admin-token message (usage)")
    finally:
        drv.quit()


def test_dashboard_escapes_and_api_down():
    d = Jobd(args=ARGS)  # loopback, no keys: no-auth mode
    shots = shots_dir()
    w = TestWorker(d.port, WT, model="smollm")
    w.register()
    evil = {
        "script": "<script>window.__xss=1</script>",
        "attr": "\"><img src=x onerror=\"window.__xss=2\">",
        "url": "javascript:window.__xss=3",
        "quote'\"<b>": "</td></tr><tr><td>injected",
        "rerun_of": "<i>batch_x</i>",  # shown as a link to that batch's page, by route only
    }
    cids = ["<img src=x onerror=window.__xss=4>", "\"'><script>window.__xss=5</script>", "javascript:alert(6)"]
    b = batch_with(d, [chat_line(i + 1, custom_id=c) for i, c in enumerate(cids)] + [chat_line(9, custom_id="held")],
                   metadata=evil)
    lease = w.lease(max_requests=4).json()
    w.results(lease["lease_id"], [transient(r) for r in lease["requests"] if r["custom_id"] in cids])
    drv = browser(shots)
    try:
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batch/{b['id']}")
        wait(drv, lambda x: "no-auth" in text_of(x, "#who"), "no-auth mode, no sign-in")
        wait(drv, lambda x: len(csss(x, "table.dead-letters td.custom-id")) == 3, "three dead letters")
        meta = {r.find_elements("css selector", "th")[0].text: r.find_elements("css selector", "td")[0].text
                for r in csss(drv, "table.metadata tbody tr")}
        assert meta == evil, meta
        shown = sorted(c.text for c in csss(drv, "table.dead-letters td.custom-id"))
        assert shown == sorted(cids), shown
        assert drv.execute_script("return window.__xss") is None
        assert not csss(drv, "main script, main img, main iframe")
        assert text_of(drv, "#rerun-of") == "<i>batch_x</i>"
        assert css(drv, "#rerun-of").get_attribute("href").endswith("#/batch/%3Ci%3Ebatch_x%3C%2Fi%3E")
        # a throughput far too low for the 24 h window: jobd says the deadline is at risk, so does the page
        w.heartbeat(lease["lease_id"], tokens_per_s=0.0001)
        est = d.json("GET", f"/v1/batches/{b['id']}")
        assert est.get("deadline_at_risk") is True and est["estimated_completion_at"] > est["expires_at"], est
        wait(drv, lambda x: "Deadline at risk" in text_of(x, "#deadline-risk"), "the deadline-at-risk warning")
        assert csss(drv, ".card.estimate.risk")
        hrefs = [a.get_attribute("href") or "" for a in csss(drv, "a")]
        assert not [x for x in hrefs if x.lower().startswith("javascript")], hrefs
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batches")
        wait(drv, lambda x: css(x, f'tr[data-id="{b["id"]}"]'), "the batch in the list")
        assert drv.execute_script("return window.__xss") is None
        drv.save_screenshot(os.path.join(shots, "escaping.png"))

        # a batch of two models (model "mixed"): one usage row per model, the API's figures
        wq = TestWorker(d.port, WT, model="qwen", name="wq")
        wq.register()
        m = batch_with(d, [chat_line(1, custom_id="m-s1"), chat_line(2, custom_id="m-s2"),
                           chat_line(3, model="qwen", custom_id="m-q1")])
        assert m["model"] == "mixed", m
        for x in (w, wq):
            r = x.lease(max_requests=8).json()
            x.results(r["lease_id"], [success(q) for q in r["requests"]])
        m = d.wait_batch(m["id"], statuses=("completed",))
        u = d.json("GET", f"/v1/usage?group_by=model&batch={m['id']}")
        want = [[x["key"], str(x["num_model_requests"]), str(x["input_tokens"]), str(x["output_tokens"]),
                 str(x["total_tokens"]), "$%.4f" % (x["cost"]["amount_micros"] / 1e6)] for x in u["data"]]
        assert [x[:2] for x in want] == [["qwen", "1"], ["smollm", "2"]], want
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batch/{m['id']}")
        def model_rows(x):
            return [[c.text for c in r.find_elements("css selector", "td")]
                    for r in csss(x, "table.usage-models tbody tr[data-model]")]
        wait(drv, lambda x: model_rows(x) == want, "one usage row per model of the mixed batch")
        assert [c.text for c in csss(drv, "table.usage-models tr.total td")][:1] == ["3"]
        drv.save_screenshot(os.path.join(shots, "batch-mixed.png"))
        no_page_errors(drv)

        # the page loads while the API is down: a reverse proxy that serves the
        # dashboard's files (as jobd sent them) and answers 502 for /v1, as nginx
        # does in front of a jobd that is not running
        proxy = api_down_proxy(d)
        drv.get(f"http://127.0.0.1:{proxy.server_port}/ui/")
        wait(drv, lambda x: css(x, "#banner").is_displayed() and "HTTP 502" in text_of(x, "#banner"),
             "the page says the API is down")
        assert text_of(drv, "#who") == "not signed in"
        drv.save_screenshot(os.path.join(shots, "api-down-at-load.png"))
        proxy.shutdown()
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batches")
        wait(drv, lambda x: css(x, f'tr[data-id="{b["id"]}"]'), "the list from jobd")

        # jobd goes away: the page says so, and recovers when it is back
        d.proc.stop()
        wait(drv, lambda x: css(x, "#banner").is_displayed() and "Cannot reach jobd" in text_of(x, "#banner"),
             "the unreachable banner")
        drv.save_screenshot(os.path.join(shots, "api-down.png"))
        d.proc = Proc(d.argv)
        d.proc.wait_http(d.port, timeout=30)
        wait(drv, lambda x: not css(x, "#banner").is_displayed(), "the banner clears")
        wait(drv, lambda x: css(x, f'tr[data-id="{b["id"]}"]'), "the list again")
    finally:
        drv.quit()


def test_dashboard_fleet_cost():
    """The fleet cost (spec/usage.md "Fleet cost") on the batch page next to
    its token cost, and on the usage page the cards and the daily charts of
    fleet cost, idle cost and utilization: every figure the API's."""
    import time
    d = Jobd(args=ARGS + ["--worker-costs", "*=36"])  # no-auth mode; 10000 micro-dollars a second
    shots = shots_dir()
    w = TestWorker(d.port, WT, model="smollm")
    w.register()
    b = batch_with(d, [chat_line(i + 1) for i in range(3)])
    lease = w.lease(max_requests=3).json()
    t = int(time.time())
    while int(time.time()) < t + 2:  # the lease holds across whole seconds (times are unix seconds)
        time.sleep(0.05)
    w.results(lease["lease_id"], [success(r) for r in lease["requests"]])
    b = d.wait_batch(b["id"], statuses=("completed",))
    fc = b["fleet_cost"]
    assert fc["amount_micros"] > 0 and fc["worker_ms"] >= 1000, fc
    drv = browser(shots)
    try:
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/batch/{b['id']}")
        wait(drv, lambda x: css(x, "#view-batch").get_attribute("data-status") == "completed", "the batch page")
        want = "$%.4f" % (fc["amount_micros"] / 1e6)
        wait(drv, lambda x: text_of(x, ".card.fleet-cost .card-body").startswith(want + " ("), "the fleet cost card")
        assert text_of(drv, ".card.token-cost .card-body") == "$%.4f" % (b["cost"]["amount_micros"] / 1e6)
        drv.save_screenshot(os.path.join(shots, "batch-fleet.png"))

        drv.get(f"http://127.0.0.1:{d.port}/ui/#/workers")
        wait(drv, lambda x: text_of(x, f'table.workers tr[data-id="{w.worker_id}"] .per-hour') == "$36.0000",
             "the worker's price per hour")
        drv.get(f"http://127.0.0.1:{d.port}/ui/#/usage")
        wait(drv, lambda x: len(csss(x, "#chart-fleet-cost rect.col")) == 14, "14 daily fleet-cost bars")
        rep = d.json("GET", "/v1/usage?view=fleet&group_by=day&since=0")
        day = {x["key"]: x for x in rep["data"]}
        def bars(x, chart):
            return {r.get_attribute("data-day"): float(r.get_attribute("data-value"))
                    for r in csss(x, f"#{chart} rect.col")}
        for chart, val in (("chart-fleet-cost", lambda u: u["fleet_cost"]["amount_micros"]),
                           ("chart-fleet-idle", lambda u: u["idle"]["amount_micros"]),
                           ("chart-utilization", lambda u: round(u["utilization"] * 1000) / 10)):
            # the idle cost and utilization grow while the worker stays registered: compare with a fresh answer
            def same(x, chart=chart, val=val):
                r = d.json("GET", "/v1/usage?view=fleet&group_by=day&since=0")
                got = bars(x, chart)
                want = {u["key"]: val(u) for u in r["data"]}
                return all(abs(v - want.get(k, 0)) < 1e-9 for k, v in got.items()) and \
                    abs(sum(got.values()) - sum(want.values())) < 1e-9
            wait(drv, same, f"{chart}: the API's daily figures")
        assert sum(x["fleet_cost"]["amount_micros"] for x in day.values()) == fc["amount_micros"], day
        assert text_of(drv, ".card.fleet-cost-total .card-body") == want

        # the idle and utilization cards: the fleet line of the API (app.js fmtCost, and
        # Math.round(utilization * 1000) / 10 with one decimal); both move while the worker
        # stays registered, so compare with an answer taken alongside the page's poll
        def money(micros):
            x = micros / 1e6
            return "$%.2f" % x if x >= 100 else "$%.4f" % x

        def cards_same(x):
            fl = d.json("GET", "/v1/usage?view=fleet&group_by=day&since=0")["fleet"]
            util = "%.1f%%" % (math.floor(fl["utilization"] * 1000 + 0.5) / 10)
            return text_of(x, ".card.fleet-idle-total .card-body") == money(fl["idle"]["amount_micros"]) and \
                text_of(x, ".card.fleet-utilization .card-body") == util and 0 < fl["utilization"] < 1
        wait(drv, cards_same, "the idle and utilization cards: the API's fleet line")
        drv.save_screenshot(os.path.join(shots, "usage-fleet.png"))
        no_page_errors(drv)
    finally:
        drv.quit()
