"""bench_calls.py — per-call time of 64-key storage calls from Python against the same calls from C.

One rep runs the C anchor (call_anchor.c, a subprocess: the calls made
straight from C on a runtime of the same settings and the same keys), then
the same calls through kvact's Python API in this process, then the same
calls through bare ctypes with a key array built once (what the Python
API would cost if it added nothing but ctypes), and key_array() alone.
The anchor also runs with a 20 us pause after each call (c_gap_us): a
caller that does anything between calls may find the runtime's worker
asleep and pay its wake-up, from C as from Python.
None of the calls changes the storage's state, so each is repeated, and
timed (on both sides) as the median over batches of 100 calls, which a
preempted batch does not move:
  lookup<n>    sm.lookup(keys)
  prefetch<n>  sm.submit_prefetch_task(keys, layout).wait(); sm.finish_read_prefetched(keys)
  write<n>     sm.reserve_write(keys, layout, mode="all"); sm.finish_write(keys)
"""
import ctypes
import os
import statistics
import subprocess
import time

import kvact
from kvact._lib import Buf, TierHits, lib
from kvact.config import _text
from kvact.keys import key_array

SETTINGS = {"l1.size_bytes": 64 << 20, "l1.hugepages": False, "l1.pinned": False,
            "runtime.workers": 1, "l2": []}
MODEL, CHUNK_TOKENS, SHAPE = "bench", 256, (2, 2, 16, 64)
_WRITE_ALL = 2
BATCH = 100  # calls per timed batch (call_anchor.c's BATCH)
GAP_US = 20  # the C anchor's second run pauses this long after each call
_REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# call -> key arrays it builds per call (key_array() once per storage call)
KEY_ARRAYS = {"lookup": 1, "prefetch": 2, "write": 2}


def anchor_path():
    """$KVACT_CALL_ANCHOR, else the repository's bazel-bin/python/call_anchor."""
    return os.environ.get("KVACT_CALL_ANCHOR") or os.path.join(_REPO, "bazel-bin", "python",
                                                               "call_anchor")


def run_anchor(path, iters, nkeys, gap_us=0):
    """The C anchor's answer: ({"first": hex, "last": hex}, {call name: us per call})."""
    args = [path, "--iters", str(iters), "--keys", str(nkeys), "--gap-us", str(gap_us),
            "--model", MODEL,
            "--chunk-tokens", str(CHUNK_TOKENS), "--shape", ",".join(map(str, SHAPE))]
    for path_, value in SETTINGS.items():
        args += ["-o", "%s=%s" % (path_, _text(value))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    fields = [dict(f.split("=", 1) for f in line.split()) for line in out.splitlines()]
    return fields[0], {f["call"]: float(f["us_per_call"]) for f in fields[1:]}


def time_us(fn, iters):
    """Microseconds per call of fn(): the median over batches of BATCH calls (fewer when
    iters is smaller), as the C anchor times them; after one untimed call."""
    fn()
    batch = min(iters, BATCH)
    per_batch = []
    for _ in range(iters // batch):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per_batch.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median_high(per_batch)


def python_calls(sm, keys, layout):
    """The calls through kvact's Python API."""
    def prefetch():
        sm.submit_prefetch_task(keys, layout).wait()
        sm.finish_read_prefetched(keys)

    def write():
        sm.reserve_write(keys, layout, mode="all")
        sm.finish_write(keys)

    return {"lookup": lambda: sm.lookup(keys), "prefetch": prefetch, "write": write}


def ctypes_calls(sm, keys, layout):
    """The same C calls through bare ctypes, on a key array built once."""
    s, n, arr, lay = sm._ptr, len(keys), key_array(keys), layout._c
    hits, h, nhits = TierHits(), ctypes.c_void_p(), ctypes.c_size_t()
    bufs, status = (Buf * n)(), (ctypes.c_int * n)()

    def prefetch():
        lib.kva_submit_prefetch(s, arr, n, lay, 0, ctypes.byref(h))
        lib.kva_wait_prefetch(s, h, -1, ctypes.byref(nhits))
        lib.kva_finish_read_prefetched(s, arr, n, 0)

    def write():
        lib.kva_reserve_write(s, arr, n, lay, _WRITE_ALL, bufs, status)
        lib.kva_finish_write(s, arr, n, status)

    return {"lookup": lambda: lib.kva_lookup(s, arr, n, 0, ctypes.byref(hits)),
            "prefetch": prefetch, "write": write}


def bench_keys(nkeys):
    """The anchor's keys: chunk keys of the tokens 0 .. nkeys * CHUNK_TOKENS - 1."""
    return kvact.chunk_keys(MODEL, list(range(nkeys * CHUNK_TOKENS)), CHUNK_TOKENS)


def check_calls(sm, keys, layout):
    """Each Python call does what the anchor's does (all keys hit, all written)."""
    n = len(keys)
    assert sm.lookup(keys).total == n, "lookup missed"
    assert sm.submit_prefetch_task(keys, layout).wait() == n, "prefetch missed"
    assert sm.finish_read_prefetched(keys) == n, "finish_read_prefetched"
    assert len(sm.reserve_write(keys, layout, mode="all")) == n, "reserve_write(all)"
    assert sm.finish_write(keys) == [0] * n, "finish_write"


def python_rep(iters, nkeys, anchor_keys):
    """{call: {"python_us", "ctypes_us", "key_array_us"}} on a fresh runtime of SETTINGS."""
    keys = bench_keys(nkeys)
    if (keys[0].chunk_hash.hex(), keys[-1].chunk_hash.hex()) != (anchor_keys["first"],
                                                                 anchor_keys["last"]):
        raise RuntimeError("the anchor's keys are not chunk_keys' keys: %r" % (anchor_keys,))
    layout = kvact.MemoryLayoutDesc([SHAPE], ["bfloat16"])
    with kvact.Runtime(kvact.Config(SETTINGS)) as rt:
        sm = rt.storage
        sm.reserve_write(keys, layout)
        sm.finish_write(keys)
        check_calls(sm, keys, layout)
        py, raw = python_calls(sm, keys, layout), ctypes_calls(sm, keys, layout)
        key_array_us = time_us(lambda: key_array(keys), iters)
        out = {name: {"python_us": time_us(py[name], iters), "ctypes_us": time_us(raw[name], iters),
                      "key_array_us": key_array_us * KEY_ARRAYS[name]} for name in py}
        assert sm.memcheck(), sm.memcheck_report()
    return out


def rep(iters, nkeys=64):
    """One rep: the C anchor (back to back, then with GAP_US pauses), then Python.
    {call name: {"c_us", "c_gap_us", "python_us", ...}}."""
    anchor_keys, c_us = run_anchor(anchor_path(), iters, nkeys)
    _, c_gap_us = run_anchor(anchor_path(), iters, nkeys, GAP_US)
    py = python_rep(iters, nkeys, anchor_keys)
    out = {}
    for name, r in py.items():
        call = "%s%d" % (name, nkeys)
        out[call] = dict(r, c_us=c_us[call], c_gap_us=c_gap_us[call])
    return out
