"""jobworker --model M.gguf --batch-file FILE: OpenAI batch input lines through
the scheduler (worker/engine/sched.c, worker/batchrun.c), end to end.

- Batch invariance on the default model (optimised build): 4 requests
  (greedy and seeded sampling, one with n=2) give the same choices alone and
  inside a pack of mixed-length requests run with a small step budget
  (chunked prefill, decode and prefill in one step) and a shared system
  prompt (prefix cache); a greedy chat answer equals HF transformers'
  (tests/fixtures/model/smollm2_greedy.json case 10).
- Preemption on the default model: a KV budget of about four sequences'
  worth completes a pack of 8 with outputs equal to the unconstrained run.
- Output line format and per-line errors on the tiny fixture (ASan build).
"""
import json
import os

from harness import ROOT, Skip, binary, run, tmpdir

MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
TINY = os.path.join(ROOT, "tests/fixtures/model/llama_tied.q8_0.gguf")
SYSTEM = ("You are a helpful assistant. Answer in one short sentence, plainly, without lists, "
          "and never mention that you are an assistant or a language model.")


def release_bin():
    return os.path.join(ROOT, os.environ.get("BUILD", "build"), "jobworker")


def line(cid, body, url="/v1/chat/completions"):
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})


def chat(user, max_tokens, **kw):
    return {"model": "smol", "messages": [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": user}],
            "max_tokens": max_tokens, **kw}


def run_batch(exe, model, lines, *args, timeout=300):
    d = tmpdir()
    path = os.path.join(d, "in.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    r = run([exe, "--model", model, "--batch-file", path, "--threads", "2", *args], timeout=timeout)
    assert r.returncode == 0, r.stderr
    out = {}
    for ln in r.stdout.splitlines():
        o = json.loads(ln)
        out[o["custom_id"]] = o
    stats = [l for l in r.stderr.splitlines() if l.startswith("sched-stats: ")]
    assert stats, r.stderr
    return out, json.loads(stats[-1][len("sched-stats: "):])


def test_batch_file_invariance_default_model():
    if not os.path.exists(MODEL):
        raise Skip("default model not fetched (scripts/fetch-model)")
    if not os.path.exists(release_bin()):
        raise Skip("no optimised build (make)")
    fix = json.load(open(os.path.join(ROOT, "tests/fixtures/model/smollm2_greedy.json")))
    case = fix["cases"][10]
    t = case["text"]
    start = t.index("<|im_start|>user\n") + len("<|im_start|>user\n")
    paris_q = t[start:t.index("<|im_end|>", start)]
    targets = {
        "paris": line("paris", {"model": "smol", "messages": [{"role": "user", "content": paris_q}],
                                "max_tokens": 64, "temperature": 0}),
        "g1": line("g1", chat("Name a large river in Europe.", 12, temperature=0)),
        "s1": line("s1", chat("Say something about the sea.", 12, temperature=0.9, seed=7)),
        "s2": line("s2", chat("Describe a cat.", 8, temperature=1.0, top_p=0.9, seed=3, n=2)),
    }
    alone = {}
    for cid, ln in targets.items():
        out, _ = run_batch(release_bin(), MODEL, [ln], "--no-prefix-cache", "--exact")
        alone[cid] = out[cid]["response"]["body"]["choices"]
    assert alone["paris"][0]["message"]["content"] == "The capital of France is Paris."
    fillers = [line(f"f{i}", chat("Count: " + " ".join(str(k) for k in range(i * 3 % 40)), 4 + i % 5,
                                  temperature=0.7, seed=i)) for i in range(10)]
    pack = fillers[:5] + list(targets.values()) + fillers[5:]
    out, st = run_batch(release_bin(), MODEL, pack, "--max-batch-tokens", "48", "--max-seqs", "8",
                        "--exact")
    assert len(out) == len(pack)
    for cid in targets:
        assert out[cid]["response"]["status_code"] == 200
        assert out[cid]["response"]["body"]["choices"] == alone[cid], cid
    assert len(alone["s2"]) == 2
    assert st["prefix_reused"] > 0 and st["requests"] == len(pack), st
    # 48-token steps: the prompts (about 70 tokens each) were prefilled in chunks
    assert st["steps"] * 48 >= st["prefill_computed"] + st["completion_tokens"], st
    assert st["prefill_computed"] + st["prefix_reused"] == st["prompt_tokens"], st


def test_batch_file_lines_and_errors_tiny():
    lines = [
        line("ok", {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0},
             url="/v1/completions"),
        line("chat", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 2}),
        line("badparam", {"model": "tiny", "prompt": "x", "temperature": 9}, url="/v1/completions"),
        line("toolong", {"model": "tiny", "prompt": [5] * 300}, url="/v1/completions"),
        line("badurl", {"model": "tiny", "prompt": "x"}, url="/v1/embeddings"),
        "{not json",
    ]
    out, st = run_batch(binary("jobworker"), TINY, lines, timeout=60)
    assert out["ok"]["response"]["status_code"] == 200
    b = out["ok"]["response"]["body"]
    assert b["object"] == "text_completion" and b["usage"]["prompt_tokens"] == 3
    assert b["usage"]["completion_tokens"] <= 3 and out["ok"]["id"].startswith("batch_req_")
    assert out["chat"]["response"]["body"]["object"] == "chat.completion"
    e = out["badparam"]["response"]
    assert e["status_code"] == 400 and e["body"]["error"]["param"] == "temperature"
    e = out["toolong"]["response"]
    assert e["status_code"] == 400 and e["body"]["error"]["code"] == "context_length_exceeded"
    assert out["badurl"]["response"] is None and out["badurl"]["error"]["code"] == "invalid_url"
    assert out[None]["error"]["code"] == "invalid_json_line"
    assert st["requests"] == 4 and st["request_errors"] == 2, st


def test_batch_file_preemption_default_model():
    """A KV budget too small for the pack (7.5 MiB = 21 blocks of 16 positions
    of the fp16 cache on SmolLM2-135M, about four sequences' worth) still completes it, with
    preemptions, and every output equals the unconstrained run."""
    if not os.path.exists(MODEL):
        raise Skip("default model not fetched (scripts/fetch-model)")
    if not os.path.exists(release_bin()):
        raise Skip("no optimised build (make)")
    lines = [line(f"p{i}", chat(f"Tell me a fact about the number {i}.", 48,
                                **({"temperature": 0} if i % 2 else {"temperature": 0.8, "seed": i})))
             for i in range(8)]
    big, st_big = run_batch(release_bin(), MODEL, lines)
    small, st = run_batch(release_bin(), MODEL, lines, "--kv-mem", "7680K", "--max-seqs", "8")
    assert st_big["preemptions"] == 0, st_big
    assert st["kv_blocks"] == 21 and st["preemptions"] > 0 and st["recomputed"] > 0, st
    assert sorted(small) == sorted(big) and len(big) == 8
    for cid in big:
        assert small[cid]["response"]["body"]["choices"] == big[cid]["response"]["body"]["choices"], cid
        assert small[cid]["response"]["body"]["usage"] == big[cid]["response"]["body"]["usage"], cid
