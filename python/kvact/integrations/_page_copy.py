"""_page_copy.py — copies between a strided view of an engine's host pool and kvact's
contiguous object, as runs of contiguous bytes moved by memmove.

A page of SGLang's host pool is a view whose elements lie in a few long runs (a
page_first page: K's run and V's; a layer_first page: one run per K or V layer). torch's
copy_ walks such a view element by element when it is not contiguous; memmove moves each
run at memory speed. The runs are found once per view geometry (Runs), then each page
is a base address plus those offsets. ctypes.memmove releases the GIL.
"""
import ctypes

_memmove = ctypes.memmove


class Runs:
    """The runs of a view's bytes, in its element order: offsets from the view's first
    element (view.data_ptr()) and the length of each run."""

    def __init__(self, view):
        es = view.element_size()
        dims = [(n, s * es) for n, s in zip(view.shape, view.stride()) if n != 1]
        run = es
        while dims and dims[-1][1] == run:  # the contiguous tail of the view
            run *= dims.pop()[0]
        offsets = [0]
        for n, step in dims:  # the axes left, outermost first: row-major order
            offsets = [o + i * step for o in offsets for i in range(n)]
        self.offsets, self.run = offsets, run
        self.nbytes = run * len(offsets)
        self.shape, self.stride = tuple(view.shape), tuple(view.stride())

    def fits(self, view):
        return tuple(view.shape) == self.shape and tuple(view.stride()) == self.stride

    def into_object(self, address, view):
        """The view's bytes, in order, to the object at address."""
        base, run = view.data_ptr(), self.run
        for i, off in enumerate(self.offsets):
            _memmove(address + i * run, base + off, run)

    def from_object(self, address, view):
        """The object's bytes at address into the view."""
        base, run = view.data_ptr(), self.run
        for i, off in enumerate(self.offsets):
            _memmove(base + off, address + i * run, run)
