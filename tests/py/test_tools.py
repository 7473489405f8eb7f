"""Tool calling and reasoning fields end to end (release builds): jobd batches
of chat lines with tools in every tool_choice mode (auto, required, a named
function, none, allowed_tools), parallel and single calls, strict and
non-strict schemas, the legacy functions API and a replayed tool-result
turn, run by a real worker, on two real models:

- the default SmolLM2-135M-Instruct, whose template has no tool syntax (the
  generic JSON envelope); it may loop inside a string argument until the
  token limit, which is answered as text with finish_reason "length" (never
  half a call), so at least 75% of its forced calls must complete;
- Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Hermes <tool_call> tags), fetched from
  PyPI by scripts/fetch-model at test time.

Every output body validates with the official openai SDK's ChatCompletion
type; every call names a declared (and allowed) function and its arguments
validate against that function's schema with Python's jsonschema (in
"auto" too); required and named choices always call (100% on Qwen), and a
line asking for two things with parallel_tool_calls gets at least two calls
on Qwen (tool_choice "required": in "auto" the 0.5B model, greedy, makes
only the first); finish_reason is "tool_calls", "stop"
for a named choice, "function_call" for the legacy API. Bad lines fail the
batch at upload with their line numbers and params.

Runtime: about a minute on a 2-core machine, plus the Qwen fetch once.
"""
import json
import os

from harness import ROOT, Skip, binary, run
from jobdlib import Jobd
from test_jobworker import JOBD_ARGS, WT, start_jobd, start_worker, wait_done
from test_jobworker import need as need_model
from harness import Proc
from workerlib import read_jsonl

try:
    import jsonschema  # scripts/requirements-test.txt
except ImportError:
    jsonschema = None
try:
    from openai.types.chat import ChatCompletion
except ImportError:
    ChatCompletion = None

QWEN = os.path.join(ROOT, ".cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in an IANA time zone.", "strict": True,
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                   "required": ["tz"], "additionalProperties": False}}}
CONVERT = {"type": "function", "function": {
    "name": "convert", "description": "Convert an amount between currencies.",
    "parameters": {"type": "object", "properties": {
        "amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "to": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["amount", "from", "to"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME, CONVERT)}

QUESTIONS = ["What is the weather in Paris?", "Is it raining in Oslo right now?",
             "What time is it in Tokyo?", "Convert 100 USD to EUR.", "How warm is it in Cairo?",
             "Tell me the time in New York.", "What's 20 GBP in JPY?", "Weather for Lima, in fahrenheit."]


def need():
    if jsonschema is None:
        raise Skip("jsonschema is not installed (scripts/requirements-test.txt)")
    if ChatCompletion is None:
        raise Skip("the openai SDK is not installed (scripts/install-deps)")
    need_model()


def line(cid, body):
    # room for the 8 calls a parallel answer may hold (small models repeat a call)
    body = dict({"model": "smollm", "temperature": 0, "max_completion_tokens": 256}, **body)
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})


def cases():
    """(custom_id, body, expectation) for the mixed file."""
    out = []
    user = lambda q: [{"role": "user", "content": q}]  # noqa: E731
    for i, q in enumerate(QUESTIONS):
        out.append((f"req{i}", {"messages": user(q), "tools": [WEATHER, TIME, CONVERT],
                                "tool_choice": "required"}, "required"))
        out.append((f"one{i}", {"messages": user(q), "tools": [WEATHER, TIME, CONVERT],
                                "tool_choice": "required", "parallel_tool_calls": False}, "required1"))
        out.append((f"auto{i}", {"messages": user(q), "tools": [WEATHER, TIME, CONVERT]}, "auto"))
    # two things at once: parallel calls. With greedy decoding Qwen2.5-Coder-0.5B makes only the
    # first call in "auto" (measured on three phrasings), so the line is "required": the grammar
    # allows up to 8 calls and the model writes both
    out.append(("parallel", {"messages": user("What is the weather in Paris and the time in Tokyo?"),
                             "tools": [WEATHER, TIME, CONVERT], "tool_choice": "required",
                             "parallel_tool_calls": True}, "parallel"))
    out.append(("named", {"messages": user("Weather in Rome?"), "tools": [WEATHER, TIME],
                          "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "named"))
    out.append(("allowed", {"messages": user("Weather in Rome?"), "tools": [WEATHER, TIME, CONVERT],
                            "tool_choice": {"type": "allowed_tools", "allowed_tools": {
                                "mode": "required", "tools": [{"type": "function", "function": {"name": "convert"}}]}}},
                "allowed"))
    out.append(("none", {"messages": user("Say hello."), "tools": [WEATHER], "tool_choice": "none"}, "none"))
    out.append(("legacy", {"messages": user("Weather in Bern?"), "functions": [WEATHER["function"]],
                           "function_call": {"name": "get_weather"}}, "legacy"))
    call = {"id": "call_0aB9cD8eF7gH6iJ5kL4mN3oP", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
    out.append(("replay", {"messages": user("What is the weather in Paris?") + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"temp_c\": 18, \"sky\": \"sunny\"}"}],
        "tools": [WEATHER]}, "replay"))
    out.append(("effort", {"messages": user("Say hi."), "reasoning_effort": "low", "store": False,
                           "service_tier": "flex", "prompt_cache_key": "k1", "safety_identifier": "u-1",
                           "verbosity": "low", "metadata": {"team": "a"}}, "plain"))
    return out


def check(cid, body, kind, tools_by_id, lenient):
    ChatCompletion.model_validate(body)
    ch = body["choices"][0]
    msg = ch["message"]
    assert msg["role"] == "assistant" and msg["refusal"] is None, body
    calls = msg.get("tool_calls") or []
    allowed = tools_by_id
    if kind == "legacy":
        fc = msg.get("function_call")
        assert fc and fc["name"] == "get_weather" and ch["finish_reason"] == "function_call", body
        jsonschema.validate(json.loads(fc["arguments"]), SCHEMAS["get_weather"])
        return 1
    if kind in ("required", "required1", "named", "allowed", "parallel"):
        if not calls and lenient:   # cut by max_completion_tokens inside a call: text, never half a call
            assert ch["finish_reason"] == "length" and isinstance(msg["content"], str), body
            return False
        assert calls, (cid, body)
        assert ch["finish_reason"] == ("stop" if kind == "named" else "tool_calls"), body
        assert msg["content"] is None, body
        if kind == "required1":
            assert len(calls) == 1, body
    if kind in ("none", "plain"):
        assert not calls and isinstance(msg["content"], str), body
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_") and len(c["id"]) == 29, c
        name = c["function"]["name"]
        assert name in allowed, (cid, name)
        if kind == "named":
            assert name == "get_time", c
        if kind == "allowed":
            assert name == "convert", c
        args = json.loads(c["function"]["arguments"])
        assert isinstance(args, dict), c
        # grammar-enforced, or (auto, a call the lazy grammar did not catch) checked against the
        # schema before it is returned as a call: the arguments always validate
        jsonschema.Draft202012Validator(SCHEMAS[name]).validate(args)
    return len(calls)


def run_batch(d, w, lines):
    b = d.submit(("\n".join(lines) + "\n").encode(), query="?completion_window=1h")
    b = wait_done(d, b["id"], timeout=900, worker=w)
    assert b["status"] == "completed", b
    assert b["request_counts"]["completed"] == len(lines), b
    return {o["custom_id"]: o for o in read_jsonl(d, b["output_file_id"])}


def mixed(d, w, model_alias, lenient=False):
    cs = cases()
    out = run_batch(d, w, [line(cid, dict(body, model=model_alias)) for cid, body, _ in cs])
    called = {}
    for cid, body, kind in cs:
        o = out[cid]
        assert o["error"] is None and o["response"]["status_code"] == 200, o
        names = {t["function"]["name"] for t in body.get("tools", [])} or {"get_weather"}
        called.setdefault(kind, []).append(check(cid, o["response"]["body"], kind, names, lenient))
    return called   # kind -> the number of calls of each of its lines


def test_tools_generic_envelope_on_the_default_model():
    need()
    d = start_jobd()
    w = start_worker(d, optimised=True)
    # the 135M model may loop inside a string argument until the token limit:
    # such answers come back as text with finish_reason "length"; the rest call
    called = mixed(d, w, "smollm", lenient=True)
    forced = [c > 0 for k in ("required", "required1", "named", "allowed", "legacy", "parallel")
              for c in called[k]]
    assert sum(forced) >= 0.75 * len(forced), called


def need_qwen():
    need()
    if not os.path.exists(QWEN):
        r = run([os.path.join(ROOT, "scripts/fetch-model"), "qwen25-coder-0.5b"], timeout=900)
        if r.returncode != 0 or not os.path.exists(QWEN):
            raise Skip("Qwen2.5-Coder-0.5B cannot be fetched: " + r.stderr[-300:])


def test_tools_hermes_tags_on_qwen():
    need_qwen()
    d = Jobd(asan=False, args=JOBD_ARGS)
    w = Proc([binary("jobworker", asan=False, optimised=True), "--jobd", f"http://127.0.0.1:{d.port}", "--model", QWEN,
              "--model-id", "qwen-coder", "--worker-token", WT, "--name", "qw", "--threads", "2"])
    called = mixed(d, w, "qwen-coder")
    for k in ("required", "required1", "named", "allowed", "legacy"):
        assert all(called[k]), (k, called[k])
    # two things asked, parallel calls allowed: at least two calls, each validated in check()
    assert called["parallel"][0] >= 2, called["parallel"]
    # auto: the questions all clearly ask for a tool; Qwen calls for most
    assert sum(1 for n in called["auto"] if n) >= len(QUESTIONS) // 2, called["auto"]


def test_tools_bad_lines_fail_the_upload_with_line_numbers():
    need()
    d = Jobd(asan=False)
    user = [{"role": "user", "content": "x"}]
    bad = [
        ({"messages": user, "tools": [{"type": "function", "function": {"description": "no name"}}]},
         "body.tools[0].function", "missing_required_parameter"),
        ({"messages": user, "tools": [{"type": "function", "function": {
            "name": "f", "strict": True, "parameters": {"type": "object", "properties": {"a": {"not": {}}}}}}]},
         "body.tools[0].function", "invalid_function_parameters"),
        ({"messages": user + [{"role": "tool", "tool_call_id": "call_x", "content": "r"}], "tools": [WEATHER]},
         "body.messages", "invalid_value"),
        ({"messages": user, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "body.tool_choice", "invalid_value"),
        ({"messages": user, "tools": [{"type": "web_search"}]}, "body.tools[0]", "unsupported_value"),
    ]
    lines = [line("ok", {"messages": user, "tools": [WEATHER]})]
    lines += [line(f"b{i}", body) for i, (body, _, _) in enumerate(bad)]
    b = d.submit(("\n".join(lines) + "\n").encode(), query="?completion_window=1h")
    b = d.wait_batch(b["id"], statuses=("failed", "in_progress"))
    assert b["status"] == "failed", b
    errs = {e["line"]: e for e in b["errors"]["data"]}
    for i, (_, param, code) in enumerate(bad):
        e = errs.get(i + 2)
        assert e and e["param"] == param and e["code"] == code, (i + 2, e, errs)
    assert 1 not in errs


UNIT = {"type": "function", "function": {
    "name": "get_unit", "description": "The unit the user prefers.", "strict": True,
    "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["unit"], "additionalProperties": False}}}


def test_reasoning_split_on_a_scripted_thinking_model():
    """Reasoning actually exercised, on tests/py/thinkmodel.py's scripted model
    (Qwen3-0.6B's template; it writes " the cat is on house. then rain
    came\\n" over and over and never closes the thinking block itself), so a
    thinking_token_budget is what splits its output:
    - budget 8: the close is forced after 8 tokens: reasoning_content (and
      reasoning) is that text, content what the model goes on with,
      usage.completion_tokens_details.reasoning_tokens the 8 and the close;
      the body validates as the SDK's ChatCompletion;
    - thinking off (reasoning_effort none, or enable_thinking false) with the
      same budget: no reasoning at all, the whole text is content;
    - tool_choice required on the thinking template: the call comes after the
      forced </think> (reasoning first, then the call, which validates); with
      no budget the block never closes and no call is ever forced inside it."""
    need()
    import thinkmodel
    d = start_jobd()
    w = thinkmodel.start_worker(d)
    q = [{"role": "user", "content": "Why is the sky blue?"}]

    def ln(cid, **kw):
        body = dict({"model": "tiny-think", "temperature": 0, "max_completion_tokens": 40, "messages": q}, **kw)
        return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})

    out = run_batch(d, w, [
        ln("budget", thinking_token_budget=8),
        ln("effort_none", thinking_token_budget=8, reasoning_effort="none"),
        ln("kwargs_off", thinking_token_budget=8, chat_template_kwargs={"enable_thinking": False}),
        ln("tool", thinking_token_budget=8, tools=[UNIT], tool_choice="required", parallel_tool_calls=False,
           max_completion_tokens=120),
        ln("tool_open", tools=[UNIT], tool_choice="required"),
    ])
    bodies = {}
    for cid, o in out.items():
        assert o["error"] is None and o["response"]["status_code"] == 200, o
        bodies[cid] = o["response"]["body"]
        ChatCompletion.model_validate(bodies[cid])
    said = thinkmodel.TEXT.strip()   # "the cat is on house. then rain came"

    b = bodies["budget"]
    msg, u = b["choices"][0]["message"], b["usage"]
    assert msg["reasoning_content"] == said and msg["reasoning"] == said, msg
    assert msg["content"].startswith(said) and "</think>" not in msg["content"], msg
    rt = u["completion_tokens_details"]["reasoning_tokens"]
    assert 8 < rt < 8 + 16 and u["completion_tokens"] == 40, u  # the budget and the close up to </think>
    assert b["choices"][0]["finish_reason"] == "length", b
    cc = ChatCompletion.model_validate(b)
    assert cc.choices[0].message.content == msg["content"] and cc.usage.completion_tokens_details.reasoning_tokens == rt

    for cid in ("effort_none", "kwargs_off"):
        msg, u = bodies[cid]["choices"][0]["message"], bodies[cid]["usage"]
        assert "reasoning_content" not in msg and "reasoning" not in msg, (cid, msg)
        assert (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0) == 0, (cid, u)
        assert msg["content"].strip().startswith(said) and "</think>" not in msg["content"], (cid, msg)
    # the template's own switch: its empty thinking block is in the prompt
    assert bodies["effort_none"]["usage"]["prompt_tokens"] == bodies["kwargs_off"]["usage"]["prompt_tokens"]
    assert bodies["effort_none"]["usage"]["prompt_tokens"] > bodies["budget"]["usage"]["prompt_tokens"]

    b = bodies["tool"]
    msg = b["choices"][0]["message"]
    assert msg["reasoning_content"] == said, msg
    assert b["choices"][0]["finish_reason"] == "tool_calls" and len(msg["tool_calls"]) == 1, b
    call = msg["tool_calls"][0]["function"]
    assert call["name"] == "get_unit", call
    jsonschema.Draft202012Validator(UNIT["function"]["parameters"]).validate(json.loads(call["arguments"]))
    assert b["usage"]["completion_tokens_details"]["reasoning_tokens"] > 8, b["usage"]

    b = bodies["tool_open"]   # never closed: the grammar never armed, no call inside the thinking
    msg = b["choices"][0]["message"]
    assert not msg.get("tool_calls") and b["choices"][0]["finish_reason"] == "length", b
