"""/v1/embeddings batches end to end, release builds over
loopback: the official openai SDK uploads a JSONL of embedding lines,
creates the batch with endpoint /v1/embeddings, and reads the output and
error files; a real jobworker serves the tiny Qwen3 embedding fixture
(tests/fixtures/model/qwen3emb_last.f32.gguf, last-token pooling).

Checks: every body validates as the SDK's CreateEmbeddingResponse; float
and base64 give the same float32 bits; the vectors are those of
`jobworker --embed` for the same text (same engine, same numbers) and of
unit length; `dimensions` cuts and renormalises; an input longer than the
model's context is a per-line 400 (context_length_exceeded) in the error
file while the other lines succeed; a file with mixed input types is
refused at validation with its line number; `jobctl submit` picks the
endpoint from the file.
"""
import base64
import json
import os
import struct
import time

from harness import ROOT, Proc, Skip, binary, run, tmpdir
from jobdlib import Jobd, create_key

MODEL = os.path.join(ROOT, "tests/fixtures/model/qwen3emb_last.f32.gguf")
WT = "worker-token-emb"
TEXTS = ["the cat sat on the mat", "a dog ate the hat", "rain came in", "there is a theory"]


def line(cid, body):
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/embeddings", "body": body})


def need():
    for name in ("jobd", "jobworker"):
        if not os.path.exists(binary(name, asan=False)):
            raise Skip(f"release build/{name} not built")
    try:
        import openai  # noqa: F401
    except ImportError:
        raise Skip("the openai package is not installed (scripts/install-deps)")


def cli_embed(text):
    r = run([binary("jobworker", asan=False), "--model", MODEL, "--embed", text, "--threads", "1"],
            timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["data"][0]["embedding"]


def f32(xs):
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in xs]


def wait_final(client, batch_id, w, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        b = client.batches.retrieve(batch_id)
        if b.status in ("completed", "failed", "expired", "cancelled"):
            return b
        assert w.p.poll() is None, w.log()[-3000:]
        assert time.monotonic() < deadline, b
        time.sleep(0.2)


def test_embeddings_batch_openai_sdk():
    need()
    import openai
    from openai.types import CreateEmbeddingResponse

    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "emb", asan=False)
    d = Jobd(data=data, key=key, asan=False,
             args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s"])
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", MODEL,
              "--model-id", "tiny-emb", "--worker-token", WT, "--name", "emb-w", "--threads", "2"])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{d.port}/v1", api_key=key, max_retries=0)

    lines = [line("one", {"model": "tiny-emb", "input": TEXTS[0]}),
             line("many", {"model": "tiny-emb", "input": TEXTS}),
             line("b64", {"model": "tiny-emb", "input": TEXTS, "encoding_format": "base64"}),
             line("dims", {"model": "tiny-emb", "input": TEXTS[0], "dimensions": 8}),
             line("ids", {"model": "tiny-emb", "input": [[5, 6, 7], [8]]}),
             line("long", {"model": "tiny-emb", "input": ["ok", "x " * 400]})]  # > 256 tokens
    payload = ("\n".join(lines) + "\n").encode()
    f = client.files.create(file=("emb.jsonl", payload), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h")
    assert b.endpoint == "/v1/embeddings", b
    b = wait_final(client, b.id, w)
    assert b.status == "completed", b
    assert b.request_counts.total == 6 and b.request_counts.completed == 5 and b.request_counts.failed == 1, b

    out = [json.loads(x) for x in client.files.content(b.output_file_id).read().decode().splitlines()]
    by = {x["custom_id"]: x for x in out}
    assert sorted(by) == ["b64", "dims", "ids", "many", "one"], sorted(by)
    bodies = {}
    for cid, x in by.items():
        assert x["error"] is None and x["response"]["status_code"] == 200, x
        body = x["response"]["body"]
        # the SDK types hold floats; for base64 its embeddings.create decodes
        # the string as little-endian float32 first, as done here
        dec = json.loads(json.dumps(body))
        for e in dec["data"]:
            if isinstance(e["embedding"], str):
                raw = base64.b64decode(e["embedding"])
                e["embedding"] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        r = CreateEmbeddingResponse.model_validate(dec)
        assert r.object == "list" and r.model == "tiny-emb", r
        assert [e.index for e in r.data] == list(range(len(r.data))), r
        assert r.usage.prompt_tokens == r.usage.total_tokens > 0, r.usage
        bodies[cid] = body
    many = [e["embedding"] for e in bodies["many"]["data"]]
    assert len(many) == 4 and all(len(v) == 64 for v in many)
    for v in many:
        assert abs(sum(x * x for x in v) - 1) < 1e-5
    # the same text alone, in a list, and through the CLI: the same numbers
    assert f32(bodies["one"]["data"][0]["embedding"]) == f32(many[0])
    assert f32(cli_embed(TEXTS[1])) == f32(many[1])
    # base64 = the float32 bytes of the float answer
    for e, v in zip(bodies["b64"]["data"], many):
        raw = base64.b64decode(e["embedding"])
        assert list(struct.unpack("<64f", raw)) == f32(v)
    # dimensions: the first 8 values, normalised again
    d8 = bodies["dims"]["data"][0]["embedding"]
    n = sum(x * x for x in many[0][:8]) ** 0.5
    assert len(d8) == 8 and all(abs(a - b_ / n) < 1e-6 for a, b_ in zip(d8, many[0][:8])), d8
    assert len(bodies["ids"]["data"]) == 2

    errs = [json.loads(x) for x in client.files.content(b.error_file_id).read().decode().splitlines()]
    assert [x["custom_id"] for x in errs] == ["long"], errs
    eb = errs[0]["response"]["body"]["error"]
    assert errs[0]["response"]["status_code"] == 400 and eb["code"] == "context_length_exceeded", errs
    assert "input[1]" in eb["message"], eb

    # mixed input types: refused at validation, with the line number
    bad = (line("a", {"model": "tiny-emb", "input": "fine"}) + "\n" +
           line("b", {"model": "tiny-emb", "input": ["text", [1, 2]]}) + "\n").encode()
    f2 = client.files.create(file=("bad.jsonl", bad), purpose="batch")
    b2 = wait_final(client, client.batches.create(input_file_id=f2.id, endpoint="/v1/embeddings",
                                                  completion_window="24h").id, w)
    assert b2.status == "failed", b2
    e = b2.errors.data[0]
    assert e.line == 2 and e.code == "invalid_type" and e.param == "body.input", e

    # jobctl submit picks /v1/embeddings from the file
    p = os.path.join(tmpdir(), "emb.jsonl")
    with open(p, "wb") as fh:
        fh.write((line("c", {"model": "tiny-emb", "input": "hello"}) + "\n").encode())
    env = dict(os.environ, JOBD_URL=f"http://127.0.0.1:{d.port}", JOBD_API_KEY=key)
    r = run([binary("jobctl", asan=False), "submit", p], timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    bid = r.stdout.strip().split()[-1]
    assert client.batches.retrieve(bid).endpoint == "/v1/embeddings"
    assert w.p.poll() is None, w.log()[-2000:]


REAL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
REAL_FIXTURE = os.path.join(ROOT, "tests/fixtures/model/smollm2_embed_llamacpp.json")


def test_embeddings_real_gguf_match_llamacpp():
    """50 varied texts on the real default GGUF (last-token pooling,
    normalised) through `jobworker --json`: cosine >= 0.999 with llama.cpp's
    embed() of each text (tests/oracle/make_smollm2_embed_llamacpp.py).
    Seen: min 0.99936 (default path), 0.99925 (--exact)."""
    if not os.path.exists(binary("jobworker", asan=False)):
        raise Skip("release build/jobworker not built")
    if not os.path.exists(REAL):
        r = run([os.path.join(ROOT, "scripts/fetch-model")], timeout=300)
        if r.returncode != 0 or not os.path.exists(REAL):
            raise Skip("the default model cannot be fetched: " + r.stderr[-300:])
    with open(REAL_FIXTURE) as f:
        fx = json.load(f)
    body = os.path.join(tmpdir(), "emb50.json")
    with open(body, "w") as f:
        json.dump({"model": "smol", "input": fx["texts"]}, f)
    r = run([binary("jobworker", asan=False), "--model", REAL, "--json", body, "--threads", "2"],
            timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert len(out["data"]) == 50
    n = fx["n_embd"]
    worst = 1.0
    for d, b64 in zip(out["data"], fx["embeddings"]):
        ref = struct.unpack(f"<{n}f", base64.b64decode(b64))
        v = d["embedding"]
        assert len(v) == n
        cos = sum(a * b for a, b in zip(v, ref)) / (sum(a * a for a in v) * sum(b * b for b in ref)) ** 0.5
        worst = min(worst, cos)
    print(f"# min cosine vs llama.cpp over 50 texts: {worst:.6f}")
    assert worst >= 0.999, worst


BERT = os.path.join(ROOT, "tests/fixtures/model/bert_mean.f32.gguf")


def test_embeddings_bert_worker_serves_embeddings_only():
    """A worker on an encoder GGUF (the tiny BERT fixture) registers
    /v1/embeddings only: jobd leases it the embeddings batch (vectors equal
    `jobworker --embed`'s, unit length, SDK-shaped), never the chat batch
    for the same model, which stays in_progress with waiting_for_model and
    GET /v1/models lists the model with endpoints ["/v1/embeddings"]."""
    need()
    import openai
    from openai.types import CreateEmbeddingResponse

    data = os.path.join(tmpdir(), "data")
    key = create_key(data, "bert", asan=False)
    d = Jobd(data=data, key=key, asan=False,
             args=["--worker-token", WT, "--sweep-interval", "200ms", "--window-min", "1s"])
    w = Proc([binary("jobworker", asan=False), "--jobd", f"http://127.0.0.1:{d.port}", "--model", BERT,
              "--model-id", "tiny-bert", "--worker-token", WT, "--name", "bert-w", "--threads", "2"])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{d.port}/v1", api_key=key, max_retries=0)
    chat = (json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
                        "body": {"model": "tiny-bert", "messages": [{"role": "user", "content": "hi"}],
                                 "max_tokens": 4}}) + "\n").encode()
    fc = client.files.create(file=("chat.jsonl", chat), purpose="batch")
    bc = client.batches.create(input_file_id=fc.id, endpoint="/v1/chat/completions", completion_window="24h")
    texts = ["Hello, world!", "The quick brown fox jumps over the lazy dog."]
    emb = (line("e", {"model": "tiny-bert", "input": texts}) + "\n").encode()
    fe = client.files.create(file=("emb.jsonl", emb), purpose="batch")
    be = client.batches.create(input_file_id=fe.id, endpoint="/v1/embeddings", completion_window="24h")
    be = wait_final(client, be.id, w)
    assert be.status == "completed" and be.request_counts.completed == 1, be
    out = json.loads(client.files.content(be.output_file_id).read().decode().splitlines()[0])
    body = out["response"]["body"]
    r = CreateEmbeddingResponse.model_validate(body)
    assert r.model == "tiny-bert" and len(r.data) == 2 and r.usage.prompt_tokens > 0, r
    for t, e in zip(texts, body["data"]):
        v = e["embedding"]
        assert len(v) == 64 and abs(sum(x * x for x in v) - 1) < 1e-5
        cli = run([binary("jobworker", asan=False), "--model", BERT, "--embed", t, "--threads", "1"],
                  timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert f32(json.loads(cli.stdout)["data"][0]["embedding"]) == f32(v)
    # the chat batch was never leased to the encoder worker
    cb = client.batches.retrieve(bc.id)
    assert cb.status == "in_progress" and cb.request_counts.completed == 0 and cb.request_counts.failed == 0, cb
    assert cb.model_extra.get("waiting_for_model") == {"model": "tiny-bert", "requests": 1}, cb.model_extra
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{d.port}/v1/models", headers={"Authorization": f"Bearer {key}"})
    models = json.loads(urllib.request.urlopen(req, timeout=10).read())
    m = [x for x in models["data"] if x["id"] == "tiny-bert"]
    assert m and m[0]["endpoints"] == ["/v1/embeddings"], models
    assert w.p.poll() is None, w.log()[-2000:]


MINILM = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2.f32.gguf")
MINILM_FIXTURE = os.path.join(ROOT, "tests/fixtures/model/minilm_embed_llamacpp.json")


def test_embeddings_minilm_match_llamacpp():
    """A real BERT embedding model, all-MiniLM-L6-v2 (opt-in: runs when
    `scripts/fetch-model all-minilm-l6-v2` has cached it): 60 varied texts
    through `jobworker --json` (WordPiece, encoder, mean pooling,
    normalised), cosine >= 0.999 with llama.cpp's embed() of each text
    (tests/oracle/make_minilm_llamacpp.py)."""
    if not os.path.exists(binary("jobworker", asan=False)):
        raise Skip("release build/jobworker not built")
    if not os.path.exists(MINILM):
        raise Skip("all-MiniLM-L6-v2 not cached (scripts/fetch-model all-minilm-l6-v2)")
    with open(MINILM_FIXTURE, encoding="utf-8") as f:
        fx = json.load(f)
    body = os.path.join(tmpdir(), "emb60.json")
    with open(body, "w", encoding="utf-8") as f:
        json.dump({"model": "minilm", "input": fx["texts"]}, f)
    worst = {}
    for extra in ([], ["--exact"]):
        r = run([binary("jobworker", asan=False), "--model", MINILM, "--json", body, "--threads", "2"] + extra,
                timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert len(out["data"]) == len(fx["texts"]) >= 50
        n = fx["n_embd"]
        w = 1.0
        for d, b64 in zip(out["data"], fx["embeddings"]):
            ref = struct.unpack(f"<{n}f", base64.b64decode(b64))
            v = d["embedding"]
            assert len(v) == n
            cos = sum(a * b for a, b in zip(v, ref)) / (sum(a * a for a in v) * sum(b * b for b in ref)) ** 0.5
            w = min(w, cos)
        worst["exact" if extra else "default"] = w
    print(f"# min cosine vs llama.cpp over {len(fx['texts'])} texts: {worst}")
    assert min(worst.values()) >= 0.999, worst


MINILM_F16_NOLC = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2.f16-nolc.gguf")


def cosine(u, v):
    return sum(a * b for a, b in zip(u, v)) / (sum(a * a for a in u) * sum(b * b for b in v)) ** 0.5


def test_embeddings_minilm_f16_without_lowercase_key_is_lowercased():
    """all-MiniLM-L6-v2 as many published GGUFs are: F16 matrices and no
    tokenizer.ggml.normalizer.lowercase key (written by `scripts/bert-gguf
    --f16 --no-lowercase-key`; `scripts/fetch-model all-minilm-l6-v2`
    caches it). llama.cpp's WordPiece tokenizer lowercases whatever the key
    says, so the references are: llama.cpp's embed() vectors of the 60
    fixture texts (made from the F32 file, whose key says lowercase; texts
    such as "UPPERCASE TEXT SHOULD ALSO WORK" included), and for the
    capitalised "New York City" / "The cat sat on the mat.", which the
    fixture lacks, our F32 file's vector of the lowercased text. Cosine >=
    0.999 with each; a case-keeping tokenizer gives ~0.1 on "New York City"."""
    if not os.path.exists(binary("jobworker", asan=False)):
        raise Skip("release build/jobworker not built")
    if not os.path.exists(MINILM_F16_NOLC) or not os.path.exists(MINILM):
        raise Skip("all-MiniLM-L6-v2 not cached (scripts/fetch-model all-minilm-l6-v2)")
    with open(MINILM_FIXTURE, encoding="utf-8") as f:
        fx = json.load(f)
    caps = ["New York City", "The cat sat on the mat."]

    def embed(model, texts):
        body = os.path.join(tmpdir(), "emb_f16.json")
        with open(body, "w", encoding="utf-8") as f:
            json.dump({"model": "minilm", "input": texts}, f)
        r = run([binary("jobworker", asan=False), "--model", model, "--json", body, "--threads", "2"],
                timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return [d["embedding"] for d in json.loads(r.stdout)["data"]]

    got = embed(MINILM_F16_NOLC, fx["texts"] + caps)
    n = fx["n_embd"]
    worst = min(cosine(v, struct.unpack(f"<{n}f", base64.b64decode(b64)))
                for v, b64 in zip(got, fx["embeddings"]))
    ref = embed(MINILM, [c.lower() for c in caps])
    caps_cos = [cosine(v, r) for v, r in zip(got[len(fx["texts"]):], ref)]
    print(f"# f16, no lowercase key: min cosine {worst:.6f} vs llama.cpp over {len(fx['texts'])} texts, "
          f"{caps_cos} vs the lowercased texts")
    assert worst >= 0.999 and min(caps_cos) >= 0.999, (worst, caps_cos)
