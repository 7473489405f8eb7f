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


def test_gpu_e2e_script_runs_a_batch_on_two_cpu_workers():
    """scripts/gpu-e2e (the end-to-end step of scripts/gpu-check, which can
    only run its CUDA leg on a GPU) on the release binaries with two CPU
    legs: jobd + jobworker serve the batch twice and the outputs agree in
    count, format and prompt tokens; identical greedy texts on one device."""
    import json
    import os

    from harness import ROOT, Skip, tmpdir

    model = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    bindir = os.path.dirname(binary("jobd", asan=False))
    if not os.path.exists(model) or not os.path.exists(os.path.join(bindir, "jobworker")):
        raise Skip("release build or default model missing")
    out = os.path.join(tmpdir(), "e2e.json")
    r = run(["python3", os.path.join(ROOT, "scripts/gpu-e2e"), "--bin", bindir, "--model", model,
             "--n", "12", "--max-tokens", "6", "--devices", "cpu,cpu", "--threads", "1",
             "--json", out], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("e2e: ok: 12 requests x 6 tokens"), r.stdout
    s = json.load(open(out))
    assert s["errors"] == [] and s["identical_texts"] == 12, s
    assert [v["lines"] for v in s["runs"].values()] == [12, 12], s
    assert all(v["output_tokens"] == 72 for v in s["runs"].values()), s
    # a worker that cannot start is a failed run with its log, not a hang
    r = run(["python3", os.path.join(ROOT, "scripts/gpu-e2e"), "--bin", bindir, "--model",
             "/nonexistent.gguf", "--n", "2", "--devices", "cpu"], timeout=120)
    assert r.returncode == 1 and "e2e: FAILED" in r.stdout, r.stdout
    assert "cpu worker exited" in r.stdout, r.stdout
