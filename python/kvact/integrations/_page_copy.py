"""_page_copy.py — copies between a strided view of an engine's host pool and kvact's
contiguous object, as runs of contiguous bytes moved by memmove.

A page of SGLang's host pool is a view whose elements lie in a few long runs (a
page_first page: K's run and V's; a layer_first page: one run per K or V layer). torch's
copy_ walks such a view element by element when it is not contiguous; memmove moves each
run at memory speed. The runs are found once per view geometry (Runs), then each page
is a base address plus those offsets. ctypes.memmove releases the GIL, so a batch's
runs are moved by as many threads as the machine has cores (move()): one core's memmove
does not reach the memory's bandwidth.
"""
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_memmove = ctypes.memmove
_THREADS = max(1, min(8, os.cpu_count() or 1))
_PARALLEL_BYTES = 8 << 20  # below this a batch is moved by the calling thread alone
_pool = None
_pool_lock = threading.Lock()


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="kvact-page-copy")
        return _pool


def _move_all(moves):
    for dst, src, n in moves:
        _memmove(dst, src, n)


def move(moves):
    """Does every (dst, src, nbytes) memmove of a batch, the batch split among the
    copy threads when it is large; returns when all are done (an exception of one
    is raised here)."""
    total = sum(m[2] for m in moves)
    if _THREADS == 1 or total < _PARALLEL_BYTES or len(moves) < 2:
        _move_all(moves)
        return
    parts = min(_THREADS, len(moves))
    step = (len(moves) + parts - 1) // parts
    futures = [_executor().submit(_move_all, moves[i:i + step])
               for i in range(step, len(moves), step)]
    _move_all(moves[:step])  # the caller's share
    for f in futures:
        f.result()


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

    def into_object(self, address, view, moves=None):
        """The view's bytes, in order, to the object at address: done at once, or added
        to moves (a list for move())."""
        base, run = view.data_ptr(), self.run
        batch = [(address + i * run, base + off, run) for i, off in enumerate(self.offsets)]
        if moves is None:
            _move_all(batch)
        else:
            moves.extend(batch)

    def from_object(self, address, view, moves=None):
        """The object's bytes at address into the view (at once, or added to moves)."""
        base, run = view.data_ptr(), self.run
        batch = [(base + off, address + i * run, run) for i, off in enumerate(self.offsets)]
        if moves is None:
            _move_all(batch)
        else:
            moves.extend(batch)
