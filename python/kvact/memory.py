"""memory.py — kvact.MemoryObj: one locked object's bytes in the L1 pool, as views, never copies.

Views come from the pool's own address (ctypes from_address), so writing a
view writes the pool. Once its lock is released (finish_write,
finish_read_prefetched, the end of a read_prefetched_results block, or
runtime shutdown) a MemoryObj refuses new views; a view kept from before
still points at pool memory that kvact may reuse or unmap: using it then
reads or writes someone else's object, or crashes.
"""
import ctypes

from .layout import DTYPES


class MemoryObj:
    """LMCache's MemoryObj: .key, .layout, .buffer, .array(s), .tensor(s)."""

    __slots__ = ("key", "layout", "_ptr", "_len", "_valid")

    def __init__(self, key, layout, ptr, nbytes):
        self.key, self.layout = key, layout
        self._ptr, self._len = ptr, nbytes
        self._valid = True

    @property
    def valid(self):
        return self._valid

    def _release(self):
        self._valid = False

    @property
    def address(self):
        """The address of the object's first byte in the pool (for a copy by memmove;
        the same rules as a view: not after the lock is released)."""
        if not self._valid:
            raise ValueError("MemoryObj of %r was released; it hands out no views" % (self.key,))
        return self._ptr

    @property
    def buffer(self):
        """A writable memoryview of the object's bytes (format 'B')."""
        if not self._valid:
            raise ValueError("MemoryObj of %r was released; it hands out no views" % (self.key,))
        return memoryview((ctypes.c_uint8 * self._len).from_address(self._ptr)).cast("B")

    def _spans(self):
        if self.layout is None:
            return [(0, self._len, (self._len,), "uint8")]
        return [(off, n, s, d) for (off, n), s, d in
                zip(self.layout.tensor_spans(), self.layout.shapes, self.layout.dtypes)]

    @property
    def arrays(self):
        """numpy views, one per tensor, shaped and typed by the layout (bf16/fp8 as raw bits)."""
        import numpy as np
        buf = self.buffer
        return [np.frombuffer(buf[off:off + n], dtype=DTYPES[d][2]).reshape(s)
                for off, n, s, d in self._spans()]

    @property
    def tensors(self):
        """torch views, one per tensor, shaped and typed by the layout."""
        import torch
        buf = self.buffer
        out = []
        for off, n, s, d in self._spans():
            dtype = getattr(torch, DTYPES[d][3], None)
            if dtype is None:
                raise TypeError("this torch has no %s" % DTYPES[d][3])
            t = torch.frombuffer(buf[off:off + n], dtype=dtype) if n else torch.empty(0, dtype=dtype)
            out.append(t.reshape(s))
        return out

    @property
    def array(self):
        return _only(self.arrays)

    @property
    def tensor(self):
        return _only(self.tensors)

    def __repr__(self):
        return "MemoryObj(%r, %d bytes%s)" % (self.key, self._len, "" if self._valid else ", released")


def _only(views):
    if len(views) != 1:
        raise ValueError("the layout has %d tensors: use .arrays / .tensors" % len(views))
    return views[0]
