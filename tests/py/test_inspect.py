"""jobworker --model M.gguf --inspect prints what the GGUF loader sees; a
file that is not GGUF is a clean failure (exit 1, one line naming the problem)."""
import os

from harness import Skip, binary, run

TINY = "tests/fixtures/gguf/tiny_v3.gguf"
MODEL = ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_inspect_tiny_file():
    r = run([binary("jobworker"), "--model", TINY, "--inspect"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "architecture: llama" in lines, r.stdout
    assert "llama.block_count: 1" in lines and "llama.context_length: 128" in lines, r.stdout
    assert "GGUF v3, alignment 64" in lines[0], lines[0]
    assert "tensors: 14 (" in r.stdout
    # one tensor of each supported type, plus three more F32 (1-D, 3-D, 4-D)
    assert ("tensor types: F32 4, F16 1, Q4_0 1, Q4_1 1, Q5_0 1, Q5_1 1, Q8_0 1, "
            "Q4_K 1, Q5_K 1, Q6_K 1, BF16 1") in lines, r.stdout


def test_inspect_default_model():
    if not os.path.exists(MODEL):
        raise Skip("default model not fetched (scripts/fetch-model)")
    r = run([binary("jobworker"), "--model", MODEL, "--inspect"])
    assert r.returncode == 0, r.stderr
    for want in ["llama.embedding_length: 576", "llama.attention.head_count_kv: 3",
                 "llama.rope.freq_base: 100000", "tokenizer.ggml.pre: smollm",
                 "tokenizer.ggml.tokens: [49152 x STRING]", "tensors: 272 (96576768 bytes of weights)",
                 "tensor types: F32 61, Q4_1 210, Q8_0 1"]:
        assert want in r.stdout.splitlines(), (want, r.stdout)


def test_inspect_bad_files():
    r = run([binary("jobworker"), "--model", "tests/fixtures/gguf/tiny.json", "--inspect"])
    assert r.returncode == 1
    assert "bad magic" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = run([binary("jobworker"), "--model", "no/such.gguf", "--inspect"])
    assert r.returncode == 1 and "cannot open" in r.stderr, r.stderr
    r = run([binary("jobworker"), "--inspect"])
    assert r.returncode == 2 and "--inspect needs --model" in r.stderr, r.stderr
