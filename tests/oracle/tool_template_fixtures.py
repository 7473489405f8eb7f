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
]


def hf_messages(msgs):
    out = copy.deepcopy(msgs)
    for m in out:
        for c in m.get("tool_calls") or []:
            try:
                a = json.loads(c["function"]["arguments"])
                if isinstance(a, dict):
                    c["function"]["arguments"] = a
            except ValueError:
                pass
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
        templates[name] = {"bos": bos, "eos": eos}
        for ri, req in enumerate(REQUESTS):
            tools = None if req.get("tool_choice") == "none" else req.get("tools")
            extra = dict(req.get("chat_template_kwargs") or {})
            if req.get("reasoning_effort") in ("none", "minimal"):
                extra["enable_thinking"] = False
            out, err, raised = None, None, False
            try:
                out = tmpl.render(messages=hf_messages(req["messages"]), add_generation_prompt=True,
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
