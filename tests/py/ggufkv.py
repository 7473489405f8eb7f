"""tests/py/ggufkv.py - read a GGUF file's metadata and write a copy with some
keys replaced and tensors added (standard library only), e.g. a tiny fixture
model with another chat template and a scripted output head
(tests/py/thinkmodel.py).

GGUF v3 layout (worker/engine/gguf.h has the byte-offset table): magic
"GGUF", u32 version, u64 n_tensors, u64 n_kv, the KV pairs (u64-length
string key, u32 type, value), the tensor infos (name, u32 n_dims, u64 dims,
u32 type, u64 offset), padding to general.alignment (default 32), then the
tensor data, whose offsets are relative to its start. A copy re-aligns the
data section after the new header and keeps the tensor offsets as they are.
"""
import math
import struct

# value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.o:self.o + n]
        self.o += n
        return s.decode("utf-8")

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("I"), self.take("Q")
            return (et, [self.value(et) for _ in range(n)])
        raise ValueError(f"gguf: unknown value type {t} at byte {self.o}")


def put_string(out, s):
    b = s.encode("utf-8")
    out += struct.pack("<Q", len(b)) + b


def put_value(out, t, v):
    if t in SCALAR:
        out += struct.pack("<" + SCALAR[t], v)
    elif t == STRING:
        put_string(out, v)
    else:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            put_value(out, et, x)


def read(path):
    """(kv: {key: (type, value)}, tensor infos as raw bytes, data bytes, alignment)."""
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.take("4s") == b"GGUF", path
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    assert version == 3, version
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        t = r.take("I")
        kv[k] = (t, r.value(t))
    start = r.o
    for _ in range(n_tensors):
        r.string()
        nd = r.take("I")
        r.o += 8 * nd + 4 + 8
    infos = data[start:r.o]
    align = kv.get("general.alignment", (4, 32))[1]
    data_at = (r.o + align - 1) // align * align
    return kv, n_tensors, infos, data[data_at:], align


def tensor_index(path):
    """{name: (dims, type, offset into the data section)} of a GGUF file."""
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.take("4s") == b"GGUF", path
    _, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    for _ in range(n_kv):
        r.string()
        r.value(r.take("I"))
    out = {}
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        out[name] = (dims, r.take("I"), r.take("Q"))
    return out


def rewrite(src, dst, strings=None, u32s=None, add_f32=None):
    """Copy src to dst with the string keys in strings and the u32 keys in
    u32s set (added when absent), and the F32 tensors of add_f32 ({name:
    (dims, bytes)}, dims as GGUF writes them: fastest first) appended."""
    kv, n_tensors, infos, tensors, align = read(src)
    for k, v in (strings or {}).items():
        kv[k] = (STRING, v)
    for k, v in (u32s or {}).items():
        kv[k] = (4, v)
    infos, tensors = bytearray(infos), bytearray(tensors)
    for name, (dims, data) in (add_f32 or {}).items():
        assert len(data) == 4 * math.prod(dims), name
        tensors += b"\0" * ((-len(tensors)) % align)
        put_string(infos, name)
        infos += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", 0, len(tensors))
        tensors += data
        n_tensors += 1
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kv)))
    for k, (t, v) in kv.items():
        put_string(out, k)
        out += struct.pack("<I", t)
        put_value(out, t, v)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    out += tensors
    with open(dst, "wb") as f:
        f.write(out)
