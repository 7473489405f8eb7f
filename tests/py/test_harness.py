"""The harness proves it reports failures: a failing check, a crash, a leak
and a timeout each count as failed, the suite exits non-zero, and tests/run folds
it all into one summary line."""
import os

from harness import ROOT, binary, run, tmpdir


def test_c_runner_reports_failures_crashes_timeouts():
    unit = binary("tests/unit")
    r = run([unit, "th_demo_"], env={"TH_DEMO": "1", "TH_TIMEOUT": "2"}, timeout=60)
    out = r.stdout
    assert r.returncode == 1, out
    assert "FAIL th_demo_check_fails tests/unit/test_th.c:" in out, out
    assert "1 + 1 == 3 (got 2 vs 3)" in out, out
    # plain builds die of SIGSEGV; under ASan the sanitizer reports and exits 1
    assert ("FAIL th_demo_crash: killed by signal 11" in out
            or "FAIL th_demo_crash: exit status 1 (sanitizer" in out), out
    assert "FAIL th_demo_timeout: timed out after 2 s" in out, out
    assert "skip th_demo_skip: demonstrating a skip" in out, out
    assert "FAIL th_demo_leak: exit status 1 (sanitizer" in out, out
    assert "leaked in 1 allocation" in r.stderr, r.stderr[-2000:]
    assert out.strip().splitlines()[-1] == "# tally 0 4 1", out


def test_demo_tests_exist_only_under_th_demo():
    # a normal run neither runs nor counts the tests that misbehave on purpose
    unit = binary("tests/unit")
    r = run([unit, "th_demo_"], env={"TH_DEMO": "0"}, timeout=60)
    assert r.returncode == 0, r.stdout
    assert "th_demo_" not in r.stdout, r.stdout
    assert r.stdout.strip().splitlines()[-1] == "# tally 0 0 0", r.stdout


def test_summary_line_and_exit_status():
    unit = binary("tests/unit")
    # a failing suite: tests/run must exit non-zero and end with the summary
    wrapper = os.path.join(tmpdir(), "demo-suite.sh")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nTH_DEMO=1 TH_TIMEOUT=2 exec "{unit}" th_demo_\n')
    os.chmod(wrapper, 0o755)
    r = run([os.path.join(ROOT, "tests/run"), wrapper], env={"TESTS_NO_PY": "1"}, timeout=60)
    assert r.returncode == 1, r.stdout
    assert r.stdout.strip().splitlines()[-1] == "0 passed, 4 failed, 1 skipped", r.stdout
    # a passing suite exits 0 (the harness's own tests, not the whole suite again)
    passing = os.path.join(tmpdir(), "passing-suite.sh")
    with open(passing, "w") as f:
        f.write(f'#!/bin/sh\nexec "{unit}" th_t\n')
    os.chmod(passing, 0o755)
    r = run([os.path.join(ROOT, "tests/run"), passing], env={"TESTS_NO_PY": "1"}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed") and " passed" in last and not last.startswith("0 "), last
    # a suite that dies without a tally counts as a failure
    r = run([os.path.join(ROOT, "tests/run"), "/bin/false"], env={"TESTS_NO_PY": "1"})
    assert r.returncode == 1
    assert r.stdout.strip().splitlines()[-1] == "0 passed, 1 failed", r.stdout
