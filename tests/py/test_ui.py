"""The dashboard's files over HTTP (no browser; tests/py/test_ui_browser.py
drives the page): content types, the CSP and other security headers,
ETag / If-None-Match, the /ui redirect, 404s, --ui off, the page weight, no
inline script or style in the HTML; and the API additions the dashboard
uses: ETags on every GET list, GET /v1/batches?status=."""
import re

from jobdlib import Jobd, create_key, jsonl

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
FILES = {"/ui/": "text/html; charset=utf-8", "/ui/app.js": "text/javascript; charset=utf-8",
         "/ui/app.css": "text/css; charset=utf-8"}


def test_ui_files_headers_and_etags():
    d = Jobd()
    total = 0
    for path, ctype in FILES.items():
        r = d.call("GET", path)
        assert r.status == 200, (path, r)
        h = r.headers
        assert h["content-type"] == ctype, (path, h)
        assert h["content-security-policy"] == CSP, h
        assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY", h
        assert h["referrer-policy"] == "no-referrer" and h["cache-control"] == "no-cache", h
        assert re.fullmatch(r'"[0-9a-f]{16}"', h["etag"]), h
        assert int(h["content-length"]) == len(r.body)
        total += len(r.body)
        r2 = d.call("GET", path, headers={"If-None-Match": h["etag"]})
        assert r2.status == 304 and r2.body == b"" and r2.headers["etag"] == h["etag"], r2
        r3 = d.call("GET", path, headers={"If-None-Match": '"0000000000000000"'})
        assert r3.status == 200 and r3.body == r.body
        r4 = d.call("HEAD", path)
        assert r4.status == 200 and r4.body == b"" and r4.headers["content-type"] == ctype
    assert total < 200_000, total  # page weight (spec/ui.md)

    html = d.call("GET", "/ui/").body.decode()
    assert "<style" not in html and " style=" not in html, "inline style (the CSP forbids it)"
    scripts = re.findall(r"<script[^>]*>", html)
    assert scripts and all('src="/ui/' in s for s in scripts), scripts
    assert not re.search(r"\son[a-z]+=", html), "inline event handler"
    assert "http://" not in html and "https://" not in html, "no other origin"

    r = d.call("GET", "/ui")
    assert r.status == 301 and r.headers["location"] == "/ui/", r
    for bad in ("/ui/nope.js", "/ui/..%2Fapp.js", "/ui/.hidden", "/ui/app.js/"):
        r = d.call("GET", bad)
        assert r.status == 404, (bad, r)
        if bad != "/ui/app.js/":  # no such shape: the router's 404
            assert r.json()["error"]["code"] == "not_found" and "content-security-policy" in r.headers
    r = d.call("POST", "/ui/app.js")
    assert r.status == 405, r


def test_ui_off_and_keyed_mode_needs_no_key_for_the_page():
    d = Jobd(args=["--ui", "off"])
    assert d.call("GET", "/ui/").status == 404
    assert d.call("GET", "/ui/app.js").status == 404
    assert d.call("GET", "/healthz").status == 200
    d.proc.stop()
    key = create_key(d.data, "alpha")
    k = Jobd(data=d.data, key=key)
    # the static page holds no data: it loads without a key, the API it calls does not answer without one
    assert k.call("GET", "/ui/", key=None).status == 200
    assert k.call("GET", "/v1/batches", key=None).status == 401
    r = Jobd(args=["--ui", "maybe"], wait=False)
    assert r.proc.p.wait(30) == 2 and "--ui" in r.proc.log()


def test_api_list_etags_and_status_filter():
    d = Jobd(args=["--window-min", "1s"])
    a = d.submit(jsonl(2))
    b = d.submit(jsonl(1))
    d.wait_batch(a["id"])
    d.wait_batch(b["id"])
    d.json("POST", f"/v1/batches/{b['id']}/cancel", {})
    d.wait_batch(b["id"], statuses=("cancelled",))
    for path in ("/v1/batches", "/v1/usage?group_by=day", "/v1/models", "/v1/workers", "/v1/files",
                 f"/v1/batches/{a['id']}/dead_letters", "/v1/webhook_endpoints"):
        r = d.call("GET", path)
        assert r.status == 200 and re.fullmatch(r'"[0-9a-f]{32}"', r.headers.get("etag", "")), (path, r.headers)
        r2 = d.call("GET", path, headers={"If-None-Match": r.headers["etag"]})
        assert r2.status == 304 and r2.body == b"", (path, r2)
        r3 = d.call("GET", path, headers={"If-None-Match": 'W/"x", ' + r.headers["etag"]})
        assert r3.status == 304, (path, r3)
    etag = d.call("GET", "/v1/batches").headers["etag"]
    c = d.submit(jsonl(1))
    r = d.call("GET", "/v1/batches", headers={"If-None-Match": etag})
    assert r.status == 200 and r.json()["data"][0]["id"] == c["id"], r  # changed: a new body, a new tag
    # POST answers carry no computed ETag
    d.wait_batch(c["id"])
    assert "etag" not in d.call("POST", f"/v1/batches/{c['id']}/cancel", b"{}",
                                {"Content-Type": "application/json"}).headers
    d.wait_batch(c["id"], statuses=("cancelled",))

    ids = [x["id"] for x in d.json("GET", "/v1/batches?status=cancelled")["data"]]
    assert b["id"] in ids and a["id"] not in ids, ids
    page = d.json("GET", "/v1/batches?status=cancelled&limit=1")
    assert len(page["data"]) == 1 and page["has_more"] is True, page
    nxt = d.json("GET", f"/v1/batches?status=cancelled&limit=1&after={page['last_id']}")
    assert [x["status"] for x in nxt["data"]] == ["cancelled"] and nxt["data"][0]["id"] != page["last_id"], nxt
    assert d.json("GET", "/v1/batches?status=in_progress")["data"][0]["id"] == a["id"]
    assert d.json("GET", "/v1/batches?status=expired")["data"] == []
    e = d.json("GET", "/v1/batches?status=done", expect=400)["error"]
    assert e["param"] == "status" and e["code"] == "invalid_value", e
