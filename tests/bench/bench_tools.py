#!/usr/bin/env python3
"""Tool calling benchmarks (release build, `jobworker --batch-file`, one model):

1. Constrained calls vs unconstrained generation of the same tokens: N chat
   lines with tools and tool_choice "required" (every answer is grammar
   enforced), then N /v1/completions lines whose prompts are the very token
   ids the chat lines rendered to and whose max_tokens is what each call
   took, end-of-generation tokens biased off, greedy: the same prompt and
   output token counts without a grammar. Printed: output tok/s of both from
   the scheduler's own statistics (sched-stats), the ratio, and the share of
   the constrained run spent computing token masks.
2. `auto` mode: the share of prompts that clearly ask for a tool and get a
   valid call (a declared function, arguments that validate against its
   schema with jsonschema), ours and, when the binary exists, llama.cpp's
   `llama-server --jinja` on the same GGUF and prompts (greedy). Our parser
   is also run on llama-server's raw text for each prompt (its own
   /apply-template prompt through /completion, greedy) and its calls
   compared with llama.cpp's parse of its chat answer.

usage: tests/bench/bench_tools.py [--model GGUF] [--n 24] [--threads 2] [--server PATH]
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
from bench_server import Server, gguf_eog_ids  # noqa: E402

try:
    import jsonschema
except ImportError:
    jsonschema = None

QWEN = os.path.join(ROOT, ".cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
SERVER = os.path.join(ROOT, ".cache/llama-server/0.3.36-native/llama-server")
JOBWORKER = os.path.join(ROOT, "build/jobworker")

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
    {"type": "function", "function": {"name": "search_flights", "description": "Find flights between two cities on a date.",
     "parameters": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                    "date": {"type": "string"}}, "required": ["origin", "destination", "date"],
                    "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CITIES = ["Paris", "Oslo", "Tokyo", "Cairo", "Lima", "Rome", "Berlin", "Sydney", "Toronto", "Madrid",
          "Seoul", "Nairobi"]
ZONES = ["Asia/Tokyo", "Europe/Paris", "America/New_York", "Australia/Sydney", "Africa/Cairo", "Europe/Oslo"]
MONEY = [("100", "USD", "EUR"), ("20", "GBP", "JPY"), ("55", "CHF", "USD"), ("1000", "JPY", "KRW")]


def prompts(n):
    out = []
    for i in range(n):
        k = i % 4
        if k == 0:
            out.append(f"What is the weather in {CITIES[i % len(CITIES)]} right now?")
        elif k == 1:
            out.append(f"What time is it in the {ZONES[i % len(ZONES)]} time zone?")
        elif k == 2:
            a, f, t = MONEY[i % len(MONEY)]
            out.append(f"Please convert {a} {f} to {t}.")
        else:
            out.append(f"Find me flights from {CITIES[i % len(CITIES)]} to {CITIES[(i + 5) % len(CITIES)]} "
                       f"on 2027-0{1 + i % 9}-1{i % 10}.")
    return out


def chat_body(q, choice, max_tokens=128):
    return {"model": "m", "temperature": 0, "max_tokens": max_tokens, "parallel_tool_calls": False,
            "messages": [{"role": "user", "content": q}], "tools": TOOLS, "tool_choice": choice}


def batch_run(model, lines, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    r = subprocess.run([JOBWORKER, "--model", model, "--batch-file", f.name, "--threads", str(threads)],
                       capture_output=True, text=True, timeout=3600)
    os.unlink(f.name)
    if r.returncode != 0:
        sys.exit("jobworker --batch-file failed: " + r.stderr[-2000:])
    stats = json.loads(re.search(r"sched-stats: (\{.*\})", r.stderr).group(1))
    out = {}
    for l in r.stdout.splitlines():
        o = json.loads(l)
        out[o["custom_id"]] = o["response"]["body"]
    return out, stats


def prompt_ids(model, body, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
    r = subprocess.run([JOBWORKER, "--model", model, "--json", f.name, "--print-ids", "--threads", str(threads)],
                       capture_output=True, text=True, timeout=600)
    os.unlink(f.name)
    m = re.search(r"prompt ids: ([0-9 ]+)", r.stderr)
    return [int(x) for x in m.group(1).split()]


def valid_call(msg):
    calls = msg.get("tool_calls") or []
    if not calls:
        return False
    for c in calls:
        name = c["function"]["name"]
        if name not in SCHEMAS:
            return False
        try:
            args = json.loads(c["function"]["arguments"])
            if jsonschema:
                jsonschema.validate(args, SCHEMAS[name])
        except Exception:  # noqa: BLE001
            return False
    return True


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def server_auto(exe, model, qs, threads):
    """llama-server --jinja on the same prompts: its parsed calls, and its raw text."""
    # --no-repack: on a CPU with AMX this build's AMX repack path segfaults at the first
    # decode (ggml_backend_amx_mul_mat); without repacking llama.cpp runs its plain kernels
    srv = Server(exe, model, threads, 1, 4096, 0, ("--jinja", "--no-repack"))
    port = srv.port
    try:
        def post(path, body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            return json.loads(c.getresponse().read())

        parsed, raw, req = [], [], []
        for q in qs:
            b = chat_body(q, "required")
            del b["model"]
            req.append(post("/v1/chat/completions", b)["choices"][0]["message"])
            b = chat_body(q, "auto")
            del b["model"]
            parsed.append(post("/v1/chat/completions", b)["choices"][0]["message"])
            # the raw text: the same rendered prompt through /completion (greedy, no grammar)
            prompt = post("/apply-template", b)["prompt"]
            r = post("/completion", {"prompt": prompt, "n_predict": b["max_tokens"], "temperature": 0,
                                     "cache_prompt": False})
            raw.append({"content": r["content"]})
        return parsed, raw, req
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=QWEN)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server", default=SERVER)
    a = ap.parse_args()
    qs = prompts(a.n)
    print(f"model {os.path.basename(a.model)}, {a.n} prompts, {a.threads} threads, load {os.getloadavg()[0]:.2f}")

    # 1. constrained vs unconstrained, same tokens
    req = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(q, "required")}
           for i, q in enumerate(qs)]
    out_c, st_c = batch_run(a.model, req, a.threads)
    eog = gguf_eog_ids(a.model)
    free = []
    for i, q in enumerate(qs):
        n_out = out_c[f"r{i}"]["usage"]["completion_tokens"]
        ids = prompt_ids(a.model, chat_body(q, "required"), a.threads)
        free.append({"custom_id": f"u{i}", "method": "POST", "url": "/v1/completions",
                     "body": {"model": "m", "prompt": ids, "max_tokens": n_out, "temperature": 0,
                              "logit_bias": {str(e): -100 for e in eog}}})
    out_u, st_u = batch_run(a.model, free, a.threads)
    ok = sum(valid_call(out_c[f"r{i}"]["choices"][0]["message"]) for i in range(a.n))
    same = st_c["completion_tokens"] == st_u["completion_tokens"] and st_c["prompt_tokens"] == st_u["prompt_tokens"]
    print(f"required: {ok}/{a.n} answers are valid calls (declared function, arguments validate)")
    print(f"constrained: {st_c['completion_tokens']} output tokens, {st_c['output_tok_s']:.1f} tok/s, "
          f"mask time {st_c['mask_s']:.2f} s of {st_c['wall_s']:.2f} s")
    print(f"unconstrained, same prompts and output counts ({'equal' if same else 'NOT EQUAL'}): "
          f"{st_u['completion_tokens']} output tokens, {st_u['output_tok_s']:.1f} tok/s")
    print(f"RATIO constrained / unconstrained: {st_c['output_tok_s'] / st_u['output_tok_s']:.3f}")

    # 2. auto mode
    auto = [{"custom_id": f"a{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(q, "auto")}
            for i, q in enumerate(qs)]
    out_a, _ = batch_run(a.model, auto, a.threads)
    ours = sum(valid_call(out_a[f"a{i}"]["choices"][0]["message"]) for i in range(a.n))
    print(f"auto: ours {ours}/{a.n} prompts answered with a valid call")
    if not os.path.exists(a.server):
        print(f"llama-server not found at {a.server}: peer skipped (JOBS=2 scripts/build-llama-server)")
        return
    parsed, raw, req_l = server_auto(a.server, a.model, qs, a.threads)
    print(f"required: llama-server --jinja {sum(valid_call(m) for m in req_l)}/{a.n} valid calls")
    theirs = sum(valid_call(m) for m in parsed)
    print(f"auto: llama-server --jinja {theirs}/{a.n} prompts answered with a valid call")
    for m in parsed[:1]:
        print("  llama-server's first auto answer: " + json.dumps(m)[:200])
    # our parser on llama-server's raw text vs llama.cpp's own parse
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    agree = total = only_ours = 0
    for m_parsed, m_raw in zip(parsed, raw):
        text = m_raw.get("content") or ""
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
        mine = parse_with_ours(a.model, body, text)
        want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m_parsed.get("tool_calls") or []]
        total += 1
        agree += mine == want
        only_ours += bool(mine) and not want
    print(f"our parser on llama-server's raw answers: {agree}/{total} agree with llama.cpp's parse; "
          f"{only_ours} calls we read that llama.cpp leaves as content")


def parse_with_ours(model, body, text):
    """Our parse of text in the model's format (Hermes for the Qwen default),
    through build/bench/tool_parse (the parser alone, no generation)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"body": body, "text": text, "format": "hermes"}, f)
    r = subprocess.run([os.path.join(ROOT, "build/bench/tool_parse"), f.name], capture_output=True, text=True,
                       timeout=60)
    os.unlink(f.name)
    if r.returncode != 0:
        sys.exit("build/bench/tool_parse failed: " + r.stderr[-1000:])
    calls = json.loads(r.stdout).get("tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


if __name__ == "__main__":
    main()
