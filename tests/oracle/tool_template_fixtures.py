#!/usr/bin/env python3
"""tests/oracle/tool_template_fixtures.py - make the tool-calling template fixtures ONCE.

For every template in tests/fixtures/chat/templates/ whose text mentions `tools`,
renders OpenAI chat requests that carry tools and tool turns with Python's jinja2
the way Hugging Face's apply_chat_template(messages, tools=...) runs it, after
the conversion vLLM and llama.cpp make before rendering (a call's `arguments`
JSON string parsed into an object, content null passed as None, no tools when
tool_choice is "none"), and writes tests/fixtures/chat/tool_renders.json. The C
unit test (tests/unit/openai/test_tools.c) renders the same requests through
openai/prompt.c and compares byte for byte for the templates whose tool syntax
we speak (Hermes, Llama 3.x, Mistral). jinja2 is NOT needed at `make test` time.

The environment is chat_template_fixtures.py's (same file, imported).
Usage: /work/venv-jinja/bin/python tests/oracle/tool_template_fixtures.py
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_fixtures as base  # noqa: E402
import jinja2  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

OUT = os.path.join(base.ROOT, "tests", "fixtures", "chat", "tool_renders.json")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in a time zone (é ü 😀).",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
                   "required": ["tz"], "additionalProperties": False}, "strict": True}}
CALL = {"id": "call_0aB9cD8eF7gH6iJ5kL4mN3oP", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}
CALL2 = {"id": "call_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2", "type": "function",
         "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\",\"n\":2}"}}

REQUESTS = [
    {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [WEATHER]},
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "Weather and time in Paris?"}], "tools": [WEATHER, TIME],
     "tool_choice": "required"},
    {"messages": [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": CALL["id"], "content": "{\"temp_c\": 18, \"sky\": \"sunny\"}"}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Weather and time in Paris?"},
                  {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL2]},
                  {"role": "tool", "tool_call_id": CALL["id"], "content": "18C"},
                  {"role": "tool", "tool_call_id": CALL2["id"], "content": "10:30"},
                  {"role": "assistant", "content": "It is 18C and 10:30 in Paris."},
                  {"role": "user", "content": "Thanks!"}],
     "tools": [WEATHER, TIME]},
    {"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER], "tool_choice": "none"},
    # reasoning: thinking turned off by reasoning_effort, kwargs passed through
    {"messages": [{"role": "user", "content": "What is 2+2?"}], "reasoning_effort": "none"},
    {"messages": [{"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "4", "reasoning_content": "Two and two."},
                  {"role": "user", "content": "And 3+3?"}],
     "chat_template_kwargs": {"enable_thinking": True, "custom_flag": "x"}},
    # ids that 9-character templates cannot take as they are: short and punctuated (hashed),
    # and two with the same last 9 characters (the first keeps them, the second is hashed)
    {"messages": [{"role": "user", "content": "Weather in Oslo and Rome?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      dict(copy.deepcopy(CALL), id="call-1"), dict(copy.deepcopy(CALL2), id="a_123456789"),
                      dict(copy.deepcopy(CALL), id="b_123456789")]},
                  {"role": "tool", "tool_call_id": "call-1", "content": "7C"},
                  {"role": "tool", "tool_call_id": "a_123456789", "content": "12:00"},
                  {"role": "tool", "tool_call_id": "b_123456789", "content": "20C"}],
     "tools": [WEATHER, TIME]},
]


# ---- template capabilities, probed as text/chat.c probe_caps (llama.cpp's
# chat-template capability detection: requires_non_null_content), and what
# the request becomes for them (openai/prompt.c) --------------------------------
NEEDLE = "<User Needle>"
PROBE_ID9, PROBE_ID_LONG = "a1b2c3d4e", "call_0123456789abc"


def probe(tmpl, bos, eos, content_null, call, cid, answer, needle=NEEDLE):
    a = {"role": "assistant", "content": None if content_null else ""}
    if call:
        a["tool_calls"] = [{"id": cid, "type": "function",
                            "function": {"name": "some_tool", "arguments": {"arg": "argument_needle"}}}]
    msgs = [{"role": "user", "content": NEEDLE}, a]
    if answer:
        msgs.append({"role": "tool", "content": "r", "tool_call_id": cid})
    try:
        out = tmpl.render(messages=msgs, add_generation_prompt=False, bos_token=bos, eos_token=eos,
                          tools=None, documents=None)
    except Exception:  # noqa: BLE001 - any failure to render is "no"
        return False
    return needle in out


def caps_of(tmpl, bos, eos):
    r = [probe(tmpl, bos, eos, *p) for p in [(0, 0, PROBE_ID9, 0), (1, 0, PROBE_ID9, 0), (0, 1, PROBE_ID9, 0),
                                             (1, 1, PROBE_ID9, 0), (0, 1, PROBE_ID9, 1),
                                             (0, 1, PROBE_ID_LONG, 1)]]
    caps = []
    if (r[0] and not r[1]) or (r[2] and not r[3]):
        caps.append("non_null_content")
    if r[4] and not r[5]:
        caps.append("call_id9")
    if probe(tmpl, bos, eos, 0, 1, PROBE_ID9, 0, needle="[ARGS]"):
        caps.append("call_args")
    return caps


ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def fnv1a64(b):
    h = 14695981039346656037
    for x in b:
        h = ((h ^ x) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def id9_candidate(cid, k):
    tail = cid[-9:]
    if k == 0 and len(cid) >= 9 and all(c in ALNUM for c in tail):
        return tail
    h = fnv1a64(cid.encode() + (("#%d" % k).encode() if k else b""))
    out = ""
    for _ in range(9):
        out += ALNUM[h % 62]
        h //= 62
    return out


def id9_map(msgs):
    """Each distinct call id, in order of first appearance -> 9 letters and digits."""
    m, taken = {}, set()
    for msg in msgs:
        ids = [c["id"] for c in msg.get("tool_calls") or []] if msg["role"] == "assistant" else []
        if msg["role"] == "tool" and "tool_call_id" in msg:
            ids.append(msg["tool_call_id"])
        for cid in ids:
            if cid in m:
                continue
            k = 0
            while id9_candidate(cid, k) in taken:
                k += 1
            m[cid] = id9_candidate(cid, k)
            taken.add(m[cid])
    return m


def hf_messages(msgs, caps=()):
    out = copy.deepcopy(msgs)
    ids = id9_map(out) if "call_id9" in caps else {}
    for m in out:
        if "non_null_content" in caps and m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            c["id"] = ids.get(c["id"], c["id"])
            try:
                a = json.loads(c["function"]["arguments"])
                if isinstance(a, dict):
                    c["function"]["arguments"] = a
            except ValueError:
                pass
        if m["role"] == "tool" and "tool_call_id" in m:
            m["tool_call_id"] = ids.get(m["tool_call_id"], m["tool_call_id"])
    return out


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[base.GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = base.tojson
    env.globals["raise_exception"] = base.raise_exception
    env.globals["strftime_now"] = lambda fmt: base.NOW.strftime(fmt)
    templates, cases = {}, []
    for fn in sorted(os.listdir(base.TDIR)):
        if not fn.endswith(".jinja"):
            continue
        name = fn[:-len(".jinja")]
        with open(os.path.join(base.TDIR, fn), encoding="utf-8", newline="") as f:
            src = f.read()
        if "tools" not in src:
            continue
        try:
            tmpl = env.from_string(src)
        except jinja2.exceptions.TemplateError:
            continue
        bos, eos = base.specials(name)
        caps = caps_of(tmpl, bos, eos)
        templates[name] = {"bos": bos, "eos": eos, "caps": caps}
        for ri, req in enumerate(REQUESTS):
            tools = None if req.get("tool_choice") == "none" else req.get("tools")
            extra = dict(req.get("chat_template_kwargs") or {})
            if req.get("reasoning_effort") in ("none", "minimal"):
                extra["enable_thinking"] = False
            out, err, raised = None, None, False
            try:
                out = tmpl.render(messages=hf_messages(req["messages"], caps), add_generation_prompt=True,
                                  bos_token=bos, eos_token=eos, tools=tools, documents=None, **extra)
            except jinja2.exceptions.TemplateError as e:
                err, raised = str(e), type(e) is jinja2.exceptions.TemplateError
            except Exception as e:  # noqa: BLE001 - the template's own TypeError etc.
                err = "%s: %s" % (type(e).__name__, e)
            cases.append({"template": name, "request": ri, "expected": out, "error": err, "raised": raised})
    doc = {"oracle": "jinja2 %s, as chat_template_fixtures.py, with tools" % jinja2.__version__,
           "now_epoch": int(base.NOW.timestamp()), "templates": templates, "requests": REQUESTS,
           "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)  # key order is data (tojson)
        f.write("\n")
    print("%d templates, %d cases (%d errors)" % (len(templates), len(cases), sum(1 for c in cases if c["error"])))


if __name__ == "__main__":
    sys.exit(main())
