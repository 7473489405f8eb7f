"""tests/py/responses_flow.py - a /v1/responses batch through the official
`openai` SDK, run as a subprocess by tests/py/test_responses.py so that a
chosen SDK version (a --target folder of scripts/install-deps) comes first
on sys.path.

    python responses_flow.py BASE_URL API_KEY EXPECTED_VERSION
    python responses_flow.py --fixture FILE EXPECTED_VERSION

jobd must be serving BASE_URL with a real worker for model "smollm". The
flow is the one OpenAI documents for Responses batches, unchanged:
client.files.create, client.batches.create(endpoint="/v1/responses"), poll
client.batches.retrieve, client.files.content of the output file. Every
output line's body must validate as the SDK's own Response type
(`Response.model_validate`: the SDK itself parses with `construct`, which
checks nothing), `response.output_text` must work, the request settings
must come back, and a text.format json_schema answer must validate against
its schema with `jsonschema`. A second file with bad lines must fail
validation with one error per bad line: its line number, the body's
parameter and OpenAI's code. Prints "responses-flow ok VERSION". With
--fixture it validates the committed Response objects of
tests/fixtures/responses/from_chat.jsonl instead (check_fixture).
"""
import json
import sys
import time

# maxLength keeps the 135M model's strings short enough to close within max_output_tokens
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                           "country": {"type": "string", "maxLength": 24}},
          "required": ["city", "country"], "additionalProperties": False}


def line(cid, body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": {"model": "smollm", **body}}

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                          "required": ["city"], "additionalProperties": False}}

GOOD = [
    line("string", {"input": "Say hello in French.", "instructions": "Answer in one short sentence.",
                    "max_output_tokens": 24, "temperature": 0, "store": False,
                    "metadata": {"run": "nightly"}, "user": "u-1", "prompt_cache_key": "k"}),
    line("items", {"input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "What is the capital of France?"}]},
        {"type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Paris.", "annotations": []}]},
        {"role": "user", "content": "And of Italy?"}],
        "max_output_tokens": 20, "temperature": 0, "top_logprobs": 2, "seed": 7,
        "reasoning": {"effort": "low"}, "service_tier": "flex", "truncation": "disabled"}),
    line("schema", {"input": "Name a city and its country.", "max_output_tokens": 100, "temperature": 0,
                    "text": {"format": {"type": "json_schema", "name": "place", "strict": True,
                                        "schema": SCHEMA}}}),
    line("json-object", {"input": "Give a JSON object with a key 'a'.", "max_output_tokens": 40,
                         "temperature": 0, "text": {"format": {"type": "json_object"}}}),
    line("cut", {"input": "Write a long story about a dragon.", "max_output_tokens": 16, "temperature": 0}),
    # function tools (flat, strict by default): a forced call, and a replayed call with its output
    line("tool-call", {"input": "What is the weather in Paris?", "max_output_tokens": 120, "temperature": 0,
                       "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False}),
    line("tool-replay", {"input": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_0aB9cD8eF7gH6iJ5kL4mN3oP", "name": "get_weather",
         "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_0aB9cD8eF7gH6iJ5kL4mN3oP",
         "output": "{\"temp_c\": 18}"}],
        "max_output_tokens": 120, "temperature": 0, "tools": [WEATHER]}),
]

# (line, body param, code) of each bad line; the good first line has no error
BAD = [
    (line("ok", {"input": "Hi.", "max_output_tokens": 16}), None, None),
    (line("prev", {"input": "Hi.", "previous_response_id": "resp_123"}),
     "body.previous_response_id", "previous_response_not_found"),
    (line("web", {"input": "Hi.", "tools": [{"type": "web_search"}]}), "body.tools[0].type", "unsupported_value"),
    (line("image", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}]}),
     "body.input[0].content[1].type", "unsupported_value"),
    (line("bare", {"input": [{"type": "input_text", "text": "Hi."}]}), "body.input[0].type", "invalid_value"),
    (line("small", {"input": "Hi.", "max_output_tokens": 8}), "body.max_output_tokens", "integer_below_min_value"),
    (line("conv", {"input": "Hi.", "conversation": "conv_1"}), "body.conversation", "unsupported_parameter"),
    (line("bg", {"input": "Hi.", "background": True}), "body.background", "unsupported_value"),
    (line("enc", {"input": [{"role": "user", "content": "Hi."},
                            {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}]}),
     "body.input[1].encrypted_content", "unsupported_value"),
    (line("temp", {"input": "Hi.", "temperature": 3}), "body.temperature", "decimal_above_max_value"),
]


def jsonl(lines):
    return ("\n".join(json.dumps(x) for x in lines) + "\n").encode()


def wait(client, batch_id, timeout=600):
    deadline = time.monotonic() + timeout
    while True:
        b = client.batches.retrieve(batch_id)
        if b.status in ("completed", "failed", "expired", "cancelled"):
            return b
        assert time.monotonic() < deadline, f"batch still {b.status}"
        time.sleep(0.2)


def check_good(client):
    from openai.types.responses import Response
    import jsonschema

    f = client.files.create(file=("responses.jsonl", jsonl(GOOD)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/responses", completion_window="24h")
    assert b.endpoint == "/v1/responses", b
    b = wait(client, b.id)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (len(GOOD), len(GOOD), 0), b
    out = {}
    for raw in client.files.content(b.output_file_id).text.splitlines():
        o = json.loads(raw)
        assert o["error"] is None and o["response"]["status_code"] == 200, o
        out[o["custom_id"]] = (o["response"]["body"], Response.model_validate(o["response"]["body"]))
    assert sorted(out) == sorted(x["custom_id"] for x in GOOD), sorted(out)
    for cid in ("tool-call", "tool-replay"):
        body, r = out.pop(cid)
        assert r.object == "response" and r.tools and r.tools[0].name == "get_weather", body
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, body
        calls = [o for o in r.output if o.type == "function_call"]
        if cid == "tool-call":
            assert r.status == "completed" and len(calls) == 1, body
            assert r.tool_choice == "required" and r.parallel_tool_calls is False, body
        for c in calls:
            assert c.call_id.startswith("call_") and c.id.startswith("fc_") and c.name == "get_weather", c
            jsonschema.validate(json.loads(c.arguments), WEATHER["parameters"])
    for cid, (body, r) in out.items():
        req = next(x["body"] for x in GOOD if x["custom_id"] == cid)
        assert r.object == "response" and r.id.startswith("resp_") and r.model == "smollm", (cid, body)
        assert isinstance(r.output_text, str), cid
        assert r.output and r.output[0].type == "message" and r.output[0].id.startswith("msg_"), body
        assert r.output[0].content[0].type == "output_text", body
        assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0, body
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, body
        assert r.usage.output_tokens <= req["max_output_tokens"], body
        assert r.max_output_tokens == req["max_output_tokens"] and r.temperature == 0, body
        assert r.error is None and r.tools == [] and r.tool_choice == "auto", body
        assert r.parallel_tool_calls is True and r.truncation == "disabled", body
        assert r.service_tier == "default", body  # OpenAI answers the tier it ran on
        if r.status == "incomplete":
            assert r.incomplete_details.reason == "max_output_tokens", body
            assert r.output[0].status == "incomplete", body
        else:
            assert r.status == "completed" and r.incomplete_details is None, body
    s = out["string"][1]
    assert s.instructions == "Answer in one short sentence." and s.store is False, s
    assert s.metadata == {"run": "nightly"} and s.user == "u-1" and s.prompt_cache_key == "k", s
    assert s.output_text.strip(), s
    it = out["items"][1]
    assert it.reasoning.effort == "low" and it.top_logprobs == 2 and it.metadata == {}, it
    lps = it.output[0].content[0].logprobs
    assert lps and all(len(x.top_logprobs) == 2 for x in lps), lps
    assert "".join(x.token for x in lps) == it.output_text, (lps, it.output_text)
    sc = out["schema"][1]
    assert sc.status == "completed", sc
    assert sc.text.format.type == "json_schema" and sc.text.format.name == "place", sc.text
    jsonschema.validate(json.loads(sc.output_text), SCHEMA)
    jo = out["json-object"][1]
    assert isinstance(json.loads(jo.output_text), dict), jo.output_text
    cut = out["cut"][1]
    assert cut.status == "incomplete" and cut.usage.output_tokens == 16, cut


def check_bad(client):
    f = client.files.create(file=("bad.jsonl", jsonl([x[0] for x in BAD])), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/responses", completion_window="24h")
    b = wait(client, b.id)
    assert b.status == "failed", b
    got = [(e.line, e.param, e.code) for e in b.errors.data]
    want = [(i + 1, p, c) for i, (_, p, c) in enumerate(BAD) if p]
    assert got == want, (got, want)
    assert all(e.message for e in b.errors.data), b.errors


def main():
    base, key, want = sys.argv[1], sys.argv[2], sys.argv[3]
    import openai
    assert openai.__version__ == want, (openai.__version__, want, openai.__file__)
    if base == "--fixture":
        check_fixture(key)
        print(f"responses-fixture ok {want}")
        return
    client = openai.OpenAI(base_url=base, api_key=key, timeout=60)
    check_good(client)
    check_bad(client)
    print(f"responses-flow ok {want}")



def check_fixture(path):
    """Every Response in tests/fixtures/responses/from_chat.jsonl (what the C
    translation builds from chat bodies with tool calls, reasoning, logprobs;
    tests/unit/openai/test_responses.c keeps the file equal to its output)
    validates as the SDK's Response, and its items as the SDK's item types."""
    from openai.types.responses import Response
    n = 0
    for raw in open(path, encoding="utf-8"):
        case = json.loads(raw)
        r = Response.model_validate(case["response"])
        msg = case["chat_completion"]["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        kinds = [o.type for o in r.output]
        want = (["reasoning"] if msg.get("reasoning_content") else []) + \
               (["message"] if msg.get("content") or not calls else []) + ["function_call"] * len(calls)
        assert kinds == want, (case["name"], kinds, want)
        fcs = [o for o in r.output if o.type == "function_call"]
        assert [(o.call_id, o.name, o.arguments) for o in fcs] == \
            [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls], case["name"]
        for o in fcs:
            json.loads(o.arguments)
        assert r.output_text == (msg.get("content") or ""), (case["name"], r.output_text)
        finish = case["chat_completion"]["choices"][0]["finish_reason"]
        assert (r.status == "incomplete") == (finish == "length"), case["name"]
        n += 1
    assert n >= 8, n


if __name__ == "__main__":
    main()
