"""The request-body contract, jobd side: every case of
tests/fixtures/contract/bodies.jsonl uploaded to a real jobd over loopback,
one batch per endpoint, and each line's verdict read back from the batch's
errors. tests/unit/openai/test_contract.c runs the same file through the
worker's parsers; both must give each case's verdict, code and param
(jobd's param carries the line's "body." prefix), so a line jobd accepts
is a line the worker runs, and a line it refuses is refused for the
worker's reason."""
import json
import os

from jobdlib import Jobd

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "fixtures", "contract", "bodies.jsonl")


def load_cases():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_contract_corpus_jobd_verdicts_match():
    cases = load_cases()
    assert len(cases) >= 60, len(cases)
    d = Jobd()
    checked = 0
    for endpoint in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"):
        mine = [c for c in cases if c["endpoint"] == endpoint]
        assert mine, endpoint
        lines = [json.dumps({"custom_id": f"c{i}", "method": "POST", "url": endpoint, "body": c["body"]})
                 for i, c in enumerate(mine)]
        f = d.upload(("\n".join(lines) + "\n").encode(), filename="contract.jsonl")
        b = d.wait_batch(d.create_batch(f["id"], endpoint=endpoint)["id"])
        errs = {e["line"]: e for e in (b.get("errors") or {}).get("data") or []}
        n_bad = sum(1 for c in mine if "code" in c["expect"])
        assert b["status"] == ("failed" if n_bad else "in_progress"), (endpoint, b["status"])
        assert len(errs) == n_bad, (endpoint, len(errs), n_bad, sorted(errs))
        for i, c in enumerate(mine):
            got = errs.get(i + 1)
            x = c["expect"]
            if x.get("ok"):
                assert got is None, (c["name"], got)
            else:
                assert got is not None, (c["name"], "accepted, want", x)
                assert (got["code"], got["param"]) == (x["code"], "body." + x["param"]), (c["name"], got, x)
                assert got["message"], (c["name"], got)
            checked += 1
    assert checked == len(cases)
