"""The layout's rules: includes (scripts/check-includes, run by `make check`)
and calls (scripts/check-links, run by every build before a binary links).
The real tree obeys them; the checkers catch a forbidden include, a misplaced
system header, an include cycle and a wrong-way call in small synthetic
trees; and the shipped binaries carry only their own layers."""
import os
import re
import subprocess
import sys

import harness
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


def _archive(root, module, src):
    """Compile src into build/lib<module>.a under root (one object per module)."""
    d = os.path.join(root, "lib")
    os.makedirs(d, exist_ok=True)
    c = os.path.join(root, module.replace("/", "_") + ".c")
    with open(c, "w") as f:
        f.write(src)
    o = c[:-2] + ".o"
    subprocess.run(["cc", "-c", c, "-o", o], check=True)
    a = os.path.join(d, "lib" + module.replace("/", "_") + ".a")
    subprocess.run(["ar", "rcs", a, o], check=True)
    return a


def test_link_checker_refuses_a_wrong_way_call_between_archives():
    root = tmpdir()
    common = _archive(root, "common", "int buf_len(void) { return 1; }\n")
    engine = _archive(root, "worker/engine", "int buf_len(void);\nint engine_step(void) { return buf_len(); }\n")
    # text may use common and common/gram, never the engine
    text = _archive(root, "text", "int engine_step(void);\nint buf_len(void);\n"
                    "int tok_count(void) { return engine_step() + buf_len(); }\n")
    r = subprocess.run([os.path.join(ROOT, "scripts/check-links"), text, engine, common],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "libtext.a(text.o): calls engine_step, defined in worker/engine (libworker_engine.a): " \
           "text may not use worker/engine" in r.stdout, r.stdout
    assert "buf_len" not in r.stdout, r.stdout  # the right-way call is fine
    ok = subprocess.run([os.path.join(ROOT, "scripts/check-links"), engine, common],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("check-links: ok (2 archives, 1 calls"), ok.stdout


def test_built_binaries_link_only_their_layers():
    # jobctl carries no database, event loop or engine; jobd no engine or kernels
    jobctl, jobd = harness.binary("jobctl", asan=False), harness.binary("jobd", asan=False)
    if not (os.path.exists(jobctl) and os.path.exists(jobd)):
        raise harness.Skip("release binaries not built")
    need = subprocess.run(["readelf", "-d", jobctl], capture_output=True, text=True, check=True).stdout
    for lib in ("libsqlite3", "libpq", "libuv", "libpcre2"):
        assert lib not in need, need
    for path, banned in ((jobctl, ("store_open", "engine_open", "sched_new", "kn_matmul", "tok_new", "http_server")),
                         (jobd, ("engine_open", "sched_new", "kn_matmul", "model_forward"))):
        syms = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
        names = {line.split()[-1] for line in syms.splitlines() if line.strip()}
        for b in banned:
            assert not any(n == b or n.startswith(b + "_") for n in names), (path, b)


def _function_lengths(path):
    """(name, lines) of each function defined in a C file, in the tree's style:
    a body's "{" and "}" at column 0, its signature the lines above the "{"
    back to the one at column 0 that names it; counted from that line to "}"."""
    out = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{":
            s = i - 1
            while s > 0 and lines[s][:1] in (" ", "\t"):
                s -= 1
            m = re.search(r"(\w+)\s*\(", lines[s])
            e = i
            while e < len(lines) and lines[e] != "}":
                e += 1
            if m:
                out.append((m.group(1), e - s + 1))
            i = e
        i += 1
    return out


def test_jinja_functions_and_the_mains_stay_readable():
    # the Jinja interpreter: no function over 80 lines; jobd's and jobworker's main under 60
    import glob
    long = []
    for path in sorted(glob.glob(os.path.join(ROOT, "text", "jinja*.c"))):
        long += [(os.path.basename(path), n, k) for n, k in _function_lengths(path) if k > 80]
    assert not long, long
    seen = 0
    for path in ("cmd/jobd/main.c", "cmd/jobworker/main.c"):
        fns = dict(_function_lengths(os.path.join(ROOT, path)))
        assert "main" in fns and fns["main"] < 60, (path, fns.get("main"))
        seen += 1
    assert seen == 2
    # the counter itself sees a long function
    p = os.path.join(tmpdir(), "long.c")
    with open(p, "w") as f:
        f.write("static int f(void)\n{\n" + "    x++;\n" * 90 + "}\n")
    assert _function_lengths(p) == [("f", 93)]
