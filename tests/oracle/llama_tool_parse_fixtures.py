#!/usr/bin/env python3
"""tests/oracle/llama_tool_parse_fixtures.py - make the llama.cpp tool-call parse fixtures ONCE.

llama.cpp's own server (`llama-server --jinja`, built by scripts/build-llama-server
from the llama-cpp-python sdist) on a Hermes-template GGUF (Qwen2.5-Coder
Instruct) produces the texts, and llama.cpp's own chat parser reads them:

1. the prompt: llama-server's /apply-template of a chat request with tools;
2. the text: llama-server's /completion on that prompt, greedy, either free
   (what the model writes on its own: these small Qwen models write a fenced
   JSON call, never the tags) or under a GBNF grammar given to the server that
   makes it write `<tool_call>` blocks (one, two, or after a sentence of
   text), the names from the request's tools and the arguments a JSON object
   of the model's choosing;
3. llama.cpp's parse: the same chat request to /v1/chat/completions with the
   text as the assistant turn's prefill and only the end-of-turn token
   allowed next (logit_bias), so the server's parser runs on exactly that text
   and generates nothing of its own; its `content` and `tool_calls` are kept.

Writes tests/fixtures/chat/llama_tool_parses.json. The C unit test
(tests/unit/openai/test_tools.c, tool_llama_parse) runs our Hermes parser on
each text and compares with llama.cpp's parse. llama-server is NOT needed at
`make test` time.

Usage: .venv/bin/python tests/oracle/llama_tool_parse_fixtures.py [MODEL.gguf ...]
(default: the fetched Qwen2.5-Coder GGUFs, scripts/fetch-model qwen25-coder-0.5b)
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from bench_server import Server  # noqa: E402

SERVER = os.path.join(ROOT, ".cache/llama-server/0.3.36-native/llama-server")
MODELS = [os.path.join(ROOT, ".cache/models", m) for m in
          ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "llama_tool_parses.json")
IM_END = 151645  # <|im_end|> in the Qwen2.5 vocabulary

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather of a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "description": "The local time in an IANA time zone.",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"],
                    "additionalProperties": False}}},
    {"type": "function", "function": {"name": "convert", "description": "Convert an amount between currencies.",
     "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"},
                    "to": {"type": "string"}}, "required": ["amount", "from", "to"], "additionalProperties": False}}},
]

ONE = ["What is the weather in Paris right now?", "What time is it in Tokyo?", "Convert 100 USD to EUR.",
       "Is it raining in Oslo? Use celsius.", "How many yen is 20 pounds?", "Tell me the local time in Cairo."]
TWO = ["What is the weather in Rome and in Berlin?", "What time is it in Lima, and what is the weather there?",
       "Convert 5 EUR to USD and tell me the time in New York."]

JSON_GBNF = r'''
space ::= | " " | "\n"{1,2} [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})?
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" space ( string space ":" space value ( space "," space string space ":" space value ){0,8} )? space "}"
array ::= "[" space ( value ( space "," space value ){0,8} )? space "]"
'''


def grammar(names, n_calls, preamble):
    name = " | ".join(f'"\\"{n}\\""' for n in names)
    g = [f"root ::= {'pre ' if preamble else ''}call" + (' "\\n" call' * (n_calls - 1)),
         'call ::= "<tool_call>\\n" "{" space "\\"name\\"" space ":" space name space "," space '
         '"\\"arguments\\"" space ":" space object space "}" "\\n</tool_call>"',
         f"name ::= {name}"]
    if preamble:
        g.append('pre ::= [A-Z] [^<\\n]{8,120} "\\n"')
    return "\n".join(g) + JSON_GBNF


def main():
    models = sys.argv[1:] or [m for m in MODELS if os.path.exists(m)]
    if not models or not os.path.exists(SERVER):
        sys.exit("need a Qwen2.5-Coder GGUF (scripts/fetch-model qwen25-coder-0.5b) and "
                 "llama-server (scripts/build-llama-server)")
    cases = []
    for model in models:
        # --no-repack: the native build's AMX repack path segfaults on AMX CPUs (bench/NOTES.md)
        srv = Server(SERVER, model, 2, 1, 4096, 0, ("--jinja", "--no-repack"))
        try:
            def post(path, body):
                st, raw = srv.call("POST", path, body)
                if st != 200:
                    sys.exit(f"{path}: HTTP {st}: {raw[:500]!r}")
                return json.loads(raw)

            plan = [(q, 0, False) for q in ONE] + [(q, 1, False) for q in ONE] + \
                   [(q, 1, True) for q in ONE[:3]] + [(q, 2, False) for q in TWO]
            for q, n_calls, pre in plan:
                req = {"messages": [{"role": "user", "content": q}], "tools": TOOLS}
                prompt = post("/apply-template", req)["prompt"]
                body = {"prompt": prompt, "n_predict": 160, "temperature": 0, "cache_prompt": False}
                if n_calls:
                    body["grammar"] = grammar([t["function"]["name"] for t in TOOLS], n_calls, pre)
                text = post("/completion", body)["content"]
                turn = dict(req, messages=req["messages"] + [{"role": "assistant", "content": text}],
                            max_tokens=1, temperature=0, logit_bias={str(IM_END): 100})
                msg = post("/v1/chat/completions", turn)["choices"][0]["message"]
                calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                         for c in msg.get("tool_calls") or []]
                cases.append({"model": os.path.basename(model), "prompt": q,
                              "kind": "free" if not n_calls else f"{n_calls} call(s)" + (" after text" if pre else ""),
                              "text": text, "llama": {"content": msg.get("content") or "", "tool_calls": calls}})
                print(f"{cases[-1]['kind']:>20} {q[:40]:40} llama: {len(calls)} call(s), "
                      f"content {len(cases[-1]['llama']['content'])} bytes", file=sys.stderr)
        finally:
            srv.stop()
    out = {"made_by": "tests/oracle/llama_tool_parse_fixtures.py",
           "server": "llama-server --jinja from llama-cpp-python 0.3.36's vendored llama.cpp",
           "server_sha256": hashlib.sha256(open(SERVER, "rb").read()).hexdigest(),
           "format": "hermes", "tools": TOOLS, "cases": cases}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
