#!/usr/bin/env python3
"""tests/py/runner.py - run the Python test suites the way tests/th.c runs C tests.

Every function named test_* in tests/py/test_*.py runs in its own
subprocess with a timeout (TH_TIMEOUT, default 300 s; a module may raise it
for its own tests with a module-level TIMEOUT = seconds). Output: one line per
test ("ok NAME", "FAIL NAME: reason", "skip NAME: reason"), then
"# tally PASSED FAILED SKIPPED" for tests/run to fold into the summary line.
A passing test's own lines starting with "note: " are shown under its ok
line (counts a suite reports, what a harness caught); everything else it
printed is shown only when it fails.
A test skips by raising harness.Skip. An optional argument filters test names.
"""
import importlib.util
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP_CODE = 77


def discover():
    for fname in sorted(os.listdir(HERE)):
        if fname.startswith("test_") and fname.endswith(".py"):
            path = os.path.join(HERE, fname)
            spec = importlib.util.spec_from_file_location(fname[:-3], path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            for name in sorted(vars(mod)):
                if name.startswith("test_") and callable(getattr(mod, name)):
                    yield fname[:-3], name, getattr(mod, "TIMEOUT", None)


def run_child(module, func):
    """Entry point inside the child process."""
    sys.path.insert(0, HERE)
    import harness
    spec = importlib.util.spec_from_file_location(module, os.path.join(HERE, module + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        getattr(mod, func)()
    except harness.Skip as e:
        print(f"skip {module}.{func}: {e}", flush=True)
        sys.exit(SKIP_CODE)
    finally:
        harness.cleanup()


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        module, func = sys.argv[2].split(".", 1)
        run_child(module, func)
        return 0
    filt = sys.argv[1] if len(sys.argv) > 1 else None
    timeout = int(os.environ.get("TH_TIMEOUT", "300"))
    passed = failed = skipped = 0
    for module, func, mod_timeout in discover():
        name = f"{module}.{func}"
        if filt and filt not in name:
            continue
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, __file__, "--child", name],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=max(timeout, mod_timeout or 0), text=True, start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"FAIL {name}: timed out after {timeout} s", flush=True)
            failed += 1
            continue
        if p.returncode == 0:
            print(f"ok {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            for l in p.stdout.splitlines():
                if l.startswith("note: "):
                    print(f"  {l[:400]}", flush=True)
            passed += 1
        elif p.returncode == SKIP_CODE:
            print(p.stdout.strip().splitlines()[-1], flush=True)
            skipped += 1
        else:
            lines = [l for l in p.stdout.strip().splitlines() if l.strip()]
            # the exception line of the traceback, else the last line
            exc = [l for l in lines if l.split(":")[0].endswith(("Error", "Exception"))]
            reason = (exc[-1] if exc else lines[-1] if lines else f"exit status {p.returncode}")
            reason = reason.replace("\n", " ")[:400]
            print(f"FAIL {name}: {reason}", flush=True)
            if os.environ.get("TH_VERBOSE"):
                print(p.stdout)
            else:
                # the end of what the test printed, so a failure seen only in
                # CI can be diagnosed from its log
                for l in lines[-40:]:
                    print(f"  | {l[:300]}", flush=True)
            failed += 1
    print(f"# tally {passed} {failed} {skipped}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
