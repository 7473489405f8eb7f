"""Replay every committed fuzz corpus (tests/fuzz/corpus/TARGET) through its
libFuzzer target under ASan+UBSan: crash reproducers that were once fixed
stay fixed. Then a short real fuzz run of every target (FUZZ_SHORT_SECONDS,
default 3 s each, reusing the binaries just built): new inputs, not only the
committed ones. (The long exploration is `make fuzz`.)"""
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


def test_fuzz_short_run_every_target():
    """A few seconds of real fuzzing per target (binaries of the replay above
    reused; built here if missing)."""
    if not shutil.which("clang"):
        raise Skip("clang not installed")
    secs = os.environ.get("FUZZ_SHORT_SECONDS", "3")
    if secs == "0":
        raise Skip("FUZZ_SHORT_SECONDS=0")
    targets = [f for f in os.listdir(os.path.join(ROOT, "tests/fuzz")) if f.startswith("fuzz_")]
    r = run([os.path.join(ROOT, "scripts/fuzz")], timeout=600,
            env={"FUZZ_SECONDS": secs, "FUZZ_REUSE": "1", "FUZZ_SEED": "1"})
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    runs = [l for l in r.stdout.splitlines() if l.startswith("stat::number_of_executed_units")]
    assert len(runs) == len(targets) and all(int(l.split()[-1]) > 0 for l in runs), r.stdout
