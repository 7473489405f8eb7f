"""Anthropic's Message Batches contract end to end (release builds): the
official anthropic SDK, unchanged except base_url, against a real jobd and a
CPU worker on the default SmolLM2-135M model.

- create with inline requests (plain, system prompt, multi-turn, tools with
  tool_choice any and a named tool, a tool_result follow-up, thinking
  disabled), retrieve until ended, results() parsed by the SDK's own types,
  list with paging (before_id / after_id through the SDK's auto-pager),
  cancel, delete; every tool_use.input validates against its input_schema
  with jsonschema;
- one engine, two front doors: the same requests through the OpenAI
  contract (POST /v1/jobs) give the same tokens (greedy) and the same usage;
- on Qwen2.5-Coder-0.5B (Hermes tags; fetched by scripts/fetch-model) every
  forced call (tool_choice any, a named tool) is a tool_use whose input validates;
- jobctl submit of a {custom_id, params} JSONL, --wait;
- bad input gets Anthropic's error envelope naming the request index and
  field: missing max_tokens, an image block, an unknown tool_choice.name, a
  tool_result without its tool_use, a batch over the count and size limits;
  auth by x-api-key and the anthropic-version header;
- results streamed: 3,000 results of a scripted worker (succeeded, errored,
  canceled) read back chunked through the SDK in commit order;
- thinking on a model that thinks (tests/py/thinkmodel.py: the tiny qwen3
  fixture, Qwen3-0.6B's template, a scripted head): budget_tokens closes
  the thinking block, a thinking block then a text block, token for token
  its OpenAI twin; thinking disabled gives no thinking block.

Runtime: about a minute on a 2-core machine.
"""
import json
import os
import time

from harness import Skip, binary, run, tmpdir
from jobdlib import Jobd, create_key
from test_jobworker import JOBD_ARGS, start_worker, wait_done
from test_jobworker import need as need_model
from workerlib import read_jsonl

try:
    import anthropic  # scripts/requirements-test.txt
    from anthropic.types import Message
    from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
except ImportError:
    anthropic = None
try:
    import jsonschema  # scripts/requirements-test.txt
except ImportError:
    jsonschema = None

TIMEOUT = 900

WEATHER = {"name": "get_weather", "description": "Get the current weather of a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "description": "The city, e.g. Paris"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city"], "additionalProperties": False}}
TIME = {"name": "get_time", "description": "The local time in an IANA time zone.",
        "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}},
                         "required": ["tz"], "additionalProperties": False}}
SCHEMAS = {t["name"]: t["input_schema"] for t in (WEATHER, TIME)}


def need():
    if anthropic is None:
        raise Skip("the anthropic SDK is not installed (scripts/install-deps)")
    if jsonschema is None:
        raise Skip("jsonschema is not installed (scripts/requirements-test.txt)")


def user(text):
    return [{"role": "user", "content": text}]


def params(messages, **kw):
    return dict({"model": "smollm", "max_tokens": 24, "temperature": 0, "messages": messages}, **kw)


TOOL_USE = {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
            "input": {"city": "Paris"}}
REQUESTS = [
    ("plain", params(user("What is the capital of France?"))),
    ("system", params(user("Say hello."), system="You are a pirate. Answer in one sentence.")),
    ("system_blocks", params(user("Say hello."), system=[{"type": "text", "text": "You are terse."}])),
    ("multi_turn", params([{"role": "user", "content": "My name is Ada."},
                           {"role": "assistant", "content": [{"type": "text", "text": "Hello Ada!"}]},
                           {"role": "user", "content": "What is my name?"}])),
    ("tools_any", params(user("What is the weather in Paris?"), max_tokens=128, tools=[WEATHER, TIME],
                         tool_choice={"type": "any", "disable_parallel_tool_use": True})),
    ("tool_named", params(user("What time is it in Tokyo?"), max_tokens=128, tools=[WEATHER, TIME],
                          tool_choice={"type": "tool", "name": "get_time"})),
    ("tool_result", params([{"role": "user", "content": "What is the weather in Paris?"},
                            {"role": "assistant", "content": [TOOL_USE]},
                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"],
                                                          "content": "18 C and sunny"}]}],
                           tools=[WEATHER])),
    ("no_thinking", params(user("Count to three."), thinking={"type": "disabled"},
                           metadata={"user_id": "u-1"})),
    ("stop_seq", params(user("Count from 1 to 10."), max_tokens=48, stop_sequences=["5", "never-said"])),
]

# The same requests in the OpenAI contract, written by hand from the Anthropic ones.
OAI_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": WEATHER["description"],
                                                "parameters": WEATHER["input_schema"]}}
OAI_TIME = {"type": "function", "function": {"name": "get_time", "description": TIME["description"],
                                             "parameters": TIME["input_schema"]}}
OPENAI_TWINS = {
    "plain": {"messages": user("What is the capital of France?")},
    "system": {"messages": [{"role": "system", "content": "You are a pirate. Answer in one sentence."}]
               + user("Say hello.")},
    "tools_any": {"messages": user("What is the weather in Paris?"), "max_tokens": 128,
                  "tools": [OAI_WEATHER, OAI_TIME], "tool_choice": "required", "parallel_tool_calls": False},
    "stop_seq": {"messages": user("Count from 1 to 10."), "max_tokens": 48, "stop": ["5", "never-said"]},
    "system_blocks": {"messages": [{"role": "system", "content": "You are terse."}] + user("Say hello.")},
    "multi_turn": {"messages": [{"role": "user", "content": "My name is Ada."},
                                {"role": "assistant", "content": "Hello Ada!"},
                                {"role": "user", "content": "What is my name?"}]},
    "tool_named": {"messages": user("What time is it in Tokyo?"), "max_tokens": 128, "tools": [OAI_WEATHER, OAI_TIME],
                   "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    "no_thinking": {"messages": user("Count to three."), "chat_template_kwargs": {"enable_thinking": False}},
    "tool_result": {"messages": user("What is the weather in Paris?") + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": TOOL_USE["id"], "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(TOOL_USE["input"])}}]},
        {"role": "tool", "tool_call_id": TOOL_USE["id"], "content": "18 C and sunny"}], "tools": [OAI_WEATHER]},
}


def client_for(d, key):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{d.port}", api_key=key, max_retries=0)


def wait_ended(client, batch_id, worker=None, timeout=600):
    deadline = time.monotonic() + timeout
    while True:
        b = client.messages.batches.retrieve(batch_id)
        assert isinstance(b, MessageBatch), b
        if b.processing_status == "ended":
            return b
        if worker is not None and worker.p.poll() is not None:
            raise AssertionError(f"worker exited {worker.p.returncode}: {worker.log()[-3000:]}")
        assert time.monotonic() < deadline, b
        time.sleep(0.3)


def check_message(cid, m):
    assert isinstance(m, Message), m
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant", m
    assert m.model == "smollm", m
    if cid == "stop_seq":  # the engine says which stop string ended the answer
        assert m.stop_reason == "stop_sequence" and m.stop_sequence == "5", m
        assert [b.type for b in m.content] == ["text"] and "5" not in m.content[0].text, m
        return None
    assert m.stop_sequence is None, m
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage
    assert m.usage.cache_creation_input_tokens == 0, m.usage
    uses = [b for b in m.content if b.type == "tool_use"]
    for b in uses:
        assert b.id.startswith("toolu_") and b.name in SCHEMAS, b
        assert isinstance(b.input, dict), b
        jsonschema.Draft202012Validator(SCHEMAS[b.name]).validate(b.input)
    if cid in ("tools_any", "tool_named"):
        # grammar-enforced calls: SmolLM may still loop inside a string argument to the limit
        assert (uses and m.stop_reason == "tool_use") or m.stop_reason == "max_tokens", m
        if cid == "tools_any":
            assert len(uses) <= 1, m
        if cid == "tool_named":
            assert all(b.name == "get_time" for b in uses), m
        return len(uses) > 0
    if cid == "tool_result":  # tool_choice auto: an answer, or another call
        assert m.stop_reason == ("tool_use" if uses else "end_turn") or m.stop_reason == "max_tokens", (cid, m)
        return None
    assert not uses and m.stop_reason in ("end_turn", "max_tokens"), (cid, m)
    assert [b.type for b in m.content] == ["text"], m
    return None


def test_anthropic_sdk_flow_on_jobd_and_a_cpu_worker():
    need()
    need_model()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-a", asan=False)
    d = Jobd(data=data, asan=False, args=JOBD_ARGS, key=key)
    w = start_worker(d, optimised=True)
    client = client_for(d, key)

    batch = client.messages.batches.create(requests=[{"custom_id": c, "params": p} for c, p in REQUESTS])
    assert isinstance(batch, MessageBatch) and batch.id.startswith("msgbatch_"), batch
    assert batch.type == "message_batch" and batch.processing_status == "in_progress", batch
    assert batch.request_counts.processing == len(REQUESTS) and batch.results_url is None, batch
    assert batch.expires_at > batch.created_at and batch.ended_at is None, batch

    done = wait_ended(client, batch.id, worker=w)
    assert done.request_counts.succeeded == len(REQUESTS), done.request_counts
    assert done.request_counts.processing == 0 and done.ended_at is not None, done
    assert done.results_url.endswith(f"/v1/messages/batches/{batch.id}/results"), done

    results = list(client.messages.batches.results(batch.id))
    assert sorted(r.custom_id for r in results) == sorted(c for c, _ in REQUESTS), results
    msgs = {}
    called = []
    for r in results:
        assert isinstance(r, MessageBatchIndividualResponse), r
        assert r.result.type == "succeeded", r
        msgs[r.custom_id] = r.result.message
        c = check_message(r.custom_id, r.result.message)
        if c is not None:
            called.append(c)
    assert any(called), msgs  # at least one enforced call completes on the 135M model

    # the batch is an ordinary batch to the OpenAI routes, under its batch_ id
    oai_id = "batch_" + batch.id[len("msgbatch_"):]
    ob = d.json("GET", f"/v1/batches/{oai_id}")
    assert ob["status"] == "completed" and ob["request_counts"]["completed"] == len(REQUESTS), ob

    # one engine, two front doors: the same tokens and the same usage
    lines = [json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
                         "body": dict({"model": "smollm", "max_tokens": 24, "temperature": 0}, **b)})
             for c, b in OPENAI_TWINS.items()]
    ob = d.submit(("\n".join(lines) + "\n").encode(), query="?completion_window=1h")
    ob = wait_done(d, ob["id"], worker=w)
    assert ob["status"] == "completed" and ob["request_counts"]["completed"] == len(OPENAI_TWINS), ob
    compared = set()
    for o in read_jsonl(d, ob["output_file_id"]):
        compared.add(o["custom_id"])
        body = o["response"]["body"]
        m = msgs[o["custom_id"]]
        msg = body["choices"][0]["message"]
        text = "".join(b.text for b in m.content if b.type == "text")
        assert text == (msg["content"] or ""), (o["custom_id"], text, msg)
        calls = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
        assert calls == [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                         for c in msg.get("tool_calls") or []], (calls, msg)
        assert body["choices"][0].get("stop_reason") == m.stop_sequence, (body, m)
        u = body["usage"]
        assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == u["prompt_tokens"], (m.usage, u)
        assert m.usage.output_tokens == u["completion_tokens"], (m.usage, u)
    assert compared == set(OPENAI_TWINS), compared  # every twin compared: none skipped
    assert set(OPENAI_TWINS) == {c for c, _ in REQUESTS}, "a request without its OpenAI twin"

    # cancel: a batch of long requests, cancelled at once
    long = [{"custom_id": f"long-{i}", "params": params(user(f"Write a long story about the number {i}."),
                                                         max_tokens=400)} for i in range(6)]
    cb = client.messages.batches.create(requests=long)
    cc = client.messages.batches.cancel(cb.id)
    assert cc.id == cb.id and cc.processing_status in ("canceling", "ended"), cc
    assert cc.cancel_initiated_at is not None, cc
    ce = wait_ended(client, cb.id, worker=w)
    rc = ce.request_counts
    assert rc.canceled >= 1 and rc.succeeded + rc.canceled + rc.errored + rc.expired == len(long), rc
    kinds = {r.custom_id: r.result.type for r in client.messages.batches.results(cb.id)}
    assert sorted(kinds) == sorted(x["custom_id"] for x in long), kinds
    assert set(kinds.values()) <= {"canceled", "succeeded"} and "canceled" in kinds.values(), kinds
    assert sum(v == "canceled" for v in kinds.values()) == rc.canceled, (kinds, rc)

    # list: newest first, paged by the SDK's auto-pager (after_id), and a before_id page
    extra = [client.messages.batches.create(requests=[{"custom_id": "x", "params": params(user("Hi"),
                                                                                         max_tokens=2)}])
             for _ in range(2)]
    want = [extra[1].id, extra[0].id, cb.id, batch.id]
    got = [b.id for b in client.messages.batches.list(limit=1)]
    assert got == want, (got, want)   # OpenAI-made batches are not listed here
    page = client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == want[:2] and page.has_more, page
    assert page.first_id == want[0] and page.last_id == want[1], page
    back = client.messages.batches.list(limit=2, before_id=want[3])
    assert [b.id for b in back.data] == want[1:3] and back.has_more, back
    top = client.messages.batches.list(limit=5, before_id=want[1])
    assert [b.id for b in top.data] == want[:1] and not top.has_more, top

    # delete: an ended batch goes away (results and all); it is no longer listed or found
    gone = client.messages.batches.delete(cb.id)
    assert gone.id == cb.id and gone.type == "message_batch_deleted", gone
    try:
        client.messages.batches.retrieve(cb.id)
        raise AssertionError("a deleted batch was found")
    except anthropic.NotFoundError as e:
        assert e.body["type"] == "error" and e.body["error"]["type"] == "not_found_error", e.body
    assert cb.id not in [b.id for b in client.messages.batches.list(limit=20)]
    d.json("GET", "/v1/batches/batch_" + cb.id[len("msgbatch_"):], expect=404)

    # jobctl submit: a JSONL of {custom_id, params} lines (the format picked from the file), --wait
    path = os.path.join(tmpdir(), "anthropic.jsonl")
    with open(path, "w") as f:
        f.write("".join(json.dumps({"custom_id": c, "params": p}) + "\n" for c, p in REQUESTS[:2]))
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    r = run([binary("jobctl", asan=False), "submit", path, "--wait", "--interval", "200ms"], env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().startswith("msgbatch_"), (r.returncode, r.stdout, r.stderr)
    jb = client.messages.batches.retrieve(r.stdout.strip())
    assert jb.processing_status == "ended" and jb.request_counts.succeeded == 2, jb
    got = {x.custom_id: x.result.message.content for x in client.messages.batches.results(jb.id)}
    assert got == {c: msgs[c].content for c, _ in REQUESTS[:2]}, got
    r = run([binary("jobctl", asan=False), "submit", path, "--format", "anthropic"], env=env)
    assert r.returncode == 0 and r.stdout.strip() == jb.id, (r.stdout, r.stderr)  # the same content: the same batch
    # status, wait and results take the msgbatch_ id (the batch_ twin's view)
    twin = "batch_" + jb.id[len("msgbatch_"):]
    r = run([binary("jobctl", asan=False), "status", jb.id], env=env)
    assert r.returncode == 0 and r.stdout.startswith(f"{twin}  completed"), (r.stdout, r.stderr)
    r = run([binary("jobctl", asan=False), "wait", jb.id, "--interval", "200ms"], env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    r = run([binary("jobctl", asan=False), "results", jb.id], env=env)
    got = {json.loads(x)["custom_id"] for x in r.stdout.splitlines()}
    assert r.returncode == 0 and got == {c for c, _ in REQUESTS[:2]}, (r.stdout, r.stderr)


def refused(fn, status, message):
    try:
        fn()
    except anthropic.APIStatusError as e:
        assert e.status_code == status, (e.status_code, e.body)
        assert e.body["type"] == "error" and set(e.body["error"]) == {"type", "message"}, e.body
        assert message in e.body["error"]["message"], (message, e.body)
        return e.body["error"]
    raise AssertionError(f"accepted: expected {status} {message!r}")


def test_anthropic_refusals_name_the_request_index_and_field():
    need()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-a")
    d = Jobd(data=data, args=["--max-requests", "4", "--max-file", "64K"], key=key)
    client = client_for(d, key)
    ok = {"custom_id": "ok", "params": params(user("Hi"))}

    def create(*reqs):
        return lambda: client.messages.batches.create(requests=list(reqs))

    no_max = {"custom_id": "b", "params": {"model": "smollm", "messages": user("Hi")}}
    e = refused(create(ok, no_max), 400, "requests.1.params.max_tokens: Field required")
    assert e["type"] == "invalid_request_error", e
    image = {"custom_id": "c", "params": params([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])}
    refused(create(ok, ok | {"custom_id": "b"}, image), 400, "requests.2.params.messages.0.content.1.type:")
    bad_name = {"custom_id": "d", "params": params(user("Hi"), tools=[WEATHER],
                                                    tool_choice={"type": "tool", "name": "get_stock_price"})}
    refused(create(bad_name), 400, "requests.0.params.tool_choice.name: Tool 'get_stock_price' not found")
    orphan = {"custom_id": "e", "params": params([{"role": "user", "content": "Hi"},
                                                  {"role": "assistant", "content": "Hello"},
                                                  {"role": "user", "content": [
                                                      {"type": "tool_result", "tool_use_id": "toolu_nope",
                                                       "content": "42"}]}], tools=[WEATHER])}
    refused(create(ok, orphan), 400, "requests.1.params.messages.2.content.0.tool_use_id:")
    refused(create(ok, ok), 400, "requests.1.custom_id: Duplicate custom_id 'ok'")
    # over the count limit (--max-requests 4) and over the size limit (--max-file 64K)
    five = [ok | {"custom_id": f"r{i}"} for i in range(5)]
    e = refused(create(*five), 413, "requests: at most 4 requests")
    assert e["type"] == "request_too_large", e
    big = {"custom_id": "big", "params": params(user("x" * 70000))}
    e = refused(create(big), 413, "too large")
    assert e["type"] == "request_too_large", e
    # nothing was created by any refusal
    assert client.messages.batches.list().data == []

    # auth: x-api-key (a wrong one is 401) and the anthropic-version header
    e = refused(lambda: client_for(d, "sk-wrong").messages.batches.list(), 401, "x-api-key")
    assert e["type"] == "authentication_error", e
    r = d.call("GET", "/v1/messages/batches", key=None, headers={"x-api-key": key})
    assert r.status == 400 and "anthropic-version" in r.json()["error"]["message"], r
    r = d.call("GET", "/v1/messages/batches", key=None, headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert r.status == 200 and r.json() == {"data": [], "has_more": False, "first_id": None, "last_id": None}, r

    # not found, and an OpenAI batch is not a message batch; delete before the end is refused
    refused(lambda: client.messages.batches.retrieve("msgbatch_nope"), 404, "msgbatch_nope")
    ob = d.submit(b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"smollm",'
                  b'"messages":[{"role":"user","content":"Hi"}]}}\n')
    refused(lambda: client.messages.batches.retrieve("msg" + ob["id"]), 404, "No message batch")
    b = client.messages.batches.create(requests=[ok])
    assert b.request_counts.processing == 1, b
    e = refused(lambda: client.messages.batches.delete(b.id), 400, "has not ended")
    c = client.messages.batches.cancel(b.id)
    assert c.processing_status in ("canceling", "ended"), c
    deadline = time.monotonic() + 60
    while client.messages.batches.retrieve(b.id).processing_status != "ended":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    e = client.messages.batches.retrieve(b.id)
    assert e.request_counts.canceled == 1 and e.request_counts.processing == 0, e
    # also when the cancel lands while the batch is still validating (its requests never stored)
    assert [(r.custom_id, r.result.type) for r in client.messages.batches.results(b.id)] == [("ok", "canceled")]

    # another tenant sees none of it: every route answers 404, the list is empty
    other = client_for(d, d.create_key("team-b"))
    for call in (other.messages.batches.retrieve, other.messages.batches.cancel, other.messages.batches.delete,
                 lambda i: list(other.messages.batches.results(i))):
        refused(lambda: call(b.id), 404, "No message batch")
    assert other.messages.batches.list().data == []
    refused(lambda: other.messages.batches.list(after_id=b.id), 400, "after_id")
    assert client.messages.batches.retrieve(b.id).id == b.id


def test_anthropic_tool_use_on_qwen_hermes_tags():
    """On Qwen2.5-Coder-0.5B (Hermes <tool_call> tags) every forced call completes:
    tool_choice any and a named tool give tool_use blocks whose input validates."""
    from test_tools import QWEN, need_qwen
    need()
    need_qwen()
    from harness import Proc
    from test_jobworker import WT
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-q", asan=False)
    d = Jobd(data=data, asan=False, args=JOBD_ARGS, key=key)
    w = Proc([binary("jobworker", asan=False, optimised=True), "--jobd", f"http://127.0.0.1:{d.port}", "--model", QWEN,
              "--model-id", "qwen-coder", "--worker-token", WT, "--name", "qw", "--threads", "2"])
    client = client_for(d, key)
    qs = ["What is the weather in Paris?", "What time is it in Tokyo?", "Is it raining in Oslo?"]
    reqs = []
    for i, q in enumerate(qs):
        reqs.append({"custom_id": f"any{i}", "params": params(user(q), model="qwen-coder", max_tokens=96,
                                                             tools=[WEATHER, TIME], tool_choice={"type": "any"})})
        reqs.append({"custom_id": f"named{i}", "params": params(user(q), model="qwen-coder", max_tokens=96,
                                                               tools=[WEATHER, TIME],
                                                               tool_choice={"type": "tool", "name": "get_weather"})})
    b = client.messages.batches.create(requests=reqs)
    done = wait_ended(client, b.id, worker=w, timeout=800)
    assert done.request_counts.succeeded == len(reqs), done.request_counts
    for r in client.messages.batches.results(b.id):
        m = r.result.message
        uses = [x for x in m.content if x.type == "tool_use"]
        assert uses and m.stop_reason == "tool_use", (r.custom_id, m)
        for u in uses:
            assert u.name in SCHEMAS and u.id.startswith("toolu_"), u
            jsonschema.Draft202012Validator(SCHEMAS[u.name]).validate(u.input)
            if r.custom_id.startswith("named"):
                assert u.name == "get_weather", u


def test_anthropic_results_stream_in_commit_order_with_every_result_type():
    """GET /v1/messages/batches/{id}/results is a chunked stream, read a slice
    of rows at a time (not built in memory): 3,000 requests answered by a
    scripted worker (succeeded, errored), the rest canceled, come back through
    the SDK's results() in commit order - the order of GET
    /v1/batches/{batch_id}/results - each line in Anthropic's shape."""
    from test_jobworker import WT
    from workerlib import TestWorker, invalid, success
    need()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-s")
    d = Jobd(data=data, args=JOBD_ARGS, key=key)
    client = client_for(d, key)
    n, n_answered = 3000, 2600
    b = client.messages.batches.create(requests=[
        {"custom_id": f"r{i:05d}", "params": params(user(f"question {i}"))} for i in range(n)])
    w = TestWorker(d.port, WT)
    w.register()
    order = []  # custom_ids in the order their results were committed

    def policy(q):
        i = int(q["custom_id"][1:])
        order.append(q["custom_id"])
        return invalid(q, f"prompt {i} too long") if i % 7 == 3 else success(q)

    deadline = time.monotonic() + 120
    while len(order) < n_answered:
        assert time.monotonic() < deadline, len(order)
        r = w.lease(max_requests=min(200, n_answered - len(order)), wait_ms=200).json()
        if r["requests"]:
            w.results(r["lease_id"], [policy(q) for q in r["requests"]])
    client.messages.batches.cancel(b.id)
    done = wait_ended(client, b.id)
    n_err = sum(1 for c in order if int(c[1:]) % 7 == 3)
    rc = done.request_counts
    assert (rc.succeeded, rc.errored, rc.canceled, rc.expired, rc.processing) == (
        n_answered - n_err, n_err, n - n_answered, 0, 0), rc

    raw = d.call("GET", f"/v1/messages/batches/{b.id}/results", key=None,
                 headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert raw.status == 200, raw
    assert raw.headers.get("transfer-encoding") == "chunked", raw.headers
    assert raw.headers.get("content-type") == "application/x-jsonl", raw.headers
    assert len(raw.body) > 3 * 256 * 1024, len(raw.body)  # more than three slices
    lines = raw.body.decode().splitlines()
    assert len(lines) == n and all(lines), len(lines)  # about 880 KB: several slices, many HTTP chunks

    got = list(client.messages.batches.results(b.id))
    assert [json.loads(x)["custom_id"] for x in lines] == [r.custom_id for r in got]
    assert [r.custom_id for r in got[:n_answered]] == order, "results out of commit order"
    assert sorted(r.custom_id for r in got[n_answered:]) == sorted(set(f"r{i:05d}" for i in range(n)) - set(order))
    # the same order as the OpenAI results pages of the twin batch
    oai, cursor = [], ""
    while True:
        r = d.call("GET", f"/v1/batches/batch_{b.id[len('msgbatch_'):]}/results?limit=10000{cursor}")
        assert r.status == 200, r
        oai += [json.loads(x)["custom_id"] for x in r.body.decode().splitlines() if x]
        if r.headers.get("x-has-more") != "true":
            break
        cursor = "&after=" + r.headers["x-next-cursor"]
    assert oai == [r.custom_id for r in got]
    for r in got:
        assert isinstance(r, MessageBatchIndividualResponse), r
        i = int(r.custom_id[1:])
        if r.custom_id not in order:
            assert r.result.type == "canceled", r
        elif i % 7 == 3:
            assert r.result.type == "errored", r
            assert r.result.error.error.type == "invalid_request_error", r
            assert r.result.error.error.message == f"prompt {i} too long", r
        else:
            m = r.result.message
            assert r.result.type == "succeeded" and isinstance(m, Message), r
            assert [(c.type, c.text) for c in m.content] == [("text", f"answer to {r.custom_id}")], m
            assert m.stop_reason == "end_turn" and m.usage.input_tokens == 5 and m.usage.output_tokens == 3, m


def test_anthropic_thinking_on_a_scripted_thinking_model():
    """`thinking` end to end on a model that thinks. No reasoning GGUF small
    enough for a test ships in a PyPI package (searched: the Qwen3-0.6B
    packages carry no weights, the one R1 distill is 7B), so the model is
    tests/py/thinkmodel.py's: the tiny qwen3 fixture with Qwen3-0.6B's own
    chat template and a scripted head, so at temperature 0 it writes "the cat
    is on house. then rain came" over and over and never closes its thinking
    block by itself:
    - `thinking: enabled, budget_tokens 1024`: the worker forces the close
      after 1024 thinking tokens, so the Message is a thinking block (the
      script's text, signature "") then a text block (what the model goes on
      with), stop_reason max_tokens, and it is its OpenAI twin (POST /v1/jobs:
      chat_template_kwargs enable_thinking true, thinking_token_budget 1024)
      token for token: the twin's reasoning_content is the thinking block,
      its content the text, its usage the Message's;
    - `thinking: disabled` renders enable_thinking false (Qwen3's empty
      `<think>\\n\\n</think>\\n\\n` in the generation prompt: more prompt
      tokens than `enabled`): no thinking block, the text only, as its twins
      (chat_template_kwargs false, reasoning_effort none);
    - an assistant `thinking` block is replayed by the template (more prompt
      tokens than the same turn without it)."""
    import thinkmodel
    need()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-t")
    d = Jobd(data=data, args=JOBD_ARGS, key=key)
    w = thinkmodel.start_worker(d)
    client = client_for(d, key)
    q = user("Why is the sky blue?")
    tool_turns = [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": [
                      {"type": "thinking", "thinking": "The user wants the weather; I call the tool for Paris.",
                       "signature": "opaque-signature"}, {"type": "text", "text": "Let me look."}, TOOL_USE]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"],
                                                "content": "18 C and sunny"}]}]
    no_think_turns = [tool_turns[0], {"role": "assistant", "content": tool_turns[1]["content"][1:]}, tool_turns[2]]
    # an assistant turn of calls only is content null in the chat body, which Qwen3's template
    # cannot render as None (content.lstrip; so in Jinja2): the template's probed capability
    # (text/chat.c, CHAT_CAP_NON_NULL_CONTENT) makes it "", as llama.cpp does
    calls_only = [tool_turns[0], {"role": "assistant", "content": [TOOL_USE]}, tool_turns[2]]
    reqs = {
        "calls_only": params(calls_only, model="tiny-think", max_tokens=8, tools=[WEATHER]),
        "on": params(q, model="tiny-think", max_tokens=1100, thinking={"type": "enabled", "budget_tokens": 1024}),
        "off": params(q, model="tiny-think", max_tokens=40, thinking={"type": "disabled"}),
        "replay": params(tool_turns, model="tiny-think", max_tokens=8, tools=[WEATHER]),
        "replay_none": params(no_think_turns, model="tiny-think", max_tokens=8, tools=[WEATHER]),
    }
    b = client.messages.batches.create(requests=[{"custom_id": c, "params": p} for c, p in reqs.items()])
    done = wait_ended(client, b.id, worker=w, timeout=600)
    res = list(client.messages.batches.results(b.id))
    assert done.request_counts.succeeded == len(reqs), res
    msgs = {r.custom_id: r.result.message for r in res}

    def prompt(m):
        return m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)

    said = thinkmodel.TEXT.strip()
    on = msgs["on"]
    assert [x.type for x in on.content] == ["thinking", "text"], on.content
    assert on.content[0].thinking.startswith(said) and on.content[0].signature == "", on.content[0]
    assert "</think>" not in on.content[0].thinking and "</think>" not in on.content[1].text, on.content
    assert on.content[1].text.startswith(said) and on.stop_reason == "max_tokens", on
    assert on.usage.output_tokens == 1100, on.usage
    off = msgs["off"]
    assert [x.type for x in off.content] == ["text"] and off.content[0].text.strip().startswith(said), off
    assert prompt(off) > prompt(on), (off.usage, on.usage)
    assert prompt(msgs["replay"]) > prompt(msgs["replay_none"]), (msgs["replay"].usage, msgs["replay_none"].usage)

    # the OpenAI twins: the same prompt tokens, the same output
    twins = {"on": {"max_tokens": 1100, "chat_template_kwargs": {"enable_thinking": True},
                    "thinking_token_budget": 1024},
             "off": {"max_tokens": 40, "chat_template_kwargs": {"enable_thinking": False}},
             "off_effort": {"max_tokens": 40, "reasoning_effort": "none"}}
    lines = [json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
                         "body": dict({"model": "tiny-think", "temperature": 0, "messages": q}, **extra)})
             for c, extra in twins.items()]
    ob = d.submit(("\n".join(lines) + "\n").encode(), query="?completion_window=1h")
    ob = wait_done(d, ob["id"], worker=w)
    assert ob["status"] == "completed", ob
    out = {o["custom_id"]: o["response"]["body"] for o in read_jsonl(d, ob["output_file_id"])}
    assert out["off"]["usage"]["prompt_tokens"] == out["off_effort"]["usage"]["prompt_tokens"], out
    assert out["off"]["choices"][0]["message"] == out["off_effort"]["choices"][0]["message"], out
    assert out["on"]["usage"]["completion_tokens_details"]["reasoning_tokens"] > 1024, out["on"]["usage"]
    for c in ("on", "off"):
        m, body = msgs[c], out[c]
        assert prompt(m) == body["usage"]["prompt_tokens"], (c, m.usage, body["usage"])
        assert m.usage.output_tokens == body["usage"]["completion_tokens"], (c, m.usage, body["usage"])
        msg = body["choices"][0]["message"]
        want = []
        if msg.get("reasoning_content"):
            want.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
        if msg.get("content"):
            want.append({"type": "text", "text": msg["content"]})
        got = [x.model_dump(exclude_none=True) for x in m.content]
        for g in got:
            g.pop("citations", None)
        assert got == want, (c, got, msg)
        stop = {"length": "max_tokens", "stop": "end_turn"}[body["choices"][0]["finish_reason"]]
        assert m.stop_reason == stop, (c, m.stop_reason, body["choices"][0])


def anthropic_call(d, key, method, path, body=None, headers=None):
    h = {"x-api-key": key, "anthropic-version": "2023-06-01", **(headers or {})}
    return d.call(method, path, body, h, key=None)


def test_anthropic_batches_in_webhooks_usage_budgets_and_the_openai_routes():
    """A message batch is an ordinary batch to the rest of jobd: the tenant's
    webhook endpoint gets its signed batch.completed event (naming its batch_
    id), GET /v1/usage bills it like any batch (the rows equal the Messages'
    usage), GET /v1/batches lists it with the api extension field
    "anthropic" (an OpenAI-made batch says "openai"), and the tenant's budget
    refuses a batch over it with Anthropic's 429 envelope (rate_limit_error),
    creating nothing. On tests/py/thinkmodel.py's scripted model (fast)."""
    import thinkmodel
    from test_webhooks import FAST, Receiver, endpoint, hmac_verify, wait_delivery
    need()
    admin = "admin-token-anth"
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-w")
    d = Jobd(data=data, key=key, args=JOBD_ARGS + FAST + ["--webhook-allow-private", "--admin-token", admin,
                                                          "--prices", "tiny-think=1000000:2000000"])
    w = thinkmodel.start_worker(d)
    rx = Receiver()
    try:
        ep = endpoint(d, rx.url("/hook"), event_types=["batch.completed"])
        client = client_for(d, key)
        reqs = [{"custom_id": f"q{i}", "params": params(user(f"Question {i}?"), model="tiny-think", max_tokens=8)}
                for i in range(2)]
        b = client.messages.batches.create(requests=reqs)
        oai_id = "batch_" + b.id[len("msgbatch_"):]
        done = wait_ended(client, b.id, worker=w, timeout=120)
        assert done.request_counts.succeeded == 2, done
        msgs = [r.result.message for r in client.messages.batches.results(b.id)]

        # the webhook: one signed batch.completed about the batch_ twin
        (path, headers, body), = rx.wait("/hook", 1)
        assert hmac_verify(ep["secret"], headers, body), headers
        p = json.loads(body)
        assert p["type"] == "batch.completed" and p["data"] == {"id": oai_id}, p
        dl = wait_delivery(d, ep["id"], lambda x: x["status"] == "delivered")
        assert dl["object_id"] == oai_id, dl

        # the OpenAI routes: listed, with the contract it came through
        listed = {x["id"]: x for x in d.json("GET", "/v1/batches?limit=100")["data"]}
        assert listed[oai_id]["api"] == "anthropic" and listed[oai_id]["status"] == "completed", listed
        ob = d.json("GET", f"/v1/batches/{oai_id}")
        assert ob["api"] == "anthropic" and ob["request_counts"] == {"total": 2, "completed": 2, "failed": 0}, ob
        plain = d.submit(b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":'
                         b'"tiny-think","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}}\n')
        assert d.json("GET", f"/v1/batches/{plain['id']}")["api"] == "openai"

        # usage: billed like any batch, the ledger's tokens are the Messages'
        rows = [x for x in d.json("GET", "/v1/usage?group_by=batch")["data"] if x["key"] == oai_id]
        assert len(rows) == 1 and rows[0]["num_model_requests"] == 2, rows
        u = rows[0]
        assert u["input_tokens"] == sum(m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
                                        for m in msgs), (u, msgs)
        assert u["output_tokens"] == sum(m.usage.output_tokens for m in msgs) == 16, (u, msgs)
        assert u["cost"]["amount_micros"] > 0 and ob["cost"]["amount_micros"] == u["cost"]["amount_micros"], (u, ob)

        # the budget: over the tenant's queued-token limit, Anthropic's 429, nothing created
        d.json("PUT", "/v1/admin/tenants/team-w/limits", {"max_queued_tokens": 10}, key=admin)
        before = [x.id for x in client.messages.batches.list(limit=100).data]
        e = refused(lambda: client.messages.batches.create(requests=reqs), 429, "")
        assert e["type"] == "rate_limit_error" and "queued" in e["message"], e
        assert [x.id for x in client.messages.batches.list(limit=100).data] == before
        d.json("PUT", "/v1/admin/tenants/team-w/limits", {}, key=admin)
        assert client.messages.batches.create(requests=reqs[:1]).processing_status == "in_progress"
    finally:
        rx.close()


def test_anthropic_expired_batch_and_results_type_expired():
    """A message batch past its window (jobd --message-batch-window 2s, no
    worker) ends with processing_status ended, request_counts.expired = every
    request, and results of type "expired" (the SDK's own types); its OpenAI
    twin is "expired". The window is checked at start: under --window-min is
    a usage error. Route edges on the way: results before the end (409),
    before_id with after_id (400), a limit out of 1..1000 (400), a body that
    is not application/json (415); jobctl cancel of a msgbatch_ id."""
    need()
    r = run([binary("jobd"), "--message-batch-window", "30m", "--data", os.path.join(tmpdir(), "x")])
    assert r.returncode != 0 and "--message-batch-window 30m is out of range" in r.stderr, r.stderr
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-x")
    d = Jobd(data=data, key=key, args=JOBD_ARGS + ["--message-batch-window", "2s"])
    client = client_for(d, key)
    reqs = [{"custom_id": f"e{i}", "params": params(user("Hi"), max_tokens=4)} for i in range(3)]
    b = client.messages.batches.create(requests=reqs)
    assert (b.expires_at - b.created_at).total_seconds() == 2, b

    # results before the end: 409 in Anthropic's envelope (the SDK itself refuses to ask before
    # results_url is set, so a plain request)
    r = anthropic_call(d, key, "GET", f"/v1/messages/batches/{b.id}/results")
    assert r.status == 409 and r.json()["type"] == "error", r
    assert r.json()["error"]["type"] == "invalid_request_error" and "has not ended" in r.json()["error"]["message"], r
    # list edges
    other = client.messages.batches.create(requests=reqs[:1])
    e = refused(lambda: client.messages.batches.list(before_id=b.id, after_id=other.id), 400,
                "before_id and after_id cannot both be given")
    assert e["type"] == "invalid_request_error", e
    # jobctl cancel takes the msgbatch_ id
    env = {"JOBD_URL": f"http://127.0.0.1:{d.port}", "JOBD_API_KEY": key, "JOBCTL_CONFIG": "", "HOME": tmpdir()}
    r = run([binary("jobctl", asan=False), "cancel", other.id], env=env)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert client.messages.batches.retrieve(other.id).processing_status in ("canceling", "ended")
    for bad in (1001, 0, -1):
        refused(lambda: client.messages.batches.list(limit=bad), 400, "limit: Input should be an integer from 1 to 1000")
    r = anthropic_call(d, key, "GET", "/v1/messages/batches?limit=abc")
    assert r.status == 400 and r.json()["error"]["type"] == "invalid_request_error", r
    assert len(client.messages.batches.list(limit=1000).data) == 2
    # a create body that is not JSON by its content type
    r = anthropic_call(d, key, "POST", "/v1/messages/batches", json.dumps({"requests": reqs}).encode(),
                       {"Content-Type": "text/plain"})
    assert r.status == 415, r
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error", r.json()
    assert "application/json" in r.json()["error"]["message"], r.json()

    done = wait_ended(client, b.id, timeout=60)
    rc = done.request_counts
    assert (rc.expired, rc.processing, rc.succeeded, rc.errored, rc.canceled) == (3, 0, 0, 0, 0), rc
    assert done.ended_at is not None and done.results_url.endswith(f"/{b.id}/results"), done
    res = list(client.messages.batches.results(b.id))
    assert sorted(x.custom_id for x in res) == ["e0", "e1", "e2"], res
    for x in res:
        assert isinstance(x, MessageBatchIndividualResponse) and x.result.type == "expired", x
    assert d.json("GET", "/v1/batches/batch_" + b.id[len("msgbatch_"):])["status"] == "expired"


def test_anthropic_reused_answer_keeps_its_usage():
    """A reused answer through the Anthropic door (jobd --reuse, spec/usage.md
    "Result reuse"): the second batch of the same deterministic request is
    answered from the first's result (its OpenAI twin's line carries
    usage.reused_tokens, the ledger bills 0), and its Message has the same
    content and the same usage as the first, not 0/0 (regression: the
    results row of a reused answer counts no tokens, and the Message's usage
    was read from it)."""
    import thinkmodel
    need()
    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "team-r")
    d = Jobd(data=data, key=key, args=JOBD_ARGS + ["--reuse"])
    w = thinkmodel.start_worker(d)
    client = client_for(d, key)
    req = [{"custom_id": "same", "params": params(user("Why is the sky blue?"), model="tiny-think", max_tokens=12)}]
    got = []
    for _ in range(2):
        b = client.messages.batches.create(requests=req)
        wait_ended(client, b.id, worker=w, timeout=120)
        (r,) = list(client.messages.batches.results(b.id))
        assert r.result.type == "succeeded", r
        got.append((b.id, r.result.message))
    (id1, m1), (id2, m2) = got
    assert m2.content == m1.content and m2.stop_reason == m1.stop_reason, (m1, m2)
    assert m1.usage.output_tokens == 12 and m1.usage.input_tokens > 0, m1.usage
    assert m2.usage == m1.usage, (m1.usage, m2.usage)
    lines = d.call("GET", f"/v1/batches/batch_{id2[len('msgbatch_'):]}/results").body.decode().splitlines()
    body = json.loads(lines[0])["response"]["body"]
    assert body["usage"]["reused_tokens"] > 0, body["usage"]   # it was reused
    rows = {x["key"]: x for x in d.json("GET", "/v1/usage?group_by=batch")["data"]}
    assert rows["batch_" + id2[len("msgbatch_"):]]["output_tokens"] == 0, rows  # and billed nothing
