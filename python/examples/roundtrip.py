"""roundtrip.py [SOCKET] — kvact's Python example with numpy only: writes 8
chunks of KV, prefetches them back, checks every byte, and prints one line
per step. Embedded (this process's own L1) without SOCKET; a client of the
kvactd listening on SOCKET with it (e.g. /run/kvact/kvact.sock).

Exits 0 when every byte read back is the byte written, 1 otherwise.
"""
import sys
import time

import numpy as np

import kvact


def connected(rt, wait_s=20.0):
    """The daemon may still be starting: a client's first calls raise
    KvactError until its connection is up."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return rt.storage.stats()
        except kvact.KvactError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main(argv):
    settings = {"client.socket": argv[1]} if len(argv) > 1 else {"l1.size_bytes": 64 << 20}
    mode = "client of kvactd at %s" % argv[1] if len(argv) > 1 else "embedded"
    print("kvact %s, %s" % (kvact.__version__, mode))
    layout = kvact.MemoryLayoutDesc(shapes=[(2, 4, 256, 64)], dtypes=["float16"])
    # the salt keeps this run's chunks apart from anyone else's on the daemon
    keys = kvact.chunk_keys("example-model", list(range(8 * 256)), chunk_tokens=256,
                            salt="roundtrip-%d" % time.time_ns())
    rng = np.random.default_rng(7)
    written = [rng.standard_normal((2, 4, 256, 64)).astype(np.float16) for _ in keys]
    with kvact.Runtime(kvact.Config(settings)) as rt:
        stats = connected(rt)
        print("L1 capacity %d bytes" % stats["l1_capacity_bytes"])
        sm = rt.storage
        reserved = sm.reserve_write(keys, layout, mode="new")
        for key, data in zip(keys, written):
            reserved[key].array[...] = data
        sm.finish_write(keys)
        print("wrote %d chunks" % len(keys))
        with sm.submit_prefetch_task(keys, layout) as handle:
            hits = handle.wait(timeout=10.0)
        with sm.read_prefetched_results(keys[:hits], layout) as objs:
            same = sum(np.array_equal(o.array, w) for o, w in zip(objs, written))
        sm.finish_read_prefetched(keys[:hits])
        print("read %d chunks back, %d byte for byte equal" % (hits, same))
        ok = hits == len(keys) and same == len(keys) and sm.memcheck(callers_only=True)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
