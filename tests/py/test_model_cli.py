"""jobworker --model M.gguf --prompt/--chat: the one-off run, end to end
(tokenizer, chat template, engine, greedy decoding, streaming detokenizer).

On the default model the completion ids must equal HF transformers' greedy
continuation (tests/fixtures/model/smollm2_greedy.json, made by
tests/oracle/make_smollm2_hf.py) up to its first end-of-generation token,
and the prompt ids (our tokenizer + chat template) must equal the ones
llama.cpp produced for the same text. Uses the optimised binary (build/):
the reference engine under ASan would take minutes.
"""
import json
import os

from harness import ROOT, Skip, binary, run, tmpdir

MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
FIX = os.path.join(ROOT, "tests/fixtures/model/smollm2_greedy.json")
TINY = os.path.join(ROOT, "tests/fixtures/model/qwen2_tied.q8_0.gguf")
SYSTEM_PREFIX = "<|im_start|>system\n"


def release_bin():
    return os.path.join(ROOT, os.environ.get("BUILD", "build"), "jobworker")


def ids_line(stderr, prefix):
    for line in stderr.splitlines():
        if line.startswith(prefix):
            return [int(x) for x in line[len(prefix):].split()]
    return []


def user_text(case):
    """The user message of a chat case (the fixture holds the rendered text)."""
    t = case["text"]
    start = t.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    return t[start:t.index("<|im_end|>", start)]


def check_case(case, max_tokens):
    args = ["--chat", user_text(case)] if case["kind"] == "chat" else ["--prompt", case["text"]]
    r = run([release_bin(), "--model", MODEL, *args, "--max-tokens", str(max_tokens), "--print-ids"],
            timeout=120)
    assert r.returncode == 0, r.stderr
    assert ids_line(r.stderr, "prompt ids:") == case["prompt"], (case["text"], r.stderr)
    want = case["hf_expect"][:min(case["hf_stop"], max_tokens)]
    got = ids_line(r.stderr, "completion ids:")
    assert got == want, (case["text"], got, want)
    assert "tok/s" in r.stderr.splitlines()[-1], r.stderr
    return r


def test_prompt_and_chat_match_transformers():
    if not os.path.exists(MODEL):
        raise Skip("default model not fetched (scripts/fetch-model)")
    if not os.path.exists(release_bin()):
        raise Skip("no optimised build (make)")
    cases = json.load(open(FIX))["cases"]
    # chat answers that end early ("Paris", "12 times 12", "buenos dias") + a raw prompt
    r = check_case(cases[10], 64)
    assert r.stdout == "The capital of France is Paris.\n", r.stdout
    check_case(cases[15], 64)
    check_case(cases[17], 64)
    check_case(cases[0], 24)


def test_tiny_model_and_errors():
    # a qwen2 model runs too (tiny fixture; output is noise, the run must be clean)
    r = run([binary("jobworker"), "--model", TINY, "--prompt", "the cat", "--max-tokens", "5",
             "--print-ids"])
    assert r.returncode == 0, r.stderr
    assert ids_line(r.stderr, "prompt ids:"), r.stderr
    assert "decode:" in r.stderr
    r = run([binary("jobworker"), "--prompt", "hi"])
    assert r.returncode == 2 and "--model" in r.stderr, r.stderr
    r = run([binary("jobworker"), "--model", TINY, "--prompt", "hi", "--max-tokens", "0"])
    assert r.returncode == 2, r.stderr
    r = run([binary("jobworker"), "--model", TINY, "--prompt", ""])
    assert r.returncode == 1 and "empty" in r.stderr, r.stderr
    # an architecture we do not run: one clear line
    data = open(TINY, "rb").read().replace(b"\x05\0\0\0\0\0\0\0qwen2", b"\x05\0\0\0\0\0\0\0mamba", 1)
    path = os.path.join(tmpdir(), "mamba.gguf")
    with open(path, "wb") as f:
        f.write(data)
    r = run([binary("jobworker"), "--model", path, "--prompt", "hi"])
    assert r.returncode == 1, r.stderr
    assert "unsupported architecture 'mamba'" in r.stderr and r.stderr.count("\n") == 1, r.stderr
