#!/usr/bin/env python3
"""examples/webhook_receiver.py - receive jobd's batch webhooks (Python
standard library only).

jobd signs every delivery the Standard Webhooks way (spec/webhooks.md):

    webhook-id:        evt_...            (the same for every retry of an event)
    webhook-timestamp: 1719168000         (unix seconds of this attempt)
    webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")> [v1,... ...]

where key is the base64 part of the secret "whsec_<base64>". This server
checks the signature (constant time, any of the space-separated v1
signatures may match, so secret rotation works) and the timestamp (within
--tolerance seconds of now, against replays), then prints the event as one
JSON line on stdout and answers 204. A bad or missing signature or a stale
timestamp answers 400 and prints a "rejected" line on stderr; jobd retries
non-2xx answers with backoff, so answer 2xx only for what you accepted.
Deliveries are at-least-once: deduplicate on webhook-id (this example keeps
the ids it has seen in memory and prints a duplicate once more, marked).

    export WEBHOOK_SECRET=$(curl -s -H "Authorization: Bearer $JOBD_API_KEY" \\
                            $JOBD_URL/v1/webhook_secret | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
    python3 examples/webhook_receiver.py --port 9000 &
    jobctl submit examples/hello.jsonl --webhook http://127.0.0.1:9000/jobd

(jobd refuses webhook URLs on loopback/private addresses unless it runs with
--webhook-allow-private; in production put this behind HTTPS.)

Options: --host (default 127.0.0.1), --port (default 9000; 0 = any free port,
the chosen one is printed as "listening on http://HOST:PORT"), --secret
(default $WEBHOOK_SECRET), --tolerance seconds (default 300).
"""
import argparse
import base64
import binascii
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20  # jobd's events are a few hundred bytes


class BadSignature(Exception):
    pass


def secret_key(secret):
    """The HMAC key of a "whsec_<base64>" secret."""
    if not secret.startswith("whsec_"):
        raise ValueError("the secret must look like whsec_<base64>")
    try:
        return base64.b64decode(secret[len("whsec_"):], validate=True)
    except binascii.Error as e:
        raise ValueError(f"the secret's base64 is invalid: {e}") from None


def verify(key, msg_id, timestamp, signature, body, tolerance=300, now=None):
    """Raise BadSignature unless one of the v1 signatures matches and the
    timestamp is within tolerance seconds of now."""
    if not msg_id or not timestamp or not signature:
        raise BadSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        ts = int(timestamp)
    except ValueError:
        raise BadSignature("webhook-timestamp is not an integer") from None
    now = int(time.time()) if now is None else now
    if abs(now - ts) > tolerance:
        raise BadSignature(f"timestamp {ts} is {now - ts:+d} s from now (tolerance {tolerance} s)")
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    for sig in signature.split(" "):
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), want):
            return
    raise BadSignature("no v1 signature matches")


def make_handler(key, tolerance, out=sys.stdout, err=sys.stderr):
    seen = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or "-1")
            except ValueError:
                n = -1
            if n < 0 or n > MAX_BODY:
                return self.answer(400 if n < 0 else 413, "a body with Content-Length is required")
            body = self.rfile.read(n)
            h = self.headers
            try:
                verify(key, h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature"),
                       body, tolerance)
                event = json.loads(body)
            except (BadSignature, ValueError) as e:
                print(f"rejected {self.path} webhook-id={h.get('webhook-id')}: {e}", file=err, flush=True)
                return self.answer(400, str(e))
            dup = h.get("webhook-id") in seen
            seen.add(h.get("webhook-id"))
            line = {"webhook_id": h.get("webhook-id"), "path": self.path, "duplicate": dup,
                    "type": event.get("type"), "batch": (event.get("data") or {}).get("id"), "event": event}
            print(json.dumps(line, sort_keys=True), file=out, flush=True)
            # act on it here: e.g. on batch.completed, `jobctl results <batch> -o ...`
            self.answer(204)

        def answer(self, code, msg=None):
            data = (json.dumps({"error": msg}) + "\n").encode() if msg else b""
            self.send_response(code)
            if data:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):  # keep stdout for events only
            pass

    return Handler


def main():
    ap = argparse.ArgumentParser(description="Receive and verify jobd's signed batch webhooks.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--secret", default=os.environ.get("WEBHOOK_SECRET"),
                    help="whsec_... (default: $WEBHOOK_SECRET; GET /v1/webhook_secret shows it)")
    ap.add_argument("--tolerance", type=int, default=300, help="seconds a timestamp may be off (default 300)")
    a = ap.parse_args()
    if not a.secret:
        ap.error("no secret: pass --secret whsec_... or set WEBHOOK_SECRET")
    try:
        key = secret_key(a.secret)
    except ValueError as e:
        ap.error(str(e))
    srv = ThreadingHTTPServer((a.host, a.port), make_handler(key, a.tolerance))
    host, port = srv.server_address[:2]
    print(f"listening on http://{host}:{port}", file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
