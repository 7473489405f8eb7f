"""tests/py/crashlib.py - rebuild a data directory as a power loss could
have left it, from the log of tests/crashsim/crashsim.c (the LD_PRELOAD
shim that records every open/write/ftruncate/fsync/rename/unlink/mkdir
under jobd's --data).

The model (the one SQLite's crash-test VFS and the ALICE / CrashMonkey
studies use, strict POSIX rather than one file system's habits):

  - A file's bytes are durable up to its last fsync/fdatasync: everything
    written since (its "pending" writes and truncations) may be lost, kept,
    or torn: applied in part, at 512-byte sector granularity, in any order
    across files.
  - A name (a create, mkdir, rename or unlink) is durable once the directory
    holding the new name is fsynced; until then it may be undone. Pending
    name changes are kept as a prefix in the order they were made (a file
    system's metadata journal commits in order), durable ones always.
  - A file reachable only through a name that was undone is gone.
  - After a failed fsync (an injected EIO) the writes it should have synced
    are in limbo: no later fsync makes them durable (Linux may have dropped
    the dirty pages; PostgreSQL's fsync lesson), so a rebuild may lose them.

Rebuild variants (VARIANTS): "lose" (everything not synced is lost: the
most pessimistic), "keep" (everything is kept: what kill -9 leaves), and
"torn:SEED" (a seeded random choice per pending write: kept, dropped or
torn sector by sector; a random prefix of the pending name changes).

Usage:
    base = Baseline(data_dir)          # before the shimmed jobd starts
    ... run jobd with env(data_dir, log, cut=N) ...
    fs = replay(base, log)             # the model after the last logged call
    fs.rebuild(out_dir, "torn:7")      # a directory as the power loss left it
"""
import copy
import os
import random

SECTOR = 512
SHIM = "crashsim.so"


def shim_path(root):
    return os.path.join(root, "build", SHIM)


def env(data_dir, log, cut=0, fail=None, root=None):
    """The environment that runs a process under the shim."""
    from harness import ROOT
    e = {"LD_PRELOAD": shim_path(root or ROOT), "CRASHSIM_DIR": os.path.realpath(data_dir),
         "CRASHSIM_LOG": log}
    if cut:
        e["CRASHSIM_CUT"] = str(cut)
    if fail:
        e["CRASHSIM_FAIL"] = fail
    return e


class Inode:
    __slots__ = ("is_dir", "durable", "cur", "pending", "limbo")

    def __init__(self, is_dir, data=b""):
        self.is_dir = is_dir
        self.durable = bytes(data)      # the bytes at the last sync
        self.cur = bytearray(data)      # the bytes after every call
        self.pending = []               # ("w", off, bytes) / ("t", len) since the last sync
        self.limbo = []                 # pending when an fsync failed: never made durable


class Baseline:
    """The data directory before the shimmed process starts, taken as
    durable (it was written by processes that exited cleanly)."""

    def __init__(self, data_dir):
        self.root = Inode(True)
        self.by_ino = {os.stat(data_dir).st_ino: self.root}
        self.names = {}   # (parent Inode, name) -> Inode
        self._walk(data_dir, self.root)

    def _walk(self, path, parent):
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if name.endswith("-shm"):
                continue
            st = os.lstat(p)
            if os.path.isdir(p):
                node = Inode(True)
                self._add(parent, name, node, st.st_ino)
                self._walk(p, node)
            else:
                with open(p, "rb") as f:
                    node = Inode(False, f.read())
                self._add(parent, name, node, st.st_ino)

    def _add(self, parent, name, node, ino):
        self.names[(parent, name)] = node
        self.by_ino[ino] = node


def parse(log):
    """The records of a shim log: tuples (op, fields..., [data])."""
    with open(log, "rb") as f:
        raw = f.read()
    out = []
    i = 0
    while i < len(raw):
        j = raw.index(b"\n", i)
        fields = raw[i:j].decode().split(" ")
        i = j + 1
        if fields[0] == "W":
            n = int(fields[3])
            out.append(("W", int(fields[1]), int(fields[2]), raw[i:i + n]))
            i += n
        else:
            out.append(tuple(fields))
    return out


class Model:
    """The file system after replaying a log over a baseline."""

    def __init__(self, base):
        self.root = base.root
        self.base_names = dict(base.names)
        self.by_ino = dict(base.by_ino)
        self.path = {"": base.root}          # live view: relative path -> Inode
        for node, rel in self._paths(base):
            self.path[rel] = node
        self.meta = []                       # [durable, op tuple, dir Inode]
        self.n_sync = 0
        self.cut = None

    def _paths(self, base):
        out = []

        def walk(parent, prefix):
            for (p, name), node in base.names.items():
                if p is parent:
                    rel = prefix + name
                    out.append((node, rel))
                    if node.is_dir:
                        walk(node, rel + "/")
        walk(base.root, "")
        return out

    def _parent(self, rel):
        d, _, name = rel.rpartition("/")
        return self.path[d], name

    def apply(self, rec):
        op = rec[0]
        if op == "W":
            _, ino, off, data = rec
            node = self.by_ino[ino]
            if len(node.cur) < off:
                node.cur.extend(b"\0" * (off - len(node.cur)))
            node.cur[off:off + len(data)] = data
            node.pending.append(("w", off, data))
        elif op == "T":
            node = self.by_ino[int(rec[1])]
            n = int(rec[2])
            del node.cur[n:]
            if len(node.cur) < n:
                node.cur.extend(b"\0" * (n - len(node.cur)))
            node.pending.append(("t", n))
        elif op == "S":
            self.n_sync += 1
            node = self.by_ino[int(rec[1])]
            if node.is_dir:
                for m in self.meta:
                    if m[2] is node:
                        m[0] = True
            else:
                if node.limbo:  # what a failed fsync left in limbo stays out
                    data = bytearray(node.durable)
                    for p in node.pending:
                        _apply(data, p)
                    node.durable = bytes(data)
                else:
                    node.durable = bytes(node.cur)
                node.pending = []
        elif op in ("C", "M"):
            node = Inode(op == "M")
            self.by_ino[int(rec[1])] = node
            parent, name = self._parent(rec[2])
            self.path[rec[2]] = node
            self.meta.append([False, ("link", parent, name, node), parent])
        elif op == "R":
            src, dst = rec[2], rec[3]
            node = self.path.pop(src)
            sp, sn = self._parent(src)
            dp, dn = self._parent(dst)
            self.path[dst] = node
            self.meta.append([False, ("rename", sp, sn, dp, dn, node), dp])
        elif op in ("U", "D"):
            node = self.path.pop(rec[2])
            parent, name = self._parent(rec[2])
            self.meta.append([False, ("unlink", parent, name, node), parent])
        elif op == "X":
            self.cut = int(rec[1])
        elif op == "F" and rec[2] == "sync":
            # Linux after a failed fsync: the dirty pages may be dropped (or
            # marked clean); a later fsync does not write them
            # (PostgreSQL's fsync lesson). A failed write changes nothing.
            node = self.by_ino[int(rec[1])]
            if not node.is_dir:
                node.limbo += node.pending
                node.pending = []

    # ---- rebuild ------------------------------------------------------------

    def _content(self, node, mode, rnd):
        data = bytearray(node.durable)
        for p in node.limbo + node.pending:
            if mode == "lose":
                break
            if p[0] == "t":
                if mode == "keep" or rnd.random() < 0.5:
                    del data[p[1]:]
                    data.extend(b"\0" * max(0, p[1] - len(data)))
                continue
            _, off, chunk = p
            how = "all" if mode == "keep" else rnd.choice(("all", "none", "torn"))
            if how == "none":
                continue
            s = off
            while s < off + len(chunk):
                e = min(off + len(chunk), (s // SECTOR + 1) * SECTOR)
                if how == "all" or rnd.random() < 0.5:
                    if len(data) < s:
                        data.extend(b"\0" * (s - len(data)))
                    data[s:e] = chunk[s - off:e - off]
                s = e
        return bytes(data)

    def rebuild(self, out_dir, variant):
        """Write the directory a power cut right now could leave into out_dir
        (created; must not exist). variant: "lose", "keep" or "torn:SEED"."""
        mode, _, seed = variant.partition(":")
        rnd = random.Random(int(seed or 0))
        pending = [i for i, m in enumerate(self.meta) if not m[0]]
        keep_upto = {"lose": 0, "keep": len(pending)}.get(mode)
        if keep_upto is None:
            keep_upto = rnd.randint(0, len(pending))
        kept = set(pending[:keep_upto])
        names = dict(self.base_names)
        for i, (durable, op, _) in enumerate(self.meta):
            if not durable and i not in kept:
                continue
            if op[0] == "link":
                names[(op[1], op[2])] = op[3]
            elif op[0] == "rename":
                if names.get((op[1], op[2])) is op[5]:
                    del names[(op[1], op[2])]
                names[(op[3], op[4])] = op[5]
            elif op[0] == "unlink":
                if names.get((op[1], op[2])) is op[3]:
                    del names[(op[1], op[2])]
        children = {}
        for (parent, name), node in names.items():
            children.setdefault(parent, []).append((name, node))
        os.makedirs(out_dir)

        def write(node, path):
            for name, child in sorted(children.get(node, []), key=lambda x: x[0]):
                p = os.path.join(path, name)
                if child.is_dir:
                    os.mkdir(p, 0o700)
                    write(child, p)
                else:
                    with open(p, "wb") as f:
                        f.write(self._content(child, mode, rnd))
        write(self.root, out_dir)


def _apply(data, p):
    if p[0] == "t":
        del data[p[1]:]
        data.extend(b"\0" * max(0, p[1] - len(data)))
    else:
        _, off, chunk = p
        if len(data) < off:
            data.extend(b"\0" * (off - len(data)))
        data[off:off + len(chunk)] = chunk


def replay(base, log):
    """The Model after every record of log, applied over base."""
    m = Model(copy.deepcopy(base))
    for rec in parse(log):
        m.apply(rec)
    return m


VARIANTS = ("lose", "keep", "torn:1", "torn:2")
