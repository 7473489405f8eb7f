"""The layout's include rules (scripts/check-includes, run by `make check`):
the real tree obeys them, and the checker itself catches a forbidden include,
a misplaced system header and an include cycle in small synthetic trees."""
import os
import subprocess
import sys

from harness import ROOT, tmpdir

CHECK = os.path.join(ROOT, "scripts", "check-includes")


def _check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=120)


def _tree(files):
    root = tmpdir()
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return root


def test_layout_tree_obeys_the_include_rules():
    r = _check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("check-includes: ok ("), r.stdout


def test_layout_checker_refuses_a_lower_layer_including_a_higher_one():
    root = _tree({
        "common/buf.h": "int buf;\n",
        "jobd/store/store.h": '#include "common/buf.h"\n#include "jobd/api/api.h"\n',
        "jobd/api/api.h": '#include "jobd/store/store.h"\n',
    })
    r = _check(root)
    assert r.returncode == 1, r.stdout
    assert 'jobd/store/store.h:2: "jobd/api/api.h": module jobd/store may not include jobd/api' in r.stdout, r.stdout
    assert "module include cycle: " in r.stdout and "file include cycle: " in r.stdout, r.stdout


def test_layout_checker_refuses_system_headers_outside_their_home():
    root = _tree({
        "jobd/api/routes.c": "#include <sqlite3.h>\n#include <uv.h>\n",
        "worker/engine/sched.h": "#include <jansson.h>\n",
        "worker/engine/sched.c": "#include <jansson.h>\n#include <cuda_runtime.h>\n",
        "jobd/store/store.c": "#include <sqlite3.h>\n",
        "jobd/http/server.c": "#include <uv.h>\n",
    })
    r = _check(root)
    assert r.returncode == 1, r.stdout
    out = r.stdout
    assert "jobd/api/routes.c:1: <sqlite3.h>: only jobd/store" in out, out
    assert "jobd/api/routes.c:2: <uv.h>: only jobd/http" in out, out
    assert "worker/engine/sched.h:1: <jansson.h>: no jansson in engine or text headers" in out, out
    assert "worker/engine/sched.c:2: <cuda_runtime.h>: only kernels/cuda" in out, out
    # allowed: jansson in an engine .c file, sqlite3.h in the store, uv.h in http
    assert "sched.c:1:" not in out and "store.c" not in out and "server.c" not in out, out
    assert out.strip().splitlines()[-1] == "check-includes: 4 problem(s)", out


def test_layout_checker_accepts_a_tree_that_follows_the_rules():
    root = _tree({
        "common/buf.h": "int buf;\n",
        "kernels/kn.h": '#include "common/buf.h"\n',
        "kernels/cpu/matq.c": '#include "kernels/kn.h"\n',
        "worker/engine/sched.h": '#include "kernels/kn.h"\n',
        "text/gen.h": '#include "common/buf.h"\n',
        "openai/params.h": '#include "text/gen.h"\n',
        "worker/serve.c": '#include "openai/params.h"\n#include "worker/engine/sched.h"\n',
        "jobd/intake/ingest.c": '#include "openai/params.h"\n',
    })
    r = _check(root)
    assert r.returncode == 0, r.stdout
    assert r.stdout.strip() == "check-includes: ok (8 files, 8 module edges)", r.stdout


def test_layout_checker_refuses_jobd_including_the_worker_or_openai_the_engine():
    root = _tree({
        "worker/engine/sched.h": "int sched;\n",
        "text/tok.h": "int tok;\n",
        "jobd/tokens/tokens.c": '#include "text/tok.h"\n#include "worker/engine/sched.h"\n',
        "openai/params.c": '#include "worker/engine/sched.h"\n',
    })
    r = _check(root)
    assert r.returncode == 1, r.stdout
    out = r.stdout
    assert 'jobd/tokens/tokens.c:2: "worker/engine/sched.h": module jobd/tokens may not include worker/engine' in out, out
    assert 'openai/params.c:1: "worker/engine/sched.h": module openai may not include worker/engine' in out, out
    assert "tokens.c:1:" not in out, out
