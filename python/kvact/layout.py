"""layout.py — kvact.MemoryLayoutDesc: shapes and dtype names of one object, as a kva_layout."""
from ._lib import Layout, lib

# dtype name -> (kva_dtype, itemsize, numpy dtype name, torch dtype name).
# numpy has no bfloat16 or fp8: .array shows their bits as uint16 / uint8.
DTYPES = {
    "uint8": (0, 1, "uint8", "uint8"),
    "float16": (1, 2, "float16", "float16"),
    "bfloat16": (2, 2, "uint16", "bfloat16"),
    "float32": (3, 4, "float32", "float32"),
    "float8_e4m3fn": (4, 1, "uint8", "float8_e4m3fn"),
    "float8_e5m2": (5, 1, "uint8", "float8_e5m2"),
}
_ALIGN = 64  # each tensor of an object starts on a 64-byte boundary (kvact.h)
_NAMES = {v[0]: name for name, v in DTYPES.items()}  # kva_dtype -> dtype name
_BY_C = {}        # a kva_layout's bytes -> its MemoryLayoutDesc (reads name few layouts)
_BY_C_MAX = 1024  # then forgotten all at once


class MemoryLayoutDesc:
    """LMCache's MemoryLayoutDesc: 1..4 tensors, each of 0..6 dimensions."""

    def __init__(self, shapes, dtypes):
        shapes = [tuple(int(d) for d in s) for s in shapes]
        dtypes = [str(d).replace("torch.", "") for d in dtypes]
        if not 1 <= len(shapes) <= 4 or len(shapes) != len(dtypes):
            raise ValueError("1..4 shapes and as many dtypes")
        for s, d in zip(shapes, dtypes):
            if len(s) > 6 or any(x < 0 or x >= 1 << 64 for x in s):
                raise ValueError("shape %r: at most 6 dimensions, each 0..2^64-1" % (s,))
            if d not in DTYPES:
                raise ValueError("dtype %r is not one of %s" % (d, ", ".join(DTYPES)))
        self.shapes, self.dtypes = shapes, dtypes
        self._c = self._to_c()
        self.nbytes = lib.kva_layout_bytes(self._c)
        if self.nbytes == 0:
            raise ValueError("layout %r: invalid or its size overflows" % (shapes,))

    def _to_c(self):
        c = Layout()
        c.ntensors = len(self.shapes)
        for t, (s, d) in enumerate(zip(self.shapes, self.dtypes)):
            c.tensor[t].ndim = len(s)
            c.tensor[t].shape[:len(s)] = s
            c.tensor[t].dtype = DTYPES[d][0]
        return c

    @classmethod
    def _from_c(cls, c):
        """The MemoryLayoutDesc of a kva_layout kvact gave back (a read's)."""
        tensors = c.tensor[:c.ntensors]
        return cls([tuple(t.shape[:t.ndim]) for t in tensors], [_NAMES[t.dtype] for t in tensors])

    def tensor_spans(self):
        """(offset, nbytes) of each tensor inside an object of this layout."""
        spans, off = [], 0
        for s, d in zip(self.shapes, self.dtypes):
            n = DTYPES[d][1]
            for x in s:
                n *= x
            spans.append((off, n))
            off = (off + n + _ALIGN - 1) // _ALIGN * _ALIGN
        return spans

    def __repr__(self):
        return "MemoryLayoutDesc(shapes=%r, dtypes=%r)" % (self.shapes, self.dtypes)


def layout_of_c(raw):
    """The MemoryLayoutDesc of a kva_layout's raw bytes, made once per layout."""
    desc = _BY_C.get(raw)
    if desc is None:
        if len(_BY_C) >= _BY_C_MAX:
            _BY_C.clear()
        desc = _BY_C[raw] = MemoryLayoutDesc._from_c(Layout.from_buffer_copy(raw))
    return desc
