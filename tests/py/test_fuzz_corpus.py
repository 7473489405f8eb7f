"""Replay every committed fuzz corpus (tests/fuzz/corpus/TARGET) through its
libFuzzer target under ASan+UBSan: crash reproducers that were once fixed
stay fixed. (Exploration is `make fuzz`; this is the regression half.)"""
import os
import shutil

from harness import ROOT, Skip, run

TIMEOUT = 900  # builds every fuzzer with clang first


def test_fuzz_corpora_replay_clean():
    if not shutil.which("clang"):
        raise Skip("clang not installed")
    r = run([os.path.join(ROOT, "scripts/fuzz"), "--regress"], timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("fuzz ")]
    targets = [f for f in os.listdir(os.path.join(ROOT, "tests/fuzz")) if f.startswith("fuzz_")]
    assert len(lines) == len(targets), r.stdout
    assert all("corpus replay ok" in l for l in lines), r.stdout
