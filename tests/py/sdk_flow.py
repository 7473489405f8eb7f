"""tests/py/sdk_flow.py - the documented OpenAI Batch flow through the official
`openai` SDK, run as a subprocess by tests/py/test_sdk_compat.py so that a
chosen SDK version (a --target folder of scripts/install-deps) can come first
on sys.path without touching .venv.

    python sdk_flow.py BASE_URL API_KEY EXPECTED_VERSION

jobd must be serving BASE_URL with a real worker for model "smollm". Every
JSON answer is also validated with the SDK's own pydantic types
(`Model.model_validate` on the raw body: the SDK itself parses answers with
`construct`, which checks nothing). Retries: the client keeps the SDK's
default max_retries (2); the permanent errors must reach the caller after
exactly one HTTP request, counted from jobd's /metrics. Prints "sdk-flow ok
VERSION" on success; any failed check raises (exit status 1).
"""
import json
import sys
import time
import urllib.request


def metric_requests(base):
    """Sum of jobd_http_requests_total over every route but /metrics."""
    root = base.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(root + "/metrics", timeout=10) as r:
        text = r.read().decode()
    n = 0
    for line in text.splitlines():
        if line.startswith("jobd_http_requests_total{") and 'route="/metrics"' not in line:
            n += int(float(line.rsplit(" ", 1)[1]))
    return n


def raw_json(raw):
    """The JSON body of a with_raw_response answer."""
    return json.loads(raw.text)


def chat_jsonl(n, model, max_tokens=4, prefix="q"):
    lines = []
    for i in range(n):
        lines.append(json.dumps({"custom_id": f"{prefix}-{i}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": model, "max_tokens": max_tokens,
                                          "messages": [{"role": "user", "content": f"Say {i}."}]}}))
    return ("\n".join(lines) + "\n").encode()


def expect_error(cls, status, base, fn, code=None):
    """fn() must raise cls with this status after exactly one HTTP request."""
    before = metric_requests(base)
    try:
        fn()
    except cls as e:
        assert e.status_code == status, (cls.__name__, e.status_code, e)
        if code is not None:
            assert e.code == code, (e.code, e.body)
        assert isinstance(e.body, dict) and "message" in e.body, e.body
    else:
        raise AssertionError(f"expected {cls.__name__}")
    sent = metric_requests(base) - before
    assert sent == 1, f"{cls.__name__}: the SDK sent {sent} requests (retried a permanent error)"


def main():
    base, key, want = sys.argv[1], sys.argv[2], sys.argv[3]
    import openai
    from openai.types import Batch, FileObject, FileDeleted
    from openai.types.chat import ChatCompletion

    assert openai.__version__ == want, (openai.__version__, want, openai.__file__)
    client = openai.OpenAI(base_url=base, api_key=key, timeout=60)  # default max_retries (2)

    # -- upload
    payload = chat_jsonl(3, "smollm")
    raw = client.files.with_raw_response.create(file=("in.jsonl", payload), purpose="batch")
    f = FileObject.model_validate(raw_json(raw))
    assert f.id.startswith("file-") and f.bytes == len(payload) and f.purpose == "batch", f
    assert f.filename == "in.jsonl", f
    got = FileObject.model_validate(raw_json(client.files.with_raw_response.retrieve(f.id)))
    assert got.id == f.id and got.bytes == len(payload), got
    assert client.files.content(f.id).read() == payload

    # -- batch on the real worker, polled until terminal
    raw = client.batches.with_raw_response.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                                  completion_window="24h", metadata={"suite": "sdk", "v": want})
    b = Batch.model_validate(raw_json(raw))
    assert b.status == "validating" and b.metadata == {"suite": "sdk", "v": want}, b
    assert b.input_file_id == f.id and b.endpoint == "/v1/chat/completions", b
    deadline = time.monotonic() + 600
    while True:
        b = Batch.model_validate(raw_json(client.batches.with_raw_response.retrieve(b.id)))
        if b.status in ("completed", "failed", "expired", "cancelled"):
            break
        assert time.monotonic() < deadline, f"batch still {b.status}: {b.request_counts}"
        time.sleep(0.3)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 3, 0), b
    assert b.output_file_id and b.completed_at and b.completed_at >= b.created_at, b
    # the typed object the SDK hands out agrees with the validated one
    sdk_b = client.batches.retrieve(b.id)
    assert sdk_b.output_file_id == b.output_file_id and sdk_b.status == "completed", sdk_b

    # -- output file, line by line into the SDK's types
    text = client.files.content(b.output_file_id).text
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    assert sorted(x["custom_id"] for x in lines) == ["q-0", "q-1", "q-2"], lines
    for x in lines:
        assert x["error"] is None and x["response"]["status_code"] == 200, x
        cc = ChatCompletion.model_validate(x["response"]["body"])
        assert cc.object == "chat.completion" and cc.id.startswith("chatcmpl-"), cc
        assert cc.choices[0].message.role == "assistant", cc
        assert isinstance(cc.choices[0].message.content, str), cc
        assert cc.choices[0].finish_reason in ("stop", "length"), cc
        assert 1 <= cc.usage.completion_tokens <= 4, cc.usage
        assert cc.usage.total_tokens == cc.usage.prompt_tokens + cc.usage.completion_tokens, cc.usage
    if b.error_file_id:
        assert client.files.content(b.error_file_id).text.strip() == "", "errors in a clean batch"

    # -- automatic pagination over more than one page (batches on a model no
    # worker serves, so they wait in the queue)
    idle = client.files.create(file=("idle.jsonl", chat_jsonl(2, "sdk-no-worker")), purpose="batch")
    ids = [b.id] + [client.batches.create(input_file_id=idle.id, endpoint="/v1/chat/completions",
                                          completion_window="24h").id for _ in range(7)]
    first = client.batches.list(limit=3)
    assert len(first.data) == 3 and first.has_more is True, first
    listed = [x.id for x in client.batches.list(limit=3)]  # iterates 3 pages
    assert listed == sorted(ids, reverse=True), (listed, ids)
    page = raw_json(client.batches.with_raw_response.list(limit=3))
    for x in page["data"]:
        Batch.model_validate(x)

    # -- cancel a waiting batch: cancelling, then cancelled
    c = client.batches.cancel(ids[-1])
    assert c.status in ("cancelling", "cancelled"), c
    deadline = time.monotonic() + 60
    while c.status != "cancelled":
        assert time.monotonic() < deadline, c
        time.sleep(0.2)
        c = Batch.model_validate(raw_json(client.batches.with_raw_response.retrieve(ids[-1])))
    assert c.cancelled_at, c
    assert client.batches.cancel(ids[-1]).status == "cancelled"  # idempotent

    # -- error mapping; permanent errors are not retried (one request each)
    expect_error(openai.NotFoundError, 404, base, lambda: client.batches.retrieve("batch_doesnotexist"),
                 "not_found")
    expect_error(openai.NotFoundError, 404, base, lambda: client.files.retrieve("file-doesnotexist"))
    expect_error(openai.NotFoundError, 404, base, lambda: client.files.content("file-doesnotexist"))
    expect_error(openai.NotFoundError, 404, base, lambda: client.batches.cancel("batch_doesnotexist"))
    expect_error(openai.NotFoundError, 404, base, lambda: client.batches.create(
        input_file_id="file-doesnotexist", endpoint="/v1/chat/completions", completion_window="24h"))
    expect_error(openai.BadRequestError, 400, base, lambda: client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="never"))
    expect_error(openai.BadRequestError, 400, base, lambda: client.batches.cancel(b.id), "invalid_state")
    bad = openai.OpenAI(base_url=base, api_key="sk-jobd-wrong", timeout=60)
    expect_error(openai.AuthenticationError, 401, base, lambda: bad.batches.list())
    expect_error(openai.AuthenticationError, 401, base, lambda: bad.files.create(
        file=("x.jsonl", payload), purpose="batch"))

    # -- delete
    d = FileDeleted.model_validate(raw_json(client.files.with_raw_response.delete(idle.id)))
    assert d.deleted is True and d.id == idle.id, d
    expect_error(openai.NotFoundError, 404, base, lambda: client.files.retrieve(idle.id))
    print("sdk-flow ok", openai.__version__, flush=True)


if __name__ == "__main__":
    main()
