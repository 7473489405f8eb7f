"""The API error table (jobd/api/api_err.h, an X-macro) against the error
table of spec/openapi.yaml: every code the server can answer from the table
is documented, with the same status; an entry whose code is null needs a
row of its status that lists null (or says when it is null)."""
import os
import re

import yaml

from harness import ROOT

ENTRY = re.compile(r'X\((\w+),\s*(\d+),\s*"([^"]+)",\s*(NULL|"[^"]*")\)')


def table_entries():
    text = open(os.path.join(ROOT, "jobd", "api", "api_err.h")).read()
    body = text[text.index("#define API_ERR_LIST"):]
    body = body[:body.index("enum api_err")]
    rows = [(m.group(1), int(m.group(2)), m.group(3), None if m.group(4) == "NULL" else m.group(4)[1:-1])
            for m in ENTRY.finditer(body)]
    assert len(rows) >= 20, rows
    return rows


def spec_codes():
    """{status: (set of codes, mentions null)} from the 'Errors used' table."""
    spec = yaml.safe_load(open(os.path.join(ROOT, "spec", "openapi.yaml")))
    desc = spec["info"]["description"]
    out = {}
    for line in desc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"\d{3}( / \d{3})*", cells[0]):
            continue
        codes = set(re.findall(r"`([a-z_]+)`", cells[2]))
        for st in cells[0].split(" / "):
            prev = out.get(int(st), (set(), False))
            out[int(st)] = (prev[0] | codes, prev[1] or "null" in cells[2])
    assert 400 in out and 500 in out, out
    return out


def test_api_error_table_documented_in_spec():
    spec = spec_codes()
    where = {}
    for st, (codes, _) in spec.items():
        for c in codes:
            where.setdefault(c, set()).add(st)
    for name, status, typ, code in table_entries():
        assert typ in ("invalid_request_error", "server_error", "insufficient_quota"), (name, typ)
        assert (status >= 500) == (typ == "server_error"), (name, status, typ)
        if code is None:
            assert status in spec and spec[status][1], f"{name}: status {status} with a null code is not documented"
        else:
            assert code in where, f"{name}: code {code} is not in spec/openapi.yaml's error table"
            assert status in where[code], f"{name}: {code} is {status} here, {sorted(where[code])} in the spec"
