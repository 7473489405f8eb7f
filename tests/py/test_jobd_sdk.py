"""Compatibility with the official `openai` Python SDK (pinned in
scripts/requirements-test.txt): files.create, batches.create / retrieve /
list with auto-pagination / cancel, files.content, NotFoundError for
unknown ids and AuthenticationError for a bad key, against a real jobd."""
import os

from harness import Skip, tmpdir
from jobdlib import Jobd, create_key, jsonl


def test_jobd_openai_sdk_round_trip():
    try:
        import openai
    except ImportError:
        raise Skip("the openai package is not installed (scripts/install-deps)")
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "sdk")
    d = Jobd(data=data, key=key)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{d.port}/v1", api_key=key, max_retries=0)
    payload = jsonl(3)
    f = client.files.create(file=("in.jsonl", payload), purpose="batch")
    assert f.id.startswith("file-") and f.bytes == len(payload) and f.purpose == "batch", f
    assert client.files.retrieve(f.id).filename == "in.jsonl"
    assert client.files.content(f.id).read() == payload
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata={"suite": "sdk"})
    assert b.status == "validating" and b.metadata == {"suite": "sdk"}, b
    d.wait_batch(b.id)
    got = client.batches.retrieve(b.id)
    assert got.status == "in_progress" and got.request_counts.total == 3, got
    ids = [b.id] + [client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                          completion_window="24h").id for _ in range(24)]
    listed = [x.id for x in client.batches.list(limit=7)]  # auto-pagination over 4 pages
    assert listed == sorted(ids, reverse=True), listed
    c = client.batches.cancel(b.id)
    assert c.status == "cancelling", c
    try:
        client.batches.retrieve("batch_doesnotexist")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    try:
        client.files.retrieve("file-doesnotexist")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError:
        pass
    bad = openai.OpenAI(base_url=f"http://127.0.0.1:{d.port}/v1", api_key="sk-jobd-wrong", max_retries=0)
    try:
        bad.batches.list()
        raise AssertionError("expected AuthenticationError")
    except openai.AuthenticationError as e:
        assert e.status_code == 401
    assert client.files.delete(f.id).deleted is True
