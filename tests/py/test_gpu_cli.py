"""--device cuda on a build without the CUDA backend (the test binaries are
CPU-only): every mode that runs the model says so clearly and fails."""
from harness import binary, run

MODEL = "tests/fixtures/model/llama_tied.q8_0.gguf"


def test_device_cuda_without_cuda_build_is_a_clear_error():
    for extra in (["--prompt", "hi", "--max-tokens", "2"], ["--bench", "--bench-decode", "2"],
                  ["--batch-file", "/nonexistent.jsonl"]):
        r = run([binary("jobworker"), "--device", "cuda", "--model", MODEL] + extra)
        assert r.returncode != 0, (extra, r.stdout)
        assert "this build has no CUDA backend" in r.stderr, (extra, r.stderr)
        assert "make CUDA=1" in r.stderr, r.stderr
