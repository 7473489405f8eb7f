"""kill -9 of jobd right after a batch completes (spec/webhooks.md):
the batch.completed event row commits with the transition; the
dispatcher cannot have sent it yet (an hour-long --webhook-poll keeps the
senders asleep after their first look at start). After a restart the event
is delivered exactly once by webhook-id: the receiver counts distinct ids and
total POSTs, checks the signature with the Standard Webhooks reference
library (and plain hmac, and the openai SDK), and a second kill -9 + restart
after the delivery sends nothing more."""
import os
import signal
import time

from jobdlib import Jobd
from test_webhooks import Receiver, verify_all
from workerlib import TestWorker
from harness import db_connect  # noqa: E402

WT = "worker-secret-wc"
BASE = ["--worker-token", WT, "--sweep-interval", "100ms", "--webhook-allow-private",
        "--webhook-retry-base", "0s", "--webhook-timeout", "5s"]
ASLEEP = BASE + ["--webhook-poll", "1h"]
AWAKE = BASE + ["--webhook-poll", "20ms"]


def db_rows(data, sql):
    db = db_connect(data)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def completed_while_senders_nap(rx):
    """A jobd whose senders nap for an hour, a batch completed under it, and
    jobd killed (-9) then; returns (jobd, endpoint, batch, events). The
    scenario needs the senders' first look (at start) to be over before the
    batch completes, which no API shows. Race fix: a fixed sleep after the
    start was taken for "the first look is over"; now a run in which a late
    first look fanned the event out before the kill (a delivery row exists)
    is thrown away and the scenario started again."""
    for attempt in range(3):
        d = Jobd(args=ASLEEP)
        time.sleep(0.3)  # the senders' first look (at start) is over, most likely
        ep = d.json("POST", "/v1/webhook_endpoints", {"url": rx.url("/hook"), "event_types": ["batch.completed"]})
        b = d.submit(b"".join(
            b'{"custom_id":"c-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"smollm",'
            b'"messages":[{"role":"user","content":"hi"}],"max_tokens":4}}\n' % i for i in range(3)))
        d.wait_batch(b["id"])
        w = TestWorker(d.port, WT)
        w.register()
        w.run_until(lambda: d.json("GET", f"/v1/batches/{b['id']}")["status"] == "completed", timeout=60,
                    wait_ms=100)
        # completed: the event is durable
        evs = db_rows(d.data, "SELECT id, type, object_id FROM webhook_events")
        assert len(evs) == 1 and evs[0][1:] == ("batch.completed", b["id"]), evs
        d.proc.stop(signal.SIGKILL)
        if db_rows(d.data, "SELECT count(*) FROM webhook_deliveries") == [(0,)]:
            return d, ep, b, evs
        with rx.lock:
            rx.calls.clear()
    raise AssertionError("three times a sender's first look came after the batch completed")


def test_webhook_kill9_after_completion_delivers_exactly_once():
    rx = Receiver()
    d = None
    try:
        d, ep, b, evs = completed_while_senders_nap(rx)
        # nothing was sent before the kill
        assert rx.calls == []
        d.restart(sig=signal.SIGKILL, args=AWAKE)  # (already killed: this starts it again)
        calls = rx.wait("/hook", 1)
        # let any duplicate arrive: the delivery row must say delivered, and nothing else may come
        deadline = time.monotonic() + 30
        while db_rows(d.data, "SELECT status FROM webhook_deliveries") != [("delivered",)]:
            assert time.monotonic() < deadline, db_rows(d.data, "SELECT * FROM webhook_deliveries")
            time.sleep(0.05)
        time.sleep(0.5)
        calls = rx.on("/hook")
        ids = {h["webhook-id"] for _, h, _ in calls}
        assert len(calls) == 1 and ids == {evs[0][0]}, calls
        _, headers, body = calls[0]
        p = verify_all(ep["secret"], headers, body)
        assert p["type"] == "batch.completed" and p["data"]["id"] == b["id"], p
        # a second crash after the delivery: the restarted dispatcher sends nothing again
        d.restart(sig=signal.SIGKILL, args=AWAKE)
        time.sleep(1.0)
        assert len(rx.on("/hook")) == 1, rx.calls
        assert d.json("GET", f"/v1/webhook_endpoints/{ep['id']}/deliveries")["data"][0]["attempts"] == 1
    finally:
        if d:
            d.proc.stop()
        rx.close()
