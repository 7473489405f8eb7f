"""`jobd keys create|list|revoke` work directly on the database: the new key
is printed once on stdout, never stored in plaintext, listed by prefix, and
revocation shows in the list."""
import os
import re

from harness import binary, run, tmpdir


def test_keys_create_list_revoke():
    data = os.path.join(tmpdir(), "data")
    r = run([binary("jobd"), "keys", "create", "--tenant", "acme", "--data", data])
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    m = re.fullmatch(r"sk-jobd-([0-9a-z]{10})_([0-9a-z]{48})", key)
    assert m, key
    kid, secret = m.group(1), m.group(2)
    for name in os.listdir(data):  # the secret is nowhere on disk
        with open(os.path.join(data, name), "rb") as f:
            assert secret.encode() not in f.read(), name
    r = run([binary("jobd"), "keys", "list", "--data", data])
    assert r.returncode == 0, r.stderr
    row = [l for l in r.stdout.splitlines() if l.startswith(kid)]
    assert len(row) == 1 and "acme" in row[0] and row[0].rstrip().endswith("-"), r.stdout
    assert secret not in r.stdout
    r = run([binary("jobd"), "keys", "revoke", kid, "--data", data])
    assert r.returncode == 0, r.stderr
    r = run([binary("jobd"), "keys", "list", "--tenant", "acme", "--data", data])
    row = [l for l in r.stdout.splitlines() if l.startswith(kid)]
    assert not row[0].rstrip().endswith(" -"), r.stdout
    r = run([binary("jobd"), "keys", "revoke", "zzzzzzzzzz", "--data", data])
    assert r.returncode == 1 and "no key" in r.stderr, r.stderr
    r = run([binary("jobd"), "keys", "create", "--data", data])
    assert r.returncode == 2 and "--tenant" in r.stderr, r.stderr
