"""prefetch.py — kvact.PrefetchHandle: a submitted prefetch, its result read once, its read
locks never stranded by an interrupt or a dropped handle.

kva_wait_prefetch hands the result over exactly once and frees the C
handle in the same call. How the result could be lost, and what prevents
it:

  - A signal (Ctrl-C's KeyboardInterrupt) while a call waits: the C wait
    retries EINTR, so Python could raise only once the load ended. Waits
    here are C waits of at most _SLICE_MS each; Python runs the handler
    between two, so the exception comes within a slice, the handle live.
  - A handler raising right after the C call returned, before Python
    stored its status (CPython runs signal handlers, and switches threads,
    only right after a call returns, at a function's start and on a
    backward jump). The status is never a Python return value here: each
    prefetch calls C through a function object of its own whose restype is
    its status list's append, so ctypes stores the status (and C the hits)
    inside the call. A result found there is a result read.
  - A handler raising between "handed to the caller" and the return: the
    handle marks its result handed with no call between the mark and the
    return (wait() below), so either the caller got the hits or the handle
    still owns them.

Ownership of the hits' read locks: the handle's until its result is handed
to a caller (wait, query or await returning it), the caller's from then on
(finish_read_prefetched). A handle closed before that (close(), a `with`
block left by an exception, the finalizer, which also warns) gives them
back: at once when the load has ended, else when it ends (the storage's
Reaper thread; memcheck waits for it).
"""
import ctypes
import functools
import queue
import select
import sys
import threading
import time
import warnings
from ctypes import POINTER, c_int, c_size_t, c_void_p

from . import _async
from ._lib import lib
from .errors import KvactError, check
from .keys import KEY_BYTES

_PENDING = (-4, -5)  # KVA_EAGAIN, KVA_ETIMEDOUT: still loading, the C handle kept
_ESHUTDOWN = -6
_SLICE_MS = 50       # the longest a signal waits for Python's handler in a wait()
_RESULT_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_int, POINTER(c_size_t))
_WAIT_ADDR = ctypes.cast(lib.kva_wait_prefetch, c_void_p).value  # from an address, a
# function object costs a sixth of one made from a name (no symbol lookup)


class _Prefetch:
    """One prefetch's state, shared by its handle and the storage's Reaper (which outlives
    the handle). Fields change under `lock`."""

    __slots__ = ("sm", "ptr", "keys", "readers", "status", "hits", "fn", "fd", "lock",
                 "handed", "closed", "warm")

    def __init__(self, sm, ptr, keys, readers):
        self.sm, self.ptr = sm, ptr  # ptr: the C handle, until the result is read
        self.keys, self.readers = keys, readers  # the packed kva_key[] and extra_readers
        self.status = []      # the reading call's status (ctypes appends it); [] before
        self.hits = c_size_t()
        self.fn = None        # kva_wait_prefetch, with status.append as its restype
        self.fd = None        # the C handle's eventfd, once asked for
        self.lock = threading.Lock()
        self.handed = False   # the result went to a caller (or was given back): not ours
        self.closed = False   # close() ran: no more waits; the Reaper gives back the hits
        self.warm = False     # KVA_PREFETCH_WARM: C gave the hits back with the result

    def poll(self, timeout_ms):
        """True once the result is in (then in status/hits); waits at most timeout_ms."""
        status = self.status
        if status and status[0] in _PENDING:
            del status[:]
        if not status:
            if self.sm._closed:
                raise KvactError(_ESHUTDOWN, "the runtime was closed")
            if self.fn is None:
                fn = _RESULT_FN(_WAIT_ADDR)
                # a callable restype (documented, if discouraged): ctypes calls it with
                # the int returned, inside the call, before Python can raise
                fn.restype = status.append
                self.fn = fn
            self.fn(self.sm._ptr, self.ptr, timeout_ms, self.hits)
            if status[0] in _PENDING:
                del status[:]
                return False
        self.ptr = None  # read: C freed its handle
        return True

    def eventfd(self):
        if self.fd is None:
            self.fd = check(lib.kva_prefetch_eventfd(self.ptr), "prefetch eventfd")
        return self.fd

    def give_back(self, timeout_ms=0):
        """Releases the hits of a closed handle's result that went to no caller; True when
        nothing is left to do, False while the load runs."""
        with self.lock:
            if self.handed or not self.closed or self.sm._closed:
                return True  # the caller's, or an open handle's, or shutdown freed them
            if not self.poll(timeout_ms):
                return False
            n = self.hits.value if self.status[0] == 0 and not self.warm else 0
            self.handed = True  # to no one; no call until the release below
            if n:
                check(lib.kva_finish_read_prefetched(self.sm._ptr, self.keys[:n * KEY_BYTES],
                                                     n, self.readers), "give back")
            return True


class PrefetchHandle(_async.AwaitableByFd):
    """A submitted prefetch; its result (the contiguous prefix hit count) is kept once read.

    Also a context manager (the block's end waits for the result, so the
    handle is never left behind; a block left by an exception closes it)
    and awaitable (asyncio, on its eventfd). Several threads may wait on
    it; each gets the result.
    """

    __slots__ = ("_st", "__weakref__")

    def __init__(self, sm, ptr, keys, readers):
        self._st = _Prefetch(sm, ptr, keys, readers)

    @classmethod
    def done(cls, sm, readers):
        """A prefetch of no keys: done, no hit, no C handle."""
        h = cls(sm, None, b"", readers)
        h._st.status.append(0)  # the result is in: poll() reads no C handle
        return h

    @property
    def _ptr(self):  # AwaitableByFd: None once there is no fd to wait on
        return self._st.ptr

    def wait(self, timeout=None):
        """Blocks (GIL released) until done: hits, or None after timeout seconds (the
        handle kept). A signal's handler runs within _SLICE_MS meanwhile; an exception
        it raises leaves the handle as it was."""
        st = self._st
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            ms = _SLICE_MS
            if end is not None:
                ms = min(ms, max(0, int((end - time.monotonic()) * 1000)))
            with st.lock:
                if st.closed:
                    raise ValueError("the PrefetchHandle was closed")
                done = st.poll(ms)
            if done:
                break
            if ms < _SLICE_MS:  # the last slice of a timeout
                return None
        # No call from here to the return: no signal handler and no other thread (a
        # close()) can run between the checks, the mark and the return.
        if st.closed:
            raise ValueError("the PrefetchHandle was closed")
        if st.status[0] < 0:
            st.handed = True  # nothing is locked
            raise KvactError(st.status[0], "prefetch")
        hits = st.hits.value
        st.handed = True
        return hits

    # Hits when done, None while loading: wait(0), called from C (no Python frame between
    # wait's return and the caller's).
    query = functools.partialmethod(wait, 0)

    def fileno(self):
        """An eventfd readable once done (for select/asyncio); only before the result is read."""
        st = self._st
        with st.lock:
            if st.closed:
                raise ValueError("the PrefetchHandle was closed")
            if st.ptr is None:
                raise ValueError("the prefetch's result was read; its handle is gone")
            return st.eventfd()

    def close(self):
        """Gives back the read locks of a result not handed to a caller: at once when the
        load has ended, else when it ends. Later waits and queries raise ValueError."""
        st = self._st
        with st.lock:
            if st.closed:
                return
            if st.handed or st.sm._closed:
                st.closed = True
                return
            if st.ptr is not None:
                st.eventfd()  # for the Reaper's poll, while the C handle is live
            reaper = st.sm._reaper
            # From the add on, the Reaper gives the hits back (once closed: an interrupt
            # before that leaves the handle open). No call between add, mark and wake.
            reaper.pending.add(st)
            st.closed = True
            reaper.wake.put(st)
        st.give_back()  # now, when the load has ended

    def _give_back_hits(self):
        """close(), and the hits given back even when the result was handed over: for a
        caller that read it and passed the locks on to no one (the vLLM connector's step
        that raised)."""
        st = self._st
        with st.lock:
            if not st.closed:
                st.handed = False  # handed back
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.wait()
        else:  # no wait, and no error to replace the one in flight
            self.close()

    def __del__(self, _warn=warnings.warn, _finalizing=sys.is_finalizing):
        st = self._st
        if st.handed or st.closed or _finalizing():
            return
        _warn("kvact.PrefetchHandle collected before its result was read: its read locks "
              "are given back", ResourceWarning, source=self)
        self.close()


class Reaper:
    """A storage's thread that gives back the hits of handles closed while loading."""

    def __init__(self):
        self.pending = set()              # closed _Prefetch states, until given back
        self.wake = queue.SimpleQueue()   # put() is safe from a finalizer
        self._stopping = False
        self._thread = None

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvact-reaper", daemon=True)
            self._thread.start()

    def drain(self):
        """Waits until every handle closed while loading is given back (memcheck)."""
        for st in list(self.pending):
            while not _given_back(st, _SLICE_MS):
                pass
            self.pending.discard(st)

    def stop(self):
        """Ends the thread (the runtime shuts down, which frees every lock)."""
        self._stopping = True
        if self._thread is not None:
            self.wake.put(None)
            if self._thread is not threading.current_thread():
                self._thread.join()
            self._thread = None

    def _run(self):
        while not self._stopping:
            self.wake.get()
            while self.pending and not self._stopping:
                for st in list(self.pending):
                    if _given_back(st):
                        self.pending.discard(st)
                fds = [st.fd for st in list(self.pending) if st.fd is not None]
                if fds:
                    poller = select.poll()
                    for fd in fds:
                        poller.register(fd, select.POLLIN)
                    poller.poll(_SLICE_MS)


def _given_back(st, timeout_ms=0):
    """give_back() that a release kvact refused (the runtime shutting down) does not stop:
    nothing is left to retry then."""
    try:
        return st.give_back(timeout_ms)
    except KvactError:
        return True
